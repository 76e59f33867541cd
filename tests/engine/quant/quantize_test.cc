// Quantize -> dequantize error within the bounds stated in quantize.h, on
// random data (fresh seeds, printed on failure) and on the awkward cases:
// constant rows, zeros, huge and tiny magnitudes, one outlier per block.
#include "engine/quant/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "engine/quant/blocks.h"
#include "engine/quant/fp16.h"
#include "gtest/gtest.h"

namespace minfer {
namespace {

constexpr double kEpsH = 1.0 / 1024;  // f16 directed-rounding step (2^-10)

struct Row {
  std::string name;
  std::vector<float> x;
};

std::vector<Row> TestRows(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_scale(-3.0f, 3.0f);
  std::vector<Row> rows;
  auto gen = [&](const std::string& name, const std::function<float(int64_t)>& f) {
    Row r{name, std::vector<float>(n)};
    for (int64_t i = 0; i < n; ++i) r.x[i] = f(i);
    rows.push_back(std::move(r));
  };
  gen("gaussian", [&](int64_t) { return normal(rng); });
  std::vector<float> block_scale(n / 32 + 1);
  for (auto& s : block_scale) s = std::pow(10.0f, log_scale(rng));
  gen("gaussian_varying_scale", [&](int64_t i) { return normal(rng) * block_scale[i / 32]; });
  gen("positive_offset", [&](int64_t) { return 5.0f + normal(rng); });
  gen("negative_only", [&](int64_t) { return -std::fabs(normal(rng)) - 0.5f; });
  gen("constant_positive", [](int64_t) { return 0.7f; });
  gen("constant_negative", [](int64_t) { return -3.2f; });
  gen("zeros", [](int64_t) { return 0.0f; });
  gen("huge", [&](int64_t) { return 3e4f * std::tanh(normal(rng)); });
  gen("tiny", [&](int64_t) { return 1e-6f * normal(rng); });
  gen("very_tiny", [&](int64_t) { return 1e-30f * normal(rng); });
  gen("one_outlier_per_block", [&](int64_t i) {
    return (i % 32 == 7) ? 100.0f * normal(rng) : normal(rng);
  });
  gen("sparse", [&](int64_t i) { return (i % 5 == 0) ? normal(rng) : 0.0f; });
  return rows;
}

double Slack(double a) { return std::ldexp(a, -20) + std::ldexp(1.0, -24); }

float HalfAt(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return Fp16ToFloat(h);
}

// Checks one block (`bs` values x / dequantized y, block bytes `blk`)
// against the bound quantize.h states for `type`. Returns "" or a failure.
std::string CheckBlock(GgmlType type, const float* x, const float* y, const uint8_t* blk,
                       int bs) {
  double amax = 0, mn = x[0], mx = x[0], max_err = 0, sse = 0;
  for (int i = 0; i < bs; ++i) {
    amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
    mn = std::min(mn, static_cast<double>(x[i]));
    mx = std::max(mx, static_cast<double>(x[i]));
    const double e = std::fabs(static_cast<double>(x[i]) - y[i]);
    max_err = std::max(max_err, e);
    sse += e * e;
  }
  const double rmse = std::sqrt(sse / bs);
  const double t = Slack(amax);
  char buf[256];
  auto fail = [&](const char* what, double got, double bound) {
    std::snprintf(buf, sizeof(buf), "%s %.9g > bound %.9g (amax %.6g)", what, got, bound, amax);
    return std::string(buf);
  };
  switch (type) {
    case GgmlType::kQ8_0: {
      const double d = HalfAt(blk);
      if (d > amax / 127 * (1 + kEpsH) + std::ldexp(1.0, -24)) return fail("d", d, amax / 127);
      if (max_err > d / 2 + t) return fail("max err", max_err, d / 2 + t);
      return "";
    }
    case GgmlType::kQ4_0:
    case GgmlType::kQ5_0: {
      const double levels = type == GgmlType::kQ4_0 ? 8 : 16;
      const double max_bound = amax / levels * (1 + kEpsH) + std::ldexp(1.0, -24) + t;
      const double rms_bound = amax / (2 * levels - 2) * (1 + kEpsH) + std::ldexp(1.0, -24) + t;
      if (max_err > max_bound) return fail("max err", max_err, max_bound);
      if (rmse > rms_bound) return fail("rmse", rmse, rms_bound);
      return "";
    }
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_1: {
      const double nq = type == GgmlType::kQ4_1 ? 15 : 31;
      const double d = HalfAt(blk);
      const double d_bound =
          (mx - mn) / nq * (1 + kEpsH) + kEpsH * amax / nq + std::ldexp(1.0, -23);
      if (d > d_bound) return fail("d", d, d_bound);
      if (max_err > d / 2 + t) return fail("max err", max_err, d / 2 + t);
      return "";
    }
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: {
      double r = 0, m = 0;
      for (int j = 0; j < 8; ++j) {
        double smn = 0, smx = x[32 * j];
        for (int i = 32 * j; i < 32 * j + 32; ++i) {
          smn = std::min(smn, static_cast<double>(x[i]));
          smx = std::max(smx, static_cast<double>(x[i]));
        }
        r = std::max(r, smx - smn);
        m = std::max(m, -smn);
      }
      const double k = type == GgmlType::kQ4_K ? 1.0 / 30 + 1.0 / 1890 : 1.0 / 62 + 1.0 / 3906;
      const double bound = (r + m / 63) * k * (1 + 2 * kEpsH) + t;
      if (rmse > bound) return fail("rmse", rmse, bound);
      return "";
    }
    case GgmlType::kMXFP4: {
      // d = 2^(floor(log2 amax) - 3), so amax / d is in [8, 16): values up
      // to 12 d round to the nearest of the table (gaps at most 4 d, error
      // at most 2 d), values above 12 d clip to it.
      const double d = std::ldexp(1.0, static_cast<int>(blk[0]) - 128);
      if (amax > 0 && d != std::ldexp(1.0, static_cast<int>(std::floor(std::log2(amax))) - 3)) {
        return fail("d", d, amax / 8);
      }
      const double bound = std::max(2 * d, amax - 12 * d) + t;
      if (max_err > bound) return fail("max err", max_err, bound);
      return "";
    }
    case GgmlType::kQ6_K: {
      const double bound = amax / 62 * (1 + 1.0 / 127) * (1 + 2 * kEpsH) + t;
      if (rmse > bound) return fail("rmse", rmse, bound);
      return "";
    }
    case GgmlType::kF16:
      for (int i = 0; i < bs; ++i) {
        const double a = std::fabs(x[i]);
        const double bound = a >= std::ldexp(1.0, -14) ? std::ldexp(a, -11) : std::ldexp(1.0, -25);
        if (std::fabs(x[i] - static_cast<double>(y[i])) > bound) return fail("f16 err", a, bound);
      }
      return "";
    case GgmlType::kBF16:
      for (int i = 0; i < bs; ++i) {
        const double a = std::fabs(x[i]);
        if (std::fabs(x[i] - static_cast<double>(y[i])) > std::ldexp(a, -8)) {
          return fail("bf16 err", a, std::ldexp(a, -8));
        }
      }
      return "";
    default:
      return "no bound";
  }
}

constexpr GgmlType kTypes[] = {GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ4_0,
                               GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                               GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ5_K,
                               GgmlType::kQ6_K, GgmlType::kMXFP4};

int64_t BoundBlock(GgmlType t) {
  // The unit a bound is stated for: a block, or a super-block for K-quants.
  return TraitsOf(t).quantized ? TraitsOf(t).block_size : 32;
}

TEST(QuantizeTest, ErrorWithinStatedBounds) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t n = 4864;  // 19 super-blocks, 152 blocks
  for (const Row& row : TestRows(n, seed)) {
    for (GgmlType type : kTypes) {
      std::vector<uint8_t> q(RowBytes(type, n));
      std::vector<float> y(n);
      ASSERT_TRUE(QuantizeRow(type, row.x.data(), q.data(), n).ok());
      ASSERT_TRUE(DequantizeRow(type, q.data(), y.data(), n).ok());
      const int64_t bs = BoundBlock(type);
      const int64_t bytes_per_unit = RowBytes(type, bs);
      for (int64_t b = 0; b < n / bs; ++b) {
        const std::string err = CheckBlock(type, row.x.data() + b * bs, y.data() + b * bs,
                                           q.data() + b * bytes_per_unit, static_cast<int>(bs));
        ASSERT_EQ(err, "") << GgmlTypeName(type) << " row " << row.name << " block " << b;
      }
    }
  }
}

TEST(QuantizeTest, DeterministicAndExactWhereRepresentable) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t n = 1024;
  const auto rows = TestRows(n, seed);
  for (GgmlType type : kTypes) {
    std::vector<uint8_t> a(RowBytes(type, n)), b(RowBytes(type, n));
    ASSERT_TRUE(QuantizeRow(type, rows[0].x.data(), a.data(), n).ok());
    ASSERT_TRUE(QuantizeRow(type, rows[0].x.data(), b.data(), n).ok());
    EXPECT_EQ(a, b) << GgmlTypeName(type);
    // Zeros stay exactly zero for every type.
    std::vector<float> zeros(n, 0.0f), y(n, 1.0f);
    ASSERT_TRUE(QuantizeRow(type, zeros.data(), a.data(), n).ok());
    ASSERT_TRUE(DequantizeRow(type, a.data(), y.data(), n).ok());
    for (float v : y) ASSERT_EQ(v, 0.0f) << GgmlTypeName(type);
  }
  // Values on a Q8_0 grid (d = 0.5, codes -127..127) come back exactly.
  std::vector<float> grid(256), y(256);
  for (int i = 0; i < 256; ++i) grid[i] = 0.5f * static_cast<float>((i * 37) % 255 - 127);
  for (int b = 0; b < 8; ++b) grid[32 * b] = 63.5f;  // pin each block's absmax
  std::vector<uint8_t> q(RowBytes(GgmlType::kQ8_0, 256));
  ASSERT_TRUE(QuantizeRow(GgmlType::kQ8_0, grid.data(), q.data(), 256).ok());
  ASSERT_TRUE(DequantizeRow(GgmlType::kQ8_0, q.data(), y.data(), 256).ok());
  EXPECT_EQ(grid, y);
  // Exact halves survive F16 unchanged.
  for (int i = 0; i < 256; ++i) grid[i] = Fp16ToFloat(static_cast<uint16_t>(i * 97));
  q.resize(RowBytes(GgmlType::kF16, 256));
  ASSERT_TRUE(QuantizeRow(GgmlType::kF16, grid.data(), q.data(), 256).ok());
  ASSERT_TRUE(DequantizeRow(GgmlType::kF16, q.data(), y.data(), 256).ok());
  EXPECT_EQ(grid, y);
}

// Typical quality on N(0, 1) data: RMSE / sigma for each type. These are
// regression guards measured on this implementation (about 5% headroom),
// far below the worst-case bounds; a quantizer change that makes any of
// them worse should be a conscious decision.
TEST(QuantizeTest, TypicalRmseOnGaussianData) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t n = 256 * 512;
  std::vector<float> x(n), y(n);
  for (auto& v : x) v = normal(rng);
  struct Expect {
    GgmlType type;
    double max_rel_rmse;
  };
  const Expect expects[] = {
      {GgmlType::kQ4_0, 0.0900}, {GgmlType::kQ4_1, 0.0820}, {GgmlType::kQ5_0, 0.0440},
      {GgmlType::kQ5_1, 0.0400}, {GgmlType::kQ8_0, 0.00560}, {GgmlType::kQ4_K, 0.0765},
      {GgmlType::kQ5_K, 0.0386}, {GgmlType::kQ6_K, 0.0182}, {GgmlType::kF16, 0.00022},
      {GgmlType::kBF16, 0.00176}, {GgmlType::kMXFP4, 0.120}};
  for (const Expect& e : expects) {
    std::vector<uint8_t> q(RowBytes(e.type, n));
    ASSERT_TRUE(QuantizeRow(e.type, x.data(), q.data(), n).ok());
    ASSERT_TRUE(DequantizeRow(e.type, q.data(), y.data(), n).ok());
    double sse = 0;
    for (int64_t i = 0; i < n; ++i) sse += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    const double rel = std::sqrt(sse / n);
    std::printf("%-5s rmse/sigma %.5f\n", GgmlTypeName(e.type), rel);
    EXPECT_LT(rel, e.max_rel_rmse) << GgmlTypeName(e.type);
  }
}

TEST(QuantizeTest, RejectsBadArguments) {
  float x[512] = {};
  uint8_t out[1024];
  EXPECT_EQ(QuantizeRow(GgmlType::kQ4_K, x, out, 128).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(QuantizeRow(GgmlType::kQ8_0, x, out, 31).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(QuantizeRow(GgmlType::kQ8_0, x, out, -32).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(QuantizeRow(GgmlType::kIQ2_XXS, x, out, 256).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(QuantizeRow(GgmlType::kQ8_1, x, out, 32).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(QuantizeRow(GgmlType::kF32, x, out, 3).ok());
  EXPECT_TRUE(CanQuantize(GgmlType::kQ6_K));
  EXPECT_FALSE(CanQuantize(GgmlType::kQ3_K));
}

}  // namespace
}  // namespace minfer
