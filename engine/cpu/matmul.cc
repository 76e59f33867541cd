#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/cpu/kernels.h"
#include "engine/quant/blocks.h"
#include "engine/quant/vec_dot.h"

namespace minfer::cpu {
namespace {

// Tiles: a task covers kRowTile weight rows x kColTile tokens, so the rows'
// bytes stay in L1/L2 while the tile's activations stream past them.
constexpr int64_t kColTile = 64;

int64_t RowTile(int64_t n_rows, int64_t n_tasks_wanted) {
  int64_t t = (n_rows + n_tasks_wanted - 1) / n_tasks_wanted;
  t = std::clamp<int64_t>(t, 4, 64);
  return (t + 3) / 4 * 4;
}

absl::Status Unsupported(const graph::Weight& w) {
  return absl::UnimplementedError(absl::StrCat("cpu MatMul: no kernel for weight ", w.name,
                                               " of type ", GgmlTypeName(w.type)));
}

// Quantizes nt activation rows of k floats into scratch; returns the blocks.
const BlockQ8A* QuantizeActivations(ThreadPool& pool, const float* x, int64_t k, int64_t nt,
                                    std::vector<uint8_t>& scratch) {
  const int64_t blocks = k / 32;
  const size_t need = static_cast<size_t>(nt * blocks) * sizeof(BlockQ8A);
  if (scratch.size() < need) scratch.resize(need);
  BlockQ8A* a = reinterpret_cast<BlockQ8A*>(scratch.data());
  pool.ParallelRange(nt, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) QuantizeRowQ8A(x + t * k, a + t * blocks, k);
  });
  return a;
}

// Runs y[c * out_stride + r] = dot(W row r, activation c) over rows
// [0, n_rows) x columns [0, nt) in (row tile x column tile) tasks.
template <typename Fn>
void Tiled(ThreadPool& pool, int64_t n_rows, int64_t nt, Fn run_tile) {
  const int64_t col_tiles = (nt + kColTile - 1) / kColTile;
  const int64_t want = std::max<int64_t>(1, 4 * pool.num_threads() / col_tiles);
  const int64_t row_tile = RowTile(n_rows, want);
  const int64_t row_tiles = (n_rows + row_tile - 1) / row_tile;
  pool.ParallelFor(row_tiles * col_tiles, [&](int64_t task, int) {
    const int64_t rt = task % row_tiles, ct = task / row_tiles;
    const int64_t r0 = rt * row_tile, c0 = ct * kColTile;
    run_tile(r0, std::min(row_tile, n_rows - r0), c0, std::min(kColTile, nt - c0));
  });
}

}  // namespace

absl::Status MatMul(ThreadPool& pool, const graph::Weight& w, const float* x, int64_t nt,
                    float* y, std::vector<uint8_t>& scratch) {
  const int64_t k = w.ne0(), n = w.rows(), rb = w.row_bytes();
  if (const Q8AKernels* kq = GetQ8AKernels(w.type)) {
    if (k % 32 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cpu MatMul: ", w.name, " row length ", k, " is not a multiple of 32"));
    }
    const BlockQ8A* a = QuantizeActivations(pool, x, k, nt, scratch);
    const int64_t blocks = k / 32;
    Tiled(pool, n, nt, [&](int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
      kq->mat_dot(w.data + r0 * rb, rb, a + c0 * blocks, blocks, y + c0 * n + r0, n,
                  static_cast<int>(nr), static_cast<int>(nc), k);
    });
    return absl::OkStatus();
  }
  if (const F32Kernels* kf = GetF32Kernels(w.type)) {
    Tiled(pool, n, nt, [&](int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
      kf->mat_dot(w.data + r0 * rb, rb, x + c0 * k, k, y + c0 * n + r0, n, static_cast<int>(nr),
                  static_cast<int>(nc), k);
    });
    return absl::OkStatus();
  }
  return Unsupported(w);
}

absl::Status MatMulConcat(ThreadPool& pool, const std::vector<const graph::Weight*>& ws,
                          const float* x, float* y, std::vector<uint8_t>& scratch) {
  const int64_t k = ws[0]->ne0();
  bool all_quant = true;
  for (const graph::Weight* w : ws) all_quant = all_quant && GetQ8AKernels(w->type) != nullptr;
  const BlockQ8A* a = nullptr;
  if (all_quant) {
    if (k % 32 != 0) {
      return absl::InvalidArgumentError(absl::StrCat("cpu FusedQKV: row length ", k,
                                                     " is not a multiple of 32"));
    }
    a = QuantizeActivations(pool, x, k, 1, scratch);
  }
  // One task list over the rows of all weights.
  struct Part {
    const graph::Weight* w;
    int64_t out_offset;
  };
  std::vector<Part> parts;
  int64_t total = 0;
  for (const graph::Weight* w : ws) {
    if (GetQ8AKernels(w->type) == nullptr && GetF32Kernels(w->type) == nullptr) {
      return Unsupported(*w);
    }
    parts.push_back({w, total});
    total += w->rows();
  }
  std::vector<uint8_t> local;  // mixed float/quant sets quantize per weight
  const int64_t row_tile = RowTile(total, 4 * pool.num_threads());
  const int64_t tiles = (total + row_tile - 1) / row_tile;
  pool.ParallelFor(tiles, [&](int64_t task, int) {
    int64_t r = task * row_tile;
    const int64_t r_end = std::min(total, r + row_tile);
    for (const Part& p : parts) {
      const int64_t lo = std::max(r, p.out_offset), hi = std::min(r_end, p.out_offset + p.w->rows());
      if (lo >= hi) continue;
      const int64_t rb = p.w->row_bytes();
      const uint8_t* wrow = p.w->data + (lo - p.out_offset) * rb;
      if (all_quant) {
        GetQ8AKernels(p.w->type)->mat_dot(wrow, rb, a, 0, y + lo, 0, static_cast<int>(hi - lo), 1, k);
      } else if (const F32Kernels* kf = GetF32Kernels(p.w->type)) {
        kf->mat_dot(wrow, rb, x, 0, y + lo, 0, static_cast<int>(hi - lo), 1, k);
      } else {
        // Quantized weight among float ones: per-row vec_dot on the fly.
        std::vector<BlockQ8A> qa(k / 32);
        QuantizeRowQ8A(x, qa.data(), k);
        const Q8AKernels* kq = GetQ8AKernels(p.w->type);
        for (int64_t i = lo; i < hi; ++i) y[i] = kq->vec_dot(wrow + (i - lo) * rb, qa.data(), k);
      }
    }
  });
  return absl::OkStatus();
}

absl::Status FusedFfn(ThreadPool& pool, const graph::Weight& wg, const graph::Weight& wu,
                      const float* x, float* y, std::vector<uint8_t>& scratch) {
  const int64_t n = wg.rows();
  std::vector<const graph::Weight*> ws = {&wg, &wu};
  std::vector<float> both(2 * n);
  absl::Status s = MatMulConcat(pool, ws, x, both.data(), scratch);
  if (!s.ok()) return s;
  for (int64_t i = 0; i < n; ++i) {
    const float g = both[i];
    y[i] = g / (1.0f + std::exp(-g)) * both[n + i];
  }
  return absl::OkStatus();
}

}  // namespace minfer::cpu
