// Per-ISA kernel tables behind vec_dot.h. Not part of the public API.
#ifndef MINFER_ENGINE_QUANT_VEC_DOT_INTERNAL_H_
#define MINFER_ENGINE_QUANT_VEC_DOT_INTERNAL_H_

#include <cstdint>

#include "engine/quant/blocks.h"
#include "engine/quant/ggml_types.h"
#include "engine/quant/vec_dot.h"

namespace minfer {
namespace vec_dot_internal {

// Each returns nullptr for a type it has no kernel for.
const Q8AKernels* Q8AKernelsAvx2(GgmlType wtype);        // vec_dot_avx2.cc
const Q8AKernels* Q8AKernelsAvx512Vnni(GgmlType wtype);  // vec_dot_avx512vnni.cc
const F32Kernels* F32KernelsAvx2(GgmlType wtype);        // vec_dot_avx2.cc
void QuantizeRowQ8AAvx2(const float* x, BlockQ8A* out, int64_t n);

// Blocks whose absmax / 127 is below this quantize to all zeros (d = 0),
// so 1 / d never overflows.
inline constexpr float kQ8AMinScale = 1.17549435e-38f;  // FLT_MIN

}  // namespace vec_dot_internal
}  // namespace minfer

#endif  // MINFER_ENGINE_QUANT_VEC_DOT_INTERNAL_H_
