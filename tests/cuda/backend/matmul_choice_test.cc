// The CUDA backend's choice of matmul kernel and of mode 2's producer
// layout (cuda/backend/matmul_choice.h), on the host. The expected values
// are tables written from docs/design.md ("Which kernel runs a matmul",
// "Matmuls of a decode batch", "Prefill matmuls: MMQ") and the knobs'
// descriptions (engine/base/builtin_knobs.cc), never computed by the
// function under test: for each knob setting, each weight class gets its
// kernel as bands of token counts.
#include "cuda/backend/matmul_choice.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "gtest/gtest.h"

namespace minfer::cuda {
namespace {

using K = MatmulKernel;
using L = ActivationLayout;

// The 7B's (Qwen2.5-7B) matmul shapes: k 3584 with the fused QKV (4608
// rows), the attention output (3584) and gate/up (18944) rows; the down
// projection is k 18944 x 3584 rows.
struct Shape {
  int64_t k, rows;
};
const Shape kShapes[] = {{3584, 4608}, {3584, 3584}, {3584, 18944}, {18944, 3584}};
const int64_t kTokens[] = {1, 2, 4, 5, 6, 8, 9, 16, 32, 33, 64, 65, 128, 512};

// The weight classes the rules tell apart.
enum Class { kDqType, kKQuantRaw, kLegacy, kFloat, kClasses };
struct Weight {
  GgmlType type;
  bool q6k_padded;
  Class cls;
};
const Weight kWeights[] = {
    {GgmlType::kQ4_K, false, kDqType},    // the DQ GEMM's types ...
    {GgmlType::kQ6_K, true, kDqType},     // ... (Q6_K as the registry pads it)
    {GgmlType::kQ6_K, false, kKQuantRaw}, // a K-quant the DQ GEMM does not take
    {GgmlType::kQ8_0, false, kLegacy},    // an integer-dot type, not a K-quant
    {GgmlType::kF16, false, kFloat},
    {GgmlType::kF32, false, kFloat},
};

// From token count `from` on (up to the next band), kernel `k`.
struct Band {
  int64_t from;
  K kernel;
};
using Bands = std::vector<Band>;

template <typename T>
T Lookup(const std::vector<std::pair<int64_t, T>>& bands, int64_t nt) {
  T v = bands.front().second;
  for (const auto& [from, x] : bands) {
    if (nt >= from) v = x;
  }
  return v;
}
K Lookup(const Bands& bands, int64_t nt) {
  K k = bands.front().kernel;
  for (const Band& b : bands) {
    if (nt >= b.from) k = b.kernel;
  }
  return k;
}

// A knob setting and the kernel of each class under it.
struct Case {
  std::string name;
  MatmulContext ctx;
  Bands bands[kClasses];
};

MatmulContext H100() {
  MatmulContext c;
  c.device.cc = 900;
  c.model_has_dq_weights = true;  // the 7B: Q4_K and Q6_K
  return c;
}

// docs/design.md: "Q4_K and Q6_K decode batches of MINFER_DQ_MIN_TOKENS (4)
// to MINFER_DQ_MAX_TOKENS (64) tokens the dequantizing f16 GEMM; otherwise
// prefill-shaped batches (MINFER_MMQ_MIN_TOKENS, 9, and up) the tiled MMQ;
// decode batches of MINFER_MMQ_SMALL_MIN_TOKENS (6) to
// MINFER_MMQ_SMALL_TOKENS (32) tokens the int8 few-token GEMM; smaller ones
// MMVQ" ("above 32 the tiled MMQ"); float weights the f32 matvec, and the
// f16 GEMM from 9 tokens. MMVQ covers 1..8 tokens.
const Bands kDefaultDq = {{1, K::kMmvq}, {4, K::kDqGemm}, {65, K::kMmq}};
const Bands kDefaultInt8 = {{1, K::kMmvq}, {6, K::kMmqSmall}, {33, K::kMmq}};
const Bands kDefaultFloat = {{1, K::kMatvecF32}, {9, K::kGemmF16}};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  {
    Case c{"defaults", H100(), {kDefaultDq, kDefaultInt8, kDefaultInt8, kDefaultFloat}};
    cases.push_back(c);
  }
  {
    // sm_80 is MMQ's floor: the same as the H100.
    Case c{"sm_80", H100(), {kDefaultDq, kDefaultInt8, kDefaultInt8, kDefaultFloat}};
    c.ctx.device.cc = 800;
    cases.push_back(c);
  }
  {
    // MINFER_DQ_GEMM=0: "the int8 few-token kernel / MMVQ / MMQ as before".
    Case c{"dq off", H100(), {kDefaultInt8, kDefaultInt8, kDefaultInt8, kDefaultFloat}};
    c.ctx.knobs.dq = false;
    cases.push_back(c);
  }
  {
    // MINFER_DQ_MAX_TOKENS=0: never.
    Case c{"dq max 0", H100(), {kDefaultInt8, kDefaultInt8, kDefaultInt8, kDefaultFloat}};
    c.ctx.knobs.dq_max_tokens = 0;
    cases.push_back(c);
  }
  {
    // MINFER_DQ_MAX_TOKENS=16: "more: the tiled MMQ" — or, up to 32, the
    // few-token GEMM that takes decode batches of the other types.
    Case c{"dq max 16",
           H100(),
           {{{1, K::kMmvq}, {4, K::kDqGemm}, {17, K::kMmqSmall}, {33, K::kMmq}},
            kDefaultInt8,
            kDefaultInt8,
            kDefaultFloat}};
    c.ctx.knobs.dq_max_tokens = 16;
    cases.push_back(c);
  }
  {
    // MINFER_DQ_MIN_TOKENS=8: below it what the other types run (MMVQ, the
    // few-token GEMM from 6); at 8, MMVQ's last count, the DQ arm first.
    Case c{"dq min 8",
           H100(),
           {{{1, K::kMmvq}, {6, K::kMmqSmall}, {8, K::kDqGemm}, {65, K::kMmq}},
            kDefaultInt8,
            kDefaultInt8,
            kDefaultFloat}};
    c.ctx.knobs.dq_min_tokens = 8;
    cases.push_back(c);
  }
  {
    // MINFER_MMQ=0: quantized prefill matmuls on "the f16 tensor-core GEMM";
    // the few-token GEMM is MMQ's too; the DQ GEMM is not.
    Case c{"mmq off",
           H100(),
           {{{1, K::kMmvq}, {4, K::kDqGemm}, {65, K::kGemmF16}},
            {{1, K::kMmvq}, {9, K::kGemmF16}},
            {{1, K::kMmvq}, {9, K::kGemmF16}},
            kDefaultFloat}};
    c.ctx.knobs.mmq = false;
    cases.push_back(c);
  }
  {
    // MINFER_NO_KQ_MMVQ=1: "K-quant decode matmuls use the f32-activation
    // kernel instead of MMVQ" (wherever a vector kernel runs them).
    Case c{"kq_mmvq off",
           H100(),
           {{{1, K::kMatvecF32}, {4, K::kDqGemm}, {65, K::kMmq}},
            {{1, K::kMatvecF32}, {6, K::kMmqSmall}, {33, K::kMmq}},
            kDefaultInt8,
            kDefaultFloat}};
    c.ctx.knobs.kq_mmvq = false;
    cases.push_back(c);
  }
  {
    // MINFER_NO_PREFILL_GEMM=1: "the per-type decode kernels instead of the
    // GEMM" — MMVQ up to its 8 tokens, the f32 matvec beyond; no GEMM arm
    // at all (the DQ and few-token GEMMs included).
    const Bands vec = {{1, K::kMmvq}, {9, K::kMatvecF32}};
    Case c{"prefill_gemm off", H100(), {vec, vec, vec, {{1, K::kMatvecF32}}}};
    c.ctx.knobs.prefill_gemm = false;
    cases.push_back(c);
  }
  {
    // MINFER_MMQ_SMALL_TOKENS=0: "0 = never"; decode batches keep MMVQ up
    // to 8 tokens, prefill shapes the tiled MMQ.
    const Bands int8 = {{1, K::kMmvq}, {9, K::kMmq}};
    Case c{"mmq_small never", H100(), {kDefaultDq, int8, int8, kDefaultFloat}};
    c.ctx.knobs.mmq_small_tokens = 0;
    cases.push_back(c);
  }
  {
    // MINFER_MMQ_SMALL_MIN_TOKENS=2, MINFER_MMQ_SMALL_TOKENS=64: the
    // few-token GEMM from 2 tokens to 64 (the DQ arm still first for its
    // types from 4); floats keep the f32 matvec below 9.
    const Bands int8 = {{1, K::kMmvq}, {2, K::kMmqSmall}, {65, K::kMmq}};
    Case c{"mmq_small 2..64",
           H100(),
           {{{1, K::kMmvq}, {2, K::kMmqSmall}, {4, K::kDqGemm}, {65, K::kMmq}},
            int8,
            int8,
            kDefaultFloat}};
    c.ctx.knobs.mmq_small_min_tokens = 2;
    c.ctx.knobs.mmq_small_tokens = 64;
    cases.push_back(c);
  }
  {
    // MINFER_MMQ_SMALL_TOKENS=8: the few-token GEMM for 6..8, the tiled
    // MMQ from 9.
    const Bands int8 = {{1, K::kMmvq}, {6, K::kMmqSmall}, {9, K::kMmq}};
    Case c{"mmq_small 6..8", H100(), {kDefaultDq, int8, int8, kDefaultFloat}};
    c.ctx.knobs.mmq_small_tokens = 8;
    cases.push_back(c);
  }
  {
    // MINFER_MMQ_MIN_TOKENS=2: "matmuls of at least this many tokens run
    // the GEMM (MMQ / f16)" — up to 32 tokens that GEMM is the few-token
    // one; the DQ arm keeps its batches.
    Case c{"mmq_min 2",
           H100(),
           {{{1, K::kMmvq}, {2, K::kMmqSmall}, {4, K::kDqGemm}, {65, K::kMmq}},
            {{1, K::kMmvq}, {2, K::kMmqSmall}, {33, K::kMmq}},
            {{1, K::kMmvq}, {2, K::kMmqSmall}, {33, K::kMmq}},
            {{1, K::kMatvecF32}, {2, K::kGemmF16}}}};
    c.ctx.knobs.mmq_min_tokens = 2;
    cases.push_back(c);
  }
  {
    // A GPU before sm_80: no MMQ, so no few-token or DQ GEMM either
    // ("on older GPUs ... the caller uses LaunchGemmF16").
    const Bands q = {{1, K::kMmvq}, {9, K::kGemmF16}};
    Case c{"sm_75", H100(), {q, q, q, kDefaultFloat}};
    c.ctx.device.cc = 750;
    cases.push_back(c);
  }
  {
    // A model without a weight the DQ GEMM takes (all Q8_0, say): no DQ
    // batches. (Its Q4_K row is hypothetical.)
    Case c{"model without DQ weights",
           H100(),
           {kDefaultInt8, kDefaultInt8, kDefaultInt8, kDefaultFloat}};
    c.ctx.model_has_dq_weights = false;
    cases.push_back(c);
  }
  {
    // MINFER_MMVQ_MIN_ELEMS only moves one-token matmuls whose input has
    // no q8 plane (below): with one, nothing changes.
    Case c{"mmvq gate, input quantized",
           H100(),
           {kDefaultDq, kDefaultInt8, kDefaultInt8, kDefaultFloat}};
    c.ctx.knobs.mmvq_min_elems = int64_t{1} << 40;
    cases.push_back(c);
  }
  {
    // mode 2's knob moves no kernel.
    Case c{"skip_write off", H100(), {kDefaultDq, kDefaultInt8, kDefaultInt8, kDefaultFloat}};
    c.ctx.knobs.skip_write = false;
    cases.push_back(c);
  }
  return cases;
}

MatmulChoiceInput Input(const MatmulContext& ctx, const Weight& w, const Shape& s, int64_t nt) {
  MatmulChoiceInput in;
  in.type = w.type;
  in.q6k_padded = w.q6k_padded;
  in.rows = s.rows;
  in.k = s.k;
  in.nt = nt;
  in.input_has_q8 = true;  // (the gate has its own test)
  in.ctx = ctx;
  return in;
}

TEST(MatmulChoiceTest, KernelAndLayoutNames) {
  EXPECT_STREQ(MatmulKernelName(K::kMmvq), "mmvq");
  EXPECT_STREQ(MatmulKernelName(K::kMatvecF32), "matvec_f32");
  EXPECT_STREQ(MatmulKernelName(K::kDqGemm), "dq_gemm");
  EXPECT_STREQ(MatmulKernelName(K::kMmqSmall), "mmq_small");
  EXPECT_STREQ(MatmulKernelName(K::kMmq), "mmq");
  EXPECT_STREQ(MatmulKernelName(K::kGemmF16), "gemm_f16");
  EXPECT_STREQ(ActivationLayoutName(L::kF32), "f32");
  EXPECT_STREQ(ActivationLayoutName(L::kMmqInt8), "mmq_int8");
  EXPECT_STREQ(ActivationLayoutName(L::kDqF16), "dq_f16");
  EXPECT_TRUE(IsVectorKernel(K::kMmvq));
  EXPECT_TRUE(IsVectorKernel(K::kMatvecF32));
  for (K k : {K::kDqGemm, K::kMmqSmall, K::kMmq, K::kGemmF16}) EXPECT_FALSE(IsVectorKernel(k));
  // What each kernel reads: the MMQ family the int8 layout, the DQ GEMM
  // its f16 one, the rest (MMVQ quantizes its q8 plane from them) f32.
  EXPECT_EQ(InputLayoutOf(K::kMmq), L::kMmqInt8);
  EXPECT_EQ(InputLayoutOf(K::kMmqSmall), L::kMmqInt8);
  EXPECT_EQ(InputLayoutOf(K::kDqGemm), L::kDqF16);
  for (K k : {K::kMmvq, K::kMatvecF32, K::kGemmF16}) EXPECT_EQ(InputLayoutOf(k), L::kF32);
}

TEST(MatmulChoiceTest, TypePredicates) {
  for (GgmlType t : {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                     GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    EXPECT_TRUE(MmvqSupports(t)) << GgmlTypeName(t);
    EXPECT_TRUE(MmqSupports(t)) << GgmlTypeName(t);
  }
  for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ2_K}) {
    EXPECT_FALSE(MmvqSupports(t)) << GgmlTypeName(t);
    EXPECT_FALSE(MmqSupports(t)) << GgmlTypeName(t);
  }
  EXPECT_TRUE(DqSupports(GgmlType::kQ4_K, false));
  EXPECT_TRUE(DqSupports(GgmlType::kQ6_K, true));
  EXPECT_FALSE(DqSupports(GgmlType::kQ6_K, false));
  EXPECT_FALSE(DqSupports(GgmlType::kQ5_K, true));
  EXPECT_FALSE(DqSupports(GgmlType::kQ8_0, false));
  EXPECT_EQ(kMmvqMaxTokens, 8);
}

// Every knob setting x weight class x 7B shape x token count against the
// tables.
TEST(MatmulChoiceTest, KernelPerKnobSettingMatchesTheDocumentedRules) {
  int checked = 0;
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    for (const Weight& w : kWeights) {
      for (const Shape& s : kShapes) {
        for (int64_t nt : kTokens) {
          const K want = Lookup(c.bands[w.cls], nt);
          const K got = ChooseMatmulKernel(Input(c.ctx, w, s, nt));
          EXPECT_EQ(got, want) << GgmlTypeName(w.type) << (w.q6k_padded ? " (padded)" : "")
                               << " " << s.rows << "x" << s.k << " nt " << nt << ": "
                               << MatmulKernelName(got) << ", expected "
                               << MatmulKernelName(want);
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 17 * 6 * 4 * 14);
}

// Rule 0: a mixture-of-experts router (f32, at most kExactF32MaxRows rows)
// stays on the f32 matvec at every batch size under every knob setting, so
// its logits are f32 dots like the CPU's; a larger f32 matrix, or a router
// stored in f16, takes the f16 GEMM from 9 tokens as before.
TEST(MatmulChoiceTest, SmallF32RoutersStayExactAtEveryBatchSize) {
  const Weight f32{GgmlType::kF32, false, kFloat};
  const Weight f16{GgmlType::kF16, false, kFloat};
  int checked = 0;
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    for (const Shape s : {Shape{2048, 128}, Shape{2880, 32}, Shape{4096, kExactF32MaxRows}}) {
      for (int64_t nt : kTokens) {
        EXPECT_EQ(ChooseMatmulKernel(Input(c.ctx, f32, s, nt)), K::kMatvecF32)
            << s.rows << "x" << s.k << " nt " << nt;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 17 * 3 * 14);
  const MatmulContext ctx = H100();
  EXPECT_EQ(ChooseMatmulKernel(Input(ctx, f32, Shape{4096, kExactF32MaxRows + 1}, 9)),
            K::kGemmF16);
  EXPECT_EQ(ChooseMatmulKernel(Input(ctx, f32, Shape{4096, kExactF32MaxRows + 1}, 8)),
            K::kMatvecF32);
  EXPECT_EQ(ChooseMatmulKernel(Input(ctx, f16, Shape{2048, 128}, 9)), K::kGemmF16);
}

// One setting the documentation leaves open, pinned as the backend runs
// it: with MINFER_MMQ_SMALL_MIN_TOKENS above MINFER_MMQ_MIN_TOKENS, the
// batches between (here 9..11) run the few-token GEMM anyway — its lower
// bound applies only below MINFER_MMQ_MIN_TOKENS; from there on every
// batch up to MINFER_MMQ_SMALL_TOKENS takes it.
TEST(MatmulChoiceTest, FewTokenLowerBoundAppliesOnlyBelowMmqMinTokens) {
  MatmulContext ctx = H100();
  ctx.knobs.mmq_small_min_tokens = 12;
  const Bands int8 = {{1, K::kMmvq}, {9, K::kMmqSmall}, {33, K::kMmq}};
  for (const Weight& w : {kWeights[2], kWeights[3]}) {
    for (int64_t nt : {1, 6, 8, 9, 11, 12, 32, 33}) {
      EXPECT_EQ(ChooseMatmulKernel(Input(ctx, w, kShapes[0], nt)), Lookup(int8, nt))
          << GgmlTypeName(w.type) << " nt " << nt;
    }
  }
}

// MINFER_MMVQ_MIN_ELEMS: a one-token MatMul of fewer weights (rows x k)
// than the gate whose input has no q8 plane runs the f32 matvec; with a
// plane, at 2+ tokens, or in a fused one-token launch (FusedQKV, FusedFFN),
// MMVQ.
TEST(MatmulChoiceTest, MmvqShapeGate) {
  MatmulContext ctx = H100();
  ctx.knobs.mmvq_min_elems = 20'000'000;  // between 3584 x 4608 and 3584 x 18944
  for (const Weight& w : {kWeights[0], kWeights[1], kWeights[3]}) {
    for (const Shape& s : kShapes) {
      SCOPED_TRACE(absl::StrCat(GgmlTypeName(w.type), " ", s.rows, "x", s.k));
      const bool small = s.rows * s.k < 20'000'000;
      MatmulChoiceInput in = Input(ctx, w, s, 1);
      in.input_has_q8 = false;
      EXPECT_EQ(ChooseMatmulKernel(in), small ? K::kMatvecF32 : K::kMmvq);
      in.input_has_q8 = true;
      EXPECT_EQ(ChooseMatmulKernel(in), K::kMmvq);
      in.input_has_q8 = false;
      in.apply_mmvq_gate = false;
      EXPECT_EQ(ChooseMatmulKernel(in), K::kMmvq);
      in.apply_mmvq_gate = true;
      in.nt = 2;
      EXPECT_EQ(ChooseMatmulKernel(in), K::kMmvq);
    }
  }
  // Float weights are on the matvec anyway; the gate 0 (default) never
  // moves anything.
  MatmulChoiceInput f = Input(ctx, kWeights[4], kShapes[0], 1);
  f.input_has_q8 = false;
  EXPECT_EQ(ChooseMatmulKernel(f), K::kMatvecF32);
  MatmulChoiceInput q = Input(H100(), kWeights[0], kShapes[0], 1);
  q.input_has_q8 = false;
  EXPECT_EQ(ChooseMatmulKernel(q), K::kMmvq);
}

// A weight the DQ launcher declined at run time takes the next arm: what
// it would run with the DQ GEMM off.
TEST(MatmulChoiceTest, DqDeclinedTakesTheNextArm) {
  struct Row {
    bool mmq;
    int64_t nt;
    K want;
  };
  const Row rows[] = {
      {true, 4, K::kMmvq},      {true, 5, K::kMmvq},     {true, 6, K::kMmqSmall},
      {true, 16, K::kMmqSmall}, {true, 33, K::kMmq},     {true, 64, K::kMmq},
      {false, 4, K::kMmvq},     {false, 8, K::kMmvq},    {false, 16, K::kGemmF16},
  };
  for (const Row& r : rows) {
    MatmulContext ctx = H100();
    ctx.knobs.mmq = r.mmq;
    for (const Weight& w : {kWeights[0], kWeights[1]}) {
      MatmulChoiceInput in = Input(ctx, w, kShapes[2], r.nt);
      EXPECT_EQ(ChooseMatmulKernel(in), K::kDqGemm) << "nt " << r.nt;
      in.dq_declined = true;
      EXPECT_EQ(ChooseMatmulKernel(in), r.want) << GgmlTypeName(w.type) << " nt " << r.nt
                                                << " mmq " << r.mmq;
    }
  }
}

// --- Mode 2: the producer's layout.

const WeightClass k7B[] = {{GgmlType::kQ4_K, false}, {GgmlType::kQ6_K, true}};
const WeightClass kMixed[] = {
    {GgmlType::kQ4_K, false}, {GgmlType::kQ6_K, true}, {GgmlType::kQ8_0, false}};
const WeightClass kLegacyOnly[] = {{GgmlType::kQ8_0, false}, {GgmlType::kQ5_0, false}};

ActivationLayout Layout(const MatmulContext& ctx, absl::Span<const WeightClass> model,
                        int64_t nt, int64_t k = 3584, bool int8_consumers = true) {
  ProducerChoiceInput in;
  in.nt = nt;
  in.k = k;
  in.int8_consumers = int8_consumers;
  in.int8_weights = model;
  in.ctx = ctx;
  return ActivationLayoutFor(in);
}

using LayoutBands = std::vector<std::pair<int64_t, L>>;

// docs/design.md: prefill RmsNorm/SwiGLU outputs whose every consumer is an
// MMQ GEMM are written only as its int8 activations (prefill shapes, nt >=
// MINFER_MMQ_MIN_TOKENS); in a decode batch whose every consumer takes the
// DQ GEMM, only as the DQ GEMM's activations; otherwise f32.
TEST(MatmulChoiceTest, ProducerLayoutMatchesTheDocumentedRules) {
  struct Row {
    std::string name;
    MatmulContext ctx;
    absl::Span<const WeightClass> model;
    LayoutBands bands;
  };
  std::vector<Row> rows;
  rows.push_back({"7B defaults", H100(), k7B, {{1, L::kF32}, {4, L::kDqF16}, {65, L::kMmqInt8}}});
  {
    // The few-token GEMM's 6..8 read the int8 layout, but mode 2 is for
    // prefill shapes.
    Row r{"7B dq off", H100(), k7B, {{1, L::kF32}, {9, L::kMmqInt8}}};
    r.ctx.knobs.dq = false;
    rows.push_back(r);
  }
  {
    Row r{"7B mmq off", H100(), k7B, {{1, L::kF32}, {4, L::kDqF16}, {65, L::kF32}}};
    r.ctx.knobs.mmq = false;
    rows.push_back(r);
  }
  {
    // No GEMM reads anything: f32 throughout.
    Row r{"7B prefill_gemm off", H100(), k7B, {{1, L::kF32}}};
    r.ctx.knobs.prefill_gemm = false;
    rows.push_back(r);
  }
  {
    Row r{"7B skip_write off", H100(), k7B, {{1, L::kF32}}};
    r.ctx.knobs.skip_write = false;
    rows.push_back(r);
  }
  {
    Row r{"7B sm_75", H100(), k7B, {{1, L::kF32}}};
    r.ctx.device.cc = 750;
    rows.push_back(r);
  }
  {
    // 2..3 tokens are prefill-shaped now, on the few-token GEMM.
    Row r{"7B mmq_min 2",
          H100(),
          k7B,
          {{1, L::kF32}, {2, L::kMmqInt8}, {4, L::kDqF16}, {65, L::kMmqInt8}}};
    r.ctx.knobs.mmq_min_tokens = 2;
    rows.push_back(r);
  }
  {
    Row r{"7B dq max 16", H100(), k7B, {{1, L::kF32}, {4, L::kDqF16}, {17, L::kMmqInt8}}};
    r.ctx.knobs.dq_max_tokens = 16;
    rows.push_back(r);
  }
  // A model with a Q8_0 weight beside its K-quants: a decode batch's
  // readers may be on either GEMM, so f32; prefill shapes MMQ.
  rows.push_back({"mixed defaults", H100(), kMixed, {{1, L::kF32}, {65, L::kMmqInt8}}});
  {
    Row r{"mixed dq off", H100(), kMixed, {{1, L::kF32}, {9, L::kMmqInt8}}};
    r.ctx.knobs.dq = false;
    rows.push_back(r);
  }
  {
    Row r{"legacy-only defaults", H100(), kLegacyOnly, {{1, L::kF32}, {9, L::kMmqInt8}}};
    r.ctx.model_has_dq_weights = false;
    rows.push_back(r);
  }
  for (const Row& r : rows) {
    SCOPED_TRACE(r.name);
    for (int64_t nt : kTokens) {
      const L want = Lookup(r.bands, nt);
      const L got = Layout(r.ctx, r.model, nt);
      EXPECT_EQ(got, want) << "nt " << nt << ": " << ActivationLayoutName(got) << ", expected "
                           << ActivationLayoutName(want);
      // Readers that are not all integer-dot matmuls, or k off the 32-grid:
      // f32.
      EXPECT_EQ(Layout(r.ctx, r.model, nt, 3584, false), L::kF32) << "nt " << nt;
      EXPECT_EQ(Layout(r.ctx, r.model, nt, 3584 + 16), L::kF32) << "nt " << nt;
    }
  }
  EXPECT_EQ(Layout(H100(), {}, 64), L::kF32);  // no integer-dot weights
}

// The layout a producer writes is the one every integer-dot weight of the
// model reads under the plan: for every knob setting, model and token
// count, a layout other than f32 is that of the kernel chosen for every
// weight class (so no reader finds its input dead). And the converse where
// mode 2 applies: all DQ means the DQ layout; all MMQ at prefill shapes
// the int8 one.
TEST(MatmulChoiceTest, ProducerLayoutAgreesWithTheChosenKernels) {
  const absl::Span<const WeightClass> models[] = {k7B, kMixed, kLegacyOnly};
  int non_f32 = 0;
  for (Case c : Cases()) {
    SCOPED_TRACE(c.name);
    for (absl::Span<const WeightClass> model : models) {
      c.ctx.model_has_dq_weights = false;
      for (const WeightClass& w : model) {
        c.ctx.model_has_dq_weights |= DqSupports(w.type, w.q6k_padded);
      }
      for (int64_t nt : kTokens) {
        for (const Shape& s : kShapes) {
          const L layout = Layout(c.ctx, model, nt, s.k);
          bool all_dq = true, all_mmq = true;
          for (const WeightClass& w : model) {
            MatmulChoiceInput in;
            in.type = w.type;
            in.q6k_padded = w.q6k_padded;
            in.rows = s.rows;
            in.k = s.k;
            in.nt = nt;
            in.ctx = c.ctx;
            for (bool has_q8 : {false, true}) {
              in.input_has_q8 = has_q8;
              const K kernel = ChooseMatmulKernel(in);
              if (layout != L::kF32) {
                EXPECT_EQ(InputLayoutOf(kernel), layout)
                    << GgmlTypeName(w.type) << " nt " << nt << " k " << s.k << ": "
                    << MatmulKernelName(kernel) << " under " << ActivationLayoutName(layout);
              }
              all_dq = all_dq && kernel == K::kDqGemm;
              all_mmq = all_mmq && InputLayoutOf(kernel) == L::kMmqInt8;
            }
          }
          if (c.ctx.knobs.skip_write) {
            if (all_dq) {
              EXPECT_EQ(layout, L::kDqF16) << "nt " << nt;
            }
            if (all_mmq && nt >= c.ctx.knobs.mmq_min_tokens) {
              EXPECT_EQ(layout, L::kMmqInt8) << "nt " << nt;
            }
          } else {
            EXPECT_EQ(layout, L::kF32);
          }
          non_f32 += layout != L::kF32;
        }
      }
    }
  }
  EXPECT_GT(non_f32, 0);  // (the checks above saw mode 2)
}

// The layout a producer of nt tokens (k = 3584) feeding int8 consumers of
// the weight classes `weights` writes under `ctx`.
ActivationLayout ProducerLayout(int64_t nt, absl::Span<const WeightClass> weights,
                                const MatmulContext& ctx) {
  ProducerChoiceInput in;
  in.nt = nt;
  in.k = 3584;
  in.int8_consumers = true;
  in.int8_weights = weights;
  in.ctx = ctx;
  return ActivationLayoutFor(in);
}

// The Hopper arm (docs/design.md, which kernel runs a matmul; the knobs
// MINFER_DQW*): on a GPU that runs the wgmma kernels, Q4_K and padded Q6_K
// weights of 17..256 tokens (the defaults) run the Hopper DQ GEMM, the DQ
// GEMM keeps 4..16, MMQ what is above; other types are untouched; without
// the wgmma code, with the knob off or for a declined weight, nothing runs
// it. Written as bands per class.
TEST(MatmulChoiceTest, HopperDqArm) {
  const int64_t tokens[] = {1, 2, 3, 4, 8, 16, 17, 32, 33, 48, 64, 65, 128, 200, 256, 257, 512};
  struct Case {
    const char* name;
    bool wgmma;
    MatmulKnobs knobs;
    Bands dq_type, raw_q6k, legacy;
  };
  EXPECT_TRUE(MatmulKnobs{}.dqp_more_types);  // (the default since the twenty-fourth session)
  MatmulKnobs def;
  // The K-quant arm; MINFER_DQP_MORE_TYPES's Q8_0 / Q5_K prompts are
  // HopperPrefillTakesMoreTypes' (below).
  def.dqp_more_types = false;
  MatmulKnobs off = def;
  off.dqw = false;
  MatmulKnobs from33 = def;
  from33.dqw_min_tokens = 33;
  MatmulKnobs upto128 = def;
  upto128.dqw_max_tokens = 128;
  MatmulKnobs upto1024 = def;
  upto1024.dqw_max_tokens = 1024;  // (prefills in launches of 256)
  upto1024.dqp_min_tokens = 0;     // (with the prefill form off)
  MatmulKnobs dqp128 = def;
  dqp128.dqp_min_tokens = 128;  // prompts on the prefill form, any length
  MatmulKnobs dqp_no_dqw = dqp128;
  dqp_no_dqw.dqw = false;  // MINFER_DQW=0 turns both Hopper forms off
  // Without the Hopper arm (the sm_80 rules): MMVQ to 3, DQ 4..64, MMQ above.
  const Bands sm80_dq = {{1, K::kMmvq}, {4, K::kDqGemm}, {65, K::kMmq}};
  const Bands raw = {{1, K::kMmvq}, {6, K::kMmqSmall}, {33, K::kMmq}};
  const Bands legacy = raw;
  const Case cases[] = {
      {"hopper, defaults", true, def,
       {{1, K::kMmvq}, {4, K::kDqGemm}, {17, K::kDqWgmma}, {257, K::kDqpWgmma}}, raw, legacy},
      {"hopper, MINFER_DQW=0", true, off, sm80_dq, raw, legacy},
      {"no wgmma code", false, def, sm80_dq, raw, legacy},
      {"hopper, from 33", true, from33,
       {{1, K::kMmvq}, {4, K::kDqGemm}, {33, K::kDqWgmma}, {257, K::kDqpWgmma}}, raw, legacy},
      {"hopper, up to 128", true, upto128,
       {{1, K::kMmvq}, {4, K::kDqGemm}, {17, K::kDqWgmma}, {129, K::kMmq}, {257, K::kDqpWgmma}},
       raw, legacy},
      {"hopper, up to 1024", true, upto1024,
       {{1, K::kMmvq}, {4, K::kDqGemm}, {17, K::kDqWgmma}}, raw, legacy},
      {"hopper, prefill form from 128", true, dqp128,
       {{1, K::kMmvq}, {4, K::kDqGemm}, {17, K::kDqWgmma}, {128, K::kDqpWgmma}}, raw, legacy},
      {"hopper, prefill form but MINFER_DQW=0", true, dqp_no_dqw, sm80_dq, raw, legacy},
      {"prefill form, no wgmma code", false, dqp128, sm80_dq, raw, legacy},
  };
  for (const Case& c : cases) {
    MatmulContext ctx;
    ctx.device.cc = 900;
    ctx.device.wgmma = c.wgmma;
    ctx.knobs = c.knobs;
    ctx.model_has_dq_weights = true;
    for (const Weight& w : kWeights) {
      if (w.cls == kFloat) continue;
      const Bands& bands = w.cls == kDqType ? c.dq_type : w.cls == kKQuantRaw ? c.raw_q6k : c.legacy;
      for (int64_t nt : tokens) {
        K want = bands.front().kernel;
        for (const Band& b : bands) {
          if (nt >= b.from) want = b.kernel;
        }
        MatmulChoiceInput in;
        in.type = w.type;
        in.q6k_padded = w.q6k_padded;
        in.rows = 4608;
        in.k = 3584;
        in.nt = nt;
        in.ctx = ctx;
        EXPECT_EQ(ChooseMatmulKernel(in), want)
            << c.name << ": " << GgmlTypeName(w.type) << (w.q6k_padded ? " padded" : "") << " nt "
            << nt << " got " << MatmulKernelName(ChooseMatmulKernel(in));
        // A declined weight runs neither DQ GEMM.
        in.dq_declined = true;
        const K declined = ChooseMatmulKernel(in);
        EXPECT_NE(declined, K::kDqWgmma) << c.name << " nt " << nt;
        EXPECT_NE(declined, K::kDqpWgmma) << c.name << " nt " << nt;
        EXPECT_NE(declined, K::kDqGemm) << c.name << " nt " << nt;
      }
    }
  }
  // Mode 2 follows: a model of Q4_K and padded Q6_K writes the Hopper layout
  // from 17 tokens (both Hopper forms read it), the DQ layout below; one
  // Q8_0 weight class makes those batches f32 (its weights read MMQ's
  // layout).
  MatmulContext ctx;
  ctx.device.cc = 900;
  ctx.device.wgmma = true;
  ctx.model_has_dq_weights = true;
  ctx.knobs.dqp_more_types = false;  // (with it, the end of this test)
  const WeightClass dq_model[] = {{GgmlType::kQ4_K, false}, {GgmlType::kQ6_K, true}};
  const WeightClass mixed[] = {{GgmlType::kQ4_K, false}, {GgmlType::kQ8_0, false}};
  const std::pair<int64_t, L> want[] = {{8, L::kDqF16},   {16, L::kDqF16},  {17, L::kDqwF16},
                                        {64, L::kDqwF16}, {256, L::kDqwF16}, {512, L::kDqwF16}};
  // (512 tokens: the prefill form's, by default; MMQ's with it off.)
  {
    MatmulContext no_dqp = ctx;
    no_dqp.knobs.dqp_min_tokens = 0;
    EXPECT_EQ(ProducerLayout(512, dq_model, no_dqp), L::kMmqInt8);
  }
  for (const auto& [nt, layout] : want) {
    EXPECT_EQ(ProducerLayout(nt, dq_model, ctx), layout) << "nt " << nt;
    if (nt >= 17) {
      EXPECT_EQ(ProducerLayout(nt, mixed, ctx), L::kF32) << "mixed, nt " << nt;
    }
  }
  // With the prefill form on, prompts past 256 tokens write the Hopper
  // layout too (both forms read it), and the mixed model stays f32.
  ctx.knobs.dqp_min_tokens = 128;
  for (int64_t nt : {128, 512, 4096}) {
    EXPECT_EQ(ProducerLayout(nt, dq_model, ctx), L::kDqwF16) << "prefill form, nt " << nt;
    EXPECT_EQ(ProducerLayout(nt, mixed, ctx), L::kF32) << "prefill form, mixed, nt " << nt;
  }
  // MINFER_DQP_MORE_TYPES: Q8_0 and Q5_K prompts on the prefill form too, in
  // a model with DQ weights or without (a Q8_0 file); shorter batches keep
  // MMQ's arms; off, MMQ; declined, MMQ. Q4_0 never.
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ5_K, GgmlType::kQ4_0}) {
    for (bool knob : {false, true}) {
      for (bool has_dq : {false, true}) {
        const bool takes = knob && type != GgmlType::kQ4_0;
        MatmulChoiceInput in;
        in.type = type;
        in.rows = 4608;
        in.k = 3584;
        in.ctx.device.cc = 900;
        in.ctx.device.wgmma = true;
        in.ctx.knobs.dqp_more_types = knob;
        in.ctx.model_has_dq_weights = has_dq;
        for (int64_t nt : {64, 256, 257, 2048}) {
          in.nt = nt;
          const K want = nt >= 257 && takes ? K::kDqpWgmma : nt <= 32 ? K::kMmqSmall : K::kMmq;
          EXPECT_EQ(ChooseMatmulKernel(in), want)
              << GgmlTypeName(type) << " knob " << knob << " dq " << has_dq << " nt " << nt;
          in.dq_declined = true;
          EXPECT_EQ(ChooseMatmulKernel(in), nt <= 32 ? K::kMmqSmall : K::kMmq);
          in.dq_declined = false;
        }
        // Such a model's producers write the Hopper layout for those prompts.
        const WeightClass model[] = {{type, false}};
        EXPECT_EQ(ProducerLayout(512, model, in.ctx), takes ? L::kDqwF16 : L::kMmqInt8)
            << GgmlTypeName(type) << " knob " << knob << " dq " << has_dq;
      }
    }
  }
  // The prefill form walks k in 256-element super-blocks: a Q8_0 weight
  // with another k (Qwen2.5-0.5B's 896; its launcher would refuse it as an
  // invalid call) keeps MMQ, in a model with DQ weights or without.
  for (bool has_dq : {false, true}) {
    MatmulChoiceInput in;
    in.type = GgmlType::kQ8_0;
    in.rows = 4864;
    in.k = 896;
    in.nt = 512;
    in.ctx.device.cc = 900;
    in.ctx.device.wgmma = true;
    in.ctx.model_has_dq_weights = has_dq;
    EXPECT_EQ(ChooseMatmulKernel(in), K::kMmq) << "k 896, dq " << has_dq;
    in.k = 1024;
    EXPECT_EQ(ChooseMatmulKernel(in), K::kDqpWgmma) << "k 1024, dq " << has_dq;
  }
  // By default (MINFER_DQP_MORE_TYPES on) a mixed Q4_K + Q8_0 model's
  // prompts are all the prefill form's, so its producers write the Hopper
  // layout there; its decode batches stay f32 (Q8_0 reads MMQ's layout).
  {
    MatmulContext dflt;
    dflt.device.cc = 900;
    dflt.device.wgmma = true;
    dflt.model_has_dq_weights = true;
    EXPECT_EQ(ProducerLayout(512, mixed, dflt), L::kDqwF16) << "default, mixed, nt 512";
    EXPECT_EQ(ProducerLayout(64, mixed, dflt), L::kF32) << "default, mixed, nt 64";
  }
  EXPECT_STREQ(MatmulKernelName(K::kDqWgmma), "dq_wgmma");
  EXPECT_STREQ(MatmulKernelName(K::kDqpWgmma), "dqp_wgmma");
  EXPECT_STREQ(ActivationLayoutName(L::kDqwF16), "dqw_f16");
  EXPECT_EQ(InputLayoutOf(K::kDqWgmma), L::kDqwF16);
  EXPECT_EQ(InputLayoutOf(K::kDqpWgmma), L::kDqwF16);
  EXPECT_FALSE(IsVectorKernel(K::kDqpWgmma));
}

// The FP8 arm (rule 0b): only weights with an e4m3 copy, only from
// MINFER_FP8_PREFILL's token count, only with the GEMM arms on and on
// sm_89+; it outranks MMQ and the f16 GEMM there, and the weights without
// a copy keep their kernels. A producer feeding a Q8_0 weight with a copy
// writes f32 (the fp8 GEMM quantizes per token from it).
TEST(MatmulChoiceTest, Fp8Arm) {
  const int64_t tokens[] = {1, 2, 8, 9, 31, 32, 33, 64, 512, 2048};
  struct Case {
    const char* name;
    int cc;
    int64_t fp8_min;
    bool prefill_gemm;
    Bands q8_0, f16;  // with an fp8 copy
  };
  // Without the arm (the H100 defaults of the other tests): Q8_0 MMVQ,
  // few-token MMQ from 6, MMQ from 33; F16 the matvec, the f16 GEMM from 9.
  const Bands q8 = {{1, K::kMmvq}, {6, K::kMmqSmall}, {33, K::kMmq}};
  const Bands f16 = {{1, K::kMatvecF32}, {9, K::kGemmF16}};
  const Case cases[] = {
      {"off", 900, 0, true, q8, f16},
      {"from 32 on sm_90", 900, 32, true,
       {{1, K::kMmvq}, {6, K::kMmqSmall}, {32, K::kFp8Gemm}},
       {{1, K::kMatvecF32}, {9, K::kGemmF16}, {32, K::kFp8Gemm}}},
      {"from 2 on sm_89", 890, 2, true,
       {{1, K::kMmvq}, {2, K::kFp8Gemm}}, {{1, K::kMatvecF32}, {2, K::kFp8Gemm}}},
      {"sm_80: never", 800, 2, true, q8, f16},
      {"GEMM arms off: never", 900, 2, false, {{1, K::kMmvq}, {9, K::kMatvecF32}},
       {{1, K::kMatvecF32}}},
  };
  for (const Case& c : cases) {
    MatmulContext ctx;
    ctx.device.cc = c.cc;
    ctx.knobs.fp8_min_tokens = c.fp8_min;
    ctx.knobs.prefill_gemm = c.prefill_gemm;
    ctx.model_has_dq_weights = true;
    for (const GgmlType type : {GgmlType::kQ8_0, GgmlType::kF16}) {
      const Bands& bands = type == GgmlType::kQ8_0 ? c.q8_0 : c.f16;
      for (int64_t nt : tokens) {
        const K want = Lookup(bands, nt);
        MatmulChoiceInput in;
        in.type = type;
        in.rows = 3584;
        in.k = 3584;
        in.nt = nt;
        in.input_has_q8 = true;
        in.has_fp8 = true;
        in.ctx = ctx;
        EXPECT_EQ(ChooseMatmulKernel(in), want)
            << c.name << ": " << GgmlTypeName(type) << " nt " << nt << " got "
            << MatmulKernelName(ChooseMatmulKernel(in));
        // Without a copy the weight never runs it.
        in.has_fp8 = false;
        EXPECT_NE(ChooseMatmulKernel(in), K::kFp8Gemm) << c.name << " nt " << nt;
      }
    }
    // A Q4_K weight (the DQ types never get a copy) is untouched by the knob.
    MatmulChoiceInput q4;
    q4.type = GgmlType::kQ4_K;
    q4.rows = 3584;
    q4.k = 3584;
    q4.nt = 64;
    q4.ctx = ctx;
    EXPECT_EQ(ChooseMatmulKernel(q4), c.prefill_gemm ? K::kDqGemm : K::kMatvecF32) << c.name;
  }
  // Mode 2: with the Q8_0 class's copy read by the fp8 GEMM, its producers
  // write f32 from 32 tokens on; below, MMQ's layout as before.
  MatmulContext ctx;
  ctx.device.cc = 900;
  ctx.knobs.fp8_min_tokens = 32;
  const WeightClass q8_copy[] = {{GgmlType::kQ8_0, false, true}};
  const WeightClass q8_plain[] = {{GgmlType::kQ8_0, false, false}};
  for (const int64_t nt : {9, 31, 32, 512}) {
    ProducerChoiceInput in;
    in.nt = nt;
    in.k = 3584;
    in.int8_consumers = true;
    in.int8_weights = q8_copy;
    in.ctx = ctx;
    EXPECT_EQ(ActivationLayoutFor(in), nt >= 32 ? L::kF32 : L::kMmqInt8) << "nt " << nt;
    in.int8_weights = q8_plain;
    EXPECT_EQ(ActivationLayoutFor(in), L::kMmqInt8) << "no copy, nt " << nt;
  }
  EXPECT_STREQ(MatmulKernelName(K::kFp8Gemm), "fp8_gemm");
  EXPECT_EQ(InputLayoutOf(K::kFp8Gemm), L::kF32);
  EXPECT_FALSE(IsVectorKernel(K::kFp8Gemm));
}

}  // namespace
}  // namespace minfer::cuda
