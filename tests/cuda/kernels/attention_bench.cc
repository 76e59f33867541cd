// Decode-attention micro-benchmark (manual; --config=cuda): Qwen2.5-7B shapes
// (28 heads, 4 KV heads, head_dim 128, 28 layers) at several context lengths,
// timed with CUDA events, printing time per layer and the achieved bandwidth
// of the KV read (2 x context x KV row bytes per layer, each byte once).
//
// Every iteration runs all 28 layers, each with its own cache, so the 8 MB a
// layer reads at 4,096 tokens is not left in the 50 MB L2 by the previous
// iteration (in a real decode step ~150 MB of weights stream between two
// layers' attention). Three variants per length: the automatic body choice,
// the one-warp body forced, the GQA body forced; each launched directly and
// replayed from a CUDA graph (the production path). Median of --iters runs.
//
//   attention_bench [--ctx=512,4096,16384] [--types=f16,f32,q8_0] [--iters=20]
//
// Prefill mode (--prefill): causal prefill attention from position 0 over an
// f16 cache at Qwen2.5-7B (28/4 heads, head_dim 128) and Qwen2-0.5B (14/2,
// head_dim 64) shapes, nt from --nt= (default 512,2048): the tensor-core
// kernel (LaunchAttnPrefillTc) against the CUDA-core kernel, time per launch
// (median of --iters batches of 10 launches) and effective TFLOPS
// (4 * head_dim * n_head * nt (nt + 1) / 2: Q K^T and P V over the causal
// triangle).
//
//   attention_bench --prefill [--nt=512,2048] [--iters=20]
// Unknown arguments are ignored (the GPU runner passes one list to every
// benchmark).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/testing/check_cuda.h"
#include "cuda/kernels/ops.h"

namespace minfer::cuda {
namespace {

constexpr int kLayers = 28;
constexpr int kHeads = 28, kHeadsKv = 4, kHeadDim = 128;

std::vector<int64_t> ParseList(const std::string& s) {
  std::vector<int64_t> v;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    v.push_back(std::strtoll(s.substr(i, j - i).c_str(), nullptr, 10));
    i = j + 1;
  }
  return v;
}

int64_t RowBytes(KvType t, int64_t n) {
  return t == KvType::kF32 ? 4 * n : t == KvType::kF16 ? 2 * n : n / 32 * 34;
}

const char* Name(KvType t) {
  return t == KvType::kF32 ? "f32" : t == KvType::kF16 ? "f16" : "q8_0";
}

// Bytes that decode as small finite values in every cache format (f16 and
// q8_0 scales get exponent bits that keep them normal and < 1); speed does
// not depend on the values, but NaN/inf would take different paths in exp.
std::vector<uint8_t> CacheBytes(KvType t, int64_t bytes, uint64_t seed) {
  std::vector<uint8_t> b(bytes);
  uint64_t x = seed;
  for (int64_t i = 0; i < bytes; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    b[i] = static_cast<uint8_t>(x >> 56);
  }
  if (t == KvType::kF32) {
    for (int64_t i = 3; i < bytes; i += 4) b[i] = (b[i] & 0x80) | 0x3E;  // |x| < 0.5
  } else if (t == KvType::kF16) {
    for (int64_t i = 1; i < bytes; i += 2) b[i] = (b[i] & 0x83) | 0x34;  // |x| < 0.5
  } else {
    for (int64_t blk = 0; blk + 34 <= bytes; blk += 34) b[blk + 1] = 0x1C;  // d ~ 2^-8
  }
  return b;
}

float Median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Layer {
  void* k = nullptr;
  void* v = nullptr;
};

void Run(KvType type, int64_t ctx, int iters) {
  AttnParams p;
  p.n_head = kHeads;
  p.n_head_kv = kHeadsKv;
  p.head_dim = kHeadDim;
  p.scale = 1.0f / 11.3137085f;
  p.n_ctx = ctx;
  p.kv_type = type;
  const int64_t rb = RowBytes(type, p.n_kv_embd());
  const int64_t cache_bytes = ctx * rb;
  std::vector<Layer> layers(kLayers);
  const auto bytes_k = CacheBytes(type, cache_bytes, 1), bytes_v = CacheBytes(type, cache_bytes, 2);
  for (Layer& l : layers) {
    CHECK_CUDA(cudaMalloc(&l.k, cache_bytes));
    CHECK_CUDA(cudaMalloc(&l.v, cache_bytes));
    CHECK_CUDA(cudaMemcpy(l.k, bytes_k.data(), cache_bytes, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(l.v, bytes_v.data(), cache_bytes, cudaMemcpyHostToDevice));
  }
  std::vector<float> hq(int64_t{kHeads} * kHeadDim);
  for (size_t i = 0; i < hq.size(); ++i) hq[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
  float *q, *partial, *out;
  int32_t* pos;
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&q), hq.size() * 4));
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&out), hq.size() * 4));
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&partial), AttnDecodePartialFloats(p) * 4));
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&pos), 4));
  CHECK_CUDA(cudaMemcpy(q, hq.data(), hq.size() * 4, cudaMemcpyHostToDevice));
  const int32_t last = static_cast<int32_t>(ctx - 1);
  CHECK_CUDA(cudaMemcpy(pos, &last, 4, cudaMemcpyHostToDevice));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));

  struct Mode {
    const char* name;
    int32_t long_min;
  };
  const Mode modes[] = {{"auto", kAttnLongMinRows}, {"1warp", INT32_MAX}, {"gqa", 0}};
  const double kv_bytes_per_layer = 2.0 * static_cast<double>(cache_bytes);
  for (const Mode& m : modes) {
    AttnDecodeConfig cfg;
    cfg.long_min_rows = m.long_min;
    auto all_layers = [&] {
      for (const Layer& l : layers) {
        CHECK_CUDA(LaunchAttnDecodeConfigured(q, pos, l.k, l.v, partial, out, p, cfg, stream));
      }
    };
    // Direct launches.
    for (int w = 0; w < 3; ++w) all_layers();
    std::vector<float> direct, graphed;
    for (int it = 0; it < iters; ++it) {
      CHECK_CUDA(cudaEventRecord(e0, stream));
      all_layers();
      CHECK_CUDA(cudaEventRecord(e1, stream));
      CHECK_CUDA(cudaEventSynchronize(e1));
      float ms;
      CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
      direct.push_back(ms);
    }
    // CUDA graph replay.
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    all_layers();
    CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
    CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    for (int w = 0; w < 3; ++w) CHECK_CUDA(cudaGraphLaunch(exec, stream));
    for (int it = 0; it < iters; ++it) {
      CHECK_CUDA(cudaEventRecord(e0, stream));
      CHECK_CUDA(cudaGraphLaunch(exec, stream));
      CHECK_CUDA(cudaEventRecord(e1, stream));
      CHECK_CUDA(cudaEventSynchronize(e1));
      float ms;
      CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
      graphed.push_back(ms);
    }
    CHECK_CUDA(cudaGraphExecDestroy(exec));
    CHECK_CUDA(cudaGraphDestroy(graph));
    const double us_direct = Median(direct) * 1e3 / kLayers;
    const double us_graph = Median(graphed) * 1e3 / kLayers;
    std::printf(
        "%-5s ctx %6lld  %-6s  direct %8.2f us/layer %7.0f GB/s   graph %8.2f us/layer "
        "%7.0f GB/s   (%.1f MB KV/layer, %.3f ms/token)\n",
        Name(type), static_cast<long long>(ctx), m.name, us_direct,
        kv_bytes_per_layer / (us_direct * 1e3), us_graph, kv_bytes_per_layer / (us_graph * 1e3),
        kv_bytes_per_layer / 1e6, us_graph * kLayers / 1e3);
  }
  for (Layer& l : layers) {
    cudaFree(l.k);
    cudaFree(l.v);
  }
  cudaFree(q);
  cudaFree(out);
  cudaFree(partial);
  cudaFree(pos);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(stream);
}

// --prefill: one shape at one nt, both prefill kernels.
void RunPrefill(const char* label, int n_head, int n_head_kv, int hd, int64_t nt, int iters) {
  AttnParams p;
  p.n_head = n_head;
  p.n_head_kv = n_head_kv;
  p.head_dim = hd;
  p.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  p.n_ctx = nt;
  p.kv_type = KvType::kF16;
  const int64_t cache_bytes = nt * RowBytes(p.kv_type, p.n_kv_embd());
  const auto bytes_k = CacheBytes(p.kv_type, cache_bytes, 1);
  const auto bytes_v = CacheBytes(p.kv_type, cache_bytes, 2);
  const int64_t nq = nt * n_head * hd;
  std::vector<float> hq(nq);
  for (int64_t i = 0; i < nq; ++i) hq[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
  std::vector<int32_t> hpos(nt);
  for (int64_t t = 0; t < nt; ++t) hpos[t] = static_cast<int32_t>(t);
  void *k, *v;
  float *q, *out;
  int32_t* pos;
  CHECK_CUDA(cudaMalloc(&k, cache_bytes));
  CHECK_CUDA(cudaMalloc(&v, cache_bytes));
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&q), nq * 4));
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&out), nq * 4));
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&pos), nt * 4));
  CHECK_CUDA(cudaMemcpy(k, bytes_k.data(), cache_bytes, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(v, bytes_v.data(), cache_bytes, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(q, hq.data(), nq * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(pos, hpos.data(), nt * 4, cudaMemcpyHostToDevice));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  const double flops =
      4.0 * hd * n_head * (static_cast<double>(nt) * static_cast<double>(nt + 1) / 2.0);
  constexpr int kBatch = 10;
  auto time_us = [&](auto&& launch) {
    for (int w = 0; w < 3; ++w) CHECK_CUDA(launch());
    CHECK_CUDA(cudaStreamSynchronize(stream));
    std::vector<float> t;
    for (int it = 0; it < iters; ++it) {
      CHECK_CUDA(cudaEventRecord(e0, stream));
      for (int b = 0; b < kBatch; ++b) CHECK_CUDA(launch());
      CHECK_CUDA(cudaEventRecord(e1, stream));
      CHECK_CUDA(cudaEventSynchronize(e1));
      float ms;
      CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
      t.push_back(ms);
    }
    return static_cast<double>(Median(t)) * 1e3 / kBatch;
  };
  const double us_tc =
      time_us([&] { return LaunchAttnPrefillTc(q, pos, nt, k, v, out, p, stream); });
  AttnPrefillConfig cuda_core;
  cuda_core.tc_min_tokens = INT64_MAX;
  const double us_cc = time_us(
      [&] { return LaunchAttnPrefillConfigured(q, pos, nt, k, v, out, p, cuda_core, stream); });
  std::printf(
      "prefill %-4s (%2d/%d heads, hd %3d) nt %5lld   tensor-core %9.1f us %6.1f TFLOPS   "
      "cuda-core %9.1f us %6.1f TFLOPS   x%.2f\n",
      label, n_head, n_head_kv, hd, static_cast<long long>(nt), us_tc, flops / (us_tc * 1e6), us_cc,
      flops / (us_cc * 1e6), us_cc / us_tc);
  cudaFree(k);
  cudaFree(v);
  cudaFree(q);
  cudaFree(out);
  cudaFree(pos);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(stream);
}

// Device-to-device copy bandwidth (read + write) as the ceiling to compare to.
void CopyCeiling() {
  const size_t bytes = size_t{1} << 30;
  void *a, *b;
  CHECK_CUDA(cudaMalloc(&a, bytes));
  CHECK_CUDA(cudaMalloc(&b, bytes));
  CHECK_CUDA(cudaMemset(a, 1, bytes));
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  std::vector<float> t;
  for (int i = 0; i < 7; ++i) {
    CHECK_CUDA(cudaEventRecord(e0));
    CHECK_CUDA(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
    CHECK_CUDA(cudaEventRecord(e1));
    CHECK_CUDA(cudaEventSynchronize(e1));
    float ms;
    CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms);
  }
  std::printf("device copy: %.0f GB/s (read + write)\n", 2.0 * bytes / (Median(t) * 1e6));
  cudaFree(a);
  cudaFree(b);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

}  // namespace
}  // namespace minfer::cuda

int main(int argc, char** argv) {
  using namespace minfer::cuda;
  std::vector<int64_t> ctxs = {512, 4096, 16384};
  std::vector<KvType> types = {KvType::kF16};
  int iters = 20;
  bool prefill = false;
  std::vector<int64_t> nts = {512, 2048};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--prefill") {
      prefill = true;
    } else if (a.rfind("--nt=", 0) == 0) {
      nts = ParseList(a.substr(5));
    } else if (a.rfind("--ctx=", 0) == 0) {
      ctxs = ParseList(a.substr(6));
    } else if (a.rfind("--iters=", 0) == 0) {
      iters = std::max(1, std::atoi(a.c_str() + 8));
    } else if (a.rfind("--types=", 0) == 0) {
      types.clear();
      const std::string list = a.substr(8) + ",";
      size_t s = 0;
      for (size_t j = list.find(','); j != std::string::npos; s = j + 1, j = list.find(',', s)) {
        const std::string t = list.substr(s, j - s);
        if (t == "f32") types.push_back(KvType::kF32);
        if (t == "f16") types.push_back(KvType::kF16);
        if (t == "q8_0") types.push_back(KvType::kQ8_0);
      }
    }
  }
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("attention_bench: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  if (prefill) {
    std::printf("attention_bench --prefill on %s (%d SMs), f16 cache, positions 0..nt-1\n",
                prop.name, prop.multiProcessorCount);
    for (int64_t nt : nts) {
      if (nt <= 0) continue;
      RunPrefill("7B", kHeads, kHeadsKv, kHeadDim, nt, iters);
      RunPrefill("0.5B", 14, 2, 64, nt, iters);
    }
    return 0;
  }
  std::printf(
      "attention_bench on %s (%d SMs); 7B shapes: %d heads, %d KV heads, head_dim %d, %d "
      "layers; long-context switch at %d rows\n",
      prop.name, prop.multiProcessorCount, kHeads, kHeadsKv, kHeadDim, kLayers, kAttnLongMinRows);
  CopyCeiling();
  for (KvType t : types) {
    for (int64_t c : ctxs) {
      if (c > 0) Run(t, c, iters);
    }
  }
  return 0;
}
