// ActivationMemos: q8-plane validity, the MMQ and DQ scratch memos and the
// mode-2 dead ranges, under writes that do and do not overlap their sources.
#include "cuda/backend/activation_memos.h"

#include <string>

#include "absl/status/status.h"
#include "engine/graph/backend.h"
#include "engine/graph/graph.h"
#include "gtest/gtest.h"

namespace minfer::cuda {
namespace {

graph::BufferRef At(int32_t buffer, int64_t offset) {
  graph::BufferRef r;
  r.buffer = buffer;
  r.offset = offset;
  return r;
}

graph::Node Reader(graph::OpKind op, const std::string& name) {
  graph::Node n;
  n.op = op;
  n.name = name;
  return n;
}

// The memo under test covers bytes [1024, 2048) of buffer 3.
constexpr int32_t kBuf = 3;
constexpr int64_t kOff = 1024, kLen = 1024;

TEST(ActivationMemosQ8, ValidForTheLengthItWasSetFor) {
  ActivationMemos m;
  EXPECT_FALSE(m.HasQ8(At(kBuf, kOff)));
  m.SetQ8(At(kBuf, kOff), kLen);
  EXPECT_TRUE(m.HasQ8(At(kBuf, kOff)));
  EXPECT_TRUE(m.Q8Holds(At(kBuf, kOff), kLen));
  EXPECT_TRUE(m.Q8Holds(At(kBuf, kOff), kLen / 2));
  EXPECT_FALSE(m.Q8Holds(At(kBuf, kOff), kLen + 4));  // a longer read needs a new quantize
  // Keyed by the start: the same bytes seen from another start are unknown.
  EXPECT_FALSE(m.HasQ8(At(kBuf, kOff + 256)));
  EXPECT_FALSE(m.HasQ8(At(kBuf + 1, kOff)));
  // The BufferRef's own size plays no part.
  graph::BufferRef sized = At(kBuf, kOff);
  sized.bytes = 1;
  EXPECT_TRUE(m.Q8Holds(sized, kLen));
}

struct WriteCase {
  const char* what;
  int32_t buffer;
  int64_t offset, bytes;
  bool drops;
};

class ActivationMemosWrite : public ::testing::TestWithParam<WriteCase> {};

TEST_P(ActivationMemosWrite, DropsExactlyTheOverlappedMemos) {
  const WriteCase& c = GetParam();
  ActivationMemos m;
  void* scratch = &m;
  m.SetQ8(At(kBuf, kOff), kLen);
  m.SetMmq(At(kBuf, kOff), /*k=*/64, /*nt=*/4, scratch);  // 64 * 4 * 4 = kLen bytes
  m.SetDq(At(kBuf, kOff), 64, 4, scratch);
  m.Invalidate(At(c.buffer, c.offset), c.bytes);
  EXPECT_EQ(m.HasQ8(At(kBuf, kOff)), !c.drops) << c.what;
  EXPECT_EQ(m.MmqHolds(At(kBuf, kOff), 64, 4, scratch), !c.drops) << c.what;
  EXPECT_EQ(m.DqHolds(At(kBuf, kOff), 64, 4, scratch), !c.drops) << c.what;
}

TEST_P(ActivationMemosWrite, ClearsExactlyTheOverlappedDeadRanges) {
  const WriteCase& c = GetParam();
  ActivationMemos m;
  int scratch = 0;
  m.MarkInt8Only(At(kBuf, kOff), 64, 4, &scratch);
  ASSERT_TRUE(m.HasDead());
  m.Invalidate(At(c.buffer, c.offset), c.bytes);
  EXPECT_EQ(m.HasDead(), !c.drops) << c.what;
  const graph::Node reader = Reader(graph::OpKind::kAdd, "blk.0.ffn_out");
  EXPECT_EQ(m.CheckNotDead(reader, At(kBuf, kOff), kLen).ok(), c.drops) << c.what;
}

INSTANTIATE_TEST_SUITE_P(
    Ranges, ActivationMemosWrite,
    ::testing::Values(WriteCase{"the same range", kBuf, kOff, kLen, true},
                      WriteCase{"a covering range", kBuf, 0, 4096, true},
                      WriteCase{"inside", kBuf, kOff + 100, 8, true},
                      WriteCase{"the first byte", kBuf, kOff, 1, true},
                      WriteCase{"the last byte", kBuf, kOff + kLen - 1, 1, true},
                      WriteCase{"partial, over the start", kBuf, kOff - 100, 200, true},
                      WriteCase{"partial, over the end", kBuf, kOff + kLen - 100, 200, true},
                      WriteCase{"adjacent before", kBuf, 0, kOff, false},
                      WriteCase{"adjacent after", kBuf, kOff + kLen, 512, false},
                      WriteCase{"far away", kBuf, 1 << 20, 4096, false},
                      WriteCase{"another buffer, same bytes", kBuf + 1, kOff, kLen, false}));

TEST(ActivationMemosQ8, InvalidationDropsOnlyTheOverlappedEntries) {
  ActivationMemos m;
  m.SetQ8(At(kBuf, 0), 512);
  m.SetQ8(At(kBuf, 512), 512);
  m.SetQ8(At(kBuf + 1, 0), 512);
  m.Invalidate(At(kBuf, 600), 16);
  EXPECT_TRUE(m.HasQ8(At(kBuf, 0)));
  EXPECT_FALSE(m.HasQ8(At(kBuf, 512)));
  EXPECT_TRUE(m.HasQ8(At(kBuf + 1, 0)));
  // Set again after the write: valid again.
  m.SetQ8(At(kBuf, 512), 512);
  EXPECT_TRUE(m.Q8Holds(At(kBuf, 512), 512));
}

TEST(ActivationMemosMmq, HoldsOnlyTheSameInputShapeAndScratch) {
  ActivationMemos m;
  int s1 = 0, s2 = 0;
  EXPECT_FALSE(m.MmqHolds(At(kBuf, kOff), 64, 4, &s1));
  m.SetMmq(At(kBuf, kOff), 64, 4, &s1);
  EXPECT_TRUE(m.MmqHolds(At(kBuf, kOff), 64, 4, &s1));
  EXPECT_FALSE(m.MmqHolds(At(kBuf, kOff), 32, 8, &s1));  // same bytes, other shape
  EXPECT_FALSE(m.MmqHolds(At(kBuf, kOff), 64, 2, &s1));
  EXPECT_FALSE(m.MmqHolds(At(kBuf, kOff), 64, 4, &s2));  // the scratch was reallocated
  EXPECT_FALSE(m.MmqHolds(At(kBuf, kOff + 4), 64, 4, &s1));
  EXPECT_FALSE(m.MmqHolds(At(kBuf + 1, kOff), 64, 4, &s1));
  // One scratch: the next input replaces the memo.
  m.SetMmq(At(kBuf, 0), 64, 4, &s1);
  EXPECT_FALSE(m.MmqHolds(At(kBuf, kOff), 64, 4, &s1));
  EXPECT_TRUE(m.MmqHolds(At(kBuf, 0), 64, 4, &s1));
  m.ClearMmq();
  EXPECT_FALSE(m.MmqHolds(At(kBuf, 0), 64, 4, &s1));
}

TEST(ActivationMemosDq, HoldsOnlyTheSameInputShapeAndScratchApartFromMmq) {
  ActivationMemos m;
  int s1 = 0, s2 = 0;
  EXPECT_FALSE(m.DqHolds(At(kBuf, kOff), 64, 4, &s1));
  m.SetDq(At(kBuf, kOff), 64, 4, &s1);
  EXPECT_TRUE(m.DqHolds(At(kBuf, kOff), 64, 4, &s1));
  EXPECT_FALSE(m.DqHolds(At(kBuf, kOff), 32, 8, &s1));
  EXPECT_FALSE(m.DqHolds(At(kBuf, kOff), 64, 4, &s2));
  EXPECT_FALSE(m.DqHolds(At(kBuf, kOff + 4), 64, 4, &s1));
  // The two scratches are separate memos: setting or clearing MMQ's leaves
  // the DQ one alone, and the other way round.
  EXPECT_FALSE(m.MmqHolds(At(kBuf, kOff), 64, 4, &s1));
  m.SetMmq(At(kBuf, 0), 64, 4, &s2);
  EXPECT_TRUE(m.DqHolds(At(kBuf, kOff), 64, 4, &s1));
  m.ClearMmq();
  EXPECT_TRUE(m.DqHolds(At(kBuf, kOff), 64, 4, &s1));
  m.SetMmq(At(kBuf, 0), 64, 4, &s2);
  m.SetDq(At(kBuf, 2048), 64, 4, &s1);
  EXPECT_FALSE(m.DqHolds(At(kBuf, kOff), 64, 4, &s1));
  EXPECT_TRUE(m.MmqHolds(At(kBuf, 0), 64, 4, &s2));
  m.EndWindow();
  EXPECT_FALSE(m.DqHolds(At(kBuf, 2048), 64, 4, &s1));
}

TEST(ActivationMemosDead, DqOnlyProducersLeaveADeadRangeAndTheDqMemo) {
  ActivationMemos m;
  int scratch = 0;
  m.MarkDqOnly(At(kBuf, kOff), 64, 4, &scratch);
  EXPECT_TRUE(m.HasDead());
  EXPECT_TRUE(m.DqHolds(At(kBuf, kOff), 64, 4, &scratch));
  EXPECT_FALSE(m.MmqHolds(At(kBuf, kOff), 64, 4, &scratch));
  const absl::Status s = m.CheckNotDead(Reader(graph::OpKind::kAdd, "blk.3.ffn_out"), At(kBuf, kOff + 8), 4);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("blk.3.ffn_out"), std::string::npos) << s;
  m.Invalidate(At(kBuf, kOff), kLen);
  EXPECT_FALSE(m.HasDead());
  EXPECT_FALSE(m.DqHolds(At(kBuf, kOff), 64, 4, &scratch));
}

TEST(ActivationMemosDead, ReadOfADeadRangeIsRefusedNamingTheReader) {
  ActivationMemos m;
  int scratch = 0;
  EXPECT_FALSE(m.HasDead());
  m.MarkInt8Only(At(kBuf, kOff), 64, 4, &scratch);
  EXPECT_TRUE(m.HasDead());
  // The producer's MMQ layout is what the scratch now holds.
  EXPECT_TRUE(m.MmqHolds(At(kBuf, kOff), 64, 4, &scratch));

  const graph::Node reader = Reader(graph::OpKind::kAdd, "blk.3.ffn_residual");
  absl::Status st = m.CheckNotDead(reader, At(kBuf, kOff + 512), 4);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("cuda Add blk.3.ffn_residual: dead-write guard"), std::string::npos)
      << st;
  EXPECT_NE(st.message().find("MINFER_NO_SKIP_WRITE=1"), std::string::npos) << st;

  const graph::Node mm = Reader(graph::OpKind::kMatMul, "blk.3.ffn_down");
  st = m.CheckNotDead(mm, At(kBuf, kOff - 8), 16);  // overlaps its first bytes
  EXPECT_NE(st.message().find("cuda MatMul blk.3.ffn_down"), std::string::npos) << st;

  // Reads beside it, or of another buffer, are fine.
  EXPECT_TRUE(m.CheckNotDead(reader, At(kBuf, 0), kOff).ok());
  EXPECT_TRUE(m.CheckNotDead(reader, At(kBuf, kOff + kLen), 64).ok());
  EXPECT_TRUE(m.CheckNotDead(reader, At(kBuf + 1, kOff), kLen).ok());
}

TEST(ActivationMemosDead, AWriteMakesTheRangeLiveAndDropsItsMmqMemo) {
  ActivationMemos m;
  int scratch = 0;
  const graph::Node reader = Reader(graph::OpKind::kRmsNorm, "blk.4.attn_norm");
  m.MarkInt8Only(At(kBuf, kOff), 64, 4, &scratch);
  m.MarkInt8Only(At(kBuf, 8192), 64, 4, &scratch);
  m.Invalidate(At(kBuf, kOff), kLen);  // e.g. a node reusing the buffer writes it
  EXPECT_TRUE(m.CheckNotDead(reader, At(kBuf, kOff), kLen).ok());
  // The other dead range stays dead, and the MMQ memo (pointing at it) too.
  EXPECT_TRUE(m.HasDead());
  EXPECT_FALSE(m.CheckNotDead(reader, At(kBuf, 8192), 4).ok());
  EXPECT_TRUE(m.MmqHolds(At(kBuf, 8192), 64, 4, &scratch));
  m.Invalidate(At(kBuf, 8192), kLen);
  EXPECT_FALSE(m.HasDead());
  EXPECT_FALSE(m.MmqHolds(At(kBuf, 8192), 64, 4, &scratch));
}

TEST(ActivationMemosWindow, EndWindowForgetsEverything) {
  ActivationMemos m;
  int s1 = 0, s2 = 0;
  m.SetQ8(At(kBuf, 0), 512);
  m.SetMmq(At(kBuf, kOff), 64, 4, &s1);
  m.MarkInt8Only(At(kBuf + 1, 0), 64, 4, &s2);
  m.EndWindow();
  EXPECT_FALSE(m.HasQ8(At(kBuf, 0)));
  EXPECT_FALSE(m.MmqHolds(At(kBuf, kOff), 64, 4, &s1));
  EXPECT_FALSE(m.MmqHolds(At(kBuf + 1, 0), 64, 4, &s2));
  EXPECT_FALSE(m.HasDead());
  EXPECT_TRUE(m.CheckNotDead(Reader(graph::OpKind::kAdd, "x"), At(kBuf + 1, 0), 1024).ok());
}

}  // namespace
}  // namespace minfer::cuda
