// CPU attention throughput at Qwen2.5-0.5B's shape (14 query heads, 2 kv
// heads, head_dim 64), f32/f16/q8_0 caches:
//   prefill/<cache>/<depth>  512 query tokens at positions depth..depth+511
//   decode/<cache>/<ctx>     one query token attending to ctx keys
// Arguments: threads, then the implementation (0 = best, 2 = AVX2 only).
// items/s = query-key pairs per second (times n_head); "GFLOP/s" counts
// 4 * head_dim flops per pair and head (QK^T and PV).
#include <benchmark/benchmark.h>

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "engine/base/thread_pool.h"
#include "engine/cpu/kernels.h"

namespace minfer::cpu {
namespace {

constexpr int kHeads = 14, kKvHeads = 2, kHeadDim = 64;

struct Setup {
  graph::KvLayout layout;
  std::vector<uint8_t> k, v;
  std::vector<float> q, y;
  std::vector<int32_t> pos;
};

Setup Make(graph::DType dtype, int64_t depth, int64_t nt) {
  Setup s;
  s.layout = {dtype, depth + nt, kKvHeads * kHeadDim};
  const int64_t n = depth + nt;
  s.k.resize(s.layout.row_bytes() * n);
  s.v.resize(s.k.size());
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> kf(n * kKvHeads * kHeadDim), vf(kf.size());
  for (auto& x : kf) x = nd(rng);
  for (auto& x : vf) x = nd(rng);
  std::vector<int32_t> all(n);
  std::iota(all.begin(), all.end(), 0);
  (void)KvStore(kf.data(), vf.data(), all.data(), n, s.layout, s.k.data(), s.v.data());
  s.q.resize(nt * kHeads * kHeadDim);
  for (auto& x : s.q) x = nd(rng);
  s.y.resize(s.q.size());
  s.pos.assign(all.begin() + depth, all.end());
  return s;
}

void Run(benchmark::State& state, graph::DType dtype, int64_t depth, int64_t nt) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  Setup s = Make(dtype, depth, nt);
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  for (auto _ : state) {
    (void)Attention(pool, s.q.data(), s.pos.data(), nt, kHeads, kKvHeads, kHeadDim, scale,
                    s.layout, s.k.data(), s.v.data(), s.y.data(),
                    static_cast<KernelImpl>(state.range(1)));
  }
  double pairs = 0;
  for (int32_t p : s.pos) pairs += p + 1;
  pairs *= kHeads;
  state.SetItemsProcessed(static_cast<int64_t>(pairs * state.iterations()));
  state.counters["GFLOP/s"] = benchmark::Counter(pairs * 4 * kHeadDim * state.iterations() / 1e9,
                                                 benchmark::Counter::kIsRate);
}

void Register() {
  const std::pair<graph::DType, const char*> types[] = {
      {graph::DType::kF32, "f32"}, {graph::DType::kF16, "f16"}, {graph::DType::kQ8_0, "q8_0"}};
  for (const auto& [dt, name] : types) {
    for (int64_t depth : {0, 2048}) {
      benchmark::RegisterBenchmark(
          (std::string("prefill/") + name + "/" + std::to_string(depth)).c_str(),
          [dt = dt, depth](benchmark::State& st) { Run(st, dt, depth, 512); })
          ->Args({1, 0})->Args({2, 0})->Args({1, 2})->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
    for (int64_t ctx : {128, 4096}) {
      benchmark::RegisterBenchmark(
          (std::string("decode/") + name + "/" + std::to_string(ctx)).c_str(),
          [dt = dt, ctx](benchmark::State& st) { Run(st, dt, ctx - 1, 1); })
          ->Args({1, 0})->Args({2, 0})->Args({1, 2})->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

}  // namespace
}  // namespace minfer::cpu

int main(int argc, char** argv) {
  minfer::cpu::Register();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
