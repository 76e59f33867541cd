// On-device sampling support: the TopK graph op (engine/graph/graph.h),
// so the host reads the argmax or the top-k candidates of each row of
// logits instead of the whole row.
#ifndef MINFER_CUDA_KERNELS_SAMPLE_H_
#define MINFER_CUDA_KERNELS_SAMPLE_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace minfer::cuda {

// Largest top_k LaunchTopK handles.
inline constexpr int kTopKMaxK = 256;

// logits [n_out][n_vocab] -> out [n_out][2 + 2 top_k], graph.h's TopK:
// for each row r with mode[r] (device) != 0, over ids < vocab_limit: mode
// 1 the argmax (ties: lowest id), mode 2 the top_k largest in (logit desc,
// id asc) order and sum_i exp(l_i - max) (float, __expf); (-inf, -1) pairs
// pad rows with fewer finite logits; rows with mode 0 are not written. A
// NaN in the row, or (mode 2) more than 1,024 logits tied at the k-th value,
// writes max = NaN: the caller then reads the row itself. Bit-identical to
// the CPU's TopKRows except the normalizer (~1e-6 relative).
cudaError_t LaunchTopK(const float* logits, int64_t n_vocab, int64_t n_out, const int32_t* mode,
                       int top_k, int64_t vocab_limit, float* out, cudaStream_t stream);

}  // namespace minfer::cuda

#endif  // MINFER_CUDA_KERNELS_SAMPLE_H_
