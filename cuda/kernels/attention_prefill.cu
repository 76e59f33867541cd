// Prefill attention: causal GQA over the cache, token t (position pos[t])
// attends to cache rows 0..pos[t]. A tiled CUDA-core kernel for every cache
// type: one block per (32-query tile, head), K/V tiles of 32 rows converted
// to f32 in shared memory, an online softmax per query. Nothing about the
// positions is read on the host, so any nt and any positions work (including
// gaps and a nonzero start). LaunchAttnPrefill hands f16 caches with head_dim
// 64/128 and nt >= kAttnPrefillTcMinTokens to the tensor-core kernel
// (attention_prefill_tc.cu) where the device can run it (ops.h).
//
// Thread layout (128 threads): query qi = tid / 4 of the tile, sub = tid % 4.
// A thread holds its query's dims {4(4c + sub) .. +3 : c < 8} in registers
// (pre-scaled by scale * log2(e)) and the same dims of the output
// accumulator. For each K tile it forms partial dots with all 32 rows over its
// dims, then the query's 4 threads exchange halves twice (a transposing
// butterfly: 24 shuffles) so each ends with the full scores of 8 rows
// (rows 8 sub .. 8 sub + 7). Shared-memory reads of K/V are 4 consecutive
// 16-byte chunks per query, broadcast over the warp's 8 queries: conflict-free
// without padding.
#include <algorithm>
#include <climits>
#include <cstdint>

#include "cuda/kernels/attention_prefill_args.cuh"
#include "cuda/kernels/common.cuh"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/ops.h"

namespace minfer::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kQTile = kThreads / 4;  // 32 queries
constexpr int kKTile = 32;            // cache rows per shared-memory tile
constexpr int kMaxHd = 128;
constexpr int kChunks = kMaxHd / 16;  // float4 chunks per thread

template <KvType KV>
__global__ void __launch_bounds__(kThreads) attn_prefill_kernel(AttnPrefillArgs a) {
  pdl_enter();
  __shared__ __align__(16) float ks[kKTile][kMaxHd];
  __shared__ __align__(16) float vs[kKTile][kMaxHd];
  __shared__ int s_end[kThreads / 32];
  __shared__ int s_begin[kThreads / 32];
  // Contiguous: tiles with the longest causal range first (they bound the
  // kernel's time). Paged: two CTAs per graph tile of up to 64 tokens.
  int64_t t_begin, t_end;
  const int32_t* table;
  const bool paged = a.tiles != nullptr;
  const int64_t index = paged ? blockIdx.x >> 1 : static_cast<int64_t>(gridDim.x) - 1 - blockIdx.x;
  if (!prefill_tokens(a, index, paged ? (blockIdx.x & 1) * kQTile : 0, kQTile, &t_begin, &t_end,
                      &table)) {
    return;  // block-uniform
  }
  const int h = blockIdx.y, hk = h / a.group;
  const int tid = threadIdx.x, lane = tid & 31;
  const int qi = tid >> 2, sub = tid & 3;
  const int hd4 = a.hd >> 2;
  const int64_t t = t_begin + qi;
  const bool tok = t < t_end;
  int p = tok ? __ldg(a.pos + t) : -1;
  // A position past the cache (a paged one: past the block table) was
  // flagged by the store; clamp so no read leaves it. A negative one
  // attends to nothing.
  const int64_t limit = paged ? static_cast<int64_t>(a.max_blocks) << a.block_shift : a.n_ctx;
  if (p >= limit) p = static_cast<int>(limit - 1);
  if (p < -1) p = -1;
  // The first row the query sees (a sliding window starts later).
  const int lo_q = a.window > 0 ? max(p - a.window + 1, 0) : 0;

  const int64_t qo = (t * a.n_head + h) * a.hd;  // q and out offset of (t, h)
  float4 q[kChunks], acc[kChunks];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int col = 4 * c + sub;
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (tok && col < hd4) {
      x = reinterpret_cast<const float4*>(a.q + qo)[col];
      x = make_float4(x.x * a.qscale, x.y * a.qscale, x.z * a.qscale, x.w * a.qscale);
    }
    q[c] = x;
    acc[c] = make_float4(0.f, 0.f, 0.f, 0.f);
  }

  // Rows this tile needs: [min over its queries of the first visible row,
  // max over them of pos + 1).
  int end = p + 1;
  int begin = tok ? lo_q : INT_MAX;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    end = max(end, __shfl_xor_sync(kFullWarpMask, end, off));
    begin = min(begin, __shfl_xor_sync(kFullWarpMask, begin, off));
  }
  if (lane == 0) s_end[tid >> 5] = end, s_begin[tid >> 5] = begin;
  __syncthreads();
  int kv_end = s_end[0], kv_begin = s_begin[0];
#pragma unroll
  for (int w = 1; w < kThreads / 32; ++w) {
    kv_end = max(kv_end, s_end[w]);
    kv_begin = min(kv_begin, s_begin[w]);
  }
  kv_begin = kv_begin >= kv_end ? 0 : kv_begin / kKTile * kKTile;

  float m = -INFINITY, l = 0.0f;  // l: this thread's share of the row sum
  const int e0 = hk * a.hd;
  for (int base = kv_begin; base < kv_end; base += kKTile) {  // block-uniform
    __syncthreads();                                   // the previous tile is consumed
#pragma unroll
    for (int it = 0; it < kKTile * 32 / kThreads; ++it) {
      const int idx = tid + it * kThreads;
      const int r = idx >> 5, col = idx & 31;
      if (col < hd4) {
        const int row = base + r;
        float4 kx = make_float4(0.f, 0.f, 0.f, 0.f), vx = kx;
        if (row < kv_end) {
          const int64_t cr = kv_cache_row(table, a.block_shift, row);
          kx = kv_to_float4<KV>(kv_load<KV>(a.k + cr * a.row_bytes, e0 + 4 * col, a.geom));
          vx = kv_to_float4<KV>(kv_load<KV>(a.v + cr * a.row_bytes, e0 + 4 * col, a.geom));
        }
        *reinterpret_cast<float4*>(&ks[r][4 * col]) = kx;
        *reinterpret_cast<float4*>(&vs[r][4 * col]) = vx;
      }
    }
    __syncthreads();

    float sc[kKTile];
#pragma unroll
    for (int j = 0; j < kKTile; ++j) {
      float d = 0.0f;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        if (4 * c + sub < hd4) {
          const float4 kx = *reinterpret_cast<const float4*>(&ks[j][4 * (4 * c + sub)]);
          d += q[c].x * kx.x + q[c].y * kx.y + q[c].z * kx.z + q[c].w * kx.w;
        }
      }
      sc[j] = d;
    }
    // Transposing butterfly over the query's 4 lanes: after it, sc[jj] is
    // the full score of row 8 * sub + jj.
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const uint32_t upper = (lane & 2) != 0 ? 0xFFFFFFFFu : 0u;
      const float send = select_bits(upper, sc[i], sc[i + 16]);
      const float keep = select_bits(upper, sc[i + 16], sc[i]);
      sc[i] = keep + __shfl_xor_sync(kFullWarpMask, send, 2);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t upper = (lane & 1) != 0 ? 0xFFFFFFFFu : 0u;
      const float send = select_bits(upper, sc[i], sc[i + 8]);
      const float keep = select_bits(upper, sc[i + 8], sc[i]);
      sc[i] = keep + __shfl_xor_sync(kFullWarpMask, send, 1);
    }
    float mloc = -INFINITY;
#pragma unroll
    for (int jj = 0; jj < 8; ++jj) {
      const int row = base + 8 * sub + jj;
      sc[jj] = row <= p && row >= lo_q ? sc[jj] : -INFINITY;  // causal (and window) mask
      mloc = fmaxf(mloc, sc[jj]);
    }
    mloc = fmaxf(mloc, __shfl_xor_sync(kFullWarpMask, mloc, 1));
    mloc = fmaxf(mloc, __shfl_xor_sync(kFullWarpMask, mloc, 2));
    const float nmx = fmaxf(m, mloc);
    float corr = 1.0f;
    float e[8];
    if (nmx == -INFINITY) {  // nothing visible yet (only for p < 0)
#pragma unroll
      for (int jj = 0; jj < 8; ++jj) e[jj] = 0.0f;
    } else {
      corr = exp2f(m - nmx);
#pragma unroll
      for (int jj = 0; jj < 8; ++jj) e[jj] = exp2f(sc[jj] - nmx);
    }
    m = nmx;
    float es = 0.0f;
#pragma unroll
    for (int jj = 0; jj < 8; ++jj) es += e[jj];
    l = l * corr + es;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      acc[c].x *= corr;
      acc[c].y *= corr;
      acc[c].z *= corr;
      acc[c].w *= corr;
    }
#pragma unroll
    for (int j = 0; j < kKTile; ++j) {
      const float ej = __shfl_sync(kFullWarpMask, e[j & 7], (lane & ~3) | (j >> 3));
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        if (4 * c + sub < hd4) {
          const float4 vx = *reinterpret_cast<const float4*>(&vs[j][4 * (4 * c + sub)]);
          acc[c].x += ej * vx.x;
          acc[c].y += ej * vx.y;
          acc[c].z += ej * vx.z;
          acc[c].w += ej * vx.w;
        }
      }
    }
  }
  l += __shfl_xor_sync(kFullWarpMask, l, 1);
  l += __shfl_xor_sync(kFullWarpMask, l, 2);
  if (!tok) return;
  if (a.sinks != nullptr) {
    // The sink joins the max and the normalizer: M = max(m, s), everything
    // rescaled to it (m is the same in the query's 4 threads).
    constexpr float kLog2e = 1.44269504088896340736f;
    const float s2 = __ldg(a.sinks + h) * kLog2e;
    const float mm = fmaxf(m, s2);
    const float c = m == -INFINITY ? 0.0f : exp2f(m - mm);
    l = l * c + exp2f(s2 - mm);
#pragma unroll
    for (int c4 = 0; c4 < kChunks; ++c4) {
      acc[c4].x *= c;
      acc[c4].y *= c;
      acc[c4].z *= c;
      acc[c4].w *= c;
    }
  }
  const float inv_ok = l > 0.0f ? 1.0f : 0.0f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int col = 4 * c + sub;
    if (col < hd4) {
      const float4 x = acc[c];
      reinterpret_cast<float4*>(a.out + qo)[col] =
          inv_ok != 0.0f ? make_float4(x.x / l, x.y / l, x.z / l, x.w / l)
                         : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
}

template <KvType KV>
void LaunchCudaCore(const AttnPrefillArgs& a, dim3 grid, cudaStream_t stream) {
  LaunchGrid(attn_prefill_kernel<KV>, grid, kThreads, 0, stream, a);
}

cudaError_t CheckParams(const float* q, const void* k_cache, const void* v_cache, const float* out,
                        const AttnParams& p) {
  if (p.n_head <= 0 || p.n_head_kv <= 0 || p.n_head % p.n_head_kv != 0 || p.head_dim <= 0 ||
      p.head_dim > kMaxHd || p.head_dim % 4 != 0 || p.n_ctx <= 0 || p.n_ctx >= INT_MAX ||
      p.n_head > 65535) {
    return cudaErrorInvalidValue;
  }
  if (IsBlockKv(p.kv_type) && p.n_kv_embd() % 32 != 0) return cudaErrorInvalidValue;
  const uintptr_t kv_align = p.kv_type == KvType::kF32 ? 16 : p.kv_type == KvType::kF16 ? 8 : 2;
  if (!AlignedTo(q, 16) || !AlignedTo(out, 16) || !AlignedTo(k_cache, kv_align) ||
      !AlignedTo(v_cache, kv_align)) {
    return cudaErrorMisalignedAddress;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t LaunchAttnPrefillPaged(const float* q, const int32_t* pos, const void* k_cache,
                                   const void* v_cache, float* out, const AttnParams& p,
                                   const AttnPaged& pg, bool tc, cudaStream_t stream) {
  if (const cudaError_t e = CheckParams(q, k_cache, v_cache, out, p); e != cudaSuccess) return e;
  if (pg.tiles == nullptr || pg.tables == nullptr || pg.n_tiles < 1 || pg.n_tiles > 65535 ||
      pg.max_blocks < 1 || pg.kv_block < 1 || (pg.kv_block & (pg.kv_block - 1)) != 0 ||
      !AlignedTo(pg.tiles, 16)) {
    return cudaErrorInvalidValue;
  }
  const AttnPrefillArgs a = MakeAttnPrefillArgsPaged(q, pos, k_cache, v_cache, out, p, pg);
  if (tc) {
    const cudaError_t err = LaunchAttnPrefillTcArgs(a, pg.n_tiles, p, stream);
    if (err != cudaErrorNotSupported) return err;
  }
  const dim3 grid(static_cast<unsigned>(2 * pg.n_tiles), static_cast<unsigned>(p.n_head));
  switch (p.kv_type) {
    case KvType::kF32:
      LaunchCudaCore<KvType::kF32>(a, grid, stream);
      break;
    case KvType::kF16:
      LaunchCudaCore<KvType::kF16>(a, grid, stream);
      break;
    case KvType::kFp8:
      LaunchCudaCore<KvType::kFp8>(a, grid, stream);
      break;
    case KvType::kQ8_0:
      LaunchCudaCore<KvType::kQ8_0>(a, grid, stream);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t LaunchAttnPrefill(const float* q, const int32_t* pos, int64_t nt, const void* k_cache,
                              const void* v_cache, float* out, const AttnParams& p,
                              cudaStream_t stream) {
  return LaunchAttnPrefillConfigured(q, pos, nt, k_cache, v_cache, out, p, AttnPrefillConfig{},
                                     stream);
}

cudaError_t LaunchAttnPrefillConfigured(const float* q, const int32_t* pos, int64_t nt,
                                        const void* k_cache, const void* v_cache, float* out,
                                        const AttnParams& p, const AttnPrefillConfig& cfg,
                                        cudaStream_t stream) {
  if (nt <= 0) return cudaSuccess;
  if (const cudaError_t e = CheckParams(q, k_cache, v_cache, out, p); e != cudaSuccess) return e;
  // The parameters are valid for both kernels here; the tensor-core one
  // answers cudaErrorNotSupported (having launched nothing) when it cannot
  // take them, and the CUDA-core kernel runs instead.
  if (nt >= cfg.tc_min_tokens) {
    const cudaError_t err = LaunchAttnPrefillTc(q, pos, nt, k_cache, v_cache, out, p, stream);
    if (err != cudaErrorNotSupported) return err;
  }
  const AttnPrefillArgs a = MakeAttnPrefillArgs(q, pos, nt, k_cache, v_cache, out, p);
  const int64_t tiles = (nt + kQTile - 1) / kQTile;
  if (tiles > INT_MAX) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(p.n_head));
  switch (p.kv_type) {
    case KvType::kF32:
      LaunchGrid(attn_prefill_kernel<KvType::kF32>, grid, kThreads, 0, stream, a);
      break;
    case KvType::kF16:
      LaunchGrid(attn_prefill_kernel<KvType::kF16>, grid, kThreads, 0, stream, a);
      break;
    case KvType::kFp8:
      LaunchGrid(attn_prefill_kernel<KvType::kFp8>, grid, kThreads, 0, stream, a);
      break;
    case KvType::kQ8_0:
      LaunchGrid(attn_prefill_kernel<KvType::kQ8_0>, grid, kThreads, 0, stream, a);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace minfer::cuda
