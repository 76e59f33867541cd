// GPU tests of the FP8 prefill GEMM and its quantizer (cuda/kernels/
// fp8_gemm.h) against the CPU reference (engine/quant/fp8_matmul.h):
//  * the quantizer's codes and scales equal QuantizeRowFp8's bit for bit
//    (zero rows, outliers that push the rest subnormal, strided rows);
//  * the GEMM equals MatMulFp8Reference within the accumulation term with a
//    13-bit accumulator (the tensor core adds the exact products in its own
//    order and narrower than f32), and the f64 product of the ORIGINAL
//    floats within fp8_matmul.h's stated bound with the same 13 bits;
//  * the residual form adds the residual to the same value, bit for bit;
//  * nothing past the output is written, and bad shapes are refused.
// Skips without a GPU of compute capability 8.9+.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/kernels/fp8_gemm.h"
#include "cuda/testing/gpu_test_util.h"
#include "engine/quant/fp8.h"
#include "engine/quant/fp8_matmul.h"
#include "gtest/gtest.h"

namespace minfer::cuda {
namespace {

using ::minfer::cuda::testing::DeviceBuffer;

// The accumulator bits the GEMM is held to (fp8_gemm.h).
constexpr int kAccBits = 13;
constexpr int64_t kGuard = 64;

#define MINFER_REQUIRE_FP8_GPU()                                                  \
  do {                                                                            \
    MINFER_REQUIRE_GPU();                                                         \
    int dev_ = 0, major_ = 0, minor_ = 0;                                         \
    cudaGetDevice(&dev_);                                                         \
    cudaDeviceGetAttribute(&major_, cudaDevAttrComputeCapabilityMajor, dev_);     \
    cudaDeviceGetAttribute(&minor_, cudaDevAttrComputeCapabilityMinor, dev_);     \
    if (!Fp8GemmRuns(major_ * 100 + minor_ * 10)) GTEST_SKIP() << "needs sm_89+"; \
  } while (0)

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Rows of k floats: Gaussian, with row 0 all zero and row 1 carrying one
// outlier 1000x the rest (its other values land on e4m3's subnormals).
std::vector<float> MakeRows(int64_t rows, int64_t k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(rows * k);
  for (auto& v : x) v = n(rng);
  if (rows > 2) {
    std::fill(x.begin(), x.begin() + k, 0.0f);
    x[k + k / 3] = 1000.0f;
  }
  return x;
}

TEST(Fp8QuantizeTest, CodesAndScalesEqualTheCpu) {
  MINFER_REQUIRE_GPU();
  for (const int64_t k : {32, 96, 3584, 4096}) {
    for (const int64_t pad : {0, 7}) {
      const int64_t rows = 19, x_stride = k + pad, code_stride = Fp8RowBytes(k) + 16;
      std::vector<float> host = MakeRows(rows, x_stride, 11 + k + pad);
      DeviceBuffer<float> x(host);
      DeviceBuffer<uint8_t> codes(rows * code_stride);
      DeviceBuffer<float> scales(rows + 1);
      codes.Poison(0xAB);
      scales.Poison();
      ASSERT_CUDA(LaunchQuantizeRowsFp8(x.get(), x_stride, k, rows, codes.get(), code_stride,
                                        scales.get(), nullptr));
      SYNC();
      const std::vector<uint8_t> c = codes.ToHost();
      const std::vector<float> s = scales.ToHost();
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<uint8_t> want(k);
        float want_scale = -1;
        QuantizeRowFp8(host.data() + r * x_stride, k, want.data(), &want_scale);
        ASSERT_EQ(Bits(s[r]), Bits(want_scale)) << "k " << k << " row " << r;
        for (int64_t i = 0; i < k; ++i) {
          ASSERT_EQ(c[r * code_stride + i], want[i]) << "k " << k << " row " << r << " i " << i;
        }
        // Only the k codes are written.
        EXPECT_EQ(c[r * code_stride + k], 0xAB) << "k " << k << " row " << r;
      }
      EXPECT_EQ(Bits(s[rows]), 0xFFFFFFFFu) << "wrote a scale past the last row";
    }
  }
}

struct Case {
  int64_t rows, nt, k;
};

// Rows quantized by the CPU reference, in the GEMM's layout on the device.
std::vector<uint8_t> Padded(const ::minfer::Fp8Rows& h) {
  const int64_t rb = Fp8RowBytes(h.k);
  std::vector<uint8_t> padded(std::max<int64_t>(1, h.rows * rb), 0);
  for (int64_t r = 0; r < h.rows; ++r) {
    std::memcpy(padded.data() + r * rb, h.codes.data() + r * h.k, h.k);
  }
  return padded;
}
struct DeviceRows {
  explicit DeviceRows(const ::minfer::Fp8Rows& h)
      : codes(Padded(h)),
        scales(h.scales),
        view{codes.get(), scales.get(), h.rows, h.k, Fp8RowBytes(h.k)} {}
  DeviceBuffer<uint8_t> codes;
  DeviceBuffer<float> scales;
  Fp8RowsView view;
};

TEST(Fp8GemmTest, EqualsTheCpuReferenceWithinItsBound) {
  MINFER_REQUIRE_FP8_GPU();
  const Case cases[] = {{1, 1, 32},     {37, 5, 96},    {128, 64, 256},  {130, 65, 320},
                        {300, 70, 3584}, {5, 200, 64},  {4608, 130, 3584}, {3584, 512, 1024}};
  for (const Case& cs : cases) {
    std::ostringstream what;
    what << cs.rows << " rows x " << cs.nt << " tokens, k " << cs.k;
    const std::vector<float> wf = MakeRows(cs.rows, cs.k, 1000 + cs.rows);
    std::vector<float> xf = MakeRows(cs.nt, cs.k, 2000 + cs.nt);
    for (auto& v : xf) v *= 3.0f;
    const ::minfer::Fp8Rows wq = QuantizeRowsFp8(wf.data(), cs.rows, cs.k);
    const ::minfer::Fp8Rows xq = QuantizeRowsFp8(xf.data(), cs.nt, cs.k);
    std::vector<float> ref(cs.rows * cs.nt);
    MatMulFp8Reference(wq, xq, ref.data());

    const DeviceRows dw(wq), dx(xq);
    const int64_t n = cs.rows * cs.nt;
    DeviceBuffer<float> y(n + kGuard);
    y.Poison();
    ASSERT_CUDA(LaunchFp8Gemm(dw.view, dx.view, nullptr, y.get(), cs.rows, nullptr));
    SYNC();
    const std::vector<float> got = y.ToHost();
    for (int64_t i = n; i < n + kGuard; ++i) {
      ASSERT_EQ(Bits(got[i]), 0xFFFFFFFFu) << what.str() << ": wrote past the end";
    }
    double worst_acc = 0, worst_bound = 0;
    int64_t bad = 0;
    for (int64_t t = 0; t < cs.nt; ++t) {
      for (int64_t r = 0; r < cs.rows; ++r) {
        const float g = got[t * cs.rows + r];
        ASSERT_NE(Bits(g), 0xFFFFFFFFu) << what.str() << ": row " << r << " token " << t
                                        << " not written";
        // The accumulation term alone: |sum of the exact products| with
        // 13-bit partial sums, times the scales.
        double mag = 0, exact = 0;
        for (int64_t i = 0; i < cs.k; ++i) {
          const double p = static_cast<double>(E4M3ToFloat(wq.codes[r * cs.k + i])) *
                           E4M3ToFloat(xq.codes[t * cs.k + i]);
          mag += std::fabs(p);
          exact += static_cast<double>(wf[r * cs.k + i]) * xf[t * cs.k + i];
        }
        const double sc = static_cast<double>(wq.scales[r]) * xq.scales[t];
        const double acc_term = sc * mag * (cs.k * std::ldexp(1.0, -kAccBits) + 1e-6);
        const double e_ref = std::fabs(g - static_cast<double>(ref[t * cs.rows + r]));
        const double bound = Fp8DotErrorBound(wf.data() + r * cs.k, xf.data() + t * cs.k, cs.k,
                                              wq.scales[r], xq.scales[t], kAccBits);
        const double e_f64 = std::fabs(g - exact);
        if (acc_term > 0) worst_acc = std::max(worst_acc, e_ref / acc_term);
        if (bound > 0) worst_bound = std::max(worst_bound, e_f64 / bound);
        if ((e_ref > acc_term || e_f64 > bound) && bad++ < 3) {
          ADD_FAILURE() << what.str() << ": row " << r << " token " << t << " gpu " << g
                        << " reference " << ref[t * cs.rows + r] << " f64 " << exact
                        << " (accumulation term " << acc_term << ", bound " << bound << ")";
        }
      }
    }
    EXPECT_EQ(bad, 0) << what.str();
    std::printf("%s: worst |gpu - reference| / accumulation term %.3g, |gpu - f64| / bound %.3g\n",
                what.str().c_str(), worst_acc, worst_bound);

    // The residual form: the same value, then one float add.
    std::vector<float> res = MakeRows(cs.nt, cs.rows, 3000 + cs.k);
    DeviceBuffer<float> dres(res);
    DeviceBuffer<float> y2(n + kGuard);
    y2.Poison();
    ASSERT_CUDA(LaunchFp8Gemm(dw.view, dx.view, dres.get(), y2.get(), cs.rows, nullptr));
    SYNC();
    const std::vector<float> got2 = y2.ToHost();
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(Bits(got2[i]), Bits(res[i] + got[i])) << what.str() << " residual, output " << i;
    }
    EXPECT_EQ(Bits(got2[n]), 0xFFFFFFFFu) << what.str() << " residual: wrote past the end";
  }
}

TEST(Fp8GemmTest, RefusesBadShapes) {
  MINFER_REQUIRE_GPU();
  DeviceBuffer<uint8_t> codes(64 * 64);
  DeviceBuffer<float> scales(64), y(64 * 64);
  const Fp8RowsView ok{codes.get(), scales.get(), 8, 64, 64};
  Fp8RowsView bad_k = ok;
  bad_k.k = 48;  // not a multiple of 32
  Fp8RowsView bad_stride = ok;
  bad_stride.row_bytes = 72;  // not a multiple of 16
  Fp8RowsView other_k = ok;
  other_k.k = 32;
  EXPECT_EQ(LaunchFp8Gemm(bad_k, ok, nullptr, y.get(), 8, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchFp8Gemm(ok, bad_stride, nullptr, y.get(), 8, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchFp8Gemm(ok, other_k, nullptr, y.get(), 8, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchFp8Gemm(ok, ok, nullptr, y.get(), 7, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchQuantizeRowsFp8(y.get(), 64, 48, 2, codes.get(), 64, scales.get(), nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(LaunchQuantizeRowsFp8(y.get(), 64, 64, 2, codes.get(), 40, scales.get(), nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace minfer::cuda
