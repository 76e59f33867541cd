#include "engine/quant/fp16.h"

#include <cstdlib>

namespace minfer {
namespace fp16_internal {
// Defined in fp16_avx2.cc (compiled for AVX2+F16C through target pragmas).
void Fp16ToFloatRowAvx2(const uint16_t* src, float* dst, int64_t n);
void FloatToFp16RowAvx2(const float* src, uint16_t* dst, int64_t n);
void Bf16ToFloatRowAvx2(const uint16_t* src, float* dst, int64_t n);
void FloatToBf16RowAvx2(const float* src, uint16_t* dst, int64_t n);
}  // namespace fp16_internal

namespace {

bool UseSimd(CpuIsa isa) {
  if (!CpuIsaSupported(isa)) std::abort();  // caller bug, see header
  return isa != CpuIsa::kScalar;  // every SIMD level includes AVX2+F16C
}

}  // namespace

void Fp16ToFloatRow(CpuIsa isa, const uint16_t* src, float* dst, int64_t n) {
  if (UseSimd(isa)) return fp16_internal::Fp16ToFloatRowAvx2(src, dst, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = Fp16ToFloat(src[i]);
}

void FloatToFp16Row(CpuIsa isa, const float* src, uint16_t* dst, int64_t n) {
  if (UseSimd(isa)) return fp16_internal::FloatToFp16RowAvx2(src, dst, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = FloatToFp16(src[i]);
}

void Bf16ToFloatRow(CpuIsa isa, const uint16_t* src, float* dst, int64_t n) {
  if (UseSimd(isa)) return fp16_internal::Bf16ToFloatRowAvx2(src, dst, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFloat(src[i]);
}

void FloatToBf16Row(CpuIsa isa, const float* src, uint16_t* dst, int64_t n) {
  if (UseSimd(isa)) return fp16_internal::FloatToBf16RowAvx2(src, dst, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = FloatToBf16(src[i]);
}

void Fp16ToFloatRow(const uint16_t* src, float* dst, int64_t n) {
  Fp16ToFloatRow(BestCpuIsa(), src, dst, n);
}
void FloatToFp16Row(const float* src, uint16_t* dst, int64_t n) {
  FloatToFp16Row(BestCpuIsa(), src, dst, n);
}
void Bf16ToFloatRow(const uint16_t* src, float* dst, int64_t n) {
  Bf16ToFloatRow(BestCpuIsa(), src, dst, n);
}
void FloatToBf16Row(const float* src, uint16_t* dst, int64_t n) {
  FloatToBf16Row(BestCpuIsa(), src, dst, n);
}

}  // namespace minfer
