// Tensor parallelism on the CPU (DecoderModel::Shard, graph AllReduce,
// InProcessCollective): a model split over 2 ranks, each rank a Model of its
// own driven by its own thread in lock-step, gives the whole model's logits
// (to float rounding: the partial sums add in another order) and its greedy
// tokens; splits that cannot be made are refused naming the figure.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include <map>

#include "engine/graph/collective.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/model.h"
#include "engine/runtime/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/engine_drain.h"
#include "tests/support/test_models.h"

namespace minfer::runtime {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<Model> LoadOrDie(const std::string& path, ModelOptions o = {}) {
  o.backend = "cpu";
  auto m = Model::Load(path, o);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : nullptr;
}

// The ranks of a split of `path` over `size` ranks.
std::vector<std::shared_ptr<Model>> Ranks(const std::string& path, int size,
                                          graph::Collective* collective) {
  std::vector<std::shared_ptr<Model>> ranks;
  for (int r = 0; r < size; ++r) {
    ModelOptions o;
    o.tensor_parallel = {r, size, collective};
    ranks.push_back(LoadOrDie(path, o));
  }
  return ranks;
}

// Greedy decoding of `steps` tokens after `prompt` on the whole model and
// on the ranks (one thread each, fed the same tokens); the last logits of
// every step of both, and the whole model's tokens.
struct SplitRun {
  std::vector<std::vector<float>> whole, split;  // per step
  std::vector<int32_t> whole_ids, split_ids;
};
SplitRun Decode(const std::shared_ptr<Model>& whole, const std::vector<std::shared_ptr<Model>>& ranks,
           std::vector<int32_t> prompt, int steps) {
  SplitRun run;
  auto argmax = [](const std::vector<float>& v) {
    return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
  };
  {
    auto s = Session::Create(whole);
    EXPECT_TRUE(s.ok()) << s.status();
    std::vector<int32_t> feed = prompt;
    for (int i = 0; i < steps; ++i) {
      auto logits = (*s)->Eval(feed);
      EXPECT_TRUE(logits.ok()) << logits.status();
      run.whole.push_back(*logits);
      run.whole_ids.push_back(argmax(*logits));
      feed = {run.whole_ids.back()};
    }
  }
  std::vector<std::unique_ptr<Session>> sessions;
  for (const auto& r : ranks) {
    auto s = Session::Create(r);
    EXPECT_TRUE(s.ok()) << s.status();
    sessions.push_back(std::move(*s));
  }
  std::vector<int32_t> feed = prompt;
  for (int i = 0; i < steps; ++i) {
    std::vector<absl::StatusOr<std::vector<float>>> out(ranks.size(),
                                                        absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (size_t r = 0; r < ranks.size(); ++r) {
      threads.emplace_back([&, r] { out[r] = sessions[r]->Eval(feed); });
    }
    for (auto& t : threads) t.join();
    for (size_t r = 0; r < ranks.size(); ++r) {
      EXPECT_TRUE(out[r].ok()) << "rank " << r << ": " << out[r].status();
      if (!out[r].ok()) return run;
    }
    // Every rank computes the same logits (the head is replicated and the
    // sums give every rank the same bits).
    for (size_t r = 1; r < ranks.size(); ++r) EXPECT_EQ(*out[r], *out[0]) << "rank " << r;
    run.split.push_back(*out[0]);
    run.split_ids.push_back(argmax(*out[0]));
    feed = {run.split_ids.back()};
  }
  return run;
}

void ExpectClose(const SplitRun& run, double bound) {
  ASSERT_EQ(run.whole.size(), run.split.size());
  double worst = 0;
  for (size_t i = 0; i < run.whole.size(); ++i) {
    double max_abs = 0, max_diff = 0;
    for (size_t j = 0; j < run.whole[i].size(); ++j) {
      max_abs = std::max(max_abs, std::abs(static_cast<double>(run.whole[i][j])));
      max_diff = std::max(max_diff, std::abs(static_cast<double>(run.whole[i][j]) - run.split[i][j]));
    }
    EXPECT_LE(max_diff, bound * max_abs) << "step " << i;
    EXPECT_GT(max_abs, 0);
    worst = std::max(worst, max_diff / max_abs);
  }
  std::printf("largest |split - whole| / max |whole| over %zu steps: %.3g\n", run.whole.size(),
              worst);
  EXPECT_EQ(run.split_ids, run.whole_ids);
}

TEST(TensorParallelTest, TwoRanksGiveTheWholeModelsLogitsAndTokens) {
  // Qwen2 shape with q/k/v biases: 8 heads and 2 KV heads, FFN 768.
  auto path = minfer::testing::TestModelPath("tiny-untied", "q8_0", 1);
  ASSERT_TRUE(path.ok()) << path.status();
  graph::InProcessCollective collective(2);
  auto whole = LoadOrDie(*path);
  auto ranks = Ranks(*path, 2, &collective);
  ASSERT_NE(ranks[1], nullptr);
  EXPECT_EQ(ranks[0]->hparams().n_head, 4);
  EXPECT_EQ(ranks[1]->hparams().n_head_kv, 1);
  EXPECT_EQ(ranks[1]->hparams().n_ff, 384);
  // Each rank holds about half the layers' weights (norms, embedding and
  // head are whole on both).
  EXPECT_LT(ranks[0]->weight_bytes(), whole->weight_bytes());
  const SplitRun run = Decode(whole, ranks, {17, 99, 431, 5, 1200, 64, 7, 300}, 24);
  ExpectClose(run, 1e-5);
}

TEST(TensorParallelTest, QkNormsAndWideHeadsSplit) {
  // Qwen3 shape: 4 heads of 128 with per-head q/k norms, 2 KV heads.
  auto path = minfer::testing::TestModelPath("qwen3-tiny", "q8_0", 3);
  ASSERT_TRUE(path.ok()) << path.status();
  graph::InProcessCollective collective(2);
  auto whole = LoadOrDie(*path);
  auto ranks = Ranks(*path, 2, &collective);
  ASSERT_NE(ranks[1], nullptr);
  const SplitRun run = Decode(whole, ranks, {3, 1000, 42, 42, 511}, 16);
  ExpectClose(run, 1e-5);
}

// The batched engine over a split model (ModelOptions::tensor_parallel_size:
// rank 0 owns the others, its BatchRunner runs them in lock-step): 8 greedy
// and sampled streams with mixed prefill/decode steps, a pool small enough
// to preempt and a prefix shared by half of them, each stream's tokens
// equal to the whole model's engine's.
std::map<size_t, std::vector<int32_t>> RunEngine(std::shared_ptr<Model> model,
                                                 const std::vector<GenerateRequest>& reqs,
                                                 EngineSnapshot* snap) {
  EngineOptions eo;
  eo.max_seqs = 8;
  eo.token_budget = 40;
  eo.n_ctx = 256;
  eo.kv_blocks = 24;  // 384 rows for 8 streams of up to 128: preemption
  eo.prefix_cache = true;
  return minfer::testing::DrainEngine(std::move(model), eo, reqs, snap);
}

TEST(TensorParallelTest, TheBatchedEngineOverTwoRanksGivesTheWholeModelsTokens) {
  auto path = minfer::testing::TestModelPath("tiny-untied", "q8_0", 1);
  ASSERT_TRUE(path.ok()) << path.status();
  auto whole = LoadOrDie(*path);
  ModelOptions o;
  o.tensor_parallel_size = 2;
  auto split = LoadOrDie(*path, o);
  ASSERT_NE(split, nullptr);
  ASSERT_EQ(split->tp_peers().size(), 1u);
  EXPECT_EQ(split->hparams().n_head, 4);
  EXPECT_EQ(split->tp_peers()[0]->hparams().tp_rank, 1);
  std::vector<GenerateRequest> reqs;
  const std::vector<int32_t> shared = {5, 77, 300, 1001, 42, 9, 610, 33, 128, 256, 512, 17,
                                       18, 19, 20, 21, 22};
  for (int i = 0; i < 8; ++i) {
    GenerateRequest r;
    if (i % 2 == 0) r.prompt = shared;
    r.prompt.push_back(100 + 37 * i);
    for (int j = 0; j < 3 * i; ++j) r.prompt.push_back((i * 131 + j * 17) % 1500);
    r.max_tokens = 40 + 7 * i;
    r.ignore_eos = true;
    r.sampling.temperature = i % 3 == 0 ? 0.8f : 0.0f;
    r.sampling.seed = 7 + i;
    reqs.push_back(r);
  }
  EngineSnapshot ws, ss;
  const auto want = RunEngine(whole, reqs, &ws);
  const auto got = RunEngine(split, reqs, &ss);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got.at(i), want.at(i)) << "request " << i;
    EXPECT_EQ(got.at(i).size(), static_cast<size_t>(reqs[i].max_tokens));
  }
  // Both engines took the same path: preemptions and prefix hits happened.
  EXPECT_GT(ss.preemptions, 0);
  EXPECT_GT(ss.prefix_hit_tokens, 0);
  EXPECT_EQ(ss.preemptions, ws.preemptions);
  EXPECT_EQ(ss.prefix_hit_tokens, ws.prefix_hit_tokens);
}

TEST(TensorParallelTest, SplitsThatCannotBeMadeAreRefusedNamingTheFigure) {
  auto path = minfer::testing::TestModelPath("tiny-untied", "q8_0", 1);
  ASSERT_TRUE(path.ok()) << path.status();
  graph::InProcessCollective four(4);
  ModelOptions o;
  o.backend = "cpu";
  o.tensor_parallel = {0, 4, &four};
  auto r = Model::Load(*path, o);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("cannot be split over 4 GPUs: its 2 KV heads"));
  // K-quants: the FFN's down projection would split 768 columns into 384,
  // not a whole number of 256-element blocks.
  auto kq = minfer::testing::TestModelPath("tiny-untied", "q4_k_m", 1);
  ASSERT_TRUE(kq.ok()) << kq.status();
  graph::InProcessCollective two(2);
  o.tensor_parallel = {1, 2, &two};
  r = Model::Load(*kq, o);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("not a whole number of"));
  // A collective of another size, or none.
  o.tensor_parallel = {0, 2, &four};
  EXPECT_EQ(Model::Load(*path, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.tensor_parallel = {0, 2, nullptr};
  EXPECT_EQ(Model::Load(*path, o).status().code(), absl::StatusCode::kInvalidArgument);
  // Mixture of experts: not split yet.
  auto moe = minfer::testing::TestModelPath("qwen3moe-tiny", "q8_0", 1);
  ASSERT_TRUE(moe.ok()) << moe.status();
  o.tensor_parallel = {0, 2, &two};
  r = Model::Load(*moe, o);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("mixture-of-experts"));
}

TEST(TensorParallelTest, InProcessCollectiveSumsInRankOrderAndTimesOut) {
  graph::InProcessCollective c(3, std::chrono::milliseconds(200));
  std::vector<std::vector<float>> data = {{1, 2, 3}, {10, 20, 30}, {100, 200, 300}};
  std::vector<absl::Status> st(3);
  std::vector<std::thread> t;
  for (int r = 0; r < 3; ++r) {
    t.emplace_back([&, r] {
      for (int round = 0; round < 50 && st[r].ok(); ++round) {
        if (round > 0) data[r] = {1.0f * (r + 1), 2.0f, 3.0f};
        st[r] = c.AllReduceSum(r, data[r].data(), 3);
      }
    });
  }
  for (auto& th : t) th.join();
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r];
    EXPECT_EQ(data[r], (std::vector<float>{6, 6, 9}));
  }
  // A rank that never comes: the others get DEADLINE_EXCEEDED, not a hang,
  // and later calls fail at once until the driver resets it.
  float x = 1;
  EXPECT_EQ(c.AllReduceSum(0, &x, 1).code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(c.AllReduceSum(1, &x, 1).code(), absl::StatusCode::kAborted);
  c.Reset();
  std::vector<float> v = {1, 2, 4};
  std::vector<std::thread> again;
  for (int r = 0; r < 3; ++r) {
    again.emplace_back([&, r] { st[r] = c.AllReduceSum(r, &v[r], 1); });
  }
  for (auto& th : again) th.join();
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r];
    EXPECT_EQ(v[r], 7.0f);
  }
}

TEST(TensorParallelTest, AFailingRankAbortsTheOthersWaitInsteadOfTheTimeout) {
  // Rank 1's step fails before its first AllReduce; rank 0 waits in the
  // AllReduce until the driver aborts the collective (BatchRunner::Run
  // does when a rank fails), well before the 60 s timeout.
  graph::InProcessCollective c(2);
  absl::Status waited;
  const auto t0 = std::chrono::steady_clock::now();
  std::thread rank0([&] {
    float x = 1;
    waited = c.AllReduceSum(0, &x, 1);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  c.Abort();  // what BatchRunner::Run does when a rank's step fails
  rank0.join();
  EXPECT_EQ(waited.code(), absl::StatusCode::kAborted);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

}  // namespace
}  // namespace minfer::runtime
