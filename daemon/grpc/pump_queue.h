// PumpQueue: a thread that runs the stream reactors' Pump() on behalf of
// producers that must not pay for it.
//
// A slot's worker publishes each decoded token and used to call the
// reactor's Pump() itself; Pump() may start a gRPC write, which gRPC can
// carry out inline (serialization, HTTP/2 framing, a sendmsg) — tens of
// microseconds per token on the decode loop's critical path, ~6% of a
// 1,000 tok/s model's step. With the queue the worker only enqueues (a lock
// and a notify) and the write happens here, overlapped with the next step.
//
// Posts are keyed: while a key is pending, another Post for it is merged
// into the pending one (one Pump() sends everything published so far).
//
// Thread-safe. The destructor drops what is pending and joins the thread.
#ifndef MINFER_DAEMON_GRPC_PUMP_QUEUE_H_
#define MINFER_DAEMON_GRPC_PUMP_QUEUE_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <utility>

namespace minfer::daemon {

class PumpQueue {
 public:
  PumpQueue();
  ~PumpQueue();
  PumpQueue(const PumpQueue&) = delete;
  PumpQueue& operator=(const PumpQueue&) = delete;

  // Runs `fn` once on the queue's thread, unless `key` is already pending
  // (then this post is merged into that one and `fn` is dropped).
  void Post(const void* key, std::function<void()> fn);

  // After Remove returns, nothing posted for `key` is pending or running —
  // except when called from the queue's own thread by the function running
  // for `key`, which is not waited for (it would wait for itself).
  void Remove(const void* key);

  // Posts not yet started (tests).
  size_t pending() const;

 private:
  void Run();

  mutable std::mutex mu_;
  std::condition_variable cv_;       // work arrived, or stopping
  std::condition_variable idle_cv_;  // the running function returned
  std::deque<std::pair<const void*, std::function<void()>>> queue_;
  std::unordered_set<const void*> pending_;
  const void* running_ = nullptr;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_GRPC_PUMP_QUEUE_H_
