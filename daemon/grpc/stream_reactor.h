// PullStreamReactor: a server-streaming callback reactor that pulls its
// messages from a producer on another thread.
//
// The producer (a slot worker, a loading slot) never writes to the stream:
// it calls Pump() to say that something new may be available, and the
// reactor, when no write is outstanding, asks Next() for one message (which
// may merge everything pending) and writes it. So a slow client costs the
// producer nothing: its output just accumulates into the next message.
//
// Cancellation (client gone, deadline, a failed write) ends the stream at
// once with CANCELLED and calls OnCancelled() so the subclass can stop its
// producer. Every stream is finished exactly once (gRPC requires it), and
// the reactor deletes itself in OnDone after Cleanup().
//
// Thread-safe: Pump() may be called from any thread at any time before
// Cleanup() returns; the subclass must make sure no Pump() can start after
// Cleanup() (e.g. by unsubscribing there).
#ifndef MINFER_DAEMON_GRPC_STREAM_REACTOR_H_
#define MINFER_DAEMON_GRPC_STREAM_REACTOR_H_

#include <mutex>
#include <optional>

#include "grpcpp/grpcpp.h"
#include "grpcpp/support/server_callback.h"

namespace minfer::daemon {

template <typename Response>
class PullStreamReactor : public grpc::ServerWriteReactor<Response> {
 public:
  // Ends the stream with `status` unless it has ended already.
  void FinishWith(const grpc::Status& status) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_ || writing_) {
        // A write in flight: end after it completes.
        if (!finished_) pending_final_ = status;
        return;
      }
      finished_ = true;
      final_status_ = status;
    }
    this->Finish(status);
  }

  // Writes the next message, if any and if no write is outstanding.
  void Pump() {
    std::unique_lock<std::mutex> lock(mu_);
    if (writing_ || finished_) return;
    std::optional<grpc::Status> final;
    bool have = false;
    if (cancelled_) {
      final = grpc::Status(grpc::StatusCode::CANCELLED, "the call was cancelled");
    } else if (pending_final_) {
      final = *pending_final_;
    } else {
      msg_.Clear();
      have = Next(&msg_, &final);
    }
    if (have) writing_ = true;
    if (final) {
      finished_ = true;
      final_status_ = *final;
    }
    lock.unlock();
    // No member is touched after these calls: OnDone (which deletes this)
    // may run as soon as the stream is finished.
    if (have && final) {
      this->StartWriteAndFinish(&msg_, grpc::WriteOptions(), *final);
    } else if (have) {
      this->StartWrite(&msg_);
    } else if (final) {
      this->Finish(*final);
    }
  }

 protected:
  // Called under the reactor's lock. Fills *msg and returns true if there is
  // a message to send; sets *final when the stream ends (after *msg, if
  // any). Must not block or call Pump().
  virtual bool Next(Response* msg, std::optional<grpc::Status>* final) = 0;
  // The call was cancelled or a write failed: stop producing.
  virtual void OnCancelled() {}
  // Runs once in OnDone, before deletion, with the status the stream ended
  // with.
  virtual void Cleanup(const grpc::Status& final) {}

  void OnWriteDone(bool ok) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      if (!ok) cancelled_ = true;
    }
    if (!ok) OnCancelled();
    Pump();
  }

  void OnCancel() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
    }
    OnCancelled();
    Pump();
  }

  void OnDone() override {
    Cleanup(final_status_);
    delete this;
  }

 private:
  std::mutex mu_;
  Response msg_;
  bool writing_ = false;
  bool finished_ = false;
  bool cancelled_ = false;
  std::optional<grpc::Status> pending_final_;
  grpc::Status final_status_;
};

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_GRPC_STREAM_REACTOR_H_
