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
#include "engine/runtime/completion.h"
#include "engine/runtime/session.h"
#include "engine/sampling/finish_reason.h"
#include "engine/sampling/sampler.h"
#include "engine/sampling/stop_matcher.h"
#include "engine/tokenizer/streaming_detokenizer.h"

namespace minfer::runtime {

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

  bool done() const { return c_->done(); }
  FinishReason finish_reason() const { return c_->finish_reason(); }
  const GenerationStats& stats() const { return c_->stats(); }
  const std::vector<int32_t>& output_tokens() const { return c_->output_tokens(); }
  const std::string& text() const { return c_->text(); }

 private:
  Generation() = default;

  Session* session_ = nullptr;
  std::unique_ptr<Completion> c_;
  std::vector<float> logits_;
  bool started_ = false;
  int64_t t_start_ns_ = 0;
};

// Runs a generation to the end, calling `on_step` after every step (return
// false to cancel).
absl::StatusOr<std::unique_ptr<Generation>> Generate(
    Session* session, GenerateRequest request,
    const std::function<bool(const StepOutput&)>& on_step);

}  // namespace minfer::runtime

#endif  // MINFER_ENGINE_RUNTIME_GENERATION_H_
