// The KV memory of one model, in fixed-size blocks shared by all its
// sequences.
//
// KvPool is one graph::KvCache whose rows are n_blocks * block_size: block b
// holds cache rows [b * block_size, (b + 1) * block_size). A sequence owns a
// list of blocks (its block table); its logical row j lives in block
// table[j / block_size] at offset j % block_size. Block 0 is reserved: the
// padding tokens of a batch write there and nothing reads it.
//
// BlockAllocator is the bookkeeping alone (which blocks are held, by how
// many sequences, and which hold a cached prefix), so the scheduler can be
// tested without a model.
//
// Prefix caching. A full block a sequence has computed can be published:
// it then stands for "these block_size tokens, after exactly this chain of
// earlier blocks" (its parent block, recorded with the parent's allocation
// generation, so a parent that was evicted and reused never matches), under
// a salt for everything else that shapes its contents (the engine's knob
// generation), and in a cache namespace (a string: the tenant, a tenant's
// cache group or a request's cache_salt, chosen by the daemon). A later
// sequence whose prompt starts with the same tokens, in the same namespace,
// takes the chain's blocks instead of computing them (AcquirePrefix): they
// are read-only for it, as it writes only rows past them. A block is
// reference-counted; when the last holder frees a published block it stays
// cached (its contents intact) in least-recently-released order, counted
// as free, and Allocate reuses it only when no never-published block is
// left (an eviction). A block any sequence holds is never evicted. Lookups
// compare the tokens themselves, so a hash collision cannot match.
//
// Namespaces isolate: the namespace is part of the identity of a chain's
// first block, compared byte for byte (not only through the hash), and every
// later block names its parent, so no block of one namespace is reachable
// from a lookup in another. Without isolation one client could learn
// another's prompts from which of its own prompts hit the cache (usage's
// cached tokens, time to first token). The empty namespace is the default.
//
// Events (kv_events.h). With a hasher attached (RecordEvents), the
// allocator records a BlockStored for each block it publishes (consecutive
// blocks of one chain in one event) and a BlockRemoved for each it
// unpublishes (eviction, UnpublishAll); TakeEvents hands them over. A block
// is only published under a published parent (or as a first block): a child
// of an unpublished block could never be reached by a lookup, and its
// event would name a parent no router knows.
//
// Not thread-safe: the slot's worker owns both.
#ifndef MINFER_ENGINE_RUNTIME_KV_POOL_H_
#define MINFER_ENGINE_RUNTIME_KV_POOL_H_

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/graph/backend.h"
#include "engine/graph/kv_cache.h"
#include "engine/runtime/kv_events.h"

namespace minfer::runtime {

class BlockAllocator {
 public:
  static constexpr int32_t kNoParent = -1;

  // Blocks [first, n_blocks) are handed out; those below `first` are
  // reserved.
  BlockAllocator(int64_t n_blocks, int64_t first);

  int64_t total() const { return n_blocks_ - first_; }  // allocatable blocks
  // Blocks Allocate can hand out: never held, released, or cached.
  int64_t free() const { return total() - used_; }
  int64_t used() const { return used_; }  // held by at least one sequence
  // Free blocks that still hold a published prefix (reusable by a lookup).
  int64_t cached() const { return static_cast<int64_t>(lru_.size()); }
  uint64_t evictions() const { return evictions_; }

  // Appends n blocks to *out, each held once, or none (false) when fewer
  // are free. Takes never-published blocks first, then evicts cached ones,
  // least recently released first.
  bool Allocate(int64_t n, std::vector<int32_t>* out);
  // Drops one hold of each block (each must be held).
  void Free(absl::Span<const int32_t> blocks);

  // Publishes held block `b` as holding `tokens` (one block's worth) after
  // block `parent` (kNoParent for a sequence's first block; it must be
  // published or held) under `salt` in namespace `ns` (what a first block
  // is matched by; a later block inherits its parent's). Nothing happens
  // when b is published already or an entry for the same chain and tokens
  // exists.
  void Publish(int32_t b, int32_t parent, uint64_t salt, absl::string_view ns,
               absl::Span<const int32_t> tokens);
  void Publish(int32_t b, int32_t parent, uint64_t salt, absl::Span<const int32_t> tokens) {
    Publish(b, parent, salt, absl::string_view(), tokens);
  }
  // The longest chain of published blocks holding tokens[0, n * block_size)
  // for n <= max_blocks under `salt` in namespace `ns`: appends them to
  // *out, each held once more, and returns n.
  int64_t AcquirePrefix(absl::Span<const int32_t> tokens, int32_t block_size, int64_t max_blocks,
                        uint64_t salt, absl::string_view ns, std::vector<int32_t>* out);
  int64_t AcquirePrefix(absl::Span<const int32_t> tokens, int32_t block_size, int64_t max_blocks,
                        uint64_t salt, std::vector<int32_t>* out) {
    return AcquirePrefix(tokens, block_size, max_blocks, salt, absl::string_view(), out);
  }

  // Records events from now on with `hasher` (null: stop; it must outlive
  // the allocator or the next call). Blocks published before are not
  // announced (attach before the first publication).
  void RecordEvents(const KvBlockHasher* hasher) { hasher_ = hasher; }
  bool recording() const { return hasher_ != nullptr; }
  // Appends the events recorded since the last call to *out.
  void TakeEvents(std::vector<KvEvent>* out);
  // Unpublishes every published block: cached ones become never-published
  // free blocks, held ones stay with their sequences (no longer reusable).
  // For a change of what blocks mean (the salt) and for unloading. Returns
  // how many were published.
  int64_t UnpublishAll();

  // Tests: how many sequences hold block b; whether it is published.
  int32_t refs(int32_t b) const { return blocks_[b].refs; }
  bool published(int32_t b) const { return blocks_[b].published; }

 private:
  struct Block {
    int32_t refs = 0;
    uint32_t gen = 0;  // bumped at every allocation
    bool published = false;
    uint64_t key = 0;
    int32_t parent = kNoParent;
    uint32_t parent_gen = 0;
    uint64_t salt = 0;
    std::string ns;  // first blocks only (kNoParent); later ones inherit it
    std::vector<int32_t> tokens;
    std::list<int32_t>::iterator lru;  // valid while cached
    BlockDigest digest{};  // while published with events on
  };
  uint64_t Key(int32_t parent, uint64_t salt, absl::string_view ns,
              absl::Span<const int32_t> tokens) const;
  void Unpublish(int32_t b);

  int64_t n_blocks_, first_;
  int64_t used_ = 0;
  uint64_t evictions_ = 0;
  std::vector<Block> blocks_;
  std::vector<int32_t> fresh_;  // free, unpublished: a stack, the most recently freed on top
  std::list<int32_t> lru_;      // free, published: least recently released first
  absl::flat_hash_map<uint64_t, int32_t> index_;  // Key -> published block
  const KvBlockHasher* hasher_ = nullptr;
  std::vector<KvEvent> events_;
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
