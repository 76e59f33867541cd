// Inline AVX2/FMA helpers shared by the CPU backend's SIMD kernels.
//
// Only include this header inside a region compiled for AVX2 + FMA + F16C
// (`#pragma GCC target("avx2,fma,f16c")` before the include, as
// vec_math_avx2.cc and attention_avx2.cc do), and only call what it defines
// after checking GetCpuFeatures().HasAvx2Set(): the binary itself is built for
// baseline x86-64.
#ifndef MINFER_ENGINE_CPU_SIMD_AVX2_H_
#define MINFER_ENGINE_CPU_SIMD_AVX2_H_

#include <immintrin.h>

#include <cstdint>

namespace minfer::cpu::avx2 {

// e^x for 8 floats; error at most 2 ulp against the exact value, including
// results in the subnormal range (vec_math_test checks this over 74 million
// inputs spread across the whole float range; the largest error it finds is
// 1.04 ulp, against 0.50 for glibc's expf). exp(-inf) = 0, exp(+inf) = +inf, NaN stays
// NaN, x <= -104 gives 0, x >= 88.73 gives +inf (both as correctly rounded).
//
// Why this form: x = n ln2 + r with |r| <= ln2/2 (Cody-Waite split of ln2,
// exact for every |n| <= 150), e^r by its degree-7 Taylor polynomial (the
// truncation error, r^8/8! < 5.1e-9, is well under half an ulp, so the float
// evaluation's rounding dominates), and 2^n applied as two exact power-of-two
// factors 2^(n/2) * 2^(n - n/2): each stays a normal float for every n in
// [-150, 128], so results that overflow or land in the subnormal range are
// rounded once, by the last multiply, like a correctly rounded exp would.
inline __m256 Exp8(__m256 x) {
  const __m256 xc =
      _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-104.0f)), _mm256_set1_ps(89.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // ln2 = 0.693359375 (9 significant bits, so n * hi is exact) - 2.12194440e-4.
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  // 1 + (r + r^2 p): adding the 1 last keeps the small terms' bits.
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
  p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  const __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  // The clamps above turned NaN into -104; give it back.
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

// silu(g) * u = g / (1 + e^-g) * u, lane-wise.
inline __m256 SwiGlu8(__m256 g, __m256 u) {
  const __m256 e = Exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

inline float HorizontalMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// Loads n < 8 floats into the low lanes (the rest are `fill`).
inline __m256 LoadPartial(const float* p, int n, float fill) {
  alignas(32) float tmp[8];
  for (int i = 0; i < 8; ++i) tmp[i] = i < n ? p[i] : fill;
  return _mm256_load_ps(tmp);
}

inline void StorePartial(float* p, int n, __m256 v) {
  alignas(32) float tmp[8];
  _mm256_store_ps(tmp, v);
  for (int i = 0; i < n; ++i) p[i] = tmp[i];
}

}  // namespace minfer::cpu::avx2

#endif  // MINFER_ENGINE_CPU_SIMD_AVX2_H_
