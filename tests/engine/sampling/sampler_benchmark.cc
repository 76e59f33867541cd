// Sampler::Sample on a Qwen2-sized row of 152,064 logits.
//
//   bazel run //tests/engine/sampling:sampler_benchmark  (opt is the default)
//
// Two logit shapes: "flat" (N(0, 1): the probability mass is spread over
// most of the vocabulary, the worst case for top-p) and "peaked" (N(0, 3),
// closer to a trained model, where a few hundred tokens carry the mass).
// Each iteration samples a different row from a small pool so that no
// branch history or cache state is specific to one row.
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "engine/sampling/logit_kernels.h"
#include "engine/sampling/sampler.h"

namespace minfer {
namespace {

constexpr int64_t kVocab = 152064;
constexpr int kRows = 8;

const std::vector<std::vector<float>>& Rows(bool peaked) {
  static const auto make = [](float scale) {
    std::vector<std::vector<float>> rows(kRows, std::vector<float>(kVocab));
    std::mt19937 gen(42);
    std::normal_distribution<float> dist(0.0f, scale);
    for (auto& row : rows) {
      for (float& x : row) x = dist(gen);
    }
    return rows;
  };
  static const auto flat = make(1.0f);
  static const auto peak = make(3.0f);
  return peaked ? peak : flat;
}

void RunSampler(benchmark::State& state, const SamplingParams& params) {
  const bool peaked = state.range(0) != 0;
  const auto& rows = Rows(peaked);
  auto sampler = Sampler::Create(params, kVocab);
  if (!sampler.ok()) {
    state.SkipWithError(sampler.status().ToString().c_str());
    return;
  }
  int64_t i = 0;
  for (auto _ : state) {
    auto token = (*sampler)->Sample(rows[i++ % kRows].data(), kVocab);
    benchmark::DoNotOptimize(token);
  }
  state.SetLabel(peaked ? "peaked" : "flat");
}

void BM_Greedy(benchmark::State& state) {
  SamplingParams p;
  p.temperature = 0.0f;
  RunSampler(state, p);
}

void BM_TopK40(benchmark::State& state) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 40;
  RunSampler(state, p);
}

void BM_TopP09(benchmark::State& state) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.9f;
  RunSampler(state, p);
}

void BM_TopP09Temp1(benchmark::State& state) {
  SamplingParams p;
  p.top_p = 0.9f;
  RunSampler(state, p);
}

void BM_PlainTemp1(benchmark::State& state) {
  SamplingParams p;
  RunSampler(state, p);
}

// llama.cpp-like defaults with penalties over 64 tokens and logprobs.
void BM_FullChain(benchmark::State& state) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 40;
  p.top_p = 0.95f;
  p.min_p = 0.05f;
  p.repetition_penalty = 1.1f;
  p.penalty_last_n = 64;
  p.n_logprobs = 5;
  RunSampler(state, p);
}

void BM_TopPMinPLogprobs(benchmark::State& state) {
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_p = 0.9f;
  p.min_p = 0.01f;
  p.n_logprobs = 20;
  RunSampler(state, p);
}

BENCHMARK(BM_Greedy)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopK40)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopP09)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopP09Temp1)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PlainTemp1)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_FullChain)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopPMinPLogprobs)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// The softmax-normalizer pass alone, per kernel build (arg 1 = tempered,
// which computes a second exp per element).
void BM_ExpSumKernel(benchmark::State& state,
                     const sampling_internal::LogitKernels* k) {
  if (k == nullptr) {
    state.SkipWithError("not supported by this CPU");
    return;
  }
  const std::vector<float>& l = Rows(false)[0];
  std::vector<float> p(kVocab);
  const float inv_temp = state.range(0) ? 1.25f : 1.0f;
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        k->exp_sum(l.data(), kVocab, 6.0f, inv_temp, p.data(), nullptr));
  }
}
BENCHMARK_CAPTURE(BM_ExpSumKernel, portable,
                  &sampling_internal::PortableLogitKernels())
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_ExpSumKernel, avx2, sampling_internal::Avx2LogitKernels())
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_ExpSumKernel, avx512,
                  sampling_internal::Avx512LogitKernels())
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace minfer

BENCHMARK_MAIN();
