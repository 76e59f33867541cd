#include "engine/base/thread_pool.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace minfer {
namespace {

TEST(ThreadPoolTest, EveryTaskRunsExactlyOnce) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 7, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      std::atomic<int> bad_index{0};
      pool.ParallelFor(n, [&](int64_t t, int ti) {
        hits[t].fetch_add(1);
        if (ti < 0 || ti >= threads) bad_index.fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
      EXPECT_EQ(bad_index.load(), 0);
    }
  }
}

TEST(ThreadPoolTest, RangesCoverExactly) {
  ThreadPool pool(3);
  for (int64_t n : {1, 5, 64, 1001}) {
    std::vector<int> cover(n, 0);
    std::mutex mu;
    pool.ParallelRange(n, 16, [&](int64_t b, int64_t e) {
      std::lock_guard<std::mutex> l(mu);
      for (int64_t i = b; i < e; ++i) cover[i]++;
    });
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(cover[i], 1);
  }
}

TEST(ThreadPoolTest, ManySmallDispatches) {
  ThreadPool pool(4);
  int64_t total = 0;
  for (int rep = 0; rep < 2000; ++rep) {
    std::atomic<int64_t> sum{0};
    pool.ParallelFor(8, [&](int64_t t, int) { sum.fetch_add(t); });
    total += sum.load();
  }
  EXPECT_EQ(total, 2000 * 28);
}

// Spinning and sleeping workers, jobs that workers join late or skip
// entirely: every task still runs exactly once, with valid thread indices,
// and ParallelFor never returns while a task is still running.
TEST(ThreadPoolTest, SpinSettingsAndLateWorkers) {
  for (int spin_us : {0, 1, 200}) {
    for (int threads : {2, 3}) {
      ThreadPool pool(threads, spin_us);
      for (int rep = 0; rep < 300; ++rep) {
        const int64_t n = 1 + rep % 13;
        std::vector<std::atomic<int>> hits(n);
        std::atomic<int> running{0}, bad{0};
        pool.ParallelFor(n, [&](int64_t t, int ti) {
          running.fetch_add(1);
          if (ti < 0 || ti >= threads) bad.fetch_add(1);
          if (rep % 50 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
          hits[t].fetch_add(1);
          running.fetch_sub(1);
        });
        EXPECT_EQ(running.load(), 0) << "returned with a task in flight";
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << spin_us << " " << rep;
        EXPECT_EQ(bad.load(), 0);
        // Let spinning workers time out and sleep now and then.
        if (rep % 97 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  }
}

// Workers really take part: with tasks that each wait until two distinct
// threads have started one, a pool of 2 must finish (the caller alone would
// wait forever; the timeout turns that into a failure instead of a hang).
TEST(ThreadPoolTest, WorkersJoinLongJobs) {
  ThreadPool pool(2, 0);
  std::atomic<int> started{0};
  std::atomic<bool> ok{true};
  pool.ParallelFor(2, [&](int64_t, int) {
    started.fetch_add(1);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (started.load() < 2) {
      if (std::chrono::steady_clock::now() > deadline) {
        ok = false;
        return;
      }
    }
  });
  EXPECT_TRUE(ok.load());
}

}  // namespace
}  // namespace minfer
