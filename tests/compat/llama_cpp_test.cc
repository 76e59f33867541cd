// llama.cpp is the yardstick for GGUF compatibility: every file `minfer
// mkmodel` writes (each weight type and the llama.cpp mixes) must load in
// llama.cpp's own loader, tokenize to the same ids with llama.cpp's
// tokenizer, and continue greedily with the same tokens as minfer's CPU
// backend. The reference is a prebuilt llama.cpp CPU build run through the
// npm package node-llama-cpp (installed by scripts/install_deps.sh), driven
// by llama_cpp_ref.mjs (forward) and llama_cpp_tokenize.mjs (vocabulary).
//
// Logits: along llama.cpp's greedy path, at each of the kGreedyTokens steps,
// the log-probabilities (log-softmax of the logits) of llama.cpp's kTopK
// most likely tokens must agree with minfer's within LogProbTolerance
// (absolute, in nats). f32 weights: 0.005 (the two CPU implementations sum
// in different orders; measured up to ~5e-4); f16: 0.01 (~2e-3 measured);
// bf16: 0.05 (llama.cpp rounds the activations to bf16 for its dot
// products; ~0.012 measured). Quantized weights: 0.15
// (each side quantizes activations for its integer dot products in its own
// block format, llama.cpp q8_K for K-quants where minfer uses 32-wide
// blocks, which moves the logits by a few tenths of a percent and a
// log-probability near -15 by a few hundredths of a nat; gpt-oss files
// more, see LogProbTolerance). A wrong RoPE
// angle, a missing BOS or a wrong head moves them by far more (a BOS
// mismatch: ~0.2 nats on llama-tiny f32).
#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
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
constexpr int kTopK = 8;
double LogProbTolerance(const std::string& shape, const std::string& type) {
  if (type == "f32") return 0.005;
  if (type == "f16") return 0.01;
  if (type == "bf16") return 0.05;
  // gpt-oss's YaRN scale multiplies every attention logit by 1.81 and its
  // router follows the quantized activations, so the two sides' different
  // 8-bit activation blocks move the far tail (log-probabilities near -15)
  // further: measured 0.149 (q8_0) and 0.335 (MXFP4 experts), with f32
  // weights at 0.0009 and greedy ids equal with 1-nat margins.
  if (shape.rfind("gpt-oss", 0) == 0) return 0.4;
  return 0.15;
}
// A continuation "moves": at least this many distinct tokens in the 24.
constexpr size_t kMinDistinct = 12;
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

// Log-softmax rows of minfer's logits along `path` (the prompt, then the
// continuation): row i predicts continuation token i.
std::vector<std::vector<double>> MinferLogProbs(const std::shared_ptr<runtime::Model>& m,
                                                const std::vector<int32_t>& prompt,
                                                const std::vector<int32_t>& continuation) {
  auto s = runtime::Session::Create(m, {.n_ctx = 256});
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok() || continuation.empty()) return {};
  std::vector<int32_t> path = prompt;
  path.insert(path.end(), continuation.begin(), continuation.end() - 1);
  auto logits = (*s)->Eval(path, /*all_logits=*/true);
  EXPECT_TRUE(logits.ok()) << logits.status();
  if (!logits.ok()) return {};
  const int64_t n_vocab = m->hparams().n_vocab;
  std::vector<std::vector<double>> rows;
  for (size_t i = 0; i < continuation.size(); ++i) {
    const float* row = logits->data() + (prompt.size() - 1 + i) * n_vocab;
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < n_vocab; ++j) mx = std::max(mx, static_cast<double>(row[j]));
    for (int64_t j = 0; j < n_vocab; ++j) sum += std::exp(row[j] - mx);
    std::vector<double> lp(n_vocab);
    for (int64_t j = 0; j < n_vocab; ++j) lp[j] = row[j] - mx - std::log(sum);
    rows.push_back(std::move(lp));
  }
  return rows;
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
                                   absl::StrCat(kGreedyTokens), absl::StrCat(kTopK)};
  argv.insert(argv.end(), kPrompts.begin(), kPrompts.end());
  auto r = testing::RunCommand(argv, std::chrono::seconds(120));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->exit_code, 0) << "llama.cpp could not load " << shape << " " << type << ":\n"
                             << r->err;
  Json ref = Json::parse(r->out);
  ASSERT_EQ(ref["prompts"].size(), kPrompts.size());

  auto model = runtime::Model::Load(*path, {.backend = "cpu"});
  ASSERT_TRUE(model.ok()) << model.status();
  // Both sides agree on whether prompts start with BOS (Llama yes, Qwen no).
  EXPECT_EQ(ref["add_bos"].get<bool>(), (*model)->tokenizer().add_bos());
  double worst = 0;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    SCOPED_TRACE(kPrompts[i]);
    const Json& p = ref["prompts"][i];
    tokenizer::EncodeOptions eo;
    eo.parse_special = false;  // BOS as the model asks (EncodeOptions::add_bos)
    std::vector<int32_t> ids = (*model)->tokenizer().Encode(kPrompts[i], eo);
    EXPECT_EQ(ids, p["ids"].get<std::vector<int32_t>>()) << "tokenization differs";
    std::vector<int32_t> ours = MinferGreedy(*model, ids);
    std::vector<int32_t> theirs = p["greedy"].get<std::vector<int32_t>>();
    EXPECT_EQ(ours, theirs) << "greedy continuation differs";
    ASSERT_EQ(theirs.size(), static_cast<size_t>(kGreedyTokens));
    // The path must move, or equality says little about the forward. (Tied
    // synthetic models continue each token with itself by construction,
    // tools/mkmodel.h; the untied ones follow a permutation.)
    if (!(*model)->hparams().tied_embeddings) {
      EXPECT_GE(std::set<int32_t>(theirs.begin(), theirs.end()).size(), kMinDistinct)
          << "the greedy continuation barely changes token to token";
    }
    const auto lp = MinferLogProbs(*model, ids, theirs);
    ASSERT_EQ(lp.size(), theirs.size());
    for (size_t step = 0; step < theirs.size(); ++step) {
      const Json& top = p["top"][step];
      ASSERT_GE(top.size(), 2u);
      for (const Json& pair : top) {
        const int32_t id = pair[0].get<int32_t>();
        const double expected = pair[1].get<double>();
        ASSERT_GE(id, 0);
        ASSERT_LT(id, static_cast<int32_t>(lp[step].size()));
        const double diff = std::abs(lp[step][id] - expected);
        worst = std::max(worst, diff);
        EXPECT_LE(diff, LogProbTolerance(shape, type))
            << "step " << step << " token " << id << ": minfer " << lp[step][id]
            << ", llama.cpp " << expected;
      }
      // A clear top-2 margin: the greedy choice is not a near tie.
      EXPECT_GE(top[0][1].get<double>() - top[1][1].get<double>(), 1.0) << "step " << step;
    }
  }
  std::printf("%s %s: largest log-probability difference %.5f nats\n", shape.c_str(),
              type.c_str(), worst);
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

// The same corpus through Llama 3's full 128,256-token vocabulary (the
// llama-bpe pre-tokenizer: digit runs, no normalization), without BOS on
// either side (llama.cpp's tokenize without add_special).
TEST(LlamaCppTokenizerTest, CorpusMatchesWithTheFullLlama3Vocabulary) {
  ASSERT_TRUE(std::ifstream(absl::StrCat(kModules, "/node-llama-cpp/package.json")).good())
      << "npm packages missing: run scripts/install_deps.sh";
  auto path = testing::TestModelPath("llama-small", "q8_0");
  ASSERT_TRUE(path.ok()) << path.status();
  const std::string corpus = "tests/engine/tokenizer/testdata/corpus.jsonl";
  auto r = testing::RunCommand({"/usr/bin/env", "node", "tests/compat/llama_cpp_tokenize.mjs",
                                kModules, *path, corpus, "raw"},
                               std::chrono::seconds(120));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->exit_code, 0) << r->err;
  Json ref = Json::parse(r->out);
  auto model = runtime::Model::Load(*path, {.backend = "cpu"});
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ((*model)->tokenizer().vocab_size(), 128256);
  std::ifstream in(corpus);
  std::string line;
  size_t i = 0;
  tokenizer::EncodeOptions eo;
  eo.parse_special = false;
  eo.add_bos = false;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ASSERT_LT(i, ref.size());
    const std::string text = Json::parse(line).get<std::string>();
    EXPECT_EQ((*model)->tokenizer().Encode(text, eo), ref[i].get<std::vector<int32_t>>())
        << "corpus line " << i + 1 << ": " << text.substr(0, 80);
    ++i;
  }
  EXPECT_EQ(i, ref.size());
  EXPECT_GE(i, 300u);
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
                      std::pair{"qwen3-tiny", "q4_k_m"},
                      // Llama 3: adjacent-pair RoPE with rope_freqs factors,
                      // BOS, the llama-bpe pre-tokenizer.
                      std::pair{"llama-tiny", "f32"}, std::pair{"llama-tiny", "q8_0"},
                      std::pair{"llama-tiny", "q4_k_m"},
                      // Qwen3 MoE: a router choosing 4 of 16 experts per
                      // token, experts in each weight type.
                      std::pair{"qwen3moe-tiny", "f32"}, std::pair{"qwen3moe-tiny", "q8_0"},
                      std::pair{"qwen3moe-tiny", "q4_k_m"},
                      // MXFP4 experts (gpt-oss's format) in llama.cpp's loader
                      // and dot products.
                      std::pair{"qwen3moe-tiny", "mxfp4_moe"},
                      // gpt-oss: attention sinks, a sliding window of 16 on
                      // the even layers, YaRN RoPE, biases everywhere, the
                      // clamped SwiGLU, a softmax over the chosen experts.
                      std::pair{"gpt-oss-tiny", "f32"}, std::pair{"gpt-oss-tiny", "q8_0"},
                      std::pair{"gpt-oss-tiny", "mxfp4_moe"}, std::pair{"gpt-oss-tiny", "q4_k_m"},
                      // Tied head over the full 128,256-token vocabulary.
                      std::pair{"llama-small", "q8_0"}),
    [](const auto& info) {
      std::string n = info.param.first + "_" + info.param.second;
      for (char& c : n) {
        if (c == '-') c = '_';
      }
      return n;
    });

}  // namespace
}  // namespace minfer
