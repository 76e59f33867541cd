#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/cpu/kernels.h"
#include "engine/quant/fp16.h"
#include "engine/quant/quantize.h"

namespace minfer::cpu {
namespace {

// Converts one cache row (n elements of the cache dtype) to floats.
void LoadRow(graph::DType dtype, const uint8_t* src, float* dst, int64_t n) {
  switch (dtype) {
    case graph::DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      break;
    case graph::DType::kF16:
      Fp16ToFloatRow(reinterpret_cast<const uint16_t*>(src), dst, n);
      break;
    case graph::DType::kQ8_0:
      (void)DequantizeRow(GgmlType::kQ8_0, src, dst, n);
      break;
    default:
      break;
  }
}

absl::Status StoreRow(graph::DType dtype, const float* src, uint8_t* dst, int64_t n) {
  switch (dtype) {
    case graph::DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return absl::OkStatus();
    case graph::DType::kF16:
      FloatToFp16Row(src, reinterpret_cast<uint16_t*>(dst), n);
      return absl::OkStatus();
    case graph::DType::kQ8_0:
      return QuantizeRow(GgmlType::kQ8_0, src, dst, n);
    default:
      return absl::InvalidArgumentError("KV store: unsupported cache type");
  }
}

}  // namespace

absl::Status KvStore(const float* k, const float* v, const int32_t* pos, int64_t nt,
                     const graph::KvLayout& layout, uint8_t* k_cache, uint8_t* v_cache) {
  const int64_t row = layout.row_bytes();
  for (int64_t t = 0; t < nt; ++t) {
    if (pos[t] < 0 || pos[t] >= layout.n_ctx) {
      return absl::OutOfRangeError(absl::StrCat("KV store: position ", pos[t],
                                                " outside the context of ", layout.n_ctx));
    }
    absl::Status s = StoreRow(layout.dtype, k + t * layout.n_kv_embd, k_cache + pos[t] * row,
                              layout.n_kv_embd);
    if (s.ok()) {
      s = StoreRow(layout.dtype, v + t * layout.n_kv_embd, v_cache + pos[t] * row,
                   layout.n_kv_embd);
    }
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Attention(ThreadPool& pool, const float* q, const int32_t* pos, int64_t nt,
                       int n_head, int n_head_kv, int head_dim, float scale,
                       const graph::KvLayout& layout, const uint8_t* k_cache,
                       const uint8_t* v_cache, float* y) {
  for (int64_t t = 0; t < nt; ++t) {
    if (pos[t] < 0 || pos[t] >= layout.n_ctx) {
      return absl::OutOfRangeError(absl::StrCat("attention: position ", pos[t],
                                                " outside the context of ", layout.n_ctx));
    }
  }
  const int group = n_head / n_head_kv;
  const int64_t row = layout.row_bytes();
  const bool f32 = layout.dtype == graph::DType::kF32;
  // One task per (token, kv head): the group's query heads share each K/V
  // row conversion.
  pool.ParallelFor(nt * n_head_kv, [&](int64_t task, int) {
    const int64_t t = task / n_head_kv;
    const int hk = static_cast<int>(task % n_head_kv);
    const int64_t n_kv = pos[t] + 1;
    std::vector<float> kbuf(f32 ? 0 : layout.n_kv_embd), vbuf(f32 ? 0 : layout.n_kv_embd);
    std::vector<float> acc(static_cast<size_t>(group) * head_dim, 0.0f);
    std::vector<float> mx(group, -INFINITY), sum(group, 0.0f);
    for (int64_t p = 0; p < n_kv; ++p) {
      const float* krow;
      const float* vrow;
      if (f32) {
        krow = reinterpret_cast<const float*>(k_cache + p * row) + hk * head_dim;
        vrow = reinterpret_cast<const float*>(v_cache + p * row) + hk * head_dim;
      } else {
        // Quantized rows are converted whole (q8_0 blocks span heads).
        LoadRow(layout.dtype, k_cache + p * row, kbuf.data(), layout.n_kv_embd);
        LoadRow(layout.dtype, v_cache + p * row, vbuf.data(), layout.n_kv_embd);
        krow = kbuf.data() + hk * head_dim;
        vrow = vbuf.data() + hk * head_dim;
      }
      for (int g = 0; g < group; ++g) {
        const int h = hk * group + g;
        const float* qh = q + (t * n_head + h) * head_dim;
        float s = 0.0f;
        for (int i = 0; i < head_dim; ++i) s += qh[i] * krow[i];
        s *= scale;
        // Online softmax: rescale what was accumulated when the max moves.
        const float m_new = std::max(mx[g], s);
        const float corr = std::exp(mx[g] - m_new);
        const float e = std::exp(s - m_new);
        sum[g] = sum[g] * corr + e;
        mx[g] = m_new;
        float* a = acc.data() + static_cast<size_t>(g) * head_dim;
        for (int i = 0; i < head_dim; ++i) a[i] = a[i] * corr + e * vrow[i];
      }
    }
    for (int g = 0; g < group; ++g) {
      const int h = hk * group + g;
      float* yh = y + (t * n_head + h) * head_dim;
      const float inv = 1.0f / sum[g];
      const float* a = acc.data() + static_cast<size_t>(g) * head_dim;
      for (int i = 0; i < head_dim; ++i) yh[i] = a[i] * inv;
    }
  });
  return absl::OkStatus();
}

}  // namespace minfer::cpu
