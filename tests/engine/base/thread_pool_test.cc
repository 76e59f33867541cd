#include "engine/base/thread_pool.h"

#include <atomic>
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

}  // namespace
}  // namespace minfer
