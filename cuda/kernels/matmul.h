// Matrix kernels: activation quantization, MMVQ decode (nt 1..8), the f32
// matvec for float weights, fused decode matvecs, and the f16 tensor-core
// prefill GEMM. Host-side launchers; each returns the launch error
// (cudaGetLastError) and never synchronizes.
//
// Shapes: W has `rows` output rows of `k` inputs (GGUF [k, rows]); x/q hold
// nt activation rows of k; y[t * y_stride + r] receives row r of token t.
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

// Whether LaunchMmvq handles `type` (Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K).
bool MmvqSupports(GgmlType type);

// y = W q for nt in [1, 8] tokens (dp4a integer dots over the BlockQ8A
// activations, float scales folded per block). k must be a multiple of the
// type's block size.
cudaError_t LaunchMmvq(const WeightView& w, const BlockQ8A* q, float* y, int64_t y_stride,
                       int64_t nt, cudaStream_t stream);

// Up to 3 weights sharing one input, outputs concatenated (FusedQKV): rows
// of segment i land at y + offset_i where offset_i = sum of earlier rows.
// All segments have the same k; types may differ per segment.
struct MmvqSegments {
  WeightView w[3];
  int n = 0;
};
cudaError_t LaunchMmvqSegments(const MmvqSegments& segs, const BlockQ8A* q, float* y,
                               cudaStream_t stream);

// Decode FFN: y[r] = silu(Wg_r . q) * (Wu_r . q) (FusedFFN), one token.
cudaError_t LaunchMmvqSwiGlu(const WeightView& gate, const WeightView& up, const BlockQ8A* q,
                             float* y, cudaStream_t stream);

// y = W x with f32 activations, for F32/F16/BF16 weights (any nt), and as
// the simpler path for quantized types (weights dequantized on the fly).
cudaError_t LaunchMatvecF32(const WeightView& w, const float* x, float* y, int64_t y_stride,
                            int64_t nt, cudaStream_t stream);

// Prefill GEMM (nt >= 9): weight tiles dequantized to f16 in shared memory,
// activations converted to f16, tensor-core MMA with f32 accumulation.
// Any supported weight type (quantized or float).
cudaError_t LaunchGemmF16(const WeightView& w, const float* x, float* y, int64_t nt,
                          cudaStream_t stream);

// GetRows from a weight (the embedding gather): y[i] = dequant(W row ids[i]),
// for every type above plus F32/F16/BF16. Ids outside [0, rows) produce a
// zero row and set *error_flag to kDeviceBadTokenId.
cudaError_t LaunchGetRowsWeight(const WeightView& w, const int32_t* ids, int64_t n_ids,
                                float* y, int32_t* error_flag, cudaStream_t stream);

}  // namespace minfer::cuda

#endif  // MINFER_CUDA_KERNELS_MATMUL_H_
