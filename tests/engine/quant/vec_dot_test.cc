// Dot products against a float64 reference computed from the dequantized
// weights and dequantized activations; bit-identity across ISAs and between
// vec_dot and mat_dot (the contract in vec_dot.h).
#include "engine/quant/vec_dot.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/quant/fp16.h"
#include "engine/quant/quantize.h"
#include "gtest/gtest.h"

namespace minfer {
namespace {

constexpr GgmlType kQ8ATypes[] = {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0,
                                  GgmlType::kQ5_1, GgmlType::kQ8_0, GgmlType::kQ4_K,
                                  GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kMXFP4};
constexpr int64_t kLengths[] = {32, 256, 896, 4864, 3584};

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::vector<float> Gaussian(int64_t n, std::mt19937& rng, float sigma = 1.0f) {
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> x(n);
  for (auto& v : x) v = normal(rng);
  return x;
}

// Random block bytes with sane f16 fields (cf. blocks_test.cc): every code
// pattern occurs, including Q8_0's -128.
std::vector<uint8_t> RandomBlocks(GgmlType type, int64_t n, std::mt19937& rng) {
  const auto& tr = TraitsOf(type);
  std::vector<uint8_t> row(RowBytes(type, n));
  for (auto& b : row) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> mag(-6.0f, 2.0f);
  auto put = [&](uint8_t* p, bool neg) {
    float v = std::exp2(mag(rng));
    if (neg && (rng() & 1)) v = -v;
    const uint16_t h = FloatToFp16(v);
    std::memcpy(p, &h, 2);
  };
  for (int64_t b = 0; b < n / tr.block_size; ++b) {
    uint8_t* p = row.data() + b * tr.type_size;
    switch (type) {
      case GgmlType::kQ4_1:
      case GgmlType::kQ5_1: put(p, true), put(p + 2, true); break;
      case GgmlType::kQ4_K:
      case GgmlType::kQ5_K: put(p, false), put(p + 2, false); break;
      case GgmlType::kQ6_K: put(p + 208, true); break;
      case GgmlType::kMXFP4: p[0] = static_cast<uint8_t>(120 + rng() % 16); break;
      default: put(p, true); break;
    }
  }
  return row;
}

struct Reference {
  double dot;
  double magnitude;  // sum of |terms|, the scale of the float folding error
};

// Exact-ish reference: float64 dot of the dequantized weights with the
// dequantized activations (qs * d). The magnitude adds the min terms
// |m * x| separately, since the kernels fold them as their own products.
Reference RefDot(GgmlType type, const uint8_t* w, const std::vector<BlockQ8A>& a, int64_t n) {
  std::vector<float> wf(n);
  EXPECT_TRUE(DequantizeRow(type, w, wf.data(), n).ok());
  Reference r{0, 0};
  for (int64_t i = 0; i < n; ++i) {
    const double x = static_cast<double>(a[i / 32].qs[i % 32]) * a[i / 32].d;
    r.dot += static_cast<double>(wf[i]) * x;
    r.magnitude += std::fabs(static_cast<double>(wf[i]) * x);
  }
  // Min terms: Q4_1/Q5_1 m * s per block, Q4_K/Q5_K dmin * m_j * s_j.
  const auto& tr = TraitsOf(type);
  for (int64_t b = 0; b < n / 32; ++b) {
    double m = 0;
    if (type == GgmlType::kQ4_1 || type == GgmlType::kQ5_1) {
      uint16_t h;
      std::memcpy(&h, w + b * tr.type_size + 2, 2);
      m = Fp16ToFloat(h);
    } else if (type == GgmlType::kQ4_K || type == GgmlType::kQ5_K) {
      const uint8_t* blk = w + (b / 8) * tr.type_size;
      uint16_t h;
      std::memcpy(&h, blk + 2, 2);
      uint8_t sc, mm;
      Q4KScaleMin(blk + 4, static_cast<int>(b % 8), &sc, &mm);
      m = static_cast<double>(Fp16ToFloat(h)) * mm;
    }
    r.magnitude += 2 * std::fabs(m * a[b].s);
  }
  return r;
}

// Bound on the float folding error relative to the magnitude: the single
// accumulator sees at most n/16 fmas (two per 32 elements for types with
// mins or two scales per block), each rounding by at most 2^-24 of the
// running magnitude, plus the roundings of the scale products (d * sc,
// * d_a, s) and of the dequantized reference weights.
double FoldTolerance(int64_t n) { return std::ldexp(1.0, -24) * (n / 16.0 + 8); }

TEST(QuantizeRowQ8ATest, MatchesDefinitionOnEveryIsa) {
  std::mt19937 rng(std::random_device{}());
  const int64_t n = 4864;
  auto x = Gaussian(n, rng, 3.0f);
  for (int i = 0; i < 32; ++i) x[64 + i] = 0.0f;                   // an all-zero block
  for (int i = 0; i < 32; ++i) x[96 + i] = 1e-39f * (i - 16);      // below kQ8AMinScale
  for (int i = 0; i < 32; ++i) x[128 + i] = i * 8.0f - 127.0f;  // d = 1 exactly
  std::vector<BlockQ8A> ref(n / 32), got(n / 32);
  QuantizeRowQ8A(CpuIsa::kScalar, x.data(), ref.data(), n);
  for (int64_t b = 0; b < n / 32; ++b) {
    const BlockQ8A& q = ref[b];
    float amax = 0;
    int sum = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * b + j]));
    if (b == 3) {
      EXPECT_EQ(q.d, 0.0f);  // tiny block flushed to zero
    } else {
      EXPECT_EQ(q.d, amax / 127.0f) << b;
    }
    for (int j = 0; j < 32; ++j) {
      sum += q.qs[j];
      ASSERT_GE(q.qs[j], -127);
      if (q.d != 0) {
        const double exact = x[32 * b + j] / static_cast<double>(q.d);
        EXPECT_LE(std::fabs(q.qs[j] - exact), 0.5 + 1e-4) << b << " " << j;
      } else {
        EXPECT_EQ(q.qs[j], 0);
      }
    }
    EXPECT_EQ(q.s, q.d * static_cast<float>(sum));
  }
  // The exact grid block: codes are the grid itself.
  EXPECT_EQ(ref[4].d, 1.0f);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(ref[4].qs[j], j * 8 - 127);
  for (CpuIsa isa : kAllCpuIsas) {
    if (!CpuIsaSupported(isa)) continue;
    QuantizeRowQ8A(isa, x.data(), got.data(), n);
    ASSERT_EQ(std::memcmp(ref.data(), got.data(), sizeof(BlockQ8A) * ref.size()), 0)
        << CpuIsaName(isa);
  }
}

class Q8ADotTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(Q8ADotTest, MatchesFloat64ReferenceAndIsBitIdenticalAcrossIsas) {
  const GgmlType type = GetParam();
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const Q8AKernels* scalar = GetQ8AKernels(type, CpuIsa::kScalar);
  ASSERT_NE(scalar, nullptr);
  for (int64_t n : kLengths) {
    if (n % TraitsOf(type).block_size != 0) continue;
    for (int variant = 0; variant < 3; ++variant) {
      // Weights: quantized Gaussian data, quantized data with an offset
      // (exercises the mins), and raw random block bytes (every code).
      std::vector<uint8_t> w;
      if (variant == 2) {
        w = RandomBlocks(type, n, rng);
      } else {
        auto wf = Gaussian(n, rng, 0.05f);
        if (variant == 1) for (auto& v : wf) v += 0.03f;
        w.resize(RowBytes(type, n));
        ASSERT_TRUE(QuantizeRow(type, wf.data(), w.data(), n).ok());
      }
      auto xf = Gaussian(n, rng, 2.0f);
      std::vector<BlockQ8A> a(n / 32);
      QuantizeRowQ8A(CpuIsa::kScalar, xf.data(), a.data(), n);

      const Reference ref = RefDot(type, w.data(), a, n);
      const float s = scalar->vec_dot(w.data(), a.data(), n);
      const double tol = FoldTolerance(n) * ref.magnitude;
      EXPECT_LE(std::fabs(s - ref.dot), tol)
          << GgmlTypeName(type) << " n=" << n << " variant " << variant << " dot " << s
          << " ref " << ref.dot << " (error/magnitude "
          << std::fabs(s - ref.dot) / ref.magnitude << ")";
      for (CpuIsa isa : kAllCpuIsas) {
        const Q8AKernels* k = GetQ8AKernels(type, isa);
        if (!CpuIsaSupported(isa)) {
          EXPECT_EQ(k, nullptr);
          continue;
        }
        ASSERT_NE(k, nullptr);
        const float v = k->vec_dot(w.data(), a.data(), n);
        EXPECT_EQ(Bits(v), Bits(s)) << GgmlTypeName(type) << " " << CpuIsaName(isa)
                                    << " n=" << n << ": " << v << " vs scalar " << s;
      }
    }
  }
}

// mat_dot over awkward shapes (tile remainders, strides with padding)
// equals vec_dot for every pair, bit for bit, on every ISA.
TEST_P(Q8ADotTest, MatDotEqualsVecDotForEveryPair) {
  const GgmlType type = GetParam();
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int64_t n = TraitsOf(type).block_size == 256 ? 512 : 96;
  const int max_rows = 9, max_cols = 7;
  const int64_t w_stride = RowBytes(type, n) + 5;  // deliberately unaligned
  const int64_t a_stride = n / 32 + 1;
  std::vector<uint8_t> w(w_stride * max_rows);
  for (int r = 0; r < max_rows; ++r) {
    const auto row = RandomBlocks(type, n, rng);
    std::memcpy(w.data() + r * w_stride, row.data(), row.size());
  }
  std::vector<BlockQ8A> a(a_stride * max_cols);
  for (int c = 0; c < max_cols; ++c) {
    const auto x = Gaussian(n, rng);
    QuantizeRowQ8A(CpuIsa::kScalar, x.data(), a.data() + c * a_stride, n);
  }
  for (CpuIsa isa : kAllCpuIsas) {
    const Q8AKernels* k = GetQ8AKernels(type, isa);
    if (k == nullptr) continue;
    for (int nrows : {1, 3, 4, 5, 8, 9}) {
      for (int ncols : {1, 2, 3, 4, 5, 7}) {
        const int64_t out_stride = nrows + 3;
        std::vector<float> out(out_stride * ncols, NAN);
        k->mat_dot(w.data(), w_stride, a.data(), a_stride, out.data(), out_stride, nrows,
                   ncols, n);
        for (int c = 0; c < ncols; ++c) {
          for (int r = 0; r < nrows; ++r) {
            const float want = GetQ8AKernels(type, CpuIsa::kScalar)
                                   ->vec_dot(w.data() + r * w_stride, a.data() + c * a_stride, n);
            ASSERT_EQ(Bits(out[c * out_stride + r]), Bits(want))
                << CpuIsaName(isa) << " " << nrows << "x" << ncols << " r" << r << " c" << c;
          }
          for (int r = nrows; r < out_stride; ++r) {
            ASSERT_TRUE(std::isnan(out[c * out_stride + r])) << "wrote outside the tile";
          }
        }
      }
    }
  }
}

// Shapes that cross the kernels' internal blocking: more than one scratch
// chunk of units along n, more than one 64-column accumulator group,
// several 8-row tiles plus leftover rows, and the 1-2 column (decode) and
// wider (prefill) paths.
TEST_P(Q8ADotTest, MatDotCrossesChunksAndColumnGroups) {
  const GgmlType type = GetParam();
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int64_t n = TraitsOf(type).block_size == 256 ? 4864 : 3584;
  const int nrows = 19, max_cols = 70;
  const int64_t w_stride = RowBytes(type, n);
  const int64_t a_stride = n / 32;
  std::vector<uint8_t> w(w_stride * nrows);
  for (int r = 0; r < nrows; ++r) {
    const auto row = RandomBlocks(type, n, rng);
    std::memcpy(w.data() + r * w_stride, row.data(), row.size());
  }
  std::vector<BlockQ8A> a(a_stride * max_cols);
  const auto x = Gaussian(n * max_cols, rng);
  QuantizeRowQ8A(CpuIsa::kScalar, x.data(), a.data(), n * max_cols);
  const Q8AKernels* scalar = GetQ8AKernels(type, CpuIsa::kScalar);
  std::vector<float> want(static_cast<size_t>(nrows) * max_cols);
  for (int c = 0; c < max_cols; ++c) {
    for (int r = 0; r < nrows; ++r) {
      want[c * nrows + r] = scalar->vec_dot(w.data() + r * w_stride, a.data() + c * a_stride, n);
    }
  }
  for (CpuIsa isa : kAllCpuIsas) {
    const Q8AKernels* k = GetQ8AKernels(type, isa);
    if (k == nullptr) continue;
    for (int ncols : {1, 2, 3, 9, max_cols}) {
      std::vector<float> out(static_cast<size_t>(nrows) * ncols, NAN);
      k->mat_dot(w.data(), w_stride, a.data(), a_stride, out.data(), nrows, nrows, ncols, n);
      for (int c = 0; c < ncols; ++c) {
        for (int r = 0; r < nrows; ++r) {
          ASSERT_EQ(Bits(out[c * nrows + r]), Bits(want[c * nrows + r]))
              << CpuIsaName(isa) << " ncols " << ncols << " r" << r << " c" << c;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, Q8ADotTest, ::testing::ValuesIn(kQ8ATypes),
                         [](const ::testing::TestParamInfo<GgmlType>& info) {
                           return std::string(GgmlTypeName(info.param));
                         });

TEST(Q8ADotTest, HandComputedQ4_0Dot) {
  // One Q4_0 block, d = 0.5, codes j | (15-j) << 4 (weights j-8 and 7-j),
  // against activations with d = 0.25. With qs[i] = 1:
  //   0.5 * 0.25 * (sum_{j<16}(j-8) + sum_{j<16}(7-j)) = 0.125 * (-8 - 8) = -2.
  // With qs[i] = i - 16:
  //   sum_{j<16}(j-8)(j-16) = 1240 - 2880 + 2048 = 408,
  //   sum_{j<16}(7-j) j = 840 - 1240 = -400  ->  0.125 * 8 = 1.
  BlockQ4_0 w;
  w.d = 0x3800;
  for (int j = 0; j < 16; ++j) w.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  BlockQ8A a;
  a.d = 0.25f;
  int sum = 0;
  for (int i = 0; i < 32; ++i) a.qs[i] = 1, sum += 1;
  a.s = a.d * sum;
  for (CpuIsa isa : kAllCpuIsas) {
    if (!CpuIsaSupported(isa)) continue;
    EXPECT_EQ(GetQ8AKernels(GgmlType::kQ4_0, isa)->vec_dot(&w, &a, 32), -2.0f);
  }
  for (int i = 0; i < 32; ++i) a.qs[i] = static_cast<int8_t>(i - 16);
  for (CpuIsa isa : kAllCpuIsas) {
    if (!CpuIsaSupported(isa)) continue;
    EXPECT_EQ(GetQ8AKernels(GgmlType::kQ4_0, isa)->vec_dot(&w, &a, 32), 1.0f)
        << CpuIsaName(isa);
  }
}

TEST(Q8ADotTest, UnsupportedTypesHaveNoKernels) {
  EXPECT_EQ(GetQ8AKernels(GgmlType::kF32), nullptr);
  EXPECT_EQ(GetQ8AKernels(GgmlType::kQ2_K), nullptr);
  EXPECT_EQ(GetF32Kernels(GgmlType::kQ4_0), nullptr);
}

TEST(F32DotTest, MatchesFloat64ReferenceAndIsBitIdenticalAcrossIsas) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16}) {
    for (int64_t n : {0, 1, 7, 8, 31, 32, 33, 896, 901, 4864}) {
      const auto wf = Gaussian(n, rng);
      const auto x = Gaussian(n, rng);
      std::vector<uint8_t> w(RowBytes(type, n) + 1);
      ASSERT_TRUE(QuantizeRow(type, wf.data(), w.data(), n).ok());
      std::vector<float> wd(n);
      ASSERT_TRUE(DequantizeRow(type, w.data(), wd.data(), n).ok());
      double ref = 0, mag = 0;
      for (int64_t i = 0; i < n; ++i) {
        ref += static_cast<double>(wd[i]) * x[i];
        mag += std::fabs(static_cast<double>(wd[i]) * x[i]);
      }
      const float s = GetF32Kernels(type, CpuIsa::kScalar)->vec_dot(w.data(), x.data(), n);
      EXPECT_LE(std::fabs(s - ref), std::ldexp(mag, -24) * (n / 32.0 + 8))
          << GgmlTypeName(type) << " n=" << n;
      for (CpuIsa isa : kAllCpuIsas) {
        const F32Kernels* k = GetF32Kernels(type, isa);
        if (k == nullptr) continue;
        EXPECT_EQ(Bits(k->vec_dot(w.data(), x.data(), n)), Bits(s))
            << GgmlTypeName(type) << " " << CpuIsaName(isa) << " n=" << n;
        // mat_dot: 3 rows x 2 columns of the same data equals vec_dot.
        if (n > 0) {
          const int64_t ws = RowBytes(type, n);
          std::vector<uint8_t> w3(ws * 3);
          for (int r = 0; r < 3; ++r) std::memcpy(w3.data() + r * ws, w.data(), ws);
          std::vector<float> x2(2 * n);
          std::memcpy(x2.data(), x.data(), n * 4);
          std::memcpy(x2.data() + n, x.data(), n * 4);
          float out[6];
          k->mat_dot(w3.data(), ws, x2.data(), n, out, 3, 3, 2, n);
          for (float o : out) EXPECT_EQ(Bits(o), Bits(s));
        }
      }
    }
  }
}

}  // namespace
}  // namespace minfer
