// The buffer pool every backend keeps (docs/design.md, backends and the
// graph): allocations identified
// by small integer ids, recycled through a byte-matched free list and never
// released before the pool dies — so an address captured in a recorded
// graph stays valid — plus `gen`, which moves on every allocation or reuse
// (the replay invalidation trigger).
//
// Not thread-safe (a backend is driven by one thread at a time).
#ifndef MINFER_ENGINE_GRAPH_BUFFER_POOL_H_
#define MINFER_ENGINE_GRAPH_BUFFER_POOL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/graph/backend.h"

namespace minfer::graph {

class BufferPool {
 public:
  // Allocates `bytes` of the backend's memory (null/error on failure).
  using AllocFn = std::function<absl::StatusOr<void*>(int64_t bytes)>;
  using FreeFn = std::function<void(void*)>;

  // `owner` is the backend whose BufferRefs this pool resolves; `label`
  // prefixes error messages ("cpu", "cuda").
  BufferPool(const Backend* owner, std::string label) : owner_(owner), label_(std::move(label)) {}

  // A freed buffer of exactly `bytes`, or a new one from `alloc`.
  absl::StatusOr<int32_t> Acquire(int64_t bytes, const AllocFn& alloc);
  // Back to the free list (memory is kept).
  void Release(int32_t id);
  // The address of [ref.offset, ref.offset + need) of one of this pool's
  // buffers; INTERNAL (naming both sizes) when the range does not fit.
  absl::StatusOr<uint8_t*> Resolve(const BufferRef& ref, int64_t need) const;
  // Frees every allocation (the owner's destructor, after it synchronized).
  void ReleaseAll(const FreeFn& free);
  // Frees the buffers on the free list (their ids are never handed out
  // again) and returns how many bytes that gave back: once an engine is gone
  // (a model going to sleep), so its memory returns to the system instead
  // of waiting for a buffer of the same size.
  int64_t FreeUnused(const FreeFn& free);

  uint64_t gen() const { return gen_; }
  int64_t bytes() const { return bytes_; }

 private:
  struct Entry {
    uint8_t* data = nullptr;
    int64_t bytes = 0;
    bool free = false;
  };
  const Backend* owner_;
  std::string label_;
  std::vector<Entry> entries_;
  uint64_t gen_ = 0;
  int64_t bytes_ = 0;
};

}  // namespace minfer::graph

#endif  // MINFER_ENGINE_GRAPH_BUFFER_POOL_H_
