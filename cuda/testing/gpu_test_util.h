// Helpers for GPU tests (tag `gpu`): they skip cleanly when no CUDA device
// answers, so CI machines without a GPU stay green.
#ifndef MINFER_CUDA_TESTING_GPU_TEST_UTIL_H_
#define MINFER_CUDA_TESTING_GPU_TEST_UTIL_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace minfer::cuda::testing {

inline bool DeviceAvailable() {
  static const bool available = [] {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  }();
  return available;
}

#define MINFER_REQUIRE_GPU()                                  \
  do {                                                        \
    if (!::minfer::cuda::testing::DeviceAvailable()) {        \
      GTEST_SKIP() << "no CUDA device: GPU test skipped";     \
    }                                                         \
  } while (0)

// MINFER_REQUIRE_GPU, and a skip on GPUs before sm_80 (the tensor-core
// kernels' mma shapes and cp.async; their launchers answer
// cudaErrorNotSupported there).
#define MINFER_REQUIRE_SM80_GPU()                                                \
  do {                                                                           \
    MINFER_REQUIRE_GPU();                                                        \
    int dev_ = 0, major_ = 0;                                                    \
    cudaGetDevice(&dev_);                                                        \
    cudaDeviceGetAttribute(&major_, cudaDevAttrComputeCapabilityMajor, dev_);    \
    if (major_ < 8) GTEST_SKIP() << "needs sm_80+";                              \
  } while (0)

#define MINFER_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << cudaGetErrorString(expr)

// Asserts that a CUDA call succeeded, naming it and the error.
#define ASSERT_CUDA(expr)                                                      \
  do {                                                                         \
    const cudaError_t err_ = (expr);                                           \
    ASSERT_EQ(err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(err_); \
  } while (0)

// Waits for the device and fails on any asynchronous error.
#define SYNC() ASSERT_CUDA(cudaDeviceSynchronize())

// A device buffer holding a copy of `host` (RAII).
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (cudaMalloc(&p_, n * sizeof(T) + 1) != cudaSuccess) p_ = nullptr;
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) {
    if (p_ && !host.empty()) cudaMemcpy(p_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return static_cast<T*>(p_); }
  size_t size() const { return n_; }
  // Fills every byte with `byte` (poison outputs before a run).
  void Poison(uint8_t byte = 0xFF) { cudaMemset(p_, byte, n_ * sizeof(T)); }
  std::vector<T> ToHost() const {
    std::vector<T> h(n_);
    if (n_) cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

// Fresh random floats each run (seeded from the clock unless MINFER_TEST_SEED
// is set), never all zeros.
std::vector<float> RandomFloats(size_t n, float scale = 1.0f);
uint64_t TestSeed();

}  // namespace minfer::cuda::testing

#endif  // MINFER_CUDA_TESTING_GPU_TEST_UTIL_H_
