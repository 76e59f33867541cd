// The dequantizing few-token GEMM (dq_gemm.h): Q4_K / Q6_K weights decoded
// to f16 with their scales applied, f16 mma.m16n8k16 with f32 accumulators,
// for the 1..64 tokens of a decode batch.
//
// Work. A CTA is 4 warps; each warp owns 16 * MT weight rows (its "row
// group", within one segment) across all the batch's tokens, and walks k in
// chunks of 128 elements: half a super-block. CTA y is the k split. Per
// chunk, a 3-stage cp.async ring brings into shared memory each warp's rows
// (warp-private: only the owning warp reads them) and the chunk's
// activations of every token (shared by the CTA's warps); one
// __syncthreads per chunk orders a stage's refill after every warp's reads.
//
// Fragments. mma.m16n8k16 (f16 A row-major 16x16, B 16x8, f32 C): lane (g
// = lane / 4, t = lane % 4) holds A registers (row g, k 2t..2t+1), (row
// g+8, same), (row g, k 2t+8..2t+9), (row g+8, same); B registers (k
// 2t..2t+1, column g), (k 2t+8..2t+9, column g); C (g, 2t), (g, 2t+1),
// (g+8, 2t), (g+8, 2t+1). The k index of an mma is a "slot", not an
// element: a dot product does not care in which order its terms come, so
// lane t maps its four slots of each mma to four elements it chose, and
// the B fragment of the same lane t (same t, column g) reads the
// activations of those same elements. Each lane decodes one 32-bit word of
// codes per row at a time: 4 bytes b0..b3, each with a low and a high
// nibble (Q6_K: plus two high bits from qh). The f16 pair (b0, b2) comes
// out of a word with one mask-and-or ((w & 0x000F000F) | 0x64006400 is the
// half2 (1024 + b0, 1024 + b2)), so the low nibbles of a word are one mma
// step: slots (2t, 2t+1) = elements (4w, 4w+2), slots (2t+8, 2t+9) =
// (4w+1, 4w+3) of a 16-element group, and the high nibbles another step.
// The activation layout stores each 4-element group as (0, 2, 1, 3), so
// the B registers of a step are 8 consecutive bytes.
//
// Which lane decodes what, per 128-element chunk and row (16-byte pieces
// of the block; "group" = 16 elements = 32 activation bytes):
//  * Q4_K half h: lane t decodes qs bytes 64h + 16t .. +15: low nibbles
//    are groups 4 (t/2) + t%2 of the chunk (sub-block 4h + 2 (t/2)), high
//    nibbles groups + 2 (the next sub-block). Scales from the block's first
//    16 bytes (d, dmin, the 6-bit scales and mins).
//  * Q6_K half h: lane t decodes ql bytes 64h + 16t .. +15 with qh bytes
//    128 + 32h + 16 (t%2) .. +15 (bits 2 (t/2) and 2 (t/2) + 4): low
//    nibbles are group t of the chunk, high nibbles group t + 4; scales
//    8h + t and 8h + t + 4.
//
// Shared memory. Weight rows are 128 bytes (Q4_K: 5 pieces, Q6_K: 8) with
// the piece index XOR 4 on odd rows, so the two rows a quarter-warp's
// 16-byte loads touch (g even and odd) fall on different banks. Activation
// rows are 272 bytes (16 pieces and a pad, one bank group further per
// token) with piece p stored at p ^ (4 (p / 8 % 2)): each quarter-warp's
// loads (2 tokens x 4 lanes) then hit 8 different 16-byte bank groups for
// both types and both nibble halves.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/dq_gemm.h"
#include "cuda/kernels/dq_wgmma.h"
#include "cuda/kernels/dq_pieces.cuh"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/ptx_sm80.cuh"
#include "cuda/kernels/split_k.cuh"

namespace minfer::cuda {
namespace dq {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kStages = 3;
constexpr int kKC = 128;          // k elements per chunk
constexpr int kAS = 2 * kKC + 16;  // shared bytes per token row
constexpr int kWS = 128;          // shared bytes per weight row

// A row's pieces per chunk (dq_pieces.cuh; rows kWS apart here).
template <GgmlType T>
using Ty = DqPieces<T>;

__device__ __forceinline__ int WOff(int row, int piece) {
  return row * kWS + 16 * (piece ^ ((row & 1) << 2));
}
__device__ __forceinline__ int AOff(int tok, int piece) {
  return tok * kAS + 16 * (piece ^ (((piece >> 3) & 1) << 2));
}

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
  int64_t split_stride;  // floats per split slab
  int tiles;             // CTAs per split
};

template <int MT>
__host__ __device__ constexpr int StageBytes(int nt8) {
  return kWarps * 16 * MT * kWS + 8 * nt8 * kAS;
}

using splitk::RowsOf;
using splitk::WarpRows;

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800

__device__ __forceinline__ uint4 lds128(const uint8_t* p) {
  return *reinterpret_cast<const uint4*>(p);
}
__device__ __forceinline__ half2 AsH2(uint32_t u) {
  half2 h;
  static_assert(sizeof(h) == 4, "half2");
  memcpy(&h, &u, 4);
  return h;
}
__device__ __forceinline__ uint32_t AsU(half2 h) {
  uint32_t u;
  memcpy(&u, &h, 4);
  return u;
}
__device__ __forceinline__ uint32_t Word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

constexpr uint32_t kMagic = 0x64006400u;  // half2 (1024, 1024)

// Issues the copies of chunk c (half c % 2 of super-block c / 2) of this
// warp's rows and of the activations into `stage` (the caller commits).
template <GgmlType T, int NT8, int MT>
__device__ __forceinline__ void Load(const Params& p, uint8_t* stage, const WarpRows& wr, int c) {
  using X = Ty<T>;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int h = c & 1;
  if (wr.active) {
    uint8_t* const sw = stage + warp * 16 * MT * kWS;
    const uint8_t* const src = wr.w + static_cast<int64_t>(c >> 1) * X::kBlockBytes;
    constexpr int kN = 16 * MT * X::kPieces;
#pragma unroll
    for (int i0 = 0; i0 < kN; i0 += 32) {
      const int i = i0 + lane;
      if (kN % 32 == 0 || i < kN) {
        const int r = i / X::kPieces, q = i % X::kPieces;
        const int64_t row = min(wr.rbase + r, wr.rows - 1);
        cp_async16(smem_addr(sw + WOff(r, q)), src + row * wr.row_bytes + X::Src(h, q), 16);
      }
    }
  }
  // Activations of tokens 0..8 NT8 - 1; rows past the batch are zero-filled.
  uint8_t* const sa = stage + kWarps * 16 * MT * kWS;
  constexpr int kN = 8 * NT8 * 16;
#pragma unroll
  for (int i0 = 0; i0 < kN; i0 += kThreads) {
    const int i = i0 + threadIdx.x;
    if (kN % kThreads == 0 || i < kN) {
      const int tok = i >> 4, q = i & 15;
      const bool live = tok < p.nt;
      const uint8_t* src =
          p.act + (live ? static_cast<int64_t>(tok) * p.k * 2 + static_cast<int64_t>(c) * 256 + 16 * q
                        : 0);
      cp_async16(smem_addr(sa + AOff(tok, q)), src, live ? 16 : 0);
    }
  }
}

// The f16 A registers of one mma step for rows r0 (e = 0) and r1 (e = 1)
// are built into a[e] and a[2 + e].
// Q4_K: word x of codes -> low-nibble step (lo) and high-nibble step (hi),
// w = q s - m.
__device__ __forceinline__ void DecodeQ4K(uint32_t x, half2 s_lo, half2 m_lo, half2 s_hi,
                                          half2 m_hi, int e, uint32_t (&lo)[4],
                                          uint32_t (&hi)[4]) {
  const half2 k1024 = AsH2(kMagic);
  const uint32_t l_a = (x & 0x000F000Fu) | kMagic;
  const uint32_t l_b = ((x >> 8) & 0x000F000Fu) | kMagic;
  const uint32_t h_a = ((x >> 4) & 0x000F000Fu) | kMagic;
  const uint32_t h_b = ((x >> 12) & 0x000F000Fu) | kMagic;
  lo[e] = AsU(__hfma2(__hsub2(AsH2(l_a), k1024), s_lo, m_lo));
  lo[2 + e] = AsU(__hfma2(__hsub2(AsH2(l_b), k1024), s_lo, m_lo));
  hi[e] = AsU(__hfma2(__hsub2(AsH2(h_a), k1024), s_hi, m_hi));
  hi[2 + e] = AsU(__hfma2(__hsub2(AsH2(h_b), k1024), s_hi, m_hi));
}

// Q6_K: ql word x, qh word y already shifted right by 2 (t / 2);
// w = (q - 32) s.
__device__ __forceinline__ void DecodeQ6K(uint32_t x, uint32_t ys, half2 s_lo, half2 s_hi, int e,
                                          uint32_t (&lo)[4], uint32_t (&hi)[4]) {
  const half2 k1056 = __floats2half2_rn(1056.0f, 1056.0f);
  const uint32_t vl = (x & 0x0F0F0F0Fu) | ((ys << 4) & 0x30303030u);
  const uint32_t vh = ((x >> 4) & 0x0F0F0F0Fu) | (ys & 0x30303030u);
  lo[e] = AsU(__hmul2(__hsub2(AsH2((vl & 0x00FF00FFu) | kMagic), k1056), s_lo));
  lo[2 + e] = AsU(__hmul2(__hsub2(AsH2(((vl >> 8) & 0x00FF00FFu) | kMagic), k1056), s_lo));
  hi[e] = AsU(__hmul2(__hsub2(AsH2((vh & 0x00FF00FFu) | kMagic), k1056), s_hi));
  hi[2 + e] = AsU(__hmul2(__hsub2(AsH2(((vh >> 8) & 0x00FF00FFu) | kMagic), k1056), s_hi));
}

// Folds chunk c (resident in `stage`) into this warp's accumulators.
template <GgmlType T, int NT8, int MT>
__device__ __forceinline__ void Compute(const uint8_t* stage, int c, float (&acc)[MT][NT8][4]) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int h = c & 1;
  const uint8_t* const sw = stage + warp * 16 * MT * kWS;
  const uint8_t* const sa = stage + kWarps * 16 * MT * kWS;
  // Per m-tile and row (e): the scales of the low and high nibble steps,
  // and the lane's 16 code bytes (Q6_K: and 16 qh bytes).
  half2 s_lo[MT][2], s_hi[MT][2], m_lo[MT][2], m_hi[MT][2];
  uint4 code[MT][2], qh[MT][2];
  const half2 k1024 = AsH2(kMagic);
#pragma unroll
  for (int j = 0; j < MT; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int row = 16 * j + g + 8 * e;
      if constexpr (T == GgmlType::kQ4_K) {
        // d, dmin, then scales[0..11] (6-bit scales and mins, packed).
        const uint4 hd = lds128(sw + WOff(row, 0));
        const int sh = 16 * (t >> 1);  // sub-blocks 2 (t/2) and 2 (t/2) + 1 of the half
        const uint32_t a = hd.y >> sh, b = hd.z >> sh, cc = hd.w >> sh;
        uint32_t sc, mn;
        if (h == 0) {
          sc = a & 0x3F3Fu;
          mn = b & 0x3F3Fu;
        } else {
          sc = (cc & 0x0F0Fu) | ((a >> 2) & 0x3030u);
          mn = ((cc >> 4) & 0x0F0Fu) | ((b >> 2) & 0x3030u);
        }
        const half2 dd = AsH2(hd.x);  // (d, dmin)
        const half2 s = __hmul2(__hsub2(AsH2(__byte_perm(sc, 0x64646464u, 0x4140)), k1024),
                                __low2half2(dd));
        const half2 m = __hneg2(__hmul2(
            __hsub2(AsH2(__byte_perm(mn, 0x64646464u, 0x4140)), k1024), __high2half2(dd)));
        s_lo[j][e] = __low2half2(s);
        s_hi[j][e] = __high2half2(s);
        m_lo[j][e] = __low2half2(m);
        m_hi[j][e] = __high2half2(m);
        code[j][e] = lds128(sw + WOff(row, 1 + t));
      } else {
        const uint4 sc = lds128(sw + WOff(row, 6));
        const uint32_t d = *reinterpret_cast<const uint32_t*>(sw + WOff(row, 7));
        // Bytes t of scales[8h .. 8h + 3] and scales[8h + 4 .. 8h + 7]:
        // int8 -> 1024 + 128 + v as f16 bits, minus 1152.
        const uint32_t w0 = h ? sc.z : sc.x, w1 = h ? sc.w : sc.y;
        const uint32_t v = (__byte_perm(w0, w1, static_cast<uint32_t>(t) | ((4u + t) << 8)) &
                            0x00FF00FFu) ^
                           0x64806480u;
        const half2 s = __hmul2(__hsub2(AsH2(v), __floats2half2_rn(1152.0f, 1152.0f)),
                                __low2half2(AsH2(d)));
        s_lo[j][e] = __low2half2(s);
        s_hi[j][e] = __high2half2(s);
        m_lo[j][e] = m_hi[j][e] = s;  // unused
        code[j][e] = lds128(sw + WOff(row, t));
        qh[j][e] = lds128(sw + WOff(row, 4 + (t & 1)));
      }
    }
  }
  // This lane's 16-element groups in the chunk for the low and high steps.
  const int grp_lo = T == GgmlType::kQ4_K ? 4 * (t >> 1) + (t & 1) : t;
  const int grp_hi = T == GgmlType::kQ4_K ? grp_lo + 2 : grp_lo + 4;
  const int qh_shift = 2 * (t >> 1);
#pragma unroll
  for (int wp = 0; wp < 2; ++wp) {
    // A registers of words 2 wp and 2 wp + 1: [m-tile][word][low/high][reg].
    uint32_t a[MT][2][2][4];
#pragma unroll
    for (int j = 0; j < MT; ++j) {
#pragma unroll
      for (int ww = 0; ww < 2; ++ww) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const uint32_t x = Word(code[j][e], 2 * wp + ww);
          if constexpr (T == GgmlType::kQ4_K) {
            DecodeQ4K(x, s_lo[j][e], m_lo[j][e], s_hi[j][e], m_hi[j][e], e, a[j][ww][0],
                      a[j][ww][1]);
          } else {
            DecodeQ6K(x, Word(qh[j][e], 2 * wp + ww) >> qh_shift, s_lo[j][e], s_hi[j][e], e,
                      a[j][ww][0], a[j][ww][1]);
          }
        }
      }
    }
#pragma unroll
    for (int n = 0; n < NT8; ++n) {
      // B registers of words 2 wp, 2 wp + 1 of the lane's groups, token 8n + g.
      const uint4 bl = lds128(sa + AOff(8 * n + g, 2 * grp_lo + wp));
      const uint4 bh = lds128(sa + AOff(8 * n + g, 2 * grp_hi + wp));
#pragma unroll
      for (int j = 0; j < MT; ++j) {
        mma_f16(acc[j][n], a[j][0][0], bl.x, bl.y);
        mma_f16(acc[j][n], a[j][1][0], bl.z, bl.w);
        mma_f16(acc[j][n], a[j][0][1], bh.x, bh.y);
        mma_f16(acc[j][n], a[j][1][1], bh.z, bh.w);
      }
    }
  }
}

#endif  // sm_80+

template <GgmlType T, int NT8, int MT>
__global__ void __launch_bounds__(kThreads) dq_gemm_kernel(const Params p) {
  pdl_enter();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int kStage = StageBytes<MT>(NT8);
  const int warp = threadIdx.x >> 5;
  const WarpRows wr = RowsOf<MT>(p, blockIdx.x * kWarps + warp);
  const int z = blockIdx.y;
  const int c_begin = static_cast<int>(static_cast<int64_t>(z) * p.n_chunks / p.splits);
  const int c_end = static_cast<int>(static_cast<int64_t>(z + 1) * p.n_chunks / p.splits);
  const int nc = c_end - c_begin;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < nc) Load<T, NT8, MT>(p, smem + s * kStage, wr, c_begin + s);
    cp_async_commit();
  }
  float acc[MT][NT8][4];
#pragma unroll
  for (int j = 0; j < MT; ++j)
#pragma unroll
    for (int n = 0; n < NT8; ++n) acc[j][n][0] = acc[j][n][1] = acc[j][n][2] = acc[j][n][3] = 0.0f;
  for (int i = 0; i < nc; ++i) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // chunk i is in; every warp is done with chunk i - 1's stage
    if (i + kStages - 1 < nc) {
      Load<T, NT8, MT>(p, smem + ((i + kStages - 1) % kStages) * kStage, wr,
                       c_begin + i + kStages - 1);
    }
    cp_async_commit();
    if (wr.active) Compute<T, NT8, MT>(smem + (i % kStages) * kStage, c_begin + i, acc);
  }
  cp_async_wait<0>();
  if (!wr.active) return;
  // Without a split, y; with splits, split z's slab of partials (added by
  // splitk::Reduce). C fragment: rows g, g + 8 and tokens 2t, 2t + 1.
  // (Field-by-field selects: a reference into the parameter array by a
  // run-time index would copy it to local memory.)
  float* const y =
      p.splits > 1 ? (wr.sg == 0 ? p.seg[0].part : wr.sg == 1 ? p.seg[1].part : p.seg[2].part) +
                         static_cast<int64_t>(z) * p.split_stride
                   : (wr.sg == 0 ? p.seg[0].y : wr.sg == 1 ? p.seg[1].y : p.seg[2].y);
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < MT; ++j) {
#pragma unroll
    for (int n = 0; n < NT8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t row = wr.rbase + 16 * j + g + ((e >> 1) ? 8 : 0);
        const int tok = 8 * n + 2 * t + (e & 1);
        if (row < wr.rows && tok < p.nt) y[static_cast<int64_t>(tok) * wr.rows + row] = acc[j][n][e];
      }
    }
  }
#endif  // __CUDA_ARCH__ >= 800
}

// Activations: 8 lanes per 32-value block (QuantizeQ8Group, bit for bit the
// CPU's codes and scale), each with its 4 values d * q as the f16 pairs (0,
// 2) and (1, 3) (DqPack). kSwiGlu: of silu(x) * u, the CPU's and
// LaunchSwiGlu's float operations. Where the pairs go is the layout: the DQ
// GEMM's (kEvensOdds false) keeps each 4-group as (0, 2, 1, 3); the Hopper
// GEMM's (dq_wgmma.h, kEvensOdds true) puts each 16-group's evens first,
// then its odds, so lane `sub` writes word sub % 4 of its 16-group's evens
// and of its odds.
//
// Split-k partials (LaunchSwiGluDqw with splits): x and u may each be the sum of
// `xs` / `us` slabs (slab z at + z * stride), added in z order as
// splitk::SumSplits does, so the values are the reduce's bits.
template <bool kVec, bool kSwiGlu, bool kEvensOdds>
__global__ void __launch_bounds__(256) quantize_dq_kernel(const float* __restrict__ x,
                                                          const float* __restrict__ u,
                                                          uint32_t* __restrict__ out,
                                                          int64_t n_blocks, int xs,
                                                          int64_t x_stride, int us,
                                                          int64_t u_stride) {
  pdl_enter();
  const int64_t gid = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x;
  const int64_t blk = gid >> 3;
  const int sub = static_cast<int>(gid & 7);
  const bool active = blk < n_blocks;
  auto load1 = [&](const float* src) {
    if constexpr (kVec) {
      return __ldg(reinterpret_cast<const float4*>(src));
    } else {
      return make_float4(__ldg(src), __ldg(src + 1), __ldg(src + 2), __ldg(src + 3));
    }
  };
  auto load = [&](const float* src, int splits, int64_t stride) {
    return splitk::SumSlabs<float4>([&](int64_t off) { return load1(src + off); }, splits, stride);
  };
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
  if (active) {
    v = load(x + blk * 32 + sub * 4, xs, x_stride);
    if constexpr (kSwiGlu) {
      const float4 w = load(u + blk * 32 + sub * 4, us, u_stride);
      v = make_float4(silu_f(v.x) * w.x, silu_f(v.y) * w.y, silu_f(v.z) * w.z, silu_f(v.w) * w.w);
    }
  }
  const Q8Group q = QuantizeQ8Group(v);
  if (!active) return;
  const uint2 pair = DqPack(q);
  if constexpr (kEvensOdds) {
    uint32_t* const grp = out + blk * 16 + (sub >> 2) * 8;
    grp[sub & 3] = pair.x;
    grp[4 + (sub & 3)] = pair.y;
  } else {
    reinterpret_cast<uint2*>(out)[blk * 8 + sub] = pair;
  }
}

using Info = splitk::KernelFacts;

template <GgmlType T, int NT8, int MT>
const Info& InfoOf() {
  static PerDevice<Info> info;
  return splitk::FactsOnce(info, &dq_gemm_kernel<T, NT8, MT>, kThreads,
                           kStages * StageBytes<MT>(NT8));
}

// With launch false: only reports the instantiation's facts in *info
// (ctas_per_sm 0 = cannot run); else launches it. False: nothing launched.
template <GgmlType T, int MT>
bool Go(const Params& p, cudaStream_t stream, bool launch, Info* out) {
  const int nt8 = (p.nt + 7) / 8;
  auto go = [&](auto nt8c) {
    constexpr int kNt8 = decltype(nt8c)::value;
    const Info& info = InfoOf<T, kNt8, MT>();
    *out = info;
    if (info.ctas_per_sm <= 0) return false;
    if (launch) {
      const dim3 grid(static_cast<unsigned>(p.tiles), static_cast<unsigned>(p.splits));
      LaunchGrid(dq_gemm_kernel<T, kNt8, MT>, grid, kThreads, info.smem, stream, p);
    }
    return true;
  };
  if (nt8 <= 1) return go(std::integral_constant<int, 1>{});
  if (nt8 <= 2) return go(std::integral_constant<int, 2>{});
  if (nt8 <= 4) return go(std::integral_constant<int, 4>{});
  return go(std::integral_constant<int, 8>{});
}

bool Dispatch(GgmlType type, int mt, const Params& p, cudaStream_t stream, bool launch,
              Info* info) {
  if (type == GgmlType::kQ4_K) {
    return mt == 2 ? Go<GgmlType::kQ4_K, 2>(p, stream, launch, info)
                   : Go<GgmlType::kQ4_K, 1>(p, stream, launch, info);
  }
  return mt == 2 ? Go<GgmlType::kQ6_K, 2>(p, stream, launch, info)
                 : Go<GgmlType::kQ6_K, 1>(p, stream, launch, info);
}

}  // namespace
}  // namespace dq

int64_t DqActivationBytes(int64_t k, int64_t nt) {
  if (k <= 0 || nt <= 0) return 0;
  return 2 * k * nt;
}

int64_t DqwActivationBytes(int64_t k, int64_t nt) { return DqActivationBytes(k, nt); }

namespace {
template <bool kSwiGlu, bool kEvensOdds>
cudaError_t LaunchQuantizeDqImpl(const float* x, const float* u, void* act, int64_t k, int64_t nt,
                                 cudaStream_t stream, int xs = 1, int64_t x_stride = 0,
                                 int us = 1, int64_t u_stride = 0) {
  if (k < 0 || nt < 0 || k % 32 != 0) return cudaErrorInvalidValue;
  if (xs < 1 || xs > 16 || us < 1 || us > 16 || (xs > 1 && x_stride < k * nt) ||
      (us > 1 && u_stride < k * nt)) {
    return cudaErrorInvalidValue;
  }
  const int64_t n_blocks = k / 32 * nt;
  if (n_blocks == 0) return cudaSuccess;
  if (x == nullptr || (kSwiGlu && u == nullptr) || act == nullptr ||
      reinterpret_cast<uintptr_t>(act) % 16 != 0 || reinterpret_cast<uintptr_t>(x) % 4 != 0 ||
      (kSwiGlu && reinterpret_cast<uintptr_t>(u) % 4 != 0)) {
    return cudaErrorInvalidValue;
  }
  const int64_t grid = (n_blocks * 8 + 255) / 256;
  if (grid > 0x7FFFFFFF) return cudaErrorInvalidValue;
  uint32_t* out = static_cast<uint32_t*>(act);
  const unsigned g = static_cast<unsigned>(grid);
  // (A slab stride that is not a multiple of 4 floats misaligns the float4
  // loads of every slab past the first.)
  if (reinterpret_cast<uintptr_t>(x) % 16 == 0 && (xs == 1 || x_stride % 4 == 0) &&
      (!kSwiGlu || (reinterpret_cast<uintptr_t>(u) % 16 == 0 && (us == 1 || u_stride % 4 == 0)))) {
    LaunchGrid(dq::quantize_dq_kernel<true, kSwiGlu, kEvensOdds>, g, 256, 0, stream, x, u, out,
               n_blocks, xs, x_stride, us, u_stride);
  } else {
    LaunchGrid(dq::quantize_dq_kernel<false, kSwiGlu, kEvensOdds>, g, 256, 0, stream, x, u, out,
               n_blocks, xs, x_stride, us, u_stride);
  }
  return cudaGetLastError();
}
}  // namespace

cudaError_t LaunchQuantizeDq(const float* x, void* act, int64_t k, int64_t nt,
                             cudaStream_t stream) {
  return LaunchQuantizeDqImpl<false, false>(x, nullptr, act, k, nt, stream);
}

cudaError_t LaunchSwiGluDq(const float* g, const float* u, void* act, int64_t k, int64_t nt,
                           cudaStream_t stream) {
  return LaunchQuantizeDqImpl<true, false>(g, u, act, k, nt, stream);
}

// The Hopper GEMM's layout (dq_wgmma.h) is written here, in the sm_80
// unit, beside the DQ GEMM's: the same kernel, another store.
cudaError_t LaunchQuantizeDqw(const float* x, void* act, int64_t k, int64_t nt,
                              cudaStream_t stream) {
  return LaunchQuantizeDqImpl<false, true>(x, nullptr, act, k, nt, stream);
}

cudaError_t LaunchSwiGluDqw(const float* g, const float* u, void* act, int64_t k, int64_t nt,
                            cudaStream_t stream, int g_splits, int64_t g_stride, int u_splits,
                            int64_t u_stride) {
  return LaunchQuantizeDqImpl<true, true>(g, u, act, k, nt, stream, g_splits, g_stride, u_splits,
                                          u_stride);
}

namespace {
// y = r + the sum of the splits (splitk::SumSplits), four outputs per
// thread where aligned (kVec).
template <bool kVec>
__global__ void split_sum_kernel(const float* part, int splits, int64_t stride, const float* r,
                                 float* y, int64_t n) {
  pdl_enter();
  using V = std::conditional_t<kVec, float4, float>;
  constexpr int kW = kVec ? 4 : 1;
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kW;
  if (i >= n) return;
  V v = splitk::SumSplits<V>(part + i, splits, stride);
  // (A plain load: r may alias y.)
  if (r != nullptr) v = splitk::AddV(*reinterpret_cast<const V*>(r + i), v);
  *reinterpret_cast<V*>(y + i) = v;
}
}  // namespace

cudaError_t LaunchSplitSum(const float* part, int splits, int64_t stride, const float* r, float* y,
                           int64_t n, cudaStream_t stream) {
  if (n < 0 || splits < 1 || splits > 16 || (splits > 1 && stride < n)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (part == nullptr || y == nullptr) return cudaErrorInvalidValue;
  auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  const bool vec = n % 4 == 0 && (splits == 1 || stride % 4 == 0) && aligned(part) && aligned(y) &&
                   (r == nullptr || aligned(r));
  const int64_t threads = vec ? n / 4 : n;
  const int64_t grid = (threads + 255) / 256;
  if (grid > 0x7FFFFFFF) return cudaErrorInvalidValue;
  if (vec) {
    LaunchGrid(split_sum_kernel<true>, static_cast<unsigned>(grid), 256, 0, stream, part, splits,
               stride, r, y, n);
  } else {
    LaunchGrid(split_sum_kernel<false>, static_cast<unsigned>(grid), 256, 0, stream, part, splits,
               stride, r, y, n);
  }
  return cudaGetLastError();
}


cudaError_t LaunchDqGemm(const MmqSegments& s, const void* act, int64_t nt, cudaStream_t stream,
                         const DqTuning* tuning, const char** why_not) {
  using dq::Params;
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
  if (nt == 0) return cudaSuccess;
  if (nt > kDqMaxTokens) {
    *why_not = "more than 64 tokens";
    return cudaErrorNotSupported;
  }
  if (!DqSupports(type, s.w[0].q6k_padded)) {
    *why_not = type == GgmlType::kQ6_K ? "raw 210-byte Q6_K blocks" : "not a Q4_K or Q6_K weight";
    return cudaErrorNotSupported;
  }
  Params p{};
  p.k = k;
  p.n_chunks = static_cast<int>(k / 128);
  p.act = static_cast<const uint8_t*>(act);
  p.nt = static_cast<int>(nt);
  const int64_t block_bytes = DeviceBlockBytes(type, s.w[0].q6k_padded);
  int64_t weight_bytes = 0, stride = 0;
  if (const cudaError_t e =
          splitk::CopySegments(s, nt, block_bytes, &p, &weight_bytes, &stride, why_not);
      e != cudaSuccess) {
    return e;
  }
  if (p.n_seg == 0) return cudaSuccess;
  const splitk::DeviceFacts& dev = splitk::CurrentDevice();
  if (dev.major < 8) {
    *why_not = "GPU older than sm_80 (no f16 mma.m16n8k16 with this fragment use)";
    return cudaErrorNotSupported;
  }
  // Two m-tiles per warp halve the activation reads from shared memory per
  // weight row but cost registers (fewer CTAs per SM): on the H200 (matmul_bench
  // --dq) they pay above 16 tokens for long rows (k >= 8192) and large
  // outputs, and for the 7B's FFN gate/up rows only up to 32 tokens.
  const int64_t rows_total = stride / nt;
  int mt = 1;
  if (tuning != nullptr && tuning->m_tiles > 0) {
    mt = tuning->m_tiles >= 2 ? 2 : 1;
  } else if (nt > 16 && (k >= 8192 || rows_total >= 65536 || (rows_total >= 16384 && nt <= 32))) {
    mt = 2;
  }
  dq::Info info;
  if (!dq::Dispatch(type, mt, p, stream, false, &info)) {
    *why_not = "the kernel's shared memory does not fit this GPU";
    return cudaErrorNotSupported;
  }
  splitk::AssignGroups(&p, mt, dq::kWarps);
  p.splits = 1;
  // Split-k where the grid of row tiles leaves resident CTA slots empty:
  // enough splits to fill them in whole waves (WaveSplits), keeping a few
  // chunks per split. The partials (written once, read once) cost traffic:
  // at most half the weight bytes, or twice them when the tiles make less
  // than one wave (a 7B's q/k/v or attention output at 33-64 tokens, whose
  // weights alone would occupy a fifth of the GPU: on the H200 splitting
  // them anyway is 1.3-1.6x faster, matmul_bench --dq).
  if (tuning != nullptr && tuning->split_k != 0 && tuning->split_workspace != nullptr) {
    const int64_t slots = int64_t{dev.sms} * info.ctas_per_sm;
    const int64_t traffic_cap =
        weight_bytes / std::max<int64_t>((p.tiles < slots ? 4 : 16) * stride, 1);
    const int64_t splits = splitk::DecodeSplits(
        tuning->split_k, p.tiles, slots, p.n_chunks, tuning->min_chunks > 0 ? tuning->min_chunks : 4,
        traffic_cap, tuning->split_bytes, stride);
    if (splits >= 2 && !splitk::SetSplits(&p, tuning->split_workspace, nt, splits, stride)) {
      return cudaErrorInvalidValue;
    }
  }
  dq::Dispatch(type, mt, p, stream, true, &info);
  if (p.splits > 1) splitk::Reduce(p, stride, stream);
  return cudaGetLastError();
}

}  // namespace minfer::cuda
