// Facts kept once per CUDA device. nvcc or host C++; internal to cuda/kernels.
//
// A kernel launcher's facts depend on the device it launches on:
// - its SM count and compute capability;
// - a kernel's opted-in dynamic shared memory: cudaFuncSetAttribute acts on
//   the current device only, so a second GPU would otherwise launch with the
//   48 KB default and fail;
// - its occupancy.
// A function-local `static const` computed at the first launch would keep
// the first device's answer for every device. PerDevice<T> keeps one value
// per device index, computed at that device's first call.
//
// Contract: call from a thread whose current device (cudaSetDevice) is the
// one the launch goes to. CudaState's execution lock sets it (state/
// cuda_state.h, CudaState::Lock). The first call for a device must be
// outside a stream-capture window, as for any attribute query; later calls
// only read the cache.
#ifndef MINFER_CUDA_KERNELS_PER_DEVICE_CUH_
#define MINFER_CUDA_KERNELS_PER_DEVICE_CUH_

#include <cuda_runtime_api.h>

#include <mutex>

#include "cuda/kernels/types.h"

namespace minfer::cuda {

// The calling thread's current device; 0 when it is out of [0,
// kMaxCudaDevices) (CudaState never opens such a device).
inline int CurrentDeviceSlot() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return dev >= 0 && dev < kMaxCudaDevices ? dev : 0;
}

template <class T>
class PerDevice {
 public:
  // The current device's value; `make` (called with the device index)
  // computes it at that device's first call. Thread-safe.
  template <class Make>
  const T& Get(Make&& make) {
    const int dev = CurrentDeviceSlot();
    std::call_once(once_[dev], [&] { values_[dev] = make(dev); });
    return values_[dev];
  }

 private:
  std::once_flag once_[kMaxCudaDevices];
  T values_[kMaxCudaDevices]{};
};

}  // namespace minfer::cuda

#endif  // MINFER_CUDA_KERNELS_PER_DEVICE_CUH_
