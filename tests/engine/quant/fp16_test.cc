#include "engine/quant/fp16.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace minfer {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Independent definition of a half's value (finite halves only), in double.
double HalfValue(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int e = (h >> 10) & 31;
  const int m = h & 1023;
  if (e == 0) return sign * std::ldexp(m, -24);
  return sign * std::ldexp(1024 + m, e - 25);
}

// All finite non-negative halves in increasing order (0x0000 .. 0x7BFF).
const std::vector<double>& PositiveHalves() {
  static const std::vector<double> v = [] {
    std::vector<double> r;
    for (uint32_t h = 0; h <= 0x7BFF; ++h) r.push_back(HalfValue(static_cast<uint16_t>(h)));
    return r;
  }();
  return v;
}

// Round-to-nearest-even into half by searching the value table: a reference
// that shares no code with the bit-twiddling implementation.
uint16_t ReferenceToHalf(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7C00;  // halfway to 65536 and beyond: inf
  const auto& t = PositiveHalves();
  const size_t hi = std::lower_bound(t.begin(), t.end(), a) - t.begin();
  if (hi < t.size() && t[hi] == a) return sign | static_cast<uint16_t>(hi);
  if (hi >= t.size()) return sign | 0x7BFF;  // in (65504, 65520): nearer 65504
  const size_t lo = hi - 1;  // t[lo] < a < t[hi]
  const double dl = a - t[lo], dh = t[hi] - a;
  size_t pick = dl < dh ? lo : (dh < dl ? hi : ((lo & 1) == 0 ? lo : hi));
  return sign | static_cast<uint16_t>(pick);
}

TEST(Fp16Test, EveryHalfDecodesToItsValue) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const float f = Fp16ToFloat(h);
    const int e = (h >> 10) & 31;
    const int m = h & 1023;
    if (e == 31 && m == 0) {
      EXPECT_TRUE(std::isinf(f)) << std::hex << h;
      EXPECT_EQ(std::signbit(f), (h >> 15) != 0);
    } else if (e == 31) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << h;
      // Quiet bit set, payload kept in the top mantissa bits, sign kept.
      EXPECT_EQ(Bits(f), (static_cast<uint32_t>(h & 0x8000) << 16) | 0x7FC00000u |
                             (static_cast<uint32_t>(m) << 13))
          << std::hex << h;
    } else {
      EXPECT_EQ(static_cast<double>(f), HalfValue(h)) << std::hex << h;
      EXPECT_EQ(std::signbit(f), (h >> 15) != 0) << std::hex << h;
    }
  }
}

TEST(Fp16Test, EveryHalfRoundTrips) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const bool nan = ((h >> 10) & 31) == 31 && (h & 1023) != 0;
    // A NaN comes back quiet (bit 9 set), everything else unchanged.
    EXPECT_EQ(FloatToFp16(Fp16ToFloat(h)), nan ? (h | 0x0200) : h) << std::hex << h;
  }
}

TEST(Fp16Test, RoundingMatchesTableReferenceOnSpecialValues) {
  std::vector<float> cases = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f,
                              -65520.0f, 1e10f, std::numeric_limits<float>::infinity(),
                              std::ldexp(1.0f, -14), std::ldexp(1.0f, -24),
                              std::ldexp(1.0f, -25),                    // tie to 0
                              std::ldexp(1.5f, -25),                    // -> 2^-24
                              std::ldexp(3.0f, -25),                    // tie -> 2^-23 (even)
                              std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26),
                              1.0f + std::ldexp(1.0f, -11),             // tie -> 1 (even)
                              1.0f + 3 * std::ldexp(1.0f, -11),         // tie -> up (even)
                              std::numeric_limits<float>::denorm_min(),
                              std::numeric_limits<float>::min(), 1e-30f, 0.1f, 3.14159265f};
  for (float f : cases) {
    EXPECT_EQ(FloatToFp16(f), ReferenceToHalf(f)) << f;
    EXPECT_EQ(FloatToFp16(-f), ReferenceToHalf(-f)) << -f;
  }
  // Spot values written out.
  EXPECT_EQ(FloatToFp16(1.0f), 0x3C00);
  EXPECT_EQ(FloatToFp16(-2.0f), 0xC000);
  EXPECT_EQ(FloatToFp16(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToFp16(65520.0f), 0x7C00);
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(FloatToFp16(std::ldexp(3.0f, -25)), 0x0002);
  EXPECT_EQ(FloatToFp16(FromBits(0x7F800001u)), 0x7E00);  // NaN stays NaN
  EXPECT_EQ(FloatToFp16(FromBits(0xFFC02000u)), 0xFE01);
}

TEST(Fp16Test, RoundingMatchesTableReferenceOnRandomFloats) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<uint32_t> bits;
  std::uniform_real_distribution<float> exp(-30.0f, 17.0f);
  for (int i = 0; i < 300000; ++i) {
    // Half the samples uniform in bit space, half spread over the half range.
    float f = (i & 1) ? FromBits(bits(rng)) : std::ldexp(1.0f + (bits(rng) >> 9) * 0x1p-23f,
                                                          static_cast<int>(exp(rng)));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToFp16(f), ReferenceToHalf(f)) << std::hexfloat << f;
  }
}

// Reference bf16 rounding from doubles: the two neighbours of f and ties to
// even, written without the bias trick.
uint16_t ReferenceToBf16(float f) {
  const uint32_t u = Bits(f);
  const uint16_t down = static_cast<uint16_t>(u >> 16);
  if ((u & 0xFFFF) == 0) return down;
  const uint16_t up = down + 1;  // next bf16 away from zero (may become inf)
  const double lo = Bf16ToFloat(down), hi = std::isinf(Bf16ToFloat(up))
                                                ? std::copysign(std::ldexp(1.0, 128), f)
                                                : Bf16ToFloat(up);
  const double dl = std::fabs(f - lo), dh = std::fabs(hi - f);
  if (dl < dh) return down;
  if (dh < dl) return up;
  return (down & 1) == 0 ? down : up;
}

TEST(Bf16Test, RoundsToNearestEvenAndKeepsNaN) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t b = static_cast<uint16_t>(i);
    const float f = Bf16ToFloat(b);
    EXPECT_EQ(Bits(f), static_cast<uint32_t>(b) << 16);
    const bool nan = (b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0;
    EXPECT_EQ(FloatToBf16(f), nan ? (b | 0x40) : b) << std::hex << b;
  }
  EXPECT_EQ(FloatToBf16(FromBits(0x3F808000u)), 0x3F80);  // tie -> even
  EXPECT_EQ(FloatToBf16(FromBits(0x3F818000u)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(FloatToBf16(FromBits(0x3F808001u)), 0x3F81);
  EXPECT_EQ(FloatToBf16(FromBits(0x7F7FFFFFu)), 0x7F80);  // FLT_MAX -> inf
  EXPECT_EQ(FloatToBf16(FromBits(0x7F800001u)), 0x7FC0);  // sNaN -> qNaN, not inf
  EXPECT_EQ(FloatToBf16(FromBits(0xFF800001u)), 0xFFC0);
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 300000; ++i) {
    const float f = FromBits(bits(rng));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToBf16(f), ReferenceToBf16(f)) << std::hexfloat << f;
  }
}

// F16C's vcvtps2ph is an independent IEEE implementation: the scalar code
// must agree with it on a dense sweep of all float bit patterns.
TEST(Fp16RowTest, ScalarAgreesWithF16CHardwareOnFloatSweep) {
  if (!CpuIsaSupported(CpuIsa::kAvx2)) GTEST_SKIP() << "no F16C";
  constexpr int64_t kChunk = 1 << 16;
  std::vector<float> f(kChunk);
  std::vector<uint16_t> hw(kChunk);
  uint64_t pattern = 0;
  while (pattern < (1ull << 32)) {
    for (int64_t i = 0; i < kChunk; ++i, pattern += 241) {
      f[i] = FromBits(static_cast<uint32_t>(pattern));
    }
    FloatToFp16Row(CpuIsa::kAvx2, f.data(), hw.data(), kChunk);
    for (int64_t i = 0; i < kChunk; ++i) {
      ASSERT_EQ(FloatToFp16(f[i]), hw[i]) << std::hex << Bits(f[i]);
    }
  }
}

TEST(Fp16RowTest, EveryIsaMatchesScalarBitForBit) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<uint32_t> bits;
  std::normal_distribution<float> normal(0.0f, 1000.0f);
  for (CpuIsa isa : kAllCpuIsas) {
    if (!CpuIsaSupported(isa)) continue;
    for (int64_t n : {0, 1, 7, 8, 15, 16, 17, 100, 1027}) {
      std::vector<float> f(n);
      std::vector<uint16_t> h(n);
      for (int64_t i = 0; i < n; ++i) {
        f[i] = (i % 3 == 0) ? FromBits(bits(rng)) : normal(rng);  // incl. NaN/inf
        h[i] = static_cast<uint16_t>(bits(rng));
      }
      std::vector<uint16_t> out16(n);
      std::vector<float> out32(n);
      FloatToFp16Row(isa, f.data(), out16.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out16[i], FloatToFp16(f[i])) << CpuIsaName(isa);
      FloatToBf16Row(isa, f.data(), out16.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out16[i], FloatToBf16(f[i])) << CpuIsaName(isa);
      Fp16ToFloatRow(isa, h.data(), out32.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(Bits(out32[i]), Bits(Fp16ToFloat(h[i]))) << CpuIsaName(isa) << std::hex << h[i];
      }
      Bf16ToFloatRow(isa, h.data(), out32.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(Bits(out32[i]), Bits(Bf16ToFloat(h[i]))) << CpuIsaName(isa);
      }
    }
  }
}

}  // namespace
}  // namespace minfer
