// cuda_device_query: lists the CUDA devices this binary can use and runs a
// probe kernel on each, checking its result on the host. Exit status 0 when
// every device passed, 1 when there is no usable device or a check failed.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "cuda/tools/probe_kernel.h"

namespace {

bool Check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return true;
  std::fprintf(stderr, "CUDA error in %s: %s (%d)\n", what, cudaGetErrorString(err),
               static_cast<int>(err));
  return false;
}

bool ProbeDevice(int dev) {
  if (!Check(cudaSetDevice(dev), "cudaSetDevice")) return false;
  const int n = 1 << 20;
  std::vector<float> x(n), y(n), out(n);
  for (int i = 0; i < n; ++i) {
    x[i] = std::sin(0.001f * i);
    y[i] = std::cos(0.002f * i);
  }
  float *dx = nullptr, *dy = nullptr;
  cudaStream_t stream;
  bool ok = Check(cudaStreamCreate(&stream), "cudaStreamCreate") &&
            Check(cudaMalloc(&dx, n * sizeof(float)), "cudaMalloc") &&
            Check(cudaMalloc(&dy, n * sizeof(float)), "cudaMalloc") &&
            Check(cudaMemcpyAsync(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream),
                  "copy x") &&
            Check(cudaMemcpyAsync(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream),
                  "copy y") &&
            Check(minfer::cuda::LaunchSaxpyProbe(2.5f, dx, dy, n, stream), "saxpy launch") &&
            Check(cudaMemcpyAsync(out.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost,
                                  stream),
                  "copy back") &&
            Check(cudaStreamSynchronize(stream), "sync");
  if (ok) {
    int bad = 0;
    for (int i = 0; i < n; ++i) {
      float want = 2.5f * x[i] + y[i];
      if (std::fabs(out[i] - want) > 1e-6f * (1.0f + std::fabs(want))) ++bad;
    }
    std::printf("  probe kernel: %s (%d of %d elements wrong)\n", bad ? "FAILED" : "ok", bad, n);
    ok = bad == 0;
  }
  cudaFree(dx);
  cudaFree(dy);
  return ok;
}

}  // namespace

int main() {
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  std::printf("CUDA runtime %d.%d, driver supports %d.%d\n", runtime / 1000, (runtime % 1000) / 10,
              driver / 1000, (driver % 1000) / 10);
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::printf("no usable CUDA device (%s)\n",
                err == cudaSuccess ? "none found" : cudaGetErrorString(err));
    return 1;
  }
  bool all_ok = true;
  for (int dev = 0; dev < count; ++dev) {
    cudaDeviceProp p;
    if (!Check(cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties")) return 1;
    size_t free_b = 0, total_b = 0;
    cudaSetDevice(dev);
    cudaMemGetInfo(&free_b, &total_b);
    std::printf("device %d: %s, SM %d.%d, %d SMs, %zu MiB total, %zu MiB free\n", dev, p.name,
                p.major, p.minor, p.multiProcessorCount, total_b >> 20, free_b >> 20);
    all_ok = ProbeDevice(dev) && all_ok;
  }
  return all_ok ? 0 : 1;
}
