// End-to-end checks of the engine's Qwen2 forward on the CPU backend against
// the independent float64 reference (reference_forward.h), for every weight
// type, plus the invariants the decode loop relies on.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/base/knobs.h"
#include "engine/gguf/writer.h"
#include "engine/runtime/model.h"
#include "engine/runtime/session.h"
#include "gtest/gtest.h"
#include "tests/engine/models/reference_forward.h"
#include "tests/support/test_models.h"

namespace minfer {
namespace {

using runtime::Model;
using runtime::Session;

std::shared_ptr<Model> LoadModel(const std::string& shape, const std::string& type) {
  auto path = testing::TestModelPath(shape, type);
  EXPECT_TRUE(path.ok()) << path.status();
  if (!path.ok()) return nullptr;
  runtime::ModelOptions opt;
  opt.backend = "cpu";
  auto m = Model::Load(*path, opt);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : nullptr;
}

double RelErr(const float* got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double d = got[i] - want[i];
    num += d * d;
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

// Stated bounds on ||engine - reference|| / ||reference|| of the logits.
// Float weights: the engine computes in float32 (~1e-6 per op).
// Quantized weights: the engine quantizes activations to int8 per block of
// 32 before each integer dot (relative error ~1/254 of the block's absmax per
// element), which compounds to about 1% of the logits over 2 layers.
double Bound(const std::string& type) {
  if (type == "f32" || type == "f16" || type == "bf16") return 2e-4;
  return 3e-2;
}

const std::vector<int32_t> kPrompt = {9707, 11, 1879, 0, 576, 4128, 374, 264, 12, 100, 7, 33};

class PerTypeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PerTypeTest, LogitsMatchFloat64Reference) {
  const std::string type = GetParam();
  for (const std::string shape : {"tiny", "tiny-untied", "llama-tiny"}) {
    SCOPED_TRACE(shape);
    auto model = LoadModel(shape, type);
    ASSERT_NE(model, nullptr);
    auto ref = testing::ReferenceQwen2::Load(model->file());
    ASSERT_TRUE(ref.ok()) << ref.status();
    std::vector<int32_t> prompt;
    for (int32_t t : kPrompt) prompt.push_back(t % 1000);
    auto session = Session::Create(model, {.n_ctx = 128});
    ASSERT_TRUE(session.ok()) << session.status();
    auto logits = (*session)->Eval(prompt, /*all_logits=*/true);
    ASSERT_TRUE(logits.ok()) << logits.status();
    auto want = ref->Forward(prompt);
    const int64_t V = ref->n_vocab();
    ASSERT_EQ(static_cast<int64_t>(logits->size()), V * static_cast<int64_t>(prompt.size()));
    for (size_t t = 0; t < prompt.size(); ++t) {
      double err = RelErr(logits->data() + t * V, want[t]);
      EXPECT_LT(err, Bound(type)) << "position " << t;
      // Top-1 agrees at every position (the synthetic models are peaked).
      int64_t got1 = std::max_element(logits->begin() + t * V, logits->begin() + (t + 1) * V) -
                     (logits->begin() + t * V);
      int64_t want1 = std::max_element(want[t].begin(), want[t].end()) - want[t].begin();
      EXPECT_EQ(got1, want1) << "position " << t;
    }
  }
}

TEST_P(PerTypeTest, Greedy32MatchesReference) {
  const std::string type = GetParam();
  for (const std::string shape : {"tiny-untied", "llama-tiny"}) {
    SCOPED_TRACE(shape);
    auto model = LoadModel(shape, type);
    ASSERT_NE(model, nullptr);
    auto ref = testing::ReferenceQwen2::Load(model->file());
    ASSERT_TRUE(ref.ok());
    std::vector<int32_t> prompt = {1000, 17, 451, 3};
    std::vector<int32_t> want = ref->Greedy(prompt, 32);
    auto session = Session::Create(model, {.n_ctx = 64});
    ASSERT_TRUE(session.ok());
    auto logits = (*session)->Eval(prompt);
    ASSERT_TRUE(logits.ok()) << logits.status();
    std::vector<int32_t> got;
    for (int i = 0; i < 32; ++i) {
      int32_t next = static_cast<int32_t>(std::max_element(logits->begin(), logits->end()) -
                                          logits->begin());
      got.push_back(next);
      logits = (*session)->Eval({next});
      ASSERT_TRUE(logits.ok()) << logits.status();
    }
    EXPECT_EQ(got, want);
    // The path moves (untied synthetic models follow a permutation).
    EXPECT_GE(std::set<int32_t>(got.begin(), got.end()).size(), 16u);
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, PerTypeTest,
                         ::testing::Values("f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1",
                                           "q8_0", "q4_k", "q5_k", "q6_k", "q4_k_m", "q5_k_m"));

// Token-by-token decode reproduces one-shot prefill: this exercises the KV
// cache, positions and graph reuse. On the CPU both paths run the same
// per-token arithmetic, so they agree to float rounding of nothing at all;
// the bound allows 1e-6 relative. Returns the decode session's graph builds.
int64_t ExpectDecodeEqualsPrefill(const std::shared_ptr<Model>& model,
                                  const std::vector<int32_t>& tokens) {
  auto a = Session::Create(model, {.n_ctx = 32});
  EXPECT_TRUE(a.ok());
  auto all = (*a)->Eval(tokens, true);
  EXPECT_TRUE(all.ok());
  auto b = Session::Create(model, {.n_ctx = 32});
  EXPECT_TRUE(b.ok());
  if (!a.ok() || !all.ok() || !b.ok()) return -1;
  const int64_t V = model->hparams().n_vocab;
  for (size_t t = 0; t < tokens.size(); ++t) {
    auto step = (*b)->Eval({tokens[t]});
    EXPECT_TRUE(step.ok());
    if (!step.ok()) return -1;
    std::vector<double> want(all->begin() + t * V, all->begin() + (t + 1) * V);
    EXPECT_LT(RelErr(step->data(), want), 1e-6) << "position " << t;
  }
  EXPECT_EQ((*b)->n_past(), static_cast<int64_t>(tokens.size()));
  return (*b)->stats().graph_builds;
}

TEST(Qwen2EngineTest, DecodeEqualsPrefill) {
  for (const std::string type : {"q4_k_m", "f16"}) {
    SCOPED_TRACE(type);
    auto model = LoadModel("tiny", type);
    ASSERT_NE(model, nullptr);
    // The decode graph was built once and reused for all ten steps.
    EXPECT_EQ(ExpectDecodeEqualsPrefill(model, {5, 900, 42, 77, 1000, 3, 250, 251, 9, 600}), 1);
  }
}

// The same at Qwen2.5-0.5B's shapes (GQA 14/2, head_dim 64, 896-wide
// q5_0/q8_0 rows, tied q8_0 head).
TEST(Qwen2EngineTest, DecodeEqualsPrefillOn05B) {
  auto model = LoadModel("0.5b", "q4_k_m");
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(ExpectDecodeEqualsPrefill(model, {100, 200, 300, 17, 18, 19, 999, 5, 6, 7, 8, 1000}),
            1);
}

// qwen3-tiny: the fused epilogue applies the per-head q/k norms too.
TEST(Qwen2EngineTest, FusionOnOffComputesTheSame) {
  for (const std::string shape : {"tiny", "qwen3-tiny"}) {
  SCOPED_TRACE(shape);
  auto model = LoadModel(shape, "q4_k_m");  // mixed types: attn_v is q6_k in some layers
  ASSERT_NE(model, nullptr);
  std::vector<int32_t> tokens = {5, 900, 42, 77, 1000, 3};
  auto run = [&](bool fused) {
    KnobRegistry& k = KnobRegistry::Global();
    EXPECT_TRUE(k.Set("MINFER_NO_FUSE_QKV", fused ? "0" : "1").ok());
    EXPECT_TRUE(k.Set("MINFER_NO_FUSE_FFN", fused ? "0" : "1").ok());
    auto s = Session::Create(model, {.n_ctx = 16});
    std::vector<float> out;
    for (int32_t t : tokens) {
      auto l = (*s)->Eval({t});
      EXPECT_TRUE(l.ok()) << l.status();
      out.insert(out.end(), l->begin(), l->end());
    }
    return out;
  };
  std::vector<float> fused = run(true), unfused = run(false);
  ASSERT_TRUE(KnobRegistry::Global().Reset("MINFER_NO_FUSE_QKV").ok());
  ASSERT_TRUE(KnobRegistry::Global().Reset("MINFER_NO_FUSE_FFN").ok());
  ASSERT_EQ(fused.size(), unfused.size());
  std::vector<double> ref(unfused.begin(), unfused.end());
  EXPECT_LT(RelErr(fused.data(), ref), 1e-6);
  }
}

// The residual adds riding on the matmul or MoE FFN before them
// (GraphBuilder::AddInto; MINFER_NO_FUSE_RESIDUAL=1 keeps the Add nodes)
// compute exactly what the Adds compute, the same float add per element:
// prefill and decode logits bit-identical on a dense, a Qwen3 MoE and a
// gpt-oss model.
TEST(Qwen2EngineTest, ResidualFusionOnOffIsBitIdentical) {
  for (const auto& [shape, type] : {std::pair<std::string, std::string>{"tiny", "q4_k_m"},
                                    {"qwen3moe-tiny", "q4_k_m"},
                                    {"gpt-oss-tiny", "q8_0"}}) {
    SCOPED_TRACE(shape);
    auto model = LoadModel(shape, type);
    ASSERT_NE(model, nullptr);
    auto run = [&](bool fused) {
      EXPECT_TRUE(KnobRegistry::Global().Set("MINFER_NO_FUSE_RESIDUAL", fused ? "0" : "1").ok());
      auto s = Session::Create(model, {.n_ctx = 32});
      auto l = (*s)->Eval({5, 900, 42, 77, 1000, 3, 250});
      EXPECT_TRUE(l.ok()) << l.status();
      std::vector<float> out = l.ok() ? *l : std::vector<float>{};
      for (int32_t t : {251, 9, 600, 17, 18}) {
        auto d = (*s)->Eval({t});
        EXPECT_TRUE(d.ok()) << d.status();
        if (d.ok()) out.insert(out.end(), d->begin(), d->end());
      }
      return out;
    };
    const std::vector<float> fused = run(true), unfused = run(false);
    ASSERT_TRUE(KnobRegistry::Global().Reset("MINFER_NO_FUSE_RESIDUAL").ok());
    ASSERT_FALSE(fused.empty());
    ASSERT_EQ(fused.size(), unfused.size());
    EXPECT_EQ(std::memcmp(fused.data(), unfused.data(), fused.size() * 4), 0);
  }
}

// The prefill QKV fusion (FusedQKV with a planar output + QkvBiasRopeStore
// over the prompt's tokens) computes exactly what the unfused chain
// computes: the same kernels on the same rows, the same float operations
// per element, so the logits are bit-identical. qwen3-tiny: with the
// per-head q/k norms in the epilogue (the chain's QkNorm rows).
TEST(Qwen2EngineTest, PrefillQkvFusionOnOffIsBitIdentical) {
  for (const std::string shape : {"tiny", "qwen3-tiny"})
  for (const std::string type : {"q4_k_m", "f16"}) {
    SCOPED_TRACE(shape + " " + type);
    auto model = LoadModel(shape, type);
    ASSERT_NE(model, nullptr);
    const std::vector<int32_t> tokens = {5, 900, 42, 77, 1000, 3, 250, 251, 9, 600, 17};
    auto run = [&](bool qkv) {
      EXPECT_TRUE(KnobRegistry::Global().Set("MINFER_NO_FUSE_QKV_PREFILL", qkv ? "0" : "1").ok());
      auto s = Session::Create(model, {.n_ctx = 16});
      EXPECT_TRUE(s.ok());
      auto l = (*s)->Eval(tokens, /*all_logits=*/true);
      EXPECT_TRUE(l.ok()) << l.status();
      return l.ok() ? *l : std::vector<float>{};
    };
    const std::vector<float> fused = run(true), unfused = run(false);
    ASSERT_TRUE(KnobRegistry::Global().Reset("MINFER_NO_FUSE_QKV_PREFILL").ok());
    ASSERT_FALSE(fused.empty());
    ASSERT_EQ(fused.size(), unfused.size());
    int64_t differ = 0;
    for (size_t i = 0; i < fused.size(); ++i) differ += std::memcmp(&fused[i], &unfused[i], 4) != 0;
    EXPECT_EQ(differ, 0) << "of " << fused.size() << " logits";
  }
}

TEST(Qwen2EngineTest, KvCacheTypesStayClose) {
  auto model = LoadModel("tiny", "q8_0");
  ASSERT_NE(model, nullptr);
  std::vector<int32_t> tokens = {5, 900, 42, 77, 1000, 3, 250, 251};
  auto run = [&](graph::DType t) {
    auto s = Session::Create(model, {.n_ctx = 16, .kv_type = t});
    EXPECT_TRUE(s.ok());
    EXPECT_EQ((*s)->kv_type(), t);
    return *(*s)->Eval(tokens, true);
  };
  auto f32 = run(graph::DType::kF32);
  std::vector<double> ref(f32.begin(), f32.end());
  // A cache value off by its storage rounding (2^-11 relative for f16, about
  // 1/254 of a block's absmax for q8_0) moves attention outputs slightly;
  // the next int8 activation quantization can then round some elements to
  // the neighbouring code, so logits move by up to the int8 activation noise
  // of the quantized-weight path (the 3e-2 bound above), not just 2^-11.
  EXPECT_LT(RelErr(run(graph::DType::kF16).data(), ref), 2e-2);
  EXPECT_LT(RelErr(run(graph::DType::kQ8_0).data(), ref), 3e-2);
  // The one-line summary names the cache type a load chose (the daemon's
  // load reply), else the model's default.
  EXPECT_TRUE(absl::StrContains(model->Summary(), absl::StrCat(
      "KV ", graph::DTypeName(model->DefaultKvType())))) << model->Summary();
  EXPECT_TRUE(absl::StrContains(model->Summary(graph::DType::kFp8), "KV fp8"))
      << model->Summary(graph::DType::kFp8);
}

TEST(Qwen2EngineTest, ContextOverflowAndBadTokensAreClearErrors) {
  auto model = LoadModel("tiny", "q8_0");
  ASSERT_NE(model, nullptr);
  auto s = Session::Create(model, {.n_ctx = 8});
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Eval({1, 2, 3, 4, 5}).ok());
  auto over = (*s)->Eval({1, 2, 3, 4});
  EXPECT_EQ(over.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(over.status().message().find("n_ctx 8"), std::string::npos) << over.status();
  EXPECT_EQ((*s)->n_past(), 5) << "a failed Eval must not move the position";
  auto bad = (*s)->Eval({static_cast<int32_t>(model->hparams().n_vocab)});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*s)->Eval({1, 2, 3}).ok());
}

}  // namespace
}  // namespace minfer

namespace minfer {
namespace {

// A file of an architecture minfer does not implement is refused at load,
// naming it and the supported ones; so is a mixture-of-experts `llama`
// (Mixtral's files share the name).
TEST(ArchitectureTest, UnknownArchitecturesAreRefusedWithTheSupportedList) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp ? tmp : "/tmp";
  {
    gguf::GgufWriter w;
    w.SetString("general.architecture", "gemma2");
    const std::string path = dir + "/gemma2.gguf";
    ASSERT_TRUE(w.WriteFile(path).ok());
    auto m = Model::Load(path, {.backend = "cpu"});
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(m.status().message().find("'gemma2' is not supported"), std::string::npos)
        << m.status();
    EXPECT_NE(m.status().message().find("qwen2, qwen3, llama"), std::string::npos) << m.status();
  }
  {
    gguf::GgufWriter w;
    w.SetString("general.architecture", "llama");
    for (const char* key : {"llama.embedding_length", "llama.feed_forward_length",
                            "llama.block_count", "llama.attention.head_count",
                            "llama.context_length", "llama.expert_count"}) {
      w.SetU32(key, 8);
    }
    const std::string path = dir + "/mixtral.gguf";
    ASSERT_TRUE(w.WriteFile(path).ok());
    auto m = Model::Load(path, {.backend = "cpu"});
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << m.status();
    EXPECT_NE(m.status().message().find("experts"), std::string::npos) << m.status();
  }
}

// Llama's RoPE turns adjacent pairs, by the rope_freqs factors: switching
// either off changes the logits (so the equality tests above do test them).
TEST(ArchitectureTest, LlamaRopeStyleAndFactorsMatter) {
  auto model = LoadModel("llama-tiny", "f32");
  ASSERT_NE(model, nullptr);
  ASSERT_EQ(model->hparams().rope_style, graph::RopeStyle::kInterleaved);
  ASSERT_NE(model->arch().rope_freqs(), nullptr);
  auto ref = testing::ReferenceQwen2::Load(model->file());
  ASSERT_TRUE(ref.ok()) << ref.status();
  std::vector<int32_t> prompt;
  for (int32_t t : kPrompt) prompt.push_back(t % 1000);
  auto want = ref->Forward(prompt);
  auto session = Session::Create(model, {.n_ctx = 64});
  ASSERT_TRUE(session.ok());
  auto logits = (*session)->Eval(prompt, true);
  ASSERT_TRUE(logits.ok());
  const int64_t V = ref->n_vocab();
  const size_t last = prompt.size() - 1;
  EXPECT_LT(RelErr(logits->data() + last * V, want[last]), 2e-4);
  // The same file read as if it were NeoX-roped without factors: the
  // reference of a Qwen2-style rope differs from the engine's output well
  // beyond the bound.
  auto plain = testing::ReferenceQwen2::Load(model->file(), /*force_neox_no_factors=*/true);
  ASSERT_TRUE(plain.ok());
  auto other = plain->Forward(prompt);
  EXPECT_GT(RelErr(logits->data() + last * V, other[last]), 1e-2);
}

}  // namespace
}  // namespace minfer
