// HeapTrimmer trims once what it watches is gone, not before; and gives up
// waiting after max_wait.
#include "daemon/serving/heap_trim.h"

#include <chrono>
#include <memory>
#include <thread>

#include "gtest/gtest.h"
#include "tests/daemon/test_util.h"

namespace minfer::daemon {
namespace {

using testing::WaitFor;

TEST(HeapTrimmerTest, TrimsOnceTheWatchedObjectsAreDestroyed) {
  HeapTrimmer trimmer(std::chrono::seconds(30));
  EXPECT_EQ(trimmer.trims(), 0u);
  trimmer.Watch(std::weak_ptr<const void>());  // nothing to wait for
  ASSERT_TRUE(WaitFor([&] { return trimmer.trims() == 1; }, std::chrono::milliseconds(2000)));

  auto a = std::make_shared<int>(1);
  auto b = std::make_shared<std::string>(1 << 20, 'x');
  trimmer.Watch(a);
  trimmer.Watch(b);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(trimmer.trims(), 1u);  // both still alive
  a.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(trimmer.trims(), 1u);  // b still alive
  b.reset();
  ASSERT_TRUE(WaitFor([&] { return trimmer.trims() == 2; }, std::chrono::milliseconds(2000)));
}

TEST(HeapTrimmerTest, GivesUpWaitingAfterMaxWait) {
  HeapTrimmer trimmer(std::chrono::milliseconds(300));
  auto held = std::make_shared<int>(7);
  const auto t0 = std::chrono::steady_clock::now();
  trimmer.Watch(held);
  ASSERT_TRUE(WaitFor([&] { return trimmer.trims() == 1; }, std::chrono::milliseconds(3000)));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(300));
}

}  // namespace
}  // namespace minfer::daemon
