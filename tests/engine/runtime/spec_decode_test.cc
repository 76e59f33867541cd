// Speculative decoding in the batched engine (issue 29): n-gram and
// draft-model drafts ride along decode tokens and are verified in the same
// forward. The
// output must be exactly the plain run's — greedy ids equal, for Qwen2,
// Qwen3 and Llama files, alone and beside sequences that do not speculate,
// with stop strings, under preemption and with the prefix cache — and the
// KV rows of refused drafts must be given back (the scheduler's rollback,
// tested without a model).
#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/base/status.h"
#include "engine/runtime/drafter.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/kv_pool.h"
#include "engine/runtime/model.h"
#include "engine/runtime/model_drafter.h"
#include "engine/runtime/scheduler.h"
#include "engine/runtime/session.h"
#include "gtest/gtest.h"
#include "tests/engine/runtime/oracle_drafter.h"
#include "tests/support/cpu_model.h"
#include "tests/support/test_models.h"

namespace minfer::runtime {
namespace {

std::shared_ptr<Model> LoadModel(const std::string& shape) {
  return testing::LoadCpuTestModel(shape, "q8_0");
}

// A prompt that repeats itself (what n-gram drafts feed on): a random
// phrase three times, then a random tail.
std::vector<int32_t> RepeatingPrompt(uint32_t seed, int32_t vocab) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> phrase(6 + seed % 5), p;
  for (auto& t : phrase) t = d(rng);
  for (int r = 0; r < 3; ++r) p.insert(p.end(), phrase.begin(), phrase.end());
  // Ending inside a fourth copy: the drafter proposes the phrase's rest.
  p.insert(p.end(), phrase.begin(), phrase.begin() + 3);
  return p;
}

struct Output {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason reason = FinishReason::kLength;
  GenerationStats stats;  // at the finish
};

std::vector<Output> RunAll(std::shared_ptr<Model> model, const std::vector<GenerateRequest>& reqs,
                        EngineOptions eo, EngineSnapshot* snap = nullptr,
                        bool gate_from_knob = false) {
  // These tests are of verification: drafts every step (the gate, which
  // decides by measured step times, has tests of its own).
  if (!gate_from_knob) eo.spec_gate = eo.spec_gate.value_or(false);
  auto e = Engine::Create(model, eo);
  EXPECT_TRUE(e.ok()) << e.status();
  std::vector<Output> out(reqs.size());
  std::map<uint64_t, size_t> index;
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto id = (*e)->Add(reqs[i]);
    EXPECT_TRUE(id.ok()) << id.status();
    index[*id] = i;
  }
  std::vector<EngineEvent> ev;
  for (int step = 0; step < 5000 && (*e)->HasWork(); ++step) {
    ev.clear();
    absl::Status st = (*e)->Step(&ev);
    EXPECT_TRUE(st.ok()) << st;
    for (const EngineEvent& x : ev) {
      EXPECT_TRUE(x.status.ok()) << x.status;
      Output& o = out[index[x.id]];
      o.tokens.insert(o.tokens.end(), x.out.tokens.begin(), x.out.tokens.end());
      o.text += x.out.text;
      if (x.finished) {
        o.reason = x.reason;
        o.stats = x.stats;
      }
    }
  }
  EXPECT_FALSE((*e)->HasWork());
  EXPECT_EQ((*e)->pool().blocks().used(), 0) << "finished sequences hold blocks";
  if (snap != nullptr) *snap = (*e)->Snapshot();
  return out;
}

std::vector<GenerateRequest> Requests(const Model& model, int n, int max_tokens,
                                      float temperature) {
  std::vector<GenerateRequest> reqs;
  for (int i = 0; i < n; ++i) {
    GenerateRequest r;
    r.prompt = RepeatingPrompt(700 + i, model.tokenizer().vocab_size());
    r.max_tokens = max_tokens + i % 3;
    r.ignore_eos = true;
    r.sampling.temperature = temperature;
    r.sampling.seed = 40 + i;
    reqs.push_back(r);
  }
  return reqs;
}

void ExpectSame(const std::vector<Output>& got, const std::vector<Output>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
    EXPECT_EQ(got[i].text, want[i].text) << "request " << i;
    EXPECT_EQ(got[i].reason, want[i].reason) << "request " << i;
  }
}

// OracleDrafter over Outputs.
std::shared_ptr<Drafter> Oracle(const std::vector<GenerateRequest>& reqs,
                                      const std::vector<Output>& outs, int wrong_every) {
  std::vector<std::vector<int32_t>> tokens;
  for (const Output& o : outs) tokens.push_back(o.tokens);
  return std::make_shared<testing::OracleDrafter>(reqs, tokens, wrong_every);
}

// ReplayDrafter over Outputs: each request's plain tokens at `rate`.
std::shared_ptr<ReplayDrafter> Replay(const std::vector<GenerateRequest>& reqs,
                                      const std::vector<Output>& outs, double rate,
                                      uint64_t seed = 1) {
  auto replay = std::make_shared<ReplayDrafter>(rate, seed);
  for (size_t i = 0; i < reqs.size(); ++i) replay->Add(reqs[i].prompt, outs[i].tokens);
  return replay;
}

class SpecFamilyTest : public ::testing::TestWithParam<const char*> {};

TEST_P(SpecFamilyTest, GreedyIdsEqualThePlainRunAloneAndInABatch) {
  auto model = LoadModel(GetParam());
  ASSERT_NE(model, nullptr);
  // Greedy requests beside sampled ones (seeded: with the same random
  // draws, accepting while the sample equals the draft gives the same
  // tokens).
  std::vector<GenerateRequest> reqs = Requests(*model, 4, 40, 0.0f);
  for (GenerateRequest& r : Requests(*model, 2, 30, 1.0f)) reqs.push_back(r);
  EngineOptions eo;
  eo.max_seqs = 16;
  eo.token_budget = 64;
  eo.n_ctx = 512;
  const std::vector<Output> plain = RunAll(model, reqs, eo);
  eo.spec_k = 4;
  EngineSnapshot snap;
  // n-gram drafts (random weights rarely repeat their prompt: few drafts).
  ExpectSame(RunAll(model, reqs, eo, &snap), plain);
  // A perfect drafter: every draft accepted.
  eo.drafter = Oracle(reqs, plain, 0);
  ExpectSame(RunAll(model, reqs, eo, &snap), plain);
  EXPECT_GT(snap.spec_drafted, 40);
  EXPECT_EQ(snap.spec_accepted, snap.spec_drafted);
  // Drafts wrong at every third position: prefixes accepted, the rest
  // rolled back.
  eo.drafter = Oracle(reqs, plain, 3);
  ExpectSame(RunAll(model, reqs, eo, &snap), plain);
  EXPECT_GT(snap.spec_accepted, 0);
  EXPECT_LT(snap.spec_accepted, snap.spec_drafted);
  // Alone (one sequence, the most rows for drafts), a perfect draft of 6.
  for (size_t i = 0; i < 2; ++i) {
    eo.spec_k = 0;
    eo.drafter = nullptr;
    const std::vector<Output> a = RunAll(model, {reqs[i]}, eo);
    eo.spec_k = 6;
    eo.drafter = Oracle(std::vector<GenerateRequest>{reqs[i]}, a, 0);
    ExpectSame(RunAll(model, {reqs[i]}, eo, &snap), a);
    EXPECT_EQ(snap.spec_accepted, snap.spec_drafted);
    EXPECT_GE(snap.spec_accepted, 30) << "request " << i;
  }
}

// A ModelDrafter over the synthetic model (shape, type, seed) on the CPU.
absl::StatusOr<std::shared_ptr<ModelDrafter>> MakeDrafter(const std::string& shape,
                                                          const std::string& type, uint64_t seed,
                                                          const Model& target,
                                                          const EngineOptions& eo) {
  ASSIGN_OR_RETURN(std::string path, testing::TestModelPath(shape, type, seed));
  ModelOptions mo;
  mo.backend = "cpu";
  ASSIGN_OR_RETURN(std::shared_ptr<Model> draft, Model::Load(path, mo));
  return ModelDrafter::Create(std::move(draft), target, eo);
}

// Draft models (ModelDrafter): the target's own weights, the same weights
// at another quantization, and another model of the same vocabulary (other
// weights: a different seed). Synthetic models all continue token t with
// the same pi(t) (mkmodel's output head), so greedy drafts of any of them
// are accepted; a request sampled at a high temperature strays from them
// and has its drafts refused part of the time, so the draft's KV follows
// the target's through rejections. The outputs are always the plain run's.
TEST_P(SpecFamilyTest, DraftModelsGiveThePlainRun) {
  auto model = LoadModel(GetParam());
  ASSERT_NE(model, nullptr);
  std::vector<GenerateRequest> reqs = Requests(*model, 3, 40, 0.0f);
  for (GenerateRequest& r : Requests(*model, 1, 40, 4.0f)) {
    r.prompt.push_back(3);  // not the first greedy request's prompt
    reqs.push_back(r);
  }
  // A request that opts out: never drafted for, the same tokens.
  reqs.push_back(reqs[1]);
  reqs.back().speculative = false;
  EngineOptions eo;
  eo.max_seqs = 8;
  eo.token_budget = 64;
  eo.n_ctx = 512;
  eo.kv_block = 16;
  const std::vector<Output> plain = RunAll(model, reqs, eo);
  eo.spec_k = 4;
  struct Draft {
    const char* what;
    const char* type;
    uint64_t seed;
  };
  for (const Draft& d : {Draft{"itself", "q8_0", 1}, Draft{"requantized", "q4_0", 1},
                         Draft{"another model", "q8_0", 7}}) {
    SCOPED_TRACE(d.what);
    auto drafter = MakeDrafter(GetParam(), d.type, d.seed, *model, eo);
    ASSERT_TRUE(drafter.ok()) << drafter.status();
    eo.drafter = *drafter;
    EngineSnapshot snap;
    ExpectSame(RunAll(model, reqs, eo, &snap), plain);
    EXPECT_GT(snap.spec_drafted, 40);
    std::cout << GetParam() << ", draft " << d.what << ": " << snap.spec_accepted << " of "
              << snap.spec_drafted << " drafts accepted in " << (*drafter)->steps()
              << " draft steps\n";
    EXPECT_GE(snap.spec_accepted, snap.spec_drafted / 2);
    EXPECT_LT(snap.spec_accepted, snap.spec_drafted) << "the sampled request never strayed";
    // Rounds ran batched: fewer draft steps than drafted tokens.
    EXPECT_LT((*drafter)->steps(), snap.spec_drafted);
    // Per sequence (usage's prediction tokens): they add up to the engine's.
    const std::vector<Output> got = RunAll(model, reqs, eo, &snap);
    int64_t drafted = 0, accepted = 0;
    for (const Output& o : got) {
      drafted += o.stats.spec_drafted;
      accepted += o.stats.spec_accepted;
      EXPECT_LE(o.stats.spec_accepted, o.stats.spec_drafted);
    }
    EXPECT_EQ(drafted, snap.spec_drafted);
    EXPECT_EQ(accepted, snap.spec_accepted);
    EXPECT_EQ(got.back().stats.spec_drafted, 0) << "speculative: false was drafted for";
    EXPECT_GT(got[1].stats.spec_drafted, 0);
    if (std::string(d.what) == "itself") {
      // The target drafting for itself: every greedy draft is accepted.
      for (size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(got[i].stats.spec_accepted, got[i].stats.spec_drafted) << "request " << i;
      }
    }
    EXPECT_EQ((*drafter)->engine().pool().blocks().used(), 0) << "draft requests hold blocks";
  }
  // Cancelled between steps while drafts are in flight: its blocks, and the
  // draft engine's, are given back, and the others' tokens do not change.
  {
    auto drafter = MakeDrafter(GetParam(), "q4_0", 1, *model, eo);
    ASSERT_TRUE(drafter.ok()) << drafter.status();
    eo.drafter = *drafter;
    auto e = Engine::Create(model, eo);
    ASSERT_TRUE(e.ok()) << e.status();
    std::vector<uint64_t> ids;
    for (const GenerateRequest& r : reqs) {
      auto id = (*e)->Add(r);
      ASSERT_TRUE(id.ok()) << id.status();
      ids.push_back(*id);
    }
    std::map<uint64_t, std::vector<int32_t>> out;
    std::vector<EngineEvent> ev;
    for (int step = 0; (*e)->HasWork() && step < 1000; ++step) {
      if (step == 6) (*e)->Cancel(ids[0]);
      ev.clear();
      ASSERT_TRUE((*e)->Step(&ev).ok());
      for (const EngineEvent& x : ev) {
        out[x.id].insert(out[x.id].end(), x.out.tokens.begin(), x.out.tokens.end());
      }
    }
    EXPECT_GT((*e)->Snapshot().spec_drafted, 0);
    EXPECT_EQ((*e)->pool().blocks().used(), 0) << "the cancelled sequence's blocks are held";
    EXPECT_EQ((*drafter)->engine().pool().blocks().used(), 0);
    EXPECT_LT(out[ids[0]].size(), plain[0].tokens.size());
    EXPECT_EQ(out[ids[0]], std::vector<int32_t>(plain[0].tokens.begin(),
                                                 plain[0].tokens.begin() + out[ids[0]].size()));
    for (size_t i = 1; i < reqs.size(); ++i) EXPECT_EQ(out[ids[i]], plain[i].tokens) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, SpecFamilyTest,
                         ::testing::Values("tiny-untied", "qwen3-tiny", "llama-tiny"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

TEST(SpecDecodeTest, DraftsThatAlwaysFailBackOff) {
  auto model = LoadModel("tiny-untied");
  ASSERT_NE(model, nullptr);
  std::vector<GenerateRequest> reqs = Requests(*model, 2, 120, 0.0f);
  EngineOptions eo;
  eo.max_seqs = 8;
  eo.n_ctx = 512;
  const std::vector<Output> plain = RunAll(model, reqs, eo);
  eo.spec_k = 4;
  eo.drafter = Oracle(reqs, plain, 1);  // every draft wrong
  EngineSnapshot snap;
  ExpectSame(RunAll(model, reqs, eo, &snap), plain);
  EXPECT_EQ(snap.spec_accepted, 0);
  // Without the back-off: ~4 drafts for each of ~240 tokens. With it, a
  // failing sequence drafts at steps 0, 1, 3, 7, 15, 31, 63, then every 32.
  EXPECT_GT(snap.spec_drafted, 0);
  EXPECT_LT(snap.spec_drafted, 4 * 2 * 14) << "failing drafts did not back off";
  // Once the engine's drafts mostly fail, sequences that come later start
  // backed off: their first draft comes after 63 steps, then after 127.
  auto e = Engine::Create(model, eo);
  ASSERT_TRUE(e.ok()) << e.status();
  std::vector<EngineEvent> ev;
  int64_t first = 0;
  for (int round = 0; round < 2; ++round) {
    for (const GenerateRequest& r : reqs) ASSERT_TRUE((*e)->Add(r).ok());
    while ((*e)->HasWork()) {
      ev.clear();
      ASSERT_TRUE((*e)->Step(&ev).ok());
    }
    if (round == 0) first = (*e)->Snapshot().spec_drafted;
  }
  const int64_t second = (*e)->Snapshot().spec_drafted - first;
  EXPECT_GT(first, 0);
  EXPECT_LE(second, 4 * 2 * 1) << "later sequences drafted " << second << " tokens";
}

// Drafts that are mostly right do not back off after a round of misses:
// at 0.7 per token, two rounds in a row whose first draft is wrong come
// every ~11 rounds, and skipping steps then cost a single stream a fifth of
// its steps (twentieth session). The engine's drafted tokens equal those
// of a replay of the same drafter that drafts at every step after the
// first: a round takes drafts up to the first wrong one (or k), its
// accepted drafts plus one token are emitted, and the next round starts
// after them. A back-off would skip rounds and draft fewer tokens.
TEST(SpecDecodeTest, DraftsMostlyAcceptedNeverBackOff) {
  auto model = LoadModel("tiny");
  ASSERT_NE(model, nullptr);
  const std::vector<GenerateRequest> reqs = Requests(*model, 1, 300, 0.0f);
  EngineOptions eo;
  eo.max_seqs = 4;
  eo.n_ctx = 512;
  const std::vector<Output> plain = RunAll(model, reqs, eo);
  constexpr int64_t kK = 12;
  eo.spec_k = kK;
  eo.drafter = Replay(reqs, plain, 0.7);
  EngineSnapshot snap;
  ExpectSame(RunAll(model, reqs, eo, &snap), plain);
  // The replay of every round, with a drafter of its own (same rate and
  // seed: the same right and wrong positions).
  auto replay = Replay(reqs, plain, 0.7);
  const std::vector<int32_t>& cont = plain[0].tokens;
  const int64_t n = static_cast<int64_t>(cont.size());
  int64_t drafted = 0, rounds = 0, misses = 0, max_misses = 0;
  for (int64_t pos = 1; pos < n;) {  // the prefill step gave token 0
    std::vector<int32_t> seq = reqs[0].prompt;
    seq.insert(seq.end(), cont.begin(), cont.begin() + pos);
    std::vector<int32_t> out;
    const int64_t k = std::min<int64_t>(kK, n - pos - 1);
    int64_t accepted = 0;
    if (k > 0) {
      drafted += replay->Propose(seq, k, &out);
      while (accepted < static_cast<int64_t>(out.size()) && out[accepted] == cont[pos + accepted]) {
        ++accepted;
      }
      ++rounds;
      misses = accepted == 0 ? misses + 1 : 0;
      max_misses = std::max(max_misses, misses);
    }
    pos += accepted + 1;
  }
  ASSERT_GE(max_misses, 2) << "no two missed rounds in a row: the case does not test the back-off";
  EXPECT_EQ(snap.spec_drafted, drafted) << rounds << " rounds";
  EXPECT_NEAR(static_cast<double>(snap.spec_accepted) / snap.spec_drafted, 0.7, 0.1);
}

// Every sequence running (max_seqs of them) still drafts: the engine
// grants draft rows beyond one per sequence (EngineOptions::spec_rows), so
// speculation does not stop when the slot is full.
TEST(SpecDecodeTest, DraftRowsBeyondOnePerSequence) {
  auto model = LoadModel("tiny-untied");
  ASSERT_NE(model, nullptr);
  std::vector<GenerateRequest> reqs = Requests(*model, 3, 40, 0.0f);
  EngineOptions eo;
  eo.max_seqs = 3;
  eo.n_ctx = 512;
  const std::vector<Output> plain = RunAll(model, reqs, eo);
  eo.spec_k = 4;
  eo.drafter = Oracle(reqs, plain, 0);
  auto e = Engine::Create(model, eo);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->runner().options().max_rows, 3 + SpecRows(3));
  EngineSnapshot snap;
  ExpectSame(RunAll(model, reqs, eo, &snap), plain);
  // Three sequences of ~40 tokens, four drafts a step each, all accepted:
  // about 8 steps each instead of 40.
  EXPECT_EQ(snap.spec_accepted, snap.spec_drafted);
  EXPECT_GE(snap.spec_accepted, 3 * 30);
  EXPECT_LE(snap.steps, 20);
  // Without draft rows (spec_rows 0) a full slot drafts nothing: only
  // after the first sequence ends (40 tokens) may the last one (42) draft
  // its one remaining token.
  eo.spec_rows = 0;
  ExpectSame(RunAll(model, reqs, eo, &snap), plain);
  EXPECT_LE(snap.spec_drafted, 1);
}

TEST(SpecDecodeTest, StopStringsAndMaxTokensEndAtTheSameToken) {
  auto model = LoadModel("tiny-untied");
  ASSERT_NE(model, nullptr);
  EngineOptions eo;
  eo.max_seqs = 8;
  eo.n_ctx = 512;
  std::vector<GenerateRequest> reqs = Requests(*model, 3, 48, 0.0f);
  const std::vector<Output> free_run = RunAll(model, reqs, eo);
  // A stop string from the middle of each plain output; max_tokens that
  // cut inside a likely accepted run.
  for (size_t i = 0; i < reqs.size(); ++i) {
    const std::string& t = free_run[i].text;
    ASSERT_GT(t.size(), 20u);
    reqs[i].stop = {t.substr(t.size() / 2, 3)};
    reqs[i].max_tokens = 17 + static_cast<int32_t>(i);
  }
  const std::vector<Output> plain = RunAll(model, reqs, eo);
  eo.spec_k = 5;
  // Drafts of the unstopped run: the stop string and max_tokens fall inside
  // accepted runs, which must end where the plain run ended.
  eo.drafter = Oracle(reqs, free_run, 0);
  ExpectSame(RunAll(model, reqs, eo), plain);
}

TEST(SpecDecodeTest, PreemptionAndThePrefixCacheKeepTheTokens) {
  auto model = LoadModel("tiny-untied");
  ASSERT_NE(model, nullptr);
  std::vector<GenerateRequest> reqs = Requests(*model, 6, 40, 0.0f);
  EngineOptions eo;
  eo.max_seqs = 6;
  eo.token_budget = 64;
  eo.n_ctx = 512;
  eo.kv_block = 16;
  eo.kv_blocks = 1 + 12;  // short of rows: sequences are preempted
  eo.prefix_cache = true;
  const std::vector<Output> plain = RunAll(model, reqs, eo);
  eo.spec_k = 4;
  EngineSnapshot snap;
  // Each prompt twice in one engine: later copies take the earlier ones'
  // published blocks, which must hold only accepted tokens' rows.
  std::vector<GenerateRequest> twice = reqs;
  twice.insert(twice.end(), reqs.begin(), reqs.end());
  std::vector<Output> want = plain;
  want.insert(want.end(), plain.begin(), plain.end());
  eo.drafter = Oracle(reqs, plain, 4);
  ExpectSame(RunAll(model, twice, eo, &snap), want);
  EXPECT_GT(snap.preemptions, 0) << "the pool was never short";
  EXPECT_GT(snap.spec_accepted, 0);
}

TEST(SpecDecodeTest, SchedulerRollsRefusedDraftsBack) {
  BlockAllocator alloc(1 + 8, 1);
  SchedulerOptions so;
  so.block_size = 4;
  so.token_budget = 32;
  so.max_seqs = 4;
  so.prefix_cache = true;
  Scheduler s(so, &alloc);
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6};  // prompt of 6
  s.Add(7, 6, &tokens);
  Scheduler::Step st = s.Schedule();
  ASSERT_EQ(st.work.size(), 1u);
  s.Commit(st);
  tokens.push_back(9);  // the sampled token: 7 known, 6 computed
  s.Append(7);
  // Five drafts: rows 6..11 need 3 blocks.
  tokens.insert(tokens.end(), {10, 11, 12, 13, 14});
  s.SetDrafts(7, 5);
  st = s.Schedule();
  ASSERT_EQ(st.work.size(), 1u);
  EXPECT_EQ(st.work[0].start, 6);
  EXPECT_EQ(st.work[0].count, 6);
  EXPECT_EQ(st.work[0].drafts, 5);
  EXPECT_TRUE(st.work[0].completes);
  EXPECT_EQ(s.Info(7)->blocks, 3);
  // One draft accepted: 8 rows computed, the third block goes back.
  const std::vector<int64_t> rejected = {4};
  s.Commit(st, rejected);
  EXPECT_EQ(s.Info(7)->computed, 8);
  EXPECT_EQ(s.Info(7)->blocks, 2);
  EXPECT_EQ(alloc.used(), 2);
  // The cache holds the first two blocks (rows 0..7), nothing of the refused.
  tokens.resize(8);
  tokens.push_back(21);  // the bonus token
  s.Append(7);
  s.Append(7);
  EXPECT_EQ(s.Info(7)->known, 9);
  // Drafts are for one step: unset, the next step is one decode token.
  st = s.Schedule();
  ASSERT_EQ(st.work.size(), 1u);
  EXPECT_EQ(st.work[0].count, 1);
  EXPECT_EQ(st.work[0].drafts, 0);
}

// A drafter that always guesses the same token.
class FixedDrafter : public Drafter {
 public:
  explicit FixedDrafter(int32_t token) : token_(token) {}
  int64_t Propose(absl::Span<const int32_t>, int64_t k, std::vector<int32_t>* out) override {
    if (k <= 0) return 0;
    out->push_back(token_);
    return 1;
  }

 private:
  int32_t token_;
};

// The sampler's distribution over a row: softmax of logits / temperature
// over the top_k largest (ties: lower id), the rest 0 — computed here from
// a Session's logits, independently of the engine.
std::map<int32_t, double> TopKSoftmax(const std::vector<float>& logits, float temperature,
                                      int top_k) {
  std::vector<int32_t> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  std::partial_sort(ids.begin(), ids.begin() + top_k, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  std::map<int32_t, double> p;
  double z = 0;
  for (int i = 0; i < top_k; ++i) z += std::exp((logits[ids[i]] - logits[ids[0]]) / temperature);
  for (int i = 0; i < top_k; ++i) {
    p[ids[i]] = std::exp((logits[ids[i]] - logits[ids[0]]) / temperature) / z;
  }
  return p;
}

// Pearson's chi-square of observed counts against probabilities.
double ChiSquare(const std::map<int32_t, int64_t>& seen, const std::map<int32_t, double>& p,
                 int64_t n) {
  double chi = 0;
  for (const auto& [id, q] : p) {
    const double want = q * n;
    const auto it = seen.find(id);
    const double got = it == seen.end() ? 0 : static_cast<double>(it->second);
    chi += (got - want) * (got - want) / want;
  }
  return chi;
}

// Rejection sampling keeps the target's distribution. Every request drafts
// the same guess d for its second token; a refused guess is replaced by a
// sample of the row, an accepted one is followed by a sample of the row
// after it. Over 4,000 seeds, the second token's frequencies must match the
// target's distribution after the first, and the third token's (where the
// guess was taken) the distribution after d — both computed from a
// Session's logits — within chi-square's 0.1% critical value for 5 degrees
// of freedom (20.5; top_k 6 makes each distribution six tokens).
TEST(SpecDecodeTest, RejectionSamplingKeepsTheTargetDistribution) {
  auto model = LoadModel("tiny-untied");
  ASSERT_NE(model, nullptr);
  constexpr float kTemp = 6.0f;
  constexpr int kTopK = 6;
  constexpr int64_t kSeeds = 4000;
  constexpr double kChi2Critical = 20.52;  // df 5, p = 0.001
  const std::vector<int32_t> prompt = RepeatingPrompt(900, model->tokenizer().vocab_size());
  // The independent reference: the first token's distribution, its likeliest
  // value t1, then the distributions after t1 and after (t1, d).
  SessionOptions so;
  so.n_ctx = 128;
  auto session = Session::Create(model, so);
  ASSERT_TRUE(session.ok()) << session.status();
  auto l0 = (*session)->Eval(prompt);
  ASSERT_TRUE(l0.ok()) << l0.status();
  const auto p1 = TopKSoftmax(*l0, kTemp, kTopK);
  const int32_t t1 = std::max_element(p1.begin(), p1.end(), [](auto& a, auto& b) {
                       return a.second < b.second;
                     })->first;
  auto l1 = (*session)->Eval(std::vector<int32_t>{t1});
  ASSERT_TRUE(l1.ok()) << l1.status();
  const auto p2 = TopKSoftmax(*l1, kTemp, kTopK);
  const int32_t d = std::max_element(p2.begin(), p2.end(), [](auto& a, auto& b) {
                      return a.second < b.second;
                    })->first;
  auto l2 = (*session)->Eval(std::vector<int32_t>{d});
  ASSERT_TRUE(l2.ok()) << l2.status();
  const auto p3 = TopKSoftmax(*l2, kTemp, kTopK);
  for (const auto* p : {&p1, &p2, &p3}) {
    for (const auto& [id, q] : *p) EXPECT_GT(q, 0.01) << "too peaked a distribution to test";
  }

  std::vector<GenerateRequest> reqs;
  for (int64_t i = 0; i < kSeeds; ++i) {
    GenerateRequest r;
    r.prompt = prompt;
    r.max_tokens = 3;
    r.ignore_eos = true;
    r.sampling.temperature = kTemp;
    r.sampling.top_k = kTopK;
    r.sampling.seed = 1000 + i;
    reqs.push_back(r);
  }
  EngineOptions eo;
  eo.max_seqs = 64;
  eo.token_budget = 512;
  eo.n_ctx = 128;
  eo.spec_k = 1;
  eo.drafter = std::make_shared<FixedDrafter>(d);
  // Waves of 16, so every sequence has rows for its draft (a step's output
  // rows stay within max_seqs, waiting sequences' included).
  std::vector<Output> got;
  EngineSnapshot snap, wave;
  for (int64_t i = 0; i < kSeeds; i += 16) {
    const std::vector<GenerateRequest> part(reqs.begin() + i,
                                            reqs.begin() + std::min<int64_t>(i + 16, kSeeds));
    for (Output& o : RunAll(model, part, eo, &wave)) got.push_back(std::move(o));
    snap.spec_drafted += wave.spec_drafted;
    snap.spec_accepted += wave.spec_accepted;
  }
  std::map<int32_t, int64_t> c2, c3;
  int64_t n2 = 0, n3 = 0;
  for (const Output& o : got) {
    ASSERT_EQ(o.tokens.size(), 3u);
    if (o.tokens[0] != t1) continue;
    ++n2;
    c2[o.tokens[1]]++;
    if (o.tokens[1] != d) continue;
    ++n3;
    c3[o.tokens[2]]++;
  }
  EXPECT_GT(snap.spec_accepted, 200) << "the guess was rarely verified";
  EXPECT_LT(snap.spec_accepted, snap.spec_drafted) << "the guess was never refused";
  ASSERT_GT(n3, 300);
  for (const auto& [id, n] : c2) EXPECT_TRUE(p2.count(id)) << "token " << id << " outside top_k";
  for (const auto& [id, n] : c3) EXPECT_TRUE(p3.count(id)) << "token " << id << " outside top_k";
  const double chi2 = ChiSquare(c2, p2, n2), chi3 = ChiSquare(c3, p3, n3);
  std::cout << "second token: chi-square " << chi2 << " over " << n2
            << " samples; third token after the guess: " << chi3 << " over " << n3 << "\n";
  EXPECT_LT(chi2, kChi2Critical);
  EXPECT_LT(chi3, kChi2Critical);
}

TEST(SpecDecodeTest, DraftModelOfAnotherVocabularyIsRefused) {
  auto qwen = LoadModel("tiny-untied");
  auto llama = LoadModel("llama-tiny");
  ASSERT_NE(qwen, nullptr);
  ASSERT_NE(llama, nullptr);
  const absl::Status st = CheckDraftVocabulary(*llama, *qwen);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("must share the target's tokenizer"), std::string::npos) << st;
  EXPECT_FALSE(ModelDrafter::Create(llama, *qwen, EngineOptions{}).ok());
  EXPECT_TRUE(CheckDraftVocabulary(*qwen, *qwen).ok());
  // Sizes past the padding slack (1,046 and 1,558 ids) are refused as such.
  auto tiny = LoadModel("tiny");
  ASSERT_NE(tiny, nullptr);
  const absl::Status sizes = CheckDraftVocabulary(*tiny, *qwen);
  EXPECT_EQ(sizes.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(sizes.message().find("1046 tokens, the target"), std::string::npos) << sizes;
  EXPECT_NE(sizes.message().find("1558 (more than 128 apart)"), std::string::npos) << sizes;
}

// Rows for drafts are short (spec_rows 4, k = 4: one sequence a step):
// they go round the sequences, so each drafts about as often (in id order
// the first sequence took them all and finished long before the rest).
TEST(SpecDecodeTest, ScarceDraftRowsGoRoundTheSequences) {
  auto model = LoadModel("tiny");
  ASSERT_NE(model, nullptr);
  const std::vector<GenerateRequest> reqs = Requests(*model, 6, 60, 0.0f);
  EngineOptions eo;
  eo.max_seqs = 6;
  eo.n_ctx = 512;
  const std::vector<Output> plain = RunAll(model, reqs, eo);
  auto replay = Replay(reqs, plain, 1.0);
  eo.spec_k = 4;
  eo.spec_rows = 4;
  eo.drafter = replay;
  const std::vector<Output> spec = RunAll(model, reqs, eo);
  ExpectSame(spec, plain);
  int32_t lo = 1 << 30, hi = 0;
  for (const Output& o : spec) {
    lo = std::min(lo, o.stats.spec_drafted);
    hi = std::max(hi, o.stats.spec_drafted);
  }
  EXPECT_GT(lo, 0);
  EXPECT_LE(hi, 2 * lo) << "drafts " << lo << " to " << hi << " tokens per sequence";
}

// A family pads its vocabulary per size (Qwen2.5-0.5B's files list 151,936
// tokens, the 7B's 152,064): a draft whose vocabulary differs only by such
// padding drafts, both ways round, and the output is the plain run's.
TEST(SpecDecodeTest, DraftsAcrossAPaddedVocabulary) {
  auto padded = testing::LoadCpuTestModel("tiny-padded", "q8_0");
  auto tiny = testing::LoadCpuTestModel("tiny", "q8_0");
  ASSERT_NE(padded, nullptr);
  ASSERT_NE(tiny, nullptr);
  ASSERT_EQ(padded->tokenizer().vocab_size(), tiny->tokenizer().vocab_size() + 128);
  EXPECT_TRUE(CheckDraftVocabulary(*tiny, *padded).ok());
  EXPECT_TRUE(CheckDraftVocabulary(*padded, *tiny).ok());
  for (auto [target, draft] : {std::pair{padded, tiny}, std::pair{tiny, padded}}) {
    const std::vector<GenerateRequest> reqs = Requests(*target, 3, 24, 0.0f);
    EngineOptions eo;
    eo.max_seqs = 4;
    eo.n_ctx = 256;
    const std::vector<Output> plain = RunAll(target, reqs, eo);
    eo.spec_k = 4;
    auto d = ModelDrafter::Create(draft, *target, eo);
    ASSERT_TRUE(d.ok()) << d.status();
    eo.drafter = *d;
    EngineSnapshot snap;
    ExpectSame(RunAll(target, reqs, eo, &snap), plain);
    EXPECT_GT(snap.spec_drafted, 0);
  }
}

TEST(SpecDecodeTest, NgramDrafterProposesWhatFollowedTheLastMatch) {
  NgramDrafter d(2, 4);
  std::vector<int32_t> out;
  // "5 6 7 8 ... 5 6" -> 7 8 (after the longest earlier match of the tail).
  EXPECT_EQ(d.Propose(std::vector<int32_t>{5, 6, 7, 8, 9, 1, 5, 6}, 3, &out), 3);
  EXPECT_EQ(out, (std::vector<int32_t>{7, 8, 9}));
  out.clear();
  EXPECT_EQ(d.Propose(std::vector<int32_t>{1, 2, 3, 4}, 3, &out), 0) << "no repeat, no draft";
  // The most recent occurrence wins.
  out.clear();
  EXPECT_EQ(d.Propose(std::vector<int32_t>{1, 2, 3, 1, 2, 4, 1, 2}, 1, &out), 1);
  EXPECT_EQ(out, (std::vector<int32_t>{4}));
}

TEST(SpecDecodeTest, NgramDraftsOfRepeatingTextContinueThePeriodToK) {
  NgramDrafter d(2, 4);
  std::vector<int32_t> out;
  // A token repeated: k drafts of it, not the one token before the end.
  EXPECT_EQ(d.Propose(std::vector<int32_t>{9, 7, 7, 7}, 4, &out), 4);
  EXPECT_EQ(out, (std::vector<int32_t>{7, 7, 7, 7}));
  // Period 3: the continuation wraps around through the draft itself.
  out.assign({42});  // drafts are appended after what *out holds
  EXPECT_EQ(d.Propose(std::vector<int32_t>{1, 2, 3, 1, 2, 3, 1, 2}, 5, &out), 5);
  EXPECT_EQ(out, (std::vector<int32_t>{42, 3, 1, 2, 3, 1}));
}

// ReplayDrafter (minfer bench --spec oracle): the reference's tokens, each
// right with the set probability given the ones before were, the first
// wrong one ending the draft; nothing for a sequence that left its
// reference or matches none.
TEST(SpecDecodeTest, ReplayDrafterDraftsTheReferenceAtTheSetRate) {
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5};
  std::vector<int32_t> cont(400);
  for (size_t i = 0; i < cont.size(); ++i) cont[i] = static_cast<int32_t>(10 + i % 50);
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), cont.begin(), cont.begin() + 7);
  std::vector<int32_t> out;
  ReplayDrafter all(1.0);
  all.Add(prompt, cont);
  EXPECT_EQ(all.Propose(seq, 4, &out), 4);
  EXPECT_EQ(out, (std::vector<int32_t>(cont.begin() + 7, cont.begin() + 11)));
  out.clear();
  EXPECT_EQ(all.Propose(prompt, 2, &out), 2) << "from the first generated token";
  EXPECT_EQ(out, (std::vector<int32_t>{cont[0], cont[1]}));
  out.clear();
  EXPECT_EQ(all.departed(), 0);
  seq.back() = 999;  // left the reference
  EXPECT_EQ(all.Propose(seq, 4, &out), 0);
  EXPECT_EQ(all.departed(), 1) << "a step without drafts, counted";
  EXPECT_EQ(all.Propose(std::vector<int32_t>{2, 7, 1, 8}, 4, &out), 0) << "no reference";
  seq = prompt;
  seq.insert(seq.end(), cont.begin(), cont.end());
  EXPECT_EQ(all.Propose(seq, 4, &out), 0) << "past the reference's end";
  EXPECT_EQ(all.departed(), 1) << "only a sequence that left its reference counts";
  ReplayDrafter none(0.0);
  none.Add(prompt, cont);
  EXPECT_EQ(none.Propose(prompt, 4, &out), 1);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NE(out[0], cont[0]);
  // At 0.7: over every position, the share of first drafted tokens that
  // are right, and the share right after a right one, are both ~0.7.
  ReplayDrafter some(0.7);
  some.Add(prompt, cont);
  int first = 0, second = 0, after_right = 0;
  for (size_t pos = 0; pos + 2 <= cont.size(); ++pos) {
    seq = prompt;
    seq.insert(seq.end(), cont.begin(), cont.begin() + static_cast<int64_t>(pos));
    out.clear();
    const int64_t n = some.Propose(seq, 2, &out);
    ASSERT_GE(n, 1);
    if (out[0] == cont[pos]) {
      ++first;
      ASSERT_EQ(n, 2) << "a right token does not end the draft";
      ++after_right;
      second += out[1] == cont[pos + 1];
    } else {
      EXPECT_EQ(n, 1) << "the first wrong token ends the draft";
    }
  }
  const double positions = static_cast<double>(cont.size() - 1);
  EXPECT_NEAR(first / positions, 0.7, 0.06);
  EXPECT_NEAR(static_cast<double>(second) / after_right, 0.7, 0.07);
}

// In the engine, greedy, ReplayDrafter over the plain run's ids: the output
// is the plain run's and the share of drafts accepted is the set rate.
TEST(SpecDecodeTest, ReplayDraftsAreAcceptedAtTheSetRate) {
  auto model = LoadModel("tiny");
  ASSERT_NE(model, nullptr);
  const std::vector<GenerateRequest> reqs = Requests(*model, 6, 64, 0.0f);
  EngineOptions eo;
  eo.max_seqs = 8;
  eo.token_budget = 64;
  eo.n_ctx = 512;
  const std::vector<Output> plain = RunAll(model, reqs, eo);
  for (double rate : {1.0, 0.7, 0.4}) {
    auto replay = Replay(reqs, plain, rate, 11);
    eo.spec_k = 4;
    eo.drafter = replay;
    EngineSnapshot snap;
    ExpectSame(RunAll(model, reqs, eo, &snap), plain);
    ASSERT_GT(snap.spec_drafted, 60) << rate;
    EXPECT_NEAR(static_cast<double>(snap.spec_accepted) / snap.spec_drafted, rate, 0.1) << rate;
  }
}

// The gate (spec_gate.h) decides only which steps draft: with it on, the
// output is still the plain run's; the knob MINFER_SPEC_GATE = 0 turns it
// off (every step drafts, as with EngineOptions::spec_gate = false).
TEST(SpecDecodeTest, TheGateChangesOnlyWhichStepsDraft) {
  auto model = LoadModel("tiny");
  ASSERT_NE(model, nullptr);
  const std::vector<GenerateRequest> reqs = Requests(*model, 6, 48, 0.0f);
  EngineOptions eo;
  eo.max_seqs = 8;
  eo.token_budget = 64;
  eo.n_ctx = 512;
  const std::vector<Output> plain = RunAll(model, reqs, eo);
  auto replay = Replay(reqs, plain, 1.0);
  eo.spec_k = 4;
  eo.drafter = replay;
  EngineSnapshot always, gated, knob_off;
  ExpectSame(RunAll(model, reqs, eo, &always), plain);
  EXPECT_EQ(always.spec_gate_held, 0);
  eo.spec_gate = true;
  ExpectSame(RunAll(model, reqs, eo, &gated), plain);
  // Its first steps at each load measure drafting: some drafts always run.
  EXPECT_GT(gated.spec_drafted, 0);
  EXPECT_EQ(gated.spec_accepted, gated.spec_drafted);
  eo.spec_gate.reset();
  ASSERT_TRUE(model->SetKnobOverride("MINFER_SPEC_GATE", std::string("0")).ok());
  ExpectSame(RunAll(model, reqs, eo, &knob_off, /*gate_from_knob=*/true), plain);
  ASSERT_TRUE(model->SetKnobOverride("MINFER_SPEC_GATE", std::nullopt).ok());
  EXPECT_EQ(knob_off.spec_gate_held, 0);
  EXPECT_EQ(knob_off.spec_drafted, always.spec_drafted);
}

}  // namespace
}  // namespace minfer::runtime
