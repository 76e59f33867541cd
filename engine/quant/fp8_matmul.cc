#include "engine/quant/fp8_matmul.h"

#include <cmath>
#include <limits>

#include "engine/quant/fp8.h"

namespace minfer {

void QuantizeRowFp8(const float* x, int64_t k, uint8_t* codes, float* scale) {
  float amax = 0.0f;
  for (int64_t i = 0; i < k; ++i) {
    const float a = std::fabs(x[i]);
    amax = a > amax ? a : amax;
  }
  if (amax == 0.0f) {
    // 0 * (1 / 0) would be NaN: an all-zero row is scale 0, codes 0.
    *scale = 0.0f;
    for (int64_t i = 0; i < k; ++i) codes[i] = 0;
    return;
  }
  // Both divisions stay f32 (no reciprocal approximation, no double): the
  // GPU kernel repeats them and must get the same scale and codes.
  const float s = amax / 448.0f;
  const float inv = 1.0f / s;
  *scale = s;
  for (int64_t i = 0; i < k; ++i) codes[i] = FloatToE4M3(x[i] * inv);
}

Fp8Rows QuantizeRowsFp8(const float* x, int64_t rows, int64_t k) {
  Fp8Rows q;
  q.rows = rows;
  q.k = k;
  q.codes.resize(static_cast<size_t>(rows * k));
  q.scales.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    QuantizeRowFp8(x + r * k, k, q.codes.data() + r * k, &q.scales[r]);
  }
  return q;
}

float DotFp8(const uint8_t* a, const uint8_t* b, int64_t k) {
  float acc = 0.0f;
  for (int64_t i = 0; i < k; ++i) acc += E4M3ToFloat(a[i]) * E4M3ToFloat(b[i]);
  return acc;
}

void MatMulFp8ReferenceRows(const Fp8Rows& w, const Fp8Rows& x, int64_t r_begin, int64_t r_end,
                            float* y) {
  const int64_t k = w.k;
  // Codes decoded once (E4M3ToFloat is exact, so the dots below are DotFp8's
  // operations on the same floats, in the same order: the same bits).
  std::vector<float> xf(static_cast<size_t>(x.rows * k));
  for (size_t i = 0; i < xf.size(); ++i) xf[i] = E4M3ToFloat(x.codes[i]);
  std::vector<float> wf(static_cast<size_t>(k));
  for (int64_t r = r_begin; r < r_end; ++r) {
    const uint8_t* wc = w.codes.data() + r * k;
    for (int64_t i = 0; i < k; ++i) wf[i] = E4M3ToFloat(wc[i]);
    for (int64_t t = 0; t < x.rows; ++t) {
      const float* xr = xf.data() + t * k;
      float acc = 0.0f;
      for (int64_t i = 0; i < k; ++i) acc += wf[i] * xr[i];
      const float s = w.scales[r] * x.scales[t];
      y[t * w.rows + r] = s * acc;
    }
  }
}

void MatMulFp8Reference(const Fp8Rows& w, const Fp8Rows& x, float* y) {
  MatMulFp8ReferenceRows(w, x, 0, w.rows, y);
}

double Fp8DotErrorBound(const float* w, const float* x, int64_t k, float w_scale, float x_scale,
                        int accumulator_mantissa_bits) {
  const double u = std::ldexp(1.0, -24);
  const double unit = std::ldexp(1.0, -accumulator_mantissa_bits);
  const double km1 = static_cast<double>(k > 0 ? k - 1 : 0) * unit;
  if (km1 >= 1.0) return std::numeric_limits<double>::infinity();
  const double g = km1 / (1.0 - km1);
  const double rel = std::ldexp(1.0, -4), slack = std::ldexp(1.0, -21);
  const double wabs_floor = std::ldexp(static_cast<double>(w_scale), -10);
  const double xabs_floor = std::ldexp(static_cast<double>(x_scale), -10);
  double quant = 0.0, a = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    const double wi = std::fabs(static_cast<double>(w[i]));
    const double xi = std::fabs(static_cast<double>(x[i]));
    const double ew = std::fmax(rel * wi, wabs_floor) + slack * wi;
    const double ex = std::fmax(rel * xi, xabs_floor) + slack * xi;
    quant += ew * xi + (wi + ew) * ex;
    a += (wi + ew) * (xi + ex);
  }
  return (quant + g * a + 3.0 * u * (1.0 + g) * a) * (1.0 + std::ldexp(1.0, -40));
}

}  // namespace minfer
