// Crafted GGUF files (a real synthetic model with some keys or tensors
// changed) are refused at load with INVALID_ARGUMENT naming the key and its
// value, or the tensor and where its expected shape came from: numbers the
// math can not use (an infinite RoPE base), schemes minfer does not run (an
// unknown or active RoPE scaling), head dimensions that disagree, and
// tokenizers or chat templates that can not work. Each of these loaded (or
// was refused with another code or the wrong diagnosis) before.
#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/gguf/gguf.h"
#include "engine/gguf/writer.h"
#include "engine/models/decoder.h"
#include "engine/runtime/model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/gguf_rewrite.h"
#include "tests/support/test_models.h"

namespace minfer {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::GgufEdit;
using testing::RewriteGguf;

class ModelFileChecksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // llama-tiny: embedding 256, 4 heads of 64, 2 KV heads, rope_freqs.weight,
    // rope.dimension_count 64.
    auto p = testing::TestModelPath("llama-tiny", "q8_0");
    ASSERT_TRUE(p.ok()) << p.status();
    llama_ = *p;
  }

  // FromGguf's verdict on llama-tiny edited by `edit`.
  absl::Status Check(const GgufEdit& edit) {
    auto path = RewriteGguf(llama_, absl::StrCat("crafted", ++n_, ".gguf"), edit);
    if (!path.ok()) return absl::InternalError(path.status().ToString());
    auto f = gguf::GgufFile::Open(*path);
    if (!f.ok()) return absl::InternalError(f.status().ToString());
    auto m = models::DecoderModel::FromGguf(**f);
    if (m.ok()) {
      head_dim_ = (*m)->hparams().head_dim;
      rope_base_ = (*m)->hparams().rope_base;
    }
    return m.status();
  }
  absl::Status CheckKey(const std::string& key, gguf::Value v) {
    return Check({.keys = [&](gguf::GgufWriter& w) { w.Set(key, v); }});
  }

  std::string llama_;
  int n_ = 0;
  int64_t head_dim_ = 0;
  float rope_base_ = 0;
};

#define EXPECT_REFUSED(status, ...)                                              \
  do {                                                                           \
    const absl::Status s_ = (status);                                            \
    EXPECT_EQ(s_.code(), absl::StatusCode::kInvalidArgument) << s_;              \
    for (const char* sub : {__VA_ARGS__}) {                                      \
      EXPECT_THAT(std::string(s_.message()), HasSubstr(sub));                    \
    }                                                                            \
  } while (0)

TEST_F(ModelFileChecksTest, TheUneditedCopyLoads) {
  // The copy itself is fine: every refusal below comes from its edit.
  ASSERT_TRUE(Check({}).ok());
  EXPECT_EQ(head_dim_, 64);
  EXPECT_EQ(rope_base_, 500000.0f);
  // A finite base in range is taken as given.
  ASSERT_TRUE(CheckKey("llama.rope.freq_base", gguf::Value::F32(10000)).ok());
  EXPECT_EQ(rope_base_, 10000.0f);
}

TEST_F(ModelFileChecksTest, RopeFrequencyBaseMustBeFinitePositive) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_REFUSED(CheckKey("llama.rope.freq_base", gguf::Value::F32(inf)),
                 "key 'llama.rope.freq_base' = inf", "finite positive");
  EXPECT_REFUSED(CheckKey("llama.rope.freq_base", gguf::Value::F32(-inf)),
                 "key 'llama.rope.freq_base' = -inf");
  EXPECT_REFUSED(CheckKey("llama.rope.freq_base", gguf::Value::F32(std::nanf(""))),
                 "key 'llama.rope.freq_base' = nan");
  EXPECT_REFUSED(CheckKey("llama.rope.freq_base", gguf::Value::F32(0)),
                 "key 'llama.rope.freq_base' = 0");
  EXPECT_REFUSED(CheckKey("llama.rope.freq_base", gguf::Value::F32(-10000)),
                 "key 'llama.rope.freq_base' = -10000");
  // Finite as a double, infinite as the float the kernels use.
  EXPECT_REFUSED(CheckKey("llama.rope.freq_base", gguf::Value::F64(1e300)),
                 "key 'llama.rope.freq_base' = 1e+300");
  EXPECT_REFUSED(
      CheckKey("llama.attention.layer_norm_rms_epsilon", gguf::Value::F32(std::nanf(""))),
      "key 'llama.attention.layer_norm_rms_epsilon' = nan");
  EXPECT_REFUSED(CheckKey("llama.attention.layer_norm_rms_epsilon", gguf::Value::F32(inf)),
                 "key 'llama.attention.layer_norm_rms_epsilon' = inf");
}

TEST_F(ModelFileChecksTest, RopeScalingMustBeKnownAndInactive) {
  // An unknown name was treated as none.
  EXPECT_REFUSED(CheckKey("llama.rope.scaling.type", gguf::Value::String("dynamic-ntk")),
                 "key 'llama.rope.scaling.type' = 'dynamic-ntk'",
                 "known: none, linear, yarn, longrope");
  // Known, but it changes the angles.
  EXPECT_REFUSED(Check({.keys =
                            [](gguf::GgufWriter& w) {
                              w.SetString("llama.rope.scaling.type", "yarn");
                              w.SetF32("llama.rope.scaling.factor", 4);
                            }}),
                 "key 'llama.rope.scaling.type' = 'yarn'", "factor 4", "not supported");
  EXPECT_REFUSED(CheckKey("llama.rope.scaling.type", gguf::Value::String("longrope")),
                 "key 'llama.rope.scaling.type' = 'longrope'");
  // A factor without a type is linear scaling (llama.cpp's default).
  EXPECT_REFUSED(CheckKey("llama.rope.scaling.factor", gguf::Value::F32(8)),
                 "key 'llama.rope.scaling.factor' = 8", "'linear'");
  EXPECT_REFUSED(CheckKey("llama.rope.scale_linear", gguf::Value::F32(2)),
                 "key 'llama.rope.scale_linear' = 2");
  EXPECT_REFUSED(CheckKey("llama.rope.scaling.factor", gguf::Value::F32(std::nanf(""))),
                 "key 'llama.rope.scaling.factor' = nan");
  EXPECT_REFUSED(CheckKey("llama.rope.scaling.factor", gguf::Value::F32(-2)),
                 "key 'llama.rope.scaling.factor' = -2");
  // What leaves the angles alone loads: no scaling, a factor of 1, and
  // llama.cpp's 0 for "none".
  EXPECT_TRUE(Check({.keys =
                         [](gguf::GgufWriter& w) {
                           w.SetString("llama.rope.scaling.type", "none");
                           w.SetF32("llama.rope.scaling.factor", 4);
                         }})
                  .ok());
  EXPECT_TRUE(Check({.keys =
                         [](gguf::GgufWriter& w) {
                           w.SetString("llama.rope.scaling.type", "yarn");
                           w.SetF32("llama.rope.scaling.factor", 1);
                         }})
                  .ok());
  EXPECT_TRUE(CheckKey("llama.rope.scaling.factor", gguf::Value::F32(0)).ok());
}

TEST_F(ModelFileChecksTest, HeadDimensionsMustAgree) {
  // value_length without key_length was not looked at.
  EXPECT_REFUSED(CheckKey("llama.attention.value_length", gguf::Value::U32(32)),
                 "key 'llama.attention.value_length' = 32",
                 "differs from the key head dimension 64",
                 "'llama.embedding_length' 256 / 'llama.attention.head_count' 4");
  EXPECT_REFUSED(Check({.keys =
                            [](gguf::GgufWriter& w) {
                              w.SetU32("llama.attention.key_length", 64);
                              w.SetU32("llama.attention.value_length", 128);
                            }}),
                 "key 'llama.attention.value_length' = 128",
                 "'llama.attention.key_length'");
  // Equal key and value lengths that match the tensors load.
  EXPECT_TRUE(Check({.keys =
                         [](gguf::GgufWriter& w) {
                           w.SetU32("llama.attention.key_length", 64);
                           w.SetU32("llama.attention.value_length", 64);
                         }})
                  .ok());
  // A key length the tensors do not have names the tensor and the key.
  EXPECT_REFUSED(CheckKey("llama.attention.key_length", gguf::Value::U32(32)),
                 "'rope_freqs.weight' has shape [32], expected [16]",
                 "'llama.attention.key_length'");
  EXPECT_REFUSED(CheckKey("llama.attention.head_count_kv", gguf::Value::U32(3)),
                 "'llama.attention.head_count' = 4 is not a multiple of",
                 "'llama.attention.head_count_kv' = 3");
}

// A head count that disagrees with the tensors was reported as "partial
// rotary embedding is not supported" (rope.dimension_count 64 vs the 32 the
// wrong count implies); the diagnosis now names the tensor and the keys.
TEST_F(ModelFileChecksTest, ShapeErrorsAreNotMisdiagnosedAsPartialRotary) {
  const absl::Status s = Check({.keys =
                                    [](gguf::GgufWriter& w) {
                                      w.SetU32("llama.attention.head_count", 8);
                                    },
                                .drop_tensors = {"rope_freqs.weight"}});
  EXPECT_REFUSED(s, "tensor 'blk.0.attn_k.weight' has shape [256, 128], expected [256, 64]",
                 "'llama.attention.head_count_kv' 2 x head dimension 32",
                 "'llama.embedding_length' 256 / 'llama.attention.head_count' 8");
  EXPECT_THAT(std::string(s.message()), Not(HasSubstr("partial")));
  // rope.dimension_count itself wrong: more than a head (inconsistent), or
  // less (a real partial rotary, which minfer does not run); both name it.
  const absl::Status big = CheckKey("llama.rope.dimension_count", gguf::Value::U32(128));
  EXPECT_REFUSED(big, "key 'llama.rope.dimension_count' = 128",
                 "inconsistent with the head dimension 64");
  EXPECT_THAT(std::string(big.message()), Not(HasSubstr("partial")));
  EXPECT_REFUSED(CheckKey("llama.rope.dimension_count", gguf::Value::U32(32)),
                 "key 'llama.rope.dimension_count' = 32", "partial rotary");
}

TEST_F(ModelFileChecksTest, MissingKeysAndExpertsAreInvalidArgument) {
  // The reader's NOT_FOUND for a missing key was passed through.
  EXPECT_REFUSED(Check({.drop_keys = {"llama.block_count"}}), "missing key 'llama.block_count'");
  // UNIMPLEMENTED before.
  EXPECT_REFUSED(CheckKey("llama.expert_count", gguf::Value::U32(8)),
                 "key 'llama.expert_count' = 8", "mixture-of-experts");
}

// FromGguf's verdict on `src` edited by `edit` (written as `name`), and the
// hyperparameters it read when it loads.
absl::Status CheckEdited(const std::string& src, const std::string& name, const GgufEdit& edit,
                         models::DecoderHparams* hp) {
  auto path = RewriteGguf(src, name, edit);
  if (!path.ok()) return absl::InternalError(path.status().ToString());
  auto f = gguf::GgufFile::Open(*path);
  if (!f.ok()) return absl::InternalError(f.status().ToString());
  auto m = models::DecoderModel::FromGguf(**f);
  if (m.ok() && hp != nullptr) *hp = (*m)->hparams();
  return m.status();
}

// Mixture-of-experts files (qwen3moe-tiny: 16 experts of 256, 4 per token):
// expert keys that disagree with each other or with the tensors, and a
// gating function the family does not run, are refused naming the key.
TEST(MoeFileChecksTest, ExpertKeysMustAgreeWithTheTensors) {
  auto src = testing::TestModelPath("qwen3moe-tiny", "q8_0");
  ASSERT_TRUE(src.ok()) << src.status();
  int n = 0;
  auto check = [&](const GgufEdit& edit, models::DecoderHparams* hp = nullptr) {
    return CheckEdited(*src, absl::StrCat("moe", ++n, ".gguf"), edit, hp);
  };
  auto key = [&](const std::string& k, gguf::Value v) {
    return check({.keys = [&](gguf::GgufWriter& w) { w.Set(k, v); }});
  };
  models::DecoderHparams hp;
  ASSERT_TRUE(check({}, &hp).ok());
  EXPECT_EQ(hp.n_expert, 16);
  EXPECT_EQ(hp.n_expert_used, 4);
  EXPECT_EQ(hp.n_ff_exp, 256);
  EXPECT_TRUE(hp.moe_norm);
  EXPECT_EQ(hp.moe_gating, graph::MoeGating::kSoftmax);
  // The router's and the experts' tensors say 16.
  EXPECT_REFUSED(key("qwen3moe.expert_count", gguf::Value::U32(12)),
                 "'blk.0.ffn_gate_inp.weight' has shape [256, 16], expected [256, 12]",
                 "'qwen3moe.expert_count' 12");
  EXPECT_REFUSED(key("qwen3moe.expert_feed_forward_length", gguf::Value::U32(512)),
                 "'blk.0.ffn_gate_exps.weight' has shape [256, 256, 16], expected [256, 512, 16]");
  EXPECT_REFUSED(key("qwen3moe.expert_used_count", gguf::Value::U32(17)),
                 "key 'qwen3moe.expert_used_count' = 17", "'qwen3moe.expert_count' 16");
  EXPECT_REFUSED(key("qwen3moe.expert_used_count", gguf::Value::U32(0)),
                 "key 'qwen3moe.expert_used_count' = 0");
  EXPECT_REFUSED(key("qwen3moe.expert_count", gguf::Value::U32(0)),
                 "key 'qwen3moe.expert_count' = 0");
  // llama.cpp's numbering: 2 is sigmoid, which Qwen3 MoE does not use.
  EXPECT_REFUSED(key("qwen3moe.expert_gating_func", gguf::Value::U32(2)),
                 "key 'qwen3moe.expert_gating_func' = 2", "1 (softmax)");
  EXPECT_TRUE(key("qwen3moe.expert_gating_func", gguf::Value::U32(1)).ok());
  EXPECT_REFUSED(check({.drop_keys = {"qwen3moe.expert_used_count"}}),
                 "qwen3moe.expert_used_count");
  EXPECT_REFUSED(check({.drop_tensors = {"blk.1.ffn_down_exps.weight"}}),
                 "missing tensor 'blk.1.ffn_down_exps.weight'");
}

// gpt-oss: the window and YaRN keys, its required tensors.
TEST(MoeFileChecksTest, GptOssKeysAndTensors) {
  auto src = testing::TestModelPath("gpt-oss-tiny", "q8_0");
  ASSERT_TRUE(src.ok()) << src.status();
  int n = 0;
  auto check = [&](const GgufEdit& edit, models::DecoderHparams* hp = nullptr) {
    return CheckEdited(*src, absl::StrCat("gptoss", ++n, ".gguf"), edit, hp);
  };
  models::DecoderHparams hp;
  ASSERT_TRUE(check({}, &hp).ok());
  EXPECT_EQ(hp.n_swa, 16);
  EXPECT_TRUE(hp.IsSwaLayer(0));
  EXPECT_FALSE(hp.IsSwaLayer(1));
  EXPECT_EQ(hp.moe_gating, graph::MoeGating::kSoftmaxWeight);
  EXPECT_FLOAT_EQ(hp.yarn.freq_scale, 1.0f / 32);
  EXPECT_EQ(hp.yarn.n_ctx_orig, 4096);
  EXPECT_REFUSED(check({.drop_keys = {"gpt-oss.attention.sliding_window"}}),
                 "gpt-oss.attention.sliding_window");
  EXPECT_REFUSED(check({.keys = [](gguf::GgufWriter& w) {
                   w.Set("gpt-oss.attention.sliding_window", gguf::Value::U32(0));
                 }}),
                 "key 'gpt-oss.attention.sliding_window' = 0");
  EXPECT_REFUSED(check({.keys = [](gguf::GgufWriter& w) {
                   w.Set("gpt-oss.expert_gating_func", gguf::Value::U32(1));
                 }}),
                 "key 'gpt-oss.expert_gating_func' = 1", "3 (softmax_weight)");
  EXPECT_REFUSED(check({.drop_tensors = {"blk.2.attn_sinks.weight"}}),
                 "missing tensor 'blk.2.attn_sinks.weight'");
  // A family without YaRN refuses it (qwen3moe here).
  auto qwen = testing::TestModelPath("qwen3moe-tiny", "q8_0");
  ASSERT_TRUE(qwen.ok());
  auto path = RewriteGguf(*qwen, "qwen_yarn.gguf", {.keys = [](gguf::GgufWriter& w) {
                            w.Set("qwen3moe.rope.scaling.type", gguf::Value::String("yarn"));
                            w.Set("qwen3moe.rope.scaling.factor", gguf::Value::F32(4));
                          }});
  ASSERT_TRUE(path.ok());
  auto f = gguf::GgufFile::Open(*path);
  ASSERT_TRUE(f.ok());
  EXPECT_REFUSED(models::DecoderModel::FromGguf(**f).status(), "'yarn' at factor 4");
}

// Model::Load: the tokenizer's problems are the file's too.
TEST_F(ModelFileChecksTest, TokenizerAndTemplateProblemsRefuseTheModel) {
  auto load = [&](const GgufEdit& edit) -> absl::Status {
    auto path = RewriteGguf(llama_, absl::StrCat("crafted", ++n_, ".gguf"), edit);
    if (!path.ok()) return absl::InternalError(path.status().ToString());
    return runtime::Model::Load(*path, {.backend = "cpu", .prefetch = false}).status();
  };
  // UNIMPLEMENTED before.
  EXPECT_REFUSED(load({.keys = [](gguf::GgufWriter& w) {
                   w.SetString("tokenizer.ggml.pre", "deepseek-llm");
                 }}),
                 "pre-tokenizer 'deepseek-llm' is not supported");
  // NOT_FOUND before.
  EXPECT_REFUSED(load({.drop_keys = {"tokenizer.ggml.tokens"}}), "tokenizer.ggml.tokens");
  // Loaded before, and then every chat request failed with a 400.
  EXPECT_REFUSED(load({.keys = [](gguf::GgufWriter& w) {
                   w.SetString("tokenizer.chat_template",
                               "{% for m in messages %}\n{{ m.content }\n{% endfor %}");
                 }}),
                 "tokenizer.chat_template", "does not parse: line 2, column 14");
  EXPECT_REFUSED(load({.keys = [](gguf::GgufWriter& w) {
                   w.SetString("tokenizer.chat_template", "{% if messages %}never closed");
                 }}),
                 "does not parse: line 1");
  // The unedited file loads, with its template.
  auto path = RewriteGguf(llama_, "unedited.gguf", {});
  ASSERT_TRUE(path.ok());
  auto m = runtime::Model::Load(*path, {.backend = "cpu", .prefetch = false});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE((*m)->tokenizer().chat_template().ok());
}

}  // namespace
}  // namespace minfer
