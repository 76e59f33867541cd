// AVX2 logit kernels: the bodies of logit_kernels_inl.h on 8-float vectors.
// Only AVX2 is enabled (no FMA), so every operation rounds exactly as in the
// portable build.

// Standard headers come before the target pragma so that their inline
// functions are not compiled for AVX2.
#include <cstdint>
#include <cstring>
#include <limits>

#include "engine/sampling/logit_kernels.h"

#pragma GCC push_options
#pragma GCC target("avx2")

#include "engine/sampling/logit_kernels_inl.h"

namespace minfer {
namespace sampling_internal {
namespace {

typedef float F __attribute__((vector_size(32)));
typedef int32_t I __attribute__((vector_size(32)));
typedef uint16_t H __attribute__((vector_size(16)));
typedef uint16_t U __attribute__((vector_size(32)));
typedef uint64_t Q __attribute__((vector_size(32)));
using Avx2 = KernelImpl<F, I, H, U, Q>;

}  // namespace

const LogitKernels& Avx2LogitKernelsUnchecked() { return Avx2::kTable; }

}  // namespace sampling_internal
}  // namespace minfer

#pragma GCC pop_options
