// AVX512-VNNI kernels on 256-bit registers: vpdpbusd replaces the
// vpmaddubsw/vpmaddwd pair (and does not saturate, which lets Q8_0 use
// biased activations), AVX512-VL doubles the register file (32 ymm) for
// wider column tiles, and vpmovm2b expands Q5 high bits. Only called when
// the CPU reports AVX512-F/VL/BW/VNNI (CpuIsa::kAvx512Vnni).
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "engine/quant/blocks.h"
#include "engine/quant/vec_dot_internal.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")

namespace minfer {
namespace vec_dot_internal {
namespace avx512vnni {

#define MINFER_VNNI 1
#define MINFER_TILE_COLS 4
#include "engine/quant/vec_dot_x86.inc"
#undef MINFER_TILE_COLS
#undef MINFER_VNNI

}  // namespace avx512vnni

const Q8AKernels* Q8AKernelsAvx512Vnni(GgmlType wtype) {
  return avx512vnni::LookupQ8A(wtype);
}

}  // namespace vec_dot_internal
}  // namespace minfer

#pragma GCC pop_options
