// Row quantization and dequantization for the ggml types minfer computes
// with: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K.
//
// Dequantization is the definition of each format and is bit-exact with
// ggml's reference dequantize_row_* (unfused float multiply/add, in ggml's
// operation order), so a tensor quantized by llama.cpp dequantizes to exactly
// the floats llama.cpp's CPU backend sees. The SIMD fast paths (F16, Q8_0,
// Q4_K, Q6_K) produce the same bits as the scalar code.
//
// Quantization uses minfer's own algorithms. It is deterministic: the same
// input gives the same bytes on every x86-64 CPU (one code path, scalar plus
// baseline SSE2, built without FP contraction; F16/BF16 use converters that
// are bit-identical across ISAs). Input must be finite; NaN/inf give
// unspecified (memory-safe) codes. Thread-safe, no allocation. Source and
// destination must not overlap.
//
// Error bounds (A = max |x| of the block, d = the block's stored scale/step as
// decoded, eps_h = 2^-10 for the rounding of a scale to f16; "+ t" is float
// slack t = 2^-20 * A + 2^-24 covering float arithmetic and f16 subnormals).
// They hold for every block whose values stay inside the format's range
// (|x| <= 65504 * the largest quant code; beyond, the scale saturates):
//  F16   |x - y| <= 2^-11 |x| (normal range), <= 2^-25 (subnormal range).
//  BF16  |x - y| <= 2^-8 |x| (normal range).
//  Q8_0  |x - y| <= d/2 + t,                 d <= A/127 * (1 + eps_h) + 2^-24.
//  Q4_0  |x - y| <= A/8 * (1 + eps_h) + t;   block RMSE <= A/14 (1 + eps_h) + t.
//  Q5_0  |x - y| <= A/16 * (1 + eps_h) + t;  block RMSE <= A/30 (1 + eps_h) + t.
//  Q4_1  |x - y| <= d/2 + t,   d <= (max - min)/15 * (1 + eps_h) + 2^-10 A / 15 + 2^-23.
//  Q5_1  |x - y| <= d/2 + t,   d <= (max - min)/31 * (1 + eps_h) + 2^-10 A / 31 + 2^-23.
//  Q4_K  super-block RMSE <= (R + M/63) * (1/30 + 1/1890) * (1 + 2 eps_h) + t,
//        R = largest (max - min(0, min)) of the 8 sub-blocks, M = largest
//        -min(0, min) of the sub-blocks.
//  Q5_K  as Q4_K with 1/62 + 1/3906 in place of 1/30 + 1/1890.
//  Q6_K  super-block RMSE <= A/62 * (1 + 1/127) * (1 + 2 eps_h) + t.
// The bounds are what a plain min/max (or absmax) quantizer with the scales
// rounded outward guarantees: each step is the block's range over the number
// of codes, plus the cost of storing the scales in f16 / 6 or 8 bits. The
// quantizers search for lower-error solutions and keep one only when it is
// better, so typical errors are well below the bounds (see quantize_test.cc
// for measured RMSEs on Gaussian data).
#ifndef MINFER_ENGINE_QUANT_QUANTIZE_H_
#define MINFER_ENGINE_QUANT_QUANTIZE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/quant/cpu_isa.h"
#include "engine/quant/ggml_types.h"

namespace minfer {

// Whether QuantizeRow/DequantizeRow handle `type`.
bool CanQuantize(GgmlType type);
bool CanDequantize(GgmlType type);

// Quantizes n floats into RowBytes(type, n) bytes at dst. InvalidArgument
// for a type this module does not quantize or n not a multiple of the block
// size (n >= 0; n == 0 writes nothing).
absl::Status QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n);

// Dequantizes RowBytes(type, n) bytes at src into n floats. Same errors.
absl::Status DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n);

// Hot-loop access (embedding gathers): the kernel for `type`, or nullptr if
// the type is not supported. n must be a multiple of the block size; no
// checks are made. The scalar ISA is the reference; all ISAs produce
// identical bits. `isa` must be supported by the CPU (CpuIsaSupported).
using DequantizeRowFn = void (*)(const void* src, float* dst, int64_t n);
using QuantizeRowFn = void (*)(const float* src, void* dst, int64_t n);
DequantizeRowFn GetDequantizeRowFn(GgmlType type, CpuIsa isa = BestCpuIsa());
QuantizeRowFn GetQuantizeRowFn(GgmlType type);

}  // namespace minfer

#endif  // MINFER_ENGINE_QUANT_QUANTIZE_H_
