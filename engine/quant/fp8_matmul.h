// The FP8 (e4m3) prefill matmul: its exact definition, the CPU reference the
// CUDA kernel is tested against, and its stated error bound (issue 32).
//
// Values. A row of k floats is quantized with one f32 scale (per weight row,
// converted at load from the dequantized Q8_0 / F16 / BF16 row; per token
// for activations): amax = max_i |x_i|; amax == 0 gives scale 0 and every
// code 0; otherwise scale = amax / 448.0f and inv = 1.0f / scale (both f32
// divisions, rounded to nearest) and code_i = FloatToE4M3(x_i * inv) (the f32
// product rounded to nearest, then e4m3 round-to-nearest-even, saturating
// at +-448: engine/quant/fp8.h). The value a code stands for is
// E4M3ToFloat(code) * scale.
//
// The matmul. For weight rows w (w.rows x k) and activation rows x
// (x.rows x k), output y is token-major, the engine's layout: y[t * w.rows +
// r] for token t, weight row r, computed in f32 in exactly this order:
//     d = DotFp8(w.codes row r, x.codes row t, k)      (the sum below)
//     s = w.scales[r] * x.scales[t]                    (one f32 multiply)
//     y = s * d                                        (one f32 multiply)
// DotFp8 = sum_i E4M3ToFloat(a_i) * E4M3ToFloat(b_i) in f32, i = 0, 1, ...,
// k - 1, each partial sum rounded to nearest. Each product is exact in f32
// (two significands of at most 4 bits make at most 8; magnitudes lie in
// [2^-18, 448^2], inside f32's normal range), so only the additions round. A
// GPU kernel that sums in another order (tensor-core tiles, split k) or with
// a narrower accumulator does not match bit for bit; it meets the same bound
// with its own accumulator precision p (below).
//
// Preconditions (not checked): input values are finite and NaN-free, and a
// nonzero row has amax >= 2^-100, so that scale is a normal f32 and 1 / scale
// is finite (smaller rows would get infinite inv and NaN codes; no model's
// rows or activations are that small). Results are assumed to stay in f32's
// normal range (no overflow of the products of scales, no underflow of y).
//
// Error bound (Fp8DotErrorBound). For one output, w and x the original f32
// rows (length k), sw and sx their scales, w'_i = E4M3ToFloat(cw_i) * sw and
// x'_i likewise (as real numbers), u = 2^-24:
//   Quantization of one value. Let v = fl(w_i * inv). With inv = (1/sw)(1+d1)
//   and the product's rounding (1+d2), |d1|, |d2| <= u, v = (w_i/sw)(1+d1)(1+d2).
//   The e4m3 rounding of v errs by at most half a step: 2^-4 |v| in the normal
//   range (a 3-bit mantissa: half of 2^(e-3) for v in [2^e, 2^(e+1))), at
//   most 2^-10 in the subnormal range (half of the step 2^-9); saturation
//   only clips the few ulps by which v can exceed 448. So
//     |w'_i - w_i| <= sw |code - v| + |sw v - w_i|
//                  <= max(2^-4 |w_i| (1 + u)^2, 2^-10 sw) + (2u + u^2) |w_i|
//                  <= max(2^-4 |w_i|, 2^-10 sw) + 2^-21 |w_i|  =: ew_i
//   (the f32 roundings of inv and w_i * inv, about 2.2u |w_i| in all, folded
//   into the 2^-21 = 8u term). ex_i likewise with sx.
//   Products: |w_i x_i - w'_i x'_i| <= |w_i - w'_i| |x_i| + |w'_i| |x_i - x'_i|
//                                    <= ew_i |x_i| + (|w_i| + ew_i) ex_i.
//   Accumulation: any summation order of k exact products with unit roundoff
//   2^-p errs by at most g(k) * sum_i |w'_i x'_i| with
//   g(k) = (k-1) 2^-p / (1 - (k-1) 2^-p) (Higham, Accuracy and Stability of
//   Numerical Algorithms, 2nd ed., eq. 4.4: any summation tree's depth is at
//   most k - 1); and sum_i |w'_i x'_i| <= A := sum_i (|w_i| + ew_i)(|x_i| + ex_i).
//   p = 24 for an f32 accumulator rounding to nearest (the CPU); one that
//   truncates to q significand bits has p = q - 1.
//   Scales: the two f32 multiplies by sw and sx add at most (2u + u^2) of the
//   result's magnitude, <= 3u (A (1 + g(k))).
//   Together, |y - sum_i w_i x_i| <= B with
//     B = [ sum_i (ew_i |x_i| + (|w_i| + ew_i) ex_i) + g(k) A + 3u (1 + g(k)) A ]
//         * (1 + 2^-40)
//   (the last factor covers the rounding of computing B in double). B is
//   infinite when (k - 1) 2^-p >= 1 (no bound). For random data the observed
//   error is far below B (errors of independent roundings partly cancel, B
//   adds them all); data placed at rounding midpoints of one sign reaches
//   most of it (fp8_matmul_test.cc states the measured ratios).
#ifndef MINFER_ENGINE_QUANT_FP8_MATMUL_H_
#define MINFER_ENGINE_QUANT_FP8_MATMUL_H_

#include <cstdint>
#include <vector>

namespace minfer {

// rows x k e4m3 codes (row-major) and one f32 scale per row.
struct Fp8Rows {
  int64_t rows = 0, k = 0;
  std::vector<uint8_t> codes;  // rows * k
  std::vector<float> scales;   // rows
};

// One row of k floats into k codes and its scale (the header's rule).
void QuantizeRowFp8(const float* x, int64_t k, uint8_t* codes, float* scale);

// rows x k floats (row-major), each row quantized with its own scale: weight
// rows at load (dequantized to f32 first) and activations per token.
Fp8Rows QuantizeRowsFp8(const float* x, int64_t rows, int64_t k);

// sum_i E4M3ToFloat(a_i) * E4M3ToFloat(b_i) in f32, in index order.
float DotFp8(const uint8_t* a, const uint8_t* b, int64_t k);

// y[t * w.rows + r] = (w.scales[r] * x.scales[t]) * DotFp8(w row r, x row t)
// for every token t < x.rows and weight row r < w.rows. w.k must equal x.k.
void MatMulFp8Reference(const Fp8Rows& w, const Fp8Rows& x, float* y);

// The same for weight rows [r_begin, r_end) only (the other outputs are not
// written): the unit a thread pool splits the matmul into. Same values.
void MatMulFp8ReferenceRows(const Fp8Rows& w, const Fp8Rows& x, int64_t r_begin, int64_t r_end,
                            float* y);

// The bound B of the header for one output: w and x the original rows of k
// floats, w_scale and x_scale the scales QuantizeRowFp8 gave them, p the
// accumulator's precision (24 for the CPU's f32; a GPU test passes its own).
double Fp8DotErrorBound(const float* w, const float* x, int64_t k, float w_scale, float x_scale,
                        int accumulator_mantissa_bits);

}  // namespace minfer

#endif  // MINFER_ENGINE_QUANT_FP8_MATMUL_H_
