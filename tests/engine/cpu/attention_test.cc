// The CPU attention kernel against a float64 reference computed from the
// cache contents (so cache rounding is not counted as kernel error), for
// every cache type, GQA shapes, long contexts, unsorted positions, both
// implementations; and decode == prefill bit for bit.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/base/thread_pool.h"
#include "engine/cpu/kernels.h"
#include "engine/quant/fp16.h"
#include "engine/quant/fp8.h"
#include "engine/quant/kv_row.h"
#include "engine/quant/quantize.h"
#include "gtest/gtest.h"

namespace minfer::cpu {
namespace {

using graph::DType;

struct Shape {
  int n_head, n_head_kv, head_dim;
};

struct Cache {
  graph::KvLayout layout;
  std::vector<uint8_t> k, v;
};

Cache MakeCache(DType dtype, int64_t n_kv_embd, int64_t n_ctx, int64_t n_filled, std::mt19937& rng,
                float v_offset) {
  Cache c;
  c.layout.dtype = dtype;
  c.layout.n_ctx = n_ctx;
  c.layout.n_kv_embd = n_kv_embd;
  c.k.assign(c.layout.row_bytes() * n_ctx, 0);
  c.v.assign(c.layout.row_bytes() * n_ctx, 0);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> k(n_kv_embd * n_filled), v(n_kv_embd * n_filled);
  for (auto& x : k) x = nd(rng);
  for (auto& x : v) x = nd(rng) + v_offset;
  std::vector<int32_t> pos(n_filled);
  std::iota(pos.begin(), pos.end(), 0);
  EXPECT_TRUE(KvStore(k.data(), v.data(), pos.data(), n_filled, c.layout, c.k.data(), c.v.data())
                  .ok());
  return c;
}

std::vector<double> CacheRow(const Cache& c, const std::vector<uint8_t>& bytes, int64_t p) {
  const int64_t n = c.layout.n_kv_embd;
  std::vector<float> f(n);
  const uint8_t* src = bytes.data() + p * c.layout.row_bytes();
  switch (c.layout.dtype) {
    case DType::kF32:
      std::memcpy(f.data(), src, n * 4);
      break;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) f[i] = Fp16ToFloat(reinterpret_cast<const uint16_t*>(src)[i]);
      break;
    case DType::kFp8:
      // Planar rows (engine/quant/kv_row.h): n codes, then a scale per 32.
      for (int64_t i = 0; i < n; ++i) f[i] = E4M3ToFloat(src[i]) * Fp16ToFloat(KvRowScaleBits(src, n, i));
      break;
    default:
      for (int64_t i = 0; i < n; ++i) {
        f[i] = static_cast<float>(static_cast<int8_t>(src[i])) * Fp16ToFloat(KvRowScaleBits(src, n, i));
      }
  }
  return std::vector<double>(f.begin(), f.end());
}

// Plain float64 softmax attention.
std::vector<double> Reference(const Shape& s, const Cache& c, const std::vector<float>& q,
                              const std::vector<int32_t>& pos, float scale) {
  const int64_t nt = pos.size();
  const int group = s.n_head / s.n_head_kv, hd = s.head_dim;
  std::vector<double> y(static_cast<size_t>(nt) * s.n_head * hd);
  const int32_t max_pos = *std::max_element(pos.begin(), pos.end());
  std::vector<std::vector<double>> K, V;
  for (int64_t p = 0; p <= max_pos; ++p) {
    K.push_back(CacheRow(c, c.k, p));
    V.push_back(CacheRow(c, c.v, p));
  }
  for (int64_t t = 0; t < nt; ++t) {
    for (int h = 0; h < s.n_head; ++h) {
      const int hk = h / group;
      const float* qh = q.data() + (t * s.n_head + h) * hd;
      std::vector<double> sc(pos[t] + 1);
      double mx = -INFINITY;
      for (int64_t p = 0; p <= pos[t]; ++p) {
        double d = 0;
        for (int i = 0; i < hd; ++i) d += static_cast<double>(qh[i]) * K[p][hk * hd + i];
        sc[p] = d * scale;
        mx = std::max(mx, sc[p]);
      }
      double sum = 0;
      for (double& x : sc) sum += (x = std::exp(x - mx));
      for (int i = 0; i < hd; ++i) {
        double acc = 0;
        for (int64_t p = 0; p <= pos[t]; ++p) acc += sc[p] * V[p][hk * hd + i];
        y[(t * s.n_head + h) * hd + i] = acc / sum;
      }
    }
  }
  return y;
}

struct Case {
  Shape shape;
  DType dtype;
  int64_t depth;    // cache rows before the first query
  int64_t nt;       // query tokens at positions depth .. depth + nt - 1
  float q_scale;    // larger makes the softmax peakier
  bool shuffle;     // unsorted positions
  KernelImpl impl;
};

std::string Name(const Case& c) {
  return std::string(graph::DTypeName(c.dtype)) + " heads " + std::to_string(c.shape.n_head) +
         "/" + std::to_string(c.shape.n_head_kv) + " hd " + std::to_string(c.shape.head_dim) +
         " depth " + std::to_string(c.depth) + " nt " + std::to_string(c.nt) +
         (c.shuffle ? " shuffled" : "") + (c.impl == KernelImpl::kScalar ? " scalar" : " auto");
}

void RunCase(const Case& cs, ThreadPool& pool) {
  SCOPED_TRACE(Name(cs));
  std::mt19937 rng(1234 + cs.nt + cs.depth);
  const Shape& s = cs.shape;
  const int64_t n_kv_embd = static_cast<int64_t>(s.n_head_kv) * s.head_dim;
  const int64_t n_ctx = cs.depth + cs.nt + 3;
  Cache c = MakeCache(cs.dtype, n_kv_embd, n_ctx, cs.depth + cs.nt, rng, 0.5f);
  std::vector<int32_t> pos(cs.nt);
  std::iota(pos.begin(), pos.end(), static_cast<int32_t>(cs.depth));
  if (cs.shuffle) std::shuffle(pos.begin(), pos.end(), rng);
  std::normal_distribution<float> nd(0.0f, cs.q_scale);
  std::vector<float> q(static_cast<size_t>(cs.nt) * s.n_head * s.head_dim);
  for (auto& x : q) x = nd(rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));

  std::vector<float> y(q.size(), NAN);
  ASSERT_TRUE(Attention(pool, q.data(), pos.data(), cs.nt, s.n_head, s.n_head_kv, s.head_dim,
                        scale, c.layout, c.k.data(), c.v.data(), y.data(), cs.impl)
                  .ok());
  const std::vector<double> ref = Reference(s, c, q, pos, scale);
  // Per output row: max |error| relative to the row's largest |value|. The
  // float computation's error grows like sqrt(keys) * 2^-24 relative; 2e-5
  // leaves room at 4000 keys and still catches any wrong key, mask or head.
  double worst = 0;
  for (size_t r = 0; r < ref.size() / s.head_dim; ++r) {
    double mx = 0, err = 0;
    for (int i = 0; i < s.head_dim; ++i) {
      mx = std::max(mx, std::fabs(ref[r * s.head_dim + i]));
      err = std::max(err, std::fabs(y[r * s.head_dim + i] - ref[r * s.head_dim + i]));
    }
    worst = std::max(worst, err / std::max(mx, 1e-30));
  }
  EXPECT_LT(worst, 2e-5);

  // Decode: each token alone gives exactly what it got in the batch.
  const int64_t hd_all = static_cast<int64_t>(s.n_head) * s.head_dim;
  for (int64_t t = 0; t < cs.nt; t += std::max<int64_t>(1, cs.nt / 7)) {
    std::vector<float> y1(hd_all);
    ASSERT_TRUE(Attention(pool, q.data() + t * hd_all, &pos[t], 1, s.n_head, s.n_head_kv,
                          s.head_dim, scale, c.layout, c.k.data(), c.v.data(), y1.data(), cs.impl)
                    .ok());
    for (int64_t i = 0; i < hd_all; ++i) {
      ASSERT_EQ(y1[i], y[t * hd_all + i]) << "token " << t << " element " << i;
    }
  }
}

class AttentionTest : public ::testing::TestWithParam<KernelImpl> {};

TEST_P(AttentionTest, MatchesFloat64Reference) {
  ThreadPool pool(2);
  const KernelImpl impl = GetParam();
  const std::vector<Shape> shapes = {
      {14, 2, 64},  // Qwen2.5-0.5B: group 7, 56-row tiles
      {12, 2, 128}, // Qwen2.5-1.5B
      {4, 2, 64},   // the engine tests' tiny model
      {8, 2, 32},   // tiny-untied: group 4
      {4, 4, 16},   // no GQA; q8_0 blocks span two heads
      {10, 1, 24},  // head_dim not a multiple of 8 (f32/f16 only: rows of 24)
      {3, 3, 8},
  };
  for (DType dtype : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kFp8}) {
    for (const Shape& s : shapes) {
      if ((dtype == DType::kQ8_0 || dtype == DType::kFp8) && (s.n_head_kv * s.head_dim) % 32 != 0) {
        continue;
      }
      RunCase({s, dtype, 0, 150, 1.0f, false, impl}, pool);   // prefill from empty
      RunCase({s, dtype, 70, 9, 1.0f, true, impl}, pool);     // a chunk at depth, unsorted
      RunCase({s, dtype, 0, 1, 1.0f, false, impl}, pool);     // first token
    }
  }
}

TEST_P(AttentionTest, LongContextsAndPeakedScores) {
  ThreadPool pool(3);
  const KernelImpl impl = GetParam();
  for (DType dtype : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kFp8}) {
    RunCase({{14, 2, 64}, dtype, 4000, 3, 1.0f, false, impl}, pool);  // decode-like at depth
    RunCase({{14, 2, 64}, dtype, 1500, 64, 1.0f, false, impl}, pool); // prefill chunk at depth
    RunCase({{4, 2, 64}, dtype, 300, 40, 12.0f, false, impl}, pool);  // scores up to ~+-50
  }
}

INSTANTIATE_TEST_SUITE_P(Impl, AttentionTest,
                         ::testing::Values(KernelImpl::kAuto, KernelImpl::kAvx2,
                                           KernelImpl::kScalar),
                         [](const auto& info) {
                           return info.param == KernelImpl::kAuto   ? "Auto"
                                  : info.param == KernelImpl::kAvx2 ? "Avx2"
                                                                    : "Scalar";
                         });

// The AVX512-VL build of the tile kernel only changes register blocking: it
// must give the AVX2 build's bits.
TEST(AttentionVariantsTest, Avx512VlEqualsAvx2) {
  ThreadPool pool(2);
  std::mt19937 rng(99);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kFp8}) {
    const Shape s{14, 2, 64};
    Cache c = MakeCache(dtype, 128, 700, 700, rng, 0.0f);
    std::vector<int32_t> pos(300);
    std::iota(pos.begin(), pos.end(), 400);
    std::normal_distribution<float> nd;
    std::vector<float> q(pos.size() * s.n_head * s.head_dim);
    for (auto& x : q) x = nd(rng);
    std::vector<float> ya(q.size()), yb(q.size());
    for (auto [impl, y] : {std::pair{KernelImpl::kAuto, &ya}, std::pair{KernelImpl::kAvx2, &yb}}) {
      ASSERT_TRUE(Attention(pool, q.data(), pos.data(), pos.size(), s.n_head, s.n_head_kv,
                            s.head_dim, 0.125f, c.layout, c.k.data(), c.v.data(), y->data(), impl)
                      .ok());
    }
    for (size_t i = 0; i < ya.size(); ++i) ASSERT_EQ(ya[i], yb[i]) << i;
  }
}

TEST(AttentionErrorsTest, PositionOutsideContext) {
  ThreadPool pool(1);
  graph::KvLayout layout{DType::kF32, 4, 8};
  std::vector<uint8_t> k(layout.row_bytes() * 4), v(k.size());
  std::vector<float> q(8), y(8);
  int32_t pos = 4;
  absl::Status st = Attention(pool, q.data(), &pos, 1, 1, 1, 8, 1.0f, layout, k.data(), v.data(),
                              y.data());
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange) << st;
  pos = 0;
  // 2 kv heads x 8 do not fit rows of 8.
  st = Attention(pool, q.data(), &pos, 1, 2, 2, 8, 1.0f, layout, k.data(), v.data(), y.data());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
}

}  // namespace
}  // namespace minfer::cpu
