// IEEE binary16 ("f16", "half") and bfloat16 ("bf16") <-> binary32 conversion.
//
// Scalar conversions are inline and bit-exact:
//  * Fp16ToFloat is exact for every half (subnormals included); inf stays
//    inf; a NaN stays a NaN of the same sign with its payload in the top
//    mantissa bits and the quiet bit set (what F16C's vcvtph2ps does).
//  * FloatToFp16 rounds to nearest, ties to even, producing half subnormals
//    and +-inf on overflow (|x| >= 65520); a NaN becomes
//    sign | 0x7E00 | (mantissa >> 13) (what F16C's vcvtps2ph does).
//  * Bf16ToFloat is exact (bf16 is the top half of a float).
//  * FloatToBf16 rounds to nearest, ties to even (overflow gives inf); a NaN
//    keeps its sign and top payload bits and gets the quiet bit set, so it
//    never turns into inf.
// The row converters give results identical to the scalar functions, element
// by element, on every CPU; they use F16C/AVX2 when the CPU has them. They are
// thread-safe and do not allocate. Source and destination must not overlap.
#ifndef MINFER_ENGINE_QUANT_FP16_H_
#define MINFER_ENGINE_QUANT_FP16_H_

#include <cstdint>
#include <cstring>

#include "engine/quant/cpu_isa.h"

namespace minfer {

namespace fp16_internal {
inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
}  // namespace fp16_internal

inline float Fp16ToFloat(uint16_t h) {
  using fp16_internal::BitsToFloat;
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) {
    // inf, or NaN made quiet (bit 22) with the payload moved up.
    const uint32_t quiet = mant != 0 ? 0x00400000u : 0u;
    return BitsToFloat(sign | 0x7F800000u | quiet | (mant << 13));
  }
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in float.
    const float mag = static_cast<float>(mant) * 0x1p-24f;
    return BitsToFloat(sign | fp16_internal::FloatBits(mag));
  }
  // Normal: rebias the exponent (15 -> 127).
  return BitsToFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline uint16_t FloatToFp16(float f) {
  const uint32_t x = fp16_internal::FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) {  // NaN
    return static_cast<uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));
  }
  if (abs >= 0x477FF000u) {  // >= 65520 rounds to inf (ties-to-even goes up)
    return static_cast<uint16_t>(sign | 0x7C00u);
  }
  if (abs >= 0x38800000u) {  // >= 2^-14: a normal half
    // Add the round-to-nearest-even bias below bit 13, then rebias the
    // exponent; a mantissa carry correctly bumps the exponent.
    const uint32_t rounded = abs + 0xFFFu + ((abs >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
  }
  // Below the normal range: the half is round(|f| * 2^24) in units of 2^-24
  // (may round up to 0x400, the smallest normal, which is the right code).
  // |f| * 2^24 < 1024 is exact; adding 2^23 rounds it to an integer with the
  // FPU's round-to-nearest-even.
  const float scaled = fp16_internal::BitsToFloat(abs) * 0x1p24f;
  const uint32_t q = fp16_internal::FloatBits(scaled + 0x1p23f) - 0x4B000000u;
  return static_cast<uint16_t>(sign | q);
}

inline float Bf16ToFloat(uint16_t b) {
  return fp16_internal::BitsToFloat(static_cast<uint32_t>(b) << 16);
}

inline uint16_t FloatToBf16(float f) {
  const uint32_t x = fp16_internal::FloatBits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN: truncate, force quiet
    return static_cast<uint16_t>((x >> 16) | 0x40u);
  }
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

// Row converters (n >= 0 elements). The `isa` overloads exist for tests and
// benchmarks; an unsupported isa is a caller bug (checked: aborts).
void Fp16ToFloatRow(const uint16_t* src, float* dst, int64_t n);
void FloatToFp16Row(const float* src, uint16_t* dst, int64_t n);
void Bf16ToFloatRow(const uint16_t* src, float* dst, int64_t n);
void FloatToBf16Row(const float* src, uint16_t* dst, int64_t n);

void Fp16ToFloatRow(CpuIsa isa, const uint16_t* src, float* dst, int64_t n);
void FloatToFp16Row(CpuIsa isa, const float* src, uint16_t* dst, int64_t n);
void Bf16ToFloatRow(CpuIsa isa, const uint16_t* src, float* dst, int64_t n);
void FloatToBf16Row(CpuIsa isa, const float* src, uint16_t* dst, int64_t n);

}  // namespace minfer

#endif  // MINFER_ENGINE_QUANT_FP16_H_
