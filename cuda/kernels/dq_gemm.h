// The dequantizing few-token GEMM (dq_gemm.cu): the matmuls of a decode
// batch, 1..64 tokens, for Q4_K and Q6_K weights, on f16 tensor cores.
//
// Why it exists beside MMQ's few-token kernel (mmq.h LaunchMmqSmall). The
// int8 kernels keep every 32-element block's integer dot apart and fold it
// into f32 with the weight's and the activation's scales: per block, output
// and token a convert and two or three float operations. On the H200 that
// fold, not HBM, bounds a decode batch (docs/benchmarks.md: ~130 warp
// instructions per 16 rows x 32 k at 16 tokens, DRAM at 9-19% of peak).
// Here every weight is decoded once into an f16 value with its scale already
// applied (a few bit operations and two f16 instructions per pair of
// weights), and the tensor cores accumulate in f32 across the whole k range:
// nothing per block and token remains outside the mma.
//
// Activations (LaunchQuantizeDq). The activations are quantized exactly as
// the CPU's QuantizeRowQ8A does (engine/quant/vec_dot.h: per 32 values d =
// absmax / 127, codes q = round(x / d)) and handed to the tensor cores as
// the f16 values d * q, so this GEMM computes the same function as every
// other quantized matmul of the engine (VecDotQ8A's operands), up to f16
// rounding. Layout: f16 [nt][k], token t's row at byte 2 k t, each
// 4-element group stored in the order (0, 2, 1, 3): the order in which the
// weight decode produces pairs of f16 values from nibbles (element j and
// j + 2 of a 32-bit word of codes share a half2), so that a mma fragment of
// weights and the one of activations hold the same k positions.
//
// Numerics (contract; tests/cuda/kernels/dq_gemm_test.cc checks it). With
// a_i = d q (the Q8A operands) and w_i the reference weight (engine/quant
// DequantizeRow): Q4_K w = s q - m with s = d sc and m = dmin mn each
// rounded to f16 and q s - m rounded once (fused); Q6_K w = (q - 32) s with
// s = d sc rounded to f16 and the product rounded. a_i rounded to f16.
// Products accumulate in f32. Hence |y - sum w_i a_i| <= 2^-9 sum (|w_i| +
// |m_i|) |a_i| (m_i: element i's block min, 0 for Q6_K) — four f16
// roundings of 2^-11 with room to spare; the f32 sum adds far less. Results
// are deterministic (fixed order) but are not the int8 kernels' bits.
// Values whose f16 image overflows (|d q| > 65504) make the output inf.
//
// Conventions as mmq.h: launchers return the launch error and never
// synchronize, return cudaErrorInvalidValue for an invalid call before
// launching anything and cudaErrorNotSupported (with *why_not) when the
// kernel cannot take a valid call, allocate nothing, are thread-safe, and
// are legal inside a stream capture once each kernel has been launched
// outside one (the first launch sets its shared-memory attribute).
#ifndef MINFER_CUDA_KERNELS_DQ_GEMM_H_
#define MINFER_CUDA_KERNELS_DQ_GEMM_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/kernels/mmq.h"
#include "cuda/kernels/types.h"

namespace minfer::cuda {

inline constexpr int64_t kDqMaxTokens = 64;

// Whether the GEMM takes weights of `type` (Q4_K; Q6_K in the padded
// 224-byte layout): DqSupports in types.h.

// Bytes of the activation layout for nt tokens of k: 2 k nt.
int64_t DqActivationBytes(int64_t k, int64_t nt);

// x [nt][k] f32 (4-byte aligned; 16-byte aligned is faster) -> the layout
// above at `act` (16-byte aligned). k % 32 == 0.
cudaError_t LaunchQuantizeDq(const float* x, void* act, int64_t k, int64_t nt,
                             cudaStream_t stream);

// The layout of y = silu(g) * u (g, u [nt][k] f32, 4-byte aligned) without
// writing y: bit-identical to LaunchSwiGlu then LaunchQuantizeDq (the
// mode-2 fusion of the DQ GEMM's input). k % 32 == 0. (RmsNorm's fusion is
// ops.h's LaunchRmsNormDq.)
cudaError_t LaunchSwiGluDq(const float* g, const float* u, void* act, int64_t k, int64_t nt,
                           cudaStream_t stream);

struct DqTuning {
  // Weight rows per warp: 16 * m_tiles (1 or 2, where each activation
  // fragment feeds two mma; 0 = by shape, see LaunchDqGemm).
  int m_tiles = 0;
  // Split-k: as MmqTuning (kMmqSplitAuto fills the resident CTA slots in
  // whole waves; >= 2 forces that many; 0 = off). Partials go to the
  // workspace and a second kernel adds them in split order: deterministic,
  // but associated otherwise than one CTA's sum.
  int split_k = kMmqSplitAuto;
  void* split_workspace = nullptr;  // 16-byte aligned; null: no split-k
  int64_t split_bytes = 0;
  // Automatic split-k keeps at least this many 128-element k-chunks per
  // split (0 = 4).
  int min_chunks = 0;
};

// y_i = W_i act for up to kMmqMaxSegments weights of one type and k (as
// LaunchMmqSegments: outputs [nt][rows_i] at segments.y[i]), 1 <= nt <= 64
// tokens, on the activation layout above. Weights: 16-byte aligned base and
// row stride (the registry's layout), k a multiple of 256. Needs sm_80+.
cudaError_t LaunchDqGemm(const MmqSegments& segments, const void* act, int64_t nt,
                         cudaStream_t stream, const DqTuning* tuning = nullptr,
                         const char** why_not = nullptr);

}  // namespace minfer::cuda

#endif  // MINFER_CUDA_KERNELS_DQ_GEMM_H_
