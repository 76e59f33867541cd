// The SIMD attention tile kernels (attention_kernel.inc explains them):
// per-thread scratch, then the kernel compiled for AVX2 and for AVX512-VL.
//
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/cpu/attention_internal.h"
#include "engine/quant/blocks.h"
#include "engine/quant/fp16.h"
#include "engine/quant/fp8.h"
#include "engine/quant/kv_row.h"
#include "engine/quant/quantize.h"

namespace minfer::cpu::attn_internal {
namespace {

// Grow-only 64-byte-aligned float scratch (32-byte loads must not split
// cache lines).
class AlignedFloats {
 public:
  AlignedFloats() = default;
  AlignedFloats(const AlignedFloats&) = delete;
  AlignedFloats& operator=(const AlignedFloats&) = delete;
  ~AlignedFloats() { std::free(p_); }
  float* Get(size_t n) {
    if (n > cap_) {
      std::free(p_);
      cap_ = (n + 15) / 16 * 16;
      p_ = static_cast<float*>(std::aligned_alloc(64, cap_ * sizeof(float)));
    }
    return p_;
  }

 private:
  float* p_ = nullptr;
  size_t cap_ = 0;
};

struct TileScratch {
  AlignedFloats qt, ot, s, kbuf, vbuf, row, misc;
};

TileScratch& ThreadScratch() {
  thread_local TileScratch scratch;
  return scratch;
}

// The values of the 256 e4m3 codes (fp8 KV rows).
const float* E4M3Table() {
  static const auto* table = [] {
    auto* t = new float[256];
    for (int c = 0; c < 256; ++c) t[c] = E4M3ToFloat(static_cast<uint8_t>(c));
    return t;
  }();
  return table;
}

}  // namespace
}  // namespace minfer::cpu::attn_internal

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

#include "engine/cpu/simd_avx2.h"

namespace minfer::cpu::attn_internal {
namespace avx2_kernel {
#define MINFER_ATTN_WIDE 0
#include "engine/cpu/attention_kernel.inc"
#undef MINFER_ATTN_WIDE
}  // namespace avx2_kernel

void AttendTileAvx2(const AttnArgs& a, int hk, int64_t t0, int n_tokens) {
  avx2_kernel::AttendTile(a, hk, t0, n_tokens);
}

}  // namespace minfer::cpu::attn_internal

#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512vl")

namespace minfer::cpu::attn_internal {
namespace avx512vl_kernel {
#define MINFER_ATTN_WIDE 1
#include "engine/cpu/attention_kernel.inc"
#undef MINFER_ATTN_WIDE
}  // namespace avx512vl_kernel

void AttendTileAvx512Vl(const AttnArgs& a, int hk, int64_t t0, int n_tokens) {
  avx512vl_kernel::AttendTile(a, hk, t0, n_tokens);
}

}  // namespace minfer::cpu::attn_internal

#pragma GCC pop_options
