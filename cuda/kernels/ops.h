// Non-matmul kernels of the Qwen2 graph: norms, RoPE, elementwise ops, the
// KV cache store, attention (split-KV decode and prefill) and the decode
// QKV epilogue. Semantics are the CPU backend's (engine/cpu/kernels.h; the
// graph ops are documented in engine/graph/graph.h). Launchers return the
// launch error and never synchronize. Positions and ids are int32 device
// arrays; kernels never read them on the host (replay-safe: seed §2.5).
#ifndef MINFER_CUDA_KERNELS_OPS_H_
#define MINFER_CUDA_KERNELS_OPS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/kernels/types.h"

namespace minfer::cuda {

// --- elementwise (n elements; b repeats with period nb when nb < n) ---------
cudaError_t LaunchAdd(const float* a, const float* b, int64_t nb, float* y, int64_t n,
                      cudaStream_t stream);
cudaError_t LaunchMul(const float* a, const float* b, int64_t nb, float* y, int64_t n,
                      cudaStream_t stream);
cudaError_t LaunchScale(const float* a, float s, float* y, int64_t n, cudaStream_t stream);
cudaError_t LaunchSilu(const float* a, float* y, int64_t n, cudaStream_t stream);
cudaError_t LaunchSwiGlu(const float* g, const float* u, float* y, int64_t n, cudaStream_t stream);
cudaError_t LaunchSoftmaxRows(const float* a, float* y, int64_t ne0, int64_t rows,
                              cudaStream_t stream);
// y = x with axes permuted: y.ne[perm[i]] = x.ne[i] (x.ne given).
cudaError_t LaunchPermute(const float* x, const int64_t x_ne[4], const int8_t perm[4], float* y,
                          cudaStream_t stream);
// GetRows from an f32 [ne0, rows] tensor.
cudaError_t LaunchGetRowsF32(const float* src, int64_t ne0, int64_t rows, const int32_t* ids,
                             int64_t n_ids, float* y, int32_t* error_flag, cudaStream_t stream);

// --- norms --------------------------------------------------------------------
// y = x / sqrt(mean(x^2) + eps) * w per row of ne0 (w may be null). When
// q8 is non-null the normalized rows are also quantized to BlockQ8A (the
// decode epilogue: the next MMVQ skips its quantize launch); y may then be
// null (only the int8 plane is written). ne0 % 4 == 0; with q8, ne0 % 32 == 0.
cudaError_t LaunchRmsNorm(const float* x, const float* w, float eps, float* y, BlockQ8A* q8,
                          int64_t ne0, int64_t rows, cudaStream_t stream);

// --- RoPE ---------------------------------------------------------------------
// x [head_dim, n_heads, nt] -> y (may equal x). style 0 = NeoX (pairs i,
// i + n_rot/2), 1 = interleaved (pairs 2i, 2i+1). Angles are computed as the
// CPU does: theta = float(pos) * powf(base, -2i/n_rot) rounded to float.
cudaError_t LaunchRope(const float* x, const int32_t* pos, float* y, int64_t head_dim,
                       int64_t n_heads, int64_t nt, int n_rot, int style, float base,
                       cudaStream_t stream);

// --- KV cache -----------------------------------------------------------------
// Writes k/v rows (n_kv_embd floats per token) of nt tokens to cache row
// pos[t] (f32, f16 or q8_0 blocks). Out-of-range positions are skipped and
// set *error_flag to kDeviceBadPosition.
cudaError_t LaunchKvStore(const float* k, const float* v, const int32_t* pos, int64_t nt,
                          void* k_cache, void* v_cache, KvType type, int64_t n_kv_embd,
                          int64_t n_ctx, int32_t* error_flag, cudaStream_t stream);

// Decode epilogue (QkvBiasRopeStore): adds the biases (each may be null),
// ropes q and k (NeoX/interleaved), writes roped q to q_out [head_dim,
// n_head] and stores k, v at cache row pos[0]. q, k, v may point into one
// buffer (the FusedQKV output).
cudaError_t LaunchQkvBiasRopeStore(const float* q, const float* k, const float* v,
                                   const float* bq, const float* bk, const float* bv,
                                   const int32_t* pos, float* q_out, void* k_cache, void* v_cache,
                                   const AttnParams& p, int rope_style, float rope_base,
                                   int32_t* error_flag, cudaStream_t stream);

// --- attention ----------------------------------------------------------------
// Decode (one query token at position pos[0]): split-KV over kAttnSplits
// stripes x n_head warps into `partial` (AttnDecodePartialFloats(p) floats),
// then the combine kernel writes out [head_dim * n_head]. Static grids: the
// causal bound pos[0] + 1 is read on the device, so a captured launch is
// valid at any context length. head_dim <= 128 and % 4 == 0.
int64_t AttnDecodePartialFloats(const AttnParams& p);
cudaError_t LaunchAttnDecode(const float* q, const int32_t* pos, const void* k_cache,
                             const void* v_cache, float* partial, float* out,
                             const AttnParams& p, cudaStream_t stream);

// Prefill (nt tokens, token t attends to cache rows 0..pos[t]): q
// [head_dim, n_head, nt] -> out [head_dim * n_head, nt]. Causal, GQA.
cudaError_t LaunchAttnPrefill(const float* q, const int32_t* pos, int64_t nt, const void* k_cache,
                              const void* v_cache, float* out, const AttnParams& p,
                              cudaStream_t stream);

}  // namespace minfer::cuda

#endif  // MINFER_CUDA_KERNELS_OPS_H_
