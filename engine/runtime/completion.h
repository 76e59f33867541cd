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
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/grammar/matcher.h"
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
  // Speculative decoding may draft for this request when the engine does
  // (EngineOptions::spec_k); false opts out (its tokens are the same either
  // way; only the time differs).
  bool speculative = true;
  // Render control tokens that are sampled (never EOS) instead of dropping them.
  bool render_special = false;
  // Scheduling: the share group (a tenant; 0 = the default group) and its
  // weight, and the request's priority within its group (higher first).
  // See scheduler.h.
  uint32_t group = 0;
  double weight = 1.0;
  int32_t priority = 0;
  // Prefix-cache namespace: the request shares cached KV blocks only with
  // requests of the same namespace ("" is the default one). The daemon sets
  // it from the tenant, its cache group and the request's cache_salt
  // (kv_pool.h: why).
  std::string cache_ns;
  // Structured output: the grammar the completion must match (null: none).
  // Compiled by the caller (the daemon's API layer, off the worker thread)
  // with the model's Model::grammars(); the engine keeps a matcher per
  // sequence, masks the tokens the grammar forbids, and ends the generation
  // when the grammar is complete and the model picks an end token (or when
  // nothing but the end can follow).
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  // When `grammar` starts to constrain the output:
  //  kNow:            from the first token (the default);
  //  kAfterReasoning: after the think block (`reasoning` must be set): the
  //                   grammar matches the output after the end tag and the
  //                   whitespace that follows it in the same token; a reply
  //                   that does not open a think block (closed start) is
  //                   constrained from its first non-whitespace token on —
  //                   the start tag stays allowed until then;
  //  kAtTrigger:      when the output (outside the think block, if
  //                   `reasoning` is set) writes `grammar_trigger`; the
  //                   grammar matches from the trigger's first byte (so it
  //                   begins with the trigger), the bytes already written
  //                   from there on are fed to it at once, and a reply that
  //                   never writes the trigger is not constrained at all.
  //                   OpenAI's strict tools in auto mode: the trigger opens a
  //                   call, the grammar is the call syntax with each strict
  //                   tool's arguments schema. If the bytes already written
  //                   past the trigger do not fit the grammar (the token
  //                   that completed the trigger ran on into text the
  //                   grammar forbids), the output stays unconstrained and
  //                   the reply reader sees whatever was written.
  enum class GrammarStart { kNow, kAfterReasoning, kAtTrigger };
  GrammarStart grammar_start = GrammarStart::kNow;
  std::string grammar_trigger;  // kAtTrigger: non-empty
  // The reply's think block, as the daemon's reply reader splits it
  // (engine/chat/reasoning.h: a block that opens at the first non-whitespace
  // text, or that the prompt already opened, and runs to the first end tag).
  // The completion tracks it for `grammar_start` and to enforce `budget`:
  // once the block has taken `budget` tokens (counted from the token after
  // the one that opened it; from the first with `starts_open`) without
  // closing, the output is constrained to `close` — a grammar of the
  // closing text, compiled with the model's grammars(), whose every string
  // ends with the end tag and holds it nowhere else (the tag itself, or
  // "\n" and the tag) — and free again (or under `grammar`, per `grammar_start`)
  // once it completes. llama-server's and Anthropic's reasoning budget. The
  // budget applies while no grammar constrains the output.
  // With grammar_start kAfterReasoning and a closed start, the first tokens
  // are constrained to `grammar` or `open` (a grammar of the start tag):
  // whichever the model takes decides whether a think block comes first.
  struct Reasoning {
    std::string start_tag = "<think>";
    std::string end_tag = "</think>";
    bool starts_open = false;
    int32_t budget = -1;  // tokens; -1: none
    std::shared_ptr<const grammar::CompiledGrammar> close;  // required with budget >= 0
    std::shared_ptr<const grammar::CompiledGrammar> open;   // see above
  };
  std::optional<Reasoning> reasoning;
};

// The rules a request must satisfy to be generated by `model` in a context
// of `n_ctx` positions, written once: the prompt non-empty, every id in the
// model's vocabulary [0, n_vocab), the prompt shorter than n_ctx (one
// position remains for the completion), max_tokens >= 1, the sampling
// parameters valid (SamplingParams::Validate), no empty stop string.
// INVALID_ARGUMENT naming the field in this struct's terms ("prompt[3]: token
// id ...", "max_tokens ...", "stop[0] ...", "SamplingParams.top_p ...");
// the daemon's API layer renames them to the API's fields. A request that
// passed it for a model and n_ctx is valid for every engine of that model
// whose context is at least n_ctx.
absl::Status ValidateGenerateRequest(const GenerateRequest& request, const Model& model,
                                     int64_t n_ctx);

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
  // Batched engine, speculative decoding: drafted tokens verified for this
  // sequence, and how many of them were accepted (OpenAI's usage calls
  // them accepted / rejected prediction tokens).
  int32_t spec_drafted = 0;
  int32_t spec_accepted = 0;
  double DecodeTokensPerSecond() const {
    return decode_seconds > 0 ? (completion_tokens - 1) / decode_seconds : 0;
  }
};

class Completion {
 public:
  // Precondition: ValidateGenerateRequest(request, model, n_ctx) holds. The
  // engine is also driven directly (minfer run, tests), so Create checks it
  // and returns its error; on the daemon's path the API layer has already
  // validated the request and this check cannot fail. Vocabulary rows past
  // the tokenizer's are banned.
  static absl::StatusOr<std::unique_ptr<Completion>> Create(const Model& model,
                                                            GenerateRequest request,
                                                            int64_t n_ctx);

  const GenerateRequest& request() const { return req_; }
  const std::vector<int32_t>& prompt() const { return req_.prompt; }

  // Samples from a whole row; a constrained completion applies its mask
  // first (ComputeMask must have run since the last Accept): disallowed
  // tokens get -inf, so penalties, truncation and log-probabilities all see
  // the constrained distribution.
  absl::StatusOr<SampledToken> Sample(const float* logits, int64_t n_vocab);
  // Sampler::UsesOnlyTop / SampleTop, with the tokenizer's vocabulary as
  // the limit.
  bool UsesOnlyTop(int64_t k) const { return sampler_->UsesOnlyTop(k, vocab_limit_); }
  int64_t vocab_limit() const { return vocab_limit_; }
  // For a constrained completion the candidates must come from a row masked
  // with mask() (BatchItem::mask).
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

  // Structured output (request().grammar set): the matcher's bitmask of the
  // tokens allowed next, ceil(n_vocab / 32) words. ComputeMask may run on
  // another thread than the rest of this object (the engine overlaps it
  // with the forward pass), but never concurrently with Accept or Sample.
  bool constrained() const { return matcher_ != nullptr; }
  void ComputeMask();
  const uint32_t* mask() const { return mask_.data(); }
  const grammar::GrammarMatcher* matcher() const { return matcher_.get(); }

  // Speculative decoding (engine.h) of output that a grammar constrains.
  // Whether it ever can be: a grammar (now or later: after the think
  // block, at a trigger) or a reasoning budget whose closing text is forced.
  bool MayConstrain() const {
    return req_.grammar != nullptr || (req_.reasoning.has_value() && req_.reasoning->budget >= 0);
  }
  // Whether one matcher decides every next token until the output ends:
  // constrained, with no think block, trigger, start tag or forced text
  // still to come. Only then can masks for drafted positions be computed
  // ahead of the forward (ComputeDraftMasks); otherwise a draft may cross
  // the point where the constraint starts or changes.
  bool DraftMasksComputable() const {
    return matcher_ != nullptr && open_ == nullptr && !closing_ && !grammar_pending_ &&
           phase_ == Phase::kOutside;
  }
  // The length of the longest prefix of `drafts` the active matcher
  // allows from the current state, ending after a token that completes
  // it (drafts past the end of the output are useless); all of them
  // without a matcher, none while a start tag and the grammar compete.
  // Leaves the matcher as it was (Rollback).
  int64_t AllowedDrafts(absl::Span<const int32_t> drafts);
  // Precondition: DraftMasksComputable() and `drafts` allowed
  // (AllowedDrafts). Computes the mask of the current state (mask(), as
  // ComputeMask) and of the state after each draft: draft_masks() then
  // holds drafts.size() + 1 masks of ceil(n_vocab / 32) words, mask j for
  // the row that follows drafts[0..j). Leaves the matcher as it was. Like
  // ComputeMask, may run on another thread, never concurrently with Accept
  // or Sample.
  void ComputeDraftMasks(absl::Span<const int32_t> drafts);
  // The buffer ComputeDraftMasks fills for `drafts` drafted tokens (drafts
  // + 1 masks), sized now so that its address is known before the masks
  // are computed (late masks, BatchRunner::Run); the next ComputeDraftMasks
  // of that many drafts writes there without moving it.
  const uint32_t* ReserveDraftMasks(int64_t drafts);
  const uint32_t* draft_masks() const { return draft_masks_.data(); }

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
  // The active matcher: the request's grammar once it has started, or the
  // reasoning budget's closing text while that is forced (closing_).
  std::unique_ptr<grammar::GrammarMatcher> matcher_;
  bool closing_ = false;
  // kAfterReasoning with a closed start, before the first token decides:
  // the start tag's matcher, beside matcher_ (the grammar); the mask is
  // the union of theirs.
  std::unique_ptr<grammar::GrammarMatcher> open_;
  std::vector<uint32_t> open_mask_;
  // Where the output stands against request().reasoning and grammar_start:
  //  kUndecided  closed start, no non-whitespace byte yet;
  //  kInside     in the think block;
  //  kOutside    after it, or there is none.
  enum class Phase { kUndecided, kInside, kOutside };
  Phase phase_ = Phase::kOutside;
  bool grammar_pending_ = false;  // request().grammar not started yet
  int32_t reasoning_tokens_ = 0;  // tokens accepted inside the think block
  // The rendered output's bytes not yet decided against a tag or the
  // trigger: what a later byte may complete one with (bounded by the
  // longest tag/trigger), or, once a tag or trigger is found, the bytes
  // past it in the same piece.
  std::string scan_;
  void Observe(absl::string_view piece);
  void StartGrammar(absl::string_view written);
  std::vector<uint32_t> mask_;
  bool mask_fresh_ = false;      // mask_ is for the current matcher state
  std::vector<uint32_t> draft_masks_;  // ComputeDraftMasks
  std::vector<float> masked_;    // a masked copy of the row being sampled
  std::vector<int32_t> output_;
  std::string text_;
  bool done_ = false;
  FinishReason reason_ = FinishReason::kLength;
  GenerationStats stats_;
};

}  // namespace minfer::runtime

#endif  // MINFER_ENGINE_RUNTIME_COMPLETION_H_
