// `minfer grammar bench` on the CI schema set (tests/data/grammar): the
// set's labels are first confirmed by ajv, so that the bench's verdicts are
// checked against an independent truth; then the bench (the library) must
// judge every instance of every compiled schema right (on the whole Qwen
// vocabulary), compile the schemas
// the set expects to compile and refuse those it expects refused. The
// command line is run on the tiny test model's GGUF for its JSON report.
#include "engine/tools/grammar_bench.h"

#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/runtime/model.h"
#include "engine/tokenizer/hf_tokenizer_json.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/structured.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_models.h"

namespace minfer::tools {
namespace {

using testing::kSchemaSetPath;

class GrammarBenchTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto path = minfer::testing::TestModelPath("tiny", "q8_0");
    ASSERT_TRUE(path.ok()) << path.status();
    model_path_ = new std::string(*path);
    runtime::ModelOptions opt;
    opt.backend = "cpu";
    auto m = runtime::Model::Load(*path, opt);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = new std::shared_ptr<runtime::Model>(*m);
    // The whole Qwen vocabulary (the tiny model keeps its first 1,024
    // tokens), as MaskBench runs engines on a real one.
    auto json = minfer::testing::TokenizerJsonPath();
    ASSERT_TRUE(json.ok()) << json.status();
    auto data = tokenizer::TokenizerDataFromHfJson(*json);
    ASSERT_TRUE(data.ok()) << data.status() << " (run scripts/install_deps.sh)";
    auto tok = tokenizer::Tokenizer::Create(*std::move(data));
    ASSERT_TRUE(tok.ok()) << tok.status();
    qwen_ = tok->release();
  }
  static void TearDownTestSuite() {
    delete qwen_;
    delete model_;
    delete model_path_;
  }

  static std::string* model_path_;
  static std::shared_ptr<runtime::Model>* model_;
  static tokenizer::Tokenizer* qwen_;
};

std::string* GrammarBenchTest::model_path_ = nullptr;
std::shared_ptr<runtime::Model>* GrammarBenchTest::model_ = nullptr;
tokenizer::Tokenizer* GrammarBenchTest::qwen_ = nullptr;

TEST_F(GrammarBenchTest, AjvAgreesWithEveryLabel) {
  auto labels = minfer::testing::AjvCheckLabels(kSchemaSetPath);
  ASSERT_TRUE(labels.ok()) << labels.status();
  auto set = minfer::testing::LoadSchemaSet(kSchemaSetPath);
  ASSERT_TRUE(set.ok()) << set.status();
  size_t tests = 0;
  for (const auto& c : *set) tests += c.tests.size();
  EXPECT_EQ(labels->schemas, static_cast<int>(set->size()));
  EXPECT_EQ(labels->checked, static_cast<int>(tests));
  EXPECT_GE(set->size(), 40u);
  for (const std::string& m : labels->mislabeled) ADD_FAILURE() << "ajv disagrees: " << m;
  for (const std::string& u : labels->uncompilable) ADD_FAILURE() << "ajv cannot compile: " << u;
}

TEST_F(GrammarBenchTest, JudgesEveryInstanceOfTheSchemaSetRight) {
  auto set = minfer::testing::LoadSchemaSet(kSchemaSetPath);
  ASSERT_TRUE(set.ok()) << set.status();
  auto vocab = runtime::MakeGrammarVocabulary(*qwen_, 151936);
  std::ifstream in(minfer::testing::RunfilePath(kSchemaSetPath));
  ASSERT_TRUE(in.good());
  GrammarBenchOptions options;
  options.paths = 1;
  options.path_tokens = 48;
  // Generous: the set's schemas compile in milliseconds; a loaded CI machine
  // must not turn one into a refusal.
  options.compile_time_limit = std::chrono::milliseconds(20000);
  auto report = RunGrammarBench(*qwen_, vocab, in, options);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->outcomes.size(), set->size());

  // Compilation as the set expects; the counts the report derives from
  // the outcomes recomputed here from the file.
  int64_t compiled = 0, valid = 0, invalid = 0, skipped = 0;
  for (size_t i = 0; i < set->size(); ++i) {
    const auto& c = (*set)[i];
    const GrammarSchemaOutcome& o = report->outcomes[i];
    EXPECT_EQ(o.name, c.name);
    if (c.expect == "compile") {
      EXPECT_TRUE(o.compiled) << c.name << ": " << o.refusal;
    }
    if (c.expect == "refuse") {
      EXPECT_FALSE(o.compiled) << c.name << " compiled";
    }
    if (!o.compiled) {
      EXPECT_FALSE(o.refusal.empty());
      skipped += static_cast<int64_t>(c.tests.size());
      continue;
    }
    compiled++;
    for (const auto& t : c.tests) (t.valid ? valid : invalid)++;
  }
  EXPECT_EQ(report->schemas, static_cast<int64_t>(set->size()));
  EXPECT_EQ(report->compiled, compiled);
  EXPECT_EQ(report->refused, report->schemas - compiled);
  EXPECT_EQ(report->valid_tested, valid);
  EXPECT_EQ(report->invalid_tested, invalid);
  EXPECT_EQ(report->instances_skipped, skipped);
  int64_t reasons = 0;
  for (const auto& [reason, n] : report->refusal_reasons) reasons += n;
  EXPECT_EQ(reasons, report->refused);

  // No invalid instance accepted; no valid one rejected except those the
  // set marks as restricted by the front end's documented rules.
  EXPECT_EQ(report->invalid_accepted, 0);
  EXPECT_EQ(report->mask_mismatches, 0);
  EXPECT_EQ(report->dead_ends, 0);
  int64_t restricted_rejected = 0;
  for (const GrammarBenchFailure& f : report->failures) {
    const bool restricted = f.kind == "valid_rejected" && f.test >= 0 &&
                            !(*set)[f.schema].tests[f.test].restricted.empty();
    if (restricted) {
      restricted_rejected++;
      continue;
    }
    ADD_FAILURE() << f.kind << " in " << f.name << " (tests[" << f.test << "]): " << f.detail
                  << "\n  " << f.text;
  }
  EXPECT_EQ(report->valid_rejected, restricted_rejected);
  // Passing: compiled, and no instance judged wrongly.
  std::set<int64_t> failing;
  for (const GrammarBenchFailure& f : report->failures) {
    if (f.kind == "valid_rejected" || f.kind == "invalid_accepted") failing.insert(f.schema);
  }
  EXPECT_EQ(report->passing, report->compiled - static_cast<int64_t>(failing.size()));
  // Timing figures exist and are ordered.
  EXPECT_EQ(report->walks, report->compiled);
  EXPECT_GT(report->masks, report->valid_tested);
  EXPECT_GT(report->mask_us_p50, 0);
  EXPECT_LE(report->mask_us_p50, report->mask_us_p99);
  EXPECT_LE(report->mask_us_p99, report->mask_us_max);
  EXPECT_GT(report->compile_ms_p50, 0);
  EXPECT_LE(report->compile_ms_p50, report->compile_ms_p99);
  std::cout << report->ToTable();
}

TEST(GrammarBenchUnitTest, RefusalCategoriesDropLocationsAndCounts) {
  EXPECT_EQ(RefusalCategory("unsupported keyword 'not' at /properties/a"),
            "unsupported keyword 'not'");
  EXPECT_EQ(RefusalCategory("unsupported keyword 'multipleOf' (only 1 is enforced) at the root"),
            "unsupported keyword 'multipleOf'");
  EXPECT_EQ(RefusalCategory("unsupported format 'hostname' at /properties/h"),
            "unsupported format 'hostname'");
  EXPECT_EQ(RefusalCategory("grammar too complex: compilation took 2301 ms, over the limit"),
            "grammar too complex: time");
  EXPECT_EQ(RefusalCategory("grammar too complex: more than 100000 automaton states (rule 'x')"),
            "grammar too complex: states");
  EXPECT_EQ(RefusalCategory("schema nested deeper than 64 levels at offset 1234"),
            "schema nested deeper than N levels");
}

TEST(GrammarBenchUnitTest, BadLinesNameTheirLineAndEmptyOnesAreSkipped) {
  auto model = minfer::testing::TestModelPath("tiny", "q8_0");
  ASSERT_TRUE(model.ok()) << model.status();
  runtime::ModelOptions opt;
  opt.backend = "cpu";
  auto m = runtime::Model::Load(*model, opt);
  ASSERT_TRUE(m.ok()) << m.status();
  auto vocab = runtime::MakeGrammarVocabulary((*m)->tokenizer(), (*m)->hparams().n_vocab);
  std::istringstream in("{\"schema\": {\"type\": \"boolean\"}, \"tests\": [{\"data\": true, "
                        "\"valid\": true}, {\"data\": 1, \"valid\": false}]}\n\n[1]\n");
  auto r = RunGrammarBench((*m)->tokenizer(), vocab, in, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("line 3"), std::string::npos) << r.status();

  // --limit stops before the bad line; the boolean schema passes.
  std::istringstream again(in.str());
  GrammarBenchOptions o;
  o.limit = 1;
  r = RunGrammarBench((*m)->tokenizer(), vocab, again, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->schemas, 1);
  EXPECT_EQ(r->passing, 1);
  EXPECT_EQ(r->valid_tested, 1);
  EXPECT_EQ(r->invalid_tested, 1);
  // A walk over {true, false} always finishes within the default cap.
  EXPECT_EQ(r->walks_finished, r->walks);
}

TEST_F(GrammarBenchTest, CommandLinePrintsOneJsonObject) {
  auto r = minfer::testing::RunCommand(
      {minfer::testing::RunfilePath("engine/tools/minfer"), "grammar", "bench", "-m",
       *model_path_, "--schemas", minfer::testing::RunfilePath(kSchemaSetPath), "--json",
       "--limit", "5", "--paths", "1", "--path-tokens", "16"},
      std::chrono::seconds(300));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->exit_code, 0) << r->err;
  const nlohmann::json j = nlohmann::json::parse(r->out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r->out;
  for (const char* key :
       {"schemas", "compiled", "refused", "passing", "valid_tested", "valid_rejected",
        "invalid_tested", "invalid_accepted", "mask_us_p50", "mask_us_p99", "mask_us_max",
        "compile_ms_p50", "compile_ms_p99", "refusal_reasons"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["schemas"], 5);
  EXPECT_EQ(j["invalid_accepted"], 0);
  // The bitmask covers the model's output rows (its n_vocab), read from the
  // GGUF's tensor table without loading weights.
  EXPECT_EQ(j["rows"], (*model_)->hparams().n_vocab);
  EXPECT_EQ(j["vocab"], (*model_)->tokenizer().vocab_size());

  // A usage error is CLI11's exit code; a missing file is 1 with a message.
  auto bad = minfer::testing::RunCommand({minfer::testing::RunfilePath("engine/tools/minfer"),
                                          "grammar", "bench", "-m", *model_path_, "--schemas",
                                          "/nonexistent.jsonl"});
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->exit_code, 1);
  EXPECT_NE(bad->err.find("/nonexistent.jsonl"), std::string::npos) << bad->err;
}

}  // namespace
}  // namespace minfer::tools
