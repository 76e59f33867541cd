// A fixed-size pool of worker threads for data-parallel loops.
//
// ParallelFor splits [0, n) into tasks that the workers and the calling
// thread claim from an atomic counter; it returns when all are done. Only one
// ParallelFor runs on a pool at a time (calls from several threads are
// serialized). Designed for the CPU backend's per-node parallelism, where a
// decode step dispatches a hundred-odd small nodes back to back:
//   * Workers poll (with pause) for `spin_us` after finishing a job before
//     they block on a condition variable, so a dispatch that follows within
//     that window costs a cache-line handoff (~1 us) instead of a futex
//     wake-up (5-40 us, far more on a loaded machine). The caller polls the
//     same way for joined workers to finish. When a polling thread finds it
//     was descheduled mid-poll (the machine has more runnable threads than
//     cores), the pool yields the CPU between polls for the next 50 ms:
//     plain polling there takes CPU from runnable threads, ours included.
//   * A job only waits for the workers that joined it. A worker that is
//     asleep or descheduled when the caller has already run out of tasks
//     does not hold the call up; it skips the job.
// So tasks should still be at least a few microseconds of work; callers
// keep tiny ops inline.
#ifndef MINFER_ENGINE_BASE_THREAD_POOL_H_
#define MINFER_ENGINE_BASE_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace minfer {

class ThreadPool {
 public:
  // Microseconds an idle worker keeps polling for the next job by default.
  static constexpr int kDefaultSpinUs = 200;

  // `num_threads` counts the caller: 1 means no worker threads at all.
  // 0 means one per online CPU. `spin_us` = 0 makes idle workers block at
  // once (no polling).
  explicit ThreadPool(int num_threads, int spin_us = kDefaultSpinUs);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(task, thread_index) for every task in [0, num_tasks).
  // thread_index is in [0, num_threads()) and identifies per-thread scratch
  // (the caller is 0).
  void ParallelFor(int64_t num_tasks, const std::function<void(int64_t, int)>& fn);

  // Runs fn(begin, end) over contiguous ranges covering [0, n), at most one
  // range per thread, each at least `grain` long (except possibly the last).
  void ParallelRange(int64_t n, int64_t grain,
                     const std::function<void(int64_t, int64_t)>& fn);

 private:
  // job_state_ layout: job generation in the high 32 bits, kClosed, and the
  // number of workers that joined the job in the low bits.
  static constexpr uint64_t kClosed = uint64_t{1} << 31;
  static constexpr uint64_t kJoinedMask = kClosed - 1;

  void WorkerLoop(int index);
  void RunTasks(int thread_index);
  // A gap this long between two clock reads of a poll loop (which reads the
  // clock every few microseconds) means the thread was descheduled.
  static constexpr int64_t kPreemptedGapNs = 50'000;
  static constexpr int64_t kContendedBackoffNs = 50'000'000;

  static int64_t NowNs();
  // Polls until done() (true) or spin_us passed (false); yields between
  // polls while the pool is in its contended period.
  template <typename Done>
  bool SpinUntil(const Done& done) const;

  std::vector<std::thread> workers_;
  const int spin_us_;
  std::mutex call_mu_;  // serializes ParallelFor callers

  std::mutex mu_;  // only for the condition variables
  std::condition_variable wake_;
  std::condition_variable done_cv_;
  std::atomic<bool> stop_{false};
  std::atomic<int> sleepers_{0};             // workers blocked (or blocking) on wake_
  std::atomic<bool> caller_sleeping_{false};  // caller blocked on done_cv_
  // Steady-clock time (ns) until which polls yield; see SpinUntil.
  mutable std::atomic<int64_t> contended_until_ns_{0};

  std::atomic<uint64_t> job_state_{0};
  const std::function<void(int64_t, int)>* fn_ = nullptr;  // set before the job is published
  int64_t num_tasks_ = 0;
  std::atomic<int64_t> next_task_{0};
  std::atomic<int> finished_{0};  // joined workers done with the current job
};

// The process-wide pool used by the CPU backend (MINFER_THREADS and
// MINFER_POOL_SPIN_US knobs).
ThreadPool& DefaultThreadPool();

}  // namespace minfer

#endif  // MINFER_ENGINE_BASE_THREAD_POOL_H_
