// AVX2 bodies of vec_math.h; only called when the CPU has AVX2 + FMA + F16C.
#include <cstdint>

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

#include "engine/cpu/simd_avx2.h"

namespace minfer::cpu {

void ExpF32Avx2(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, avx2::Exp8(_mm256_loadu_ps(x + i)));
  if (i < n) {
    const int rest = static_cast<int>(n - i);
    avx2::StorePartial(y + i, rest, avx2::Exp8(avx2::LoadPartial(x + i, rest, 0.0f)));
  }
}

void SwiGluF32RowAvx2(const float* g, const float* u, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, avx2::SwiGlu8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
  }
  if (i < n) {
    const int rest = static_cast<int>(n - i);
    avx2::StorePartial(y + i, rest,
                       avx2::SwiGlu8(avx2::LoadPartial(g + i, rest, 0.0f),
                                     avx2::LoadPartial(u + i, rest, 0.0f)));
  }
}

void AddF32RowAvx2(const float* a, const float* b, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  }
  for (; i < n; ++i) y[i] = a[i] + b[i];
}

void MulF32RowAvx2(const float* a, const float* b, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  }
  for (; i < n; ++i) y[i] = a[i] * b[i];
}

// Squares are exact in double; four independent lanes x 2 accumulators.
double SumSquaresAvx2(const float* x, int64_t n) {
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256d lo = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
    const __m256d hi = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
    acc0 = _mm256_fmadd_pd(lo, lo, acc0);
    acc1 = _mm256_fmadd_pd(hi, hi, acc1);
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(acc0, acc1));
  double ss = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  return ss;
}

// y = (x * s) * w, or x * s without w: the scalar path's roundings.
void ScaleRowAvx2(const float* x, float s, const float* w, float* y, int64_t n) {
  const __m256 sv = _mm256_set1_ps(s);
  int64_t i = 0;
  if (w != nullptr) {
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), sv),
                                            _mm256_loadu_ps(w + i)));
    }
    for (; i < n; ++i) y[i] = x[i] * s * w[i];
  } else {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), sv));
    for (; i < n; ++i) y[i] = x[i] * s;
  }
}

}  // namespace minfer::cpu

#pragma GCC pop_options
