// When a grammar starts to constrain a completion, and the reasoning budget
// (issue 28: strict tools in auto mode, a grammar after the think block,
// llama-server's / Anthropic's reasoning budget). A Completion of the tiny
// model (Qwen vocabulary) is driven with scripted logits: a script token
// gets a logit far above the random rest, so at temperature 1 it is drawn
// unless a mask removes it; past the script the draws are random. What must
// hold is checked on the text with the reference recognizer, not the
// matcher: text before a trigger is the script's (no mask applied), text
// from the trigger on is in the grammar's language, a spent budget closes
// the think block after exactly `budget` tokens.
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/matcher.h"
#include "engine/runtime/completion.h"
#include "engine/runtime/model.h"
#include "gtest/gtest.h"
#include "tests/engine/grammar/recognizer.h"
#include "tests/support/cpu_model.h"
#include "tests/support/test_models.h"

namespace minfer::runtime {
namespace {

using grammar::GrammarBuilder;
using grammar::RuleId;
using Start = GenerateRequest::GrammarStart;

std::shared_ptr<Model> LoadTiny() {
  return testing::LoadCpuTestModel("tiny", "q8_0");
}

// `prefix` then {"a":<1-3 digits>} then `suffix`.
grammar::Grammar CallGrammar(const std::string& prefix, const std::string& suffix) {
  GrammarBuilder b;
  RuleId root = b.AddRule(
      "root", b.Seq({b.Literal(prefix + "{\"a\":"), b.Repeat(b.ByteRange('0', '9'), 1, 3),
                     b.Literal("}" + suffix)}));
  auto g = std::move(b).Build(root);
  EXPECT_TRUE(g.ok()) << g.status();
  return *g;
}

grammar::Grammar LiteralGrammar(const std::string& text) {
  GrammarBuilder b;
  RuleId root = b.AddRule("root", b.Literal(text));
  auto g = std::move(b).Build(root);
  EXPECT_TRUE(g.ok()) << g.status();
  return *g;
}

class GrammarStartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = LoadTiny();
    ASSERT_NE(model_, nullptr);
  }
  std::shared_ptr<const grammar::CompiledGrammar> Compile(grammar::Grammar g) {
    auto cg = model_->grammars().CompileGrammar(std::move(g), grammar::GrammarKind::kGbnf);
    EXPECT_TRUE(cg.ok()) << cg.status();
    return cg.ok() ? *cg : nullptr;
  }
  std::vector<int32_t> Tokens(const std::string& text) {
    return model_->tokenizer().Encode(text);
  }
  GenerateRequest Request(uint64_t seed, int32_t max_tokens) {
    GenerateRequest r;
    r.prompt = {970, 11, 187};
    r.sampling.temperature = 1.0f;
    r.sampling.seed = seed;
    r.max_tokens = max_tokens;
    return r;
  }

  struct Run {
    std::string text;
    std::vector<int32_t> tokens;
    std::vector<bool> constrained;  // per step, before sampling
    FinishReason reason = FinishReason::kLength;
  };
  // Runs `r` with `script` favoured at each step while it lasts.
  Run Drive(GenerateRequest r, const std::vector<int32_t>& script, uint64_t seed) {
    Run run;
    auto c = Completion::Create(*model_, std::move(r), 4096);
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return run;
    const int64_t n_vocab = model_->hparams().n_vocab;
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> noise(0.0f, 1.0f);
    std::vector<float> logits(n_vocab);
    for (size_t step = 0; !(*c)->done(); ++step) {
      for (float& x : logits) x = noise(rng);
      if (step < script.size()) logits[script[step]] = 60.0f;
      run.constrained.push_back((*c)->constrained());
      (*c)->ComputeMask();
      auto s = (*c)->Sample(logits.data(), n_vocab);
      EXPECT_TRUE(s.ok()) << s.status();
      if (!s.ok()) break;
      auto out = (*c)->Accept(*s, 3 + static_cast<int64_t>(step) + 1);
      EXPECT_TRUE(out.ok()) << out.status();
      if (!out.ok()) break;
      run.text += out->text;
      run.tokens.insert(run.tokens.end(), out->tokens.begin(), out->tokens.end());
    }
    run.reason = (*c)->finish_reason();
    return run;
  }

  std::shared_ptr<Model> model_;
};

TEST_F(GrammarStartTest, TriggerConstrainsFromTheTriggerOn) {
  const grammar::Grammar ref = CallGrammar("<tool_call>", "</tool_call>");
  auto cg = Compile(ref);
  ASSERT_NE(cg, nullptr);
  // "Hello there" is text the grammar forbids: it must come out as written.
  const std::string before = "Hello there ";
  std::vector<int32_t> script = Tokens(before + "<tool_call>");
  int finished = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    GenerateRequest r = Request(seed, 60);
    r.grammar = cg;
    r.grammar_start = Start::kAtTrigger;
    r.grammar_trigger = "<tool_call>";
    Run run = Drive(r, script, seed);
    ASSERT_TRUE(absl::StartsWith(run.text, before)) << run.text;
    for (size_t i = 0; i + 1 < script.size(); ++i) {
      EXPECT_FALSE(run.constrained[i]) << "constrained before the trigger, step " << i;
    }
    ASSERT_GT(run.constrained.size(), script.size());
    EXPECT_TRUE(run.constrained[script.size()]) << "not constrained after the trigger";
    const std::string call = run.text.substr(before.size());
    if (run.reason == FinishReason::kEos) {
      finished++;
      EXPECT_TRUE(grammar::testing::Recognize(ref, call)) << call;
    } else {
      EXPECT_TRUE(grammar::testing::IsViablePrefix(ref, call)) << call;
    }
  }
  EXPECT_GE(finished, 10) << "a call of at most 3 digits ends well inside 60 tokens";
}

TEST_F(GrammarStartTest, NoTriggerNoConstraint) {
  auto cg = Compile(CallGrammar("<tool_call>", "</tool_call>"));
  ASSERT_NE(cg, nullptr);
  GenerateRequest r = Request(7, 40);
  r.grammar = cg;
  r.grammar_start = Start::kAtTrigger;
  r.grammar_trigger = "<tool_call>";
  r.ignore_eos = true;
  Run run = Drive(r, Tokens("Just an answer, no call at all."), 7);
  EXPECT_TRUE(absl::StartsWith(run.text, "Just an answer, no call at all.")) << run.text;
  for (bool c : run.constrained) EXPECT_FALSE(c);
  EXPECT_EQ(run.reason, FinishReason::kLength);
}

TEST_F(GrammarStartTest, TriggerInsideTheThinkBlockIsIgnored) {
  const grammar::Grammar ref = CallGrammar("<tool_call>", "</tool_call>");
  auto cg = Compile(ref);
  ASSERT_NE(cg, nullptr);
  GenerateRequest r = Request(3, 80);
  r.grammar = cg;
  r.grammar_start = Start::kAtTrigger;
  r.grammar_trigger = "<tool_call>";
  r.reasoning.emplace();
  r.reasoning->starts_open = true;
  const std::string think = "maybe <tool_call> here? no.</think>\n\nok ";
  std::vector<int32_t> script = Tokens(think + "<tool_call>");
  Run run = Drive(r, script, 3);
  ASSERT_TRUE(absl::StartsWith(run.text, think)) << run.text;
  const std::string call = run.text.substr(think.size());
  EXPECT_TRUE(grammar::testing::IsViablePrefix(ref, call)) << call;
  EXPECT_TRUE(run.constrained.back());
}

TEST_F(GrammarStartTest, BudgetClosesTheThinkBlockAfterExactlyBudgetTokens) {
  auto close = Compile(LiteralGrammar("\n</think>"));
  ASSERT_NE(close, nullptr);
  // Words without '<', so the script never closes the block itself.
  std::vector<int32_t> words = Tokens(" one two three four five six seven eight nine ten eleven");
  ASSERT_GE(words.size(), 11u);
  for (int budget : {0, 1, 4, 7}) {
    for (bool open : {true, false}) {
      GenerateRequest r = Request(11, 40);
      r.ignore_eos = true;
      r.reasoning.emplace();
      r.reasoning->starts_open = open;
      r.reasoning->budget = budget;
      r.reasoning->close = close;
      std::vector<int32_t> script = open ? std::vector<int32_t>() : Tokens("<think>");
      const size_t opened = script.size();
      // The words, then (past the budget) the words again: the mask takes
      // them out while the closing text is forced, not afterwards.
      for (int k = 0; k < 3; ++k) script.insert(script.end(), words.begin(), words.end());
      Run run = Drive(r, script, 11);
      const size_t at = run.text.find("\n</think>");
      ASSERT_NE(at, std::string::npos) << "budget " << budget << " open " << open << ": " << run.text;
      // Exactly `budget` script tokens between the start and the close.
      std::string expect_reasoning = open ? "" : "<think>";
      for (int i = 0; i < budget; ++i) {
        expect_reasoning += std::string(*model_->tokenizer().TokenBytes(script[opened + i]));
      }
      EXPECT_EQ(run.text.substr(0, at), expect_reasoning) << "budget " << budget;
      // Free again after the close: the last step is unconstrained and the
      // script's words (favoured) come back.
      EXPECT_FALSE(run.constrained.back());
      EXPECT_NE(run.text.find(" one", at), std::string::npos) << run.text;
    }
  }
}

TEST_F(GrammarStartTest, GrammarAfterTheThinkBlock) {
  const grammar::Grammar ref = CallGrammar("", "");
  auto cg = Compile(ref);
  auto open = Compile(LiteralGrammar("<think>"));
  auto close = Compile(LiteralGrammar("</think>"));
  ASSERT_TRUE(cg && open && close);
  auto request = [&](uint64_t seed, bool starts_open, int budget) {
    GenerateRequest r = Request(seed, 60);
    r.grammar = cg;
    r.grammar_start = Start::kAfterReasoning;
    r.reasoning.emplace();
    r.reasoning->starts_open = starts_open;
    r.reasoning->budget = budget;
    r.reasoning->close = close;
    r.reasoning->open = open;
    return r;
  };
  // Scripted think block (closed start): free inside, the grammar after,
  // the whitespace the model favours after the tag masked out.
  {
    const std::string think = "<think> let me see</think>";
    Run run = Drive(request(5, false, -1), Tokens(think + "\n\nSure! 42"), 5);
    ASSERT_TRUE(absl::StartsWith(run.text, think)) << run.text;
    const std::string answer = run.text.substr(think.size());
    EXPECT_EQ(run.reason, FinishReason::kEos) << run.text;
    EXPECT_TRUE(grammar::testing::Recognize(ref, answer)) << answer;
  }
  // Budget 2, open start: two tokens of thought, the close, the grammar.
  {
    std::vector<int32_t> words = Tokens(" alpha beta gamma delta epsilon");
    Run run = Drive(request(6, true, 2), words, 6);
    const size_t at = run.text.find("</think>");
    ASSERT_NE(at, std::string::npos) << run.text;
    EXPECT_EQ(run.text.substr(0, at), std::string(*model_->tokenizer().TokenBytes(words[0])) +
                                          std::string(*model_->tokenizer().TokenBytes(words[1])));
    EXPECT_TRUE(grammar::testing::IsViablePrefix(ref, run.text.substr(at + 8))) << run.text;
  }
  // Random from the first token (closed start): the union of the start tag
  // and the grammar decides; either way the text is one of the two shapes.
  int thought = 0, direct = 0;
  for (uint64_t seed = 1; seed <= 16; ++seed) {
    Run run = Drive(request(seed, false, 3), {}, seed);
    if (absl::StartsWith(run.text, "<think>")) {
      thought++;
      const size_t at = run.text.find("</think>");
      ASSERT_NE(at, std::string::npos) << "budget 3 closes it: " << run.text;
      EXPECT_TRUE(grammar::testing::IsViablePrefix(ref, run.text.substr(at + 8))) << run.text;
    } else {
      direct++;
      EXPECT_TRUE(grammar::testing::IsViablePrefix(ref, run.text)) << run.text;
    }
  }
  EXPECT_EQ(thought + direct, 16);
}

TEST_F(GrammarStartTest, InvalidCombinationsAreRefused) {
  auto cg = Compile(CallGrammar("", ""));
  GenerateRequest r = Request(1, 10);
  r.grammar_start = Start::kAtTrigger;
  EXPECT_FALSE(ValidateGenerateRequest(r, *model_, 512).ok()) << "a start without a grammar";
  r.grammar = cg;
  EXPECT_FALSE(ValidateGenerateRequest(r, *model_, 512).ok()) << "a trigger that is empty";
  r.grammar_start = Start::kAfterReasoning;
  EXPECT_FALSE(ValidateGenerateRequest(r, *model_, 512).ok()) << "no reasoning";
  r.reasoning.emplace();
  EXPECT_FALSE(ValidateGenerateRequest(r, *model_, 512).ok()) << "closed start without open";
  r.reasoning->starts_open = true;
  EXPECT_TRUE(ValidateGenerateRequest(r, *model_, 512).ok());
  r.reasoning->budget = 3;
  EXPECT_FALSE(ValidateGenerateRequest(r, *model_, 512).ok()) << "budget without close";
}

}  // namespace
}  // namespace minfer::runtime
