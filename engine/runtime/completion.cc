#include "engine/runtime/completion.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/base/field_error.h"
#include "engine/base/status.h"

namespace minfer::runtime {

absl::Status ValidateGenerateRequest(const GenerateRequest& request, const Model& model,
                                     int64_t n_ctx) {
  // Errors name the request's field as data (field_error.h), so that each
  // front door can say it in its own terms.
  if (request.prompt.empty()) return InvalidField("prompt", "no tokens");
  const int64_t n_vocab = model.hparams().n_vocab;
  for (size_t i = 0; i < request.prompt.size(); ++i) {
    const int32_t t = request.prompt[i];
    if (t < 0 || t >= n_vocab) {
      return InvalidField(absl::StrCat("prompt[", i, "]"),
                          absl::StrCat("token id ", t, " is outside the vocabulary [0, ",
                                       n_vocab, ")"));
    }
  }
  const int64_t n_prompt = static_cast<int64_t>(request.prompt.size());
  if (n_prompt >= n_ctx) {
    return WithReason(
        InvalidField("prompt", absl::StrCat(n_prompt, " tokens do not fit the model's context of ",
                                            n_ctx,
                                            " (one position must remain for the completion)")),
        kContextLengthExceeded);
  }
  if (request.max_tokens < 1) {
    return InvalidFieldThat("max_tokens", absl::StrCat("must be >= 1, got ", request.max_tokens));
  }
  RETURN_IF_ERROR(PrefixField(request.sampling.Validate(), "sampling"));
  if (request.grammar != nullptr && request.grammar->vocab().n_rows() != n_vocab) {
    return InvalidField("grammar", absl::StrCat(
        "compiled for a vocabulary of ", request.grammar->vocab().n_rows(),
        " rows, the model has ", n_vocab, " (compile it with this model's grammars())"));
  }
  for (size_t i = 0; i < request.stop.size(); ++i) {
    if (request.stop[i].empty()) {
      return InvalidFieldThat(absl::StrCat("stop[", i, "]"), "is empty");
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
  if (request.grammar != nullptr) {
    c->matcher_ = std::make_unique<grammar::GrammarMatcher>(request.grammar);
    c->mask_.assign(request.grammar->vocab().mask_words(), 0);
  }
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

void Completion::ComputeMask() {
  if (matcher_ == nullptr || mask_fresh_) return;
  matcher_->FillNextTokenBitmask(mask_.data());
  mask_fresh_ = true;
}

absl::StatusOr<SampledToken> Completion::Sample(const float* logits, int64_t n_vocab) {
  if (matcher_ == nullptr) return sampler_->Sample(logits, n_vocab);
  ComputeMask();  // normally done already, on the engine's mask thread
  masked_.resize(n_vocab);
  bool any = false;
  for (int64_t w = 0; w < (n_vocab + 31) / 32; ++w) {
    const uint32_t m = mask_[w];
    const int64_t base = w * 32;
    const int64_t n = std::min<int64_t>(32, n_vocab - base);
    if (m == 0) {
      std::fill_n(masked_.data() + base, n, -std::numeric_limits<float>::infinity());
      continue;
    }
    for (int64_t i = 0; i < n; ++i) {
      const bool ok = (m >> i) & 1u;
      masked_[base + i] = ok ? logits[base + i] : -std::numeric_limits<float>::infinity();
      any = any || ok;
    }
  }
  if (!any) {
    return absl::FailedPreconditionError(
        "grammar: no token of the model's vocabulary can continue the output here");
  }
  return sampler_->Sample(masked_.data(), n_vocab);
}

absl::StatusOr<StepOutput> Completion::Accept(const SampledToken& s, int64_t n_evaluated) {
  StepOutput out;
  if (done_) return out;
  if (matcher_ != nullptr) {
    absl::Status st = matcher_->AcceptToken(s.token);
    if (!st.ok()) {
      // The sampler only draws allowed tokens: a refusal is a bug here.
      return absl::InternalError(absl::StrCat("grammar refused the sampled token: ", st.message()));
    }
    mask_fresh_ = false;
  }
  RETURN_IF_ERROR(sampler_->Accept(s.token));
  stats_.completion_tokens++;
  output_.push_back(s.token);
  out.tokens.push_back(s.token);
  if (req_.sampling.n_logprobs > 0) out.logprobs.push_back(s);

  const auto& stop_ids = model_->tokenizer().stop_ids();
  const bool is_stop_id = std::binary_search(stop_ids.begin(), stop_ids.end(), s.token);
  // A grammar allows an end token only when complete; then it ends the
  // output even with ignore_eos (nothing else may follow).
  if (is_stop_id && (!req_.ignore_eos || matcher_ != nullptr)) {
    Finish(FinishReason::kEos, &out);
    return out;
  }
  ASSIGN_OR_RETURN(std::string piece, detok_->Push(s.token));
  StopFeedResult fed = stops_->Feed(piece);
  out.text += fed.emit;
  text_ += fed.emit;
  if (fed.stopped) {
    Finish(FinishReason::kStop, &out);
  } else if (matcher_ != nullptr && matcher_->IsTerminated()) {
    // Nothing but the end can follow: finish as if the model chose it.
    Finish(FinishReason::kEos, &out);
  } else if (stats_.completion_tokens >= req_.max_tokens || n_evaluated >= n_ctx_) {
    Finish(FinishReason::kLength, &out);
  }
  return out;
}

}  // namespace minfer::runtime
