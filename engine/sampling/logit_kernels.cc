// Portable logit kernels (4-float GCC vectors) and the run-time dispatch.
#include "engine/sampling/logit_kernels.h"

#include "engine/base/cpu_features.h"
#include "engine/sampling/logit_kernels_inl.h"

namespace minfer {
namespace sampling_internal {
namespace {

typedef float F __attribute__((vector_size(16)));
typedef int32_t I __attribute__((vector_size(16)));
typedef uint16_t H __attribute__((vector_size(8)));
typedef uint16_t U __attribute__((vector_size(16)));
typedef uint64_t Q __attribute__((vector_size(16)));
using Portable = KernelImpl<F, I, H, U, Q>;

}  // namespace

const LogitKernels& PortableLogitKernels() { return Portable::kTable; }

const LogitKernels* Avx2LogitKernels() {
  return GetCpuFeatures().avx2 ? &Avx2LogitKernelsUnchecked() : nullptr;
}

const LogitKernels* Avx512LogitKernels() {
  const CpuFeatures& cpu = GetCpuFeatures();
  return cpu.avx512f && cpu.avx512bw ? &Avx512LogitKernelsUnchecked() : nullptr;
}

const LogitKernels& GetLogitKernels() {
  static const LogitKernels* const kernels = [] {
    if (const LogitKernels* k = Avx512LogitKernels()) return k;
    if (const LogitKernels* k = Avx2LogitKernels()) return k;
    return &PortableLogitKernels();
  }();
  return *kernels;
}

float KernelExp(float x) { return Portable::Exp(Portable::Splat(x))[0]; }

}  // namespace sampling_internal
}  // namespace minfer
