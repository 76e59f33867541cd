// Completion: what one generation does with the tokens a model proposes —
// the request's sampler, stop strings and streaming detokenizer, the output
// so far and the finish decision — without the forward pass. A Generation
// (one Session) and the batched Engine (many sequences per forward) both
// drive one per sequence, so every sequence gets the same semantics however
// it is scheduled.
//
// Per token: Sample() (from a full row of logits) or SampleTop() (from the
// row's TopK candidates, when UsesOnlyTop() says they suffice), then
// Accept() with the sampled token. Text deltas never split a UTF-8
// character and never contain any part of a matched stop string;
// EOS/end-of-turn tokens end the generation (unless ignore_eos) and are not
// rendered.
//
// Not thread-safe.
#ifndef MINFER_ENGINE_RUNTIME_COMPLETION_H_
#define MINFER_ENGINE_RUNTIME_COMPLETION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/runtime/model.h"
#include "engine/sampling/finish_reason.h"
#include "engine/sampling/sampler.h"
#include "engine/sampling/stop_matcher.h"
#include "engine/tokenizer/streaming_detokenizer.h"

namespace minfer::runtime {

struct GenerateRequest {
  std::vector<int32_t> prompt;  // token ids (already encoded)
  SamplingParams sampling;
  int32_t max_tokens = 256;     // completion tokens at most (>= 1)
  std::vector<std::string> stop;
  bool ignore_eos = false;
  // Render control tokens that are sampled (never EOS) instead of dropping them.
  bool render_special = false;
  // Scheduling: the share group (a tenant; 0 = the default group) and its
  // weight, and the request's priority within its group (higher first).
  // See scheduler.h.
  uint32_t group = 0;
  double weight = 1.0;
  int32_t priority = 0;
};

// What one step produced for a sequence.
struct StepOutput {
  std::vector<int32_t> tokens;          // sampled this step (0 or 1)
  std::string text;                     // text delta (may be empty)
  std::vector<SampledToken> logprobs;   // per token, when requested
};

struct GenerationStats {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  double prefill_seconds = 0;   // prompt evaluation
  double ttft_seconds = 0;      // from the start to the first token
  double decode_seconds = 0;    // evaluating generated tokens
  double queue_seconds = 0;     // batched engine: from Add to the first step it ran in
  // Batched engine: prompt tokens whose KV came from the prefix cache at
  // the first admission (not computed).
  int32_t cached_prompt_tokens = 0;
  double DecodeTokensPerSecond() const {
    return decode_seconds > 0 ? (completion_tokens - 1) / decode_seconds : 0;
  }
};

class Completion {
 public:
  // Validates the request against the model and a context of n_ctx tokens
  // (prompt non-empty, in the vocabulary and shorter than n_ctx; max_tokens
  // >= 1; sampling params valid; stop strings non-empty) —
  // INVALID_ARGUMENT / OUT_OF_RANGE naming the field. Vocabulary rows past
  // the tokenizer's are banned.
  static absl::StatusOr<std::unique_ptr<Completion>> Create(const Model& model,
                                                            GenerateRequest request,
                                                            int64_t n_ctx);

  const GenerateRequest& request() const { return req_; }
  const std::vector<int32_t>& prompt() const { return req_.prompt; }

  absl::StatusOr<SampledToken> Sample(const float* logits, int64_t n_vocab) {
    return sampler_->Sample(logits, n_vocab);
  }
  // Sampler::UsesOnlyTop / SampleTop, with the tokenizer's vocabulary as
  // the limit.
  bool UsesOnlyTop(int64_t k) const { return sampler_->UsesOnlyTop(k, vocab_limit_); }
  int64_t vocab_limit() const { return vocab_limit_; }
  absl::StatusOr<SampledToken> SampleTop(absl::Span<const TokenLogprob> top, double log_norm) {
    return sampler_->SampleTop(top, log_norm);
  }

  // Keeps `s` (the token just sampled): it joins the history, the output
  // and the text, and the generation may finish (eos, stop, max_tokens, or
  // the context: `n_evaluated`, the tokens whose KV exists, has reached
  // n_ctx). Returns what to stream.
  absl::StatusOr<StepOutput> Accept(const SampledToken& s, int64_t n_evaluated);
  // Ends the generation with reason `cancelled` (takes effect immediately).
  void Cancel();

  bool done() const { return done_; }
  FinishReason finish_reason() const { return reason_; }
  GenerationStats& stats() { return stats_; }
  const GenerationStats& stats() const { return stats_; }
  const std::vector<int32_t>& output_tokens() const { return output_; }
  const std::string& text() const { return text_; }
  int64_t n_ctx() const { return n_ctx_; }

 private:
  Completion() = default;
  void Finish(FinishReason r, StepOutput* out);

  const Model* model_ = nullptr;
  GenerateRequest req_;
  int64_t n_ctx_ = 0;
  int64_t vocab_limit_ = 0;
  std::unique_ptr<Sampler> sampler_;
  std::unique_ptr<StopMatcher> stops_;
  std::unique_ptr<tokenizer::StreamingDetokenizer> detok_;
  std::vector<int32_t> output_;
  std::string text_;
  bool done_ = false;
  FinishReason reason_ = FinishReason::kLength;
  GenerationStats stats_;
};

}  // namespace minfer::runtime

#endif  // MINFER_ENGINE_RUNTIME_COMPLETION_H_
