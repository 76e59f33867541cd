// Where the dequantizing GEMMs find a weight row's bytes (cuda/kernels/
// dq_pieces.cuh), on the host: every chunk's pieces lie inside their block
// and cover the half's bytes once; the offsets are linear in the half, which
// the register-form GEMM's copies rely on to walk a row chunk by chunk
// (PieceStart, PieceStep, PieceAdvance: the walk must land on each chunk's
// PieceStart, from any first chunk); and the byte permutes that turn Q6_K's
// int8 scales and Q4_K's 6-bit scales into f16 (dq_wgmma_impl.cuh) give the
// values they stand for (host PRMT: kv_codes.h, checked against the PTX
// definition in kv_codes_test). CPU; runs in CI.
#include "cuda/kernels/dq_pieces.cuh"

#include <cstdint>
#include <set>

#include "cuda/kernels/kv_codes.h"
#include "engine/quant/fp16.h"
#include "gtest/gtest.h"

namespace minfer::cuda {
namespace {

template <GgmlType T>
void CheckPieces() {
  using X = DqPieces<T>;
  SCOPED_TRACE(GgmlTypeName(T));
  for (int h = 0; h < 2; ++h) {
    std::set<int> bytes;
    for (int q = 0; q < X::kPieces; ++q) {
      const int at = X::Src(h, q);
      EXPECT_EQ(at % 16, 0) << "piece " << q;
      EXPECT_GE(at, 0);
      EXPECT_LE(at + 16, X::kBlockBytes) << "piece " << q << " half " << h;
      for (int b = 0; b < 16; ++b) EXPECT_TRUE(bytes.insert(at + b).second) << "overlap at " << at + b;
      EXPECT_EQ(at, X::Src(0, q) + h * PieceStep<T>(q)) << "not linear in the half";
    }
    // Each half's pieces are its row bytes in the shared-memory stride.
    EXPECT_EQ(static_cast<int>(bytes.size()), 16 * X::kPieces);
    EXPECT_LE(16 * X::kPieces, X::kRowBytes);
    EXPECT_EQ(X::kRowBytes % 32, 16);  // an odd multiple of 16: 8 rows, 8 bank groups
  }
  // The walk: from any first chunk c0, advancing once per chunk lands on
  // every later chunk's start.
  for (int q = 0; q < X::kPieces; ++q) {
    for (int c0 = 0; c0 < 5; ++c0) {
      int64_t off = PieceStart<T>(q, c0);
      const int step = PieceStep<T>(q);
      for (int c = c0; c < c0 + 40; ++c) {
        ASSERT_EQ(off, PieceStart<T>(q, c)) << "piece " << q << " from chunk " << c0;
        off += PieceAdvance<T>(c & 1, step);
      }
    }
  }
}

TEST(DqPiecesTest, PiecesLieInTheBlockAndWalkChunkByChunk) {
  CheckPieces<GgmlType::kQ4_K>();
  CheckPieces<GgmlType::kQ6_K>();
  CheckPieces<GgmlType::kQ5_K>();
  CheckPieces<GgmlType::kQ8_0>();
  // Q4_K: the header, then the half's 64 code bytes.
  EXPECT_EQ(DqPieces<GgmlType::kQ4_K>::Src(0, 0), 0);
  EXPECT_EQ(DqPieces<GgmlType::kQ4_K>::Src(1, 1), 16 + 64);
}

// (1024 + (q + 128)) - 1152 is q for every int8 q, with the bytes placed by
// the byte permute Q6kScales4 uses, and the f16 of 1152 is 0x6480; the two
// selector forms of the Q4_K scale permute give the same bytes.
TEST(DqPiecesTest, ScaleBytePermutesGiveTheirValues) {
  EXPECT_EQ(Fp16ToFloat(0x6480), 1152.0f);
  EXPECT_EQ(Fp16ToFloat(0x6400), 1024.0f);
  for (int v = 0; v < 256; ++v) {
    // A word of four int8 scales: v and three neighbours.
    const uint32_t word = static_cast<uint32_t>(v) | (static_cast<uint32_t>((v + 1) & 0xFF) << 8) |
                          (static_cast<uint32_t>((v + 77) & 0xFF) << 16) |
                          (static_cast<uint32_t>((v + 200) & 0xFF) << 24);
    const uint32_t u = word ^ 0x80808080u;
    const uint32_t lo = KvBytePerm(0x64646464u, u, 0x0504), hi = KvBytePerm(0x64646464u, u, 0x0706);
    const uint16_t halves[4] = {static_cast<uint16_t>(lo), static_cast<uint16_t>(lo >> 16),
                                static_cast<uint16_t>(hi), static_cast<uint16_t>(hi >> 16)};
    for (int i = 0; i < 4; ++i) {
      const int8_t q = static_cast<int8_t>((word >> (8 * i)) & 0xFF);
      EXPECT_EQ(Fp16ToFloat(halves[i]) - 1152.0f, static_cast<float>(q)) << "byte " << i;
    }
    // Q4_K: the scale pair in the low bytes, both selector forms.
    EXPECT_EQ(KvBytePerm(0x64646464u, word, 0x0504), KvBytePerm(word, 0x64646464u, 0x4140));
    EXPECT_EQ(KvBytePerm(0x64646464u, word, 0x0706), KvBytePerm(word, 0x64646464u, 0x4342));
  }
}

}  // namespace
}  // namespace minfer::cuda
