// The CUDA backend's elementwise handlers: Add/Mul (a tensor or a weight
// operand), Scale, Silu, SwiGLU (mode 2 when its consumers are GEMMs),
// Softmax and Permute.
#include "cuda/backend/cuda_backend.h"

#include "absl/strings/str_cat.h"
#include "cuda/kernels/dq_gemm.h"
#include "cuda/kernels/dq_wgmma.h"
#include "cuda/kernels/mmq.h"
#include "cuda/kernels/ops.h"
#include "engine/base/status.h"

namespace minfer::cuda {

using graph::BufferRef;
using graph::ExecArgs;
using graph::Node;
using graph::OpKind;

absl::Status CudaBackend::RunBinary(const OpArgs& o) {
  const Node& n = o.n;
  const ExecArgs& a = o.a;
  float* out = o.out;
  cudaStream_t st = o.st;
  const int64_t n_el = o.n_el;
  const float* b;
  int64_t nb;
  if (!n.weights.empty()) {
    ASSIGN_OR_RETURN(const WeightView* w, Weight(n.weights[0]));
    b = static_cast<const float*>(w->data);
    nb = w->k * w->rows;
  } else {
    b = o.f(1);
    nb = a.inputs[1].bytes / 4;
  }
  if (n.op == OpKind::kAdd && !n.weights.empty() && n.inputs.size() == 2) {
    // A bias add with the residual (graph.h; GraphBuilder::AddInto).
    if (a.inputs[1].bytes / 4 != n_el) {
      return absl::InvalidArgumentError(absl::StrCat("cuda Add ", n.name, ": residual holds ",
                                                     a.inputs[1].bytes / 4, " floats, needs ",
                                                     n_el));
    }
    stats_.residual_epilogue++;
    return Check(LaunchAddResidual(o.f(0), b, nb, o.f(1), out, n_el, st), "Add (bias + residual)");
  }
  return Check(n.op == OpKind::kAdd ? LaunchAdd(o.f(0), b, nb, out, n_el, st)
                                    : LaunchMul(o.f(0), b, nb, out, n_el, st),
               graph::OpName(n.op));
}

absl::Status CudaBackend::RunScale(const OpArgs& o) {
  const Node& n = o.n;
  float* out = o.out;
  cudaStream_t st = o.st;
  const int64_t n_el = o.n_el;
  return Check(LaunchScale(o.f(0), n.p.scale, out, n_el, st), "Scale");
}

absl::Status CudaBackend::RunSilu(const OpArgs& o) {
  float* out = o.out;
  cudaStream_t st = o.st;
  const int64_t n_el = o.n_el;
  return Check(LaunchSilu(o.f(0), out, n_el, st), "Silu");
}

absl::Status CudaBackend::RunSwiGlu(const OpArgs& o) {
  return SwiGluInto(o.n, {o.f(0), 1, 0}, {o.f(1), 1, 0}, o.a.output, o.out, o.st);
}

absl::Status CudaBackend::SwiGluInto(const Node& n, const OutputSum& gs, const OutputSum& us,
                                     const BufferRef& out_ref, float* out, cudaStream_t st) {
  const int64_t k = n.shape.ne[0], rows = n.shape.rows();
  const ActivationLayout layout = ProducerLayout(n, k, rows);
  if (layout == ActivationLayout::kDqwF16) {
    // (Sums split-k partials where the caller kept them: MatMulWeights.)
    ASSIGN_OR_RETURN(void* act, DqScratch(k, rows, layout));
    RETURN_IF_ERROR(Check(LaunchSwiGluDqw(gs.part, us.part, act, k, rows, st, gs.splits, gs.stride,
                                          us.splits, us.stride),
                          "SwiGLU (DQ only)"));
    MarkDqOnly(out_ref, k, rows, act);
    return absl::OkStatus();
  }
  if (gs.splits != 1 || us.splits != 1) {
    return absl::InternalError(absl::StrCat("cuda SwiGLU ", n.name,
                                            ": split-k partials for a layout that cannot sum them"));
  }
  const float* const g = gs.part;
  const float* const u = us.part;
  if (layout == ActivationLayout::kMmqInt8) {
    ASSIGN_OR_RETURN(void* act, Scratch("mmq_act", MmqActivationBytes(k, rows)));
    RETURN_IF_ERROR(Check(LaunchSwiGluMmq(g, u, act, k, rows, st), "SwiGLU (int8 only)"));
    MarkInt8Only(out_ref, k, rows, act);
    return absl::OkStatus();
  }
  if (layout == ActivationLayout::kDqF16) {
    ASSIGN_OR_RETURN(void* act, DqScratch(k, rows, layout));
    RETURN_IF_ERROR(Check(LaunchSwiGluDq(g, u, act, k, rows, st), "SwiGLU (DQ only)"));
    MarkDqOnly(out_ref, k, rows, act);
    return absl::OkStatus();
  }
  return Check(LaunchSwiGlu(g, u, out, k * rows, st), "SwiGLU");
}

absl::Status CudaBackend::RunSoftmax(const OpArgs& o) {
  const Node& n = o.n;
  float* out = o.out;
  cudaStream_t st = o.st;
  return Check(LaunchSoftmaxRows(o.f(0), out, n.shape.ne[0], n.shape.rows(), st), "Softmax");
}

absl::Status CudaBackend::RunPermute(const OpArgs& o) {
  const Node& n = o.n;
  float* out = o.out;
  cudaStream_t st = o.st;
  int64_t x_ne[4];
  for (int i = 0; i < 4; ++i) x_ne[i] = n.shape.ne[n.p.perm[i]];
  int8_t perm[4] = {n.p.perm[0], n.p.perm[1], n.p.perm[2], n.p.perm[3]};
  return Check(LaunchPermute(o.f(0), x_ne, perm, out, st), "Permute");
}

}  // namespace minfer::cuda
