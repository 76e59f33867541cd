// CHECK_CUDA for the GPU benchmarks (no gtest): a failed CUDA call prints
// where and why, and exits.
#ifndef MINFER_CUDA_TESTING_CHECK_CUDA_H_
#define MINFER_CUDA_TESTING_CHECK_CUDA_H_

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

#define CHECK_CUDA(expr)                                                 \
  do {                                                                   \
    const cudaError_t err_ = (expr);                                     \
    if (err_ != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, \
                   cudaGetErrorString(err_));                            \
      std::exit(1);                                                      \
    }                                                                    \
  } while (0)

#endif  // MINFER_CUDA_TESTING_CHECK_CUDA_H_
