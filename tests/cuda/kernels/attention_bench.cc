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
//   attention_bench [--ctx=512,4096,16384] [--types=f16,f32,q8_0,fp8] [--iters=20]
//
// Batch mode (--batch=64,...): the paged decode of a batch step
// (LaunchAttnDecodePaged with the fused combine, as the batched engine runs
// it): B sequences of ctx rows each in one pool of 16-row blocks, each
// sequence's blocks scattered over the pool (a fixed shuffle), every token at
// position ctx - 1; 28 layers replayed from a CUDA graph (several pools when
// they fit, so a layer's KV is not in L2 from the previous one), with the
// body choice as the backend makes it (auto: AttnPaged's default) and each
// body forced (MINFER_ATTN_PAGED_LONG_MIN). Prints time per layer and per
// step with the KV bytes read. The figure the quantized KV
// caches' "decode at B = 64 within 5% of f16" depends on.
//
//   attention_bench --batch=64,256 [--ctx=256,1024,4096] [--types=f16,q8_0,fp8]
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
constexpr int64_t kRowElems = kHeadsKv * kHeadDim;  // a cache row's elements

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
  return t == KvType::kF32   ? "f32"
         : t == KvType::kF16 ? "f16"
         : t == KvType::kFp8 ? "fp8"
                             : "q8_0";
}

// Bytes that decode as small finite values in every cache format (f16 values
// and the quantized rows' scales get exponent bits that keep them normal and
// < 1); speed does not depend on the values, but NaN/inf would take different
// paths in exp. Quantized rows (engine/quant/kv_row.h) are kRowElems codes,
// then their f16 scales.
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
    // d ~ 2^-8; fp8 codes: no NaN (S.1111.111), which would only poison the
    // output, not change the time.
    const int64_t rb = RowBytes(t, kRowElems);
    for (int64_t row = 0; row + rb <= bytes; row += rb) {
      if (t == KvType::kFp8) {
        for (int64_t i = 0; i < kRowElems; ++i) b[row + i] &= 0xF7;  // exponent bit 0 clear: never 15
      }
      for (int64_t i = kRowElems + 1; i < rb; i += 2) b[row + i] = 0x1C;
    }
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

// n caches (K and V each) of `bytes`, filled with CacheBytes of the type.
std::vector<Layer> MakeCaches(KvType type, int n, int64_t bytes) {
  std::vector<Layer> caches(n);
  const auto bytes_k = CacheBytes(type, bytes, 1), bytes_v = CacheBytes(type, bytes, 2);
  for (Layer& l : caches) {
    CHECK_CUDA(cudaMalloc(&l.k, bytes));
    CHECK_CUDA(cudaMalloc(&l.v, bytes));
    CHECK_CUDA(cudaMemcpy(l.k, bytes_k.data(), bytes, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(l.v, bytes_v.data(), bytes, cudaMemcpyHostToDevice));
  }
  return caches;
}

// The decode bodies (AttnDecodeConfig / AttnPaged long_min_rows): the
// automatic choice, then each body forced.
struct BodyMode {
  const char* name;
  int32_t long_min;
};
constexpr BodyMode kBodyModes[] = {{"auto", kAttnLongMinRows}, {"1warp", INT32_MAX}, {"gqa", 0}};

// Median milliseconds of `iters` runs of launch() on `stream`, by events.
template <class F>
float MedianMs(cudaStream_t stream, cudaEvent_t e0, cudaEvent_t e1, int iters, F&& launch) {
  std::vector<float> t;
  for (int it = 0; it < iters; ++it) {
    CHECK_CUDA(cudaEventRecord(e0, stream));
    launch();
    CHECK_CUDA(cudaEventRecord(e1, stream));
    CHECK_CUDA(cudaEventSynchronize(e1));
    float ms;
    CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms);
  }
  return Median(t);
}

// Median milliseconds of a CUDA graph captured from launches(), replayed
// `iters` times after three warm-up replays (the production path).
template <class F>
float GraphMedianMs(cudaStream_t stream, cudaEvent_t e0, cudaEvent_t e1, int iters, F&& launches) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  launches();
  CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int w = 0; w < 3; ++w) CHECK_CUDA(cudaGraphLaunch(exec, stream));
  const float ms =
      MedianMs(stream, e0, e1, iters, [&] { CHECK_CUDA(cudaGraphLaunch(exec, stream)); });
  CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_CUDA(cudaGraphDestroy(graph));
  return ms;
}

// The 7B's attention over a cache of `type` and n_ctx rows.
AttnParams Params7B(KvType type, int64_t n_ctx) {
  AttnParams p;
  p.n_head = kHeads;
  p.n_head_kv = kHeadsKv;
  p.head_dim = kHeadDim;
  p.scale = 1.0f / 11.3137085f;  // 1 / sqrt(128)
  p.n_ctx = n_ctx;
  p.kv_type = type;
  return p;
}

void Run(KvType type, int64_t ctx, int iters) {
  const AttnParams p = Params7B(type, ctx);
  const int64_t rb = RowBytes(type, p.n_kv_embd());
  const int64_t cache_bytes = ctx * rb;
  std::vector<Layer> layers = MakeCaches(type, kLayers, cache_bytes);
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

  const double kv_bytes_per_layer = 2.0 * static_cast<double>(cache_bytes);
  for (const BodyMode& m : kBodyModes) {
    AttnDecodeConfig cfg;
    cfg.long_min_rows = m.long_min;
    auto all_layers = [&] {
      for (const Layer& l : layers) {
        CHECK_CUDA(LaunchAttnDecodeConfigured(q, pos, l.k, l.v, partial, out, p, cfg, stream));
      }
    };
    for (int w = 0; w < 3; ++w) all_layers();  // direct launches, warm-up
    const float direct_ms = MedianMs(stream, e0, e1, iters, all_layers);
    const float graph_ms = GraphMedianMs(stream, e0, e1, iters, all_layers);
    const double us_direct = direct_ms * 1e3 / kLayers;
    const double us_graph = graph_ms * 1e3 / kLayers;
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

// --batch: the paged decode of B sequences of ctx rows, 28 layers per graph.
void RunBatch(KvType type, int64_t ctx, int64_t batch, int iters) {
  constexpr int32_t kBlock = 16;
  const int64_t blocks_per_seq = (ctx + kBlock - 1) / kBlock;
  const int64_t n_blocks = batch * blocks_per_seq;
  const AttnParams p = Params7B(type, n_blocks * kBlock);  // n_ctx: the pool's rows
  const int64_t rb = RowBytes(type, p.n_kv_embd());
  const int64_t pool_bytes = p.n_ctx * rb;
  // As many pools (K and V each) as fit in ~24 GB, up to one per layer.
  const int n_pools =
      static_cast<int>(std::clamp<int64_t>((int64_t{24} << 30) / (2 * pool_bytes), 1, kLayers));
  std::vector<Layer> pools = MakeCaches(type, n_pools, pool_bytes);
  // Block tables: a fixed permutation of the pool's blocks (an LCG-driven
  // Fisher-Yates), sequence s taking entries [s * blocks_per_seq, ...).
  std::vector<int32_t> perm(n_blocks);
  for (int64_t i = 0; i < n_blocks; ++i) perm[i] = static_cast<int32_t>(i);
  uint64_t x = 12345;
  for (int64_t i = n_blocks - 1; i > 0; --i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    std::swap(perm[i], perm[(x >> 33) % static_cast<uint64_t>(i + 1)]);
  }
  std::vector<int32_t> tiles(4 * batch), pos(batch, static_cast<int32_t>(ctx - 1));
  for (int64_t s = 0; s < batch; ++s) {
    tiles[4 * s] = static_cast<int32_t>(s);      // table row
    tiles[4 * s + 1] = static_cast<int32_t>(s);  // first token
    tiles[4 * s + 2] = 1;                        // tokens
  }
  std::vector<float> hq(batch * kHeads * kHeadDim);
  for (size_t i = 0; i < hq.size(); ++i) hq[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
  float *q, *partial, *out;
  int32_t *dpos, *dtiles, *dtables, *counters;
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&q), hq.size() * 4));
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&out), hq.size() * 4));
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&partial), AttnPagedPartialFloats(p, batch) * 4));
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&dpos), batch * 4));
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&dtiles), tiles.size() * 4));
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&dtables), perm.size() * 4));
  const int64_t n_counters = AttnDecodeCounters(p, batch);
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&counters), n_counters * 4));
  CHECK_CUDA(cudaMemset(counters, 0, n_counters * 4));
  CHECK_CUDA(cudaMemcpy(q, hq.data(), hq.size() * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dpos, pos.data(), pos.size() * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dtiles, tiles.data(), tiles.size() * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dtables, perm.data(), perm.size() * 4, cudaMemcpyHostToDevice));
  AttnPaged pg;
  pg.tiles = dtiles;
  pg.n_tiles = batch;
  pg.tables = dtables;
  pg.max_blocks = static_cast<int32_t>(blocks_per_seq);
  pg.kv_block = kBlock;
  pg.counters = counters;
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  const double bytes = 2.0 * static_cast<double>(batch * ctx * rb);  // rows read per layer
  for (const BodyMode& m : kBodyModes) {
    pg.long_min_rows = m.long_min;
    const float ms = GraphMedianMs(stream, e0, e1, iters, [&] {
      for (int l = 0; l < kLayers; ++l) {
        const Layer& pool = pools[l % n_pools];
        CHECK_CUDA(LaunchAttnDecodePaged(q, dpos, pool.k, pool.v, partial, out, p, pg, stream));
      }
    });
    const double us = ms * 1e3 / kLayers;
    std::printf(
        "%-5s B %4lld ctx %6lld  paged %-6s graph %8.2f us/layer %7.0f GB/s   (%.1f MB KV/layer, "
        "%.3f ms/step, %d pools)\n",
        Name(type), static_cast<long long>(batch), static_cast<long long>(ctx), m.name, us,
        bytes / (us * 1e3), bytes / 1e6, us * kLayers / 1e3, n_pools);
  }
  for (Layer& l : pools) {
    cudaFree(l.k);
    cudaFree(l.v);
  }
  for (void* ptr : {static_cast<void*>(q), static_cast<void*>(out), static_cast<void*>(partial),
                    static_cast<void*>(dpos), static_cast<void*>(dtiles),
                    static_cast<void*>(dtables), static_cast<void*>(counters)}) {
    cudaFree(ptr);
  }
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
  std::vector<int64_t> batches;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--prefill") {
      prefill = true;
    } else if (a.rfind("--batch=", 0) == 0) {
      batches = ParseList(a.substr(8));
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
        if (t == "fp8") types.push_back(KvType::kFp8);
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
  if (!batches.empty()) {
    for (int64_t c : ctxs) {
      for (int64_t b : batches) {
        for (KvType t : types) {
          if (c > 0 && b > 0) RunBatch(t, c, b, iters);
        }
      }
    }
    return 0;
  }
  for (KvType t : types) {
    for (int64_t c : ctxs) {
      if (c > 0) Run(t, c, iters);
    }
  }
  return 0;
}
