#include "engine/graph/buffer_pool.h"

#include "absl/strings/str_cat.h"

namespace minfer::graph {

absl::StatusOr<int32_t> BufferPool::Acquire(int64_t bytes, const AllocFn& alloc) {
  if (bytes <= 0) bytes = 1;
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].free && entries_[i].bytes == bytes) {
      entries_[i].free = false;
      ++gen_;
      return static_cast<int32_t>(i);
    }
  }
  absl::StatusOr<void*> p = alloc(bytes);
  if (!p.ok()) return p.status();
  entries_.push_back({static_cast<uint8_t*>(*p), bytes, false});
  bytes_ += bytes;
  ++gen_;
  return static_cast<int32_t>(entries_.size() - 1);
}

void BufferPool::Release(int32_t id) {
  if (id >= 0 && id < static_cast<int32_t>(entries_.size())) entries_[id].free = true;
}

absl::StatusOr<uint8_t*> BufferPool::Resolve(const BufferRef& ref, int64_t need) const {
  if (ref.backend != owner_ || ref.buffer < 0 ||
      ref.buffer >= static_cast<int32_t>(entries_.size())) {
    return absl::InternalError(
        absl::StrCat(label_, ": buffer ", ref.buffer, " is not this backend's"));
  }
  const Entry& e = entries_[ref.buffer];
  if (ref.offset < 0 || need < 0 || ref.offset + need > e.bytes) {
    return absl::InternalError(absl::StrCat(label_, ": buffer size mismatch: range [", ref.offset,
                                            ", +", need, ") exceeds buffer ", ref.buffer, " of ",
                                            e.bytes, " bytes"));
  }
  return e.data + ref.offset;
}

int64_t BufferPool::FreeUnused(const FreeFn& free) {
  int64_t freed = 0;
  for (Entry& e : entries_) {
    if (!e.free || e.data == nullptr) continue;
    free(e.data);
    freed += e.bytes;
    // A tombstone: no request matches 0 bytes (Acquire asks for >= 1).
    e.data = nullptr;
    e.bytes = 0;
  }
  if (freed > 0) {
    bytes_ -= freed;
    ++gen_;
  }
  return freed;
}

void BufferPool::ReleaseAll(const FreeFn& free) {
  for (Entry& e : entries_) {
    if (e.data != nullptr) free(e.data);
  }
  entries_.clear();
  bytes_ = 0;
  ++gen_;
}

}  // namespace minfer::graph
