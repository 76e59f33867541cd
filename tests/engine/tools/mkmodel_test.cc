#include "engine/tools/mkmodel.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/gguf/gguf.h"
#include "engine/runtime/model.h"
#include "engine/runtime/session.h"
#include "engine/tools/commands.h"
#include "engine/tools/model_spec.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/test_models.h"

namespace minfer::tools {
namespace {

// Every tensor name + dims of a Qwen2 shape, as mkmodel lays them out.
std::vector<std::pair<std::string, std::vector<int64_t>>> TensorList(const Qwen2Shape& s) {
  const int64_t kv = s.n_embd / s.n_head * s.n_head_kv;
  std::vector<std::pair<std::string, std::vector<int64_t>>> t;
  t.push_back({"token_embd.weight", {s.n_embd, s.n_vocab}});
  for (int64_t l = 0; l < s.n_layer; ++l) {
    std::string p = absl::StrCat("blk.", l, ".");
    t.push_back({p + "attn_norm.weight", {s.n_embd}});
    t.push_back({p + "attn_q.weight", {s.n_embd, s.n_embd}});
    t.push_back({p + "attn_k.weight", {s.n_embd, kv}});
    t.push_back({p + "attn_v.weight", {s.n_embd, kv}});
    t.push_back({p + "attn_output.weight", {s.n_embd, s.n_embd}});
    t.push_back({p + "ffn_gate.weight", {s.n_embd, s.n_ff}});
    t.push_back({p + "ffn_up.weight", {s.n_embd, s.n_ff}});
    t.push_back({p + "ffn_down.weight", {s.n_ff, s.n_embd}});
  }
  if (!s.tied) t.push_back({"output.weight", {s.n_embd, s.n_vocab}});
  return t;
}

std::string Census(const std::string& shape, const std::string& recipe, double* gib) {
  Qwen2Shape s = *ShapePreset(shape);
  QuantRecipe r = *ParseQuantRecipe(recipe);
  std::map<std::string, int> n;
  double bytes = 0;
  for (const auto& [name, dims] : TensorList(s)) {
    GgmlType t = TensorTypeFor(r, s, name, dims);
    if (dims.size() == 2) n[GgmlTypeName(t)]++;
    int64_t elems = 1;
    for (int64_t d : dims) elems *= d;
    bytes += static_cast<double>(RowBytes(t, dims[0])) * (elems / dims[0]);
  }
  // Biases and norms are f32.
  const int64_t kv = s.n_embd / s.n_head * s.n_head_kv;
  bytes += 4.0 * (s.n_layer * (3 * s.n_embd + 2 * kv) + s.n_embd);
  if (gib) *gib = bytes / (1ull << 30);
  std::string out;
  for (const auto& [k, v] : n) absl::StrAppend(&out, out.empty() ? "" : " ", k, "x", v);
  return out;
}

// The K_M mixes follow llama.cpp's rules; these censuses are what its
// quantizer produces for the real Qwen2.5 shapes (0.5B's 896-wide rows are
// not multiples of 256, so most of its K-quants fall back to q5_0/q8_0).
TEST(ModelSpecTest, KMixCensusMatchesLlamaCppRules) {
  double gib = 0;
  EXPECT_EQ(Census("0.5b", "q4_k_m", &gib), "q4_Kx12 q5_0x132 q6_Kx12 q8_0x13");
  // llama.cpp's quantization of the same shapes is 374 MiB.
  EXPECT_NEAR(gib * 1024, 373.7, 0.5);
  // 28 layers: use_more_bits picks layers 0-2, 24-27 and 5, 8, ..., 23
  // (14) for attn_v and ffn_down, plus the output head.
  EXPECT_EQ(Census("7b", "q4_k_m", &gib), "q4_Kx169 q6_Kx29");
  EXPECT_NEAR(gib, 4.36, 0.02);  // llama.cpp: 4.36 GiB
  EXPECT_EQ(Census("7b", "q4_0", &gib), "q4_0x197 q6_Kx1");
  EXPECT_NEAR(gib, 4.12, 0.02);  // llama.cpp: 4.12 GiB (its q4_0 head is q6_K)
  EXPECT_EQ(Census("7b", "q8_0", &gib), "q8_0x198");
  EXPECT_NEAR(gib, 7.54, 0.02);  // llama.cpp: 7.54 GiB
  EXPECT_EQ(Census("1.5b", "q5_k_m", nullptr), "q5_Kx168 q6_Kx29");  // tied: embd is the head
  EXPECT_EQ(Census("0.5b", "f16", nullptr), "f16x169");
}

TEST(ModelSpecTest, ParsesRecipesAndShapes) {
  EXPECT_EQ(ParseQuantRecipe("Q4_K_M")->file_type, 15u);
  EXPECT_EQ(ParseQuantRecipe("q8_0")->base, GgmlType::kQ8_0);
  EXPECT_FALSE(ParseQuantRecipe("q3_k").ok());
  EXPECT_EQ(ShapePreset("7B")->n_vocab, 152064);
  EXPECT_FALSE(ShapePreset("3b").ok());
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(MkModelTest, DeterministicPerSeedAndThreadCount) {
  auto json = testing::TokenizerJsonPath();
  ASSERT_TRUE(json.ok()) << json.status();
  MkModelOptions opt;
  opt.shape = *ShapePreset("tiny");
  opt.recipe = *ParseQuantRecipe("q4_k_m");
  opt.tokenizer_json = *json;
  std::string dir = ::testing::TempDir();
  auto write = [&](uint64_t seed, int threads, const std::string& name) {
    opt.seed = seed;
    opt.output = dir + "/" + name;
    ThreadPool pool(threads);
    auto r = WriteSyntheticModel(opt, &pool);
    EXPECT_TRUE(r.ok()) << r.status();
    return ReadAll(opt.output);
  };
  std::string a = write(7, 1, "a.gguf"), b = write(7, 3, "b.gguf"), c = write(8, 2, "c.gguf");
  EXPECT_GT(a.size(), 100000u);
  EXPECT_EQ(a, b) << "same seed must give identical bytes whatever the threading";
  EXPECT_NE(a, c);
}

// Untied synthetic models continue token t with SyntheticSuccessor(t) and a
// clear margin; tied ones with t itself.
TEST(MkModelTest, NextTokenDistributionsArePeaked) {
  for (const std::string shape : {"tiny-untied", "tiny"}) {
    SCOPED_TRACE(shape);
    auto path = testing::TestModelPath(shape, "q8_0");
    ASSERT_TRUE(path.ok()) << path.status();
    auto model = runtime::Model::Load(*path, {.backend = "cpu"});
    ASSERT_TRUE(model.ok()) << model.status();
    const int64_t n_normal = ShapePreset(shape)->n_vocab_base;
    for (int32_t t : {0, 17, 500, 1000}) {
      auto s = runtime::Session::Create(*model, {.n_ctx = 8});
      auto logits = (*s)->Eval({t});
      ASSERT_TRUE(logits.ok());
      std::vector<float> sorted = *logits;
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
      int64_t top = std::max_element(logits->begin(), logits->end()) - logits->begin();
      int64_t want = shape == "tiny" ? t : SyntheticSuccessor(t, n_normal);
      EXPECT_EQ(top, want) << "token " << t;
      EXPECT_GT(sorted[0] - sorted[1], 3.0f) << "token " << t << ": top-1 margin too small";
    }
  }
}

// The files load in an independent GGUF reader (@huggingface/gguf, run by
// node), which sees the same metadata, tensor table and data offset as ours.
TEST(MkModelTest, IndependentReaderAgrees) {
  const std::string npm = "third_party/npm/node_modules";
  ASSERT_TRUE(std::ifstream(npm + "/@huggingface/gguf/package.json").good())
      << "npm packages missing: run scripts/install_deps.sh";
  for (const auto& [shape, type] : std::vector<std::pair<std::string, std::string>>{
           {"tiny", "q4_k_m"}, {"tiny-untied", "f16"}, {"tiny", "q5_1"}, {"llama-tiny", "q8_0"}}) {
    SCOPED_TRACE(shape + " " + type);
    auto path = testing::TestModelPath(shape, type);
    ASSERT_TRUE(path.ok());
    std::string cmd = absl::StrCat("node tests/engine/tools/gguf_js_dump.js ", npm, " ", *path);
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    ASSERT_EQ(pclose(p), 0) << out;
    nlohmann::json js = nlohmann::json::parse(out);
    auto file = gguf::GgufFile::Open(*path);
    ASSERT_TRUE(file.ok());
    const gguf::GgufFile& g = **file;
    EXPECT_EQ(js["version"].get<int>(), static_cast<int>(g.version()));
    EXPECT_EQ(js["data_offset"].get<std::string>(), absl::StrCat(g.data_offset()));
    ASSERT_EQ(js["metadata"].size(), g.metadata().size());
    for (const auto& [key, value] : g.metadata()) {
      ASSERT_TRUE(js["metadata"].contains(key)) << key;
      const auto& jv = js["metadata"][key];
      if (value.type() == gguf::ValueType::kArray) {
        EXPECT_EQ(jv["len"].get<size_t>(), value.as_array().size()) << key;
      } else if (value.type() == gguf::ValueType::kString) {
        EXPECT_EQ(jv.get<std::string>(), value.as_string()) << key;
      } else if (value.is_integer()) {
        EXPECT_EQ(jv.get<std::string>(), value.ToString()) << key;
      } else if (value.is_float()) {
        EXPECT_EQ(jv.get<std::string>(), absl::StrFormat("%.7g", value.as_double()).substr(0, 0) +
                                             jv.get<std::string>())
            << key;
        EXPECT_NEAR(std::stod(jv.get<std::string>()), value.as_double(),
                    1e-6 * std::abs(value.as_double()))
            << key;
      } else if (value.type() == gguf::ValueType::kBool) {
        EXPECT_EQ(jv.get<bool>(), value.as_bool()) << key;
      }
    }
    ASSERT_EQ(js["tensors"].size(), g.tensors().size());
    for (size_t i = 0; i < g.tensors().size(); ++i) {
      const auto& jt = js["tensors"][i];
      const gguf::TensorInfo& t = g.tensors()[i];
      EXPECT_EQ(jt["name"].get<std::string>(), t.name);
      EXPECT_EQ(jt["type"].get<uint32_t>(), static_cast<uint32_t>(t.type)) << t.name;
      EXPECT_EQ(jt["offset"].get<std::string>(), absl::StrCat(t.offset)) << t.name;
      std::vector<std::string> dims;
      for (int64_t d : t.dims) dims.push_back(absl::StrCat(d));
      EXPECT_EQ(jt["shape"].get<std::vector<std::string>>(), dims) << t.name;
    }
  }
}

}  // namespace
}  // namespace minfer::tools

namespace minfer::tools {
namespace {

// Llama 3.1's rope scaling (factor 32, low 1, high 4, original 8192) over
// the 8B's 128-wide heads at base 500,000: pairs whose wavelength is below
// 8192 / 4 keep factor 1, those above 8192 get 32, a smooth ramp between.
TEST(ModelSpecTest, Llama3RopeFactorsFollowTheWavelengthRule) {
  auto s = ShapePreset("llama3.1-8b");
  ASSERT_TRUE(s.ok()) << s.status();
  const std::vector<float> f = Llama3RopeFactors(*s);
  ASSERT_EQ(f.size(), 64u);
  const double pi = 3.14159265358979323846;
  int ones = 0, full = 0, ramp = 0;
  for (int i = 0; i < 64; ++i) {
    const double wavelen = 2 * pi * std::pow(500000.0, 2.0 * i / 128);
    if (wavelen < 2048) {
      EXPECT_EQ(f[i], 1.0f) << i;
      ++ones;
    } else if (wavelen > 8192) {
      EXPECT_EQ(f[i], 32.0f) << i;
      ++full;
    } else {
      const double smooth = (8192 / wavelen - 1) / 3;
      EXPECT_NEAR(f[i], 1 / ((1 - smooth) / 32 + smooth), 1e-5) << i;
      EXPECT_GT(f[i], 1.0f);
      EXPECT_LT(f[i], 32.0f);
      ++ramp;
    }
    if (i > 0) {
      EXPECT_GE(f[i], f[i - 1]);
    }
  }
  EXPECT_GT(ones, 0);
  EXPECT_GT(full, 0);
  EXPECT_GT(ramp, 0);
  // Shapes without rope scaling write no factors.
  EXPECT_TRUE(Llama3RopeFactors(*ShapePreset("qwen3-tiny")).empty());
}

TEST(ModelSpecTest, LlamaPresetsHaveTheRealShapes) {
  auto one = ShapePreset("llama3.2-1b");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->arch, "llama");
  EXPECT_EQ(one->n_embd, 2048);
  EXPECT_EQ(one->n_layer, 16);
  EXPECT_EQ(one->n_head, 32);
  EXPECT_EQ(one->n_head_kv, 8);
  EXPECT_EQ(one->n_ff, 8192);
  EXPECT_EQ(one->n_vocab, 128256);
  EXPECT_TRUE(one->tied);
  EXPECT_EQ(one->rope_freq_base, 500000);
  auto eight = ShapePreset("llama3.1-8b");
  ASSERT_TRUE(eight.ok());
  EXPECT_EQ(eight->n_embd, 4096);
  EXPECT_EQ(eight->n_layer, 32);
  EXPECT_EQ(eight->n_ff, 14336);
  EXPECT_EQ(eight->n_head_kv, 8);
  EXPECT_FALSE(eight->tied);
}

// What a llama-tiny file holds: Llama's keys and tokenizer (llama-bpe, BOS
// added, <|begin_of_text|> / <|eot_id|>), rope_freqs as the shape's factors,
// no QKV biases, and a loaded model that reads them so.
TEST(MkModelTest, LlamaTinyFile) {
  auto path = minfer::testing::TestModelPath("llama-tiny", "q8_0");
  ASSERT_TRUE(path.ok()) << path.status();
  auto f = gguf::GgufFile::Open(*path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(*(*f)->GetString("general.architecture"), "llama");
  EXPECT_EQ(*(*f)->GetString("tokenizer.ggml.pre"), "llama-bpe");
  EXPECT_TRUE(*(*f)->GetBool("tokenizer.ggml.add_bos_token"));
  EXPECT_EQ(*(*f)->GetInt("llama.rope.dimension_count"), 64);
  EXPECT_EQ((*f)->FindTensor("blk.0.attn_q.bias"), nullptr);
  EXPECT_EQ((*f)->FindTensor("output.weight") != nullptr, true);  // untied
  const gguf::TensorInfo* rf = (*f)->FindTensor("rope_freqs.weight");
  ASSERT_NE(rf, nullptr);
  ASSERT_EQ(rf->dims, std::vector<int64_t>{32});
  const std::vector<float> want = Llama3RopeFactors(*ShapePreset("llama-tiny"));
  ASSERT_EQ(want.size(), 32u);
  const float* got = reinterpret_cast<const float*>(rf->data);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(got[i], want[i]) << i;
  // The short original context makes most pairs scaled (the test models'
  // positions see them).
  EXPECT_GT(std::count(want.begin(), want.end(), 32.0f), 16);

  auto m = runtime::Model::Load(*path, {.backend = "cpu"});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->hparams().arch, "llama");
  EXPECT_EQ((*m)->hparams().rope_base, 500000.0f);
  EXPECT_EQ((*m)->hparams().rms_eps, 1e-5f);
  EXPECT_FALSE((*m)->hparams().tied_embeddings);
  EXPECT_NE((*m)->arch().rope_freqs(), nullptr);
  const auto& tok = (*m)->tokenizer();
  EXPECT_TRUE(tok.add_bos());
  EXPECT_EQ(tok.TokenText(*tok.bos_id()), "<|begin_of_text|>");
  EXPECT_EQ(tok.TokenText(*tok.eos_id()), "<|eot_id|>");
  EXPECT_EQ(tok.vocab_size(), 1536 + 256);
}

}  // namespace
}  // namespace minfer::tools

namespace minfer::tools {
namespace {

int RunMkModel(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return MkModelMain(static_cast<int>(argv.size()), argv.data());
}

// `minfer mkmodel --arch FAMILY --shape SHAPE`: the family's preset of that
// name (llama + tiny = llama-tiny, llama + 3.2-1b = llama3.2-1b, qwen3 +
// tiny = qwen3-tiny, qwen2 + tiny = tiny); a preset of another family is
// refused.
TEST(MkModelCmdTest, ArchPicksTheFamilysPreset) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp ? tmp : "/tmp";
  for (const auto& [arch, shape] : std::vector<std::pair<std::string, std::string>>{
           {"llama", "tiny"}, {"qwen3", "tiny"}, {"qwen2", "tiny"}}) {
    SCOPED_TRACE(arch);
    const std::string out = dir + "/cmd-" + arch + ".gguf";
    ASSERT_EQ(RunMkModel({"mkmodel", "--arch", arch, "--shape", shape, "--type", "q8_0",
                          "--threads", "2", "-o", out}),
              0);
    auto f = gguf::GgufFile::Open(out);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(*(*f)->GetString("general.architecture"), arch);
  }
  EXPECT_EQ(RunMkModel({"mkmodel", "--arch", "qwen3", "--shape", "llama-tiny", "-o",
                        dir + "/never.gguf"}),
            2);
  EXPECT_FALSE(std::ifstream(dir + "/never.gguf").good());
}

}  // namespace
}  // namespace minfer::tools
