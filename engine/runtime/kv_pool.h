// The KV memory of one model, in fixed-size blocks shared by all its
// sequences.
//
// KvPool is one graph::KvCache whose rows are n_blocks * block_size: block b
// holds cache rows [b * block_size, (b + 1) * block_size). A sequence owns a
// list of blocks (its block table); its logical row j lives in block
// table[j / block_size] at offset j % block_size. Block 0 is reserved: the
// padding tokens of a batch write there and nothing reads it.
//
// BlockAllocator is the bookkeeping alone (which blocks are free), so the
// scheduler can be tested without a model.
//
// Not thread-safe: the slot's worker owns both.
#ifndef MINFER_ENGINE_RUNTIME_KV_POOL_H_
#define MINFER_ENGINE_RUNTIME_KV_POOL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/graph/backend.h"
#include "engine/graph/kv_cache.h"

namespace minfer::runtime {

class BlockAllocator {
 public:
  // Blocks [first, n_blocks) are handed out; those below `first` are
  // reserved.
  BlockAllocator(int64_t n_blocks, int64_t first);

  int64_t total() const { return n_blocks_ - first_; }  // allocatable blocks
  int64_t free() const { return static_cast<int64_t>(free_.size()); }
  int64_t used() const { return total() - free(); }
  // Appends n blocks to *out, or none (false) when fewer are free.
  bool Allocate(int64_t n, std::vector<int32_t>* out);
  // Returns blocks (each must have been allocated and not freed since).
  void Free(absl::Span<const int32_t> blocks);

 private:
  int64_t n_blocks_, first_;
  std::vector<int32_t> free_;  // a stack: the most recently freed is reused first
};

// Blocks for `rows` rows of a sequence.
inline int64_t BlocksFor(int64_t rows, int64_t block_size) {
  return (rows + block_size - 1) / block_size;
}

class KvPool {
 public:
  static constexpr int32_t kTrashBlock = 0;

  // n_blocks includes the reserved block 0. block_size must be a power of
  // two; the cache is allocated (zeroed) on `backend`.
  static absl::StatusOr<std::unique_ptr<KvPool>> Create(graph::Backend* backend, int n_layers,
                                                        int64_t n_kv_embd, graph::DType dtype,
                                                        int32_t block_size, int64_t n_blocks);

  graph::KvCache* cache() { return cache_.get(); }
  BlockAllocator& blocks() { return blocks_; }
  const BlockAllocator& blocks() const { return blocks_; }
  int32_t block_size() const { return block_size_; }
  int64_t n_blocks() const { return n_blocks_; }  // including the reserved one
  int64_t rows() const { return n_blocks_ * block_size_; }
  graph::DType dtype() const { return cache_->layout().dtype; }
  int64_t bytes() const { return cache_->bytes(); }
  // KV bytes one block holds over all layers.
  int64_t block_bytes() const { return bytes() / n_blocks_; }

  // KV bytes per block for a model's shape (admission estimates).
  static int64_t BlockBytes(int n_layers, int64_t n_kv_embd, graph::DType dtype,
                            int32_t block_size) {
    return 2 * static_cast<int64_t>(n_layers) * graph::DTypeBytes(dtype, n_kv_embd) * block_size;
  }

 private:
  KvPool(int32_t block_size, int64_t n_blocks)
      : blocks_(n_blocks, 1), block_size_(block_size), n_blocks_(n_blocks) {}

  std::unique_ptr<graph::KvCache> cache_;
  BlockAllocator blocks_;
  int32_t block_size_;
  int64_t n_blocks_;
};

}  // namespace minfer::runtime

#endif  // MINFER_ENGINE_RUNTIME_KV_POOL_H_
