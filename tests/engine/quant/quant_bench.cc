// Throughput of the quant kernels, single thread:
//   quantize/<type>            float elements per second (items/s)
//   dequantize/<type>/<isa>    output elements per second
//   q8a_quantize/<isa>         activation elements per second
//   decode/<type>/<isa>/<set>  mat_dot with one column over a weight matrix:
//                              bytes/s = weight bytes streamed; set "l2" keeps
//                              the matrix cache-resident (kernel bound), "dram"
//                              uses 192 MiB of weights (memory bound)
//   vecdot/<type>/<isa>        vec_dot per row over the l2 matrix (no tiling)
//   prefill/<type>/<isa>       mat_dot over 64 columns x 896 rows; items/s =
//                              multiply-accumulates, bytes/s = weight bytes x
//                              columns (effective)
// Run: bazel run -c opt //tests/engine/quant:quant_bench -- --benchmark_filter=decode
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/quant/quantize.h"
#include "engine/quant/vec_dot.h"

namespace minfer {
namespace {

constexpr GgmlType kQuantTypes[] = {GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ4_0,
                                    GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                                    GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ5_K,
                                    GgmlType::kQ6_K};
constexpr GgmlType kDotTypes[] = {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0,
                                  GgmlType::kQ5_1, GgmlType::kQ8_0, GgmlType::kQ4_K,
                                  GgmlType::kQ5_K, GgmlType::kQ6_K};

std::vector<float> Gaussian(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = normal(rng);
  return x;
}

// A quantized weight matrix of `rows` x `n`, built from a few distinct
// quantized rows copied around (quantizing 192 MiB would dominate start-up).
std::vector<uint8_t> WeightMatrix(GgmlType type, int64_t rows, int64_t n) {
  const int64_t rb = RowBytes(type, n);
  std::vector<uint8_t> m(rows * rb);
  const int kDistinct = 16;
  const auto x = Gaussian(n * kDistinct, 1);
  for (int r = 0; r < kDistinct && r < rows; ++r) {
    (void)QuantizeRow(type, x.data() + r * n, m.data() + r * rb, n);
  }
  for (int64_t r = kDistinct; r < rows; ++r) {
    std::memcpy(m.data() + r * rb, m.data() + (r % kDistinct) * rb, rb);
  }
  return m;
}

void BM_Quantize(benchmark::State& state, GgmlType type) {
  const int64_t n = 256 * 1024;
  const auto x = Gaussian(n, 2);
  std::vector<uint8_t> out(RowBytes(type, n));
  for (auto _ : state) {
    (void)QuantizeRow(type, x.data(), out.data(), n);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void BM_Dequantize(benchmark::State& state, GgmlType type, CpuIsa isa) {
  const int64_t n = 64 * 1024;
  const auto x = Gaussian(n, 3);
  std::vector<uint8_t> q(RowBytes(type, n));
  (void)QuantizeRow(type, x.data(), q.data(), n);
  std::vector<float> out(n);
  const DequantizeRowFn fn = GetDequantizeRowFn(type, isa);
  for (auto _ : state) {
    fn(q.data(), out.data(), n);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void BM_QuantizeQ8A(benchmark::State& state, CpuIsa isa) {
  const int64_t n = 64 * 1024;
  const auto x = Gaussian(n, 4);
  std::vector<BlockQ8A> out(n / 32);
  for (auto _ : state) {
    QuantizeRowQ8A(isa, x.data(), out.data(), n);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}

// Decode-shaped: one activation column against `rows` weight rows.
void BM_Decode(benchmark::State& state, GgmlType type, CpuIsa isa, bool dram) {
  const int64_t n = TraitsOf(type).block_size == 256 ? 4864 : 896;
  const int64_t rb = RowBytes(type, n);
  const int64_t rows = dram ? (192ll << 20) / rb : 2048;
  const auto w = WeightMatrix(type, rows, n);
  const auto x = Gaussian(n, 5);
  std::vector<BlockQ8A> a(n / 32);
  QuantizeRowQ8A(x.data(), a.data(), n);
  std::vector<float> out(rows);
  const Q8AKernels* k = GetQ8AKernels(type, isa);
  for (auto _ : state) {
    k->mat_dot(w.data(), rb, a.data(), 0, out.data(), 0, static_cast<int>(rows), 1, n);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * rows * rb);
}

void BM_VecDot(benchmark::State& state, GgmlType type, CpuIsa isa) {
  const int64_t n = TraitsOf(type).block_size == 256 ? 4864 : 896;
  const int64_t rb = RowBytes(type, n);
  const int64_t rows = 2048;
  const auto w = WeightMatrix(type, rows, n);
  const auto x = Gaussian(n, 5);
  std::vector<BlockQ8A> a(n / 32);
  QuantizeRowQ8A(x.data(), a.data(), n);
  std::vector<float> out(rows);
  const VecDotQ8AFn fn = GetQ8AKernels(type, isa)->vec_dot;
  for (auto _ : state) {
    for (int64_t r = 0; r < rows; ++r) out[r] = fn(w.data() + r * rb, a.data(), n);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * rows * rb);
}

// Prefill-shaped: 64 tokens against a slice of 896 rows (what one thread
// gets of a 896 x n projection), n = 896 (or 4864 for K-quants).
void BM_Prefill(benchmark::State& state, GgmlType type, CpuIsa isa) {
  const int64_t n = TraitsOf(type).block_size == 256 ? 4864 : 896;
  const int64_t rb = RowBytes(type, n);
  const int rows = 896, cols = 64;
  const auto w = WeightMatrix(type, rows, n);
  const auto x = Gaussian(n * cols, 6);
  std::vector<BlockQ8A> a(n / 32 * cols);
  QuantizeRowQ8A(x.data(), a.data(), n * cols);
  std::vector<float> out(static_cast<size_t>(rows) * cols);
  const Q8AKernels* k = GetQ8AKernels(type, isa);
  for (auto _ : state) {
    // Rows in slices of 16, all columns per slice: weights stay in L1/L2.
    for (int r0 = 0; r0 < rows; r0 += 16) {
      k->mat_dot(w.data() + r0 * rb, rb, a.data(), n / 32, out.data() + r0, rows, 16, cols, n);
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * rows * cols * n);
  state.SetBytesProcessed(state.iterations() * rows * rb * cols);
}

void BM_DotF32(benchmark::State& state, GgmlType type, CpuIsa isa) {
  const int64_t n = 896, rows = 1024;
  const int64_t rb = RowBytes(type, n);
  const auto w = WeightMatrix(type, rows, n);
  const auto x = Gaussian(n, 7);
  std::vector<float> out(rows);
  const F32Kernels* k = GetF32Kernels(type, isa);
  for (auto _ : state) {
    k->mat_dot(w.data(), rb, x.data(), 0, out.data(), 0, rows, 1, n);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * rows * rb);
}

void RegisterAll() {
  for (GgmlType t : kQuantTypes) {
    benchmark::RegisterBenchmark((std::string("quantize/") + GgmlTypeName(t)).c_str(),
                                 BM_Quantize, t);
  }
  for (CpuIsa isa : kAllCpuIsas) {
    if (!CpuIsaSupported(isa)) continue;
    const std::string is = CpuIsaName(isa);
    for (GgmlType t : {GgmlType::kF16, GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K,
                       GgmlType::kQ5_0}) {
      benchmark::RegisterBenchmark(
          ("dequantize/" + std::string(GgmlTypeName(t)) + "/" + is).c_str(), BM_Dequantize, t,
          isa);
    }
    benchmark::RegisterBenchmark(("q8a_quantize/" + is).c_str(), BM_QuantizeQ8A, isa);
    for (GgmlType t : kDotTypes) {
      const std::string ts = GgmlTypeName(t);
      benchmark::RegisterBenchmark(("decode/" + ts + "/" + is + "/l2").c_str(), BM_Decode, t,
                                   isa, false);
      benchmark::RegisterBenchmark(("decode/" + ts + "/" + is + "/dram").c_str(), BM_Decode,
                                   t, isa, true);
      benchmark::RegisterBenchmark(("vecdot/" + ts + "/" + is).c_str(), BM_VecDot, t, isa);
      benchmark::RegisterBenchmark(("prefill/" + ts + "/" + is).c_str(), BM_Prefill, t, isa);
    }
    for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16}) {
      benchmark::RegisterBenchmark(
          ("dotf32/" + std::string(GgmlTypeName(t)) + "/" + is).c_str(), BM_DotF32, t, isa);
    }
  }
}

}  // namespace
}  // namespace minfer

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  minfer::RegisterAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
