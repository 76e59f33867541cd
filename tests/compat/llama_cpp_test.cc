// llama.cpp is the yardstick for GGUF compatibility: every file `minfer
// mkmodel` writes (each weight type and the llama.cpp mixes) must load in
// llama.cpp's own loader, tokenize to the same ids with llama.cpp's
// tokenizer, and continue greedily with the same tokens as minfer's CPU
// backend. The reference is a prebuilt llama.cpp CPU build run through the
// npm package node-llama-cpp (installed by scripts/install_deps.sh), driven
// by llama_cpp_ref.mjs (forward) and llama_cpp_tokenize.mjs (vocabulary).
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/runtime/generation.h"
#include "engine/runtime/model.h"
#include "engine/runtime/session.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/subprocess.h"
#include "tests/support/test_models.h"

namespace minfer {
namespace {

using Json = nlohmann::json;

constexpr int kGreedyTokens = 24;
const char* const kModules = "third_party/npm/node_modules";

// Prompts that exercise the pre-tokenizer (contractions, digits, CJK,
// accents, punctuation runs, newlines) as well as the forward.
const std::vector<std::string> kPrompts = {
    "Hello world, this is a test of the synthetic model.",
    "I'm sure they'd've said 12345 times: \"don't!\"\n\n  indented\tline",
    "Ünïcödé café — 你好，世界! Привет, мир. naïve résumé",
};

std::vector<int32_t> MinferGreedy(const std::shared_ptr<runtime::Model>& m,
                                  std::vector<int32_t> prompt) {
  auto s = runtime::Session::Create(m, {.n_ctx = 256});
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return {};
  runtime::GenerateRequest req;
  req.prompt = std::move(prompt);
  req.sampling.temperature = 0;
  req.max_tokens = kGreedyTokens;
  req.ignore_eos = true;
  auto g = runtime::Generate(s->get(), std::move(req), nullptr);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? (*g)->output_tokens() : std::vector<int32_t>{};
}

class LlamaCppTest : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(LlamaCppTest, LoadsTokenizesAndGeneratesLikeMinfer) {
  const auto& [shape, type] = GetParam();
  ASSERT_TRUE(std::ifstream(absl::StrCat(kModules, "/node-llama-cpp/package.json")).good())
      << "npm packages missing: run scripts/install_deps.sh";
  auto path = testing::TestModelPath(shape, type);
  ASSERT_TRUE(path.ok()) << path.status();
  // env finds node on the PATH (RunCommand does not search it).
  std::vector<std::string> argv = {"/usr/bin/env", "node", "tests/compat/llama_cpp_ref.mjs",
                                   kModules, *path,
                                   absl::StrCat(kGreedyTokens)};
  argv.insert(argv.end(), kPrompts.begin(), kPrompts.end());
  auto r = testing::RunCommand(argv, std::chrono::seconds(120));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->exit_code, 0) << "llama.cpp could not load " << shape << " " << type << ":\n"
                             << r->err;
  Json ref = Json::parse(r->out);
  ASSERT_EQ(ref["prompts"].size(), kPrompts.size());

  auto model = runtime::Model::Load(*path, {.backend = "cpu"});
  ASSERT_TRUE(model.ok()) << model.status();
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    SCOPED_TRACE(kPrompts[i]);
    const Json& p = ref["prompts"][i];
    tokenizer::EncodeOptions eo;
    eo.parse_special = false;
    std::vector<int32_t> ids = (*model)->tokenizer().Encode(kPrompts[i], eo);
    EXPECT_EQ(ids, p["ids"].get<std::vector<int32_t>>()) << "tokenization differs";
    std::vector<int32_t> ours = MinferGreedy(*model, ids);
    std::vector<int32_t> theirs = p["greedy"].get<std::vector<int32_t>>();
    EXPECT_EQ(ours, theirs) << "greedy continuation differs";
    EXPECT_EQ(theirs.size(), static_cast<size_t>(kGreedyTokens));
  }
}

// The tokenizer corpus of tests/engine/tokenizer (325 strings: scripts,
// emoji, code, whitespace runs, contractions, NFD accents) through the real
// Qwen2 vocabulary: llama.cpp's ids for NFC(text) equal minfer's for text
// (minfer normalizes like Hugging Face's Qwen2 tokenizer; llama.cpp leaves
// NFD input unnormalized, so the reference side normalizes first).
TEST(LlamaCppTokenizerTest, CorpusMatchesWithTheFullQwenVocabulary) {
  ASSERT_TRUE(std::ifstream(absl::StrCat(kModules, "/node-llama-cpp/package.json")).good())
      << "npm packages missing: run scripts/install_deps.sh";
  auto path = testing::TestModelPath("small", "q8_0");  // the full 151,936-token vocabulary
  ASSERT_TRUE(path.ok()) << path.status();
  const std::string corpus = "tests/engine/tokenizer/testdata/corpus.jsonl";
  auto r = testing::RunCommand({"/usr/bin/env", "node", "tests/compat/llama_cpp_tokenize.mjs",
                                kModules, *path, corpus},
                               std::chrono::seconds(120));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->exit_code, 0) << r->err;
  Json ref = Json::parse(r->out);
  auto model = runtime::Model::Load(*path, {.backend = "cpu"});
  ASSERT_TRUE(model.ok()) << model.status();
  std::ifstream in(corpus);
  std::string line;
  size_t i = 0, checked = 0;
  tokenizer::EncodeOptions eo;
  eo.parse_special = false;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ASSERT_LT(i, ref.size());
    const std::string text = Json::parse(line).get<std::string>();
    EXPECT_EQ((*model)->tokenizer().Encode(text, eo), ref[i].get<std::vector<int32_t>>())
        << "corpus line " << i + 1 << ": " << text.substr(0, 80);
    ++i;
    ++checked;
  }
  EXPECT_EQ(i, ref.size());
  EXPECT_GE(checked, 300u);
}

INSTANTIATE_TEST_SUITE_P(
    EveryType, LlamaCppTest,
    ::testing::Values(std::pair{"tiny-untied", "f32"}, std::pair{"tiny-untied", "f16"},
                      std::pair{"tiny-untied", "bf16"}, std::pair{"tiny-untied", "q4_0"},
                      std::pair{"tiny-untied", "q4_1"}, std::pair{"tiny-untied", "q5_0"},
                      std::pair{"tiny-untied", "q5_1"}, std::pair{"tiny-untied", "q8_0"},
                      std::pair{"tiny-untied", "q4_k"}, std::pair{"tiny-untied", "q5_k"},
                      std::pair{"tiny-untied", "q6_k"}, std::pair{"tiny-untied", "q4_k_m"},
                      std::pair{"tiny-untied", "q5_k_m"}, std::pair{"tiny", "q4_k_m"},
                      // Qwen3: per-head q/k norms, a q twice the stream's width.
                      std::pair{"qwen3-tiny", "f32"}, std::pair{"qwen3-tiny", "q8_0"},
                      std::pair{"qwen3-tiny", "q4_k_m"}),
    [](const auto& info) {
      std::string n = info.param.first + "_" + info.param.second;
      for (char& c : n) {
        if (c == '-') c = '_';
      }
      return n;
    });

}  // namespace
}  // namespace minfer
