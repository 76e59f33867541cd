// Token sampler: turns one row of logits into the next token.
//
// The chain, in order (each step optional per SamplingParams):
//   1. penalties   repetition (CTRL), frequency and presence (OpenAI) over
//                  the last penalty_last_n tokens of the history; then
//      bans        banned_tokens get logit -inf.
//   2. greedy      temperature == 0: the argmax, ties broken towards the
//                  lowest token id. Stops here; no random number is drawn.
//   3. top-k       keep the k largest logits (ties: lowest ids).
//   4. temperature p_i ∝ exp((logit_i - max) / T).
//   5. min-p       drop p_i < min_p * max_j p_j.
//   6. top-p       keep the smallest prefix, in order of decreasing p_i (ties:
//                  lower id first), whose mass is >= top_p times the mass
//                  left after min-p.
//   7. draw        one uniform double from xoshiro256** (see rng.h) picks a
//                  token in proportion to the surviving p_i.
// Every truncation keeps a prefix of the same order, so the top token always
// survives and the result is never empty.
//
// Log-probabilities: SampledToken reports log-softmax of the logits after
// step 1 (penalties and bans) and before temperature and truncation, i.e.
// what the model (plus penalties) believes, not the distribution actually
// sampled from. That is the OpenAI `logprobs` convention and keeps the
// numbers comparable across sampling settings. Banned and -inf tokens have
// logprob -inf and are never listed.
//
// History: the sampler owns the token history the penalties look at, and
// it holds exactly the tokens the caller commits to. SetPrompt() replaces it
// with the prompt (prompt tokens count for penalties, as in llama.cpp);
// Accept() appends one token. Sample() does not touch the history: the
// generation loop calls Accept() with the token it keeps (normally the one
// Sample() returned; a forced or grammar-chosen token otherwise; none for a
// speculative draw it discards), as with llama.cpp's sample/accept pair. A
// loop that forgets Accept() runs without penalties on generated text. Only
// the penalty window is stored, so memory stays bounded for any length.
//
// Determinism: the same params (seed included), the same SetPrompt/Accept
// calls and the same logits give the same tokens, on any x86-64 CPU (the
// portable, AVX2 and AVX-512 kernels are bit-identical; see
// logit_kernels.h). Each non-greedy Sample() consumes exactly one random
// number; greedy ones consume none.
//
// Input contract: `logits` holds n_vocab floats; -inf is allowed (masked
// token); NaN or +inf (also +inf produced by extreme penalties) is an
// INVALID_ARGUMENT error naming the token; so is a row where every logit is
// -inf or banned.
//
// Cost (152k vocabulary): O(n) SIMD passes for the max and the softmax
// normalizer; top-k uses a bounded heap (no sort of the vocabulary); top-p
// without top-k uses a one-pass log-scale histogram (buckets of 1/256
// octave) and sorts only the bucket containing the cut. See
// tests/engine/sampling/sampler_benchmark.cc.
//
// Memory: a Sampler holds only O(penalty window) state. The O(n_vocab)
// working buffers (10 bytes per vocabulary entry plus a 200 KB histogram,
// ~1.7 MB at 152k) are per thread, shared by every Sampler used on that thread
// and kept for the thread's lifetime, so a daemon with hundreds of sequences
// per worker pays for them once.
//
// Thread safety: none. A Sampler belongs to one sequence; it may move between
// threads with external synchronization. Different Samplers may be used
// concurrently on different threads.
#ifndef MINFER_ENGINE_SAMPLING_SAMPLER_H_
#define MINFER_ENGINE_SAMPLING_SAMPLER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/sampling/rng.h"
#include "engine/sampling/sampling_params.h"

namespace minfer {

namespace sampling_internal {
struct LogitKernels;  // logit_kernels.h, internal to engine/sampling
}  // namespace sampling_internal

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

struct SampledToken {
  int32_t token = -1;
  // Log-probability of `token` (see the file comment for its definition).
  // NaN for greedy sampling (temperature 0) with n_logprobs == 0: that path
  // skips the full-vocabulary normalization it would need.
  float logprob = 0.0f;
  // The params.n_logprobs most likely tokens (fewer if fewer have a finite
  // logit), by decreasing logprob, ties by increasing id. Independent of
  // which token was drawn; the drawn token need not be among them.
  std::vector<TokenLogprob> top_logprobs;
};

// One entry of the distribution a draw picks from.
struct TokenProb {
  int32_t token = 0;
  double prob = 0.0;
};

class Sampler {
 public:
  // Validates params (SamplingParams::Validate) and banned ids against
  // n_vocab, which must be in [1, 2^31).
  static absl::StatusOr<std::unique_ptr<Sampler>> Create(
      const SamplingParams& params, int64_t n_vocab);

  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // Picks the next token from `logits` (n_vocab floats, which must equal the
  // vocabulary size given to Create; the pointer is only read during the
  // call) and advances the random stream. Does not append to the history
  // (see Accept). On error nothing changes.
  absl::StatusOr<SampledToken> Sample(const float* logits, int64_t n_vocab);

  // Whether Sample() depends only on the `k` largest logits among ids below
  // `vocab_limit` for every row: no penalties, no log-probabilities, the
  // banned tokens exactly [vocab_limit, n_vocab), and greedy or top_k <= k.
  // Then SampleTop() gives Sample()'s token from those candidates alone (a
  // device computes them; the host never reads the whole row).
  bool UsesOnlyTop(int64_t k, int64_t vocab_limit) const;

  // Sample() for a row given only its candidates: `top` holds the row's
  // largest logits among ids below vocab_limit in (logit desc, id asc)
  // order (at least min(k, finite logits) of them, k as passed to
  // UsesOnlyTop, which must hold), and log_norm = log sum_i exp(l_i - max)
  // over the row (for SampledToken::logprob; NaN is allowed and gives a NaN
  // logprob). Same token and random stream as Sample() on the full row.
  absl::StatusOr<SampledToken> SampleTop(absl::Span<const TokenLogprob> top, double log_norm);

  // The distribution Sample() would draw from for these logits: the
  // surviving tokens with their renormalized probabilities, by decreasing
  // probability (ties: lower id first); a single {argmax, 1} when greedy.
  // Changes neither history nor random stream. For tests, debugging and
  // introspection; it materializes the whole support, so it is not meant
  // for the per-token hot path.
  absl::StatusOr<std::vector<TokenProb>> Distribution(const float* logits,
                                                      int64_t n_vocab);

  // Replaces the history with `prompt` (every id must be in [0, n_vocab),
  // else INVALID_ARGUMENT and nothing changes). The random stream is not
  // touched.
  absl::Status SetPrompt(absl::Span<const int32_t> prompt);

  // Appends the token the caller keeps to the history (INVALID_ARGUMENT if
  // out of range).
  absl::Status Accept(int32_t token);

  // Empties the history and re-seeds the random stream: afterwards the
  // sampler behaves exactly like a freshly created one.
  void Reset();

  const SamplingParams& params() const { return params_; }
  int64_t n_vocab() const { return n_vocab_; }
  // Tokens in the history: the prompt plus those accepted since (counted
  // even where penalties are off or the window has dropped them).
  int64_t history_size() const { return history_size_; }

 private:
  // Per-thread scratch buffers (defined in sampler.cc).
  struct Scratch;

  // The outcome of steps 1-6 for one row of logits; points into the
  // calling thread's Scratch, so it is only valid inside one call.
  struct Plan {
    const float* logits = nullptr;  // after penalties and bans
    float max = 0.0f;               // largest logit (finite)
    double log_norm = 0.0;          // log sum_i exp(logit_i - max)
    bool greedy = false;
    int32_t greedy_token = -1;
    // Top-k path: scratch candidates[0, n_kept) in order, with weights.
    bool from_candidates = false;
    int64_t n_kept = 0;
    // Full-vocabulary path: scratch probs holds p_i for every token; the
    // survivors are the tokens up to (cut_p, cut_token) in the order
    // (p desc, id asc).
    float cut_p = 0.0f;
    int32_t cut_token = 0;
    double p_total = 0.0;  // sum of p_i over all tokens
  };

  Sampler(const SamplingParams& params, int64_t n_vocab);

  bool FullVocabularyPath() const;
  // The top-k tail of BuildPlan: min-p and top-p over scratch.candidates.
  void PlanFromCandidates(Plan& plan, Scratch& scratch) const;
  absl::StatusOr<Plan> BuildPlan(const float* logits, int64_t n_vocab,
                                 Scratch& scratch);
  const float* ApplyPenaltiesAndBans(const float* logits, Scratch& scratch);
  absl::Status BadLogitError(const float* logits, const float* adjusted) const;
  void ComputeTopPCut(Plan& plan, Scratch& scratch) const;
  int32_t Draw(const Plan& plan, double u, Scratch& scratch) const;
  void FillTopLogprobs(const Plan& plan, Scratch& scratch,
                       std::vector<TokenLogprob>* out) const;

  bool InVocab(int32_t token) const { return token >= 0 && token < n_vocab_; }
  void Push(int32_t token);
  void ClearHistory();

  const SamplingParams params_;
  const int64_t n_vocab_;
  const sampling_internal::LogitKernels& kernels_;
  const bool penalties_;  // params_.PenaltiesEnabled()
  Xoshiro256StarStar rng_;
  std::vector<int32_t> banned_;  // sorted, unique

  int64_t history_size_ = 0;
  // Penalty state, O(window) memory (used only if penalties_).
  absl::flat_hash_map<int32_t, int32_t> counts_;  // token -> count, > 0
  // Ring of the last penalty_last_n tokens, to know who leaves the window
  // (unused with penalty_last_n == -1: then the counts cover all history).
  int64_t window_capacity_ = 0;  // penalty_last_n if > 0, else 0
  std::vector<int32_t> window_;  // grows up to window_capacity_
  int64_t window_next_ = 0;      // oldest slot once the ring is full
};

}  // namespace minfer

#endif  // MINFER_ENGINE_SAMPLING_SAMPLER_H_
