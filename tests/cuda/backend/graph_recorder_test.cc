// GraphRecorder's state machine against a fake device: when a split runs
// directly, is captured, replayed, re-captured, and when graphs turn off.
#include "cuda/backend/graph_recorder.h"

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace minfer::cuda {
namespace {

// Records every call; each failure switch makes the next such call fail.
class FakeDevice : public GraphDevice {
 public:
  absl::Status BeginCapture() override {
    ++begins;
    if (fail_begin) return absl::InternalError("capture unsupported here");
    open = true;
    return absl::OkStatus();
  }
  absl::StatusOr<Exec> EndCaptureAndLaunch() override {
    ++ends;
    open = false;
    if (fail_end) return absl::InternalError("instantiate failed");
    Exec e = reinterpret_cast<Exec>(static_cast<uintptr_t>(++next_exec));
    live.insert(e);
    launched.push_back(e);
    return e;
  }
  void DiscardCapture() override {
    ++discards;
    open = false;
  }
  absl::Status Launch(Exec exec) override {
    if (fail_launch) return absl::InternalError("launch failed");
    EXPECT_EQ(live.count(exec), 1u) << "launch of a destroyed or unknown exec";
    launched.push_back(exec);
    return absl::OkStatus();
  }
  void Destroy(Exec exec) override {
    EXPECT_EQ(live.erase(exec), 1u) << "double or unknown destroy";
    ++destroys;
  }

  int begins = 0, ends = 0, discards = 0, destroys = 0;
  bool open = false;  // a capture is in progress on the "stream"
  bool fail_begin = false, fail_end = false, fail_launch = false;
  std::set<Exec> live;
  std::vector<Exec> launched;  // by EndCaptureAndLaunch and Launch, in order
  uintptr_t next_exec = 0;
};

class GraphRecorderTest : public ::testing::Test {
 protected:
  // One step of `key`: Run, then (as the backend's Synchronize) EndWindow.
  GraphRecorder::Outcome Step(const SplitKey& key, uint64_t gen = 1, bool may_capture = true) {
    GraphRecorder::Outcome o = rec.Run(key, gen, /*graphs=*/true, may_capture);
    EXPECT_TRUE(rec.EndWindow(gen).ok());
    return o;
  }

  FakeDevice dev;
  GraphCounters counters;
  GraphRecorder rec{&dev, &counters};
  const SplitKey a{7, 0, 10};
};

using Outcome = GraphRecorder::Outcome;

TEST_F(GraphRecorderTest, DirectTwiceThenCaptureOnTheThirdRunThenReplay) {
  EXPECT_EQ(rec.Run(a, 1, true, true), Outcome::kDirect);
  EXPECT_EQ(rec.runs(a), 1);
  EXPECT_FALSE(rec.capturing());
  ASSERT_TRUE(rec.EndWindow(1).ok());
  EXPECT_EQ(Step(a), Outcome::kDirect);
  EXPECT_EQ(dev.begins, 0);

  EXPECT_EQ(rec.Run(a, 1, true, true), Outcome::kCapturing);
  EXPECT_TRUE(rec.capturing());
  EXPECT_TRUE(dev.open);
  EXPECT_EQ(dev.begins, 1);
  EXPECT_FALSE(rec.recorded(a));  // recorded only when the window closes
  ASSERT_TRUE(rec.EndWindow(1).ok());
  EXPECT_FALSE(rec.capturing());
  EXPECT_EQ(dev.ends, 1);
  EXPECT_TRUE(rec.recorded(a));
  EXPECT_EQ(counters.captures, 1);
  EXPECT_EQ(dev.launched.size(), 1u);  // the capture step's own launch

  for (int i = 0; i < 3; ++i) EXPECT_EQ(Step(a), Outcome::kReplayed);
  EXPECT_EQ(counters.replays, 3);
  EXPECT_EQ(counters.direct_splits, 3);  // runs 1, 2 and the captured one
  EXPECT_EQ(counters.recaptures, 0);
  ASSERT_EQ(dev.launched.size(), 4u);
  EXPECT_EQ(dev.launched[3], dev.launched[0]);  // the same recording
  EXPECT_EQ(dev.begins, 1);
}

TEST_F(GraphRecorderTest, RunsWhileCapturingStayDirect) {
  Step(a);
  Step(a);
  EXPECT_EQ(rec.Run(a, 1, true, true), Outcome::kCapturing);
  // The same split again inside the window: no nested capture.
  EXPECT_EQ(rec.Run(a, 1, true, true), Outcome::kDirect);
  EXPECT_EQ(dev.begins, 1);
  ASSERT_TRUE(rec.EndWindow(1).ok());
  EXPECT_EQ(counters.captures, 1);
  EXPECT_EQ(Step(a), Outcome::kReplayed);
}

TEST_F(GraphRecorderTest, PoolGenChangeDropsTheRecordingAndRecaptures) {
  for (int i = 0; i < 3; ++i) Step(a, /*gen=*/5);
  ASSERT_TRUE(rec.recorded(a));
  GraphDevice::Exec old = dev.launched.back();
  EXPECT_EQ(Step(a, 5), Outcome::kReplayed);

  // A buffer moved: the recording is destroyed and the split re-warms.
  EXPECT_EQ(Step(a, 6), Outcome::kDirect);
  EXPECT_EQ(counters.recaptures, 1);
  EXPECT_EQ(dev.destroys, 1);
  EXPECT_EQ(dev.live.count(old), 0u);
  EXPECT_FALSE(rec.recorded(a));
  EXPECT_EQ(rec.runs(a), 1);
  EXPECT_EQ(Step(a, 6), Outcome::kDirect);
  EXPECT_EQ(Step(a, 6), Outcome::kCapturing);
  EXPECT_EQ(counters.captures, 2);
  EXPECT_EQ(Step(a, 6), Outcome::kReplayed);
  EXPECT_NE(dev.launched.back(), old);
  EXPECT_EQ(counters.recaptures, 1);
}

TEST_F(GraphRecorderTest, RecordingKeepsThePoolGenOfTheWindowEnd) {
  Step(a, 1);
  Step(a, 1);
  EXPECT_EQ(rec.Run(a, 1, true, true), Outcome::kCapturing);
  // An allocation inside the window moved the generation before it closed.
  ASSERT_TRUE(rec.EndWindow(2).ok());
  EXPECT_EQ(Step(a, 2), Outcome::kReplayed);
}

TEST_F(GraphRecorderTest, SplitsAreIndependentByUidAndNodeRange) {
  const SplitKey other_uid{8, 0, 10}, other_begin{7, 1, 10}, other_end{7, 0, 11};
  for (int i = 0; i < 3; ++i) Step(a);
  ASSERT_TRUE(rec.recorded(a));
  for (const SplitKey& k : {other_uid, other_begin, other_end}) {
    EXPECT_EQ(Step(k), Outcome::kDirect);
    EXPECT_EQ(rec.runs(k), 1);
    EXPECT_FALSE(rec.recorded(k));
  }
  EXPECT_EQ(Step(a), Outcome::kReplayed);
  // A pool_gen change seen by one split leaves the others' recordings alone
  // until they run.
  for (const SplitKey& k : {other_uid, other_begin, other_end}) {
    Step(k);
    EXPECT_EQ(Step(k), Outcome::kCapturing);
  }
  EXPECT_EQ(rec.recordings(), 4u);
  EXPECT_EQ(Step(other_uid, 2), Outcome::kDirect);
  EXPECT_EQ(counters.recaptures, 1);
  EXPECT_TRUE(rec.recorded(a));
  EXPECT_FALSE(rec.recorded(other_uid));
}

TEST_F(GraphRecorderTest, OneCaptureAtATime) {
  const SplitKey b{7, 10, 20};
  rec.Run(a, 1, true, true);
  rec.Run(b, 1, true, true);
  ASSERT_TRUE(rec.EndWindow(1).ok());
  rec.Run(a, 1, true, true);
  rec.Run(b, 1, true, true);
  ASSERT_TRUE(rec.EndWindow(1).ok());
  // Both reach their third run in one window: the first captures, the
  // second runs directly (its launches land in the open capture).
  EXPECT_EQ(rec.Run(a, 1, true, true), Outcome::kCapturing);
  EXPECT_EQ(rec.Run(b, 1, true, true), Outcome::kDirect);
  ASSERT_TRUE(rec.EndWindow(1).ok());
  EXPECT_TRUE(rec.recorded(a));
  EXPECT_FALSE(rec.recorded(b));
  EXPECT_EQ(rec.runs(b), 3);
  EXPECT_EQ(Step(b), Outcome::kCapturing);  // its fourth run
  EXPECT_EQ(counters.captures, 2);
}

TEST_F(GraphRecorderTest, MayCaptureFalseCountsRunsButNeverRecords) {
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Step(a, 1, /*may_capture=*/false), Outcome::kDirect);
  EXPECT_EQ(dev.begins, 0);
  EXPECT_EQ(rec.runs(a), 5);
  EXPECT_EQ(counters.direct_splits, 5);
  EXPECT_EQ(Step(a, 1, true), Outcome::kCapturing);
}

TEST_F(GraphRecorderTest, GraphsOffRunsDirectWithoutCountingRuns) {
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(rec.Run(a, 1, /*graphs=*/false, true), Outcome::kDirect);
    ASSERT_TRUE(rec.EndWindow(1).ok());
  }
  EXPECT_EQ(rec.runs(a), 0);
  EXPECT_EQ(counters.direct_splits, 4);
  EXPECT_EQ(dev.begins, 0);
  EXPECT_TRUE(rec.enabled());
}

TEST_F(GraphRecorderTest, GraphsOffSkipsAnExistingRecording) {
  for (int i = 0; i < 3; ++i) Step(a);
  EXPECT_EQ(rec.Run(a, 1, /*graphs=*/false, true), Outcome::kDirect);
  EXPECT_EQ(counters.replays, 0);
  EXPECT_TRUE(rec.recorded(a));
}

TEST_F(GraphRecorderTest, NodeErrorAbortsTheCaptureAndTheSplitRewarms) {
  Step(a);
  Step(a);
  EXPECT_EQ(rec.Run(a, 1, true, true), Outcome::kCapturing);
  rec.AbortCapture(absl::InvalidArgumentError("bad node"));
  EXPECT_EQ(dev.discards, 1);
  EXPECT_FALSE(dev.open);
  EXPECT_FALSE(rec.capturing());
  EXPECT_EQ(rec.runs(a), 0);
  EXPECT_TRUE(rec.enabled());  // a failed step is not a broken device
  ASSERT_TRUE(rec.EndWindow(1).ok());
  EXPECT_EQ(dev.ends, 0);
  EXPECT_EQ(counters.captures, 0);
  EXPECT_FALSE(rec.recorded(a));
  // Re-warmed from run 1.
  EXPECT_EQ(Step(a), Outcome::kDirect);
  EXPECT_EQ(Step(a), Outcome::kDirect);
  EXPECT_EQ(Step(a), Outcome::kCapturing);
  EXPECT_EQ(Step(a), Outcome::kReplayed);
}

TEST_F(GraphRecorderTest, AbortWithoutACaptureDoesNothing) {
  Step(a);
  rec.AbortCapture(absl::InternalError("x"));
  EXPECT_EQ(dev.discards, 0);
  EXPECT_EQ(rec.runs(a), 1);
}

TEST_F(GraphRecorderTest, CaptureUnavailableDisablesGraphs) {
  const SplitKey b{9, 0, 4};
  for (int i = 0; i < 3; ++i) Step(b);
  ASSERT_TRUE(rec.recorded(b));
  Step(a);
  Step(a);
  dev.fail_begin = true;
  EXPECT_EQ(Step(a), Outcome::kDirect);
  EXPECT_FALSE(rec.enabled());
  EXPECT_FALSE(rec.capturing());
  // Everything runs directly from now on, even a split with a recording.
  EXPECT_EQ(Step(b), Outcome::kDirect);
  EXPECT_EQ(Step(a), Outcome::kDirect);
  EXPECT_EQ(dev.begins, 2);
  EXPECT_EQ(counters.replays, 0);
}

TEST_F(GraphRecorderTest, FailedInstantiationDisablesGraphsAndFailsTheStep) {
  const SplitKey b{9, 0, 4};
  for (int i = 0; i < 3; ++i) Step(b);
  ASSERT_TRUE(rec.recorded(b));
  Step(a);
  Step(a);
  dev.fail_end = true;
  EXPECT_EQ(rec.Run(a, 1, true, true), Outcome::kCapturing);
  absl::Status st = rec.EndWindow(1);
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal);
  EXPECT_NE(st.message().find("graph capture failed (instantiate failed)"), std::string::npos)
      << st;
  EXPECT_NE(st.message().find("outputs are undefined"), std::string::npos) << st;
  EXPECT_NE(st.message().find("MINFER_NO_CUDA_GRAPH=1"), std::string::npos) << st;
  EXPECT_FALSE(rec.enabled());
  EXPECT_FALSE(rec.capturing());
  EXPECT_EQ(rec.recordings(), 0u);  // b's recording dropped too
  EXPECT_TRUE(dev.live.empty());
  EXPECT_EQ(counters.captures, 1);  // b's only
  EXPECT_EQ(Step(b), Outcome::kDirect);
}

TEST_F(GraphRecorderTest, FailedReplayDisablesGraphsAndRunsDirect) {
  const SplitKey b{9, 0, 4};
  for (int i = 0; i < 3; ++i) Step(a);
  for (int i = 0; i < 3; ++i) Step(b);
  ASSERT_EQ(rec.recordings(), 2u);
  const int64_t direct = counters.direct_splits;
  dev.fail_launch = true;
  EXPECT_EQ(Step(a), Outcome::kDirect);
  EXPECT_EQ(counters.direct_splits, direct + 1);
  EXPECT_EQ(counters.replays, 0);
  EXPECT_FALSE(rec.enabled());
  EXPECT_EQ(rec.recordings(), 0u);
  EXPECT_TRUE(dev.live.empty());
  EXPECT_EQ(rec.runs(a), 0);
  dev.fail_launch = false;
  EXPECT_EQ(Step(b), Outcome::kDirect);
}

TEST_F(GraphRecorderTest, DropForgetsRecordingsAndRuns) {
  for (int i = 0; i < 3; ++i) Step(a);
  const SplitKey b{9, 0, 4};
  Step(b);
  rec.Drop();
  EXPECT_TRUE(dev.live.empty());
  EXPECT_EQ(rec.recordings(), 0u);
  EXPECT_EQ(rec.runs(b), 0);
  EXPECT_TRUE(rec.enabled());
  EXPECT_EQ(Step(a), Outcome::kDirect);
  EXPECT_EQ(rec.runs(a), 1);
}

TEST_F(GraphRecorderTest, DiscardOpenCaptureEndsItSilently) {
  Step(a);
  Step(a);
  rec.Run(a, 1, true, true);
  rec.DiscardOpenCapture();
  EXPECT_EQ(dev.discards, 1);
  EXPECT_FALSE(rec.capturing());
  rec.DiscardOpenCapture();
  EXPECT_EQ(dev.discards, 1);
}

TEST(GraphRecorderLifetime, DestructorDestroysWhatIsLeft) {
  FakeDevice dev;
  GraphCounters counters;
  {
    GraphRecorder rec(&dev, &counters);
    const SplitKey k{1, 0, 1};
    for (int i = 0; i < 3; ++i) {
      rec.Run(k, 1, true, true);
      ASSERT_TRUE(rec.EndWindow(1).ok());
    }
    ASSERT_EQ(dev.live.size(), 1u);
  }
  EXPECT_TRUE(dev.live.empty());
  EXPECT_EQ(dev.destroys, 1);
}

}  // namespace
}  // namespace minfer::cuda
