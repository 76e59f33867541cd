// GraphExec: one graph, planned onto backends and bound to one KV cache.
//
// Planning (once, at creation):
//  * placement — each node goes to the first backend, in priority order,
//    whose SupportsOp accepts it; alias ops (View, Reshape, KvcacheLoad)
//    stay with the storage they alias; KV ops must land on the KV cache's
//    backend (an error names the node otherwise);
//  * splits — maximal runs of consecutive nodes on one backend; a tensor
//    consumed on another backend is copied once at the start of the first
//    split that needs it (the only cross-backend traffic);
//  * liveness allocation — per backend, every tensor gets a byte range in a
//    buffer whose other tenants' lifetimes do not overlap its own (greedy
//    best fit over first-definition/last-use intervals); graph inputs live
//    from the start, the logits to the end. KV regions belong to the KvCache
//    and never enter this free list.
// Buffers are allocated at creation and kept until destruction, so every
// execution reuses the same addresses (the precondition for CUDA graph
// replay).
//
// Run() fills inputs, then for each split asks the backend's replay hook
// first and otherwise executes the nodes one by one, synchronizing the
// backend at the split's end. Not thread-safe; one Run at a time.
#ifndef MINFER_ENGINE_GRAPH_EXECUTOR_H_
#define MINFER_ENGINE_GRAPH_EXECUTOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/graph/backend.h"
#include "engine/graph/graph.h"
#include "engine/graph/kv_cache.h"

namespace minfer::graph {

struct Split {
  Backend* backend = nullptr;
  int begin = 0;  // node range [begin, end)
  int end = 0;
  // Tensors produced elsewhere, copied into this backend before the split.
  struct Copy {
    NodeId node;
    BufferRef src;
    BufferRef dst;
  };
  std::vector<Copy> copies;
};

// Host data for one execution (the paged inputs only for graphs that have
// them; see GraphIO).
struct RunInputs {
  absl::Span<const int32_t> tokens;
  absl::Span<const int32_t> positions;
  absl::Span<const int32_t> out_rows;
  absl::Span<const int32_t> kv_rows;
  absl::Span<const int32_t> attn_tiles;
  absl::Span<const int32_t> block_tables;
  absl::Span<const int32_t> top_mode;
  // The first top_mask.size() words of the TopK mask input (the columns of
  // the step's masked rows, in slot order); empty: nothing is written, so a
  // step without masked rows uploads nothing for masks. Unlike the other
  // inputs it may be shorter than the graph's input (never longer).
  absl::Span<const uint32_t> top_mask;
  // Late masks (constrained decoding overlapped with the forward pass): when
  // set, top_mask must be empty and Run calls this once, after issuing every
  // node before the graph's first reader of the mask input and before
  // issuing that reader, with the backend flushed (Backend::Flush) so the
  // device computes the forward while the host builds the masks. It returns
  // the words as top_mask would hold them (the span must stay valid until
  // Run returns); an error fails the step. Called exactly once per Run: a
  // graph without a reader of the mask input calls it before any node.
  std::function<absl::StatusOr<absl::Span<const uint32_t>>()> late_top_mask;
};

// Activation memory shared by graphs that never run at the same time (the
// batched runner's graphs, one per batch size): each graph planned with the
// arena lays its buffers out inside the arena's one buffer on the backend,
// so their activations cost the largest graph's, not the sum. The buffer
// keeps its address while any graph uses it (replay); it grows only when no
// graph does.
class ActivationArena {
 public:
  explicit ActivationArena(Backend* backend) : backend_(backend) {}
  ~ActivationArena();
  ActivationArena(const ActivationArena&) = delete;
  ActivationArena& operator=(const ActivationArena&) = delete;

  Backend* backend() const { return backend_; }
  // The buffer, holding at least `bytes`, for one more user. Growing it
  // while graphs use it is FAILED_PRECONDITION (their addresses would move);
  // drop them first.
  absl::StatusOr<int32_t> Acquire(int64_t bytes);
  void Release();
  int64_t bytes() const { return bytes_; }
  int users() const { return users_; }

 private:
  Backend* backend_;
  int32_t buffer_ = -1;
  int64_t bytes_ = 0;
  int users_ = 0;
};

class GraphExec {
 public:
  // `backends` in priority order; `kv` may be null for graphs without KV ops.
  // `arenas` (optional, one per backend that should use one): activation
  // buffers of those backends go into the arena instead of buffers of
  // their own; the arenas must outlive the GraphExec.
  static absl::StatusOr<std::unique_ptr<GraphExec>> Create(
      std::shared_ptr<const Graph> graph, std::vector<Backend*> backends, KvCache* kv,
      const std::vector<ActivationArena*>& arenas = {});
  ~GraphExec();
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;

  // Executes the graph; on success `logits` (unless null: then nothing is
  // read back) holds [n_vocab x n_out] floats (row-major by output row).
  absl::Status Run(const RunInputs& in, std::vector<float>* logits);

  const Graph& graph() const { return *graph_; }
  uint64_t uid() const { return uid_; }
  const std::vector<Split>& splits() const { return splits_; }
  Backend* placement(NodeId id) const { return placement_[id]; }
  // The storage of a node's output (aliases resolve to their root's range).
  const BufferRef& storage(NodeId id) const { return storage_[id]; }
  // Inclusive interval of node indices during which the node's storage
  // must stay intact (for allocator tests).
  std::pair<int, int> lifetime(NodeId id) const { return lifetime_[id]; }
  // Bytes of activation buffers allocated, per backend.
  int64_t activation_bytes(const Backend* b) const;
  // Reads any node's output to the host (debugging and tests).
  absl::Status ReadNode(NodeId id, void* dst, int64_t bytes) const;
  // Reads bytes [offset, offset + bytes) of a node's output (e.g. some
  // rows of the logits after Run(in, nullptr)).
  absl::Status ReadNodeRange(NodeId id, int64_t offset, void* dst, int64_t bytes) const;

 private:
  GraphExec() = default;
  absl::Status Plan(std::vector<Backend*> backends);
  // Runs split s; with `late`, the nodes before `cut` (a node of s), then
  // the late input through `late`, then the rest.
  absl::Status ExecuteSplit(const Split& s, int cut = -1,
                            const std::function<absl::Status()>* late = nullptr);
  // Replays or issues nodes [begin, end) of split s; leaves the backend's
  // window open, on error too (ExecuteSplit closes it).
  absl::Status ExecuteRange(const Split& s, int begin, int end);

  std::shared_ptr<const Graph> graph_;
  KvCache* kv_ = nullptr;
  uint64_t uid_ = 0;
  std::vector<Backend*> placement_;
  std::vector<BufferRef> storage_;
  std::vector<std::pair<int, int>> lifetime_;
  std::vector<Split> splits_;
  // The first node reading io.top_mask (-1: none): where late masks go in.
  int mask_reader_ = -1;
  // Per split, per node in it: input storages as seen by its backend.
  std::vector<std::vector<BufferRef>> input_refs_;
  struct Owned {
    Backend* backend;
    int32_t buffer;
    int64_t bytes;
  };
  std::vector<Owned> owned_;
  std::vector<ActivationArena*> arena_candidates_;
  std::vector<ActivationArena*> arenas_in_use_;  // acquired by Plan
};

}  // namespace minfer::graph

#endif  // MINFER_ENGINE_GRAPH_EXECUTOR_H_
