// The slot's lifecycle without a model: the transition table itself, then
// a Slot driven through load, sleep, wake and unload by a fake loader (TF
// Serving tests its manager with fake loaders the same way) and the fake
// engine. Each wake and sleep is counted in the loader, each state checked
// through the slot's status; nothing is timed but deadlines.
#include "daemon/serving/lifecycle.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "daemon/serving/memory.h"
#include "daemon/serving/sequence.h"
#include "daemon/serving/slot.h"
#include "gtest/gtest.h"
#include "tests/daemon/serving/fake_engine.h"

namespace minfer::daemon {
namespace {

using ::minfer::testing::FakeEngine;
using ::minfer::testing::WaitForResult;
using S = SlotState;

TEST(LifecycleTest, OnlyTheDiagramsEdgesAreAllowed) {
  const std::set<std::pair<S, S>> edges = {
      {S::kLoading, S::kReady},     {S::kLoading, S::kFailed},   {S::kLoading, S::kUnloading},
      {S::kReady, S::kSleeping},    {S::kReady, S::kDraining},   {S::kSleeping, S::kWaking},
      {S::kSleeping, S::kDraining}, {S::kWaking, S::kReady},     {S::kWaking, S::kSleeping},
      {S::kWaking, S::kFailed},     {S::kDraining, S::kUnloading}, {S::kUnloading, S::kStopped},
      {S::kFailed, S::kStopped}};
  int allowed = 0;
  for (S from : kAllSlotStates) {
    for (S to : kAllSlotStates) {
      const bool want = edges.count({from, to}) > 0;
      EXPECT_EQ(TransitionAllowed(from, to), want)
          << SlotStateName(from) << " -> " << SlotStateName(to);
      allowed += TransitionAllowed(from, to) ? 1 : 0;
    }
  }
  EXPECT_EQ(allowed, static_cast<int>(edges.size()));
}

TEST(LifecycleTest, ARefusedTransitionNamesTheModelAndBothStatesAndChangesNothing) {
  Lifecycle l("m7");
  ASSERT_TRUE(l.To(S::kReady).ok());
  absl::Status s = l.To(S::kWaking);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "model 'm7' cannot go from ready to waking");
  EXPECT_EQ(l.state(), S::kReady);
  ASSERT_TRUE(l.To(S::kSleeping).ok());
  ASSERT_TRUE(l.To(S::kWaking).ok());
  ASSERT_TRUE(l.To(S::kReady).ok());
  ASSERT_TRUE(l.To(S::kDraining).ok());
  EXPECT_FALSE(l.To(S::kReady).ok());  // no way back from draining
  ASSERT_TRUE(l.To(S::kUnloading).ok());
  ASSERT_TRUE(l.To(S::kStopped).ok());
  for (S to : kAllSlotStates) EXPECT_FALSE(l.To(to).ok());  // stopped is final
}

TEST(LifecycleTest, RequestsAreAcceptedWhileReadySleepingOrWaking) {
  for (S s : kAllSlotStates) {
    EXPECT_EQ(AcceptsRequests(s), s == S::kReady || s == S::kSleeping || s == S::kWaking)
        << SlotStateName(s);
  }
}

// What the fake loader did, and knobs for what it does next.
struct LoaderLog {
  std::mutex mu;
  std::condition_variable cv;
  int loads = 0, sleeps = 0, wakes = 0, unloads = 0;
  int last_level = 0;
  bool hold_wake = false;        // Wake waits until released
  absl::Status wake_result;      // what Wake returns
  bool wake_leaves_asleep = false;  // a refused wake (admission): still asleep
};

class FakeLoader : public ModelLoader {
 public:
  FakeLoader(LoaderLog* log, FakeEngine::Shared* engine) : log_(log), shared_(engine) {}
  absl::Status Load() override {
    std::lock_guard<std::mutex> lock(log_->mu);
    ++log_->loads;
    engine_ = std::make_unique<FakeEngine>(shared_);
    mem_.estimate.weights = 1000;
    mem_.estimate.kv = 300;
    mem_.reserved = 1300;
    mem_.weights = 1000;
    return absl::OkStatus();
  }
  absl::Status Sleep(int level) override {
    std::lock_guard<std::mutex> lock(log_->mu);
    ++log_->sleeps;
    log_->last_level = level;
    engine_.reset();
    mem_.sleep_level = level;
    mem_.weights = 0;
    mem_.host_weights = level == 1 ? 1000 : 0;
    mem_.reserved = level == 1 ? 1000 : 0;
    return absl::OkStatus();
  }
  absl::Status Wake() override {
    std::unique_lock<std::mutex> lock(log_->mu);
    log_->cv.wait(lock, [&] { return !log_->hold_wake; });
    ++log_->wakes;
    if (!log_->wake_result.ok()) {
      if (!log_->wake_leaves_asleep) mem_ = LoaderMemory();
      return log_->wake_result;
    }
    engine_ = std::make_unique<FakeEngine>(shared_);
    mem_.sleep_level = 0;
    mem_.weights = 1000;
    mem_.host_weights = 0;
    mem_.reserved = 1300;
    return absl::OkStatus();
  }
  void Unload() override {
    std::lock_guard<std::mutex> lock(log_->mu);
    ++log_->unloads;
    engine_.reset();
    mem_ = LoaderMemory();
  }
  runtime::StepEngine* engine() override { return engine_.get(); }
  std::shared_ptr<runtime::Model> model() override { return nullptr; }
  LoaderMemory Memory() const override { return mem_; }
  std::string Summary() const override { return "fake"; }

 private:
  LoaderLog* log_;
  FakeEngine::Shared* shared_;
  std::unique_ptr<FakeEngine> engine_;
  LoaderMemory mem_;
};

class SlotLifecycleTest : public ::testing::Test {
 protected:
  void Start(double sleep_after = 0, int sleep_level = 1) {
    SlotConfig c;
    c.name = "m";
    c.path = "/nonexistent.gguf";  // the fake loader never reads it
    c.parallel = 4;
    c.queue_size = 4;
    c.sleep_after_seconds = sleep_after;
    c.sleep_level = sleep_level;
    Slot::Hooks h;
    h.budget = &budget_;
    h.make_loader = [this](const SlotConfig&) {
      return std::unique_ptr<ModelLoader>(new FakeLoader(&log_, &shared_));
    };
    slot_ = Slot::Start(c, h);
    ASSERT_TRUE(WaitFor([&] { return slot_->state() == S::kReady; }));
  }
  void TearDown() override { slot_.reset(); }

  template <typename F>
  bool WaitFor(F pred) {
    for (int i = 0; i < 5000; ++i) {
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return pred();
  }
  std::shared_ptr<Sequence> Submit(int32_t max_tokens,
                                   Clock::time_point deadline = Clock::time_point::max(),
                                   absl::Status* submitted = nullptr) {
    runtime::GenerateRequest r;
    r.prompt = {1, 2, 3};
    r.max_tokens = max_tokens;
    auto seq = std::make_shared<Sequence>(std::move(r), "m", Clock::now(), deadline);
    absl::Status s = slot_->Submit(seq);
    if (submitted != nullptr) {
      *submitted = s;
    } else {
      EXPECT_TRUE(s.ok()) << s;
    }
    return seq;
  }
  absl::Status SleepNow(int level) {
    std::promise<absl::Status> p;
    auto f = p.get_future();
    absl::Status s = slot_->Sleep(level, [&p](absl::Status d) { p.set_value(d); });
    if (!s.ok()) return s;
    return f.get();
  }

  MemoryBudget budget_;
  FakeEngine::Shared shared_;
  LoaderLog log_;
  std::shared_ptr<Slot> slot_;
};

TEST_F(SlotLifecycleTest, SleepFreesWhatTheLoaderHeldAndARequestWakesIt) {
  Start();
  int64_t tokens = 0;
  auto before = Submit(3);
  EXPECT_TRUE(WaitForResult(*before, &tokens).status.ok());
  ASSERT_TRUE(SleepNow(1).ok());
  SlotStatus st = slot_->Status();
  EXPECT_EQ(st.state, S::kSleeping);
  EXPECT_EQ(st.memory.sleep_level, 1);
  EXPECT_EQ(st.memory.reserved, 1000u);  // the weights, in host memory
  EXPECT_EQ(st.memory.host_weights, 1000u);
  EXPECT_EQ(st.engine.kv_bytes, 0);
  EXPECT_EQ(st.engine.n_ctx, 256);  // what the model is stays
  EXPECT_EQ(st.sleeps, 1u);
  EXPECT_TRUE(st.asleep_since.has_value());
  {
    std::lock_guard<std::mutex> lock(log_.mu);
    EXPECT_EQ(log_.sleeps, 1);
    EXPECT_EQ(log_.last_level, 1);
  }
  // Sleeping again is a no-op.
  EXPECT_TRUE(SleepNow(2).ok());
  EXPECT_EQ(slot_->Status().sleeps, 1u);

  // A request wakes the model and gets its tokens.
  tokens = 0;
  auto after = Submit(4);
  SequenceResult r = WaitForResult(*after, &tokens);
  EXPECT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(tokens, 4);
  st = slot_->Status();
  EXPECT_EQ(st.state, S::kReady);
  EXPECT_EQ(st.wakes, 1u);
  EXPECT_TRUE(st.last_wake.has_value());
  EXPECT_FALSE(st.asleep_since.has_value());
  EXPECT_EQ(st.memory.reserved, 1300u);
  std::lock_guard<std::mutex> lock(log_.mu);
  EXPECT_EQ(log_.wakes, 1);
  EXPECT_EQ(log_.loads, 1);  // a wake is not a load
}

TEST_F(SlotLifecycleTest, ARequestWhoseDeadlinePassesWhileWakingGetsDeadlineExceeded) {
  Start();
  ASSERT_TRUE(SleepNow(2).ok());
  {
    std::lock_guard<std::mutex> lock(log_.mu);
    log_.hold_wake = true;
  }
  const auto t0 = Clock::now();
  auto late = Submit(3, Clock::now() + std::chrono::milliseconds(100));
  auto patient = Submit(2);
  ASSERT_TRUE(WaitFor([&] { return slot_->state() == S::kWaking; }));
  int64_t tokens = 0;
  SequenceResult r = WaitForResult(*late, &tokens);
  // At its deadline, while the wake still runs: not after it.
  EXPECT_EQ(r.status.code(), absl::StatusCode::kDeadlineExceeded) << r.status;
  EXPECT_TRUE(absl::StrContains(r.status.message(), "waking")) << r.status;
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(3));
  EXPECT_EQ(slot_->state(), S::kWaking);
  EXPECT_EQ(tokens, 0);
  // Unloading while waking is refused (it waits for the wake's outcome).
  absl::Status unload = slot_->BeginUnload(Clock::now(), absl::CancelledError("x"), nullptr);
  EXPECT_EQ(unload.code(), absl::StatusCode::kFailedPrecondition);
  {
    std::lock_guard<std::mutex> lock(log_.mu);
    log_.hold_wake = false;
  }
  log_.cv.notify_all();
  tokens = 0;
  r = WaitForResult(*patient, &tokens);
  EXPECT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(tokens, 2);
  EXPECT_EQ(slot_->state(), S::kReady);
}

TEST_F(SlotLifecycleTest, UnloadWhileSleepingFreesEverythingWithoutWaking) {
  Start();
  ASSERT_TRUE(SleepNow(1).ok());
  std::promise<UnloadResult> done;
  auto f = done.get_future();
  ASSERT_TRUE(slot_
                  ->BeginUnload(Clock::now() + std::chrono::seconds(5), absl::CancelledError("x"),
                                [&done](const UnloadResult& r) { done.set_value(r); })
                  .ok());
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(slot_->state(), S::kStopped);
  std::lock_guard<std::mutex> lock(log_.mu);
  EXPECT_EQ(log_.wakes, 0);
  EXPECT_EQ(log_.unloads, 1);
}

TEST_F(SlotLifecycleTest, SleepIsRefusedWhileSequencesRunAndNamesThem) {
  Start();
  shared_.step_ms = 20;
  auto busy = Submit(50);
  ASSERT_TRUE(WaitFor([&] { return slot_->Status().engine.running == 1; }));
  absl::Status s = slot_->Sleep(1, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(s.message(), "1 sequences running or queued")) << s;
  EXPECT_EQ(slot_->Sleep(3, nullptr).code(), absl::StatusCode::kInvalidArgument);
  busy->Cancel(absl::CancelledError("done"));
}

TEST_F(SlotLifecycleTest, AnIdleModelSleepsAfterItsTimeoutAtItsLevel) {
  Start(/*sleep_after=*/0.05, /*sleep_level=*/2);
  ASSERT_TRUE(WaitFor([&] { return slot_->state() == S::kSleeping; }));
  EXPECT_EQ(slot_->Status().memory.sleep_level, 2);
  EXPECT_EQ(slot_->Status().memory.reserved, 0u);
  // It wakes for a request, serves it, and falls asleep again.
  int64_t tokens = 0;
  auto seq = Submit(2);
  EXPECT_TRUE(WaitForResult(*seq, &tokens).status.ok());
  ASSERT_TRUE(WaitFor([&] { return slot_->Status().sleeps == 2; }));
  std::lock_guard<std::mutex> lock(log_.mu);
  EXPECT_EQ(log_.wakes, 1);
  EXPECT_EQ(log_.last_level, 2);
}

TEST_F(SlotLifecycleTest, AWakeRefusedAdmissionLeavesItAsleepAndTellsTheRequest) {
  Start();
  ASSERT_TRUE(SleepNow(1).ok());
  {
    std::lock_guard<std::mutex> lock(log_.mu);
    log_.wake_result = absl::ResourceExhaustedError("model 'm' does not fit in memory");
    log_.wake_leaves_asleep = true;
  }
  int64_t tokens = 0;
  auto seq = Submit(2);
  SequenceResult r = WaitForResult(*seq, &tokens);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kResourceExhausted) << r.status;
  EXPECT_TRUE(absl::StrContains(r.status.message(), "could not wake")) << r.status;
  ASSERT_TRUE(WaitFor([&] { return slot_->state() == S::kSleeping; }));
  // Memory back: the next request wakes it.
  {
    std::lock_guard<std::mutex> lock(log_.mu);
    log_.wake_result = absl::OkStatus();
  }
  tokens = 0;
  auto again = Submit(2);
  EXPECT_TRUE(WaitForResult(*again, &tokens).status.ok());
  EXPECT_EQ(tokens, 2);
}

TEST_F(SlotLifecycleTest, AWakeThatFailsFailsTheSlotWithTheReason) {
  Start();
  ASSERT_TRUE(SleepNow(2).ok());
  {
    std::lock_guard<std::mutex> lock(log_.mu);
    log_.wake_result = absl::NotFoundError("model file '/m.gguf' is gone");
  }
  int64_t tokens = 0;
  auto seq = Submit(2);
  SequenceResult r = WaitForResult(*seq, &tokens);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kNotFound) << r.status;
  ASSERT_TRUE(WaitFor([&] { return slot_->state() == S::kFailed; }));
  EXPECT_TRUE(absl::StrContains(slot_->Status().error.message(), "is gone"));
  absl::Status refused;
  Submit(1, Clock::time_point::max(), &refused);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  // A failed slot unloads at once.
  ASSERT_TRUE(slot_->BeginUnload(Clock::now(), absl::CancelledError("x"), nullptr).ok());
  EXPECT_EQ(slot_->state(), S::kStopped);
}

TEST_F(SlotLifecycleTest, WakeWithoutARequest) {
  Start();
  ASSERT_TRUE(SleepNow(1).ok());
  std::promise<absl::Status> p;
  auto f = p.get_future();
  ASSERT_TRUE(slot_->Wake([&p](absl::Status s) { p.set_value(s); }).ok());
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_TRUE(f.get().ok());
  EXPECT_EQ(slot_->state(), S::kReady);
  // Awake already: OK at once.
  bool called = false;
  EXPECT_TRUE(slot_->Wake([&called](absl::Status s) { called = s.ok(); }).ok());
  EXPECT_TRUE(called);
}

}  // namespace
}  // namespace minfer::daemon
