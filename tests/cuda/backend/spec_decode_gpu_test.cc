// Speculative decoding on the GPU (tag `gpu`, skipped without a device):
// verify steps — several rows per sequence through the batch graphs, the
// device TopK reading each — give the plain GPU run's tokens, greedy and
// seeded sampling, with a perfect drafter (every draft accepted), one wrong
// at every third position, and n-gram drafts; and the cost of a verify step
// against a plain one at B = 1, 4, 16 with k = 2, 4, 8 (printed, for
// docs/benchmarks.md; speed is not asserted).
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <vector>

#include "cuda/testing/gpu_test_util.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/model.h"
#include "gtest/gtest.h"
#include "tests/engine/runtime/oracle_drafter.h"
#include "tests/support/test_models.h"

namespace minfer::runtime {
namespace {

std::shared_ptr<Model> Load(const std::string& shape) {
  auto path = minfer::testing::TestModelPath(shape, "q8_0");
  EXPECT_TRUE(path.ok()) << path.status();
  if (!path.ok()) return nullptr;
  auto m = Model::Load(*path, {.backend = "cuda"});
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : nullptr;
}

std::vector<GenerateRequest> Requests(const Model& m, int n, int max_tokens, float temperature) {
  std::vector<GenerateRequest> reqs;
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> d(0, m.tokenizer().vocab_size() - 1);
  for (int i = 0; i < n; ++i) {
    GenerateRequest r;
    r.prompt.resize(4 + (37 * i) % 60);
    for (auto& t : r.prompt) t = d(rng);
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.sampling.temperature = temperature;
    r.sampling.top_k = temperature > 0 ? 40 : 0;
    r.sampling.seed = 7 + i;
    reqs.push_back(r);
  }
  return reqs;
}

struct Result {
  std::vector<std::vector<int32_t>> tokens;
  EngineSnapshot snap;
  double seconds = 0;
  int64_t steps = 0;
};

Result RunEngine(std::shared_ptr<Model> m, const std::vector<GenerateRequest>& reqs,
                 EngineOptions eo) {
  Result r;
  eo.spec_gate = eo.spec_gate.value_or(false);  // verification on every step
  auto e = Engine::Create(m, eo);
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return r;
  std::map<uint64_t, size_t> index;
  for (size_t i = 0; i < reqs.size(); ++i) index[*(*e)->Add(reqs[i])] = i;
  r.tokens.resize(reqs.size());
  std::vector<EngineEvent> ev;
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < 10000 && (*e)->HasWork(); ++s) {
    ev.clear();
    absl::Status st = (*e)->Step(&ev);
    EXPECT_TRUE(st.ok()) << st;
    ++r.steps;
    for (const auto& x : ev) {
      EXPECT_TRUE(x.status.ok()) << x.status;
      for (int32_t t : x.out.tokens) r.tokens[index[x.id]].push_back(t);
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.snap = (*e)->Snapshot();
  return r;
}

TEST(SpecDecodeGpuTest, VerifyStepsGiveThePlainTokens) {
  MINFER_REQUIRE_GPU();
  for (const char* shape : {"tiny-untied", "llama-tiny"}) {
    SCOPED_TRACE(shape);
    auto gpu = Load(shape);
    ASSERT_NE(gpu, nullptr);
    for (float temperature : {0.0f, 1.0f}) {
      auto reqs = Requests(*gpu, 8, 40, temperature);
      EngineOptions eo;
      eo.max_seqs = 32;
      eo.n_ctx = 256;
      eo.spec_k = 0;
      const Result plain = RunEngine(gpu, reqs, eo);
      eo.spec_k = 3;
      for (int wrong : {0, 3}) {
        eo.drafter = std::make_shared<minfer::testing::OracleDrafter>(reqs, plain.tokens, wrong);
        const Result spec = RunEngine(gpu, reqs, eo);
        for (size_t i = 0; i < reqs.size(); ++i) {
          EXPECT_EQ(spec.tokens[i], plain.tokens[i]) << "request " << i << " wrong " << wrong;
        }
        EXPECT_GT(spec.snap.spec_accepted, 0);
        if (wrong == 0) EXPECT_EQ(spec.snap.spec_accepted, spec.snap.spec_drafted);
        EXPECT_LT(spec.steps, plain.steps) << "accepted drafts save steps";
      }
      eo.drafter = nullptr;  // n-gram
      const Result ngram = RunEngine(gpu, reqs, eo);
      for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(ngram.tokens[i], plain.tokens[i]);
    }
  }
}

TEST(SpecDecodeGpuTest, VerifyStepCost) {
  MINFER_REQUIRE_GPU();
  auto gpu = Load("small");
  ASSERT_NE(gpu, nullptr);
  std::printf("verify-step cost (small q8_0, perfect drafts): B k steps ms/step tok/s\n");
  for (int B : {1, 4, 16}) {
    auto reqs = Requests(*gpu, B, 64, 0.0f);
    EngineOptions eo;
    eo.max_seqs = 64;
    eo.n_ctx = 256;
    eo.spec_k = 0;
    const Result plain = RunEngine(gpu, reqs, eo);
    std::printf("  %2d %d %4lld %.3f %.0f\n", B, 0, static_cast<long long>(plain.steps),
                1e3 * plain.seconds / plain.steps, B * 64 / plain.seconds);
    for (int k : {2, 4, 8}) {
      if (B * (k + 1) > eo.max_seqs) continue;
      eo.spec_k = k;
      eo.drafter = std::make_shared<minfer::testing::OracleDrafter>(reqs, plain.tokens, 0);
      const Result spec = RunEngine(gpu, reqs, eo);
      for (int i = 0; i < B; ++i) EXPECT_EQ(spec.tokens[i], plain.tokens[i]);
      std::printf("  %2d %d %4lld %.3f %.0f\n", B, k, static_cast<long long>(spec.steps),
                  1e3 * spec.seconds / spec.steps, B * 64 / spec.seconds);
    }
  }
}

}  // namespace
}  // namespace minfer::runtime
