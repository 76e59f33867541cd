#include "engine/runtime/kv_pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/base/status.h"

namespace minfer::runtime {

BlockAllocator::BlockAllocator(int64_t n_blocks, int64_t first)
    : n_blocks_(n_blocks), first_(std::min(first, n_blocks)), blocks_(n_blocks) {
  fresh_.reserve(n_blocks_ - first_);
  // Lowest ids on top of the stack: a fresh pool hands out 1, 2, 3, ...
  for (int64_t b = n_blocks_ - 1; b >= first_; --b) fresh_.push_back(static_cast<int32_t>(b));
}

uint64_t BlockAllocator::Key(int32_t parent, uint64_t salt, absl::string_view ns,
                             absl::Span<const int32_t> tokens) const {
  // splitmix64 steps over the chain's identity and the tokens; equality is
  // checked on lookup, so this only has to spread.
  auto mix = [](uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  };
  const uint64_t pgen = parent == kNoParent ? 0 : blocks_[parent].gen;
  uint64_t h = mix(salt ^ mix((static_cast<uint64_t>(static_cast<uint32_t>(parent)) << 32) | pgen));
  // Only a first block carries the namespace; a later one is reached
  // through its parent, which matched it exactly.
  if (parent == kNoParent) {
    h = mix(h ^ ns.size());
    for (unsigned char c : ns) h = mix(h ^ c);
  }
  for (int32_t t : tokens) h = mix(h ^ static_cast<uint32_t>(t));
  return h;
}

void BlockAllocator::Unpublish(int32_t b) {
  Block& k = blocks_[b];
  if (!k.published) return;
  auto it = index_.find(k.key);
  if (it != index_.end() && it->second == b) index_.erase(it);
  k.published = false;
  if (hasher_ != nullptr) {
    const uint64_t h = KvBlockHasher::External(k.digest);
    // Removals of one call (an allocation's evictions, UnpublishAll) share
    // an event.
    if (!events_.empty() && events_.back().type == KvEvent::Type::kBlockRemoved) {
      events_.back().block_hashes.push_back(h);
    } else {
      KvEvent e;
      e.type = KvEvent::Type::kBlockRemoved;
      e.block_hashes.push_back(h);
      events_.push_back(std::move(e));
    }
  }
}

void BlockAllocator::TakeEvents(std::vector<KvEvent>* out) {
  for (KvEvent& e : events_) out->push_back(std::move(e));
  events_.clear();
}

int64_t BlockAllocator::UnpublishAll() {
  int64_t n = 0;
  // Removals of this call form one event of their own.
  if (hasher_ != nullptr) events_.push_back(KvEvent{KvEvent::Type::kBlockRemoved, {}, {}, {}});
  for (int32_t b = 0; b < static_cast<int32_t>(blocks_.size()); ++b) {
    if (!blocks_[b].published) continue;
    Unpublish(b);
    ++n;
  }
  if (hasher_ != nullptr && events_.back().block_hashes.empty()) events_.pop_back();
  // The cached blocks hold nothing reusable now: they are plain free blocks.
  for (int32_t b : lru_) fresh_.push_back(b);
  lru_.clear();
  return n;
}

bool BlockAllocator::Allocate(int64_t n, std::vector<int32_t>* out) {
  if (n <= 0) return true;
  if (n > free()) return false;
  for (int64_t i = 0; i < n; ++i) {
    int32_t b;
    if (!fresh_.empty()) {
      b = fresh_.back();
      fresh_.pop_back();
    } else {
      b = lru_.front();
      lru_.pop_front();
      Unpublish(b);
      evictions_++;
    }
    Block& k = blocks_[b];
    k.refs = 1;
    k.gen++;
    used_++;
    out->push_back(b);
  }
  return true;
}

void BlockAllocator::Free(absl::Span<const int32_t> blocks) {
  for (int32_t b : blocks) {
    Block& k = blocks_[b];
    if (--k.refs > 0) continue;
    used_--;
    if (k.published) {
      k.lru = lru_.insert(lru_.end(), b);
    } else {
      fresh_.push_back(b);
    }
  }
}

void BlockAllocator::Publish(int32_t b, int32_t parent, uint64_t salt, absl::string_view ns,
                             absl::Span<const int32_t> tokens) {
  Block& k = blocks_[b];
  if (k.published) return;
  if (parent != kNoParent && !blocks_[parent].published) return;  // unreachable
  const uint64_t key = Key(parent, salt, ns, tokens);
  if (!index_.emplace(key, b).second) return;  // the chain is cached already (or a collision)
  k.published = true;
  k.key = key;
  k.parent = parent;
  k.parent_gen = parent == kNoParent ? 0 : blocks_[parent].gen;
  k.salt = salt;
  k.ns = parent == kNoParent ? std::string(ns) : std::string();
  k.tokens.assign(tokens.begin(), tokens.end());
  if (hasher_ == nullptr) return;
  const Block* p = parent == kNoParent ? nullptr : &blocks_[parent];
  k.digest = hasher_->Hash(p != nullptr ? &p->digest : nullptr, tokens, ns);
  const uint64_t h = KvBlockHasher::External(k.digest);
  std::optional<uint64_t> ph;
  if (p != nullptr) ph = KvBlockHasher::External(p->digest);
  // A chain's consecutive blocks (a prompt's, published in one step) share
  // an event, as vLLM's do.
  if (!events_.empty() && events_.back().type == KvEvent::Type::kBlockStored && ph.has_value() &&
      events_.back().block_hashes.back() == *ph) {
    events_.back().block_hashes.push_back(h);
    events_.back().token_ids.insert(events_.back().token_ids.end(), tokens.begin(), tokens.end());
    return;
  }
  KvEvent e;
  e.type = KvEvent::Type::kBlockStored;
  e.block_hashes.push_back(h);
  e.parent_block_hash = ph;
  e.token_ids.assign(tokens.begin(), tokens.end());
  events_.push_back(std::move(e));
}

int64_t BlockAllocator::AcquirePrefix(absl::Span<const int32_t> tokens, int32_t block_size,
                                      int64_t max_blocks, uint64_t salt, absl::string_view ns,
                                      std::vector<int32_t>* out) {
  int32_t parent = kNoParent;
  int64_t n = 0;
  for (; n < max_blocks && (n + 1) * block_size <= static_cast<int64_t>(tokens.size()); ++n) {
    const absl::Span<const int32_t> t = tokens.subspan(n * block_size, block_size);
    auto it = index_.find(Key(parent, salt, ns, t));
    if (it == index_.end()) break;
    const int32_t b = it->second;
    const Block& k = blocks_[b];
    const uint32_t pgen = parent == kNoParent ? 0 : blocks_[parent].gen;
    if (k.parent != parent || k.parent_gen != pgen || k.salt != salt ||
        (parent == kNoParent && k.ns != ns) ||
        !std::equal(k.tokens.begin(), k.tokens.end(), t.begin(), t.end())) {
      break;
    }
    Block& held = blocks_[b];
    if (held.refs++ == 0) {
      lru_.erase(held.lru);
      used_++;
    }
    out->push_back(b);
    parent = b;
  }
  return n;
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
  if ((dtype == graph::DType::kQ8_0 || dtype == graph::DType::kFp8) && n_kv_embd % 32 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV type ", graph::DTypeName(dtype), " needs n_kv_embd % 32 == 0, got ",
                     n_kv_embd));
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
