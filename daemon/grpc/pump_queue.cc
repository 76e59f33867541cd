#include "daemon/grpc/pump_queue.h"

#include <algorithm>

namespace minfer::daemon {

PumpQueue::PumpQueue() : thread_([this] { Run(); }) {}

PumpQueue::~PumpQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    queue_.clear();
    pending_.clear();
  }
  cv_.notify_all();
  thread_.join();
}

void PumpQueue::Post(const void* key, std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || !pending_.insert(key).second) return;
    queue_.emplace_back(key, std::move(fn));
  }
  cv_.notify_one();
}

void PumpQueue::Remove(const void* key) {
  std::unique_lock<std::mutex> lock(mu_);
  if (pending_.erase(key) > 0) {
    queue_.erase(std::remove_if(queue_.begin(), queue_.end(),
                                [key](const auto& e) { return e.first == key; }),
                 queue_.end());
  }
  if (std::this_thread::get_id() == thread_.get_id()) return;
  idle_cv_.wait(lock, [&] { return running_ != key; });
}

size_t PumpQueue::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

void PumpQueue::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    auto [key, fn] = std::move(queue_.front());
    queue_.pop_front();
    // Not pending any more: a post from now on (new output published
    // while this one runs) queues another run.
    pending_.erase(key);
    running_ = key;
    lock.unlock();
    fn();
    lock.lock();
    running_ = nullptr;
    idle_cv_.notify_all();
  }
}

}  // namespace minfer::daemon
