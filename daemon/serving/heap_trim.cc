#include "daemon/serving/heap_trim.h"

#include <malloc.h>

#include <algorithm>

#include "engine/base/logging.h"

namespace minfer::daemon {
namespace {

// How often the thread looks whether the watched objects are gone (their
// last owners do not tell it).
constexpr auto kPoll = std::chrono::milliseconds(20);

}  // namespace

HeapTrimmer::HeapTrimmer(std::chrono::milliseconds max_wait)
    : max_wait_(max_wait), thread_([this] { Loop(); }) {}

HeapTrimmer::~HeapTrimmer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void HeapTrimmer::Watch(std::weak_ptr<const void> freed) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pending_.empty()) first_watch_ = std::chrono::steady_clock::now();
    pending_.push_back(std::move(freed));
  }
  cv_.notify_all();
}

uint64_t HeapTrimmer::trims() const {
  std::lock_guard<std::mutex> lock(mu_);
  return trims_;
}

void HeapTrimmer::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
    if (stop_) return;
    const auto give_up = first_watch_ + max_wait_;
    while (!stop_ && std::chrono::steady_clock::now() < give_up &&
           std::any_of(pending_.begin(), pending_.end(),
                       [](const std::weak_ptr<const void>& p) { return !p.expired(); })) {
      cv_.wait_for(lock, kPoll);
    }
    if (stop_) return;
    pending_.clear();
    lock.unlock();
    const auto t0 = std::chrono::steady_clock::now();
    const int released = malloc_trim(0);
    Logger("daemon")->debug(
        "malloc_trim: {} in {:.1f} ms", released ? "memory returned" : "nothing to return",
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    lock.lock();
    ++trims_;
  }
}

}  // namespace minfer::daemon
