// Matrix kernels: activation quantization, MMVQ decode (nt 1..8), the f32
// matvec for float weights, fused decode matvecs, and the f16 tensor-core
// prefill GEMM. Host-side launchers; each returns the launch error
// (cudaGetLastError) and never synchronizes; a violated precondition returns
// cudaErrorInvalidValue before anything is launched. Launchers are
// thread-safe, allocate nothing, and are legal inside a stream capture (the
// first launch of each kernel reads its attributes once).
//
// Shapes: W has `rows` output rows of `k` inputs (GGUF [k, rows]); x/q hold
// nt activation rows of k; y[t * y_stride + r] receives row r of token t.
//
// Layout requirements: weight data and row_bytes 2-byte aligned (every GGUF
// block is), row_bytes >= the row's device bytes; BlockQ8A arrays 8-byte
// aligned; f32 activations 4-byte aligned (16-byte aligned and k % 4 == 0
// takes the vectorized paths; the quantized-weight matvec requires it).
// K-quant weights whose base or row stride is not 16-byte aligned (and the
// raw 210-byte Q6_K) run a correct but slower 2-byte-load variant.
//
// Numerics (tests/cuda/kernels/matmul_kernels_test.cc checks each bound):
//  * MMVQ computes the CPU's VecDotQ8A terms (engine/quant/vec_dot.h) — per
//    activation block the exact integer dot folded as fma(float(I), (d *
//    sc) * d_a, acc), Q6_K per 16 elements, mins as fma(m, s_a, acc) — and
//    sums them in another order: |y - exact| <= 2^-24 (k/16 + 8) * sum|terms|
//    (the CPU's own bound), so |y - VecDotQ8A| <= twice that.
//  * MatvecF32: one f32 fma per weight (reference dequantized weights):
//    |y - exact| <= 2^-24 (k/16 + 64) * sum|w x|.
//  * GemmF16: weights and activations rounded once to f16, f32 accumulation:
//    |y - exact| <= (2^-10 + 2^-22 (k/16 + 16)) sum|w x| + 2^-25 (sum|x| +
//    sum|w|). Weights beyond f16's range (|w| > 65504) become inf.
//  * LaunchQuantizeQ8A and LaunchGetRowsWeight are bit-exact.
#ifndef MINFER_CUDA_KERNELS_MATMUL_H_
#define MINFER_CUDA_KERNELS_MATMUL_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/kernels/types.h"

namespace minfer::cuda {

// x [nt][k] f32 -> q [nt][k/32] BlockQ8A: d = absmax/127, qs =
// round-half-to-even(x * (1/d)) (0 when d == 0), s = d * sum(qs) — the
// CPU's QuantizeRowQ8A, bit for bit. k % 32 == 0.
cudaError_t LaunchQuantizeQ8A(const float* x, BlockQ8A* q, int64_t k, int64_t nt,
                              cudaStream_t stream);

// Whether LaunchMmvq handles `type` (Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K
// Q6_K): MmvqSupports, and kMmvqMaxTokens, in types.h.

// y = W q for nt in [1, 8] tokens (dp4a integer dots over the BlockQ8A
// activations, float scales folded per block). k must be a multiple of the
// type's block size; nt > 1 needs y_stride >= rows. Weights are read once
// for all nt tokens.
cudaError_t LaunchMmvq(const WeightView& w, const BlockQ8A* q, float* y, int64_t y_stride,
                       int64_t nt, cudaStream_t stream);

// Explicit MMVQ launch geometry, for benchmarks and tests (LaunchMmvq picks
// it from the shape and type, from measurements on the H200; see
// mmvq_impl.cuh for the decomposition). 0 / -1 mean "choose as LaunchMmvq
// would"; unsupported combinations fall back to the nearest instantiated one
// (unaligned K-quant weights always run two rows).
struct MmvqTuning {
  int rows_per_warp = 0;  // weight rows each warp group owns: 1, 2 or 4 (nt 2..8:
                          // 2, K-quants 1 or 2)
  int act_smem = -1;      // 1: stage activations in shared memory (when they fit
                          // in 48 KB), 0: read them through L1
  int ksplit = 0;         // warps splitting one row's k range: 1, 2, 4 or 8
};
cudaError_t LaunchMmvqTuned(const WeightView& w, const BlockQ8A* q, float* y, int64_t y_stride,
                            int64_t nt, const MmvqTuning& tuning, cudaStream_t stream);

// y = r + W q: LaunchMmvq with a residual r laid out as y (token t's rows
// at r + t * y_stride) added in the epilogue, one float add per output, as
// a separate Add(r, y) would add it (graph.h MatMul's residual). r and y
// must not overlap.
cudaError_t LaunchMmvqResidual(const WeightView& w, const BlockQ8A* q, const float* residual,
                               float* y, int64_t y_stride, int64_t nt, cudaStream_t stream);

// Up to 3 weights sharing one input, outputs concatenated (FusedQKV): rows
// of segment i land at y + offset_i where offset_i = sum of earlier rows.
// All segments have the same k; types may differ per segment. One launch per
// distinct (type, block stride) among the segments.
struct MmvqSegments {
  WeightView w[3];
  int n = 0;
};
cudaError_t LaunchMmvqSegments(const MmvqSegments& segs, const BlockQ8A* q, float* y,
                               cudaStream_t stream);

// Decode FFN: y[r] = silu(Wg_r . q) * (Wu_r . q) (FusedFFN), one token,
// silu(g) = g / (1 + expf(-g)). One launch when gate and up share a type
// (each warp group owns the pair of rows), else two (gate into y, then
// y = silu(y) * up).
cudaError_t LaunchMmvqSwiGlu(const WeightView& gate, const WeightView& up, const BlockQ8A* q,
                             float* y, cudaStream_t stream);

// y = W x with f32 activations, for F32/F16/BF16 weights (any nt, any k),
// and as the simpler path for quantized types (weights dequantized on the
// fly to their exact reference values). nt > 1 needs y_stride >= rows.
cudaError_t LaunchMatvecF32(const WeightView& w, const float* x, float* y, int64_t y_stride,
                            int64_t nt, cudaStream_t stream);

// Prefill GEMM (nt >= 9): weight tiles dequantized to f16 in shared memory,
// activations converted to f16, tensor-core MMA with f32 accumulation.
// Any supported weight type (quantized or float), any nt, rows, and k (a
// multiple of the block size). y[t * rows + r] (y_stride = rows).
cudaError_t LaunchGemmF16(const WeightView& w, const float* x, float* y, int64_t nt,
                          cudaStream_t stream);

// GetRows from a weight (the embedding gather): y[i] = dequant(W row ids[i])
// (y[i * k + e]), for every type above plus F32/F16/BF16, bit-exact with
// engine/quant DequantizeRow. Ids are read on the device (replay-safe). Ids
// outside [0, rows) produce a zero row and set *error_flag (may be null) to
// kDeviceBadTokenId unless it already holds an error. Quantized types need y
// 16-byte aligned.
cudaError_t LaunchGetRowsWeight(const WeightView& w, const int32_t* ids, int64_t n_ids,
                                float* y, int32_t* error_flag, cudaStream_t stream);

}  // namespace minfer::cuda

#endif  // MINFER_CUDA_KERNELS_MATMUL_H_
