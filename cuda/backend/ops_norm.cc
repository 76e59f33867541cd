// The CUDA backend's norm handler: RmsNorm and QkNorm, with the int8
// epilogues (the decode q8 plane, mode 2's MMQ and DQ layouts).
#include "cuda/backend/cuda_backend.h"

#include "absl/strings/str_cat.h"
#include "cuda/kernels/dq_gemm.h"
#include "cuda/kernels/mmq.h"
#include "cuda/kernels/ops.h"
#include "engine/base/status.h"

namespace minfer::cuda {

using graph::ExecArgs;
using graph::Node;
using graph::OpKind;

absl::Status CudaBackend::RunNorm(const OpArgs& o) {
  const Node& n = o.n;
  const ExecArgs& a = o.a;
  float* out = o.out;
  cudaStream_t st = o.st;
  const float* w = nullptr;
  if (!n.weights.empty()) {
    ASSIGN_OR_RETURN(const WeightView* wv, Weight(n.weights[0]));
    w = static_cast<const float*>(wv->data);
  }
  const int64_t ne0 = n.shape.ne[0], rows = n.shape.rows();
  if (ne0 % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cuda RmsNorm ", n.name, ": row length ",
                                                   ne0, " is not a multiple of 4"));
  }
  // The layout the matmuls that read this norm take (ProducerLayout; a
  // QkNorm's reader is attention: f32).
  const ActivationLayout layout =
      n.op == OpKind::kRmsNorm ? ProducerLayout(n, ne0, rows) : ActivationLayout::kF32;
  // Pending split-k sums (pending_) as this norm's input: summed here with
  // the residual, written to the residual stream and normalized in one
  // launch, where the norm writes the Hopper GEMM's layout; written first
  // otherwise.
  if (const PendingSums* p = PendingAt(a.inputs[0]);
      p != nullptr && n.op == OpKind::kRmsNorm && layout == ActivationLayout::kDqwF16 &&
      p->n == 1 && p->count[0] == ne0 * rows) {
    ASSIGN_OR_RETURN(void* act, DqScratch(ne0, rows, layout));
    const PendingSums q = *p;
    pending_.reset();
    // (Unsplit, the GEMM's store already added the residual.)
    const float* const r = q.sum[0].splits > 1 ? q.residual : nullptr;
    RETURN_IF_ERROR(Check(LaunchRmsNormDqwParts(q.sum[0].part, q.sum[0].splits, q.sum[0].stride,
                                                r, q.y[0], w, n.p.eps, act, ne0, rows, st),
                          "RmsNorm (DQ only, from partials)"));
    stats_.pending_summed++;
    MarkDqOnly(a.output, ne0, rows, act);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(ResolvePending());
  if (layout == ActivationLayout::kMmqInt8) {
    // Mode 2: the GEMMs that read this norm get their activation layout
    // from it; the f32 output is never written.
    ASSIGN_OR_RETURN(void* act, Scratch("mmq_act", MmqActivationBytes(ne0, rows)));
    RETURN_IF_ERROR(
        Check(LaunchRmsNormMmq(o.f(0), w, n.p.eps, act, ne0, rows, st), "RmsNorm (int8 only)"));
    MarkInt8Only(a.output, ne0, rows, act);
    return absl::OkStatus();
  }
  if (layout == ActivationLayout::kDqF16 || layout == ActivationLayout::kDqwF16) {
    // The same for a decode batch's DQ GEMMs (the sm_80 or the Hopper one).
    ASSIGN_OR_RETURN(void* act, DqScratch(ne0, rows, layout));
    RETURN_IF_ERROR(Check(layout == ActivationLayout::kDqwF16
                              ? LaunchRmsNormDqw(o.f(0), w, n.p.eps, act, ne0, rows, st)
                              : LaunchRmsNormDq(o.f(0), w, n.p.eps, act, ne0, rows, st),
                          "RmsNorm (DQ only)"));
    MarkDqOnly(a.output, ne0, rows, act);
    return absl::OkStatus();
  }
  BlockQ8A* q8 = nullptr;
  // Decode producers fuse the int8 quantize epilogue so the MMVQ group
  // that follows skips its own quantize launch.
  if (n.op == OpKind::kRmsNorm && rows == 1 && ne0 % 32 == 0 && knobs_.decode_a_fuse) {
    ASSIGN_OR_RETURN(q8, Q8Plane(a.output, ne0, 1));
  }
  RETURN_IF_ERROR(Check(LaunchRmsNorm(o.f(0), w, n.p.eps, out, q8, ne0, rows, st), "RmsNorm"));
  if (q8 != nullptr) memos_.SetQ8(a.output, ne0 * 4);
  return absl::OkStatus();
}

}  // namespace minfer::cuda
