#include "cuda/backend/activation_memos.h"

#include <iterator>

#include "absl/strings/str_cat.h"

namespace minfer::cuda {

namespace {
// Whether the range (key, len) shares a byte with `bytes` at `r`.
bool Overlaps(const std::tuple<int32_t, int64_t>& key, int64_t len, const graph::BufferRef& r,
              int64_t bytes) {
  return std::get<0>(key) == r.buffer && std::get<1>(key) < r.offset + bytes &&
         r.offset < std::get<1>(key) + len;
}
}  // namespace

bool ActivationMemos::Q8Holds(const graph::BufferRef& x, int64_t bytes) const {
  auto it = q8_.find(KeyOf(x));
  return it != q8_.end() && it->second >= bytes;
}

bool ActivationMemos::HasQ8(const graph::BufferRef& x) const { return q8_.count(KeyOf(x)) != 0; }

void ActivationMemos::SetQ8(const graph::BufferRef& x, int64_t bytes) { q8_[KeyOf(x)] = bytes; }

bool ActivationMemos::MmqHolds(const graph::BufferRef& x, int64_t k, int64_t nt,
                               const void* scratch) const {
  return mmq_.Holds(KeyOf(x), k, nt, scratch);
}

void ActivationMemos::SetMmq(const graph::BufferRef& x, int64_t k, int64_t nt, void* scratch) {
  mmq_ = {true, KeyOf(x), k * nt * 4, k, nt, scratch};
}

bool ActivationMemos::DqHolds(const graph::BufferRef& x, int64_t k, int64_t nt,
                              const void* scratch) const {
  return dq_.Holds(KeyOf(x), k, nt, scratch);
}

void ActivationMemos::SetDq(const graph::BufferRef& x, int64_t k, int64_t nt, void* scratch) {
  dq_ = {true, KeyOf(x), k * nt * 4, k, nt, scratch};
}

void ActivationMemos::MarkInt8Only(const graph::BufferRef& out, int64_t k, int64_t nt,
                                   void* scratch) {
  SetMmq(out, k, nt, scratch);
  dead_[KeyOf(out)] = k * nt * 4;
}

void ActivationMemos::MarkDqOnly(const graph::BufferRef& out, int64_t k, int64_t nt,
                                 void* scratch) {
  SetDq(out, k, nt, scratch);
  dead_[KeyOf(out)] = k * nt * 4;
}

absl::Status ActivationMemos::CheckNotDead(const graph::Node& n, const graph::BufferRef& in,
                                           int64_t bytes) const {
  for (const auto& [key, len] : dead_) {
    if (Overlaps(key, len, in, bytes)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cuda ", graph::OpName(n.op), " ", n.name,
          ": dead-write guard: its input is the output of a mode-2 producer, which wrote only the "
          "int8 (or DQ f16) activation plane of the GEMMs the graph said read it, not the f32 values "
          "(refusing to read the unwritten buffer; MINFER_NO_SKIP_WRITE=1 disables mode 2)"));
    }
  }
  return absl::OkStatus();
}

void ActivationMemos::Invalidate(const graph::BufferRef& written, int64_t bytes) {
  auto overlaps = [&](const Key& key, int64_t len) { return Overlaps(key, len, written, bytes); };
  for (auto it = q8_.begin(); it != q8_.end();) {
    it = overlaps(it->first, it->second) ? q8_.erase(it) : std::next(it);
  }
  if (mmq_.valid && overlaps(mmq_.key, mmq_.bytes)) mmq_.valid = false;
  if (dq_.valid && overlaps(dq_.key, dq_.bytes)) dq_.valid = false;
  // Written now: no longer a dead range.
  for (auto it = dead_.begin(); it != dead_.end();) {
    it = overlaps(it->first, it->second) ? dead_.erase(it) : std::next(it);
  }
}

void ActivationMemos::EndWindow() {
  q8_.clear();
  mmq_.valid = false;
  dq_.valid = false;
  dead_.clear();
}

}  // namespace minfer::cuda
