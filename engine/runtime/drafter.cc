#include "engine/runtime/drafter.h"

#include <algorithm>

namespace minfer::runtime {

NgramDrafter::NgramDrafter(int32_t min_n, int32_t max_n, int64_t window)
    : min_n_(std::max(min_n, 1)), max_n_(std::max(max_n, std::max(min_n, 1))), window_(window) {}

int64_t NgramDrafter::Propose(absl::Span<const int32_t> tokens, int64_t k,
                              std::vector<int32_t>* out) {
  const int64_t len = static_cast<int64_t>(tokens.size());
  if (k <= 0 || len < min_n_ + 1) return 0;
  const int64_t lo = std::max<int64_t>(0, len - window_);
  // Longest context first: a longer match predicts better.
  for (int64_t n = std::min<int64_t>(max_n_, len - 1); n >= min_n_; --n) {
    const int32_t* suffix = tokens.data() + len - n;
    // The most recent earlier occurrence (ending before the suffix starts
    // overlapping itself is fine: only its continuation must exist).
    for (int64_t start = len - n - 1; start >= lo; --start) {
      if (!std::equal(suffix, suffix + n, tokens.data() + start)) continue;
      // What followed it, read as an overlapping copy (LZ77's): past the
      // end of the sequence the continuation goes on with the draft
      // itself. Text that repeats with a period shorter than k (a token
      // repeated, a list, a loop) then drafts k tokens, where stopping at
      // the sequence's end would draft only the period, one token a step
      // for a repeated token whatever k.
      const int64_t from = start + n;
      const size_t base = out->size();
      for (int64_t i = 0; i < k; ++i) {
        const int64_t src = from + i;  // src - len < i: already drafted
        out->push_back(src < len ? tokens[static_cast<size_t>(src)]
                                 : (*out)[base + static_cast<size_t>(src - len)]);
      }
      return k;
    }
  }
  return 0;
}

ReplayDrafter::ReplayDrafter(double accept, uint64_t seed)
    : accept_(std::clamp(accept, 0.0, 1.0)), seed_(seed) {}

void ReplayDrafter::Add(std::vector<int32_t> prompt, std::vector<int32_t> continuation) {
  refs_.push_back({std::move(prompt), std::move(continuation)});
}

namespace {
// splitmix64's finalizer: a uniform 64-bit value per input.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
}  // namespace

int64_t ReplayDrafter::Propose(absl::Span<const int32_t> tokens, int64_t k,
                               std::vector<int32_t>* out) {
  for (size_t r = 0; r < refs_.size(); ++r) {
    const Reference& ref = refs_[r];
    const size_t np = ref.prompt.size();
    if (tokens.size() < np || !std::equal(ref.prompt.begin(), ref.prompt.end(), tokens.begin())) {
      continue;
    }
    const size_t pos = tokens.size() - np;  // tokens of the continuation so far
    if (pos > ref.continuation.size() ||
        !std::equal(tokens.begin() + np, tokens.end(), ref.continuation.begin())) {
      departed_.fetch_add(1, std::memory_order_relaxed);
      return 0;  // left its reference: nothing known to draft
    }
    int64_t n = 0;
    for (size_t p = pos; n < k && p < ref.continuation.size(); ++p) {
      const int32_t right = ref.continuation[p];
      const uint64_t h = Mix(seed_ ^ Mix((static_cast<uint64_t>(r) << 32) ^ p));
      const double u = static_cast<double>(h >> 11) * 0x1.0p-53;
      ++n;
      if (u < accept_) {
        out->push_back(right);
      } else {
        out->push_back(right > 0 ? right - 1 : 1);  // any other id
        break;
      }
    }
    return n;
  }
  return 0;
}

}  // namespace minfer::runtime
