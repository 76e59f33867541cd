#include "engine/graph/collective.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace minfer::graph {

InProcessCollective::InProcessCollective(int size, std::chrono::milliseconds timeout)
    : size_(std::max(size, 1)), timeout_(timeout), data_(static_cast<size_t>(std::max(size, 1))) {}

void InProcessCollective::Abort() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
  }
  cv_.notify_all();
}

void InProcessCollective::Reset() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = false;
  arrived_ = 0;
  n_ = -1;
  mismatch_ = false;
  ++generation_;
}

absl::Status InProcessCollective::Barrier(std::unique_lock<std::mutex>& lock) {
  const uint64_t gen = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return absl::OkStatus();
  }
  const bool passed = cv_.wait_for(lock, timeout_, [&] { return generation_ != gen || aborted_; });
  if (aborted_) return absl::AbortedError("all-reduce aborted: another rank's step failed");
  if (!passed) {
    // The ranks are out of step for good: later calls fail at once.
    aborted_ = true;
    cv_.notify_all();
    return absl::DeadlineExceededError(absl::StrCat(
        "all-reduce: ", size_ - arrived_, " of ", size_, " ranks did not arrive within ",
        timeout_.count(), " ms"));
  }
  return absl::OkStatus();
}

absl::Status InProcessCollective::AllReduceSum(int rank, float* data, int64_t n) {
  if (rank < 0 || rank >= size_) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " of ", size_));
  }
  if (size_ == 1) return absl::OkStatus();
  std::unique_lock<std::mutex> lock(mu_);
  if (aborted_) return absl::AbortedError("all-reduce aborted: another rank's step failed");
  // Round 1: every rank posts its buffer; the last to arrive sums them (in
  // rank order) while the others wait.
  data_[rank] = data;
  if (n_ < 0) n_ = n;
  if (n_ != n) mismatch_ = true;
  if (arrived_ + 1 == size_) {
    if (!mismatch_) {
      sum_.assign(data_[0], data_[0] + n);
      for (int r = 1; r < size_; ++r) {
        const float* x = data_[r];
        for (int64_t i = 0; i < n; ++i) sum_[i] += x[i];
      }
    }
  }
  if (absl::Status s = Barrier(lock); !s.ok()) return s;
  const bool bad = mismatch_;
  // Round 2: each rank copies the sum out; the last one resets the round.
  if (!bad) std::memcpy(data, sum_.data(), static_cast<size_t>(n) * sizeof(float));
  if (arrived_ + 1 == size_) {
    n_ = -1;
    mismatch_ = false;
  }
  if (absl::Status s = Barrier(lock); !s.ok()) return s;
  if (bad) {
    return absl::InvalidArgumentError("all-reduce: the ranks passed different lengths");
  }
  return absl::OkStatus();
}

}  // namespace minfer::graph
