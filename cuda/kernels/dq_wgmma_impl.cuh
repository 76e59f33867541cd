// What the two Hopper dequantizing GEMMs share (dq_wgmma.h): the A-from-
// registers kernel for decode batches (dq_wgmma.cu) and the A-from-shared-
// memory kernel for prefills (dqp_wgmma.cu). Both decode the same Q4_K / Q6_K
// bytes into the same f16 weights (the same instructions, so the same bits)
// and read the same activations through the same TMA tensor map. nvcc only;
// internal to cuda/kernels.
//
// A weight row's pieces and their shared-memory stride: dq_pieces.cuh.
#ifndef MINFER_CUDA_KERNELS_DQ_WGMMA_IMPL_CUH_
#define MINFER_CUDA_KERNELS_DQ_WGMMA_IMPL_CUH_

#include <cuda.h>  // CUtensorMap (the encoder comes through the runtime's entry points)
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <cstring>

#include "cuda/kernels/dq_pieces.cuh"
#include "cuda/kernels/ptx_sm90.cuh"
#include "cuda/kernels/types.h"

namespace minfer::cuda::dqw {

template <GgmlType T>
using Ty = DqPieces<T>;

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
// rounding, as dq_gemm.cu. (The byte permutes take the 0x64 bytes as their
// first operand so that the selector is the immediate: with the codes
// first, ptxas kept the selector in a uniform register and moved it into a
// vector register before every permute, 8 instructions per chunk.)
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
  *s = __hmul2(__hsub2(AsH2(__byte_perm(0x64646464u, sc, 0x0504)), k1024), __low2half2(dd));
  *m = __hneg2(__hmul2(__hsub2(AsH2(__byte_perm(0x64646464u, mn, 0x0504)), k1024),
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

// The f16 scales of four Q6_K sub-blocks, their int8 scales (the bytes of
// `word`) times d, one rounding each: (s0, s1) and (s2, s3). The int8 q
// goes to f16 exactly as (1024 + (q + 128)) - 1152 (the sign bit flipped,
// the byte placed under the exponent of 1024 by a byte permute), which is
// what an int-to-half conversion gives (|q| <= 128 is exact in f16), at
// three instructions per pair instead of one I2F (a quarter-rate pipe) and
// a shift per scale.
__device__ __forceinline__ void Q6kScales4(uint32_t word, half2 d, half2* s01, half2* s23) {
  const uint32_t u = word ^ 0x80808080u;
  const half2 base = AsH2(0x64806480u);  // half2 (1152, 1152)
  *s01 = __hmul2(__hsub2(AsH2(__byte_perm(0x64646464u, u, 0x0504)), base), d);
  *s23 = __hmul2(__hsub2(AsH2(__byte_perm(0x64646464u, u, 0x0706)), base), d);
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
