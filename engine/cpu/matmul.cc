#include <algorithm>
#include <atomic>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/vec_math.h"
#include "engine/quant/blocks.h"
#include "engine/quant/vec_dot.h"

namespace minfer::cpu {
namespace {

// Tiles: a task covers kRowTile weight rows x kColTile tokens, so the rows'
// bytes stay in L1/L2 while the tile's activations stream past them.
constexpr int64_t kColTile = 64;

// mat_dot works on groups of 8 rows and a partial group costs a full one, so
// slices are whole groups.
int64_t RowTile(int64_t n_rows, int64_t n_tasks_wanted) {
  int64_t t = (n_rows + n_tasks_wanted - 1) / n_tasks_wanted;
  t = std::clamp<int64_t>(t, 8, 64);
  return (t + 7) / 8 * 8;
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

// Decode-shaped (1-2 column) matmuls stream their weights once and are
// bound by memory bandwidth, so what matters is that all threads keep
// streaming until the end. Rows are handed out in shrinking chunks (guided
// scheduling): a thread claims (remaining / 2T) rows at a time, so the first
// claims are big (few atomics, which bounce between cores) and the last are
// small (threads finish within a small chunk of each other), whatever the
// matrix size. A chunk is whole 8-row groups and at least kMinChunkBytes of
// weights, so a claim (~0.1-0.2 us) stays small next to its work.
constexpr int64_t kMinChunkBytes = 16 << 10;

template <typename Fn>
void GuidedRows(ThreadPool& pool, int64_t n_rows, int64_t row_bytes, Fn run_rows) {
  const int threads = pool.num_threads();
  const int64_t min_rows =
      (std::max<int64_t>(8, kMinChunkBytes / std::max<int64_t>(1, row_bytes)) + 7) / 8 * 8;
  if (threads == 1 || n_rows <= min_rows) {
    run_rows(0, n_rows);
    return;
  }
  std::atomic<int64_t> cursor{0};
  pool.ParallelFor(threads, [&](int64_t, int) {
    int64_t cur = cursor.load(std::memory_order_relaxed);
    while (cur < n_rows) {
      const int64_t want = (n_rows - cur) / (2 * threads) / 8 * 8;
      const int64_t end = std::min(n_rows, cur + std::max(min_rows, want));
      if (cursor.compare_exchange_weak(cur, end, std::memory_order_relaxed)) {
        run_rows(cur, end - cur);
        cur = cursor.load(std::memory_order_relaxed);
      }
    }
  });
}

// Runs y[c * out_stride + r] = dot(W row r, activation c) over rows
// [0, n_rows) x columns [0, nt): guided row chunks for decode shapes, else
// (row tile x column tile) tasks, so that a tile's activations (kColTile
// columns, which mat_dot's transposed path consumes 64 at a time) stay in L2
// while the rows stream past them.
template <typename Fn>
void Tiled(ThreadPool& pool, int64_t n_rows, int64_t row_bytes, int64_t nt, Fn run_tile) {
  if (nt <= 2) {
    GuidedRows(pool, n_rows, row_bytes,
               [&](int64_t r0, int64_t nr) { run_tile(r0, nr, int64_t{0}, nt); });
    return;
  }
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
    Tiled(pool, n, rb, nt, [&](int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
      kq->mat_dot(w.data + r0 * rb, rb, a + c0 * blocks, blocks, y + c0 * n + r0, n,
                  static_cast<int>(nr), static_cast<int>(nc), k);
    });
    return absl::OkStatus();
  }
  if (const F32Kernels* kf = GetF32Kernels(w.type)) {
    Tiled(pool, n, rb, nt, [&](int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
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
  int64_t max_row_bytes = 0;
  for (const graph::Weight* w : ws) max_row_bytes = std::max(max_row_bytes, w->row_bytes());
  std::vector<BlockQ8A> qa;  // a quantized weight among float ones
  if (!all_quant) {
    for (const graph::Weight* w : ws) {
      if (GetQ8AKernels(w->type) != nullptr && GetF32Kernels(w->type) == nullptr) {
        if (k % 32 != 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "cpu FusedQKV: row length ", k, " is not a multiple of 32"));
        }
        qa.resize(k / 32);
        QuantizeRowQ8A(x, qa.data(), k);
        break;
      }
    }
  }
  GuidedRows(pool, total, max_row_bytes, [&](int64_t r, int64_t nr) {
    const int64_t r_end = r + nr;
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
        const Q8AKernels* kq = GetQ8AKernels(p.w->type);
        kq->mat_dot(wrow, rb, qa.data(), 0, y + lo, 0, static_cast<int>(hi - lo), 1, k);
      }
    }
  });
  return absl::OkStatus();
}

absl::Status FusedFfn(ThreadPool& pool, const graph::Weight& wg, const graph::Weight& wu,
                      const float* x, int64_t nt, float* y, std::vector<uint8_t>& scratch) {
  const int64_t n = wg.rows(), k = wg.ne0();
  std::vector<const graph::Weight*> ws = {&wg, &wu};
  // Reused across calls (a fresh zeroed 2 x n_ff vector per layer and token
  // costs more than the SwiGLU itself); thread_local as backends may run on
  // several threads.
  thread_local std::vector<float> both;
  if (both.size() < static_cast<size_t>(2 * n)) both.resize(2 * n);
  for (int64_t t = 0; t < nt; ++t) {
    absl::Status s = MatMulConcat(pool, ws, x + t * k, both.data(), scratch);
    if (!s.ok()) return s;
    SwiGluF32Row(both.data(), both.data() + n, y + t * n, n);
  }
  return absl::OkStatus();
}

}  // namespace minfer::cpu
