// The CUDA backend's attention-block handlers: RoPE, the q/k/v epilogue
// (biases, RoPE and the KV store in one launch), the KV store, and
// attention (contiguous or paged; decode or prefill).
#include "cuda/backend/cuda_backend.h"

#include <climits>

#include "absl/strings/str_cat.h"
#include "cuda/kernels/ops.h"
#include "engine/base/status.h"

namespace minfer::cuda {

using graph::ExecArgs;
using graph::Node;

namespace {

KvType ToKvType(graph::DType t) {
  switch (t) {
    case graph::DType::kF16: return KvType::kF16;
    case graph::DType::kQ8_0: return KvType::kQ8_0;
    case graph::DType::kFp8: return KvType::kFp8;
    default: return KvType::kF32;
  }
}

// A node's YaRN parameters as the kernels take them.
RopeYarnArgs YarnArgs(const graph::RopeYarn& y) {
  RopeYarnArgs a;
  a.freq_scale = y.freq_scale;
  a.ext_factor = y.ext_factor;
  a.attn_factor = y.attn_factor;
  a.beta_fast = y.beta_fast;
  a.beta_slow = y.beta_slow;
  a.n_ctx_orig = y.n_ctx_orig;
  return a;
}

}  // namespace

absl::Status CudaBackend::RunRope(const OpArgs& o) {
  const Node& n = o.n;
  float* out = o.out;
  cudaStream_t st = o.st;
  if (n.p.rope_style != graph::RopeStyle::kNeoX &&
      n.p.rope_style != graph::RopeStyle::kInterleaved) {
    return absl::InvalidArgumentError(absl::StrCat("cuda RoPE ", n.name, ": unsupported style ",
                                                   static_cast<int>(n.p.rope_style)));
  }
  const auto& s = n.shape;
  // The factors are read on the host (the weight's mapped bytes) into
  // the launch's frequency table.
  const graph::Weight* factors = graph::RopeFactors(n);
  const RopeYarnArgs yarn = YarnArgs(n.p.yarn);
  return Check(LaunchRope(o.f(0), o.i32(1), out, s.ne[0], s.ne[1], s.ne[2], n.p.n_rot,
                          n.p.rope_style == graph::RopeStyle::kNeoX ? 0 : 1, n.p.rope_base, st,
                          factors ? reinterpret_cast<const float*>(factors->data) : nullptr,
                          &yarn),
               "RoPE");
}

absl::Status CudaBackend::RunQkvBiasRopeStore(const OpArgs& o) {
  const Node& n = o.n;
  const ExecArgs& a = o.a;
  float* out = o.out;
  cudaStream_t st = o.st;
  int32_t* err_flag = o.err_flag;
  const auto& p = n.p;
  if (a.kv == nullptr) return absl::InternalError("QkvBiasRopeStore without a KV binding");
  const int64_t nq = static_cast<int64_t>(p.n_head) * p.head_dim;
  const int64_t nkv = static_cast<int64_t>(p.n_head_kv) * p.head_dim;
  if (nkv != a.kv_layout.n_kv_embd) {
    return absl::InvalidArgumentError(absl::StrCat("cuda QkvBiasRopeStore ", n.name, ": n_kv_embd ",
                                                   nkv, " != cache row ", a.kv_layout.n_kv_embd));
  }
  const int64_t nt = n.shape.ne[2];
  const float *q, *k, *v;
  size_t pos_index;
  // FusedQKV's split-k partials (pending_), summed here as they are read.
  QkvPartials partials;
  bool from_partials = false;
  if (const PendingSums* ps = PendingAt(a.inputs[0]);
      ps != nullptr && graph::QkvParts(n) == 1 && ps->n == 3 && ps->residual == nullptr &&
      ps->count[0] == nq * nt && ps->count[1] == nkv * nt && ps->count[2] == nkv * nt) {
    for (int i = 0; i < 3; ++i) {
      partials.splits[i] = ps->sum[i].splits;
      partials.stride[i] = ps->sum[i].stride;
    }
    q = ps->sum[0].part;
    k = ps->sum[1].part;
    v = ps->sum[2].part;
    pos_index = 1;
    from_partials = true;
    pending_.reset();
    stats_.pending_summed++;
  } else if (graph::QkvParts(n) == 1) {
    RETURN_IF_ERROR(ResolvePending());
    // One planar FusedQKV output: q [nq, nt], k [nkv, nt], v [nkv, nt].
    q = o.f(0);
    k = q + nq * nt;
    v = k + nkv * nt;
    pos_index = 1;
  } else {
    RETURN_IF_ERROR(ResolvePending());
    q = o.f(0);
    k = o.f(1);
    v = o.f(2);
    pos_index = 3;
  }
  if (a.inputs[pos_index].bytes / 4 != nt) {
    return absl::InvalidArgumentError(absl::StrCat("cuda QkvBiasRopeStore ", n.name, ": ",
                                                   a.inputs[pos_index].bytes / 4,
                                                   " positions for ", nt, " tokens"));
  }
  const float* bias[3] = {nullptr, nullptr, nullptr};
  const graph::Weight* factors = graph::RopeFactors(n);  // host bytes, as for RoPE
  for (int j = 0; j < 3; ++j) {
    ASSIGN_OR_RETURN(const WeightView* w, Weight(n.weights[j]));
    if (w) bias[j] = static_cast<const float*>(w->data);
  }
  ASSIGN_OR_RETURN(const WeightView* qn, Weight(graph::QkvQNorm(n)));
  ASSIGN_OR_RETURN(const WeightView* kn, Weight(graph::QkvKNorm(n)));
  ASSIGN_OR_RETURN(uint8_t * kc, Ptr(a.kv->k, a.kv->k.bytes));
  ASSIGN_OR_RETURN(uint8_t * vc, Ptr(a.kv->v, a.kv->v.bytes));
  AttnParams ap;
  ap.n_head = p.n_head;
  ap.n_head_kv = p.n_head_kv;
  ap.head_dim = p.head_dim;
  ap.n_ctx = a.kv_layout.n_ctx;
  ap.kv_type = ToKvType(a.kv_layout.dtype);
  const int32_t* rows = graph::QkvHasRows(n) ? o.i32(pos_index + 1) : nullptr;
  const RopeYarnArgs yarn = YarnArgs(p.yarn);
  if (rows != nullptr && a.inputs[pos_index + 1].bytes / 4 != nt) {
    return absl::InvalidArgumentError(absl::StrCat("cuda QkvBiasRopeStore ", n.name, ": ",
                                                   a.inputs[pos_index + 1].bytes / 4,
                                                   " cache rows for ", nt, " tokens"));
  }
  return Check(LaunchQkvBiasRopeStore(q, k, v, bias[0], bias[1], bias[2], o.i32(pos_index), nt,
                                      out, kc, vc, ap,
                                      p.rope_style == graph::RopeStyle::kNeoX ? 0 : 1,
                                      p.rope_base, err_flag, st, rows,
                                      factors ? reinterpret_cast<const float*>(factors->data)
                                              : nullptr,
                                      qn ? static_cast<const float*>(qn->data) : nullptr,
                                      kn ? static_cast<const float*>(kn->data) : nullptr, p.eps,
                                      &yarn, from_partials ? &partials : nullptr),
               "QkvBiasRopeStore");
}

absl::Status CudaBackend::RunKvStore(const OpArgs& o) {
  const Node& n = o.n;
  const ExecArgs& a = o.a;
  cudaStream_t st = o.st;
  int32_t* err_flag = o.err_flag;
  if (a.kv == nullptr) return absl::InternalError("KvcacheStore without a KV binding");
  const int64_t nt = a.inputs[2].bytes / 4;
  const int64_t nkv = a.kv_layout.n_kv_embd;
  if (a.inputs[0].bytes / 4 != nt * nkv || a.inputs[1].bytes / 4 != nt * nkv) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda KvcacheStore ", n.name, ": buffer size mismatch: k has ", a.inputs[0].bytes / 4,
        ", v ", a.inputs[1].bytes / 4, " values for ", nt, " tokens x n_kv_embd ", nkv));
  }
  ASSIGN_OR_RETURN(uint8_t * kc, Ptr(a.kv->k, a.kv->k.bytes));
  ASSIGN_OR_RETURN(uint8_t * vc, Ptr(a.kv->v, a.kv->v.bytes));
  return Check(LaunchKvStore(o.f(0), o.f(1), o.i32(2), nt, kc, vc, ToKvType(a.kv_layout.dtype), nkv,
                             a.kv_layout.n_ctx, err_flag, st),
               "KvcacheStore");
}

absl::Status CudaBackend::RunAttention(const OpArgs& o) {
  const Node& n = o.n;
  const ExecArgs& a = o.a;
  float* out = o.out;
  cudaStream_t st = o.st;
  const auto& p = n.p;
  const int64_t nkt = a.kv_layout.n_kv_embd;
  if (nkt != static_cast<int64_t>(p.n_head_kv) * p.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat("cuda Attn ", n.name, ": cache row ", nkt,
                                                   " != n_head_kv ", p.n_head_kv, " x head_dim ",
                                                   p.head_dim));
  }
  if (p.head_dim > 128 || p.head_dim % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cuda Attn ", n.name, ": head_dim ",
                                                   p.head_dim, " (needs <= 128 and % 4 == 0)"));
  }
  if (p.n_head_kv <= 0 || p.n_head % p.n_head_kv != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cuda Attn ", n.name, ": GQA ratio n_head ",
                                                   p.n_head, " / n_head_kv ", p.n_head_kv,
                                                   " is not an integer"));
  }
  AttnParams ap;
  ap.n_head = p.n_head;
  ap.n_head_kv = p.n_head_kv;
  ap.head_dim = p.head_dim;
  ap.scale = p.scale;
  ap.n_ctx = a.kv_layout.n_ctx;
  ap.kv_type = ToKvType(a.kv_layout.dtype);
  ap.window = p.attn_window;
  if (!n.weights.empty() && n.weights[0] != nullptr) {
    ASSIGN_OR_RETURN(const WeightView* sinks, Weight(n.weights[0]));
    if (sinks->type != GgmlType::kF32 || sinks->k * sinks->rows < p.n_head) {
      return absl::InvalidArgumentError(absl::StrCat("cuda Attn ", n.name, ": sinks '",
                                                     n.weights[0]->name, "' are not f32 [",
                                                     p.n_head, "]"));
    }
    ap.sinks = static_cast<const float*>(sinks->data);
  }
  const int64_t nt = n.shape.ne[1];
  // Decode steps of MMVQ size (every tile one token) write the output's q8
  // plane too (MINFER_ATTN_Q8), so the output projection skips its quantize
  // launch; its memo is set after the launch.
  const int64_t n_embd = static_cast<int64_t>(p.n_head) * p.head_dim;
  const bool q8_out = knobs_.attn_q8 && p.head_dim % 32 == 0 && nt <= kMmvqMaxTokens &&
                      (nt == 1 || p.single_token_tiles);
  BlockQ8A* q8 = nullptr;
  if (q8_out) {
    ASSIGN_OR_RETURN(q8, Q8Plane(a.output, n_embd, nt));
  }
  if (p.kv_block > 0) {
    // Paged (many sequences): decode tiles on the split-KV kernel,
    // prefill tiles on the prefill kernel; both grids are static over
    // the graph's tile count and read the tiles on the device.
    AttnPaged pg;
    pg.tiles = o.i32(4);
    pg.n_tiles = a.inputs[4].bytes / 16;
    pg.tables = o.i32(5);
    pg.max_blocks = p.max_blocks;
    pg.kv_block = p.kv_block;
    ASSIGN_OR_RETURN(void* partial, Scratch("attn_partial",
                                            AttnPagedPartialFloats(ap, pg.n_tiles) * 4));
    if (knobs_.attn_fused_combine) {
      ASSIGN_OR_RETURN(void* counters, ZeroedScratch("attn_counters",
                                                     AttnDecodeCounters(ap, pg.n_tiles) * 4));
      pg.counters = static_cast<int32_t*>(counters);
    }
    pg.q8 = q8;
    pg.long_min_rows = PagedLongMinRows(knobs_.attn_paged_long_min, pg.n_tiles);
    RETURN_IF_ERROR(Check(LaunchAttnDecodePaged(o.f(0), o.i32(3), o.in[1], o.in[2],
                                                static_cast<float*>(partial), out, ap, pg, st),
                          "attention decode (paged)"));
    if (q8 != nullptr) memos_.SetQ8(a.output, n_embd * nt * 4);
    // One decode token, or a step of decode tokens only: no multi-token tiles.
    if (nt == 1 || p.single_token_tiles) return absl::OkStatus();
    const bool tc = knobs_.attn_prefill_tc && nt >= kAttnPrefillTcMinTokens;
    return Check(LaunchAttnPrefillPaged(o.f(0), o.i32(3), o.in[1], o.in[2], out, ap, pg, tc, st),
                 "attention prefill (paged)");
  }
  if (nt == 1) {
    ASSIGN_OR_RETURN(void* partial, Scratch("attn_partial",
                                            AttnDecodePartialFloats(ap) * 4));
    AttnDecodeConfig cfg;
    if (knobs_.attn_fused_combine) {
      ASSIGN_OR_RETURN(void* counters,
                       ZeroedScratch("attn_counters", AttnDecodeCounters(ap, 1) * 4));
      cfg.counters = static_cast<int32_t*>(counters);
    }
    cfg.q8 = q8;
    RETURN_IF_ERROR(Check(LaunchAttnDecodeConfigured(o.f(0), o.i32(3), o.in[1], o.in[2],
                                                     static_cast<float*>(partial), out, ap, cfg,
                                                     st),
                          "attention decode"));
    if (q8 != nullptr) memos_.SetQ8(a.output, n_embd * 4);
    return absl::OkStatus();
  }
  // The tensor-core kernel (f16 KV, nt >= 16) is opt-in until it has
  // been validated on hardware; otherwise the CUDA-core kernel.
  AttnPrefillConfig cfg;
  if (!knobs_.attn_prefill_tc) cfg.tc_min_tokens = INT64_MAX;
  return Check(LaunchAttnPrefillConfigured(o.f(0), o.i32(3), nt, o.in[1], o.in[2], out, ap, cfg, st),
               "attention prefill");
}

}  // namespace minfer::cuda
