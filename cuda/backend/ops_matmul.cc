// The CUDA backend's matmul handlers (MatMul, FusedQKV, FusedFFN): each
// weight runs the kernel ChooseMatmulKernel plans for it (matmul_choice.h:
// MMVQ / f32 matvec for decode shapes, the dequantizing f16 GEMM for decode
// batches of Q4_K / Q6_K, the few-token GEMM, MMQ or the f16 GEMM for
// prefill shapes), with the launchers' run-time fallbacks; the activation
// quantizations and their memos; mode 2's choice of producer layout.
#include "cuda/backend/cuda_backend.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cuda/backend/matmul_choice.h"
#include "cuda/kernels/dq_gemm.h"
#include "cuda/kernels/dq_wgmma.h"
#include "cuda/kernels/fp8_gemm.h"
#include "cuda/kernels/matmul.h"
#include "cuda/kernels/mmq.h"
#include "cuda/kernels/ops.h"
#include "engine/base/logging.h"
#include "engine/base/status.h"

namespace minfer::cuda {

using graph::BufferRef;
using graph::ExecArgs;
using graph::Node;

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

ActivationLayout CudaBackend::ProducerLayout(const Node& n, int64_t k, int64_t nt) const {
  // The readers' weights are some of the model's integer-dot weights, so
  // the layout is the one the plan gives every such weight class.
  ProducerChoiceInput in;
  in.nt = nt;
  in.k = k;
  in.int8_consumers = n.p.int8_consumers;
  in.int8_weights = int8_weights_;
  in.ctx = MatmulCtx();
  return ActivationLayoutFor(in);
}

absl::StatusOr<void*> CudaBackend::DqScratch(int64_t k, int64_t nt, ActivationLayout layout) {
  // One scratch per layout for every DQ matmul, its size fixed at the first
  // use (the widest input of the model times the most tokens of a decode
  // batch), so its address never moves under recorded decode graphs. (A
  // longer prefill on the Hopper GEMM grows it once, in a direct run.)
  if (layout == ActivationLayout::kDqwF16) {
    return Scratch("dqw_act",
                   DqwActivationBytes(std::max(k, dq_max_k_), std::max(nt, kDqwMaxTokens)));
  }
  return Scratch("dq_act", DqActivationBytes(std::max(k, dq_max_k_), kDqMaxTokens));
}

void CudaBackend::MarkDqOnly(const BufferRef& out, int64_t k, int64_t nt, void* act) {
  memos_.MarkDqOnly(out, k, nt, act);
  stats_.dq_only_writes++;
}

absl::StatusOr<void*> CudaBackend::DqActivations(ActivationLayout layout, const Node& n,
                                                 const BufferRef& x, const float* xf, int64_t k,
                                                 int64_t nt) {
  // (The memo is keyed by the scratch too, so the two layouts never stand
  // in for each other.)
  ASSIGN_OR_RETURN(void* act, DqScratch(k, nt, layout));
  if (memos_.DqHolds(x, k, nt, act)) {
    stats_.quantize_skipped++;
    return act;
  }
  RETURN_IF_ERROR(memos_.CheckNotDead(n, x, k * nt * 4));
  RETURN_IF_ERROR(Check(layout == ActivationLayout::kDqwF16
                            ? LaunchQuantizeDqw(xf, act, k, nt, state_->stream())
                            : LaunchQuantizeDq(xf, act, k, nt, state_->stream()),
                        "DQ quantize"));
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
                                        const BufferRef& x, absl::Span<float* const> ys,
                                        const float* residual, bool allow_fp8,
                                        absl::Span<OutputSum> sums) {
  const int64_t nt = n.shape.ne[1], k = ws[0]->k;
  if (residual != nullptr && ws.size() != 1) {
    return absl::InternalError(absl::StrCat("cuda ", n.name, ": a residual with ", ws.size(),
                                            " weights"));
  }
  if (!sums.empty() && sums.size() != ys.size()) {
    return absl::InternalError(absl::StrCat("cuda ", n.name, ": ", sums.size(),
                                            " output sums for ", ys.size(), " outputs"));
  }
  // Every output written where it lies unless a launch below keeps its
  // partials for the caller.
  for (size_t i = 0; i < sums.size(); ++i) sums[i] = OutputSum{ys[i], 1, 0};
  // The Hopper GEMMs fold the residual and the caller's sums in.
  const bool fuse = knobs_.gemm_fuse;
  bool residual_added = false;
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
  const MatmulContext ctx = MatmulCtx();
  // The plan of weight i (docs/design.md, which kernel runs a matmul). It
  // is asked again at each step: the q8 memo the MMVQ shape gate reads
  // moves when an earlier weight quantizes x, and a weight the DQ GEMM
  // declined (i < no_dq_until) takes the next arm.
  size_t no_dq_until = 0;
  auto plan = [&](size_t i) {
    MatmulChoiceInput in;
    in.type = ws[i]->type;
    in.q6k_padded = ws[i]->q6k_padded;
    in.rows = ws[i]->rows;
    in.nt = nt;
    in.k = k;
    in.input_has_q8 = memos_.HasQ8(x);
    in.dq_declined = i < no_dq_until;
    in.has_fp8 = allow_fp8 && fp8_copies_.count(ws[i]->data) > 0;
    in.ctx = ctx;
    return ChooseMatmulKernel(in);
  };
  // The fp8 GEMM's activations (codes per token, then the scales), made
  // once for all of this call's fp8 weights.
  Fp8RowsView fp8_x;
  // The GEMMs' set-up, when some weight plans one.
  const bool mmq = ctx.knobs.mmq && ctx.device.MmqRuns();
  MmqTuning tuning;
  bool any_gemm = false;
  for (size_t i = 0; i < ws.size(); ++i) any_gemm = any_gemm || !IsVectorKernel(plan(i));
  if (any_gemm) {
    if (ctx.knobs.mmq && !ctx.device.MmqRuns() && knobs_.mmq_debug &&
        mmq_logged_.insert({-1, -1, -1, 0}).second) {
      Logger("cuda")->info("MMQ: not supported on this device (sm_80+ needed); f16 GEMM");
    }
    // Stream-k's workspace: allocated and zeroed at the first prefill
    // matmul (never inside a capture window: the first prefill runs
    // directly), then reused by every launch on this stream. Its size never
    // changes, so the scratch entry (and the address) is stable.
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
      // (also the few-token kernel's and the DQ GEMM's)
      ASSIGN_OR_RETURN(void* ws, Scratch("mmq_split", MmqSplitKBytes()));
      tuning.split_k = kMmqSplitAuto;
      tuning.split_workspace = ws;
      tuning.split_bytes = MmqSplitKBytes();
    }
    tuning.small_form = knobs_.mmq_small_form;
    tuning.small_mtiles = knobs_.mmq_small_mt;
    tuning.small_min_chunks = knobs_.mmq_small_chunks;
    tuning.small_stages = knobs_.mmq_small_stages;
  }
  for (size_t i = 0; i < ws.size();) {
    const MatmulKernel kernel = plan(i);
    // A run of consecutive weights of one type on this kernel shares a
    // launch (FusedQKV's q and k, often v too; FusedFFN's gate and up).
    auto take_run = [&](MmqSegments* seg) {
      while (i < ws.size() && seg->n < kMmqMaxSegments &&
             (seg->n == 0 || (ws[i]->type == seg->w[0].type && plan(i) == kernel))) {
        seg->w[seg->n] = *ws[i];
        seg->y[seg->n++] = ys[i++];
      }
    };
    switch (kernel) {
      case MatmulKernel::kMmvq: {
        RETURN_IF_ERROR(memos_.CheckNotDead(n, x, k * nt * 4));
        ASSIGN_OR_RETURN(const BlockQ8A* q, Quantized(x, k, nt));
        if (residual != nullptr) {
          RETURN_IF_ERROR(Check(
              LaunchMmvqResidual(*ws[i], q, residual, ys[i], ws[i]->rows, nt, st), "MMVQ"));
          residual_added = true;
          stats_.residual_epilogue++;
        } else {
          RETURN_IF_ERROR(Check(LaunchMmvq(*ws[i], q, ys[i], ws[i]->rows, nt, st), "MMVQ"));
        }
        ++i;
        continue;
      }
      case MatmulKernel::kMatvecF32:
        RETURN_IF_ERROR(memos_.CheckNotDead(n, x, k * nt * 4));
        RETURN_IF_ERROR(
            Check(LaunchMatvecF32(*ws[i], xf, ys[i], ws[i]->rows, nt, st), "matvec f32"));
        ++i;
        continue;
      case MatmulKernel::kGemmF16:
        RETURN_IF_ERROR(memos_.CheckNotDead(n, x, k * nt * 4));
        stats_.gemm_f16++;
        RETURN_IF_ERROR(Check(LaunchGemmF16(*ws[i], xf, ys[i], nt, st), "GEMM f16"));
        ++i;
        continue;
      case MatmulKernel::kDqGemm: {
        MmqSegments seg;
        const size_t begin = i;
        take_run(&seg);
        ASSIGN_OR_RETURN(void* act, DqActivations(ActivationLayout::kDqF16, n, x, xf, k, nt));
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
        // Declined: these weights take the next arm of the plan.
        cudaGetLastError();
        if (knobs_.mmq_debug &&
            mmq_logged_.insert({static_cast<int>(seg.w[0].type), -3, k, 0}).second) {
          Logger("cuda")->info("DQ GEMM skipped for {}: {}", GgmlTypeName(seg.w[0].type), why);
        }
        no_dq_until = i;
        i = begin;
        continue;
      }
      case MatmulKernel::kDqWgmma:
      case MatmulKernel::kDqpWgmma: {
        MmqSegments seg;
        const size_t begin = i;
        take_run(&seg);
        // What a fused launch did: the residual added, the run's partials
        // kept for the caller (outputs begin .. i - 1).
        SplitOutputs kept;
        auto took_fused = [&](bool added, bool kept_asked) {
          if (added) {
            residual_added = true;
            stats_.residual_epilogue++;
          }
          if (kept_asked) {
            for (size_t j = begin; j < i; ++j) {
              sums[j] = OutputSum{kept.part[j - begin], kept.splits, kept.stride};
            }
            if (kept.splits > 1) {
              stats_.kept_partials++;
              // Kept partials stay in the workspace for the caller: every
              // later launch of this call splits into what is left after
              // them (or not at all), never over them.
              const int64_t used = (int64_t{kept.splits} * kept.stride * 4 + 15) / 16 * 16;
              tuning.split_workspace = static_cast<uint8_t*>(tuning.split_workspace) + used;
              tuning.split_bytes = std::max<int64_t>(0, tuning.split_bytes - used);
            }
          }
        };
        ASSIGN_OR_RETURN(void* act, DqActivations(ActivationLayout::kDqwF16, n, x, xf, k, nt));
        const char* why = nullptr;
        cudaError_t err = cudaErrorNotSupported;
        // (MINFER_DQW_SPLIT_K: 0 automatic, 1 none, N forced.)
        const int split_k = !knobs_.mmq_split_k       ? 0
                            : knobs_.dqw_split_k == 0 ? kMmqSplitAuto
                                                      : knobs_.dqw_split_k;
        if (kernel == MatmulKernel::kDqpWgmma) {
          // A prompt: one launch over every token. Declined (no tensor map
          // could be made), the same activations take the register form below.
          DqpTuning pt;
          pt.split_k = split_k;
          pt.split_workspace = tuning.split_workspace;
          pt.split_bytes = tuning.split_bytes;
          // Four warpgroups (256 rows per copy of the activations) where
          // the activations' traffic dominates: long prompts into narrow
          // weights (docs/benchmarks.md, the Hopper prefill GEMM).
          int64_t run_rows = 0;
          for (int j = 0; j < seg.n; ++j) run_rows += seg.w[j].rows;
          pt.warpgroups = knobs_.dqp_warpgroups > 0 ? knobs_.dqp_warpgroups
                          : nt >= 1024 && run_rows <= 4096 ? 4
                                                            : 2;
          if (fuse) {
            pt.residual = residual;
            if (!sums.empty()) pt.kept = &kept;
          }
          err = LaunchDqpWgmma(seg, act, nt, st, &pt, &why);
          if (err == cudaSuccess) {
            stats_.dqp_gemm++;
            took_fused(pt.residual != nullptr, pt.kept != nullptr);
          }
          if (err == cudaErrorNotSupported) {
            cudaGetLastError();
            if (knobs_.mmq_debug &&
                mmq_logged_.insert({static_cast<int>(seg.w[0].type), -5, k, 0}).second) {
              Logger("cuda")->info("DQ wgmma prefill GEMM skipped for {}: {}",
                                   GgmlTypeName(seg.w[0].type), why);
            }
          }
        }
        if (err == cudaErrorNotSupported) {
          DqwTuning dt;
          dt.split_k = split_k;
          dt.split_workspace = tuning.split_workspace;
          dt.split_bytes = tuning.split_bytes;
          // Two warpgroups (one copy of the activations per 128 rows) pay
          // from 128 tokens on (docs/benchmarks.md, the Hopper DQ GEMM).
          dt.warpgroups = knobs_.dqw_warpgroups > 0 ? knobs_.dqw_warpgroups : nt > 64 ? 2 : 1;
          dt.act_load = knobs_.dqw_tma;
          int act_load_used = 0;
          dt.act_load_used = &act_load_used;
          // Past kDqwMaxTokens (MINFER_DQW_MAX_TOKENS above 256: a prefill),
          // launches of 256 tokens each: token rows are contiguous in the
          // activations and in every output (and the residual). Partials
          // are kept for the caller only from one launch (each launch's
          // reuse the workspace).
          err = cudaSuccess;
          if (fuse && !sums.empty() && nt <= kDqwMaxTokens) dt.kept = &kept;
          for (int64_t t0 = 0; t0 < nt && err == cudaSuccess; t0 += kDqwMaxTokens) {
            const int64_t n = std::min<int64_t>(kDqwMaxTokens, nt - t0);
            MmqSegments part = seg;
            for (int j = 0; j < part.n; ++j) part.y[j] = seg.y[j] + t0 * seg.w[j].rows;
            dt.residual = fuse && residual != nullptr ? residual + t0 * seg.w[0].rows : nullptr;
            err = LaunchDqWgmma(part, static_cast<const uint8_t*>(act) + t0 * k * 2, n, st, &dt,
                                &why);
            if (err == cudaSuccess) {
              stats_.dqw_gemm++;
              if (act_load_used != 0) stats_.dqw_tma++;
              took_fused(dt.residual != nullptr, dt.kept != nullptr);
            }
          }
        }
        if (err != cudaErrorNotSupported) {
          RETURN_IF_ERROR(Check(err, "DQ wgmma GEMM"));
          continue;
        }
        // Declined: these weights take the next arm of the plan.
        cudaGetLastError();
        if (knobs_.mmq_debug &&
            mmq_logged_.insert({static_cast<int>(seg.w[0].type), -4, k, 0}).second) {
          Logger("cuda")->info("DQ wgmma GEMM skipped for {}: {}", GgmlTypeName(seg.w[0].type),
                               why);
        }
        no_dq_until = i;
        i = begin;
        continue;
      }
      case MatmulKernel::kFp8Gemm: {
        if (fp8_x.codes == nullptr) {
          RETURN_IF_ERROR(memos_.CheckNotDead(n, x, k * nt * 4));
          const int64_t rb = Fp8RowBytes(k);
          ASSIGN_OR_RETURN(void* act, Scratch("fp8_act", Fp8RowsBytes(nt, k)));
          uint8_t* base = static_cast<uint8_t*>(act);
          float* scales = reinterpret_cast<float*>(base + Fp8ScalesOffset(nt, k));
          RETURN_IF_ERROR(
              Check(LaunchQuantizeRowsFp8(xf, k, k, nt, base, rb, scales, st), "fp8 quantize"));
          stats_.quantize_launches++;
          fp8_x = Fp8RowsView{base, scales, nt, k, rb};
        }
        const Fp8RowsView& w = fp8_copies_.at(ws[i]->data).rows;
        const bool add = residual != nullptr;  // (one weight: checked above)
        RETURN_IF_ERROR(Check(LaunchFp8Gemm(w, fp8_x, residual, ys[i], w.rows, st), "fp8 GEMM"));
        if (add) residual_added = true;
        stats_.fp8_gemm++;
        ++i;
        continue;
      }
      case MatmulKernel::kMmqSmall:
      case MatmulKernel::kMmq:
        break;
    }
    ASSIGN_OR_RETURN(void* act, MmqActivations(n, x, xf, k, nt));
    MmqSegments seg;
    take_run(&seg);
    if (kernel == MatmulKernel::kMmqSmall) {
      // A decode batch: the few-token kernel streams the weights; where it
      // declines, the tiled MMQ runs on the same activations.
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
  if (residual != nullptr && !residual_added) {
    // Every other kernel: the Add the graph would have run, after it.
    const int64_t n_el = ws[0]->rows * nt;
    RETURN_IF_ERROR(
        Check(LaunchAdd(residual, ys[0], n_el, ys[0], n_el, st), "MatMul residual"));
    stats_.residual_launch++;
  }
  return absl::OkStatus();
}

MatmulKernel CudaBackend::OneTokenKernel(const WeightView& w) const {
  MatmulChoiceInput in;
  in.type = w.type;
  in.q6k_padded = w.q6k_padded;
  in.rows = w.rows;
  in.nt = 1;
  in.k = w.k;
  in.apply_mmvq_gate = false;
  in.ctx = MatmulCtx();
  return ChooseMatmulKernel(in);
}

absl::Status CudaBackend::RunMatMul(const OpArgs& o) {
  const Node& n = o.n;
  const ExecArgs& a = o.a;
  float* out = o.out;
  ASSIGN_OR_RETURN(const WeightView* w, Weight(n.weights[0]));
  ASSIGN_OR_RETURN(const float* residual, ResidualInput(o, 1));  // graph.h: y = r + W x
  if (knobs_.gemm_fuse && residual != nullptr) {
    // The residual stream's next reader is a RmsNorm, which can sum the
    // split-k partials with the residual itself (pending_).
    OutputSum sum;
    RETURN_IF_ERROR(MatMulWeights(n, {w}, a.inputs[0], {out}, residual, /*allow_fp8=*/true,
                                  absl::MakeSpan(&sum, 1)));
    const int64_t count = o.n_el;
    KeepPending(a.output, {sum}, {out}, {count}, residual);
    return absl::OkStatus();
  }
  return MatMulWeights(n, {w}, a.inputs[0], {out}, residual);
}

absl::StatusOr<const float*> CudaBackend::ResidualInput(const OpArgs& o, size_t i) {
  if (o.n.inputs.size() <= i) return nullptr;
  const graph::BufferRef& r = o.a.inputs[i];
  if (r.bytes < o.n_el * 4) {
    return absl::InvalidArgumentError(absl::StrCat("cuda ", graph::OpName(o.n.op), " ", o.n.name,
                                                   ": residual holds ", r.bytes / 4,
                                                   " floats, needs ", o.n_el));
  }
  RETURN_IF_ERROR(memos_.CheckNotDead(o.n, r, o.n_el * 4));
  return o.f(i);
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
    if (knobs_.gemm_fuse && ws.size() <= 3) {
      // Its reader, QkvBiasRopeStore, can sum the split-k partials itself
      // (pending_).
      OutputSum sums[3];
      int64_t counts[3];
      for (size_t i = 0; i < ws.size(); ++i) counts[i] = ws[i]->rows * n.shape.ne[1];
      RETURN_IF_ERROR(MatMulWeights(n, ws, a.inputs[0], ys, nullptr, /*allow_fp8=*/true,
                                    absl::MakeSpan(sums, ws.size())));
      KeepPending(a.output, absl::MakeConstSpan(sums, ws.size()), ys,
                  absl::MakeConstSpan(counts, ws.size()), nullptr);
      return absl::OkStatus();
    }
    return MatMulWeights(n, ws, a.inputs[0], ys);
  }
  // One token: each weight's plan is a vector kernel (without the shape
  // gate, which the single MatMul applies); all on MMVQ is one launch.
  MmvqSegments segs;
  MatmulKernel kernel[3];
  bool all_mmvq = true;
  for (const graph::Weight* gw : n.weights) {
    ASSIGN_OR_RETURN(const WeightView* w, Weight(gw));
    kernel[segs.n] = OneTokenKernel(*w);
    all_mmvq = all_mmvq && kernel[segs.n] == MatmulKernel::kMmvq;
    segs.w[segs.n++] = *w;
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
    if (kernel[i] == MatmulKernel::kMmvq) {
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
    ASSIGN_OR_RETURN(void* gu, Scratch("ffn_gate_up", 2 * nff * std::max(nt, models::kFusedFfnMaxTokens) * 4));
    float* const gbuf = static_cast<float*>(gu);
    float* const ubuf = gbuf + nff * nt;
    // Where the SwiGLU writes the Hopper GEMM's layout, it sums the gate/up
    // launch's split-k partials itself (MINFER_GEMM_FUSE: the reduce's
    // launch and a write and read of [gate | up] fewer, the same bits).
    OutputSum sums[2] = {{gbuf, 1, 0}, {ubuf, 1, 0}};
    const bool keep =
        knobs_.gemm_fuse && ProducerLayout(n, nff, nt) == ActivationLayout::kDqwF16;
    RETURN_IF_ERROR(MatMulWeights(n, {g, u}, a.inputs[0], {gbuf, ubuf}, nullptr,
                                  /*allow_fp8=*/false,
                                  keep ? absl::MakeSpan(sums) : absl::Span<OutputSum>()));
    return SwiGluInto(n, sums[0], sums[1], a.output, out, st);
  }
  // One token: gate and up on MMVQ (one launch with the SwiGLU) when both
  // plans say so, else both on the f32 matvec.
  const bool mmvq = OneTokenKernel(*g) == MatmulKernel::kMmvq &&
                    OneTokenKernel(*u) == MatmulKernel::kMmvq;
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
