// Drafters for speculative decoding: guesses of a sequence's next tokens,
// which one batched forward then verifies (engine.h: EngineOptions::spec_k).
// A guess costs a row of the step; a right one saves a whole step.
//
// NgramDrafter is prompt lookup (no model): the longest suffix of the
// sequence, up to max_n tokens and at least min_n, that occurred earlier in
// it (prompt or output) is taken as the context, and the tokens that followed
// its most recent earlier occurrence are the draft. Agent, code-editing and
// extraction traffic repeats its prompt, so these guesses are often right;
// on text that does not repeat it proposes nothing and costs nothing.
//
// Thread safety: a drafter is immutable after construction; Propose is
// thread-safe.
#ifndef MINFER_ENGINE_RUNTIME_DRAFTER_H_
#define MINFER_ENGINE_RUNTIME_DRAFTER_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace minfer::runtime {

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Appends to `out` at most `k` tokens guessed to follow `tokens` (the
  // sequence so far); returns how many.
  virtual int64_t Propose(absl::Span<const int32_t> tokens, int64_t k,
                          std::vector<int32_t>* out) const = 0;
};

class NgramDrafter : public Drafter {
 public:
  // Contexts of min_n to max_n tokens (1 <= min_n <= max_n); only the last
  // `window` tokens are searched (bounds the cost per step).
  explicit NgramDrafter(int32_t min_n = 2, int32_t max_n = 4, int64_t window = 4096);
  int64_t Propose(absl::Span<const int32_t> tokens, int64_t k,
                  std::vector<int32_t>* out) const override;

 private:
  int32_t min_n_, max_n_;
  int64_t window_;
};

}  // namespace minfer::runtime

#endif  // MINFER_ENGINE_RUNTIME_DRAFTER_H_
