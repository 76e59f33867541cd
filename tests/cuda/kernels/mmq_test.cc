// GPU tests of the int8 tensor-core prefill GEMM (cuda/kernels/mmq.h)
// against engine/quant: weights are QuantizeRow outputs or random block
// bytes (every code and scale bit), the reference is the CPU's VecDotQ8A on
// the CPU's QuantizeRowQ8A activations. Fresh random inputs each run
// (MINFER_TEST_SEED repeats one); outputs are poisoned with NaN bytes before
// every launch, so a skipped write fails, and a guard after y catches writes
// past the end.
//
// Bounds (mmq.h). magnitude = sum |w_i a_i| over the dequantized operands
// (+ 2 |m s| per min term), u = 2^-24:
//  * every variant vs VecDotQ8A: 2 u (k/16 + 8) * magnitude (both are within
//    u (k/16 + 8) magnitude of the exact dot of the same terms);
//  * the variants (fast 64/128 tokens per CTA, generic, the LaunchMmq
//    ladder with the GPU prepass) fold the same terms in the same order, so
//    they must agree bit for bit; likewise Q6_K raw vs padded blocks;
//  * LaunchQuantizeMmq: bit-exact with QuantizeRowQ8A, padding tokens zero.
// The number of outputs bit-identical to VecDotQ8A is printed (the
// implementation is expected to match the CPU exactly; the contract does not
// promise it).
//
// Large shapes check every row for a sample of tokens (both ends, the tile
// edges, a stride) against the CPU; every output is still checked for being
// written and for agreeing across variants.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/kernels/mmq.h"
#include "cuda/kernels/ops.h"
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


// MMQ needs int8 mma.m16n8k32 (sm_80+); older GPUs get cudaErrorNotSupported.
#define REQUIRE_MMQ_GPU() MINFER_REQUIRE_SM80_GPU()

constexpr double kU = 1.0 / (1 << 24);
constexpr int64_t kGuard = 64;  // poisoned floats after y

// -------------------------------------------------------------- activations

struct Acts {
  int64_t k = 0, nt = 0;
  std::vector<float> x;       // nt x k
  std::vector<BlockQ8A> q;    // QuantizeRowQ8A
  std::vector<double> deq;    // qs * d
  std::vector<uint8_t> layout;  // q in the MMQ activation layout (host-built)
};

int64_t TokensPadded(int64_t nt) { return (nt + kMmqTokenPad - 1) / kMmqTokenPad * kMmqTokenPad; }

// The documented layout (mmq.h), built on the host from BlockQ8A blocks.
std::vector<uint8_t> BuildLayout(const std::vector<BlockQ8A>& q, int64_t k, int64_t nt) {
  const int64_t ntp = TokensPadded(nt), nb = k / 32;
  std::vector<uint8_t> out(MmqActivationBytes(k, nt), 0);
  EXPECT_EQ(static_cast<int64_t>(out.size()), ntp * nb * 40);
  float* d = reinterpret_cast<float*>(out.data() + ntp * k);
  float* s = d + nb * ntp;
  for (int64_t t = 0; t < nt; ++t) {
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ8A& blk = q[t * nb + b];
      std::memcpy(out.data() + t * k + 32 * b, blk.qs, 32);
      d[b * ntp + t] = blk.d;
      s[b * ntp + t] = blk.s;
    }
  }
  return out;
}

Acts MakeActs(int64_t k, int64_t nt) {
  Acts a;
  a.k = k, a.nt = nt;
  a.x = RandomFloats(k * nt, 2.0f);
  a.q.resize(k / 32 * nt);
  for (int64_t t = 0; t < nt; ++t) QuantizeRowQ8A(a.x.data() + t * k, a.q.data() + t * (k / 32), k);
  a.deq.resize(k * nt);
  for (int64_t i = 0; i < k * nt; ++i) a.deq[i] = static_cast<double>(a.q[i / 32].qs[i % 32]) * a.q[i / 32].d;
  a.layout = BuildLayout(a.q, k, nt);
  return a;
}

// Tokens checked against the CPU: all for small nt, else both ends, the
// 32/64/128-token tile edges and a stride.
std::vector<int64_t> CheckedTokens(int64_t nt) {
  std::set<int64_t> s;
  if (nt <= 24) {
    for (int64_t t = 0; t < nt; ++t) s.insert(t);
  } else {
    for (int64_t t : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{8}, int64_t{31}, int64_t{32},
                      int64_t{63}, int64_t{64}, int64_t{127}, int64_t{128}, nt / 2, nt - 2,
                      nt - 1}) {
      if (t >= 0 && t < nt) s.insert(t);
    }
    for (int64_t t = 3; t < nt; t += 37) s.insert(t);
  }
  return {s.begin(), s.end()};
}

struct Ref {
  float cpu;
  double mag;
};

Ref RefDot(const HostWeight& w, int64_t r, const Acts& a, int64_t t) {
  Ref ref{0, 0};
  const float* wr = w.deq.data() + r * w.k;
  const double* x = a.deq.data() + t * w.k;
  for (int64_t i = 0; i < w.k; ++i) ref.mag += std::fabs(static_cast<double>(wr[i]) * x[i]);
  const BlockQ8A* q = a.q.data() + t * (w.k / 32);
  for (int64_t b = 0; b < w.k / 32; ++b) ref.mag += 2 * std::fabs(BlockMin(w, r, b) * q[b].s);
  ref.cpu = VecDotQ8A(w.type, w.row(r), q, w.k);
  return ref;
}

double MmqTol(int64_t k) { return 2 * kU * (k / 16.0 + 8); }

// Counts failures and reports the first few in detail.
class Checker {
 public:
  explicit Checker(std::string what) : what_(std::move(what)) {}
  ~Checker() {
    if (failures_ > 0) {
      ADD_FAILURE() << what_ << ": " << failures_ << " of " << checks_ << " checks failed"
                    << first_;
    }
    std::cout << "[mmq] " << what_ << ": " << checks_ << " checks";
    if (cpu_checks_ > 0) {
      std::cout << ", " << exact_ << " of " << cpu_checks_ << " outputs bit-identical to VecDotQ8A";
    }
    std::cout << "\n";
  }
  void Check(bool ok, const std::string& detail) {
    ++checks_;
    if (ok) return;
    if (failures_ < 5) first_ += "\n  " + detail;
    ++failures_;
  }
  void CountExact(bool exact) {
    ++cpu_checks_;
    exact_ += exact;
  }
  int failures() const { return failures_; }

 private:
  std::string what_;
  std::string first_;
  int64_t checks_ = 0, cpu_checks_ = 0, exact_ = 0;
  int failures_ = 0;
};

std::string Describe(GgmlType type, bool padded, int64_t rows, int64_t k, int64_t nt) {
  std::ostringstream s;
  s << GgmlTypeName(type) << (padded ? "(padded)" : "") << " rows=" << rows << " k=" << k
    << " nt=" << nt;
  return s.str();
}

// y of rows x nt plus a poisoned guard; runs `launch(y)` and returns y
// (guard included).
template <typename F>
std::vector<float> RunPoisoned(int64_t rows, int64_t nt, F launch, cudaError_t* err) {
  DeviceBuffer<float> dy(rows * nt + kGuard);
  dy.Poison();
  *err = launch(dy.get());
  if (*err == cudaSuccess) *err = cudaDeviceSynchronize();
  return dy.ToHost();
}

// Checks y (rows x nt + guard) against the CPU for the checked tokens, and
// that every output was written and the guard was not.
void CheckAgainstCpu(const HostWeight& w, const Acts& a, const std::vector<float>& y,
                     const std::string& what, Checker* c) {
  const int64_t n = w.rows * a.nt;
  int64_t unwritten = 0;
  for (int64_t i = 0; i < n; ++i) unwritten += Bits(y[i]) == 0xFFFFFFFFu;
  c->Check(unwritten == 0, what + ": " + std::to_string(unwritten) + " outputs not written");
  bool guard_ok = true;
  for (int64_t i = n; i < n + kGuard; ++i) guard_ok &= Bits(y[i]) == 0xFFFFFFFFu;
  c->Check(guard_ok, what + ": wrote past the end of y");
  const double tol = MmqTol(w.k);
  for (int64_t t : CheckedTokens(a.nt)) {
    for (int64_t r = 0; r < w.rows; ++r) {
      const Ref ref = RefDot(w, r, a, t);
      const float g = y[t * w.rows + r];
      const double err = std::fabs(static_cast<double>(g) - ref.cpu);
      c->CountExact(Bits(g) == Bits(ref.cpu));
      if (err <= tol * ref.mag) {
        c->Check(true, what);
        continue;
      }
      std::ostringstream d;
      d << what << " row " << r << " token " << t << ": gpu " << g << " cpu " << ref.cpu
        << " (err/mag " << err / ref.mag << ", bound " << tol << ")";
      c->Check(false, d.str());
    }
  }
}

// CheckAgainstCpu with the references computed once (RefDot dominates the
// test's time) and reused for every result of the same weight and tokens.
struct RefTable {
  std::vector<int64_t> tokens;
  std::vector<Ref> refs;  // [token index][row]
};
RefTable MakeRefTable(const HostWeight& w, const Acts& a) {
  RefTable t;
  t.tokens = CheckedTokens(a.nt);
  for (int64_t tok : t.tokens) {
    for (int64_t r = 0; r < w.rows; ++r) t.refs.push_back(RefDot(w, r, a, tok));
  }
  return t;
}
void CheckAgainstRefs(const HostWeight& w, const Acts& a, const RefTable& t,
                      const std::vector<float>& y, const std::string& what, Checker* c) {
  const int64_t n = w.rows * a.nt;
  int64_t unwritten = 0;
  for (int64_t i = 0; i < n; ++i) unwritten += Bits(y[i]) == 0xFFFFFFFFu;
  c->Check(unwritten == 0, what + ": " + std::to_string(unwritten) + " outputs not written");
  bool guard_ok = true;
  for (int64_t i = n; i < n + kGuard; ++i) guard_ok &= Bits(y[i]) == 0xFFFFFFFFu;
  c->Check(guard_ok, what + ": wrote past the end of y");
  const double tol = MmqTol(w.k);
  int64_t bad = 0;
  std::string first;
  for (size_t ti = 0; ti < t.tokens.size(); ++ti) {
    for (int64_t r = 0; r < w.rows; ++r) {
      const Ref& ref = t.refs[ti * w.rows + r];
      const float g = y[t.tokens[ti] * w.rows + r];
      const double err = std::fabs(static_cast<double>(g) - ref.cpu);
      c->CountExact(Bits(g) == Bits(ref.cpu));
      if (err > tol * ref.mag && bad++ == 0) {
        std::ostringstream d;
        d << " first at row " << r << " token " << t.tokens[ti] << ": gpu " << g << " cpu "
          << ref.cpu << " (err/mag " << err / ref.mag << ", bound " << tol << ")";
        first = d.str();
      }
    }
  }
  c->Check(bad == 0, what + ": " + std::to_string(bad) + " outputs outside the bound" + first);
}

void CheckIdentical(const std::vector<float>& a, const std::vector<float>& b, int64_t n,
                    const std::string& what, Checker* c) {
  int64_t diff = 0, first = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (Bits(a[i]) != Bits(b[i])) {
      if (first < 0) first = i;
      ++diff;
    }
  }
  std::ostringstream d;
  d << what << ": " << diff << " outputs differ";
  if (first >= 0) d << " (first at " << first << ": " << a[first] << " vs " << b[first] << ")";
  c->Check(diff == 0, d.str());
}

// ------------------------------------------------------------------ prepass

TEST(QuantizeMmqTest, BitIdenticalToCpuQ8A) {
  REQUIRE_MMQ_GPU();
  for (int64_t k : {32, 256, 896, 3584}) {
    for (int64_t nt : {1, 9, 130}) {
      std::vector<float> x = ActivationsWithSpecialBlocks(k, nt);
      std::vector<BlockQ8A> ref(k / 32 * nt);
      for (int64_t t = 0; t < nt; ++t) QuantizeRowQ8A(x.data() + t * k, ref.data() + t * (k / 32), k);
      const std::vector<uint8_t> want = BuildLayout(ref, k, nt);
      for (int shift : {0, 1}) {  // 16-byte aligned and misaligned x: both paths
        std::vector<float> xs(shift + x.size());
        std::copy(x.begin(), x.end(), xs.begin() + shift);
        DeviceBuffer<float> dx(xs);
        DeviceBuffer<uint8_t> da(MmqActivationBytes(k, nt));
        da.Poison();
        ASSERT_CUDA(LaunchQuantizeMmq(dx.get() + shift, da.get(), k, nt, nullptr));
        SYNC();
        const std::vector<uint8_t> got = da.ToHost();
        ASSERT_EQ(got.size(), want.size());
        // Decode the layout back and compare field by field (padding tokens
        // must be zero codes and d = s = +0).
        const int64_t ntp = TokensPadded(nt), nb = k / 32;
        const float* gd = reinterpret_cast<const float*>(got.data() + ntp * k);
        const float* gs = gd + nb * ntp;
        int bad = 0;
        for (int64_t t = 0; t < ntp && bad < 5; ++t) {
          for (int64_t b = 0; b < nb && bad < 5; ++b) {
            BlockQ8A e{};
            if (t < nt) e = ref[t * nb + b];
            const bool ok = std::memcmp(got.data() + t * k + 32 * b, e.qs, 32) == 0 &&
                            Bits(gd[b * ntp + t]) == Bits(e.d) && Bits(gs[b * ntp + t]) == Bits(e.s);
            if (!ok) {
              ++bad;
              ADD_FAILURE() << "k=" << k << " nt=" << nt << " shift=" << shift << " token " << t
                            << " block " << b << ": d " << gd[b * ntp + t] << " vs " << e.d
                            << ", s " << gs[b * ntp + t] << " vs " << e.s;
            }
          }
        }
        EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0)
            << "k=" << k << " nt=" << nt << " shift=" << shift;
      }
    }
  }
}

// The mode-2 producers write the same activation bytes as their f32 op
// followed by the prepass: RmsNorm (warp-per-row <= 1,024 floats and
// block-per-row variants, with and without gains) and SwiGLU (16-byte
// aligned and misaligned inputs), whole buffers including padding tokens.
TEST(QuantizeMmqTest, FusedProducersEqualOpThenPrepass) {
  REQUIRE_MMQ_GPU();
  for (int64_t k : {256, 896, 3584}) {
    for (int64_t nt : {9, 100, 300}) {
      const std::vector<float> x = ActivationsWithSpecialBlocks(k, nt);
      std::vector<float> gain(k);
      for (int64_t i = 0; i < k; ++i) gain[i] = 0.5f + static_cast<float>(i % 7) * 0.25f;
      DeviceBuffer<float> dx(x), dw(gain), dy(k * nt);
      for (bool with_gain : {true, false}) {
        DeviceBuffer<uint8_t> want(MmqActivationBytes(k, nt)), got(MmqActivationBytes(k, nt));
        want.Poison();
        got.Poison();
        const float* w = with_gain ? dw.get() : nullptr;
        ASSERT_CUDA(LaunchRmsNorm(dx.get(), w, 1e-6f, dy.get(), nullptr, k, nt, nullptr));
        ASSERT_CUDA(LaunchQuantizeMmq(dy.get(), want.get(), k, nt, nullptr));
        ASSERT_CUDA(LaunchRmsNormMmq(dx.get(), w, 1e-6f, got.get(), k, nt, nullptr));
        SYNC();
        EXPECT_EQ(want.ToHost(), got.ToHost())
            << "RmsNorm k=" << k << " nt=" << nt << " gain=" << with_gain;
      }
    }
  }
  for (int64_t k : {896, 4864, 18944}) {
    for (int64_t nt : {9, 130}) {
      const std::vector<float> g = ActivationsWithSpecialBlocks(k, nt);
      std::vector<float> u = ActivationsWithSpecialBlocks(k, nt);
      std::reverse(u.begin(), u.end());
      for (int shift : {0, 1}) {
        std::vector<float> gs(shift + g.size()), us(shift + u.size());
        std::copy(g.begin(), g.end(), gs.begin() + shift);
        std::copy(u.begin(), u.end(), us.begin() + shift);
        DeviceBuffer<float> dg(gs), du(us), dy(k * nt);
        DeviceBuffer<uint8_t> want(MmqActivationBytes(k, nt)), got(MmqActivationBytes(k, nt));
        want.Poison();
        got.Poison();
        ASSERT_CUDA(LaunchSwiGlu(dg.get() + shift, du.get() + shift, dy.get(), k * nt, nullptr));
        ASSERT_CUDA(LaunchQuantizeMmq(dy.get(), want.get(), k, nt, nullptr));
        ASSERT_CUDA(LaunchSwiGluMmq(dg.get() + shift, du.get() + shift, got.get(), k, nt, nullptr));
        SYNC();
        EXPECT_EQ(want.ToHost(), got.ToHost()) << "SwiGLU k=" << k << " nt=" << nt << " shift=" << shift;
      }
    }
  }
}

TEST(QuantizeMmqTest, RejectsBadShapes) {
  REQUIRE_MMQ_GPU();
  DeviceBuffer<float> dx(64);
  DeviceBuffer<uint8_t> da(MmqActivationBytes(64, 1));
  EXPECT_EQ(MmqActivationBytes(64, 1), 128 * 2 * 40);
  EXPECT_EQ(MmqActivationBytes(64, 0), 0);
  EXPECT_EQ(LaunchQuantizeMmq(dx.get(), da.get(), 48, 1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchQuantizeMmq(dx.get(), da.get() + 8, 64, 1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchQuantizeMmq(dx.get(), da.get(), 64, 0, nullptr), cudaSuccess);
  // The mode-2 producers refuse the same shapes, and a missing up input,
  // before launching anything.
  EXPECT_EQ(LaunchSwiGluMmq(dx.get(), dx.get(), da.get(), 48, 1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchSwiGluMmq(dx.get(), nullptr, da.get(), 64, 1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchSwiGluMmq(dx.get(), dx.get(), da.get() + 8, 64, 1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchRmsNormMmq(dx.get(), nullptr, 1e-6f, da.get(), 48, 1, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(LaunchRmsNormMmq(dx.get(), nullptr, 1e-6f, da.get() + 8, 64, 1, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(LaunchRmsNormMmq(dx.get(), nullptr, 1e-6f, da.get(), 64, 0, nullptr), cudaSuccess);
}

// --------------------------------------------------------------------- GEMM

class MmqTest : public ::testing::TestWithParam<GgmlType> {};

// Every variant against the CPU and against each other.
TEST_P(MmqTest, MatchesCpuAllVariants) {
  REQUIRE_MMQ_GPU();
  const GgmlType type = GetParam();
  const int64_t bs = TraitsOf(type).block_size;
  std::vector<int64_t> ks = {256, 512, 3584};
  if (bs == 32) ks.push_back(928);  // 29 blocks: a partial last chunk
  Checker c("MMQ " + std::string(GgmlTypeName(type)));
  for (int64_t k : ks) {
    for (int64_t rows : {1, 77, 300}) {
      const int variant = rows == 77 ? 0 : 1;
      const HostWeight w = MakeWeight(type, rows, k, variant);
      for (bool padded : {true, false}) {
        if (!padded && type != GgmlType::kQ6_K) continue;
        // Rows padded to 16 bytes as the registry lays them out
        // (DeviceRowBytes): k 928 of a legacy type is then the fast
        // variant's partial-chunk case.
        const int64_t pad = padded || type != GgmlType::kQ6_K
                                ? DeviceRowBytes(type, k) - k / bs * DeviceBlockBytes(type, padded)
                                : 0;
        auto dw = Upload(w, padded, /*shift=*/0, pad);
        if (padded || type != GgmlType::kQ6_K) {
          ASSERT_EQ(dw->view.row_bytes % 16, 0);
        }
        for (int64_t nt : {1, 9, 17, 100, 511}) {
          const Acts a = MakeActs(k, nt);
          DeviceBuffer<uint8_t> dact(a.layout);
          DeviceBuffer<float> dx(a.x);
          DeviceBuffer<uint8_t> scratch(MmqActivationBytes(k, nt));
          const std::string what = Describe(type, dw->view.q6k_padded, rows, k, nt);
          const bool fast_ok = dw->view.row_bytes % 16 == 0 && (type != GgmlType::kQ6_K || padded);
          cudaError_t err;

          // Generic: always applicable; the reference run.
          const std::vector<float> yg = RunPoisoned(
              rows, nt, [&](float* y) { return LaunchMmqGeneric(dw->view, dact.get(), y, nt, nullptr); },
              &err);
          ASSERT_EQ(err, cudaSuccess) << what << " generic: " << cudaGetErrorString(err);
          CheckAgainstCpu(w, a, yg, what + " generic", &c);

          for (int bn : {32, 64, 128}) {
            const char* why = nullptr;
            MmqTuning tu;
            tu.tokens_per_cta = bn;
            const std::vector<float> yf = RunPoisoned(
                rows, nt,
                [&](float* y) { return LaunchMmqFast(dw->view, dact.get(), y, nt, tu, nullptr, &why); },
                &err);
            const std::string fw = what + " fast/" + std::to_string(bn);
            if (!fast_ok) {
              c.Check(err == cudaErrorNotSupported && why != nullptr,
                      fw + ": expected cudaErrorNotSupported, got " + cudaGetErrorString(err));
              continue;
            }
            ASSERT_EQ(err, cudaSuccess) << fw << ": " << cudaGetErrorString(err)
                                        << (why ? why : "");
            CheckIdentical(yf, yg, rows * nt, fw + " vs generic", &c);
            if (bn == 64 && rows != 77) CheckAgainstCpu(w, a, yf, fw, &c);
          }

          // The ladder with the GPU prepass: same bits, the expected rung.
          MmqReport rep;
          const std::vector<float> yl = RunPoisoned(
              rows, nt,
              [&](float* y) {
                return LaunchMmq(dw->view, dx.get(), scratch.get(), y, nt, nullptr, &rep);
              },
              &err);
          ASSERT_EQ(err, cudaSuccess) << what << " LaunchMmq: " << cudaGetErrorString(err);
          CheckIdentical(yl, yg, rows * nt, what + " LaunchMmq vs generic", &c);
          c.Check(rep.variant == (fast_ok ? MmqVariant::kFast : MmqVariant::kGeneric),
                  what + ": LaunchMmq ran " + MmqVariantName(rep.variant));
          c.Check((rep.fast_skipped == nullptr) == fast_ok,
                  what + ": fast_skipped " + (rep.fast_skipped ? rep.fast_skipped : "(null)"));
          if (c.failures() > 20) return;
        }
      }
    }
  }
}

// Weights at a 2-byte aligned base with padded rows: the ladder must skip
// kFast (and say why) and the generic rung must still match the CPU.
TEST_P(MmqTest, MisalignedAndStridedWeights) {
  REQUIRE_MMQ_GPU();
  const GgmlType type = GetParam();
  const int64_t k = TraitsOf(type).block_size == 256 ? 768 : 544;
  const int64_t rows = 131, nt = 70;
  Checker c("MMQ layouts " + std::string(GgmlTypeName(type)));
  const HostWeight w = MakeWeight(type, rows, k, 1);
  const Acts a = MakeActs(k, nt);
  DeviceBuffer<float> dx(a.x);
  DeviceBuffer<uint8_t> scratch(MmqActivationBytes(k, nt));
  struct Layout {
    bool padded;
    int64_t shift, extra;
  };
  for (const Layout& l : {Layout{false, 2, 0}, Layout{false, 0, 6}, Layout{true, 6, 16},
                          Layout{false, 0, 32}}) {
    auto dw = Upload(w, l.padded, l.shift, l.extra);
    std::ostringstream what;
    what << Describe(type, dw->view.q6k_padded, rows, k, nt) << " shift " << l.shift << " extra "
         << l.extra;
    MmqReport rep;
    cudaError_t err;
    const std::vector<float> y = RunPoisoned(
        rows, nt,
        [&](float* yy) { return LaunchMmq(dw->view, dx.get(), scratch.get(), yy, nt, nullptr, &rep); },
        &err);
    ASSERT_EQ(err, cudaSuccess) << what.str() << ": " << cudaGetErrorString(err);
    const bool aligned = l.shift % 16 == 0 && dw->view.row_bytes % 16 == 0 &&
                         (type != GgmlType::kQ6_K || dw->view.q6k_padded);
    c.Check(rep.variant == (aligned ? MmqVariant::kFast : MmqVariant::kGeneric),
            what.str() + ": ran " + MmqVariantName(rep.variant));
    c.Check(aligned || rep.fast_skipped != nullptr, what.str() + ": no skip reason");
    CheckAgainstCpu(w, a, y, what.str(), &c);
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MmqTest, ::testing::ValuesIn(kQuantTypes),
                         [](const ::testing::TestParamInfo<GgmlType>& info) {
                           return std::string(GgmlTypeName(info.param));
                         });

// The registry's padded 224-byte Q6_K and the raw 210-byte GGUF layout must
// give the same bits (they take different rungs: fast vs generic).
TEST(MmqQ6KTest, PaddedAndRawStridesAgree) {
  REQUIRE_MMQ_GPU();
  Checker c("Q6_K padded vs raw");
  for (int64_t k : {256, 3584}) {
    for (int64_t rows : {77, 300}) {
      const HostWeight w = MakeWeight(GgmlType::kQ6_K, rows, k, 1);
      auto raw = Upload(w, false);
      auto pad = Upload(w, true);
      for (int64_t nt : {9, 100}) {
        const Acts a = MakeActs(k, nt);
        DeviceBuffer<float> dx(a.x);
        DeviceBuffer<uint8_t> scratch(MmqActivationBytes(k, nt));
        MmqReport rr, rp;
        cudaError_t err;
        const std::vector<float> yr = RunPoisoned(
            rows, nt,
            [&](float* y) { return LaunchMmq(raw->view, dx.get(), scratch.get(), y, nt, nullptr, &rr); },
            &err);
        ASSERT_EQ(err, cudaSuccess);
        const std::vector<float> yp = RunPoisoned(
            rows, nt,
            [&](float* y) { return LaunchMmq(pad->view, dx.get(), scratch.get(), y, nt, nullptr, &rp); },
            &err);
        ASSERT_EQ(err, cudaSuccess);
        const std::string what = Describe(GgmlType::kQ6_K, false, rows, k, nt);
        c.Check(rr.variant == MmqVariant::kGeneric && rp.variant == MmqVariant::kFast,
                what + ": rungs " + MmqVariantName(rr.variant) + "/" + MmqVariantName(rp.variant));
        CheckIdentical(yr, yp, rows * nt, what + " raw vs padded", &c);
        CheckAgainstCpu(w, a, yp, what + " padded", &c);
      }
    }
  }
}

// The W_dsc (Q4_K) / W_exp (Q6_K) scale planes: each entry is the float
// the CPU folds (computed here from the block bytes with engine/quant), and
// the fast variant reading a plane gives the same bits as decoding the
// scales itself, at every token tile, through the ladder too.
TEST(MmqScalePlaneTest, EntriesMatchCpuAndPlaneOnOffAgree) {
  REQUIRE_MMQ_GPU();
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    Checker c(std::string("scale plane ") + GgmlTypeName(type));
    for (int64_t k : {256, 3584}) {
      for (int64_t rows : {77, 300}) {
        const HostWeight w = MakeWeight(type, rows, k, 1);
        auto dw = Upload(w, /*q6k_padded=*/type == GgmlType::kQ6_K);
        ASSERT_EQ(dw->view.row_bytes % 16, 0);
        const int64_t nb = k / 32;
        ASSERT_EQ(MmqScalePlaneBytes(type, k, rows), rows * nb * 8);
        DeviceBuffer<float> plane(rows * nb * 2);
        ASSERT_EQ(LaunchMmqScalePlane(dw->view, plane.get(), nullptr), cudaSuccess);
        SYNC();
        const std::vector<float> hp = plane.ToHost();
        int64_t bad = 0;
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* blk = w.row(r) + (b / 8) * TraitsOf(type).type_size;
            const int j = static_cast<int>(b % 8);
            float e0, e1;
            if (type == GgmlType::kQ4_K) {
              const auto* q = reinterpret_cast<const BlockQ4_K*>(blk);
              uint8_t sc, m;
              Q4KScaleMin(q->scales, j, &sc, &m);
              e0 = Fp16ToFloat(q->d) * static_cast<float>(sc);
              e1 = -(Fp16ToFloat(q->dmin) * static_cast<float>(m));
            } else {
              const auto* q = reinterpret_cast<const BlockQ6_K*>(blk);
              e0 = Fp16ToFloat(q->d) * static_cast<float>(q->scales[2 * j]);
              e1 = Fp16ToFloat(q->d) * static_cast<float>(q->scales[2 * j + 1]);
            }
            const int64_t i = 2 * (r * nb + b);
            bad += Bits(hp[i]) != Bits(e0) || Bits(hp[i + 1]) != Bits(e1);
          }
        }
        c.Check(bad == 0, Describe(type, false, rows, k, 0) + ": " + std::to_string(bad) +
                              " plane entries differ from the CPU's scales");
        WeightView with = dw->view;
        with.scale_plane = plane.get();
        for (int64_t nt : {9, 100, 511}) {
          const Acts a = MakeActs(k, nt);
          DeviceBuffer<uint8_t> dact(a.layout);
          const std::string what = Describe(type, with.q6k_padded, rows, k, nt);
          cudaError_t err;
          for (int bn : {32, 64, 128}) {
            MmqTuning tu;
            tu.tokens_per_cta = bn;
            const std::vector<float> off = RunPoisoned(
                rows, nt,
                [&](float* y) { return LaunchMmqFast(dw->view, dact.get(), y, nt, tu, nullptr); },
                &err);
            ASSERT_EQ(err, cudaSuccess) << what;
            const std::vector<float> on = RunPoisoned(
                rows, nt, [&](float* y) { return LaunchMmqFast(with, dact.get(), y, nt, tu, nullptr); },
                &err);
            ASSERT_EQ(err, cudaSuccess) << what << " plane/" << bn;
            CheckIdentical(on, off, rows * nt, what + " plane vs none, tile " + std::to_string(bn), &c);
            if (bn == 64) CheckAgainstCpu(w, a, on, what + " plane", &c);
          }
          MmqReport rep;
          const std::vector<float> yl = RunPoisoned(
              rows, nt, [&](float* y) { return LaunchMmqQuantized(with, dact.get(), y, nt, nullptr, &rep); },
              &err);
          ASSERT_EQ(err, cudaSuccess) << what;
          c.Check(rep.variant == MmqVariant::kFast && rep.scale_plane,
                  what + ": the ladder did not use the plane");
          CheckAgainstCpu(w, a, yl, what + " ladder with plane", &c);
        }
      }
    }
  }
  // Misuse: a plane on a type without one, a misaligned plane, a plane for
  // a legacy type.
  const HostWeight w = MakeWeight(GgmlType::kQ8_0, 8, 256, 1);
  auto dw = Upload(w, false);
  DeviceBuffer<float> plane(1024);
  DeviceBuffer<uint8_t> act(MmqActivationBytes(256, 9));
  DeviceBuffer<float> y(8 * 9);
  EXPECT_EQ(LaunchMmqScalePlane(dw->view, plane.get(), nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(MmqScalePlaneBytes(GgmlType::kQ8_0, 256, 8), 0);
  WeightView v = dw->view;
  v.scale_plane = plane.get();
  EXPECT_EQ(LaunchMmqFast(v, act.get(), y.get(), 9, MmqTuning{}, nullptr), cudaErrorInvalidValue);
  const HostWeight w4 = MakeWeight(GgmlType::kQ4_K, 8, 256, 1);
  auto dw4 = Upload(w4, false);
  v = dw4->view;
  v.scale_plane = reinterpret_cast<const uint8_t*>(plane.get()) + 8;
  EXPECT_EQ(LaunchMmqFast(v, act.get(), y.get(), 9, MmqTuning{}, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchMmqScalePlane(dw4->view, reinterpret_cast<uint8_t*>(plane.get()) + 8, nullptr),
            cudaErrorInvalidValue);
  SYNC();
}

// One launch over several weights (FusedQKV at prefill) equals one launch
// per weight, bit for bit: the fast rung with segments of different row
// counts (tile edges inside a segment), with and without scale planes, an
// empty segment among them, and the generic rung (a misaligned weight makes
// the whole launch fall back, one generic launch per weight).
TEST(MmqSegmentsTest, EqualsOneLaunchPerWeight) {
  REQUIRE_MMQ_GPU();
  const int64_t k = 512;
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ8_0}) {
    Checker c(std::string("segments ") + GgmlTypeName(type));
    const int64_t rows[3] = {300, 0, 77};
    std::vector<HostWeight> hw;
    std::vector<std::unique_ptr<DeviceWeight>> dw;
    for (int i = 0; i < 3; ++i) {
      hw.push_back(MakeWeight(type, std::max<int64_t>(rows[i], 1), k, 1));
      hw.back().rows = rows[i];
      dw.push_back(Upload(hw.back(), false, /*shift=*/0, DeviceRowBytes(type, k) - RowBytes(type, k)));
      dw.back()->view.rows = rows[i];
    }
    for (int64_t nt : {9, 100}) {
      const Acts a = MakeActs(k, nt);
      DeviceBuffer<uint8_t> dact(a.layout);
      for (int variant = 0; variant < 3; ++variant) {  // fast, fast + planes, misaligned
        std::vector<std::unique_ptr<DeviceBuffer<float>>> planes;
        MmqSegments seg;
        seg.n = 3;
        for (int i = 0; i < 3; ++i) {
          seg.w[i] = dw[i]->view;
          if (variant == 1 && MmqScalePlaneType(type) && rows[i] > 0) {
            planes.push_back(std::make_unique<DeviceBuffer<float>>(rows[i] * (k / 32) * 2));
            ASSERT_EQ(LaunchMmqScalePlane(seg.w[i], planes.back()->get(), nullptr), cudaSuccess);
            seg.w[i].scale_plane = planes.back()->get();
          }
        }
        std::unique_ptr<DeviceWeight> shifted;
        if (variant == 2) {
          shifted = Upload(hw[2], false, /*shift=*/2, 0);
          shifted->view.rows = rows[2];
          seg.w[2] = shifted->view;
        }
        const std::string what = Describe(type, false, 300, k, nt) + " variant " + std::to_string(variant);
        DeviceBuffer<float> out((300 + 77) * nt + kGuard);
        out.Poison();
        seg.y[0] = out.get();
        seg.y[1] = out.get() + 300 * nt;  // empty: nothing written
        seg.y[2] = out.get() + 300 * nt;
        MmqReport rep;
        ASSERT_EQ(LaunchMmqSegments(seg, dact.get(), nt, nullptr, &rep), cudaSuccess) << what;
        SYNC();
        const std::vector<float> y = out.ToHost();
        c.Check(rep.variant == (variant == 2 ? MmqVariant::kGeneric : MmqVariant::kFast),
                what + ": ran " + MmqVariantName(rep.variant));
        c.Check(rep.scale_plane == (variant == 1 && MmqScalePlaneType(type)), what + ": plane use");
        int64_t off = 0;
        for (int i : {0, 2}) {
          cudaError_t err;
          const std::vector<float> one = RunPoisoned(
              rows[i], nt,
              [&](float* yy) { return LaunchMmqQuantized(dw[i]->view, dact.get(), yy, nt, nullptr); },
              &err);
          ASSERT_EQ(err, cudaSuccess);
          const std::vector<float> part(y.begin() + off, y.begin() + off + rows[i] * nt);
          CheckIdentical(part, one, rows[i] * nt, what + " segment " + std::to_string(i), &c);
          off += rows[i] * nt;
        }
        bool guard_ok = true;
        for (int64_t i = off; i < off + kGuard; ++i) guard_ok &= Bits(y[i]) == 0xFFFFFFFFu;
        c.Check(guard_ok, what + ": wrote past the last segment");
      }
    }
    // Mixed types or k in one launch are invalid calls.
    MmqSegments bad;
    bad.n = 2;
    bad.w[0] = dw[0]->view;
    bad.w[1] = dw[0]->view;
    bad.w[1].type = type == GgmlType::kQ8_0 ? GgmlType::kQ4_0 : GgmlType::kQ6_K;
    DeviceBuffer<uint8_t> act(MmqActivationBytes(k, 9));
    DeviceBuffer<float> y(300 * 9 * 2);
    bad.y[0] = y.get(), bad.y[1] = y.get() + 300 * 9;
    EXPECT_EQ(LaunchMmqSegments(bad, act.get(), 9, nullptr), cudaErrorInvalidValue);
    bad.n = 4;
    EXPECT_EQ(LaunchMmqSegments(bad, act.get(), 9, nullptr), cudaErrorInvalidValue);
  }
}

// Stream-k (mmq.h): the tiles past the whole waves are cut into runs of
// k-chunks that one CTA hands to the next; the fold stays sequential in k,
// so outputs must be bit-identical to whole-tile CTAs. Every type (each
// instantiation has its own copy of the hand-off; legacy k = 416 ends in a
// partial chunk), with planes; 55 row tiles x 5 token tiles (1.04 waves of
// a 132-SM GPU's 264 CTA slots: the automatic case) and, forced, 137 x 5
// (2.6 waves: whole-tile waves before the split ones); and a fused launch
// of three weights. Each case launches twice with the same workspace (the
// flags must return to zero) and reads the flags back. On a 132-SM GPU
// (H100/H200) every case must split.
TEST(MmqStreamKTest, BitIdenticalToWholeTiles) {
  REQUIRE_MMQ_GPU();
  int dev = 0, sms = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  const int64_t ws_bytes = MmqStreamKBytes();
  ASSERT_GT(ws_bytes, 0);
  DeviceBuffer<uint8_t> ws(ws_bytes);
  ASSERT_EQ(cudaMemset(ws.get(), 0, ws_bytes), cudaSuccess);
  MmqTuning sk;
  sk.stream_k_workspace = ws.get();
  sk.stream_k_bytes = ws_bytes;
  auto flags_zero = [&] {
    std::vector<uint8_t> host = ws.ToHost();
    return std::all_of(host.begin(), host.begin() + (16 << 10), [](uint8_t b) { return b == 0; });
  };
  const int64_t nt = 300;
  for (GgmlType type : kQuantTypes) {
    Checker c(std::string("stream-k ") + GgmlTypeName(type));
    const int64_t k = TraitsOf(type).block_size == 256 ? 512 : 416;
    const Acts a = MakeActs(k, nt);
    DeviceBuffer<uint8_t> dact(a.layout);
    const bool q6k = type == GgmlType::kQ6_K;
    for (const auto& [rows, mode] : {std::pair<int64_t, MmqStreamK>{128 * 55, MmqStreamK::kAuto},
                                     {128 * 137, MmqStreamK::kForce}}) {
      const HostWeight hw = MakeWeight(type, rows, k, 1);
      auto dw = Upload(hw, q6k, 0, q6k ? 0 : DeviceRowBytes(type, k) - RowBytes(type, k));
      std::unique_ptr<DeviceBuffer<float>> plane;
      for (int with_plane = 0; with_plane < (MmqScalePlaneType(type) ? 2 : 1); ++with_plane) {
        WeightView v = dw->view;
        if (with_plane) {
          plane = std::make_unique<DeviceBuffer<float>>(rows * (k / 32) * 2);
          ASSERT_EQ(LaunchMmqScalePlane(v, plane->get(), nullptr), cudaSuccess);
          v.scale_plane = plane->get();
        }
        const std::string what = Describe(type, q6k, rows, k, nt) + (with_plane ? " plane" : "");
        MmqTuning split = sk;
        split.stream_k = mode;
        cudaError_t err;
        auto run = [&](const MmqTuning* tu, MmqReport* rep) {
          return RunPoisoned(
              rows, nt, [&](float* y) { return LaunchMmqQuantized(v, dact.get(), y, nt, nullptr, rep, tu); },
              &err);
        };
        MmqReport rw, rs;
        const std::vector<float> y0 = run(nullptr, &rw);
        ASSERT_EQ(err, cudaSuccess) << what;
        for (int rep_i = 0; rep_i < 2; ++rep_i) {
          const std::vector<float> y1 = run(&split, &rs);
          ASSERT_EQ(err, cudaSuccess) << what << ": " << cudaGetErrorString(err);
          CheckIdentical(y1, y0, rows * nt, what + " stream-k vs whole tiles", &c);
          c.Check(flags_zero(), what + ": hand-off flags left set");
        }
        c.Check(rw.variant == MmqVariant::kFast && rs.variant == MmqVariant::kFast, what + ": fast variant");
        c.Check(!rw.stream_k, what + ": stream-k without a workspace");
        if (sms == 132) c.Check(rs.stream_k && rs.grid == 264, what + ": stream-k over 264 CTAs");
      }
    }
  }
  // Three weights in one launch (the prefill FusedQKV): 36 row tiles x 8
  // token tiles of 64 at 512 tokens (1.09 waves).
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ8_0}) {
    Checker c(std::string("stream-k segments ") + GgmlTypeName(type));
    const int64_t k = 512, rows[3] = {3584, 512, 512}, snt = 512;
    const Acts a = MakeActs(k, snt);
    DeviceBuffer<uint8_t> dact(a.layout);
    std::vector<std::unique_ptr<DeviceWeight>> dw;
    MmqSegments seg;
    seg.n = 3;
    for (int i = 0; i < 3; ++i) {
      dw.push_back(Upload(MakeWeight(type, rows[i], k, 1), false, 0, DeviceRowBytes(type, k) - RowBytes(type, k)));
      seg.w[i] = dw.back()->view;
    }
    auto run = [&](const MmqTuning* tu, MmqReport* rep) {
      DeviceBuffer<float> out(4608 * snt + kGuard);
      out.Poison();
      seg.y[0] = out.get(), seg.y[1] = out.get() + 3584 * snt, seg.y[2] = out.get() + 4096 * snt;
      EXPECT_EQ(LaunchMmqSegments(seg, dact.get(), snt, nullptr, rep, tu), cudaSuccess);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      return out.ToHost();
    };
    MmqReport rw, rs;
    const std::vector<float> y0 = run(nullptr, &rw);
    const std::vector<float> y1 = run(&sk, &rs);
    CheckIdentical(y1, y0, 4608 * snt + kGuard, "segments stream-k vs whole tiles", &c);
    c.Check(flags_zero(), "segments: hand-off flags left set");
    if (sms == 132) c.Check(rs.stream_k && rs.grid == 264, "segments: stream-k over 264 CTAs");
    // kOff with a workspace: whole tiles, the same bits.
    MmqTuning off = sk;
    off.stream_k = MmqStreamK::kOff;
    MmqReport ro;
    const std::vector<float> y2 = run(&off, &ro);
    CheckIdentical(y2, y0, 4608 * snt + kGuard, "segments stream-k off", &c);
    c.Check(!ro.stream_k && ro.grid == 36 * 8, "segments: kOff ran whole tiles");
  }
  // A workspace that is misaligned or too small is an invalid call.
  const HostWeight hw = MakeWeight(GgmlType::kQ8_0, 128, 256, 1);
  auto dw = Upload(hw, false, 0, DeviceRowBytes(GgmlType::kQ8_0, 256) - RowBytes(GgmlType::kQ8_0, 256));
  DeviceBuffer<uint8_t> act(MmqActivationBytes(256, 9));
  DeviceBuffer<float> y(128 * 9);
  MmqTuning bad = sk;
  bad.stream_k_bytes = ws_bytes - 16;
  EXPECT_EQ(LaunchMmqQuantized(dw->view, act.get(), y.get(), 9, nullptr, nullptr, &bad), cudaErrorInvalidValue);
  bad = sk;
  bad.stream_k_workspace = ws.get() + 8;
  EXPECT_EQ(LaunchMmqQuantized(dw->view, act.get(), y.get(), 9, nullptr, nullptr, &bad), cudaErrorInvalidValue);
  SYNC();
}


// Split-k (mmq.h): grids that fill at most half the resident CTA slots —
// few tokens and few row tiles, a decode batch — cut each tile's chunks
// over several CTAs and add the partials in a second kernel. Every type,
// 28 and 3 row tiles (7B's 3584-row outputs, a small one), 9..100 tokens:
// within the CPU bound, deterministic (two runs, same bits), the grid
// really split (on 132 SMs); forced split counts too; and a fused launch of
// three weights.
TEST(MmqSplitKTest, MatchesCpuDeterministically) {
  REQUIRE_MMQ_GPU();
  int dev = 0, sms = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  const int64_t ws_bytes = MmqSplitKBytes();
  DeviceBuffer<uint8_t> ws(ws_bytes);
  MmqTuning tu;
  tu.split_workspace = ws.get();
  tu.split_bytes = ws_bytes;
  tu.split_k = kMmqSplitAuto;
  for (GgmlType type : kQuantTypes) {
    Checker c(std::string("split-k ") + GgmlTypeName(type));
    const bool q6k = type == GgmlType::kQ6_K;
    const int64_t k = 3584;
    for (int64_t rows : {int64_t{3584}, int64_t{300}}) {
      const HostWeight hw = MakeWeight(type, rows, k, 1);
      auto dw = Upload(hw, q6k, 0, q6k ? 0 : DeviceRowBytes(type, k) - RowBytes(type, k));
      for (int64_t nt : {9, 16, 64, 100}) {
        const Acts a = MakeActs(k, nt);
        DeviceBuffer<uint8_t> dact(a.layout);
        const std::string what = Describe(type, q6k, rows, k, nt);
        cudaError_t err;
        MmqReport rep;
        auto run = [&] {
          return RunPoisoned(rows, nt, [&](float* y) {
            return LaunchMmqQuantized(dw->view, dact.get(), y, nt, nullptr, &rep, &tu);
          }, &err);
        };
        const std::vector<float> y1 = run();
        ASSERT_EQ(err, cudaSuccess) << what << ": " << cudaGetErrorString(err);
        CheckAgainstCpu(hw, a, y1, what + " split-k", &c);
        const std::vector<float> y2 = run();
        CheckIdentical(y2, y1, rows * nt, what + " split-k twice", &c);
        const int64_t tiles = (rows + 127) / 128 * ((nt + rep.tokens_per_cta - 1) / rep.tokens_per_cta);
        if (sms == 132 && tiles * 2 <= 264) {
          c.Check(rep.grid > tiles, what + ": split-k expected, grid " + std::to_string(rep.grid));
        }
        for (int forced : {2, 5, 16}) {
          MmqTuning f = tu;
          f.split_k = forced;
          const std::vector<float> yf = RunPoisoned(rows, nt, [&](float* y) {
            return LaunchMmqQuantized(dw->view, dact.get(), y, nt, nullptr, &rep, &f);
          }, &err);
          ASSERT_EQ(err, cudaSuccess) << what;
          CheckAgainstCpu(hw, a, yf, what + " split-k forced " + std::to_string(forced), &c);
          c.Check(rep.grid == tiles * std::min<int64_t>(forced, k / 256),
                  what + ": forced split grid " + std::to_string(rep.grid));
        }
      }
    }
  }
  // The fused QKV of a decode batch: 3584 + 512 + 512 rows at 16 tokens.
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ8_0}) {
    Checker c(std::string("split-k segments ") + GgmlTypeName(type));
    const int64_t k = 3584, rows[3] = {3584, 512, 512}, nt = 16;
    const Acts a = MakeActs(k, nt);
    DeviceBuffer<uint8_t> dact(a.layout);
    std::vector<HostWeight> hws;
    std::vector<std::unique_ptr<DeviceWeight>> dw;
    MmqSegments seg;
    seg.n = 3;
    for (int i = 0; i < 3; ++i) {
      hws.push_back(MakeWeight(type, rows[i], k, 1));
      dw.push_back(Upload(hws.back(), false, 0, DeviceRowBytes(type, k) - RowBytes(type, k)));
      seg.w[i] = dw.back()->view;
    }
    std::vector<std::unique_ptr<DeviceBuffer<float>>> outs;
    for (int i = 0; i < 3; ++i) {
      outs.push_back(std::make_unique<DeviceBuffer<float>>(rows[i] * nt + kGuard));
      outs.back()->Poison();
      seg.y[i] = outs.back()->get();
    }
    MmqReport rep;
    ASSERT_EQ(LaunchMmqSegments(seg, dact.get(), nt, nullptr, &rep, &tu), cudaSuccess);
    SYNC();
    for (int i = 0; i < 3; ++i) {
      CheckAgainstCpu(hws[i], a, outs[i]->ToHost(), "segment " + std::to_string(i), &c);
    }
    if (sms == 132) c.Check(rep.grid > 36, "segments: split-k expected");
  }
}


// The few-token kernel (mmq.h LaunchMmqSmall), both forms (direct; staged
// with 1 m-tile per warp and 4 or 3 stages, and with 2 m-tiles): every type, 1..64 tokens, rows that are
// not multiples of 16, a legacy k with a short last chunk: bit-identical to
// the CPU's VecDotQ8A terms without a split (CheckAgainstCpu's bound, and
// the generic rung's bits), within the bound with automatic and forced
// splits, deterministic; three segments in one launch; refusals.
TEST(MmqSmallTest, MatchesCpuAndTheTiledKernel) {
  REQUIRE_MMQ_GPU();
  const int64_t ws_bytes = MmqSplitKBytes();
  DeviceBuffer<uint8_t> ws(ws_bytes);
  for (GgmlType type : kQuantTypes) {
    Checker c(std::string("few-token ") + GgmlTypeName(type));
    const bool q6k = type == GgmlType::kQ6_K;
    std::vector<int64_t> ks = {512, 3584};
    if (type != GgmlType::kQ4_K && type != GgmlType::kQ5_K && !q6k) {
      ks.push_back(800);  // 25 blocks: a last chunk of one block
    }
    for (int64_t k : ks) {
      for (int64_t rows : {int64_t{77}, int64_t{3584}}) {
        const HostWeight hw = MakeWeight(type, rows, k, 1);
        auto dw = Upload(hw, q6k, 0, q6k ? 0 : DeviceRowBytes(type, k) - RowBytes(type, k));
        for (int64_t nt : {1, 3, 8, 16, 24, 33, 64}) {
          const Acts a = MakeActs(k, nt);
          DeviceBuffer<uint8_t> dact(a.layout);
          cudaError_t err;
          const std::vector<float> yg = RunPoisoned(rows, nt, [&](float* y) {
            return LaunchMmqGeneric(dw->view, dact.get(), y, nt, nullptr);
          }, &err);
          ASSERT_EQ(err, cudaSuccess);
          const RefTable refs = MakeRefTable(hw, a);
          struct Form {
            int form, mt, stages;
            const char* name;
          };
          for (const Form f : {Form{kMmqSmallDirect, 0, 0, "direct"},
                               Form{kMmqSmallStaged, 1, 4, "staged mt1 4 stages"},
                               Form{kMmqSmallStaged, 1, 3, "staged mt1"},
                               Form{kMmqSmallStaged, 2, 4, "staged mt2"}}) {
            const std::string what = Describe(type, q6k, rows, k, nt) + " " + f.name;
            auto run = [&](int split) {
              MmqTuning tu;
              tu.split_k = split;
              tu.split_workspace = ws.get();
              tu.split_bytes = ws_bytes;
              tu.small_form = f.form;
              tu.small_mtiles = f.mt;
              tu.small_stages = f.stages;
              return RunPoisoned(rows, nt, [&](float* y) {
                MmqSegments seg;
                seg.n = 1;
                seg.w[0] = dw->view;
                seg.y[0] = y;
                return LaunchMmqSmall(seg, dact.get(), nt, nullptr, &tu);
              }, &err);
            };
            // Without a split the generic rung's bits (and the CPU bound,
            // checked once: the forms equal each other bit for bit); with
            // splits the CPU bound, and the same bits twice.
            const std::vector<float> y0 = run(0);
            ASSERT_EQ(err, cudaSuccess) << what << ": " << cudaGetErrorString(err);
            if (f.form == kMmqSmallDirect) CheckAgainstRefs(hw, a, refs, y0, what + " few-token", &c);
            CheckIdentical(y0, yg, rows * nt, what + " few-token vs generic (no split)", &c);
            for (int split : {kMmqSplitAuto, 3, 16}) {
              const std::vector<float> ys = run(split);
              ASSERT_EQ(err, cudaSuccess) << what;
              CheckAgainstRefs(hw, a, refs, ys, what + " few-token split " + std::to_string(split), &c);
              CheckIdentical(run(split), ys, rows * nt, what + " split twice", &c);
            }
            if (c.failures() > 20) return;
          }
        }
      }
    }
  }
  // Segments: q, k, v of one FusedQKV at 16 tokens.
  {
    Checker c("few-token segments");
    const GgmlType type = GgmlType::kQ4_K;
    const int64_t k = 3584, rows[3] = {3584, 512, 512}, nt = 16;
    const Acts a = MakeActs(k, nt);
    DeviceBuffer<uint8_t> dact(a.layout);
    std::vector<HostWeight> hws;
    std::vector<std::unique_ptr<DeviceWeight>> dw;
    std::vector<std::unique_ptr<DeviceBuffer<float>>> outs;
    MmqSegments seg;
    seg.n = 3;
    for (int i = 0; i < 3; ++i) {
      hws.push_back(MakeWeight(type, rows[i], k, 1));
      dw.push_back(Upload(hws.back(), false, 0, DeviceRowBytes(type, k) - RowBytes(type, k)));
      seg.w[i] = dw.back()->view;
      outs.push_back(std::make_unique<DeviceBuffer<float>>(rows[i] * nt + kGuard));
      outs.back()->Poison();
      seg.y[i] = outs.back()->get();
    }
    for (int form : {kMmqSmallDirect, kMmqSmallStaged}) {
      for (int i = 0; i < 3; ++i) outs[i]->Poison();
      MmqTuning tu;
      tu.split_k = kMmqSplitAuto;
      tu.split_workspace = ws.get();
      tu.split_bytes = ws_bytes;
      tu.small_form = form;
      ASSERT_EQ(LaunchMmqSmall(seg, dact.get(), nt, nullptr, &tu), cudaSuccess);
      SYNC();
      for (int i = 0; i < 3; ++i) {
        CheckAgainstCpu(hws[i], a, outs[i]->ToHost(),
                        "form " + std::to_string(form) + " segment " + std::to_string(i), &c);
      }
    }
  }
  // Refusals: too many tokens, raw Q6_K.
  const HostWeight hw = MakeWeight(GgmlType::kQ6_K, 64, 256, 1);
  auto raw = Upload(hw, false);
  DeviceBuffer<uint8_t> act(MmqActivationBytes(256, 65));
  DeviceBuffer<float> y(64 * 65);
  MmqSegments seg;
  seg.n = 1;
  seg.w[0] = raw->view;
  seg.y[0] = y.get();
  const char* why = nullptr;
  EXPECT_EQ(LaunchMmqSmall(seg, act.get(), 65, nullptr, nullptr, &why), cudaErrorNotSupported);
  EXPECT_NE(why, nullptr);
  EXPECT_EQ(LaunchMmqSmall(seg, act.get(), 8, nullptr, nullptr, &why), cudaErrorNotSupported);
  EXPECT_STREQ(why, "raw 210-byte Q6_K blocks");
}

TEST(MmqApiTest, RejectsBadCalls) {
  REQUIRE_MMQ_GPU();
  const int64_t k = 256, rows = 8, nt = 9;
  DeviceBuffer<uint8_t> wbuf(rows * RowBytes(GgmlType::kQ4_K, k) + 64);
  DeviceBuffer<uint8_t> act(MmqActivationBytes(k, nt) + 64);
  DeviceBuffer<float> x(k * nt), y(rows * nt + 16);
  WeightView w;
  w.type = GgmlType::kQ4_K, w.data = wbuf.get(), w.k = k, w.rows = rows;
  w.row_bytes = RowBytes(GgmlType::kQ4_K, k);
  auto bad = [&](WeightView v, const void* a, float* yy, int64_t n) {
    return LaunchMmqQuantized(v, a, yy, n, nullptr);
  };
  EXPECT_EQ(bad(w, act.get(), y.get(), -1), cudaErrorInvalidValue);
  WeightView v = w;
  v.k = 128;  // not a multiple of 256
  EXPECT_EQ(bad(v, act.get(), y.get(), nt), cudaErrorInvalidValue);
  v = w, v.type = GgmlType::kF16;
  EXPECT_EQ(bad(v, act.get(), y.get(), nt), cudaErrorInvalidValue);
  v = w, v.row_bytes = w.row_bytes - 2;  // shorter than a row
  EXPECT_EQ(bad(v, act.get(), y.get(), nt), cudaErrorInvalidValue);
  v = w, v.q6k_padded = true;  // not Q6_K
  EXPECT_EQ(bad(v, act.get(), y.get(), nt), cudaErrorInvalidValue);
  EXPECT_EQ(bad(w, act.get() + 8, y.get(), nt), cudaErrorInvalidValue);  // act misaligned
  // Activation codes of 2 GiB (round_up(nt) * k = 2^31): the kernels' 32-bit
  // offsets would overflow. Rejected before anything is read.
  EXPECT_EQ(bad(w, act.get(), y.get(), int64_t{1} << 23), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchMmq(w, nullptr, act.get(), y.get(), nt, nullptr), cudaErrorInvalidValue);
  MmqTuning tu;
  tu.tokens_per_cta = 96;
  EXPECT_EQ(LaunchMmqFast(w, act.get(), y.get(), nt, tu, nullptr), cudaErrorInvalidValue);
  // Empty shapes launch nothing and succeed.
  MmqReport rep;
  EXPECT_EQ(LaunchMmqQuantized(w, act.get(), y.get(), 0, nullptr, &rep), cudaSuccess);
  EXPECT_EQ(rep.variant, MmqVariant::kNone);
  v = w, v.rows = 0;
  EXPECT_EQ(LaunchMmq(v, x.get(), act.get(), y.get(), nt, nullptr), cudaSuccess);
  EXPECT_FALSE(MmqSupports(GgmlType::kF32));
  EXPECT_TRUE(MmqSupports(GgmlType::kQ6_K));
  SYNC();
}

}  // namespace
}  // namespace minfer::cuda
