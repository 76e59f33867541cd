// Where the dequantizing GEMMs (dq_gemm.cu, dq_wgmma.cu, dqp_wgmma.cu) find a
// weight row's bytes for one 128-element chunk (half h of a 256-element
// super-block): DqPieces<T>::kPieces 16-byte pieces, piece p at byte
// Src(h, p) of the super-block (kBlockBytes bytes in the row). The kernels
// copy the pieces into shared memory in this order; the Hopper kernels lay
// the rows kRowBytes apart (an odd multiple of 16, so the rows of 8
// consecutive lanes fall on 8 different bank groups; dq_gemm.cu keeps a
// stride of its own). nvcc only; internal to cuda/kernels.
//  * Q4_K (80 bytes): the block's 16-byte header (d, dmin, the 12 packed
//    scale bytes), then qs bytes 64h .. 64h + 63.
//  * Q6_K (144 bytes, from the padded 224-byte block): ql bytes 64h ..
//    64h + 63, qh bytes 32h .. 32h + 31, the 16 int8 scales, d (and a pad).
//  * Q5_K (the prefill form only; 112 bytes): the 16-byte header (as Q4_K),
//    the block's 32 qh bytes (every chunk needs two of their bits), qs bytes
//    64h .. 64h + 63.
//  * Q8_0 (the prefill form only; 144 bytes): a "super-block" is 8 blocks of
//    34 bytes (272, a multiple of 16); chunk h's 4 blocks are its bytes
//    136h .. 136h + 135, copied as the 9 pieces from 128h, so they start at
//    byte 8h of the row (blocks 2-byte aligned: d, then 32 int8 codes).
#ifndef MINFER_CUDA_KERNELS_DQ_PIECES_CUH_
#define MINFER_CUDA_KERNELS_DQ_PIECES_CUH_

#include <cstdint>

#include "cuda/kernels/types.h"

// Plain C++ with __host__ __device__ under nvcc: a CPU test
// (tests/cuda/kernels/dq_pieces_test.cc) walks the pieces as the kernels do.
#if defined(__CUDACC__)
#define MINFER_PIECES_HD __host__ __device__ __forceinline__
#else
#define MINFER_PIECES_HD inline
#endif

namespace minfer::cuda {

template <GgmlType T>
struct DqPieces;

template <>
struct DqPieces<GgmlType::kQ4_K> {
  static constexpr int kBlockBytes = 144;
  static constexpr int kPieces = 5;  // header, then qs 64h .. 64h + 63
  static constexpr int kRowBytes = 80;
  MINFER_PIECES_HD static int Src(int h, int p) {
    return p == 0 ? 0 : 16 + 64 * h + 16 * (p - 1);
  }
};

template <>
struct DqPieces<GgmlType::kQ6_K> {
  static constexpr int kBlockBytes = kQ6KPaddedBytes;
  static constexpr int kPieces = 8;  // ql (4), qh (2), scales, d (+ pad)
  static constexpr int kRowBytes = 144;
  MINFER_PIECES_HD static int Src(int h, int p) {
    return p < 4 ? 64 * h + 16 * p : p < 6 ? 128 + 32 * h + 16 * (p - 4) : 192 + 16 * (p - 6);
  }
};

template <>
struct DqPieces<GgmlType::kQ5_K> {
  static constexpr int kBlockBytes = 176;
  static constexpr int kPieces = 7;  // header, qh (2), qs 64h .. 64h + 63
  static constexpr int kRowBytes = 112;
  MINFER_PIECES_HD static int Src(int h, int p) {
    return p < 3 ? 16 * p : 48 + 64 * h + 16 * (p - 3);
  }
};

template <>
struct DqPieces<GgmlType::kQ8_0> {
  static constexpr int kBlockBytes = 272;  // 8 blocks: two chunks
  static constexpr int kPieces = 9;
  static constexpr int kRowBytes = 144;
  MINFER_PIECES_HD static int Src(int h, int p) { return 128 * h + 16 * p; }
};

// Piece q of chunk c (half c & 1 of super-block c >> 1): its byte offset in
// the weight row. Every type's offsets are linear in the half, Src(h, q) =
// Src(0, q) + h * PieceStep(q), so a copy that walks chunk by chunk moves
// its source by PieceAdvance(half, step) (the register-form GEMM's
// WeightCopies): into half 1, then on to the next block's half 0.
template <GgmlType T>
MINFER_PIECES_HD int64_t PieceStart(int q, int c) {
  return static_cast<int64_t>(c >> 1) * DqPieces<T>::kBlockBytes + DqPieces<T>::Src(c & 1, q);
}
template <GgmlType T>
MINFER_PIECES_HD int PieceStep(int q) {
  return DqPieces<T>::Src(1, q) - DqPieces<T>::Src(0, q);
}
// From chunk c's piece to chunk c + 1's, `half` = c & 1.
template <GgmlType T>
MINFER_PIECES_HD int PieceAdvance(int half, int step) {
  return half != 0 ? DqPieces<T>::kBlockBytes - step : step;
}

}  // namespace minfer::cuda

#endif  // MINFER_CUDA_KERNELS_DQ_PIECES_CUH_
