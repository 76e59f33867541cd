// GPU tests of the Hopper dequantizing GEMM (cuda/kernels/dq_wgmma.h)
// against engine/quant, as dq_gemm_test does for the sm_80 kernel: weights
// are QuantizeRow outputs or random block bytes, activations the CPU's
// QuantizeRowQ8A of random floats, the reference the exact (double) dot of
// DequantizeRow's weights with the Q8A values d * q; outputs are poisoned
// before each launch and guarded after the end. Skips without an sm_90 GPU
// or without the sm_90a code in the build.
//
// Bound (dq_gemm.h, unchanged): |y - exact| <= 2^-9 sum (|w_i| + |m_i|) |a_i|.
// The activation layout must equal, bit for bit, f16(d * q) with each
// 16-group's even elements first, then its odd ones.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/kernels/dq_gemm.h"
#include "cuda/kernels/dq_wgmma.h"
#include "cuda/kernels/ops.h"
#include "cuda/kernels/mmq.h"
#include "cuda/testing/gpu_test_util.h"
#include "engine/quant/blocks.h"
#include "engine/quant/fp16.h"
#include "engine/quant/quantize.h"
#include "engine/quant/vec_dot.h"
#include "gtest/gtest.h"
#include "tests/cuda/kernels/matmul_fixtures.h"

namespace minfer::cuda {
namespace {

using ::minfer::cuda::testing::DeviceBuffer;
using ::minfer::cuda::testing::RandomFloats;
using namespace ::minfer::cuda::testing;  // the weight fixtures

constexpr int64_t kGuard = 64;
constexpr double kBound = 1.0 / 512;  // 2^-9

#define MINFER_REQUIRE_DQW()                                                      \
  do {                                                                            \
    MINFER_REQUIRE_SM80_GPU();                                                    \
    if (!DqwAvailable()) GTEST_SKIP() << "needs an sm_90 GPU and the sm_90a code"; \
  } while (0)

using Acts = DqActs;
using Ref = DqRef;

// Element e of a 16-group: evens at e / 2, odds at 8 + e / 2.
int64_t EvensThenOdds(int64_t i) {
  const int64_t e = i % 16;
  return i - e + (e % 2 == 0 ? e / 2 : 8 + e / 2);
}
Acts MakeActs(int64_t k, int64_t nt) { return MakeDqActs(k, nt, EvensThenOdds); }
std::vector<Ref> MakeRefs(const HostWeight& w, const Acts& a) { return MakeDqRefs(w, a); }

// Outputs outside the bound (0: all within), with every output written and
// nothing past the end; `worst` gets the largest err/mag.
int64_t CountBad(const HostWeight& w, const Acts& a, const std::vector<Ref>& refs,
                 const std::vector<float>& y, const std::string& what, double* worst,
                 bool expect = true) {
  const int64_t n = w.rows * a.nt;
  int64_t unwritten = 0, bad = 0;
  for (int64_t i = 0; i < n; ++i) unwritten += Bits(y[i]) == 0xFFFFFFFFu;
  if (expect) EXPECT_EQ(unwritten, 0) << what << ": outputs not written";
  for (int64_t i = n; i < n + kGuard; ++i) {
    EXPECT_EQ(Bits(y[i]), 0xFFFFFFFFu) << what << ": wrote past the end of y";
    if (Bits(y[i]) != 0xFFFFFFFFu) break;
  }
  std::string first;
  for (int64_t i = 0; i < n; ++i) {
    const double err = std::fabs(static_cast<double>(y[i]) - refs[i].exact);
    const double rel = refs[i].mag > 0 ? err / refs[i].mag : err;
    *worst = std::max(*worst, std::isnan(rel) ? 1e30 : rel);
    if (!(rel <= kBound) && bad++ == 0) {
      std::ostringstream d;
      d << " first: row " << i % w.rows << " token " << i / w.rows << " gpu " << y[i]
        << " exact " << refs[i].exact << " err/mag " << rel;
      first = d.str();
    }
  }
  if (expect) {
    EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << n << " outputs outside the bound" << first;
  }
  return bad;
}

int64_t Identical(const std::vector<float>& a, const std::vector<float>& b, int64_t n) {
  int64_t diff = 0;
  for (int64_t i = 0; i < n; ++i) diff += Bits(a[i]) != Bits(b[i]);
  return diff;
}

// One launch of `launch` (either form) into a poisoned output of n floats
// and a guard; the host copy.
template <class Tuning>
std::vector<float> RunForm(cudaError_t (*launch)(const MmqSegments&, const void*, int64_t,
                                                 cudaStream_t, const Tuning*, const char**),
                           const MmqSegments& seg_template, int64_t n, const void* act, int64_t nt,
                           const Tuning& tu, cudaError_t* err) {
  DeviceBuffer<float> dy(n + kGuard);
  dy.Poison();
  MmqSegments seg = seg_template;
  seg.y[0] = dy.get();
  *err = launch(seg, act, nt, nullptr, &tu, nullptr);
  if (*err == cudaSuccess) *err = cudaDeviceSynchronize();
  return dy.ToHost();
}
std::vector<float> RunDqw(const MmqSegments& seg, int64_t n, const void* act, int64_t nt,
                          const DqwTuning& tu, cudaError_t* err) {
  return RunForm(LaunchDqWgmma, seg, n, act, nt, tu, err);
}
std::vector<float> RunDqp(const MmqSegments& seg, int64_t n, const void* act, int64_t nt,
                          const DqpTuning& tu, cudaError_t* err) {
  return RunForm(LaunchDqpWgmma, seg, n, act, nt, tu, err);
}

// A FusedQKV's three weights `dws` (host copies `hws`, rows[i] rows each) in
// one launch of `launch` (either form) over the activations `a` (on the
// device at `act`) equal one launch per weight, bit for bit, and each is
// within the bound of the exact dot.
template <class Tuning>
void CheckSegmentsEqualOneLaunchEach(
    cudaError_t (*launch)(const MmqSegments&, const void*, int64_t, cudaStream_t, const Tuning*,
                          const char**),
    const Tuning& tu, const std::vector<HostWeight>& hws,
    const std::vector<std::unique_ptr<DeviceWeight>>& dws, const int64_t (&rows)[3],
    const Acts& a, const void* act, const std::string& what) {
  const int64_t nt = a.nt;
  std::vector<std::unique_ptr<DeviceBuffer<float>>> outs;
  MmqSegments seg;
  seg.n = 3;
  for (int i = 0; i < 3; ++i) {
    outs.push_back(std::make_unique<DeviceBuffer<float>>(rows[i] * nt + kGuard));
    outs.back()->Poison();
    seg.w[i] = dws[i]->view;
    seg.y[i] = outs.back()->get();
  }
  ASSERT_EQ(launch(seg, act, nt, nullptr, &tu, nullptr), cudaSuccess);
  SYNC();
  for (int i = 0; i < 3; ++i) {
    const std::vector<float> together = outs[i]->ToHost();
    MmqSegments one;
    one.n = 1;
    one.w[0] = dws[i]->view;
    cudaError_t err;
    const std::vector<float> alone = RunForm(launch, one, rows[i] * nt, act, nt, tu, &err);
    ASSERT_EQ(err, cudaSuccess);
    EXPECT_EQ(Identical(together, alone, rows[i] * nt), 0)
        << what << " segment " << i << " nt=" << nt;
    double worst = 0;
    CountBad(hws[i], a, MakeRefs(hws[i], a), together, what + " segment " + std::to_string(i),
             &worst);
  }
}

TEST(QuantizeDqwTest, LayoutIsTheQ8ValuesEvensThenOdds) {
  MINFER_REQUIRE_SM80_GPU();
  for (int64_t k : {32, 256, 3584}) {
    for (int64_t nt : {1, 5, 64, 256}) {
      const Acts a = MakeActs(k, nt);
      DeviceBuffer<float> dx(a.x);
      DeviceBuffer<uint16_t> act(k * nt + 8);
      act.Poison();
      ASSERT_EQ(LaunchQuantizeDqw(dx.get(), act.get(), k, nt, nullptr), cudaSuccess);
      SYNC();
      const std::vector<uint16_t> got = act.ToHost();
      int64_t diff = 0;
      for (int64_t i = 0; i < k * nt; ++i) diff += got[i] != a.layout[i];
      EXPECT_EQ(diff, 0) << "k=" << k << " nt=" << nt;
      EXPECT_EQ(got[k * nt], 0xFFFF) << "wrote past the end";
      // The fused SwiGLU form equals SwiGLU then the prepass.
      std::vector<float> u = RandomFloats(k * nt, 2.0f);
      DeviceBuffer<float> du(u), prod(k * nt);
      DeviceBuffer<uint16_t> want(k * nt), fused(k * nt);
      ASSERT_CUDA(LaunchSwiGlu(dx.get(), du.get(), prod.get(), k * nt, nullptr));
      ASSERT_CUDA(LaunchQuantizeDqw(prod.get(), want.get(), k, nt, nullptr));
      ASSERT_CUDA(LaunchSwiGluDqw(dx.get(), du.get(), fused.get(), k, nt, nullptr));
      SYNC();
      EXPECT_EQ(want.ToHost(), fused.ToHost()) << "SwiGLU k=" << k << " nt=" << nt;
      // So does the fused RmsNorm.
      std::vector<float> gain(k);
      for (int64_t i = 0; i < k; ++i) gain[i] = 0.5f + static_cast<float>(i % 7) * 0.25f;
      DeviceBuffer<float> dw(gain), normed(k * nt);
      DeviceBuffer<uint16_t> nwant(k * nt), nfused(k * nt);
      ASSERT_CUDA(LaunchRmsNorm(dx.get(), dw.get(), 1e-6f, normed.get(), nullptr, k, nt, nullptr));
      ASSERT_CUDA(LaunchQuantizeDqw(normed.get(), nwant.get(), k, nt, nullptr));
      ASSERT_CUDA(LaunchRmsNormDqw(dx.get(), dw.get(), 1e-6f, nfused.get(), k, nt, nullptr));
      SYNC();
      EXPECT_EQ(nwant.ToHost(), nfused.ToHost()) << "RmsNorm k=" << k << " nt=" << nt;
    }
  }
  DeviceBuffer<float> x(64);
  DeviceBuffer<uint16_t> act(64 + 8);
  EXPECT_EQ(LaunchQuantizeDqw(x.get(), act.get(), 48, 1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchQuantizeDqw(x.get(), act.get() + 1, 32, 1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(DqwActivationBytes(3584, 16), 3584 * 16 * 2);
}

// The SwiGLU that sums split-k partials (LaunchSwiGluDqw with splits) writes the
// bits of the reduce (slabs added in split order) followed by SwiGLU and
// the prepass, for 1..16 slabs of gate and of up with their own strides,
// aligned and not; it refuses what it cannot take.
TEST(QuantizeDqwTest, SwiGluFromPartialsEqualsReduceThenSwiGlu) {
  MINFER_REQUIRE_SM80_GPU();
  for (int64_t k : {32, 3584}) {
    for (int64_t nt : {1, 5, 64}) {
      for (const auto& [gs, us] : {std::pair{1, 1}, std::pair{2, 2}, std::pair{5, 3},
                                   std::pair{16, 1}}) {
        // Strides: the [gate | up] workspace of one launch (2 k nt) and an
        // odd one (not a multiple of 4: the scalar loads).
        for (int64_t pad : {int64_t{0}, int64_t{3}}) {
          const int64_t g_stride = 2 * k * nt + pad, u_stride = k * nt + pad;
          const std::vector<float> g = RandomFloats(gs * g_stride, 2.0f);
          const std::vector<float> u = RandomFloats(us * u_stride, 2.0f);
          std::vector<float> gsum(k * nt), usum(k * nt);
          for (int64_t j = 0; j < k * nt; ++j) {
            float v = g[j];
            for (int z = 1; z < gs; ++z) v += g[z * g_stride + j];
            gsum[j] = v;
            float w = u[j];
            for (int z = 1; z < us; ++z) w += u[z * u_stride + j];
            usum[j] = w;
          }
          DeviceBuffer<float> dg(g), du(u), dgs(gsum), dus(usum), prod(k * nt);
          DeviceBuffer<uint16_t> want(k * nt), got(k * nt + 8);
          got.Poison();
          ASSERT_CUDA(LaunchSwiGlu(dgs.get(), dus.get(), prod.get(), k * nt, nullptr));
          ASSERT_CUDA(LaunchQuantizeDqw(prod.get(), want.get(), k, nt, nullptr));
          ASSERT_CUDA(LaunchSwiGluDqw(dg.get(), du.get(), got.get(), k, nt, nullptr, gs, g_stride,
                                      us, u_stride));
          SYNC();
          std::vector<uint16_t> h = got.ToHost();
          EXPECT_EQ(h[k * nt], 0xFFFF) << "wrote past the end";
          h.resize(k * nt);
          EXPECT_EQ(h, want.ToHost()) << "k=" << k << " nt=" << nt << " splits " << gs << "/" << us
                                      << " pad " << pad;
        }
      }
    }
  }
  DeviceBuffer<float> x(64 * 17);
  DeviceBuffer<uint16_t> act(64);
  EXPECT_EQ(LaunchSwiGluDqw(x.get(), x.get(), act.get(), 32, 1, nullptr, 0, 32),
            cudaErrorInvalidValue);
  EXPECT_EQ(LaunchSwiGluDqw(x.get(), x.get(), act.get(), 32, 1, nullptr, 17, 32),
            cudaErrorInvalidValue);
  EXPECT_EQ(LaunchSwiGluDqw(x.get(), x.get(), act.get(), 32, 1, nullptr, 2, 31),
            cudaErrorInvalidValue);
}

// The RmsNorm that sums split-k partials and the residual
// (LaunchRmsNormDqwParts) writes x = r + the sum (the reduce's bits) and the
// bits of LaunchRmsNormDqw of it, for 1..16 slabs, with and without a
// residual, in place over it, aligned and not, short rows (the warp form)
// and long ones (the block form, and past its register cache).
TEST(QuantizeDqwTest, RmsNormFromPartialsEqualsReduceThenNorm) {
  MINFER_REQUIRE_SM80_GPU();
  for (int64_t k : {256, 3584, 9216}) {
    for (int64_t nt : {1, 7, 64}) {
      for (int splits : {1, 2, 7, 16}) {
        for (int variant = 0; variant < 3; ++variant) {  // residual: none, fresh, in place
          const int64_t pad = variant == 2 ? 3 : 0;      // (odd stride: scalar loads)
          const int64_t stride = k * nt + pad;
          const std::vector<float> part = RandomFloats(splits * stride, 2.0f);
          const std::vector<float> r = RandomFloats(k * nt, 4.0f);
          std::vector<float> x(k * nt);
          for (int64_t j = 0; j < k * nt; ++j) {
            float v = part[j];
            for (int z = 1; z < splits; ++z) v += part[z * stride + j];
            x[j] = variant == 0 ? v : r[j] + v;
          }
          std::vector<float> gain(k);
          for (int64_t i = 0; i < k; ++i) gain[i] = 0.5f + static_cast<float>(i % 5) * 0.25f;
          DeviceBuffer<float> dp(part), dr(r), dx(x), dw(gain), xout(k * nt + 8);
          DeviceBuffer<uint16_t> want(k * nt), got(k * nt);
          xout.Poison();
          float* const out = variant == 2 ? dr.get() : xout.get();
          ASSERT_CUDA(LaunchRmsNormDqw(dx.get(), dw.get(), 1e-6f, want.get(), k, nt, nullptr));
          ASSERT_CUDA(LaunchRmsNormDqwParts(dp.get(), splits, stride,
                                            variant == 0 ? nullptr : dr.get(), out, dw.get(), 1e-6f,
                                            got.get(), k, nt, nullptr));
          SYNC();
          std::ostringstream what;
          what << "k=" << k << " nt=" << nt << " splits=" << splits << " variant " << variant;
          EXPECT_EQ(got.ToHost(), want.ToHost()) << what.str();
          std::vector<float> xo = variant == 2 ? dr.ToHost() : xout.ToHost();
          if (variant != 2) EXPECT_EQ(Bits(xo[k * nt]), 0xFFFFFFFFu) << what.str() << ": past the end";
          EXPECT_EQ(Identical(xo, x, k * nt), 0) << what.str() << ": x written";
          if (HasFailure()) return;
        }
      }
    }
  }
  DeviceBuffer<float> x(256 * 2);
  DeviceBuffer<uint16_t> act(256 * 2);
  EXPECT_EQ(LaunchRmsNormDqwParts(x.get(), 17, 512, nullptr, x.get(), nullptr, 1e-6f, act.get(),
                                  256, 1, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(LaunchRmsNormDqwParts(x.get(), 2, 255, nullptr, x.get(), nullptr, 1e-6f, act.get(),
                                  256, 1, nullptr),
            cudaErrorInvalidValue);
}

// The descriptor's atom stride is what the layout says: a wrong one must
// fail the bound (so the check below can fail at all).
TEST(DqWgmmaTest, DescriptorStrideMatters) {
  MINFER_REQUIRE_DQW();
  const HostWeight hw = MakeWeight(GgmlType::kQ4_K, 64, 512, 0);
  auto dw = Upload(hw, true);
  const Acts a = MakeActs(512, 16);
  DeviceBuffer<uint16_t> act(a.layout);
  const std::vector<Ref> refs = MakeRefs(hw, a);
  MmqSegments seg;
  seg.n = 1;
  seg.w[0] = dw->view;
  for (bool swap : {false, true}) {
    DqwTuning tu;
    tu.split_k = 0;
    tu.debug_wrong_stride = swap;
    cudaError_t err;
    const std::vector<float> y = RunDqw(seg, hw.rows * 16, act.get(), 16, tu, &err);
    ASSERT_EQ(err, cudaSuccess) << cudaGetErrorString(err);
    double worst = 0;
    const int64_t bad = CountBad(hw, a, refs, y, swap ? "wrong stride" : "as documented", &worst, !swap);
    std::cout << "[dqw] atom stride " << (swap ? "wrong" : "as documented") << ": " << bad
              << " outside the bound, worst err/mag " << worst << "\n";
    if (swap) EXPECT_GT(bad, 0) << "a wrong atom stride changed nothing";
  }
}

TEST(DqWgmmaTest, MatchesTheExactDotWithinTheBound) {
  MINFER_REQUIRE_DQW();
  const int64_t ws_bytes = MmqSplitKBytes();
  DeviceBuffer<uint8_t> ws(ws_bytes);
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    for (int variant : {0, 1}) {
      for (int64_t k : {int64_t{256}, int64_t{3584}}) {
        for (int64_t rows : {int64_t{16}, int64_t{77}, int64_t{600}}) {
          const HostWeight hw = MakeWeight(type, rows, k, variant);
          auto dw = Upload(hw, /*q6k_padded=*/true);
          MmqSegments seg;
          seg.n = 1;
          seg.w[0] = dw->view;
          double worst = 0;
          for (int64_t nt : {1, 7, 8, 13, 16, 33, 64, 100, 128, 200, 256}) {
            const Acts a = MakeActs(k, nt);
            DeviceBuffer<uint16_t> act(a.layout);
            const std::vector<Ref> refs = MakeRefs(hw, a);
            std::ostringstream what;
            what << GgmlTypeName(type) << " variant " << variant << " rows=" << rows << " k=" << k
                 << " nt=" << nt;
            DqwTuning tu;
            tu.split_workspace = ws.get();
            tu.split_bytes = ws_bytes;
            tu.warpgroups = nt % 2 == 0 ? 2 : 1;  // both CTA shapes, over the token counts
            cudaError_t err;
            tu.split_k = 0;
            const std::vector<float> y0 = RunDqw(seg, rows * nt, act.get(), nt, tu, &err);
            ASSERT_EQ(err, cudaSuccess) << what.str() << ": " << cudaGetErrorString(err);
            CountBad(hw, a, refs, y0, what.str() + " no split", &worst);
            EXPECT_EQ(Identical(RunDqw(seg, rows * nt, act.get(), nt, tu, &err), y0, rows * nt), 0)
                << what.str() << " twice";
            for (int split : {kMmqSplitAuto, 3}) {
              tu.split_k = split;
              const std::vector<float> ys = RunDqw(seg, rows * nt, act.get(), nt, tu, &err);
              ASSERT_EQ(err, cudaSuccess) << what.str();
              CountBad(hw, a, refs, ys, what.str() + " split " + std::to_string(split), &worst);
            }
            if (HasFailure()) return;
          }
          std::cout << "[dqw] " << GgmlTypeName(type) << " variant " << variant << " k=" << k
                    << " rows=" << rows << ": worst err/mag " << worst << " (bound " << kBound
                    << ")\n";
        }
      }
    }
  }
}

// The TMA forms of the activation load (DqwTuning::act_load 1: TMA boxes on
// an mbarrier per stage; 2: each CTA of a two-CTA cluster multicasts half of
// every chunk into both) put the same bytes in the same places as the
// copies, so the results are the same bits: over both types, one and two
// warpgroups, odd tile counts (the pair form pads a CTA that only helps
// load), token counts on every tile width from 32 (with rows past nt read as
// zeros), k split and not; and the form asked for really ran. Every result
// is also held to the bound against the exact dot.
TEST(DqWgmmaTest, TmaFormsEqualTheCopies) {
  MINFER_REQUIRE_DQW();
  const int64_t ws_bytes = MmqSplitKBytes();
  DeviceBuffer<uint8_t> ws(ws_bytes);
  int64_t compared = 0;
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    for (int64_t k : {int64_t{256}, int64_t{3584}}) {
      for (int64_t rows : {int64_t{77}, int64_t{600}}) {
        const HostWeight hw = MakeWeight(type, rows, k, 1);
        auto dw = Upload(hw, /*q6k_padded=*/true);
        MmqSegments seg;
        seg.n = 1;
        seg.w[0] = dw->view;
        double worst = 0;
        for (int64_t nt : {20, 33, 64, 100, 200, 256}) {
          const Acts a = MakeActs(k, nt);
          DeviceBuffer<uint16_t> act(a.layout);
          const std::vector<Ref> refs = MakeRefs(hw, a);
          for (int wg : {1, 2}) {
            for (int split : {0, 3, kMmqSplitAuto}) {
              std::ostringstream what;
              what << GgmlTypeName(type) << " k=" << k << " rows=" << rows << " nt=" << nt
                   << " warpgroups=" << wg << " split=" << split;
              DqwTuning tu;
              tu.split_workspace = ws.get();
              tu.split_bytes = ws_bytes;
              tu.warpgroups = wg;
              tu.split_k = split;
              int used = -1;
              tu.act_load_used = &used;
              cudaError_t err;
              const std::vector<float> y0 = RunDqw(seg, rows * nt, act.get(), nt, tu, &err);
              ASSERT_EQ(err, cudaSuccess) << what.str() << ": " << cudaGetErrorString(err);
              ASSERT_EQ(used, 0) << what.str();
              for (int form : {1, 2}) {
                tu.act_load = form;
                used = -1;
                const std::vector<float> y = RunDqw(seg, rows * nt, act.get(), nt, tu, &err);
                ASSERT_EQ(err, cudaSuccess)
                    << what.str() << " form " << form << ": " << cudaGetErrorString(err);
                EXPECT_EQ(used, form) << what.str() << ": the form asked for did not run";
                EXPECT_EQ(Identical(y, y0, rows * nt), 0) << what.str() << " form " << form;
                CountBad(hw, a, refs, y, what.str() + " form " + std::to_string(form), &worst);
                ++compared;
              }
              tu.act_load = 0;
              if (HasFailure()) return;
            }
          }
        }
        std::cout << "[dqw tma] " << GgmlTypeName(type) << " k=" << k << " rows=" << rows
                  << ": worst err/mag " << worst << " (bound " << kBound << ")\n";
      }
    }
  }
  EXPECT_EQ(compared, 2 * 2 * 2 * 6 * 2 * 3 * 2);
  // Below 17 tokens (tiles of 8 and 16) the copies run whatever is asked.
  const HostWeight hw = MakeWeight(GgmlType::kQ4_K, 64, 256, 0);
  auto dw = Upload(hw, true);
  MmqSegments seg;
  seg.n = 1;
  seg.w[0] = dw->view;
  const Acts a = MakeActs(256, 12);
  DeviceBuffer<uint16_t> act(a.layout);
  DqwTuning tu;
  tu.split_k = 0;
  tu.act_load = 2;
  int used = -1;
  tu.act_load_used = &used;
  cudaError_t err;
  (void)RunDqw(seg, 64 * 12, act.get(), 12, tu, &err);
  ASSERT_EQ(err, cudaSuccess);
  EXPECT_EQ(used, 0);
  tu.act_load = 3;
  EXPECT_EQ(LaunchDqWgmma(seg, act.get(), 12, nullptr, &tu), cudaErrorInvalidValue);
}

TEST(DqWgmmaTest, SegmentsEqualOneLaunchPerWeight) {
  MINFER_REQUIRE_DQW();
  // A FusedQKV's q and k in Q4_K: one launch, each weight's own bits.
  const int64_t k = 512, rows[3] = {448, 64, 64};
  std::vector<HostWeight> hws;
  std::vector<std::unique_ptr<DeviceWeight>> dws;
  for (int i = 0; i < 3; ++i) {
    hws.push_back(MakeWeight(GgmlType::kQ4_K, rows[i], k, 1));
    dws.push_back(Upload(hws.back(), false));
  }
  for (int64_t nt : {16, 40, 130}) {
    const Acts a = MakeActs(k, nt);
    DeviceBuffer<uint16_t> act(a.layout);
    DqwTuning tu;
    tu.split_k = 0;
    CheckSegmentsEqualOneLaunchEach(LaunchDqWgmma, tu, hws, dws, rows, a, act.get(), "dqw");
    if (HasFatalFailure()) return;
  }
}

// The first n outputs of a launch's kept partials, summed on the host in
// split order (the reduce's), then r + the sum where r is given.
std::vector<float> HostSum(const SplitOutputs& kept, int64_t n, const std::vector<float>* r) {
  std::vector<float> slabs(kept.splits * kept.stride);
  if (cudaMemcpy(slabs.data(), kept.part[0], slabs.size() * 4, cudaMemcpyDeviceToHost) !=
      cudaSuccess) {
    ADD_FAILURE() << "copying the kept partials back";
    return std::vector<float>(n, NAN);
  }
  std::vector<float> sum(n);
  for (int64_t j = 0; j < n; ++j) {
    float v = slabs[j];
    for (int z = 1; z < kept.splits; ++z) v += slabs[z * kept.stride + j];
    sum[j] = r != nullptr ? (*r)[j] + v : v;
  }
  return sum;
}

// What the Hopper GEMMs fold in (MINFER_GEMM_FUSE) keeps the bits of the// What the Hopper GEMMs fold in (MINFER_GEMM_FUSE) keeps the bits of the
// separate launches, in both forms, split and not: a residual (a fresh
// output, and in place: the output holding the residual) gives r + y of
// the plain launch (the host's f32 add is the Add kernel's); kept partials
// summed on the host in split order give the plain launch's reduced y
// (the reduce's float4 and scalar paths both: 77 rows at odd token counts
// are not a multiple of 4 outputs); kept with a residual, the partials
// without it (r + their sum is the fused result); LaunchSplitSum writes the
// reduce's bits; a launch that does not split says so.
TEST(DqWgmmaTest, ResidualAndKeptPartialsKeepTheBits) {
  MINFER_REQUIRE_DQW();
  const int64_t ws_bytes = MmqSplitKBytes();
  DeviceBuffer<uint8_t> ws(ws_bytes);
  int64_t kept_split = 0, kept_whole = 0;
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    for (int64_t rows : {int64_t{77}, int64_t{600}}) {
      const int64_t k = 3584;
      const HostWeight hw = MakeWeight(type, rows, k, 1);
      auto dw = Upload(hw, /*q6k_padded=*/true);
      MmqSegments seg;
      seg.n = 1;
      seg.w[0] = dw->view;
      for (int64_t nt : {1, 33, 64, 200}) {
        const int64_t n = rows * nt;
        const Acts a = MakeActs(k, nt);
        DeviceBuffer<uint16_t> act(a.layout);
        const std::vector<float> r = RandomFloats(n, 4.0f);
        DeviceBuffer<float> dr(r);
        for (int form : {0, 1}) {  // register form, prefill form
          for (int split : {0, 3, kMmqSplitAuto}) {
            std::ostringstream what;
            what << (form == 0 ? "dqw " : "dqp ") << GgmlTypeName(type) << " rows=" << rows
                 << " nt=" << nt << " split=" << split;
            DqwTuning wt;
            DqpTuning pt;
            wt.split_workspace = pt.split_workspace = ws.get();
            wt.split_bytes = pt.split_bytes = ws_bytes;
            wt.split_k = pt.split_k = split;
            wt.warpgroups = nt > 64 ? 2 : 1;
            auto run = [&](const float* residual, SplitOutputs* kept, float* y_at,
                           cudaError_t* err) {
              wt.residual = pt.residual = residual;
              wt.kept = pt.kept = kept;
              MmqSegments s = seg;
              if (y_at != nullptr) {
                s.y[0] = y_at;
                *err = form == 0 ? LaunchDqWgmma(s, act.get(), nt, nullptr, &wt)
                                 : LaunchDqpWgmma(s, act.get(), nt, nullptr, &pt);
                if (*err == cudaSuccess) *err = cudaDeviceSynchronize();
                return std::vector<float>();
              }
              return form == 0 ? RunDqw(s, n, act.get(), nt, wt, err)
                               : RunDqp(s, n, act.get(), nt, pt, err);
            };
            cudaError_t err;
            const std::vector<float> y0 = run(nullptr, nullptr, nullptr, &err);
            ASSERT_EQ(err, cudaSuccess) << what.str() << ": " << cudaGetErrorString(err);
            double worst = 0;
            CountBad(hw, a, MakeRefs(hw, a), y0, what.str(), &worst);
            std::vector<float> want(n);
            for (int64_t i = 0; i < n; ++i) want[i] = r[i] + y0[i];
            const std::vector<float> yr = run(dr.get(), nullptr, nullptr, &err);
            ASSERT_EQ(err, cudaSuccess) << what.str() << " residual";
            EXPECT_EQ(Identical(yr, want, n), 0) << what.str() << " residual";
            EXPECT_EQ(Bits(yr[n]), 0xFFFFFFFFu) << what.str() << ": wrote past the end";
            // In place: the output already holds the residual.
            DeviceBuffer<float> inplace(r);
            (void)run(inplace.get(), nullptr, inplace.get(), &err);
            ASSERT_EQ(err, cudaSuccess) << what.str() << " in place";
            EXPECT_EQ(Identical(inplace.ToHost(), want, n), 0) << what.str() << " in place";
            // Kept partials.
            SplitOutputs kept;
            const std::vector<float> yk = run(nullptr, &kept, nullptr, &err);
            ASSERT_EQ(err, cudaSuccess) << what.str() << " kept";
            if (kept.splits == 1) {
              ++kept_whole;
              EXPECT_EQ(Identical(yk, y0, n), 0) << what.str() << ": kept, not split";
            } else {
              ++kept_split;
              ASSERT_GE(kept.stride, n) << what.str();
              EXPECT_EQ(Identical(HostSum(kept, n, nullptr), y0, n), 0)
                  << what.str() << ": kept partials' sum";
              // The output itself was not written.
              EXPECT_EQ(Bits(yk[0]), 0xFFFFFFFFu) << what.str() << ": kept, yet y written";
            }
            // Kept with a residual: not split, y = r + W act; split, the
            // partials without it (the consumer adds r to their sum).
            SplitOutputs kr;
            const std::vector<float> ykr = run(dr.get(), &kr, nullptr, &err);
            ASSERT_EQ(err, cudaSuccess) << what.str() << " kept with a residual";
            EXPECT_EQ(kr.splits, kept.splits) << what.str();
            if (kr.splits == 1) {
              EXPECT_EQ(Identical(ykr, want, n), 0) << what.str() << ": kept with a residual";
            } else {
              EXPECT_EQ(Identical(HostSum(kr, n, &r), want, n), 0)
                  << what.str() << ": r + kept partials' sum";
              // LaunchSplitSum, the reduce of kept partials, writes the same
              // bits: with the residual, in place over it, and without.
              DeviceBuffer<float> in_place(r), fresh(n + kGuard);
              fresh.Poison();
              ASSERT_CUDA(LaunchSplitSum(kr.part[0], kr.splits, kr.stride, in_place.get(),
                                         in_place.get(), n, nullptr));
              ASSERT_CUDA(LaunchSplitSum(kr.part[0], kr.splits, kr.stride, nullptr, fresh.get(), n,
                                         nullptr));
              SYNC();
              EXPECT_EQ(Identical(in_place.ToHost(), want, n), 0) << what.str() << ": split sum + r";
              const std::vector<float> plain = fresh.ToHost();
              EXPECT_EQ(Identical(plain, y0, n), 0) << what.str() << ": split sum";
              EXPECT_EQ(Bits(plain[n]), 0xFFFFFFFFu) << what.str() << ": split sum past the end";
            }
            if (HasFailure()) return;
          }
        }
      }
    }
  }
  std::cout << "[dqw fuse] kept partials: " << kept_split << " launches split, " << kept_whole
            << " not\n";
  EXPECT_GT(kept_split, 0);
  EXPECT_GT(kept_whole, 0);
  // A residual with two weights: an invalid call.
  const HostWeight hw = MakeWeight(GgmlType::kQ4_K, 64, 256, 0);
  auto dw = Upload(hw, true);
  DeviceBuffer<float> y(64 * 8 * 2), r(64 * 8);
  const Acts a = MakeActs(256, 8);
  DeviceBuffer<uint16_t> act(a.layout);
  MmqSegments two;
  two.n = 2;
  two.w[0] = two.w[1] = dw->view;
  two.y[0] = y.get();
  two.y[1] = y.get() + 64 * 8;
  DqwTuning wt;
  wt.residual = r.get();
  DqpTuning pt;
  pt.residual = r.get();
  EXPECT_EQ(LaunchDqWgmma(two, act.get(), 8, nullptr, &wt), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchDqpWgmma(two, act.get(), 8, nullptr, &pt), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchSplitSum(r.get(), 17, 64, nullptr, y.get(), 64, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchSplitSum(r.get(), 2, 63, nullptr, y.get(), 64, nullptr), cudaErrorInvalidValue);
}

// The prefill form (LaunchDqpWgmma) against the exact dot, over both types,
// both CTA shapes (128 and 256 rows) and both token tiles (64 and 128 tokens),
// row counts that leave partial tiles, token counts on and off the tiles
// (and many tiles), k of one and
// of 14 super-blocks, split-k forced and not; deterministic; and, since its
// weights are decoded by the same instructions, the same bits as the
// register form wherever both run (up to 256 tokens, no split) — the
// products and their order along k are the same, only the tile differs.
TEST(DqpWgmmaTest, MatchesTheExactDotAndTheRegisterForm) {
  MINFER_REQUIRE_DQW();
  const int64_t ws_bytes = MmqSplitKBytes();
  DeviceBuffer<uint8_t> ws(ws_bytes);
  int64_t same_as_register = 0, compared = 0;
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kQ8_0, GgmlType::kQ5_K}) {
    for (int64_t k : {int64_t{256}, int64_t{3584}}) {
      for (int64_t rows : {int64_t{77}, int64_t{600}}) {
        const HostWeight hw = MakeWeight(type, rows, k, 1);
        auto dw = Upload(hw, /*q6k_padded=*/true);
        MmqSegments seg;
        seg.n = 1;
        seg.w[0] = dw->view;
        double worst = 0;
        for (int64_t nt : {1, 33, 64, 100, 128, 200, 256, 300, 600}) {
          const Acts a = MakeActs(k, nt);
          DeviceBuffer<uint16_t> act(a.layout);
          const std::vector<Ref> refs = MakeRefs(hw, a);
          std::vector<float> reg;
          // (Q8_0 and Q5_K: the prefill form's only.)
          if (nt <= kDqwMaxTokens && DqSupports(type, true)) {
            DqwTuning rt;
            rt.split_k = 0;
            cudaError_t err;
            reg = RunDqw(seg, rows * nt, act.get(), nt, rt, &err);
            ASSERT_EQ(err, cudaSuccess);
          }
          // (warpgroups, token tile): the 128-token tiles with 2 and 4
          // consumer warpgroups, then the 64-token tile (automatic up to 64
          // tokens, forced above).
          for (const auto& [wg, tile] : {std::pair{2, 128}, std::pair{4, 128}, std::pair{2, 64}}) {
            for (int split : {0, 3}) {
              std::ostringstream what;
              what << "dqp " << GgmlTypeName(type) << " k=" << k << " rows=" << rows
                   << " nt=" << nt << " warpgroups=" << wg << " tile=" << tile
                   << " split=" << split;
              DqpTuning tu;
              tu.split_workspace = ws.get();
              tu.split_bytes = ws_bytes;
              tu.warpgroups = wg;
              tu.tile_tokens = nt <= 64 && tile == 64 ? 0 : tile;
              tu.split_k = split;
              cudaError_t err;
              const std::vector<float> y = RunDqp(seg, rows * nt, act.get(), nt, tu, &err);
              ASSERT_EQ(err, cudaSuccess) << what.str() << ": " << cudaGetErrorString(err);
              CountBad(hw, a, refs, y, what.str(), &worst);
              EXPECT_EQ(Identical(RunDqp(seg, rows * nt, act.get(), nt, tu, &err), y, rows * nt),
                        0)
                  << what.str() << " twice";
              if (!reg.empty() && split == 0) {
                ++compared;
                same_as_register += Identical(y, reg, rows * nt) == 0;
              }
              if (HasFailure()) return;
            }
          }
        }
        std::cout << "[dqp] " << GgmlTypeName(type) << " k=" << k << " rows=" << rows
                  << ": worst err/mag " << worst << " (bound " << kBound << ")\n";
      }
    }
  }
  // Informational: the wgmma's sums are the hardware's, so equality with the
  // register form is expected but not a contract.
  std::cout << "[dqp] bit-identical to the register form in " << same_as_register << " of "
            << compared << " comparisons\n";
}

// A FusedQKV's three weights in one launch equal three launches, each
// within the bound; tiles straddle the segments (448 + 64 + 64 rows).
TEST(DqpWgmmaTest, SegmentsEqualOneLaunchPerWeight) {
  MINFER_REQUIRE_DQW();
  const int64_t k = 512, rows[3] = {448, 64, 64};
  std::vector<HostWeight> hws;
  std::vector<std::unique_ptr<DeviceWeight>> dws;
  for (int i = 0; i < 3; ++i) {
    hws.push_back(MakeWeight(GgmlType::kQ4_K, rows[i], k, 1));
    dws.push_back(Upload(hws.back(), false));
  }
  for (int wg : {2, 4}) {
    for (int64_t nt : {130, 512}) {
      const Acts a = MakeActs(k, nt);
      DeviceBuffer<uint16_t> act(a.layout);
      DqpTuning tu;
      tu.split_k = 0;
      tu.warpgroups = wg;
      CheckSegmentsEqualOneLaunchEach(LaunchDqpWgmma, tu, hws, dws, rows, a, act.get(),
                                      "dqp warpgroups=" + std::to_string(wg));
      if (HasFatalFailure()) return;
    }
  }
}

TEST(DqWgmmaTest, RefusesWhatItCannotRun) {
  MINFER_REQUIRE_SM80_GPU();
  const int64_t k = 256, rows = 16;
  const HostWeight q6 = MakeWeight(GgmlType::kQ6_K, rows, k, 1);
  const HostWeight q8 = MakeWeight(GgmlType::kQ8_0, rows, k, 1);
  const HostWeight q4 = MakeWeight(GgmlType::kQ4_K, rows, k, 1);
  auto raw = Upload(q6, false);
  auto d8 = Upload(q8, false);
  auto d4 = Upload(q4, false);
  DeviceBuffer<uint16_t> act(k * 257 + 8);
  DeviceBuffer<float> y(rows * 257);
  auto call = [&](const WeightView& w, int64_t nt, const void* a, const char** why) {
    MmqSegments seg;
    seg.n = 1;
    seg.w[0] = w;
    seg.y[0] = y.get();
    return LaunchDqWgmma(seg, a, nt, nullptr, nullptr, why);
  };
  const char* why = nullptr;
  EXPECT_EQ(call(raw->view, 8, act.get(), &why), cudaErrorNotSupported);
  EXPECT_STREQ(why, "raw 210-byte Q6_K blocks");
  EXPECT_EQ(call(d8->view, 8, act.get(), &why), cudaErrorNotSupported);
  EXPECT_STREQ(why, "not a Q4_K or Q6_K weight");
  EXPECT_EQ(call(d4->view, 257, act.get(), &why), cudaErrorNotSupported);
  EXPECT_STREQ(why, "more than 256 tokens");
  if (!DqwAvailable()) {
    EXPECT_EQ(call(d4->view, 8, act.get(), &why), cudaErrorNotSupported);
    EXPECT_NE(why, nullptr);
  }
  EXPECT_EQ(call(d4->view, 8, reinterpret_cast<const uint8_t*>(act.get()) + 8, &why),
            cudaErrorInvalidValue);
  EXPECT_EQ(call(d4->view, 0, act.get(), &why), cudaSuccess);
  // The prefill form: the same refusals, no token limit below
  // kDqpMaxTokens, and only 2 or 4 consumer warpgroups.
  auto callp = [&](const WeightView& w, int64_t nt, const void* a, const char** why,
                   int wg = 2) {
    MmqSegments seg;
    seg.n = 1;
    seg.w[0] = w;
    seg.y[0] = y.get();
    DqpTuning tu;
    tu.warpgroups = wg;
    return LaunchDqpWgmma(seg, a, nt, nullptr, &tu, why);
  };
  EXPECT_EQ(callp(raw->view, 8, act.get(), &why), cudaErrorNotSupported);
  EXPECT_STREQ(why, "raw 210-byte Q6_K blocks");
  const HostWeight q40 = MakeWeight(GgmlType::kQ4_0, rows, k, 1);
  auto d40 = Upload(q40, false);
  EXPECT_EQ(callp(d40->view, 8, act.get(), &why), cudaErrorNotSupported);
  EXPECT_STREQ(why, "not a Q4_K, Q5_K, Q6_K or Q8_0 weight");
  EXPECT_EQ(callp(d4->view, 8, act.get(), &why, 3), cudaErrorInvalidValue);
  {
    MmqSegments seg;
    seg.n = 1;
    seg.w[0] = d4->view;
    seg.y[0] = y.get();
    DqpTuning tu;
    tu.tile_tokens = 32;
    EXPECT_EQ(LaunchDqpWgmma(seg, act.get(), 8, nullptr, &tu, &why), cudaErrorInvalidValue);
  }
  EXPECT_EQ(callp(d4->view, kDqpMaxTokens + 1, act.get(), &why), cudaErrorInvalidValue);
  EXPECT_EQ(callp(d4->view, 8, reinterpret_cast<const uint8_t*>(act.get()) + 8, &why),
            cudaErrorInvalidValue);
  EXPECT_EQ(callp(d4->view, 0, act.get(), &why), cudaSuccess);
  if (DqwAvailable()) {
    EXPECT_EQ(callp(d4->view, 257, act.get(), &why), cudaSuccess);
    // The segment checks the DQ launchers share (splitk::CopySegments):
    // a misaligned weight, weights of two types, rows too short for k.
    auto shifted = Upload(q4, false, /*shift=*/4);
    EXPECT_EQ(callp(shifted->view, 8, act.get(), &why), cudaErrorNotSupported);
    EXPECT_STREQ(why, "weight base or row stride not 16-byte aligned");
    auto d6 = Upload(q6, true);
    DeviceBuffer<float> y2(rows * 257);
    MmqSegments two;
    two.n = 2;
    two.w[0] = d4->view;
    two.w[1] = d6->view;
    two.y[0] = y.get();
    two.y[1] = y2.get();
    EXPECT_EQ(LaunchDqpWgmma(two, act.get(), 8, nullptr, nullptr, &why), cudaErrorInvalidValue);
    WeightView short_rows = d4->view;
    short_rows.row_bytes = 128;  // one Q4_K super-block is 144
    EXPECT_EQ(callp(short_rows, 8, act.get(), &why), cudaErrorInvalidValue);
  }
  // Which types each Hopper form decodes.
  EXPECT_TRUE(DqpSupports(GgmlType::kQ4_K, false));
  EXPECT_TRUE(DqpSupports(GgmlType::kQ6_K, true));
  EXPECT_FALSE(DqpSupports(GgmlType::kQ6_K, false));
  EXPECT_TRUE(DqpSupports(GgmlType::kQ8_0, false));
  EXPECT_TRUE(DqpSupports(GgmlType::kQ5_K, false));
  EXPECT_FALSE(DqpSupports(GgmlType::kQ4_0, false));
  EXPECT_FALSE(DqSupports(GgmlType::kQ8_0, false));
  SYNC();
}

}  // namespace
}  // namespace minfer::cuda
