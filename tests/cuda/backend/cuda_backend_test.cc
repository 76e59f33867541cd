// CudaBackend against the CPU backend (the reference): every op of the Qwen2
// graph on random inputs, the matmul decision tree per weight type and token
// count, the capture/replay state machine, and end-to-end greedy equality.
// Tag `gpu`: skipped when no device answers.
#include "cuda/backend/cuda_backend.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>
#include <set>

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "cuda/kernels/dq_wgmma.h"
#include "cuda/kernels/launch.h"
#include "cuda/kernels/mmq.h"
#include "cuda/kernels/moe.h"
#include "cuda/state/cuda_state.h"
#include "cuda/testing/gpu_test_util.h"
#include "engine/base/knobs.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/kernels.h"
#include "engine/graph/graph.h"
#include "engine/quant/quantize.h"
#include "engine/runtime/generation.h"
#include "engine/runtime/model.h"
#include "engine/runtime/session.h"
#include "gtest/gtest.h"
#include "tests/support/test_models.h"

namespace minfer::cuda {
namespace {

using graph::BufferRef;
using graph::DType;
using graph::ExecArgs;
using graph::Node;
using graph::OpKind;
using graph::Shape;
using testing::RandomFloats;

// Owns weight bytes for op-level tests.
struct TestWeight {
  graph::Weight w;
  std::string bytes;
};

std::unique_ptr<TestWeight> MakeWeight(const std::string& name, GgmlType type, int64_t k,
                                       int64_t rows, float scale = 0.1f) {
  auto tw = std::make_unique<TestWeight>();
  std::vector<float> f = RandomFloats(k * rows, scale);
  const int64_t rb = RowBytes(type, k);
  tw->bytes.resize(rb * rows);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_TRUE(QuantizeRow(type, f.data() + r * k, tw->bytes.data() + r * rb, k).ok());
  }
  tw->w.name = name;
  tw->w.type = type;
  tw->w.dims = rows > 1 || type != GgmlType::kF32 ? std::vector<int64_t>{k, rows}
                                                  : std::vector<int64_t>{k};
  tw->w.data = reinterpret_cast<const uint8_t*>(tw->bytes.data());
  tw->w.nbytes = tw->bytes.size();
  return tw;
}

// Runs one node on the CPU and on the GPU with the same inputs and returns
// both outputs (f32).
class OpHarness {
 public:
  OpHarness(std::vector<const graph::Weight*> weights) {
    auto state = CudaState::Get();
    if (!state.ok()) return;
    auto b = CudaBackend::Create(*state, weights, nullptr, nullptr);
    EXPECT_TRUE(b.ok()) << b.status();
    if (b.ok()) gpu_ = std::move(*b);
  }
  CudaBackend* gpu() { return gpu_.get(); }
  cpu::CpuBackend& cpu() { return cpu_; }

  // Inputs: raw bytes per input. KV: optional layout (both backends get
  // identical zeroed caches, prefilled with `kv_init` if given).
  void Run(const Node& n, const std::vector<std::string>& inputs, std::vector<float>* cpu_out,
           std::vector<float>* gpu_out, const graph::KvLayout* kv = nullptr,
           const std::string* kv_init_k = nullptr, const std::string* kv_init_v = nullptr,
           std::string* cpu_kv_k = nullptr, std::string* gpu_kv_k = nullptr) {
    for (int side = 0; side < 2; ++side) {
      graph::Backend* b = side == 0 ? static_cast<graph::Backend*>(&cpu_) : gpu_.get();
      ExecArgs a;
      std::vector<int32_t> bufs;
      for (const std::string& in : inputs) {
        auto id = b->AllocBuffer(static_cast<int64_t>(in.size()));
        ASSERT_TRUE(id.ok());
        BufferRef r{b, *id, 0, static_cast<int64_t>(in.size())};
        ASSERT_TRUE(b->WriteHost(r, in.data(), r.bytes).ok());
        a.inputs.push_back(r);
        bufs.push_back(*id);
      }
      auto out = b->AllocBuffer(n.bytes());
      ASSERT_TRUE(out.ok());
      a.output = BufferRef{b, *out, 0, n.bytes()};
      ASSERT_TRUE(b->Fill(a.output, 0xFF).ok());  // poison: NaN floats
      graph::KvLayer layer;
      if (kv != nullptr) {
        const int64_t bytes = kv->row_bytes() * kv->n_ctx;
        for (BufferRef* r : {&layer.k, &layer.v}) {
          auto id = b->AllocBuffer(bytes);
          ASSERT_TRUE(id.ok());
          *r = BufferRef{b, *id, 0, bytes};
          ASSERT_TRUE(b->Fill(*r, 0).ok());
        }
        if (kv_init_k) {
          ASSERT_TRUE(b->WriteHost(layer.k, kv_init_k->data(), bytes).ok());
        }
        if (kv_init_v) {
          ASSERT_TRUE(b->WriteHost(layer.v, kv_init_v->data(), bytes).ok());
        }
        a.kv = &layer;
        a.kv_layout = *kv;
        // Attn reads the cache through its K/V inputs.
        if (n.op == OpKind::kAttn) {
          a.inputs[1] = layer.k;
          a.inputs[2] = layer.v;
        }
      }
      absl::Status st = b->ExecuteNode(n, a);
      ASSERT_TRUE(st.ok()) << b->name() << ": " << st;
      ASSERT_TRUE(b->Synchronize().ok()) << b->name();
      std::vector<float>* o = side == 0 ? cpu_out : gpu_out;
      o->resize(n.bytes() / 4);
      ASSERT_TRUE(b->ReadHost(a.output, o->data(), n.bytes()).ok());
      std::string* kv_out = side == 0 ? cpu_kv_k : gpu_kv_k;
      if (kv_out && kv) {
        kv_out->resize(layer.k.bytes);
        ASSERT_TRUE(b->ReadHost(layer.k, kv_out->data(), layer.k.bytes).ok());
      }
    }
  }

 private:
  cpu::CpuBackend cpu_{nullptr};
  std::unique_ptr<CudaBackend> gpu_;
};

std::string Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}
std::string Bytes(const std::vector<int32_t>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

// ||a - b|| / ||b||, and every element written (no poison NaN left).
double RelErr(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    EXPECT_TRUE(std::isfinite(a[i])) << "element " << i << " not written / not finite";
    double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

Node MakeNode(OpKind op, Shape shape, std::vector<const graph::Weight*> weights = {}) {
  Node n;
  n.id = 0;
  n.op = op;
  n.shape = shape;
  n.weights = std::move(weights);
  n.name = graph::OpName(op);
  return n;
}

class CudaBackendOpTest : public ::testing::Test {
 protected:
  void SetUp() override { MINFER_REQUIRE_GPU(); }
};

TEST_F(CudaBackendOpTest, Elementwise) {
  OpHarness h({});
  ASSERT_NE(h.gpu(), nullptr);
  const int64_t n = 4096 * 3 + 5;
  auto a = RandomFloats(n), b = RandomFloats(n), row = RandomFloats(4096 * 3 + 5);
  std::vector<float> c, g;
  for (OpKind op : {OpKind::kAdd, OpKind::kMul, OpKind::kSwiGLU}) {
    Node node = MakeNode(op, Shape(n));
    node.inputs = {0, 1};
    h.Run(node, {Bytes(a), Bytes(b)}, &c, &g);
    EXPECT_LT(RelErr(g, c), 1e-6) << graph::OpName(op);
  }
  for (OpKind op : {OpKind::kSilu, OpKind::kScale}) {
    Node node = MakeNode(op, Shape(n));
    node.p.scale = 0.37f;
    node.inputs = {0};
    h.Run(node, {Bytes(a)}, &c, &g);
    EXPECT_LT(RelErr(g, c), 1e-6) << graph::OpName(op);
  }
  Node sm = MakeNode(OpKind::kSoftmax, Shape(1000, 7));
  sm.inputs = {0};
  auto x = RandomFloats(7000, 3.0f);
  h.Run(sm, {Bytes(x)}, &c, &g);
  EXPECT_LT(RelErr(g, c), 1e-5);
  // Broadcast: a [256, 5] + b [256].
  Node add = MakeNode(OpKind::kAdd, Shape(256, 5));
  add.inputs = {0, 1};
  auto a2 = RandomFloats(256 * 5), b2 = RandomFloats(256);
  h.Run(add, {Bytes(a2), Bytes(b2)}, &c, &g);
  EXPECT_LT(RelErr(g, c), 1e-7);
  // Permute [3, 5, 7, 2] -> axes (2, 0, 3, 1).
  Node perm = MakeNode(OpKind::kPermute, Shape(5, 2, 3, 7));
  perm.p.perm = {2, 0, 3, 1};
  perm.inputs = {0};
  auto px = RandomFloats(3 * 5 * 7 * 2);
  h.Run(perm, {Bytes(px)}, &c, &g);
  EXPECT_EQ(g, c);
}

// A bias Add carrying the residual (graph.h; gpt-oss's attention output):
// the CPU's floats exactly, and a residual of the wrong size refused with
// both sizes before anything is launched.
TEST_F(CudaBackendOpTest, BiasAddWithResidualEqualsCpuAndRefusesShortResidual) {
  const int64_t n = 2880, nt = 3;
  auto bias = MakeWeight("attn_output.bias", GgmlType::kF32, n, 1);
  OpHarness h({&bias->w});
  ASSERT_NE(h.gpu(), nullptr);
  Node node = MakeNode(OpKind::kAdd, Shape(n, nt));
  node.inputs = {0, 1};
  node.weights = {&bias->w};
  const auto x = RandomFloats(n * nt), r = RandomFloats(n * nt, 4.0f);
  std::vector<float> c, g;
  h.Run(node, {Bytes(x), Bytes(r)}, &c, &g);
  EXPECT_EQ(g, c);
  const CudaBackend::Stats& stats = h.gpu()->stats();
  EXPECT_EQ(stats.residual_epilogue, 1);
  // One token's residual for three.
  ExecArgs a;
  for (const std::vector<float>& v : {x, std::vector<float>(n)}) {
    auto id = h.gpu()->AllocBuffer(static_cast<int64_t>(v.size()) * 4);
    ASSERT_TRUE(id.ok());
    a.inputs.push_back(BufferRef{h.gpu(), *id, 0, static_cast<int64_t>(v.size()) * 4});
  }
  auto out = h.gpu()->AllocBuffer(n * nt * 4);
  ASSERT_TRUE(out.ok());
  a.output = BufferRef{h.gpu(), *out, 0, n * nt * 4};
  const absl::Status st = h.gpu()->ExecuteNode(node, a);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("residual holds 2880 floats, needs 8640"), std::string::npos) << st;
  EXPECT_EQ(h.gpu()->stats().residual_epilogue, 1);  // nothing launched
  ASSERT_TRUE(h.gpu()->Synchronize().ok());
}

TEST_F(CudaBackendOpTest, RmsNormAndRope) {
  auto w = MakeWeight("norm.weight", GgmlType::kF32, 3584, 1, 1.0f);
  OpHarness h({&w->w});
  ASSERT_NE(h.gpu(), nullptr);
  std::vector<float> c, g;
  for (int64_t rows : {1, 9}) {
    Node norm = MakeNode(OpKind::kRmsNorm, Shape(3584, rows), {&w->w});
    norm.p.eps = 1e-6f;
    norm.inputs = {0};
    auto x = RandomFloats(3584 * rows, 2.0f);
    h.Run(norm, {Bytes(x)}, &c, &g);
    EXPECT_LT(RelErr(g, c), 1e-6) << rows;
  }
  for (auto style : {graph::RopeStyle::kNeoX, graph::RopeStyle::kInterleaved}) {
    const int64_t hd = 128, heads = 28, nt = 5;
    Node rope = MakeNode(OpKind::kRoPE, Shape(hd, heads, nt));
    rope.p.rope_style = style;
    rope.p.rope_base = 1e6f;
    rope.p.n_rot = hd;
    rope.inputs = {0, 1};
    auto x = RandomFloats(hd * heads * nt);
    std::vector<int32_t> pos = {0, 1, 77, 4095, 32767};
    h.Run(rope, {Bytes(x), Bytes(pos)}, &c, &g);
    EXPECT_LT(RelErr(g, c), 1e-5) << static_cast<int>(style);
  }
  // Llama 3.1's frequency factors (rope_freqs.weight on the node, read on
  // the host by both backends), on Llama's adjacent pairs.
  auto factors = MakeWeight("rope_freqs.weight", GgmlType::kF32, 64, 1, 1.0f);
  float* fv = reinterpret_cast<float*>(factors->bytes.data());
  for (int i = 0; i < 64; ++i) fv[i] = 1.0f + 0.5f * i;
  {
    const int64_t hd = 128, heads = 8, nt = 5;
    Node rope = MakeNode(OpKind::kRoPE, Shape(hd, heads, nt), {&factors->w});
    rope.p.rope_style = graph::RopeStyle::kInterleaved;
    rope.p.rope_base = 5e5f;
    rope.p.n_rot = hd;
    rope.inputs = {0, 1};
    auto x = RandomFloats(hd * heads * nt);
    std::vector<int32_t> pos = {0, 1, 77, 4095, 32767};
    h.Run(rope, {Bytes(x), Bytes(pos)}, &c, &g);
    EXPECT_LT(RelErr(g, c), 1e-5) << "with rope_freqs";
    // The factors matter: the same node without them gives other values.
    Node plain = rope;
    plain.weights.clear();
    std::vector<float> c2, g2;
    h.Run(plain, {Bytes(x), Bytes(pos)}, &c2, &g2);
    EXPECT_GT(RelErr(c2, c), 1e-3);
  }
  // YaRN (gpt-oss: factor 32 over 4,096 original positions, NeoX pairs of
  // head_dim 64): the ramp mixes interpolated and extrapolated angles and
  // the magnitude scales; equal to the CPU within the RoPE bound, and not
  // equal to plain RoPE.
  {
    const int64_t hd = 64, heads = 8, nt = 6;
    Node rope = MakeNode(OpKind::kRoPE, Shape(hd, heads, nt));
    rope.p.rope_style = graph::RopeStyle::kNeoX;
    rope.p.rope_base = 150000.0f;
    rope.p.n_rot = hd;
    rope.p.yarn.freq_scale = 1.0f / 32.0f;
    rope.p.yarn.ext_factor = 1.0f;
    rope.p.yarn.attn_factor = 1.0f;
    rope.p.yarn.beta_fast = 32.0f;
    rope.p.yarn.beta_slow = 1.0f;
    rope.p.yarn.n_ctx_orig = 4096;
    rope.inputs = {0, 1};
    ASSERT_TRUE(h.gpu()->SupportsOp(rope));
    auto x = RandomFloats(hd * heads * nt);
    std::vector<int32_t> pos = {0, 1, 77, 4095, 32767, 131071};
    h.Run(rope, {Bytes(x), Bytes(pos)}, &c, &g);
    EXPECT_LT(RelErr(g, c), 1e-5) << "YaRN";
    Node plain = rope;
    plain.p.yarn = graph::RopeYarn{};
    std::vector<float> c2, g2;
    h.Run(plain, {Bytes(x), Bytes(pos)}, &c2, &g2);
    EXPECT_GT(RelErr(c2, c), 1e-3);
  }
}

const GgmlType kAllTypes[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ4_0,
                              GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0,
                              GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};

// Every weight type x token counts that hit each arm of the decision tree
// (MMVQ 1, multi-token MMVQ 2-8, GEMM >= 9), against the CPU's int8 path.
// A global knob set for the scope of a test (knobs are read between steps).
class ScopedKnob {
 public:
  ScopedKnob(const char* name, const char* value) : name_(name) {
    EXPECT_TRUE(KnobRegistry::Global().Set(name, value).ok());
  }
  ~ScopedKnob() { (void)KnobRegistry::Global().Reset(name_); }

 private:
  const char* name_;
};

// Every weight type through the decode kernels (nt <= 8) and the f16
// tensor-core GEMM (nt >= 9 with MINFER_MMQ=0: the path of pre-sm_80 GPUs
// and of the f32/f16/bf16 weights).
TEST_F(CudaBackendOpTest, MatMulEveryTypeAndTokenCount) {
  ScopedKnob no_mmq("MINFER_MMQ", "0");
  ScopedKnob no_dq("MINFER_DQ_GEMM", "0");  // (its own test below)
  ScopedKnob no_dqw("MINFER_DQW", "0");     // (and the Hopper one's)
  for (GgmlType t : kAllTypes) {
    SCOPED_TRACE(GgmlTypeName(t));
    const int64_t k = 512, rows = 300;
    auto w = MakeWeight("w", t, k, rows);
    OpHarness h({&w->w});
    ASSERT_NE(h.gpu(), nullptr);
    for (int64_t nt : {1, 2, 5, 8, 9, 17, 100}) {
      Node mm = MakeNode(OpKind::kMatMul, Shape(rows, nt), {&w->w});
      mm.inputs = {0};
      auto x = RandomFloats(k * nt);
      std::vector<float> c, g;
      h.Run(mm, {Bytes(x)}, &c, &g);
      // MMVQ reproduces the CPU's integer math (float order differs); the
      // f16 GEMM rounds weights and activations to f16 instead of int8.
      double bound = nt >= 9 ? 1e-2 : (t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16 ? 1e-5 : 1e-5);
      EXPECT_LT(RelErr(g, c), bound) << "nt " << nt;
    }
    // nt 9, 17, 100; an f32 matrix of 300 rows is a router's shape and
    // stays on the f32 matvec (matmul_choice.h rule 0).
    EXPECT_EQ(h.gpu()->stats().gemm_f16, t == GgmlType::kF32 ? 0 : 3);
    EXPECT_EQ(h.gpu()->stats().mmq_fast + h.gpu()->stats().mmq_generic, 0);
  }
}


// MINFER_MMQ=1: prefill-shaped matmuls of the eight quantized types run the
// int8 MMQ GEMM, which reproduces the CPU's integer math (so the MMVQ bound,
// not the f16 GEMM's), on both rungs of its ladder (k 512 takes the fast
// variant; Q6_K is padded on the device).
TEST_F(CudaBackendOpTest, MatMulMmqEveryQuantType) {
  ScopedKnob mmq("MINFER_MMQ", "1");
  ScopedKnob no_dq("MINFER_DQ_GEMM", "0");  // (its own test below)
  ScopedKnob no_dqw("MINFER_DQW", "0");
  const GgmlType quant[] = {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                            GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};
  for (GgmlType t : quant) {
    SCOPED_TRACE(GgmlTypeName(t));
    const int64_t k = 512, rows = 300;
    auto w = MakeWeight("w", t, k, rows);
    OpHarness h({&w->w});
    ASSERT_NE(h.gpu(), nullptr);
    // 6, 9 and 17 tokens are decode batches (the few-token GEMM, by the
    // default MINFER_MMQ_SMALL_MIN_TOKENS / MINFER_MMQ_SMALL_TOKENS), 100
    // and 511 the tiled kernel.
    for (int64_t nt : {6, 9, 17, 100, 511}) {
      Node mm = MakeNode(OpKind::kMatMul, Shape(rows, nt), {&w->w});
      mm.inputs = {0};
      auto x = RandomFloats(k * nt);
      std::vector<float> c, g;
      h.Run(mm, {Bytes(x)}, &c, &g);
      EXPECT_LT(RelErr(g, c), 1e-5) << "nt " << nt;
    }
    EXPECT_EQ(h.gpu()->stats().mmq_small, 3);
    EXPECT_EQ(h.gpu()->stats().mmq_fast + h.gpu()->stats().mmq_generic, 2);
    EXPECT_EQ(h.gpu()->stats().gemm_f16, 0);
  }
}

// The DQ GEMM (on by default) takes the decode batches (MINFER_DQ_MIN_TOKENS
// 4 .. MINFER_DQ_MAX_TOKENS 64) of Q4_K and Q6_K weights; other types and
// token counts keep their kernels. Its f16 operands stay within the
// contract's 2^-9 bound of the terms (dq_gemm.h), so relative to the CPU's
// integer math the outputs move by about 1e-3 of their norm, not 1e-5.
TEST_F(CudaBackendOpTest, MatMulDqTakesDecodeBatchesOfKQuants) {
  ScopedKnob no_dqw("MINFER_DQW", "0");  // (the Hopper arm: the next test)
  for (GgmlType t : {GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kQ8_0}) {
    SCOPED_TRACE(GgmlTypeName(t));
    const int64_t k = 512, rows = 300;
    auto w = MakeWeight("w", t, k, rows);
    OpHarness h({&w->w});
    ASSERT_NE(h.gpu(), nullptr);
    const bool dq = t != GgmlType::kQ8_0;
    for (int64_t nt : {1, 5, 6, 9, 17, 33, 64, 65, 100}) {
      Node mm = MakeNode(OpKind::kMatMul, Shape(rows, nt), {&w->w});
      mm.inputs = {0};
      auto x = RandomFloats(k * nt);
      std::vector<float> c, g;
      h.Run(mm, {Bytes(x)}, &c, &g);
      const bool on_dq = dq && nt >= 4 && nt <= 64;
      EXPECT_LT(RelErr(g, c), on_dq ? 3e-3 : 1e-5) << "nt " << nt;
    }
    EXPECT_EQ(h.gpu()->stats().dq_gemm, dq ? 6 : 0);
  }
}

// On a Hopper GPU with the sm_90a code, the wgmma DQ GEMM takes Q4_K and
// Q6_K batches of MINFER_DQW_MIN_TOKENS (17) .. MINFER_DQW_MAX_TOKENS (256)
// tokens, decode batches or short prefills alike, within the DQ GEMM's
// bound of the CPU; below 17 the DQ GEMM keeps them, above 256 MMQ (with the
// prefill form off; MatMulDqpTakesPromptsOfKQuants has it on); Q8_0 never
// runs it. Both CTA shapes run (one warpgroup to 64 tokens, two above).
// Elsewhere it skips.
TEST_F(CudaBackendOpTest, MatMulDqwTakesHopperBatchesOfKQuants) {
  if (!DqwAvailable()) GTEST_SKIP() << "needs an sm_90 GPU and the sm_90a code";
  ScopedKnob no_dqp("MINFER_DQP_MIN_TOKENS", "0");
  for (GgmlType t : {GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kQ8_0}) {
    SCOPED_TRACE(GgmlTypeName(t));
    const int64_t k = 512, rows = 300;
    auto w = MakeWeight("w", t, k, rows);
    OpHarness h({&w->w});
    ASSERT_NE(h.gpu(), nullptr);
    const bool dq = t != GgmlType::kQ8_0;
    for (int64_t nt : {16, 32, 33, 64, 100, 256, 257}) {
      Node mm = MakeNode(OpKind::kMatMul, Shape(rows, nt), {&w->w});
      mm.inputs = {0};
      auto x = RandomFloats(k * nt);
      std::vector<float> c, g;
      h.Run(mm, {Bytes(x)}, &c, &g);
      const bool f16_ops = dq && nt <= 256;
      EXPECT_LT(RelErr(g, c), f16_ops ? 3e-3 : 1e-5) << "nt " << nt;
    }
    EXPECT_EQ(h.gpu()->stats().dqw_gemm, dq ? 5 : 0);  // 32, 33, 64, 100, 256
    EXPECT_EQ(h.gpu()->stats().dq_gemm, dq ? 1 : 0);   // 16
  }
  // MINFER_DQW_MAX_TOKENS above 256: a prefill runs as launches of 256
  // tokens, each within the bound.
  ScopedKnob longer("MINFER_DQW_MAX_TOKENS", "1024");
  for (GgmlType t : {GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    SCOPED_TRACE(GgmlTypeName(t));
    const int64_t k = 512, rows = 300;
    auto w = MakeWeight("w", t, k, rows);
    OpHarness h({&w->w});
    ASSERT_NE(h.gpu(), nullptr);
    for (int64_t nt : {257, 600}) {
      Node mm = MakeNode(OpKind::kMatMul, Shape(rows, nt), {&w->w});
      mm.inputs = {0};
      auto x = RandomFloats(k * nt);
      std::vector<float> c, g;
      h.Run(mm, {Bytes(x)}, &c, &g);
      EXPECT_LT(RelErr(g, c), 3e-3) << "nt " << nt;
    }
    EXPECT_EQ(h.gpu()->stats().dqw_gemm, 2 + 3);
    EXPECT_EQ(h.gpu()->stats().mmq_fast + h.gpu()->stats().mmq_generic, 0);
  }
}

// MINFER_DQP_MIN_TOKENS: Q4_K / Q6_K matmuls of that many tokens and more
// run the Hopper prefill GEMM in one launch each (any length; no launches of
// 256), within the DQ GEMMs' bound of the CPU, with both CTA shapes; fewer
// tokens keep the register form; with MINFER_DQP_MORE_TYPES off, Q8_0 never
// runs either. Elsewhere it skips.
TEST_F(CudaBackendOpTest, MatMulDqpTakesPromptsOfKQuants) {
  if (!DqwAvailable()) GTEST_SKIP() << "needs an sm_90 GPU and the sm_90a code";
  for (const char* wgs : {"2", "4"}) {
    ScopedKnob on("MINFER_DQP_MIN_TOKENS", "128");
    ScopedKnob shape("MINFER_DQP_WARPGROUPS", wgs);
    ScopedKnob k_quants_only("MINFER_DQP_MORE_TYPES", "0");
    for (GgmlType t : {GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kQ8_0}) {
      SCOPED_TRACE(std::string(GgmlTypeName(t)) + " warpgroups " + wgs);
      const int64_t k = 512, rows = 300;
      auto w = MakeWeight("w", t, k, rows);
      OpHarness h({&w->w});
      ASSERT_NE(h.gpu(), nullptr);
      const bool dq = t != GgmlType::kQ8_0;
      for (int64_t nt : {100, 128, 129, 600}) {
        Node mm = MakeNode(OpKind::kMatMul, Shape(rows, nt), {&w->w});
        mm.inputs = {0};
        auto x = RandomFloats(k * nt);
        std::vector<float> c, g;
        h.Run(mm, {Bytes(x)}, &c, &g);
        EXPECT_LT(RelErr(g, c), dq ? 3e-3 : 1e-5) << "nt " << nt;
      }
      EXPECT_EQ(h.gpu()->stats().dqp_gemm, dq ? 3 : 0);  // 128, 129, 600
      EXPECT_EQ(h.gpu()->stats().dqw_gemm, dq ? 1 : 0);  // 100
    }
  }
  // MINFER_DQP_MORE_TYPES (on by default): Q8_0 and Q5_K prompts too, within
  // the same bound (each weight decoded to f16 once); shorter batches keep MMQ.
  for (GgmlType t : {GgmlType::kQ8_0, GgmlType::kQ5_K}) {
    SCOPED_TRACE(GgmlTypeName(t));
    ScopedKnob on("MINFER_DQP_MIN_TOKENS", "128");
    auto w = MakeWeight("w", t, 512, 300);
    OpHarness h({&w->w});
    ASSERT_NE(h.gpu(), nullptr);
    for (int64_t nt : {100, 128, 600}) {
      Node mm = MakeNode(OpKind::kMatMul, Shape(300, nt), {&w->w});
      mm.inputs = {0};
      auto x = RandomFloats(512 * nt);
      std::vector<float> c, g;
      h.Run(mm, {Bytes(x)}, &c, &g);
      EXPECT_LT(RelErr(g, c), nt >= 128 ? 3e-3 : 1e-5) << "nt " << nt;
    }
    EXPECT_EQ(h.gpu()->stats().dqp_gemm, 2);
  }
  // The default (257 tokens): a prompt of 256 keeps the register form, one
  // of 257 runs the prefill form.
  auto w = MakeWeight("w", GgmlType::kQ4_K, 512, 300);
  OpHarness h({&w->w});
  ASSERT_NE(h.gpu(), nullptr);
  for (int64_t nt : {256, 257}) {
    Node mm = MakeNode(OpKind::kMatMul, Shape(300, nt), {&w->w});
    mm.inputs = {0};
    auto x = RandomFloats(512 * nt);
    std::vector<float> c, g;
    h.Run(mm, {Bytes(x)}, &c, &g);
    EXPECT_LT(RelErr(g, c), 3e-3) << "nt " << nt;
  }
  EXPECT_EQ(h.gpu()->stats().dqw_gemm, 1);
  EXPECT_EQ(h.gpu()->stats().dqp_gemm, 1);
}

// FusedQKV at prefill (nt > 1): the planar [q | k | v] output equals the
// three separate MatMuls bit for bit on the GPU (runs of one weight type
// share one segmented MMQ launch; mixed types split the run; float weights
// take the f16 GEMM beside MMQ ones, and nt <= 8 the per-weight kernels)
// and the CPU within MatMul's bounds.
TEST_F(CudaBackendOpTest, FusedQkvPrefillEqualsSeparateMatMuls) {
  // The MMQ segments (the DQ GEMMs' are dq_gemm_test's and dq_wgmma_test's).
  ScopedKnob no_dq("MINFER_DQ_GEMM", "0");
  ScopedKnob no_dqw("MINFER_DQW", "0");
  const int64_t k = 512;
  struct Set {
    GgmlType q, kv_k, v;
    int64_t segmented_launches;  // per nt >= 9 evaluation
  };
  for (const Set& set : {Set{GgmlType::kQ4_K, GgmlType::kQ4_K, GgmlType::kQ6_K, 1},
                         Set{GgmlType::kQ8_0, GgmlType::kQ8_0, GgmlType::kQ8_0, 1},
                         Set{GgmlType::kQ5_0, GgmlType::kQ6_K, GgmlType::kQ5_0, 0},
                         Set{GgmlType::kF16, GgmlType::kF16, GgmlType::kF16, 0},
                         Set{GgmlType::kQ4_K, GgmlType::kF16, GgmlType::kQ4_K, 0}}) {
    SCOPED_TRACE(absl::StrCat(GgmlTypeName(set.q), "/", GgmlTypeName(set.kv_k), "/",
                              GgmlTypeName(set.v)));
    auto wq = MakeWeight("wq", set.q, k, 300);
    auto wk = MakeWeight("wk", set.kv_k, k, 64);
    auto wv = MakeWeight("wv", set.v, k, 64);
    OpHarness h({&wq->w, &wk->w, &wv->w});
    ASSERT_NE(h.gpu(), nullptr);
    int64_t expected_segmented = 0;
    for (int64_t nt : {2, 9, 100}) {
      SCOPED_TRACE(nt);
      Node qkv = MakeNode(OpKind::kFusedQKV, Shape(300 + 64 + 64, nt), {&wq->w, &wk->w, &wv->w});
      qkv.inputs = {0};
      auto x = RandomFloats(k * nt);
      std::vector<float> c, g;
      h.Run(qkv, {Bytes(x)}, &c, &g);
      int64_t off = 0;
      for (const TestWeight* w : {wq.get(), wk.get(), wv.get()}) {
        const int64_t rows = w->w.rows();
        Node mm = MakeNode(OpKind::kMatMul, Shape(rows, nt), {&w->w});
        mm.inputs = {0};
        std::vector<float> c1, g1;
        h.Run(mm, {Bytes(x)}, &c1, &g1);
        const std::vector<float> gs(g.begin() + off, g.begin() + off + rows * nt);
        const std::vector<float> cs(c.begin() + off, c.begin() + off + rows * nt);
        EXPECT_EQ(std::memcmp(gs.data(), g1.data(), gs.size() * 4), 0) << w->w.name;
        EXPECT_EQ(cs, c1) << w->w.name << " (CPU)";
        const bool f16_gemm = nt >= 9 && !MmqSupports(w->w.type);
        EXPECT_LT(RelErr(gs, cs), f16_gemm ? 1e-2 : 1e-5) << w->w.name;
        off += rows * nt;
      }
      if (nt >= 9) expected_segmented += set.segmented_launches;
    }
    EXPECT_EQ(h.gpu()->stats().mmq_segmented, expected_segmented);
  }
}

// Rows whose GGUF bytes are not a multiple of 16 (Qwen2.5-0.5B's 896-wide
// projections: 28 legacy blocks, 504..952 bytes) are laid out by the
// registry at a 16-byte stride (DeviceRowBytes), so MMQ runs its fast
// variant (with a partial last 256-element chunk) and every other kernel
// reads the padded rows correctly: decode (MMVQ), prefill (MMQ) and
// GetRows against the CPU.
TEST_F(CudaBackendOpTest, UnalignedRowsArePaddedOnTheDevice) {
  const GgmlType legacy[] = {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                             GgmlType::kQ8_0};
  for (GgmlType t : legacy) {
    SCOPED_TRACE(GgmlTypeName(t));
    const int64_t k = 896, rows = 300;
    // 28 blocks of 18/22/34 bytes are unaligned; Q4_1/Q5_1 (20/24) are not
    // and still take the partial last chunk.
    if (t == GgmlType::kQ4_0 || t == GgmlType::kQ5_0 || t == GgmlType::kQ8_0) {
      EXPECT_NE(RowBytes(t, k) % 16, 0) << "the case must be an unaligned one";
    }
    auto w = MakeWeight("w", t, k, rows);
    OpHarness h({&w->w});
    ASSERT_NE(h.gpu(), nullptr);
    for (int64_t nt : {1, 4, 9, 100, 511}) {
      Node mm = MakeNode(OpKind::kMatMul, Shape(rows, nt), {&w->w});
      mm.inputs = {0};
      auto x = RandomFloats(k * nt);
      std::vector<float> c, g;
      h.Run(mm, {Bytes(x)}, &c, &g);
      EXPECT_LT(RelErr(g, c), 1e-5) << "nt " << nt;
    }
    EXPECT_EQ(h.gpu()->stats().mmq_small, 1);  // nt 9: a decode batch
    EXPECT_EQ(h.gpu()->stats().mmq_fast, 2);
    EXPECT_EQ(h.gpu()->stats().mmq_generic, 0);
    std::vector<int32_t> ids = {0, 299, 17, 150};
    Node gr = MakeNode(OpKind::kGetRows, Shape(k, 4), {&w->w});
    gr.inputs = {0};
    std::vector<float> c, g;
    h.Run(gr, {Bytes(ids)}, &c, &g);
    EXPECT_LT(RelErr(g, c), 1e-6);
  }
}

// The device layout's bytes, as the daemon's admission estimate computes
// them, are what the registry allocates.
TEST(CudaWeightLayoutTest, DeviceBytesMatchTheRegistry) {
  MINFER_REQUIRE_GPU();
  auto state = CudaState::Get();
  ASSERT_TRUE(state.ok());
  for (GgmlType t : {GgmlType::kQ5_0, GgmlType::kQ8_0, GgmlType::kQ6_K, GgmlType::kF32}) {
    const int64_t k = t == GgmlType::kQ6_K ? 768 : 896, rows = 37;
    auto w = MakeWeight(absl::StrCat("layout-", GgmlTypeName(t)), t, k, rows);
    const uint64_t owner = CudaState::NewOwnerId();
    const uint64_t before = (*state)->WeightBytes(owner);
    auto v = (*state)->RegisterWeight(owner, w->w);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(v->row_bytes % 16, 0);
    EXPECT_GE(v->row_bytes, RowBytes(t, k));
    EXPECT_EQ(v->row_bytes, DeviceRowBytes(t, k));
    EXPECT_EQ((*state)->WeightBytes(owner) - before,
              static_cast<uint64_t>(DeviceWeightBytes(t, k, rows)));
    // Row r's first GGUF bytes are on the device at r * row_bytes.
    std::vector<uint8_t> dev(v->row_bytes * rows);
    ASSERT_EQ(cudaMemcpy(dev.data(), v->data, dev.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    const int64_t cmp = t == GgmlType::kQ6_K ? 210 : RowBytes(t, k);
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_EQ(std::memcmp(dev.data() + r * v->row_bytes, w->w.data + r * RowBytes(t, k), cmp), 0)
          << "row " << r;
    }
    (*state)->ReleaseWeights(owner);
  }
}

// The quantized-activation memos live for one execution window, but the
// liveness allocator reuses buffers inside a window: a matmul whose input
// buffer was rewritten since the last quantize (by a node or a host write)
// must quantize again. Two matmuls over the same buffer with different
// contents in one window, decode (MMVQ plane) and prefill (MMQ scratch).
TEST_F(CudaBackendOpTest, RewrittenActivationIsQuantizedAgain) {
  for (const char* mmq : {"0", "1"}) {
    ScopedKnob knob("MINFER_MMQ", mmq);
    const int64_t k = 256, rows = 64;
    auto w = MakeWeight("w", GgmlType::kQ4_K, k, rows);
    OpHarness h({&w->w});
    ASSERT_NE(h.gpu(), nullptr);
    CudaBackend* b = h.gpu();
    for (int64_t nt : {1, 16}) {
      SCOPED_TRACE(absl::StrCat("MINFER_MMQ=", mmq, " nt ", nt));
      Node mm = MakeNode(OpKind::kMatMul, Shape(rows, nt), {&w->w});
      mm.inputs = {0};
      Node cp = MakeNode(OpKind::kScale, Shape(k, nt));
      cp.inputs = {0};
      cp.p.scale = 1.0f;
      auto x1 = RandomFloats(k * nt), x2 = RandomFloats(k * nt);
      auto in = b->AllocBuffer(k * nt * 4), src = b->AllocBuffer(k * nt * 4);
      auto y1 = b->AllocBuffer(rows * nt * 4), y2 = b->AllocBuffer(rows * nt * 4);
      ASSERT_TRUE(in.ok() && src.ok() && y1.ok() && y2.ok());
      BufferRef xin{b, *in, 0, k * nt * 4}, xsrc{b, *src, 0, k * nt * 4};
      ASSERT_TRUE(b->WriteHost(xin, x1.data(), xin.bytes).ok());
      ASSERT_TRUE(b->WriteHost(xsrc, x2.data(), xsrc.bytes).ok());
      ExecArgs a1;
      a1.inputs = {xin};
      a1.output = BufferRef{b, *y1, 0, rows * nt * 4};
      ASSERT_TRUE(b->ExecuteNode(mm, a1).ok());
      // A node overwrites the input buffer with x2 inside the same window.
      ExecArgs ac;
      ac.inputs = {xsrc};
      ac.output = xin;
      ASSERT_TRUE(b->ExecuteNode(cp, ac).ok());
      ExecArgs a2 = a1;
      a2.output = BufferRef{b, *y2, 0, rows * nt * 4};
      ASSERT_TRUE(b->ExecuteNode(mm, a2).ok());
      ASSERT_TRUE(b->Synchronize().ok());
      std::vector<float> g1(rows * nt), g2(rows * nt), c1, c2, unused;
      ASSERT_TRUE(b->ReadHost(a1.output, g1.data(), a1.output.bytes).ok());
      ASSERT_TRUE(b->ReadHost(a2.output, g2.data(), a2.output.bytes).ok());
      h.Run(mm, {Bytes(x1)}, &c1, &unused);
      h.Run(mm, {Bytes(x2)}, &c2, &unused);
      // (16 tokens of a Q4_K weight: the DQ GEMM, within its f16 bound; a
      // stale activation would be off by ~1.)
      const double bound = nt >= 9 && mmq[0] == '0' ? 1e-2 : nt >= 4 ? 3e-3 : 1e-5;
      EXPECT_LT(RelErr(g1, c1), bound);
      EXPECT_LT(RelErr(g2, c2), bound);
    }
  }
}

TEST_F(CudaBackendOpTest, GetRowsEveryType) {
  for (GgmlType t : kAllTypes) {
    SCOPED_TRACE(GgmlTypeName(t));
    auto w = MakeWeight("embd", t, 256, 97);
    OpHarness h({&w->w});
    ASSERT_NE(h.gpu(), nullptr);
    Node gr = MakeNode(OpKind::kGetRows, Shape(256, 6), {&w->w});
    gr.inputs = {0};
    std::vector<int32_t> ids = {0, 96, 5, 5, 50, 1};
    std::vector<float> c, g;
    h.Run(gr, {Bytes(ids)}, &c, &g);
    EXPECT_EQ(g, c) << "dequantize-on-gather must be bit-exact";
  }
}

struct AttnCase {
  int n_head, n_head_kv, head_dim;
  DType kv;
  int64_t n_ctx, pos0, nt;
};

TEST_F(CudaBackendOpTest, KvStoreAndAttention) {
  OpHarness h({});
  ASSERT_NE(h.gpu(), nullptr);
  const AttnCase cases[] = {
      {14, 2, 64, DType::kF32, 64, 0, 1},     {14, 2, 64, DType::kF32, 64, 30, 1},
      {28, 4, 128, DType::kF16, 4200, 32, 1}, {28, 4, 128, DType::kF16, 4200, 4095, 1},
      {8, 8, 64, DType::kQ8_0, 128, 40, 1},   {28, 4, 128, DType::kF16, 512, 7, 9},
      {14, 2, 64, DType::kF32, 512, 100, 300},
  };
  for (const AttnCase& ac : cases) {
    SCOPED_TRACE(absl::StrCat("heads ", ac.n_head, "/", ac.n_head_kv, " hd ", ac.head_dim, " kv ",
                              graph::DTypeName(ac.kv), " pos0 ", ac.pos0, " nt ", ac.nt));
    graph::KvLayout kv{ac.kv, ac.n_ctx, static_cast<int64_t>(ac.n_head_kv) * ac.head_dim};
    // Fill the history [0, pos0) through the CPU's store so both caches
    // start identical, then store the new tokens on each backend and attend.
    std::vector<float> hist_k = RandomFloats(kv.n_kv_embd * ac.n_ctx),
                       hist_v = RandomFloats(kv.n_kv_embd * ac.n_ctx);
    std::string init_k(kv.row_bytes() * ac.n_ctx, '\0'), init_v = init_k;
    {
      cpu::CpuBackend tmp;
      // Encode rows in the cache format with the CPU store (positions 0..).
      std::vector<int32_t> all_pos(ac.n_ctx);
      for (int64_t i = 0; i < ac.n_ctx; ++i) all_pos[i] = static_cast<int32_t>(i);
      Node st = MakeNode(OpKind::kKvcacheStore, Shape(1));
      st.inputs = {0, 1, 2};
      std::vector<float> unused_c, unused_g;
      std::string kc, gk;
      h.Run(st, {Bytes(hist_k), Bytes(hist_v), Bytes(all_pos)}, &unused_c, &unused_g, &kv, nullptr,
            nullptr, &kc, &gk);
      EXPECT_EQ(kc, gk) << "KV store bytes differ between backends";
      init_k = kc;
      init_v = kc;  // values need not differ from keys for the attention check
    }
    std::vector<int32_t> pos(ac.nt);
    for (int64_t t = 0; t < ac.nt; ++t) pos[t] = static_cast<int32_t>(ac.pos0 + t);
    Node attn = MakeNode(OpKind::kAttn, Shape(static_cast<int64_t>(ac.head_dim) * ac.n_head, ac.nt));
    attn.p.n_head = ac.n_head;
    attn.p.n_head_kv = ac.n_head_kv;
    attn.p.head_dim = ac.head_dim;
    attn.p.scale = 1.0f / std::sqrt(static_cast<float>(ac.head_dim));
    attn.p.layer = 0;
    attn.inputs = {0, 1, 2, 3};
    auto q = RandomFloats(static_cast<size_t>(ac.head_dim) * ac.n_head * ac.nt);
    std::vector<float> c, g;
    h.Run(attn, {Bytes(q), std::string(4, '\0'), std::string(4, '\0'), Bytes(pos)}, &c, &g, &kv,
          &init_k, &init_v);
    EXPECT_LT(RelErr(g, c), 1e-5);
  }
}

// The decode fusions on the GPU compute what the CPU's do.
TEST_F(CudaBackendOpTest, DecodeFusions) {
  for (GgmlType t : {GgmlType::kQ4_K, GgmlType::kQ8_0, GgmlType::kF16}) {
    SCOPED_TRACE(GgmlTypeName(t));
    const int64_t k = 512, nq = 512, nkv = 128, nff = 768;
    auto wq = MakeWeight("wq", t, k, nq), wk = MakeWeight("wk", t, k, nkv),
         wv = MakeWeight("wv", GgmlType::kQ6_K, k, nkv);
    auto wg = MakeWeight("wg", t, k, nff), wu = MakeWeight("wu", t, k, nff);
    auto bq = MakeWeight("bq", GgmlType::kF32, nq, 1), bk = MakeWeight("bk", GgmlType::kF32, nkv, 1),
         bv = MakeWeight("bv", GgmlType::kF32, nkv, 1);
    auto qn = MakeWeight("qn", GgmlType::kF32, 64, 1), kn = MakeWeight("kn", GgmlType::kF32, 64, 1);
    OpHarness h({&wq->w, &wk->w, &wv->w, &wg->w, &wu->w, &bq->w, &bk->w, &bv->w, &qn->w, &kn->w});
    ASSERT_NE(h.gpu(), nullptr);
    auto x = RandomFloats(k);
    std::vector<float> c, g;
    Node qkv = MakeNode(OpKind::kFusedQKV, Shape(nq + 2 * nkv, 1), {&wq->w, &wk->w, &wv->w});
    qkv.inputs = {0};
    h.Run(qkv, {Bytes(x)}, &c, &g);
    EXPECT_LT(RelErr(g, c), 1e-5);
    Node ffn = MakeNode(OpKind::kFusedFFN, Shape(nff, 1), {&wg->w, &wu->w});
    ffn.inputs = {0};
    h.Run(ffn, {Bytes(x)}, &c, &g);
    EXPECT_LT(RelErr(g, c), 1e-5);
    // Bias + rope + store: q out and the stored K row agree.
    graph::KvLayout kv{DType::kF32, 16, nkv};
    Node brs = MakeNode(OpKind::kQkvBiasRopeStore, Shape(64, 8, 1), {&bq->w, &bk->w, &bv->w});
    brs.p.n_head = 8;
    brs.p.n_head_kv = 2;
    brs.p.head_dim = 64;
    brs.p.rope_base = 1e6f;
    brs.p.n_rot = 64;
    brs.p.layer = 0;
    brs.inputs = {0, 1};
    auto qkv_in = RandomFloats(nq + 2 * nkv);
    std::vector<int32_t> pos = {9};
    std::string ck, gk;
    h.Run(brs, {Bytes(qkv_in), Bytes(pos)}, &c, &g, &kv, nullptr, nullptr, &ck, &gk);
    EXPECT_LT(RelErr(g, c), 1e-5);
    std::vector<float> ckf(ck.size() / 4), gkf(gk.size() / 4);
    std::memcpy(ckf.data(), ck.data(), ck.size());
    std::memcpy(gkf.data(), gk.data(), gk.size());
    EXPECT_LT(RelErr(gkf, ckf), 1e-5);
    // With Qwen3's per-head q/k norms (weights [4], [5]; no RoPE factors).
    Node nrs = brs;
    nrs.weights = {&bq->w, &bk->w, &bv->w, nullptr, &qn->w, &kn->w};
    nrs.p.eps = 1e-6f;
    std::string ck2, gk2;
    h.Run(nrs, {Bytes(qkv_in), Bytes(pos)}, &c, &g, &kv, nullptr, nullptr, &ck2, &gk2);
    EXPECT_LT(RelErr(g, c), 1e-5);
    std::vector<float> ckf2(ck2.size() / 4), gkf2(gk2.size() / 4);
    std::memcpy(ckf2.data(), ck2.data(), ck2.size());
    std::memcpy(gkf2.data(), gk2.data(), gk2.size());
    EXPECT_LT(RelErr(gkf2, ckf2), 1e-5);
    // The norms did act: the stored K row differs from the unnormed one.
    EXPECT_GT(RelErr(ckf2, ckf), 1e-2);
  }
}

// --- mixture of experts -----------------------------------------------------------

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// A 3-D expert weight [k, rows, n_exp] (expert e: rows e * rows ..).
std::unique_ptr<TestWeight> MakeExperts(const std::string& name, GgmlType type, int64_t k,
                                        int64_t rows, int64_t n_exp) {
  auto tw = MakeWeight(name, type, k, rows * n_exp, 0.1f);
  tw->w.dims = {k, rows, n_exp};
  return tw;
}

// The router's logits [nt][n_exp]: random, with exact ties (equal logits
// in one row: the lower id first on both sides) in every fifth token.
std::vector<float> RouterLogits(int64_t n_exp, int64_t nt) {
  std::vector<float> l = RandomFloats(n_exp * nt, 2.0f);
  for (int64_t t = 0; t < nt; t += 5) {
    float* r = l.data() + t * n_exp;
    r[n_exp - 1] = r[0] = r[n_exp / 2];
  }
  return l;
}

// One MoE FFN's expert types and activation (the MoeFFN tests' cases).
struct MoeCase {
  const char* name;
  GgmlType gate, up, down;
  bool biases;  // gpt-oss's gate/up/down biases
  graph::MoeAct act;
};

// A case's experts, gate/up E -> F and down F -> E for n_exp experts, with
// the biases when the case has them; ws in MoeFFN's weight order.
struct MoeExperts {
  MoeExperts(const MoeCase& c, int64_t E, int64_t F, int64_t n_exp)
      : G(MakeExperts("gate_exps", c.gate, E, F, n_exp)),
        U(MakeExperts("up_exps", c.up, E, F, n_exp)),
        D(MakeExperts("down_exps", c.down, F, E, n_exp)),
        bg(MakeWeight("gate_b", GgmlType::kF32, F, n_exp, 0.5f)),
        bu(MakeWeight("up_b", GgmlType::kF32, F, n_exp, 0.5f)),
        bd(MakeWeight("down_b", GgmlType::kF32, E, n_exp, 0.5f)) {
    ws = {&G->w, &U->w, &D->w};
    if (c.biases) ws.insert(ws.end(), {&bg->w, &bu->w, &bd->w});
  }
  std::unique_ptr<TestWeight> G, U, D, bg, bu, bd;
  std::vector<const graph::Weight*> ws;
};

// The route both backends read: the CPU's MoeRoute (normalized top-k) of
// random logits; empty on failure.
std::vector<float> CpuRoute(int64_t n_exp, int k, int64_t nt) {
  graph::OpParams rp;
  rp.n_expert_used = k;
  rp.moe_norm = true;
  std::vector<float> route(2 * k * nt);
  if (!cpu::MoeRouteRows(RouterLogits(n_exp, nt).data(), n_exp, nt, rp, route.data()).ok()) {
    return {};
  }
  return route;
}

// A MoeFFN node of case c over e's weights: E outputs for nt tokens, inputs
// x and the route (and a residual when asked).
Node MoeNode(const MoeCase& c, const MoeExperts& e, int64_t E, int64_t nt, int64_t n_exp, int k,
             bool residual = false) {
  Node n = MakeNode(OpKind::kMoeFFN, Shape(E, nt), e.ws);
  n.inputs = {0, 1};
  if (residual) n.inputs.push_back(2);
  n.p.n_expert = static_cast<int32_t>(n_exp);
  n.p.n_expert_used = k;
  n.p.moe_act = c.act;
  return n;
}

// MoeRoute: the chosen ids equal the CPU's bit for bit (ties included);
// the weights within 2e-6 relative (expf against std::exp, the same double
// sums), for every gating, normalization and scale, k up to 32 of 256.
TEST_F(CudaBackendOpTest, MoeRouteEqualsCpu) {
  OpHarness h({});
  ASSERT_NE(h.gpu(), nullptr);
  struct Case {
    int n_exp, k;
    graph::MoeGating gating;
    bool norm;
    float scale;
  };
  const Case cases[] = {{16, 4, graph::MoeGating::kSoftmax, true, 0.0f},
                        {128, 8, graph::MoeGating::kSoftmax, true, 0.0f},
                        {128, 8, graph::MoeGating::kSoftmax, false, 2.5f},
                        {32, 4, graph::MoeGating::kSoftmaxWeight, false, 0.0f},
                        {256, 32, graph::MoeGating::kSoftmaxWeight, true, 0.5f},
                        {7, 7, graph::MoeGating::kSoftmax, false, 0.0f},
                        {60, 1, graph::MoeGating::kSoftmax, true, 0.0f}};
  for (const Case& c : cases) {
    // gpt-oss's router bias rides on the route (weights[0]); the CPU adds
    // it as Add(logits, bias) would.
    auto bias = MakeWeight("router.bias", GgmlType::kF32, c.n_exp, 1, 1.0f);
    OpHarness hb({&bias->w});
    ASSERT_NE(hb.gpu(), nullptr);
    for (int64_t nt : {1, 9, 70})
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE(absl::StrCat(c.n_exp, " experts, k ", c.k, ", gating ",
                                static_cast<int>(c.gating), ", nt ", nt, ", bias ", with_bias));
      Node n = MakeNode(OpKind::kMoeRoute, Shape(2 * c.k, nt));
      if (with_bias) n.weights = {&bias->w};
      n.inputs = {0};
      n.p.n_expert = c.n_exp;
      n.p.n_expert_used = c.k;
      n.p.moe_gating = c.gating;
      n.p.moe_norm = c.norm;
      n.p.moe_scale = c.scale;
      ASSERT_TRUE(h.gpu()->SupportsOp(n));
      std::vector<float> cr, gr;
      (with_bias ? hb : h).Run(n, {Bytes(RouterLogits(c.n_exp, nt))}, &cr, &gr);
      ASSERT_EQ(cr.size(), gr.size());
      for (int64_t t = 0; t < nt; ++t) {
        for (int j = 0; j < c.k; ++j) {
          const int64_t wi = t * 2 * c.k + j, ii = wi + c.k;
          EXPECT_EQ(FloatBits(gr[ii]), FloatBits(cr[ii])) << "token " << t << " choice " << j;
          EXPECT_NEAR(gr[wi], cr[wi], 2e-6 * std::fabs(cr[wi]) + 1e-30)
              << "token " << t << " choice " << j;
        }
      }
    }
  }
  Node big = MakeNode(OpKind::kMoeRoute, Shape(2 * 8, 1));
  big.p.n_expert = kMoeMaxExperts + 1;
  big.p.n_expert_used = 8;
  EXPECT_FALSE(h.gpu()->SupportsOp(big));
}

// The decode route-and-group launch writes what the route launch and then
// the group launch write, bit for bit: the route (weights and ids), order,
// slot, the tiles and their count; 1..8 tokens, both gatings, k up to 32 of
// 256, tied logits included, with PDL on where the device has it.
TEST_F(CudaBackendOpTest, MoeRouteGroupEqualsRouteThenGroup) {
  struct Case {
    int n_exp, k, gating;
    bool norm;
  };
  const Case cases[] = {{128, 8, 0, true}, {16, 4, 1, false}, {256, 32, 0, true},
                        {7, 7, 0, false},  {60, 1, 1, true}};
  int device = 0, major = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
            cudaSuccess);
  SetProgrammaticLaunch(major >= 9);
  for (const Case& c : cases) {
    for (int nt = 1; nt <= kMoeRouteGroupMaxTokens; ++nt) {
      SCOPED_TRACE(absl::StrCat(c.n_exp, " experts, k ", c.k, ", gating ", c.gating, ", nt ", nt));
      const int tt = MoeTileTokens(nt);
      const int a_count = nt * c.k;
      const int64_t max_tiles = MoeMaxTiles(nt, c.k, c.n_exp, tt);
      testing::DeviceBuffer<float> logits(RouterLogits(c.n_exp, nt));
      MoeRouteArgs a;
      a.n_expert = c.n_exp;
      a.k = c.k;
      a.gating = c.gating;
      a.norm = c.norm;
      struct Out {
        testing::DeviceBuffer<float> route;
        testing::DeviceBuffer<int32_t> order, slot, n_tiles;
        testing::DeviceBuffer<int4> tiles;
        Out(int64_t r, int64_t a, int64_t t) : route(r), order(a), slot(a), n_tiles(1), tiles(t) {
          route.Poison(), order.Poison(), slot.Poison(), n_tiles.Poison(), tiles.Poison();
        }
        MoeGroups groups() const { return {order.get(), slot.get(), tiles.get(), n_tiles.get()}; }
      };
      Out two(2 * c.k * nt, a_count, max_tiles), one(2 * c.k * nt, a_count, max_tiles);
      ASSERT_EQ(LaunchMoeRoute(logits.get(), nt, a, two.route.get(), nullptr), cudaSuccess);
      ASSERT_EQ(LaunchMoeGroup(two.route.get(), nt, c.k, c.n_exp, tt, two.groups(), nullptr,
                               nullptr),
                cudaSuccess);
      ASSERT_EQ(LaunchMoeRouteGroup(logits.get(), nt, a, one.route.get(), tt, one.groups(),
                                    nullptr, nullptr),
                cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto r2 = two.route.ToHost(), r1 = one.route.ToHost();
      EXPECT_EQ(std::memcmp(r1.data(), r2.data(), r1.size() * 4), 0);
      EXPECT_EQ(one.order.ToHost(), two.order.ToHost());
      EXPECT_EQ(one.slot.ToHost(), two.slot.ToHost());
      const int32_t n_tiles = two.n_tiles.ToHost()[0];
      ASSERT_EQ(one.n_tiles.ToHost()[0], n_tiles);
      ASSERT_GE(n_tiles, 1);
      ASSERT_LE(n_tiles, max_tiles);
      const auto t1 = one.tiles.ToHost(), t2 = two.tiles.ToHost();
      int32_t columns = 0;
      for (int32_t i = 0; i < n_tiles; ++i) {
        EXPECT_EQ(t1[i].x, t2[i].x) << "tile " << i;
        EXPECT_EQ(t1[i].y, t2[i].y) << "tile " << i;
        EXPECT_EQ(t1[i].z, t2[i].z) << "tile " << i;
        columns += t2[i].z;
      }
      EXPECT_EQ(columns, a_count);  // every assignment in exactly one tile
      // Both against the grouping computed here from the route's ids:
      // experts in ascending order, each one's assignments in ascending
      // order, tiles of at most tt columns.
      std::vector<int32_t> want_order, want_slot(a_count, -1);
      std::vector<std::array<int32_t, 3>> want_tiles;
      for (int e = 0; e < c.n_exp; ++e) {
        const int32_t first = static_cast<int32_t>(want_order.size());
        for (int i = 0; i < a_count; ++i) {
          int32_t id;
          std::memcpy(&id, &r2[(i / c.k) * 2 * c.k + c.k + i % c.k], sizeof id);
          if (id != e) continue;
          want_slot[i] = static_cast<int32_t>(want_order.size());
          want_order.push_back(i);
        }
        const int32_t n = static_cast<int32_t>(want_order.size()) - first;
        for (int32_t col = 0; col < n; col += tt) {
          want_tiles.push_back({e, first + col, std::min<int32_t>(tt, n - col)});
        }
      }
      EXPECT_EQ(one.order.ToHost(), want_order);
      EXPECT_EQ(one.slot.ToHost(), want_slot);
      ASSERT_EQ(n_tiles, static_cast<int32_t>(want_tiles.size()));
      for (int32_t i = 0; i < n_tiles; ++i) {
        EXPECT_EQ((std::array<int32_t, 3>{t1[i].x, t1[i].y, t1[i].z}), want_tiles[i])
            << "tile " << i;
      }
    }
  }
  SetProgrammaticLaunch(false);
  // Past a warp per token, and a tile wider than any grouping takes.
  testing::DeviceBuffer<float> l(RouterLogits(16, 9)), r(2 * 4 * 9);
  MoeRouteArgs a;
  a.n_expert = 16;
  a.k = 4;
  const MoeGroups none{};
  EXPECT_EQ(LaunchMoeRouteGroup(l.get(), 9, a, r.get(), 8, none, nullptr, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(LaunchMoeRouteGroup(l.get(), 2, a, r.get(), 64, none, nullptr, nullptr),
            cudaErrorInvalidValue);
}

// MoeFFN against the CPU's grouped expert FFN with the same route: SiLU
// experts of each integer-dot type (gate/up fused), gate and up of
// different types, and gpt-oss's form (biases, the clamped SwiGLU), at
// token counts on every tile width (1, 2, 4, 8 columns) up to a prefill,
// on the CUDA-core grouped matmul and (MINFER_MOE_MMA=1 from 2 tokens) the
// tensor-core one, whose 32-column tiles then cover 2..300 tokens (mostly
// empty n8 column tiles at the small counts: the pipelined kernel skips
// them).
// The dot products are the CPU's terms in another order; the intermediate
// activation is re-quantized on both sides, so an element that differs in
// the last bit may land one int8 step apart: the bound is 2e-3 relative
// (measured in the log).
TEST_F(CudaBackendOpTest, MoeFfnEqualsCpu) {
  const MoeCase cases[] = {
      {"q8_0", GgmlType::kQ8_0, GgmlType::kQ8_0, GgmlType::kQ8_0, false, graph::MoeAct::kSilu},
      {"q4_k/q6_k", GgmlType::kQ4_K, GgmlType::kQ4_K, GgmlType::kQ6_K, false,
       graph::MoeAct::kSilu},
      {"q5_k", GgmlType::kQ5_K, GgmlType::kQ5_K, GgmlType::kQ5_K, false, graph::MoeAct::kSilu},
      {"q4_0/q5_1", GgmlType::kQ4_0, GgmlType::kQ4_0, GgmlType::kQ5_1, false,
       graph::MoeAct::kSilu},
      {"mixed gate/up", GgmlType::kQ4_K, GgmlType::kQ8_0, GgmlType::kQ4_1, false,
       graph::MoeAct::kSilu},
      {"gpt-oss form", GgmlType::kQ8_0, GgmlType::kQ8_0, GgmlType::kQ5_0, true,
       graph::MoeAct::kSwigluOai},
      // gpt-oss's release: MXFP4 experts (the registry's split layout).
      {"mxfp4", GgmlType::kMXFP4, GgmlType::kMXFP4, GgmlType::kMXFP4, true,
       graph::MoeAct::kSwigluOai},
      {"mxfp4 silu", GgmlType::kMXFP4, GgmlType::kMXFP4, GgmlType::kMXFP4, false,
       graph::MoeAct::kSilu},
  };
  const int64_t E = 512, F = 256, n_exp = 16;
  const int k = 4;
  ScopedKnob mma_min("MINFER_MOE_MMA_MIN_TOKENS", "2");
  for (const char* mma : {"0", "1"})
  for (const MoeCase& c : cases) {
    ScopedKnob mma_on("MINFER_MOE_MMA", mma);
    SCOPED_TRACE(absl::StrCat(c.name, mma[0] == '1' ? " (tensor cores)" : ""));
    const MoeExperts experts(c, E, F, n_exp);
    const bool act_form = c.biases || c.act != graph::MoeAct::kSilu;
    OpHarness h(experts.ws);
    ASSERT_NE(h.gpu(), nullptr);
    for (int64_t nt : {1, 2, 3, 5, 8, 9, 40, 300}) {
      SCOPED_TRACE(absl::StrCat("nt ", nt));
      const std::vector<float> route = CpuRoute(n_exp, k, nt);
      ASSERT_FALSE(route.empty());
      const Node n = MoeNode(c, experts, E, nt, n_exp, k);
      ASSERT_TRUE(h.gpu()->SupportsOp(n));
      std::vector<float> cy, gy;
      const std::string x = Bytes(RandomFloats(E * nt, 1.0f));
      h.Run(n, {x, Bytes(route)}, &cy, &gy);
      const double err = RelErr(gy, cy);
      std::cout << c.name << (mma[0] == '1' ? " mma" : "") << " nt " << nt
                << ": relative error " << err << "\n";
      EXPECT_LT(err, 2e-3);
      if (act_form) {
        // The biases and activation in the gate/up epilogue
        // (MINFER_MOE_FUSED_ACT) against their own launch (the default):
        // the same bits, on either matmul.
        ScopedKnob fa("MINFER_MOE_FUSED_ACT", "1");
        std::vector<float> cy1, gy1;
        h.Run(n, {x, Bytes(route)}, &cy1, &gy1);
        EXPECT_EQ(gy1, gy) << "the fused activation differs from its launch";
      }
    }
    // Which kernel ran: the tensor cores when on from 2 tokens (the knob),
    // from 8 (4x) where an expert type is MXFP4 (ops_moe.cc): 7 or 4 of the
    // 8 sizes.
    const bool mx = c.gate == GgmlType::kMXFP4 || c.up == GgmlType::kMXFP4 ||
                    c.down == GgmlType::kMXFP4;
    const int on = mma[0] == '1' ? (mx ? 4 : 7) : 0;
    const int runs = act_form ? 2 : 1;  // (each size twice: fused and not)
    EXPECT_EQ(h.gpu()->stats().moe_mma, on * runs);
    EXPECT_EQ(h.gpu()->stats().moe_vector, (8 - on) * runs);
    EXPECT_EQ(h.gpu()->stats().moe_fused_act, act_form ? 8 : 0);
  }
}

// The decode fusions of the MoE FFN against the launches they replace, bit
// for bit: the down projection and the combine in one launch at one token
// (MINFER_MOE_DOWN_COMBINE), h quantized by the gate/up launch's last
// CTAs (MINFER_MOE_GATE_QUANT) and gpt-oss's biases and clamped SwiGLU in
// the gate/up epilogue (MINFER_MOE_FUSED_ACT), alone and together. Each expert type's unit
// decode (K-quants, legacy, MXFP4 with gpt-oss's biases and as SiLU), k = 1,
// 4 and 10 (past one warp per choice: the warps loop), with and without the
// residual, on every CUDA-core tile width (1, 2, 5, 8 tokens), each launch
// after the first finding the counters its predecessor left; the CPU's FFN
// as a sanity bound. The counters say which fusion really ran.
TEST_F(CudaBackendOpTest, MoeDecodeFusionsEqualTheLaunches) {
  const MoeCase cases[] = {
      {"q4_k/q6_k", GgmlType::kQ4_K, GgmlType::kQ4_K, GgmlType::kQ6_K, false,
       graph::MoeAct::kSilu},
      {"q8_0", GgmlType::kQ8_0, GgmlType::kQ8_0, GgmlType::kQ8_0, false, graph::MoeAct::kSilu},
      {"q4_0/q5_1", GgmlType::kQ4_0, GgmlType::kQ4_0, GgmlType::kQ5_1, false,
       graph::MoeAct::kSilu},
      {"q5_k/q4_k down", GgmlType::kQ5_K, GgmlType::kQ5_K, GgmlType::kQ4_K, false,
       graph::MoeAct::kSilu},
      {"mxfp4", GgmlType::kMXFP4, GgmlType::kMXFP4, GgmlType::kMXFP4, true,
       graph::MoeAct::kSwigluOai},
      {"mxfp4 silu", GgmlType::kMXFP4, GgmlType::kMXFP4, GgmlType::kMXFP4, false,
       graph::MoeAct::kSilu},
  };
  // The activation width E and the experts' F = 768: a down row of Q4_K /
  // Q6_K is 3 blocks, 12 units on 16 lanes (2 rows a warp); Q8_0's 24 on 32.
  const int64_t e_dim = 768, F = 768, n_exp = 16;
  int runs = 0;
  for (const MoeCase& c : cases) {
    const MoeExperts experts(c, e_dim, F, n_exp);
    const bool swiglu = !c.biases && c.act == graph::MoeAct::kSilu;
    // The form MINFER_MOE_FUSED_ACT moves into the epilogue (every case's
    // gate and up share a type).
    const bool act_form = !swiglu;
    OpHarness h(experts.ws);
    ASSERT_NE(h.gpu(), nullptr);
    for (int k : {1, 4, 10}) {
      for (bool with_residual : {false, true}) {
        for (int64_t nt : {1, 2, 5, 8}) {
          SCOPED_TRACE(absl::StrCat(c.name, " k ", k, with_residual ? " + residual" : "", " nt ",
                                    nt));
          const std::vector<float> route = CpuRoute(n_exp, k, nt);
          ASSERT_FALSE(route.empty());
          const Node n = MoeNode(c, experts, e_dim, nt, n_exp, k, with_residual);
          std::vector<std::string> in = {Bytes(RandomFloats(e_dim * nt, 1.0f)), Bytes(route)};
          if (with_residual) in.push_back(Bytes(RandomFloats(e_dim * nt, 2.0f)));
          std::vector<float> cy, gy;
          for (int form = 0; form < 8; ++form) {
            const bool down_combine = (form & 1) != 0, gate_quant = (form & 2) != 0;
            const bool fused_act = (form & 4) != 0;
            ScopedKnob dc("MINFER_MOE_DOWN_COMBINE", down_combine ? "1" : "0");
            ScopedKnob gq("MINFER_MOE_GATE_QUANT", gate_quant ? "1" : "0");
            ScopedKnob fa("MINFER_MOE_FUSED_ACT", fused_act ? "1" : "0");
            const CudaBackend::Stats before = h.gpu()->stats();
            std::vector<float> cy1, gy1;
            h.Run(n, in, &cy1, &gy1);
            const CudaBackend::Stats& after = h.gpu()->stats();
            EXPECT_EQ(after.moe_down_combine - before.moe_down_combine,
                      down_combine && nt == 1 ? 1 : 0)
                << "form " << form;
            const bool epilogue = swiglu || (act_form && fused_act);
            EXPECT_EQ(after.moe_gate_quant - before.moe_gate_quant,
                      gate_quant && epilogue ? 1 : 0)
                << "form " << form;
            EXPECT_EQ(after.moe_fused_act - before.moe_fused_act, act_form && fused_act ? 1 : 0)
                << "form " << form;
            if (form == 0) {
              cy = cy1, gy = gy1;
              EXPECT_LT(RelErr(gy, cy), 2e-3);
              continue;
            }
            ASSERT_EQ(cy1, cy);
            EXPECT_EQ(gy1, gy) << "form " << form << " (down+combine " << down_combine
                               << ", gate quant " << gate_quant << ", fused act " << fused_act
                               << ") differs from the launches";
          }
          ++runs;
        }
      }
    }
  }
  EXPECT_EQ(runs, 6 * 3 * 2 * 4);
}

// The MoE launchers refuse what moe.h's contracts exclude before touching
// the device (no GPU needed: these run in CI too): an up weight that does
// not match, Q6_K outside the registry's padded layout, unaligned rows,
// too many tiles for the grid, f16 on the tensor cores, bad route
// shapes.
TEST(MoeLauncherTest, RefusesArgumentsOutsideTheContract) {
  alignas(16) static uint8_t w_bytes[64];
  alignas(16) static float buf[64];
  alignas(16) static int4 tiles[4];
  static int32_t n_tiles[1];
  MoeMatmulArgs a;
  a.w.type = GgmlType::kQ8_0;
  a.w.data = w_bytes;
  a.w.k = 256;
  a.w.rows = 8;
  a.w.row_bytes = DeviceRowBytes(GgmlType::kQ8_0, 256);
  a.expert_rows = 4;
  a.n_expert = 2;
  a.q = reinterpret_cast<const BlockQ8A*>(buf);
  a.tiles = tiles;
  a.n_tiles = n_tiles;
  a.max_tiles = 0;  // a valid launch of nothing
  a.y = buf;
  a.y_stride = 4;
  a.tile_tokens = 8;
  EXPECT_EQ(LaunchMoeMatmul(a, nullptr), cudaSuccess);
  auto refused = [](MoeMatmulArgs b) { return LaunchMoeMatmul(b, nullptr) == cudaErrorInvalidValue; };
  MoeMatmulArgs b = a;
  b.mode = kMoeSwiGlu;  // no up weight
  EXPECT_TRUE(refused(b));
  b.up = a.w;
  b.up.k = 512;  // up of another shape
  EXPECT_TRUE(refused(b));
  b = a;
  b.mode = kMoePair;  // no y2
  b.up = a.w;
  EXPECT_TRUE(refused(b));
  b = a;
  b.w.rows = 9;  // not expert_rows x n_expert
  EXPECT_TRUE(refused(b));
  b = a;
  b.w.row_bytes += 2;  // not the registry's 16-byte rows
  EXPECT_TRUE(refused(b));
  b = a;
  b.w.type = GgmlType::kQ6_K;  // raw 210-byte Q6_K
  b.w.row_bytes = 224;
  EXPECT_TRUE(refused(b));
  b = a;
  b.w.type = GgmlType::kF16;  // no integer dot
  EXPECT_TRUE(refused(b));
  b = a;
  b.max_tiles = 65536;  // past grid.y
  EXPECT_TRUE(refused(b));
  b = a;
  b.y_stride = 3;  // rows overlap
  EXPECT_TRUE(refused(b));
  b = a;
  b.w.type = GgmlType::kF16;  // the tensor cores have no f16 decode
  b.tile_tokens = kMoeMmaTileTokens;
  EXPECT_EQ(LaunchMoeMatmulMma(b, nullptr), cudaErrorInvalidValue);
  b = a;  // the tensor cores take 32-column tiles only
  EXPECT_EQ(LaunchMoeMatmulMma(b, nullptr), cudaErrorInvalidValue);
  // The quantizing gate/up form: SwiGLU only, with its counters, y rows of
  // exactly expert_rows (a multiple of 32); not on the tensor cores.
  static int32_t done[4];
  alignas(16) static BlockQ8A q_out[4];
  b = a;
  b.expert_rows = 32;
  b.w.rows = 64;
  b.y_stride = 32;
  b.q_out = q_out;
  b.tile_done = done;
  EXPECT_TRUE(refused(b));  // kMoePlain
  b.mode = kMoeSwiGlu;
  b.up = b.w;
  EXPECT_EQ(LaunchMoeMatmul(b, nullptr), cudaSuccess);  // max_tiles 0: nothing to launch
  MoeMatmulArgs c = b;
  c.tile_done = nullptr;
  EXPECT_TRUE(refused(c));
  c = b;
  c.y_stride = 33;
  EXPECT_TRUE(refused(c));
  c = b;
  c.expert_rows = 16, c.w.rows = 32, c.up.rows = 32, c.y_stride = 16;
  EXPECT_TRUE(refused(c));
  c = b;
  c.tile_tokens = kMoeMmaTileTokens;
  EXPECT_EQ(LaunchMoeMatmulMma(c, nullptr), cudaErrorInvalidValue);
  // One token's down + combine: a plain, unmapped down; k in 1..kMoeMaxUsed;
  // a bias row as long as the output.
  static float route[2 * kMoeMaxUsed];
  static int32_t slot[kMoeMaxUsed];
  auto dc_refused = [&](const MoeMatmulArgs& d, int k, const float* bd, int64_t bd_stride) {
    return LaunchMoeDownCombine(d, route, slot, bd, bd_stride, k, nullptr, buf, nullptr) ==
           cudaErrorInvalidValue;
  };
  EXPECT_TRUE(dc_refused(a, 0, nullptr, 0));
  EXPECT_TRUE(dc_refused(a, kMoeMaxUsed + 1, nullptr, 0));
  EXPECT_TRUE(dc_refused(a, 2, buf, 3));  // bias stride under 4 rows
  c = a;
  c.mode = kMoeSwiGlu;
  c.up = a.w;
  EXPECT_TRUE(dc_refused(c, 2, nullptr, 0));
  c = a;
  c.act_map = slot;
  EXPECT_TRUE(dc_refused(c, 2, nullptr, 0));
  c = a;
  c.w.type = GgmlType::kF16;
  EXPECT_TRUE(dc_refused(c, 2, nullptr, 0));
  EXPECT_EQ(LaunchMoeDownCombine(a, nullptr, slot, nullptr, 0, 2, nullptr, buf, nullptr),
            cudaErrorInvalidValue);
  MoeRouteArgs r;
  r.n_expert = kMoeMaxExperts + 1;
  r.k = 8;
  EXPECT_EQ(LaunchMoeRoute(buf, 1, r, buf, nullptr), cudaErrorInvalidValue);
  r.n_expert = 8;
  r.k = 9;  // more choices than experts
  EXPECT_EQ(LaunchMoeRoute(buf, 1, r, buf, nullptr), cudaErrorInvalidValue);
  MoeGroups g;
  EXPECT_EQ(LaunchMoeGroup(buf, 4, 2, 8, 8, g, nullptr, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchMoeCombine(buf, buf, n_tiles, buf, 3, 1, 2, 4, nullptr, buf, nullptr),
            cudaErrorInvalidValue);  // bias stride below the row
}

// An expert type without an integer dot (f16) keeps the node off the GPU;
// MXFP4 outside an expert tensor is refused at upload, naming the tensor.
TEST_F(CudaBackendOpTest, MoeFfnRefusesExpertsWithoutAKernel) {
  OpHarness h({});
  ASSERT_NE(h.gpu(), nullptr);
  auto G = MakeExperts("gate_exps", GgmlType::kF16, 256, 64, 4);
  auto U = MakeExperts("up_exps", GgmlType::kQ8_0, 256, 64, 4);
  auto D = MakeExperts("down_exps", GgmlType::kQ8_0, 64, 256, 4);
  Node n = MakeNode(OpKind::kMoeFFN, Shape(256, 1), {&G->w, &U->w, &D->w});
  n.p.n_expert = 4;
  n.p.n_expert_used = 2;
  EXPECT_FALSE(h.gpu()->SupportsOp(n));
  auto G8 = MakeExperts("gate_exps", GgmlType::kQ8_0, 256, 64, 4);
  n.weights[0] = &G8->w;
  EXPECT_TRUE(h.gpu()->SupportsOp(n));
  auto flat = MakeWeight("flat_mxfp4", GgmlType::kMXFP4, 256, 64);
  auto state = CudaState::Get();
  ASSERT_TRUE(state.ok());
  auto b = CudaBackend::Create(*state, {&flat->w}, nullptr, nullptr);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("flat_mxfp4"), std::string::npos) << b.status();
}

// --- model level ----------------------------------------------------------------

std::shared_ptr<runtime::Model> Load(const std::string& shape, const std::string& type,
                                     const std::string& backend) {
  auto path = minfer::testing::TestModelPath(shape, type);
  EXPECT_TRUE(path.ok()) << path.status();
  if (!path.ok()) return nullptr;
  auto m = runtime::Model::Load(*path, {.backend = backend});
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : nullptr;
}

std::vector<int32_t> Greedy(const std::shared_ptr<runtime::Model>& m, std::vector<int32_t> prompt,
                            int n) {
  auto s = runtime::Session::Create(m, {.n_ctx = 256});
  EXPECT_TRUE(s.ok()) << s.status();
  runtime::GenerateRequest req;
  req.prompt = std::move(prompt);
  req.sampling.temperature = 0;
  req.max_tokens = n;
  req.ignore_eos = true;
  auto g = runtime::Generate(s->get(), std::move(req), nullptr);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? (*g)->output_tokens() : std::vector<int32_t>{};
}

class CudaModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { MINFER_REQUIRE_GPU(); }
};

// Greedy output of the CUDA path equals the CPU path's (Phase-7 gate), on a
// prompt long enough to take the GEMM arm (nt >= 9) and decode steps that
// take MMVQ + split-KV + the fusions + graph replay.
TEST_P(CudaModelTest, GreedyEqualsCpu) {
  for (const std::string shape : {"tiny", "tiny-untied", "llama-tiny"}) {
    SCOPED_TRACE(shape);
    auto cpu = Load(shape, GetParam(), "cpu");
    auto gpu = Load(shape, GetParam(), "cuda");
    ASSERT_TRUE(cpu && gpu);
    EXPECT_TRUE(gpu->gpu());
    std::vector<int32_t> prompt = {100, 200, 300, 17, 18, 19, 999, 5, 6, 7, 8, 1000};
    EXPECT_EQ(Greedy(gpu, prompt, 32), Greedy(cpu, prompt, 32));
  }
}

// Greedy output of the CUDA path equals the CPU path's on the tiny shapes
// (Qwen2 tied and untied, Llama 3) of `type`, for a 25-token prompt (the GEMM/MMQ arm, and >= 16 tokens for
// the tensor-core prefill attention), with whatever knobs the caller set.
void ExpectGreedyEqualsCpu(const std::string& type) {
  for (const std::string shape : {"tiny", "tiny-untied", "llama-tiny"}) {
    SCOPED_TRACE(shape);
    auto cpu = Load(shape, type, "cpu");
    auto gpu = Load(shape, type, "cuda");
    ASSERT_TRUE(cpu && gpu);
    std::vector<int32_t> prompt = {100, 200, 300, 17, 18, 19, 999, 5, 6, 7, 8, 1000,
                                   1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
    EXPECT_EQ(Greedy(gpu, prompt, 32), Greedy(cpu, prompt, 32));
  }
}

// The int8 MMQ prefill GEMM (MINFER_MMQ=1) for every quantized type: its
// integer math is the CPU's, so greedy output is equal.
TEST_P(CudaModelTest, GreedyEqualsCpuWithMmq) {
  if (GetParam() == "f32" || GetParam() == "f16" || GetParam() == "bf16") GTEST_SKIP();
  ScopedKnob mmq("MINFER_MMQ", "1");
  ExpectGreedyEqualsCpu(GetParam());
}

// The tensor-core prefill attention (MINFER_ATTN_PREFILL_TC=1) over an f16
// KV cache on both sides.
TEST_P(CudaModelTest, GreedyEqualsCpuWithTensorCorePrefillAttention) {
  ScopedKnob tc("MINFER_ATTN_PREFILL_TC", "1");
  ScopedKnob kv("MINFER_CACHE_TYPE", "f16");
  ExpectGreedyEqualsCpu(GetParam());
}

// Mixtures of experts on the GPU — qwen3moe-tiny (16 experts, 4 per
// token) and gpt-oss-tiny (its MXFP4 release form too: sinks, sliding
// windows, YaRN, biases, the clamped SwiGLU): the router, grouping and
// expert kernels under graph capture and replay; greedy output equals the
// CPU's.
TEST(CudaMoeModelTest, GreedyEqualsCpu) {
  MINFER_REQUIRE_GPU();
  for (const auto& [shape, type] : {std::pair<std::string, std::string>{"qwen3moe-tiny", "q8_0"},
                                    {"qwen3moe-tiny", "q4_k_m"},
                                    {"gpt-oss-tiny", "q8_0"},
                                    {"gpt-oss-tiny", "mxfp4_moe"}}) {
    SCOPED_TRACE(shape + " " + type);
    auto cpu = Load(shape, type, "cpu");
    auto gpu = Load(shape, type, "cuda");
    ASSERT_TRUE(cpu && gpu);
    EXPECT_TRUE(gpu->gpu());
    std::vector<int32_t> prompt = {100, 200, 300, 17, 18, 19, 999, 5, 6, 7, 8, 1000,
                                   1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
    const auto g = Greedy(gpu, prompt, 40);
    EXPECT_EQ(g, Greedy(cpu, prompt, 40));
    EXPECT_GE(std::set<int32_t>(g.begin(), g.end()).size(), 6u);
    // Decode steps routed and grouped in one launch (MINFER_MOE_ROUTE_GROUP).
    auto* cb = dynamic_cast<CudaBackend*>(gpu->kv_backend());
    ASSERT_NE(cb, nullptr);
    EXPECT_GT(cb->stats().moe_route_group, 0);
  }
}

// MINFER_ATTN_Q8: decode attention writes its output's q8 plane for the
// output projection. Greedy ids still equal the CPU's (dense and MoE), and
// the projection's quantize launches really went away (one per layer and
// decode step fewer than with the knob off).
TEST(CudaAttnQ8Test, GreedyEqualsCpuAndQuantizeLaunchesDrop) {
  MINFER_REQUIRE_GPU();
  for (const auto& [shape, type] : {std::pair<std::string, std::string>{"tiny", "q4_k_m"},
                                    {"qwen3moe-tiny", "q4_k_m"}}) {
    SCOPED_TRACE(shape);
    auto cpu = Load(shape, type, "cpu");
    ASSERT_TRUE(cpu);
    const std::vector<int32_t> prompt = {100, 200, 300, 17, 18, 19, 999, 5, 6, 7, 8};
    const auto want = Greedy(cpu, prompt, 24);
    int64_t launches[2] = {0, 0};
    for (int on = 0; on < 2; ++on) {
      ScopedKnob q8("MINFER_ATTN_Q8", on ? "1" : "0");
      auto gpu = Load(shape, type, "cuda");
      ASSERT_TRUE(gpu);
      EXPECT_EQ(Greedy(gpu, prompt, 24), want) << "MINFER_ATTN_Q8=" << on;
      auto* cb = dynamic_cast<CudaBackend*>(gpu->kv_backend());
      ASSERT_NE(cb, nullptr);
      launches[on] = cb->stats().quantize_launches;
    }
    const int64_t layers = cpu->hparams().n_layer;
    // (Only the steps that run the handlers count launches, not graph
    // replays: at least one decode step of every layer does.)
    EXPECT_LT(launches[1], launches[0]);
    EXPECT_GE(launches[0] - launches[1], layers) << launches[0] << " vs " << launches[1];
  }
}

// MINFER_FP8_PREFILL on the GPU (the e4m3 GEMM on copies made at load)
// against the CPU backend's emulation of the same path, its reference: on
// the tiny Q8_0 and F16 files the copies exist, the 25-token prefill (a
// step of 32 tokens, over the knob's 8) runs fp8 GEMMs, and greedy output
// equals the CPU's with the knob on there too (the two differ only in the
// order and width of the accumulation: fp8_gemm.h).
TEST(CudaFp8Test, GreedyEqualsTheCpuEmulation) {
  MINFER_REQUIRE_GPU();
  int dev = 0, major = 0, minor = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (!Fp8GemmRuns(major * 100 + minor * 10)) GTEST_SKIP() << "needs sm_89+";
  ScopedKnob fp8("MINFER_FP8_PREFILL", "8");
  for (const auto& [shape, type] : {std::pair<std::string, std::string>{"tiny", "q8_0"},
                                    {"llama-tiny", "q8_0"},
                                    {"tiny", "f16"}}) {
    SCOPED_TRACE(shape + " " + type);
    auto cpu = Load(shape, type, "cpu");
    auto gpu = Load(shape, type, "cuda");
    ASSERT_TRUE(cpu && gpu);
    auto* cb = dynamic_cast<CudaBackend*>(gpu->kv_backend());
    ASSERT_NE(cb, nullptr);
    EXPECT_GT(cb->fp8_copies(), 0);
    EXPECT_GT(cb->fp8_copy_bytes(), 0);
    std::vector<int32_t> prompt = {100, 200, 300, 17, 18, 19, 999, 5, 6, 7, 8, 1000,
                                   1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
    const auto g = Greedy(gpu, prompt, 24);
    EXPECT_EQ(g, Greedy(cpu, prompt, 24));
    EXPECT_GT(cb->stats().fp8_gemm, 0);
    auto* cc = dynamic_cast<cpu::CpuBackend*>(cpu->kv_backend());
    ASSERT_NE(cc, nullptr);
    EXPECT_GT(cc->fp8_matmuls(), 0);
  }
}

// The same gate at a real shape: Qwen2.5-0.5B Q4_K_M (q5_0/q8_0/q4_K/q6_K mix,
// 24 layers, tied 151936-row head), a prompt in ChatML framing.
TEST(CudaModelRealShapeTest, GreedyEqualsCpuOn05B) {
  MINFER_REQUIRE_GPU();
  auto cpu = Load("0.5b", "q4_k_m", "cpu");
  auto gpu = Load("0.5b", "q4_k_m", "cuda");
  ASSERT_TRUE(cpu && gpu);
  std::vector<int32_t> prompt = {151644, 872, 198, 9707, 11, 1879, 0, 576, 4128, 374, 264,
                                 151645, 198, 151644, 77091, 198};
  EXPECT_EQ(Greedy(gpu, prompt, 32), Greedy(cpu, prompt, 32));
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CudaModelTest,
                         ::testing::Values("f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1",
                                           "q8_0", "q4_k", "q5_k", "q6_k", "q4_k_m", "q5_k_m"));

TEST(CudaGraphTest, ReplayIsBitIdenticalToDirectLaunch) {
  MINFER_REQUIRE_GPU();
  auto run = [](bool graphs, int64_t* captures, int64_t* replays) {
    EXPECT_TRUE(KnobRegistry::Global().Set("MINFER_NO_CUDA_GRAPH", graphs ? "0" : "1").ok());
    auto m = Load("tiny", "q4_k_m", "cuda");
    auto s = runtime::Session::Create(m, {.n_ctx = 64});
    std::vector<float> all;
    auto l = (*s)->Eval({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
    all.insert(all.end(), l->begin(), l->end());
    for (int i = 0; i < 12; ++i) {
      auto d = (*s)->Eval({static_cast<int32_t>(100 + i)});
      EXPECT_TRUE(d.ok()) << d.status();
      all.insert(all.end(), d->begin(), d->end());
    }
    auto* cb = dynamic_cast<CudaBackend*>(m->kv_backend());
    *captures = cb->stats().captures;
    *replays = cb->stats().replays;
    return all;
  };
  int64_t c1, r1, c2, r2;
  auto direct = run(false, &c1, &r1);
  auto replay = run(true, &c2, &r2);
  ASSERT_TRUE(KnobRegistry::Global().Reset("MINFER_NO_CUDA_GRAPH").ok());
  EXPECT_EQ(c1, 0);
  EXPECT_EQ(r1, 0);
  EXPECT_GE(c2, 1);
  EXPECT_GE(r2, 8);  // decode steps 4..12 replay
  ASSERT_EQ(direct.size(), replay.size());
  EXPECT_EQ(std::memcmp(direct.data(), replay.data(), direct.size() * 4), 0)
      << "graph replay must be bit-identical to direct launches";
}

// Programmatic dependent launch (MINFER_PDL, sm_90+: each kernel launches
// while the one before it finishes and waits on the device for its result)
// changes when kernels start, never what they compute: the same logits, bit
// for bit, with it on and off, over a prefill and graph-replayed decode
// steps of a dense and a MoE model. On a 9.0+ device the launches really
// asked for it; below, the knob leaves them plain.
TEST(CudaPdlTest, ProgrammaticLaunchKeepsLogitsBitIdentical) {
  MINFER_REQUIRE_GPU();
  auto state = CudaState::Get();
  ASSERT_TRUE(state.ok()) << state.status();
  const bool sm90 = (*state)->cc() >= 900;
  for (const auto& [shape, type] : {std::pair<std::string, std::string>{"tiny", "q4_k_m"},
                                    {"qwen3moe-tiny", "q4_k_m"}}) {
    SCOPED_TRACE(shape);
    std::vector<float> logits[2];
    for (int on = 0; on < 2; ++on) {
      ScopedKnob pdl("MINFER_PDL", on ? "1" : "0");
      auto m = Load(shape, type, "cuda");
      ASSERT_TRUE(m);
      auto s = runtime::Session::Create(m, {.n_ctx = 128});
      ASSERT_TRUE(s.ok()) << s.status();
      auto l = (*s)->Eval({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17});
      ASSERT_TRUE(l.ok()) << l.status();
      logits[on] = *l;
      for (int i = 0; i < 12; ++i) {
        auto d = (*s)->Eval({static_cast<int32_t>(100 + 7 * i)});
        ASSERT_TRUE(d.ok()) << d.status();
        logits[on].insert(logits[on].end(), d->begin(), d->end());
      }
      // (The session runs the backend on this thread, whose flag it sets.)
      EXPECT_EQ(ProgrammaticLaunch(), on == 1 && sm90);
      auto* cb = dynamic_cast<CudaBackend*>(m->kv_backend());
      ASSERT_NE(cb, nullptr);
      EXPECT_GE(cb->stats().replays, 8);
    }
    ASSERT_EQ(logits[0].size(), logits[1].size());
    EXPECT_EQ(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * 4), 0);
  }
}

TEST(CudaGraphTest, PrefillCaptureBitParity) {
  MINFER_REQUIRE_GPU();
  for (int64_t n : {16, 300}) {
    SCOPED_TRACE(n);
    auto m = Load("tiny", "q8_0", "cuda");
    auto s = runtime::Session::Create(m, {.n_ctx = 512});
    std::vector<int32_t> prompt(n);
    for (int64_t i = 0; i < n; ++i) prompt[i] = static_cast<int32_t>((i * 37) % 1000);
    std::vector<std::vector<float>> outs;
    for (int rep = 0; rep < 5; ++rep) {  // 1-2 direct, 3 captures, 4-5 replay
      (*s)->Reset();
      auto l = (*s)->Eval(prompt);
      ASSERT_TRUE(l.ok()) << l.status();
      outs.push_back(*l);
    }
    auto* cb = dynamic_cast<CudaBackend*>(m->kv_backend());
    EXPECT_GE(cb->stats().captures, 1);
    EXPECT_GE(cb->stats().replays, 2);
    for (int rep = 1; rep < 5; ++rep) {
      EXPECT_EQ(std::memcmp(outs[0].data(), outs[rep].data(), outs[0].size() * 4), 0) << rep;
    }
  }
}

TEST(CudaGraphTest, RecapturesAfterPoolGenChange) {
  MINFER_REQUIRE_GPU();
  auto m = Load("tiny", "q8_0", "cuda");
  auto s = runtime::Session::Create(m, {.n_ctx = 64});
  ASSERT_TRUE((*s)->Eval({1, 2, 3}).ok());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE((*s)->Eval({static_cast<int32_t>(10 + i)}).ok());
  auto* cb = dynamic_cast<CudaBackend*>(m->kv_backend());
  const int64_t captures = cb->stats().captures;
  EXPECT_GE(captures, 1);
  // Any allocation moves pool_gen: the recording is dropped and re-made.
  auto extra = cb->AllocBuffer(12345);
  ASSERT_TRUE(extra.ok());
  std::vector<float> last;
  for (int i = 0; i < 5; ++i) {
    auto l = (*s)->Eval({static_cast<int32_t>(20 + i)});
    ASSERT_TRUE(l.ok());
    last = *l;
  }
  EXPECT_GE(cb->stats().recaptures, 1);
  EXPECT_GT(cb->stats().captures, captures);
  // Same output as a fresh direct-launch session on the same tokens.
  ASSERT_TRUE(KnobRegistry::Global().Set("MINFER_NO_CUDA_GRAPH", "1").ok());
  auto m2 = Load("tiny", "q8_0", "cuda");
  auto s2 = runtime::Session::Create(m2, {.n_ctx = 64});
  ASSERT_TRUE((*s2)->Eval({1, 2, 3}).ok());
  std::vector<float> want;
  for (int32_t t : {10, 11, 12, 13, 14, 20, 21, 22, 23, 24}) want = *(*s2)->Eval({t});
  ASSERT_TRUE(KnobRegistry::Global().Reset("MINFER_NO_CUDA_GRAPH").ok());
  EXPECT_EQ(std::memcmp(want.data(), last.data(), want.size() * 4), 0);
}

// A node error inside a capture window aborts the capture loudly and the
// backend keeps working.
TEST(CudaGraphTest, CaptureAbortsOnNodeError) {
  MINFER_REQUIRE_GPU();
  auto w = MakeWeight("registered", GgmlType::kQ8_0, 256, 64);
  graph::Weight unregistered = w->w;
  unregistered.name = "not-registered";
  auto state = CudaState::Get();
  ASSERT_TRUE(state.ok());
  auto b = CudaBackend::Create(*state, std::vector<const graph::Weight*>{&w->w}, nullptr, nullptr);
  ASSERT_TRUE(b.ok());
  CudaBackend& cb = **b;
  auto in = cb.AllocBuffer(256 * 4), out = cb.AllocBuffer(64 * 4);
  ExecArgs a;
  a.inputs = {BufferRef{&cb, *in, 0, 256 * 4}};
  a.output = BufferRef{&cb, *out, 0, 64 * 4};
  auto x = RandomFloats(256);
  ASSERT_TRUE(cb.WriteHost(a.inputs[0], x.data(), 256 * 4).ok());
  Node good = MakeNode(OpKind::kMatMul, Shape(64, 1), {&w->w});
  Node bad = MakeNode(OpKind::kMatMul, Shape(64, 1), {&unregistered});
  for (int run = 1; run <= 3; ++run) {
    auto r = cb.GraphReplay(/*uid=*/777, 0, 1, 1);
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(*r);
    absl::Status st = cb.ExecuteNode(run == 3 ? bad : good, a);
    if (run == 3) {
      EXPECT_FALSE(st.ok());
      EXPECT_NE(st.message().find("not registered"), std::string::npos) << st;
    }
    EXPECT_TRUE(cb.Synchronize().ok());
  }
  EXPECT_EQ(cb.stats().captures, 0);
  // The backend still runs work afterwards.
  ASSERT_TRUE(cb.GraphReplay(778, 0, 1, 1).ok());
  EXPECT_TRUE(cb.ExecuteNode(good, a).ok());
  EXPECT_TRUE(cb.Synchronize().ok());
}

// A prefill of `shape` q4_k_m on the GPU (100 tokens: the tiled MMQ; 6..64
// would be a decode batch for the DQ GEMM) under the knobs the caller set:
// the logits and the backend's stats and plane bytes.
struct PrefillRun {
  std::vector<float> logits;
  CudaBackend::Stats stats;
  uint64_t plane_bytes = 0;
  uint64_t plane_formula = 0;  // MmqScalePlaneBytes summed over the model's weights
};
PrefillRun PrefillPrompt(const std::string& shape, int n_tokens = 100) {
  PrefillRun r;
  std::vector<int32_t> prompt(n_tokens);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(100 + (37 * i) % 900);
  auto m = Load(shape, "q4_k_m", "cuda");
  EXPECT_TRUE(m);
  if (!m) return r;
  auto s = runtime::Session::Create(m, {.n_ctx = std::max(128, n_tokens + 16)});
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return r;
  auto l = (*s)->Eval(prompt);
  EXPECT_TRUE(l.ok()) << l.status();
  if (l.ok()) r.logits = *l;
  const auto* b = dynamic_cast<CudaBackend*>(m->kv_backend());
  EXPECT_NE(b, nullptr);
  if (b == nullptr) return r;
  r.stats = b->stats();
  r.plane_bytes = b->scale_plane_bytes();
  for (const auto& w : m->arch().weights()) {
    if (w->dims.size() == 2) r.plane_formula += MmqScalePlaneBytes(w->type, w->ne0(), w->rows());
  }
  return r;
}

// Mode 2: prefill RmsNorm/SwiGLU outputs read only by MMQ GEMMs are written
// only as the GEMMs' int8 activations. Same logits, bit for bit, as writing
// the f32 outputs and quantizing them in the GEMM (MINFER_NO_SKIP_WRITE=1),
// on a tiny Q4_K_M model and on the 0.5B mix (q5_0/q8_0/q4_K/q6_K), and the
// producers really took the int8-only path.
TEST(CudaMode2Test, Int8OnlyProducersGiveTheSameLogits) {
  MINFER_REQUIRE_GPU();
  ScopedKnob no_dqw("MINFER_DQW", "0");  // (100 tokens: the Hopper DQ GEMM's, below)
  for (const char* shape : {"tiny", "0.5b"}) {
    SCOPED_TRACE(shape);
    std::vector<float> logits[2];
    int64_t int8_only[2] = {0, 0};
    for (int off = 0; off < 2; ++off) {
      ScopedKnob knob("MINFER_NO_SKIP_WRITE", off ? "1" : "0");
      const PrefillRun r = PrefillPrompt(shape);
      ASSERT_FALSE(r.logits.empty());
      logits[off] = r.logits;
      int8_only[off] = r.stats.int8_only_writes;
    }
    ASSERT_EQ(logits[0].size(), logits[1].size());
    EXPECT_EQ(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * 4), 0);
    const int64_t layers = std::string(shape) == "tiny" ? 2 : 24;
    EXPECT_EQ(int8_only[0], 3 * layers);  // attn_norm, ffn_norm, swiglu per layer
    EXPECT_EQ(int8_only[1], 0);
  }
}

// Mode 2 for the DQ GEMMs: in a decode batch (40 tokens) of a model whose
// quantized weights are all Q4_K / Q6_K, RmsNorm and SwiGLU write only the
// DQ GEMM's f16 activations (the sm_80 GEMM's with MINFER_DQW=0; on a
// Hopper GPU with the sm_90a code, the wgmma GEMM's layout by default).
// Same logits, bit for bit, as writing the f32 outputs and converting them
// in the GEMM's prepass; on the 0.5B mix (q5_0/q8_0 beside the K-quants)
// the producers keep writing f32.
TEST(CudaMode2Test, DqOnlyProducersGiveTheSameLogits) {
  MINFER_REQUIRE_GPU();
  // "p": the Hopper prefill form takes the prompt (MINFER_DQP_MIN_TOKENS
  // 16), reading the same layout as the register form.
  for (const char* dqw : {"0", "1", "p"}) {
    SCOPED_TRACE(absl::StrCat("MINFER_DQW=", dqw));
    const bool prefill_form = dqw[0] == 'p';
    const bool hopper = dqw[0] != '0' && DqwAvailable();
    if (dqw[0] != '0' && !hopper) continue;  // (the same plan as "0")
    ScopedKnob dqw_knob("MINFER_DQW", prefill_form ? "1" : dqw);
    ScopedKnob dqp_knob("MINFER_DQP_MIN_TOKENS", prefill_form ? "16" : "0");
    for (const char* shape : {"tiny", "0.5b"}) {
      SCOPED_TRACE(shape);
      std::vector<float> logits[2];
      CudaBackend::Stats stats[2];
      for (int off = 0; off < 2; ++off) {
        ScopedKnob knob("MINFER_NO_SKIP_WRITE", off ? "1" : "0");
        const PrefillRun r = PrefillPrompt(shape, 40);
        ASSERT_FALSE(r.logits.empty());
        logits[off] = r.logits;
        stats[off] = r.stats;
      }
      ASSERT_EQ(logits[0].size(), logits[1].size());
      EXPECT_EQ(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * 4), 0);
      const bool tiny = std::string(shape) == "tiny";
      EXPECT_EQ(stats[0].dq_only_writes, tiny ? 3 * 2 : 0);  // attn_norm, ffn_norm, swiglu per layer
      EXPECT_EQ(stats[1].dq_only_writes, 0);
      EXPECT_EQ(stats[0].int8_only_writes, 0);
      EXPECT_GT(prefill_form ? stats[0].dqp_gemm : hopper ? stats[0].dqw_gemm : stats[0].dq_gemm,
                0);
      EXPECT_EQ(hopper ? stats[0].dq_gemm : stats[0].dqw_gemm, 0);
      if (!prefill_form) EXPECT_EQ(stats[0].dqp_gemm, 0);
    }
  }
}

// MINFER_GEMM_FUSE: the Hopper GEMMs add a MatMul's residual in their store
// or split-k reduce, FusedFFN's SwiGLU sums the gate/up launch's partials,
// and the next node sums FusedQKV's (QkvBiasRopeStore) and a residual
// MatMul's (its RmsNorm, which also writes the residual stream). Logits
// bit-identical with the separate Add and reduce launches,
// over a 40-token prompt (FusedFFN, the register form), a 100-token one
// (the register form's two warpgroups) and a 40-token one on the prefill
// form; each also with every Hopper GEMM split in two (MINFER_DQW_SPLIT_K:
// the tiny model's launches do not split by themselves), so the kept
// partials go to FusedFFN's SwiGLU, QkvBiasRopeStore and the residual
// norms; the fusions really ran on the tiny model. Elsewhere it skips.
TEST(CudaGemmFuseTest, ResidualAndPartialSumsKeepLogitsBitIdentical) {
  MINFER_REQUIRE_GPU();
  if (!DqwAvailable()) GTEST_SKIP() << "needs an sm_90 GPU and the sm_90a code";
  struct Case {
    int n_tokens;
    const char* dqp_min;
    const char* split;  // MINFER_DQW_SPLIT_K: "2" makes the tiny model's launches split
  };
  for (const Case c : {Case{40, "0", "0"}, Case{100, "0", "0"}, Case{40, "16", "0"},
                       Case{40, "0", "2"}, Case{100, "0", "2"}, Case{40, "16", "2"}}) {
    for (const char* shape : {"tiny", "0.5b"}) {
      SCOPED_TRACE(absl::StrCat(shape, " ", c.n_tokens, " tokens, MINFER_DQP_MIN_TOKENS ",
                                c.dqp_min, ", MINFER_DQW_SPLIT_K ", c.split));
      ScopedKnob dqp("MINFER_DQP_MIN_TOKENS", c.dqp_min);
      ScopedKnob split("MINFER_DQW_SPLIT_K", c.split);
      std::vector<float> logits[2];
      CudaBackend::Stats stats[2];
      for (int fuse = 0; fuse < 2; ++fuse) {
        ScopedKnob knob("MINFER_GEMM_FUSE", fuse ? "1" : "0");
        const PrefillRun r = PrefillPrompt(shape, c.n_tokens);
        ASSERT_FALSE(r.logits.empty());
        logits[fuse] = r.logits;
        stats[fuse] = r.stats;
      }
      ASSERT_EQ(logits[0].size(), logits[1].size());
      EXPECT_EQ(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * 4), 0);
      EXPECT_EQ(stats[0].kept_partials, 0);
      EXPECT_EQ(stats[0].residual_epilogue, 0);
      EXPECT_EQ(stats[0].pending_summed, 0);
      std::cout << shape << " " << c.n_tokens << " tokens, dqp_min " << c.dqp_min << ", split "
                << c.split << ": residual adds in the GEMM " << stats[1].residual_epilogue
                << " (Add launches " << stats[1].residual_launch << ", " << stats[0].residual_launch
                << " unfused), kept partials " << stats[1].kept_partials
                << ", summed by the next node " << stats[1].pending_summed << ", written "
                << stats[1].pending_written << "\n";
      if (std::string(shape) == "tiny") {
        EXPECT_GT(stats[1].residual_epilogue, 0);
        EXPECT_LT(stats[1].residual_launch, stats[0].residual_launch);
        if (c.split[0] == '2') {
          EXPECT_GT(stats[1].kept_partials, 0);
          // At least each layer's q/k/v epilogue and its FFN norm.
          EXPECT_GE(stats[1].pending_summed, 2 * 2);
        }
      }
    }
  }
}

// Two prefill levers that must not change a bit: the QKV fusion (one
// segmented MMQ launch per layer) and the W_dsc/W_exp scale planes built at
// load. Logits of a 100-token prefill are bit-identical with each lever off,
// on the tiny Q4_K_M model and the 0.5B mix; the levers really ran (or
// not), and the planes' VRAM is what their formula says.
TEST(CudaPrefillLeversTest, QkvFusionAndScalePlanesKeepLogitsBitIdentical) {
  MINFER_REQUIRE_GPU();
  for (const char* shape : {"tiny", "0.5b"}) {
    SCOPED_TRACE(shape);
    struct Config {
      const char* no_fuse;
      const char* planes;
    };
    std::vector<float> logits[3];
    const Config configs[3] = {{"0", "1"}, {"1", "1"}, {"0", "0"}};
    for (int c = 0; c < 3; ++c) {
      SCOPED_TRACE(c);
      ScopedKnob fuse("MINFER_NO_FUSE_QKV_PREFILL", configs[c].no_fuse);
      ScopedKnob no_dqw("MINFER_DQW", "0");  // (MMQ's levers; 100 tokens would be the Hopper GEMM's)
      ScopedKnob q4k("MINFER_MMQ_Q4K_DSC", configs[c].planes);
      ScopedKnob q6k("MINFER_MMQ_Q6K_EXP", configs[c].planes);
      const PrefillRun r = PrefillPrompt(shape);
      ASSERT_FALSE(r.logits.empty());
      logits[c] = r.logits;
      const bool fused = configs[c].no_fuse[0] == '0', planes = configs[c].planes[0] == '1';
      EXPECT_EQ(r.stats.mmq_segmented > 0, fused);
      EXPECT_EQ(r.stats.mmq_plane > 0, planes);
      EXPECT_GT(r.plane_formula, 0u);
      EXPECT_EQ(r.plane_bytes, planes ? r.plane_formula : 0u);
    }
    for (int c = 1; c < 3; ++c) {
      ASSERT_EQ(logits[0].size(), logits[c].size());
      EXPECT_EQ(std::memcmp(logits[0].data(), logits[c].data(), logits[0].size() * 4), 0)
          << "config " << c;
    }
  }
}

// Stream-k (MINFER_MMQ_STREAM_K): the 0.5B's 4,864-row FFN projections at
// 512 tokens are 304 tiles, more than the 264 CTA slots of a 132-SM GPU but
// far from two waves, so their launches split the last tiles' k-chunks
// between CTAs. The hand-off keeps every fold sequential: logits
// bit-identical with stream-k off.
TEST(CudaPrefillLeversTest, StreamKKeepsLogitsBitIdentical) {
  MINFER_REQUIRE_GPU();
  int dev = 0, sms = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  std::vector<float> logits[2];
  for (int on = 0; on < 2; ++on) {
    SCOPED_TRACE(on);
    ScopedKnob sk("MINFER_MMQ_STREAM_K", on ? "1" : "0");
    const PrefillRun r = PrefillPrompt("0.5b", 512);
    ASSERT_FALSE(r.logits.empty());
    logits[on] = r.logits;
    if (!on) {
      EXPECT_EQ(r.stats.mmq_stream_k, 0);
    } else if (sms == 132) {
      EXPECT_GT(r.stats.mmq_stream_k, 0);
    }
    std::cout << "stream-k " << on << ": " << r.stats.mmq_stream_k << " of " << r.stats.mmq_fast
              << " MMQ launches split\n";
  }
  ASSERT_EQ(logits[0].size(), logits[1].size());
  EXPECT_EQ(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * 4), 0);
}

// CudaState::AttachScalePlane's refusals: an unknown weight (the caller
// keeps its buffer) and a second plane for the same weight; a released
// owner's weight is unknown again.
TEST(CudaStateTest, AttachScalePlaneRefusesUnknownAndDuplicate) {
  MINFER_REQUIRE_GPU();
  auto state = CudaState::Get();
  ASSERT_TRUE(state.ok());
  auto w = MakeWeight("w", GgmlType::kQ4_K, 256, 8);
  const uint64_t owner = CudaState::NewOwnerId();
  ASSERT_TRUE((*state)->RegisterWeight(owner, w->w).ok());
  const int64_t bytes = MmqScalePlaneBytes(GgmlType::kQ4_K, 256, 8);
  auto plane = (*state)->Malloc(bytes, "test plane");
  ASSERT_TRUE(plane.ok());
  EXPECT_EQ((*state)->AttachScalePlane(owner, "nope", *plane, bytes).code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE((*state)->AttachScalePlane(owner, "w", *plane, bytes).ok());
  EXPECT_EQ((*state)->FindWeight(owner, "w")->scale_plane, *plane);
  EXPECT_EQ((*state)->ScalePlaneBytes(owner).at(GgmlType::kQ4_K), static_cast<uint64_t>(bytes));
  EXPECT_EQ((*state)->AttachScalePlane(owner, "w", *plane, bytes).code(),
            absl::StatusCode::kFailedPrecondition);
  (*state)->ReleaseWeights(owner);  // frees the plane with the weight
  EXPECT_EQ((*state)->FindWeight(owner, "w"), nullptr);
  EXPECT_TRUE((*state)->ScalePlaneBytes(owner).empty());
}

// The dead-write guard: after a mode-2 RmsNorm, reading its f32 output
// (an elementwise op, or a GEMM that would have to quantize it again
// because the MMQ scratch moved on) is a loud error, not garbage.
TEST_F(CudaBackendOpTest, DeadWriteGuardFires) {
  const int64_t k = 256, nt = 16, rows = 64;
  auto gain = MakeWeight("gain", GgmlType::kF32, k, 1, 1.0f);
  auto w = MakeWeight("w", GgmlType::kQ8_0, k, rows);
  auto state = CudaState::Get();
  ASSERT_TRUE(state.ok());
  auto created = CudaBackend::Create(*state, std::vector<const graph::Weight*>{&gain->w, &w->w},
                                     nullptr, nullptr);
  ASSERT_TRUE(created.ok()) << created.status();
  CudaBackend& b = **created;
  Node norm = MakeNode(OpKind::kRmsNorm, Shape(k, nt), {&gain->w});
  norm.inputs = {0};
  norm.p.eps = 1e-6f;
  norm.p.int8_consumers = true;
  norm.name = "blk.0.attn_norm";
  Node mm = MakeNode(OpKind::kMatMul, Shape(rows, nt), {&w->w});
  mm.inputs = {0};
  mm.name = "blk.0.q";
  Node scale = MakeNode(OpKind::kScale, Shape(k, nt));
  scale.inputs = {0};
  scale.name = "reader";
  auto alloc = [&](int64_t bytes) {
    auto id = b.AllocBuffer(bytes);
    EXPECT_TRUE(id.ok());
    return BufferRef{&b, id.ok() ? *id : -1, 0, bytes};
  };
  const BufferRef x = alloc(k * nt * 4), other = alloc(k * nt * 4), n_out = alloc(k * nt * 4),
                  y = alloc(rows * nt * 4), s_out = alloc(k * nt * 4);
  auto xs = RandomFloats(k * nt);
  ASSERT_TRUE(b.WriteHost(x, xs.data(), x.bytes).ok());
  ASSERT_TRUE(b.WriteHost(other, xs.data(), other.bytes).ok());
  auto run = [&](const Node& n, BufferRef in, BufferRef out) {
    ExecArgs a;
    a.inputs = {in};
    a.output = out;
    return b.ExecuteNode(n, a);
  };
  // The GEMM right after its producer reads the int8 plane: fine.
  ASSERT_TRUE(run(norm, x, n_out).ok());
  EXPECT_EQ(b.stats().int8_only_writes, 1);
  EXPECT_TRUE(run(mm, n_out, y).ok());
  // An elementwise reader of the dead f32 range: refused.
  absl::Status st = run(scale, n_out, s_out);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("dead-write guard"), std::string::npos) << st;
  // A GEMM over another input takes the MMQ scratch; the norm's output would
  // have to be quantized again from f32 it never wrote: refused.
  EXPECT_TRUE(run(mm, other, y).ok());
  st = run(mm, n_out, y);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("blk.0.q"), std::string::npos) << st;
  // A real write over the range revives it; the window's end clears all.
  ASSERT_TRUE(run(scale, x, n_out).ok());
  EXPECT_TRUE(run(mm, n_out, y).ok());
  EXPECT_TRUE(b.Synchronize().ok());
  ASSERT_TRUE(run(norm, x, n_out).ok());
  EXPECT_TRUE(b.Synchronize().ok());
  EXPECT_TRUE(run(scale, n_out, s_out).ok()) << "the mark must not outlive its window";
  EXPECT_TRUE(b.Synchronize().ok());
}

TEST(CudaKvPolicyTest, F16CacheAutoSelectedForLargeModels) {
  MINFER_REQUIRE_GPU();
  auto small = Load("tiny", "q8_0", "cuda");  // 2 layers x 128 < 8192
  EXPECT_EQ(small->DefaultKvType(), DType::kF32);
  auto cpu = Load("tiny", "q8_0", "cpu");
  EXPECT_EQ(cpu->DefaultKvType(), DType::kF32);
  ASSERT_TRUE(KnobRegistry::Global().Set("MINFER_CACHE_TYPE", "f16").ok());
  EXPECT_EQ(small->DefaultKvType(), DType::kF16);
  ASSERT_TRUE(KnobRegistry::Global().Reset("MINFER_CACHE_TYPE").ok());
}

}  // namespace
}  // namespace minfer::cuda
