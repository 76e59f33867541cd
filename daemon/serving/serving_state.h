// ServingState: what the gRPC services share with the daemon's shutdown
// path: whether the server is draining (new generations and loads are
// refused with UNAVAILABLE) and how many Generate streams are open, so the
// drain can wait for them.
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
};

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_SERVING_SERVING_STATE_H_
