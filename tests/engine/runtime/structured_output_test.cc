// Structured outputs end to end in the engine: the tiny random-weight model
// at temperature 1, one constrained sequence per schema of the CI set (and
// JSON mode), batched in one Engine. Every output that finishes by `stop`
// (the grammar complete and an end token drawn: FinishReason::kEos) must
// parse as JSON and validate against its schema — judged by ajv — and, as
// issue 27 asks, at least 80% finish that way within 1,500 tokens (44 of 53
// do: every number, fraction and fractional second is capped at 32 digits
// per run; the 9 that do not are free strings and recursive structures,
// where this model repeats one token forever). A random model is a harsh
// writer: it has no idea of JSON, so every choice it makes between what the
// grammar allows is arbitrary.
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/spec.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/model.h"
#include "gtest/gtest.h"
#include "tests/support/structured.h"
#include "tests/support/test_models.h"

namespace minfer::runtime {
namespace {

struct Case {
  std::string name;
  std::string judge;  // the schema ajv judges against
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  std::string text;
  FinishReason reason = FinishReason::kLength;
  absl::Status status;
  int tokens = 0;
};

TEST(StructuredOutputTest, RandomModelOutputsValidateAndMostFinishByStop) {
  auto path = testing::TestModelPath("tiny", "q8_0");
  ASSERT_TRUE(path.ok()) << path.status();
  ModelOptions mo;
  mo.backend = "cpu";
  auto model = Model::Load(*path, mo);
  ASSERT_TRUE(model.ok()) << model.status();

  auto set = testing::LoadSchemaSet(testing::kSchemaSetPath);
  ASSERT_TRUE(set.ok()) << set.status();
  std::vector<Case> cases;
  for (const auto& c : *set) {
    if (c.expect == "refuse") continue;
    grammar::GrammarSpec spec;
    spec.kind = grammar::GrammarKind::kJsonSchema;
    spec.text = c.schema;
    auto cg = (*model)->grammars().Compile(spec);
    if (c.expect == "compile") {
      ASSERT_TRUE(cg.ok()) << c.name << ": " << cg.status();
    }
    if (cg.ok()) cases.push_back({c.name, c.schema, *cg});
  }
  grammar::GrammarSpec object_mode;
  object_mode.kind = grammar::GrammarKind::kJsonObject;
  auto cg = (*model)->grammars().Compile(object_mode);
  ASSERT_TRUE(cg.ok()) << cg.status();
  cases.push_back({"json_object_mode", R"({"type":"object"})", *cg});
  ASSERT_GE(cases.size(), 40u);

  EngineOptions eo;
  eo.max_seqs = 16;
  eo.n_ctx = 2048;
  auto engine = Engine::Create(*model, eo);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::vector<int32_t> prompt =
      (*model)->tokenizer().Encode("Answer in JSON:", {.parse_special = false, .add_bos = false});
  std::map<uint64_t, size_t> by_id;
  for (size_t i = 0; i < cases.size(); ++i) {
    GenerateRequest r;
    r.prompt = prompt;
    r.sampling.temperature = 1.0f;
    r.sampling.seed = 1000 + i;
    r.max_tokens = 1500;
    r.grammar = cases[i].grammar;
    auto id = (*engine)->Add(std::move(r));
    ASSERT_TRUE(id.ok()) << cases[i].name << ": " << id.status();
    by_id[*id] = i;
  }
  std::vector<EngineEvent> events;
  while ((*engine)->HasWork()) {
    events.clear();
    ASSERT_TRUE((*engine)->Step(&events).ok());
    for (const EngineEvent& ev : events) {
      Case& c = cases[by_id.at(ev.id)];
      c.text += ev.out.text;
      c.tokens += static_cast<int>(ev.out.tokens.size());
      if (ev.finished) {
        c.reason = ev.reason;
        c.status = ev.status;
      }
    }
  }

  std::vector<std::string> schemas;
  std::vector<std::pair<int, std::string>> outputs;
  std::vector<size_t> which;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    ASSERT_TRUE(c.status.ok()) << c.name << ": " << c.status;
    schemas.push_back(c.judge);
    std::cout << c.name << ": " << FinishReasonName(c.reason) << " after " << c.tokens
              << " tokens\n";
    if (c.reason != FinishReason::kEos) {
      std::cout << "  " << absl::CEscape(c.text.substr(0, 100)) << " ... "
                << absl::CEscape(c.text.substr(c.text.size() > 100 ? c.text.size() - 100 : 0))
                << "\n";
      // Unfinished outputs hit the cap, never anything else.
      EXPECT_EQ(c.reason, FinishReason::kLength) << c.name;
      continue;
    }
    outputs.emplace_back(static_cast<int>(i), c.text);
    which.push_back(i);
  }
  auto verdicts = testing::AjvValidate(schemas, outputs);
  ASSERT_TRUE(verdicts.ok()) << verdicts.status();
  for (size_t k = 0; k < outputs.size(); ++k) {
    const testing::AjvVerdict& v = (*verdicts)[k];
    EXPECT_TRUE(v.json && v.valid) << cases[which[k]].name << ": " << v.error << "\n  "
                                   << outputs[k].second;
  }
  // At least 80% finish by stop within 1,500 tokens.
  EXPECT_GE(outputs.size() * 10, cases.size() * 8)
      << outputs.size() << " of " << cases.size() << " finished by stop";
}

}  // namespace
}  // namespace minfer::runtime
