// GPU tests of the non-matmul kernels (cuda/kernels/ops.h) against host
// references written here (plain loops mirroring engine/cpu, float64 for
// attention) and against engine/quant's quantizers. Fresh random inputs each
// run (cuda/testing RandomFloats; MINFER_TEST_SEED repeats a run), outputs and
// unused cache rows poisoned with NaN bytes before each launch, so a kernel
// that skips a write or reads a row it should not shows up as a mismatch.
//
// Bounds (and why) are stated per test; the exactness claims are those of
// ops.h.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda/kernels/launch.h"
#include "cuda/kernels/ops.h"
#include "cuda/testing/gpu_test_util.h"
#include "engine/quant/blocks.h"
#include "engine/quant/fp16.h"
#include "engine/quant/fp8.h"
#include "engine/quant/kv_row.h"
#include "engine/quant/quantize.h"
#include "engine/quant/vec_dot.h"
#include "gtest/gtest.h"

namespace minfer::cuda {
namespace {

using ::minfer::cuda::testing::DeviceBuffer;
using ::minfer::cuda::testing::RandomFloats;
using ::minfer::cuda::testing::TestSeed;


std::mt19937_64& Rng() {
  static std::mt19937_64 rng(TestSeed() ^ 0x9E3779B97F4A7C15ull);
  return rng;
}

int RandInt(int lo, int hi) {  // [lo, hi]
  return std::uniform_int_distribution<int>(lo, hi)(Rng());
}

// Distance in units in the last place (adjacent floats are 1 apart).
int64_t UlpDiff(float a, float b) {
  auto ordered = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, 4);
    return i < 0 ? static_cast<int64_t>(INT32_MIN) - i : static_cast<int64_t>(i);
  };
  return std::llabs(ordered(a) - ordered(b));
}

template <typename T>
void Upload(DeviceBuffer<T>& d, const std::vector<T>& h, size_t offset = 0) {
  ASSERT_EQ(cudaMemcpy(d.get() + offset, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
}

// A device error flag initialized to kDeviceOk.
std::vector<int32_t> FlagInit() { return {kDeviceOk}; }

// ============================================================ elementwise

TEST(ElementwiseTest, AddMulBroadcastExact) {
  MINFER_REQUIRE_GPU();
  struct Case {
    int64_t n, nb;
    int a_off;  // float offset of a and y (misaligned pointers take the scalar path)
  };
  const Case cases[] = {
      {3584, 3584, 0}, {896 * 5, 896, 0}, {4096 * 3, 4096, 0}, {1000003, 1000003, 0},
      {10, 3, 0},      {4096, 4096, 1},   {12, 4, 1},          {7, 100, 0}};
  for (const Case& c : cases) {
    for (int op = 0; op < 2; ++op) {
      SCOPED_TRACE(::testing::Message() << "n " << c.n << " nb " << c.nb << " off " << c.a_off
                                        << (op ? " mul" : " add"));
      const auto a = RandomFloats(c.n);
      const auto b = RandomFloats(c.nb);
      DeviceBuffer<float> da(c.n + 1), db(b), dy(c.n + 1);
      Upload(da, a, c.a_off);
      dy.Poison();
      const float* pa = da.get() + c.a_off;
      float* py = dy.get() + c.a_off;
      ASSERT_CUDA(op ? LaunchMul(pa, db.get(), c.nb, py, c.n, nullptr)
                     : LaunchAdd(pa, db.get(), c.nb, py, c.n, nullptr));
      SYNC();
      const auto y = dy.ToHost();
      for (int64_t i = 0; i < c.n; ++i) {
        const float bi = b[c.nb < c.n ? i % c.nb : i];
        const float want = op ? a[i] * bi : a[i] + bi;
        ASSERT_EQ(y[c.a_off + i], want) << "i " << i;
      }
    }
  }
}

TEST(ElementwiseTest, AddInPlace) {
  MINFER_REQUIRE_GPU();
  const int64_t n = 3584 * 3;
  const auto a = RandomFloats(n), b = RandomFloats(3584);
  DeviceBuffer<float> da(a), db(b);
  ASSERT_CUDA(LaunchAdd(da.get(), db.get(), 3584, da.get(), n, nullptr));
  SYNC();
  const auto y = da.ToHost();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], a[i] + b[i % 3584]) << i;
}

// A bias add with the residual (gpt-oss's attention output): (a + b) + r in
// one launch, the host's floats exactly (what LaunchAdd of a and b, then of
// r, gives), on the vector and scalar paths, broadcast or not, with y
// written over r (the executor may give the output r's buffer) or over a.
TEST(ElementwiseTest, AddResidualExactAndInPlace) {
  MINFER_REQUIRE_GPU();
  struct Case {
    int64_t n, nb;
    int off;  // float offset of a, r and y (1: the scalar path)
  };
  for (const Case c : {Case{2880 * 3, 2880, 0}, Case{4096, 4096, 0}, Case{12, 4, 1},
                       Case{10, 3, 0}}) {
    for (int alias = 0; alias < 3; ++alias) {  // y apart, y = r, y = a
      SCOPED_TRACE(::testing::Message() << "n " << c.n << " nb " << c.nb << " off " << c.off
                                        << " alias " << alias);
      const auto a = RandomFloats(c.n), b = RandomFloats(c.nb), r = RandomFloats(c.n, 4.0f);
      DeviceBuffer<float> da(c.n + 1), db(b), dr(c.n + 1), dy(c.n + 1);
      Upload(da, a, c.off);
      Upload(dr, r, c.off);
      dy.Poison();
      float* pa = da.get() + c.off;
      float* pr = dr.get() + c.off;
      float* py = alias == 1 ? pr : alias == 2 ? pa : dy.get() + c.off;
      ASSERT_CUDA(LaunchAddResidual(pa, db.get(), c.nb, pr, py, c.n, nullptr));
      SYNC();
      const auto y = (alias == 1 ? dr : alias == 2 ? da : dy).ToHost();
      for (int64_t i = 0; i < c.n; ++i) {
        const float sum = a[i] + b[c.nb < c.n ? i % c.nb : i];
        ASSERT_EQ(y[c.off + i], r[i] + sum) << "i " << i;
      }
    }
  }
  DeviceBuffer<float> d(4);
  EXPECT_EQ(LaunchAddResidual(d.get(), d.get(), 4, nullptr, d.get(), 4, nullptr),
            cudaErrorInvalidValue);
}

TEST(ElementwiseTest, ScaleExact) {
  MINFER_REQUIRE_GPU();
  for (int64_t n : {int64_t{1}, int64_t{4096}, int64_t{100001}}) {
    const auto a = RandomFloats(n);
    const float s = 0.0883883476f;
    DeviceBuffer<float> da(a), dy(n);
    dy.Poison();
    ASSERT_CUDA(LaunchScale(da.get(), s, dy.get(), n, nullptr));
    SYNC();
    const auto y = dy.ToHost();
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], a[i] * s) << i;
  }
}

// silu/swiglu: the kernel's exp is exp() in double rounded to float, the
// CPU's glibc expf is within 0.502 ulp, so the exponentials agree except
// where expf misrounds (then by 1 ulp); 1 + e and the division add at most
// one more ulp of difference. Bound: 2 ulp of the CPU's value for silu; the
// swiglu product carries that difference plus its own rounding: 3 ulp
// (seen on the H200: 3).
TEST(ElementwiseTest, SiluAndSwiGluWithin2UlpOfCpu) {
  MINFER_REQUIRE_GPU();
  for (int64_t n : {int64_t{18944}, int64_t{18944 * 3 + 1}}) {
    auto g = RandomFloats(n, 4.0f);
    g[0] = -100.0f;  // exp overflow: silu -> -0
    g[1] = 100.0f;
    g[2] = 0.0f;
    const auto u = RandomFloats(n);
    DeviceBuffer<float> dg(g), du(u), dy(n), dz(n);
    dy.Poison();
    dz.Poison();
    ASSERT_CUDA(LaunchSilu(dg.get(), dy.get(), n, nullptr));
    ASSERT_CUDA(LaunchSwiGlu(dg.get(), du.get(), dz.get(), n, nullptr));
    SYNC();
    const auto y = dy.ToHost(), z = dz.ToHost();
    int64_t worst = 0, differ = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float silu = g[i] / (1.0f + std::exp(-g[i]));
      const float swiglu = g[i] / (1.0f + std::exp(-g[i])) * u[i];
      const int64_t d1 = UlpDiff(y[i], silu), d2 = UlpDiff(z[i], swiglu);
      worst = std::max({worst, d1, d2});
      differ += (d1 != 0) + (d2 != 0);
      ASSERT_LE(d1, 2) << "silu i " << i << " g " << g[i] << " got " << y[i] << " want " << silu;
      ASSERT_LE(d2, 3) << "swiglu i " << i << " got " << z[i] << " want " << swiglu;
    }
    std::printf("silu/swiglu n=%lld: %lld of %lld values differ from the CPU's, worst %lld ulp\n",
                static_cast<long long>(n), static_cast<long long>(differ),
                static_cast<long long>(2 * n), static_cast<long long>(worst));
  }
}

// Softmax: same exp argument as silu; the double row sum matches the CPU's
// to ~1e-16, so inv agrees but for rare rounding flips. Bound: 3 ulp.
TEST(ElementwiseTest, SoftmaxRowsWithin3UlpOfCpu) {
  MINFER_REQUIRE_GPU();
  struct Case {
    int64_t ne0, rows;
  };
  for (const Case c : {Case{151936, 1}, Case{1000, 7}, Case{17, 3}, Case{1, 2}}) {
    const auto a = RandomFloats(c.ne0 * c.rows, 3.0f);
    DeviceBuffer<float> da(a), dy(a.size());
    dy.Poison();
    ASSERT_CUDA(LaunchSoftmaxRows(da.get(), dy.get(), c.ne0, c.rows, nullptr));
    SYNC();
    const auto y = dy.ToHost();
    for (int64_t r = 0; r < c.rows; ++r) {
      const float* x = a.data() + r * c.ne0;
      float mx = -INFINITY;
      for (int64_t i = 0; i < c.ne0; ++i) mx = std::max(mx, x[i]);
      std::vector<float> o(c.ne0);
      double sum = 0;
      for (int64_t i = 0; i < c.ne0; ++i) {
        o[i] = std::exp(x[i] - mx);
        sum += o[i];
      }
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t i = 0; i < c.ne0; ++i) {
        ASSERT_LE(UlpDiff(y[r * c.ne0 + i], o[i] * inv), 3)
            << "ne0 " << c.ne0 << " row " << r << " i " << i;
      }
    }
  }
}

TEST(ElementwiseTest, PermuteExact) {
  MINFER_REQUIRE_GPU();
  const int64_t xne[4] = {5, 7, 3, 2};
  const int8_t perms[][4] = {{0, 2, 1, 3}, {1, 0, 2, 3}, {3, 2, 1, 0}, {2, 0, 3, 1}, {0, 1, 2, 3}};
  const int64_t n = xne[0] * xne[1] * xne[2] * xne[3];
  const auto x = RandomFloats(n);
  for (const auto& perm : perms) {
    DeviceBuffer<float> dx(x), dy(n);
    dy.Poison();
    ASSERT_CUDA(LaunchPermute(dx.get(), xne, perm, dy.get(), nullptr));
    SYNC();
    const auto y = dy.ToHost();
    // The CPU's loop (engine/cpu/elementwise.cc PermuteF32).
    int64_t yne[4];
    for (int i = 0; i < 4; ++i) yne[perm[i]] = xne[i];
    const int64_t ys[4] = {1, yne[0], yne[0] * yne[1], yne[0] * yne[1] * yne[2]};
    int64_t idx = 0;
    for (int64_t i3 = 0; i3 < xne[3]; ++i3)
      for (int64_t i2 = 0; i2 < xne[2]; ++i2)
        for (int64_t i1 = 0; i1 < xne[1]; ++i1)
          for (int64_t i0 = 0; i0 < xne[0]; ++i0) {
            const int64_t c[4] = {i0, i1, i2, i3};
            int64_t o = 0;
            for (int d = 0; d < 4; ++d) o += c[d] * ys[perm[d]];
            ASSERT_EQ(y[o], x[idx++]);
          }
  }
  const int8_t bad[4] = {0, 0, 1, 2};
  DeviceBuffer<float> dx(x), dy(n);
  EXPECT_EQ(LaunchPermute(dx.get(), xne, bad, dy.get(), nullptr), cudaErrorInvalidValue);
}

TEST(ElementwiseTest, GetRowsF32ExactAndFlagsBadIds) {
  MINFER_REQUIRE_GPU();
  for (int64_t ne0 : {int64_t{896}, int64_t{7}}) {
    const int64_t rows = 50;
    const auto src = RandomFloats(ne0 * rows);
    std::vector<int32_t> ids = {3, 0, 49, 3, 17};
    DeviceBuffer<float> ds(src), dy(ne0 * ids.size());
    DeviceBuffer<int32_t> di(ids);
    DeviceBuffer<int32_t> flag(FlagInit());
    dy.Poison();
    ASSERT_CUDA(
        LaunchGetRowsF32(ds.get(), ne0, rows, di.get(), ids.size(), dy.get(), flag.get(), nullptr));
    SYNC();
    auto y = dy.ToHost();
    for (size_t i = 0; i < ids.size(); ++i)
      for (int64_t c = 0; c < ne0; ++c) ASSERT_EQ(y[i * ne0 + c], src[ids[i] * ne0 + c]);
    EXPECT_EQ(flag.ToHost()[0], kDeviceOk);

    ids = {1, 50, -1};
    DeviceBuffer<int32_t> dbad(ids);
    DeviceBuffer<float> dz(ne0 * ids.size());
    dz.Poison();
    ASSERT_CUDA(LaunchGetRowsF32(ds.get(), ne0, rows, dbad.get(), ids.size(), dz.get(), flag.get(),
                                 nullptr));
    SYNC();
    y = dz.ToHost();
    EXPECT_EQ(flag.ToHost()[0], kDeviceBadTokenId);
    for (int64_t c = 0; c < ne0; ++c) {
      ASSERT_EQ(y[c], src[ne0 + c]);
      ASSERT_EQ(y[ne0 + c], 0.0f);
      ASSERT_EQ(y[2 * ne0 + c], 0.0f);
    }
  }
}

// ============================================================ RmsNorm

// The CPU's RmsNormRows for one row.
void RmsNormRef(const float* x, const float* w, float eps, float* y, int64_t ne0) {
  double ss = 0;
  for (int64_t i = 0; i < ne0; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / ne0 + eps));
  for (int64_t i = 0; i < ne0; ++i) y[i] = w ? x[i] * inv * w[i] : x[i] * inv;
}

// y within 1e-6 relative of the CPU formula (in practice identical: the
// double sum only changes order), and the q8 plane byte-identical to the
// CPU's QuantizeRowQ8A of the kernel's own y — also when y is not written.
TEST(RmsNormTest, MatchesCpuAndQ8PlaneIsQuantizeRowQ8AOfY) {
  MINFER_REQUIRE_GPU();
  struct Case {
    int64_t ne0, rows;
    bool weight;
    int x_off;  // misaligned x takes the scalar-load path
  };
  const Case cases[] = {{896, 1, true, 0},   {896, 5, true, 0},  {3584, 1, true, 0},
                        {3584, 7, false, 0}, {128, 37, true, 0}, {5120, 3, true, 0},
                        {9216, 2, true, 0},  {64, 3, true, 0},   {3584, 2, true, 1},
                        {128, 5, false, 1},  {12, 3, true, 0}};
  const float eps = 1e-6f;
  int64_t exact = 0, total = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "ne0 " << c.ne0 << " rows " << c.rows << " w " << c.weight
                                      << " off " << c.x_off);
    const int64_t n = c.ne0 * c.rows;
    const auto x = RandomFloats(n, 2.0f);
    const auto w = RandomFloats(c.ne0);
    const bool q8_ok = c.ne0 % 32 == 0;
    const int64_t nblk = n / 32;
    DeviceBuffer<float> dx(n + 1), dw(w), dy(n);
    DeviceBuffer<BlockQ8A> dq(q8_ok ? nblk : 1), dq2(q8_ok ? nblk : 1);
    Upload(dx, x, c.x_off);
    dy.Poison();
    dq.Poison();
    dq2.Poison();
    const float* px = dx.get() + c.x_off;
    const float* pw = c.weight ? dw.get() : nullptr;
    ASSERT_CUDA(
        LaunchRmsNorm(px, pw, eps, dy.get(), q8_ok ? dq.get() : nullptr, c.ne0, c.rows, nullptr));
    if (q8_ok) ASSERT_CUDA(LaunchRmsNorm(px, pw, eps, nullptr, dq2.get(), c.ne0, c.rows, nullptr));
    SYNC();
    const auto y = dy.ToHost();
    std::vector<float> ref(c.ne0);
    for (int64_t r = 0; r < c.rows; ++r) {
      RmsNormRef(x.data() + r * c.ne0, c.weight ? w.data() : nullptr, eps, ref.data(), c.ne0);
      for (int64_t i = 0; i < c.ne0; ++i) {
        const float got = y[r * c.ne0 + i];
        ASSERT_LE(std::fabs(got - ref[i]), 1e-6f * std::fabs(ref[i]) + 1e-30f)
            << "row " << r << " i " << i << " got " << got << " want " << ref[i];
        exact += got == ref[i];
        ++total;
      }
    }
    if (!q8_ok) continue;
    std::vector<BlockQ8A> want(nblk);
    QuantizeRowQ8A(y.data(), want.data(), n);  // rows are whole blocks: one call
    const auto got = dq.ToHost(), got2 = dq2.ToHost();
    for (int64_t b = 0; b < nblk; ++b) {
      ASSERT_EQ(std::memcmp(&got[b], &want[b], sizeof(BlockQ8A)), 0)
          << "block " << b << ": d " << got[b].d << " vs " << want[b].d << ", s " << got[b].s
          << " vs " << want[b].s;
      ASSERT_EQ(std::memcmp(&got2[b], &want[b], sizeof(BlockQ8A)), 0) << "y-less block " << b;
    }
  }
  std::printf("rmsnorm: %lld of %lld outputs bit-identical to the CPU formula\n",
              static_cast<long long>(exact), static_cast<long long>(total));
  EXPECT_EQ(LaunchRmsNorm(nullptr, nullptr, eps, nullptr, nullptr, 6, 1, nullptr),
            cudaErrorInvalidValue);
}

// ============================================================ RoPE

// The CPU's RopeF32 (engine/cpu/elementwise.cc).
void RopeRef(const float* x, const int32_t* pos, float* y, int64_t hd, int64_t n_heads, int64_t nt,
             int n_rot, int style, float base) {
  const int half = n_rot / 2;
  std::vector<float> freq(half), cs(half), sn(half);
  for (int i = 0; i < half; ++i) {
    freq[i] = std::pow(base, -2.0f * static_cast<float>(i) / static_cast<float>(n_rot));
  }
  for (int64_t t = 0; t < nt; ++t) {
    const float p = static_cast<float>(pos[t]);
    for (int i = 0; i < half; ++i) {
      const double theta = static_cast<double>(p * freq[i]);
      cs[i] = static_cast<float>(std::cos(theta));
      sn[i] = static_cast<float>(std::sin(theta));
    }
    for (int64_t h = 0; h < n_heads; ++h) {
      const float* xh = x + (t * n_heads + h) * hd;
      float* yh = y + (t * n_heads + h) * hd;
      for (int i = 0; i < half; ++i) {
        const int i0 = style == 0 ? i : 2 * i, i1 = style == 0 ? i + half : 2 * i + 1;
        const float x0 = xh[i0], x1 = xh[i1];
        yh[i0] = x0 * cs[i] - x1 * sn[i];
        yh[i1] = x0 * sn[i] + x1 * cs[i];
      }
      for (int64_t i = n_rot; i < hd; ++i) yh[i] = xh[i];
    }
  }
}

// Rotated values within 2^-22 (|x0| + |x1|) of the CPU's (a one-ulp cos/sin
// difference plus the rounding it moves; in practice identical), passed
// through dims exact.
TEST(RopeTest, MatchesCpuAngles) {
  MINFER_REQUIRE_GPU();
  struct Case {
    int64_t hd, heads, nt;
    int n_rot, style;
    bool in_place;
    float base;
  };
  const Case cases[] = {{128, 7, 5, 128, 0, false, 1000000.0f},
                        {128, 4, 33, 0, 0, true, 10000.0f},
                        {64, 3, 9, 32, 1, false, 10000.0f},
                        {64, 14, 4, 64, 1, true, 10000.0f},
                        {80, 2, 3, 48, 0, false, 500000.0f}};
  int64_t exact = 0, total = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "hd " << c.hd << " n_rot " << c.n_rot << " style "
                                      << c.style << " in_place " << c.in_place);
    const int n_rot = c.n_rot == 0 ? static_cast<int>(c.hd) : c.n_rot;
    const int64_t n = c.hd * c.heads * c.nt;
    const auto x = RandomFloats(n, 3.0f);
    std::vector<int32_t> pos(c.nt);
    for (auto& p : pos) p = RandInt(0, 131071);
    pos[0] = 0;
    DeviceBuffer<float> dx(x), dy(n);
    DeviceBuffer<int32_t> dp(pos);
    dy.Poison();
    float* out = c.in_place ? dx.get() : dy.get();
    ASSERT_CUDA(LaunchRope(dx.get(), dp.get(), out, c.hd, c.heads, c.nt, c.n_rot, c.style, c.base,
                           nullptr));
    SYNC();
    const auto y = c.in_place ? dx.ToHost() : dy.ToHost();
    std::vector<float> ref(n);
    RopeRef(x.data(), pos.data(), ref.data(), c.hd, c.heads, c.nt, n_rot, c.style, c.base);
    const int half = n_rot / 2;
    for (int64_t t = 0; t < c.nt; ++t)
      for (int64_t h = 0; h < c.heads; ++h) {
        const int64_t o = (t * c.heads + h) * c.hd;
        for (int i = 0; i < half; ++i) {
          const int i0 = c.style == 0 ? i : 2 * i, i1 = c.style == 0 ? i + half : 2 * i + 1;
          const float tol = 0x1p-22f * (std::fabs(x[o + i0]) + std::fabs(x[o + i1]));
          for (int k : {i0, i1}) {
            ASSERT_LE(std::fabs(y[o + k] - ref[o + k]), tol)
                << "t " << t << " pos " << pos[t] << " h " << h << " dim " << k;
            exact += y[o + k] == ref[o + k];
            ++total;
          }
        }
        for (int64_t i = n_rot; i < c.hd; ++i) ASSERT_EQ(y[o + i], x[o + i]);
      }
  }
  std::printf("rope: %lld of %lld rotated values bit-identical to the CPU's\n",
              static_cast<long long>(exact), static_cast<long long>(total));
}

// ============================================================ KV cache

int64_t RowBytes(KvType t, int64_t n) {
  return t == KvType::kF32 ? 4 * n : t == KvType::kF16 ? 2 * n : n / 32 * 34;
}

const char* Name(KvType t) {
  return t == KvType::kF32 ? "f32" : t == KvType::kF16 ? "f16" : t == KvType::kQ8_0 ? "q8_0" : "fp8";
}

// Encodes one row of floats in the cache's format, as the CPU store does.
void EncodeRow(KvType t, const float* src, uint8_t* dst, int64_t n) {
  switch (t) {
    case KvType::kF32:
      std::memcpy(dst, src, 4 * n);
      break;
    case KvType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = FloatToFp16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      break;
    case KvType::kQ8_0:
      QuantizeKvRow(KvQuant::kQ8_0, src, dst, n);
      break;
    case KvType::kFp8:
      QuantizeKvRow(KvQuant::kFp8, src, dst, n);
      break;
  }
}

void DecodeRow(KvType t, const uint8_t* src, float* dst, int64_t n) {
  switch (t) {
    case KvType::kF32:
      std::memcpy(dst, src, 4 * n);
      break;
    case KvType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = Fp16ToFloat(h);
      }
      break;
    case KvType::kQ8_0:
      DequantizeKvRow(KvQuant::kQ8_0, src, dst, n);
      break;
    case KvType::kFp8:
      DequantizeKvRow(KvQuant::kFp8, src, dst, n);
      break;
  }
}

constexpr KvType kAllKv[] = {KvType::kF32, KvType::kF16, KvType::kQ8_0, KvType::kFp8};

// Stored rows byte-identical to the CPU's encoding (f16 round-to-nearest-even,
// q8_0 and fp8 = QuantizeKvRow, engine/quant/kv_row.h); rows not addressed keep their poison; a bad
// position is skipped and flagged.
TEST(KvStoreTest, RowsMatchCpuEncodingBytes) {
  MINFER_REQUIRE_GPU();
  const int64_t n_ctx = 50;
  for (KvType t : kAllKv) {
    for (int64_t n_embd : {int64_t{256}, int64_t{896}}) {
      SCOPED_TRACE(::testing::Message() << Name(t) << " n_kv_embd " << n_embd);
      const std::vector<int32_t> pos = {3, 10, 49, 0, 20, 21, 5};
      const int64_t nt = pos.size();
      auto k = RandomFloats(nt * n_embd, 2.0f), v = RandomFloats(nt * n_embd, 0.5f);
      k[5] = 0.0f;  // a zero and a tiny value inside q8_0 blocks
      v[7] = 1e-30f;
      for (int i = 64; i < 96; ++i) k[i] = 0.0f;  // an all-zero q8_0 block (d = 0)
      const int64_t rb = RowBytes(t, n_embd);
      DeviceBuffer<float> dk(k), dv(v);
      DeviceBuffer<int32_t> dp(pos);
      DeviceBuffer<uint8_t> kc(n_ctx * rb), vc(n_ctx * rb);
      kc.Poison(0xA5);
      vc.Poison(0xA5);
      DeviceBuffer<int32_t> flag(FlagInit());
      ASSERT_CUDA(LaunchKvStore(dk.get(), dv.get(), dp.get(), nt, kc.get(), vc.get(), t, n_embd,
                                n_ctx, flag.get(), nullptr));
      SYNC();
      EXPECT_EQ(flag.ToHost()[0], kDeviceOk);
      const auto hk = kc.ToHost(), hv = vc.ToHost();
      std::vector<uint8_t> want(rb);
      std::vector<bool> written(n_ctx, false);
      for (int64_t i = 0; i < nt; ++i) {
        written[pos[i]] = true;
        EncodeRow(t, k.data() + i * n_embd, want.data(), n_embd);
        ASSERT_EQ(std::memcmp(hk.data() + pos[i] * rb, want.data(), rb), 0) << "k token " << i;
        EncodeRow(t, v.data() + i * n_embd, want.data(), n_embd);
        ASSERT_EQ(std::memcmp(hv.data() + pos[i] * rb, want.data(), rb), 0) << "v token " << i;
      }
      for (int64_t r = 0; r < n_ctx; ++r) {
        if (written[r]) continue;
        for (int64_t b = 0; b < rb; ++b) ASSERT_EQ(hk[r * rb + b], 0xA5) << "row " << r;
      }

      // Out-of-range positions: skipped, flagged; the good token is stored.
      const std::vector<int32_t> bad = {-1, 50, 7};
      DeviceBuffer<int32_t> dbad(bad);
      kc.Poison(0xA5);
      ASSERT_CUDA(LaunchKvStore(dk.get(), dv.get(), dbad.get(), 3, kc.get(), vc.get(), t, n_embd,
                                n_ctx, flag.get(), nullptr));
      SYNC();
      EXPECT_EQ(flag.ToHost()[0], kDeviceBadPosition);
      const auto hk2 = kc.ToHost();
      EncodeRow(t, k.data() + 2 * n_embd, want.data(), n_embd);
      EXPECT_EQ(std::memcmp(hk2.data() + 7 * rb, want.data(), rb), 0);
      int64_t touched = 0;
      for (int64_t r = 0; r < n_ctx; ++r)
        if (r != 7)
          for (int64_t b = 0; b < rb; ++b) touched += hk2[r * rb + b] != 0xA5;
      EXPECT_EQ(touched, 0);
    }
  }
}

// ============================================================ QkvBiasRopeStore

// Fused vs LaunchAdd + LaunchRope + LaunchKvStore: bit-identical q_out and
// cache bytes (the same operations in the same order), for one token
// (decode) and for 37 (prefill: q, k, v planar in one buffer, as FusedQKV
// writes them, at distinct shuffled positions), with plain RoPE and with
// YaRN's angles (gpt-oss's: factor 32 over 4,096 original positions).
TEST(QkvBiasRopeStoreTest, BitIdenticalToUnfusedComposition) {
  MINFER_REQUIRE_GPU();
  struct Shape {
    int n_head, n_head_kv, hd;
  };
  RopeYarnArgs gpt_oss;
  gpt_oss.freq_scale = 1.0f / 32.0f;
  gpt_oss.ext_factor = 1.0f;
  gpt_oss.attn_factor = 1.0f;
  gpt_oss.beta_fast = 32.0f;
  gpt_oss.beta_slow = 1.0f;
  gpt_oss.n_ctx_orig = 4096;
  const RopeYarnArgs* const yarns[] = {nullptr, &gpt_oss};
  for (const RopeYarnArgs* ya : yarns)
  for (const int64_t nt : {int64_t{1}, int64_t{37}})
  for (const Shape s : {Shape{14, 2, 64}, Shape{28, 4, 128}}) {
    for (KvType t : kAllKv) {
      for (int style : {0, 1}) {
        for (bool bias : {true, false}) {
          SCOPED_TRACE(::testing::Message()
                       << Name(t) << " hd " << s.hd << " style " << style << " bias " << bias
                       << " nt " << nt << " yarn " << (ya != nullptr));
          AttnParams p;
          p.n_head = s.n_head;
          p.n_head_kv = s.n_head_kv;
          p.head_dim = s.hd;
          p.n_ctx = 40;
          p.kv_type = t;
          const int64_t nq = int64_t{s.n_head} * s.hd, nkv = p.n_kv_embd();
          const auto qkv = RandomFloats((nq + 2 * nkv) * nt, 2.0f);
          const auto bq = RandomFloats(nq), bk = RandomFloats(nkv), bv = RandomFloats(nkv);
          std::vector<int32_t> pos = {RandInt(0, 39)};
          if (nt > 1) {
            std::vector<int32_t> all(40);
            for (int32_t i = 0; i < 40; ++i) all[i] = i;
            for (int32_t i = 39; i > 0; --i) std::swap(all[i], all[RandInt(0, i)]);
            pos.assign(all.begin(), all.begin() + nt);
          }
          const float base = 1000000.0f;
          DeviceBuffer<float> dqkv(qkv), dbq(bq), dbk(bk), dbv(bv), qout(nq * nt), qout2(nq * nt);
          DeviceBuffer<float> tq(nq * nt), tk(nkv * nt), tv(nkv * nt);
          DeviceBuffer<int32_t> dp(pos);
          const int64_t rb = RowBytes(t, nkv);
          DeviceBuffer<uint8_t> kc(p.n_ctx * rb), vc(p.n_ctx * rb), kc2(p.n_ctx * rb),
              vc2(p.n_ctx * rb);
          for (auto* b : {&kc, &vc, &kc2, &vc2}) b->Poison(0x5A);
          qout.Poison();
          qout2.Poison();
          DeviceBuffer<int32_t> flag(FlagInit());
          const float* q = dqkv.get();
          const float* k = q + nq * nt;
          const float* v = k + nkv * nt;
          ASSERT_CUDA(LaunchQkvBiasRopeStore(q, k, v, bias ? dbq.get() : nullptr,
                                             bias ? dbk.get() : nullptr, bias ? dbv.get() : nullptr,
                                             dp.get(), nt, qout.get(), kc.get(), vc.get(), p, style,
                                             base, flag.get(), nullptr, nullptr, nullptr, nullptr,
                                             nullptr, 0.0f, ya));
          // Unfused.
          if (bias) {
            ASSERT_CUDA(LaunchAdd(q, dbq.get(), nq, tq.get(), nq * nt, nullptr));
            ASSERT_CUDA(LaunchAdd(k, dbk.get(), nkv, tk.get(), nkv * nt, nullptr));
            ASSERT_CUDA(LaunchAdd(v, dbv.get(), nkv, tv.get(), nkv * nt, nullptr));
          } else {
            ASSERT_CUDA(cudaMemcpy(tq.get(), q, nq * nt * 4, cudaMemcpyDeviceToDevice));
            ASSERT_CUDA(cudaMemcpy(tk.get(), k, nkv * nt * 4, cudaMemcpyDeviceToDevice));
            ASSERT_CUDA(cudaMemcpy(tv.get(), v, nkv * nt * 4, cudaMemcpyDeviceToDevice));
          }
          ASSERT_CUDA(LaunchRope(tq.get(), dp.get(), qout2.get(), s.hd, s.n_head, nt, s.hd, style,
                                 base, nullptr, nullptr, ya));
          ASSERT_CUDA(LaunchRope(tk.get(), dp.get(), tk.get(), s.hd, s.n_head_kv, nt, s.hd, style,
                                 base, nullptr, nullptr, ya));
          ASSERT_CUDA(LaunchKvStore(tk.get(), tv.get(), dp.get(), nt, kc2.get(), vc2.get(), t, nkv,
                                    p.n_ctx, flag.get(), nullptr));
          SYNC();
          EXPECT_EQ(flag.ToHost()[0], kDeviceOk);
          const auto a = qout.ToHost(), b = qout2.ToHost();
          ASSERT_EQ(std::memcmp(a.data(), b.data(), nq * nt * 4), 0);
          ASSERT_TRUE(kc.ToHost() == kc2.ToHost()) << "k cache bytes differ";
          ASSERT_TRUE(vc.ToHost() == vc2.ToHost()) << "v cache bytes differ";
          // And the store really happened at pos[0] (the poison is gone).
          const auto hk = kc.ToHost();
          int64_t poisoned = 0;
          for (int64_t i = 0; i < rb; ++i) poisoned += hk[pos[0] * rb + i] == 0x5A;
          EXPECT_LT(poisoned, rb / 8);
        }
      }
    }
  }
}

// With Qwen3's per-head q/k norms: the fused epilogue against LaunchAdd +
// LaunchRmsNorm over head rows + LaunchRope + LaunchKvStore. The norm's
// double sum is added in another order than norm.cu's, so a head may round
// its inverse RMS one float ulp apart (~1e-8 of heads): every value within
// 2 ulps-ish (1e-6 relative), nearly every one bit-equal.
TEST(QkvBiasRopeStoreTest, QkNormsEqualTheUnfusedChain) {
  MINFER_REQUIRE_GPU();
  for (const int64_t nt : {int64_t{1}, int64_t{23}})
  for (const int hd : {64, 128}) {
    SCOPED_TRACE(::testing::Message() << "hd " << hd << " nt " << nt);
    AttnParams p;
    p.n_head = 16;
    p.n_head_kv = 4;
    p.head_dim = hd;
    p.n_ctx = 32;
    p.kv_type = KvType::kF32;
    const int64_t nq = int64_t{p.n_head} * hd, nkv = p.n_kv_embd();
    const auto qkv = RandomFloats((nq + 2 * nkv) * nt, 3.0f);
    const auto bq = RandomFloats(nq), bk = RandomFloats(nkv), bv = RandomFloats(nkv);
    const auto qn = RandomFloats(hd, 2.0f), kn = RandomFloats(hd, 2.0f);
    std::vector<int32_t> pos(nt);
    for (int64_t t = 0; t < nt; ++t) pos[t] = static_cast<int32_t>((t * 7 + 3) % p.n_ctx);
    const float eps = 1e-6f, base = 1000000.0f;
    DeviceBuffer<float> dqkv(qkv), dbq(bq), dbk(bk), dbv(bv), dqn(qn), dkn(kn);
    DeviceBuffer<float> qout(nq * nt), qout2(nq * nt), tq(nq * nt), tk(nkv * nt), tv(nkv * nt);
    DeviceBuffer<int32_t> dp(pos);
    const int64_t rb = RowBytes(p.kv_type, nkv);
    DeviceBuffer<uint8_t> kc(p.n_ctx * rb), vc(p.n_ctx * rb), kc2(p.n_ctx * rb), vc2(p.n_ctx * rb);
    for (auto* b : {&kc, &vc, &kc2, &vc2}) b->Poison(0);
    DeviceBuffer<int32_t> flag(FlagInit());
    const float* q = dqkv.get();
    const float* k = q + nq * nt;
    const float* v = k + nkv * nt;
    ASSERT_CUDA(LaunchQkvBiasRopeStore(q, k, v, dbq.get(), dbk.get(), dbv.get(), dp.get(), nt,
                                       qout.get(), kc.get(), vc.get(), p, 0, base, flag.get(),
                                       nullptr, nullptr, nullptr, dqn.get(), dkn.get(), eps));
    ASSERT_CUDA(LaunchAdd(q, dbq.get(), nq, tq.get(), nq * nt, nullptr));
    ASSERT_CUDA(LaunchAdd(k, dbk.get(), nkv, tk.get(), nkv * nt, nullptr));
    ASSERT_CUDA(LaunchAdd(v, dbv.get(), nkv, tv.get(), nkv * nt, nullptr));
    ASSERT_CUDA(LaunchRmsNorm(tq.get(), dqn.get(), eps, tq.get(), nullptr, hd, p.n_head * nt,
                              nullptr));
    ASSERT_CUDA(LaunchRmsNorm(tk.get(), dkn.get(), eps, tk.get(), nullptr, hd,
                              p.n_head_kv * nt, nullptr));
    ASSERT_CUDA(LaunchRope(tq.get(), dp.get(), qout2.get(), hd, p.n_head, nt, hd, 0, base,
                           nullptr));
    ASSERT_CUDA(LaunchRope(tk.get(), dp.get(), tk.get(), hd, p.n_head_kv, nt, hd, 0, base,
                           nullptr));
    ASSERT_CUDA(LaunchKvStore(tk.get(), tv.get(), dp.get(), nt, kc2.get(), vc2.get(), p.kv_type,
                              nkv, p.n_ctx, flag.get(), nullptr));
    SYNC();
    EXPECT_EQ(flag.ToHost()[0], kDeviceOk);
    auto compare = [](const std::vector<float>& a, const std::vector<float>& b) {
      ASSERT_EQ(a.size(), b.size());
      int64_t differ = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_NEAR(a[i], b[i], 1e-6 * std::max(1.0f, std::fabs(b[i]))) << "at " << i;
        differ += std::memcmp(&a[i], &b[i], 4) != 0;
      }
      EXPECT_LE(differ, static_cast<int64_t>(a.size() / 100)) << "values not bit-equal";
    };
    compare(qout.ToHost(), qout2.ToHost());
    auto floats = [](const std::vector<uint8_t>& bytes) {
      std::vector<float> f(bytes.size() / 4);
      std::memcpy(f.data(), bytes.data(), bytes.size());
      return f;
    };
    compare(floats(kc.ToHost()), floats(kc2.ToHost()));
    compare(floats(vc.ToHost()), floats(vc2.ToHost()));
  }
}

TEST(QkvBiasRopeStoreTest, BadPositionSkippedAndFlagged) {
  MINFER_REQUIRE_GPU();
  AttnParams p;
  p.n_head = 4;
  p.n_head_kv = 2;
  p.head_dim = 64;
  p.n_ctx = 8;
  p.kv_type = KvType::kF16;
  const auto qkv = RandomFloats(4 * 64 + 2 * 128);
  DeviceBuffer<float> dqkv(qkv), qout(4 * 64);
  DeviceBuffer<int32_t> dp(std::vector<int32_t>{8});
  DeviceBuffer<uint8_t> kc(8 * 256), vc(8 * 256);
  kc.Poison(0x11);
  DeviceBuffer<int32_t> flag(FlagInit());
  ASSERT_CUDA(LaunchQkvBiasRopeStore(dqkv.get(), dqkv.get() + 256, dqkv.get() + 384, nullptr,
                                     nullptr, nullptr, dp.get(), 1, qout.get(), kc.get(), vc.get(), p,
                                     0, 10000.0f, flag.get(), nullptr));
  SYNC();
  EXPECT_EQ(flag.ToHost()[0], kDeviceBadPosition);
  for (uint8_t b : kc.ToHost()) ASSERT_EQ(b, 0x11);
}

// q, k and v as a split-k GEMM's kept partials (QkvPartials: 3, 1 and 2
// slabs, strides past the values, one not a multiple of 4) give the bits of
// the same launch on their sums (added in split order, as the GEMM's reduce
// does): roped q and both cache rows. Splits outside 1..16 are refused.
TEST(QkvBiasRopeStoreTest, FromPartialsEqualsTheReducedInput) {
  MINFER_REQUIRE_GPU();
  AttnParams p;
  p.n_head = 8;
  p.n_head_kv = 2;
  p.head_dim = 64;
  p.n_ctx = 32;
  p.kv_type = KvType::kF16;
  const int64_t nt = 5, nq = int64_t{p.n_head} * p.head_dim, nkv = p.n_kv_embd();
  const int splits[3] = {3, 1, 2};
  const int64_t count[3] = {nq * nt, nkv * nt, nkv * nt};
  const int64_t stride[3] = {nq * nt + 8, 0, nkv * nt + 3};
  std::vector<float> slabs[3], sums;
  for (int i = 0; i < 3; ++i) {
    slabs[i] = RandomFloats(splits[i] == 1 ? count[i] : splits[i] * stride[i], 2.0f);
    for (int64_t j = 0; j < count[i]; ++j) {
      float v = slabs[i][j];
      for (int z = 1; z < splits[i]; ++z) v += slabs[i][z * stride[i] + j];
      sums.push_back(v);
    }
  }
  const auto bq = RandomFloats(nq), bk = RandomFloats(nkv), bv = RandomFloats(nkv);
  std::vector<int32_t> pos(nt);
  for (int64_t t = 0; t < nt; ++t) pos[t] = static_cast<int32_t>(3 * t + 1);
  DeviceBuffer<float> ds0(slabs[0]), ds1(slabs[1]), ds2(slabs[2]), dsum(sums);
  DeviceBuffer<float> dbq(bq), dbk(bk), dbv(bv), qa(nq * nt), qb(nq * nt);
  DeviceBuffer<int32_t> dp(pos), flag(FlagInit());
  const int64_t rb = RowBytes(p.kv_type, nkv);
  DeviceBuffer<uint8_t> kca(p.n_ctx * rb), vca(p.n_ctx * rb), kcb(p.n_ctx * rb), vcb(p.n_ctx * rb);
  for (auto* b : {&kca, &vca, &kcb, &vcb}) b->Poison(0);
  QkvPartials parts;
  for (int i = 0; i < 3; ++i) {
    parts.splits[i] = splits[i];
    parts.stride[i] = stride[i];
  }
  ASSERT_CUDA(LaunchQkvBiasRopeStore(ds0.get(), ds1.get(), ds2.get(), dbq.get(), dbk.get(),
                                     dbv.get(), dp.get(), nt, qa.get(), kca.get(), vca.get(), p, 0,
                                     10000.0f, flag.get(), nullptr, nullptr, nullptr, nullptr,
                                     nullptr, 0.0f, nullptr, &parts));
  const float* q = dsum.get();
  ASSERT_CUDA(LaunchQkvBiasRopeStore(q, q + nq * nt, q + (nq + nkv) * nt, dbq.get(), dbk.get(),
                                     dbv.get(), dp.get(), nt, qb.get(), kcb.get(), vcb.get(), p, 0,
                                     10000.0f, flag.get(), nullptr));
  SYNC();
  EXPECT_EQ(flag.ToHost()[0], kDeviceOk);
  const auto a = qa.ToHost(), b = qb.ToHost();
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "roped q";
  EXPECT_EQ(kca.ToHost(), kcb.ToHost()) << "k cache rows";
  EXPECT_EQ(vca.ToHost(), vcb.ToHost()) << "v cache rows";
  for (int bad : {0, 17}) {
    parts.splits[1] = bad;
    EXPECT_EQ(LaunchQkvBiasRopeStore(ds0.get(), ds1.get(), ds2.get(), nullptr, nullptr, nullptr,
                                     dp.get(), nt, qa.get(), kca.get(), vca.get(), p, 0, 10000.0f,
                                     flag.get(), nullptr, nullptr, nullptr, nullptr, nullptr, 0.0f,
                                     nullptr, &parts),
              cudaErrorInvalidValue)
        << bad << " splits";
  }
}

// ============================================================ attention

// A host cache of n_ctx rows: rows [0, n_valid) random and encoded, the rest
// NaN bytes (an attention kernel that reads past the causal bound turns its
// output into NaN). `vals` holds the decoded values the kernels see.
struct HostCache {
  KvType type;
  int64_t n_ctx, n_embd, rb;
  std::vector<uint8_t> k, v;
  std::vector<float> kf, vf;
};

HostCache MakeCache(KvType t, int64_t n_ctx, int64_t n_embd, int64_t n_valid) {
  HostCache c{t, n_ctx, n_embd, RowBytes(t, n_embd), {}, {}, {}, {}};
  c.k.assign(n_ctx * c.rb, 0xFF);
  c.v.assign(n_ctx * c.rb, 0xFF);
  c.kf.assign(n_ctx * n_embd, NAN);
  c.vf.assign(n_ctx * n_embd, NAN);
  const auto k = RandomFloats(n_valid * n_embd), v = RandomFloats(n_valid * n_embd);
  for (int64_t r = 0; r < n_valid; ++r) {
    EncodeRow(t, k.data() + r * n_embd, c.k.data() + r * c.rb, n_embd);
    EncodeRow(t, v.data() + r * n_embd, c.v.data() + r * c.rb, n_embd);
    DecodeRow(t, c.k.data() + r * c.rb, c.kf.data() + r * n_embd, n_embd);
    DecodeRow(t, c.v.data() + r * c.rb, c.vf.data() + r * n_embd, n_embd);
  }
  return c;
}

// float64 attention of one query (head h at position p) over rows 0..p.
void AttnRef(const float* q, int64_t p, int h, int group, int hd, float scale, const HostCache& c,
             double* out) {
  const int hk = h / group;
  std::vector<double> s(p + 1);
  double mx = -INFINITY;
  for (int64_t r = 0; r <= p; ++r) {
    double d = 0;
    const float* kr = c.kf.data() + r * c.n_embd + int64_t{hk} * hd;
    for (int i = 0; i < hd; ++i) d += static_cast<double>(q[i]) * kr[i];
    s[r] = d * scale;
    mx = std::max(mx, s[r]);
  }
  double sum = 0;
  for (auto& x : s) sum += (x = std::exp(x - mx));
  for (int i = 0; i < hd; ++i) out[i] = 0;
  for (int64_t r = 0; r <= p; ++r) {
    const float* vr = c.vf.data() + r * c.n_embd + int64_t{hk} * hd;
    for (int i = 0; i < hd; ++i) out[i] += s[r] / sum * vr[i];
  }
}

float MaxAbsValid(const std::vector<float>& v) {
  float m = 0;
  for (float x : v)
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  return m;
}

struct AttnShape {
  int n_head, n_head_kv, hd;
};
// GQA ratios 1, 2 and 7 at head_dim 64 and 128 (7B is 28/4/128).
constexpr AttnShape kAttnShapes[] = {{4, 4, 128}, {4, 2, 64}, {14, 2, 128}, {7, 1, 64}};

// The attention tests' parameters: shape s over a cache of type t and n_ctx
// rows, the usual 1/sqrt(head_dim) scale.
AttnParams DecodeParams(const AttnShape& s, KvType t, int64_t n_ctx) {
  AttnParams p;
  p.n_head = s.n_head;
  p.n_head_kv = s.n_head_kv;
  p.head_dim = s.hd;
  p.scale = 1.0f / std::sqrt(static_cast<float>(s.hd));
  p.n_ctx = n_ctx;
  p.kv_type = t;
  return p;
}

// Split-KV decode against float64 at context lengths 1, 31, 33 (most of the
// 32 stripes empty or one row), 600 and 4,096, for every cache type, GQA
// ratio and both bodies (forced and automatic). Bound: 1e-5 * max|V| per
// output — float scores and accumulation over up to 4,096 rows give ~1e-6;
// a wrong or missing row is off by ~1e-2 or NaN.
TEST(AttnDecodeTest, MatchesFloat64Reference) {
  MINFER_REQUIRE_GPU();
  const int64_t lengths[] = {1, 31, 33, 600, 4096};
  const int32_t long_mins[] = {kAttnLongMinRows, 0, INT32_MAX};
  double worst = 0;
  for (KvType t : kAllKv) {
    for (const AttnShape& s : kAttnShapes) {
      for (int64_t n_kv : lengths) {
        AttnParams p = DecodeParams(s, t, n_kv + 37);
        const HostCache c = MakeCache(t, p.n_ctx, p.n_kv_embd(), n_kv);
        DeviceBuffer<uint8_t> dk(c.k), dv(c.v);
        const auto q = RandomFloats(int64_t{s.n_head} * s.hd, 2.0f);  // sharper softmax
        DeviceBuffer<float> dq(q), partial(AttnDecodePartialFloats(p)), out(q.size());
        DeviceBuffer<int32_t> dp(std::vector<int32_t>{static_cast<int32_t>(n_kv - 1)});
        std::vector<double> ref(q.size());
        for (int h = 0; h < s.n_head; ++h) {
          AttnRef(q.data() + int64_t{h} * s.hd, n_kv - 1, h, s.n_head / s.n_head_kv, s.hd, p.scale,
                  c, ref.data() + int64_t{h} * s.hd);
        }
        const float vmax = MaxAbsValid(c.vf);
        for (int32_t long_min : long_mins) {
          SCOPED_TRACE(::testing::Message()
                       << Name(t) << " heads " << s.n_head << "/" << s.n_head_kv << " hd " << s.hd
                       << " n_kv " << n_kv << " long_min " << long_min);
          partial.Poison();
          out.Poison();
          AttnDecodeConfig cfg;
          cfg.long_min_rows = long_min;
          ASSERT_CUDA(LaunchAttnDecodeConfigured(dq.get(), dp.get(), dk.get(), dv.get(),
                                                 partial.get(), out.get(), p, cfg, nullptr));
          SYNC();
          const auto o = out.ToHost();
          for (size_t i = 0; i < o.size(); ++i) {
            const double err = std::fabs(o[i] - ref[i]);
            ASSERT_LE(err, 1e-5 * vmax) << "head " << i / s.hd << " dim " << i % s.hd << " got "
                                        << o[i] << " want " << ref[i];
            worst = std::max(worst, err / vmax);
          }
        }
      }
    }
  }
  std::printf("attention decode: worst error %.3g x max|V| vs float64\n", worst);
}

// The production split (32 stripes, both bodies) against the serial
// one-stripe one-warp scan: only the float summation order differs.
// Bound: 4e-6 * max|V| ("~1e-6 relative": a float sum over 4,096 rows drifts
// by ~sqrt(4096) * 2^-24 ~ 4e-6 of the terms' scale at worst in practice).
TEST(AttnDecodeTest, SplitMatchesOneStripe) {
  MINFER_REQUIRE_GPU();
  double worst = 0;
  for (KvType t : kAllKv) {
    for (const AttnShape& s : kAttnShapes) {
      for (int64_t n_kv : {int64_t{33}, int64_t{1000}, int64_t{4096}}) {
        SCOPED_TRACE(::testing::Message() << Name(t) << " heads " << s.n_head << "/" << s.n_head_kv
                                          << " hd " << s.hd << " n_kv " << n_kv);
        AttnParams p = DecodeParams(s, t, n_kv);
        const HostCache c = MakeCache(t, p.n_ctx, p.n_kv_embd(), n_kv);
        DeviceBuffer<uint8_t> dk(c.k), dv(c.v);
        const auto q = RandomFloats(int64_t{s.n_head} * s.hd, 2.0f);
        DeviceBuffer<float> dq(q), partial(AttnDecodePartialFloats(p)), o1(q.size()), o2(q.size());
        DeviceBuffer<int32_t> dp(std::vector<int32_t>{static_cast<int32_t>(n_kv - 1)});
        partial.Poison();
        o1.Poison();
        o2.Poison();
        ASSERT_CUDA(LaunchAttnDecode(dq.get(), dp.get(), dk.get(), dv.get(), partial.get(),
                                     o1.get(), p, nullptr));
        AttnDecodeConfig one;
        one.n_splits = 1;
        one.long_min_rows = INT32_MAX;
        ASSERT_CUDA(LaunchAttnDecodeConfigured(dq.get(), dp.get(), dk.get(), dv.get(),
                                               partial.get(), o2.get(), p, one, nullptr));
        SYNC();
        const auto a = o1.ToHost(), b = o2.ToHost();
        const float vmax = MaxAbsValid(c.vf);
        for (size_t i = 0; i < a.size(); ++i) {
          ASSERT_LE(std::fabs(a[i] - b[i]), 4e-6f * vmax)
              << "i " << i << ": " << a[i] << " vs " << b[i];
          worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i]) / vmax));
        }
      }
    }
  }
  std::printf("attention decode: split vs one-stripe worst difference %.3g x max|V|\n", worst);
}

// Programmatic dependent launch on for this thread's launches where the
// device has it (compute capability 9.0+), as the backend sets it; the
// tests turn it off again at their end.
void PdlWhereSupported() {
  int device = 0, major = 0;
  ASSERT_CUDA(cudaGetDevice(&device));
  ASSERT_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  SetProgrammaticLaunch(major >= 9);
}

// The combine in the bodies (AttnDecodeConfig::counters: the block that
// finishes a head's last stripe merges them) gives the combine kernel's
// output bit for bit — the same partials, the same merge — for every cache
// type, GQA ratio and body, with a sliding window and sinks, twice in a row
// (the counters return to zero), with PDL on where the device has it.
TEST(AttnDecodeTest, FusedCombineEqualsTheCombineKernel) {
  MINFER_REQUIRE_GPU();
  ASSERT_NO_FATAL_FAILURE(PdlWhereSupported());
  for (KvType t : kAllKv) {
    for (const AttnShape& s : kAttnShapes) {
      for (int64_t n_kv : {int64_t{1}, int64_t{33}, int64_t{600}, int64_t{4096}}) {
        for (int variant = 0; variant < 2; ++variant) {  // plain; window + sinks
          AttnParams p = DecodeParams(s, t, n_kv + 5);
          const HostCache c = MakeCache(t, p.n_ctx, p.n_kv_embd(), n_kv);
          DeviceBuffer<uint8_t> dk(c.k), dv(c.v);
          const auto q = RandomFloats(int64_t{s.n_head} * s.hd, 2.0f);
          DeviceBuffer<float> dq(q), partial(AttnDecodePartialFloats(p)), o1(q.size()),
              o2(q.size()), sinks(RandomFloats(s.n_head, 3.0f));
          DeviceBuffer<int32_t> dp(std::vector<int32_t>{static_cast<int32_t>(n_kv - 1)});
          DeviceBuffer<int32_t> counters(
              std::vector<int32_t>(static_cast<size_t>(AttnDecodeCounters(p, 1)), 0));
          if (variant == 1) {
            p.window = 100;
            p.sinks = sinks.get();
          }
          for (int32_t long_min : {kAttnLongMinRows, 0, INT32_MAX}) {
            SCOPED_TRACE(::testing::Message()
                         << Name(t) << " heads " << s.n_head << "/" << s.n_head_kv << " hd "
                         << s.hd << " n_kv " << n_kv << " variant " << variant << " long_min "
                         << long_min);
            AttnDecodeConfig cfg;
            cfg.long_min_rows = long_min;
            o1.Poison();
            ASSERT_CUDA(LaunchAttnDecodeConfigured(dq.get(), dp.get(), dk.get(), dv.get(),
                                                   partial.get(), o1.get(), p, cfg, nullptr));
            cfg.counters = counters.get();
            for (int rep = 0; rep < 2; ++rep) {
              o2.Poison();
              ASSERT_CUDA(LaunchAttnDecodeConfigured(dq.get(), dp.get(), dk.get(), dv.get(),
                                                     partial.get(), o2.get(), p, cfg, nullptr));
              SYNC();
              const auto a = o1.ToHost(), b = o2.ToHost();
              ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "rep " << rep;
              for (int32_t v : counters.ToHost()) ASSERT_EQ(v, 0);
            }
          }
        }
      }
    }
  }
  SetProgrammaticLaunch(false);
}

// With AttnDecodeConfig::q8 the decode also writes each token's output row
// quantized: bit for bit the host's QuantizeRowQ8A of the floats it wrote,
// and the floats themselves unchanged, from the combine kernel and from the
// combine in the bodies, for every cache type, GQA shape and body.
TEST(AttnDecodeTest, Q8OutputIsQuantizeRowQ8AOfTheFloats) {
  MINFER_REQUIRE_GPU();
  ASSERT_NO_FATAL_FAILURE(PdlWhereSupported());
  for (KvType t : kAllKv) {
    for (const AttnShape& s : kAttnShapes) {
      for (int64_t n_kv : {int64_t{1}, int64_t{600}}) {
        AttnParams p = DecodeParams(s, t, n_kv + 5);
        const HostCache c = MakeCache(t, p.n_ctx, p.n_kv_embd(), n_kv);
        DeviceBuffer<uint8_t> dk(c.k), dv(c.v);
        const auto q = RandomFloats(int64_t{s.n_head} * s.hd, 2.0f);
        const int64_t n_blocks = static_cast<int64_t>(q.size()) / 32;
        DeviceBuffer<float> dq(q), partial(AttnDecodePartialFloats(p)), plain(q.size()),
            out(q.size());
        DeviceBuffer<int32_t> dp(std::vector<int32_t>{static_cast<int32_t>(n_kv - 1)});
        DeviceBuffer<int32_t> counters(
            std::vector<int32_t>(static_cast<size_t>(AttnDecodeCounters(p, 1)), 0));
        DeviceBuffer<uint8_t> q8(static_cast<size_t>(n_blocks * sizeof(BlockQ8A)));
        for (int fused = 0; fused < 2; ++fused) {
          for (int32_t long_min : {kAttnLongMinRows, 0, INT32_MAX}) {
            SCOPED_TRACE(::testing::Message()
                         << Name(t) << " heads " << s.n_head << "/" << s.n_head_kv << " hd "
                         << s.hd << " n_kv " << n_kv << " fused " << fused << " long_min "
                         << long_min);
            AttnDecodeConfig cfg;
            cfg.long_min_rows = long_min;
            cfg.counters = fused ? counters.get() : nullptr;
            ASSERT_CUDA(LaunchAttnDecodeConfigured(dq.get(), dp.get(), dk.get(), dv.get(),
                                                   partial.get(), plain.get(), p, cfg, nullptr));
            out.Poison();
            q8.Poison();
            cfg.q8 = reinterpret_cast<BlockQ8A*>(q8.get());
            ASSERT_CUDA(LaunchAttnDecodeConfigured(dq.get(), dp.get(), dk.get(), dv.get(),
                                                   partial.get(), out.get(), p, cfg, nullptr));
            SYNC();
            const auto a = plain.ToHost(), b = out.ToHost();
            ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
            std::vector<BlockQ8A> want(static_cast<size_t>(n_blocks));
            QuantizeRowQ8A(b.data(), want.data(), static_cast<int64_t>(b.size()));
            const auto got = q8.ToHost();
            ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0);
          }
        }
      }
    }
  }
  // head_dim 36 is not whole q8 blocks: refused.
  AttnParams p;
  p.n_head = 2;
  p.n_head_kv = 2;
  p.head_dim = 36;
  p.n_ctx = 8;
  AttnDecodeConfig cfg;
  DeviceBuffer<float> buf(4096);
  DeviceBuffer<int32_t> dp(std::vector<int32_t>{0});
  cfg.q8 = reinterpret_cast<BlockQ8A*>(buf.get());
  EXPECT_EQ(LaunchAttnDecodeConfigured(buf.get(), dp.get(), buf.get(), buf.get(), buf.get(),
                                       buf.get(), p, cfg, nullptr),
            cudaErrorInvalidValue);
  cudaGetLastError();
  SetProgrammaticLaunch(false);
}

// A captured launch must stay valid when the context grows: the same
// arguments, with only the device-side position changed, give the answer
// for the new length.
TEST(AttnDecodeTest, PositionIsReadOnTheDevice) {
  MINFER_REQUIRE_GPU();
  AttnParams p;
  p.n_head = 14;
  p.n_head_kv = 2;
  p.head_dim = 128;
  p.scale = 1.0f / std::sqrt(128.0f);
  p.n_ctx = 3000;
  p.kv_type = KvType::kF16;
  const HostCache c = MakeCache(p.kv_type, p.n_ctx, p.n_kv_embd(), p.n_ctx);
  DeviceBuffer<uint8_t> dk(c.k), dv(c.v);
  const auto q = RandomFloats(14 * 128);
  DeviceBuffer<float> dq(q), partial(AttnDecodePartialFloats(p)), out(q.size());
  DeviceBuffer<int32_t> dp(1);
  cudaStream_t stream;
  ASSERT_CUDA(cudaStreamCreate(&stream));
  cudaGraph_t graph;
  ASSERT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  ASSERT_CUDA(LaunchAttnDecode(dq.get(), dp.get(), dk.get(), dv.get(), partial.get(), out.get(), p,
                               stream));
  ASSERT_CUDA(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  const float vmax = MaxAbsValid(c.vf);
  for (int32_t pos : {0, 100, 511, 512, 2999}) {
    ASSERT_CUDA(cudaMemcpy(dp.get(), &pos, 4, cudaMemcpyHostToDevice));
    out.Poison();
    ASSERT_CUDA(cudaGraphLaunch(exec, stream));
    ASSERT_CUDA(cudaStreamSynchronize(stream));
    const auto o = out.ToHost();
    std::vector<double> ref(128);
    for (int h = 0; h < 14; ++h) {
      AttnRef(q.data() + h * 128, pos, h, 7, 128, p.scale, c, ref.data());
      for (int i = 0; i < 128; ++i) {
        ASSERT_LE(std::fabs(o[h * 128 + i] - ref[i]), 1e-5 * vmax) << "pos " << pos << " h " << h;
      }
    }
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(AttnDecodeTest, RejectsUnsupportedShapes) {
  MINFER_REQUIRE_GPU();
  DeviceBuffer<float> buf(1 << 16);
  DeviceBuffer<int32_t> dp(1);
  AttnParams p;
  p.n_head = 4;
  p.n_head_kv = 4;
  p.head_dim = 132;
  p.n_ctx = 4;
  EXPECT_EQ(
      LaunchAttnDecode(buf.get(), dp.get(), buf.get(), buf.get(), buf.get(), buf.get(), p, nullptr),
      cudaErrorInvalidValue);
  p.head_dim = 64;
  p.n_head_kv = 3;
  EXPECT_EQ(
      LaunchAttnDecode(buf.get(), dp.get(), buf.get(), buf.get(), buf.get(), buf.get(), p, nullptr),
      cudaErrorInvalidValue);
  p.n_head_kv = 2;
  EXPECT_EQ(LaunchAttnDecode(buf.get() + 1, dp.get(), buf.get(), buf.get(), buf.get(), buf.get(), p,
                             nullptr),
            cudaErrorMisalignedAddress);
  EXPECT_EQ(
      LaunchAttnPrefill(buf.get(), dp.get(), 1, buf.get(), buf.get(), buf.get() + 2, p, nullptr),
      cudaErrorMisalignedAddress);
}

// Prefill against float64, checking `check` tokens (all when empty). The
// CUDA-core kernel is forced (LaunchAttnPrefill would hand f16 caches with
// nt >= 16 to the tensor-core kernel, whose bound is its own: its tests are
// the AttnPrefillTcTest cases below).
void RunPrefill(KvType t, const AttnShape& s, const std::vector<int32_t>& pos,
                std::vector<int64_t> check, double* worst) {
  const int64_t nt = pos.size();
  const int64_t max_pos = *std::max_element(pos.begin(), pos.end());
  AttnParams p = DecodeParams(s, t, max_pos + 1 + 29);
  const HostCache c = MakeCache(t, p.n_ctx, p.n_kv_embd(), max_pos + 1);
  DeviceBuffer<uint8_t> dk(c.k), dv(c.v);
  const int64_t nq = int64_t{s.n_head} * s.hd;
  const auto q = RandomFloats(nq * nt, 2.0f);
  DeviceBuffer<float> dq(q), out(nq * nt);
  DeviceBuffer<int32_t> dp(pos);
  out.Poison();
  AttnPrefillConfig cuda_core;
  cuda_core.tc_min_tokens = INT64_MAX;
  ASSERT_CUDA(LaunchAttnPrefillConfigured(dq.get(), dp.get(), nt, dk.get(), dv.get(), out.get(), p,
                                          cuda_core, nullptr));
  SYNC();
  const auto o = out.ToHost();
  const float vmax = MaxAbsValid(c.vf);
  if (check.empty()) {
    check.resize(nt);
    std::iota(check.begin(), check.end(), 0);
  }
  std::vector<double> ref(s.hd);
  for (int64_t tok : check) {
    for (int h = 0; h < s.n_head; ++h) {
      AttnRef(q.data() + (tok * s.n_head + h) * s.hd, pos[tok], h, s.n_head / s.n_head_kv, s.hd,
              p.scale, c, ref.data());
      for (int i = 0; i < s.hd; ++i) {
        const double err = std::fabs(o[(tok * s.n_head + h) * s.hd + i] - ref[i]);
        ASSERT_LE(err, 1e-5 * vmax)
            << "token " << tok << " pos " << pos[tok] << " head " << h << " dim " << i;
        *worst = std::max(*worst, err / vmax);
      }
    }
  }
}

// Causal prefill at nt 1, 9, 100, 300 from a nonzero start position, every
// cache type and GQA shape. Bound as decode: 1e-5 * max|V|.
TEST(AttnPrefillTest, MatchesFloat64Reference) {
  MINFER_REQUIRE_GPU();
  double worst = 0;
  for (KvType t : kAllKv) {
    for (const AttnShape& s : kAttnShapes) {
      for (int64_t nt : {1, 9, 100, 300}) {
        SCOPED_TRACE(::testing::Message() << Name(t) << " heads " << s.n_head << "/" << s.n_head_kv
                                          << " hd " << s.hd << " nt " << nt);
        std::vector<int32_t> pos(nt);
        std::iota(pos.begin(), pos.end(), 37);
        RunPrefill(t, s, pos, {}, &worst);
        if (HasFatalFailure()) return;
      }
    }
  }
  std::printf("attention prefill: worst error %.3g x max|V| vs float64\n", worst);
}

// Positions need not be sorted or contiguous (the kernel reads them all on
// the device and bounds each tile by their maximum).
TEST(AttnPrefillTest, ShuffledPositions) {
  MINFER_REQUIRE_GPU();
  double worst = 0;
  std::vector<int32_t> pos(77);
  for (auto& x : pos) x = RandInt(0, 500);
  pos[5] = 0;
  for (KvType t : kAllKv) {
    SCOPED_TRACE(Name(t));
    RunPrefill(t, AttnShape{14, 2, 128}, pos, {}, &worst);
  }
}

// A 4,096-token prompt at 7B shapes (f16 cache): a sample of tokens, first
// and last included, checked against float64.
TEST(AttnPrefillTest, Prompt4096Sampled) {
  MINFER_REQUIRE_GPU();
  std::vector<int32_t> pos(4096);
  std::iota(pos.begin(), pos.end(), 0);
  std::vector<int64_t> check = {0, 1, 31, 32, 33, 4095};
  for (int i = 0; i < 26; ++i) check.push_back(RandInt(0, 4095));
  double worst = 0;
  RunPrefill(KvType::kF16, AttnShape{28, 4, 128}, pos, check, &worst);
  std::printf("attention prefill 4096: worst error %.3g x max|V|\n", worst);
}

// ============================================================ tensor-core prefill
//
// LaunchAttnPrefillTc (f16 cache, head_dim 64/128) rounds Q (pre-scaled by
// scale * log2 e) and the softmax weights P to f16. Each output is checked
// three ways (u = 2^-11; the bounds are those of ops.h):
//   vs exact float64 attention: max|V| * ((2 A + 2) u + 1e-5), A = scale *
//     max over visible rows of sum |q_i k_i| for that (token, head);
//   vs float64 attention from the same f16-rounded q: max|V| * (u + 1e-4),
//     only P's rounding and f32 sums left (a wrong or missing row, a wrong
//     fragment index or mask is off by far more, or NaN from the poisoned
//     cache rows and outputs);
//   vs the CUDA-core kernel (~1e-6 from exact): the first bound + 1e-5.

constexpr double kF16Unit = 1.0 / 2048;  // 2^-11

// float64 references for one query (head h at position p): `exact` as
// AttnRef, `rounded` from q rounded as the kernel rounds it (q * float(scale
// * log2 e) in float, then to f16; scores in the exp2 domain), and *a_max =
// A as above.
// window > 0: rows [p - window + 1, p] only (gpt-oss's sliding window);
// sink (non-null): a logit of its own, natural-log units, that joins the
// normalizer (AttnParams::sinks).
void AttnRefTc(const float* q, int64_t p, int h, int group, int hd, float scale, const HostCache& c,
               double* exact, double* rounded, double* a_max, int window = 0,
               const float* sink = nullptr) {
  const int hk = h / group;
  const float qscale = scale * 1.44269504088896340736f;  // the launcher's float product
  std::vector<double> qr(hd);
  for (int i = 0; i < hd; ++i) qr[i] = Fp16ToFloat(FloatToFp16(q[i] * qscale));
  const int64_t lo = window > 0 ? std::max<int64_t>(p - window + 1, 0) : 0;
  std::vector<double> s(p + 1, -INFINITY), s2(p + 1, -INFINITY);
  double mx = -INFINITY, mx2 = -INFINITY, amax = 0;
  for (int64_t r = lo; r <= p; ++r) {
    double d = 0, d2 = 0, ab = 0;
    const float* kr = c.kf.data() + r * c.n_embd + int64_t{hk} * hd;
    for (int i = 0; i < hd; ++i) {
      d += static_cast<double>(q[i]) * kr[i];
      d2 += qr[i] * kr[i];
      ab += std::fabs(static_cast<double>(q[i]) * kr[i]);
    }
    s[r] = d * scale;
    s2[r] = d2;
    mx = std::max(mx, s[r]);
    mx2 = std::max(mx2, s2[r]);
    amax = std::max(amax, ab * scale);
  }
  double sum = 0, sum2 = 0;
  for (int64_t r = lo; r <= p; ++r) {
    sum += (s[r] = std::exp(s[r] - mx));
    sum2 += (s2[r] = std::exp2(s2[r] - mx2));
  }
  if (sink != nullptr) {
    sum += std::exp(static_cast<double>(*sink) - mx);
    sum2 += std::exp2(static_cast<double>(*sink) * 1.44269504088896340736 - mx2);
  }
  for (int i = 0; i < hd; ++i) exact[i] = rounded[i] = 0;
  for (int64_t r = lo; r <= p; ++r) {
    const float* vr = c.vf.data() + r * c.n_embd + int64_t{hk} * hd;
    for (int i = 0; i < hd; ++i) {
      exact[i] += s[r] / sum * vr[i];
      rounded[i] += s2[r] / sum2 * vr[i];
    }
  }
  *a_max = amax;
}

struct TcStats {
  double exact = 0;    // worst |err| / max|V| vs exact float64
  double rounded = 0;  // ... vs float64 from the f16-rounded q
  double vs_cc = 0;    // ... vs the CUDA-core kernel
  double of_bound = 0; // worst |err vs exact| / its bound
};

// Runs the tensor-core kernel and the CUDA-core kernel on an f16 cache
// holding rows 0..max(pos) (then 29 NaN rows) and checks `check` tokens
// (all when empty) as described above.
void RunPrefillTc(const AttnShape& s, const std::vector<int32_t>& pos, std::vector<int64_t> check,
                  TcStats* st, int window = 0, bool sinks = false) {
  const int64_t nt = pos.size();
  const int64_t max_pos = *std::max_element(pos.begin(), pos.end());
  AttnParams p;
  p.n_head = s.n_head;
  p.n_head_kv = s.n_head_kv;
  p.head_dim = s.hd;
  p.scale = 1.0f / std::sqrt(static_cast<float>(s.hd));
  p.n_ctx = max_pos + 1 + 29;
  p.kv_type = KvType::kF16;
  p.window = window;
  const HostCache c = MakeCache(p.kv_type, p.n_ctx, p.n_kv_embd(), max_pos + 1);
  DeviceBuffer<uint8_t> dk(c.k), dv(c.v);
  const int64_t nq = int64_t{s.n_head} * s.hd;
  const auto q = RandomFloats(nq * nt, 2.0f);
  const auto sink_logits = RandomFloats(s.n_head, 3.0f);
  DeviceBuffer<float> dsinks(sink_logits);
  if (sinks) p.sinks = dsinks.get();
  DeviceBuffer<float> dq(q), out(nq * nt), out_cc(nq * nt);
  DeviceBuffer<int32_t> dp(pos);
  out.Poison();
  out_cc.Poison();
  ASSERT_CUDA(
      LaunchAttnPrefillTc(dq.get(), dp.get(), nt, dk.get(), dv.get(), out.get(), p, nullptr));
  AttnPrefillConfig cuda_core;
  cuda_core.tc_min_tokens = INT64_MAX;
  ASSERT_CUDA(LaunchAttnPrefillConfigured(dq.get(), dp.get(), nt, dk.get(), dv.get(), out_cc.get(),
                                          p, cuda_core, nullptr));
  SYNC();
  const auto o = out.ToHost(), oc = out_cc.ToHost();
  const double vmax = MaxAbsValid(c.vf);
  if (check.empty()) {
    check.resize(nt);
    std::iota(check.begin(), check.end(), 0);
  }
  std::vector<double> exact(s.hd), rounded(s.hd);
  for (int64_t tok : check) {
    for (int h = 0; h < s.n_head; ++h) {
      double a = 0;
      AttnRefTc(q.data() + (tok * s.n_head + h) * s.hd, pos[tok], h, s.n_head / s.n_head_kv, s.hd,
                p.scale, c, exact.data(), rounded.data(), &a, window,
                sinks ? &sink_logits[h] : nullptr);
      const double bound = vmax * ((2 * a + 2) * kF16Unit + 1e-5);
      const double bound_rounded = vmax * (kF16Unit + 1e-4);
      for (int i = 0; i < s.hd; ++i) {
        const int64_t at = (tok * s.n_head + h) * s.hd + i;
        const double e = std::fabs(o[at] - exact[i]);
        const double e2 = std::fabs(o[at] - rounded[i]);
        const double e3 = std::fabs(static_cast<double>(o[at]) - oc[at]);
        ASSERT_LE(e, bound) << "vs exact: token " << tok << " pos " << pos[tok] << " head " << h
                            << " dim " << i << " got " << o[at] << " want " << exact[i]
                            << " (A " << a << ")";
        ASSERT_LE(e2, bound_rounded) << "vs rounded-q reference: token " << tok << " pos "
                                     << pos[tok] << " head " << h << " dim " << i << " got "
                                     << o[at] << " want " << rounded[i];
        ASSERT_LE(e3, bound + 1e-5 * vmax) << "vs CUDA-core kernel: token " << tok << " pos "
                                           << pos[tok] << " head " << h << " dim " << i << " got "
                                           << o[at] << " vs " << oc[at];
        st->exact = std::max(st->exact, e / vmax);
        st->rounded = std::max(st->rounded, e2 / vmax);
        st->vs_cc = std::max(st->vs_cc, e3 / vmax);
        st->of_bound = std::max(st->of_bound, e / bound);
      }
    }
  }
}

void PrintTcStats(const char* what, const TcStats& st) {
  std::printf(
      "%s: worst error x max|V|: %.3g vs float64, %.3g vs float64 with f16 q, %.3g vs CUDA-core "
      "kernel; %.3g of the ops.h bound\n",
      what, st.exact, st.rounded, st.vs_cc, st.of_bound);
}

// head_dim 64 and 128 at GQA groups 1, 2 and 7 (14/2/64 is Qwen2-0.5B).
constexpr AttnShape kTcShapes[] = {{2, 2, 64}, {2, 2, 128}, {4, 2, 64},
                                   {4, 2, 128}, {14, 2, 64}, {7, 1, 128}};

// Contiguous positions from 0 (a fresh prompt) and from 300 (a prefill that
// continues a cache: tiles straddle the 64-row K tiles), nt 16 (one
// partly-filled query tile), 17, 100 and 511 (a partial last tile).
TEST(AttnPrefillTcTest, MatchesFloat64Reference) {
  MINFER_REQUIRE_GPU();
  TcStats st;
  for (const AttnShape& s : kTcShapes) {
    for (int64_t nt : {16, 17, 100, 511}) {
      for (int32_t start : {0, 300}) {
        SCOPED_TRACE(::testing::Message() << "heads " << s.n_head << "/" << s.n_head_kv << " hd "
                                          << s.hd << " nt " << nt << " start " << start);
        std::vector<int32_t> pos(nt);
        std::iota(pos.begin(), pos.end(), start);
        RunPrefillTc(s, pos, {}, &st);
        if (HasFatalFailure()) return;
      }
    }
  }
  PrintTcStats("tensor-core prefill", st);
}

// gpt-oss's attention: sliding windows (shorter than a K tile, across
// tiles, longer than the prompt) and sinks, alone and together, on fresh
// and continued prompts and on shuffled positions; head_dim 64 (gpt-oss)
// and 128, GQA 8 and 2.
TEST(AttnPrefillTcTest, WindowsAndSinks) {
  MINFER_REQUIRE_GPU();
  TcStats st;
  std::vector<int32_t> shuffled(90);
  for (auto& x : shuffled) x = RandInt(0, 400);
  for (const AttnShape& s : {AttnShape{16, 2, 64}, AttnShape{4, 2, 128}}) {
    for (int window : {0, 33, 128, 700}) {
      for (bool sinks : {false, true}) {
        if (window == 0 && !sinks) continue;  // MatchesFloat64Reference
        for (int32_t start : {0, 300}) {
          SCOPED_TRACE(::testing::Message() << "heads " << s.n_head << "/" << s.n_head_kv << " hd "
                                            << s.hd << " window " << window << " sinks " << sinks
                                            << " start " << start);
          std::vector<int32_t> pos(300);
          std::iota(pos.begin(), pos.end(), start);
          RunPrefillTc(s, pos, {}, &st, window, sinks);
          if (HasFatalFailure()) return;
        }
        SCOPED_TRACE(::testing::Message() << "shuffled, window " << window << " sinks " << sinks);
        RunPrefillTc(s, shuffled, {}, &st, window, sinks);
        if (HasFatalFailure()) return;
      }
    }
  }
  PrintTcStats("tensor-core prefill, windows / sinks", st);
}

// Gaps in the positions (a cache with rows the prompt skips), and unsorted
// positions with a zero among them: tiles whose queries see very different
// ranges, warps that sit out whole K tiles, the mask on every tile.
TEST(AttnPrefillTcTest, PositionGapsAndShuffled) {
  MINFER_REQUIRE_GPU();
  TcStats st;
  std::vector<int32_t> gap(150);
  for (int i = 0; i < 150; ++i) gap[i] = i < 40 ? i : i < 100 ? 200 + i : 700 + i;
  std::vector<int32_t> shuffled(77);
  for (auto& x : shuffled) x = RandInt(0, 500);
  shuffled[5] = 0;
  for (const AttnShape& s : {AttnShape{4, 2, 64}, AttnShape{14, 2, 128}}) {
    SCOPED_TRACE(::testing::Message() << "heads " << s.n_head << "/" << s.n_head_kv << " hd "
                                      << s.hd);
    RunPrefillTc(s, gap, {}, &st);
    if (HasFatalFailure()) return;
    RunPrefillTc(s, shuffled, {}, &st);
    if (HasFatalFailure()) return;
  }
  PrintTcStats("tensor-core prefill, gaps / shuffled", st);
}

// A 4,096-token prompt at 7B shapes: 64 K tiles per query tile at the end.
// A sample of tokens, first and last of a few tiles included.
TEST(AttnPrefillTcTest, Prompt4096Sampled) {
  MINFER_REQUIRE_GPU();
  std::vector<int32_t> pos(4096);
  std::iota(pos.begin(), pos.end(), 0);
  std::vector<int64_t> check = {0, 1, 15, 16, 63, 64, 65, 4032, 4095};
  for (int i = 0; i < 23; ++i) check.push_back(RandInt(0, 4095));
  TcStats st;
  RunPrefillTc(AttnShape{28, 4, 128}, pos, check, &st);
  PrintTcStats("tensor-core prefill 4096", st);
}

// The dispatch rule of LaunchAttnPrefill (ops.h): the tensor-core kernel for
// an f16 cache, head_dim 64/128, nt >= kAttnPrefillTcMinTokens; the
// CUDA-core kernel otherwise. Both kernels are deterministic, so the
// automatic launch must equal the chosen kernel bit for bit. And
// LaunchAttnPrefillTc refuses what it cannot run.
TEST(AttnPrefillTcTest, DispatchRule) {
  MINFER_REQUIRE_GPU();
  struct Case {
    KvType type;
    int hd;
    int64_t nt;
    bool tc;
  };
  const Case cases[] = {{KvType::kF16, 128, kAttnPrefillTcMinTokens, true},
                        {KvType::kF16, 64, 100, true},
                        {KvType::kF16, 128, kAttnPrefillTcMinTokens - 1, false},
                        {KvType::kF16, 96, 100, false},
                        {KvType::kF32, 128, 100, false},
                        {KvType::kQ8_0, 64, 100, false}};
  for (const Case& cs : cases) {
    SCOPED_TRACE(::testing::Message() << Name(cs.type) << " hd " << cs.hd << " nt " << cs.nt);
    AttnParams p;
    p.n_head = 4;
    p.n_head_kv = 2;
    p.head_dim = cs.hd;
    p.scale = 1.0f / std::sqrt(static_cast<float>(cs.hd));
    p.n_ctx = cs.nt + 20 + 7;
    p.kv_type = cs.type;
    const HostCache c = MakeCache(cs.type, p.n_ctx, p.n_kv_embd(), cs.nt + 20);
    DeviceBuffer<uint8_t> dk(c.k), dv(c.v);
    const int64_t n = int64_t{p.n_head} * cs.hd * cs.nt;
    const auto q = RandomFloats(n, 2.0f);
    std::vector<int32_t> pos(cs.nt);
    std::iota(pos.begin(), pos.end(), 20);
    DeviceBuffer<float> dq(q), o_auto(n), o_want(n);
    DeviceBuffer<int32_t> dp(pos);
    o_auto.Poison();
    o_want.Poison();
    ASSERT_CUDA(
        LaunchAttnPrefill(dq.get(), dp.get(), cs.nt, dk.get(), dv.get(), o_auto.get(), p, nullptr));
    const cudaError_t tc_err = LaunchAttnPrefillTc(dq.get(), dp.get(), cs.nt, dk.get(), dv.get(),
                                                   o_want.get(), p, nullptr);
    const bool tc_runs = cs.type == KvType::kF16 && (cs.hd == 64 || cs.hd == 128);
    ASSERT_EQ(tc_err, tc_runs ? cudaSuccess : cudaErrorNotSupported) << cudaGetErrorString(tc_err);
    if (!cs.tc) {
      AttnPrefillConfig cuda_core;
      cuda_core.tc_min_tokens = INT64_MAX;
      ASSERT_CUDA(LaunchAttnPrefillConfigured(dq.get(), dp.get(), cs.nt, dk.get(), dv.get(),
                                              o_want.get(), p, cuda_core, nullptr));
    }
    SYNC();
    const auto a = o_auto.ToHost(), b = o_want.ToHost();
    ASSERT_EQ(std::memcmp(a.data(), b.data(), n * sizeof(float)), 0)
        << "LaunchAttnPrefill did not run the " << (cs.tc ? "tensor-core" : "CUDA-core")
        << " kernel";
    for (float x : a) ASSERT_TRUE(std::isfinite(x));
  }
  // A cache pointer that is 8- but not 16-byte aligned: the tensor-core
  // kernel declines, LaunchAttnPrefill falls back to the CUDA-core kernel.
  AttnParams p;
  p.n_head = 4;
  p.n_head_kv = 2;
  p.head_dim = 64;
  p.scale = 0.125f;
  p.n_ctx = 64;
  p.kv_type = KvType::kF16;
  DeviceBuffer<uint8_t> cache(64 * 256 + 16);
  ASSERT_CUDA(cudaMemset(cache.get(), 0, 64 * 256 + 16));
  DeviceBuffer<float> dq(std::vector<float>(4 * 64 * 32, 0.5f)), out(4 * 64 * 32);
  DeviceBuffer<int32_t> dp(std::vector<int32_t>(32, 3));
  out.Poison();
  EXPECT_EQ(LaunchAttnPrefillTc(dq.get(), dp.get(), 32, cache.get() + 8, cache.get(), out.get(), p,
                                nullptr),
            cudaErrorNotSupported);
  EXPECT_EQ(LaunchAttnPrefill(dq.get(), dp.get(), 32, cache.get() + 8, cache.get() + 8, out.get(),
                              p, nullptr),
            cudaSuccess);
  SYNC();
  for (float x : out.ToHost()) ASSERT_EQ(x, 0.0f);  // a zero cache: zero output
}

}  // namespace
}  // namespace minfer::cuda
