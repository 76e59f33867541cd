// The mixture-of-experts kernels (moe.h): route, group, grouped matmul,
// bias + activation, combine.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/mmq_impl.cuh"
#include "cuda/kernels/moe.h"
#include "cuda/kernels/per_device.cuh"
#include "cuda/kernels/ptx_sm80.cuh"
#include "cuda/kernels/quant_dev.cuh"
#include "cuda/kernels/types.h"

namespace minfer::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kPerLane = kMoeMaxExperts / 32;
// The grouping gives each expert a thread of one CTA.
static_assert(kThreads >= kMoeMaxExperts, "a thread per expert");

__device__ __forceinline__ int32_t route_id(const float* route, int64_t t, int k, int j) {
  return __float_as_int(__ldg(route + t * 2 * k + k + j));
}

// The expert activation (moe.h kMoeSwiGlu; LaunchMoeBiasAct): biases of
// expert e, then silu(g) * u or gpt-oss's clamped form. One function for
// the matmuls' epilogues and the separate launch, so either gives the same
// bits (the bias adds are single roundings either way).
struct MoeActArgs {
  const float* bg = nullptr;
  const float* bu = nullptr;
  int64_t b_stride = 0;
  int act = 0;
  float alpha = 0.0f, limit = 0.0f;
};

__device__ __forceinline__ float MoeActOf(const MoeActArgs& m, int64_t e, int64_t row, float gv,
                                          float uv) {
  if (m.bg) gv = __fadd_rn(gv, __ldg(m.bg + e * m.b_stride + row));
  if (m.bu) uv = __fadd_rn(uv, __ldg(m.bu + e * m.b_stride + row));
  if (m.act == 0) return silu_f(gv) * uv;
  const float xg = fminf(gv, m.limit);
  const float yu = fminf(fmaxf(uv, -m.limit), m.limit);
  return xg / (1.0f + expf(-m.alpha * xg)) * (yu + 1.0f);
}

MoeActArgs ActArgsOf(const MoeMatmulArgs& a) {
  MoeActArgs m;
  m.bg = a.act_bg;
  m.bu = a.act_bu;
  m.b_stride = a.b_stride;
  m.act = a.act;
  m.alpha = a.alpha;
  m.limit = a.limit;
  return m;
}

// Whether (va, ia) ranks before (vb, ib): larger logit first, NaN after
// every number, ties to the lower id.
__device__ __forceinline__ bool ranks_before(float va, int ia, float vb, int ib) {
  const bool na = isnan(va), nb = isnan(vb);
  if (na != nb) return !na;
  if (!na && va != vb) return va > vb;
  return ia < ib;
}

// ------------------------------------------------------------------ route

// One token's routing by one warp; lane l holds experts l, l + 32, ... The
// k choices are k rounds of a warp arg-max over the untaken experts. Lane
// j < k gets choice j: its expert in *id, its weight in *weight.
__device__ __forceinline__ void route_token(const float* __restrict__ l, const MoeRouteArgs& a,
                                            int lane, int* id, float* weight) {
  float v[kPerLane];
  uint32_t present = 0;  // bit i: expert lane + 32 i exists and is not taken
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    v[i] = e < a.n_expert ? (a.bias != nullptr ? __fadd_rn(__ldg(l + e), __ldg(a.bias + e))
                                               : __ldg(l + e))
                          : 0.0f;
    if (e < a.n_expert) present |= 1u << i;
  }
  // The chosen expert of round j and its logit live in lane j.
  int my_id = 0;
  float my_logit = 0.0f;
  for (int j = 0; j < a.k; ++j) {
    float bv = 0.0f;
    int bi = -1;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (!(present >> i & 1u)) continue;
      const int e = lane + 32 * i;
      if (bi < 0 || ranks_before(v[i], e, bv, bi)) bv = v[i], bi = e;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const float ov = __shfl_xor_sync(kFullWarpMask, bv, off);
      const int oi = __shfl_xor_sync(kFullWarpMask, bi, off);
      if (oi >= 0 && (bi < 0 || ranks_before(ov, oi, bv, bi))) bv = ov, bi = oi;
    }
    if ((bi & 31) == lane) present &= ~(1u << (bi >> 5));
    if (lane == j) my_id = bi, my_logit = bv;
  }

  float w = 0.0f;
  if (a.gating == 0) {
    // Softmax over every logit (the CPU's: float exps, a double sum).
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (lane + 32 * i < a.n_expert) mx = fmaxf(mx, v[i]);
    }
    mx = warp_max(mx);
    double sum = 0.0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (lane + 32 * i < a.n_expert) sum += static_cast<double>(expf(v[i] - mx));
    }
    sum = warp_sum(sum);
    const float inv = static_cast<float>(1.0 / sum);
    w = expf(my_logit - mx) * inv;
  } else {
    // Softmax over the chosen logits; the first is the largest.
    const float mx = __shfl_sync(kFullWarpMask, my_logit, 0);
    const float ex = lane < a.k ? expf(my_logit - mx) : 0.0f;
    double sum = 0.0;
    for (int j = 0; j < a.k; ++j) sum += static_cast<double>(__shfl_sync(kFullWarpMask, ex, j));
    w = ex * static_cast<float>(1.0 / sum);
  }
  if (a.norm) {
    float sum = 0.0f;  // in choice order, as the CPU adds them
    for (int j = 0; j < a.k; ++j) sum += __shfl_sync(kFullWarpMask, w, j);
    w /= fmaxf(sum, 6.103515625e-5f);
  }
  if (a.scale != 0.0f) w *= a.scale;
  *id = my_id;
  *weight = w;
}

// One warp per token.
__global__ void __launch_bounds__(kThreads) moe_route_kernel(const float* __restrict__ logits,
                                                             int64_t nt, MoeRouteArgs a,
                                                             float* __restrict__ out) {
  pdl_enter();
  const int lane = threadIdx.x & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (t >= nt) return;
  int id;
  float w;
  route_token(logits + t * a.n_expert, a, lane, &id, &w);
  if (lane < a.k) {
    float* o = out + t * 2 * a.k;
    o[lane] = w;
    o[a.k + lane] = __int_as_float(id);
  }
}

// ------------------------------------------------------------------ group

// Assignments staged through shared memory in chunks of this many ids.
constexpr int kGroupChunk = 4096;

// The grouping of A assignments by one CTA of kThreads (moe.h
// LaunchMoeGroup); id_of(a) gives assignment a's expert. cnt and ids are
// the CTA's shared arrays (kMoeMaxExperts and kGroupChunk entries).
template <class IdOf>
__device__ __forceinline__ void group_assignments(IdOf id_of, int64_t A, int n_expert,
                                                  int tile_tokens, const MoeGroups& g,
                                                  int32_t* error_flag, int32_t* cnt,
                                                  int32_t* ids) {
  for (int e = threadIdx.x; e < n_expert; e += kThreads) cnt[e] = 0;
  __syncthreads();
  for (int64_t a = threadIdx.x; a < A; a += kThreads) {
    const int32_t e = id_of(a);
    if (e >= 0 && e < n_expert) {
      atomicAdd(&cnt[e], 1);
    } else {
      g.slot[a] = -1;
      set_device_error(error_flag, kDeviceBadExpertId);
    }
  }
  __syncthreads();
  // Thread e places expert e's assignments in ascending order: its first
  // column is the count of the experts before it, its first tile the tiles
  // of the experts before it — exclusive prefix sums over the CTA (a warp
  // scan, then the warps' totals): a serial prefix of up to 255 terms, each
  // with an integer division, was most of a decode step's route-and-group
  // launch (~14 us on an H100 for 128 experts).
  __shared__ int32_t warp_cnt[kWarps], warp_tiles[kWarps];
  const int e = threadIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int32_t n = e < n_expert ? cnt[e] : 0;
  const int32_t my_tiles = (n + tile_tokens - 1) / tile_tokens;
  int32_t pos = n, tile = my_tiles;  // inclusive sums over the warp
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const int32_t p_up = __shfl_up_sync(kFullWarpMask, pos, off);
    const int32_t t_up = __shfl_up_sync(kFullWarpMask, tile, off);
    if (lane >= off) pos += p_up, tile += t_up;
  }
  if (lane == 31) warp_cnt[warp] = pos, warp_tiles[warp] = tile;
  __syncthreads();
  pos -= n, tile -= my_tiles;  // exclusive
  for (int w = 0; w < warp; ++w) pos += warp_cnt[w], tile += warp_tiles[w];
  if (e < n_expert) {
    if (e == n_expert - 1) *g.n_tiles = tile + my_tiles;
    const int32_t first = pos;
    for (int32_t c = 0; c < n; c += tile_tokens) {
      g.tiles[tile++] = make_int4(e, first + c, min(tile_tokens, n - c), 0);
    }
  }
  for (int64_t base = 0; base < A; base += kGroupChunk) {
    const int m = static_cast<int>(A - base < kGroupChunk ? A - base : kGroupChunk);
    __syncthreads();  // the previous chunk is consumed
    for (int i = threadIdx.x; i < m; i += kThreads) ids[i] = id_of(base + i);
    __syncthreads();
    if (e < n_expert && n > 0) {
      for (int i = 0; i < m; ++i) {
        if (ids[i] == e) {
          g.order[pos] = static_cast<int32_t>(base + i);
          g.slot[base + i] = pos;
          ++pos;
        }
      }
    }
  }
}

__global__ void __launch_bounds__(kThreads) moe_group_kernel(const float* __restrict__ route,
                                                             int64_t nt, int k, int n_expert,
                                                             int tile_tokens, MoeGroups g,
                                                             int32_t* error_flag) {
  pdl_enter();
  __shared__ int32_t cnt[kMoeMaxExperts];
  __shared__ int32_t ids[kGroupChunk];
  group_assignments([&](int64_t a) { return route_id(route, a / k, k, static_cast<int>(a % k)); },
                    nt * k, n_expert, tile_tokens, g, error_flag, cnt, ids);
}

// Route and group in one CTA (moe.h LaunchMoeRouteGroup): warp t routes
// token t, the chosen ids meet in shared memory, then the CTA groups them.
// (The group reads the ids from shared memory, not back through `out`:
// the read-only path may not see this grid's own writes.)
__global__ void __launch_bounds__(kThreads)
    moe_route_group_kernel(const float* __restrict__ logits, int nt, MoeRouteArgs a,
                           float* __restrict__ out, int tile_tokens, MoeGroups g,
                           int32_t* error_flag) {
  pdl_enter();
  __shared__ int32_t cnt[kMoeMaxExperts];
  __shared__ int32_t ids[kWarps * kMoeMaxUsed];
  __shared__ int32_t chosen[kWarps * kMoeMaxUsed];
  const int lane = threadIdx.x & 31, t = threadIdx.x >> 5;
  if (t < nt) {
    int id;
    float w;
    route_token(logits + static_cast<int64_t>(t) * a.n_expert, a, lane, &id, &w);
    if (lane < a.k) {
      float* o = out + static_cast<int64_t>(t) * 2 * a.k;
      o[lane] = w;
      o[a.k + lane] = __int_as_float(id);
      chosen[t * a.k + lane] = id;
    }
  }
  __syncthreads();
  group_assignments([&](int64_t i) { return chosen[i]; }, static_cast<int64_t>(nt) * a.k,
                    a.n_expert, tile_tokens, g, error_flag, cnt, ids);
}

// ---------------------------------------------------------- grouped matmul

// MXFP4 as an MMVQ unit (quant_dev.cuh's interface): one 32-element block
// of the split device layout (types.h), codes from the 16 code bytes, the
// scale 2^(e - 128) from the exponent the kernel loads beside them. The
// codes are looked up four at a time with byte permutes: the low three bits
// of each nibble pick the magnitude (0 1 2 3 4 6 8 12, doubled E2M1), bit 3
// picks the negated table.
struct Mxfp4Unit {
  static constexpr int kNA = 1;
  static constexpr int kUnits = 1;
  static constexpr int kBlockElems = 32;
  static constexpr int kBytes = kMxfp4CodeBytes;
  static constexpr bool kHasMin = false;
  static constexpr bool kSplitScale = false;
  struct Raw {
    uint4 q;
    uint32_t e;
  };
  __device__ __forceinline__ static void load(Raw* r, const uint8_t* codes, int, bool) {
    r->q = __ldg(reinterpret_cast<const uint4*>(codes));
  }
  __device__ __forceinline__ static uint32_t lut(uint32_t x) {
    const uint32_t sel =
        (x & 0x7u) | ((x >> 4) & 0x70u) | ((x >> 8) & 0x700u) | ((x >> 12) & 0x7000u);
    const uint32_t pos = __byte_perm(0x03020100u, 0x0C080604u, sel);
    const uint32_t neg = __byte_perm(0xFDFEFF00u, 0xF4F8FAFCu, sel);
    const uint32_t m = ((x >> 3) & 0x01010101u) * 0xFFu;
    return (pos & ~m) | (neg & m);
  }
  __device__ __forceinline__ static void codes(const Raw& r, int, int, int32_t w[8]) {
    const uint32_t q[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      w[i] = static_cast<int32_t>(lut(q[i] & 0x0F0F0F0Fu));
      w[4 + i] = static_cast<int32_t>(lut((q[i] >> 4) & 0x0F0F0F0Fu));
    }
  }
  __device__ __forceinline__ static void scales(const Raw& r, int, qdev::UnitScales* sc) {
    // engine/quant/blocks.h Mxfp4Scale: exact, subnormal below e = 2.
    const uint32_t bits = r.e < 2 ? (0x00200000u << r.e) : ((r.e - 1) << 23);
    sc->f[0][0] = sc->f[0][1] = __uint_as_float(bits);
    sc->m[0] = 0.0f;
  }
  __device__ __forceinline__ static int ablock(int, int) { return 0; }
};

template <GgmlType T>
struct MoeUnit {
  using type = qdev::UnitDec<T>;
};
template <>
struct MoeUnit<GgmlType::kMXFP4> {
  using type = Mxfp4Unit;
};

constexpr bool MoeTypeSupported(GgmlType t) {
  return t == GgmlType::kQ4_0 || t == GgmlType::kQ4_1 || t == GgmlType::kQ5_0 ||
         t == GgmlType::kQ5_1 || t == GgmlType::kQ8_0 || t == GgmlType::kQ4_K ||
         t == GgmlType::kQ5_K || t == GgmlType::kQ6_K || t == GgmlType::kMXFP4;
}

struct KParams {
  const uint8_t* w;
  const uint8_t* up;
  int64_t row_bytes;
  int64_t expert_rows;
  int nb;  // 32-element activation blocks per row
  int block_bytes;
  const BlockQ8A* q;
  const int32_t* act_map;
  int act_div;
  const int4* tiles;
  const int32_t* n_tiles;
  float* y;
  float* y2;
  int64_t y_stride;
  BlockQ8A* q_out;     // kMoeSwiGlu: y quantized by the tile's last CTA (moe.h)
  int32_t* tile_done;  // ... its per-tile counters (zero between launches)
  MoeActArgs act;      // kMoeSwiGlu's epilogue
  int lanes_log2;    // lanes per row: 4..32
  int group_iters;   // row groups (8 warps x 32 / L rows) per CTA
  int64_t n_groups;  // row groups of one expert
};

// Dynamic shared memory a CTA may use without an opt-in attribute: the
// staged activations of a tile (NT rows of nb blocks, 40 bytes each) must
// fit, else they are read through L1.
constexpr int64_t kMaxSmem = 48 * 1024;

// The tile's last CTA to finish quantizes its nc columns of y (each
// expert_rows floats) into q_out, as LaunchQuantizeQ8A would (the same
// QuantizeQ8Group: the same bits), then zeroes the tile's counter for the
// next launch (a recorded graph replays with the counters as it found
// them). The classic last-block pattern: every CTA's stores are made
// visible device-wide before its count, and the last one reads them from
// L2 (ld.global.cg: never a stale L1 line).
__device__ __forceinline__ void QuantizeTileWhenLast(const KParams& p, int c0, int nc) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const int done = atomicAdd(p.tile_done + blockIdx.y, 1);
    last = done == static_cast<int>(gridDim.x) - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t per_col = p.expert_rows / 32;
  const int64_t total = per_col * nc;
  // Whole warps iterate together (QuantizeQ8Group's full-mask shuffles);
  // 8 lanes a block, 4 blocks a warp.
  for (int64_t base = static_cast<int64_t>(warp) * 4; base < total; base += kWarps * 4) {
    const int64_t blk = base + (lane >> 3);
    const int sub = lane & 7;
    const bool active = blk < total;
    const int64_t col = active ? blk / per_col : 0;
    const int64_t b = active ? blk - col * per_col : 0;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (active) {
      v = __ldcg(reinterpret_cast<const float4*>(p.y + (c0 + col) * p.y_stride + b * 32 + sub * 4));
    }
    const Q8Group g = QuantizeQ8Group(v);
    if (!active) continue;
    BlockQ8A* q = p.q_out + (c0 + col) * per_col + b;
    *reinterpret_cast<uint32_t*>(q->qs + 4 * sub) = g.packed;
    if (sub == 0) *reinterpret_cast<float2*>(q) = make_float2(g.d, g.s);
  }
  if (threadIdx.x == 0) p.tile_done[blockIdx.y] = 0;
}

// A CTA: one tile (blockIdx.y) x group_iters groups of 8 warps of rows
// (blockIdx.x); a warp holds 32 / L rows, L lanes each, the lanes splitting
// the row's units (MMVQ's decomposition with the k split inside the warp:
// the down projection of a small expert has too few units per row to fill
// 32 lanes). R = 2 reads the gate and up rows of the same index together.
// kSmem: the tile's NT activation rows are first copied into shared memory
// de-interleaved (codes, then (d, s)), as mmvq_impl.cuh does, so the rows
// of all the CTA's groups read them from there; without it every warp reads
// them through L1.
// One row group's dots (the MMVQ decomposition above, for the grouped
// matmul and the fused down + combine alike, so the two give the same bits):
// this lane's share of row `grow` (an index into the expert weight's rows,
// expert offset included) of W (and of U for R = 2) against NT activation
// rows, then summed over the row's L lanes by a butterfly, so every lane of
// the row ends with the full sums in acc.
template <GgmlType T, int NT, int R, class LoadAct>
__device__ __forceinline__ void MoeRowDots(const KParams& p, int64_t grow, int sl, int L,
                                           LoadAct&& load_act, float (&acc)[R][NT]) {
  using D = typename MoeUnit<T>::type;
  constexpr bool kMx = T == GgmlType::kMXFP4;
  constexpr int kNA = D::kNA;
  constexpr int kAbPerBlock = D::kBlockElems / 32;
  const int nu = p.nb / kNA;
  const int j = sl % D::kUnits;  // fixed: L is a multiple of kUnits
  const int block_bytes = T == GgmlType::kQ6_K ? p.block_bytes : D::kBytes;
  const int64_t w_step = static_cast<int64_t>(L / D::kUnits) * block_bytes;
  const int a_step = L / D::kUnits * kAbPerBlock;
  int abo[kNA];
#pragma unroll
  for (int a = 0; a < kNA; ++a) abo[a] = D::ablock(j, a);
  const uint8_t* wp[R];
  const uint8_t* ep[R];  // MXFP4: the lane's block exponent (split layout)
  const int64_t first = static_cast<int64_t>(sl / D::kUnits) * block_bytes;
  wp[0] = p.w + grow * p.row_bytes + first;
  if constexpr (R == 2) wp[1] = p.up + grow * p.row_bytes + first;
  if constexpr (kMx) {
    ep[0] = p.w + grow * p.row_bytes + static_cast<int64_t>(p.nb) * kMxfp4CodeBytes + sl;
    if constexpr (R == 2) {
      ep[1] = p.up + grow * p.row_bytes + static_cast<int64_t>(p.nb) * kMxfp4CodeBytes + sl;
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = 0.0f;
  }
  int ab = sl / D::kUnits * kAbPerBlock;
  for (int s = sl; s < nu; s += L, ab += a_step) {
    typename D::Raw raw[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      D::load(&raw[r], wp[r], j, true);
      if constexpr (kMx) {
        raw[r].e = __ldg(ep[r]);
        ep[r] += L;
      }
    }
    qdev::UnitScales sc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) D::scales(raw[r], j, &sc[r]);
#pragma unroll
    for (int a = 0; a < kNA; ++a) {
      int32_t w[R][8];
#pragma unroll
      for (int r = 0; r < R; ++r) D::codes(raw[r], j, a, w[r]);
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        int32_t x[8];
        float2 ds;
        load_act(t, ab + abo[a], x, &ds);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          // The CPU's terms (mmvq_impl.cuh dot_block).
          float v = acc[r][t];
          if constexpr (D::kSplitScale) {
            const int i0 = qdev::dot16(w[r], x, 0);
            const int i1 = qdev::dot16(w[r] + 4, x + 4, 0);
            v = fmaf(static_cast<float>(i0), sc[r].f[a][0] * ds.x, v);
            v = fmaf(static_cast<float>(i1), sc[r].f[a][1] * ds.x, v);
          } else {
            const int isum = qdev::dot16(w[r] + 4, x + 4, qdev::dot16(w[r], x, 0));
            v = fmaf(static_cast<float>(isum), sc[r].f[a][0] * ds.x, v);
          }
          if constexpr (D::kHasMin) v = fmaf(sc[r].m[a], ds.y, v);
          acc[r][t] = v;
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) wp[r] += w_step;
  }
  for (int off = L >> 1; off > 0; off >>= 1) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int t = 0; t < NT; ++t) acc[r][t] += __shfl_xor_sync(kFullWarpMask, acc[r][t], off);
    }
  }
}

// A CTA: one tile (blockIdx.y) x group_iters groups of 8 warps of rows
// (blockIdx.x); a warp holds 32 / L rows, L lanes each, the lanes splitting
// the row's units (MMVQ's decomposition with the k split inside the warp:
// the down projection of a small expert has too few units per row to fill
// 32 lanes). R = 2 reads the gate and up rows of the same index together.
// kSmem: the tile's NT activation rows are first copied into shared memory
// de-interleaved (codes, then (d, s)), as mmvq_impl.cuh does, so the rows
// of all the CTA's groups read them from there; without it every warp reads
// them through L1.
template <GgmlType T, int NT, int kMode, bool kSmem>
__global__ void __launch_bounds__(kThreads) moe_mmvq_kernel(const KParams p) {
  pdl_enter();
  constexpr int R = kMode == kMoePlain ? 1 : 2;
  extern __shared__ __align__(16) uint8_t smem[];
  if (static_cast<int>(blockIdx.y) >= __ldg(p.n_tiles)) return;
  const int4 td = p.tiles[blockIdx.y];
  const int e = td.x, c0 = td.y, nc = td.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int L = 1 << p.lanes_log2;
  const int sub = lane >> p.lanes_log2, sl = lane & (L - 1);
  const int nb = p.nb;

  // The tile's activation rows (columns past nc repeat the last one; their
  // results are not stored).
  const BlockQ8A* qa[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const int col = c0 + min(t, nc - 1);
    const int arow = p.act_map ? __ldg(p.act_map + col) / p.act_div : col;
    qa[t] = p.q + static_cast<int64_t>(arow) * nb;
  }
  int8_t* s_qs = reinterpret_cast<int8_t*>(smem);
  float2* s_ds = reinterpret_cast<float2*>(smem + NT * nb * 32);
  if constexpr (kSmem) {
    // BlockQ8A = (d, s, 32 codes): 5 units of 8 bytes per block.
    const int units = NT * nb * 5;
    for (int u = threadIdx.x; u < units; u += kThreads) {
      const int tb = u / 5, part = u - tb * 5;
      const int t = tb / nb, b = tb - t * nb;
      // (The row is recomputed, not taken from qa[t]: a run-time index into
      // a register array would move it to local memory.)
      const int col = c0 + min(t, nc - 1);
      const int arow = p.act_map ? __ldg(p.act_map + col) / p.act_div : col;
      const int2 v = __ldg(reinterpret_cast<const int2*>(p.q + static_cast<int64_t>(arow) * nb + b) +
                           part);
      if (part == 0) {
        s_ds[tb] = make_float2(__int_as_float(v.x), __int_as_float(v.y));
      } else {
        *reinterpret_cast<int2*>(s_qs + tb * 32 + (part - 1) * 8) = v;
      }
    }
    __syncthreads();
  }
  auto load_act = [&](int t, int ab, int32_t x[8], float2* ds) {
    if constexpr (kSmem) {
      const int4* src = reinterpret_cast<const int4*>(s_qs + (t * nb + ab) * 32);
      const int4 v0 = src[0], v1 = src[1];
      x[0] = v0.x, x[1] = v0.y, x[2] = v0.z, x[3] = v0.w;
      x[4] = v1.x, x[5] = v1.y, x[6] = v1.z, x[7] = v1.w;
      *ds = s_ds[t * nb + ab];
    } else {
      qdev::q8a_load_block(qa[t], ab, x);
      *ds = qdev::q8a_load_ds(qa[t], ab);
    }
  };

  const int64_t g_end = min(static_cast<int64_t>(blockIdx.x + 1) * p.group_iters, p.n_groups);
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * p.group_iters; g < g_end; ++g) {
    const int64_t row = (g * kWarps + warp) * (32 >> p.lanes_log2) + sub;
    const bool ok = row < p.expert_rows;
    const int64_t grow = static_cast<int64_t>(e) * p.expert_rows + (ok ? row : p.expert_rows - 1);
    float acc[R][NT];
    MoeRowDots<T, NT, R>(p, grow, sl, L, load_act, acc);
    if (sl != 0 || !ok) continue;
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t >= nc) break;
      const int64_t o = static_cast<int64_t>(c0 + t) * p.y_stride + row;
      if constexpr (kMode == kMoeSwiGlu) {
        p.y[o] = MoeActOf(p.act, e, row, acc[0][t], acc[1][t]);
      } else if constexpr (kMode == kMoePair) {
        p.y[o] = acc[0][t];
        p.y2[o] = acc[1][t];
      } else {
        p.y[o] = acc[0][t];
      }
    }
  }
  if constexpr (kMode == kMoeSwiGlu) {
    if (p.q_out != nullptr) QuantizeTileWhenLast(p, c0, nc);
  }
}

template <GgmlType T, int NT, int kMode>
void LaunchSmem(const KParams& p, dim3 grid, cudaStream_t st) {
  // One token per tile (single-stream decode): each warp reads the one row
  // through L1, and the staging's barrier would only add latency.
  const size_t smem = static_cast<size_t>(NT) * p.nb * 40;
  if (NT > 1 && static_cast<int64_t>(smem) <= kMaxSmem) {
    LaunchGrid(moe_mmvq_kernel<T, NT, kMode, true>, grid, kThreads, smem, st, p);
  } else {
    LaunchGrid(moe_mmvq_kernel<T, NT, kMode, false>, grid, kThreads, 0, st, p);
  }
}

template <GgmlType T, int NT>
cudaError_t LaunchTyped(const KParams& p, int mode, dim3 grid, cudaStream_t st) {
  switch (mode) {
    case kMoePlain: LaunchSmem<T, NT, kMoePlain>(p, grid, st); break;
    case kMoeSwiGlu: LaunchSmem<T, NT, kMoeSwiGlu>(p, grid, st); break;
    case kMoePair: LaunchSmem<T, NT, kMoePair>(p, grid, st); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

template <GgmlType T>
cudaError_t LaunchTokens(const KParams& p, int nt, int mode, dim3 grid, cudaStream_t st) {
  switch (nt) {
    case 1: return LaunchTyped<T, 1>(p, mode, grid, st);
    case 2: return LaunchTyped<T, 2>(p, mode, grid, st);
    case 4: return LaunchTyped<T, 4>(p, mode, grid, st);
    case 8: return LaunchTyped<T, 8>(p, mode, grid, st);
    default: return cudaErrorInvalidValue;
  }
}

// ------------------------------------------------- down + combine, one token

// One token's down projection and combine in one launch (moe.h
// LaunchMoeDownCombine). CTA x takes the 32 / L rows a warp of the grouped
// matmul would (the same lanes per row, MoeRowDots: the same bits); warp w
// computes them for the token's choices w, w + 8, ... (its expert's rows,
// its grouped column of h), into shared memory; then one thread per row
// sums the choices in route order as the combine kernel does. The weights
// read are the grouped matmul's (each chosen expert's rows once); what goes
// is the d round trip through memory and a launch.
constexpr int kDownCombineMaxRows = 8;  // 32 / L, L >= 4

template <GgmlType T>
__global__ void __launch_bounds__(kThreads)
    moe_down_combine_kernel(const KParams p, const float* __restrict__ route,
                            const int32_t* __restrict__ slot, const float* __restrict__ bd,
                            int64_t bd_stride, int k, const float* __restrict__ residual,
                            float* __restrict__ y) {
  pdl_enter();
  __shared__ float s_d[kMoeMaxUsed][kDownCombineMaxRows];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int L = 1 << p.lanes_log2;
  const int rows = 32 >> p.lanes_log2;
  const int sub = lane >> p.lanes_log2, sl = lane & (L - 1);
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * rows;
  const int64_t row = row0 + sub;
  const bool ok = row < p.expert_rows;
  for (int j = warp; j < k; j += kWarps) {
    const int32_t c = __ldg(slot + j);
    if (c < 0) continue;  // an id the group refused: adds nothing
    const int64_t e = route_id(route, 0, k, j);
    const int64_t grow = e * p.expert_rows + (ok ? row : p.expert_rows - 1);
    const BlockQ8A* qa = p.q + static_cast<int64_t>(c) * p.nb;
    float acc[1][1];
    MoeRowDots<T, 1, 1>(
        p, grow, sl, L,
        [&](int, int ab, int32_t x[8], float2* ds) {
          qdev::q8a_load_block(qa, ab, x);
          *ds = qdev::q8a_load_ds(qa, ab);
        },
        acc);
    if (sl == 0) s_d[j][sub] = acc[0][0];
  }
  __syncthreads();
  const int r = threadIdx.x;
  if (r >= rows || row0 + r >= p.expert_rows) return;
  const int64_t i = row0 + r;
  float a = 0.0f;
  for (int j = 0; j < k; ++j) {
    if (__ldg(slot + j) < 0) continue;
    float v = s_d[j][r];
    if (bd) v += __ldg(bd + static_cast<int64_t>(route_id(route, 0, k, j)) * bd_stride + i);
    a = fmaf(__ldg(route + j), v, a);
  }
  y[i] = residual != nullptr ? __ldg(residual + i) + a : a;
}

// ------------------------------------------- grouped matmul, tensor cores

// The same grouped matmul with the int8 tensor cores (mma.m16n8k32, MMQ's
// per-type fragment decode, mmq_impl.cuh Tr<T>): a CTA of 4 warps takes 64
// rows of one expert and one tile of up to kMmaBN columns; per 256-element
// chunk it copies the rows' raw block bytes (gate and up together for R = 2)
// and the columns' int8 codes with their (d, s) into shared memory, and each
// warp multiplies its 16 rows by all the columns. Each block's integer dot
// is exact and is folded as the CPU folds it (fma(float(I), f * d_a, acc),
// the min as fma(m, s_a, acc), Q6_K per 16 elements), in another order
// across blocks: MMVQ's bound.
namespace mma {

// MXFP4 in the kernel's shared-memory chunk: the 8 blocks' 16 code bytes
// (the registry's split layout keeps them contiguous, so the generic copy
// takes them), then their 8 exponents at byte 128 (copied apart: they sit
// after all of the row's codes), then 8 bytes of pad (a stride of 9 x 16
// bytes, odd, as Geometry's). The interface is mmq_impl.cuh Tr<T>'s: frag
// gives the doubled E2M1 values as int8 (|v| <= 12: the integer dot is
// exact), table the block scale 2^(e - 128) (Mxfp4Unit::scales); no min.
struct MxTr {
  static constexpr int kCB = 8 * kMxfp4CodeBytes;
  static constexpr int kWS = kCB + 16;
  static constexpr int kExpOffset = kCB;
  static constexpr bool kMin = false, kSplit = false;
  __device__ __forceinline__ static float2 table(const uint8_t* row, int kb) {
    qdev::UnitScales sc;
    Mxfp4Unit::Raw r;
    r.e = row[kExpOffset + kb];
    Mxfp4Unit::scales(r, 0, &sc);
    return make_float2(sc.f[0][0], 0.0f);
  }
  __device__ __forceinline__ static void frag(const uint8_t* row, int kb, int t, uint32_t* lo,
                                              uint32_t* hi) {
    const uint32_t q = *reinterpret_cast<const uint32_t*>(row + kMxfp4CodeBytes * kb + 4 * t);
    *lo = Mxfp4Unit::lut(mmq::nib_lo(q));
    *hi = Mxfp4Unit::lut(mmq::nib_hi(q));
  }
};
template <GgmlType T>
struct MmaTr {
  using type = mmq::Tr<T>;
};
template <>
struct MmaTr<GgmlType::kMXFP4> {
  using type = MxTr;
};

constexpr int kThreads = 128;
constexpr int kBM = 64;
constexpr int kKB = mmq::kKB;  // activation blocks per 256-element chunk
constexpr int kAS = mmq::kAS;  // shared bytes per column of codes

struct Params {
  const uint8_t* w;
  const uint8_t* up;
  int64_t row_bytes;
  int64_t expert_rows;
  int nb;
  int n_chunks;
  int src_cb;  // bytes of a 256-element chunk of a row
  const BlockQ8A* q;
  const int32_t* act_map;
  int act_div;
  const int4* tiles;
  const int32_t* n_tiles;
  float* y;
  float* y2;
  int64_t y_stride;
  MoeActArgs act;  // kMoeSwiGlu's epilogue
};

// The kernel is pipelined: chunks go through two dynamic shared-memory
// stages (cp.async), chunk c + 1's copies in flight while chunk c is
// multiplied, and a tile copies and multiplies only its n8 column tiles that
// hold columns (at B = 64 an expert gets ~4 tokens, so three of a 32-column
// tile's four n8 tiles would be empty work). Its first form loaded, waited,
// then multiplied every column tile, and streamed a 30B-A3B batch's experts
// at ~0.6 TB/s of the H100's 3.35; the two gave the same bits, and this one
// ran the 30B-A3B's B = 16 / 64 decode 1.48x / 1.46x faster (H100,
// docs/benchmarks.md, eighteenth session), so the first form is gone.
// One pipeline stage in dynamic shared memory: R matrices' kBM rows of the
// chunk's block bytes (stride kWS), the columns' int8 codes (stride kAS),
// then (d, s) per activation block and column, [kKB][kMoeMmaTileTokens].
template <GgmlType T, int R>
struct Stage {
  using X = typename MmaTr<T>::type;
  static constexpr int kW = kBM * X::kWS;
  static constexpr int kA = kMoeMmaTileTokens * kAS;
  static constexpr int kDS = kKB * kMoeMmaTileTokens * 8;
  static constexpr int kBytes = R * kW + kA + kDS;
  static_assert(kW % 16 == 0 && kA % 16 == 0, "16-byte aligned parts");
};

// 8 bytes global -> shared through L1 (.ca: the activations are re-read by
// the other row blocks of the tile); src_bytes 0 zero-fills.
__device__ __forceinline__ void cp_async8(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes)
               : "memory");
}

template <GgmlType T, int kMode>
__global__ void __launch_bounds__(kThreads) moe_mma_pipe_kernel(const Params p) {
  pdl_enter();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using X = typename MmaTr<T>::type;
  constexpr bool kMx = T == GgmlType::kMXFP4;
  constexpr int R = kMode == kMoePlain ? 1 : 2;
  using S = Stage<T, R>;
  constexpr int kWS = X::kWS;
  constexpr int kPieces = X::kCB / 16;
  constexpr int kNT = kMoeMmaTileTokens / 8;  // n8 tiles
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int s_arow[kMoeMmaTileTokens];
  if (static_cast<int>(blockIdx.y) >= __ldg(p.n_tiles)) return;
  const int4 td = p.tiles[blockIdx.y];
  const int e = td.x, c0 = td.y, nc = td.z;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kBM;
  // The n8 tiles that hold columns (a decode batch's tile holds a few).
  const int n_act = (nc + 7) >> 3;
  const int n_cols = n_act * 8;
  if (tid < kMoeMmaTileTokens) {
    const int col = c0 + min(tid, nc - 1);
    s_arow[tid] = p.act_map ? __ldg(p.act_map + col) / p.act_div : col;
  }
  __syncthreads();  // s_arow, before the first copies read it

  // Issues chunk c's copies into stage `st`.
  auto issue = [&](int c, int st) {
    uint8_t* base = smem + st * S::kBytes;
    // Weights: R x 64 rows x the chunk's 16-byte pieces; pieces past the
    // row's bytes (a short last chunk) are zero-filled and never read.
    for (int i = tid; i < R * kBM * kPieces; i += kThreads) {
      const int which = i / (kBM * kPieces);
      const int rem = i - which * kBM * kPieces;
      const int row = rem / kPieces, piece = rem - row * kPieces;
      const int64_t rr = r0 + row < p.expert_rows ? r0 + row : p.expert_rows - 1;
      const int64_t off = static_cast<int64_t>(c) * p.src_cb + piece * 16;
      const bool in = off + 16 <= p.row_bytes;
      const uint8_t* src = (R == 2 && which ? p.up : p.w) +
                           (static_cast<int64_t>(e) * p.expert_rows + rr) * p.row_bytes +
                           (in ? off : 0);
      cp_async16(smem_addr(base + which * S::kW + row * kWS + piece * 16), src, in ? 16 : 0);
    }
    if constexpr (kMx) {
      // The chunk's exponents: 8 bytes at nb * 16 + c * 8 of the row (8-byte
      // aligned), byte by byte in a short last chunk, whose 8 bytes could
      // pass the row's end (plain stores: the barrier before this stage's
      // multiply orders them as it does the copies).
      for (int i = tid; i < R * kBM; i += kThreads) {
        const int which = i / kBM, row = i - which * kBM;
        const int64_t rr = r0 + row < p.expert_rows ? r0 + row : p.expert_rows - 1;
        const uint8_t* ex = (R == 2 && which ? p.up : p.w) +
                            (static_cast<int64_t>(e) * p.expert_rows + rr) * p.row_bytes +
                            static_cast<int64_t>(p.nb) * kMxfp4CodeBytes + c * kKB;
        uint8_t* dst = base + which * S::kW + row * kWS + MxTr::kExpOffset;
        if (c * kKB + kKB <= p.nb) {
          cp_async8(smem_addr(dst), ex, 8);
        } else {
          uint32_t b[kKB];
#pragma unroll
          for (int j = 0; j < kKB; ++j) b[j] = c * kKB + j < p.nb ? __ldg(ex + j) : 0u;
          *reinterpret_cast<uint2*>(dst) = make_uint2(b[0] | b[1] << 8 | b[2] << 16 | b[3] << 24,
                                                      b[4] | b[5] << 8 | b[6] << 16 | b[7] << 24);
        }
      }
    }
    // Activations: the columns' blocks of this chunk, (d, s) and codes.
    int8_t* sa = reinterpret_cast<int8_t*>(base + R * S::kW);
    float2* sds = reinterpret_cast<float2*>(base + R * S::kW + S::kA);
    for (int i = tid; i < n_cols * kKB * 5; i += kThreads) {
      const int col = i / (kKB * 5);
      const int rem = i - col * kKB * 5;
      const int kb = rem / 5, part = rem - kb * 5;
      const int ab = c * kKB + kb;
      const bool in = ab < p.nb;
      const int2* src = reinterpret_cast<const int2*>(
                            p.q + static_cast<int64_t>(s_arow[col]) * p.nb + (in ? ab : 0)) +
                        part;
      void* dst = part == 0 ? static_cast<void*>(sds + kb * kMoeMmaTileTokens + col)
                            : static_cast<void*>(sa + col * kAS + kb * 32 + (part - 1) * 8);
      cp_async8(smem_addr(dst), src, in ? 8 : 0);
    }
  };

  float acc[R][kNT][4];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int n = 0; n < kNT; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[r][n][i] = 0.0f;
    }
  }
  issue(0, 0);
  cp_async_commit();
  for (int c = 0; c < p.n_chunks; ++c) {
    // Stage (c + 1) & 1 was last read in iteration c - 1, which ended with
    // a barrier.
    if (c + 1 < p.n_chunks) issue(c + 1, (c + 1) & 1);
    cp_async_commit();
    cp_async_wait<1>();  // chunk c's group has landed (this thread's copies)
    __syncthreads();     // ... and every thread's
    const uint8_t* base = smem + (c & 1) * S::kBytes;
    const int8_t* sa = reinterpret_cast<const int8_t*>(base + R * S::kW);
    const float2* sds = reinterpret_cast<const float2*>(base + R * S::kW + S::kA);
    const int kb_end = min(kKB, p.nb - c * kKB);
    for (int kb = 0; kb < kb_end; ++kb) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint8_t* rg = base + r * S::kW + (warp * 16 + g) * kWS;
        const uint8_t* rg8 = rg + 8 * kWS;
        uint32_t a[4];
        X::frag(rg, kb, t, &a[0], &a[2]);
        X::frag(rg8, kb, t, &a[1], &a[3]);
        const float2 f0 = X::table(rg, kb), f8 = X::table(rg8, kb);
#pragma unroll
        for (int n = 0; n < kNT; ++n) {
          if (n >= n_act) break;  // uniform over the CTA
          const int8_t* bc = sa + (n * 8 + g) * kAS + kb * 32;
          const uint32_t b0 = *reinterpret_cast<const uint32_t*>(bc + 4 * t);
          const uint32_t b1 = *reinterpret_cast<const uint32_t*>(bc + 16 + 4 * t);
          const int col0 = n * 8 + 2 * t;
          const float2 ds0 = sds[kb * kMoeMmaTileTokens + col0];
          const float2 ds1 = sds[kb * kMoeMmaTileTokens + col0 + 1];
          // (row, column) of C element i: (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1).
          const float dd[4] = {ds0.x, ds1.x, ds0.x, ds1.x};
          if constexpr (X::kSplit) {
            int lo[4], hi[4];
            mmq::mma_k16(lo, a[0], a[1], b0);
            mmq::mma_k16(hi, a[2], a[3], b1);
            const float fl[4] = {f0.x, f0.x, f8.x, f8.x}, fh[4] = {f0.y, f0.y, f8.y, f8.y};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              float v = fmaf(mmq::exact_i2f(lo[i]), fl[i] * dd[i], acc[r][n][i]);
              acc[r][n][i] = fmaf(mmq::exact_i2f(hi[i]), fh[i] * dd[i], v);
            }
          } else {
            int I[4];
            mmq::mma_k32(I, a, b0, b1);
            const float ff[4] = {f0.x, f0.x, f8.x, f8.x};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              float v = fmaf(mmq::exact_i2f(I[i]), ff[i] * dd[i], acc[r][n][i]);
              if constexpr (X::kMin) {
                const float mm = i < 2 ? f0.y : f8.y;
                v = fmaf(mm, i & 1 ? ds1.y : ds0.y, v);
              }
              acc[r][n][i] = v;
            }
          }
        }
      }
    }
    __syncthreads();  // this stage is consumed before it is refilled
  }
#pragma unroll
  for (int n = 0; n < kNT; ++n) {
    if (n >= n_act) break;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int col = n * 8 + 2 * t + (i & 1);
      const int64_t row = r0 + warp * 16 + g + (i >> 1) * 8;
      if (col >= nc || row >= p.expert_rows) continue;
      const int64_t o = static_cast<int64_t>(c0 + col) * p.y_stride + row;
      if constexpr (kMode == kMoeSwiGlu) {
        p.y[o] = MoeActOf(p.act, e, row, acc[0][n][i], acc[R - 1][n][i]);
      } else if constexpr (kMode == kMoePair) {
        p.y[o] = acc[0][n][i];
        p.y2[o] = acc[R - 1][n][i];
      } else {
        p.y[o] = acc[0][n][i];
      }
    }
  }
#endif
}

// Opts the kernel into its dynamic shared memory (two stages)
// once per device.
template <GgmlType T, int kMode>
cudaError_t Launch1(const Params& p, dim3 grid, cudaStream_t st) {
  constexpr int kBytes = Stage<T, kMode == kMoePlain ? 1 : 2>::kBytes;
  static PerDevice<cudaError_t> opt_in;
  const cudaError_t err = opt_in.Get([](int) {
    const cudaError_t e = cudaFuncSetAttribute(
        moe_mma_pipe_kernel<T, kMode>, cudaFuncAttributeMaxDynamicSharedMemorySize, 2 * kBytes);
    if (e != cudaSuccess) (void)cudaGetLastError();  // not sticky: clear it
    return e;
  });
  if (err != cudaSuccess) return cudaErrorNotSupported;
  LaunchGrid(moe_mma_pipe_kernel<T, kMode>, grid, kThreads, 2 * kBytes, st, p);
  return cudaGetLastError();
}

template <GgmlType T>
cudaError_t LaunchMode(const Params& p, int mode, dim3 grid, cudaStream_t st) {
  switch (mode) {
    case kMoePlain: return Launch1<T, kMoePlain>(p, grid, st);
    case kMoeSwiGlu: return Launch1<T, kMoeSwiGlu>(p, grid, st);
    case kMoePair: return Launch1<T, kMoePair>(p, grid, st);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace mma

// ------------------------------------------------------ activation, combine

__global__ void moe_bias_act_kernel(float* __restrict__ g, const float* __restrict__ u,
                                    const float* __restrict__ route,
                                    const int32_t* __restrict__ order, int k, int64_t total,
                                    int64_t f, const MoeActArgs m) {
  pdl_enter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t c = i / f, x = i - c * f;
  int32_t e = 0;  // the column's expert, read only for its biases
  if (m.bg || m.bu) {
    const int32_t a = __ldg(order + c);
    e = route_id(route, a / k, k, a % k);
  }
  g[i] = MoeActOf(m, e, x, g[i], u[i]);
}

__global__ void moe_combine_kernel(const float* __restrict__ d, const float* __restrict__ route,
                                   const int32_t* __restrict__ slot, const float* __restrict__ bd,
                                   int64_t bd_stride, int k, int64_t n,
                                   const float* __restrict__ residual, float* __restrict__ y) {
  pdl_enter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t t = blockIdx.y;
  if (i >= n) return;
  float acc = 0.0f;
  for (int j = 0; j < k; ++j) {
    const int32_t c = __ldg(slot + t * k + j);
    if (c < 0) continue;
    float v = __ldg(d + static_cast<int64_t>(c) * n + i);
    if (bd) v += __ldg(bd + static_cast<int64_t>(route_id(route, t, k, j)) * bd_stride + i);
    acc = fmaf(__ldg(route + t * 2 * k + j), v, acc);
  }
  y[t * n + i] = residual != nullptr ? __ldg(residual + t * n + i) + acc : acc;
}

}  // namespace

namespace {

constexpr bool IsKQuant(GgmlType t) {
  return t == GgmlType::kQ4_K || t == GgmlType::kQ5_K || t == GgmlType::kQ6_K;
}

// The arguments both grouped matmuls take (moe.h MoeMatmulArgs), the
// weight type aside: shapes, the registry's layout (16-byte rows, Q6_K
// padded), a matching up weight for the two-weight modes, the pointers.
// The expert weight w and the activations q, as every grouped matmul reads
// them.
cudaError_t CheckExpertWeight(const MoeMatmulArgs& a) {
  const GgmlType type = a.w.type;
  if (a.expert_rows < 1 || a.n_expert < 1 || a.w.rows != a.expert_rows * a.n_expert ||
      a.w.k < 1 || a.w.k % (IsKQuant(type) ? 256 : 32) != 0 || !a.w.data || !a.q) {
    return cudaErrorInvalidValue;
  }
  if (a.w.row_bytes % 16 != 0 || reinterpret_cast<uintptr_t>(a.w.data) % 16 != 0 ||
      (type == GgmlType::kQ6_K && !a.w.q6k_padded)) {
    return cudaErrorInvalidValue;  // the registry's layout (types.h) is required
  }
  return cudaSuccess;
}

cudaError_t CheckMatmulArgs(const MoeMatmulArgs& a) {
  const GgmlType type = a.w.type;
  if (const cudaError_t e = CheckExpertWeight(a); e != cudaSuccess) return e;
  const bool two = a.mode == kMoeSwiGlu || a.mode == kMoePair;
  if (two && (a.up.type != type || a.up.k != a.w.k || a.up.rows != a.w.rows ||
              a.up.row_bytes != a.w.row_bytes || a.up.q6k_padded != a.w.q6k_padded ||
              reinterpret_cast<uintptr_t>(a.up.data) % 16 != 0)) {
    return cudaErrorInvalidValue;
  }
  if ((a.mode == kMoePair && !a.y2) || !a.tiles || !a.n_tiles || !a.y ||
      a.y_stride < a.expert_rows || a.act_div < 1 || a.max_tiles < 0 || a.max_tiles > 65535) {
    return cudaErrorInvalidValue;
  }
  if ((a.act != 0 && a.act != 1) ||
      ((a.act_bg || a.act_bu || a.act != 0) && a.mode != kMoeSwiGlu) ||
      ((a.act_bg || a.act_bu) && a.b_stride < a.expert_rows)) {
    return cudaErrorInvalidValue;
  }
  if (a.q_out != nullptr &&
      (a.mode != kMoeSwiGlu || !a.tile_done || a.expert_rows % 32 != 0 ||
       a.y_stride != a.expert_rows || reinterpret_cast<uintptr_t>(a.y) % 16 != 0)) {
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

}  // namespace

int MoeTileTokens(int64_t nt) { return nt <= 1 ? 1 : nt <= 2 ? 2 : nt <= 4 ? 4 : 8; }

int64_t MoeMaxTiles(int64_t nt, int k, int n_expert, int tile_tokens) {
  const int64_t a = nt * k;
  const int64_t tt = tile_tokens;
  return (a + tt - 1) / tt + (n_expert < a ? n_expert : a);
}

bool MoeMmaSupports(GgmlType t) { return MmqSupports(t) || t == GgmlType::kMXFP4; }

cudaError_t LaunchMoeMatmulMma(const MoeMatmulArgs& a, cudaStream_t stream) {
  const GgmlType type = a.w.type;
  if (!MoeMmaSupports(type) || a.tile_tokens != kMoeMmaTileTokens || a.q_out != nullptr) {
    return cudaErrorInvalidValue;
  }
  int dev = 0, major = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  if (err != cudaSuccess) return err;
  if (major < 8) return cudaErrorNotSupported;
  if (const cudaError_t e = CheckMatmulArgs(a); e != cudaSuccess) return e;
  if (a.max_tiles == 0) return cudaSuccess;
  const bool kquant = IsKQuant(type);
  const bool two = a.mode == kMoeSwiGlu || a.mode == kMoePair;
  mma::Params p;
  p.w = static_cast<const uint8_t*>(a.w.data);
  p.up = two ? static_cast<const uint8_t*>(a.up.data) : nullptr;
  p.row_bytes = a.w.row_bytes;
  p.expert_rows = a.expert_rows;
  p.nb = static_cast<int>(a.w.k / 32);
  p.n_chunks = (p.nb + mma::kKB - 1) / mma::kKB;
  // A chunk is 8 blocks of 32 (legacy) or one super-block of 256: the
  // registry's device block bytes times that.
  // MXFP4: the 8 blocks' codes (the exponents are copied apart).
  p.src_cb = type == GgmlType::kMXFP4
                 ? mma::MxTr::kCB
                 : static_cast<int>(DeviceBlockBytes(type, a.w.q6k_padded) * (kquant ? 1 : 8));
  p.q = a.q;
  p.act_map = a.act_map;
  p.act_div = a.act_div;
  p.tiles = a.tiles;
  p.n_tiles = a.n_tiles;
  p.y = a.y;
  p.y2 = a.y2;
  p.y_stride = a.y_stride;
  p.act = ActArgsOf(a);
  const dim3 grid(static_cast<unsigned>((a.expert_rows + mma::kBM - 1) / mma::kBM),
                  static_cast<unsigned>(a.max_tiles));
  switch (type) {
    case GgmlType::kQ4_0: return mma::LaunchMode<GgmlType::kQ4_0>(p, a.mode, grid, stream);
    case GgmlType::kQ4_1: return mma::LaunchMode<GgmlType::kQ4_1>(p, a.mode, grid, stream);
    case GgmlType::kQ5_0: return mma::LaunchMode<GgmlType::kQ5_0>(p, a.mode, grid, stream);
    case GgmlType::kQ5_1: return mma::LaunchMode<GgmlType::kQ5_1>(p, a.mode, grid, stream);
    case GgmlType::kQ8_0: return mma::LaunchMode<GgmlType::kQ8_0>(p, a.mode, grid, stream);
    case GgmlType::kQ4_K: return mma::LaunchMode<GgmlType::kQ4_K>(p, a.mode, grid, stream);
    case GgmlType::kQ5_K: return mma::LaunchMode<GgmlType::kQ5_K>(p, a.mode, grid, stream);
    case GgmlType::kQ6_K: return mma::LaunchMode<GgmlType::kQ6_K>(p, a.mode, grid, stream);
    case GgmlType::kMXFP4: return mma::LaunchMode<GgmlType::kMXFP4>(p, a.mode, grid, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t LaunchMoeRoute(const float* logits, int64_t nt, const MoeRouteArgs& a, float* out,
                           cudaStream_t stream) {
  if (nt < 0 || a.n_expert < 1 || a.n_expert > kMoeMaxExperts || a.k < 1 || a.k > a.n_expert ||
      a.k > kMoeMaxUsed || (a.gating != 0 && a.gating != 1)) {
    return cudaErrorInvalidValue;
  }
  if (nt == 0) return cudaSuccess;
  if (!logits || !out) return cudaErrorInvalidValue;
  const int64_t grid = (nt + kWarps - 1) / kWarps;
  if (grid > 0x7FFFFFFF) return cudaErrorInvalidValue;
  LaunchGrid(moe_route_kernel, static_cast<unsigned>(grid), kThreads, 0, stream, logits, nt, a,
             out);
  return cudaGetLastError();
}

cudaError_t LaunchMoeRouteGroup(const float* logits, int64_t nt, const MoeRouteArgs& a,
                                float* out, int tile_tokens, const MoeGroups& g,
                                int32_t* error_flag, cudaStream_t stream) {
  if (nt < 1 || nt > kMoeRouteGroupMaxTokens || a.n_expert < 1 || a.n_expert > kMoeMaxExperts ||
      a.k < 1 || a.k > a.n_expert || a.k > kMoeMaxUsed || (a.gating != 0 && a.gating != 1) ||
      tile_tokens < 1 || tile_tokens > kMoeMmaTileTokens) {
    return cudaErrorInvalidValue;
  }
  if (!logits || !out || !g.order || !g.slot || !g.tiles || !g.n_tiles) {
    return cudaErrorInvalidValue;
  }
  LaunchGrid(moe_route_group_kernel, 1, kThreads, 0, stream, logits, static_cast<int>(nt), a, out,
             tile_tokens, g, error_flag);
  return cudaGetLastError();
}

cudaError_t LaunchMoeGroup(const float* route, int64_t nt, int k, int n_expert, int tile_tokens,
                           const MoeGroups& g, int32_t* error_flag, cudaStream_t stream) {
  if (nt < 1 || k < 1 || k > kMoeMaxUsed || n_expert < 1 || n_expert > kMoeMaxExperts ||
      nt * k > 0x7FFFFFFF || tile_tokens < 1 || tile_tokens > kMoeMmaTileTokens) {
    return cudaErrorInvalidValue;
  }
  if (!route || !g.order || !g.slot || !g.tiles || !g.n_tiles) return cudaErrorInvalidValue;
  LaunchGrid(moe_group_kernel, 1, kThreads, 0, stream, route, nt, k, n_expert, tile_tokens, g,
             error_flag);
  return cudaGetLastError();
}

// The CUDA-core kernel's parameters for `a` (its lanes per row from the
// row length: at least 4, a multiple of the K-quants' 4 units per block).
KParams MakeKParams(const MoeMatmulArgs& a) {
  const GgmlType type = a.w.type;
  const bool kquant = IsKQuant(type);
  const bool two = a.mode == kMoeSwiGlu || a.mode == kMoePair;
  const int units_per_row = static_cast<int>(a.w.k / (kquant ? 64 : 32));
  int lanes_log2 = 2;
  while (lanes_log2 < 5 && (1 << lanes_log2) < units_per_row) ++lanes_log2;
  KParams p;
  p.w = static_cast<const uint8_t*>(a.w.data);
  p.up = two ? static_cast<const uint8_t*>(a.up.data) : nullptr;
  p.row_bytes = a.w.row_bytes;
  p.expert_rows = a.expert_rows;
  p.nb = static_cast<int>(a.w.k / 32);
  p.block_bytes = type == GgmlType::kMXFP4 ? kMxfp4CodeBytes
                                           : static_cast<int>(DeviceBlockBytes(type, a.w.q6k_padded));
  p.q = a.q;
  p.act_map = a.act_map;
  p.act_div = a.act_div;
  p.tiles = a.tiles;
  p.n_tiles = a.n_tiles;
  p.y = a.y;
  p.y2 = a.y2;
  p.y_stride = a.y_stride;
  p.q_out = a.q_out;
  p.tile_done = a.tile_done;
  p.act = ActArgsOf(a);
  p.lanes_log2 = lanes_log2;
  p.group_iters = 1;
  p.n_groups = 0;
  return p;
}

cudaError_t LaunchMoeMatmul(const MoeMatmulArgs& a, cudaStream_t stream) {
  const GgmlType type = a.w.type;
  if (!MoeTypeSupported(type)) return cudaErrorInvalidValue;
  if (const cudaError_t e = CheckMatmulArgs(a); e != cudaSuccess) return e;
  if (a.max_tiles == 0) return cudaSuccess;
  KParams p = MakeKParams(a);
  const int lanes_log2 = p.lanes_log2;
  // Row groups per CTA: enough CTAs to fill the GPU (about 1,024 over the
  // tiles), then as many groups each as keeps that, so a tile's staged
  // activations serve many rows (at most 16 groups).
  const int64_t rows_per_group = static_cast<int64_t>(kWarps) * (32 >> lanes_log2);
  p.n_groups = (a.expert_rows + rows_per_group - 1) / rows_per_group;
  int64_t iters = p.n_groups * a.max_tiles / 1024;
  iters = iters < 1 ? 1 : iters > 16 ? 16 : iters;
  p.group_iters = static_cast<int>(iters);
  const dim3 grid(static_cast<unsigned>((p.n_groups + iters - 1) / iters),
                  static_cast<unsigned>(a.max_tiles));
  const int nt = a.tile_tokens;
  switch (type) {
    case GgmlType::kQ4_0: return LaunchTokens<GgmlType::kQ4_0>(p, nt, a.mode, grid, stream);
    case GgmlType::kQ4_1: return LaunchTokens<GgmlType::kQ4_1>(p, nt, a.mode, grid, stream);
    case GgmlType::kQ5_0: return LaunchTokens<GgmlType::kQ5_0>(p, nt, a.mode, grid, stream);
    case GgmlType::kQ5_1: return LaunchTokens<GgmlType::kQ5_1>(p, nt, a.mode, grid, stream);
    case GgmlType::kQ8_0: return LaunchTokens<GgmlType::kQ8_0>(p, nt, a.mode, grid, stream);
    case GgmlType::kQ4_K: return LaunchTokens<GgmlType::kQ4_K>(p, nt, a.mode, grid, stream);
    case GgmlType::kQ5_K: return LaunchTokens<GgmlType::kQ5_K>(p, nt, a.mode, grid, stream);
    case GgmlType::kQ6_K: return LaunchTokens<GgmlType::kQ6_K>(p, nt, a.mode, grid, stream);
    case GgmlType::kMXFP4: return LaunchTokens<GgmlType::kMXFP4>(p, nt, a.mode, grid, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t LaunchMoeDownCombine(const MoeMatmulArgs& a, const float* route, const int32_t* slot,
                                 const float* bd, int64_t bd_stride, int k,
                                 const float* residual, float* y, cudaStream_t stream) {
  const GgmlType type = a.w.type;
  if (!MoeTypeSupported(type) || a.mode != kMoePlain || a.act_map != nullptr) {
    return cudaErrorInvalidValue;
  }
  if (const cudaError_t e = CheckExpertWeight(a); e != cudaSuccess) return e;
  if (k < 1 || k > kMoeMaxUsed || !route || !slot || !y || (bd && bd_stride < a.expert_rows)) {
    return cudaErrorInvalidValue;
  }
  MoeMatmulArgs plain = a;
  plain.up = WeightView{};
  const KParams p = MakeKParams(plain);
  const int64_t rows = 32 >> p.lanes_log2;
  const int64_t ctas = (a.expert_rows + rows - 1) / rows;
  if (ctas > 0x7FFFFFFF) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(ctas));
  auto go = [&](auto kernel) {
    LaunchGrid(kernel, grid, kThreads, 0, stream, p, route, slot, bd, bd_stride, k, residual, y);
    return cudaGetLastError();
  };
  switch (type) {
    case GgmlType::kQ4_0: return go(moe_down_combine_kernel<GgmlType::kQ4_0>);
    case GgmlType::kQ4_1: return go(moe_down_combine_kernel<GgmlType::kQ4_1>);
    case GgmlType::kQ5_0: return go(moe_down_combine_kernel<GgmlType::kQ5_0>);
    case GgmlType::kQ5_1: return go(moe_down_combine_kernel<GgmlType::kQ5_1>);
    case GgmlType::kQ8_0: return go(moe_down_combine_kernel<GgmlType::kQ8_0>);
    case GgmlType::kQ4_K: return go(moe_down_combine_kernel<GgmlType::kQ4_K>);
    case GgmlType::kQ5_K: return go(moe_down_combine_kernel<GgmlType::kQ5_K>);
    case GgmlType::kQ6_K: return go(moe_down_combine_kernel<GgmlType::kQ6_K>);
    case GgmlType::kMXFP4: return go(moe_down_combine_kernel<GgmlType::kMXFP4>);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t LaunchMoeBiasAct(float* g, const float* u, const float* bg, const float* bu,
                             const float* route, const int32_t* order, int k, int64_t a_count,
                             int64_t f, int64_t b_stride, int act, float alpha, float limit,
                             cudaStream_t stream) {
  if (a_count < 0 || f < 1 || k < 1 || (act != 0 && act != 1) || ((bg || bu) && b_stride < f)) {
    return cudaErrorInvalidValue;
  }
  const int64_t total = a_count * f;
  if (total == 0) return cudaSuccess;
  if (!g || !u || ((bg || bu) && (!route || !order))) return cudaErrorInvalidValue;
  const int64_t grid = (total + kThreads - 1) / kThreads;
  if (grid > 0x7FFFFFFF) return cudaErrorInvalidValue;
  MoeActArgs m;
  m.bg = bg;
  m.bu = bu;
  m.b_stride = b_stride;
  m.act = act;
  m.alpha = alpha;
  m.limit = limit;
  LaunchGrid(moe_bias_act_kernel, static_cast<unsigned>(grid), kThreads, 0, stream, g, u, route,
             order, k, total, f, m);
  return cudaGetLastError();
}

cudaError_t LaunchMoeCombine(const float* d, const float* route, const int32_t* slot,
                             const float* bd, int64_t bd_stride, int64_t nt, int k, int64_t n,
                             const float* residual, float* y, cudaStream_t stream) {
  if (nt < 0 || n < 1 || k < 1 || nt > 65535 || (bd && bd_stride < n)) return cudaErrorInvalidValue;
  if (nt == 0) return cudaSuccess;
  if (!d || !route || !slot || !y) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((n + kThreads - 1) / kThreads), static_cast<unsigned>(nt));
  LaunchGrid(moe_combine_kernel, grid, kThreads, 0, stream, d, route, slot, bd, bd_stride, k, n,
             residual, y);
  return cudaGetLastError();
}

}  // namespace minfer::cuda
