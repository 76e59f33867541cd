// ServingState: what the gRPC services share with the daemon's shutdown
// path: whether the server is draining (new generations and loads are
// refused with UNAVAILABLE), how many Generate streams are open, so the
// drain can wait for them, and how many streaming reactors are alive, so
// the daemon frees nothing they use before the last is gone.
//
// Thread-safe.
#ifndef MINFER_DAEMON_SERVING_SERVING_STATE_H_
#define MINFER_DAEMON_SERVING_SERVING_STATE_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace minfer::daemon {

class ServingState {
 public:
  bool draining() const {
    std::lock_guard<std::mutex> lock(mu_);
    return draining_;
  }
  void SetDraining() {
    std::lock_guard<std::mutex> lock(mu_);
    draining_ = true;
  }

  void StreamStarted() {
    std::lock_guard<std::mutex> lock(mu_);
    ++streams_;
  }
  void StreamEnded() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      --streams_;
    }
    cv_.notify_all();
  }
  int64_t streams() const {
    std::lock_guard<std::mutex> lock(mu_);
    return streams_;
  }

  // A streaming reactor's lifetime (Generate, LoadModel): gRPC runs a
  // finished stream's OnDone, whose cleanup records metrics and leaves the
  // slot's notifiers, on its own threads, and may do so after
  // Server::Wait returned. The daemon waits for these to reach zero before
  // it frees the metrics and the slots. A reactor holds a Guard as its
  // first member, so the count drops only after the rest of it is gone.
  class Guard {
   public:
    explicit Guard(ServingState* s) : s_(s) {
      std::lock_guard<std::mutex> lock(s_->mu_);
      ++s_->reactors_;
    }
    ~Guard() {
      {
        std::lock_guard<std::mutex> lock(s_->mu_);
        --s_->reactors_;
      }
      s_->cv_.notify_all();
    }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    ServingState* const s_;
  };
  // Waits until no reactor is alive; false if `deadline` came first.
  bool WaitForReactors(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_until(lock, deadline, [&] { return reactors_ == 0; });
  }
  // Waits until no stream is open; false if `deadline` came first.
  bool WaitForStreams(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_until(lock, deadline, [&] { return streams_ == 0; });
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool draining_ = false;  // guarded by mu_
  int64_t streams_ = 0;    // guarded by mu_
  int64_t reactors_ = 0;   // guarded by mu_
};

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_SERVING_SERVING_STATE_H_
