// The few-token int8 GEMM (mmq.h LaunchMmqSmall): the matmuls of a decode
// batch, 1..64 tokens, on tensor cores, every weight byte read and decoded
// once for all the tokens. Two forms: direct (below: fragments loaded from
// global memory) and staged (further down: the same math on bytes copied
// into shared memory by 16-byte cp.async), which the launcher prefers.
//
// Why a kernel beside the tiled MMQ. The tiled MMQ stages 128 weight rows per chunk in
// shared memory and decodes them for a tile of 32-128 tokens; its cost per
// weight byte is fixed by that staging and decode, so at a few tokens it
// streams weights at 0.2-0.8 TB/s (7B shapes on the H200, matmul_bench
// --decode-batch), a fifth of HBM's bandwidth. Here every warp owns 16
// weight rows and walks k alone: it loads its rows' block bytes straight
// from global memory into registers, decodes them into mma A fragments in
// registers (mmq_impl.cuh's Tr<T>::frag, the same bit operations), reads
// the activation codes of up to 64 tokens (B fragments, from L1/L2: every
// warp of an SM reads the same few KB), and issues one mma.m16n8k32 per 32
// weights and 8 tokens. No shared memory, no barriers; but a warp's 4-byte
// load over rows g = 0..7 touches 8 cache lines, so the L1's wavefronts
// bound this form near 1 TB/s (docs/benchmarks.md): the staged form below
// moves the same bytes in 16-byte pieces.
//
// Work: warp w of the grid's x dimension is row group w (16 rows) across
// all segments (the staged form: CTA x is the tile of row groups 4x..4x+3);
// grid.y = the k splits (split z takes chunks [z n_chunks / S, (z + 1)
// n_chunks / S)). A lane (g = lane / 4, t = lane % 4) holds rows g and
// g + 8 of the group and, per 8-token n-tile, tokens 2t and 2t + 1 of the C
// fragment. Scales: lane t decodes the table entries (Tr<T>::table) of
// blocks 2t and 2t + 1 of its two rows, and the warp shuffles them to the
// lanes that fold with them.
//
// Numerics: per 32-element block an exact int32 dot (int8 mma), folded as
// fma(float(I), f * d_a, acc) (Q6_K: per 16 elements) and the min as
// fma(m, s_a, acc), blocks in ascending k in one lane per output: without
// a split, the CPU's VecDotQ8A bit for bit (and the tiled MMQ's). With S
// splits the partials of S runs of blocks are added in split order (a
// float rounding difference, deterministic).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/mmq.h"
#include "cuda/kernels/mmq_impl.cuh"
#include "cuda/kernels/split_k.cuh"

namespace minfer::cuda {
namespace mmq_small {
namespace {

using mmq::exact_i2f;
using mmq::mma_k16;
using mmq::mma_k32;
using mmq::Tr;

constexpr int kWarpsPerCta = 4;

using splitk::Seg;

struct Params {
  Seg seg[kMmqMaxSegments];
  int group_begin[kMmqMaxSegments];
  int n_seg;
  int groups;  // all segments' row groups
  int64_t k;
  int nb;        // k / 32
  int n_chunks;  // ceil(nb / 8)
  int src_cb;    // bytes between consecutive chunks of a weight row
  const int8_t* aq;
  const float* ad;
  const float* as;
  int64_t ntp;
  int nt;
  int splits;
  int64_t split_stride;  // floats per split slab
  int tiles;             // staged form: CTAs per split (4 row groups each)
};

__device__ __forceinline__ uint32_t ldg_u32(const int8_t* p) {
  return __ldg(reinterpret_cast<const uint32_t*>(p));
}

template <GgmlType T, int NT8>
__global__ void __launch_bounds__(32 * kWarpsPerCta) mmq_small_kernel(const Params p) {
  pdl_enter();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using X = Tr<T>;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int group = blockIdx.x * kWarpsPerCta + (threadIdx.x >> 5);
  if (group >= p.groups) return;  // warp-uniform
  const int sg = p.n_seg > 1 && group >= p.group_begin[1]
                     ? (p.n_seg > 2 && group >= p.group_begin[2] ? 2 : 1)
                     : 0;
  // Field-by-field selects: indexing the parameter array with a run-time
  // index would copy it to local memory.
  auto pick = [&](auto field) {
    return sg == 0 ? p.seg[0].*field : sg == 1 ? p.seg[1].*field : p.seg[2].*field;
  };
  const int64_t rows = pick(&Seg::rows);
  const int64_t row_bytes = pick(&Seg::row_bytes);
  const int gb = sg == 0 ? 0 : sg == 1 ? p.group_begin[1] : p.group_begin[2];
  const int64_t r0 = static_cast<int64_t>(group - gb) * 16 + g, r1 = r0 + 8;
  const uint8_t* const w0 = pick(&Seg::w) + min(r0, rows - 1) * row_bytes;
  const uint8_t* const w1 = pick(&Seg::w) + min(r1, rows - 1) * row_bytes;
  const int z = blockIdx.y;
  const int c_begin = static_cast<int>(static_cast<int64_t>(z) * p.n_chunks / p.splits);
  const int c_end = static_cast<int>(static_cast<int64_t>(z + 1) * p.n_chunks / p.splits);

  float acc[NT8][4];
#pragma unroll
  for (int n = 0; n < NT8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

  for (int c = c_begin; c < c_end; ++c) {
    const uint8_t* const b0 = w0 + static_cast<int64_t>(c) * p.src_cb;
    const uint8_t* const b1 = w1 + static_cast<int64_t>(c) * p.src_cb;
    const int nkb = min(8, p.nb - c * 8);  // a legacy type's last chunk may be short
    // This lane's table entries: blocks 2t and 2t + 1 of rows g and g + 8.
    float2 tab0[2], tab1[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int kb = 2 * t + j;
      tab0[j] = kb < nkb ? X::table(b0, kb) : make_float2(0.0f, 0.0f);
      tab1[j] = kb < nkb ? X::table(b1, kb) : make_float2(0.0f, 0.0f);
    }
    const int8_t* const a_chunk = p.aq + static_cast<int64_t>(c) * 256 + 4 * t;
#pragma unroll
    for (int kb = 0; kb < 8; ++kb) {
      if (kb >= nkb) break;  // warp-uniform
      uint32_t a[4];
      X::frag(b0, kb, t, &a[0], &a[2]);
      X::frag(b1, kb, t, &a[1], &a[3]);
      // The table entries of block kb come from lane (g, kb / 2).
      const int src = (lane & ~3) | (kb >> 1);
      const float2 e0 = tab0[kb & 1], e1 = tab1[kb & 1];
      const float2 f0 = make_float2(__shfl_sync(kFullWarpMask, e0.x, src),
                                    __shfl_sync(kFullWarpMask, e0.y, src));
      const float2 f1 = make_float2(__shfl_sync(kFullWarpMask, e1.x, src),
                                    __shfl_sync(kFullWarpMask, e1.y, src));
      const int64_t kbg = static_cast<int64_t>(c) * 8 + kb;
#pragma unroll
      for (int n = 0; n < NT8; ++n) {
        // B: codes of token 8n + g at elements 4t.. and 16 + 4t.. of block kbg.
        const int8_t* ap = a_chunk + static_cast<int64_t>(8 * n + g) * p.k + 32 * kb;
        const uint32_t bq0 = ldg_u32(ap), bq1 = ldg_u32(ap + 16);
        // C columns: tokens 8n + 2t, 8n + 2t + 1.
        const float2 da = __ldg(reinterpret_cast<const float2*>(p.ad + kbg * p.ntp + 8 * n + 2 * t));
        float2 sa = make_float2(0.0f, 0.0f);
        if constexpr (X::kMin) {
          sa = __ldg(reinterpret_cast<const float2*>(p.as + kbg * p.ntp + 8 * n + 2 * t));
        }
        float* const ac = acc[n];
        if constexpr (X::kSplit) {
          // Elements 0-15, then 16-31: each output gets its lo term first.
          int c16[4];
          mma_k16(c16, a[0], a[1], bq0);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float f = (e >> 1) ? f1.x : f0.x;
            ac[e] = fmaf(exact_i2f(c16[e]), __fmul_rn(f, (e & 1) ? da.y : da.x), ac[e]);
          }
          mma_k16(c16, a[2], a[3], bq1);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float f = (e >> 1) ? f1.y : f0.y;
            ac[e] = fmaf(exact_i2f(c16[e]), __fmul_rn(f, (e & 1) ? da.y : da.x), ac[e]);
          }
        } else {
          int cc[4];
          mma_k32(cc, a, bq0, bq1);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float2 f = (e >> 1) ? f1 : f0;
            float v = fmaf(exact_i2f(cc[e]), __fmul_rn(f.x, (e & 1) ? da.y : da.x), ac[e]);
            if constexpr (X::kMin) v = fmaf(f.y, (e & 1) ? sa.y : sa.x, v);
            ac[e] = v;
          }
        }
      }
    }
  }
  float* const y =
      p.splits > 1 ? pick(&Seg::part) + static_cast<int64_t>(z) * p.split_stride : pick(&Seg::y);
#pragma unroll
  for (int n = 0; n < NT8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t row = (e >> 1) ? r1 : r0;
      const int tok = 8 * n + 2 * t + (e & 1);
      if (row < rows && tok < p.nt) y[static_cast<int64_t>(tok) * rows + row] = acc[n][e];
    }
  }
#endif  // __CUDA_ARCH__ >= 800
}

// ---------------------------------------------------------- staged form
//
// The direct form above reads every weight and activation word with its
// own 4-byte load: a warp's load of rows g = 0..7 touches 8 cache lines for
// 128 useful bytes, so the L1's wavefronts (one line per cycle), not HBM,
// bound it at 0.5-1 TB/s. The staged form moves the same bytes with 16-byte
// cp.async (a warp's copy instruction is 512 contiguous-or-row-run bytes,
// 4 lines) into shared memory, 2-3 chunks ahead, and decodes from there
// with conflict-free 4-byte shared loads (row strides Tr<T>::kWS and kAS are
// odd multiples of 16 bytes):
//  * weights: warp-private. Warp w copies its own 16 * MT rows of each
//    chunk; no other warp reads them.
//  * activations: one copy per CTA and chunk (8 * NT8 token rows of 256
//    codes, and the chunk's d / s entries), read by all the CTA's warps:
//    the CTA's rows share them, so L2 delivers them once per 64 * MT rows
//    instead of once per 16.
// One __syncthreads per chunk orders the refill of a stage after every
// warp's reads of it (the multistage ring of the tiled MMQ). The math per
// block is the direct form's, in the same order: results are bit-identical.
//
// A chunk is a super-block of a K-quant or 8 blocks of a legacy type; a
// legacy row's last chunk may be short (k not a multiple of 256): only its
// whole 16-byte pieces that hold blocks are copied (rows are 16-byte padded,
// so the pieces stay inside the row), and only its blocks are used.
constexpr int kStagedWarps = 4;
constexpr int kStagedThreads = 32 * kStagedWarps;
// cp.async stages: 3 (the default) lets 4 CTAs share an SM's shared
// memory, and that variant is built for 4 CTAs per SM (at most 128
// registers); 4 stages hold 3 CTAs per SM (and serve two m-tiles).
constexpr int kMinCtas(int stages) { return stages == 3 ? 4 : 1; }

template <GgmlType T, int NT8, int MT>
struct StagedSmem {
  using X = Tr<T>;
  static constexpr int kTok = 8 * NT8;
  static constexpr int kW = 16 * MT * X::kWS;           // one warp's rows
  static constexpr int kA = kTok * mmq::kAS;             // codes
  static constexpr int kD = mmq::kKB * kTok * 4;         // d [kb][token]
  static constexpr int kS = X::kMin ? kD : 0;            // s [kb][token]
  static constexpr int kStage = kStagedWarps * kW + kA + kD + kS;
  static_assert(kW % 16 == 0 && kA % 16 == 0 && kD % 16 == 0, "alignment");
};

// One warp's rows within the tile (4 warps x 16 * MT rows) being worked on.
using splitk::RowsOf;
using splitk::WarpRows;

__device__ __forceinline__ float* SegOut(const Params& p, int sg, int z) {
  if (p.splits > 1) {
    return (sg == 0 ? p.seg[0].part : sg == 1 ? p.seg[1].part : p.seg[2].part) +
           static_cast<int64_t>(z) * p.split_stride;
  }
  return sg == 0 ? p.seg[0].y : sg == 1 ? p.seg[1].y : p.seg[2].y;
}

// Issues the copies of chunk c of this warp's rows (wr) and of the
// activations into stage st (the caller commits).
template <GgmlType T, int NT8, int MT>
__device__ __forceinline__ void StagedLoad(const Params& p, uint8_t* smem, const WarpRows& wr, int c,
                                           int st) {
  using X = Tr<T>;
  using S = StagedSmem<T, NT8, MT>;
  constexpr int kTok = S::kTok;
  constexpr int kPieces = X::kCB / 16;  // 16-byte pieces of a whole chunk row
  constexpr int kRowsW = 16 * MT;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  uint8_t* const base = smem + st * S::kStage;
  const int nkb = min(8, p.nb - c * 8);
  const int pieces = nkb == 8 ? kPieces : (nkb * X::kBS + 15) / 16;
  if (wr.active) {
    uint8_t* const sw = base + warp * S::kW;
    const uint8_t* const src = wr.w + static_cast<int64_t>(c) * p.src_cb;
#pragma unroll
    for (int i = lane; i < kRowsW * kPieces; i += 32) {
      const int r = i / kPieces, q = i % kPieces;
      if (q < pieces) {
        const int64_t row = min(wr.rbase + r, wr.rows - 1);
        cp_async16(smem_addr(sw + r * X::kWS + 16 * q), src + row * wr.row_bytes + 16 * q, 16);
      }
    }
  }
  // Activations: codes of tokens 0..kTok-1 (rows of kAS bytes), then d and
  // s [kb][token]. The layout pads tokens to kMmqTokenPad >= 64, so every
  // token row read here exists.
  uint8_t* const sa = base + kStagedWarps * S::kW;
  const int code_pieces = 2 * nkb;  // 16-byte pieces per token row
  for (int i = threadIdx.x; i < kTok * 16; i += kStagedThreads) {
    const int tok = i >> 4, q = i & 15;
    if (q < code_pieces) {
      cp_async16(smem_addr(sa + tok * mmq::kAS + 16 * q),
                 p.aq + static_cast<int64_t>(tok) * p.k + static_cast<int64_t>(c) * 256 + 16 * q, 16);
    }
  }
  constexpr int kDP = kTok / 4;  // 16-byte pieces of one kb row of d
  uint8_t* const sd = sa + S::kA;
  for (int i = threadIdx.x; i < (X::kMin ? 2 : 1) * 8 * kDP; i += kStagedThreads) {
    const int plane = i / (8 * kDP), kb = (i / kDP) % 8, q = i % kDP;
    if (kb < nkb) {
      const float* src = (plane ? p.as : p.ad) + (static_cast<int64_t>(c) * 8 + kb) * p.ntp + 4 * q;
      cp_async16(smem_addr(sd + plane * S::kD + (kb * kTok + 4 * q) * 4), src, 16);
    }
  }
}

// Folds chunk c, resident in stage st, into this warp's accumulators.
template <GgmlType T, int NT8, int MT>
__device__ __forceinline__ void StagedChunk(const Params& p, const uint8_t* smem, int c, int st,
                                            float (&acc)[MT][NT8][4]) {
  using X = Tr<T>;
  using S = StagedSmem<T, NT8, MT>;
  constexpr int kTok = S::kTok;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const uint8_t* const base = smem + st * S::kStage;
  const uint8_t* const sw = base + warp * S::kW;
  const uint8_t* const sa = base + kStagedWarps * S::kW;
  const float* const sd = reinterpret_cast<const float*>(sa + S::kA);
  const float* const ss = sd + 8 * kTok;
  const int nkb = min(8, p.nb - c * 8);
  float2 tab[MT][2][2];  // [m-tile][row g / g + 8][block 2t / 2t + 1]
#pragma unroll
  for (int j = 0; j < MT; ++j) {
    const uint8_t* const r0 = sw + (16 * j + g) * X::kWS;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int kb = 2 * t + e;
      tab[j][0][e] = kb < nkb ? X::table(r0, kb) : make_float2(0.0f, 0.0f);
      tab[j][1][e] = kb < nkb ? X::table(r0 + 8 * X::kWS, kb) : make_float2(0.0f, 0.0f);
    }
  }
#pragma unroll
  for (int kb = 0; kb < 8; ++kb) {
    if (kb >= nkb) break;  // warp-uniform
    uint32_t a[MT][4];
    float2 f0[MT], f1[MT];
    const int src = (lane & ~3) | (kb >> 1);
#pragma unroll
    for (int j = 0; j < MT; ++j) {
      const uint8_t* const r0 = sw + (16 * j + g) * X::kWS;
      X::frag(r0, kb, t, &a[j][0], &a[j][2]);
      X::frag(r0 + 8 * X::kWS, kb, t, &a[j][1], &a[j][3]);
      const float2 e0 = tab[j][0][kb & 1], e1 = tab[j][1][kb & 1];
      f0[j] = make_float2(__shfl_sync(kFullWarpMask, e0.x, src), __shfl_sync(kFullWarpMask, e0.y, src));
      f1[j] = make_float2(__shfl_sync(kFullWarpMask, e1.x, src), __shfl_sync(kFullWarpMask, e1.y, src));
    }
#pragma unroll
    for (int n = 0; n < NT8; ++n) {
      const uint8_t* const ap = sa + (8 * n + g) * mmq::kAS + 32 * kb + 4 * t;
      const uint32_t bq0 = *reinterpret_cast<const uint32_t*>(ap);
      const uint32_t bq1 = *reinterpret_cast<const uint32_t*>(ap + 16);
      const float2 da = *reinterpret_cast<const float2*>(sd + kb * kTok + 8 * n + 2 * t);
      float2 sa2 = make_float2(0.0f, 0.0f);
      if constexpr (X::kMin) sa2 = *reinterpret_cast<const float2*>(ss + kb * kTok + 8 * n + 2 * t);
#pragma unroll
      for (int j = 0; j < MT; ++j) {
        float* const ac = acc[j][n];
        if constexpr (X::kSplit) {
          int c16[4];
          mma_k16(c16, a[j][0], a[j][1], bq0);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float f = (e >> 1) ? f1[j].x : f0[j].x;
            ac[e] = fmaf(exact_i2f(c16[e]), __fmul_rn(f, (e & 1) ? da.y : da.x), ac[e]);
          }
          mma_k16(c16, a[j][2], a[j][3], bq1);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float f = (e >> 1) ? f1[j].y : f0[j].y;
            ac[e] = fmaf(exact_i2f(c16[e]), __fmul_rn(f, (e & 1) ? da.y : da.x), ac[e]);
          }
        } else {
          int cc[4];
          mma_k32(cc, a[j], bq0, bq1);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float2 f = (e >> 1) ? f1[j] : f0[j];
            float v = fmaf(exact_i2f(cc[e]), __fmul_rn(f.x, (e & 1) ? da.y : da.x), ac[e]);
            if constexpr (X::kMin) v = fmaf(f.y, (e & 1) ? sa2.y : sa2.x, v);
            ac[e] = v;
          }
        }
      }
    }
  }
}

// y[tok * rows + row] for this warp's rows and the batch's tokens.
template <int NT8, int MT>
__device__ __forceinline__ void StagedStore(float* y, const WarpRows& wr, int nt,
                                            const float (&acc)[MT][NT8][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < MT; ++j) {
#pragma unroll
    for (int n = 0; n < NT8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t row = wr.rbase + 16 * j + g + ((e >> 1) ? 8 : 0);
        const int tok = 8 * n + 2 * t + (e & 1);
        if (row < wr.rows && tok < nt) y[static_cast<int64_t>(tok) * wr.rows + row] = acc[j][n][e];
      }
    }
  }
}

template <int NT8, int MT>
__device__ __forceinline__ void Zero(float (&acc)[MT][NT8][4]) {
#pragma unroll
  for (int j = 0; j < MT; ++j)
#pragma unroll
    for (int n = 0; n < NT8; ++n) acc[j][n][0] = acc[j][n][1] = acc[j][n][2] = acc[j][n][3] = 0.0f;
}

// Split-k schedule: CTA (x, z) = tile x, chunks [z n_chunks / S, (z + 1)
// n_chunks / S).
template <GgmlType T, int NT8, int MT, int kStages>
__global__ void __launch_bounds__(kStagedThreads, kMinCtas(kStages))
    mmq_staged_kernel(const Params p) {
  pdl_enter();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = threadIdx.x >> 5;
  const WarpRows wr = RowsOf<MT>(p, blockIdx.x * kStagedWarps + warp);
  const int z = blockIdx.y;
  const int c_begin = static_cast<int>(static_cast<int64_t>(z) * p.n_chunks / p.splits);
  const int c_end = static_cast<int>(static_cast<int64_t>(z + 1) * p.n_chunks / p.splits);
  const int nc = c_end - c_begin;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < nc) StagedLoad<T, NT8, MT>(p, smem, wr, c_begin + s, s);
    cp_async_commit();
  }
  float acc[MT][NT8][4];
  Zero(acc);
  for (int i = 0; i < nc; ++i) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // chunk i is in; every warp is done with chunk i - 1's stage
    if (i + kStages - 1 < nc) {
      StagedLoad<T, NT8, MT>(p, smem, wr, c_begin + i + kStages - 1, (i + kStages - 1) % kStages);
    }
    cp_async_commit();
    if (wr.active) StagedChunk<T, NT8, MT>(p, smem, c_begin + i, i % kStages, acc);
  }
  cp_async_wait<0>();
  if (wr.active) StagedStore(SegOut(p, wr.sg, z), wr, p.nt, acc);
#endif  // __CUDA_ARCH__ >= 800
}

template <GgmlType T, int NT8>
void LaunchTyped(const Params& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.groups + kWarpsPerCta - 1) / kWarpsPerCta),
                  static_cast<unsigned>(p.splits));
  LaunchGrid(mmq_small_kernel<T, NT8>, grid, 32 * kWarpsPerCta, 0, stream, p);
}

template <GgmlType T>
void LaunchNt(const Params& p, cudaStream_t stream) {
  const int nt8 = (p.nt + 7) / 8;
  if (nt8 <= 1) return LaunchTyped<T, 1>(p, stream);
  if (nt8 <= 2) return LaunchTyped<T, 2>(p, stream);
  if (nt8 <= 4) return LaunchTyped<T, 4>(p, stream);
  return LaunchTyped<T, 8>(p, stream);
}

void Dispatch(GgmlType type, const Params& p, cudaStream_t stream) {
  switch (type) {
    case GgmlType::kQ4_0: return LaunchNt<GgmlType::kQ4_0>(p, stream);
    case GgmlType::kQ4_1: return LaunchNt<GgmlType::kQ4_1>(p, stream);
    case GgmlType::kQ5_0: return LaunchNt<GgmlType::kQ5_0>(p, stream);
    case GgmlType::kQ5_1: return LaunchNt<GgmlType::kQ5_1>(p, stream);
    case GgmlType::kQ8_0: return LaunchNt<GgmlType::kQ8_0>(p, stream);
    case GgmlType::kQ4_K: return LaunchNt<GgmlType::kQ4_K>(p, stream);
    case GgmlType::kQ5_K: return LaunchNt<GgmlType::kQ5_K>(p, stream);
    case GgmlType::kQ6_K: return LaunchNt<GgmlType::kQ6_K>(p, stream);
    default: return;
  }
}

// The staged form's launch facts, per instantiation: its shared memory
// (opted in once, beyond the 48 KB default) and how many of its CTAs an SM
// holds. Computed at the first launch, which the backend makes outside a
// capture window.
using StagedInfo = splitk::KernelFacts;

template <GgmlType T, int NT8, int MT, int ST>
const StagedInfo& Info() {
  static PerDevice<StagedInfo> info;
  return splitk::FactsOnce(info, &mmq_staged_kernel<T, NT8, MT, ST>, kStagedThreads,
                           ST * StagedSmem<T, NT8, MT>::kStage);
}

template <GgmlType T, int NT8, int MT, int ST>
bool LaunchStagedTyped(const Params& p, cudaStream_t stream) {
  const StagedInfo& info = Info<T, NT8, MT, ST>();
  if (info.ctas_per_sm <= 0) return false;
  const dim3 grid(static_cast<unsigned>(p.tiles), static_cast<unsigned>(p.splits));
  LaunchGrid(mmq_staged_kernel<T, NT8, MT, ST>, grid, kStagedThreads, info.smem, stream, p);
  return true;
}

template <GgmlType T, int MT, int ST>
bool StagedNt(const Params& p, cudaStream_t stream, int* ctas_per_sm) {
  const int nt8 = (p.nt + 7) / 8;
  auto go = [&](auto nt8c) {
    constexpr int kNt8 = decltype(nt8c)::value;
    if (ctas_per_sm != nullptr) {
      *ctas_per_sm = Info<T, kNt8, MT, ST>().ctas_per_sm;
      return *ctas_per_sm > 0;
    }
    return LaunchStagedTyped<T, kNt8, MT, ST>(p, stream);
  };
  if (nt8 <= 1) return go(std::integral_constant<int, 1>{});
  if (nt8 <= 2) return go(std::integral_constant<int, 2>{});
  if (nt8 <= 4) return go(std::integral_constant<int, 4>{});
  return go(std::integral_constant<int, 8>{});
}

// The built variants: one m-tile with 4 or 3 stages, two m-tiles with 4.
template <GgmlType T>
bool StagedMt(const Params& p, int mt, int stages, cudaStream_t stream, int* ctas_per_sm) {
  if (mt == 2) return StagedNt<T, 2, 4>(p, stream, ctas_per_sm);
  return stages == 3 ? StagedNt<T, 1, 3>(p, stream, ctas_per_sm)
                     : StagedNt<T, 1, 4>(p, stream, ctas_per_sm);
}

// With ctas_per_sm non-null: only reports the instantiation's residency
// (0 = cannot run); else launches it. False: nothing launched.
bool DispatchStaged(GgmlType type, const Params& p, int mt, int stages, cudaStream_t stream,
                    int* ctas_per_sm) {
  switch (type) {
    case GgmlType::kQ4_0: return StagedMt<GgmlType::kQ4_0>(p, mt, stages, stream, ctas_per_sm);
    case GgmlType::kQ4_1: return StagedMt<GgmlType::kQ4_1>(p, mt, stages, stream, ctas_per_sm);
    case GgmlType::kQ5_0: return StagedMt<GgmlType::kQ5_0>(p, mt, stages, stream, ctas_per_sm);
    case GgmlType::kQ5_1: return StagedMt<GgmlType::kQ5_1>(p, mt, stages, stream, ctas_per_sm);
    case GgmlType::kQ8_0: return StagedMt<GgmlType::kQ8_0>(p, mt, stages, stream, ctas_per_sm);
    case GgmlType::kQ4_K: return StagedMt<GgmlType::kQ4_K>(p, mt, stages, stream, ctas_per_sm);
    case GgmlType::kQ5_K: return StagedMt<GgmlType::kQ5_K>(p, mt, stages, stream, ctas_per_sm);
    case GgmlType::kQ6_K: return StagedMt<GgmlType::kQ6_K>(p, mt, stages, stream, ctas_per_sm);
    default: return false;
  }
}

}  // namespace
}  // namespace mmq_small

cudaError_t LaunchMmqSmall(const MmqSegments& s, const void* act, int64_t nt, cudaStream_t stream,
                           const MmqTuning* tuning, const char** why_not) {
  using mmq_small::Params;
  const char* unused;
  if (why_not == nullptr) why_not = &unused;
  *why_not = nullptr;
  if (s.n < 1 || s.n > kMmqMaxSegments || nt < 0 || act == nullptr ||
      reinterpret_cast<uintptr_t>(act) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  if (nt == 0) return cudaSuccess;
  if (nt > kMmqSmallMaxTokens) {
    *why_not = "more than 64 tokens";
    return cudaErrorNotSupported;
  }
  const GgmlType type = s.w[0].type;
  if (!MmqSupports(type)) return cudaErrorInvalidValue;
  const int64_t k = s.w[0].k;
  const int64_t bs = type == GgmlType::kQ4_K || type == GgmlType::kQ5_K || type == GgmlType::kQ6_K
                         ? 256
                         : 32;
  if (k <= 0 || k % bs != 0 || k > (int64_t{1} << 30)) return cudaErrorInvalidValue;
  Params p{};
  p.k = k;
  p.nb = static_cast<int>(k / 32);
  p.n_chunks = (p.nb + 7) / 8;
  const int64_t block_bytes = DeviceBlockBytes(type, s.w[0].q6k_padded);
  p.src_cb = static_cast<int>(bs == 32 ? 8 * block_bytes : block_bytes);
  const int64_t ntp = (nt + kMmqTokenPad - 1) / kMmqTokenPad * kMmqTokenPad;
  p.aq = static_cast<const int8_t*>(act);
  p.ad = reinterpret_cast<const float*>(static_cast<const uint8_t*>(act) + ntp * k);
  p.as = p.ad + ntp * (k / 32);
  p.ntp = ntp;
  p.nt = static_cast<int>(nt);
  int64_t weight_bytes = 0, stride = 0;
  bool aligned16 = true;
  for (int i = 0; i < s.n; ++i) {
    const WeightView& w = s.w[i];
    if (w.type != type || w.k != k || w.rows < 0 || w.q6k_padded != s.w[0].q6k_padded ||
        (w.rows > 0 && (w.data == nullptr || s.y[i] == nullptr))) {
      return cudaErrorInvalidValue;
    }
    if (w.row_bytes < k / bs * block_bytes) return cudaErrorInvalidValue;
    if (type == GgmlType::kQ6_K && !w.q6k_padded) {
      *why_not = "raw 210-byte Q6_K blocks";
      return cudaErrorNotSupported;
    }
    if (reinterpret_cast<uintptr_t>(w.data) % 4 != 0 || w.row_bytes % 4 != 0) {
      *why_not = "weight base or row stride not 4-byte aligned";
      return cudaErrorNotSupported;
    }
    aligned16 = aligned16 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0 && w.row_bytes % 16 == 0;
    mmq_small::Seg& g = p.seg[p.n_seg];
    if (w.rows == 0) continue;
    g.w = static_cast<const uint8_t*>(w.data);
    g.row_bytes = w.row_bytes;
    g.rows = w.rows;
    g.y = s.y[i];
    weight_bytes += w.rows * w.row_bytes;
    stride += nt * w.rows;
    ++p.n_seg;
  }
  if (p.n_seg == 0) return cudaSuccess;
  if (splitk::CurrentDevice().major < 8) {
    *why_not = "GPU older than sm_80 (no int8 mma.m16n8k32)";
    return cudaErrorNotSupported;
  }
  // The form, and the rows one warp owns (its row groups).
  const int form = tuning != nullptr ? tuning->small_form : kMmqSmallAuto;
  // One m-tile per warp unless asked: on the H200, 2 was slower at every
  // token count of the 7B's shapes (docs/benchmarks.md).
  int mt = tuning != nullptr && tuning->small_mtiles == 2 ? 2 : 1;
  // Three stages by default (4 CTAs per SM): +1-5% end to end on the H200.
  const int stages = mt == 2 || (tuning != nullptr && tuning->small_stages == 4) ? 4 : 3;
  int ctas_per_sm = 0;
  const bool staged = form != kMmqSmallDirect && aligned16 &&
                      mmq_small::DispatchStaged(type, p, mt, stages, stream, &ctas_per_sm);
  if (!staged) mt = 1;
  splitk::AssignGroups(&p, mt, mmq_small::kStagedWarps);
  // Split-k: the staged form fills the resident CTA slots in whole waves
  // (WaveSplits), keeping at least small_min_chunks chunks per split so its
  // pipeline has something to overlap; the direct form aims at about 24 warps per SM.
  // Both: at most 16 splits, and no more partial traffic (written and
  // read) than half the weight bytes.
  p.splits = 1;
  if (tuning != nullptr && tuning->split_k != 0 && tuning->split_workspace != nullptr) {
    int64_t splits = tuning->split_k;
    const int64_t traffic_cap = weight_bytes / std::max<int64_t>(16 * stride, 1);
    if (splits < 0 && staged) {
      const int64_t min_chunks =
          tuning->small_min_chunks > 0 ? tuning->small_min_chunks : int64_t{2};
      const int64_t cap =
          std::min<int64_t>({16, std::max<int64_t>(p.n_chunks / min_chunks, 1), traffic_cap});
      splits = splitk::WaveSplits(p.tiles, int64_t{splitk::CurrentDevice().sms} * ctas_per_sm, cap);
    } else if (splits < 0) {
      const int64_t target = int64_t{splitk::CurrentDevice().sms} * 24;
      splits = std::min<int64_t>({target / std::max(p.groups, 1), 16, traffic_cap});
    }
    splits = std::min<int64_t>({splits, p.n_chunks,
                                tuning->split_bytes / 4 / std::max<int64_t>(stride, 1)});
    if (splits >= 2 && !splitk::SetSplits(&p, tuning->split_workspace, nt, splits, stride)) {
      return cudaErrorInvalidValue;
    }
  }
  if (!(staged && mmq_small::DispatchStaged(type, p, mt, stages, stream, nullptr))) {
    mmq_small::Dispatch(type, p, stream);
  }
  if (p.splits > 1) splitk::Reduce(p, stride, stream);
  return cudaGetLastError();
}

}  // namespace minfer::cuda
