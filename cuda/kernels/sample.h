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
// A row's mode value (graph.h TopKModeValue): base mode in the low 8 bits,
// mask column + 1 above (0: no mask). The backend checks that this equals
// graph::kTopKMaskShift.
inline constexpr int kTopKMaskShift = 8;

// logits [n_out][n_vocab] -> out [n_out][2 + 2 top_k], graph.h's TopK:
// for each row r whose base mode (mode[r] & 255, device) != 0, over ids <
// vocab_limit: 1 the argmax (ties: lowest id), 2 the top_k largest in
// (logit desc, id asc) order and sum_i exp(l_i - max) (float, __expf);
// (-inf, -1) pairs pad rows with fewer finite logits; rows with base mode
// 0 are not written. A row whose mask column s = (mode[r] >> 8) - 1 is >=
// 0 sees only the ids whose bit is set in mask[s][ceil(n_vocab / 32)]
// (device words; may be null when no row names a column): the others are
// -inf in every pass, read as the logits are (no masked copy of the row).
// A NaN among the row's ids, or (base mode 2) more than 1,024 logits tied
// at the k-th value, writes max = NaN: the caller then reads the row
// itself. A mode value outside that contract (base mode above 2, a column
// without a mask or at or above n_out) writes nothing for the row and sets
// kDeviceBadTopKMode in error_flag (may be null). Bit-identical to the
// CPU's TopKRows except the normalizer (~1e-6 relative).
cudaError_t LaunchTopK(const float* logits, int64_t n_vocab, int64_t n_out, const int32_t* mode,
                       const uint32_t* mask, int top_k, int64_t vocab_limit, float* out,
                       int32_t* error_flag, cudaStream_t stream);

}  // namespace minfer::cuda

#endif  // MINFER_CUDA_KERNELS_SAMPLE_H_
