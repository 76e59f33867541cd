// AVX2 dequantize fast paths for the types embedding gathers read. Each one
// performs the same float operations as dequantize.cc (integer -> float
// conversion is exact; then the same multiply and subtract, unfused), so the
// results are bit-identical to the reference.
#include <immintrin.h>

#include <cstdint>

#include "engine/quant/blocks.h"
#include "engine/quant/dequantize_internal.h"
#include "engine/quant/fp16.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace minfer {
namespace dequant_internal {
namespace {

// Converts 8 signed bytes at p (int8) to floats.
inline __m256 I8ToPs(const void* p) {
  const __m128i v = _mm_loadl_epi64(static_cast<const __m128i*>(p));
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
}

inline __m256 Lane8ToPs(__m128i bytes8) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes8));
}

// Stores (d * q - m) for the 32 values (0..15) in v, multiply then subtract.
inline void StoreAffine32(__m256i v, __m256 d, __m256 m, float* dst) {
  const __m128i lo = _mm256_castsi256_si128(v);
  const __m128i hi = _mm256_extracti128_si256(v, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int k = 0; k < 4; ++k) {
    const __m256 q = Lane8ToPs(parts[k]);
    _mm256_storeu_ps(dst + 8 * k, _mm256_sub_ps(_mm256_mul_ps(d, q), m));
  }
}

}  // namespace

void DequantizeF16Avx2(const void* src, float* dst, int64_t n) {
  Fp16ToFloatRow(CpuIsa::kAvx2, static_cast<const uint16_t*>(src), dst, n);
}

void DequantizeQ8_0Avx2(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(src);
  for (int64_t b = 0; b < n / kQK; ++b, dst += kQK) {
    const __m256 d = _mm256_set1_ps(Fp16ToFloat(x[b].d));
    for (int k = 0; k < 4; ++k) {
      _mm256_storeu_ps(dst + 8 * k, _mm256_mul_ps(d, I8ToPs(x[b].qs + 8 * k)));
    }
  }
}

void DequantizeQ4_KAvx2(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(src);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float d = Fp16ToFloat(x[b].d);
    const float dmin = Fp16ToFloat(x[b].dmin);
    for (int j = 0; j < 8; j += 2, dst += 64) {
      uint8_t sc, m;
      Q4KScaleMin(x[b].scales, j, &sc, &m);
      const float d1 = d * sc;
      const float m1 = dmin * m;
      Q4KScaleMin(x[b].scales, j + 1, &sc, &m);
      const float d2 = d * sc;
      const float m2 = dmin * m;
      const __m256i q = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(x[b].qs + 16 * j));
      StoreAffine32(_mm256_and_si256(q, low4), _mm256_set1_ps(d1),
                    _mm256_set1_ps(m1), dst);
      StoreAffine32(_mm256_and_si256(_mm256_srli_epi16(q, 4), low4),
                    _mm256_set1_ps(d2), _mm256_set1_ps(m2), dst + 32);
    }
  }
}

void DequantizeQ6_KAvx2(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(src);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i two_bits = _mm256_set1_epi8(0x03);
  const __m256i bias = _mm256_set1_epi8(32);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float d = Fp16ToFloat(x[b].d);
    for (int half = 0; half < 2; ++half, dst += 128) {
      const uint8_t* ql = x[b].ql + 64 * half;
      const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i qh = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(x[b].qh + 32 * half));
      const __m256i lows[4] = {
          _mm256_and_si256(ql0, low4), _mm256_and_si256(ql1, low4),
          _mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
          _mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4)};
      for (int g = 0; g < 4; ++g) {
        const __m256i high = _mm256_slli_epi16(
            _mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), two_bits), 4);
        const __m256i q = _mm256_sub_epi8(_mm256_or_si256(lows[g], high), bias);
        const int8_t* sc = x[b].scales + 8 * half + 2 * g;
        // Elements 0..15 of the group use sc[0], 16..31 sc[1].
        const __m256 d_lo = _mm256_set1_ps(d * sc[0]);
        const __m256 d_hi = _mm256_set1_ps(d * sc[1]);
        const __m128i lo = _mm256_castsi256_si128(q);
        const __m128i hi = _mm256_extracti128_si256(q, 1);
        float* out = dst + 32 * g;
        _mm256_storeu_ps(out + 0, _mm256_mul_ps(d_lo, Lane8ToPs(lo)));
        _mm256_storeu_ps(out + 8, _mm256_mul_ps(d_lo, Lane8ToPs(_mm_srli_si128(lo, 8))));
        _mm256_storeu_ps(out + 16, _mm256_mul_ps(d_hi, Lane8ToPs(hi)));
        _mm256_storeu_ps(out + 24, _mm256_mul_ps(d_hi, Lane8ToPs(_mm_srli_si128(hi, 8))));
      }
    }
  }
}

}  // namespace dequant_internal
}  // namespace minfer

#pragma GCC pop_options
