// Cost of one ParallelFor with trivial tasks: the fixed overhead a CPU-backend
// node pays for going parallel (wake the workers, claim tasks, wait for all).
// "back_to_back" dispatches continuously (decode: ~300 nodes per token);
// "after_gap" leaves the pool idle for a while first (workers have gone to
// sleep: the first node after a pause).
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "engine/base/thread_pool.h"

namespace minfer {
namespace {

void BM_BackToBack(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  std::atomic<int64_t> sink{0};
  for (auto _ : state) {
    pool.ParallelFor(pool.num_threads(), [&](int64_t t, int) {
      sink.fetch_add(t, std::memory_order_relaxed);
    });
  }
}
BENCHMARK(BM_BackToBack)->Name("back_to_back")->Arg(2)->Arg(4)->UseRealTime();

void BM_AfterGap(benchmark::State& state) {
  ThreadPool pool(2);
  std::atomic<int64_t> sink{0};
  for (auto _ : state) {
    state.PauseTiming();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    state.ResumeTiming();
    pool.ParallelFor(2, [&](int64_t t, int) { sink.fetch_add(t, std::memory_order_relaxed); });
  }
}
BENCHMARK(BM_AfterGap)->Name("after_gap")->UseRealTime()->Iterations(200);

}  // namespace
}  // namespace minfer

BENCHMARK_MAIN();
