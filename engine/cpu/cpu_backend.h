// The CPU backend: the reference implementation of every graph op, and the
// fallback when no GPU is usable.
//
// MatMul quantizes activations once per call to the int8 BlockQ8A format and
// runs integer dot products per weight type (engine/quant/vec_dot.h: AVX2 /
// AVX512-VNNI with run-time detection, scalar fallback); float weights use
// float dots. Work is split over a thread pool (MINFER_THREADS, default one
// thread per core). Attention uses an online softmax over the KV cache, whose
// element type may be f32, f16, q8_0 or fp8.
//
// Opt-in FP8 emulation (CpuBackendOptions::fp8_prefill_min_tokens, the
// MINFER_FP8_PREFILL knob): MatMul nodes of enough tokens whose weight is
// Q8_0, F16 or BF16 run engine/quant/fp8_matmul.h's reference instead (the
// GPU's FP8 prefill path, as its reference), weights converted once each.
//
// Not thread-safe: one slot worker drives it (the daemon gives each slot its
// own backend). Buffers are host memory (HostPtr works).
#ifndef MINFER_ENGINE_CPU_CPU_BACKEND_H_
#define MINFER_ENGINE_CPU_CPU_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/base/thread_pool.h"
#include "engine/graph/backend.h"
#include "engine/graph/buffer_pool.h"
#include "engine/graph/collective.h"
#include "engine/quant/fp8_matmul.h"

namespace minfer::cpu {

struct CpuBackendOptions {
  // 0 = off (the default; so is every value below 2, as on the GPU).
  // N >= 2: a MatMul node of at least N tokens whose weight is Q8_0, F16 or
  // BF16, and each such weight's product in a multi-token FusedQKV (which
  // is those MatMuls side by side), runs the FP8 e4m3 reference
  // (fp8_matmul.h): the weight's rows dequantized to f32 and converted once
  // per weight (per-row scales; at first use rather than at load, kept
  // until ReleaseUnused), the activations quantized per token on every call,
  // y = MatMulFp8Reference, then the node's residual add as usual. Other ops
  // (decode FusedQKV / FusedFFN, MoE experts) stay exact.
  // The token count is the node's, i.e. the step as padded to its graph's
  // bucket (batch_runner.h), decode tokens of a large batched step included;
  // so with this on, a token's logits depend on its step's bucket crossing
  // N (the CPU's batch invariance holds only with it off), as on the GPU.
  // Per-token activation scales keep tokens of one step independent.
  int64_t fp8_prefill_min_tokens = 0;
};

class CpuBackend : public graph::Backend {
 public:
  // `pool` may be shared with other CPU backends; null uses DefaultThreadPool().
  explicit CpuBackend(ThreadPool* pool = nullptr);
  CpuBackend(ThreadPool* pool, const CpuBackendOptions& options);
  ~CpuBackend() override;

  const std::string& name() const override { return name_; }
  bool SupportsOp(const graph::Node& node) const override;
  bool SupportsKvType(graph::DType t) const override;

  absl::StatusOr<int32_t> AllocBuffer(int64_t bytes) override;
  void FreeBuffer(int32_t buffer) override;
  uint64_t pool_gen() const override { return buffers_.gen(); }

  absl::Status ExecuteNode(const graph::Node& node, const graph::ExecArgs& args) override;
  absl::Status WriteHost(const graph::BufferRef& dst, const void* src, int64_t bytes) override;
  absl::Status ReadHost(const graph::BufferRef& src, void* dst, int64_t bytes) override;
  absl::Status Fill(const graph::BufferRef& dst, uint8_t value) override;
  absl::Status Synchronize() override { return absl::OkStatus(); }
  uint8_t* HostPtr(const graph::BufferRef& ref) override;
  int64_t MemoryBytes() const override {
    return buffers_.bytes() + static_cast<int64_t>(scratch_.size()) + fp8_weight_bytes_;
  }
  int64_t ReleaseUnused() override;

  // Bytes currently allocated (live + free list).
  int64_t allocated_bytes() const { return buffers_.bytes(); }

  // Makes this backend rank `rank` of a tensor-parallel model: its
  // AllReduce nodes sum through `collective` (which must outlive it).
  // Without one, AllReduce is not supported.
  void SetCollective(graph::Collective* collective, int rank) {
    collective_ = collective;
    rank_ = rank;
  }
  ThreadPool& pool() { return *pool_; }

  // Weight products computed on the FP8 path since construction (a MatMul
  // node is one, a FusedQKV node one per weight): how tests see it ran.
  int64_t fp8_matmuls() const { return fp8_matmuls_; }

 private:
  // out += input i (r + out, as Add(r, y)), when node has that optional
  // residual input (graph.h MatMul / MoeFFN); refused when it holds fewer
  // floats than the output.
  absl::Status AddResidual(const graph::Node& node, const graph::ExecArgs& args, size_t i,
                           const std::vector<uint8_t*>& in, float* out);
  // Whether w's product over nt tokens takes the FP8 path (options_).
  bool UsesFp8(const graph::Weight& w, int64_t nt) const;
  // y [w.rows(), nt] = the FP8 reference of W^T x (x [w.ne0(), nt]).
  absl::Status Fp8MatMul(const graph::Weight& w, const float* x, int64_t nt, float* y);
  // y = W^T x by the exact MatMul, or the FP8 path where UsesFp8 says so.
  absl::Status WeightProduct(const graph::Weight& w, const float* x, int64_t nt, float* y);
  absl::StatusOr<uint8_t*> Ptr(const graph::BufferRef& ref, int64_t need) const {
    return buffers_.Resolve(ref, need);
  }

  std::string name_ = "cpu";
  ThreadPool* pool_;
  graph::Collective* collective_ = nullptr;
  int rank_ = 0;
  graph::BufferPool buffers_{this, "cpu"};
  // Scratch for quantized activations and fused intermediates; grows on demand.
  std::vector<uint8_t> scratch_;

  CpuBackendOptions options_;
  // FP8 copies of the weights, keyed by the Weight (the model's, which
  // outlives its backends); `data` guards against a recycled address.
  struct Fp8Weight {
    const uint8_t* data = nullptr;
    Fp8Rows rows;
  };
  std::unordered_map<const graph::Weight*, Fp8Weight> fp8_weights_;
  int64_t fp8_weight_bytes_ = 0;
  int64_t fp8_matmuls_ = 0;
};

}  // namespace minfer::cpu

#endif  // MINFER_ENGINE_CPU_CPU_BACKEND_H_
