// AVX2/F16C row converters. Everything after the target pragma may use
// AVX2/FMA/F16C; it is only called when the CPU has them (see fp16.cc).
#include <immintrin.h>

#include <cstdint>

#include "engine/quant/fp16.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace minfer {
namespace fp16_internal {

void Fp16ToFloatRowAvx2(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = Fp16ToFloat(src[i]);
}

void FloatToFp16RowAvx2(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = FloatToFp16(src[i]);
}

void Bf16ToFloatRowAvx2(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16);
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(w));
  }
  for (; i < n; ++i) dst[i] = Bf16ToFloat(src[i]);
}

// Same integer recipe as FloatToBf16, eight lanes at a time.
void FloatToBf16RowAvx2(const float* src, uint16_t* dst, int64_t n) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i inf = _mm256_set1_epi32(0x7F800000);
  const __m256i bias = _mm256_set1_epi32(0x7FFF);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i quiet = _mm256_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i out[2];
    for (int k = 0; k < 2; ++k) {
      const __m256i x = _mm256_castps_si256(_mm256_loadu_ps(src + i + 8 * k));
      const __m256i is_nan =
          _mm256_cmpgt_epi32(_mm256_and_si256(x, abs_mask), inf);
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
      const __m256i rounded = _mm256_srli_epi32(
          _mm256_add_epi32(x, _mm256_add_epi32(bias, lsb)), 16);
      const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(x, 16), quiet);
      out[k] = _mm256_blendv_epi8(rounded, nan, is_nan);
    }
    // Values are < 2^16, so the unsigned saturating pack is exact; it
    // interleaves 128-bit lanes, which the permute undoes.
    const __m256i packed = _mm256_permute4x64_epi64(
        _mm256_packus_epi32(out[0], out[1]), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), packed);
  }
  for (; i < n; ++i) dst[i] = FloatToBf16(src[i]);
}

}  // namespace fp16_internal
}  // namespace minfer

#pragma GCC pop_options
