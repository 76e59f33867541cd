#include "engine/quant/fp8.h"

#include "engine/quant/fp16.h"

namespace minfer {

namespace {

// Smallest half >= x (x > 0; 0 for x <= 0 or NaN), saturating at 65504: the
// rule of the q8_0 scale (quantize.cc HalfUp, common.cuh half_up_bits).
uint16_t HalfUpBits(float x) {
  if (!(x > 0.0f)) return 0;
  if (x >= 65504.0f) return 0x7BFF;
  uint16_t h = FloatToFp16(x);
  if (Fp16ToFloat(h) < x) ++h;
  return h;
}

}  // namespace

void QuantizeBlockFp8Kv(const float* src, uint16_t* d, uint8_t* qs) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float a = std::fabs(src[j]);
    amax = a > amax ? a : amax;
  }
  const uint16_t h = HalfUpBits(amax / 448.0f);
  const float df = Fp16ToFloat(h);
  const float id = df != 0.0f ? 1.0f / df : 0.0f;
  *d = h;
  for (int j = 0; j < 32; ++j) qs[j] = FloatToE4M3(src[j] * id);
}

}  // namespace minfer
