// Mixture-of-experts kernels of the CPU backend (graph.h: MoeRoute, MoeFFN).
//
// MoeFFN runs a batch of tokens as (token, expert) assignments grouped by
// expert, so each expert's rows stream once for all the tokens that chose
// it, in two parallel passes over the whole layer (gate and up of every
// chosen expert, then down), not one pass per expert: at one token that is
// 2 pool dispatches for 8 experts instead of 24 small ones. Each
// assignment's values are those of a MatMul of the expert's slice on the
// token alone (mat_dot is bit-identical to vec_dot per row and column), so
// batched and alone results agree bit for bit.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/vec_math.h"
#include "engine/quant/blocks.h"
#include "engine/quant/vec_dot.h"

namespace minfer::cpu {
namespace {

int32_t IdBits(float f) {
  int32_t i;
  std::memcpy(&i, &f, 4);
  return i;
}

float BitsFloat(int32_t i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}

// One expert's 2-D slice of a 3-D expert weight [ne0, ne1, n_expert].
graph::Weight Slice(const graph::Weight& w, int64_t e) {
  graph::Weight s;
  s.name = w.name;
  s.type = w.type;
  s.dims = {w.dims[0], w.dims[1]};
  const uint64_t bytes = static_cast<uint64_t>(w.dims[1]) * RowBytes(w.type, w.dims[0]);
  s.data = w.data + e * bytes;
  s.nbytes = bytes;
  return s;
}

// The activations of a group of assignments in the form a weight's kernel
// reads: Q8A blocks (quantized weights) or floats.
struct Acts {
  std::vector<BlockQ8A> q;  // [A, k / 32]
  std::vector<float> f;     // [A, k]
};

// How one weight's rows against a range of assignment columns run.
struct Pass {
  const graph::Weight* w3 = nullptr;  // the 3-D weight
  const Q8AKernels* kq = nullptr;
  const F32Kernels* kf = nullptr;
  const Acts* acts = nullptr;
  int64_t k = 0;    // row length
  float* out = nullptr;  // [rows, A]: column a at out + a * rows
};

absl::Status KernelsFor(const graph::Weight& w, Pass& p) {
  p.kq = GetQ8AKernels(w.type);
  p.kf = p.kq ? nullptr : GetF32Kernels(w.type);
  if (!p.kq && !p.kf) {
    return absl::UnimplementedError(absl::StrCat("cpu MoeFFN: no kernel for weight ", w.name,
                                                 " of type ", GgmlTypeName(w.type)));
  }
  if (p.kq && w.ne0() % 32 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu MoeFFN: ", w.name, " row length ", w.ne0(), " is not a multiple of 32"));
  }
  return absl::OkStatus();
}

struct Task {
  const Pass* pass;
  int64_t expert;
  int64_t r0, nr;  // rows
  int64_t c0, nc;  // assignment columns (grouped order)
};

// Runs every pass's rows over each expert's assignment columns
// [start[e], start[e + 1]) in one parallel dispatch.
void RunPasses(ThreadPool& pool, const std::vector<Pass>& passes,
               const std::vector<int64_t>& start) {
  const int64_t n_exp = static_cast<int64_t>(start.size()) - 1;
  int64_t total_rows = 0;
  for (const Pass& p : passes) {
    for (int64_t e = 0; e < n_exp; ++e) {
      if (start[e + 1] > start[e]) total_rows += p.w3->dims[1];
    }
  }
  // About 4 tasks per thread, whole groups of 8 rows, at most 64 rows.
  int64_t tile = (total_rows + 4 * pool.num_threads() - 1) / (4 * pool.num_threads());
  tile = (std::clamp<int64_t>(tile, 8, 64) + 7) / 8 * 8;
  constexpr int64_t kCols = 64;
  std::vector<Task> tasks;
  for (const Pass& p : passes) {
    const int64_t rows = p.w3->dims[1];
    for (int64_t e = 0; e < n_exp; ++e) {
      for (int64_t c0 = start[e]; c0 < start[e + 1]; c0 += kCols) {
        const int64_t nc = std::min(kCols, start[e + 1] - c0);
        for (int64_t r0 = 0; r0 < rows; r0 += tile) {
          tasks.push_back({&p, e, r0, std::min(tile, rows - r0), c0, nc});
        }
      }
    }
  }
  pool.ParallelFor(static_cast<int64_t>(tasks.size()), [&](int64_t i, int) {
    const Task& t = tasks[i];
    const Pass& p = *t.pass;
    const graph::Weight s = Slice(*p.w3, t.expert);
    const int64_t rb = s.row_bytes(), rows = s.dims[1];
    float* y = p.out + t.c0 * rows + t.r0;
    if (p.kq) {
      const int64_t blocks = p.k / 32;
      p.kq->mat_dot(s.data + t.r0 * rb, rb, p.acts->q.data() + t.c0 * blocks, blocks, y, rows,
                    static_cast<int>(t.nr), static_cast<int>(t.nc), p.k);
    } else {
      p.kf->mat_dot(s.data + t.r0 * rb, rb, p.acts->f.data() + t.c0 * p.k, p.k, y, rows,
                    static_cast<int>(t.nr), static_cast<int>(t.nc), p.k);
    }
  });
}

// Fills `acts` with the rows src(a) (k floats each) of the A assignments, in
// the forms the passes reading it need.
template <typename Src>
void Gather(ThreadPool& pool, int64_t A, int64_t k, bool need_q, bool need_f, Src src,
            Acts& acts) {
  if (need_q) acts.q.resize(static_cast<size_t>(A * (k / 32)));
  if (need_f) acts.f.resize(static_cast<size_t>(A * k));
  pool.ParallelRange(A, 1, [&](int64_t b, int64_t e) {
    for (int64_t a = b; a < e; ++a) {
      const float* row = src(a);
      if (need_q) QuantizeRowQ8A(row, acts.q.data() + a * (k / 32), k);
      if (need_f) std::memcpy(acts.f.data() + a * k, row, k * 4);
    }
  });
}

float SwigluOai(float g, float u, float alpha, float limit) {
  const float x = std::min(g, limit);
  const float y = std::clamp(u, -limit, limit);
  return x / (1.0f + std::exp(-alpha * x)) * (y + 1.0f);
}

}  // namespace

absl::Status MoeRouteRows(const float* logits, int64_t n_expert, int64_t nt,
                          const graph::OpParams& p, float* out, const float* bias) {
  const int64_t k = p.n_expert_used;
  if (k < 1 || k > n_expert) {
    return absl::InvalidArgumentError(absl::StrCat("cpu MoeRoute: ", k, " experts per token of ",
                                                   n_expert));
  }
  std::vector<float> score(n_expert);
  std::vector<int32_t> order(n_expert);
  std::vector<float> biased(bias != nullptr ? n_expert : 0);
  for (int64_t t = 0; t < nt; ++t) {
    const float* l = logits + t * n_expert;
    if (bias != nullptr) {
      for (int64_t e = 0; e < n_expert; ++e) biased[e] = l[e] + bias[e];
      l = biased.data();
    }
    if (p.moe_gating == graph::MoeGating::kSoftmax) {
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t e = 0; e < n_expert; ++e) mx = std::max(mx, l[e]);
      double sum = 0;
      for (int64_t e = 0; e < n_expert; ++e) {
        score[e] = std::exp(l[e] - mx);
        sum += score[e];
      }
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t e = 0; e < n_expert; ++e) score[e] *= inv;
    } else {
      std::copy(l, l + n_expert, score.begin());
    }
    std::iota(order.begin(), order.end(), 0);
    // NaN scores sort last, so a broken router never picks them first.
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      const float sa = score[a], sb = score[b];
      if (std::isnan(sa) != std::isnan(sb)) return !std::isnan(sa);
      return sa > sb || (sa == sb && a < b);
    });
    float* o = out + t * 2 * k;
    for (int64_t j = 0; j < k; ++j) o[j] = score[order[j]];
    if (p.moe_gating == graph::MoeGating::kSoftmaxWeight) {
      const float mx = o[0];
      double sum = 0;
      for (int64_t j = 0; j < k; ++j) {
        o[j] = std::exp(o[j] - mx);
        sum += o[j];
      }
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t j = 0; j < k; ++j) o[j] *= inv;
    }
    if (p.moe_norm) {
      float sum = 0;
      for (int64_t j = 0; j < k; ++j) sum += o[j];
      sum = std::max(sum, 6.103515625e-5f);
      for (int64_t j = 0; j < k; ++j) o[j] /= sum;
    }
    if (p.moe_scale != 0.0f) {
      for (int64_t j = 0; j < k; ++j) o[j] *= p.moe_scale;
    }
    for (int64_t j = 0; j < k; ++j) o[k + j] = BitsFloat(order[j]);
  }
  return absl::OkStatus();
}

absl::Status MoeFfn(ThreadPool& pool, const graph::Node& node, const float* x, const float* route,
                    int64_t nt, float* y) {
  const graph::Weight& G = *node.weights[0];
  const graph::Weight& U = *node.weights[1];
  const graph::Weight& D = *node.weights[2];
  const graph::Weight* bg = node.weights.size() > 3 ? node.weights[3] : nullptr;
  const graph::Weight* bu = node.weights.size() > 4 ? node.weights[4] : nullptr;
  const graph::Weight* bd = node.weights.size() > 5 ? node.weights[5] : nullptr;
  const int64_t E = G.dims[0], F = G.dims[1], n_exp = G.dims[2];
  const int64_t k = node.p.n_expert_used;
  const int64_t A = nt * k;

  // Assignments grouped by expert: start[e] .. start[e + 1] index `order`,
  // whose entries are t * k + j (token t's j-th choice).
  std::vector<int64_t> start(n_exp + 1, 0);
  for (int64_t a = 0; a < A; ++a) {
    const int32_t e = IdBits(route[(a / k) * 2 * k + k + a % k]);
    if (e < 0 || e >= n_exp) {
      return absl::InvalidArgumentError(absl::StrCat("cpu MoeFFN ", node.name, ": token ", a / k,
                                                     " routed to expert ", e, " of ", n_exp));
    }
    ++start[e + 1];
  }
  for (int64_t e = 0; e < n_exp; ++e) start[e + 1] += start[e];
  std::vector<int64_t> order(A), slot(A);  // slot: the grouped column of t * k + j
  {
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t a = 0; a < A; ++a) {
      const int32_t e = IdBits(route[(a / k) * 2 * k + k + a % k]);
      slot[a] = fill[e];
      order[fill[e]++] = a;
    }
  }
  auto expert_of = [&](int64_t col) {
    return IdBits(route[(order[col] / k) * 2 * k + k + order[col] % k]);
  };

  // Pass 1: gate and up of every assignment.
  Pass pg, pu;
  RETURN_IF_ERROR(KernelsFor(G, pg));
  RETURN_IF_ERROR(KernelsFor(U, pu));
  // Reused across calls (per calling thread: backends may run on several).
  // Named through references below: a lambda that named a thread_local
  // directly would see the pool worker's own instance.
  thread_local Acts tl_x_acts, tl_h_acts;
  thread_local std::vector<float> tl_g, tl_u, tl_d;
  Acts& x_acts = tl_x_acts;
  Acts& h_acts = tl_h_acts;
  std::vector<float>& g_out = tl_g;
  std::vector<float>& u_out = tl_u;
  std::vector<float>& d_out = tl_d;
  Gather(pool, A, E, pg.kq || pu.kq, pg.kf || pu.kf,
         [&](int64_t col) { return x + (order[col] / k) * E; }, x_acts);
  g_out.resize(static_cast<size_t>(A * F));
  u_out.resize(static_cast<size_t>(A * F));
  pg.w3 = &G, pg.acts = &x_acts, pg.k = E, pg.out = g_out.data();
  pu.w3 = &U, pu.acts = &x_acts, pu.k = E, pu.out = u_out.data();
  RunPasses(pool, {pg, pu}, start);

  // Biases and the activation, written over g_out.
  const float* bgp = bg ? reinterpret_cast<const float*>(bg->data) : nullptr;
  const float* bup = bu ? reinterpret_cast<const float*>(bu->data) : nullptr;
  const graph::OpParams& p = node.p;
  pool.ParallelRange(A, 1, [&](int64_t b, int64_t e_) {
    for (int64_t col = b; col < e_; ++col) {
      const int64_t e = expert_of(col);
      float* g = g_out.data() + col * F;
      float* u = u_out.data() + col * F;
      if (bgp) AddF32Row(g, bgp + e * F, g, F);
      if (bup) AddF32Row(u, bup + e * F, u, F);
      if (p.moe_act == graph::MoeAct::kSilu) {
        SwiGluF32Row(g, u, g, F);
      } else {
        for (int64_t i = 0; i < F; ++i) g[i] = SwigluOai(g[i], u[i], p.moe_alpha, p.moe_limit);
      }
    }
  });

  // Pass 2: down.
  Pass pd;
  RETURN_IF_ERROR(KernelsFor(D, pd));
  Gather(pool, A, F, pd.kq != nullptr, pd.kf != nullptr,
         [&](int64_t col) { return g_out.data() + col * F; }, h_acts);
  d_out.resize(static_cast<size_t>(A * E));
  pd.w3 = &D, pd.acts = &h_acts, pd.k = F, pd.out = d_out.data();
  RunPasses(pool, {pd}, start);

  // The weighted sum per token, in route order.
  const float* bdp = bd ? reinterpret_cast<const float*>(bd->data) : nullptr;
  pool.ParallelRange(nt, 1, [&](int64_t b, int64_t e_) {
    for (int64_t t = b; t < e_; ++t) {
      float* out = y + t * E;
      std::fill(out, out + E, 0.0f);
      for (int64_t j = 0; j < k; ++j) {
        const float w = route[t * 2 * k + j];
        const int64_t col = slot[t * k + j];
        const float* d = d_out.data() + col * E;
        const float* bias = bdp ? bdp + IdBits(route[t * 2 * k + k + j]) * E : nullptr;
        for (int64_t i = 0; i < E; ++i) out[i] += w * (bias ? d[i] + bias[i] : d[i]);
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace minfer::cpu
