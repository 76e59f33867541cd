// The Hopper dequantizing GEMM (dq_wgmma.h): Q4_K / Q6_K weights decoded
// into wgmma's A registers, activations read by the tensor cores from shared
// memory, f32 accumulators; 1..256 tokens. Compiled for sm_90a only (the
// build's --sm90a flag); other targets get empty kernels that the launcher
// never starts.
//
// Work. A CTA is one (or two) warpgroups of 4 warps, each warp owning 16
// weight rows (a "row group" of split_k.cuh, so rows of up to three weights
// share a launch), a warpgroup one 64-row wgmma tile across N tokens (N =
// 8..256, the batch rounded up to a power of two). k is walked in chunks of
// 128 elements (half a super-block); CTA y is the k split. Per chunk a
// cp.async ring of 3 stages (2 where 3 do not fit) brings each warp's rows
// (warp-private: only the owning warp decodes them) and the chunk's
// activations of every token (read only by wgmma). The chunk is 8 k-steps
// of 16, issued as two groups of 4: while one group's wgmmas run, every
// lane decodes the next group's A registers (its 2 rows, one 32-bit word of
// codes per row and step) into the other register set (the pipeline above
// the kernel says exactly how).
//
// Which codes a lane decodes (dq_wgmma.h): lane t (= lane % 4) takes the
// words at bytes 4t + 16i, i = 0..3, of the chunk's codes (Q4_K: qs bytes
// 64h..64h+63 of half h; Q6_K: ql bytes 64h..64h+63), rows g and g + 8.
// Step s covers the chunk's elements 16s..16s+15 (its 4-groups 4s..4s+3,
// lane t the 4-group 4s + t):
//  * Q4_K: word i's low nibbles are 4-group t + 4i (i < 2) or t + 4i + 8
//    (i >= 2), its high nibbles that + 8; so step s takes word (0 1 0 1 2 3
//    2 3)[s], low nibbles at s = 0 1 4 5, high at 2 3 6 7; sub-block s / 2.
//  * Q6_K: word i's low nibbles are 4-group t + 4i, high t + 4i + 16: step s
//    takes word s % 4, high nibbles from s = 4; the two high bits come from
//    qh byte 4t + 16 (i % 2) + j (bits 2 (i / 2), + 4 for the high nibbles);
//    scale index 8h + s.
// The pair (e0, e2) of a word's 4 values comes out with one mask-and-or
// ((w & 0x000F000F) | 0x64006400 is the half2 1024 + b0, 1024 + b2), then an
// exact subtraction and one f16 fma with the sub-block's scale and min, as
// in dq_gemm.cu.
//
// Shared memory (per stage): the activations, then the weights. The
// activations are wgmma's K-major layout with the 128-byte swizzle: per
// k-half of the chunk (64 values, 128 bytes per token) one 1024-byte atom
// per 8 tokens, token n's row at (n % 8) * 128 and its 16-byte piece c (8 k
// values) at ((c ^ (n % 8)) * 16); a step's operand starts 32 bytes further
// per k16 step within its half, atoms 1024 bytes apart along n. Why the
// swizzle: 16 consecutive threads copy one token's 256 contiguous bytes
// (full cache lines) and, with it, 8 consecutive threads still write 8
// different bank groups (the unswizzled layout made a choice between the
// two; on the H100 the swizzle took the 7B's gate at 256 tokens from 367 to
// 140 us). Weight rows are 80 bytes (Q4_K: the block's 16-byte header and
// the half's 64 code bytes) or 144 (Q6_K: ql half 64, qh half 32, scales
// 16, d 16, a pad): odd multiples of 16 bytes, so the 8 rows g of a warp's
// 32-bit loads fall on 8 different 4-bank groups and the 4 lanes t on the 4
// banks of each.
#include <cuda.h>  // CUtensorMap (the encoder comes through the runtime's entry points)
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/dq_wgmma.h"
#include "cuda/kernels/dq_wgmma_impl.cuh"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/ptx_sm80.cuh"
#include "cuda/kernels/ptx_sm90.cuh"
#include "cuda/kernels/split_k.cuh"

namespace minfer::cuda {
namespace dqw {
namespace {

constexpr int kMaxSmem = 227 * 1024;

using splitk::Seg;

struct Params {
  Seg seg[kMmqMaxSegments];
  int group_begin[kMmqMaxSegments];
  int n_seg;
  int groups;
  int64_t k;
  int n_chunks;  // k / 128
  const uint8_t* act;
  int nt;
  int splits;
  int64_t split_stride;
  int tiles;
  uint32_t sbo;  // bytes between 8-token atoms along n (1024; other values only from a test)
};

template <GgmlType T, int N, int W>
__host__ __device__ constexpr int StageBytes() {
  return W * 16 * Ty<T>::kRowBytes + N * 256;
}
// Three stages where they fit, else two.
template <GgmlType T, int N, int W>
__host__ __device__ constexpr int StagesFor() {
  return 3 * StageBytes<T, N, W>() + 1024 <= kMaxSmem ? 3 : 2;
}

using splitk::RowsOf;
using splitk::WarpRows;

#if defined(MINFER_SM90A_DEVICE)

// A lane's share of its warp's weight copies (16 rows x kPieces pieces of
// 16 bytes per chunk, piece i of the warp by lane i % 32), with what does
// not change from chunk to chunk worked out once: the destination of each
// piece in a stage, and its source as a pointer that walks the row. A
// warp copies its chunks in order, and DqPieces' offsets are Src(0, q) +
// h * step (h the half of the super-block), so from one chunk to the next
// a piece's source moves by `step` (into half 1) or by the block less
// `step` (on to the next block's half 0): one select and one 64-bit add per
// copy, where re-deriving the address from the chunk index took ~13
// instructions per copy (the SASS of the twenty-fifth session).
template <GgmlType T>
struct WeightCopies {
  using X = Ty<T>;
  static constexpr int kN = 16 * X::kPieces;
  static constexpr int kPer = (kN + 31) / 32;
  const uint8_t* src[kPer];  // the next chunk's piece
  int step[kPer];
  int dst[kPer];  // bytes from the warp's first row in a stage
  int half;       // the next chunk's half of its super-block

  // Positions the copies at chunk c (the first this warp copies).
  __device__ __forceinline__ void Init(const WarpRows& wr, int lane, int c) {
    half = c & 1;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = min(32 * j + lane, kN - 1);  // (lanes past kN copy nothing: Issue)
      const int r = i / X::kPieces, q = i % X::kPieces;
      const int64_t row = min(wr.rbase + r, wr.rows - 1);
      step[j] = PieceStep<T>(q);
      src[j] = wr.w + row * wr.row_bytes + PieceStart<T>(q, c);
      dst[j] = r * X::kRowBytes + 16 * q;
    }
  }
  // The next chunk's copies into the warp's rows at `sw` (the caller
  // commits; `active` false: none, but the walk goes on).
  __device__ __forceinline__ void Issue(uint8_t* sw, int lane, bool active) {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      if (active && (kN % 32 == 0 || 32 * j + lane < kN)) {
        cp_async16(smem_addr(sw + dst[j]), src[j], 16);
      }
      src[j] += PieceAdvance<T>(half, step[j]);
    }
    half ^= 1;
  }
};

// Issues the copies of chunk c of this warp's rows and of every token's
// activations into `stage` (the caller commits).
// (The weights: chunk c must be the one after the last this warp copied,
// or the first; WeightCopies walks them in order.)
template <GgmlType T, int N, int W, bool kActs = true>
__device__ __forceinline__ void Load(const Params& p, uint8_t* stage, const WarpRows& wr,
                                     WeightCopies<T>& wc, int c) {
  constexpr int kThreads = 32 * W;
  using X = Ty<T>;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  uint8_t* const wbase = stage + N * 256;
  wc.Issue(wbase + warp * 16 * X::kRowBytes, lane, wr.active);
  if constexpr (!kActs) return;  // the TMA forms bring them (dqw_kernel)
  uint8_t* const sa = stage;
  constexpr int kN = N * 16;  // 16-byte pieces
#pragma unroll
  for (int i0 = 0; i0 < kN; i0 += kThreads) {
    const int i = i0 + threadIdx.x;
    if (kN % kThreads == 0 || i < kN) {
      const int tok = i >> 4, piece = i & 15, r = tok & 7;
      const int dst = ((piece >> 3) * (N / 8) + (tok >> 3)) * 1024 + r * 128 + (((piece & 7) ^ r) << 4);
      const bool live = tok < p.nt;
      const uint8_t* src =
          p.act + (live ? static_cast<int64_t>(tok) * p.k * 2 + static_cast<int64_t>(c) * 256 +
                              16 * piece
                        : 0);
      cp_async16(smem_addr(sa + dst), src, live ? 16 : 0);
    }
  }
}

// Per chunk and row: what the 8 steps' decode needs.
template <GgmlType T>
struct RowRegs;

template <>
struct RowRegs<GgmlType::kQ4_K> {
  uint32_t code[4];       // words 0..3
  half2 s01, s23, m01, m23;  // (scale, min) of the half's sub-blocks (0, 1) and (2, 3), min negated

  __device__ __forceinline__ void Fetch(const uint8_t* row, int h, int t) {
    const uint4 hd = *reinterpret_cast<const uint4*>(row);
    Q4kScaleMin(hd, h, 0, &s01, &m01);
    Q4kScaleMin(hd, h, 1, &s23, &m23);
#pragma unroll
    for (int i = 0; i < 4; ++i) code[i] = Lds32(row + 16 + 16 * i + 4 * t);
  }

  // Step s's A pair for this row: (e0, e2) and (e1, e3) of its 4-group.
  __device__ __forceinline__ void Step(int s, uint32_t& even, uint32_t& odd) const {
    constexpr int kWord[8] = {0, 1, 0, 1, 2, 3, 2, 3};
    const bool high = (s & 2) != 0;
    const int sb = s >> 1;
    const half2 sv = sb == 0 ? __low2half2(s01) : sb == 1 ? __high2half2(s01)
                     : sb == 2 ? __low2half2(s23) : __high2half2(s23);
    const half2 mv = sb == 0 ? __low2half2(m01) : sb == 1 ? __high2half2(m01)
                     : sb == 2 ? __low2half2(m23) : __high2half2(m23);
    // Low nibbles under the exponent of 1024 (bits 0-3 of each half: 1024 +
    // b), high nibbles where they lie, under the exponent of 64 (bits 4-7
    // are the mantissa's 1/16 steps there: 64 + b). Both exact, both less
    // their base give b exactly, so the result is the same bits either way,
    // and the high nibbles need no shift of their own: a word's odd bytes
    // come from one shift shared by its low step and its high step.
    const uint32_t w = code[kWord[s]];
    if (high) {
      Q4kPairs<0x00F000F0u, kMagic64>(w, sv, mv, even, odd);
    } else {
      Q4kPairs<0x000F000Fu, kMagic>(w, sv, mv, even, odd);
    }
  }
};

template <>
struct RowRegs<GgmlType::kQ6_K> {
  uint32_t code[4];  // ql words 0..3
  uint32_t qh[2];    // qh words for i % 2 = 0, 1
  half2 sc[4];       // the half's 8 f16 scales (times d), in pairs

  __device__ __forceinline__ void Fetch(const uint8_t* row, int h, int t) {
#pragma unroll
    for (int i = 0; i < 4; ++i) code[i] = Lds32(row + 16 * i + 4 * t);
    qh[0] = Lds32(row + 64 + 4 * t);
    qh[1] = Lds32(row + 80 + 4 * t);
    const uint2 raw = *reinterpret_cast<const uint2*>(row + 96 + 8 * h);
    const half2 d = __low2half2(AsH2(Lds32(row + 112)));
    // (A group of four steps uses one word's pairs; the other's are dead
    // code once the steps are unrolled.)
    Q6kScales4(raw.x, d, &sc[0], &sc[1]);
    Q6kScales4(raw.y, d, &sc[2], &sc[3]);
  }

  __device__ __forceinline__ void Step(int s, uint32_t& even, uint32_t& odd) const {
    const int i = s & 3;
    const bool high = s >= 4;
    const uint32_t ys = qh[i & 1] >> (2 * (i >> 1));
    const uint32_t x = code[i];
    const uint32_t v = high ? (((x >> 4) & 0x0F0F0F0Fu) | (ys & 0x30303030u))
                            : ((x & 0x0F0F0F0Fu) | ((ys << 4) & 0x30303030u));
    BiasedPairs<32>(v, (s & 1) ? __high2half2(sc[s >> 1]) : __low2half2(sc[s >> 1]), even, odd);
  }
};

// Decodes steps s0 .. s0 + 3 of the resident chunk (half h of its
// super-block) for rows g and g + 8 of this warp into A.
template <GgmlType T, int kS0>
__device__ __forceinline__ void DecodeGroup(const uint8_t* sw, int h, uint32_t (&A)[4][4]) {
  using X = Ty<T>;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  RowRegs<T> r0, r1;
  r0.Fetch(sw + g * X::kRowBytes, h, t);
  r1.Fetch(sw + (g + 8) * X::kRowBytes, h, t);
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    r0.Step(kS0 + s, A[s][0], A[s][2]);
    r1.Step(kS0 + s, A[s][1], A[s][3]);
  }
}

// Issues steps s0 .. s0 + 3 (one commit group).
template <int N>
__device__ __forceinline__ void IssueGroup(float (&acc)[N / 2], const uint32_t (&A)[4][4],
                                           uint32_t act_base, int s0, const Params& p) {
  wgmma_fence();
  // The descriptor's start address is its low field (address / 16, 14 bits:
  // shared addresses stay below 256 KB), so a step's descriptor is the
  // stage's plus a constant: one 64-bit add per wgmma instead of the
  // field arithmetic (a sixth of the kernel's instructions in the
  // nineteenth-session SASS were descriptor math on the uniform path).
  const uint64_t base = WgmmaDescSw128(act_base, p.sbo);
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    // Step st: k-half st / 4 of the chunk (its own run of atoms), 32 bytes
    // into each 128-byte row per step within the half.
    const int st = s0 + s;
    constexpr int kHalfBytes = (N / 8) * 1024;
    Wgmma<N>::Run(acc, A[s], base + static_cast<uint64_t>(((st >> 2) * kHalfBytes + (st & 3) * 32) >> 4), 1);
  }
  wgmma_commit();
#pragma unroll
  for (int j = 0; j < N / 2; ++j) wgmma_pin(acc[j]);
}

#endif  // MINFER_SM90A_DEVICE

// How a CTA brings the activations (DqwTuning::act_load): cp.async by every
// thread (kActCopies); one TMA box per k-half by thread 0, announced on an
// mbarrier per stage (kActTma); or, over a cluster of two CTAs (adjacent row
// tiles, the same k split), each CTA's TMA brings one k-half into both CTAs'
// shared memory (kActTmaPair: half the L2 traffic of the activations, which
// at 64 tokens is 3x the weights'). The same bytes land at the same places
// in every form, so the results are the same bits.
enum ActLoad : int { kActCopies = 0, kActTma = 1, kActTmaPair = 2 };

// The pipeline, per chunk i (its first half's A registers decoded on entry):
// issue the first half's 4 wgmmas; refill the stage chunk i - 1 used (its
// wgmmas finished at the end of the last iteration: a wgmma group is the
// warpgroup's, so one warp's wait retires it for all four; with two
// warpgroups a barrier joins them); decode the second
// half; wait for the first half; issue the second half; wait for chunk
// i + 1's copies and decode its first half; wait. Decoding only between a
// commit and the wait that retires it, never into registers a wgmma in
// flight reads, keeps ptxas from serializing the wgmmas.
//
// The TMA forms keep that order: the weights still come by cp.async (each
// warp's own rows); thread 0 issues a stage's activation boxes where the
// copies were issued, and every thread waits on the stage's mbarrier where
// it waited for the copies. In the pair form a stage is refilled only once
// both CTAs are done with it (each CTA's thread 0 arrives on both CTAs'
// "free" mbarrier of the stage at the end of the iteration that used it),
// and the CTAs meet at the end so that neither exits while the other may
// still write into its shared memory.
template <GgmlType T, int N, int W, int kAct>
__global__ void __launch_bounds__(32 * W) dqw_kernel(const Params p,
                                                     const __grid_constant__ CUtensorMap tmap) {
  pdl_enter();
#if defined(MINFER_SM90A_DEVICE)
  using X = Ty<T>;
  constexpr int kWarps = W, kStages = StagesFor<T, N, W>();
  constexpr bool kTma = kAct != kActCopies;
  constexpr int kCluster = kAct == kActTmaPair ? 2 : 1;
  extern __shared__ __align__(128) uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t full_bar[kStages];
  __shared__ __align__(8) uint64_t free_bar[kStages];
  // (The swizzled layout's atoms must be 1024-byte aligned.) An offset from
  // smem_raw, not an integer cast: the pointer stays one the compiler knows
  // is shared, so the decode's reads are LDS with 32-bit addresses, not
  // generic loads with 64-bit ones (and the base is not recomputed per chunk).
  uint8_t* const smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  constexpr int kStage = StageBytes<T, N, W>();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const WarpRows wr = RowsOf<1>(p, blockIdx.x * kWarps + warp);

  const int z = blockIdx.y;
  const int c_begin = static_cast<int>(static_cast<int64_t>(z) * p.n_chunks / p.splits);
  const int c_end = static_cast<int>(static_cast<int64_t>(z + 1) * p.n_chunks / p.splits);
  const int nc = c_end - c_begin;
  WeightCopies<T> wc;
  wc.Init(wr, lane, c_begin);
  uint32_t rank = 0;
  if constexpr (kTma) {
    if constexpr (kCluster > 1) rank = cluster_ctarank();
    if (threadIdx.x == 0) {
#pragma unroll
      for (int s = 0; s < kStages; ++s) {
        mbar_init(smem_addr(&full_bar[s]), 1);
        mbar_init(smem_addr(&free_bar[s]), kCluster);
      }
      fence_mbar_init();
    }
    if constexpr (kCluster > 1) {
      cluster_sync();  // the peer's barriers exist before anything lands there
    } else {
      __syncthreads();
    }
  }
  // Thread 0: local chunk i's activations into stage i % kStages.
  auto issue_acts = [&](int i) {
    const int s = i % kStages, c = c_begin + i;
    const uint32_t bar = smem_addr(&full_bar[s]);
    const uint32_t dst = smem_addr(smem + s * kStage);
    mbar_arrive_expect_tx(bar, N * 256);  // both halves, whoever brings them
    if constexpr (kCluster == 1) {
      tma_load_2d(dst, &tmap, bar, c * 128, 0);
      tma_load_2d(dst + N * 128, &tmap, bar, c * 128 + 64, 0);
    } else {
      tma_load_2d_multicast(dst + rank * (N * 128), &tmap, bar, c * 128 + 64 * static_cast<int>(rank),
                            0, static_cast<uint16_t>((1u << kCluster) - 1));
    }
  };
  auto wait_acts = [&](int i) {
    if constexpr (kTma) mbar_wait(smem_addr(&full_bar[i % kStages]), (i / kStages) & 1);
  };
#pragma unroll
  for (int s = 0; s < kStages; ++s) {
    if (s < nc) {
      Load<T, N, W, !kTma>(p, smem + s * kStage, wr, wc, c_begin + s);
      if constexpr (kTma) {
        if (threadIdx.x == 0) issue_acts(s);
      }
    }
    cp_async_commit();
  }
  float acc[N / 2];
#pragma unroll
  for (int j = 0; j < N / 2; ++j) acc[j] = 0.0f;
  uint32_t a0[4][4], a1[4][4];
  auto weights = [&](int i) {
    return smem + (i % kStages) * kStage + N * 256 + warp * 16 * X::kRowBytes;
  };
  auto acts = [&](int i) { return smem_addr(smem + (i % kStages) * kStage); };
  // Before decoding a chunk: its activations have landed (TMA: the stage's
  // mbarrier; copies: this thread's, made visible to wgmma's async proxy
  // and to every thread by the barrier) and so have the warp's weight rows
  // (this thread's copies, then the warp's: with TMA the weights are the
  // only copies, and each warp reads only its own rows, so a warp barrier
  // is enough where one warpgroup shares nothing else; two warpgroups meet
  // at the end of each iteration anyway).
  auto ready = [&](int i) {
    wait_acts(i);
    if constexpr (kTma && W == 4) {
      __syncwarp();
    } else {
      if constexpr (!kTma) fence_proxy_async_smem();
      __syncthreads();
    }
  };
  if (nc > 0) {
    cp_async_wait<kStages - 1>();
    ready(0);
    DecodeGroup<T, 0>(weights(0), c_begin & 1, a0);
  }
  // One chunk; `half` is its half of the super-block (c & 1). For Q4_K the
  // loop below passes it as a constant, picking one of two copies of the
  // chunk once, so that the unpacking of the scales and mins, which differs
  // by half, has no branches (the SASS of the twenty-fifth session: 16
  // branches per chunk before, 333 -> 309 instructions per chunk). Q6_K's
  // half is only an address offset: one copy does as well (two measured 13
  // instructions more per chunk).
  auto chunk = [&](auto half, int i) {
    int kH;
    if constexpr (std::is_same_v<decltype(half), int>) {
      kH = half;
    } else {
      kH = decltype(half)::value;
    }
    const int c = c_begin + i;
    IssueGroup<N>(acc, a0, acts(i), 0, p);
    if (i >= 1 && i - 1 + kStages < nc) {
      Load<T, N, W, !kTma>(p, smem + ((i - 1) % kStages) * kStage, wr, wc, c - 1 + kStages);
      if constexpr (kTma) {
        if (threadIdx.x == 0) {
          const int next = i - 1 + kStages;
          if constexpr (kCluster > 1) {
            // Both CTAs are done with local chunk i - 1 (phase (i - 1) / kStages).
            mbar_wait(smem_addr(&free_bar[next % kStages]), ((next / kStages) - 1) & 1);
          }
          issue_acts(next);
        }
      }
    }
    cp_async_commit();
    DecodeGroup<T, 4>(weights(i), kH, a1);
    wgmma_wait<0>();
    IssueGroup<N>(acc, a1, acts(i), 4, p);
    if (i + 1 < nc) {
      cp_async_wait<kStages - 2>();
      ready(i + 1);
      DecodeGroup<T, 0>(weights(i + 1), 1 - kH, a0);
    }
    wgmma_wait<0>();
    // One warp's wait retires its warpgroup's wgmmas, not the other
    // warpgroup's: with two, the stage this chunk used may be refilled (at
    // the next iteration) only once both have read it.
    if constexpr (W > 4) __syncthreads();
    if constexpr (kCluster > 1) {
      if (threadIdx.x == 0) {
        const uint32_t bar = smem_addr(&free_bar[i % kStages]);
#pragma unroll
        for (int q = 0; q < kCluster; ++q) mbar_arrive_cluster(mapa_shared(bar, q));
      }
    }
  };
  for (int i = 0; i < nc; ++i) {
    if constexpr (T == GgmlType::kQ4_K) {
      if (((c_begin + i) & 1) != 0) {
        chunk(std::integral_constant<int, 1>{}, i);
      } else {
        chunk(std::integral_constant<int, 0>{}, i);
      }
    } else {
      chunk((c_begin + i) & 1, i);
    }
  }
#pragma unroll
  for (int j = 0; j < N / 2; ++j) wgmma_pin(acc[j]);
  cp_async_wait<0>();
  if constexpr (kCluster > 1) cluster_sync();
  if (wr.active) {
    float* const y =
        p.splits > 1 ? (wr.sg == 0 ? p.seg[0].part : wr.sg == 1 ? p.seg[1].part : p.seg[2].part) +
                           static_cast<int64_t>(z) * p.split_stride
                     : (wr.sg == 0 ? p.seg[0].y : wr.sg == 1 ? p.seg[1].y : p.seg[2].y);
    // The residual here where nothing splits (else the reduce adds it).
    const float* const r = p.splits > 1 ? nullptr
                                        : (wr.sg == 0 ? p.seg[0].r : wr.sg == 1 ? p.seg[1].r : p.seg[2].r);
#pragma unroll
    for (int j = 0; j < N / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t row = wr.rbase + g + ((e >> 1) ? 8 : 0);
        const int tok = 8 * j + 2 * t + (e & 1);
        if (row < wr.rows && tok < p.nt) {
          const int64_t at = static_cast<int64_t>(tok) * wr.rows + row;
          y[at] = r != nullptr ? r[at] + acc[4 * j + e] : acc[4 * j + e];
        }
      }
    }
  }
#endif  // MINFER_SM90A_DEVICE
}

using Info = splitk::KernelFacts;

template <GgmlType T, int N, int W, int kAct>
const Info& InfoOf() {
  static PerDevice<Info> info;
  return splitk::FactsOnce(info, &dqw_kernel<T, N, W, kAct>, 32 * W,
                           StagesFor<T, N, W>() * StageBytes<T, N, W>() + 1024);
}

// The tile N for nt tokens: the batch rounded up to a power of two, 8..256.
int TileTokens(int64_t nt) {
  int n = 8;
  while (n < nt && n < 256) n *= 2;
  return n;
}

// With launch false: only reports the instantiation's facts; else launches.
// The TMA forms exist for N >= 32 (the DQ GEMM takes 17 tokens and more in
// the backend); smaller batches take the copies.
template <GgmlType T, int W>
bool GoW(const Params& p, int act_load, const CUtensorMap& tmap, cudaStream_t stream, bool launch,
         Info* out) {
  auto go = [&](auto nc, auto mode) {
    constexpr int kN = decltype(nc)::value;
    constexpr int kAct = decltype(mode)::value;
    const Info& info = InfoOf<T, kN, W, kAct>();
    *out = info;
    if (info.ctas_per_sm <= 0) return false;
    if (launch) {
      const dim3 grid(static_cast<unsigned>(p.tiles), static_cast<unsigned>(p.splits));
      LaunchGridIn(dqw_kernel<T, kN, W, kAct>, grid, 32 * W, info.smem, stream,
                   kAct == kActTmaPair ? 2u : 0u, p, tmap);
    }
    return true;
  };
  auto modes = [&](auto nc) {
    constexpr int kN = decltype(nc)::value;
    if constexpr (kN >= 32) {
      if (act_load == kActTma) return go(nc, std::integral_constant<int, kActTma>{});
      if (act_load == kActTmaPair) return go(nc, std::integral_constant<int, kActTmaPair>{});
    }
    return go(nc, std::integral_constant<int, kActCopies>{});
  };
  switch (TileTokens(p.nt)) {
    case 8: return modes(std::integral_constant<int, 8>{});
    case 16: return modes(std::integral_constant<int, 16>{});
    case 32: return modes(std::integral_constant<int, 32>{});
    case 64: return modes(std::integral_constant<int, 64>{});
    case 128: return modes(std::integral_constant<int, 128>{});
    default: return modes(std::integral_constant<int, 256>{});
  }
}

bool Dispatch(GgmlType type, int warps, const Params& p, int act_load, const CUtensorMap& tmap,
              cudaStream_t stream, bool launch, Info* info) {
  if (type == GgmlType::kQ4_K) {
    return warps == 8 ? GoW<GgmlType::kQ4_K, 8>(p, act_load, tmap, stream, launch, info)
                      : GoW<GgmlType::kQ4_K, 4>(p, act_load, tmap, stream, launch, info);
  }
  return warps == 8 ? GoW<GgmlType::kQ6_K, 8>(p, act_load, tmap, stream, launch, info)
                    : GoW<GgmlType::kQ6_K, 4>(p, act_load, tmap, stream, launch, info);
}

}  // namespace
}  // namespace dqw

bool DqwAvailable() {
#if defined(MINFER_SM90A)
  // Per device: a host may mix an H100 with a GPU of another generation.
  static PerDevice<bool> ok;
  return ok.Get([](int id) {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, id) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, id) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return major == 9 && minor == 0;
  });
#else
  return false;
#endif
}

cudaError_t LaunchDqWgmma(const MmqSegments& s, const void* act, int64_t nt, cudaStream_t stream,
                          const DqwTuning* tuning, const char** why_not) {
  using dqw::Params;
  const char* unused;
  if (why_not == nullptr) why_not = &unused;
  *why_not = nullptr;
  if (s.n < 1 || s.n > kMmqMaxSegments || nt < 0 || act == nullptr ||
      reinterpret_cast<uintptr_t>(act) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  const GgmlType type = s.w[0].type;
  const int64_t k = s.w[0].k;
  if (k <= 0 || k % 256 != 0 || k > (int64_t{1} << 30)) return cudaErrorInvalidValue;
  const float* const residual = tuning != nullptr ? tuning->residual : nullptr;
  SplitOutputs* const kept = tuning != nullptr ? tuning->kept : nullptr;
  if (residual != nullptr && s.n != 1) return cudaErrorInvalidValue;
  if (kept != nullptr) {
    *kept = SplitOutputs{};
    for (int i = 0; i < s.n; ++i) kept->part[i] = s.y[i];
  }
  if (nt == 0) return cudaSuccess;
  if (nt > kDqwMaxTokens) {
    *why_not = "more than 256 tokens";
    return cudaErrorNotSupported;
  }
  if (!DqSupports(type, s.w[0].q6k_padded)) {
    *why_not = type == GgmlType::kQ6_K ? "raw 210-byte Q6_K blocks" : "not a Q4_K or Q6_K weight";
    return cudaErrorNotSupported;
  }
  if (!DqwAvailable()) {
    *why_not = "no sm_90a code in this build or not a compute capability 9.0 GPU";
    return cudaErrorNotSupported;
  }
  Params p{};
  p.k = k;
  p.n_chunks = static_cast<int>(k / 128);
  p.act = static_cast<const uint8_t*>(act);
  p.nt = static_cast<int>(nt);
  p.sbo = 1024;
  if (tuning != nullptr && tuning->debug_wrong_stride) p.sbo = 2048;
  const int warps = tuning != nullptr && tuning->warpgroups == 2 ? 8 : 4;
  const int64_t block_bytes = DeviceBlockBytes(type, s.w[0].q6k_padded);
  int64_t weight_bytes = 0, stride = 0;
  if (const cudaError_t e =
          splitk::CopySegments(s, nt, block_bytes, &p, &weight_bytes, &stride, why_not);
      e != cudaSuccess) {
    return e;
  }
  if (p.n_seg == 0) return cudaSuccess;
  p.seg[0].r = residual;
  // The activation load (DqwTuning::act_load): the TMA forms need a tensor
  // map, and take the copies where none can be made.
  int act_load = tuning != nullptr ? tuning->act_load : 0;
  CUtensorMap tmap;
  std::memset(&tmap, 0, sizeof(tmap));
  if (act_load < 0 || act_load > 2) return cudaErrorInvalidValue;
  if (act_load != 0 && (dqw::TileTokens(nt) < 32 ||
                        !dqw::EncodeActivations(&tmap, act, k, nt, dqw::TileTokens(nt)))) {
    act_load = 0;
  }
  dqw::Info info;
  if (!dqw::Dispatch(type, warps, p, act_load, tmap, stream, false, &info)) {
    *why_not = "the kernel's shared memory does not fit this GPU";
    return cudaErrorNotSupported;
  }
  splitk::AssignGroups(&p, 1, warps);
  // The pair form launches clusters of two CTAs along the row tiles.
  if (act_load == 2) p.tiles += p.tiles % 2;
  p.splits = 1;
  // Split-k as the DQ GEMM does it (dq_gemm.cu): fill the resident CTA
  // slots in whole waves, a few chunks per split, partial traffic capped:
  // at most the weight bytes once the tiles fill a wave; below a wave (a
  // q/k/v or attention output) up to 4x them, since the tensor work, not
  // the bytes, bounds a wide batch there.
  if (tuning != nullptr && tuning->split_k != 0 && tuning->split_workspace != nullptr) {
    const splitk::DeviceFacts& dev = splitk::CurrentDevice();
    const int64_t slots = int64_t{dev.sms} * info.ctas_per_sm;
    const int64_t traffic_cap =
        std::max<int64_t>(p.tiles < slots ? 2 : 1,
                          (p.tiles < slots ? 4 : 1) * weight_bytes / std::max<int64_t>(4 * stride, 1));
    const int64_t splits = splitk::DecodeSplits(
        tuning->split_k, p.tiles, slots, p.n_chunks, tuning->min_chunks > 0 ? tuning->min_chunks : 4,
        traffic_cap, tuning->split_bytes, stride);
    if (splits >= 2 && !splitk::SetSplits(&p, tuning->split_workspace, nt, splits, stride)) {
      return cudaErrorInvalidValue;
    }
  }
  dqw::Dispatch(type, warps, p, act_load, tmap, stream, true, &info);
  if (tuning != nullptr && tuning->act_load_used != nullptr) *tuning->act_load_used = act_load;
  if (kept != nullptr) {
    splitk::DescribeOutputs(s, p, kept);
  } else if (p.splits > 1) {
    splitk::Reduce(p, stride, stream);
  }
  return cudaGetLastError();
}

}  // namespace minfer::cuda
