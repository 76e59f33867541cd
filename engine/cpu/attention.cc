#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/cpu_features.h"
#include "engine/cpu/attention_internal.h"
#include "engine/cpu/kernels.h"
#include "engine/quant/fp16.h"
#include "engine/quant/kv_row.h"

namespace minfer::cpu {
namespace {

void LoadRow(graph::DType dtype, const uint8_t* src, float* dst, int64_t n) {
  switch (dtype) {
    case graph::DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      break;
    case graph::DType::kF16:
      Fp16ToFloatRow(reinterpret_cast<const uint16_t*>(src), dst, n);
      break;
    case graph::DType::kQ8_0:
      DequantizeKvRow(KvQuant::kQ8_0, src, dst, n);
      break;
    case graph::DType::kFp8:
      DequantizeKvRow(KvQuant::kFp8, src, dst, n);
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
      QuantizeKvRow(KvQuant::kQ8_0, src, dst, n);
      return absl::OkStatus();
    case graph::DType::kFp8:
      QuantizeKvRow(KvQuant::kFp8, src, dst, n);
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError("KV store: unsupported cache type");
  }
}

}  // namespace

namespace attn_internal {
void LoadCacheRow(graph::DType dtype, const uint8_t* src, float* dst, int64_t n) {
  LoadRow(dtype, src, dst, n);
}
}  // namespace attn_internal

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

namespace {

// Query tokens per tile: a tile's rows (tokens x group) fill whole 8-lane row
// vectors as far as possible, up to 64 rows. Bigger tiles read each K/V row
// (and convert it, for f16/q8_0) for more queries; 64 rows keep the tile's
// transposed Q, scores and accumulators (3 x 16 KiB at head_dim 64) in L1/L2.
int TileTokens(int group, int64_t nt) {
  const int max_tokens = std::max(1, 64 / group);
  int best = 1;
  double best_use = 0;
  for (int t = max_tokens; t >= 1; --t) {
    const int rows = t * group;
    const double use = static_cast<double>(rows) / ((rows + 7) / 8 * 8);
    if (use > best_use + 1e-9) {
      best = t;
      best_use = use;
    }
  }
  return static_cast<int>(std::min<int64_t>(best, nt));
}

// Scalar fallback (no AVX2): per (token, kv head), all scores of the group
// first, then one exp per score and the weighted V sum. Same semantics as the
// SIMD path, not the same rounding.
void AttendScalar(const attn_internal::AttnArgs& a, int64_t t, int hk, std::vector<float>& row,
                  std::vector<float>& sc, std::vector<float>& acc) {
  const int group = a.n_head / a.n_head_kv, hd = a.head_dim;
  const int64_t n_kv = static_cast<int64_t>(a.pos[t]) + 1;
  const int64_t first = attn_internal::FirstKey(a, a.pos[t]);
  row.resize(a.n_kv_embd);
  sc.resize(static_cast<size_t>(group) * n_kv);
  acc.assign(static_cast<size_t>(group) * hd, 0.0f);
  auto load = [&](const uint8_t* cache, int64_t p) -> const float* {
    const uint8_t* src = cache + attn_internal::CacheRow(a, p) * a.row_bytes;
    if (a.dtype == graph::DType::kF32) {
      return reinterpret_cast<const float*>(src) + static_cast<int64_t>(hk) * hd;
    }
    LoadRow(a.dtype, src, row.data(), a.n_kv_embd);
    return row.data() + static_cast<int64_t>(hk) * hd;
  };
  for (int64_t p = 0; p < n_kv; ++p) {
    if (p < first) {
      for (int g = 0; g < group; ++g) sc[g * n_kv + p] = -INFINITY;
      continue;
    }
    const float* k = load(a.k_cache, p);
    for (int g = 0; g < group; ++g) {
      const float* qh = a.q + (t * a.n_head + hk * group + g) * hd;
      float s = 0.0f;
      for (int i = 0; i < hd; ++i) s += qh[i] * k[i];
      sc[g * n_kv + p] = s * a.scale;
    }
  }
  std::vector<float> sum(group, 0.0f);
  for (int g = 0; g < group; ++g) {
    float* s = sc.data() + g * n_kv;
    float mx = -INFINITY;
    for (int64_t p = 0; p < n_kv; ++p) mx = std::max(mx, s[p]);
    const float sink = a.sinks != nullptr ? a.sinks[hk * group + g] : -INFINITY;
    mx = std::max(mx, sink);
    for (int64_t p = 0; p < n_kv; ++p) {
      s[p] = std::exp(s[p] - mx);
      sum[g] += s[p];
    }
    if (a.sinks != nullptr) sum[g] += std::exp(sink - mx);
  }
  for (int64_t p = first; p < n_kv; ++p) {
    const float* v = load(a.v_cache, p);
    for (int g = 0; g < group; ++g) {
      const float w = sc[g * n_kv + p];
      float* o = acc.data() + g * hd;
      for (int i = 0; i < hd; ++i) o[i] += w * v[i];
    }
  }
  for (int g = 0; g < group; ++g) {
    float* yh = a.y + (t * a.n_head + hk * group + g) * hd;
    for (int i = 0; i < hd; ++i) yh[i] = acc[g * hd + i] / sum[g];
  }
}

}  // namespace

absl::Status Attention(ThreadPool& pool, const float* q, const int32_t* pos, int64_t nt,
                       int n_head, int n_head_kv, int head_dim, float scale,
                       const graph::KvLayout& layout, const uint8_t* k_cache,
                       const uint8_t* v_cache, float* y, KernelImpl impl) {
  for (int64_t t = 0; t < nt; ++t) {
    if (pos[t] < 0 || pos[t] >= layout.n_ctx) {
      return absl::OutOfRangeError(absl::StrCat("attention: position ", pos[t],
                                                " outside the context of ", layout.n_ctx));
    }
  }
  if (n_head <= 0 || n_head_kv <= 0 || n_head % n_head_kv != 0 || head_dim <= 0 ||
      static_cast<int64_t>(n_head_kv) * head_dim != layout.n_kv_embd) {
    return absl::InvalidArgumentError(absl::StrCat("attention: n_head ", n_head, ", n_head_kv ",
                                                   n_head_kv, ", head_dim ", head_dim,
                                                   " do not fit cache rows of ", layout.n_kv_embd));
  }
  if (layout.dtype != graph::DType::kF32 && layout.dtype != graph::DType::kF16 &&
      layout.dtype != graph::DType::kQ8_0 && layout.dtype != graph::DType::kFp8) {
    return absl::InvalidArgumentError("attention: unsupported cache type");
  }
  const attn_internal::AttnArgs a{.q = q,
                                  .pos = pos,
                                  .nt = nt,
                                  .n_head = n_head,
                                  .n_head_kv = n_head_kv,
                                  .head_dim = head_dim,
                                  .scale = scale,
                                  .dtype = layout.dtype,
                                  .n_kv_embd = layout.n_kv_embd,
                                  .row_bytes = layout.row_bytes(),
                                  .k_cache = k_cache,
                                  .v_cache = v_cache,
                                  .y = y};
  const int group = n_head / n_head_kv;
  if (impl == KernelImpl::kScalar || !GetCpuFeatures().HasAvx2Set()) {
    pool.ParallelFor(nt * n_head_kv, [&](int64_t task, int) {
      thread_local std::vector<float> row, sc, acc;
      AttendScalar(a, task / n_head_kv, static_cast<int>(task % n_head_kv), row, sc, acc);
    });
    return absl::OkStatus();
  }
  const CpuFeatures& cpu = GetCpuFeatures();
  auto* tile_fn = cpu.avx512f && cpu.avx512vl && impl == KernelImpl::kAuto
                      ? attn_internal::AttendTileAvx512Vl
                      : attn_internal::AttendTileAvx2;
  // Tasks are (kv head, tile of query tokens): each K/V row a task reads
  // (and converts) serves the tile's tokens x group query rows at once.
  const int tile = TileTokens(group, nt);
  const int64_t n_tiles = (nt + tile - 1) / tile;
  // Later tiles attend over more keys (positions usually ascend): hand them
  // out first so the short ones fill in at the end.
  pool.ParallelFor(n_tiles * n_head_kv, [&](int64_t task, int) {
    const int64_t ti = n_tiles - 1 - task / n_head_kv;
    const int64_t t0 = ti * tile;
    tile_fn(a, static_cast<int>(task % n_head_kv), t0,
            static_cast<int>(std::min<int64_t>(tile, nt - t0)));
  });
  return absl::OkStatus();
}

absl::Status PagedAttention(ThreadPool& pool, const PagedAttnArgs& pa, KernelImpl impl) {
  const graph::KvLayout& layout = pa.layout;
  if (pa.n_head <= 0 || pa.n_head_kv <= 0 || pa.n_head % pa.n_head_kv != 0 || pa.head_dim <= 0 ||
      static_cast<int64_t>(pa.n_head_kv) * pa.head_dim != layout.n_kv_embd) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention: n_head ", pa.n_head, ", n_head_kv ", pa.n_head_kv, ", head_dim ", pa.head_dim,
        " do not fit cache rows of ", layout.n_kv_embd));
  }
  if (layout.dtype != graph::DType::kF32 && layout.dtype != graph::DType::kF16 &&
      layout.dtype != graph::DType::kQ8_0 && layout.dtype != graph::DType::kFp8) {
    return absl::InvalidArgumentError("attention: unsupported cache type");
  }
  if (pa.kv_block <= 0 || (pa.kv_block & (pa.kv_block - 1)) != 0 ||
      layout.n_ctx % pa.kv_block != 0 || pa.max_blocks <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("paged attention: block of ", pa.kv_block,
                                                   " rows, ", pa.max_blocks,
                                                   " per sequence, cache of ", layout.n_ctx));
  }
  int shift = 0;
  while ((1 << shift) < pa.kv_block) ++shift;
  const int64_t n_cache_blocks = layout.n_ctx / pa.kv_block;
  const int64_t max_rows = static_cast<int64_t>(pa.max_blocks) * pa.kv_block;
  // Validate the batch description: tiles cover every token once, tables
  // point inside the cache for every row a token can see.
  std::vector<uint8_t> covered(pa.nt, 0);
  struct Task {
    int64_t t0;
    int n;
    const int32_t* table;
  };
  std::vector<Task> tasks;
  std::vector<const int32_t*> token_table(pa.nt, nullptr);
  const int group = pa.n_head / pa.n_head_kv;
  for (int64_t i = 0; i < pa.n_tiles; ++i) {
    const int32_t* tile = pa.tiles + 4 * i;
    const int32_t row = tile[0], t0 = tile[1], n = tile[2];
    if (n == 0) continue;
    if (row < 0 || row >= pa.n_table_rows || t0 < 0 || n < 0 || n > graph::kAttnTileTokens ||
        t0 + static_cast<int64_t>(n) > pa.nt) {
      return absl::InvalidArgumentError(absl::StrCat(
          "paged attention: tile ", i, " (table row ", row, ", tokens ", t0, "+", n,
          ") is outside ", pa.n_table_rows, " table rows / ", pa.nt, " tokens"));
    }
    const int32_t* table = pa.tables + static_cast<int64_t>(row) * pa.max_blocks;
    int32_t max_pos = -1;
    for (int64_t t = t0; t < t0 + n; ++t) {
      if (covered[t]) {
        return absl::InvalidArgumentError(
            absl::StrCat("paged attention: token ", t, " is in two tiles"));
      }
      covered[t] = 1;
      if (pa.pos[t] < 0 || pa.pos[t] >= max_rows) {
        return absl::OutOfRangeError(absl::StrCat("attention: position ", pa.pos[t],
                                                  " outside the sequence limit of ", max_rows));
      }
      max_pos = std::max(max_pos, pa.pos[t]);
      token_table[t] = table;
    }
    for (int64_t b = 0; b <= (max_pos >> shift); ++b) {
      if (table[b] < 0 || table[b] >= n_cache_blocks) {
        return absl::OutOfRangeError(absl::StrCat("attention: block table row ", row, " entry ",
                                                  b, " = ", table[b], " outside the ",
                                                  n_cache_blocks, " blocks of the cache"));
      }
    }
    const int sub = TileTokens(group, n);
    for (int64_t s0 = t0; s0 < t0 + n; s0 += sub) {
      tasks.push_back({s0, static_cast<int>(std::min<int64_t>(sub, t0 + n - s0)), table});
    }
  }
  for (int64_t t = 0; t < pa.nt; ++t) {
    if (!covered[t]) {
      return absl::InvalidArgumentError(
          absl::StrCat("paged attention: token ", t, " is in no tile"));
    }
  }
  const attn_internal::AttnArgs base{.q = pa.q,
                                     .pos = pa.pos,
                                     .nt = pa.nt,
                                     .n_head = pa.n_head,
                                     .n_head_kv = pa.n_head_kv,
                                     .head_dim = pa.head_dim,
                                     .scale = pa.scale,
                                     .dtype = layout.dtype,
                                     .n_kv_embd = layout.n_kv_embd,
                                     .row_bytes = layout.row_bytes(),
                                     .k_cache = pa.k_cache,
                                     .v_cache = pa.v_cache,
                                     .y = pa.y,
                                     .table = nullptr,
                                     .block_shift = shift,
                                     .window = pa.window,
                                     .sinks = pa.sinks};
  const int n_kv = pa.n_head_kv;
  if (impl == KernelImpl::kScalar || !GetCpuFeatures().HasAvx2Set()) {
    pool.ParallelFor(pa.nt * n_kv, [&](int64_t task, int) {
      thread_local std::vector<float> row, sc, acc;
      attn_internal::AttnArgs a = base;
      a.table = token_table[task / n_kv];
      AttendScalar(a, task / n_kv, static_cast<int>(task % n_kv), row, sc, acc);
    });
    return absl::OkStatus();
  }
  const CpuFeatures& cpu = GetCpuFeatures();
  auto* tile_fn = cpu.avx512f && cpu.avx512vl && impl == KernelImpl::kAuto
                      ? attn_internal::AttendTileAvx512Vl
                      : attn_internal::AttendTileAvx2;
  // Longest key ranges first, as in Attention().
  std::stable_sort(tasks.begin(), tasks.end(), [&](const Task& x, const Task& y) {
    return pa.pos[x.t0 + x.n - 1] > pa.pos[y.t0 + y.n - 1];
  });
  pool.ParallelFor(static_cast<int64_t>(tasks.size()) * n_kv, [&](int64_t i, int) {
    const Task& t = tasks[i / n_kv];
    attn_internal::AttnArgs a = base;
    a.table = t.table;
    tile_fn(a, static_cast<int>(i % n_kv), t.t0, t.n);
  });
  return absl::OkStatus();
}

}  // namespace minfer::cpu
