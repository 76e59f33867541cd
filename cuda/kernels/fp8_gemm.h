// The FP8 (e4m3) prefill GEMM (issue 32, item 2) and its quantizers.
//
// What it computes is engine/quant/fp8_matmul.h's contract, the CPU
// reference the tests compare against: a weight converted once to e4m3
// codes with one f32 scale per row, activations quantized per token the
// same way (QuantizeRowFp8: scale = amax / 448, codes FloatToE4M3(x * (1 /
// scale)), every operation rounded as the CPU rounds it, so the codes and
// scales are bit-identical to the CPU's), and
//
//   y[t][r] = (w_scale[r] * x_scale[t]) * sum_i e4m3(w[r][i]) * e4m3(x[t][i])
//
// with the sum on the tensor cores (mma.m16n8k32 e4m3 x e4m3 -> f32, sm_89+).
// Each product is exact; the tensor core adds them in its own order and,
// on Hopper, with an accumulator narrower than f32's 24 bits, so the GEMM
// equals the reference within fp8_matmul.h's accumulation term with fewer
// mantissa bits (the GPU test uses 13), not bit for bit.
//
// Why it exists: e4m3 on Hopper's tensor cores runs at twice the f16 rate,
// with one scale per row and per token instead of MMQ's per-32-block
// rescale on the CUDA cores. It is opt-in (MINFER_FP8_PREFILL) because e4m3
// keeps 3 mantissa bits: fp8_matmul.h states the error bound.
//
// Launchers return the launch error (cudaGetLastError) and never
// synchronize; a violated precondition returns cudaErrorInvalidValue before
// anything is launched, and a build or device without the fp8 mma
// cudaErrorNotSupported. Legal inside a stream capture; thread-safe.
#ifndef MINFER_CUDA_KERNELS_FP8_GEMM_H_
#define MINFER_CUDA_KERNELS_FP8_GEMM_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/kernels/types.h"

namespace minfer::cuda {

// Rows of e4m3 codes with one f32 scale each: row r's codes at codes + r *
// row_bytes, k of them, then zeros up to row_bytes. Requirements: k % 32 ==
// 0, row_bytes % 16 == 0, row_bytes >= k, codes 16-byte aligned.
struct Fp8RowsView {
  const uint8_t* codes = nullptr;
  const float* scales = nullptr;
  int64_t rows = 0;
  int64_t k = 0;
  int64_t row_bytes = 0;
};

// The row stride Fp8RowsView uses for k inputs: k rounded up to 16.
inline int64_t Fp8RowBytes(int64_t k) { return (k + 15) / 16 * 16; }

// One allocation of `rows` rows of k codes, then their scales (how the
// backend lays a weight's copy and a step's activations out): the scales'
// offset (256-byte aligned) and the whole size.
inline int64_t Fp8ScalesOffset(int64_t rows, int64_t k) {
  return (rows * Fp8RowBytes(k) + 255) / 256 * 256;
}
inline int64_t Fp8RowsBytes(int64_t rows, int64_t k) {
  return Fp8ScalesOffset(rows, k) + rows * 4;
}

// Fp8GemmRuns(cc) (types.h): whether a device runs it.

// n rows of k f32 values (row i at x + i * x_stride) -> codes (row i at
// codes + i * code_stride, the bytes past k up to Fp8RowBytes(k) zeroed)
// and scales[i]: engine/quant/fp8_matmul.h QuantizeRowFp8, bit for bit.
// Used for activations per token and, at load, for weights dequantized to
// f32. k % 32 == 0; code_stride >= Fp8RowBytes(k), % 16 == 0.
cudaError_t LaunchQuantizeRowsFp8(const float* x, int64_t x_stride, int64_t k, int64_t n,
                                  uint8_t* codes, int64_t code_stride, float* scales,
                                  cudaStream_t stream);

// y[t * y_stride + r] = (w.scales[r] * x.scales[t]) * dot(w row r, x row t)
// for r < w.rows, t < x.rows, plus residual[t * y_stride + r] when
// residual is not null (one float add after the product, as an Add node
// adds it). w.k == x.k; y_stride >= w.rows; residual may not overlap y
// unless it is y itself.
cudaError_t LaunchFp8Gemm(const Fp8RowsView& w, const Fp8RowsView& x, const float* residual, float* y,
                          int64_t y_stride, cudaStream_t stream);

}  // namespace minfer::cuda

#endif  // MINFER_CUDA_KERNELS_FP8_GEMM_H_
