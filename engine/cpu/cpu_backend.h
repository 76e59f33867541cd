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
// Not thread-safe: one slot worker drives it (the daemon gives each slot its
// own backend). Buffers are host memory (HostPtr works).
#ifndef MINFER_ENGINE_CPU_CPU_BACKEND_H_
#define MINFER_ENGINE_CPU_CPU_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/base/thread_pool.h"
#include "engine/graph/backend.h"
#include "engine/graph/buffer_pool.h"
#include "engine/graph/collective.h"

namespace minfer::cpu {

class CpuBackend : public graph::Backend {
 public:
  // `pool` may be shared with other CPU backends; null uses DefaultThreadPool().
  explicit CpuBackend(ThreadPool* pool = nullptr);
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
  int64_t MemoryBytes() const override { return buffers_.bytes() + static_cast<int64_t>(scratch_.size()); }
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

 private:
  // out += input i (r + out, as Add(r, y)), when node has that optional
  // residual input (graph.h MatMul / MoeFFN); refused when it holds fewer
  // floats than the output.
  absl::Status AddResidual(const graph::Node& node, const graph::ExecArgs& args, size_t i,
                           const std::vector<uint8_t*>& in, float* out);
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
};

}  // namespace minfer::cpu

#endif  // MINFER_ENGINE_CPU_CPU_BACKEND_H_
