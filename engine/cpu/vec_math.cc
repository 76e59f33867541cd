#include "engine/cpu/vec_math.h"

#include <cmath>

#include "engine/base/cpu_features.h"

namespace minfer::cpu {

// Defined in vec_math_avx2.cc (compiled for AVX2 + FMA).
void ExpF32Avx2(const float* x, float* y, int64_t n);
void SwiGluF32RowAvx2(const float* g, const float* u, float* y, int64_t n);
void AddF32RowAvx2(const float* a, const float* b, float* y, int64_t n);
void MulF32RowAvx2(const float* a, const float* b, float* y, int64_t n);
double SumSquaresAvx2(const float* x, int64_t n);
void ScaleRowAvx2(const float* x, float s, const float* w, float* y, int64_t n);

bool HasAvx2Math() { return GetCpuFeatures().HasAvx2Set(); }

namespace {

bool UseAvx2(MathImpl impl) {
  static const bool has = HasAvx2Math();
  return impl == MathImpl::kAvx2 || (impl == MathImpl::kAuto && has);
}

}  // namespace

void ExpF32(const float* x, float* y, int64_t n, MathImpl impl) {
  if (UseAvx2(impl)) return ExpF32Avx2(x, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
}

void SwiGluF32Row(const float* g, const float* u, float* y, int64_t n, MathImpl impl) {
  if (UseAvx2(impl)) return SwiGluF32RowAvx2(g, u, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void AddF32Row(const float* a, const float* b, float* y, int64_t n) {
  if (UseAvx2(MathImpl::kAuto)) return AddF32RowAvx2(a, b, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void MulF32Row(const float* a, const float* b, float* y, int64_t n) {
  if (UseAvx2(MathImpl::kAuto)) return MulF32RowAvx2(a, b, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
}

void RmsNormF32Row(const float* x, const float* w, float eps, float* y, int64_t n,
                   MathImpl impl) {
  const bool simd = UseAvx2(impl);
  double ss = 0;
  if (simd) {
    ss = SumSquaresAvx2(x, n);
  } else {
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  }
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / n + eps));
  if (simd) return ScaleRowAvx2(x, inv, w, y, n);
  if (w != nullptr) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv;
  }
}

}  // namespace minfer::cpu
