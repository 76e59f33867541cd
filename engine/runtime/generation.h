// One text generation on a session: prefill the prompt, then sample one
// token per step until a stop condition, streaming token ids and text deltas.
//
// Step() does the prefill on its first call and one decode step per call
// after that, so a scheduler can interleave the steps of several
// generations (on different sessions of a model) and cancel between steps.
// Text deltas never split a UTF-8 character (StreamingDetokenizer) and never
// contain any part of a matched stop string (StopMatcher holds back text
// that may still become one). EOS/end-of-turn tokens end the generation
// (unless ignore_eos) and are not rendered.
//
// Not thread-safe; drive it from the session's thread.
#ifndef MINFER_ENGINE_RUNTIME_GENERATION_H_
#define MINFER_ENGINE_RUNTIME_GENERATION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/runtime/session.h"
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
};

// What one Step produced.
struct StepOutput {
  std::vector<int32_t> tokens;          // sampled this step (0 or 1)
  std::string text;                     // text delta (may be empty)
  std::vector<SampledToken> logprobs;   // per token, when requested
};

struct GenerationStats {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  double prefill_seconds = 0;   // prompt evaluation
  double ttft_seconds = 0;      // from the first Step to the first token
  double decode_seconds = 0;    // evaluating generated tokens
  double DecodeTokensPerSecond() const {
    return decode_seconds > 0 ? (completion_tokens - 1) / decode_seconds : 0;
  }
};

class Generation {
 public:
  // Validates the request against the session (prompt non-empty and
  // in-vocabulary, fits the context, sampling params valid, stop strings
  // non-empty) — INVALID_ARGUMENT / OUT_OF_RANGE naming the field.
  // The session is reset: a generation starts at position 0.
  static absl::StatusOr<std::unique_ptr<Generation>> Create(Session* session,
                                                            GenerateRequest request);

  // Runs the next step. After the last one done() is true; further calls
  // return an empty StepOutput.
  absl::StatusOr<StepOutput> Step();
  // Ends the generation with reason `cancelled` (takes effect immediately).
  void Cancel();

  bool done() const { return done_; }
  FinishReason finish_reason() const { return reason_; }
  const GenerationStats& stats() const { return stats_; }
  const std::vector<int32_t>& output_tokens() const { return output_; }
  const std::string& text() const { return text_; }

 private:
  Generation() = default;
  void Finish(FinishReason r, StepOutput* out);

  Session* session_ = nullptr;
  GenerateRequest req_;
  std::unique_ptr<Sampler> sampler_;
  std::unique_ptr<StopMatcher> stops_;
  std::unique_ptr<tokenizer::StreamingDetokenizer> detok_;
  std::vector<int32_t> output_;
  std::string text_;
  std::vector<float> logits_;
  bool started_ = false;
  bool done_ = false;
  FinishReason reason_ = FinishReason::kLength;
  GenerationStats stats_;
  int64_t t_start_ns_ = 0;
};

// Runs a generation to the end, calling `on_step` after every step (return
// false to cancel).
absl::StatusOr<std::unique_ptr<Generation>> Generate(
    Session* session, GenerateRequest request,
    const std::function<bool(const StepOutput&)>& on_step);

}  // namespace minfer::runtime

#endif  // MINFER_ENGINE_RUNTIME_GENERATION_H_
