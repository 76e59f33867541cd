#include "engine/quant/kv_row.h"

#include <cstring>

#include "engine/quant/blocks.h"
#include "engine/quant/fp16.h"
#include "engine/quant/fp8.h"
#include "engine/quant/ggml_types.h"
#include "engine/quant/quantize.h"

namespace minfer {

void QuantizeKvRow(KvQuant q, const float* src, uint8_t* dst, int64_t n) {
  uint8_t* scales = dst + KvQuantScaleOffset(n);
  for (int64_t b = 0; b < n / 32; ++b) {
    uint16_t d = 0;
    if (q == KvQuant::kQ8_0) {
      // ggml's Q8_0 quantizer for the block, so the codes and the scale are
      // QuantizeRow(kQ8_0)'s; then the block's parts to their planes.
      BlockQ8_0 blk;
      (void)QuantizeRow(GgmlType::kQ8_0, src + 32 * b, &blk, 32);
      d = blk.d;
      std::memcpy(dst + 32 * b, blk.qs, 32);
    } else {
      QuantizeBlockFp8Kv(src + 32 * b, &d, dst + 32 * b);
    }
    scales[2 * b] = static_cast<uint8_t>(d & 0xFF);
    scales[2 * b + 1] = static_cast<uint8_t>(d >> 8);
  }
}

void DequantizeKvRow(KvQuant q, const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) {
    // d * q rounds once, as ggml's Q8_0 dequantizer; e4m3 * d is exact (fp8.h).
    const float d = Fp16ToFloat(KvRowScaleBits(src, n, 32 * b));
    const uint8_t* c = src + 32 * b;
    if (q == KvQuant::kQ8_0) {
      for (int j = 0; j < 32; ++j) dst[32 * b + j] = static_cast<float>(static_cast<int8_t>(c[j])) * d;
    } else {
      for (int j = 0; j < 32; ++j) dst[32 * b + j] = E4M3ToFloat(c[j]) * d;
    }
  }
}

}  // namespace minfer
