#include "engine/base/thread_pool.h"

#include <algorithm>

#include "engine/base/cpu_features.h"
#include "engine/base/knobs.h"

namespace minfer {

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = NumCpus();
  for (int i = 1; i < num_threads; ++i) {
    workers_.emplace_back([this, i] { WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunTasks(int thread_index) {
  for (;;) {
    int64_t t = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (t >= num_tasks_) break;
    (*fn_)(t, thread_index);
  }
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || job_gen_ != seen; });
      if (stop_) return;
      seen = job_gen_;
    }
    RunTasks(index);
    if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      done_cv_.notify_all();
    }
  }
}

void ThreadPool::ParallelFor(int64_t num_tasks, const std::function<void(int64_t, int)>& fn) {
  if (num_tasks <= 0) return;
  if (workers_.empty() || num_tasks == 1) {
    for (int64_t t = 0; t < num_tasks; ++t) fn(t, 0);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    num_tasks_ = num_tasks;
    next_task_.store(0, std::memory_order_relaxed);
    active_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    ++job_gen_;
  }
  wake_.notify_all();
  RunTasks(0);
  // Every worker must check in before fn_ can be retargeted by the next call.
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return active_.load(std::memory_order_acquire) == 0; });
  fn_ = nullptr;
}

void ThreadPool::ParallelRange(int64_t n, int64_t grain,
                               const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int64_t chunks = std::min<int64_t>(num_threads(), (n + grain - 1) / grain);
  int64_t per = (n + chunks - 1) / chunks;
  ParallelFor(chunks, [&](int64_t c, int) {
    int64_t b = c * per;
    int64_t e = std::min(n, b + per);
    if (b < e) fn(b, e);
  });
}

ThreadPool& DefaultThreadPool() {
  static ThreadPool* pool =
      new ThreadPool(static_cast<int>(KnobRegistry::Global().GetInt("MINFER_THREADS")));
  return *pool;
}

}  // namespace minfer
