// What the two Hopper dequantizing GEMMs share (dq_wgmma.h): the A-from-
// registers kernel for decode batches (dq_wgmma.cu) and the A-from-shared-
// memory kernel for prefills (dqp_wgmma.cu). Both decode the same Q4_K / Q6_K
// bytes into the same f16 weights (the same instructions, so the same bits)
// and read the same activations through the same TMA tensor map. nvcc only;
// internal to cuda/kernels.
//
// A weight row's bytes for one 128-element chunk (half h of a super-block)
// are copied into shared memory as Ty<T>::kPieces 16-byte pieces, row after
// row kRowBytes apart (an odd multiple of 16, so the rows of 8 consecutive
// lanes fall on 8 different bank groups):
//  * Q4_K (80 bytes): the block's 16-byte header (d, dmin, the 12 packed
//    scale bytes), then qs bytes 64h .. 64h + 63.
//  * Q6_K (144 bytes, from the padded 224-byte block): ql bytes 64h ..
//    64h + 63, qh bytes 32h .. 32h + 31, the 16 int8 scales, d (and a pad).
//  * Q8_0 (the prefill form only; 144 bytes): a "super-block" is 8 blocks of
//    34 bytes (272, a multiple of 16); chunk h's 4 blocks are its bytes
//    136h .. 136h + 135, copied as the 9 pieces from 128h, so they start at
//    byte 8h of the row (blocks 2-byte aligned: d, then 32 int8 codes).
#ifndef MINFER_CUDA_KERNELS_DQ_WGMMA_IMPL_CUH_
#define MINFER_CUDA_KERNELS_DQ_WGMMA_IMPL_CUH_

#include <cuda.h>  // CUtensorMap (the encoder comes through the runtime's entry points)
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <cstring>

#include "cuda/kernels/ptx_sm90.cuh"
#include "cuda/kernels/types.h"

namespace minfer::cuda::dqw {

template <GgmlType T>
struct Ty;

template <>
struct Ty<GgmlType::kQ4_K> {
  static constexpr int kBlockBytes = 144;
  static constexpr int kPieces = 5;   // header, then qs 64h .. 64h + 63
  static constexpr int kRowBytes = 80;
  __device__ __forceinline__ static int Src(int h, int p) {
    return p == 0 ? 0 : 16 + 64 * h + 16 * (p - 1);
  }
};

template <>
struct Ty<GgmlType::kQ6_K> {
  static constexpr int kBlockBytes = kQ6KPaddedBytes;
  static constexpr int kPieces = 8;  // ql (4), qh (2), scales, d (+ pad)
  static constexpr int kRowBytes = 144;
  __device__ __forceinline__ static int Src(int h, int p) {
    return p < 4 ? 64 * h + 16 * p : p < 6 ? 128 + 32 * h + 16 * (p - 4) : 192 + 16 * (p - 6);
  }
};

//  * Q5_K (the prefill form only; 112 bytes): the 16-byte header (as Q4_K),
//    the block's 32 qh bytes (every chunk needs two of their bits), qs bytes
//    64h .. 64h + 63.
template <>
struct Ty<GgmlType::kQ5_K> {
  static constexpr int kBlockBytes = 176;
  static constexpr int kPieces = 7;
  static constexpr int kRowBytes = 112;
  __device__ __forceinline__ static int Src(int h, int p) {
    return p < 3 ? 16 * p : 48 + 64 * h + 16 * (p - 3);
  }
};

template <>
struct Ty<GgmlType::kQ8_0> {
  static constexpr int kBlockBytes = 272;  // 8 blocks: two chunks
  static constexpr int kPieces = 9;
  static constexpr int kRowBytes = 144;
  __device__ __forceinline__ static int Src(int h, int p) { return 128 * h + 16 * p; }
};

#if defined(MINFER_SM90A_DEVICE)

__device__ __forceinline__ half2 AsH2(uint32_t u) {
  half2 h;
  memcpy(&h, &u, 4);
  return h;
}
__device__ __forceinline__ uint32_t AsU(half2 h) {
  uint32_t u;
  memcpy(&u, &h, 4);
  return u;
}
__device__ __forceinline__ uint32_t Lds32(const uint8_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

constexpr uint32_t kMagic = 0x64006400u;    // half2 (1024, 1024)
constexpr uint32_t kMagic64 = 0x54005400u;  // half2 (64, 64)

// (x & kMask) | kOr as one LOP3: written in C++, nvcc emits two (a LOP3
// takes one immediate), and the decode issues this for every pair of
// weights (the nineteenth-session SASS: LOP3 was a fifth of the kernel's
// instructions).
template <uint32_t kMask, uint32_t kOr>
__device__ __forceinline__ uint32_t AndOr(uint32_t x) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(x), "n"(kMask), "n"(kOr));
  return d;
}

// The f16 (scale, min) pairs of Q4_K sub-blocks 4h + 2pr and 4h + 2pr + 1
// from the block's 16-byte header `hd` (d and dmin, then the 12 packed
// 6-bit scales and mins): s = scale * d and m = -(min * dmin), each one f16
// rounding, as dq_gemm.cu.
__device__ __forceinline__ void Q4kScaleMin(const uint4& hd, int h, int pr, half2* s, half2* m) {
  const half2 k1024 = AsH2(kMagic);
  const half2 dd = AsH2(hd.x);  // (d, dmin)
  const int sh = 16 * pr;
  const uint32_t a = hd.y >> sh, b = hd.z >> sh, cc = hd.w >> sh;
  uint32_t sc, mn;
  if (h == 0) {
    sc = a & 0x3F3Fu;
    mn = b & 0x3F3Fu;
  } else {
    sc = (cc & 0x0F0Fu) | ((a >> 2) & 0x3030u);
    mn = ((cc >> 4) & 0x0F0Fu) | ((b >> 2) & 0x3030u);
  }
  *s = __hmul2(__hsub2(AsH2(__byte_perm(sc, 0x64646464u, 0x4140)), k1024), __low2half2(dd));
  *m = __hneg2(__hmul2(__hsub2(AsH2(__byte_perm(mn, 0x64646464u, 0x4140)), k1024),
                       __high2half2(dd)));
}

// The pairs (e0, e2) and (e1, e3) of word w's 4 codes under kMask (one
// code per half of each 16 bits), placed under the exponent of kBase:
// (kBase + b - kBase) * scale + min. Q4_K's low nibbles: kMask 0x000F000F
// under 1024; its high nibbles where they lie, 0x00F000F0 under 64 (bits
// 4-7 are the mantissa's 1/16 steps there: 64 + b); Q5_K's five-bit codes
// (a byte each): 0x00FF00FF under 1024. All exact, all less their base give
// b exactly, so the high nibbles need no shift of their own.
template <uint32_t kMask, uint32_t kBase>
__device__ __forceinline__ void Q4kPairs(uint32_t w, half2 sv, half2 mv, uint32_t& even,
                                         uint32_t& odd) {
  const half2 base = AsH2(kBase);
  even = AsU(__hfma2(__hsub2(AsH2(AndOr<kMask, kBase>(w)), base), sv, mv));
  odd = AsU(__hfma2(__hsub2(AsH2(AndOr<kMask, kBase>(w >> 8)), base), sv, mv));
}

// The f16 scale of a Q6_K sub-block: its int8 scale times d (one rounding).
__device__ __forceinline__ half2 Q6kScale(uint32_t scale_byte, half2 d) {
  return __hmul2(__half2half2(__int2half_rn(static_cast<int8_t>(scale_byte & 0xFF))), d);
}

// The pairs (e0, e2) and (e1, e3) of word v's 4 byte codes b, each standing
// for q = b - kBias: (1024 + b - (1024 + kBias)) * scale = q * scale, q
// exact and one rounding. Q6_K: six-bit codes, kBias 32; Q8_0: the int8
// codes with their sign bit flipped (b = q + 128), kBias 128.
template <int kBias>
__device__ __forceinline__ void BiasedPairs(uint32_t v, half2 sv, uint32_t& even, uint32_t& odd) {
  const half2 base = __floats2half2_rn(1024.0f + kBias, 1024.0f + kBias);
  even = AsU(__hmul2(__hsub2(AsH2(AndOr<0x00FF00FFu, kMagic>(v)), base), sv));
  odd = AsU(__hmul2(__hsub2(AsH2(AndOr<0x00FF00FFu, kMagic>(v >> 8)), base), sv));
}

#endif  // MINFER_SM90A_DEVICE

// The activations [nt][k] f16 as a TMA tensor map: boxes of 64 k values
// (128 bytes, the swizzle's span) x n tokens, 128-byte swizzle (the layout
// Load's copies write), rows past nt read as zeros (as the copies' zero
// fill). False: no encoder (a driver before 12.0) or a shape it refuses.
inline bool EncodeActivations(CUtensorMap* map, const void* act, int64_t k, int64_t nt, int n) {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(nt)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k) * 2};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(n)};
  const cuuint32_t elem[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, const_cast<void*>(act), dims, strides, box,
                elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace minfer::cuda::dqw

#endif  // MINFER_CUDA_KERNELS_DQ_WGMMA_IMPL_CUH_
