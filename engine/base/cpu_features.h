// Run-time CPU feature detection (x86-64). Kernels with SIMD fast paths pick
// them through these flags, never through compile-time -march, so one binary
// runs on every x86-64 machine.
#ifndef MINFER_ENGINE_BASE_CPU_FEATURES_H_
#define MINFER_ENGINE_BASE_CPU_FEATURES_H_

#include <string>

namespace minfer {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512vnni = false;
  bool avxvnni = false;

  // AVX2 + FMA + F16C: the set the AVX2 kernels are compiled for.
  bool HasAvx2Set() const { return avx2 && fma && f16c; }
  std::string ToString() const;
};

// Detected once; MINFER_FORCE_SCALAR=1 in the environment reports no SIMD at
// all (to exercise the scalar fallbacks).
const CpuFeatures& GetCpuFeatures();

// Number of online CPUs (at least 1).
int NumCpus();

}  // namespace minfer

#endif  // MINFER_ENGINE_BASE_CPU_FEATURES_H_
