#include "engine/quant/cpu_isa.h"

#include "engine/base/cpu_features.h"

namespace minfer {

bool CpuIsaSupported(CpuIsa isa) {
  const CpuFeatures& f = GetCpuFeatures();
  switch (isa) {
    case CpuIsa::kScalar:
      return true;
    case CpuIsa::kAvx2:
      return f.HasAvx2Set();
    case CpuIsa::kAvx512Vnni:
      return f.HasAvx2Set() && f.avx512f && f.avx512vl && f.avx512bw &&
             f.avx512vnni;
  }
  return false;
}

CpuIsa BestCpuIsa() {
  static const CpuIsa best = [] {
    if (CpuIsaSupported(CpuIsa::kAvx512Vnni)) return CpuIsa::kAvx512Vnni;
    if (CpuIsaSupported(CpuIsa::kAvx2)) return CpuIsa::kAvx2;
    return CpuIsa::kScalar;
  }();
  return best;
}

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return "scalar";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512Vnni:
      return "avx512vnni";
  }
  return "unknown";
}

}  // namespace minfer
