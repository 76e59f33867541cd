// The batched path on the CPU against single-sequence runs (Session /
// Generation, the contiguous KV cache): the batch runner's logits for a
// sequence equal its alone run's, bit for bit, whatever shares its steps
// (decode tokens mixed with prefill chunks, different lengths, GQA, block
// sizes below and above the attention kernel's key block, f32 and f16 KV);
// the engine's greedy and seeded-sampling tokens equal the alone runs',
// also when a small pool forces preemption; and a request that could never
// fit the pool is refused with the figures.
#include <algorithm>
#include <cstring>
#include <functional>
#include <iostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/base/field_error.h"
#include "engine/base/knobs.h"
#include "engine/runtime/batch_runner.h"
#include "engine/runtime/completion.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/generation.h"
#include "engine/runtime/model.h"
#include "engine/runtime/scheduler.h"
#include "engine/runtime/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/cpu_model.h"
#include "tests/support/test_models.h"

namespace minfer::runtime {
namespace {

std::shared_ptr<Model> LoadModel(const std::string& shape, const std::string& type) {
  return testing::LoadCpuTestModel(shape, type);
}

std::vector<int32_t> Prompt(int64_t n, uint32_t seed, int32_t vocab) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> p(n);
  for (auto& t : p) t = d(rng);
  return p;
}

int32_t Argmax(const float* l, int64_t n) {
  return static_cast<int32_t>(std::max_element(l, l + n) - l);
}

struct AloneRun {
  std::vector<int32_t> tokens;             // greedy continuation
  std::vector<std::vector<float>> logits;  // before each continuation token
};

AloneRun RunAlone(std::shared_ptr<Model> model, const std::vector<int32_t>& prompt, int steps,
                  graph::DType kv) {
  AloneRun r;
  auto s = Session::Create(model, {.n_ctx = 512, .kv_type = kv});
  EXPECT_TRUE(s.ok()) << s.status();
  auto l = (*s)->Eval(prompt);
  EXPECT_TRUE(l.ok()) << l.status();
  for (int i = 0; i < steps; ++i) {
    r.logits.push_back(*l);
    const int32_t t = Argmax(l->data(), static_cast<int64_t>(l->size()));
    r.tokens.push_back(t);
    l = (*s)->Eval({t});
    EXPECT_TRUE(l.ok()) << l.status();
  }
  return r;
}

struct RunnerCase {
  std::string shape, type;
  int32_t kv_block;
  graph::DType kv;
};

class BatchRunnerTest : public ::testing::TestWithParam<RunnerCase> {};

TEST_P(BatchRunnerTest, LogitsEqualAloneRunsBitForBit) {
  const RunnerCase rc = GetParam();
  auto model = LoadModel(rc.shape, rc.type);
  ASSERT_NE(model, nullptr);
  const int64_t V = model->hparams().n_vocab;
  const int32_t vocab = model->tokenizer().vocab_size();
  const std::vector<int64_t> lens = {5, 37, 70, 130, 1, 64};
  const int kSteps = 6;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<AloneRun> alone;
  for (size_t i = 0; i < lens.size(); ++i) {
    prompts.push_back(Prompt(lens[i], 100 + static_cast<uint32_t>(i), vocab));
    alone.push_back(RunAlone(model, prompts.back(), kSteps, rc.kv));
  }
  BatchRunnerOptions ro;
  ro.max_tokens = 96;  // forces chunked prompts and mixed steps
  ro.max_seqs = 6;
  ro.n_ctx = 512;
  ro.kv_block = rc.kv_block;
  ro.kv_type = rc.kv;
  auto runner = BatchRunner::Create(model, ro);
  ASSERT_TRUE(runner.ok()) << runner.status();
  SchedulerOptions so;
  so.max_seqs = ro.max_seqs;
  so.token_budget = ro.max_tokens;
  so.block_size = rc.kv_block;
  so.max_seq_rows = ro.n_ctx;
  Scheduler sched(so, &(*runner)->pool().blocks());
  std::vector<std::vector<int32_t>> toks = prompts;
  std::vector<int> sampled(lens.size(), 0);
  for (size_t i = 0; i < lens.size(); ++i) sched.Add(i, lens[i]);
  int64_t mixed_steps = 0, rows_checked = 0;
  for (int step = 0; step < 200 && sched.size() > 0; ++step) {
    Scheduler::Step st = sched.Schedule();
    ASSERT_FALSE(st.empty());
    std::vector<BatchItem> items;
    bool has_decode = false, has_prefill = false;
    for (const auto& w : st.work) {
      BatchItem it;
      it.tokens = absl::MakeConstSpan(toks[w.id]).subspan(w.start, w.count);
      it.pos0 = w.start;
      it.blocks = sched.blocks(w.id);
      it.logits = w.completes;
      it.mode = RowMode::kFull;
      items.push_back(it);
      (w.count == 1 ? has_decode : has_prefill) = true;
    }
    if (has_decode && has_prefill) ++mixed_steps;
    std::vector<RowResult> res;
    ASSERT_TRUE((*runner)->Run(items, &res).ok());
    sched.Commit(st);
    for (size_t j = 0; j < st.work.size(); ++j) {
      const auto& w = st.work[j];
      if (!w.completes) continue;
      const int k = sampled[w.id]++;
      ASSERT_NE(res[j].logits, nullptr);
      const auto& want = alone[w.id].logits[k];
      ASSERT_EQ(0, std::memcmp(res[j].logits, want.data(), V * sizeof(float)))
          << "sequence " << w.id << " row " << k << " (step " << step << ")";
      ++rows_checked;
      if (k + 1 == kSteps) {
        sched.Remove(w.id);
      } else {
        toks[w.id].push_back(alone[w.id].tokens[k]);
        sched.Append(w.id);
      }
    }
  }
  EXPECT_EQ(sched.size(), 0);
  EXPECT_EQ(rows_checked, static_cast<int64_t>(lens.size()) * kSteps);
  EXPECT_GT(mixed_steps, 2) << "the schedule never mixed decode tokens with prefill chunks";
  EXPECT_GT((*runner)->stats().graph_builds, 1);
  // Steps of decode tokens only ran their own graphs (a tile per token).
  EXPECT_GT((*runner)->stats().decode_only_steps, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, BatchRunnerTest,
    ::testing::Values(RunnerCase{"tiny", "q8_0", 16, graph::DType::kF32},
                      RunnerCase{"tiny", "q8_0", 64, graph::DType::kF16},
                      RunnerCase{"tiny-untied", "q4_k_m", 32, graph::DType::kF32},
                      RunnerCase{"tiny-untied", "q8_0", 128, graph::DType::kQ8_0},
                      RunnerCase{"tiny", "q8_0", 32, graph::DType::kFp8},
                      // Qwen3: per-head q/k norms, q wider than the stream.
                      RunnerCase{"qwen3-tiny", "q8_0", 32, graph::DType::kF16},
                      // Llama 3: adjacent-pair RoPE with rope_freqs factors.
                      RunnerCase{"llama-tiny", "q8_0", 32, graph::DType::kF16},
                      RunnerCase{"llama-tiny", "q4_k_m", 16, graph::DType::kF32},
                      // Qwen3 MoE: each token's experts, grouped across the
                      // batch, give its alone logits bit for bit.
                      RunnerCase{"qwen3moe-tiny", "q4_k_m", 32, graph::DType::kF16},
                      // gpt-oss: sliding windows crossing the schedule's
                      // chunks, sinks, YaRN.
                      RunnerCase{"gpt-oss-tiny", "mxfp4_moe", 16, graph::DType::kF16}));

// Quantized KV caches against f32 KV, teacher-forced on the f32 run's
// greedy tokens: per step, the largest logit change relative to the largest
// |logit| stays under the type's bound (measured on these three models:
// q8_0 at most 0.0105, fp8 0.0120; the bounds are about 3x and 4x that), q8_0
// never errs more than fp8 over a run (its 254 levels per block beat e4m3's
// 3-bit mantissa on Gaussian-like rows), and wherever the f32 logits' top-2
// margin exceeds twice the step's largest change the greedy token is the
// same (a perturbation of at most delta per logit cannot reorder a margin
// above 2 delta).
TEST(QuantizedKvTest, LogitsStayWithinTheBoundOfF32Kv) {
  for (const char* shape : {"tiny", "llama-tiny", "qwen3-tiny"}) {
    SCOPED_TRACE(shape);
    auto model = LoadModel(shape, "q8_0");
    ASSERT_NE(model, nullptr);
    const std::vector<int32_t> prompt = Prompt(60, 5, model->tokenizer().vocab_size());
    const int steps = 40;
    const AloneRun ref = RunAlone(model, prompt, steps, graph::DType::kF32);
    double worst[2] = {0, 0};
    const graph::DType types[2] = {graph::DType::kQ8_0, graph::DType::kFp8};
    const double bound[2] = {0.03, 0.05};
    for (int ti = 0; ti < 2; ++ti) {
      auto s = Session::Create(model, {.n_ctx = 512, .kv_type = types[ti]});
      ASSERT_TRUE(s.ok()) << s.status();
      auto l = (*s)->Eval(prompt);
      ASSERT_TRUE(l.ok()) << l.status();
      int guarded = 0;
      for (int i = 0; i < steps; ++i) {
        const std::vector<float>& r = ref.logits[i];
        double max_abs = 0, max_diff = 0;
        for (size_t j = 0; j < r.size(); ++j) {
          max_abs = std::max(max_abs, std::fabs(static_cast<double>(r[j])));
          max_diff = std::max(max_diff, std::fabs(static_cast<double>((*l)[j]) - r[j]));
        }
        worst[ti] = std::max(worst[ti], max_diff / max_abs);
        std::vector<float> sorted = r;
        std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
        if (sorted[0] - sorted[1] > 2 * max_diff) {
          ++guarded;
          EXPECT_EQ(Argmax(l->data(), static_cast<int64_t>(l->size())), ref.tokens[i])
              << graph::DTypeName(types[ti]) << " step " << i;
        }
        l = (*s)->Eval({ref.tokens[i]});
        ASSERT_TRUE(l.ok()) << l.status();
      }
      std::cout << "[kv] " << shape << " " << graph::DTypeName(types[ti])
                << ": worst max|dlogit| / max|logit| " << worst[ti] << " (bound " << bound[ti]
                << "), greedy token guarded at " << guarded << " of " << steps << " steps\n";
      EXPECT_LE(worst[ti], bound[ti]) << graph::DTypeName(types[ti]);
    }
    EXPECT_LE(worst[0], worst[1]) << "q8_0 erred more than fp8";
  }
}

// A short run over a long context (a cached prefix's last tokens, a chat's
// next turn) is attended one token per tile (MINFER_ATTN_SHORT_RUN); on the
// CPU that changes no bit, and only such runs are split: not a run that
// starts before 128 positions of context, not a run longer than the knob,
// and not when the knob is 0. A step of such runs and decode tokens only
// runs the token-tile graph, so the run is split however few sequences the
// runner's graphs are sized for (a speculative verify step at one stream:
// max_seqs 1 or 2 left room for a 2-token run only).
TEST(BatchRunnerShortRunTest, ShortRunsOverContextAreTokenTilesWithTheSameLogits) {
  auto model = LoadModel("tiny", "q8_0");
  ASSERT_NE(model, nullptr);
  const int64_t V = model->hparams().n_vocab;
  const std::vector<int32_t> prompt = Prompt(220, 7, model->tokenizer().vocab_size());
  // Each case: the prompt's first `ctx` tokens prefilled in chunks of 64,
  // then one step of the next `run` tokens (with a one-token decode of a
  // second sequence beside it); the expected short-run token count.
  struct Case {
    int64_t ctx, run, knob, split;
    int32_t max_seqs = 16;  // 16: the mixed graphs' tile count leaves room too
  };
  for (const Case c : {Case{200, 8, 16, 8}, Case{200, 16, 16, 16}, Case{200, 17, 16, 0},
                       Case{100, 8, 16, 0}, Case{200, 8, 0, 0}, Case{128, 2, 16, 2},
                       Case{200, 8, 16, 8, 2}, Case{200, 16, 16, 16, 2},
                       Case{200, 17, 16, 0, 2}, Case{100, 8, 16, 0, 2}}) {
    SCOPED_TRACE(absl::StrCat("ctx ", c.ctx, " run ", c.run, " knob ", c.knob, " max_seqs ",
                              c.max_seqs));
    ASSERT_TRUE(KnobRegistry::Global().Set("MINFER_ATTN_SHORT_RUN", absl::StrCat(c.knob)).ok());
    BatchRunnerOptions ro;
    ro.max_tokens = 64;
    ro.max_seqs = c.max_seqs;
    ro.n_ctx = 512;
    auto runner = BatchRunner::Create(model, ro);
    ASSERT_TRUE(runner.ok()) << runner.status();
    std::vector<int32_t> blocks, other;
    ASSERT_TRUE((*runner)->pool().blocks().Allocate(16, &blocks));
    ASSERT_TRUE((*runner)->pool().blocks().Allocate(1, &other));
    std::vector<RowResult> res;
    for (int64_t p0 = 0; p0 < c.ctx; p0 += 64) {
      BatchItem it;
      it.tokens = absl::MakeConstSpan(prompt).subspan(p0, std::min<int64_t>(64, c.ctx - p0));
      it.pos0 = p0;
      it.blocks = blocks;
      it.logits = false;
      ASSERT_TRUE((*runner)->Run({it}, &res).ok());
    }
    // (The prefix's own last chunk may be a short run too.)
    const int64_t before = (*runner)->stats().short_run_tokens;
    const int64_t token_steps = (*runner)->stats().decode_only_steps;
    BatchItem run, decode;
    run.tokens = absl::MakeConstSpan(prompt).subspan(c.ctx, c.run);
    run.pos0 = c.ctx;
    run.blocks = blocks;
    run.mode = RowMode::kFull;
    decode.tokens = absl::MakeConstSpan(prompt).subspan(0, 1);
    decode.pos0 = 0;
    decode.blocks = other;
    ASSERT_TRUE((*runner)->Run({decode, run}, &res).ok());
    EXPECT_EQ((*runner)->stats().short_run_tokens - before, c.split);
    // The step ran the token-tile graph exactly when its run was split.
    EXPECT_EQ((*runner)->stats().decode_only_steps - token_steps, c.split > 0 ? 1 : 0);
    // The same logits as the whole prefix and run evaluated alone.
    const AloneRun alone = RunAlone(
        model, std::vector<int32_t>(prompt.begin(), prompt.begin() + c.ctx + c.run), 1,
        graph::DType::kF32);
    ASSERT_NE(res[1].logits, nullptr);
    EXPECT_EQ(0, std::memcmp(res[1].logits, alone.logits[0].data(), V * sizeof(float)));
  }
  ASSERT_TRUE(KnobRegistry::Global().Reset("MINFER_ATTN_SHORT_RUN").ok());
}

// Runs every request through one Engine and returns each one's tokens.
std::vector<std::vector<int32_t>> RunEngine(std::shared_ptr<Model> model,
                                            const std::vector<GenerateRequest>& reqs,
                                            const EngineOptions& eo, int64_t* preemptions,
                                            int64_t* mixed_steps,
                                            EngineSnapshot* snapshot = nullptr) {
  auto e = Engine::Create(model, eo);
  EXPECT_TRUE(e.ok()) << e.status();
  std::vector<std::vector<int32_t>> out(reqs.size());
  std::map<uint64_t, size_t> index;
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto id = (*e)->Add(reqs[i]);
    EXPECT_TRUE(id.ok()) << id.status();
    index[*id] = i;
  }
  *mixed_steps = 0;
  std::vector<EngineEvent> ev;
  for (int step = 0; step < 5000 && (*e)->HasWork(); ++step) {
    ev.clear();
    absl::Status st = (*e)->Step(&ev);
    EXPECT_TRUE(st.ok()) << st;
    const auto& ls = (*e)->last_step();
    if (ls.prefill_tokens > 0 && ls.prefill_tokens < ls.tokens) ++*mixed_steps;
    // A step that ran tokens spent part of its time in the batch runner.
    if (ls.tokens > 0) {
      EXPECT_GT(ls.forward_seconds, 0.0) << "step " << step;
      EXPECT_LE(ls.forward_seconds, ls.seconds) << "step " << step;
    }
    for (const EngineEvent& x : ev) {
      EXPECT_TRUE(x.status.ok()) << x.status;
      for (int32_t t : x.out.tokens) out[index[x.id]].push_back(t);
    }
  }
  EXPECT_FALSE((*e)->HasWork());
  EXPECT_EQ((*e)->pool().blocks().used(), 0) << "finished sequences hold blocks";
  *preemptions = (*e)->preemptions();
  if (snapshot != nullptr) *snapshot = (*e)->Snapshot();
  return out;
}

std::vector<int32_t> RunGeneration(std::shared_ptr<Model> model, const GenerateRequest& req) {
  auto s = Session::Create(model, {.n_ctx = 512});
  EXPECT_TRUE(s.ok());
  auto g = Generate(s->get(), req, nullptr);
  EXPECT_TRUE(g.ok()) << g.status();
  return (*g)->output_tokens();
}

std::vector<GenerateRequest> Requests(const Model& model, int n, int max_tokens,
                                      const SamplingParams& sp) {
  std::vector<GenerateRequest> reqs;
  const int32_t vocab = model.tokenizer().vocab_size();
  for (int i = 0; i < n; ++i) {
    GenerateRequest r;
    r.prompt = Prompt(3 + 23 * i % 97, 500 + i, vocab);
    r.max_tokens = max_tokens + i % 3;
    r.ignore_eos = true;
    r.sampling = sp;
    r.sampling.seed = 1000 + i;
    reqs.push_back(r);
  }
  return reqs;
}

class EngineGreedyTest : public ::testing::TestWithParam<const char*> {};

TEST_P(EngineGreedyTest, GreedyTokensEqualAloneRuns) {
  auto model = LoadModel(GetParam(), "q8_0");
  ASSERT_NE(model, nullptr);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  auto reqs = Requests(*model, 8, 24, greedy);
  EngineOptions eo;
  eo.max_seqs = 8;
  eo.token_budget = 40;
  eo.n_ctx = 512;
  int64_t preemptions = 0, mixed = 0;
  auto got = RunEngine(model, reqs, eo, &preemptions, &mixed);
  EXPECT_GT(mixed, 0);
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto want = RunGeneration(model, reqs[i]);
    EXPECT_EQ(got[i], want) << "request " << i;
    // The greedy path moves: a model repeating one token would prove little.
    EXPECT_GE(std::set<int32_t>(want.begin(), want.end()).size(), 6u) << "request " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, EngineGreedyTest,
                         ::testing::Values("tiny-untied", "qwen3-tiny", "llama-tiny",
                                           "qwen3moe-tiny", "gpt-oss-tiny"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

TEST(EngineTest, PreemptionKeepsGreedyTokens) {
  auto model = LoadModel("tiny-untied", "q8_0");
  ASSERT_NE(model, nullptr);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  auto reqs = Requests(*model, 6, 40, greedy);
  EngineOptions eo;
  eo.max_seqs = 6;
  eo.token_budget = 64;
  eo.n_ctx = 512;
  eo.kv_block = 16;
  eo.kv_blocks = 1 + 14;  // 224 rows for 6 sequences of up to ~140
  int64_t preemptions = 0, mixed = 0;
  auto got = RunEngine(model, reqs, eo, &preemptions, &mixed);
  EXPECT_GT(preemptions, 0) << "the pool was never short";
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(got[i], RunGeneration(model, reqs[i])) << "request " << i;
    EXPECT_GE(std::set<int32_t>(got[i].begin(), got[i].end()).size(), 6u) << "request " << i;
  }
}

TEST(EngineTest, SampledTokensEqualAloneRuns) {
  auto model = LoadModel("tiny-untied", "q8_0");
  ASSERT_NE(model, nullptr);
  // Top-k (candidates computed with the logits: Sampler::SampleTop), top-p
  // without top-k and penalties (whole rows): every sequence keeps its own
  // seed and random stream.
  std::vector<SamplingParams> params(3);
  params[0].temperature = 0.9f;
  params[0].top_k = 40;
  params[0].top_p = 0.95f;
  params[0].min_p = 0.01f;
  params[1].temperature = 1.1f;
  params[1].top_p = 0.9f;
  params[2].temperature = 0.7f;
  params[2].top_k = 20;
  params[2].repetition_penalty = 1.3f;
  params[2].presence_penalty = 0.5f;
  for (size_t p = 0; p < params.size(); ++p) {
    auto reqs = Requests(*model, 6, 20, params[p]);
    EngineOptions eo;
    eo.max_seqs = 6;
    eo.token_budget = 48;
    eo.n_ctx = 512;
    int64_t preemptions = 0, mixed = 0;
    auto got = RunEngine(model, reqs, eo, &preemptions, &mixed);
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_EQ(got[i], RunGeneration(model, reqs[i])) << "params " << p << " request " << i;
    }
  }
}

TEST(EngineTest, RefusesRequestsThatCannotFitThePool) {
  auto model = LoadModel("tiny", "q8_0");
  ASSERT_NE(model, nullptr);
  EngineOptions eo;
  eo.max_seqs = 2;
  eo.token_budget = 64;
  eo.n_ctx = 512;
  eo.kv_block = 16;
  eo.kv_blocks = 1 + 4;  // 64 rows
  auto e = Engine::Create(model, eo);
  ASSERT_TRUE(e.ok()) << e.status();
  GenerateRequest r;
  r.prompt = Prompt(30, 1, model->tokenizer().vocab_size());
  r.max_tokens = 100;
  auto id = (*e)->Add(r);
  ASSERT_FALSE(id.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(id.status())) << id.status();
  EXPECT_TRUE(absl::StrContains(id.status().message(), "129 KV rows")) << id.status();
  EXPECT_TRUE(absl::StrContains(id.status().message(), "holds 4 blocks")) << id.status();
  r.max_tokens = 35;  // 64 rows: fits
  EXPECT_TRUE((*e)->Add(r).ok());
}

// The request rules live in ValidateGenerateRequest alone; Engine::Add
// returns its error unchanged, and the batch runner refuses an item that
// breaks them as an invariant violation (its caller's bug), not as a client
// error.
TEST(EngineTest, RequestRulesAreCheckedOnceAndTheRunnerAssertsThem) {
  auto model = LoadModel("tiny", "q8_0");
  ASSERT_NE(model, nullptr);
  const int32_t n_vocab = static_cast<int32_t>(model->hparams().n_vocab);
  GenerateRequest ok;
  ok.prompt = {1, 2, 3};
  ok.max_tokens = 4;
  EXPECT_TRUE(ValidateGenerateRequest(ok, *model, 4).ok());
  struct Case {
    std::function<void(GenerateRequest&)> edit;
    int64_t n_ctx;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](GenerateRequest& r) { r.prompt.clear(); }, 16, "prompt: no tokens"},
      {[&](GenerateRequest& r) { r.prompt[1] = n_vocab; }, 16,
       absl::StrCat("prompt[1]: token id ", n_vocab, " is outside the vocabulary [0, ", n_vocab,
                    ")")},
      {[](GenerateRequest& r) { r.prompt[2] = -1; }, 16,
       absl::StrCat("prompt[2]: token id -1 is outside the vocabulary [0, ",
                    model->hparams().n_vocab, ")")},
      {[](GenerateRequest&) {}, 3,
       "prompt: 3 tokens do not fit the model's context of 3 (one position must remain for the "
       "completion)"},
      {[](GenerateRequest& r) { r.max_tokens = 0; }, 16, "max_tokens must be >= 1, got 0"},
      {[](GenerateRequest& r) { r.stop = {"a", ""}; }, 16, "stop[1] is empty"},
      {[](GenerateRequest& r) { r.sampling.top_p = 2; }, 16, "sampling.top_p"},
  };
  EngineOptions eo;
  eo.max_seqs = 2;
  eo.token_budget = 64;
  eo.n_ctx = 16;
  auto e = Engine::Create(model, eo);
  ASSERT_TRUE(e.ok()) << e.status();
  for (const Case& c : cases) {
    GenerateRequest r = ok;
    c.edit(r);
    const absl::Status v = ValidateGenerateRequest(r, *model, c.n_ctx);
    EXPECT_TRUE(absl::IsInvalidArgument(v)) << v;
    EXPECT_TRUE(absl::StartsWith(v.message(), c.message)) << v << " vs " << c.message;
    if (c.n_ctx == eo.n_ctx) {
      auto id = (*e)->Add(r);
      EXPECT_EQ(id.status(), v) << "Engine::Add returns the validation's error";
    }
  }

  BatchRunnerOptions ro;
  ro.max_tokens = 16;
  ro.max_seqs = 2;
  ro.n_ctx = 64;
  auto runner = BatchRunner::Create(model, ro);
  ASSERT_TRUE(runner.ok()) << runner.status();
  const std::vector<int32_t> bad = {1, n_vocab};
  const std::vector<int32_t> blocks = {1};
  BatchItem it;
  it.tokens = absl::MakeConstSpan(bad);
  it.pos0 = 0;
  it.blocks = absl::MakeConstSpan(blocks);
  it.logits = true;
  std::vector<RowResult> res;
  const absl::Status st = (*runner)->Run({it}, &res);
  EXPECT_TRUE(absl::IsInternal(st)) << st;
  EXPECT_EQ(st.message(), absl::StrCat("batch runner invariant: item 0: token id ", n_vocab,
                                       " is outside the vocabulary [0, ", n_vocab, ")"));
}

// The rules' errors name the field as data (engine/base/field_error.h), and a
// prompt longer than the context says so as a reason, not only in words.
TEST(EngineTest, RequestRuleErrorsCarryTheFieldAndTheReason) {
  auto model = LoadModel("tiny", "q8_0");
  ASSERT_NE(model, nullptr);
  GenerateRequest ok;
  ok.prompt = {1, 2, 3};
  ok.max_tokens = 4;
  struct Case {
    std::function<void(GenerateRequest&)> edit;
    int64_t n_ctx;
    std::string path, reason;
  };
  const std::vector<Case> cases = {
      {[](GenerateRequest& r) { r.prompt.clear(); }, 16, "prompt", ""},
      {[](GenerateRequest& r) { r.prompt[2] = -1; }, 16, "prompt[2]", ""},
      {[](GenerateRequest&) {}, 3, "prompt", kContextLengthExceeded},
      {[](GenerateRequest& r) { r.max_tokens = 0; }, 16, "max_tokens", ""},
      {[](GenerateRequest& r) { r.stop = {"a", ""}; }, 16, "stop[1]", ""},
      {[](GenerateRequest& r) { r.sampling.top_p = 2; }, 16, "sampling.top_p", ""},
      {[](GenerateRequest& r) { r.sampling.banned_tokens = {-3}; }, 16,
       "sampling.banned_tokens[0]", ""},
  };
  for (const Case& c : cases) {
    GenerateRequest r = ok;
    c.edit(r);
    const absl::Status v = ValidateGenerateRequest(r, *model, c.n_ctx);
    EXPECT_EQ(FieldPath(v), c.path) << v;
    EXPECT_EQ(ErrorReason(v), c.reason) << v;
    // The message is the path and what follows it.
    EXPECT_EQ(v.message(), absl::StrCat(c.path, FieldText(v))) << v;
  }
}

// Prefix caching: prompts that share a 50-token system prompt, two
// sequences at a time, so later ones find the earlier ones' blocks. Greedy
// and seeded sampled requests alike get the tokens they get with every
// prompt computed (the CPU's batched rows are bit-identical to alone runs,
// so a cached row equals a recomputed one).
TEST(EngineTest, PrefixCacheHitsGiveTheSameTokensAsComputingThePrompt) {
  auto model = LoadModel("tiny-untied", "q8_0");
  ASSERT_NE(model, nullptr);
  const int32_t vocab = model->tokenizer().vocab_size();
  const std::vector<int32_t> system = Prompt(50, 77, vocab);
  std::vector<GenerateRequest> reqs;
  for (int i = 0; i < 6; ++i) {
    GenerateRequest r;
    r.prompt = system;
    const std::vector<int32_t> q = Prompt(3 + 5 * i, 900 + i, vocab);
    r.prompt.insert(r.prompt.end(), q.begin(), q.end());
    r.max_tokens = 16 + i;
    r.ignore_eos = true;
    r.sampling.temperature = i % 2 == 0 ? 0.0f : 0.8f;
    r.sampling.seed = 40 + i;
    reqs.push_back(r);
  }
  EngineOptions eo;
  eo.max_seqs = 2;
  eo.token_budget = 48;
  eo.n_ctx = 512;
  eo.kv_block = 16;
  int64_t preemptions = 0, mixed = 0;
  EngineSnapshot off, on;
  eo.prefix_cache = false;
  const auto want = RunEngine(model, reqs, eo, &preemptions, &mixed, &off);
  eo.prefix_cache = true;
  const auto got = RunEngine(model, reqs, eo, &preemptions, &mixed, &on);
  EXPECT_EQ(off.prefix_hit_tokens, 0);
  // Requests 3-6 each take the system prompt's 3 full blocks (48 tokens).
  EXPECT_GE(on.prefix_hit_tokens, 4 * 48);
  EXPECT_GT(on.kv_blocks_cached, 0);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(got[i], want[i]) << "request " << i;
    if (i % 2 == 0) {
      EXPECT_GE(std::set<int32_t>(want[i].begin(), want[i].end()).size(), 6u) << "request " << i;
    }
  }
}

// A chat of five turns, each prompt the previous prompt, its answer and a
// new question, one engine throughout: each turn takes everything but the
// last partial block from the cache (the counters say so), and its answer
// equals the one computed from scratch.
TEST(EngineTest, AChatReusesItsEarlierTurns) {
  auto model = LoadModel("tiny-untied", "q8_0");
  ASSERT_NE(model, nullptr);
  const int32_t vocab = model->tokenizer().vocab_size();
  EngineOptions eo;
  eo.max_seqs = 2;
  eo.token_budget = 64;
  eo.n_ctx = 512;
  eo.kv_block = 16;
  eo.prefix_cache = true;
  auto e = Engine::Create(model, eo);
  ASSERT_TRUE(e.ok()) << e.status();
  std::vector<int32_t> history = Prompt(40, 5, vocab);
  int64_t previous = 0;  // tokens of the previous turn's prompt and answer
  for (int turn = 0; turn < 5; ++turn) {
    GenerateRequest r;
    r.prompt = history;
    r.max_tokens = 12;
    r.ignore_eos = true;
    r.sampling.temperature = 0.0f;
    auto id = (*e)->Add(r);
    ASSERT_TRUE(id.ok()) << id.status();
    std::vector<int32_t> answer;
    GenerationStats stats;
    std::vector<EngineEvent> ev;
    while ((*e)->HasWork()) {
      ev.clear();
      ASSERT_TRUE((*e)->Step(&ev).ok());
      for (const EngineEvent& x : ev) {
        for (int32_t t : x.out.tokens) answer.push_back(t);
        if (x.finished) stats = x.stats;
      }
    }
    EXPECT_EQ(answer, RunGeneration(model, r)) << "turn " << turn;
    // Cached: all full blocks of the previous prompt and answer's computed
    // rows (all but the answer's last token).
    const int64_t cacheable = turn == 0 ? 0 : (previous - 1) / 16 * 16;
    EXPECT_EQ(stats.cached_prompt_tokens, cacheable) << "turn " << turn;
    previous = static_cast<int64_t>(history.size() + answer.size());
    history.insert(history.end(), answer.begin(), answer.end());
    const std::vector<int32_t> q = Prompt(9 + turn, 60 + turn, vocab);
    history.insert(history.end(), q.begin(), q.end());
  }
}

// KV-cache events through the engine: a prompt's full blocks are announced
// once computed, and a knob change (a new cache generation: the old blocks
// can never match again) announces their removal before the same prompt
// computes and announces them anew.
TEST(EngineTest, KvEventsAnnounceStoredBlocksAndTheirRemovalAtAKnobChange) {
  auto model = LoadModel("tiny-untied", "q8_0");
  ASSERT_NE(model, nullptr);
  EngineOptions eo;
  eo.max_seqs = 1;
  eo.token_budget = 64;
  eo.n_ctx = 256;
  eo.kv_block = 16;
  eo.prefix_cache = true;
  eo.kv_events = true;
  auto e = Engine::Create(model, eo);
  ASSERT_TRUE(e.ok()) << e.status();
  GenerateRequest r;
  r.prompt = Prompt(50, 77, model->tokenizer().vocab_size());
  r.max_tokens = 6;
  r.ignore_eos = true;
  r.sampling.temperature = 0.0f;
  auto run = [&] {
    ASSERT_TRUE((*e)->Add(r).ok());
    std::vector<EngineEvent> ev;
    while ((*e)->HasWork()) {
      ev.clear();
      ASSERT_TRUE((*e)->Step(&ev).ok());
    }
  };
  run();
  std::vector<KvEvent> events;
  (*e)->TakeKvEvents(&events);
  std::vector<uint64_t> stored;
  std::vector<int32_t> tokens;
  for (const KvEvent& k : events) {
    ASSERT_EQ(k.type, KvEvent::Type::kBlockStored);
    stored.insert(stored.end(), k.block_hashes.begin(), k.block_hashes.end());
    tokens.insert(tokens.end(), k.token_ids.begin(), k.token_ids.end());
  }
  // 50 prompt tokens and 5 computed answer tokens: 3 full blocks, the
  // prompt's first 48 tokens.
  ASSERT_EQ(stored.size(), 3u);
  EXPECT_EQ(tokens, std::vector<int32_t>(r.prompt.begin(), r.prompt.begin() + 48));
  KvBlockHasher hasher;
  BlockDigest d = hasher.Hash(nullptr, absl::MakeConstSpan(r.prompt).first(16), "");
  EXPECT_EQ(stored[0], KvBlockHasher::External(d));

  // An override equal to the default still starts a new generation.
  const uint64_t gen = model->knob_generation();
  ASSERT_TRUE(model->SetKnobOverride("MINFER_SPEC_K", std::string("0")).ok());
  ASSERT_GT(model->knob_generation(), gen);
  run();
  ASSERT_TRUE(model->SetKnobOverride("MINFER_SPEC_K", std::nullopt).ok());
  events.clear();
  (*e)->TakeKvEvents(&events);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[0].type, KvEvent::Type::kBlockRemoved);
  EXPECT_THAT(events[0].block_hashes, ::testing::UnorderedElementsAreArray(stored));
  // Computed again under the new generation: the same tokens, the same
  // hashes (the events' hashes depend on the tokens alone).
  std::vector<uint64_t> again;
  for (size_t i = 1; i < events.size(); ++i) {
    EXPECT_EQ(events[i].type, KvEvent::Type::kBlockStored);
    again.insert(again.end(), events[i].block_hashes.begin(), events[i].block_hashes.end());
  }
  EXPECT_EQ(again, stored);
}

// Prefix-cache namespaces (the daemon's tenants and cache salts), one
// engine throughout: the same 50-token prompt sent in namespace "a", then
// "b", then "a" and "b" again. A namespace's first request computes every
// token (cached_prompt_tokens 0, whatever another namespace has cached);
// its second takes its own 3 full blocks (48 tokens); the answers are the
// same throughout.
TEST(EngineTest, PrefixCacheNamespacesNeverShareBlocks) {
  auto model = LoadModel("tiny-untied", "q8_0");
  ASSERT_NE(model, nullptr);
  EngineOptions eo;
  eo.max_seqs = 2;
  eo.token_budget = 64;
  eo.n_ctx = 256;
  eo.kv_block = 16;
  eo.prefix_cache = true;
  auto e = Engine::Create(model, eo);
  ASSERT_TRUE(e.ok()) << e.status();
  GenerateRequest r;
  r.prompt = Prompt(50, 31, model->tokenizer().vocab_size());
  r.max_tokens = 6;
  r.ignore_eos = true;
  r.sampling.temperature = 0.0f;
  const std::vector<int32_t> want = RunGeneration(model, r);
  auto run = [&](const std::string& ns, std::vector<int32_t>* answer) {
    GenerateRequest q = r;
    q.cache_ns = ns;
    auto id = (*e)->Add(q);
    EXPECT_TRUE(id.ok()) << id.status();
    GenerationStats stats;
    std::vector<EngineEvent> ev;
    while ((*e)->HasWork()) {
      ev.clear();
      EXPECT_TRUE((*e)->Step(&ev).ok());
      for (const EngineEvent& x : ev) {
        for (int32_t t : x.out.tokens) answer->push_back(t);
        if (x.finished) stats = x.stats;
      }
    }
    return stats.cached_prompt_tokens;
  };
  const std::pair<std::string, int32_t> order[] = {{"a", 0}, {"b", 0}, {"", 0}, {"a", 48}, {"b", 48}};
  for (const auto& [ns, cached] : order) {
    std::vector<int32_t> answer;
    EXPECT_EQ(run(ns, &answer), cached) << "namespace '" << ns << "'";
    EXPECT_EQ(answer, want) << "namespace '" << ns << "'";
  }
  EXPECT_EQ((*e)->Snapshot().prefix_hit_tokens, 96);
}

// A Llama 3 file: prompts start with BOS, its chat template (the GGUF's
// tokenizer.chat_template, Llama 3.2's) frames a conversation with one BOS,
// and each of Llama 3's ends of generation finishes a sequence.
TEST(EngineTest, LlamaBosChatTemplateAndEndsOfGeneration) {
  auto model = LoadModel("llama-tiny", "q8_0");
  ASSERT_NE(model, nullptr);
  const tokenizer::Tokenizer& tok = model->tokenizer();
  ASSERT_TRUE(tok.bos_id().has_value());
  const int32_t bos = *tok.bos_id();
  EXPECT_EQ(tok.TokenText(bos), "<|begin_of_text|>");
  const std::vector<int32_t> ids = tok.Encode("Hello 2024");
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], bos);
  ASSERT_TRUE(tok.chat_template().ok()) << tok.chat_template().status();
  EXPECT_TRUE(tok.chat_template()->from_model());
  auto chat = tok.EncodeChat({{"user", "Hi"}}, /*add_generation_prompt=*/true);
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ((*chat)[0], bos);
  EXPECT_EQ(std::count(chat->begin(), chat->end(), bos), 1);
  auto text = tok.Decode(*chat);
  ASSERT_TRUE(text.ok());
  EXPECT_TRUE(absl::EndsWith(*text, "<|start_header_id|>assistant<|end_header_id|>\n\n"))
      << *text;

  std::vector<int32_t> eog;
  for (const char* name : {"<|eot_id|>", "<|end_of_text|>", "<|eom_id|>"}) {
    auto id = tok.FindToken(name);
    ASSERT_TRUE(id.has_value()) << name;
    eog.push_back(*id);
  }
  std::sort(eog.begin(), eog.end());
  EXPECT_EQ(tok.stop_ids(), eog);
  for (int32_t stop : eog) {
    GenerateRequest req;
    req.prompt = ids;
    req.max_tokens = 8;
    auto c = Completion::Create(*model, req, 64);
    ASSERT_TRUE(c.ok()) << c.status();
    SampledToken s;
    s.token = 1000;  // an ordinary token goes on
    ASSERT_TRUE((*c)->Accept(s, static_cast<int64_t>(ids.size()) + 1).ok());
    EXPECT_FALSE((*c)->done());
    s.token = stop;
    auto out = (*c)->Accept(s, static_cast<int64_t>(ids.size()) + 2);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_TRUE((*c)->done()) << stop;
    EXPECT_EQ((*c)->finish_reason(), FinishReason::kEos) << stop;
    EXPECT_EQ(out->text, "") << "an end of generation is not rendered";
  }
}

}  // namespace
}  // namespace minfer::runtime
