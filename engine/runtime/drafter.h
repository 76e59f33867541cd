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
// ModelDrafter (model_drafter.h) drafts with a smaller model of the same
// vocabulary, for all the step's sequences in one batched loop.
//
// ReplayDrafter is a measuring instrument (`minfer bench --spec oracle`),
// not a drafter to serve with: it drafts from known continuations at a set
// acceptance rate.
//
// Thread safety: an Engine calls its drafter from its own thread only. The
// drafters here are immutable after construction and Propose is
// thread-safe; a stateful one (ModelDrafter) serves one Engine.
#ifndef MINFER_ENGINE_RUNTIME_DRAFTER_H_
#define MINFER_ENGINE_RUNTIME_DRAFTER_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace minfer::runtime {

// One sequence's request for a draft this step.
struct DraftQuery {
  uint64_t seq = 0;                   // the engine's sequence id
  absl::Span<const int32_t> tokens;  // the sequence so far (prompt + output)
  int64_t k = 0;                      // tokens wanted at most (>= 1)
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Appends to `out` at most `k` tokens guessed to follow `tokens` (the
  // sequence so far); returns how many.
  virtual int64_t Propose(absl::Span<const int32_t> tokens, int64_t k,
                          std::vector<int32_t>* out) = 0;
  // Drafts for a step's sequences at once: (*out)[i] gets at most
  // queries[i].k tokens for queries[i] (out is resized to the queries).
  // The default asks Propose for each; a model drafter batches them.
  virtual void ProposeAll(absl::Span<const DraftQuery> queries,
                          std::vector<std::vector<int32_t>>* out) {
    out->resize(queries.size());
    for (size_t i = 0; i < queries.size(); ++i) {
      (*out)[i].clear();
      Propose(queries[i].tokens, queries[i].k, &(*out)[i]);
    }
  }
  // Sequence `seq` ended: whatever the drafter kept for it may go.
  virtual void Forget(uint64_t seq) {}
};

class NgramDrafter : public Drafter {
 public:
  // Contexts of min_n to max_n tokens (1 <= min_n <= max_n); only the last
  // `window` tokens are searched (bounds the cost per step).
  explicit NgramDrafter(int32_t min_n = 2, int32_t max_n = 4, int64_t window = 4096);
  int64_t Propose(absl::Span<const int32_t> tokens, int64_t k,
                  std::vector<int32_t>* out) override;

 private:
  int32_t min_n_, max_n_;
  int64_t window_;
};

// Drafts each sequence's reference continuation (for instance the greedy
// ids of a run without drafts), each drafted token right with probability
// `accept` given that the ones before it were: the first wrong one is
// another id and ends the draft. Greedy verification then accepts about
// `accept` of the drafted tokens per position whatever the weights, so a
// synthetic model can measure what speculation gains at the acceptance
// that real draft pairs reach (issue 33: EAGLE-3's ~0.7 per token), and at
// accept = 1 the cost of a verify step against a plain one. Deterministic:
// a position's draw hashes (seed, reference, position). A sequence whose
// tokens left its reference (another kernel's rounding chose another id)
// gets no draft. Add every reference before the engine runs; Propose is
// then thread-safe.
class ReplayDrafter : public Drafter {
 public:
  explicit ReplayDrafter(double accept, uint64_t seed = 1);
  // Sequences whose tokens start with `prompt` continue with `continuation`.
  void Add(std::vector<int32_t> prompt, std::vector<int32_t> continuation);
  int64_t Propose(absl::Span<const int32_t> tokens, int64_t k,
                  std::vector<int32_t>* out) override;
  // Proposals answered with nothing because the sequence had left its
  // reference: each is a step that sequence ran without drafts, which a
  // real draft pair would not lose (minfer bench --spec oracle reports it).
  int64_t departed() const { return departed_.load(std::memory_order_relaxed); }

 private:
  struct Reference {
    std::vector<int32_t> prompt, continuation;
  };
  double accept_;
  uint64_t seed_;
  std::vector<Reference> refs_;
  std::atomic<int64_t> departed_{0};
};

}  // namespace minfer::runtime

#endif  // MINFER_ENGINE_RUNTIME_DRAFTER_H_
