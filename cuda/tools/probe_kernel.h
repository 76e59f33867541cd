// A tiny kernel launch used by `cuda_device_query` to prove the build chain:
// y[i] = a * x[i] + y[i] on the device, checked against the host.
#ifndef MINFER_CUDA_TOOLS_PROBE_KERNEL_H_
#define MINFER_CUDA_TOOLS_PROBE_KERNEL_H_

#include <cuda_runtime.h>

namespace minfer::cuda {

// Launches the saxpy probe on `stream`; returns the launch error.
cudaError_t LaunchSaxpyProbe(float a, const float* x, float* y, int n, cudaStream_t stream);

}  // namespace minfer::cuda

#endif  // MINFER_CUDA_TOOLS_PROBE_KERNEL_H_
