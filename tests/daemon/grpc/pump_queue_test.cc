// PumpQueue: posts run on the queue's thread, a pending key merges further
// posts, Remove waits out a running function and drops pending ones, and a
// function may Remove its own key without deadlocking.
#include "daemon/grpc/pump_queue.h"

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "gtest/gtest.h"

namespace minfer::daemon {
namespace {

using namespace std::chrono_literals;

TEST(PumpQueueTest, RunsOnItsOwnThread) {
  PumpQueue q;
  std::promise<std::thread::id> ran;
  int key = 0;
  q.Post(&key, [&] { ran.set_value(std::this_thread::get_id()); });
  auto f = ran.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_NE(f.get(), std::this_thread::get_id());
}

TEST(PumpQueueTest, PendingKeyMergesPosts) {
  PumpQueue q;
  // Block the thread on a first key so the second key's posts stay pending.
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::atomic<bool> blocker_started{false};
  int blocker = 0, key = 0;
  q.Post(&blocker, [&] {
    blocker_started = true;
    gate.wait();
  });
  while (!blocker_started) std::this_thread::sleep_for(1ms);
  std::atomic<int> runs{0};
  for (int i = 0; i < 10; ++i) q.Post(&key, [&] { runs++; });
  EXPECT_EQ(q.pending(), 1u);
  release.set_value();
  for (int i = 0; i < 500 && runs == 0; ++i) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(runs.load(), 1);
  // Once it has run, a new post runs again.
  q.Post(&key, [&] { runs++; });
  for (int i = 0; i < 500 && runs == 1; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(runs.load(), 2);
}

TEST(PumpQueueTest, RemoveDropsPendingAndWaitsForRunning) {
  PumpQueue q;
  int key = 0, other = 0;
  std::atomic<bool> started{false}, finished{false};
  q.Post(&key, [&] {
    started = true;
    std::this_thread::sleep_for(100ms);
    finished = true;
  });
  while (!started) std::this_thread::sleep_for(1ms);
  std::atomic<int> other_runs{0};
  q.Post(&other, [&] { other_runs++; });  // pending behind the running one
  q.Remove(&other);  // still pending: key's function runs for 100 ms
  q.Remove(&key);
  EXPECT_TRUE(finished.load()) << "Remove returned while the key's function was running";
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(other_runs.load(), 0) << "a removed pending post ran";
}

TEST(PumpQueueTest, FunctionMayRemoveItsOwnKey) {
  PumpQueue q;
  int key = 0;
  std::promise<void> done;
  q.Post(&key, [&] {
    q.Remove(&key);  // as a reactor's OnDone running inline would
    done.set_value();
  });
  EXPECT_EQ(done.get_future().wait_for(5s), std::future_status::ready);
}

TEST(PumpQueueTest, DestructorDropsPending) {
  std::atomic<int> runs{0};
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::atomic<bool> started{false};
  int a = 0, b = 0;
  std::thread releaser;
  {
    PumpQueue q;
    q.Post(&a, [&] {
      started = true;
      gate.wait();
    });
    while (!started) std::this_thread::sleep_for(1ms);
    q.Post(&b, [&] { runs++; });
    releaser = std::thread([&] {
      std::this_thread::sleep_for(20ms);
      release.set_value();
    });
  }  // drops b's post, joins after a's function returns
  releaser.join();
  EXPECT_EQ(runs.load(), 0);
}

}  // namespace
}  // namespace minfer::daemon
