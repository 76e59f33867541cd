// Kernel launch with programmatic dependent launch (launch.h says why), for
// the kernel translation units (nvcc only).
//
// Every __global__ function of cuda/kernels begins with pdl_enter(), and
// every launch goes through LaunchGrid; the two together keep stream
// order: a grid launched programmatically waits in pdl_enter until the grid
// before it has completed and its memory is visible, and only then lets the
// grid after it launch. The order is transitive because a grid cannot
// release its successor before its own wait returns, and every thread
// waits before it can exit.
#ifndef MINFER_CUDA_KERNELS_LAUNCH_CUH_
#define MINFER_CUDA_KERNELS_LAUNCH_CUH_

#include <cuda_runtime.h>

#include <utility>

#include "cuda/kernels/launch.h"

namespace minfer::cuda {

// The first statement of every kernel: waits for the previous grid in the
// stream (a no-op when this grid was not launched programmatically, or
// below sm_90), then lets the next grid launch early; its CTAs will wait
// here in turn, so releasing it at once is safe.
__device__ __forceinline__ void pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// What kernel<<<grid, block, smem, stream>>>(args...) does, launched
// programmatically when this thread asks for it (ProgrammaticLaunch), in
// thread-block clusters of `cluster_x` CTAs along x when that is not 0
// (sm_90+; grid.x a multiple of it). Errors are left for cudaGetLastError,
// as a <<<>>> launch leaves them.
template <typename... Params, typename... Args>
__host__ void LaunchGridIn(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                           cudaStream_t stream, unsigned cluster_x, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  if (cluster_x != 0) {
    cudaLaunchAttribute& a = attr[cfg.numAttrs++];
    a.id = cudaLaunchAttributeClusterDimension;
    a.val.clusterDim.x = cluster_x;
    a.val.clusterDim.y = 1;
    a.val.clusterDim.z = 1;
  }
  if (ProgrammaticLaunch()) {
    cudaLaunchAttribute& a = attr[cfg.numAttrs++];
    a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    a.val.programmaticStreamSerializationAllowed = 1;
  }
  cfg.attrs = cfg.numAttrs != 0 ? attr : nullptr;
  (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

template <typename... Params, typename... Args>
__host__ void LaunchGrid(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                         cudaStream_t stream, Args&&... args) {
  LaunchGridIn(kernel, grid, block, smem, stream, 0u, std::forward<Args>(args)...);
}

}  // namespace minfer::cuda

#endif  // MINFER_CUDA_KERNELS_LAUNCH_CUH_
