// The CUDA backend's matmul handlers (MatMul, FusedQKV, FusedFFN) and the
// decision tree they share: MMVQ / f32 matvec for decode shapes, the
// dequantizing f16 GEMM for decode batches of Q4_K / Q6_K, the few-token
// GEMM, MMQ or the f16 GEMM for prefill shapes; the activation
// quantizations and their memos.
#include "cuda/backend/cuda_backend.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cuda/kernels/dq_gemm.h"
#include "cuda/kernels/matmul.h"
#include "cuda/kernels/mmq.h"
#include "cuda/kernels/ops.h"
#include "engine/base/logging.h"
#include "engine/base/status.h"

namespace minfer::cuda {

using graph::BufferRef;
using graph::ExecArgs;
using graph::Node;

namespace {

bool IsKQuant(GgmlType t) {
  return t == GgmlType::kQ4_K || t == GgmlType::kQ5_K || t == GgmlType::kQ6_K;
}

}  // namespace

absl::StatusOr<BlockQ8A*> CudaBackend::Q8Plane(const BufferRef& x, int64_t k, int64_t nt) {
  // One persistent plane per activation range, so its address is stable
  // across steps (and in recordings).
  ASSIGN_OR_RETURN(void* p, Scratch(absl::StrCat("q8:", x.buffer, ":", x.offset),
                                    nt * (k / 32) * static_cast<int64_t>(sizeof(BlockQ8A))));
  return static_cast<BlockQ8A*>(p);
}

absl::StatusOr<const BlockQ8A*> CudaBackend::Quantized(const BufferRef& x, int64_t k, int64_t nt) {
  ASSIGN_OR_RETURN(BlockQ8A * q, Q8Plane(x, k, nt));
  if (memos_.Q8Holds(x, k * nt * 4)) {
    stats_.quantize_skipped++;
    return q;
  }
  ASSIGN_OR_RETURN(uint8_t * xp, Ptr(x, k * nt * 4));
  RETURN_IF_ERROR(Check(LaunchQuantizeQ8A(reinterpret_cast<const float*>(xp), q, k, nt,
                                          state_->stream()),
                        "quantize activations"));
  stats_.quantize_launches++;
  memos_.SetQ8(x, k * nt * 4);
  return q;
}

bool CudaBackend::Int8OnlyApplies(const Node& n, int64_t k, int64_t nt) const {
  // The consumers are MMQ GEMMs exactly when the matmul decision tree sends
  // them there: nt >= 9, the GEMM arm on, MMQ on and runnable, and not a
  // decode batch of a model whose weights the DQ GEMM takes (it reads the
  // f32 values).
  return n.p.int8_consumers && knobs_.skip_write && knobs_.mmq && knobs_.prefill_gemm &&
         mmq_device_ && nt >= knobs_.mmq_min_tokens && k % 32 == 0 && !DqBatch(nt);
}

absl::StatusOr<void*> CudaBackend::DqScratch(int64_t k) {
  // One scratch for every DQ matmul, its size fixed at the first use (the
  // widest input of the model times the most tokens), so its address never
  // moves under recorded graphs.
  return Scratch("dq_act", DqActivationBytes(std::max(k, dq_max_k_), kDqMaxTokens));
}

void CudaBackend::MarkDqOnly(const BufferRef& out, int64_t k, int64_t nt, void* act) {
  memos_.MarkDqOnly(out, k, nt, act);
  stats_.dq_only_writes++;
}

absl::StatusOr<void*> CudaBackend::DqActivations(const Node& n, const BufferRef& x,
                                                 const float* xf, int64_t k, int64_t nt) {
  ASSIGN_OR_RETURN(void* act, DqScratch(k));
  if (memos_.DqHolds(x, k, nt, act)) {
    stats_.quantize_skipped++;
    return act;
  }
  RETURN_IF_ERROR(memos_.CheckNotDead(n, x, k * nt * 4));
  RETURN_IF_ERROR(Check(LaunchQuantizeDq(xf, act, k, nt, state_->stream()), "DQ quantize"));
  stats_.quantize_launches++;
  memos_.SetDq(x, k, nt, act);
  return act;
}

void CudaBackend::MarkInt8Only(const BufferRef& out, int64_t k, int64_t nt, void* act) {
  memos_.MarkInt8Only(out, k, nt, act);
  stats_.int8_only_writes++;
}

absl::StatusOr<void*> CudaBackend::MmqActivations(const Node& n, const BufferRef& x,
                                                  const float* xf, int64_t k, int64_t nt) {
  // One activation scratch shared by every prefill matmul (they run in
  // stream order); consecutive matmuls of the same input (Q/K/V, gate/up)
  // quantize it once.
  ASSIGN_OR_RETURN(void* act, Scratch("mmq_act", MmqActivationBytes(k, nt)));
  if (memos_.MmqHolds(x, k, nt, act)) {
    stats_.quantize_skipped++;
    return act;
  }
  // Re-quantizing a mode-2 output would read f32 values that were never
  // written: a loud error, never garbage.
  RETURN_IF_ERROR(memos_.CheckNotDead(n, x, k * nt * 4));
  memos_.ClearMmq();
  RETURN_IF_ERROR(Check(LaunchQuantizeMmq(xf, act, k, nt, state_->stream()), "MMQ quantize"));
  stats_.quantize_launches++;
  memos_.SetMmq(x, k, nt, act);
  return act;
}

absl::Status CudaBackend::MatMulWeights(const Node& n, absl::Span<const WeightView* const> ws,
                                        const BufferRef& x, absl::Span<float* const> ys) {
  const int64_t nt = n.shape.ne[1], k = ws[0]->k;
  for (size_t i = 0; i < ws.size(); ++i) {
    if (ws[i]->k != k || k % 32 != 0) {
      return absl::InvalidArgumentError(absl::StrCat("cuda ", graph::OpName(n.op), " ", n.name,
                                                     ": weight '", n.weights[i]->name, "' has k = ",
                                                     ws[i]->k, " (input rows ", k,
                                                     "; must match and be a multiple of 32)"));
    }
  }
  if (x.bytes < k * nt * 4) {
    return absl::InvalidArgumentError(absl::StrCat("cuda ", graph::OpName(n.op), " ", n.name,
                                                   ": buffer size mismatch: input holds ",
                                                   x.bytes / 4, " floats, needs ", k * nt));
  }
  ASSIGN_OR_RETURN(uint8_t * xp, Ptr(x, k * nt * 4));
  const float* xf = reinterpret_cast<const float*>(xp);
  cudaStream_t st = state_->stream();
  // One weight on the vector kernels: MMVQ for the quantized types up to 8
  // tokens, else the f32-activation matvec.
  auto vector_path = [&](const WeightView* w, float* y) -> absl::Status {
    bool mmvq = MmvqSupports(w->type) && nt <= 8 && !(IsKQuant(w->type) && !knobs_.kq_mmvq);
    // The shape gate (MINFER_MMVQ_MIN_ELEMS): a small decode matmul whose
    // input no fused producer quantized pays a quantize launch before MMVQ;
    // below the gate the f32-activation matvec (one launch) is the faster
    // choice (matmul_bench --gates measures it).
    if (mmvq && nt == 1 && w->rows * k < knobs_.mmvq_min_elems &&
        !memos_.HasQ8(x)) {
      mmvq = false;
    }
    if (mmvq) {
      ASSIGN_OR_RETURN(const BlockQ8A* q, Quantized(x, k, nt));
      return Check(LaunchMmvq(*w, q, y, w->rows, nt, st), "MMVQ");
    }
    return Check(LaunchMatvecF32(*w, xf, y, w->rows, nt, st), "matvec f32");
  };
  // The decision tree (docs/design.md, which kernel runs a matmul):
  // prefill-shaped batches go to the
  // tiled GEMM, decode batches of MINFER_MMQ_SMALL_MIN_TOKENS..
  // MINFER_MMQ_SMALL_TOKENS tokens to the few-token GEMM, smaller decode
  // shapes to MMVQ, float weights to the f32 kernels.
  const bool small_batch = nt >= knobs_.mmq_small_min_tokens && nt <= knobs_.mmq_small_tokens &&
                           knobs_.mmq && mmq_device_;
  // Decode batches of MINFER_DQ_MIN_TOKENS..MINFER_DQ_MAX_TOKENS tokens run
  // their Q4_K / Q6_K weights on the dequantizing f16 GEMM first of all.
  const bool dq_batch = DqBatch(nt);
  if ((nt >= knobs_.mmq_min_tokens || small_batch || dq_batch) && knobs_.prefill_gemm) {
    // Each weight as its own MatMul would run it: MMQ for the quantized
    // types (runs of consecutive weights of one type share a launch:
    // FusedQKV's q and k, often v too), the f16 GEMM for the rest and on
    // GPUs without MMQ.
    const bool mmq = knobs_.mmq && mmq_device_;
    if (knobs_.mmq && !mmq_device_ && knobs_.mmq_debug && mmq_logged_.insert({-1, -1, -1, 0}).second) {
      Logger("cuda")->info("MMQ: not supported on this device (sm_80+ needed); f16 GEMM");
    }
    // Stream-k's workspace: allocated and zeroed at the first prefill
    // matmul (never inside a capture window: the first prefill runs
    // directly), then reused by every launch on this stream. Its size never
    // changes, so the scratch entry (and the address) is stable.
    MmqTuning tuning;
    if (mmq && knobs_.mmq_stream_k) {
      if (mmq_sk_ws_ == nullptr) {
        const int64_t bytes = MmqStreamKBytes();
        if (bytes > 0) {
          ASSIGN_OR_RETURN(void* sk, Scratch("mmq_stream_k", bytes));
          RETURN_IF_ERROR(Check(cudaMemsetAsync(sk, 0, bytes, st), "MMQ stream-k workspace"));
          mmq_sk_ws_ = sk;
          mmq_sk_bytes_ = bytes;
        }
      }
      tuning.stream_k_workspace = mmq_sk_ws_;
      tuning.stream_k_bytes = mmq_sk_bytes_;
    }
    // Split-k's partials (decode batches), allocated at the first GEMM of
    // few tokens: the first one runs outside a capture window (direct runs
    // come first), and the size never changes.
    if (mmq && knobs_.mmq_split_k && nt <= 256) {
      // (also the few-token kernel's)
      ASSIGN_OR_RETURN(void* ws, Scratch("mmq_split", MmqSplitKBytes()));
      tuning.split_k = kMmqSplitAuto;
      tuning.split_workspace = ws;
      tuning.split_bytes = MmqSplitKBytes();
    }
    tuning.small_form = knobs_.mmq_small_form;
    tuning.small_mtiles = knobs_.mmq_small_mt;
    tuning.small_min_chunks = knobs_.mmq_small_chunks;
    tuning.small_stages = knobs_.mmq_small_stages;
    size_t no_dq_until = 0;  // weights [.., no_dq_until) that the DQ GEMM declined
    for (size_t i = 0; i < ws.size();) {
      if (dq_batch && i >= no_dq_until && DqSupports(ws[i]->type, ws[i]->q6k_padded)) {
        // A run of consecutive weights of one type shares a launch (FusedQKV).
        MmqSegments seg;
        const size_t begin = i;
        while (i < ws.size() && seg.n < kMmqMaxSegments &&
               (seg.n == 0 || ws[i]->type == seg.w[0].type)) {
          seg.w[seg.n] = *ws[i];
          seg.y[seg.n++] = ys[i++];
        }
        ASSIGN_OR_RETURN(void* act, DqActivations(n, x, xf, k, nt));
        DqTuning dt;
        dt.m_tiles = knobs_.dq_mt;
        dt.split_k = knobs_.mmq_split_k ? kMmqSplitAuto : 0;
        dt.split_workspace = tuning.split_workspace;  // (before sm_90)
        dt.split_bytes = tuning.split_bytes;
        const char* why = nullptr;
        const cudaError_t err = LaunchDqGemm(seg, act, nt, st, &dt, &why);
        if (err != cudaErrorNotSupported) {
          RETURN_IF_ERROR(Check(err, "DQ GEMM"));
          stats_.dq_gemm++;
          continue;
        }
        cudaGetLastError();
        if (knobs_.mmq_debug &&
            mmq_logged_.insert({static_cast<int>(seg.w[0].type), -3, k, 0}).second) {
          Logger("cuda")->info("DQ GEMM skipped for {}: {}", GgmlTypeName(seg.w[0].type), why);
        }
        no_dq_until = i;
        i = begin;
        continue;
      }
      const bool gemm_ok = mmq && MmqSupports(ws[i]->type);
      if (nt < knobs_.mmq_min_tokens && !(gemm_ok && small_batch)) {
        // A decode batch that only the few-token GEMM or the DQ GEMM took
        // here: the other weights keep the vector kernels.
        RETURN_IF_ERROR(memos_.CheckNotDead(n, x, k * nt * 4));
        RETURN_IF_ERROR(vector_path(ws[i], ys[i]));
        ++i;
        continue;
      }
      if (!(mmq && MmqSupports(ws[i]->type))) {
        RETURN_IF_ERROR(memos_.CheckNotDead(n, x, k * nt * 4));
        stats_.gemm_f16++;
        RETURN_IF_ERROR(Check(LaunchGemmF16(*ws[i], xf, ys[i], nt, st), "GEMM f16"));
        ++i;
        continue;
      }
      ASSIGN_OR_RETURN(void* act, MmqActivations(n, x, xf, k, nt));
      MmqSegments seg;
      while (i < ws.size() && seg.n < kMmqMaxSegments &&
             (seg.n == 0 || ws[i]->type == seg.w[0].type)) {
        seg.w[seg.n] = *ws[i];
        seg.y[seg.n++] = ys[i++];
      }
      if (nt <= knobs_.mmq_small_tokens) {
        // A decode batch: the few-token kernel streams the weights.
        const char* why = nullptr;
        const cudaError_t err = LaunchMmqSmall(seg, act, nt, st, &tuning, &why);
        if (err != cudaErrorNotSupported) {
          RETURN_IF_ERROR(Check(err, "MMQ few-token"));
          stats_.mmq_small++;
          if (seg.n > 1) stats_.mmq_segmented++;
          continue;
        }
        cudaGetLastError();
        if (knobs_.mmq_debug && mmq_logged_.insert({static_cast<int>(seg.w[0].type), -2, k, 0}).second) {
          Logger("cuda")->info("MMQ few-token kernel skipped for {}: {}", GgmlTypeName(seg.w[0].type), why);
        }
      }
      MmqReport report;
      RETURN_IF_ERROR(Check(LaunchMmqSegments(seg, act, nt, st, &report, &tuning), "MMQ"));
      (report.variant == MmqVariant::kFast ? stats_.mmq_fast : stats_.mmq_generic)++;
      if (report.scale_plane) stats_.mmq_plane++;
      if (report.stream_k) stats_.mmq_stream_k++;
      if (seg.n > 1) stats_.mmq_segmented++;
      if (knobs_.mmq_debug &&
          mmq_logged_.insert({static_cast<int>(seg.w[0].type), seg.w[0].rows, k,
                              static_cast<int>(report.variant) + 8 * seg.n})
              .second) {
        std::string rows = absl::StrCat(seg.w[0].rows);
        for (int j = 1; j < seg.n; ++j) absl::StrAppend(&rows, "+", seg.w[j].rows);
        Logger("cuda")->info("MMQ {} {}x{} nt {}: {} variant, {} tokens per CTA, {} CTAs{}{}{}{}",
                             GgmlTypeName(seg.w[0].type), rows, k, nt,
                             MmqVariantName(report.variant), report.tokens_per_cta, report.grid,
                             report.stream_k ? ", stream-k" : "",
                             report.scale_plane ? ", scale plane" : "",
                             report.fast_skipped ? "; fast variant skipped: " : "",
                             report.fast_skipped ? report.fast_skipped : "");
      }
    }
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(memos_.CheckNotDead(n, x, k * nt * 4));
  for (size_t i = 0; i < ws.size(); ++i) RETURN_IF_ERROR(vector_path(ws[i], ys[i]));
  return absl::OkStatus();
}

absl::Status CudaBackend::RunMatMul(const OpArgs& o) {
  const Node& n = o.n;
  const ExecArgs& a = o.a;
  float* out = o.out;
  ASSIGN_OR_RETURN(const WeightView* w, Weight(n.weights[0]));
  return MatMulWeights(n, {w}, a.inputs[0], {out});
}

absl::Status CudaBackend::RunFusedQkv(const OpArgs& o) {
  const Node& n = o.n;
  const ExecArgs& a = o.a;
  float* out = o.out;
  cudaStream_t st = o.st;
  const int64_t n_el = o.n_el;
  if (n.shape.ne[1] > 1) {
    // Prefill: the planar [q | k | v] output (graph.h).
    std::vector<const WeightView*> ws;
    std::vector<float*> ys;
    float* y = out;
    for (const graph::Weight* gw : n.weights) {
      ASSIGN_OR_RETURN(const WeightView* w, Weight(gw));
      ws.push_back(w);
      ys.push_back(y);
      y += w->rows * n.shape.ne[1];
    }
    if (y - out != n_el) {
      return absl::InvalidArgumentError(absl::StrCat("cuda FusedQKV ", n.name, ": weights give ",
                                                     y - out, " outputs, node holds ", n_el));
    }
    return MatMulWeights(n, ws, a.inputs[0], ys);
  }
  MmvqSegments segs;
  bool all_mmvq = true;
  for (const graph::Weight* gw : n.weights) {
    ASSIGN_OR_RETURN(const WeightView* w, Weight(gw));
    segs.w[segs.n++] = *w;
    all_mmvq = all_mmvq && MmvqSupports(w->type) && !(IsKQuant(w->type) && !knobs_.kq_mmvq);
  }
  const int64_t k = segs.w[0].k;
  if (all_mmvq) {
    ASSIGN_OR_RETURN(const BlockQ8A* q, Quantized(a.inputs[0], k, 1));
    return Check(LaunchMmvqSegments(segs, q, out, st), "FusedQKV");
  }
  // Mixed float/quantized weights: each segment on its own kernel (the
  // quantized ones still on MMVQ, as the unfused MatMul would run them).
  float* y = out;
  for (int i = 0; i < segs.n; ++i) {
    const WeightView& w = segs.w[i];
    if (MmvqSupports(w.type) && !(IsKQuant(w.type) && !knobs_.kq_mmvq)) {
      ASSIGN_OR_RETURN(const BlockQ8A* q, Quantized(a.inputs[0], k, 1));
      RETURN_IF_ERROR(Check(LaunchMmvq(w, q, y, w.rows, 1, st), "FusedQKV"));
    } else {
      RETURN_IF_ERROR(Check(LaunchMatvecF32(w, o.f(0), y, w.rows, 1, st), "FusedQKV"));
    }
    y += w.rows;
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::RunFusedFfn(const OpArgs& o) {
  const Node& n = o.n;
  const ExecArgs& a = o.a;
  float* out = o.out;
  cudaStream_t st = o.st;
  ASSIGN_OR_RETURN(const WeightView* g, Weight(n.weights[0]));
  ASSIGN_OR_RETURN(const WeightView* u, Weight(n.weights[1]));
  const int64_t nt = n.shape.ne[1], nff = g->rows;
  if (nt > 1) {
    // A decode batch: gate and up as one MatMul of two weights (one launch
    // where their kernel takes segments) into a scratch [gate | up], then
    // the SwiGLU, written as the down projection reads it (mode 2) or as
    // f32.
    if (u->rows != nff || o.n_el != nff * nt) {
      return absl::InvalidArgumentError(absl::StrCat("cuda FusedFFN ", n.name, ": gate rows ", nff,
                                                     ", up rows ", u->rows, ", output ", o.n_el,
                                                     " for ", nt, " tokens"));
    }
    // (Sized for the largest decode batch at once: a growing scratch would
    // move under recorded graphs.)
    ASSIGN_OR_RETURN(void* gu, Scratch("ffn_gate_up", 2 * nff * std::max(nt, kDqMaxTokens) * 4));
    float* const gbuf = static_cast<float*>(gu);
    float* const ubuf = gbuf + nff * nt;
    RETURN_IF_ERROR(MatMulWeights(n, {g, u}, a.inputs[0], {gbuf, ubuf}));
    return SwiGluInto(n, gbuf, ubuf, a.output, out, st);
  }
  const bool mmvq = MmvqSupports(g->type) && MmvqSupports(u->type) &&
                    !((IsKQuant(g->type) || IsKQuant(u->type)) && !knobs_.kq_mmvq);
  if (mmvq) {
    ASSIGN_OR_RETURN(const BlockQ8A* q, Quantized(a.inputs[0], g->k, 1));
    return Check(LaunchMmvqSwiGlu(*g, *u, q, out, st), "FusedFFN");
  }
  ASSIGN_OR_RETURN(void* tmp, Scratch("ffn_up", g->rows * 4));
  RETURN_IF_ERROR(Check(LaunchMatvecF32(*g, o.f(0), out, g->rows, 1, st), "FusedFFN gate"));
  RETURN_IF_ERROR(Check(LaunchMatvecF32(*u, o.f(0), static_cast<float*>(tmp), u->rows, 1, st),
                        "FusedFFN up"));
  return Check(LaunchSwiGlu(out, static_cast<float*>(tmp), out, g->rows, st), "FusedFFN swiglu");
}

}  // namespace minfer::cuda
