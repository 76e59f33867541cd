// Which SIMD flavour of the quant kernels runs on this CPU.
//
// Every kernel in engine/quant exists in a scalar version and in x86 SIMD
// versions; all of them compute bit-identical results (see vec_dot.h), so the
// choice only affects speed. Tests and benchmarks pick an ISA explicitly; the
// engine takes BestCpuIsa().
#ifndef MINFER_ENGINE_QUANT_CPU_ISA_H_
#define MINFER_ENGINE_QUANT_CPU_ISA_H_

namespace minfer {

enum class CpuIsa {
  kScalar = 0,
  // AVX2 + FMA + F16C (Haswell and later).
  kAvx2 = 1,
  // kAvx2 plus AVX512-VL/BW/VNNI, used on 256-bit vectors only (vpdpbusd on
  // ymm registers; no 512-bit frequency penalty). Ice Lake and later.
  kAvx512Vnni = 2,
};

inline constexpr CpuIsa kAllCpuIsas[] = {CpuIsa::kScalar, CpuIsa::kAvx2,
                                         CpuIsa::kAvx512Vnni};

// Whether the running CPU can execute kernels of `isa`. Honours
// MINFER_FORCE_SCALAR=1 (through GetCpuFeatures()): then only kScalar is.
bool CpuIsaSupported(CpuIsa isa);

// The fastest supported ISA; computed once.
CpuIsa BestCpuIsa();

const char* CpuIsaName(CpuIsa isa);

}  // namespace minfer

#endif  // MINFER_ENGINE_QUANT_CPU_ISA_H_
