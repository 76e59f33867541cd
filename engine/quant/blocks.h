// Byte-exact layouts of the GGUF/ggml quantized blocks minfer computes with,
// plus minfer's int8 activation block.
//
// All multi-byte fields are little-endian (GGUF is little-endian and minfer
// only runs on little-endian hosts). Half-precision fields are raw IEEE
// binary16 bits; convert with Fp16ToFloat (fp16.h). The structs are packed
// (byte alignment) so that a pointer into a mapped GGUF tensor can be
// reinterpreted as an array of blocks at the file's stride; never assume a
// block field is naturally aligned.
//
// Element order inside a block (what dequantize.cc implements, and what a
// hand-built test block must follow):
//  * Q4_0/Q4_1: element j < 16 is the low nibble of qs[j], element j + 16 its
//    high nibble.
//  * Q5_0/Q5_1: as Q4_x for the low 4 bits; bit 4 of element j is bit j of
//    qh read as a little-endian uint32.
//  * Q8_0: element j is qs[j].
//  * Q4_K/Q5_K: 8 sub-blocks of 32. Sub-blocks 2i and 2i+1 share
//    qs[32i .. 32i+31]: sub-block 2i takes the low nibbles, 2i+1 the high.
//    Q5_K's bit 4 of element l of sub-block j is bit j of qh[l].
//    6-bit scale/min of sub-block j come from `scales` (see Q4KScaleMin).
//  * Q6_K: two halves of 128; in half h, element 32g + l (g < 4, l < 32)
//    takes low 4 bits from ql[64h + l + 32*(g&1)] (low nibble for g < 2,
//    high nibble for g >= 2) and high 2 bits from bits 2g..2g+1 of
//    qh[32h + l]; scale scales[8h + 2g + l/16].
#ifndef MINFER_ENGINE_QUANT_BLOCKS_H_
#define MINFER_ENGINE_QUANT_BLOCKS_H_

#include <cstdint>

namespace minfer {

inline constexpr int kQK = 32;    // elements per block of the legacy types
inline constexpr int kQKK = 256;  // elements per K-quant super-block

#pragma pack(push, 1)

struct BlockQ4_0 {  // x = (q - 8) * d
  uint16_t d;
  uint8_t qs[kQK / 2];
};

struct BlockQ4_1 {  // x = q * d + m
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK / 2];
};

struct BlockQ5_0 {  // x = (q - 16) * d
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};

struct BlockQ5_1 {  // x = q * d + m
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};

struct BlockQ8_0 {  // x = q * d
  uint16_t d;
  int8_t qs[kQK];
};

// ggml's Q8_1 (activation format of some ggml kernels): s = d * sum(qs).
// Layout only; minfer's kernels use BlockQ8A.
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[kQK];
};

// x = d * sc[j] * q - dmin * m[j], q in [0, 15], sub-block j of 32.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];  // 8 x (6-bit scale, 6-bit min)
  uint8_t qs[kQKK / 2];
};

// As Q4_K with q in [0, 31].
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};

// x = d * scales[i] * (q - 32), q in [0, 63], scale i per 16 elements.
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};

// OCP microscaling FP4 (gpt-oss's expert weights): x = d * v[q], d =
// 2^(e - 128) from the E8M0 exponent e, v the E2M1 values doubled to
// integers (kMxfp4Values; the halving is in d), q in [0, 15]: element j
// in the low nibble of qs[j], element j + 16 in the high one.
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[kQK / 2];
};

#pragma pack(pop)

inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12,
                                             0, -1, -2, -3, -4, -6, -8, -12};

// d of an MXFP4 block, 2^(e - 128) exactly (a subnormal float for e < 2),
// as ggml computes it.
inline float Mxfp4Scale(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

// minfer's activation block: 32 values quantized symmetrically,
// x ~= qs * d, with d = absmax / 127 and s = d * sum(qs) (the term the
// kernels need for the mins of Q4_1/Q5_1/Q4_K/Q5_K). Plain floats, 40 bytes
// (the padded activation block the CPU and GPU integer paths share).
// Invariant (QuantizeRowQ8A): qs in [-127, 127], never -128.
struct BlockQ8A {
  float d;
  float s;
  int8_t qs[kQK];
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8A) == 40);
static_assert(sizeof(BlockMXFP4) == 17);
static_assert(alignof(BlockQ8A) == 4);

// Decodes the 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K
// `scales` array: sub-blocks 0..3 keep theirs in the low 6 bits of bytes j
// (scale) and j+4 (min); sub-blocks 4..7 keep the low 4 bits in byte j+4
// (scale: low nibble, min: high nibble) and the top 2 bits in the spare top
// bits of bytes j-4 (scale) and j (min).
inline void Q4KScaleMin(const uint8_t* scales, int j, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

// Inverse of Q4KScaleMin for all 8 sub-blocks (each value must be < 64).
inline void PackQ4KScaleMin(const uint8_t sc[8], const uint8_t m[8],
                            uint8_t scales[12]) {
  for (int j = 0; j < 4; ++j) {
    scales[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    scales[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4));
  }
}

}  // namespace minfer

#endif  // MINFER_ENGINE_QUANT_BLOCKS_H_
