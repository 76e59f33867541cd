// Device side of MMQ (mmq.h): PTX wrappers (cp.async, ldmatrix, int8 mma)
// and, per weight type, how one k-chunk of raw weight bytes in shared memory
// becomes mma A fragments and per-block float scales. nvcc only; internal to
// cuda/kernels (included by mmq.cu).
//
// Chunks. The GEMM walks k in chunks of 256 elements = 8 activation blocks:
// one super-block of a K-quant, eight blocks of a legacy type. A chunk of
// one weight row is copied into shared memory byte for byte (the GGUF block
// bytes; Q6_K always in the padded 224-byte layout, the raw 210 bytes
// followed by unused bytes), at a row stride kWS that is an odd multiple of
// 16 bytes: the 8 rows a warp's fragment load touches then start in 8
// different 4-bank groups, so the loads are conflict-free.
//
// Fragments. mma.m16n8k32 (A 16x32 row-major, B 32x8 column-major, PTX ISA
// "Matrix Fragments for mma.m16n8k32"): lane (g = lane / 4, t = lane % 4)
// holds A words a0 = (row g, k 4t..4t+3), a1 = (row g+8, k 4t..), a2 = (row
// g, k 16+4t..), a3 = (row g+8, k 16+4t..); B words b0 = (k 4t..4t+3, col
// g), b1 = (k 16+4t.., col g); C c0..c3 = (g, 2t), (g, 2t+1), (g+8, 2t),
// (g+8, 2t+1). The k index of the mma is the element index within the
// 32-element block in its natural GGUF order: for every type, the 4
// elements 4t..4t+3 (and 16+4t..16+4t+3) of a block come from one aligned
// 32-bit word of nibbles/bytes (plus one word of high bits), so the decode
// of a fragment word is a handful of bit operations (Frag below), and the
// activations need no permutation. m16n8k32 is exactly two m16n8k16 side by
// side ((a0, a1, b0) and (a2, a3, b1)); Q6_K, whose scales change every 16
// elements, issues those two halves separately to keep their integer dots
// apart.
//
// Offsets. The integer codes must reach the mma as signed bytes: Q4_0 (q -
// 8), Q5_0 (q - 16), Q6_K (q - 32) use int8(x - o) = (x + (128 - o)) ^ 0x80
// per byte, exact for x in [0, 2o) and free of cross-byte carries (max
// x + 128 - o < 256).
#ifndef MINFER_CUDA_KERNELS_MMQ_IMPL_CUH_
#define MINFER_CUDA_KERNELS_MMQ_IMPL_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/ptx_sm80.cuh"
#include "cuda/kernels/quant_dev.cuh"
#include "cuda/kernels/types.h"

namespace minfer::cuda::mmq {

inline constexpr int kThreads = 256;  // 8 warps: 4 along rows x 2 along tokens
inline constexpr int kBM = 128;       // weight rows per CTA
inline constexpr int kKC = 256;       // k elements per chunk
inline constexpr int kKB = kKC / 32;  // activation blocks per chunk
// Shared-memory bytes per token row of activation codes: 256 + 16, an odd
// multiple of 16, so ldmatrix's 8 row addresses hit 8 different bank groups.
inline constexpr int kAS = kKC + 16;

// ------------------------------------------------------------------ PTX

// Barrier over `count` threads (whole warps) with id 1..15 (0 is
// __syncthreads).
template <int kId>
__device__ __forceinline__ void named_barrier(int count) {
  static_assert(kId >= 1 && kId < 16, "barrier 0 is __syncthreads");
  asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "r"(count) : "memory");
}

// C = A(16x32 s8) * B(32x8 s8), integer, exact.
__device__ __forceinline__ void mma_k32(int c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%10,%10,%10};\n"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
}

// C = A(16x16 s8) * B(16x8 s8).
__device__ __forceinline__ void mma_k16(int c[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
      "{%7,%7,%7,%7};\n"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a0), "r"(a1), "r"(b0), "r"(0));
}

// float(i), exact, for |i| < 2^22 (every block dot: |I| <= 32*128*127).
// Default: the 1.5 * 2^23 trick (an integer add and a float subtract, both
// full-rate pipes) instead of I2F, which issues at a fraction of that rate
// on recent SMs. Both are exact, so the choice never changes results.
#ifndef MINFER_MMQ_USE_I2F
#define MINFER_MMQ_USE_I2F 0
#endif
__device__ __forceinline__ float exact_i2f(int i) {
#if MINFER_MMQ_USE_I2F
  return __int2float_rn(i);
#else
  return __fsub_rn(__int_as_float(0x4B400000 + i), 12582912.0f);
#endif
}

// --------------------------------------------------------- shared loads

__device__ __forceinline__ uint32_t lds_u16(const uint8_t* p) {
  return *reinterpret_cast<const uint16_t*>(p);
}
// The 32-bit word at p4 + off, p4 4-byte aligned and off even. `off` is a
// compile-time constant after unrolling, so the branch folds: one 32-bit
// load, or two 16-bit loads for the legacy blocks that sit at odd multiples
// of 2 (Q4_0, Q5_0, Q8_0).
__device__ __forceinline__ uint32_t lds_w32(const uint8_t* p4, int off) {
  if ((off & 3) == 0) return *reinterpret_cast<const uint32_t*>(p4 + off);
  return __byte_perm(lds_u16(p4 + off), lds_u16(p4 + off + 2), 0x5410);
}
__device__ __forceinline__ float lds_half(const uint8_t* p) {
  return half_bits_to_float(static_cast<uint16_t>(lds_u16(p)));
}

__device__ __forceinline__ uint32_t nib_lo(uint32_t q) { return q & 0x0F0F0F0Fu; }
__device__ __forceinline__ uint32_t nib_hi(uint32_t q) { return (q >> 4) & 0x0F0F0F0Fu; }
// int8(x - o) per byte for x in [0, 2o), o in {8, 16, 32}.
template <int kO>
__device__ __forceinline__ uint32_t sub_offset(uint32_t x) {
  constexpr uint32_t kAdd = (128u - kO) * 0x01010101u;
  return (x + kAdd) ^ 0x80808080u;
}

// ------------------------------------------------------------- per type
//
// Tr<T>:
//   kBS      bytes of one weight block in shared memory (Q6_K: 224)
//   kBPC     weight blocks per chunk (legacy 8, K-quants 1)
//   kCB      bytes of one chunk in shared memory (kBS * kBPC)
//   kWS      shared-memory row stride (kCB or kCB + 16: an odd multiple of 16)
//   kCopyCB  bytes of a chunk the generic variant copies (Q6_K: the 210 real
//            bytes; others kCB)
//   kMin     the CPU adds a min term per block (fma(m, s_a, acc))
//   kSplit   Q6_K: two 16-element halves with their own scales
//   table(row, kb) -> float2: (f, m) with f = the weight scale of block kb
//            (d or d * sc, rounded as the CPU rounds it) and m the min term
//            (Q4_1/Q5_1: the block min; Q4_K/Q5_K: -(dmin * m_kb)); Q6_K:
//            (f_lo, f_hi) = d * scales[2kb], d * scales[2kb + 1].
//   frag(row, kb, t, &lo, &hi): the int8 codes of block kb at elements
//            4t..4t+3 (lo) and 16+4t..16+4t+3 (hi) of weight row `row`
//            (its shared-memory chunk).
template <GgmlType T>
struct Tr;

template <int kBlockBytes, int kBlocks>
struct Geometry {
  static constexpr int kBS = kBlockBytes;
  static constexpr int kBPC = kBlocks;
  static constexpr int kCB = kBS * kBPC;
  static_assert(kCB % 16 == 0, "a chunk must be whole 16-byte pieces");
  static constexpr int kWS = (kCB / 16) % 2 == 1 ? kCB : kCB + 16;
};

template <>
struct Tr<GgmlType::kQ4_0> : Geometry<18, 8> {
  static constexpr int kCopyCB = kCB;
  static constexpr bool kMin = false, kSplit = false;
  __device__ __forceinline__ static float2 table(const uint8_t* row, int kb) {
    return make_float2(lds_half(row + 18 * kb), 0.0f);
  }
  __device__ __forceinline__ static void frag(const uint8_t* row, int kb, int t, uint32_t* lo,
                                              uint32_t* hi) {
    const uint32_t q = lds_w32(row + 4 * t, 18 * kb + 2);
    *lo = sub_offset<8>(nib_lo(q));
    *hi = sub_offset<8>(nib_hi(q));
  }
};

template <>
struct Tr<GgmlType::kQ4_1> : Geometry<20, 8> {
  static constexpr int kCopyCB = kCB;
  static constexpr bool kMin = true, kSplit = false;
  __device__ __forceinline__ static float2 table(const uint8_t* row, int kb) {
    return make_float2(lds_half(row + 20 * kb), lds_half(row + 20 * kb + 2));
  }
  __device__ __forceinline__ static void frag(const uint8_t* row, int kb, int t, uint32_t* lo,
                                              uint32_t* hi) {
    const uint32_t q = lds_w32(row + 4 * t, 20 * kb + 4);
    *lo = nib_lo(q);
    *hi = nib_hi(q);
  }
};

template <>
struct Tr<GgmlType::kQ5_0> : Geometry<22, 8> {
  static constexpr int kCopyCB = kCB;
  static constexpr bool kMin = false, kSplit = false;
  __device__ __forceinline__ static float2 table(const uint8_t* row, int kb) {
    return make_float2(lds_half(row + 22 * kb), 0.0f);
  }
  __device__ __forceinline__ static void frag(const uint8_t* row, int kb, int t, uint32_t* lo,
                                              uint32_t* hi) {
    // Bit 4 of element j is bit j of qh.
    const uint32_t qh = lds_w32(row, 22 * kb + 2);
    const uint32_t q = lds_w32(row + 4 * t, 22 * kb + 6);
    *lo = sub_offset<16>(nib_lo(q) | qdev::spread4_to_bit4((qh >> (4 * t)) & 0xF));
    *hi = sub_offset<16>(nib_hi(q) | qdev::spread4_to_bit4((qh >> (16 + 4 * t)) & 0xF));
  }
};

template <>
struct Tr<GgmlType::kQ5_1> : Geometry<24, 8> {
  static constexpr int kCopyCB = kCB;
  static constexpr bool kMin = true, kSplit = false;
  __device__ __forceinline__ static float2 table(const uint8_t* row, int kb) {
    return make_float2(lds_half(row + 24 * kb), lds_half(row + 24 * kb + 2));
  }
  __device__ __forceinline__ static void frag(const uint8_t* row, int kb, int t, uint32_t* lo,
                                              uint32_t* hi) {
    const uint32_t qh = lds_w32(row, 24 * kb + 4);
    const uint32_t q = lds_w32(row + 4 * t, 24 * kb + 8);
    *lo = nib_lo(q) | qdev::spread4_to_bit4((qh >> (4 * t)) & 0xF);
    *hi = nib_hi(q) | qdev::spread4_to_bit4((qh >> (16 + 4 * t)) & 0xF);
  }
};

template <>
struct Tr<GgmlType::kQ8_0> : Geometry<34, 8> {
  static constexpr int kCopyCB = kCB;
  static constexpr bool kMin = false, kSplit = false;
  __device__ __forceinline__ static float2 table(const uint8_t* row, int kb) {
    return make_float2(lds_half(row + 34 * kb), 0.0f);
  }
  __device__ __forceinline__ static void frag(const uint8_t* row, int kb, int t, uint32_t* lo,
                                              uint32_t* hi) {
    *lo = lds_w32(row + 4 * t, 34 * kb + 2);
    *hi = lds_w32(row + 4 * t, 34 * kb + 18);
  }
};

// Q4_K/Q5_K scale and min of sub-block kb (engine/quant Q4KScaleMin, via
// quant_dev's pair decode), folded as the CPU folds them.
__device__ __forceinline__ float2 k45_table(const uint8_t* row, int kb) {
  const float d = lds_half(row), dmin = lds_half(row + 2);
  const uint32_t A = *reinterpret_cast<const uint32_t*>(row + 4);
  const uint32_t B = *reinterpret_cast<const uint32_t*>(row + 8);
  const uint32_t C = *reinterpret_cast<const uint32_t*>(row + 12);
  uint32_t sc[2], mn[2];
  qdev::k_scale_min_pair(A, B, C, kb >> 1, sc, mn);
  const uint32_t s = (kb & 1) ? sc[1] : sc[0];
  const uint32_t m = (kb & 1) ? mn[1] : mn[0];
  return make_float2(__fmul_rn(d, static_cast<float>(s)), -__fmul_rn(dmin, static_cast<float>(m)));
}

// Q4_K (d, dmin, scales[12], qs[128]): sub-block kb = low (kb even) or high
// nibbles of qs[32 (kb/2) .. +31].
template <>
struct Tr<GgmlType::kQ4_K> : Geometry<144, 1> {
  static constexpr int kCopyCB = kCB;
  static constexpr bool kMin = true, kSplit = false;
  __device__ __forceinline__ static float2 table(const uint8_t* row, int kb) {
    return k45_table(row, kb);
  }
  __device__ __forceinline__ static void frag(const uint8_t* row, int kb, int t, uint32_t* lo,
                                              uint32_t* hi) {
    const int off = 16 + 32 * (kb >> 1), sh = 4 * (kb & 1);
    *lo = (lds_w32(row + 4 * t, off) >> sh) & 0x0F0F0F0Fu;
    *hi = (lds_w32(row + 4 * t, off + 16) >> sh) & 0x0F0F0F0Fu;
  }
};

// Q5_K (d, dmin, scales[12], qh[32], qs[128]): as Q4_K, bit 4 of element l
// of sub-block kb is bit kb of qh[l].
template <>
struct Tr<GgmlType::kQ5_K> : Geometry<176, 1> {
  static constexpr int kCopyCB = kCB;
  static constexpr bool kMin = true, kSplit = false;
  __device__ __forceinline__ static float2 table(const uint8_t* row, int kb) {
    return k45_table(row, kb);
  }
  __device__ __forceinline__ static void frag(const uint8_t* row, int kb, int t, uint32_t* lo,
                                              uint32_t* hi) {
    const int off = 48 + 32 * (kb >> 1), sh = 4 * (kb & 1);
    const uint32_t h0 = lds_w32(row + 4 * t, 16), h1 = lds_w32(row + 4 * t, 32);
    *lo = ((lds_w32(row + 4 * t, off) >> sh) & 0x0F0F0F0Fu) | (((h0 >> kb) & 0x01010101u) << 4);
    *hi = ((lds_w32(row + 4 * t, off + 16) >> sh) & 0x0F0F0F0Fu) |
          (((h1 >> kb) & 0x01010101u) << 4);
  }
};

// Q6_K (ql[128], qh[64], scales[16], d; 224 bytes in shared memory): block
// kb = group g = kb % 4 of 128-element half hf = kb / 4; element l takes the
// low (g < 2) or high nibble of ql[64hf + 32(g & 1) + l] and bits 2g..2g+1
// of qh[32hf + l]; elements 0-15 have scale scales[2kb], 16-31 scales[2kb+1].
template <>
struct Tr<GgmlType::kQ6_K> : Geometry<kQ6KPaddedBytes, 1> {
  static constexpr int kCopyCB = 210;
  static constexpr bool kMin = false, kSplit = true;
  __device__ __forceinline__ static float2 table(const uint8_t* row, int kb) {
    const float d = lds_half(row + 208);
    const uint32_t sc = lds_u16(row + 192 + 2 * kb);
    const int s0 = static_cast<int8_t>(sc & 0xFF), s1 = static_cast<int8_t>(sc >> 8);
    return make_float2(__fmul_rn(d, static_cast<float>(s0)), __fmul_rn(d, static_cast<float>(s1)));
  }
  __device__ __forceinline__ static void frag(const uint8_t* row, int kb, int t, uint32_t* lo,
                                              uint32_t* hi) {
    const int hf = kb >> 2, g = kb & 3;
    const int ql = 64 * hf + 32 * (g & 1), qh = 128 + 32 * hf;
    const int sh = 4 * (g >> 1), hs = 2 * g;
    const uint8_t* p = row + 4 * t;
    *lo = sub_offset<32>(((lds_w32(p, ql) >> sh) & 0x0F0F0F0Fu) |
                         (((lds_w32(p, qh) >> hs) & 0x03030303u) << 4));
    *hi = sub_offset<32>(((lds_w32(p, ql + 16) >> sh) & 0x0F0F0F0Fu) |
                         (((lds_w32(p, qh + 16) >> hs) & 0x03030303u) << 4));
  }
};

// ------------------------------------------------------------ scale planes
//
// W_dsc (Q4_K) and W_exp (Q6_K): the Tr<T>::table entries of a whole weight
// precomputed once at load time (mmq.h LaunchMmqScalePlane), float2
// [rows][k / 32] row-major, 8 bytes per 32-element block. With a plane the
// fast variant stages each chunk's 8 entries per row (64 bytes) by cp.async
// next to the weight bytes, instead of decoding them at the top of every
// chunk (the scale-table phase and its named barrier disappear), and copies
// only the code bytes of each block: Q4_K skips its 16 header bytes (d,
// dmin, scales), Q6_K copies ql/qh (192 bytes) and skips scales and d.
// Plane<T>: kHas (a plane exists for T), kSkip (header bytes not copied),
// kPieces (16-byte pieces copied per row and chunk), kWS (the shared-memory
// row stride then: an odd multiple of 16).
template <GgmlType T>
struct Plane {
  static constexpr bool kHas = false;
  static constexpr int kSkip = 0, kPieces = 0, kWS = 16;
};
template <>
struct Plane<GgmlType::kQ4_K> {
  static constexpr bool kHas = true;
  static constexpr int kSkip = 16, kPieces = 8, kWS = 144;
};
template <>
struct Plane<GgmlType::kQ6_K> {
  static constexpr bool kHas = true;
  static constexpr int kSkip = 0, kPieces = 12, kWS = 208;
};
inline constexpr int kPS = 80;  // shared bytes per row of plane entries: 64 + 16
                                // (20 words: 8 rows hit 8 different bank pairs)

// ------------------------------------------------------ shared-memory plan

// Per stage: weights kBM x kWS, activation codes BN x kAS, d [kKB][BN],
// s [kKB][BN] for the types with mins, and with a plane its entries kBM x
// kPS; once, without a plane: the scale table [kKB][kBM] of float2 (types
// with mins, Q6_K) or float.
template <GgmlType T, int BN, bool kPlane = false>
struct Smem {
  using X = Tr<T>;
  static_assert(!kPlane || Plane<T>::kHas, "no scale plane for this type");
  static constexpr int kTW = (X::kMin || X::kSplit) ? 2 : 1;  // floats per table entry
  static constexpr int kWS = kPlane ? Plane<T>::kWS : X::kWS;  // weight row stride
  static constexpr int kW = kBM * kWS;
  static constexpr int kA = BN * kAS;
  static constexpr int kD = kKB * BN * 4;
  static constexpr int kS = X::kMin ? kKB * BN * 4 : 0;
  static constexpr int kP = kPlane ? kBM * kPS : 0;
  static constexpr int kStage = kW + kA + kD + kS + kP;
  static constexpr int kTable = kPlane ? 0 : kKB * kBM * kTW * 4;
  static constexpr int kBytes = 2 * kStage + kTable;
  static_assert(kW % 16 == 0 && kA % 16 == 0 && kD % 16 == 0 && kS % 16 == 0, "alignment");
};

// One weight of a launch: its rows go to their own output y [nt][rows].
struct Segment {
  const uint8_t* w;
  int64_t row_bytes;
  int64_t rows;
  const float2* plane;  // W_dsc / W_exp, or null (the kPlane instantiations only)
  float* y;
  // Split-k (Params::k_splits > 1): this segment's [nt][rows] partials in
  // split 0's slab; split z's at + z * Params::split_stride.
  float* part;
};
inline constexpr int kMaxSegments = 3;

// A launch: seg[0..n_seg) share the type, k and the activations (FusedQKV
// at prefill runs q, k and v as one grid); row tile blockIdx.y belongs to
// the last segment s with tile_begin[s] <= blockIdx.y.
struct Params {
  Segment seg[kMaxSegments];
  int tile_begin[kMaxSegments];
  int n_seg;
  int row_tiles;  // the grid's y dimension: all segments' 128-row tiles
  int64_t k;
  int nb;        // k / 32
  int n_chunks;  // ceil(nb / kKB)
  int src_cb;    // bytes between consecutive chunks of a global weight row
  const int8_t* aq;
  const float* ad;
  const float* as;
  int64_t ntp;
  int64_t nt;
  // Stream-k (the kSK kernels, a 1-D grid; mmq.cu PlanStreamK). Tile i is
  // row tile i / ntt, token tile i % ntt (token tiles fastest: CTAs that
  // share a weight tile run side by side and read it from L2). CTA c first
  // computes the whole tiles c, c + grid, ..., c + (dp - 1) grid, then its
  // share of the stream-k region: chunks [sk_iters c / grid, sk_iters (c +
  // 1) / grid) of tiles sk_tile0.. counted tile-major. The other kernels
  // use only ntt (a 2-D grid of whole tiles).
  int ntt;           // token tiles of BN tokens
  int grid;          // CTAs
  int dp;            // whole tiles per CTA before the stream-k region
  int sk_tile0;      // first tile of the stream-k region (dp * grid)
  int64_t sk_iters;  // chunks in the stream-k region; 0 = none
  float* sk_part;    // [grid][kBM * BN] accumulators handed from CTA c to c + 1
  unsigned* sk_flag; // [grid] 1 = sk_part[c] is ready (reset by its reader)
  // Split-k (the whole-tile kernels; mmq.cu PlanSplitK): grid.z = k_splits,
  // CTA z computes chunks [z n_chunks / k_splits, (z + 1) n_chunks /
  // k_splits) of its tile into Segment::part, and a reduce kernel adds the
  // splits in order into y. 1 = off.
  int k_splits;
  int64_t split_stride;  // floats per split slab: sum over segments of nt * rows
};

// One unit of a CTA's work (ItemOf): chunks [c0, c1) of `tile`.
//  kWhole: the whole k range, stored to y.
//  kTail: the tile's first chunks (c0 = 0); the accumulators are handed to
//    the next CTA (sk_part / sk_flag of this CTA) instead of stored.
//  kHead: the tile's last chunks, continuing from the accumulators the
//    previous CTA handed on, stored to y.
// The hand-off keeps every output's fold sequential in k (the float
// operations and their order are those of a whole-tile CTA), so stream-k
// changes no result bit. A CTA does its tail first and its head last: by
// the time it needs its predecessor's tail, that CTA finished it long ago
// (each CTA's share is at least one tile, PlanStreamK), and a CTA only ever
// waits for a lower-numbered one, which the hardware dispatched first.
enum ItemKind : int { kWhole = 0, kTail = 1, kHead = 2 };
struct Item {
  int tile;  // -1: no more work
  int c0, c1;
  int kind;
};

__device__ __forceinline__ Item ItemOf(const Params& p, int cta, int it) {
  const int nc = p.n_chunks;
  const int64_t b = p.sk_iters * cta / p.grid, e = p.sk_iters * (cta + 1) / p.grid;
  if (e % nc != 0) {
    if (it == 0) return {p.sk_tile0 + static_cast<int>(e / nc), 0, static_cast<int>(e % nc), kTail};
    --it;
  }
  if (it < p.dp) return {cta + it * p.grid, 0, nc, kWhole};
  it -= p.dp;
  const int64_t f0 = (b + nc - 1) / nc, f1 = e / nc;  // the whole tiles of the share
  if (it < f1 - f0) return {p.sk_tile0 + static_cast<int>(f0 + it), 0, nc, kWhole};
  it -= static_cast<int>(f1 - f0);
  if (b % nc != 0 && it == 0) {
    return {p.sk_tile0 + static_cast<int>(b / nc), static_cast<int>(b % nc), nc, kHead};
  }
  return {-1, 0, 0, kWhole};
}

// Release / acquire flag accesses at GPU scope (the hand-off above).
__device__ __forceinline__ void st_release_gpu(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}

}  // namespace minfer::cuda::mmq

#endif  // MINFER_CUDA_KERNELS_MMQ_IMPL_CUH_
