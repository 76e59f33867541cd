// Elementwise CPU kernels against plain double-precision loops, including
// the split-independence that decode == prefill relies on; FusedFFN's rows
// against MatMul then SwiGLU.
#include <cmath>
#include <random>
#include <vector>

#include "engine/base/thread_pool.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/vec_math.h"
#include "engine/graph/weight.h"
#include "engine/quant/quantize.h"
#include "gtest/gtest.h"

namespace minfer::cpu {
namespace {

std::vector<float> Random(int64_t n, uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

// FusedFFN over several tokens (a GPU decode batch's op, run here when a
// graph falls back to the CPU): every token's row equals MatMul of gate and
// up, then SwiGLU, bit for bit.
TEST(FusedFfnTest, TokensEqualMatMulsThenSwiGlu) {
  ThreadPool pool(2);
  const int64_t k = 256, n = 96;
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ8_0, GgmlType::kF32}) {
    std::vector<std::vector<uint8_t>> bytes(2);
    graph::Weight w[2];
    for (int i = 0; i < 2; ++i) {
      const auto f = Random(k * n, 10 + i, 0.05f);
      bytes[i].resize(RowBytes(type, k) * n);
      for (int64_t r = 0; r < n; ++r) {
        ASSERT_TRUE(QuantizeRow(type, f.data() + r * k, bytes[i].data() + r * RowBytes(type, k), k).ok());
      }
      w[i].name = i ? "up" : "gate";
      w[i].type = type;
      w[i].dims = {k, n};
      w[i].data = bytes[i].data();
      w[i].nbytes = bytes[i].size();
    }
    for (int64_t nt : {1, 3, 17}) {
      const auto x = Random(k * nt, 7);
      std::vector<uint8_t> scratch;
      std::vector<float> fused(n * nt), g(n * nt), u(n * nt), want(n * nt);
      ASSERT_TRUE(FusedFfn(pool, w[0], w[1], x.data(), nt, fused.data(), scratch).ok());
      ASSERT_TRUE(MatMul(pool, w[0], x.data(), nt, g.data(), scratch).ok());
      ASSERT_TRUE(MatMul(pool, w[1], x.data(), nt, u.data(), scratch).ok());
      SwiGluF32(pool, g.data(), u.data(), want.data(), n * nt);
      EXPECT_EQ(fused, want) << GgmlTypeName(type) << " nt " << nt;
    }
  }
}

TEST(ElementwiseTest, AddAndMulWithRepeatingOperand) {
  ThreadPool pool(2);
  for (int64_t n : {int64_t{5}, int64_t{896}, int64_t{896 * 40}, int64_t{896 * 40 + 3}}) {
    for (int64_t nb : {n, int64_t{896}, int64_t{7}}) {
      if (nb > n) continue;
      const auto a = Random(n, 1), b = Random(nb, 2);
      std::vector<float> add(n), mul(n);
      AddF32(pool, a.data(), b.data(), nb, add.data(), n);
      MulF32(pool, a.data(), b.data(), nb, mul.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(add[i], a[i] + b[i % nb]) << n << " " << nb << " " << i;
        ASSERT_EQ(mul[i], a[i] * b[i % nb]) << n << " " << nb << " " << i;
      }
    }
  }
}

TEST(ElementwiseTest, RmsNormMatchesDoubleReference) {
  ThreadPool pool(2);
  const int64_t ne0 = 896, rows = 37;
  const auto x = Random(ne0 * rows, 3, 3.0f), w = Random(ne0, 4);
  std::vector<float> y(ne0 * rows), y1(ne0);
  RmsNormRows(pool, x.data(), w.data(), 1e-6f, y.data(), ne0, rows);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < ne0; ++i) ss += static_cast<double>(x[r * ne0 + i]) * x[r * ne0 + i];
    const double inv = 1.0 / std::sqrt(ss / ne0 + 1e-6);
    for (int64_t i = 0; i < ne0; ++i) {
      const double want = x[r * ne0 + i] * inv * w[i];
      ASSERT_NEAR(y[r * ne0 + i], want, 3e-7 * std::fabs(want) + 1e-30) << r << " " << i;
    }
    // One row alone (decode) gives the same bits as within the batch.
    RmsNormRows(pool, x.data() + r * ne0, w.data(), 1e-6f, y1.data(), ne0, 1);
    for (int64_t i = 0; i < ne0; ++i) ASSERT_EQ(y1[i], y[r * ne0 + i]);
  }
  // Both implementations agree closely (only the double sum's order differs).
  for (MathImpl impl : {MathImpl::kScalar, MathImpl::kAvx2}) {
    if (impl == MathImpl::kAvx2 && !HasAvx2Math()) continue;
    std::vector<float> z(ne0);
    RmsNormF32Row(x.data(), nullptr, 1e-6f, z.data(), ne0, impl);
    RmsNormF32Row(x.data(), w.data(), 1e-6f, y1.data(), ne0, impl);
    for (int64_t i = 0; i < ne0; ++i) {
      ASSERT_NEAR(y1[i], y[i], 1e-7 * std::fabs(y[i]));
      ASSERT_NEAR(z[i] * w[i], y[i], 3e-7 * std::fabs(y[i]));
    }
  }
}

// The prefill SwiGLU op is split among threads anywhere; the fused decode FFN
// computes one token's row at once. Both must agree bit for bit.
TEST(ElementwiseTest, SwiGluIndependentOfSplit) {
  ThreadPool pool(2);
  const int64_t n_ff = 4864, nt = 9;
  const auto g = Random(n_ff * nt, 5, 3.0f), u = Random(n_ff * nt, 6);
  std::vector<float> y(n_ff * nt), y1(n_ff);
  SwiGluF32(pool, g.data(), u.data(), y.data(), n_ff * nt);
  for (int64_t t = 0; t < nt; ++t) {
    SwiGluF32Row(g.data() + t * n_ff, u.data() + t * n_ff, y1.data(), n_ff);
    for (int64_t i = 0; i < n_ff; ++i) ASSERT_EQ(y1[i], y[t * n_ff + i]) << t << " " << i;
  }
}

// RoPE against a double loop for both pair layouts, with and without
// frequency factors: pair i turns by pos * base^(-2i/n_rot) / factor_i,
// NeoX over (i, i + n_rot/2), interleaved over (2i, 2i+1); dims past n_rot
// pass through. The kernel rounds the angle to float first, so the bound is
// a few float ulps of the angle (pos <= 300) times the values.
TEST(ElementwiseTest, RopeStylesAndFrequencyFactors) {
  const int64_t hd = 64, heads = 3, nt = 4;
  const std::vector<int32_t> pos = {0, 1, 37, 300};
  const auto x = Random(hd * heads * nt, 7);
  std::vector<float> factors(24);
  for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.0f + 3.5f * i;
  for (auto style : {graph::RopeStyle::kNeoX, graph::RopeStyle::kInterleaved}) {
    for (bool with_factors : {false, true}) {
      const int n_rot = 48;
      std::vector<float> y(x.size());
      RopeF32(x.data(), pos.data(), y.data(), hd, heads, nt, n_rot, style, 500000.0f,
              with_factors ? factors.data() : nullptr);
      for (int64_t t = 0; t < nt; ++t) {
        for (int64_t h = 0; h < heads; ++h) {
          const float* xh = x.data() + (t * heads + h) * hd;
          const float* yh = y.data() + (t * heads + h) * hd;
          for (int i = 0; i < n_rot / 2; ++i) {
            double theta = pos[t] * std::pow(500000.0, -2.0 * i / n_rot);
            if (with_factors) theta /= factors[i];
            const int i0 = style == graph::RopeStyle::kNeoX ? i : 2 * i;
            const int i1 = style == graph::RopeStyle::kNeoX ? i + n_rot / 2 : 2 * i + 1;
            const double want0 = xh[i0] * std::cos(theta) - xh[i1] * std::sin(theta);
            const double want1 = xh[i0] * std::sin(theta) + xh[i1] * std::cos(theta);
            const double tol = 1e-5 * (1 + std::abs(theta)) * (std::abs(xh[i0]) + std::abs(xh[i1]));
            ASSERT_NEAR(yh[i0], want0, tol) << t << " " << h << " " << i;
            ASSERT_NEAR(yh[i1], want1, tol) << t << " " << h << " " << i;
          }
          for (int64_t i = n_rot; i < hd; ++i) ASSERT_EQ(yh[i], xh[i]);
        }
      }
      // The factors change the result (away from position 0).
      if (with_factors) {
        std::vector<float> plain(x.size());
        RopeF32(x.data(), pos.data(), plain.data(), hd, heads, nt, n_rot, style, 500000.0f);
        EXPECT_NE(plain, y);
      }
    }
  }
}

// YaRN (gpt-oss: factor 32 over 4,096 positions, base 150,000, 64 rotated
// dimensions) against the op table in doubles: pairs below the correction
// range keep their angle, pairs above it turn 32 times slower, the ones
// between mix linearly, and cos and sin are scaled by 1 + 0.1 ln 32.
TEST(ElementwiseTest, RopeYarnMatchesTheOpTable) {
  const int64_t hd = 64, heads = 2, nt = 3;
  const std::vector<int32_t> pos = {1, 77, 5000};
  const auto x = Random(hd * heads * nt, 9);
  graph::RopeYarn yarn;
  yarn.freq_scale = 1.0f / 32;
  yarn.ext_factor = 1.0f;
  yarn.n_ctx_orig = 4096;
  std::vector<float> y(x.size());
  RopeF32(x.data(), pos.data(), y.data(), hd, heads, nt, 64, graph::RopeStyle::kNeoX, 150000.0f,
          nullptr, &yarn);
  const double pi = 3.14159265358979323846;
  auto corr = [&](double beta) { return 64 * std::log(4096 / (beta * 2 * pi)) / (2 * std::log(150000.0)); };
  const double lo = std::floor(corr(32)), hi = std::ceil(corr(1));
  EXPECT_EQ(lo, 8);  // as llama.cpp rounds them (the reference model keeps 8.09 / 17.40)
  EXPECT_EQ(hi, 18);
  const double mscale = 1 + 0.1 * std::log(32.0);
  for (int64_t t = 0; t < nt; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* xh = x.data() + (t * heads + h) * hd;
      const float* yh = y.data() + (t * heads + h) * hd;
      for (int i = 0; i < 32; ++i) {
        const double extrap = pos[t] * std::pow(150000.0, -2.0 * i / 64);
        const double ramp = 1 - std::clamp((i - lo) / std::max(0.001, hi - lo), 0.0, 1.0);
        const double theta = extrap / 32 * (1 - ramp) + extrap * ramp;
        const double c = std::cos(theta) * mscale, sn = std::sin(theta) * mscale;
        const double want0 = xh[i] * c - xh[i + 32] * sn, want1 = xh[i] * sn + xh[i + 32] * c;
        const double tol = 2e-5 * (1 + std::abs(theta)) * (std::abs(xh[i]) + std::abs(xh[i + 32]));
        ASSERT_NEAR(yh[i], want0, tol) << t << " " << h << " " << i;
        ASSERT_NEAR(yh[i + 32], want1, tol) << t << " " << h << " " << i;
      }
    }
  }
}

}  // namespace
}  // namespace minfer::cpu
