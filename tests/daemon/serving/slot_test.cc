// The slot's worker (schedule -> run -> update between engine steps) with a
// fake engine (runtime::StepEngine), the way TF Serving tests its manager
// with fake loaders: cancellation, deadlines, drain and unload act between
// two steps, never lose a sequence, and are counted in steps, not timed.
// The model file is real (admission and Model::Load run); the engine is not.
#include "daemon/serving/slot.h"

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "daemon/serving/memory.h"
#include "daemon/serving/sequence.h"
#include "gtest/gtest.h"
#include "tests/daemon/serving/fake_engine.h"
#include "tests/support/test_models.h"

namespace minfer::daemon {
namespace {

using ::minfer::testing::FakeEngine;
using ::minfer::testing::WaitForResult;

class SlotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto path = minfer::testing::TestModelPath("tiny", "q8_0", 1);
    ASSERT_TRUE(path.ok()) << path.status();
    SlotConfig c;
    c.name = "m";
    c.path = *path;
    c.backend = "cpu";
    c.n_ctx = 256;
    c.parallel = 8;
    c.queue_size = 8;
    Slot::Hooks h;
    h.budget = &budget_;
    h.make_engine = [this](std::shared_ptr<runtime::Model>, const runtime::EngineOptions&)
        -> absl::StatusOr<std::unique_ptr<runtime::StepEngine>> {
      return std::unique_ptr<runtime::StepEngine>(new FakeEngine(&shared_));
    };
    slot_ = Slot::Start(c, h);
    for (int i = 0; i < 500 && slot_->state() == SlotState::kLoading; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_EQ(slot_->state(), SlotState::kReady);
  }
  void TearDown() override { slot_.reset(); }

  std::shared_ptr<Sequence> Submit(int32_t max_tokens,
                                   Clock::time_point deadline = Clock::time_point::max()) {
    runtime::GenerateRequest r;
    r.prompt = {1, 2, 3};
    r.max_tokens = max_tokens;
    auto seq = std::make_shared<Sequence>(std::move(r), "m", Clock::now(), deadline);
    EXPECT_TRUE(slot_->Submit(seq).ok());
    return seq;
  }
  void WaitSteps(int64_t n) {
    std::unique_lock<std::mutex> lock(shared_.mu);
    shared_.cv.wait_for(lock, std::chrono::seconds(10), [&] { return shared_.steps >= n; });
  }

  MemoryBudget budget_;
  FakeEngine::Shared shared_;
  std::shared_ptr<Slot> slot_;
};

TEST_F(SlotTest, CancelTakesTheSequenceOutBeforeTheNextStep) {
  auto a = Submit(100000);
  auto b = Submit(40);
  WaitSteps(5);
  a->Cancel(absl::CancelledError("client went away"));
  int64_t ta = 0, tb = 0;
  const SequenceResult ra = WaitForResult(*a, &ta);
  EXPECT_TRUE(absl::IsCancelled(ra.status)) << ra.status;
  EXPECT_GE(ta, 4);
  {
    std::lock_guard<std::mutex> lock(shared_.mu);
    EXPECT_EQ(shared_.cancelled.size(), 1u);  // the engine was told, once
    EXPECT_LE(shared_.produced[*shared_.cancelled.begin()], ta + 1);
  }
  // The other stream never noticed: it runs to its end.
  const SequenceResult rb = WaitForResult(*b, &tb);
  EXPECT_TRUE(rb.status.ok()) << rb.status;
  EXPECT_EQ(tb, 40);
  EXPECT_EQ(rb.finish_reason, FinishReason::kLength);
  EXPECT_EQ(slot_->Status().counters.cancelled, 1u);
  EXPECT_EQ(slot_->Status().counters.completed, 1u);
}

TEST_F(SlotTest, DeadlineEndsTheSequenceBetweenSteps) {
  shared_.step_ms = 5;
  auto a = Submit(100000, Clock::now() + std::chrono::milliseconds(60));
  int64_t ta = 0;
  const SequenceResult ra = WaitForResult(*a, &ta);
  EXPECT_TRUE(absl::IsDeadlineExceeded(ra.status)) << ra.status;
  EXPECT_GT(ta, 0);
  std::lock_guard<std::mutex> lock(shared_.mu);
  EXPECT_EQ(shared_.cancelled.size(), 1u);
  // It ran no step after the one that crossed its deadline.
  EXPECT_LE(shared_.produced.begin()->second, ta + 1);
}

TEST_F(SlotTest, DrainFinishesWhatCanAndCancelsTheRestAtTheDeadline) {
  shared_.step_ms = 2;
  auto quick = Submit(10);
  auto slow = Submit(100000);
  WaitSteps(2);
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  UnloadResult result;
  ASSERT_TRUE(slot_
                  ->BeginUnload(Clock::now() + std::chrono::milliseconds(200),
                                absl::UnavailableError("model 'm' is being unloaded"),
                                [&](const UnloadResult& r) {
                                  std::lock_guard<std::mutex> lock(mu);
                                  result = r;
                                  done = true;
                                  cv.notify_all();
                                })
                  .ok());
  // New work is refused while draining.
  runtime::GenerateRequest r;
  r.prompt = {1};
  auto late = std::make_shared<Sequence>(std::move(r), "m", Clock::now(), Clock::time_point::max());
  const absl::Status refused = slot_->Submit(late);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  int64_t tq = 0, ts = 0;
  const SequenceResult rq = WaitForResult(*quick, &tq);
  const SequenceResult rs = WaitForResult(*slow, &ts);
  EXPECT_TRUE(rq.status.ok()) << rq.status;
  EXPECT_EQ(tq, 10);
  EXPECT_TRUE(absl::IsUnavailable(rs.status)) << rs.status;
  EXPECT_GT(ts, 10);
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return done; }));
  EXPECT_EQ(result.completed, 1);
  EXPECT_EQ(result.cancelled, 1);
  EXPECT_EQ(slot_->state(), SlotState::kStopped);
}

TEST_F(SlotTest, StatusReportsTheEnginesPool) {
  const SlotStatus st = slot_->Status();
  EXPECT_EQ(st.engine.kv_block, 16);
  EXPECT_EQ(st.engine.kv_blocks_total, 100);
  EXPECT_EQ(st.engine.token_budget, 64);
  EXPECT_EQ(st.engine.n_ctx, 256);
}

TEST_F(SlotTest, EngineRefusalFinishesTheSequenceWithItsError) {
  runtime::GenerateRequest r;  // empty prompt: the fake refuses it
  auto seq = std::make_shared<Sequence>(std::move(r), "m", Clock::now(), Clock::time_point::max());
  ASSERT_TRUE(slot_->Submit(seq).ok());
  int64_t t = 0;
  const SequenceResult res = WaitForResult(*seq, &t);
  EXPECT_TRUE(absl::IsInvalidArgument(res.status)) << res.status;
  EXPECT_EQ(t, 0);
  EXPECT_EQ(slot_->Status().counters.failed, 1u);
}

}  // namespace
}  // namespace minfer::daemon
