#include "daemon/serving/sequence.h"

#include <atomic>
#include <thread>

#include "gtest/gtest.h"

namespace minfer::daemon {
namespace {

runtime::StepOutput Step(std::vector<int32_t> ids, std::string text) {
  runtime::StepOutput s;
  s.tokens = std::move(ids);
  s.text = std::move(text);
  return s;
}

TEST(SequenceTest, MergesPendingOutputUntilTaken) {
  Sequence seq({}, "m", Clock::now(), Clock::time_point::max());
  SequenceChunk c;
  EXPECT_FALSE(seq.TakeChunk(&c));
  seq.Publish(Step({1}, "a"));
  seq.Publish(Step({2}, ""));
  seq.Publish(Step({3}, "bc"));
  ASSERT_TRUE(seq.TakeChunk(&c));
  EXPECT_EQ(c.tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(c.text, "abc");
  EXPECT_TRUE(c.first);
  EXPECT_FALSE(c.result.has_value());
  EXPECT_FALSE(seq.TakeChunk(&c));
  seq.Publish(Step({4}, "d"));
  SequenceResult r;
  r.finish_reason = FinishReason::kStop;
  seq.Finish(r);
  seq.Publish(Step({5}, "late"));  // ignored after Finish
  SequenceResult again;
  again.status = absl::InternalError("second finish");
  seq.Finish(again);  // ignored
  ASSERT_TRUE(seq.TakeChunk(&c));
  EXPECT_FALSE(c.first);
  EXPECT_EQ(c.tokens, (std::vector<int32_t>{4}));
  ASSERT_TRUE(c.result.has_value());
  EXPECT_TRUE(c.result->status.ok());
  EXPECT_EQ(c.result->finish_reason, FinishReason::kStop);
  EXPECT_FALSE(seq.TakeChunk(&c));
}

TEST(SequenceTest, FirstCancelReasonWins) {
  Sequence seq({}, "m", Clock::now(), Clock::time_point::max());
  EXPECT_FALSE(seq.cancel_requested());
  seq.Cancel(absl::DeadlineExceededError("late"));
  seq.Cancel(absl::CancelledError("gone"));
  EXPECT_TRUE(seq.cancel_requested());
  EXPECT_EQ(seq.cancel_reason().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(SequenceTest, NotifiesAndUnsubscribesSafely) {
  Sequence seq({}, "m", Clock::now(), Clock::time_point::max());
  std::atomic<int> calls{0};
  Notifier::Id id = seq.notifier().Subscribe([&] {
    ++calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  std::thread producer([&] {
    for (int i = 0; i < 200; ++i) seq.Publish(Step({i}, "x"));
  });
  while (calls.load() < 5) std::this_thread::yield();
  seq.notifier().Unsubscribe(id);
  const int at_unsubscribe = calls.load();
  producer.join();
  // No callback ran after Unsubscribe returned.
  EXPECT_EQ(calls.load(), at_unsubscribe);
}

}  // namespace
}  // namespace minfer::daemon
