// GPU tests of the dequantizing few-token GEMM (cuda/kernels/dq_gemm.h)
// against engine/quant: weights are QuantizeRow outputs (Gaussian rows with
// a per-row offset, so Q4_K's mins matter) or random block bytes (every
// code and scale bit); activations are the CPU's QuantizeRowQ8A of random
// floats. The reference is the exact (double) dot of DequantizeRow's
// weights with the Q8A values d * q. Fresh random inputs each run
// (MINFER_TEST_SEED repeats one); outputs are poisoned before every launch,
// so a skipped write fails, and a guard after y catches writes past the end.
//
// Bounds (dq_gemm.h): |y - exact| <= 2^-9 sum_i (|w_i| + |m_i|) |a_i|, m_i
// the min term of element i's 32-block (Q4_K; 0 for Q6_K). The activation
// layout must equal, bit for bit, f16(d * q) of QuantizeRowQ8A in the
// (0, 2, 1, 3) order, and the fused producers (RmsNorm, SwiGLU writing only
// that layout) must equal the op then the prepass bit for bit. Same inputs
// give the same bits (twice, and with the same split); one launch over three
// weights (FusedQKV's segments) gives each weight's own launch's bits.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/kernels/dq_gemm.h"
#include "cuda/kernels/mmq.h"
#include "cuda/kernels/ops.h"
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

using Acts = DqActs;
using Ref = DqRef;

// Element e of a 4-group is stored at position (0, 2, 1, 3)[e].
int64_t PairOrder(int64_t i) {
  const int64_t e = i % 4;
  return i - e + (e == 1 ? 2 : e == 2 ? 1 : e);
}
Acts MakeActs(int64_t k, int64_t nt) { return MakeDqActs(k, nt, PairOrder); }
std::vector<Ref> MakeRefs(const HostWeight& w, const Acts& a) { return MakeDqRefs(w, a); }

// y (rows x nt + guard) against the references: every output written,
// nothing past the end, each within the bound. Returns the worst err/mag.
double Check(const HostWeight& w, const Acts& a, const std::vector<Ref>& refs,
             const std::vector<float>& y, const std::string& what) {
  const int64_t n = w.rows * a.nt;
  int64_t unwritten = 0, bad = 0;
  for (int64_t i = 0; i < n; ++i) unwritten += Bits(y[i]) == 0xFFFFFFFFu;
  EXPECT_EQ(unwritten, 0) << what << ": outputs not written";
  for (int64_t i = n; i < n + kGuard; ++i) {
    EXPECT_EQ(Bits(y[i]), 0xFFFFFFFFu) << what << ": wrote past the end of y";
    if (Bits(y[i]) != 0xFFFFFFFFu) break;
  }
  double worst = 0;
  std::string first;
  for (int64_t i = 0; i < n; ++i) {
    const double err = std::fabs(static_cast<double>(y[i]) - refs[i].exact);
    const double rel = refs[i].mag > 0 ? err / refs[i].mag : err;
    worst = std::max(worst, rel);
    if (!(rel <= kBound) && bad++ == 0) {
      std::ostringstream d;
      d << " first: row " << i % w.rows << " token " << i / w.rows << " gpu " << y[i]
        << " exact " << refs[i].exact << " err/mag " << rel;
      first = d.str();
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << n << " outputs outside the bound"
                    << first;
  return worst;
}

int64_t Identical(const std::vector<float>& a, const std::vector<float>& b, int64_t n) {
  int64_t diff = 0;
  for (int64_t i = 0; i < n; ++i) diff += Bits(a[i]) != Bits(b[i]);
  return diff;
}

template <typename F>
std::vector<float> RunPoisoned(int64_t n, F launch, cudaError_t* err) {
  DeviceBuffer<float> dy(n + kGuard);
  dy.Poison();
  *err = launch(dy.get());
  if (*err == cudaSuccess) *err = cudaDeviceSynchronize();
  return dy.ToHost();
}

TEST(QuantizeDqTest, LayoutIsTheQ8ValuesAsF16InPairOrder) {
  MINFER_REQUIRE_SM80_GPU();
  for (int64_t k : {32, 256, 3584}) {
    for (int64_t nt : {1, 5, 64}) {
      const Acts a = MakeActs(k, nt);
      DeviceBuffer<float> dx(a.x);
      DeviceBuffer<uint16_t> act(k * nt + 8);
      act.Poison();
      ASSERT_EQ(LaunchQuantizeDq(dx.get(), act.get(), k, nt, nullptr), cudaSuccess);
      SYNC();
      const std::vector<uint16_t> got = act.ToHost();
      int64_t diff = 0;
      for (int64_t i = 0; i < k * nt; ++i) diff += got[i] != a.layout[i];
      EXPECT_EQ(diff, 0) << "k=" << k << " nt=" << nt;
      EXPECT_EQ(got[k * nt], 0xFFFF) << "wrote past the end";
    }
  }
  DeviceBuffer<float> x(64);
  DeviceBuffer<uint16_t> act(64 + 8);
  EXPECT_EQ(LaunchQuantizeDq(x.get(), act.get(), 48, 1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchQuantizeDq(x.get(), act.get() + 1, 32, 1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(DqActivationBytes(3584, 16), 3584 * 16 * 2);
}

// The mode-2 producers (RmsNorm, SwiGLU writing only the DQ layout) equal
// the op into f32 then the prepass, bit for bit; so does the prepass of
// unaligned inputs (its 4-byte path).
TEST(QuantizeDqTest, FusedProducersEqualOpThenPrepass) {
  MINFER_REQUIRE_SM80_GPU();
  for (int64_t k : {256, 896, 3584}) {
    for (int64_t nt : {1, 9, 64}) {
      const std::vector<float> x = ActivationsWithSpecialBlocks(k, nt);
      std::vector<float> gain(k);
      for (int64_t i = 0; i < k; ++i) gain[i] = 0.5f + static_cast<float>(i % 7) * 0.25f;
      DeviceBuffer<float> dx(x), dw(gain), dy(k * nt);
      for (bool with_gain : {true, false}) {
        DeviceBuffer<uint16_t> want(k * nt), got(k * nt);
        want.Poison();
        got.Poison();
        const float* w = with_gain ? dw.get() : nullptr;
        ASSERT_CUDA(LaunchRmsNorm(dx.get(), w, 1e-6f, dy.get(), nullptr, k, nt, nullptr));
        ASSERT_CUDA(LaunchQuantizeDq(dy.get(), want.get(), k, nt, nullptr));
        ASSERT_CUDA(LaunchRmsNormDq(dx.get(), w, 1e-6f, got.get(), k, nt, nullptr));
        SYNC();
        EXPECT_EQ(want.ToHost(), got.ToHost())
            << "RmsNorm k=" << k << " nt=" << nt << " gain=" << with_gain;
      }
    }
  }
  for (int64_t k : {896, 18944}) {
    for (int64_t nt : {1, 16, 64}) {
      const std::vector<float> g = ActivationsWithSpecialBlocks(k, nt);
      std::vector<float> u = ActivationsWithSpecialBlocks(k, nt);
      std::reverse(u.begin(), u.end());
      for (int shift : {0, 1}) {
        std::vector<float> gs(shift + g.size()), us(shift + u.size());
        std::copy(g.begin(), g.end(), gs.begin() + shift);
        std::copy(u.begin(), u.end(), us.begin() + shift);
        DeviceBuffer<float> dg(gs), du(us), dy(k * nt), dys(shift + k * nt);
        DeviceBuffer<uint16_t> want(k * nt), got(k * nt), unaligned(k * nt);
        want.Poison();
        got.Poison();
        unaligned.Poison();
        ASSERT_CUDA(LaunchSwiGlu(dg.get() + shift, du.get() + shift, dy.get(), k * nt, nullptr));
        ASSERT_CUDA(LaunchQuantizeDq(dy.get(), want.get(), k, nt, nullptr));
        ASSERT_CUDA(LaunchSwiGluDq(dg.get() + shift, du.get() + shift, got.get(), k, nt, nullptr));
        ASSERT_CUDA(cudaMemcpy(dys.get() + shift, dy.get(), k * nt * 4, cudaMemcpyDeviceToDevice));
        ASSERT_CUDA(LaunchQuantizeDq(dys.get() + shift, unaligned.get(), k, nt, nullptr));
        SYNC();
        const std::vector<uint16_t> w = want.ToHost();
        EXPECT_EQ(w, got.ToHost()) << "SwiGLU k=" << k << " nt=" << nt << " shift=" << shift;
        EXPECT_EQ(w, unaligned.ToHost()) << "prepass of unaligned rows, k=" << k;
      }
    }
  }
}

TEST(DqGemmTest, MatchesTheExactDotWithinTheBound) {
  MINFER_REQUIRE_SM80_GPU();
  const int64_t ws_bytes = MmqSplitKBytes();
  DeviceBuffer<uint8_t> ws(ws_bytes);
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    for (int variant : {0, 1}) {
      for (int64_t k : {int64_t{256}, int64_t{3584}}) {
        for (int64_t rows : {int64_t{16}, int64_t{77}, int64_t{600}}) {
          const HostWeight hw = MakeWeight(type, rows, k, variant);
          auto dw = Upload(hw, /*q6k_padded=*/true);  // the registry's layout
          double worst = 0;
          for (int64_t nt : {1, 3, 8, 13, 16, 31, 32, 33, 64}) {
            const Acts a = MakeActs(k, nt);
            DeviceBuffer<uint16_t> act(a.layout);
            const std::vector<Ref> refs = MakeRefs(hw, a);
            for (int mt : {1, 2}) {
              std::ostringstream what;
              what << GgmlTypeName(type) << " variant " << variant << " rows=" << rows
                   << " k=" << k << " nt=" << nt << " mt=" << mt;
              auto run = [&](int split, cudaError_t* err) {
                DqTuning tu;
                tu.m_tiles = mt;
                tu.split_k = split;
                tu.split_workspace = ws.get();
                tu.split_bytes = ws_bytes;
                return RunPoisoned(rows * nt, [&](float* y) {
                  MmqSegments seg;
                  seg.n = 1;
                  seg.w[0] = dw->view;
                  seg.y[0] = y;
                  return LaunchDqGemm(seg, act.get(), nt, nullptr, &tu);
                }, err);
              };
              cudaError_t err;
              const std::vector<float> y0 = run(0, &err);
              ASSERT_EQ(err, cudaSuccess) << what.str() << ": " << cudaGetErrorString(err);
              worst = std::max(worst, Check(hw, a, refs, y0, what.str() + " no split"));
              EXPECT_EQ(Identical(run(0, &err), y0, rows * nt), 0) << what.str() << " twice";
              for (int split : {kMmqSplitAuto, 3}) {
                const std::vector<float> ys = run(split, &err);
                ASSERT_EQ(err, cudaSuccess) << what.str();
                worst = std::max(worst, Check(hw, a, refs, ys, what.str() + " split " +
                                                                   std::to_string(split)));
                EXPECT_EQ(Identical(run(split, &err), ys, rows * nt), 0)
                    << what.str() << " split twice";
              }
              if (HasFailure()) return;
            }
          }
          std::cout << "[dq] " << GgmlTypeName(type) << " variant " << variant << " k=" << k
                    << " rows=" << rows << ": worst err/mag " << worst << " (bound " << kBound
                    << ")\n";
        }
      }
    }
  }
}

TEST(DqGemmTest, SegmentsEqualOneLaunchPerWeight) {
  MINFER_REQUIRE_SM80_GPU();
  // q, k, v of a FusedQKV (Q4_K) at 16 and 40 tokens, no split (a split
  // count depends on the whole launch's tiles).
  const GgmlType type = GgmlType::kQ4_K;
  const int64_t k = 512, rows[3] = {448, 64, 64};
  std::vector<HostWeight> hws;
  std::vector<std::unique_ptr<DeviceWeight>> dws;
  for (int i = 0; i < 3; ++i) {
    hws.push_back(MakeWeight(type, rows[i], k, 1));
    dws.push_back(Upload(hws.back(), false));
  }
  for (int64_t nt : {16, 40}) {
    const Acts a = MakeActs(k, nt);
    DeviceBuffer<uint16_t> act(a.layout);
    std::vector<std::unique_ptr<DeviceBuffer<float>>> outs;
    MmqSegments seg;
    seg.n = 3;
    for (int i = 0; i < 3; ++i) {
      outs.push_back(std::make_unique<DeviceBuffer<float>>(rows[i] * nt + kGuard));
      outs.back()->Poison();
      seg.w[i] = dws[i]->view;
      seg.y[i] = outs.back()->get();
    }
    DqTuning tu;
    tu.split_k = 0;
    ASSERT_EQ(LaunchDqGemm(seg, act.get(), nt, nullptr, &tu), cudaSuccess);
    SYNC();
    for (int i = 0; i < 3; ++i) {
      const std::vector<float> together = outs[i]->ToHost();
      cudaError_t err;
      const std::vector<float> alone = RunPoisoned(rows[i] * nt, [&](float* y) {
        MmqSegments one;
        one.n = 1;
        one.w[0] = dws[i]->view;
        one.y[0] = y;
        return LaunchDqGemm(one, act.get(), nt, nullptr, &tu);
      }, &err);
      ASSERT_EQ(err, cudaSuccess);
      EXPECT_EQ(Identical(together, alone, rows[i] * nt), 0) << "segment " << i << " nt=" << nt;
      Check(hws[i], a, MakeRefs(hws[i], a), together, "segment " + std::to_string(i));
    }
  }
}

TEST(DqGemmTest, RefusesWhatItCannotRun) {
  MINFER_REQUIRE_SM80_GPU();
  const int64_t k = 256, rows = 16;
  const HostWeight q6 = MakeWeight(GgmlType::kQ6_K, rows, k, 1);
  const HostWeight q4 = MakeWeight(GgmlType::kQ4_K, rows, k, 1);
  const HostWeight q8 = MakeWeight(GgmlType::kQ8_0, rows, k, 1);
  auto raw = Upload(q6, false);
  auto d4 = Upload(q4, false);
  auto d8 = Upload(q8, false);
  auto shifted = Upload(q4, false, /*shift=*/4);
  DeviceBuffer<uint16_t> act(k * 65 + 8);
  DeviceBuffer<float> y(rows * 65);
  auto call = [&](const WeightView& w, int64_t nt, const void* a, const char** why) {
    MmqSegments seg;
    seg.n = 1;
    seg.w[0] = w;
    seg.y[0] = y.get();
    return LaunchDqGemm(seg, a, nt, nullptr, nullptr, why);
  };
  const char* why = nullptr;
  EXPECT_EQ(call(raw->view, 8, act.get(), &why), cudaErrorNotSupported);
  EXPECT_STREQ(why, "raw 210-byte Q6_K blocks");
  EXPECT_EQ(call(d8->view, 8, act.get(), &why), cudaErrorNotSupported);
  EXPECT_STREQ(why, "not a Q4_K or Q6_K weight");
  EXPECT_EQ(call(d4->view, 65, act.get(), &why), cudaErrorNotSupported);
  EXPECT_STREQ(why, "more than 64 tokens");
  EXPECT_EQ(call(shifted->view, 8, act.get(), &why), cudaErrorNotSupported);
  EXPECT_STREQ(why, "weight base or row stride not 16-byte aligned");
  EXPECT_EQ(call(d4->view, 8, reinterpret_cast<const uint8_t*>(act.get()) + 8, &why),
            cudaErrorInvalidValue);
  EXPECT_EQ(call(d4->view, -1, act.get(), &why), cudaErrorInvalidValue);
  EXPECT_EQ(call(d4->view, 0, act.get(), &why), cudaSuccess);  // nothing to do
  EXPECT_TRUE(DqSupports(GgmlType::kQ4_K, false));
  EXPECT_TRUE(DqSupports(GgmlType::kQ6_K, true));
  EXPECT_FALSE(DqSupports(GgmlType::kQ6_K, false));
  EXPECT_FALSE(DqSupports(GgmlType::kQ5_K, true));
  SYNC();
}

}  // namespace
}  // namespace minfer::cuda
