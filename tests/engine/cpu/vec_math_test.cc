#include "engine/cpu/vec_math.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace minfer::cpu {
namespace {

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// |got - exact| in units of the spacing of floats at the exact value (for
// results in the subnormal range, the subnormal spacing 2^-149).
double UlpError(float got, double exact) {
  if (std::isinf(exact) || exact > std::numeric_limits<float>::max()) {
    return std::isinf(got) && got > 0 ? 0.0 : 1e9;
  }
  int e;
  std::frexp(exact, &e);  // exact = m * 2^e, m in [0.5, 1)
  const double ulp = std::ldexp(1.0, std::max(e - 24, -149));
  return std::fabs(static_cast<double>(got) - exact) / ulp;
}

// The bound this file certifies for the AVX2 exp (simd_avx2.h states it).
constexpr double kMaxUlp = 2.0;

TEST(VecMathTest, Avx2ExpWithinTwoUlpOverTheFloatRange) {
  if (!HasAvx2Math()) GTEST_SKIP() << "no AVX2 on this CPU";
  // Every 31st bit pattern of both signs among the inputs with finite
  // nonzero results (~72 million values: every exponent, ~270,000 mantissas
  // per binade), plus a dense sweep of [-1, 1]; checked in chunks.
  double worst = 0, worst_std = 0, worst_vs_std = 0;
  float worst_x = 0;
  size_t checked = 0;
  std::vector<float> x, y, ys;
  auto check = [&] {
    y.resize(x.size());
    ys.resize(x.size());
    ExpF32(x.data(), y.data(), static_cast<int64_t>(x.size()), MathImpl::kAvx2);
    ExpF32(x.data(), ys.data(), static_cast<int64_t>(x.size()), MathImpl::kScalar);
    for (size_t i = 0; i < x.size(); ++i) {
      const double exact = std::exp(static_cast<double>(x[i]));
      const double err = UlpError(y[i], exact);
      if (err > worst) {
        worst = err;
        worst_x = x[i];
      }
      worst_std = std::max(worst_std, UlpError(ys[i], exact));
      worst_vs_std = std::max(worst_vs_std, UlpError(y[i], static_cast<double>(ys[i])));
    }
    checked += x.size();
    x.clear();
  };
  for (uint64_t u = 0; u < 0x80000000ull; u += 31) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      const float v = FromBits(static_cast<uint32_t>(u) | sign);
      if (v > -104.0f && v < 89.0f) x.push_back(v);
    }
    if (x.size() >= (1 << 20)) check();
  }
  for (int i = -1000000; i <= 1000000; ++i) x.push_back(i * 1e-6f);
  check();
  std::printf("AVX2 exp: %zu inputs, max error %.3f ulp (at x = %.9g); std::exp %.3f ulp; "
              "AVX2 vs std::exp %.3f ulp\n",
              checked, worst, worst_x, worst_std, worst_vs_std);
  EXPECT_LE(worst, kMaxUlp) << "at x = " << worst_x;
  EXPECT_LE(worst_vs_std, kMaxUlp + 1.0);
}

TEST(VecMathTest, ExpSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {-inf, inf,     nan,     0.0f,     -0.0f,   -104.0f, -200.0f,
                                89.0f, 88.72f, 88.73f, -87.33f, -103.9f, 1.0f};
  for (MathImpl impl : {MathImpl::kScalar, MathImpl::kAvx2}) {
    if (impl == MathImpl::kAvx2 && !HasAvx2Math()) continue;
    std::vector<float> y(x.size());
    ExpF32(x.data(), y.data(), static_cast<int64_t>(x.size()), impl);
    EXPECT_EQ(y[0], 0.0f);
    EXPECT_EQ(y[1], inf);
    EXPECT_TRUE(std::isnan(y[2]));
    EXPECT_EQ(y[3], 1.0f);
    EXPECT_EQ(y[4], 1.0f);
    EXPECT_EQ(y[5], 0.0f);  // e^-104 is below half the smallest subnormal
    EXPECT_EQ(y[6], 0.0f);
    EXPECT_EQ(y[7], inf);
    EXPECT_LE(UlpError(y[8], std::exp(static_cast<double>(x[8]))), kMaxUlp);  // near FLT_MAX
    EXPECT_EQ(y[9], inf);
    EXPECT_LE(UlpError(y[10], std::exp(static_cast<double>(x[10]))), kMaxUlp);  // near FLT_MIN
    EXPECT_LE(UlpError(y[11], std::exp(static_cast<double>(x[11]))), kMaxUlp);  // subnormal
    EXPECT_LE(UlpError(y[12], std::exp(static_cast<double>(x[12]))), kMaxUlp);
  }
}

// An element's value must not depend on where it sits in the row (vector
// body or tail) or on the row's length: threads split rows anywhere.
TEST(VecMathTest, ValuesIndependentOfPositionAndLength) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  std::vector<float> g(37), u(37);
  for (auto& v : g) v = nd(rng);
  for (auto& v : u) v = nd(rng);
  for (MathImpl impl : {MathImpl::kScalar, MathImpl::kAvx2}) {
    if (impl == MathImpl::kAvx2 && !HasAvx2Math()) continue;
    std::vector<float> full(37), full_e(37);
    SwiGluF32Row(g.data(), u.data(), full.data(), 37, impl);
    ExpF32(g.data(), full_e.data(), 37, impl);
    for (int off = 0; off < 37; ++off) {
      for (int len = 1; off + len <= 37; len += 3) {
        std::vector<float> part(len), part_e(len);
        SwiGluF32Row(g.data() + off, u.data() + off, part.data(), len, impl);
        ExpF32(g.data() + off, part_e.data(), len, impl);
        for (int i = 0; i < len; ++i) {
          ASSERT_EQ(part[i], full[off + i]) << off << " " << len << " " << i;
          ASSERT_EQ(part_e[i], full_e[off + i]);
        }
      }
    }
    // And against the definition.
    for (int i = 0; i < 37; ++i) {
      const double want = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
      EXPECT_NEAR(full[i], want, 4e-7 * std::fabs(want) + 1e-30) << i;
    }
  }
}

TEST(VecMathTest, ExpInPlace) {
  std::vector<float> x = {0.5f, -3.0f, 10.0f};
  ExpF32(x.data(), x.data(), 3);
  EXPECT_NEAR(x[0], std::exp(0.5), 1e-6);
  EXPECT_NEAR(x[1], std::exp(-3.0), 1e-7);
  EXPECT_NEAR(x[2], std::exp(10.0), 1e-2);
}

}  // namespace
}  // namespace minfer::cpu
