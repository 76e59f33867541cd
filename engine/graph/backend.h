// The interface every compute backend (CPU, CUDA) implements, and the
// storage references the scheduler hands it.
//
// Contract (docs/design.md, backends and the graph): placement is decided
// when a graph is
// planned, by SupportsOp in backend priority order, and never changes while
// it runs; a backend that was assigned a node must execute it or return an
// error carrying the values that violated its invariant — it never falls
// back to another backend. Buffers handed out by AllocBuffer keep their
// address until FreeBuffer (graph replay depends on that); FreeBuffer
// recycles into a free list rather than releasing memory.
//
// A backend instance is used by one thread at a time (the slot's worker).
#ifndef MINFER_ENGINE_GRAPH_BACKEND_H_
#define MINFER_ENGINE_GRAPH_BACKEND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/graph/graph.h"

namespace minfer::graph {

class Backend;

// A byte range inside one of a backend's buffers.
struct BufferRef {
  Backend* backend = nullptr;
  int32_t buffer = -1;
  int64_t offset = 0;
  int64_t bytes = 0;

  bool valid() const { return backend != nullptr && buffer >= 0; }
};

// One layer's KV cache: two persistent regions of [n_kv_embd, n_ctx]
// elements of `dtype` (row p holds position p).
struct KvLayer {
  BufferRef k;
  BufferRef v;
};

struct KvLayout {
  DType dtype = DType::kF32;
  int64_t n_ctx = 0;
  int64_t n_kv_embd = 0;
  int64_t row_bytes() const { return DTypeBytes(dtype, n_kv_embd); }
};

// What ExecuteNode gets besides the node: the storage of each input (already
// on this backend), of the output, and — for ops touching the KV cache — the
// layer's regions.
struct ExecArgs {
  std::vector<BufferRef> inputs;
  BufferRef output;
  const KvLayer* kv = nullptr;
  KvLayout kv_layout;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual const std::string& name() const = 0;
  // Whether this backend has a kernel for the node (op, dtypes, params).
  virtual bool SupportsOp(const Node& node) const = 0;
  // KV cache element types this backend's store/attention kernels handle.
  virtual bool SupportsKvType(DType t) const = 0;

  virtual absl::StatusOr<int32_t> AllocBuffer(int64_t bytes) = 0;
  virtual void FreeBuffer(int32_t buffer) = 0;
  // Bumps on every allocation or reuse that may move an address captured
  // in a recorded graph.
  virtual uint64_t pool_gen() const = 0;

  virtual absl::Status ExecuteNode(const Node& node, const ExecArgs& args) = 0;
  virtual absl::Status WriteHost(const BufferRef& dst, const void* src, int64_t bytes) = 0;
  virtual absl::Status ReadHost(const BufferRef& src, void* dst, int64_t bytes) = 0;
  // Also fills with a byte value (used to zero KV regions).
  virtual absl::Status Fill(const BufferRef& dst, uint8_t value) = 0;
  // Called at split boundaries: all queued work of this backend completes.
  virtual absl::Status Synchronize() = 0;
  // Issues the work queued so far without waiting for it (a backend that
  // records launches ends the recording and launches it), so the host can
  // work while the device runs and then write an input that later nodes of
  // the same split read (RunInputs::late_top_mask): WriteHost after Flush is
  // ordered after everything issued before it. A backend that executes
  // nodes as they come has nothing to do.
  virtual absl::Status Flush() { return absl::OkStatus(); }

  // The scheduler's replay hook: called before a split [begin, end) of graph
  // `graph_uid` executes. Returning true means a recorded graph already ran
  // the whole range and the node loop is skipped.
  virtual absl::StatusOr<bool> GraphReplay(uint64_t graph_uid, int begin, int end,
                                           int64_t nt_hint) {
    return false;
  }

  // Host-memory backends expose their bytes; others return null.
  virtual uint8_t* HostPtr(const BufferRef& ref) { return nullptr; }

  // Memory this backend holds for its model: weights it copied plus its
  // buffer pool (activations, KV caches) and scratch, in bytes.
  virtual int64_t MemoryBytes() const { return 0; }
  // Frees what no one holds any more (the buffer pool's free list, scratch)
  // and returns the bytes given back: after an engine is destroyed (a model
  // going to sleep), with nothing running on the backend.
  virtual int64_t ReleaseUnused() { return 0; }
};

}  // namespace minfer::graph

#endif  // MINFER_ENGINE_GRAPH_BACKEND_H_
