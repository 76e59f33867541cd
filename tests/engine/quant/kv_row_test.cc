// The quantized KV row layout (engine/quant/kv_row.h): a row holds exactly
// the codes and scales of the block quantizers (ggml's Q8_0 through
// QuantizeRow, fp8.h's QuantizeBlockFp8Kv), codes first, scales after, and
// dequantizes to the block dequantizers' values.
#include "engine/quant/kv_row.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "engine/quant/blocks.h"
#include "engine/quant/fp16.h"
#include "engine/quant/fp8.h"
#include "engine/quant/ggml_types.h"
#include "engine/quant/quantize.h"
#include "gtest/gtest.h"

namespace minfer {
namespace {

std::vector<float> RandomRow(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = g(rng) * (i % 7 == 0 ? 30.0f : 1.0f);
  x[5] = 0.0f;
  if (n >= 64) {
    for (int j = 32; j < 64; ++j) x[j] = 0.0f;  // an all-zero block: scale 0
  }
  return x;
}

TEST(KvRowTest, Q8RowIsGgmlQ8BlocksCodesThenScales) {
  for (int64_t n : {32, 64, 96, 512, 1024}) {
    const std::vector<float> x = RandomRow(n, static_cast<uint32_t>(n));
    std::vector<BlockQ8_0> blocks(n / 32);
    ASSERT_TRUE(QuantizeRow(GgmlType::kQ8_0, x.data(), blocks.data(), n).ok());
    std::vector<uint8_t> row(KvQuantRowBytes(n), 0xCD);
    QuantizeKvRow(KvQuant::kQ8_0, x.data(), row.data(), n);
    ASSERT_EQ(static_cast<int64_t>(row.size()), n / 32 * 34);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(static_cast<int8_t>(row[i]), blocks[i / 32].qs[i % 32]) << "n " << n << " code " << i;
    }
    for (int64_t b = 0; b < n / 32; ++b) {
      const uint16_t d = static_cast<uint16_t>(row[n + 2 * b] | (row[n + 2 * b + 1] << 8));
      ASSERT_EQ(d, blocks[b].d) << "n " << n << " scale " << b;
      EXPECT_EQ(KvRowScaleBits(row.data(), n, 32 * b + 31), d);
    }
    // Dequantized: ggml's dequantizer of the same blocks.
    std::vector<float> want(n), got(n);
    ASSERT_TRUE(DequantizeRow(GgmlType::kQ8_0, blocks.data(), want.data(), n).ok());
    DequantizeKvRow(KvQuant::kQ8_0, row.data(), got.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], want[i]) << "n " << n << " i " << i;
  }
}

TEST(KvRowTest, Fp8RowIsFp8BlocksCodesThenScales) {
  for (int64_t n : {32, 64, 160, 512}) {
    const std::vector<float> x = RandomRow(n, 100 + static_cast<uint32_t>(n));
    std::vector<uint8_t> row(KvQuantRowBytes(n), 0xCD);
    QuantizeKvRow(KvQuant::kFp8, x.data(), row.data(), n);
    std::vector<float> got(n);
    DequantizeKvRow(KvQuant::kFp8, row.data(), got.data(), n);
    for (int64_t b = 0; b < n / 32; ++b) {
      uint16_t d = 0xFFFF;
      uint8_t qs[32];
      QuantizeBlockFp8Kv(x.data() + 32 * b, &d, qs);
      ASSERT_EQ(KvRowScaleBits(row.data(), n, 32 * b), d) << "n " << n << " block " << b;
      for (int j = 0; j < 32; ++j) {
        ASSERT_EQ(row[32 * b + j], qs[j]) << "n " << n << " code " << 32 * b + j;
        // e4m3 x f16 is exact in f32 (fp8.h): the product in double.
        const double want = static_cast<double>(E4M3ToFloat(qs[j])) * Fp16ToFloat(d);
        ASSERT_EQ(static_cast<double>(got[32 * b + j]), want);
      }
    }
  }
}

TEST(KvRowTest, ScalesFollowTheCodes) {
  EXPECT_EQ(KvQuantRowBytes(512), 544);
  EXPECT_EQ(KvQuantScaleOffset(512), 512);
  // A row of one block: the scale's two bytes at 32, 33 (little-endian).
  std::vector<float> x(32, 0.0f);
  x[3] = 127.0f;  // d = 1 exactly, code 127 at byte 3
  std::vector<uint8_t> row(34, 0);
  QuantizeKvRow(KvQuant::kQ8_0, x.data(), row.data(), 32);
  EXPECT_EQ(row[3], 127);
  EXPECT_EQ(row[32] | (row[33] << 8), FloatToFp16(1.0f));
}

}  // namespace
}  // namespace minfer
