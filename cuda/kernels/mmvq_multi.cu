// Multi-token MMVQ (nt 2..8): the kernel of mmvq_impl.cuh with an in-block
// token loop, so each weight byte is read once for all nt tokens (the middle
// band between decode and the prefill GEMM). Its own translation
// unit so the many instantiations compile in parallel with mmvq.cu.
#include <cuda_runtime.h>

#include "cuda/kernels/mmvq_impl.cuh"

namespace minfer::cuda::mmvq {
namespace {

// Two rows per warp group; K-quants also one (their 64-weight units leave no
// registers for a second row's decoded codes across the token loop).
template <GgmlType T, int NT>
cudaError_t LaunchNt(const Plan& plan, cudaStream_t stream) {
  if (plan.mode != kPlain) return cudaErrorInvalidValue;
  if constexpr (NeedsUnaligned(T)) {
    if (plan.rows_per_warp == 1) {
      return plan.smem_act ? LaunchInstance<T, NT, 1, true, kPlain>(plan, stream)
                           : LaunchInstance<T, NT, 1, false, kPlain>(plan, stream);
    }
  }
  if (plan.rows_per_warp != 2) return cudaErrorInvalidValue;
  return plan.smem_act ? LaunchInstance<T, NT, 2, true, kPlain>(plan, stream)
                       : LaunchInstance<T, NT, 2, false, kPlain>(plan, stream);
}

template <GgmlType T>
cudaError_t LaunchMultiT(const Plan& plan, cudaStream_t stream) {
  switch (plan.nt) {
    case 2: return LaunchNt<T, 2>(plan, stream);
    case 3: return LaunchNt<T, 3>(plan, stream);
    case 4: return LaunchNt<T, 4>(plan, stream);
    case 5: return LaunchNt<T, 5>(plan, stream);
    case 6: return LaunchNt<T, 6>(plan, stream);
    case 7: return LaunchNt<T, 7>(plan, stream);
    case 8: return LaunchNt<T, 8>(plan, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t LaunchPlanMulti(GgmlType type, const Plan& plan, cudaStream_t stream) {
  switch (type) {
    case GgmlType::kQ4_0: return LaunchMultiT<GgmlType::kQ4_0>(plan, stream);
    case GgmlType::kQ4_1: return LaunchMultiT<GgmlType::kQ4_1>(plan, stream);
    case GgmlType::kQ5_0: return LaunchMultiT<GgmlType::kQ5_0>(plan, stream);
    case GgmlType::kQ5_1: return LaunchMultiT<GgmlType::kQ5_1>(plan, stream);
    case GgmlType::kQ8_0: return LaunchMultiT<GgmlType::kQ8_0>(plan, stream);
    case GgmlType::kQ4_K: return LaunchMultiT<GgmlType::kQ4_K>(plan, stream);
    case GgmlType::kQ5_K: return LaunchMultiT<GgmlType::kQ5_K>(plan, stream);
    case GgmlType::kQ6_K: return LaunchMultiT<GgmlType::kQ6_K>(plan, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace minfer::cuda::mmvq
