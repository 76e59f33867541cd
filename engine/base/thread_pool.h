// A fixed-size pool of worker threads for data-parallel loops.
//
// ParallelFor splits [0, n) into tasks that the workers and the calling
// thread claim from an atomic counter; it returns when all are done. Only one
// ParallelFor runs on a pool at a time (calls from several threads are
// serialized). Designed for the CPU backend's per-node parallelism: a
// dispatch costs a few microseconds, so tasks should be at least that big.
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
  // `num_threads` counts the caller: 1 means no worker threads at all.
  // 0 means one per online CPU.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(task, thread_index) for every task in [0, num_tasks).
  // thread_index is in [0, num_threads()) and identifies per-thread scratch.
  void ParallelFor(int64_t num_tasks, const std::function<void(int64_t, int)>& fn);

  // Runs fn(begin, end) over contiguous ranges covering [0, n), at most one
  // range per thread, each at least `grain` long (except possibly the last).
  void ParallelRange(int64_t n, int64_t grain,
                     const std::function<void(int64_t, int64_t)>& fn);

 private:
  void WorkerLoop(int index);
  void RunTasks(int thread_index);

  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // serializes ParallelFor callers

  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_cv_;
  uint64_t job_gen_ = 0;  // guarded by mu_
  bool stop_ = false;     // guarded by mu_

  const std::function<void(int64_t, int)>* fn_ = nullptr;
  int64_t num_tasks_ = 0;
  std::atomic<int64_t> next_task_{0};
  std::atomic<int> active_{0};
};

// The process-wide pool used by the CPU backend (MINFER_THREADS knob).
ThreadPool& DefaultThreadPool();

}  // namespace minfer

#endif  // MINFER_ENGINE_BASE_THREAD_POOL_H_
