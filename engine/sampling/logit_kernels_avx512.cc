// AVX-512 logit kernels: the bodies of logit_kernels_inl.h on 16-float
// vectors. BW is enabled for the 16-bit compares of find_id (without it GCC
// splits them badly). AVX-512F implies FMA, so this file relies on the
// library-wide -ffp-contract=off to round every operation as the portable
// build does.

// Standard headers come before the target pragma so that their inline
// functions are not compiled for AVX-512.
#include <cstdint>
#include <cstring>
#include <limits>

#include "engine/sampling/logit_kernels.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw")

#include "engine/sampling/logit_kernels_inl.h"

namespace minfer {
namespace sampling_internal {
namespace {

typedef float F __attribute__((vector_size(64)));
typedef int32_t I __attribute__((vector_size(64)));
typedef uint16_t H __attribute__((vector_size(32)));
typedef uint16_t U __attribute__((vector_size(64)));
typedef uint64_t Q __attribute__((vector_size(64)));
using Avx512 = KernelImpl<F, I, H, U, Q>;

}  // namespace

const LogitKernels& Avx512LogitKernelsUnchecked() { return Avx512::kTable; }

}  // namespace sampling_internal
}  // namespace minfer

#pragma GCC pop_options
