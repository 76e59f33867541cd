// Quantized KV codes to floats with integer and float-add instructions only:
// the decode attention's inner loop converts every K and V value it reads
// (32 per lane per four rows), and the conversion instructions nvcc would
// otherwise emit (I2F for an int8, a select per e4m3 value for NaN) run on
// the conversion pipe at 1/8 of the FMA rate on sm_80 and sm_90 — the eleventh
// session measured q8_0 KV 6% and fp8 KV 22% below f16 KV at B = 64, where
// the reads are the same bytes.
//
// Plain C++ with __host__ __device__ under nvcc: the kernels call these, and
// a CPU test (tests/cuda/kernels/kv_codes_test.cc) checks them exhaustively
// against the CPU's own decoders, so the identities hold in CI without a GPU.
#ifndef MINFER_CUDA_KERNELS_KV_CODES_H_
#define MINFER_CUDA_KERNELS_KV_CODES_H_

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MINFER_KV_HD __host__ __device__ __forceinline__
#else
#define MINFER_KV_HD inline
#endif

namespace minfer::cuda {

// PTX prmt / __byte_perm: byte n of the result is byte (s >> 4n) & 7 of the
// eight bytes {x: 0..3, y: 4..7}. Selectors here never set a nibble's bit
// 3 (PTX's sign replicate), which the host form does not model.
MINFER_KV_HD uint32_t KvBytePerm(uint32_t x, uint32_t y, uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  const uint64_t xy = (static_cast<uint64_t>(y) << 32) | x;
  uint32_t r = 0;
  for (int n = 0; n < 4; ++n) {
    r |= static_cast<uint32_t>((xy >> (8 * ((s >> (4 * n)) & 7))) & 0xFF) << (8 * n);
  }
  return r;
#endif
}

MINFER_KV_HD float KvBitsToFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// Byte i (0..3) of four int8 codes as a float, exactly static_cast<float>(
// static_cast<int8_t>(byte)): the byte xor 0x80 is the code + 128 (0..255);
// placed under the exponent bits 0x4B (2^23) it is the float 2^23 + code +
// 128, and subtracting 2^23 + 128 is exact (both are integers below 2^24).
// One prmt and one add per value, plus one xor per four (xored = qs ^
// 0x80808080, computed once by the caller).
MINFER_KV_HD float S8CodeToFloat(uint32_t xored, int i) {
  const uint32_t bits = KvBytePerm(xored, 0x4B00u, 0x5440u | static_cast<uint32_t>(i));
  return KvBitsToFloat(bits) - 8388736.0f;  // 2^23 + 128
}

// Codes 2p and 2p+1 (p = 0 or 1) of four e4m3 codes as the f16 pair (low
// half: code 2p) whose values are exactly the codes' / 256: each byte moved
// to the high byte of its half (prmt), the sign kept at bit 15 and the seven
// exponent-and-mantissa bits shifted down one, so e4m3's exponent (bias 7)
// lands in f16's field (bias 15) and subnormals stay subnormal (2^-6 m/8 =
// 2^8 x 2^-14 m/8). Three integer instructions per two values. A NaN code
// (S.1111.111) comes out as the finite 1.875 (480 / 256): see E4M3HasNaN.
MINFER_KV_HD uint32_t E4M3PairOver256Bits(uint32_t qs, int p) {
  const uint32_t w = KvBytePerm(qs, 0u, p == 0 ? 0x1404u : 0x3424u);
  return (w & 0x80008000u) | ((w >> 1) & 0x3F803F80u);
}

// Whether any of four e4m3 codes is NaN (low seven bits all ones): adding 1
// to the low seven bits carries into bit 7 only for 0x7F, and never across
// bytes. Three integer instructions per four values, where a select per value
// would cost two.
MINFER_KV_HD bool E4M3HasNaN(uint32_t qs) {
  return (((qs & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u) != 0;
}

}  // namespace minfer::cuda

#undef MINFER_KV_HD

#endif  // MINFER_CUDA_KERNELS_KV_CODES_H_
