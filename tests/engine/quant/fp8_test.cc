// FP8 E4M3 and the fp8 KV block (engine/quant/fp8.h) against references
// written here from the format's definition: the value of each of the 256
// codes in double, and rounding by brute force (the nearest finite code,
// ties to the even code, beyond 448 saturating, NaN kept) over every f16
// value, every midpoint between neighbouring codes and its two neighbours,
// and random floats of every magnitude.
#include "engine/quant/fp8.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "engine/quant/fp16.h"
#include "engine/quant/kv_row.h"
#include "gtest/gtest.h"

namespace minfer {
namespace {

// The value of code c from the definition (NaN for S.1111.111).
double Value(int c) {
  const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? m / 8.0 * std::ldexp(1.0, -6) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
  return s ? -mag : mag;
}

// Brute-force rounding: the nearest of the positive finite codes 0..0x7E to
// |x| (ties: the even code), the sign of x, 448 beyond.
int Reference(float x) {
  if (std::isnan(x)) return (std::signbit(x) ? 0x80 : 0) | 0x7F;
  const double a = std::fabs(static_cast<double>(x));
  int best = 0;
  double best_err = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= 0x7E; ++c) {
    const double err = std::fabs(Value(c) - a);
    if (err < best_err || (err == best_err && c % 2 == 0)) {
      best = c;
      best_err = err;
    }
  }
  return (std::signbit(x) ? 0x80 : 0) | best;
}

TEST(Fp8Test, EveryCodeDecodesToItsValue) {
  for (int c = 0; c < 256; ++c) {
    const double want = Value(c);
    const float got = E4M3ToFloat(static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << c;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << c;
      EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << c;  // -0 stays -0
    }
  }
  EXPECT_EQ(E4M3ToFloat(kE4M3Max), 448.0f);
  EXPECT_EQ(E4M3ToFloat(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(E4M3ToFloat(0x08), std::ldexp(1.0f, -6));  // smallest normal
}

// The identity the CUDA attention kernels decode with (cuda/kernels/
// common.cuh e4m3_over_256): a code's sign to f16 bit 15 and its other 7
// bits shifted up 7 are f16 bits of exactly the code's value / 256, for
// every code but NaN (which the kernel selects separately); and scaling a
// block by (q / 256) * (256 d) gives E4M3ToFloat(q) * d bit for bit.
TEST(Fp8Test, HalfBitsIdentityOfTheGpuDecode) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> half_bits(0, 0x7BFF);  // finite positive halves
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;  // NaN
    const uint16_t h = static_cast<uint16_t>(((c & 0x80) << 8) | ((c & 0x7F) << 7));
    const float v = Fp16ToFloat(h);
    EXPECT_EQ(v * 256.0f, E4M3ToFloat(static_cast<uint8_t>(c))) << c;
    EXPECT_EQ(std::signbit(v), (c & 0x80) != 0) << c;
    for (int i = 0; i < 64; ++i) {
      const float d = Fp16ToFloat(static_cast<uint16_t>(half_bits(rng)));
      EXPECT_EQ(v * (d * 256.0f), E4M3ToFloat(static_cast<uint8_t>(c)) * d) << c << " " << d;
    }
  }
}

TEST(Fp8Test, RoundsToNearestEvenAndSaturates) {
  std::vector<float> xs;
  // Every f16 value (covers the whole e4m3 range densely, and far beyond).
  for (uint32_t h = 0; h < 65536; ++h) xs.push_back(Fp16ToFloat(static_cast<uint16_t>(h)));
  // Every midpoint between neighbouring codes, and the floats beside it.
  for (int c = 0; c < 0x7E; ++c) {
    const float mid = static_cast<float>((Value(c) + Value(c + 1)) / 2);
    for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      xs.push_back(v);
      xs.push_back(-v);
    }
  }
  // Random floats of every magnitude, and the special values.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> ex(-20, 12);
  for (int i = 0; i < 200000; ++i) {
    xs.push_back((rng() & 1 ? -1.0f : 1.0f) * std::ldexp(mant(rng), ex(rng)));
  }
  for (float v : {0.0f, -0.0f, 448.0f, 464.0f, 1e30f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min(),
                  std::numeric_limits<float>::quiet_NaN()}) {
    xs.push_back(v);
  }
  int64_t bad = 0;
  for (float x : xs) {
    const int want = Reference(x), got = FloatToE4M3(x);
    if (want != got && bad++ < 10) ADD_FAILURE() << "x=" << x << " want " << want << " got " << got;
  }
  EXPECT_EQ(bad, 0) << "of " << xs.size();
}

// A block's round trip: no finite value saturates (the scale is rounded
// up), each value within fp8.h's bound, d the smallest half >= absmax / 448;
// zero blocks give zeros; bytes depend only on the inputs.
TEST(Fp8Test, KvBlocksRoundTripWithinTheBound) {
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (float scale : {1e-6f, 1e-3f, 1.0f, 30.0f, 5000.0f}) {
    const int64_t n = 32 * 64;
    std::vector<float> x(n), y(n);
    for (float& v : x) v = g(rng) * scale;
    for (int64_t i = 0; i < n; i += 97) x[i] *= 40.0f;  // outliers, as K rows have
    std::vector<uint8_t> row(KvQuantRowBytes(n));
    QuantizeKvRow(KvQuant::kFp8, x.data(), row.data(), n);
    DequantizeKvRow(KvQuant::kFp8, row.data(), y.data(), n);
    for (int64_t blk = 0; blk < n / 32; ++blk) {
      double amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(static_cast<double>(x[blk * 32 + j])));
      const uint16_t db = KvRowScaleBits(row.data(), n, blk * 32);
      const double d = Fp16ToFloat(db);
      EXPECT_GE(d * 448.0, amax) << "block " << blk;
      EXPECT_LT(static_cast<double>(Fp16ToFloat(db - 1)) * 448.0, amax) << "d not the smallest";
      for (int j = 0; j < 32; ++j) {
        const double xv = x[blk * 32 + j], yv = y[blk * 32 + j];
        EXPECT_NE(KvRowCode(row.data(), blk * 32 + j) & 0x7F, 0x7F) << "NaN code";
        const double bound = std::ldexp(std::fabs(xv), -4) + std::ldexp(d, -10) + std::ldexp(std::fabs(xv), -22);
        ASSERT_LE(std::fabs(yv - xv), bound) << "scale " << scale << " i " << blk * 32 + j;
      }
    }
  }
  std::vector<float> zeros(64, 0.0f), out(64, 1.0f);
  std::vector<uint8_t> row(KvQuantRowBytes(64));
  QuantizeKvRow(KvQuant::kFp8, zeros.data(), row.data(), 64);
  DequantizeKvRow(KvQuant::kFp8, row.data(), out.data(), 64);
  for (float v : out) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(KvRowScaleBits(row.data(), 64, 0), 0);
}

}  // namespace
}  // namespace minfer
