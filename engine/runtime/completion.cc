#include "engine/runtime/completion.h"

#include <algorithm>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
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
  auto check_rows = [&](const std::shared_ptr<const grammar::CompiledGrammar>& g,
                        const char* field) -> absl::Status {
    if (g == nullptr || g->vocab().n_rows() == n_vocab) return absl::OkStatus();
    return InvalidField(field, absl::StrCat("compiled for a vocabulary of ", g->vocab().n_rows(),
                                            " rows, the model has ", n_vocab,
                                            " (compile it with this model's grammars())"));
  };
  RETURN_IF_ERROR(check_rows(request.grammar, "grammar"));
  using Start = GenerateRequest::GrammarStart;
  if (request.grammar_start != Start::kNow && request.grammar == nullptr) {
    return InvalidField("grammar_start", "set without a grammar");
  }
  if (request.grammar_start == Start::kAtTrigger && request.grammar_trigger.empty()) {
    return InvalidField("grammar_trigger", "empty (grammar_start is kAtTrigger)");
  }
  if (request.grammar_start == Start::kAfterReasoning && !request.reasoning.has_value()) {
    return InvalidField("grammar_start",
                        "kAfterReasoning needs the reply's reasoning (no think block given)");
  }
  if (request.reasoning.has_value()) {
    const GenerateRequest::Reasoning& r = *request.reasoning;
    if (r.start_tag.empty() || r.end_tag.empty()) {
      return InvalidField("reasoning", "empty start or end tag");
    }
    if (r.budget < -1) {
      return InvalidField("reasoning.budget",
                          absl::StrCat("must be >= 0 (or -1 for none), got ", r.budget));
    }
    if (r.budget >= 0 && r.close == nullptr) {
      return InvalidField("reasoning.close", "a budget needs the closing grammar");
    }
    if (request.grammar_start == Start::kAfterReasoning && !r.starts_open && r.open == nullptr) {
      return InvalidField("reasoning.open",
                          "kAfterReasoning with a closed start needs the start tag's grammar");
    }
    RETURN_IF_ERROR(check_rows(r.close, "reasoning.close"));
    RETURN_IF_ERROR(check_rows(r.open, "reasoning.open"));
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
  using Start = GenerateRequest::GrammarStart;
  const int64_t words = (n_vocab + 31) / 32;
  if (request.grammar != nullptr || request.reasoning.has_value()) c->mask_.assign(words, 0);
  if (request.reasoning.has_value()) {
    c->phase_ = request.reasoning->starts_open ? Phase::kInside : Phase::kUndecided;
  }
  if (request.grammar != nullptr) {
    if (request.grammar_start == Start::kNow ||
        (request.grammar_start == Start::kAfterReasoning && c->phase_ == Phase::kUndecided)) {
      c->matcher_ = std::make_unique<grammar::GrammarMatcher>(request.grammar);
      if (request.grammar_start == Start::kAfterReasoning) {
        c->open_ = std::make_unique<grammar::GrammarMatcher>(request.reasoning->open);
        c->open_mask_.assign(words, 0);
      }
    } else {
      c->grammar_pending_ = true;
    }
  }
  c->req_ = std::move(request);
  if (c->phase_ == Phase::kInside && c->req_.reasoning->budget == 0 && c->matcher_ == nullptr) {
    // No reasoning at all: the closing text comes first.
    c->matcher_ = std::make_unique<grammar::GrammarMatcher>(c->req_.reasoning->close);
    c->closing_ = true;
  }
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
  if (open_ != nullptr) {
    open_->FillNextTokenBitmask(open_mask_.data());
    for (size_t w = 0; w < mask_.size(); ++w) mask_[w] |= open_mask_[w];
  }
  mask_fresh_ = true;
}

int64_t Completion::AllowedDrafts(absl::Span<const int32_t> drafts) {
  if (matcher_ == nullptr) return static_cast<int64_t>(drafts.size());
  if (open_ != nullptr) return 0;
  int32_t n = 0;
  for (int32_t d : drafts) {
    if (!matcher_->IsTokenAllowed(d) || !matcher_->AcceptToken(d).ok()) break;
    ++n;
    // Nothing useful follows the end of the output or of forced text.
    if (matcher_->IsTerminated() || (closing_ && matcher_->IsComplete())) break;
  }
  matcher_->Rollback(n);
  return n;
}

void Completion::ComputeDraftMasks(absl::Span<const int32_t> drafts) {
  ComputeMask();
  const size_t words = mask_.size();
  draft_masks_.resize(words * (drafts.size() + 1));
  std::copy(mask_.begin(), mask_.end(), draft_masks_.begin());
  int32_t n = 0;
  for (int32_t d : drafts) {
    if (!matcher_->AcceptToken(d).ok()) break;  // AllowedDrafts said it would not happen
    ++n;
    matcher_->FillNextTokenBitmask(draft_masks_.data() + words * n);
  }
  // A refused draft (a broken precondition) leaves all-zero masks: its
  // rows allow nothing and are never read, since verification stops at
  // the refused draft.
  std::fill(draft_masks_.begin() + words * (n + 1), draft_masks_.end(), 0u);
  matcher_->Rollback(n);
}

const uint32_t* Completion::ReserveDraftMasks(int64_t drafts) {
  draft_masks_.resize(mask_.size() * static_cast<size_t>(drafts + 1));
  return draft_masks_.data();
}

void Completion::StartGrammar(absl::string_view written) {
  grammar_pending_ = false;
  matcher_ = std::make_unique<grammar::GrammarMatcher>(req_.grammar);
  mask_fresh_ = false;
  // The bytes the model wrote past the start point in the token that
  // reached it: the grammar takes them first. If it cannot, the output is
  // not constrained (completion.h: kAtTrigger).
  if (!written.empty() && !matcher_->AcceptBytes(written)) matcher_.reset();
}

void Completion::Observe(absl::string_view piece) {
  if (!req_.reasoning.has_value() && !grammar_pending_) return;
  using Start = GenerateRequest::GrammarStart;
  const Start start = req_.grammar_start;
  if (phase_ == Phase::kInside && !closing_) reasoning_tokens_++;
  scan_.append(piece.data(), piece.size());
  // Keeps the last n-1 bytes: all a later piece can complete `tag` with.
  auto keep_tail = [this](const std::string& tag) {
    if (scan_.size() >= tag.size()) scan_.erase(0, scan_.size() - (tag.size() - 1));
  };
  auto strip_ws = [this] {
    size_t i = 0;
    while (i < scan_.size() && absl::ascii_isspace(static_cast<unsigned char>(scan_[i]))) ++i;
    scan_.erase(0, i);
  };
  for (;;) {
    switch (phase_) {
      case Phase::kUndecided: {
        const std::string& tag = req_.reasoning->start_tag;
        strip_ws();
        if (scan_.empty()) return;
        if (scan_.size() < tag.size() && absl::StartsWith(tag, scan_)) return;  // maybe the tag
        if (absl::StartsWith(scan_, tag)) {
          scan_.erase(0, tag.size());
          phase_ = Phase::kInside;
          continue;
        }
        phase_ = Phase::kOutside;  // the reply has no think block
        continue;
      }
      case Phase::kInside: {
        const std::string& tag = req_.reasoning->end_tag;
        const size_t at = scan_.find(tag);
        if (at == std::string::npos) {
          keep_tail(tag);
          const GenerateRequest::Reasoning& r = *req_.reasoning;
          if (r.budget >= 0 && reasoning_tokens_ >= r.budget && !closing_ && matcher_ == nullptr) {
            // Budget spent: the closing text is forced next (completion.h).
            matcher_ = std::make_unique<grammar::GrammarMatcher>(r.close);
            closing_ = true;
            mask_fresh_ = false;
          }
          return;
        }
        scan_.erase(0, at + tag.size());
        phase_ = Phase::kOutside;
        if (grammar_pending_ && start == Start::kAfterReasoning) {
          strip_ws();
          StartGrammar(scan_);
          scan_.clear();
          return;
        }
        continue;
      }
      case Phase::kOutside: {
        if (!grammar_pending_ || start != Start::kAtTrigger) {
          scan_.clear();
          return;
        }
        const std::string& trigger = req_.grammar_trigger;
        const size_t at = scan_.find(trigger);
        if (at == std::string::npos) {
          keep_tail(trigger);
          return;
        }
        StartGrammar(absl::string_view(scan_).substr(at));
        scan_.clear();
        return;
      }
    }
  }
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
  if (open_ != nullptr) {
    // Think block or grammar (kAfterReasoning, closed start): the mask was
    // the union; the token keeps the matchers that take it.
    const bool tag = open_->AcceptToken(s.token).ok();
    const bool main = matcher_->AcceptToken(s.token).ok();
    if (!tag && !main) return absl::InternalError("grammar refused the sampled token");
    if (tag && (!main || open_->IsComplete())) {
      // Into the think block (or on the way): the grammar waits for its end.
      matcher_.reset();
      grammar_pending_ = true;
    }
    if (!tag || open_->IsComplete()) {
      open_.reset();
      if (!tag) phase_ = Phase::kOutside;
    } else if (matcher_ == nullptr) {
      // Only the tag is left: its matcher constrains alone until complete.
      matcher_ = std::move(open_);
      closing_ = true;
    }
    mask_fresh_ = false;
  } else if (matcher_ != nullptr) {
    absl::Status st = matcher_->AcceptToken(s.token);
    if (!st.ok()) {
      // The sampler only draws allowed tokens: a refusal is a bug here.
      return absl::InternalError(absl::StrCat("grammar refused the sampled token: ", st.message()));
    }
    mask_fresh_ = false;
    if (closing_ && matcher_->IsComplete()) {
      // The forced text (a budget's closing tag, or the start tag) is out.
      matcher_.reset();
      closing_ = false;
    }
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
  Observe(piece);
  StopFeedResult fed = stops_->Feed(piece);
  out.text += fed.emit;
  text_ += fed.emit;
  if (fed.stopped) {
    Finish(FinishReason::kStop, &out);
  } else if (matcher_ != nullptr && !closing_ && open_ == nullptr && matcher_->IsTerminated()) {
    // Nothing but the end can follow: finish as if the model chose it.
    Finish(FinishReason::kEos, &out);
  } else if (stats_.completion_tokens >= req_.max_tokens || n_evaluated >= n_ctx_) {
    Finish(FinishReason::kLength, &out);
  }
  return out;
}

}  // namespace minfer::runtime
