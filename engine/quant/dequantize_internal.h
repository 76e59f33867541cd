// Per-type dequantize kernels shared between dequantize.cc (scalar
// reference, dispatch) and dequantize_avx2.cc. Not part of the public API.
#ifndef MINFER_ENGINE_QUANT_DEQUANTIZE_INTERNAL_H_
#define MINFER_ENGINE_QUANT_DEQUANTIZE_INTERNAL_H_

#include <cstdint>

namespace minfer {
namespace dequant_internal {

// AVX2 fast paths (dequantize_avx2.cc); bit-identical to the scalar ones.
void DequantizeF16Avx2(const void* src, float* dst, int64_t n);
void DequantizeQ8_0Avx2(const void* src, float* dst, int64_t n);
void DequantizeQ4_KAvx2(const void* src, float* dst, int64_t n);
void DequantizeQ6_KAvx2(const void* src, float* dst, int64_t n);

}  // namespace dequant_internal
}  // namespace minfer

#endif  // MINFER_ENGINE_QUANT_DEQUANTIZE_INTERNAL_H_
