#include "cuda/tools/probe_kernel.h"

namespace minfer::cuda {
namespace {

__global__ void saxpy_probe_kernel(float a, const float* __restrict__ x, float* __restrict__ y,
                                   int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

}  // namespace

cudaError_t LaunchSaxpyProbe(float a, const float* x, float* y, int n, cudaStream_t stream) {
  int threads = 256;
  int blocks = (n + threads - 1) / threads;
  saxpy_probe_kernel<<<blocks, threads, 0, stream>>>(a, x, y, n);
  return cudaGetLastError();
}

}  // namespace minfer::cuda
