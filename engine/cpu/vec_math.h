// Vectorized float math for the CPU backend: e^x and the SwiGLU activation
// over rows.
//
// Each function computes every element with the same formula whatever its
// index or the row length (the SIMD path runs a row's tail through the same
// 8-lane code), so a value never depends on how a tensor was split among
// threads or whether a token was evaluated alone (decode) or in a batch
// (prefill). The AVX2 exp is within 2 ulp of the correctly rounded result
// over the whole float range (see simd_avx2.h); the scalar fallback uses
// std::exp. Thread-safe, no allocation; x and y may alias exactly.
#ifndef MINFER_ENGINE_CPU_VEC_MATH_H_
#define MINFER_ENGINE_CPU_VEC_MATH_H_

#include <cstdint>

namespace minfer::cpu {

enum class MathImpl {
  kAuto,    // AVX2 when the CPU has it (and MINFER_FORCE_SCALAR is unset)
  kScalar,  // std::exp, one element at a time
  kAvx2,    // requires HasAvx2Math()
};

// Whether the AVX2 implementations can run here.
bool HasAvx2Math();

// y[i] = e^x[i].
void ExpF32(const float* x, float* y, int64_t n, MathImpl impl = MathImpl::kAuto);

// y[i] = g[i] / (1 + e^-g[i]) * u[i].
void SwiGluF32Row(const float* g, const float* u, float* y, int64_t n,
                  MathImpl impl = MathImpl::kAuto);

// y[i] = a[i] + b[i] and y[i] = a[i] * b[i] (exact either way; the SIMD
// path is only faster).
void AddF32Row(const float* a, const float* b, float* y, int64_t n);
void MulF32Row(const float* a, const float* b, float* y, int64_t n);

// y = x / sqrt(mean(x^2) + eps) * w (w may be null): the sum of squares in
// double, the scaling in float as (x * inv) * w.
void RmsNormF32Row(const float* x, const float* w, float eps, float* y, int64_t n,
                   MathImpl impl = MathImpl::kAuto);

}  // namespace minfer::cpu

#endif  // MINFER_ENGINE_CPU_VEC_MATH_H_
