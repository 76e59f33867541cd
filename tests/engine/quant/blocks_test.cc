// Hand-built blocks with element values worked out by hand from the GGUF
// layouts, plus a per-element reference decoder (written from the layout
// description, one element at a time) checked against DequantizeRow on
// random blocks, and every ISA's dequantizer against the scalar one.
#include "engine/quant/blocks.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/quant/fp16.h"
#include "engine/quant/quantize.h"
#include "gtest/gtest.h"

namespace minfer {
namespace {

constexpr uint16_t kHalfOne = 0x3C00, kHalfHalf = 0x3800, kHalfQuarter = 0x3400;
constexpr uint16_t kHalfMinusOne = 0xBC00, kHalfTwo = 0x4000;

template <class Block>
std::vector<float> Dequant(GgmlType type, const Block& b, int n) {
  std::vector<float> out(n);
  EXPECT_TRUE(DequantizeRow(type, &b, out.data(), n).ok());
  return out;
}

TEST(BlocksTest, Q4_0ElementOrder) {
  BlockQ4_0 b;
  b.d = kHalfHalf;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = Dequant(GgmlType::kQ4_0, b, 32);
  EXPECT_EQ(y[0], -4.0f);   // low nibble 0
  EXPECT_EQ(y[3], -2.5f);   // low nibble 3
  EXPECT_EQ(y[15], 3.5f);   // low nibble 15
  EXPECT_EQ(y[16], 3.5f);   // high nibble of qs[0] = 15
  EXPECT_EQ(y[19], 2.0f);   // high nibble of qs[3] = 12
  EXPECT_EQ(y[31], -4.0f);  // high nibble of qs[15] = 0
}

TEST(BlocksTest, Q4_1ElementOrder) {
  BlockQ4_1 b;
  b.d = kHalfQuarter;
  b.m = kHalfMinusOne;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = Dequant(GgmlType::kQ4_1, b, 32);
  EXPECT_EQ(y[0], -1.0f);
  EXPECT_EQ(y[5], 0.25f);
  EXPECT_EQ(y[15], 2.75f);
  EXPECT_EQ(y[16], 2.75f);
  EXPECT_EQ(y[31], -1.0f);
}

// qh = 0x80F0000F: bits 0-3, 20-23 and 31 set.
constexpr uint8_t kQh5[4] = {0x0F, 0x00, 0xF0, 0x80};

TEST(BlocksTest, Q5_0HighBitsFromLittleEndianQh) {
  BlockQ5_0 b;
  b.d = kHalfOne;
  std::memcpy(b.qh, kQh5, 4);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = Dequant(GgmlType::kQ5_0, b, 32);
  EXPECT_EQ(y[0], 0.0f);     // 0 | 16 - 16
  EXPECT_EQ(y[3], 3.0f);     // 3 | 16 - 16
  EXPECT_EQ(y[4], -12.0f);   // bit 4 clear
  EXPECT_EQ(y[15], -1.0f);
  EXPECT_EQ(y[16], -1.0f);   // 15, bit 16 clear
  EXPECT_EQ(y[20], 11.0f);   // 11 | 16 (bit 20) - 16
  EXPECT_EQ(y[23], 8.0f);
  EXPECT_EQ(y[24], -9.0f);   // 7, bit 24 clear
  EXPECT_EQ(y[31], 0.0f);    // 0 | 16 (bit 31) - 16
}

TEST(BlocksTest, Q5_1HighBitsFromLittleEndianQh) {
  BlockQ5_1 b;
  b.d = kHalfHalf;
  b.m = kHalfTwo;
  std::memcpy(b.qh, kQh5, 4);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = Dequant(GgmlType::kQ5_1, b, 32);
  EXPECT_EQ(y[0], 10.0f);   // q = 16
  EXPECT_EQ(y[4], 4.0f);    // q = 4
  EXPECT_EQ(y[16], 9.5f);   // q = 15
  EXPECT_EQ(y[20], 15.5f);  // q = 27
  EXPECT_EQ(y[31], 10.0f);  // q = 16
}

TEST(BlocksTest, Q8_0) {
  BlockQ8_0 b;
  b.d = kHalfHalf;
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j * 8 - 128);
  const auto y = Dequant(GgmlType::kQ8_0, b, 32);
  EXPECT_EQ(y[0], -64.0f);
  EXPECT_EQ(y[16], 0.0f);
  EXPECT_EQ(y[31], 60.0f);
}

// 12 scale bytes whose decoding was worked out by hand:
// sc = {1, 2, 3, 4, 58, 28, 46, 0}, m = {5, 6, 7, 8, 25, 43, 61, 15}.
constexpr uint8_t kKScales[12] = {0xC1, 0x42, 0x83, 0x04, 0x45, 0x86,
                                  0xC7, 0x08, 0x9A, 0xBC, 0xDE, 0xF0};
constexpr uint8_t kKSc[8] = {1, 2, 3, 4, 58, 28, 46, 0};
constexpr uint8_t kKM[8] = {5, 6, 7, 8, 25, 43, 61, 15};

TEST(BlocksTest, Q4KScaleMinPacking) {
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    Q4KScaleMin(kKScales, j, &sc, &m);
    EXPECT_EQ(sc, kKSc[j]) << j;
    EXPECT_EQ(m, kKM[j]) << j;
  }
  // The packer is the exact inverse (the two top bits of bytes 0-7 are
  // determined by sub-blocks 4-7, so the bytes come back identical).
  uint8_t packed[12];
  PackQ4KScaleMin(kKSc, kKM, packed);
  EXPECT_EQ(std::memcmp(packed, kKScales, 12), 0);
}

TEST(BlocksTest, Q4_KSubBlocksAndNibbles) {
  BlockQ4_K b;
  b.d = kHalfOne;
  b.dmin = kHalfHalf;
  std::memcpy(b.scales, kKScales, 12);
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>(i * 7);
  const auto y = Dequant(GgmlType::kQ4_K, b, 256);
  EXPECT_EQ(y[5], 0.5f);      // sub 0: low nibble of qs[5]=0x23 -> 3; 1*3 - 2.5
  EXPECT_EQ(y[37], 1.0f);     // sub 1: high nibble of qs[5] -> 2; 2*2 - 3
  EXPECT_EQ(y[130], 799.5f);  // sub 4: low nibble of qs[66]=0xCE -> 14; 58*14 - 12.5
  EXPECT_EQ(y[170], -21.5f);  // sub 5: high nibble of qs[74]=0x06 -> 0; -0.5*43
  EXPECT_EQ(y[200], 337.5f);  // sub 6: low nibble of qs[104]=0xD8 -> 8; 46*8 - 30.5
  EXPECT_EQ(y[255], -7.5f);   // sub 7: scale 0; -0.5*15
}

TEST(BlocksTest, Q5_KHighBitsPerSubBlock) {
  BlockQ5_K b;
  b.d = kHalfOne;
  b.dmin = kHalfHalf;
  std::memcpy(b.scales, kKScales, 12);
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>(i * 7);
  std::memset(b.qh, 0xA5, 32);
  b.qh[2] = 0x00;
  b.qh[8] = 0xFF;
  const auto y = Dequant(GgmlType::kQ5_K, b, 256);
  EXPECT_EQ(y[5], 16.5f);      // sub 0, qh[5] bit 0 set: 3+16=19; 19 - 2.5
  EXPECT_EQ(y[37], 1.0f);      // sub 1, qh[5] bit 1 clear
  EXPECT_EQ(y[130], 799.5f);   // sub 4, qh[2] = 0
  EXPECT_EQ(y[170], 426.5f);   // sub 5, qh[10] bit 5 set: 16; 28*16 - 21.5
  EXPECT_EQ(y[200], 1073.5f);  // sub 6, qh[8] bit 6 set: 24; 46*24 - 30.5
  EXPECT_EQ(y[255], -7.5f);    // sub 7, scale 0
}

TEST(BlocksTest, Q6_KHalvesGroupsAndScales) {
  BlockQ6_K b;
  b.d = kHalfHalf;
  for (int i = 0; i < 16; ++i) b.scales[i] = static_cast<int8_t>((i - 8) * 3);
  for (int i = 0; i < 128; ++i) b.ql[i] = static_cast<uint8_t>(i * 13);
  for (int i = 0; i < 64; ++i) b.qh[i] = static_cast<uint8_t>(i * 29 + 7);
  const auto y = Dequant(GgmlType::kQ6_K, b, 256);
  EXPECT_EQ(y[0], -192.0f);   // ql[0] lo 0, qh[0] bits0-1 = 3: q=48 -> 16; .5*-24*16
  EXPECT_EQ(y[45], 207.0f);   // ql[45] lo 9, qh[13] bits2-3 = 0: -23; .5*-18*-23
  EXPECT_EQ(y[77], 132.0f);   // ql[13] hi 10, qh[13] bits4-5 = 0: -22; .5*-12*-22
  EXPECT_EQ(y[127], -4.5f);   // ql[63] hi 3, qh[31] bits6-7 = 2: 35-32=3; .5*-3*3
  EXPECT_EQ(y[150], -3.0f);   // ql[86] lo 14, qh[54] bits0-1 = 1: -2; .5*3*-2
  EXPECT_EQ(y[200], -132.0f); // ql[72] hi 10, qh[40] bits4-5 = 0: -22; .5*12*-22
  EXPECT_EQ(y[235], 198.0f);  // ql[107] hi 6, qh[43] bits6-7 = 3: 22; .5*18*22
  EXPECT_EQ(y[255], -262.5f); // ql[127] hi 7, qh[63] bits6-7 = 0: -25; .5*21*-25
}

// ------------------------------------------------------------------------
// Per-element reference: value of element e of a row, from the layout
// description in blocks.h, one element at a time (same float formulas as
// ggml, so the comparison is exact).

float RefElement(GgmlType type, const uint8_t* row, int e) {
  auto half = [&](const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return Fp16ToFloat(h);
  };
  switch (type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ8_0: {
      const int64_t size = TraitsOf(type).type_size;
      const uint8_t* b = row + (e / 32) * size;
      const int j = e % 32;
      const bool has_min = type == GgmlType::kQ4_1 || type == GgmlType::kQ5_1;
      const float d = half(b);
      if (type == GgmlType::kQ8_0) return static_cast<int8_t>(b[2 + j]) * d;
      const uint8_t* qh = b + (has_min ? 4 : 2);
      const uint8_t* qs = b + size - 16;
      int q = j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4);
      if (type == GgmlType::kQ5_0 || type == GgmlType::kQ5_1) {
        q |= ((qh[j / 8] >> (j % 8)) & 1) << 4;
      }
      if (has_min) return q * d + half(b + 2);
      return (q - (type == GgmlType::kQ4_0 ? 8 : 16)) * d;
    }
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: {
      const bool five = type == GgmlType::kQ5_K;
      const uint8_t* b = row + (e / 256) * (five ? 176 : 144);
      const int k = e % 256, j = k / 32, l = k % 32;
      uint8_t sc, m;
      Q4KScaleMin(b + 4, j, &sc, &m);
      const uint8_t* qs = b + (five ? 48 : 16);
      int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15;
      if (five) q += ((b[16 + l] >> j) & 1) * 16;
      return (half(b) * sc) * q - half(b + 2) * m;
    }
    case GgmlType::kQ6_K: {
      const uint8_t* b = row + (e / 256) * 210;
      const int k = e % 256, h = k / 128, g = (k % 128) / 32, l = k % 32;
      const uint8_t ql = b[64 * h + 32 * (g % 2) + l];
      const uint8_t qh = b[128 + 32 * h + l];
      const int q = ((g < 2 ? ql & 15 : ql >> 4) | (((qh >> (2 * g)) & 3) << 4)) - 32;
      return half(b + 208) * static_cast<int8_t>(b[192 + k / 16]) * q;
    }
    default:
      ADD_FAILURE() << "no reference for " << GgmlTypeName(type);
      return 0;
  }
}

constexpr GgmlType kQuantTypes[] = {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0,
                                    GgmlType::kQ5_1, GgmlType::kQ8_0, GgmlType::kQ4_K,
                                    GgmlType::kQ5_K, GgmlType::kQ6_K};

// Random bytes with the f16 fields replaced by finite values of varied
// magnitude (random bytes would make NaN/inf scales).
std::vector<uint8_t> RandomRow(GgmlType type, int64_t n, std::mt19937& rng) {
  const auto& tr = TraitsOf(type);
  std::vector<uint8_t> row(RowBytes(type, n));
  for (auto& byte : row) byte = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> mag(-8.0f, 4.0f);
  auto put_half = [&](uint8_t* p, bool allow_negative) {
    float v = std::exp2(mag(rng));
    if (allow_negative && (rng() & 1)) v = -v;
    const uint16_t h = FloatToFp16(v);
    std::memcpy(p, &h, 2);
  };
  for (int64_t b = 0; b < n / tr.block_size; ++b) {
    uint8_t* p = row.data() + b * tr.type_size;
    switch (type) {
      case GgmlType::kQ4_1:
      case GgmlType::kQ5_1:
        put_half(p, true);
        put_half(p + 2, true);
        break;
      case GgmlType::kQ4_K:
      case GgmlType::kQ5_K:
        put_half(p, false);
        put_half(p + 2, false);
        break;
      case GgmlType::kQ6_K:
        put_half(p + 208, true);
        break;
      default:
        put_half(p, true);
        break;
    }
  }
  return row;
}

TEST(BlocksTest, DequantizeRowMatchesPerElementReference) {
  std::mt19937 rng(std::random_device{}());
  for (GgmlType type : kQuantTypes) {
    const int64_t n = 4 * 256;
    const auto row = RandomRow(type, n, rng);
    std::vector<float> y(n);
    ASSERT_TRUE(DequantizeRow(type, row.data(), y.data(), n).ok());
    for (int e = 0; e < n; ++e) {
      const float want = RefElement(type, row.data(), e);
      ASSERT_EQ(std::memcmp(&y[e], &want, 4), 0)
          << GgmlTypeName(type) << " element " << e << ": " << y[e] << " vs " << want;
    }
  }
}

TEST(BlocksTest, EveryIsaDequantizesBitIdentically) {
  std::mt19937 rng(std::random_device{}());
  const GgmlType types[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16,
                            GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0,
                            GgmlType::kQ5_1, GgmlType::kQ8_0, GgmlType::kQ4_K,
                            GgmlType::kQ5_K, GgmlType::kQ6_K};
  for (GgmlType type : types) {
    for (int64_t n : {256, 512 + 256, 4864}) {
      std::vector<uint8_t> row;
      if (TraitsOf(type).quantized) {
        row = RandomRow(type, n, rng);
      } else {
        row.resize(RowBytes(type, n));
        for (auto& byte : row) byte = static_cast<uint8_t>(rng());  // incl. NaN/inf
      }
      std::vector<float> ref(n), got(n);
      GetDequantizeRowFn(type, CpuIsa::kScalar)(row.data(), ref.data(), n);
      for (CpuIsa isa : kAllCpuIsas) {
        if (!CpuIsaSupported(isa)) continue;
        std::fill(got.begin(), got.end(), -1.0f);
        GetDequantizeRowFn(type, isa)(row.data(), got.data(), n);
        ASSERT_EQ(std::memcmp(ref.data(), got.data(), n * sizeof(float)), 0)
            << GgmlTypeName(type) << " " << CpuIsaName(isa) << " n=" << n;
      }
    }
  }
}

TEST(BlocksTest, DequantizeRowRejectsBadArguments) {
  float out[64];
  uint8_t in[256] = {};
  EXPECT_EQ(DequantizeRow(GgmlType::kQ4_0, in, out, 33).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DequantizeRow(GgmlType::kQ4_K, in, out, 32).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DequantizeRow(GgmlType::kQ2_K, in, out, 256).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(DequantizeRow(GgmlType::kQ8_0, in, out, 0).ok());
  EXPECT_FALSE(CanDequantize(GgmlType::kIQ4_XS));
  EXPECT_TRUE(CanDequantize(GgmlType::kBF16));
}

}  // namespace
}  // namespace minfer
