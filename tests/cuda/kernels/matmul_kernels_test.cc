// GPU tests of the matrix kernels (cuda/kernels/matmul.h) against engine/quant:
// weights are made by QuantizeRow (or are random block bytes, which reach
// every code and scale bit), references are the CPU's QuantizeRowQ8A and
// VecDotQ8A and float64 dots of DequantizeRow's weights. Fresh random inputs
// each run (MINFER_TEST_SEED repeats one); outputs are poisoned with NaN bytes
// before every launch, so a skipped write fails.
//
// Bounds. magnitude = sum over terms |w_i a_i| (+ 2 |m s| per min term), the
// scale of any float folding error (cf. tests/engine/quant/vec_dot_test.cc);
// u = 2^-24.
//  * MMVQ vs float64 of the dequantized operands: u * (k/16 + 8) * magnitude
//    (the CPU's own bound; the GPU's fma chains are shorter than the CPU's).
//  * MMVQ vs the CPU's VecDotQ8A: twice that (both are within it of the
//    exact value).
//  * Fused kernels (segments, SwiGLU) vs unfused MMVQ: the MMVQ bound of each
//    dot, propagated through silu (|silu'| < 1.1).
//  * MatvecF32 vs float64: u * (k/16 + 64) * sum |w x| (f32 fma chains).
//  * GemmF16 vs float64: f16 rounds each weight and activation once (2^-11
//    each), so 2^-10 * sum |w x|, plus 2^-25 (sum |x| + sum |w|) for f16's
//    subnormal spacing, plus 4u * (k/16 + 16) * sum |w x| for the tensor
//    cores' f32 accumulation.
//  * Quantize and GetRows: bit-exact.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/kernels/matmul.h"
#include "cuda/testing/gpu_test_util.h"
#include "tests/cuda/kernels/matmul_fixtures.h"
#include "engine/quant/blocks.h"
#include "engine/quant/fp16.h"
#include "engine/quant/quantize.h"
#include "engine/quant/vec_dot.h"
#include "gtest/gtest.h"

namespace minfer::cuda {
namespace {

using ::minfer::cuda::testing::DeviceBuffer;
using ::minfer::cuda::testing::RandomFloats;
using ::minfer::cuda::testing::TestSeed;
using namespace ::minfer::cuda::testing;  // the weight fixtures


constexpr double kU = 1.0 / (1 << 24);

// Quantized activations: nt rows of k, CPU-quantized (so the MMVQ tests do
// not depend on the GPU quantizer), plus their float64 dequantization.
struct Acts {
  std::vector<float> x;
  std::vector<BlockQ8A> q;
  std::vector<double> deq;
};

Acts MakeActs(int64_t k, int64_t nt) {
  Acts a;
  a.x = RandomFloats(k * nt, 2.0f);
  a.q.resize(k / 32 * nt);
  for (int64_t t = 0; t < nt; ++t) QuantizeRowQ8A(a.x.data() + t * k, a.q.data() + t * (k / 32), k);
  a.deq.resize(k * nt);
  for (int64_t i = 0; i < k * nt; ++i) a.deq[i] = static_cast<double>(a.q[i / 32].qs[i % 32]) * a.q[i / 32].d;
  return a;
}

struct DotRef {
  double exact;  // float64 dot of the dequantized operands
  double mag;    // sum of |terms|
  float cpu;     // VecDotQ8A
};

DotRef RefDot(const HostWeight& w, int64_t r, const Acts& a, int64_t t) {
  DotRef ref{0, 0, 0};
  const float* wr = w.deq.data() + r * w.k;
  const double* x = a.deq.data() + t * w.k;
  for (int64_t i = 0; i < w.k; ++i) {
    ref.exact += static_cast<double>(wr[i]) * x[i];
    ref.mag += std::fabs(static_cast<double>(wr[i]) * x[i]);
  }
  const BlockQ8A* q = a.q.data() + t * (w.k / 32);
  for (int64_t b = 0; b < w.k / 32; ++b) ref.mag += 2 * std::fabs(BlockMin(w, r, b) * q[b].s);
  ref.cpu = VecDotQ8A(w.type, w.row(r), q, w.k);
  return ref;
}

double MmvqTol(int64_t k) { return kU * (k / 16.0 + 8); }

// Counts failures and reports the first few in detail.
class Checker {
 public:
  explicit Checker(std::string what) : what_(std::move(what)) {}
  ~Checker() {
    if (failures_ > 0) {
      ADD_FAILURE() << what_ << ": " << failures_ << " of " << checks_ << " checks failed"
                    << first_;
    }
  }
  void Check(bool ok, const std::string& detail) {
    ++checks_;
    if (ok) return;
    if (failures_ < 5) first_ += "\n  " + detail;
    ++failures_;
  }
  int failures() const { return failures_; }

 private:
  std::string what_;
  std::string first_;
  int64_t checks_ = 0;
  int failures_ = 0;
};

std::string Describe(GgmlType type, bool padded, int64_t rows, int64_t k, int64_t nt) {
  std::ostringstream s;
  s << GgmlTypeName(type) << (padded ? "(padded)" : "") << " rows=" << rows << " k=" << k
    << " nt=" << nt;
  return s.str();
}

// ------------------------------------------------------------------ quantize

TEST(QuantizeQ8ATest, BitIdenticalToCpu) {
  MINFER_REQUIRE_GPU();
  for (int64_t k : {32, 896, 3584, 18944}) {
    for (int64_t nt : {1, 3, 8}) {
      std::vector<float> x = ActivationsWithSpecialBlocks(k, nt);
      std::vector<BlockQ8A> ref(k / 32 * nt);
      for (int64_t t = 0; t < nt; ++t) QuantizeRowQ8A(x.data() + t * k, ref.data() + t * (k / 32), k);
      // Aligned and (by one float) misaligned input: both kernel paths.
      for (int shift : {0, 1}) {
        std::vector<float> xs(shift + x.size());
        std::copy(x.begin(), x.end(), xs.begin() + shift);
        DeviceBuffer<float> dx(xs);
        DeviceBuffer<BlockQ8A> dq(ref.size());
        dq.Poison();
        ASSERT_CUDA(LaunchQuantizeQ8A(dx.get() + shift, dq.get(), k, nt, nullptr));
        SYNC();
        const std::vector<BlockQ8A> got = dq.ToHost();
        ASSERT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(BlockQ8A)), 0)
            << "k=" << k << " nt=" << nt << " shift=" << shift;
      }
    }
  }
}

TEST(QuantizeQ8ATest, RejectsBadShapes) {
  MINFER_REQUIRE_GPU();
  DeviceBuffer<float> dx(64);
  DeviceBuffer<BlockQ8A> dq(2);
  EXPECT_EQ(LaunchQuantizeQ8A(dx.get(), dq.get(), 48, 1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchQuantizeQ8A(dx.get(), dq.get(), 64, 0, nullptr), cudaSuccess);
}

// ---------------------------------------------------------------------- MMVQ

// Runs `launch` (which writes y) and checks every (row, token) output against
// the CPU's VecDotQ8A and the float64 reference.
void CheckMmvqOutputs(const HostWeight& w, const Acts& a, int64_t nt, const std::vector<float>& y,
                      int64_t y_stride, const std::string& what, Checker* c) {
  const double tol = MmvqTol(w.k);
  for (int64_t t = 0; t < nt; ++t) {
    for (int64_t r = 0; r < w.rows; ++r) {
      const DotRef ref = RefDot(w, r, a, t);
      const float g = y[t * y_stride + r];
      const double e64 = std::fabs(g - ref.exact), ecpu = std::fabs(static_cast<double>(g) - ref.cpu);
      std::ostringstream d;
      d << what << " row " << r << " token " << t << ": gpu " << g << " cpu " << ref.cpu
        << " exact " << ref.exact << " (err/mag " << e64 / ref.mag << ", vs cpu "
        << ecpu / ref.mag << ", bound " << tol << ")";
      c->Check(e64 <= tol * ref.mag && ecpu <= 2 * tol * ref.mag, d.str());
    }
    // Gap between token rows: untouched.
    for (int64_t r = w.rows; t + 1 < nt && r < y_stride; ++r) {
      c->Check(Bits(y[t * y_stride + r]) == 0xFFFFFFFFu, what + ": wrote past the row end");
    }
  }
}

class MmvqTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(MmvqTest, MatchesCpuAndFloat64) {
  MINFER_REQUIRE_GPU();
  const GgmlType type = GetParam();
  const int64_t bs = TraitsOf(type).block_size;
  for (bool padded : {false, true}) {
    if (padded && type != GgmlType::kQ6_K) continue;
    Checker c("MMVQ " + std::string(GgmlTypeName(type)) + (padded ? " padded" : ""));
    for (int64_t k : {256, 896, 3584, 4864}) {
      if (k % bs != 0) continue;
      for (int64_t rows : {1, 7, 64, 513}) {
        for (int variant : {0, 1}) {
          const HostWeight w = MakeWeight(type, rows, k, variant);
          auto dw = Upload(w, padded);
          for (int64_t nt : {1, 2, 3, 8}) {
            const Acts a = MakeActs(k, nt);
            DeviceBuffer<BlockQ8A> dq(a.q);
            const int64_t y_stride = rows + 3;
            DeviceBuffer<float> dy(y_stride * nt);
            dy.Poison();
            ASSERT_CUDA(LaunchMmvq(dw->view, dq.get(), dy.get(), y_stride, nt, nullptr));
            SYNC();
            CheckMmvqOutputs(w, a, nt, dy.ToHost(), y_stride,
                             Describe(type, padded, rows, k, nt) + " variant " + std::to_string(variant),
                             &c);
          }
        }
      }
    }
  }
}

// Every instantiation the benchmark's tuning reaches (rows per warp, shared
// or L1 activations, k split), on misaligned and strided weights too.
TEST_P(MmvqTest, EveryTuningAndLayout) {
  MINFER_REQUIRE_GPU();
  const GgmlType type = GetParam();
  const int64_t k = TraitsOf(type).block_size == 256 ? 4864 : 1184;  // 37 blocks: ragged
  const int64_t rows = 67;
  Checker c("MMVQ tunings " + std::string(GgmlTypeName(type)));
  const HostWeight w = MakeWeight(type, rows, k, 1);
  struct Layout {
    bool padded;
    int64_t shift, extra;
  };
  for (const Layout& l : {Layout{false, 0, 0}, Layout{true, 0, 0}, Layout{false, 2, 0},
                          Layout{false, 0, 32}, Layout{true, 6, 16}}) {
    if (l.padded && type != GgmlType::kQ6_K) continue;
    auto dw = Upload(w, l.padded, l.shift, l.extra);
    for (int64_t nt : {1, 3}) {
      const Acts a = MakeActs(k, nt);
      DeviceBuffer<BlockQ8A> dq(a.q);
      for (int r : {1, 2, 4}) {
        if (nt > 1 && r == 4) continue;
        for (int smem : {0, 1}) {
          for (int ks : {1, 2, 4, 8}) {
            DeviceBuffer<float> dy(rows * nt);
            dy.Poison();
            MmvqTuning tu;
            tu.rows_per_warp = r, tu.act_smem = smem, tu.ksplit = ks;
            ASSERT_CUDA(LaunchMmvqTuned(dw->view, dq.get(), dy.get(), rows, nt, tu, nullptr));
            SYNC();
            std::ostringstream what;
            what << Describe(type, l.padded, rows, k, nt) << " shift " << l.shift << " extra "
                 << l.extra << " R=" << r << " smem=" << smem << " ks=" << ks;
            CheckMmvqOutputs(w, a, nt, dy.ToHost(), rows, what.str(), &c);
          }
        }
      }
    }
  }
}

// FusedQKV: segments (same type, mixed types) against unfused MMVQ.
TEST_P(MmvqTest, SegmentsMatchUnfused) {
  MINFER_REQUIRE_GPU();
  const GgmlType type = GetParam();
  const int64_t k = TraitsOf(type).block_size == 256 ? 3584 : 896;
  Checker c("segments " + std::string(GgmlTypeName(type)));
  // (rows, type) per segment: all of `type`, and `type` with a Q6_K (padded)
  // and a Q8_0 segment (the llama.cpp mixes put attn_v in another type).
  const std::vector<std::vector<std::pair<int64_t, GgmlType>>> cases = {
      {{96, type}, {16, type}, {16, type}},
      {{35, type}, {7, GgmlType::kQ6_K}, {9, type}},
      {{64, type}, {33, GgmlType::kQ8_0}},
      {{5, type}},
  };
  for (const auto& segs : cases) {
    if (k % 256 != 0 && std::any_of(segs.begin(), segs.end(), [](auto& s) {
          return TraitsOf(s.second).block_size == 256;
        })) {
      continue;
    }
    const Acts a = MakeActs(k, 1);
    DeviceBuffer<BlockQ8A> dq(a.q);
    std::vector<HostWeight> hw;
    std::vector<std::unique_ptr<DeviceWeight>> dw;
    MmvqSegments ms;
    int64_t total = 0;
    for (const auto& s : segs) {
      hw.push_back(MakeWeight(s.second, s.first, k, 1));
      dw.push_back(Upload(hw.back(), true));
      ms.w[ms.n++] = dw.back()->view;
      total += s.first;
    }
    DeviceBuffer<float> dy(total);
    dy.Poison();
    ASSERT_CUDA(LaunchMmvqSegments(ms, dq.get(), dy.get(), nullptr));
    SYNC();
    const std::vector<float> fused = dy.ToHost();
    int64_t off = 0;
    for (size_t i = 0; i < hw.size(); ++i) {
      DeviceBuffer<float> du(hw[i].rows);
      du.Poison();
      ASSERT_CUDA(LaunchMmvq(dw[i]->view, dq.get(), du.get(), 0, 1, nullptr));
      SYNC();
      const std::vector<float> un = du.ToHost();
      for (int64_t r = 0; r < hw[i].rows; ++r) {
        const DotRef ref = RefDot(hw[i], r, a, 0);
        const float f = fused[off + r];
        std::ostringstream d;
        d << "segment " << i << " (" << GgmlTypeName(hw[i].type) << ") row " << r << ": fused " << f
          << " unfused " << un[r] << " exact " << ref.exact;
        c.Check(std::fabs(f - un[r]) <= 2 * MmvqTol(k) * ref.mag &&
                    std::fabs(f - ref.exact) <= MmvqTol(k) * ref.mag,
                d.str());
      }
      off += hw[i].rows;
    }
  }
}

float Silu(float g) { return g / (1.0f + std::exp(-g)); }

// FusedFFN: silu(gate . q) * (up . q), same-type (one launch) and mixed-type
// (two launches) against unfused MMVQ outputs.
TEST_P(MmvqTest, SwiGluMatchesUnfused) {
  MINFER_REQUIRE_GPU();
  const GgmlType type = GetParam();
  const int64_t k = TraitsOf(type).block_size == 256 ? 3584 : 896;
  Checker c("swiglu " + std::string(GgmlTypeName(type)));
  for (GgmlType up_type : {type, type == GgmlType::kQ6_K ? GgmlType::kQ4_K : GgmlType::kQ6_K}) {
    if (k % TraitsOf(up_type).block_size != 0) continue;
    for (int64_t rows : {1, 77, 1000}) {
      const HostWeight g = MakeWeight(type, rows, k, 0), u = MakeWeight(up_type, rows, k, 0);
      auto dg = Upload(g, true), du = Upload(u, true);
      const Acts a = MakeActs(k, 1);
      DeviceBuffer<BlockQ8A> dq(a.q);
      DeviceBuffer<float> dy(rows), dgy(rows), duy(rows);
      dy.Poison(), dgy.Poison(), duy.Poison();
      ASSERT_CUDA(LaunchMmvqSwiGlu(dg->view, du->view, dq.get(), dy.get(), nullptr));
      ASSERT_CUDA(LaunchMmvq(dg->view, dq.get(), dgy.get(), 0, 1, nullptr));
      ASSERT_CUDA(LaunchMmvq(du->view, dq.get(), duy.get(), 0, 1, nullptr));
      SYNC();
      const auto y = dy.ToHost(), gy = dgy.ToHost(), uy = duy.ToHost();
      for (int64_t r = 0; r < rows; ++r) {
        const DotRef rg = RefDot(g, r, a, 0), ru = RefDot(u, r, a, 0);
        const double eg = 2 * MmvqTol(k) * rg.mag, eu = 2 * MmvqTol(k) * ru.mag;
        const double want = static_cast<double>(Silu(gy[r])) * uy[r];
        const double bound = 1.1 * eg * (std::fabs(uy[r]) + eu) +
                             std::fabs(Silu(gy[r])) * eu + 1e-6 * std::fabs(want) + 1e-30;
        std::ostringstream d;
        d << GgmlTypeName(type) << "/" << GgmlTypeName(up_type) << " rows=" << rows << " row "
          << r << ": fused " << y[r] << " unfused " << want << " bound " << bound;
        c.Check(std::fabs(y[r] - want) <= bound, d.str());
      }
    }
  }
}

TEST_P(MmvqTest, RejectsBadArguments) {
  MINFER_REQUIRE_GPU();
  const GgmlType type = GetParam();
  const HostWeight w = MakeWeight(type, 4, 256, 0);
  auto dw = Upload(w, false);
  DeviceBuffer<BlockQ8A> dq(8 * 9);
  DeviceBuffer<float> dy(64);
  EXPECT_EQ(LaunchMmvq(dw->view, dq.get(), dy.get(), 4, 9, nullptr), cudaErrorInvalidValue);
  WeightView bad = dw->view;
  bad.k = 224;  // not a multiple of 32 * ... for K-quants; 7 blocks for legacy (valid)
  if (TraitsOf(type).block_size == 256) {
    EXPECT_EQ(LaunchMmvq(bad, dq.get(), dy.get(), 4, 1, nullptr), cudaErrorInvalidValue);
  }
  bad = dw->view;
  bad.row_bytes -= 2;  // shorter than a row
  EXPECT_EQ(LaunchMmvq(bad, dq.get(), dy.get(), 4, 1, nullptr), cudaErrorInvalidValue);
  EXPECT_TRUE(MmvqSupports(type));
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MmvqTest, ::testing::ValuesIn(kQuantTypes),
                         [](const auto& info) { return std::string(GgmlTypeName(info.param)); });

// ------------------------------------------------------------------ MatvecF32

struct FloatRef {
  double exact, mag;
};

FloatRef RefDotF(const HostWeight& w, int64_t r, const std::vector<float>& x, int64_t t) {
  FloatRef ref{0, 0};
  for (int64_t i = 0; i < w.k; ++i) {
    const double p = static_cast<double>(w.deq[r * w.k + i]) * x[t * w.k + i];
    ref.exact += p;
    ref.mag += std::fabs(p);
  }
  return ref;
}

TEST(MatvecF32Test, MatchesFloat64) {
  MINFER_REQUIRE_GPU();
  const GgmlType types[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ4_0,
                            GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kQ5_1};
  for (GgmlType type : types) {
    Checker c("MatvecF32 " + std::string(GgmlTypeName(type)));
    const int64_t bs = TraitsOf(type).block_size;
    for (int64_t k : {100, 256, 896, 3584}) {
      if (k % bs != 0 || (k % 32 != 0 && !IsFloatType(type))) continue;
      for (int64_t rows : {1, 7, 64, 513}) {
        const HostWeight w = MakeWeight(type, rows, k, 1);
        for (bool padded : {false, true}) {
          if (padded && type != GgmlType::kQ6_K) continue;
          // Float types: also rows that are not 16-byte aligned (the
          // element-by-element path; F32 rows stay 4-byte aligned).
          for (int64_t shift : {0, 4}) {
            if (shift != 0 && !IsFloatType(type)) continue;
            auto dw = Upload(w, padded, shift);
            for (int64_t nt : {1, 3, 8, 11}) {
              const std::vector<float> x = RandomFloats(k * nt, 1.0f);
              DeviceBuffer<float> dx(x);
              const int64_t y_stride = rows + 1;
              DeviceBuffer<float> dy(y_stride * nt);
              dy.Poison();
              ASSERT_CUDA(LaunchMatvecF32(dw->view, dx.get(), dy.get(), y_stride, nt, nullptr));
              SYNC();
              const std::vector<float> y = dy.ToHost();
              const double tol = kU * (k / 16.0 + 64);
              for (int64_t t = 0; t < nt; ++t) {
                for (int64_t r = 0; r < rows; ++r) {
                  const FloatRef ref = RefDotF(w, r, x, t);
                  const float g = y[t * y_stride + r];
                  std::ostringstream d;
                  d << Describe(type, padded, rows, k, nt) << " shift " << shift << " row " << r
                    << " token " << t << ": gpu " << g << " exact " << ref.exact << " err/mag "
                    << std::fabs(g - ref.exact) / ref.mag;
                  c.Check(std::fabs(g - ref.exact) <= tol * ref.mag, d.str());
                }
              }
            }
          }
        }
      }
    }
  }
}

// --------------------------------------------------------------------- GemmF16

TEST(GemmF16Test, MatchesFloat64) {
  MINFER_REQUIRE_GPU();
  const GgmlType types[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ4_0,
                            GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0,
                            GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};
  for (GgmlType type : types) {
    const int64_t bs = TraitsOf(type).block_size;
    // k: K-quants 256 and 1280 (5 super-blocks: Q6_K's half-slices cross a
    // step); legacy 288 (a half-empty last step) and 896; float types also
    // 200 (a partial step, element-by-element loads).
    std::vector<int64_t> ks = bs == 256 ? std::vector<int64_t>{256, 1280}
                                        : std::vector<int64_t>{288, 896};
    if (IsFloatType(type)) ks.push_back(200);
    for (bool padded : {false, true}) {
      if (padded && type != GgmlType::kQ6_K) continue;
      Checker c("GemmF16 " + std::string(GgmlTypeName(type)) + (padded ? " padded" : ""));
      for (int64_t k : ks) {
        for (int64_t rows : {1, 131, 257}) {
          const HostWeight w = MakeWeight(type, rows, k, 1);
          auto dw = Upload(w, padded);
          for (int64_t nt : {9, 17, 100, 511}) {
            const std::vector<float> x = RandomFloats(k * nt, 1.0f);
            DeviceBuffer<float> dx(x);
            DeviceBuffer<float> dy(rows * nt);
            dy.Poison();
            ASSERT_CUDA(LaunchGemmF16(dw->view, dx.get(), dy.get(), nt, nullptr));
            SYNC();
            const std::vector<float> y = dy.ToHost();
            std::vector<double> sw(rows, 0.0);
            for (int64_t r = 0; r < rows; ++r) {
              for (int64_t i = 0; i < k; ++i) sw[r] += std::fabs(w.deq[r * k + i]);
            }
            for (int64_t t = 0; t < nt; ++t) {
              double sx = 0;
              for (int64_t i = 0; i < k; ++i) sx += std::fabs(x[t * k + i]);
              for (int64_t r = 0; r < rows; ++r) {
                const FloatRef ref = RefDotF(w, r, x, t);
                const double tol = (std::ldexp(1.0, -10) + 4 * kU * (k / 16.0 + 16)) * ref.mag +
                                   std::ldexp(1.0, -25) * (sx + sw[r]);
                const float g = y[t * rows + r];
                std::ostringstream d;
                d << Describe(type, padded, rows, k, nt) << " row " << r << " token " << t
                  << ": gpu " << g << " exact " << ref.exact << " err " << std::fabs(g - ref.exact)
                  << " bound " << tol;
                c.Check(std::fabs(g - ref.exact) <= tol, d.str());
              }
            }
          }
        }
      }
    }
  }
}

// ------------------------------------------------------------------- GetRows

TEST(GetRowsWeightTest, BitExactWithDequantizeRow) {
  MINFER_REQUIRE_GPU();
  const GgmlType types[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ4_0,
                            GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0,
                            GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};
  for (GgmlType type : types) {
    const int64_t k = TraitsOf(type).block_size == 256 ? 1792 : 896;
    const int64_t rows = 50;
    for (int variant : {0, 1}) {
      if (variant == 1 && IsFloatType(type)) continue;
      const HostWeight w = MakeWeight(type, rows, k, variant);
      for (bool padded : {false, true}) {
        if (padded && type != GgmlType::kQ6_K) continue;
        auto dw = Upload(w, padded);
        const std::vector<int32_t> ids = {0, 49, 7, 7, 23, 1, 48};
        DeviceBuffer<int32_t> did(ids);
        DeviceBuffer<float> dy(ids.size() * k);
        DeviceBuffer<int32_t> flag(std::vector<int32_t>{0});
        dy.Poison();
        ASSERT_CUDA(LaunchGetRowsWeight(dw->view, did.get(), ids.size(), dy.get(), flag.get(), nullptr));
        SYNC();
        const std::vector<float> y = dy.ToHost();
        for (size_t i = 0; i < ids.size(); ++i) {
          ASSERT_EQ(std::memcmp(y.data() + i * k, w.deq.data() + ids[i] * k, k * sizeof(float)), 0)
              << GgmlTypeName(type) << (padded ? " padded" : "") << " variant " << variant << " id "
              << ids[i];
        }
        EXPECT_EQ(flag.ToHost()[0], kDeviceOk);
      }
    }
  }
}

TEST(GetRowsWeightTest, BadIdsGiveZeroRowsAndSetTheFlag) {
  MINFER_REQUIRE_GPU();
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ8_0, GgmlType::kF16}) {
    const int64_t k = 256, rows = 10;
    const HostWeight w = MakeWeight(type, rows, k, 0);
    auto dw = Upload(w, false);
    const std::vector<int32_t> ids = {3, -1, 10, 9, 1 << 30};
    DeviceBuffer<int32_t> did(ids);
    DeviceBuffer<float> dy(ids.size() * k);
    DeviceBuffer<int32_t> flag(std::vector<int32_t>{0});
    dy.Poison();
    ASSERT_CUDA(LaunchGetRowsWeight(dw->view, did.get(), ids.size(), dy.get(), flag.get(), nullptr));
    SYNC();
    const std::vector<float> y = dy.ToHost();
    EXPECT_EQ(flag.ToHost()[0], kDeviceBadTokenId) << GgmlTypeName(type);
    for (size_t i = 0; i < ids.size(); ++i) {
      const bool good = ids[i] >= 0 && ids[i] < rows;
      for (int64_t e = 0; e < k; ++e) {
        const float want = good ? w.deq[ids[i] * k + e] : 0.0f;
        ASSERT_EQ(Bits(y[i * k + e]), Bits(want)) << GgmlTypeName(type) << " id " << ids[i] << " e " << e;
      }
    }
  }
}

}  // namespace
}  // namespace minfer::cuda
