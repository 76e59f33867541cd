#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/vec_math.h"
#include "engine/quant/quantize.h"

namespace minfer::cpu {
namespace {

// Below this many elements a parallel dispatch costs more than it saves.
constexpr int64_t kParallelGrain = 1 << 14;

// y = op(a, b) with b repeating every nb elements (a bias row) when nb < n.
template <typename RowFn>
void Binary(ThreadPool& pool, const float* a, const float* b, int64_t nb, float* y, int64_t n,
            RowFn row_fn) {
  pool.ParallelRange(n, kParallelGrain, [&](int64_t begin, int64_t end) {
    if (nb >= n) return row_fn(a + begin, b + begin, y + begin, end - begin);
    for (int64_t i = begin; i < end;) {
      const int64_t j = i % nb, len = std::min(end - i, nb - j);
      row_fn(a + i, b + j, y + i, len);
      i += len;
    }
  });
}

}  // namespace

void AddF32(ThreadPool& pool, const float* a, const float* b, int64_t nb, float* y, int64_t n) {
  Binary(pool, a, b, nb, y, n, AddF32Row);
}

void AddF32Residual(ThreadPool& pool, const float* a, const float* b, int64_t nb, const float* r,
                    float* y, int64_t n) {
  pool.ParallelRange(n, kParallelGrain, [&](int64_t begin, int64_t end) {
    // a + b goes through a buffer of its own first: y may be r's buffer.
    constexpr int64_t kChunk = 256;
    float sum[kChunk];
    for (int64_t i = begin; i < end;) {
      const int64_t j = nb >= n ? i : i % nb;
      const int64_t len = std::min({end - i, nb >= n ? end - i : nb - j, kChunk});
      AddF32Row(a + i, b + j, sum, len);
      AddF32Row(sum, r + i, y + i, len);
      i += len;
    }
  });
}

void MulF32(ThreadPool& pool, const float* a, const float* b, int64_t nb, float* y, int64_t n) {
  Binary(pool, a, b, nb, y, n, MulF32Row);
}

void ScaleF32(const float* a, float s, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * s;
}

void SiluF32(const float* a, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] / (1.0f + std::exp(-a[i]));
}

void SwiGluF32(ThreadPool& pool, const float* g, const float* u, float* y, int64_t n) {
  // SwiGluF32Row gives every element the same value wherever a range starts,
  // so the split does not change results (FusedFfn uses the same function).
  pool.ParallelRange(n, kParallelGrain, [&](int64_t begin, int64_t end) {
    SwiGluF32Row(g + begin, u + begin, y + begin, end - begin);
  });
}

void SoftmaxRows(const float* a, float* y, int64_t ne0, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = a + r * ne0;
    float* o = y + r * ne0;
    float mx = -INFINITY;
    for (int64_t i = 0; i < ne0; ++i) mx = std::max(mx, x[i]);
    double sum = 0;
    for (int64_t i = 0; i < ne0; ++i) {
      o[i] = std::exp(x[i] - mx);
      sum += o[i];
    }
    float inv = static_cast<float>(1.0 / sum);
    for (int64_t i = 0; i < ne0; ++i) o[i] *= inv;
  }
}

void RmsNormRows(ThreadPool& pool, const float* x, const float* w, float eps, float* y,
                 int64_t ne0, int64_t rows) {
  pool.ParallelRange(rows, std::max<int64_t>(1, kParallelGrain / ne0), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) RmsNormF32Row(x + r * ne0, w, eps, y + r * ne0, ne0);
  });
}

void RopeF32(const float* x, const int32_t* pos, float* y, int64_t head_dim, int64_t n_heads,
             int64_t nt, int n_rot, graph::RopeStyle style, float base, const float* factors,
             const graph::RopeYarn* yarn) {
  const int half = n_rot / 2;
  std::vector<float> freq(half);
  // Computed in float as powf(base, -2i/n_rot) (divided by the factor), the
  // form GPU kernels use, so both backends rotate by the same angles.
  for (int i = 0; i < half; ++i) {
    freq[i] = std::pow(base, -2.0f * static_cast<float>(i) / static_cast<float>(n_rot));
    if (factors != nullptr) freq[i] /= factors[i];
  }
  // YaRN (graph.h): the mix of extrapolated and interpolated angles per
  // pair (ramp r_i times ext_factor) and the magnitude scale.
  std::vector<float> mix;
  float mscale = 1.0f;
  if (yarn != nullptr && yarn->active()) {
    auto corr = [&](float beta) {
      return n_rot * std::log(yarn->n_ctx_orig / (beta * 2.0f * static_cast<float>(M_PI))) /
             (2.0f * std::log(base));
    };
    const float lo = std::max(0.0f, std::floor(corr(yarn->beta_fast)));
    const float hi = std::min(static_cast<float>(n_rot - 1), std::ceil(corr(yarn->beta_slow)));
    mix.resize(half);
    for (int i = 0; i < half; ++i) {
      const float r = (static_cast<float>(i) - lo) / std::max(0.001f, hi - lo);
      mix[i] = (1.0f - std::min(1.0f, std::max(0.0f, r))) * yarn->ext_factor;
    }
    mscale = yarn->attn_factor;
    if (yarn->ext_factor != 0.0f) mscale *= 1.0f + 0.1f * std::log(1.0f / yarn->freq_scale);
  }
  std::vector<float> cs(half), sn(half);
  for (int64_t t = 0; t < nt; ++t) {
    const float p = static_cast<float>(pos[t]);
    for (int i = 0; i < half; ++i) {
      // theta rounded to float, then sin/cos of that float exactly.
      float th = p * freq[i];
      if (!mix.empty()) {
        const float interp = yarn->freq_scale * th;
        th = interp * (1.0f - mix[i]) + th * mix[i];
      }
      const double theta = static_cast<double>(th);
      cs[i] = static_cast<float>(std::cos(theta)) * mscale;
      sn[i] = static_cast<float>(std::sin(theta)) * mscale;
    }
    for (int64_t h = 0; h < n_heads; ++h) {
      const float* xh = x + (t * n_heads + h) * head_dim;
      float* yh = y + (t * n_heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        int i0 = style == graph::RopeStyle::kNeoX ? i : 2 * i;
        int i1 = style == graph::RopeStyle::kNeoX ? i + half : 2 * i + 1;
        float x0 = xh[i0], x1 = xh[i1];
        yh[i0] = x0 * cs[i] - x1 * sn[i];
        yh[i1] = x0 * sn[i] + x1 * cs[i];
      }
      if (yh != xh) {
        for (int64_t i = n_rot; i < head_dim; ++i) yh[i] = xh[i];
      }
    }
  }
}

void PermuteF32(const float* x, const graph::Shape& xs, const std::array<int8_t, 4>& perm,
                float* y) {
  graph::Shape ys;
  for (int i = 0; i < 4; ++i) ys.ne[perm[i]] = xs.ne[i];
  int64_t ystride[4] = {1, ys.ne[0], ys.ne[0] * ys.ne[1], ys.ne[0] * ys.ne[1] * ys.ne[2]};
  int64_t idx = 0;
  for (int64_t i3 = 0; i3 < xs.ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < xs.ne[2]; ++i2)
      for (int64_t i1 = 0; i1 < xs.ne[1]; ++i1)
        for (int64_t i0 = 0; i0 < xs.ne[0]; ++i0) {
          const int64_t c[4] = {i0, i1, i2, i3};
          int64_t o = 0;
          for (int d = 0; d < 4; ++d) o += c[d] * ystride[perm[d]];
          y[o] = x[idx++];
        }
}

absl::Status GetRowsWeight(const graph::Weight& w, const int32_t* ids, int64_t n_ids, float* y) {
  const int64_t ne0 = w.ne0(), rows = w.rows();
  for (int64_t i = 0; i < n_ids; ++i) {
    if (ids[i] < 0 || ids[i] >= rows) {
      return absl::InvalidArgumentError(absl::StrCat("GetRows: id ", ids[i], " outside [0, ", rows,
                                                     ") of ", w.name));
    }
    absl::Status s = DequantizeRow(w.type, w.row(ids[i]), y + i * ne0, ne0);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status GetRowsF32(const float* src, int64_t ne0, int64_t rows, const int32_t* ids,
                        int64_t n_ids, float* y) {
  for (int64_t i = 0; i < n_ids; ++i) {
    if (ids[i] < 0 || ids[i] >= rows) {
      return absl::InvalidArgumentError(
          absl::StrCat("GetRows: id ", ids[i], " outside [0, ", rows, ")"));
    }
    std::memcpy(y + i * ne0, src + ids[i] * ne0, ne0 * sizeof(float));
  }
  return absl::OkStatus();
}

}  // namespace minfer::cpu
