// Fuzzing the grammar engine with random tokens: for every schema of the CI
// set that compiles (and JSON mode), walks that draw each token uniformly
// among those the mask allows, until an end token is drawn or a cap; over
// the tiny test model's vocabulary (Qwen's first 1,024 tokens and its
// control tokens: thousands of outputs) and over the whole Qwen vocabulary
// (151,936 rows: multi-byte tokens spanning JSON tokens, partial UTF-8,
// long runs of punctuation and whitespace; fewer outputs, slower masks). Uniform draws reach
// states no model would: long runs of odd tokens, escapes, deep nesting,
// numbers at their bounds. Every finished output must be valid UTF-8, be
// accepted again byte by byte by a fresh matcher, parse as JSON and
// validate against its schema — judged by ajv, not by minfer. Thousands of
// outputs in one node invocation.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/spec.h"
#include "engine/runtime/model.h"
#include "engine/tokenizer/hf_tokenizer_json.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tools/grammar_bench.h"
#include "gtest/gtest.h"
#include "tests/support/structured.h"
#include "tests/support/test_models.h"


namespace minfer::grammar {
namespace {

// Strict UTF-8 (no overlongs, no surrogates, nothing past U+10FFFF): what
// the JSON front end's strings promise.
bool ValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<uint8_t>(s[i]);
    int n = 0;
    uint32_t cp = 0, min = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, cp = c & 0x07, min = 0x10000;
    } else {
      return false;
    }
    for (int k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return false;
      const auto d = static_cast<uint8_t>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

struct Target {
  std::string name;
  std::string judge;  // the schema ajv judges against
  std::shared_ptr<const CompiledGrammar> grammar;
  int walks = 0, finished = 0;
};

// Compiles the set's schemas (those it does not expect refused) and JSON
// mode with `compiler`.
void CompileTargets(GrammarCompiler& compiler, std::vector<Target>* targets) {
  auto set = testing::LoadSchemaSet(testing::kSchemaSetPath);
  ASSERT_TRUE(set.ok()) << set.status();
  for (const auto& c : *set) {
    if (c.expect == "refuse") continue;
    GrammarSpec spec;
    spec.kind = GrammarKind::kJsonSchema;
    spec.text = c.schema;
    auto cg = compiler.Compile(spec);
    if (c.expect == "compile") {
      ASSERT_TRUE(cg.ok()) << c.name << ": " << cg.status();
    }
    if (cg.ok()) targets->push_back({c.name, c.schema, *cg});
  }
  GrammarSpec spec;  // JSON mode: any object
  spec.kind = GrammarKind::kJsonObject;
  auto cg = compiler.Compile(spec);
  ASSERT_TRUE(cg.ok()) << cg.status();
  targets->push_back({"json_object_mode", R"({"type":"object"})", *cg});
  ASSERT_GE(targets->size(), 40u);
}

// Walks round robin over the targets until `want` outputs finished or
// `budget` is spent (the walks' cost depends on the matcher's speed and
// the machine; the coverage per round does not), checks each walk and
// finished output, then has ajv judge them all. Returns the outputs judged.
size_t FuzzAndJudge(std::vector<Target>& targets, uint64_t seed, int32_t cap, size_t want,
                    std::chrono::seconds budget) {
  const auto deadline = std::chrono::steady_clock::now() + budget;
  std::mt19937_64 rng(seed);
  std::vector<std::pair<int, std::string>> outputs;
  int64_t walks = 0, tokens = 0;
  while (outputs.size() < want && std::chrono::steady_clock::now() < deadline) {
    for (size_t t = 0; t < targets.size() && outputs.size() < want; ++t) {
      Target& tg = targets[t];
      GrammarMatcher m(tg.grammar);
      const tools::GrammarWalk w = tools::RandomGrammarWalk(m, rng, cap);
      walks++;
      tg.walks++;
      tokens += w.tokens;
      EXPECT_FALSE(w.dead_end) << tg.name << ": no token allowed after: " << w.text;
      EXPECT_FALSE(w.mismatch) << tg.name << ": an allowed token was refused after: " << w.text;
      if (!w.finished) continue;
      tg.finished++;
      EXPECT_TRUE(ValidUtf8(w.text)) << tg.name << ": " << absl::CEscape(w.text);
      // The same bytes, fed at once to a fresh matcher (another path
      // through the automata than token by token), are a complete output.
      GrammarMatcher again(tg.grammar);
      EXPECT_TRUE(again.AcceptBytes(w.text) && again.IsComplete()) << tg.name << ": " << w.text;
      outputs.emplace_back(static_cast<int>(t), w.text);
    }
  }
  std::cout << walks << " walks, " << tokens << " tokens, " << outputs.size() << " finished\n";
  for (const Target& tg : targets) {
    std::cout << "  " << tg.name << ": " << tg.finished << "/" << tg.walks << "\n";
  }
  std::vector<std::string> schemas;
  for (const Target& tg : targets) schemas.push_back(tg.judge);
  auto verdicts = testing::AjvValidate(schemas, outputs);
  EXPECT_TRUE(verdicts.ok()) << verdicts.status();
  if (!verdicts.ok()) return 0;
  EXPECT_EQ(verdicts->size(), outputs.size());
  int bad = 0;
  for (size_t i = 0; i < outputs.size() && i < verdicts->size(); ++i) {
    const testing::AjvVerdict& v = (*verdicts)[i];
    if (v.json && v.valid) continue;
    if (++bad <= 20) {
      ADD_FAILURE() << targets[outputs[i].first].name << ": " << v.error << "\n  "
                    << outputs[i].second;
    }
  }
  EXPECT_EQ(bad, 0) << "of " << outputs.size() << " outputs";
  return outputs.size();
}

TEST(GrammarFuzzTest, TinyModelVocabularyThousandsOfOutputs) {
  auto path = testing::TestModelPath("tiny", "q8_0");
  ASSERT_TRUE(path.ok()) << path.status();
  runtime::ModelOptions mo;
  mo.backend = "cpu";
  auto model = runtime::Model::Load(*path, mo);
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<Target> targets;
  CompileTargets((*model)->grammars(), &targets);
  if (HasFatalFailure()) return;
  const size_t judged = FuzzAndJudge(targets, 20261205, 256, 4000, std::chrono::seconds(30));
  EXPECT_GE(judged, 2000u) << "too few outputs finished (a slow matcher or machine?)";
}

TEST(GrammarFuzzTest, WholeQwenVocabulary) {
  auto json_path = testing::TokenizerJsonPath();
  ASSERT_TRUE(json_path.ok()) << json_path.status();
  auto data = tokenizer::TokenizerDataFromHfJson(*json_path);
  ASSERT_TRUE(data.ok()) << data.status() << " (run scripts/install_deps.sh)";
  auto tok = tokenizer::Tokenizer::Create(*std::move(data));
  ASSERT_TRUE(tok.ok()) << tok.status();
  GrammarCompiler compiler(runtime::MakeGrammarVocabulary(**tok, 151936));
  ASSERT_EQ(compiler.vocab().n_rows(), 151936);
  ASSERT_FALSE(compiler.vocab().stop_ids().empty());
  std::vector<Target> targets;
  CompileTargets(compiler, &targets);
  if (HasFatalFailure()) return;
  // Masks over free text cost the most here; shorter walks, and a floor
  // that one round over the set reaches.
  const size_t judged = FuzzAndJudge(targets, 7, 128, 2000, std::chrono::seconds(20));
  EXPECT_GE(judged, 20u);
}

}  // namespace
}  // namespace minfer::grammar
