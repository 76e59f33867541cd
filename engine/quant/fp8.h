// FP8 E4M3 (the OCP / NVIDIA "e4m3fn" format: 1 sign, 4 exponent bits with
// bias 7, 3 mantissa bits, no infinities, S.1111.111 the only NaN, largest
// finite 448) and the block quantization of minfer's fp8 KV cache.
//
// The conversions are __host__ __device__: the CPU's KV store and the CUDA
// store kernels call the same code, so a cache row holds the same bytes
// whichever backend wrote it (the q8_0 cache promises the same).
//
// FloatToE4M3 rounds to nearest, ties to even, and saturates finite values
// (and infinities) to +-448, as the hardware's cvt.rn.satfinite does; NaN
// stays NaN. E4M3ToFloat is exact.
//
// Cache block (32 values; engine/quant/kv_row.h lays a row's blocks out,
// codes then scales, the q8_0 cache's geometry): x_i = E4M3ToFloat(q_i) * d
// with d an f16 scale. Quantizing a block: d =
// the smallest half >= absmax / 448 (so no finite value saturates), then
// q_i = FloatToE4M3(x_i * (1 / d)) (0 when d is 0). A value's error is at
// most half an e4m3 step of its own magnitude, 2^-4 relative (the 3-bit
// mantissa), or 2^-10 d absolute near zero (the subnormal step), plus the
// float rounding of x * (1 / d); the product q * d is exact in f32 (a 4-bit
// by an 11-bit significand).
#ifndef MINFER_ENGINE_QUANT_FP8_H_
#define MINFER_ENGINE_QUANT_FP8_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MINFER_HD __host__ __device__
#else
#define MINFER_HD
#endif

namespace minfer {

inline constexpr uint8_t kE4M3Max = 0x7E;  // 448
inline constexpr uint8_t kE4M3NaN = 0x7F;

MINFER_HD inline uint8_t FloatToE4M3(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t au = u & 0x7FFFFFFFu;
  if (au > 0x7F800000u) return sign | kE4M3NaN;
  if (au >= 0x43E00000u) return sign | kE4M3Max;  // >= 448, infinities included
  float a;
  memcpy(&a, &au, 4);
  if (au < 0x3C800000u) {
    // Below 2^-6: the subnormal grid of 2^-9 (a * 512 is exact); 8 is the
    // smallest normal's code, 2^-6.
    return sign | static_cast<uint8_t>(static_cast<int>(rintf(a * 512.0f)));
  }
  int e = static_cast<int>(au >> 23) - 127;  // -6 .. 8
  // a / 2^(e - 3), exact: the significand scaled to [8, 16).
  const uint32_t su = au - (static_cast<uint32_t>(e - 3) << 23);
  float s;
  memcpy(&s, &su, 4);
  int q = static_cast<int>(rintf(s));
  if (q == 16) {
    q = 8;
    ++e;
  }
  if (e > 8 || (e == 8 && q > 14)) return sign | kE4M3Max;
  return sign | static_cast<uint8_t>(((e + 7) << 3) | (q - 8));
}

MINFER_HD inline float E4M3ToFloat(uint8_t c) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  const uint32_t e = (c >> 3) & 0xFu, m = c & 7u;
  uint32_t u;
  if (e == 0xF && m == 7) {
    u = sign | 0x7FC00000u;
  } else if (e == 0) {
    const float v = static_cast<float>(m) * 0.001953125f;  // m * 2^-9, exact
    memcpy(&u, &v, 4);
    u |= sign;
  } else {
    u = sign | ((e + 120u) << 23) | (m << 20);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// 32 floats into one block: its f16 scale bits *d and codes qs[0..31].
void QuantizeBlockFp8Kv(const float* src, uint16_t* d, uint8_t* qs);

}  // namespace minfer

#endif  // MINFER_ENGINE_QUANT_FP8_H_
