// Dot products for the CPU backend's MatMul: quantized weight rows against
// int8-quantized activations (BlockQ8A), and float weight rows (F32, F16,
// BF16) against f32 activations.
//
// Usage (y[t][o] = sum_i W[o][i] * X[t][i]):
//   1. Quantize each activation row once: QuantizeRowQ8A(x_t, a_t, n).
//   2. Fetch the kernels once, outside the hot loop:
//        const Q8AKernels* k = GetQ8AKernels(w_type);   // nullptr: unsupported
//   3. Decode (one token):  k->mat_dot(W, row_bytes, a, 0, y, 0, rows, 1, n)
//      or per row           y[o] = k->vec_dot(W + o * row_bytes, a, n);
//      Prefill (T tokens):  k->mat_dot(W + r0 * row_bytes, row_bytes,
//                                      a, n / 32, y + r0, out_dim,
//                                      rows, T, n);
//      mat_dot walks the given rows in tiles of 4 and, per row tile, all the
//      columns (activation rows) in tiles of up to 4, so give it a slice of
//      rows small enough that 4 rows of weights stay in L1 (any slice works)
//      and as many columns as the activations' L2 footprint allows
//      (n / 32 * 40 bytes each).
//
// Numerics (the contract every ISA implements, which makes them
// bit-identical to each other, and mat_dot bit-identical to vec_dot for
// every (row, column) pair, so results never depend on the batch shape):
//   Within each 32-element activation block the weight codes (with their
//   integer offset: q-8 for Q4_0, q-16 for Q5_0, q-32 for Q6_K) are
//   multiplied by the activation codes in exact integer arithmetic, giving
//   8 partial sums L[k] over elements 4k..4k+3. Eight float lanes then
//   accumulate, block after block, acc[k] = fma(float(L[k]), f, acc[k]) with
//   f = d_w * d_a (Q4_K/Q5_K: (d * sc_j) * d_a; Q6_K: (d * sc_i) * d_a with
//   the scale of elements 0-15 in lanes 0-3 and of 16-31 in lanes 4-7).
//   Mins use the activation sums s: Q4_1/Q5_1 add fma(m, s) into lane 0
//   (other lanes get fma(0, s)) after each block; Q4_K/Q5_K subtract
//   (dmin * m_j) * s_j from lane j after each super-block. The result is
//   ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)).
//   The error against the exact dot of the dequantized weights with the
//   dequantized activations (qs * d) is that of the float folding only:
//   a few ulp of the sum of |terms| (see vec_dot_test.cc for the bound).
//
// Float dots: four 8-lane accumulators over 32-element chunks, then 8-element
// chunks into the first, lanes reduced as above after summing
// (acc0+acc1)+(acc2+acc3), and the last n % 8 elements fma'd into a scalar
// added last. Identical on every ISA.
//
// All functions are thread-safe and allocation-free. Pointers need no
// particular alignment. Weight rows are raw GGUF bytes.
#ifndef MINFER_ENGINE_QUANT_VEC_DOT_H_
#define MINFER_ENGINE_QUANT_VEC_DOT_H_

#include <cstdint>

#include "engine/quant/blocks.h"
#include "engine/quant/cpu_isa.h"
#include "engine/quant/ggml_types.h"

namespace minfer {

// Quantizes n floats (n % 32 == 0, finite) into n / 32 blocks:
// d = absmax / 127, qs = round-half-to-even(x * (1 / d)) (0 when d == 0),
// s = d * sum(qs). Identical results on every ISA.
void QuantizeRowQ8A(const float* x, BlockQ8A* out, int64_t n);
void QuantizeRowQ8A(CpuIsa isa, const float* x, BlockQ8A* out, int64_t n);

// Dot of one weight row (n elements, n a multiple of the weight type's block
// size) with n / 32 activation blocks.
using VecDotQ8AFn = float (*)(const void* w_row, const BlockQ8A* a, int64_t n);

// For r < nrows, c < ncols:
//   out[c * out_stride + r] = vec_dot(w + r * w_stride, a + c * a_stride, n)
// w_stride in bytes, a_stride in blocks, out_stride in floats.
using MatDotQ8AFn = void (*)(const void* w, int64_t w_stride, const BlockQ8A* a,
                             int64_t a_stride, float* out, int64_t out_stride,
                             int nrows, int ncols, int64_t n);

struct Q8AKernels {
  VecDotQ8AFn vec_dot;
  MatDotQ8AFn mat_dot;
};

// Kernels for weight type `wtype` (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K,
// Q6_K); nullptr for other types or an isa the CPU does not support. The
// pointer is to static storage.
const Q8AKernels* GetQ8AKernels(GgmlType wtype, CpuIsa isa = BestCpuIsa());

// Convenience wrapper (looks the kernel up on each call; hoist
// GetQ8AKernels out of loops instead). wtype must be supported.
float VecDotQ8A(GgmlType wtype, const void* w_row, const BlockQ8A* a, int64_t n);

// Float weights (F32, F16, BF16; any n >= 0) against f32 activations.
using VecDotF32Fn = float (*)(const void* w_row, const float* x, int64_t n);
// out[c * out_stride + r] = vec_dot(w + r * w_stride, x + c * x_stride, n);
// w_stride in bytes, x_stride and out_stride in floats.
using MatDotF32Fn = void (*)(const void* w, int64_t w_stride, const float* x,
                             int64_t x_stride, float* out, int64_t out_stride,
                             int nrows, int ncols, int64_t n);
struct F32Kernels {
  VecDotF32Fn vec_dot;
  MatDotF32Fn mat_dot;
};
const F32Kernels* GetF32Kernels(GgmlType wtype, CpuIsa isa = BestCpuIsa());
float VecDotF32(GgmlType wtype, const void* w_row, const float* x, int64_t n);

}  // namespace minfer

#endif  // MINFER_ENGINE_QUANT_VEC_DOT_H_
