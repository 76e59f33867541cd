// Split-KV decode attention (docs/design.md, attention): one query token at position
// pos[0] attends to cache rows [0, pos[0]]. The KV range is cut into
// n_splits (kAttnSplits = 32) stripes; each stripe's partial attention
// (running max, running sum, head_dim accumulators) goes to a slab
// partial[split][head][pstr], and a combine merges the stripes: a kernel of
// its own, or (AttnDecodeConfig::counters) the block that finishes a head's
// last stripe, counted with an atomic per (token, head), so a decode
// attention is one launch instead of two. Grids are static: the context
// length is read on the device from pos[0], so a captured launch stays valid
// at any later length.
//
// Two bodies write the same partials; both are launched and each checks the
// device-side length against `long_min_rows` and returns if it is not its
// turn:
//  * one-warp body: grid (n_splits, n_head), one warp per block,
//    lane i owns head dims 4i..4i+3, the warp walks its stripe 4 rows at a
//    time. Best when stripes are short: every block finishes in a few steps.
//  * GQA body (long contexts): grid (n_splits, n_head / NG), 8 warps per
//    block. A block serves NG query heads that share one KV head (NG = the
//    largest divisor of the GQA ratio up to 8), so each K/V row is read once
//    for all of them instead of once per head (7x fewer loads and L2 reads on
//    Qwen2.5-7B), and the 8 warps split the stripe, merging in shared memory.
//    At 4,096 rows this keeps 8 warps per SM with a K/V quad in flight each,
//    where the one-warp body has ~7 single warps per SM walking 128 rows
//    serially.
//
// The step (both bodies; attn_warp_rows): a warp stages K and V of 4 rows in
// registers (and prefetches the next 4 while computing), forms the NG x 4
// per-lane partial dot products, and reduces them across the warp with a
// "transposing" butterfly: at each of the first log2(NP) levels a lane keeps
// half of its values and adds its partner's copy of that half, so 32 values
// cost 31 shuffles instead of 160 and each lane ends with one full score.
// The online softmax then updates once per 4 rows (block-wise max, rescale,
// sum), with each lane computing one exponential; the weights are broadcast
// for the V accumulation.
//
// Scores are kept in log2 units (q is pre-scaled by scale * log2(e)) so the
// exponentials are exp2f; the partial's max is in those units too.
#include <algorithm>
#include <climits>
#include <cstdint>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/ops.h"

namespace minfer::cuda {
namespace {

constexpr float kLog2e = 1.44269504088896340736f;
constexpr int kLongWarps = 8;  // warps per block of the GQA body
constexpr int kMaxGroup = 8;   // largest NG instantiated

struct DecodeArgs {
  const float* q;
  const int32_t* pos;
  const uint8_t* k;
  const uint8_t* v;
  float* partial;
  int64_t n_ctx;
  int64_t row_bytes;
  KvRowGeom geom;  // quantized rows: where the scales are, code load width
  int n_head;
  int group;  // n_head / n_head_kv
  int hd;
  int pstr;  // floats per partial: (4 + hd) rounded up to 4
  int n_splits;
  int long_min;  // rows at which the GQA body takes over
  float qscale;  // scale * log2(e)
  int window;    // AttnParams::window
  // Paged (null tiles: the contiguous single-token form). grid.z walks the
  // tiles; a tile of one token is this kernel's, others exit.
  const int32_t* tiles;   // [n_tiles][4]
  const int32_t* tables;  // [n_rows][max_blocks]
  int max_blocks;
  int block_shift;
  // The combine in the bodies (AttnDecodeConfig::counters): the last
  // stripe of each (token, head or head group) to finish merges the
  // stripes into out. Null: the separate combine kernel does.
  int32_t* counters;  // [n_z][n_head], zero between launches
  float* out;
  const float* sinks;
  BlockQ8A* q8;  // AttnDecodeConfig::q8: token t's row at q8 + t * n_head * hd / 32
};

// The query token of grid.z's tile, its block table and its partials; false
// when the tile is not a single decode token.
struct DecodeToken {
  int64_t t;
  const int32_t* table;
  float* partial;  // this token's [n_splits][n_head][pstr] slab
};
__device__ __forceinline__ bool decode_token(const DecodeArgs& a, DecodeToken* d) {
  if (a.tiles == nullptr) {
    d->t = 0;
    d->table = nullptr;
    d->partial = a.partial;
    return true;
  }
  const int z = blockIdx.z;
  const int4 tile = __ldg(reinterpret_cast<const int4*>(a.tiles) + z);
  if (tile.z != 1) return false;
  d->t = tile.y;
  d->table = a.tables + static_cast<int64_t>(tile.x) * a.max_blocks;
  d->partial = a.partial + static_cast<int64_t>(z) * a.n_splits * a.n_head * a.pstr;
  return true;
}

__device__ __forceinline__ int decode_n_kv(const DecodeArgs& a, const DecodeToken& d) {
  // Clamped so a bad position (flagged by the store) cannot read outside the
  // cache (a paged one: outside the block table).
  const int64_t n = static_cast<int64_t>(__ldg(a.pos + d.t)) + 1;
  const int64_t limit =
      d.table == nullptr ? a.n_ctx : static_cast<int64_t>(a.max_blocks) << a.block_shift;
  return static_cast<int>(n < 0 ? 0 : n > limit ? limit : n);
}

// The first row the token sees: a sliding window starts at n_kv - window.
__device__ __forceinline__ int decode_start(const DecodeArgs& a, int n_kv) {
  return a.window > 0 && n_kv > a.window ? n_kv - a.window : 0;
}

// Stripe sp of the visible rows [kv0, n_kv).
__device__ __forceinline__ void stripe_bounds(int kv0, int n_kv, int n_splits, int sp, int* lo,
                                              int* hi) {
  const int rps = (n_kv - kv0 + n_splits - 1) / n_splits;
  *lo = min(kv0 + sp * rps, n_kv);
  *hi = min(*lo + rps, n_kv);
}

__device__ __forceinline__ float4 load_q(const DecodeArgs& a, const DecodeToken& d, int h, int lane,
                                         bool on) {
  if (!on) return make_float4(0.f, 0.f, 0.f, 0.f);
  const float4 v = reinterpret_cast<const float4*>(
      a.q + (d.t * a.n_head + static_cast<int64_t>(h)) * a.hd)[lane];
  return make_float4(v.x * a.qscale, v.y * a.qscale, v.z * a.qscale, v.w * a.qscale);
}

// Geometry of the per-step reduction for NG heads x 4 rows.
template <int NG>
struct StepLayout {
  static constexpr int kN = 4 * NG;                                           // real values
  static constexpr int kNP = kN <= 4 ? 4 : kN <= 8 ? 8 : kN <= 16 ? 16 : 32;  // padded to 2^L
  static constexpr int kL = kNP == 4 ? 2 : kNP == 8 ? 3 : kNP == 16 ? 4 : 5;
  // After the butterfly, lane l holds value index l >> kSh: value g * 4 + j
  // (head g, row j) lives in lanes [(g*4+j) << kSh, +(1 << kSh)).
  static constexpr int kSh = 5 - kL;
};

// Transposing butterfly, one level per instantiation (a template, so every
// array index is a compile-time constant even where nvcc would not unroll a
// loop nest): the lane whose bit kOff is set keeps the upper kW of its
// values, the other the lower kW, each adding its partner's copy.
template <int kW, int kOff, int kN>
__device__ __forceinline__ void butterfly_halve(float (&p)[kN], int lane) {
  if constexpr (kW >= 1) {
    const uint32_t upper = (lane & kOff) != 0 ? 0xFFFFFFFFu : 0u;
#pragma unroll
    for (int i = 0; i < kW; ++i) {
      const float send = select_bits(upper, p[i], p[i + kW]);
      const float keep = select_bits(upper, p[i + kW], p[i]);
      p[i] = keep + __shfl_xor_sync(kFullWarpMask, send, kOff);
    }
    butterfly_halve<kW / 2, kOff / 2>(p, lane);
  }
}

// Online softmax of NG heads (query vectors q[g], this lane's 4 dims, already
// scaled) over cache rows [lo, hi) of the KV head whose dims this lane reads
// at element `e0` of each row. State: m and S are lane-distributed (a lane
// holds those of head (lane >> kSh) / 4; -inf/0 for padding lanes), acc[g]
// is this lane's 4 dims of head g. All 32 lanes must call with the same
// lo/hi (shuffles); lanes with !on hold zero q and load nothing.
template <KvType KV, int NG>
__device__ __forceinline__ void attn_warp_rows(const DecodeArgs& a, const int32_t* table,
                                               const float4 (&q)[NG], int e0, bool on, int lo,
                                               int hi, float& m, float& S, float4 (&acc)[NG]) {
  using L = StepLayout<NG>;
  const int lane = threadIdx.x & 31;
  const int my_v = lane >> L::kSh;
  const bool my_real = my_v < L::kN;
  const int my_j = my_v & 3;

  KvRaw<KV> kr[4], vr[4];
  auto load_quad = [&](int base) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int row = base + j;
      if (on && row < hi) {
        const int64_t cr = kv_cache_row(table, a.block_shift, row);
        kr[j] = kv_load<KV>(a.k + cr * a.row_bytes, e0, a.geom);
        vr[j] = kv_load<KV>(a.v + cr * a.row_bytes, e0, a.geom);
      } else {
        kr[j] = kv_zero<KV>();
        vr[j] = kv_zero<KV>();
      }
    }
  };
  if (lo < hi) load_quad(lo);

  for (int base = lo; base < hi; base += 4) {  // warp-uniform bounds
    float4 kf[4], vf[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      kf[j] = kv_to_float4<KV>(kr[j]);
      vf[j] = kv_to_float4<KV>(vr[j]);
    }
    // Prefetch the next quad: its loads overlap this step's math.
    if (base + 4 < hi) load_quad(base + 4);
    const int nr = min(4, hi - base);

    // Per-lane partial dots, value index g * 4 + j.
    float p[L::kNP];
#pragma unroll
    for (int g = 0; g < NG; ++g) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        p[g * 4 + j] = q[g].x * kf[j].x + q[g].y * kf[j].y + q[g].z * kf[j].z + q[g].w * kf[j].w;
      }
    }
#pragma unroll
    for (int i = L::kN; i < L::kNP; ++i) p[i] = 0.0f;

    butterfly_halve<L::kNP / 2, 16>(p, lane);
    float s = p[0];
#pragma unroll
    for (int off = 16 >> L::kL; off > 0; off >>= 1) s += __shfl_xor_sync(kFullWarpMask, s, off);
    s = (my_real && my_j < nr) ? s : -INFINITY;

    // Block-wise online softmax over the 4 rows of this lane's head.
    float m4 = fmaxf(s, __shfl_xor_sync(kFullWarpMask, s, 1 << L::kSh));
    m4 = fmaxf(m4, __shfl_xor_sync(kFullWarpMask, m4, 2 << L::kSh));
    const float nmx = fmaxf(m, m4);
    float corr = 1.0f, e = 0.0f;  // padding lanes (nmx = -inf) keep their state
    if (nmx != -INFINITY) {
      corr = exp2f(m - nmx);  // 0 on the first step (m = -inf)
      e = exp2f(s - nmx);     // 0 for rows past the range
    }
    float es = e + __shfl_xor_sync(kFullWarpMask, e, 1 << L::kSh);
    es += __shfl_xor_sync(kFullWarpMask, es, 2 << L::kSh);
    S = S * corr + es;
    m = nmx;

    // Every lane needs every head's weights for its own dims.
#pragma unroll
    for (int g = 0; g < NG; ++g) {
      const float cg = __shfl_sync(kFullWarpMask, corr, (g * 4) << L::kSh);
      float4 o = acc[g];
      o.x *= cg;
      o.y *= cg;
      o.z *= cg;
      o.w *= cg;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float ej = __shfl_sync(kFullWarpMask, e, (g * 4 + j) << L::kSh);
        o.x += ej * vf[j].x;
        o.y += ej * vf[j].y;
        o.z += ej * vf[j].z;
        o.w += ej * vf[j].w;
      }
      acc[g] = o;
    }
  }
}

__device__ __forceinline__ float* partial_at(const DecodeArgs& a, const DecodeToken& d, int sp,
                                            int h) {
  return d.partial + (static_cast<int64_t>(sp) * a.n_head + h) * a.pstr;
}

// Token t's q8 row, or null.
__device__ __forceinline__ BlockQ8A* q8_row(const DecodeArgs& a, int64_t t) {
  return a.q8 != nullptr ? a.q8 + t * ((static_cast<int64_t>(a.n_head) * a.hd) >> 5) : nullptr;
}

// Merges the stripes of head h of one token: gm = max m_sp, w_sp =
// 2^(m_sp - gm), out = sum w_sp acc_sp / sum w_sp S_sp. One warp (all 32
// lanes call); lane sp reads stripe sp's max and sum, lane i owns dims
// 4i..4i+3 of the output. A sink s (log2 units: s_h log2(e)) joins the max
// and adds 2^(s - gm) to the normalizer. partial: the token's slab
// [n_splits][n_head][pstr]; out: the token's [n_head][hd]. The partials are
// read through L2 (__ldcg): in the fused form other blocks of this grid
// wrote them.
__device__ __forceinline__ void combine_head(const float* partial, float* out, int h, int n_head,
                                             int hd, int pstr, int n_splits,
                                             const float* __restrict__ sinks,
                                             BlockQ8A* q8 = nullptr) {
  const int lane = threadIdx.x & 31;
  const int64_t split_stride = static_cast<int64_t>(n_head) * pstr;
  const float* base = partial + static_cast<int64_t>(h) * pstr;
  const bool has = lane < n_splits;
  const float m_sp = has ? __ldcg(base + lane * split_stride) : -INFINITY;
  const float s_sp = has ? __ldcg(base + lane * split_stride + 1) : 0.0f;
  const float s2 = sinks != nullptr ? __ldg(sinks + h) * kLog2e : -INFINITY;
  const float gm = fmaxf(warp_max(m_sp), s2);
  const float wt = (has && gm != -INFINITY) ? exp2f(m_sp - gm) : 0.0f;
  const float s_tot = warp_sum(s_sp * wt) + (sinks != nullptr ? exp2f(s2 - gm) : 0.0f);
  const bool on = lane < (hd >> 2);
  float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int sp = 0; sp < n_splits; ++sp) {
    const float w = __shfl_sync(kFullWarpMask, wt, sp);
    if (on && w != 0.0f) {
      const float4 x = __ldcg(reinterpret_cast<const float4*>(base + sp * split_stride + 4) + lane);
      o.x += w * x.x;
      o.y += w * x.y;
      o.z += w * x.z;
      o.w += w * x.w;
    }
  }
  const float4 r = on && s_tot > 0.0f
                       ? make_float4(o.x / s_tot, o.y / s_tot, o.z / s_tot, o.w / s_tot)
                       : make_float4(0.f, 0.f, 0.f, 0.f);
  if (on) reinterpret_cast<float4*>(out + static_cast<int64_t>(h) * hd)[lane] = r;
  if (q8 != nullptr) {
    // The token's row quantized for the next MMVQ (hd % 32 == 0: a head is
    // whole blocks, block lane / 8 of this head's, 8 lanes a block): the
    // floats just written, by QuantizeRowQ8A's rule. All lanes take part.
    const Q8Group g = QuantizeQ8Group(r);
    if (on) {
      BlockQ8A* b = q8 + static_cast<int64_t>(h) * (hd >> 5) + (lane >> 3);
      reinterpret_cast<uint32_t*>(b->qs)[lane & 7] = g.packed;
      if ((lane & 7) == 0) {
        b->d = g.d;
        b->s = g.s;
      }
    }
  }
}

// The fused combine's hand-off, after a block wrote its stripe's partials:
// true in the block whose stripe completes (token z, slot) — every earlier
// stripe's partials are then visible to it. The count returns to zero for
// the next launch. Every thread of the block calls it.
__device__ __forceinline__ bool last_stripe(const DecodeArgs& a, int slot) {
  __shared__ int s_last;
  __threadfence();  // this block's partials before its count
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t* c = a.counters + static_cast<int64_t>(blockIdx.z) * a.n_head + slot;
    const int done = atomicAdd(c, 1) + 1;
    s_last = done == a.n_splits;
    if (s_last) *c = 0;  // (no other stripe of this launch touches it again)
  }
  __syncthreads();
  if (s_last) __threadfence();  // the other stripes' partials after their counts
  return s_last;
}

// The seed's body: one warp per (stripe, head).
template <KvType KV>
__global__ void __launch_bounds__(32) attn_decode_1w_kernel(DecodeArgs a) {
  pdl_enter();
  DecodeToken d;
  if (!decode_token(a, &d)) return;
  const int n_kv = decode_n_kv(a, d);
  const int kv0 = decode_start(a, n_kv);
  if (n_kv - kv0 >= a.long_min) return;  // the GQA body's turn
  const int sp = blockIdx.x, h = blockIdx.y;
  const int lane = threadIdx.x;
  const bool on = lane < (a.hd >> 2);
  const int hk = h / a.group;
  int lo, hi;
  stripe_bounds(kv0, n_kv, a.n_splits, sp, &lo, &hi);
  const float4 q[1] = {load_q(a, d, h, lane, on)};
  float m = -INFINITY, S = 0.0f;
  float4 acc[1] = {make_float4(0.f, 0.f, 0.f, 0.f)};
  attn_warp_rows<KV, 1>(a, d.table, q, hk * a.hd + 4 * lane, on, lo, hi, m, S, acc);
  float* out = partial_at(a, d, sp, h);
  if (lane == 0) {  // lane 0 holds head 0's state (value index 0)
    out[0] = m;
    out[1] = S;
  }
  if (on) reinterpret_cast<float4*>(out + 4)[lane] = acc[0];
  if (a.counters != nullptr && last_stripe(a, h)) {
    combine_head(d.partial, a.out + d.t * a.n_head * a.hd, h, a.n_head, a.hd, a.pstr, a.n_splits,
                 a.sinks, q8_row(a, d.t));
  }
}

// The GQA body: NG heads of one KV head per block, kLongWarps warps splitting
// the stripe.
template <KvType KV, int NG>
__global__ void __launch_bounds__(32 * kLongWarps) attn_decode_gqa_kernel(DecodeArgs a) {
  pdl_enter();
  using L = StepLayout<NG>;
  __shared__ float sm_m[kLongWarps][NG];
  __shared__ float sm_s[kLongWarps][NG];
  __shared__ float4 sm_acc[kLongWarps][NG][32];
  DecodeToken d;
  if (!decode_token(a, &d)) return;
  const int n_kv = decode_n_kv(a, d);
  const int kv0 = decode_start(a, n_kv);
  if (n_kv - kv0 < a.long_min) return;  // the one-warp body's turn (block-uniform)
  const int sp = blockIdx.x, h0 = blockIdx.y * NG;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const bool on = lane < (a.hd >> 2);
  const int hk = h0 / a.group;  // NG divides group: all NG heads share hk
  int lo, hi;
  stripe_bounds(kv0, n_kv, a.n_splits, sp, &lo, &hi);
  // Whole quads per warp (the last warp with rows may get a partial one).
  const int sub = (hi - lo + 4 * kLongWarps - 1) / (4 * kLongWarps) * 4;
  const int wlo = min(lo + warp * sub, hi);
  const int whi = min(wlo + sub, hi);

  float4 q[NG], acc[NG];
#pragma unroll
  for (int g = 0; g < NG; ++g) {
    q[g] = load_q(a, d, h0 + g, lane, on);
    acc[g] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  float m = -INFINITY, S = 0.0f;
  attn_warp_rows<KV, NG>(a, d.table, q, hk * a.hd + 4 * lane, on, wlo, whi, m, S, acc);

#pragma unroll
  for (int g = 0; g < NG; ++g) {
    if (lane == ((g * 4) << L::kSh)) {
      sm_m[warp][g] = m;
      sm_s[warp][g] = S;
    }
    sm_acc[warp][g][lane] = acc[g];
  }
  __syncthreads();
  // Merge the warps' states exactly like the combine kernel merges stripes.
  for (int idx = threadIdx.x; idx < NG * 32; idx += blockDim.x) {
    const int g = idx >> 5, l = idx & 31;
    float gm = -INFINITY;
#pragma unroll
    for (int w = 0; w < kLongWarps; ++w) gm = fmaxf(gm, sm_m[w][g]);
    float s_tot = 0.0f;
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
    if (gm != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kLongWarps; ++w) {
        const float wt = exp2f(sm_m[w][g] - gm);  // 0 for empty warps
        s_tot += sm_s[w][g] * wt;
        const float4 x = sm_acc[w][g][l];
        o.x += x.x * wt;
        o.y += x.y * wt;
        o.z += x.z * wt;
        o.w += x.w * wt;
      }
    }
    float* out = partial_at(a, d, sp, h0 + g);
    if (l == 0) {
      out[0] = gm;
      out[1] = s_tot;
    }
    if (l < (a.hd >> 2)) reinterpret_cast<float4*>(out + 4)[l] = o;
  }
  // Warp w < NG merges the stripes of head h0 + w (NG <= kLongWarps).
  if (a.counters != nullptr && last_stripe(a, h0) && warp < NG) {
    combine_head(d.partial, a.out + d.t * a.n_head * a.hd, h0 + warp, a.n_head, a.hd, a.pstr,
                 a.n_splits, a.sinks, q8_row(a, d.t));
  }
}

// The combine as its own launch (AttnDecodeConfig::counters null): one
// warp per (head, token).
__global__ void __launch_bounds__(32)
    attn_decode_combine_kernel(const float* __restrict__ partial, float* __restrict__ out,
                               int n_head, int hd, int pstr, int n_splits,
                               const int32_t* __restrict__ tiles,
                               const float* __restrict__ sinks, BlockQ8A* q8) {
  pdl_enter();
  const int h = blockIdx.x;
  const int64_t split_stride = static_cast<int64_t>(n_head) * pstr;
  int64_t t = 0;
  if (tiles != nullptr) {
    const int4 tile = __ldg(reinterpret_cast<const int4*>(tiles) + blockIdx.y);
    if (tile.z != 1) return;
    t = tile.y;
    partial += static_cast<int64_t>(blockIdx.y) * n_splits * split_stride;
    out += t * n_head * hd;
  }
  combine_head(partial, out, h, n_head, hd, pstr, n_splits, sinks,
               q8 != nullptr ? q8 + t * ((static_cast<int64_t>(n_head) * hd) >> 5) : nullptr);
}

int PartialStride(int hd) { return (4 + hd + 3) & ~3; }

template <KvType KV, int NG>
void LaunchGqa(const DecodeArgs& a, int n_head, int n_z, cudaStream_t stream) {
  LaunchGrid(attn_decode_gqa_kernel<KV, NG>, dim3(a.n_splits, n_head / NG, n_z), 32 * kLongWarps, 0,
             stream, a);
}

template <KvType KV>
void LaunchGqaFor(int ng, const DecodeArgs& a, int n_head, int n_z, cudaStream_t stream) {
  switch (ng) {
    case 1:
      return LaunchGqa<KV, 1>(a, n_head, n_z, stream);
    case 2:
      return LaunchGqa<KV, 2>(a, n_head, n_z, stream);
    case 3:
      return LaunchGqa<KV, 3>(a, n_head, n_z, stream);
    case 4:
      return LaunchGqa<KV, 4>(a, n_head, n_z, stream);
    case 5:
      return LaunchGqa<KV, 5>(a, n_head, n_z, stream);
    case 6:
      return LaunchGqa<KV, 6>(a, n_head, n_z, stream);
    case 7:
      return LaunchGqa<KV, 7>(a, n_head, n_z, stream);
    default:
      return LaunchGqa<KV, 8>(a, n_head, n_z, stream);
  }
}

template <KvType KV>
void LaunchBodies(const DecodeArgs& a, int ng, int n_z, cudaStream_t stream) {
  // A body that can never run for this configuration is not launched at all
  // (a static, length-independent decision, so still replay-safe).
  if (a.long_min > 0) {
    LaunchGrid(attn_decode_1w_kernel<KV>, dim3(a.n_splits, a.n_head, n_z), 32, 0, stream, a);
  }
  if (a.long_min != INT_MAX) LaunchGqaFor<KV>(ng, a, a.n_head, n_z, stream);
}

}  // namespace

int64_t AttnDecodePartialFloats(const AttnParams& p) {
  return static_cast<int64_t>(kAttnSplits) * p.n_head * PartialStride(p.head_dim);
}

namespace {

cudaError_t LaunchDecode(const float* q, const int32_t* pos, const void* k_cache,
                         const void* v_cache, float* partial, float* out, const AttnParams& p,
                         const AttnDecodeConfig& cfg, const AttnPaged* pg, cudaStream_t stream) {
  if (p.n_head <= 0 || p.n_head_kv <= 0 || p.n_head % p.n_head_kv != 0 || p.head_dim <= 0 ||
      p.head_dim > 128 || p.head_dim % 4 != 0 || p.n_ctx <= 0 || p.n_ctx >= INT_MAX ||
      cfg.n_splits < 1 || cfg.n_splits > kAttnSplits || cfg.long_min_rows < 0 ||
      (cfg.q8 != nullptr && p.head_dim % 32 != 0)) {
    return cudaErrorInvalidValue;
  }
  if (IsBlockKv(p.kv_type) && p.n_kv_embd() % 32 != 0) return cudaErrorInvalidValue;
  const uintptr_t kv_align = p.kv_type == KvType::kF32 ? 16 : p.kv_type == KvType::kF16 ? 8 : 2;
  if (!AlignedTo(q, 16) || !AlignedTo(partial, 16) || !AlignedTo(out, 16) ||
      !AlignedTo(k_cache, kv_align) || !AlignedTo(v_cache, kv_align)) {
    return cudaErrorMisalignedAddress;
  }
  DecodeArgs a;
  a.q = q;
  a.pos = pos;
  a.k = static_cast<const uint8_t*>(k_cache);
  a.v = static_cast<const uint8_t*>(v_cache);
  a.partial = partial;
  a.n_ctx = p.n_ctx;
  a.row_bytes = KvRowBytes(p.kv_type, p.n_kv_embd());
  a.geom = KvGeom(p.kv_type, p.n_kv_embd(), k_cache, v_cache);
  a.n_head = p.n_head;
  a.group = p.n_head / p.n_head_kv;
  a.hd = p.head_dim;
  a.pstr = PartialStride(p.head_dim);
  a.n_splits = cfg.n_splits;
  a.long_min = cfg.long_min_rows;
  a.qscale = p.scale * kLog2e;
  a.window = p.window;
  a.tiles = nullptr;
  a.tables = nullptr;
  a.max_blocks = 0;
  a.block_shift = 0;
  a.counters = cfg.counters;
  a.out = out;
  a.sinks = p.sinks;
  a.q8 = cfg.q8;
  int n_z = 1;
  if (pg != nullptr) {
    a.tiles = pg->tiles;
    a.tables = pg->tables;
    a.max_blocks = pg->max_blocks;
    while ((1 << a.block_shift) < pg->kv_block) ++a.block_shift;
    n_z = static_cast<int>(pg->n_tiles);
  }
  int ng = 1;  // largest divisor of the GQA ratio the GQA body is built for
  for (int d = 1; d <= kMaxGroup; ++d) {
    if (a.group % d == 0) ng = d;
  }
  switch (p.kv_type) {
    case KvType::kF32:
      LaunchBodies<KvType::kF32>(a, ng, n_z, stream);
      break;
    case KvType::kF16:
      LaunchBodies<KvType::kF16>(a, ng, n_z, stream);
      break;
    case KvType::kFp8:
      LaunchBodies<KvType::kFp8>(a, ng, n_z, stream);
      break;
    case KvType::kQ8_0:
      LaunchBodies<KvType::kQ8_0>(a, ng, n_z, stream);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  if (cfg.counters == nullptr) {
    LaunchGrid(attn_decode_combine_kernel, dim3(p.n_head, n_z), 32, 0, stream, partial, out,
               p.n_head, p.head_dim, a.pstr, cfg.n_splits, a.tiles, p.sinks, cfg.q8);
  }
  return cudaGetLastError();
}

}  // namespace

int AttnPagedSplits(const AttnParams& p, int64_t n_tiles) {
  // About 4,096 one-warp blocks (32 per SM on a 132-SM GPU) over the
  // tiles' tokens; a single token keeps the frozen 32 stripes.
  const int64_t per = 4096 / std::max<int64_t>(1, n_tiles * p.n_head);
  int s = 1;
  while (s * 2 <= per && s * 2 <= kAttnSplits) s *= 2;
  return n_tiles <= 1 ? kAttnSplits : s;
}

int64_t AttnPagedPartialFloats(const AttnParams& p, int64_t n_tiles) {
  return std::max<int64_t>(n_tiles, 1) * AttnPagedSplits(p, n_tiles) * p.n_head *
         PartialStride(p.head_dim);
}

cudaError_t LaunchAttnDecodePaged(const float* q, const int32_t* pos, const void* k_cache,
                                  const void* v_cache, float* partial, float* out,
                                  const AttnParams& p, const AttnPaged& pg, cudaStream_t stream) {
  if (pg.tiles == nullptr || pg.tables == nullptr || pg.n_tiles < 1 || pg.n_tiles > 65535 ||
      pg.max_blocks < 1 || pg.kv_block < 1 || (pg.kv_block & (pg.kv_block - 1)) != 0 ||
      !AlignedTo(pg.tiles, 16) || pg.long_min_rows < 0) {
    return cudaErrorInvalidValue;
  }
  AttnDecodeConfig cfg;
  cfg.n_splits = AttnPagedSplits(p, pg.n_tiles);
  cfg.long_min_rows = pg.long_min_rows;
  cfg.counters = pg.counters;
  cfg.q8 = pg.q8;
  return LaunchDecode(q, pos, k_cache, v_cache, partial, out, p, cfg, &pg, stream);
}

cudaError_t LaunchAttnDecodeConfigured(const float* q, const int32_t* pos, const void* k_cache,
                                       const void* v_cache, float* partial, float* out,
                                       const AttnParams& p, const AttnDecodeConfig& cfg,
                                       cudaStream_t stream) {
  return LaunchDecode(q, pos, k_cache, v_cache, partial, out, p, cfg, nullptr, stream);
}

cudaError_t LaunchAttnDecode(const float* q, const int32_t* pos, const void* k_cache,
                             const void* v_cache, float* partial, float* out, const AttnParams& p,
                             cudaStream_t stream) {
  return LaunchAttnDecodeConfigured(q, pos, k_cache, v_cache, partial, out, p, AttnDecodeConfig{},
                                    stream);
}

}  // namespace minfer::cuda
