// The CUDA backend's row handlers: GetRows (the embedding gather from a
// weight, or rows of a tensor) and TopK (on-device sampling's candidates).
#include "cuda/backend/cuda_backend.h"

#include <algorithm>

#include "cuda/kernels/matmul.h"
#include "cuda/kernels/ops.h"
#include "cuda/kernels/sample.h"
#include "engine/base/status.h"
#include "engine/graph/graph.h"

namespace minfer::cuda {

// The mode encoding is graph.h's; the kernel header restates it.
static_assert(kTopKMaskShift == graph::kTopKMaskShift);

using graph::ExecArgs;
using graph::Node;

absl::Status CudaBackend::RunGetRows(const OpArgs& o) {
  const Node& n = o.n;
  const ExecArgs& a = o.a;
  float* out = o.out;
  cudaStream_t st = o.st;
  int32_t* err_flag = o.err_flag;
  if (!n.weights.empty()) {
    ASSIGN_OR_RETURN(const WeightView* w, Weight(n.weights[0]));
    return Check(LaunchGetRowsWeight(*w, o.i32(0), n.shape.ne[1], out, err_flag, st),
                 "GetRows (weight)");
  }
  const int64_t ne0 = n.shape.ne[0];
  return Check(LaunchGetRowsF32(o.f(0), ne0, a.inputs[0].bytes / 4 / ne0, o.i32(1), n.shape.ne[1],
                                out, err_flag, st),
               "GetRows");
}

absl::Status CudaBackend::RunTopK(const OpArgs& o) {
  const Node& n = o.n;
  const ExecArgs& a = o.a;
  float* out = o.out;
  cudaStream_t st = o.st;
  const int64_t n_out = n.shape.ne[1];
  const int64_t n_vocab = a.inputs[0].bytes / 4 / std::max<int64_t>(n_out, 1);
  // The mask input (when the graph has one) is read only for the rows whose
  // mode names a column; the kernel reports a column it does not have.
  const uint32_t* mask =
      n.inputs.size() > 2 ? reinterpret_cast<const uint32_t*>(o.in[2]) : nullptr;
  return Check(LaunchTopK(o.f(0), n_vocab, n_out, o.i32(1), mask, n.p.top_k, n.p.vocab_limit, out,
                          o.err_flag, st),
               "TopK");
}

}  // namespace minfer::cuda
