#include "engine/runtime/kv_pool.h"

#include "absl/strings/str_cat.h"
#include "engine/base/status.h"

namespace minfer::runtime {

BlockAllocator::BlockAllocator(int64_t n_blocks, int64_t first)
    : n_blocks_(n_blocks), first_(std::min(first, n_blocks)) {
  free_.reserve(n_blocks_ - first_);
  // Lowest ids on top of the stack: a fresh pool hands out 1, 2, 3, ...
  for (int64_t b = n_blocks_ - 1; b >= first_; --b) free_.push_back(static_cast<int32_t>(b));
}

bool BlockAllocator::Allocate(int64_t n, std::vector<int32_t>* out) {
  if (n <= 0) return true;
  if (n > free()) return false;
  for (int64_t i = 0; i < n; ++i) {
    out->push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void BlockAllocator::Free(absl::Span<const int32_t> blocks) {
  for (int32_t b : blocks) free_.push_back(b);
}

absl::StatusOr<std::unique_ptr<KvPool>> KvPool::Create(graph::Backend* backend, int n_layers,
                                                       int64_t n_kv_embd, graph::DType dtype,
                                                       int32_t block_size, int64_t n_blocks) {
  if (block_size <= 0 || (block_size & (block_size - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV block size must be a power of two, got ", block_size));
  }
  if (n_blocks < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV pool needs at least 2 blocks (one is reserved), got ", n_blocks));
  }
  if (!backend->SupportsKvType(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("KV type ", graph::DTypeName(dtype),
                                                   " is not supported by backend ",
                                                   backend->name()));
  }
  if (dtype == graph::DType::kQ8_0 && n_kv_embd % 32 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV type q8_0 needs n_kv_embd % 32 == 0, got ", n_kv_embd));
  }
  std::unique_ptr<KvPool> p(new KvPool(block_size, n_blocks));
  graph::KvLayout layout;
  layout.dtype = dtype;
  layout.n_ctx = n_blocks * block_size;
  layout.n_kv_embd = n_kv_embd;
  ASSIGN_OR_RETURN(p->cache_, graph::KvCache::Create(backend, n_layers, layout));
  return p;
}

}  // namespace minfer::runtime
