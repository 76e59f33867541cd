#include "engine/runtime/completion.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/base/status.h"

namespace minfer::runtime {

absl::Status ValidateGenerateRequest(const GenerateRequest& request, const Model& model,
                                     int64_t n_ctx) {
  if (request.prompt.empty()) return absl::InvalidArgumentError("prompt: no tokens");
  const int64_t n_vocab = model.hparams().n_vocab;
  for (size_t i = 0; i < request.prompt.size(); ++i) {
    const int32_t t = request.prompt[i];
    if (t < 0 || t >= n_vocab) {
      return absl::InvalidArgumentError(absl::StrCat("prompt[", i, "]: token id ", t,
                                                     " is outside the vocabulary [0, ", n_vocab,
                                                     ")"));
    }
  }
  const int64_t n_prompt = static_cast<int64_t>(request.prompt.size());
  if (n_prompt >= n_ctx) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt: ", n_prompt, " tokens do not fit the model's context of ", n_ctx,
                     " (one position must remain for the completion)"));
  }
  if (request.max_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens must be >= 1, got ", request.max_tokens));
  }
  RETURN_IF_ERROR(request.sampling.Validate());
  for (size_t i = 0; i < request.stop.size(); ++i) {
    if (request.stop[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("stop[", i, "] is empty"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Completion>> Completion::Create(const Model& model,
                                                               GenerateRequest request,
                                                               int64_t n_ctx) {
  RETURN_IF_ERROR(ValidateGenerateRequest(request, model, n_ctx));
  const int64_t n_vocab = model.hparams().n_vocab;
  std::unique_ptr<Completion> c(new Completion);
  c->model_ = &model;
  c->n_ctx_ = n_ctx;
  c->vocab_limit_ = std::min<int64_t>(model.tokenizer().vocab_size(), n_vocab);
  // Padding/unused rows of the embedding never make sense as output.
  for (int64_t id = c->vocab_limit_; id < n_vocab; ++id) {
    request.sampling.banned_tokens.push_back(static_cast<int32_t>(id));
  }
  ASSIGN_OR_RETURN(c->sampler_, Sampler::Create(request.sampling, n_vocab));
  RETURN_IF_ERROR(c->sampler_->SetPrompt(request.prompt));
  ASSIGN_OR_RETURN(c->stops_, StopMatcher::Create(request.stop));
  tokenizer::DecodeOptions dopt;
  dopt.skip_special = !request.render_special;
  c->detok_ = std::make_unique<tokenizer::StreamingDetokenizer>(&model.tokenizer(), dopt);
  c->req_ = std::move(request);
  c->stats_.prompt_tokens = static_cast<int32_t>(c->req_.prompt.size());
  return c;
}

void Completion::Finish(FinishReason r, StepOutput* out) {
  done_ = true;
  reason_ = r;
  if (r != FinishReason::kStop && r != FinishReason::kCancelled) {
    // Flush what the detokenizer and stop matcher still hold back.
    StopFeedResult tail = stops_->Feed(detok_->Finish());
    std::string rest = tail.emit + (tail.stopped ? "" : stops_->Flush());
    if (tail.stopped) reason_ = FinishReason::kStop;
    if (out != nullptr) out->text += rest;
    text_ += rest;
  }
}

void Completion::Cancel() {
  if (!done_) Finish(FinishReason::kCancelled, nullptr);
}

absl::StatusOr<StepOutput> Completion::Accept(const SampledToken& s, int64_t n_evaluated) {
  StepOutput out;
  if (done_) return out;
  RETURN_IF_ERROR(sampler_->Accept(s.token));
  stats_.completion_tokens++;
  output_.push_back(s.token);
  out.tokens.push_back(s.token);
  if (req_.sampling.n_logprobs > 0) out.logprobs.push_back(s);

  const auto& stop_ids = model_->tokenizer().stop_ids();
  if (!req_.ignore_eos && std::binary_search(stop_ids.begin(), stop_ids.end(), s.token)) {
    Finish(FinishReason::kEos, &out);
    return out;
  }
  ASSIGN_OR_RETURN(std::string piece, detok_->Push(s.token));
  StopFeedResult fed = stops_->Feed(piece);
  out.text += fed.emit;
  text_ += fed.emit;
  if (fed.stopped) {
    Finish(FinishReason::kStop, &out);
  } else if (stats_.completion_tokens >= req_.max_tokens || n_evaluated >= n_ctx_) {
    Finish(FinishReason::kLength, &out);
  }
  return out;
}

}  // namespace minfer::runtime
