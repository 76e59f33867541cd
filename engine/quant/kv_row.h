// The rows of the quantized KV caches (q8_0 and fp8): one position's n
// elements (n % 32 == 0) as n one-byte codes followed by n / 32 f16 scales,
// element i's scale being scale i / 32 — 34 n / 32 bytes, the size of n / 32
// ggml Q8_0 blocks, laid out planar instead of interleaved.
//
// Why planar: the GPU's decode attention reads a row 4 elements per lane, and
// an interleaved 34-byte block only guarantees 2-byte alignment, so a lane's
// 4 codes took two 2-byte loads plus one for the scale (three load
// instructions where an f16 row takes one); the nineteenth session measured
// the quantized caches bound by those loads. Planar, a lane's codes are one
// aligned 4-byte load (wherever the row itself is 4-byte aligned: n % 64 ==
// 0, or the row's base) and its scale one 2-byte load. The values are those
// of the block formats: q8_0 is ggml's Q8_0 quantization of each 32-element
// block (QuantizeRow(kQ8_0), so the same codes and scales), fp8 is fp8.h's
// block quantization; only where the bytes sit differs.
//
// Every reader and writer of a quantized cache row goes through this layout:
// the CPU's KV store and attention (engine/cpu/attention*.cc), the CUDA store,
// the fused q/k/v epilogue and the attention kernels (cuda/kernels/common.cuh
// kv_load, quantize_*_block). A cache row written by either backend holds the
// same bytes.
#ifndef MINFER_ENGINE_QUANT_KV_ROW_H_
#define MINFER_ENGINE_QUANT_KV_ROW_H_

#include <cstdint>

namespace minfer {

enum class KvQuant : uint8_t { kQ8_0, kFp8 };

// Bytes of a quantized row of n elements (n % 32 == 0).
inline constexpr int64_t KvQuantRowBytes(int64_t n) { return n / 32 * 34; }

// Byte offset of the scales within a row of n elements: the codes come first.
inline constexpr int64_t KvQuantScaleOffset(int64_t n) { return n; }

// n floats (n % 32 == 0) into a row at dst (KvQuantRowBytes(n) bytes, any
// alignment), and back. Quantizing a block of 32: q8_0 d = the smallest half
// >= absmax / 127 and q = round-half-even(x / d) clamped to +-127 (ggml's
// Q8_0, engine/quant/quantize.h); fp8 as fp8.h states.
void QuantizeKvRow(KvQuant q, const float* src, uint8_t* dst, int64_t n);
void DequantizeKvRow(KvQuant q, const uint8_t* src, float* dst, int64_t n);

// Element i's code and f16 scale bits in a row of n elements.
inline uint8_t KvRowCode(const uint8_t* row, int64_t i) { return row[i]; }
inline uint16_t KvRowScaleBits(const uint8_t* row, int64_t n, int64_t i) {
  const uint8_t* s = row + KvQuantScaleOffset(n) + 2 * (i / 32);
  return static_cast<uint16_t>(s[0] | (s[1] << 8));
}

}  // namespace minfer

#endif  // MINFER_ENGINE_QUANT_KV_ROW_H_
