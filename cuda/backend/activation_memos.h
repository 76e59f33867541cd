// ActivationMemos: what the CUDA backend knows about derived copies of its
// activations within one execution window (host bookkeeping only).
//
// An activation is a byte range of a pool buffer, named by its start
// (buffer, offset) and its length. Three facts are kept:
//   - q8 planes: the activation's BlockQ8A plane (MMVQ's int8 input) holds
//     its current contents, for its first `bytes` bytes (a decode producer
//     wrote it in its epilogue, or a quantize launch did);
//   - the MMQ scratch: which activation (and k x nt shape) the one shared
//     MMQ activation scratch holds, so matmuls of the same input back to
//     back (Q/K/V, gate/up) quantize it once; the same for the DQ GEMM's
//     f16 activation scratch;
//   - dead ranges (mode 2): outputs whose producer wrote only MMQ's int8
//     layout, so their f32 bytes were never written in this window.
// A write that shares a byte with a source range invalidates what was
// derived from it (and makes a dead range live: it now holds written
// bytes); the window's end forgets everything, because the liveness
// allocator gives buffers new meanings from step to step. A read of a dead
// range is refused with an error naming the reader: reading it would
// compute on garbage silently.
//
// Ranges overlap when they share a byte of the same buffer: adjacent ranges
// do not overlap, and ranges of different buffers never do.
#ifndef MINFER_CUDA_BACKEND_ACTIVATION_MEMOS_H_
#define MINFER_CUDA_BACKEND_ACTIVATION_MEMOS_H_

#include <cstdint>
#include <map>
#include <tuple>

#include "absl/status/status.h"
#include "engine/graph/backend.h"
#include "engine/graph/graph.h"

namespace minfer::cuda {

class ActivationMemos {
 public:
  // --- q8 planes. `x` names the activation by (buffer, offset); its
  // `bytes` field is not used (callers pass the length they mean).
  // Whether x's q8 plane holds at least its first `bytes` bytes.
  bool Q8Holds(const graph::BufferRef& x, int64_t bytes) const;
  // Whether x's q8 plane holds any valid prefix.
  bool HasQ8(const graph::BufferRef& x) const;
  // x's q8 plane now holds its first `bytes` bytes (replacing any earlier
  // length for the same start).
  void SetQ8(const graph::BufferRef& x, int64_t bytes);

  // --- the MMQ activation scratch.
  // Whether `scratch` holds x quantized for k x nt (source k * nt * 4 bytes).
  bool MmqHolds(const graph::BufferRef& x, int64_t k, int64_t nt, const void* scratch) const;
  void SetMmq(const graph::BufferRef& x, int64_t k, int64_t nt, void* scratch);
  void ClearMmq() { mmq_.valid = false; }

  // --- the DQ GEMM's activation scratch (the same contract).
  bool DqHolds(const graph::BufferRef& x, int64_t k, int64_t nt, const void* scratch) const;
  void SetDq(const graph::BufferRef& x, int64_t k, int64_t nt, void* scratch);

  // --- dead ranges (mode 2).
  // A producer wrote `out`'s k x nt activations only into `scratch` (MMQ's
  // layout): the scratch memo points at it and its f32 range is dead.
  void MarkInt8Only(const graph::BufferRef& out, int64_t k, int64_t nt, void* scratch);
  // The same with the DQ GEMM's layout in its scratch.
  void MarkDqOnly(const graph::BufferRef& out, int64_t k, int64_t nt, void* scratch);
  bool HasDead() const { return !dead_.empty(); }
  // An error naming node `n` if `bytes` bytes at `in` overlap a dead range.
  absl::Status CheckNotDead(const graph::Node& n, const graph::BufferRef& in, int64_t bytes) const;

  // `bytes` bytes at `written` were written: drops every memo whose source
  // range overlaps them, and the dead ranges they overlap.
  void Invalidate(const graph::BufferRef& written, int64_t bytes);
  // The execution window ended: forgets everything.
  void EndWindow();

 private:
  using Key = std::tuple<int32_t, int64_t>;  // (buffer, offset)
  static Key KeyOf(const graph::BufferRef& r) { return Key{r.buffer, r.offset}; }

  std::map<Key, int64_t> q8_;  // start -> source bytes its plane holds
  // A scratch holding one activation in a kernel's layout.
  struct Derived {
    bool valid = false;
    Key key{};
    int64_t bytes = 0;  // source range
    int64_t k = 0, nt = 0;
    const void* scratch = nullptr;
    bool Holds(const Key& x, int64_t k_, int64_t nt_, const void* s) const {
      return valid && key == x && k == k_ && nt == nt_ && scratch == s;
    }
  };
  Derived mmq_;
  Derived dq_;
  std::map<Key, int64_t> dead_;  // start -> bytes
};

}  // namespace minfer::cuda

#endif  // MINFER_CUDA_BACKEND_ACTIVATION_MEMOS_H_
