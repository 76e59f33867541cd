// AVX2 + FMA + F16C kernels: the integer dots use vpmaddubsw/vpmaddwd.
// Code after the target pragma only runs when the CPU has these extensions
// (dispatch in vec_dot.cc); nothing here is reachable otherwise.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "engine/quant/blocks.h"
#include "engine/quant/fp16.h"
#include "engine/quant/vec_dot_internal.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace minfer {
namespace vec_dot_internal {
namespace avx2 {

#define MINFER_VNNI 0
#define MINFER_TILE_COLS 2
#include "engine/quant/vec_dot_x86.inc"
#undef MINFER_TILE_COLS
#undef MINFER_VNNI

// ------------------------------------------------------------ float dots

// ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)), the float dots' reduction.
inline float Hsum(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }

struct F16Elem {
  uint16_t bits;
};
struct BF16Elem {
  uint16_t bits;
};

template <class E>
inline __m256 Load8E(const E* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (std::is_same_v<E, F16Elem>) {
    return _mm256_cvtph_ps(v);
  } else {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
  }
}

template <class E>
inline float LoadOne(const E* p) {
  if constexpr (std::is_same_v<E, float>) {
    return *p;
  } else if constexpr (std::is_same_v<E, F16Elem>) {
    return _cvtsh_ss(p->bits);
  } else {
    return Bf16ToFloat(p->bits);
  }
}

template <class E>
inline __m256 LoadW(const E* p) {
  if constexpr (std::is_same_v<E, float>) {
    return Load8(p);
  } else {
    return Load8E(p);
  }
}

template <class E>
float VecDotFloat(const void* w_row, const float* x, int64_t n) {
  const E* w = static_cast<const E*>(w_row);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm256_fmadd_ps(LoadW(w + i), _mm256_loadu_ps(x + i), acc0);
    acc1 = _mm256_fmadd_ps(LoadW(w + i + 8), _mm256_loadu_ps(x + i + 8), acc1);
    acc2 = _mm256_fmadd_ps(LoadW(w + i + 16), _mm256_loadu_ps(x + i + 16), acc2);
    acc3 = _mm256_fmadd_ps(LoadW(w + i + 24), _mm256_loadu_ps(x + i + 24), acc3);
  }
  for (; i + 8 <= n; i += 8) {
    acc0 = _mm256_fmadd_ps(LoadW(w + i), _mm256_loadu_ps(x + i), acc0);
  }
  const float h = Hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  float tail = 0.0f;
  for (; i < n; ++i) tail = std::fma(LoadOne(w + i), x[i], tail);
  return h + tail;
}

template <VecDotF32Fn kVecDot>
void MatDotFloatByPairs(const void* w, int64_t w_stride, const float* x,
                        int64_t x_stride, float* out, int64_t out_stride,
                        int nrows, int ncols, int64_t n) {
  for (int c = 0; c < ncols; ++c) {
    for (int r = 0; r < nrows; ++r) {
      out[c * out_stride + r] =
          kVecDot(static_cast<const uint8_t*>(w) + r * w_stride, x + c * x_stride, n);
    }
  }
}

template <VecDotF32Fn kVecDot>
constexpr F32Kernels kFloatKernels = {kVecDot, MatDotFloatByPairs<kVecDot>};

// ---------------------------------------------------- activation quantize

void QuantizeRowQ8A(const float* x, BlockQ8A* out, int64_t n) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  // Undoes the 128-bit lane interleaving of the two pack instructions.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    __m256 v[4];
    for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(x + 8 * k);
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], abs_mask),
                                           _mm256_and_ps(v[1], abs_mask)),
                             _mm256_max_ps(_mm256_and_ps(v[2], abs_mask),
                                           _mm256_and_ps(v[3], abs_mask)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    float d = _mm_cvtss_f32(m4) / 127.0f;
    if (!(d >= kQ8AMinScale)) d = 0.0f;
    const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    __m256i q[4];
    for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], id));
    const __m256i sum4 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]),
                                          _mm256_add_epi32(q[2], q[3]));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(sum4), _mm256_extracti128_si256(sum4, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    const __m256i p01 = _mm256_packs_epi32(q[0], q[1]);
    const __m256i p23 = _mm256_packs_epi32(q[2], q[3]);
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].qs), bytes);
    out[b].d = d;
    out[b].s = d * static_cast<float>(_mm_cvtsi128_si32(s));
  }
}

}  // namespace avx2

const Q8AKernels* Q8AKernelsAvx2(GgmlType wtype) { return avx2::LookupQ8A(wtype); }

const F32Kernels* F32KernelsAvx2(GgmlType wtype) {
  switch (wtype) {
    case GgmlType::kF32: return &avx2::kFloatKernels<avx2::VecDotFloat<float>>;
    case GgmlType::kF16: return &avx2::kFloatKernels<avx2::VecDotFloat<avx2::F16Elem>>;
    case GgmlType::kBF16: return &avx2::kFloatKernels<avx2::VecDotFloat<avx2::BF16Elem>>;
    default: return nullptr;
  }
}

void QuantizeRowQ8AAvx2(const float* x, BlockQ8A* out, int64_t n) {
  avx2::QuantizeRowQ8A(x, out, n);
}

}  // namespace vec_dot_internal
}  // namespace minfer

#pragma GCC pop_options
