// Dot products for the CPU backend's MatMul: quantized weight rows against
// int8-quantized activations (BlockQ8A), and float weight rows (F32, F16,
// BF16) against f32 activations.
//
// Usage (y[t][o] = sum_i W[o][i] * X[t][i]):
//   1. Quantize each activation row once: QuantizeRowQ8A(x_t, a_t, n).
//   2. Fetch the kernels once, outside the hot loop:
//        const Q8AKernels* k = GetQ8AKernels(w_type);   // nullptr: unsupported
//   3. Give each thread a slice of output rows and all the columns:
//        k->mat_dot(W + r0 * row_bytes, row_bytes,      // rows [r0, r0 + rows)
//                   a, n / 32,                          // T activation rows
//                   y + r0, out_dim,                    // y[t * out_dim + o]
//                   rows, T, n);
//      Decode is the same call with T = 1 (a_stride is then unused).
//
// How mat_dot works, and what makes it fast:
//   * Rows are processed in groups of 8 (the 8 float lanes hold 8 rows); a
//     last partial group costs as much as a full one, so slices whose size
//     is a multiple of 8 waste nothing (every Qwen2 dimension is one).
//   * With 1 or 2 columns it reads the 8 rows once, in order, and reduces
//     each row's lanes with a horizontal-add tree: the decode path, bound
//     by memory bandwidth.
//   * With 3 or more columns it first transposes chunks of 32 blocks of the
//     8 rows into an L1 scratch (rows into lanes) and then streams every
//     column through it, so the unpacking is paid once per 8 rows and
//     chunk, not once per column: the prefill path. Columns are taken 64 at
//     a time; pass as many as the activations' L2 footprint allows
//     (n / 32 * 40 bytes each).
//   * vec_dot (one pair at a time, no 8-row grouping) is several times
//     slower per byte: for tests and odd cases, not for hot loops.
//   mat_dot uses about 24 KiB of stack and never allocates.
//
// Numerics (the contract every ISA and every path implements, which makes
// them bit-identical to each other, and mat_dot bit-identical to vec_dot
// for every (row, column) pair, so results never depend on the batch shape
// or on the CPU): for each (row, column) pair one float accumulator
// acc = 0, then for each 32-element activation block b, in order,
//   Q4_0, Q5_0, Q8_0: acc = fma(float(I_b), d_w * d_a, acc)
//   Q4_1, Q5_1:       acc = fma(float(I_b), d_w * d_a, acc);
//                     acc = fma(m, s_a, acc)
//   Q4_K, Q5_K:       acc = fma(float(I_b), (d * sc_j) * d_a, acc);
//                     acc = fma(-(dmin * m_j), s_a, acc)     (j = b mod 8)
//   Q6_K:             acc = fma(float(I_lo), (d * sc_2g) * d_a, acc);
//                     acc = fma(float(I_hi), (d * sc_2g+1) * d_a, acc)
// where I is the exact integer dot of the weight codes (with their offsets:
// q-8 for Q4_0, q-16 for Q5_0, q-32 for Q6_K) and the activation codes over
// the block (Q6_K: over its first and second 16 elements), every product
// of floats is rounded to float, and the result is acc. The error against
// the exact dot of the dequantized weights with the dequantized activations
// (qs * d) is therefore that of the float folding alone: at most about
// (n/16 + 8) * 2^-24 of the sum of |terms| (vec_dot_test.cc checks this
// bound), orders of magnitude below the quantization error.
//
// Float dots: four 8-lane accumulators over 32-element chunks, then 8-element
// chunks into the first, lanes reduced as ((a0+a4)+(a2+a6)) + ((a1+a5)+
// (a3+a7)) after summing (acc0+acc1)+(acc2+acc3), and the last n % 8
// elements fma'd into a scalar added last. Identical on every ISA.
//
// All functions are thread-safe. Pointers need no particular alignment.
// Weight rows are raw GGUF bytes.
#ifndef MINFER_ENGINE_QUANT_VEC_DOT_H_
#define MINFER_ENGINE_QUANT_VEC_DOT_H_

#include <cstdint>

#include "engine/quant/blocks.h"
#include "engine/quant/cpu_isa.h"
#include "engine/quant/ggml_types.h"

namespace minfer {

// Quantizes n floats (n % 32 == 0, finite) into n / 32 blocks:
// d = absmax / 127, qs = round-half-to-even(x * (1 / d)), s = d * sum(qs).
// A block whose absmax / 127 is below FLT_MIN (all |x| < ~1.5e-36) becomes
// d = s = 0, qs = 0, so 1 / d never overflows. Identical results on every
// ISA.
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
// (mat_dot here is a plain loop over pairs: float weights are rare in the
// quantized models this engine targets.)
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
