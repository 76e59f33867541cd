#include "engine/tools/mkmodel.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/gguf/gguf.h"
#include "engine/runtime/model.h"
#include "engine/runtime/session.h"
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
           {"tiny", "q4_k_m"}, {"tiny-untied", "f16"}, {"tiny", "q5_1"}}) {
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
