// The CPU mixture-of-experts kernels (graph.h's MoeRoute and MoeFFN) against
// a float64 reference written from the op table: routing by softmax or by
// softmax over the chosen logits, renormalization and scale; the expert
// FFN with SwiGLU or gpt-oss's clamped variant, with and without biases,
// over dequantized weights. Quantized weights take 8-bit activations, so
// those cases allow the error that quantization brings (a few parts in a
// thousand of the output's scale); f32 weights agree to float rounding. A
// batch of tokens gives each token exactly its alone result.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "engine/base/thread_pool.h"
#include "engine/cpu/kernels.h"
#include "engine/graph/graph.h"
#include "engine/quant/quantize.h"
#include "gtest/gtest.h"

namespace minfer::cpu {
namespace {

using graph::MoeAct;
using graph::MoeGating;

// A 3-D or 2-D weight of `type` made from floats (kept for the reference,
// as the dequantized values the kernel sees).
struct TestWeight {
  graph::Weight w;
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // dequantized, [rows][ne0]
};

TestWeight MakeWeight(GgmlType type, std::vector<int64_t> dims, float scale, std::mt19937& rng) {
  TestWeight t;
  std::normal_distribution<float> nd(0.0f, scale);
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> src(n);
  for (float& v : src) v = nd(rng);
  const int64_t ne0 = dims[0], rows = n / ne0, rb = RowBytes(type, ne0);
  t.bytes.resize(rows * rb);
  t.values.resize(n);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_TRUE(QuantizeRow(type, src.data() + r * ne0, t.bytes.data() + r * rb, ne0).ok());
    EXPECT_TRUE(DequantizeRow(type, t.bytes.data() + r * rb, t.values.data() + r * ne0, ne0).ok());
  }
  t.w.name = "test";
  t.w.type = type;
  t.w.dims = dims;
  t.w.data = t.bytes.data();
  t.w.nbytes = t.bytes.size();
  return t;
}

// The op table's MoeRoute in doubles: (weight, expert) pairs of one token.
std::vector<std::pair<double, int>> RefRoute(const float* l, int n_expert, int k,
                                             MoeGating gating, bool norm, float scale) {
  std::vector<double> score(l, l + n_expert);
  if (gating == MoeGating::kSoftmax) {
    const double mx = *std::max_element(score.begin(), score.end());
    double sum = 0;
    for (double& s : score) sum += (s = std::exp(s - mx));
    for (double& s : score) s /= sum;
  }
  std::vector<int> order(n_expert);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return score[a] > score[b]; });
  std::vector<std::pair<double, int>> out;
  for (int j = 0; j < k; ++j) out.push_back({score[order[j]], order[j]});
  if (gating == MoeGating::kSoftmaxWeight) {
    const double mx = out[0].first;
    double sum = 0;
    for (auto& [w, e] : out) sum += (w = std::exp(w - mx));
    for (auto& [w, e] : out) w /= sum;
  }
  if (norm) {
    double sum = 0;
    for (auto& [w, e] : out) sum += w;
    for (auto& [w, e] : out) w /= std::max(sum, 6.103515625e-5);
  }
  if (scale != 0) {
    for (auto& [w, e] : out) w *= scale;
  }
  return out;
}

struct Case {
  GgmlType gate_up;
  GgmlType down;
  MoeGating gating;
  bool norm;
  MoeAct act;
  bool biases;
};

class MoeKernelTest : public ::testing::TestWithParam<Case> {};

TEST_P(MoeKernelTest, MatchesFloat64ReferenceAndBatchEqualsAlone) {
  const Case c = GetParam();
  const int64_t E = 256, F = 256, X = 8, k = 3, nt = 7;
  std::mt19937 rng(7);
  TestWeight G = MakeWeight(c.gate_up, {E, F, X}, 1.0f / 16, rng);
  TestWeight U = MakeWeight(c.gate_up, {E, F, X}, 1.0f / 16, rng);
  TestWeight D = MakeWeight(c.down, {F, E, X}, 1.0f / 16, rng);
  TestWeight bg = MakeWeight(GgmlType::kF32, {F, X}, 0.5f, rng);
  TestWeight bu = MakeWeight(GgmlType::kF32, {F, X}, 0.5f, rng);
  TestWeight bd = MakeWeight(GgmlType::kF32, {E, X}, 0.5f, rng);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(E * nt), logits(X * nt);
  for (float& v : x) v = nd(rng);
  for (float& v : logits) v = 2.0f * nd(rng);

  graph::Node route;
  route.op = graph::OpKind::kMoeRoute;
  route.p.n_expert = X;
  route.p.n_expert_used = k;
  route.p.moe_gating = c.gating;
  route.p.moe_norm = c.norm;
  route.p.moe_scale = c.norm ? 0.0f : 1.5f;
  std::vector<float> r(2 * k * nt);
  ASSERT_TRUE(MoeRouteRows(logits.data(), X, nt, route.p, r.data()).ok());

  graph::Node ffn;
  ffn.op = graph::OpKind::kMoeFFN;
  ffn.name = "moe";
  ffn.p.n_expert = X;
  ffn.p.n_expert_used = k;
  ffn.p.moe_act = c.act;
  ffn.weights = {&G.w, &U.w, &D.w, c.biases ? &bg.w : nullptr, c.biases ? &bu.w : nullptr,
                 c.biases ? &bd.w : nullptr};
  ThreadPool pool(2);
  std::vector<float> y(E * nt);
  ASSERT_TRUE(MoeFfn(pool, ffn, x.data(), r.data(), nt, y.data()).ok());

  const bool quantized = c.gate_up != GgmlType::kF32 || c.down != GgmlType::kF32;
  std::set<int> experts_seen;
  double worst = 0;
  for (int64_t t = 0; t < nt; ++t) {
    const auto ref_route = RefRoute(logits.data() + t * X, X, k, c.gating, c.norm,
                                    route.p.moe_scale);
    for (int j = 0; j < k; ++j) {
      int32_t id;
      std::memcpy(&id, &r[t * 2 * k + k + j], 4);
      EXPECT_EQ(id, ref_route[j].second) << "token " << t << " choice " << j;
      EXPECT_NEAR(r[t * 2 * k + j], ref_route[j].first, 1e-6) << "token " << t << " choice " << j;
      experts_seen.insert(id);
    }
    // The expert FFN in doubles over the dequantized weights.
    std::vector<double> out(E, 0.0);
    for (const auto& [w, e] : ref_route) {
      std::vector<double> h(F);
      for (int64_t f = 0; f < F; ++f) {
        double g = 0, u = 0;
        for (int64_t i = 0; i < E; ++i) {
          g += static_cast<double>(G.values[(e * F + f) * E + i]) * x[t * E + i];
          u += static_cast<double>(U.values[(e * F + f) * E + i]) * x[t * E + i];
        }
        if (c.biases) {
          g += bg.values[e * F + f];
          u += bu.values[e * F + f];
        }
        if (c.act == MoeAct::kSilu) {
          h[f] = g / (1 + std::exp(-g)) * u;
        } else {
          const double gc = std::min(g, 7.0), uc = std::clamp(u, -7.0, 7.0);
          h[f] = gc / (1 + std::exp(-1.702 * gc)) * (uc + 1);
        }
      }
      for (int64_t i = 0; i < E; ++i) {
        double d = 0;
        for (int64_t f = 0; f < F; ++f) d += static_cast<double>(D.values[(e * E + i) * F + f]) * h[f];
        if (c.biases) d += bd.values[e * E + i];
        out[i] += w * d;
      }
    }
    double scale = 0;
    for (double v : out) scale = std::max(scale, std::abs(v));
    for (int64_t i = 0; i < E; ++i) {
      const double err = std::abs(y[t * E + i] - out[i]) / scale;
      worst = std::max(worst, err);
    }
  }
  // 8-bit activations: ~0.4% of a row's scale per dot, a few of them in a
  // chain; float weights: rounding only.
  EXPECT_LT(worst, quantized ? 2e-2 : 1e-5);
  EXPECT_GE(experts_seen.size(), 6u) << "the routing should spread over the experts";

  // Each token alone gives its batched values bit for bit.
  for (int64_t t = 0; t < nt; ++t) {
    std::vector<float> one(E);
    ASSERT_TRUE(MoeFfn(pool, ffn, x.data() + t * E, r.data() + t * 2 * k, 1, one.data()).ok());
    EXPECT_EQ(0, std::memcmp(one.data(), y.data() + t * E, E * 4)) << "token " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, MoeKernelTest,
    ::testing::Values(
        // qwen3moe: softmax, renormalized, SwiGLU.
        Case{GgmlType::kF32, GgmlType::kF32, MoeGating::kSoftmax, true, MoeAct::kSilu, false},
        Case{GgmlType::kQ8_0, GgmlType::kQ8_0, MoeGating::kSoftmax, true, MoeAct::kSilu, false},
        Case{GgmlType::kQ4_K, GgmlType::kQ6_K, MoeGating::kSoftmax, true, MoeAct::kSilu, false},
        Case{GgmlType::kF16, GgmlType::kQ8_0, MoeGating::kSoftmax, false, MoeAct::kSilu, false},
        // gpt-oss: softmax over the chosen logits, biases, the clamped SwiGLU.
        Case{GgmlType::kF32, GgmlType::kF32, MoeGating::kSoftmaxWeight, false, MoeAct::kSwigluOai,
             true},
        Case{GgmlType::kQ8_0, GgmlType::kQ4_0, MoeGating::kSoftmaxWeight, false,
             MoeAct::kSwigluOai, true}));

TEST(MoeKernelTest, RouteOutsideTheExpertsIsRefused) {
  std::mt19937 rng(1);
  TestWeight G = MakeWeight(GgmlType::kF32, {32, 32, 4}, 0.1f, rng);
  TestWeight D = MakeWeight(GgmlType::kF32, {32, 32, 4}, 0.1f, rng);
  graph::Node ffn;
  ffn.op = graph::OpKind::kMoeFFN;
  ffn.name = "blk.0.ffn_moe";
  ffn.p.n_expert = 4;
  ffn.p.n_expert_used = 1;
  ffn.weights = {&G.w, &G.w, &D.w, nullptr, nullptr, nullptr};
  std::vector<float> x(32, 1.0f), y(32);
  float route[2] = {1.0f, 0.0f};
  const int32_t bad = 4;
  std::memcpy(&route[1], &bad, 4);
  ThreadPool pool(1);
  absl::Status s = MoeFfn(pool, ffn, x.data(), route, 1, y.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("expert 4 of 4"), std::string::npos) << s;
}

}  // namespace
}  // namespace minfer::cpu
