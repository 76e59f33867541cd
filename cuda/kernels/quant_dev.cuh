// Device-side decoding of the GGUF weight blocks and of the BlockQ8A
// activations, shared by the matrix kernels (mmvq.cu, matvec_f32.cu,
// gemm_f16.cu, getrows.cu). nvcc only.
//
// The unit of work of the f16 GEMM, the f32 matvec and the gather is a
// *slice*: 32 weights of one row that one thread decodes at once (MMVQ uses
// the larger *units* defined further down). Every quantized type splits its block into slices
// (legacy 32-element types: the block itself; K-quants: 8 slices per
// 256-element super-block), and a slice is two *halves* of 16 consecutive
// elements each, half h starting at element 32 * b_h + o_h of the block (b_h
// the 32-element sub-block, o_h 0 or 16; ActMap). A decoded slice (Slice)
// holds the 32 integer codes as packed int8 (w[0..3] half 0, w[4..7] half 1)
// and per half a float scale f and an additive term m such that the weight is
// exactly what engine/quant's reference dequantizer computes:
//   weight = f * code          (types without a min: Q4_0 Q5_0 Q8_0 Q6_K)
//   weight = f * code + m      (Q4_1 Q5_1: m = the block min; Q4_K Q5_K: m =
//                               -(dmin * m_j), and f * q - m1 == f * q + (-m1))
// both evaluated as two IEEE-rounded operations (never fused), f = d (legacy)
// or d * sc (K-quants) rounded exactly as the reference rounds it. So the
// GetRows gather and the f16 GEMM see the reference weights bit for bit, and
// the integer dot (MMVQ) multiplies exactly the codes the CPU's VecDotQ8A
// multiplies (engine/quant/vec_dot.cc), with the same per-(sub-)block float
// scale products.
//
// Loads: K-quant blocks (144, 176, 224 bytes) are multiples of 16 bytes, so
// when the row base is 16-byte aligned every field a slice needs is read with
// one aligned 16-byte load; the raw 210-byte Q6_K layout (and any misaligned
// base) falls back to 2-byte loads. Legacy blocks (18..34 bytes) are only
// 2-byte aligned; a slice reads the 2-3 aligned 16-byte chunks that cover its
// block (the chunks of neighbouring lanes overlap, so a warp's loads stay
// coalesced and the repeats hit L1) and shifts the fields out of that window.
#ifndef MINFER_CUDA_KERNELS_QUANT_DEV_CUH_
#define MINFER_CUDA_KERNELS_QUANT_DEV_CUH_

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/types.h"

namespace minfer::cuda::qdev {

// ------------------------------------------------------------------ loads

// Weights are streamed once per launch: keep them out of L1 so the
// activations, which every row re-reads, stay resident.
__device__ __forceinline__ uint4 ld_stream16(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// For the overlapping windows of the legacy types: allocate in L1 (the
// neighbouring lane's next load hits it) but evict first.
__device__ __forceinline__ uint4 ld_window16(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::evict_first.v4.u32 {%0,%1,%2,%3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

__device__ __forceinline__ uint32_t ld_u16(const uint8_t* p) {
  return __ldg(reinterpret_cast<const unsigned short*>(p));
}

// 16 bytes at a 2-byte aligned address.
__device__ __forceinline__ uint4 ld_unaligned16(const uint8_t* p) {
  const unsigned short* h = reinterpret_cast<const unsigned short*>(p);
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    w[i] = static_cast<uint32_t>(__ldg(h + 2 * i)) |
           (static_cast<uint32_t>(__ldg(h + 2 * i + 1)) << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ uint4 ld_weight16(const uint8_t* p, bool aligned) {
  return aligned ? ld_stream16(p) : ld_unaligned16(p);
}

// 8 bytes at an address that is 8-byte aligned when `aligned`, else 2-byte.
__device__ __forceinline__ uint2 ld_weight8(const uint8_t* p, bool aligned) {
  if (aligned) return __ldg(reinterpret_cast<const uint2*>(p));
  const unsigned short* h = reinterpret_cast<const unsigned short*>(p);
  return make_uint2(static_cast<uint32_t>(__ldg(h)) | (static_cast<uint32_t>(__ldg(h + 1)) << 16),
                    static_cast<uint32_t>(__ldg(h + 2)) |
                        (static_cast<uint32_t>(__ldg(h + 3)) << 16));
}

__device__ __forceinline__ uint32_t byte_of(uint32_t word, uint32_t i) {
  return __byte_perm(word, 0u, 0x4440u | i);  // byte i of word, zero-extended
}

// ------------------------------------------------------------ decoded slice

struct Slice {
  int32_t w[8];  // packed int8 codes: w[0..3] half 0, w[4..7] half 1
  float f[2];    // scale per half
  float m[2];    // additive term per half (0 and unused for types without)
};

// How a type folds its mins into the integer dot.
enum class MinKind {
  kNone,   // weight = f * code
  kBlock,  // Q4_1/Q5_1: + m * s of the block, once per block
  kSub,    // Q4_K/Q5_K: + m_j * s_j per 32-element sub-block, added by the
           // slice that owns the sub-block's first 16 elements
};

// ------------------------------------------------- legacy 32-element blocks

// The 16-byte aligned chunks covering a block of kBytes at a 2-byte aligned
// address. Only chunks holding at least one byte of the block are read, so
// the loads never leave the allocation.
template <int kBytes>
struct Window {
  // A block starts at an even offset o <= 14 of chunk 0.
  static constexpr int kChunks = (14 + kBytes + 15) / 16;
  uint32_t w[4 * kChunks];
  uint32_t o;  // byte offset of the block in chunk 0 (even)

  __device__ __forceinline__ void load(const uint8_t* p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const uint4* base = reinterpret_cast<const uint4*>(a & ~static_cast<uintptr_t>(15));
    o = static_cast<uint32_t>(a & 15);
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      // Chunk 0 and 1 always hold block bytes (every block is >= 18 bytes).
      if (c < 2 || static_cast<int>(o) + kBytes > 16 * c) v = ld_window16(base + c);
      w[4 * c + 0] = v.x;
      w[4 * c + 1] = v.y;
      w[4 * c + 2] = v.z;
      w[4 * c + 3] = v.w;
    }
  }
};

// Extracts 32-bit fields at even byte offsets of a block from its window.
template <int kBytes>
struct WindowReader {
  static constexpr int kN = 4 * Window<kBytes>::kChunks - 3;
  uint32_t v[kN];  // window shifted left by o / 4 words
  uint32_t sh;     // remaining bit shift: 0 or 16

  __device__ __forceinline__ explicit WindowReader(const Window<kBytes>& win) {
    // Two select stages instead of a run-time register index (which would
    // put the window in local memory).
    uint32_t t[kN + 1];
#pragma unroll
    for (int i = 0; i < kN + 1; ++i) t[i] = (win.o & 8) ? win.w[i + 2] : win.w[i];
#pragma unroll
    for (int i = 0; i < kN; ++i) v[i] = (win.o & 4) ? t[i + 1] : t[i];
    sh = (win.o & 2) * 8;
  }
  // The 4 bytes at block offset `off` (even, compile-time).
  template <int kOff>
  __device__ __forceinline__ uint32_t word() const {
    static_assert(kOff % 2 == 0 && (kOff >> 2) + 1 < kN, "field outside the window");
    return __funnelshift_rc(v[kOff >> 2], v[(kOff >> 2) + 1], sh + 8 * (kOff & 3));
  }
};

// Bit 4 of four consecutive elements from 4 bits of a Q5 qh word: bit i of
// `bits` (0..15) becomes bit 4 of byte i.
__device__ __forceinline__ uint32_t spread4_to_bit4(uint32_t bits) {
  return ((bits * 0x00204081u) & 0x01010101u) << 4;
}

template <GgmlType T>
struct BlockDec;

// Shared by the legacy types: a slice is the whole block; half 0 is elements
// 0..15 (low nibbles / qs[0..15]), half 1 elements 16..31.
struct LegacyMap {
  static constexpr int kBlockElems = 32;
  static constexpr int kSlices = 1;
  static constexpr bool kSameBlock = true;
  __device__ __forceinline__ static void act_map(int /*j*/, int* b0, int* o0, int* b1, int* o1) {
    *b0 = 0, *o0 = 0, *b1 = 0, *o1 = 16;
  }
  __device__ __forceinline__ static bool min_owner(int /*j*/) { return true; }
};

template <>
struct BlockDec<GgmlType::kQ4_0> : LegacyMap {
  static constexpr int kBytes = 18;
  static constexpr MinKind kMin = MinKind::kNone;
  using Raw = Window<kBytes>;
  __device__ __forceinline__ static void load(Raw* r, const uint8_t* blk, int, bool) {
    r->load(blk);
  }
  __device__ __forceinline__ static void decode(const Raw& r, int, Slice* s) {
    const WindowReader<kBytes> rd(r);
    const float d = half_bits_to_float(static_cast<uint16_t>(rd.word<0>() & 0xFFFF));
    const uint32_t q[4] = {rd.word<2>(), rd.word<6>(), rd.word<10>(), rd.word<14>()};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s->w[i] = static_cast<int32_t>(__vsub4(q[i] & 0x0F0F0F0Fu, 0x08080808u));
      s->w[4 + i] = static_cast<int32_t>(__vsub4((q[i] >> 4) & 0x0F0F0F0Fu, 0x08080808u));
    }
    s->f[0] = s->f[1] = d;
    s->m[0] = s->m[1] = 0.0f;
  }
};

template <>
struct BlockDec<GgmlType::kQ4_1> : LegacyMap {
  static constexpr int kBytes = 20;
  static constexpr MinKind kMin = MinKind::kBlock;
  using Raw = Window<kBytes>;
  __device__ __forceinline__ static void load(Raw* r, const uint8_t* blk, int, bool) {
    r->load(blk);
  }
  __device__ __forceinline__ static void decode(const Raw& r, int, Slice* s) {
    const WindowReader<kBytes> rd(r);
    const uint32_t dm = rd.word<0>();
    const uint32_t q[4] = {rd.word<4>(), rd.word<8>(), rd.word<12>(), rd.word<16>()};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s->w[i] = static_cast<int32_t>(q[i] & 0x0F0F0F0Fu);
      s->w[4 + i] = static_cast<int32_t>((q[i] >> 4) & 0x0F0F0F0Fu);
    }
    s->f[0] = s->f[1] = half_bits_to_float(static_cast<uint16_t>(dm & 0xFFFF));
    s->m[0] = s->m[1] = half_bits_to_float(static_cast<uint16_t>(dm >> 16));
  }
};

template <>
struct BlockDec<GgmlType::kQ5_0> : LegacyMap {
  static constexpr int kBytes = 22;
  static constexpr MinKind kMin = MinKind::kNone;
  using Raw = Window<kBytes>;
  __device__ __forceinline__ static void load(Raw* r, const uint8_t* blk, int, bool) {
    r->load(blk);
  }
  __device__ __forceinline__ static void decode(const Raw& r, int, Slice* s) {
    const WindowReader<kBytes> rd(r);
    const float d = half_bits_to_float(static_cast<uint16_t>(rd.word<0>() & 0xFFFF));
    const uint32_t qh = rd.word<2>();
    const uint32_t q[4] = {rd.word<6>(), rd.word<10>(), rd.word<14>(), rd.word<18>()};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // Element 4i+c takes bit 4i+c of qh, element 16+4i+c bit 16+4i+c.
      const uint32_t lo = (q[i] & 0x0F0F0F0Fu) | spread4_to_bit4((qh >> (4 * i)) & 0xF);
      const uint32_t hi = ((q[i] >> 4) & 0x0F0F0F0Fu) | spread4_to_bit4((qh >> (16 + 4 * i)) & 0xF);
      s->w[i] = static_cast<int32_t>(__vsub4(lo, 0x10101010u));
      s->w[4 + i] = static_cast<int32_t>(__vsub4(hi, 0x10101010u));
    }
    s->f[0] = s->f[1] = d;
    s->m[0] = s->m[1] = 0.0f;
  }
};

template <>
struct BlockDec<GgmlType::kQ5_1> : LegacyMap {
  static constexpr int kBytes = 24;
  static constexpr MinKind kMin = MinKind::kBlock;
  using Raw = Window<kBytes>;
  __device__ __forceinline__ static void load(Raw* r, const uint8_t* blk, int, bool) {
    r->load(blk);
  }
  __device__ __forceinline__ static void decode(const Raw& r, int, Slice* s) {
    const WindowReader<kBytes> rd(r);
    const uint32_t dm = rd.word<0>();
    const uint32_t qh = rd.word<4>();
    const uint32_t q[4] = {rd.word<8>(), rd.word<12>(), rd.word<16>(), rd.word<20>()};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s->w[i] = static_cast<int32_t>((q[i] & 0x0F0F0F0Fu) | spread4_to_bit4((qh >> (4 * i)) & 0xF));
      s->w[4 + i] = static_cast<int32_t>(((q[i] >> 4) & 0x0F0F0F0Fu) |
                                         spread4_to_bit4((qh >> (16 + 4 * i)) & 0xF));
    }
    s->f[0] = s->f[1] = half_bits_to_float(static_cast<uint16_t>(dm & 0xFFFF));
    s->m[0] = s->m[1] = half_bits_to_float(static_cast<uint16_t>(dm >> 16));
  }
};

template <>
struct BlockDec<GgmlType::kQ8_0> : LegacyMap {
  static constexpr int kBytes = 34;
  static constexpr MinKind kMin = MinKind::kNone;
  using Raw = Window<kBytes>;
  __device__ __forceinline__ static void load(Raw* r, const uint8_t* blk, int, bool) {
    r->load(blk);
  }
  __device__ __forceinline__ static void decode(const Raw& r, int, Slice* s) {
    const WindowReader<kBytes> rd(r);
    const float d = half_bits_to_float(static_cast<uint16_t>(rd.word<0>() & 0xFFFF));
    s->w[0] = static_cast<int32_t>(rd.word<2>());
    s->w[1] = static_cast<int32_t>(rd.word<6>());
    s->w[2] = static_cast<int32_t>(rd.word<10>());
    s->w[3] = static_cast<int32_t>(rd.word<14>());
    s->w[4] = static_cast<int32_t>(rd.word<18>());
    s->w[5] = static_cast<int32_t>(rd.word<22>());
    s->w[6] = static_cast<int32_t>(rd.word<26>());
    s->w[7] = static_cast<int32_t>(rd.word<30>());
    s->f[0] = s->f[1] = d;
    s->m[0] = s->m[1] = 0.0f;
  }
};

// ------------------------------------------------------------------ K-quants

// Scale and min of sub-blocks 2i and 2i+1 (engine/quant/blocks.h
// Q4KScaleMin) from the header words A = scales[0..3], B = scales[4..7],
// C = scales[8..11]. Both sub-blocks are < 4 (i < 2) or both >= 4, and their
// bytes are adjacent (bytes 2i mod 4 and 2i+1 mod 4 of each word), so both
// are decoded at once as a 16-bit pair: sub-blocks 0..3 keep scale and min
// in the low 6 bits of A and B; sub-blocks 4..7 take the low 4 bits from
// the nibbles of C and the top 2 from bits 6-7 of A (scale) and B (min).
__device__ __forceinline__ void k_scale_min_pair(uint32_t A, uint32_t B, uint32_t C, int i,
                                                 uint32_t sc[2], uint32_t mn[2]) {
  const uint32_t sh = (i & 1) * 16;
  const uint32_t a = A >> sh, b = B >> sh, c = C >> sh;
  uint32_t s2, m2;
  if (i < 2) {
    s2 = a & 0x3F3Fu;
    m2 = b & 0x3F3Fu;
  } else {
    s2 = (c & 0x0F0Fu) | ((a >> 2) & 0x3030u);
    m2 = ((c >> 4) & 0x0F0Fu) | ((b >> 2) & 0x3030u);
  }
  sc[0] = s2 & 0xFF, sc[1] = (s2 >> 8) & 0xFF;
  mn[0] = m2 & 0xFF, mn[1] = (m2 >> 8) & 0xFF;
}

// Q4_K (144 bytes: d, dmin, scales[12], qs[128]). Slice j (0..7) = qs bytes
// 16j..16j+15: sub-block pair i = j / 2 at element offset 16 * (j & 1); low
// nibbles are sub-block 2i (half 0), high nibbles sub-block 2i+1 (half 1).
template <>
struct BlockDec<GgmlType::kQ4_K> {
  static constexpr int kBlockElems = 256;
  static constexpr int kSlices = 8;
  static constexpr int kBytes = 144;
  static constexpr bool kSameBlock = false;
  static constexpr MinKind kMin = MinKind::kSub;
  struct Raw {
    uint4 hdr, qs;
  };
  __device__ __forceinline__ static void load(Raw* r, const uint8_t* blk, int j, bool aligned) {
    r->hdr = ld_weight16(blk, aligned);
    r->qs = ld_weight16(blk + 16 + 16 * j, aligned);
  }
  __device__ __forceinline__ static void decode(const Raw& r, int j, Slice* s) {
    const float d = half_bits_to_float(static_cast<uint16_t>(r.hdr.x & 0xFFFF));
    const float dmin = half_bits_to_float(static_cast<uint16_t>(r.hdr.x >> 16));
    uint32_t sc[2], mn[2];
    k_scale_min_pair(r.hdr.y, r.hdr.z, r.hdr.w, j >> 1, sc, mn);
    const uint32_t q[4] = {r.qs.x, r.qs.y, r.qs.z, r.qs.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s->w[i] = static_cast<int32_t>(q[i] & 0x0F0F0F0Fu);
      s->w[4 + i] = static_cast<int32_t>((q[i] >> 4) & 0x0F0F0F0Fu);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      s->f[h] = __fmul_rn(d, static_cast<float>(sc[h]));
      s->m[h] = -__fmul_rn(dmin, static_cast<float>(mn[h]));
    }
  }
  __device__ __forceinline__ static void act_map(int j, int* b0, int* o0, int* b1, int* o1) {
    *b0 = 2 * (j >> 1), *b1 = *b0 + 1, *o0 = *o1 = 16 * (j & 1);
  }
  __device__ __forceinline__ static bool min_owner(int j) { return (j & 1) == 0; }
};

// Q5_K (176 bytes: d, dmin, scales[12], qh[32], qs[128]). As Q4_K; bit 4 of
// element l of sub-block s is bit s of qh[l], and slice j needs
// qh[16 * (j & 1) .. + 15].
template <>
struct BlockDec<GgmlType::kQ5_K> {
  static constexpr int kBlockElems = 256;
  static constexpr int kSlices = 8;
  static constexpr int kBytes = 176;
  static constexpr bool kSameBlock = false;
  static constexpr MinKind kMin = MinKind::kSub;
  struct Raw {
    uint4 hdr, qh, qs;
  };
  __device__ __forceinline__ static void load(Raw* r, const uint8_t* blk, int j, bool aligned) {
    r->hdr = ld_weight16(blk, aligned);
    r->qh = ld_weight16(blk + 16 + 16 * (j & 1), aligned);
    r->qs = ld_weight16(blk + 48 + 16 * j, aligned);
  }
  __device__ __forceinline__ static void decode(const Raw& r, int j, Slice* s) {
    const float d = half_bits_to_float(static_cast<uint16_t>(r.hdr.x & 0xFFFF));
    const float dmin = half_bits_to_float(static_cast<uint16_t>(r.hdr.x >> 16));
    const int i = j >> 1;
    uint32_t sc[2], mn[2];
    k_scale_min_pair(r.hdr.y, r.hdr.z, r.hdr.w, i, sc, mn);
    const uint32_t q[4] = {r.qs.x, r.qs.y, r.qs.z, r.qs.w};
    const uint32_t qh[4] = {r.qh.x, r.qh.y, r.qh.z, r.qh.w};
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      s->w[m] = static_cast<int32_t>((q[m] & 0x0F0F0F0Fu) | (((qh[m] >> (2 * i)) & 0x01010101u) << 4));
      s->w[4 + m] = static_cast<int32_t>(((q[m] >> 4) & 0x0F0F0F0Fu) |
                                         (((qh[m] >> (2 * i + 1)) & 0x01010101u) << 4));
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      s->f[h] = __fmul_rn(d, static_cast<float>(sc[h]));
      s->m[h] = -__fmul_rn(dmin, static_cast<float>(mn[h]));
    }
  }
  __device__ __forceinline__ static void act_map(int j, int* b0, int* o0, int* b1, int* o1) {
    *b0 = 2 * (j >> 1), *b1 = *b0 + 1, *o0 = *o1 = 16 * (j & 1);
  }
  __device__ __forceinline__ static bool min_owner(int j) { return (j & 1) == 0; }
};

// Q6_K (210 bytes, or 224 padded: ql[128], qh[64], scales[16], d). Slice j =
// ql bytes 16j..16j+15 with hf = j >> 2 (128-element half), gb = (j >> 1) & 1,
// lh = j & 1: low nibbles are group gb (elements 128hf + 32gb + 16lh + e,
// half 0), high nibbles group gb + 2 (64 elements later, half 1); the top two
// bits of both come from qh[32hf + 16lh + e] (bits 2gb and 2gb + 4), the
// scales from scales[8hf + 2gb + lh] and scales[8hf + 4 + 2gb + lh].
template <>
struct BlockDec<GgmlType::kQ6_K> {
  static constexpr int kBlockElems = 256;
  static constexpr int kSlices = 8;
  static constexpr int kBytes = 210;  // the device stride may be 224
  static constexpr bool kSameBlock = false;
  static constexpr MinKind kMin = MinKind::kNone;
  struct Raw {
    uint4 ql, qh;
    uint2 sc;    // scales[8hf .. 8hf + 7]
    uint32_t d;  // f16 bits
  };
  __device__ __forceinline__ static void load(Raw* r, const uint8_t* blk, int j, bool aligned) {
    const int hf = j >> 2, lh = j & 1;
    r->ql = ld_weight16(blk + 16 * j, aligned);
    r->qh = ld_weight16(blk + 128 + 16 * (2 * hf + lh), aligned);
    r->sc = ld_weight8(blk + 192 + 8 * hf, aligned);
    r->d = ld_u16(blk + 208);
  }
  __device__ __forceinline__ static void decode(const Raw& r, int j, Slice* s) {
    const float d = half_bits_to_float(static_cast<uint16_t>(r.d));
    const uint32_t gb = (j >> 1) & 1, lh = j & 1;
    const uint32_t q[4] = {r.ql.x, r.ql.y, r.ql.z, r.ql.w};
    const uint32_t qh[4] = {r.qh.x, r.qh.y, r.qh.z, r.qh.w};
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const uint32_t lo = (q[m] & 0x0F0F0F0Fu) | (((qh[m] >> (2 * gb)) & 0x03030303u) << 4);
      const uint32_t hi = ((q[m] >> 4) & 0x0F0F0F0Fu) | (((qh[m] >> (2 * gb + 4)) & 0x03030303u) << 4);
      s->w[m] = static_cast<int32_t>(__vsub4(lo, 0x20202020u));
      s->w[4 + m] = static_cast<int32_t>(__vsub4(hi, 0x20202020u));
    }
    const uint32_t bi = 2 * gb + lh;
    const int sc0 = static_cast<int8_t>(byte_of(r.sc.x, bi));
    const int sc1 = static_cast<int8_t>(byte_of(r.sc.y, bi));
    s->f[0] = __fmul_rn(d, static_cast<float>(sc0));
    s->f[1] = __fmul_rn(d, static_cast<float>(sc1));
    s->m[0] = s->m[1] = 0.0f;
  }
  __device__ __forceinline__ static void act_map(int j, int* b0, int* o0, int* b1, int* o1) {
    const int hf = j >> 2, gb = (j >> 1) & 1;
    *b0 = 4 * hf + gb, *b1 = *b0 + 2, *o0 = *o1 = 16 * (j & 1);
  }
  __device__ __forceinline__ static bool min_owner(int) { return false; }
};

// The reference weight of code byte `c` (0..3) of word `i` of half h:
// f * code (+ m), two roundings, never fused.
template <GgmlType T>
__device__ __forceinline__ float dequant_code(const Slice& s, int h, int code) {
  const float p = __fmul_rn(s.f[h], static_cast<float>(code));
  if constexpr (BlockDec<T>::kMin == MinKind::kNone) {
    return p;  // no "+ 0": it would turn -0 into +0
  } else {
    return __fadd_rn(p, s.m[h]);
  }
}

// Codes are stored as int8 (sign-extended on extraction).
__device__ __forceinline__ int code_at(int32_t word, int c) {
  return static_cast<int8_t>((static_cast<uint32_t>(word) >> (8 * c)) & 0xFF);
}

// The 16 reference weights of half h (elements 32 b_h + o_h + 0..15).
template <GgmlType T>
__device__ __forceinline__ void dequant_half(const Slice& s, int h, float out[16]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int c = 0; c < 4; ++c) out[4 * i + c] = dequant_code<T>(s, h, code_at(s.w[4 * h + i], c));
  }
}

// ------------------------------------------------------------- MMVQ units
//
// The MMVQ kernel works on *units* of whole 32-element activation blocks:
// kNA blocks (1 or 2) of one weight row, decoded by one lane. Legacy types:
// the block itself (the slice above). K-quants: 64 weights, so that the
// header decode (sub-block scales and mins) and the loop overhead are paid
// once per two activation blocks: Q4_K/Q5_K unit i = sub-blocks 2i and 2i+1
// (qs bytes 32i..32i+31, low and high nibbles); Q6_K unit u = (hf = u / 2,
// gb = u % 2) = groups gb and gb + 2 of 128-element half hf (ql bytes
// 64hf + 32gb .. + 31, low and high nibbles, qh bytes 32hf .. + 31). Each
// activation block's term is then exactly the CPU's: fma(float(I_b),
// (d * sc) * d_a, acc), Q6_K one per 16 elements, mins fma(m, s_a, acc).
struct UnitScales {
  float f[2][2];  // [activation block of the unit][16-element half]
  float m[2];     // min term per activation block (0 without mins)
};

template <GgmlType T>
struct UnitDec;

// Legacy types: the unit is the slice.
template <GgmlType T>
struct LegacyUnit {
  using B = BlockDec<T>;
  static constexpr int kNA = 1;
  static constexpr int kUnits = 1;  // per weight block
  static constexpr int kBlockElems = 32;
  static constexpr int kBytes = B::kBytes;
  static constexpr bool kHasMin = B::kMin == MinKind::kBlock;
  static constexpr bool kSplitScale = false;
  using Raw = typename B::Raw;
  __device__ __forceinline__ static void load(Raw* r, const uint8_t* blk, int, bool) {
    r->load(blk);
  }
  // Codes and scales of activation block a of unit u (the decode is pure,
  // so the compiler merges the work shared by the two calls).
  __device__ __forceinline__ static void codes(const Raw& r, int, int, int32_t w[8]) {
    Slice s;
    B::decode(r, 0, &s);
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i] = s.w[i];
  }
  __device__ __forceinline__ static void scales(const Raw& r, int, UnitScales* sc) {
    Slice s;
    B::decode(r, 0, &s);
    sc->f[0][0] = sc->f[0][1] = s.f[0];
    sc->m[0] = s.m[0];
  }
  __device__ __forceinline__ static int ablock(int, int) { return 0; }
};
template <> struct UnitDec<GgmlType::kQ4_0> : LegacyUnit<GgmlType::kQ4_0> {};
template <> struct UnitDec<GgmlType::kQ4_1> : LegacyUnit<GgmlType::kQ4_1> {};
template <> struct UnitDec<GgmlType::kQ5_0> : LegacyUnit<GgmlType::kQ5_0> {};
template <> struct UnitDec<GgmlType::kQ5_1> : LegacyUnit<GgmlType::kQ5_1> {};
template <> struct UnitDec<GgmlType::kQ8_0> : LegacyUnit<GgmlType::kQ8_0> {};

// Scales and mins of sub-blocks 2i, 2i+1 from a Q4_K/Q5_K header.
__device__ __forceinline__ void k45_unit_scales(const uint4& hdr, int i, UnitScales* sc) {
  const float d = half_bits_to_float(static_cast<uint16_t>(hdr.x & 0xFFFF));
  const float dmin = half_bits_to_float(static_cast<uint16_t>(hdr.x >> 16));
  uint32_t s[2], m[2];
  k_scale_min_pair(hdr.y, hdr.z, hdr.w, i, s, m);
#pragma unroll
  for (int a = 0; a < 2; ++a) {
    sc->f[a][0] = sc->f[a][1] = __fmul_rn(d, static_cast<float>(s[a]));
    sc->m[a] = -__fmul_rn(dmin, static_cast<float>(m[a]));
  }
}

template <>
struct UnitDec<GgmlType::kQ4_K> {
  static constexpr int kNA = 2;
  static constexpr int kUnits = 4;
  static constexpr int kBlockElems = 256;
  static constexpr int kBytes = 144;
  static constexpr bool kHasMin = true;
  static constexpr bool kSplitScale = false;
  struct Raw {
    uint4 hdr, q0, q1;
  };
  __device__ __forceinline__ static void load(Raw* r, const uint8_t* blk, int u, bool aligned) {
    r->hdr = ld_weight16(blk, aligned);
    r->q0 = ld_weight16(blk + 16 + 32 * u, aligned);
    r->q1 = ld_weight16(blk + 32 + 32 * u, aligned);
  }
  __device__ __forceinline__ static void codes(const Raw& r, int, int a, int32_t w[8]) {
    const uint32_t q[8] = {r.q0.x, r.q0.y, r.q0.z, r.q0.w, r.q1.x, r.q1.y, r.q1.z, r.q1.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i] = static_cast<int32_t>((q[i] >> (4 * a)) & 0x0F0F0F0Fu);
  }
  __device__ __forceinline__ static void scales(const Raw& r, int u, UnitScales* sc) {
    k45_unit_scales(r.hdr, u, sc);
  }
  __device__ __forceinline__ static int ablock(int u, int a) { return 2 * u + a; }
};

template <>
struct UnitDec<GgmlType::kQ5_K> {
  static constexpr int kNA = 2;
  static constexpr int kUnits = 4;
  static constexpr int kBlockElems = 256;
  static constexpr int kBytes = 176;
  static constexpr bool kHasMin = true;
  static constexpr bool kSplitScale = false;
  struct Raw {
    uint4 hdr, h0, h1, q0, q1;
  };
  __device__ __forceinline__ static void load(Raw* r, const uint8_t* blk, int u, bool aligned) {
    r->hdr = ld_weight16(blk, aligned);
    r->h0 = ld_weight16(blk + 16, aligned);
    r->h1 = ld_weight16(blk + 32, aligned);
    r->q0 = ld_weight16(blk + 48 + 32 * u, aligned);
    r->q1 = ld_weight16(blk + 64 + 32 * u, aligned);
  }
  __device__ __forceinline__ static void codes(const Raw& r, int u, int a, int32_t w[8]) {
    const uint32_t q[8] = {r.q0.x, r.q0.y, r.q0.z, r.q0.w, r.q1.x, r.q1.y, r.q1.z, r.q1.w};
    const uint32_t h[8] = {r.h0.x, r.h0.y, r.h0.z, r.h0.w, r.h1.x, r.h1.y, r.h1.z, r.h1.w};
    const int bit = 2 * u + a;  // sub-block index: bit of qh[l]
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      w[i] = static_cast<int32_t>(((q[i] >> (4 * a)) & 0x0F0F0F0Fu) |
                                  (((h[i] >> bit) & 0x01010101u) << 4));
    }
  }
  __device__ __forceinline__ static void scales(const Raw& r, int u, UnitScales* sc) {
    k45_unit_scales(r.hdr, u, sc);
  }
  __device__ __forceinline__ static int ablock(int u, int a) { return 2 * u + a; }
};

template <>
struct UnitDec<GgmlType::kQ6_K> {
  static constexpr int kNA = 2;
  static constexpr int kUnits = 4;
  static constexpr int kBlockElems = 256;
  static constexpr int kBytes = 210;  // the device stride may be 224
  static constexpr bool kHasMin = false;
  static constexpr bool kSplitScale = true;
  struct Raw {
    uint4 l0, l1, h0, h1;
    uint2 sc;    // scales[8hf .. 8hf + 7]
    uint32_t d;  // f16 bits
  };
  __device__ __forceinline__ static void load(Raw* r, const uint8_t* blk, int u, bool aligned) {
    const int hf = u >> 1, gb = u & 1;
    r->l0 = ld_weight16(blk + 64 * hf + 32 * gb, aligned);
    r->l1 = ld_weight16(blk + 64 * hf + 32 * gb + 16, aligned);
    r->h0 = ld_weight16(blk + 128 + 32 * hf, aligned);
    r->h1 = ld_weight16(blk + 128 + 32 * hf + 16, aligned);
    r->sc = ld_weight8(blk + 192 + 8 * hf, aligned);
    r->d = ld_u16(blk + 208);
  }
  // Block a of unit (hf, gb) is group g = gb + 2a: low (a = 0) or high
  // nibbles of ql, bits 2g..2g+1 of qh, minus 32.
  __device__ __forceinline__ static void codes(const Raw& r, int u, int a, int32_t w[8]) {
    const uint32_t q[8] = {r.l0.x, r.l0.y, r.l0.z, r.l0.w, r.l1.x, r.l1.y, r.l1.z, r.l1.w};
    const uint32_t h[8] = {r.h0.x, r.h0.y, r.h0.z, r.h0.w, r.h1.x, r.h1.y, r.h1.z, r.h1.w};
    const int g = (u & 1) + 2 * a;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t v = ((q[i] >> (4 * a)) & 0x0F0F0F0Fu) | (((h[i] >> (2 * g)) & 0x03030303u) << 4);
      w[i] = static_cast<int32_t>(__vsub4(v, 0x20202020u));
    }
  }
  // Group g's scales are scales[8hf + 2g] (elements 0-15) and [8hf + 2g + 1].
  __device__ __forceinline__ static void scales(const Raw& r, int u, UnitScales* sc) {
    const float d = half_bits_to_float(static_cast<uint16_t>(r.d));
    const uint32_t sel = 2 * (u & 1);
#pragma unroll
    for (int a = 0; a < 2; ++a) {
      const uint32_t word = a == 0 ? r.sc.x : r.sc.y;  // groups 0,1 / 2,3 of the half
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int s8 = static_cast<int8_t>(byte_of(word, sel + h));
        sc->f[a][h] = __fmul_rn(d, static_cast<float>(s8));
      }
      sc->m[a] = 0.0f;
    }
  }
  __device__ __forceinline__ static int ablock(int u, int a) {
    return 4 * (u >> 1) + (u & 1) + 2 * a;
  }
};

// 32 activation codes of block b (8 words) straight from the BlockQ8A array.
__device__ __forceinline__ void q8a_load_block(const BlockQ8A* __restrict__ a, int64_t b,
                                               int32_t out[8]) {
  const int2* p = reinterpret_cast<const int2*>(reinterpret_cast<const int8_t*>(a + b) + 8);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int2 v = __ldg(p + i);
    out[2 * i] = v.x, out[2 * i + 1] = v.y;
  }
}

// ------------------------------------------------------- BlockQ8A activations

// 16 activation codes (4 words) at byte offset `o` (0 or 16) of block `b`'s
// qs, straight from the BlockQ8A array (8-byte aligned), and its (d, s).
__device__ __forceinline__ void q8a_load_half(const BlockQ8A* __restrict__ a, int64_t b, int o,
                                              int32_t out[4]) {
  const int2* p = reinterpret_cast<const int2*>(reinterpret_cast<const int8_t*>(a + b) + 8 + o);
  const int2 x = __ldg(p), y = __ldg(p + 1);
  out[0] = x.x, out[1] = x.y, out[2] = y.x, out[3] = y.y;
}
__device__ __forceinline__ float2 q8a_load_ds(const BlockQ8A* __restrict__ a, int64_t b) {
  return __ldg(reinterpret_cast<const float2*>(a + b));
}

// Exact integer dot of 16 codes (4 packed words) with 16 activation codes.
__device__ __forceinline__ int dot16(const int32_t* w, const int32_t* a, int acc) {
  acc = __dp4a(w[0], a[0], acc);
  acc = __dp4a(w[1], a[1], acc);
  acc = __dp4a(w[2], a[2], acc);
  acc = __dp4a(w[3], a[3], acc);
  return acc;
}

}  // namespace minfer::cuda::qdev

#endif  // MINFER_CUDA_KERNELS_QUANT_DEV_CUH_
