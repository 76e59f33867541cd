// Constrained decoding in the engine step (issue 27): on the tiny random
// model (Qwen vocabulary, CPU), sequences carrying a grammar produce only
// text of the grammar's language — checked with the reference recognizer,
// not the matcher — at temperature 1 with several seeds, batched with
// unconstrained sequences whose tokens do not change; greedy constrained
// decoding picks, at each step, the best-scoring token among those the
// reference recognizer allows (a brute-force scan of the vocabulary).
#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "engine/base/knobs.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/matcher.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/model.h"
#include "engine/runtime/session.h"
#include "gtest/gtest.h"
#include "tests/engine/grammar/recognizer.h"
#include "tests/engine/runtime/oracle_drafter.h"
#include "tests/support/cpu_model.h"
#include "tests/support/test_models.h"

namespace minfer::runtime {
namespace {

using grammar::GrammarBuilder;
using grammar::RuleId;

std::shared_ptr<Model> LoadTiny() {
  return testing::LoadCpuTestModel("tiny", "q8_0");
}

// {"n":<1-3 digits>,"tags":[<"word">, ...]} with words of [a-z ] (0-12),
// at most 3 tags: a grammar with recursion-free nesting, literals and
// character loops, small enough that a random model completes it.
grammar::Grammar RecordGrammar() {
  GrammarBuilder b;
  RuleId word = b.AddRule(
      "word", b.Seq({b.Literal("\""), b.Repeat(b.Alt({b.ByteRange('a', 'z'), b.Byte(' ')}), 0, 12),
                     b.Literal("\"")}));
  RuleId tags = b.AddRule(
      "tags", b.Seq({b.Literal("["),
                     b.Optional(b.Seq({b.Ref(word), b.Repeat(b.Seq({b.Literal(","), b.Ref(word)}), 0, 2)})),
                     b.Literal("]")}));
  RuleId root = b.AddRule("root", b.Seq({b.Literal("{\"n\":"), b.Repeat(b.ByteRange('0', '9'), 1, 3),
                                         b.Literal(",\"tags\":"), b.Ref(tags), b.Literal("}")}));
  auto g = std::move(b).Build(root);
  EXPECT_TRUE(g.ok()) << g.status();
  return *g;
}

struct Result {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason reason = FinishReason::kLength;
  absl::Status status;
};

std::map<uint64_t, Result> RunAll(Engine& engine) {
  std::map<uint64_t, Result> out;
  std::vector<EngineEvent> events;
  for (int guard = 0; engine.HasWork() && guard < 10000; ++guard) {
    events.clear();
    EXPECT_TRUE(engine.Step(&events).ok());
    for (EngineEvent& ev : events) {
      Result& r = out[ev.id];
      r.tokens.insert(r.tokens.end(), ev.out.tokens.begin(), ev.out.tokens.end());
      r.text += ev.out.text;
      if (ev.finished) {
        r.reason = ev.reason;
        r.status = ev.status;
      }
    }
  }
  return out;
}

TEST(ConstrainedEngineTest, SampledOutputsAreInTheLanguageAndOthersUnchanged) {
  auto model = LoadTiny();
  ASSERT_NE(model, nullptr);
  grammar::Grammar ref = RecordGrammar();
  auto cg = model->grammars().CompileGrammar(ref, grammar::GrammarKind::kGbnf);
  ASSERT_TRUE(cg.ok()) << cg.status();
  const std::vector<int32_t> prompt = {970, 11, 187, 0, 220, 16, 17};

  auto make = [&](uint64_t seed, bool constrained) {
    GenerateRequest r;
    r.prompt = prompt;
    r.sampling.temperature = 1.0f;
    r.sampling.seed = seed;
    r.max_tokens = 120;
    if (constrained) r.grammar = *cg;
    return r;
  };
  // Unconstrained sequences alone, then beside constrained ones.
  std::vector<std::vector<int32_t>> alone;
  {
    auto e = Engine::Create(model, {.max_seqs = 8, .n_ctx = 512});
    ASSERT_TRUE(e.ok()) << e.status();
    std::vector<uint64_t> ids;
    for (uint64_t seed : {101, 102}) ids.push_back(*(*e)->Add(make(seed, false)));
    auto res = RunAll(**e);
    for (uint64_t id : ids) alone.push_back(res[id].tokens);
  }
  auto e = Engine::Create(model, {.max_seqs = 8, .n_ctx = 512});
  ASSERT_TRUE(e.ok()) << e.status();
  std::vector<uint64_t> free_ids, cons_ids;
  for (uint64_t seed : {101, 102}) free_ids.push_back(*(*e)->Add(make(seed, false)));
  for (uint64_t seed = 1; seed <= 6; ++seed) cons_ids.push_back(*(*e)->Add(make(seed, true)));
  // Mid-run, the snapshot counts the constrained sequences.
  std::vector<EngineEvent> ev;
  ASSERT_TRUE((*e)->Step(&ev).ok());
  EXPECT_EQ((*e)->Snapshot().constrained_running, 6);
  auto res = RunAll(**e);
  for (size_t i = 0; i < free_ids.size(); ++i) {
    std::vector<int32_t> got = res[free_ids[i]].tokens;
    // The first step's events were consumed above; re-add its token.
    for (const EngineEvent& x : ev) {
      if (x.id == free_ids[i]) got.insert(got.begin(), x.out.tokens.begin(), x.out.tokens.end());
    }
    EXPECT_EQ(got, alone[i]) << "an unconstrained neighbour changed";
  }
  int finished = 0;
  for (uint64_t id : cons_ids) {
    Result r = res[id];
    for (const EngineEvent& x : ev) {
      if (x.id == id) r.text = x.out.text + r.text;
    }
    ASSERT_TRUE(r.status.ok()) << r.status;
    if (r.reason == FinishReason::kEos) {
      finished++;
      EXPECT_TRUE(grammar::testing::Recognize(ref, r.text)) << r.text;
    } else {
      EXPECT_TRUE(grammar::testing::IsViablePrefix(ref, r.text)) << r.text;
    }
  }
  EXPECT_GE(finished, 5) << "the grammar bounds every output well under max_tokens";
  EngineSnapshot snap = (*e)->Snapshot();
  EXPECT_GT(snap.grammar_masks, 6);
  EXPECT_EQ(snap.constrained_running, 0);
}

TEST(ConstrainedEngineTest, GreedyPicksTheBestAllowedToken) {
  auto model = LoadTiny();
  ASSERT_NE(model, nullptr);
  grammar::Grammar ref = RecordGrammar();
  auto cg = model->grammars().CompileGrammar(ref, grammar::GrammarKind::kGbnf);
  ASSERT_TRUE(cg.ok());
  const std::vector<int32_t> prompt = {970, 11, 187};
  constexpr int kSteps = 3;
  GenerateRequest r;
  r.prompt = prompt;
  r.sampling.temperature = 0.0f;
  r.max_tokens = kSteps;
  r.grammar = *cg;
  auto e = Engine::Create(model, {.max_seqs = 2, .n_ctx = 256});
  ASSERT_TRUE(e.ok());
  const uint64_t id = *(*e)->Add(r);
  auto res = RunAll(**e);
  ASSERT_EQ(res[id].tokens.size(), static_cast<size_t>(kSteps));

  // Reference: the alone run's logits, the allowed set by brute force.
  auto s = Session::Create(model, {.n_ctx = 256});
  ASSERT_TRUE(s.ok());
  auto logits = (*s)->Eval(prompt);
  ASSERT_TRUE(logits.ok());
  const tokenizer::Tokenizer& tok = model->tokenizer();
  std::string text;
  for (int step = 0; step < kSteps; ++step) {
    int32_t best = -1;
    float best_logit = -std::numeric_limits<float>::infinity();
    for (int32_t id2 = 0; id2 < tok.vocab_size(); ++id2) {
      if (tok.token_type(id2) == tokenizer::TokenType::kControl) continue;
      auto bytes = tok.TokenBytes(id2);
      if (!bytes.ok() || bytes->empty()) continue;
      if ((*logits)[id2] <= best_logit) continue;  // only candidates that would win
      if (!grammar::testing::IsViablePrefix(ref, text + std::string(*bytes))) continue;
      best = id2;
      best_logit = (*logits)[id2];
    }
    ASSERT_EQ(res[id].tokens[step], best) << "step " << step << " after '" << text << "'";
    text += std::string(*tok.TokenBytes(best));
    logits = (*s)->Eval({best});
    ASSERT_TRUE(logits.ok());
  }
}

// Masks applied by the backend's top-k (BatchItem::mask, the GPU's way) and
// on the host's whole row (the CPU's way) give the same tokens: greedy, and
// top-k sampling whose candidates the backend computes.
// Three ways to mask, one result: on the host (rows read whole), on the
// backend with the masks computed before the forward (MINFER_LATE_MASKS=0),
// and on the backend with the masks computed while the forward runs and
// written right before the sampling op (the default).
TEST(ConstrainedEngineTest, BackendAndHostMasksAgree) {
  auto model = LoadTiny();
  ASSERT_NE(model, nullptr);
  auto cg = model->grammars().CompileGrammar(RecordGrammar(), grammar::GrammarKind::kGbnf);
  ASSERT_TRUE(cg.ok());
  std::vector<std::vector<int32_t>> by_mode[3];
  for (int backend = 0; backend < 3; ++backend) {
    SCOPED_TRACE(backend);
    EngineOptions eo{.max_seqs = 6, .n_ctx = 256};
    eo.backend_masks = backend >= 1;
    ASSERT_TRUE(KnobRegistry::Global().Set("MINFER_LATE_MASKS", backend == 2 ? "1" : "0").ok());
    auto e = Engine::Create(model, eo);
    ASSERT_TRUE(e.ok());
    std::vector<uint64_t> ids;
    for (int i = 0; i < 4; ++i) {
      GenerateRequest r;
      r.prompt = {970, 11, static_cast<int32_t>(100 + i)};
      r.sampling.temperature = i == 0 ? 0.0f : 0.8f;
      r.sampling.top_k = 20;
      r.sampling.seed = 7 + i;
      r.max_tokens = 60;
      r.grammar = *cg;
      ids.push_back(*(*e)->Add(r));
    }
    auto res = RunAll(**e);
    for (uint64_t id : ids) {
      ASSERT_TRUE(res[id].status.ok()) << res[id].status;
      by_mode[backend].push_back(res[id].tokens);
    }
    ASSERT_TRUE(KnobRegistry::Global().Reset("MINFER_LATE_MASKS").ok());
    EXPECT_GT((*e)->Snapshot().grammar_masks, 4);
    const BatchRunnerStats& rs = (*e)->runner().stats();
    if (backend == 0) {
      EXPECT_EQ(rs.masked_rows, 0);
    } else {
      EXPECT_GT(rs.masked_rows, 4);
    }
    if (backend == 2) {
      // Every step with a masked row filled its masks late.
      EXPECT_GT(rs.late_mask_steps, 10);
    } else {
      EXPECT_EQ(rs.late_mask_steps, 0);
    }
  }
  EXPECT_EQ(by_mode[0], by_mode[1]);
  EXPECT_EQ(by_mode[0], by_mode[2]);
}

// Speculative decoding of constrained sequences (issue 29): drafts are
// cut where the grammar forbids them and each drafted row is sampled under
// the grammar's state at its position, so the output is the plain run's —
// greedy and seeded sampled, with masks on the host (rows read whole,
// masked after the tokens before them are accepted, drafts crossing the
// trigger where a grammar starts) and on the backend (a mask per drafted
// row, computed ahead by advancing the matcher over the drafts and
// rolling it back).
TEST(ConstrainedEngineTest, SpeculativeDraftsFollowTheGrammar) {
  auto model = LoadTiny();
  ASSERT_NE(model, nullptr);
  grammar::Grammar ref = RecordGrammar();
  auto cg = model->grammars().CompileGrammar(ref, grammar::GrammarKind::kGbnf);
  ASSERT_TRUE(cg.ok());
  auto run = [&](const std::vector<GenerateRequest>& reqs, EngineOptions eo,
                 EngineSnapshot* snap) {
    eo.spec_gate = eo.spec_gate.value_or(false);  // verification on every step
    auto e = Engine::Create(model, eo);
    EXPECT_TRUE(e.ok()) << e.status();
    std::vector<uint64_t> ids;
    for (const GenerateRequest& r : reqs) ids.push_back(*(*e)->Add(r));
    auto res = RunAll(**e);
    std::vector<Result> out;
    for (uint64_t id : ids) {
      EXPECT_TRUE(res[id].status.ok()) << res[id].status;
      out.push_back(res[id]);
    }
    EXPECT_EQ((*e)->pool().blocks().used(), 0);
    *snap = (*e)->Snapshot();
    return out;
  };
  std::vector<GenerateRequest> reqs;
  for (int i = 0; i < 4; ++i) {
    GenerateRequest r;
    r.prompt = {970, 11, static_cast<int32_t>(200 + i)};
    r.sampling.temperature = i < 2 ? 0.0f : 0.8f;
    r.sampling.top_k = 20;
    r.sampling.seed = 17 + i;
    r.max_tokens = 60;
    r.grammar = *cg;
    reqs.push_back(r);
  }
  // Free text until a trigger, then the grammar: the trigger is a piece of
  // what the model writes unconstrained, so the output crosses it.
  GenerateRequest free;
  free.prompt = {970, 11, 300};
  free.max_tokens = 40;
  EngineSnapshot snap;
  const std::vector<Result> unconstrained = run({free}, {.max_seqs = 2, .n_ctx = 256}, &snap);
  ASSERT_GE(unconstrained[0].text.size(), 12u);
  GenerateRequest triggered = free;
  triggered.grammar = *cg;
  triggered.grammar_start = GenerateRequest::GrammarStart::kAtTrigger;
  triggered.grammar_trigger = unconstrained[0].text.substr(6, 2);
  triggered.max_tokens = 60;
  reqs.push_back(triggered);
  // And an unconstrained neighbour (another prompt: the oracle tells runs
  // apart by their prompts).
  free.prompt.back() = 301;
  reqs.push_back(free);

  for (bool backend : {false, true}) {
    SCOPED_TRACE(backend ? "backend masks" : "host masks");
    EngineOptions eo{.max_seqs = 6, .n_ctx = 256};
    eo.backend_masks = backend;
    eo.spec_k = 0;
    const std::vector<Result> plain = run(reqs, eo, &snap);
    int in_language = 0;
    for (size_t i = 0; i < 4; ++i) in_language += plain[i].reason == FinishReason::kEos;
    EXPECT_GE(in_language, 3);
    std::vector<std::vector<int32_t>> outs;
    for (const Result& r : plain) outs.push_back(r.tokens);
    for (int wrong_every : {0, 3}) {
      SCOPED_TRACE(wrong_every);
      eo.spec_k = 5;
      eo.drafter = std::make_shared<testing::OracleDrafter>(reqs, outs, wrong_every);
      const std::vector<Result> spec = run(reqs, eo, &snap);
      for (size_t i = 0; i < reqs.size(); ++i) {
        EXPECT_EQ(spec[i].tokens, plain[i].tokens) << "request " << i;
        EXPECT_EQ(spec[i].text, plain[i].text) << "request " << i;
        EXPECT_EQ(spec[i].reason, plain[i].reason) << "request " << i;
      }
      EXPECT_GT(snap.spec_drafted, 40);
      if (wrong_every == 0) {
        // The plain run's own tokens: the grammar allows every one, and
        // every one is accepted.
        EXPECT_EQ(snap.spec_accepted, snap.spec_drafted);
      } else {
        EXPECT_LT(snap.spec_accepted, snap.spec_drafted);
        EXPECT_GT(snap.spec_accepted, 0);
      }
    }
  }
}

// A drafter that proposes only what the grammar forbids gets no draft
// into a step: the grammar cuts them before they cost a row.
TEST(ConstrainedEngineTest, DraftsTheGrammarForbidsTakeNoRows) {
  auto model = LoadTiny();
  ASSERT_NE(model, nullptr);
  auto cg = model->grammars().CompileGrammar(RecordGrammar(), grammar::GrammarKind::kGbnf);
  ASSERT_TRUE(cg.ok());
  // A control token that does not end the output: no grammar state allows
  // it, so a drafter of nothing else is always wrong.
  const tokenizer::Tokenizer& tok = model->tokenizer();
  int32_t control = -1;
  for (int32_t id = 0; id < tok.vocab_size() && control < 0; ++id) {
    if (tok.token_type(id) == tokenizer::TokenType::kControl &&
        !std::binary_search(tok.stop_ids().begin(), tok.stop_ids().end(), id)) {
      control = id;
    }
  }
  ASSERT_GE(control, 0);
  struct Wrong : Drafter {
    std::vector<int32_t> draft;
    int64_t Propose(absl::Span<const int32_t>, int64_t k, std::vector<int32_t>* out) override {
      for (int64_t i = 0; i < k && i < static_cast<int64_t>(draft.size()); ++i) out->push_back(draft[i]);
      return std::min<int64_t>(k, draft.size());
    }
  };
  auto wrong = std::make_shared<Wrong>();
  wrong->draft.assign(4, control);
  for (bool backend : {false, true}) {
    EngineOptions eo{.max_seqs = 2, .n_ctx = 256};
    eo.backend_masks = backend;
    eo.spec_k = 4;
    eo.drafter = wrong;
    auto e = Engine::Create(model, eo);
    ASSERT_TRUE(e.ok());
    GenerateRequest r;
    r.prompt = {970, 11, 187};
    r.max_tokens = 12;
    r.grammar = *cg;
    const uint64_t id = *(*e)->Add(r);
    auto res = RunAll(**e);
    ASSERT_TRUE(res[id].status.ok()) << res[id].status;
    EXPECT_TRUE(grammar::testing::IsViablePrefix(RecordGrammar(), res[id].text)) << res[id].text;
    EXPECT_EQ((*e)->Snapshot().spec_drafted, 0);
  }
}

TEST(ConstrainedEngineTest, GrammarOfAnotherVocabularyIsRefused) {
  auto model = LoadTiny();
  ASSERT_NE(model, nullptr);
  auto vocab = grammar::Vocabulary::Create({"a", "b"}, {0}, 2);
  grammar::GrammarCompiler other(vocab);
  auto cg = other.CompileGrammar(RecordGrammar(), grammar::GrammarKind::kGbnf);
  ASSERT_TRUE(cg.ok());
  GenerateRequest r;
  r.prompt = {1, 2, 3};
  r.grammar = *cg;
  auto e = Engine::Create(model, {.max_seqs = 2, .n_ctx = 256});
  ASSERT_TRUE(e.ok());
  auto id = (*e)->Add(r);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("grammar: compiled for a vocabulary"), std::string::npos)
      << id.status();
}

}  // namespace
}  // namespace minfer::runtime
