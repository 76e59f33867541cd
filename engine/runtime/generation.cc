#include "engine/runtime/generation.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "engine/base/status.h"

namespace minfer::runtime {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Generation>> Generation::Create(Session* session,
                                                               GenerateRequest request) {
  const Model& model = session->model();
  if (request.prompt.empty()) return absl::InvalidArgumentError("prompt: no tokens");
  if (request.max_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens must be at least 1, got ", request.max_tokens));
  }
  const int64_t n_vocab = model.hparams().n_vocab;
  for (int32_t t : request.prompt) {
    if (t < 0 || t >= n_vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("prompt: token id ", t, " is outside the vocabulary [0, ", n_vocab, ")"));
    }
  }
  if (static_cast<int64_t>(request.prompt.size()) >= session->n_ctx()) {
    return absl::OutOfRangeError(absl::StrCat("prompt of ", request.prompt.size(),
                                              " tokens does not fit the context of ",
                                              session->n_ctx(), " (one token must remain)"));
  }
  std::unique_ptr<Generation> g(new Generation);
  g->session_ = session;
  // Padding/unused rows of the embedding never make sense as output.
  for (int32_t id = model.tokenizer().vocab_size(); id < n_vocab; ++id) {
    request.sampling.banned_tokens.push_back(id);
  }
  ASSIGN_OR_RETURN(g->sampler_, Sampler::Create(request.sampling, n_vocab));
  RETURN_IF_ERROR(g->sampler_->SetPrompt(request.prompt));
  ASSIGN_OR_RETURN(g->stops_, StopMatcher::Create(request.stop));
  tokenizer::DecodeOptions dopt;
  dopt.skip_special = !request.render_special;
  g->detok_ = std::make_unique<tokenizer::StreamingDetokenizer>(&model.tokenizer(), dopt);
  g->req_ = std::move(request);
  g->stats_.prompt_tokens = static_cast<int32_t>(g->req_.prompt.size());
  session->Reset();
  return g;
}

void Generation::Finish(FinishReason r, StepOutput* out) {
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

void Generation::Cancel() {
  if (!done_) Finish(FinishReason::kCancelled, nullptr);
}

absl::StatusOr<StepOutput> Generation::Step() {
  StepOutput out;
  if (done_) return out;
  const int64_t t0 = NowNs();
  if (!started_) {
    started_ = true;
    t_start_ns_ = t0;
    ASSIGN_OR_RETURN(logits_, session_->Eval(req_.prompt));
    stats_.prefill_seconds = (NowNs() - t0) * 1e-9;
  } else {
    ASSIGN_OR_RETURN(logits_, session_->Eval({output_.back()}));
    stats_.decode_seconds += (NowNs() - t0) * 1e-9;
  }
  ASSIGN_OR_RETURN(SampledToken s, sampler_->Sample(logits_.data(), static_cast<int64_t>(logits_.size())));
  RETURN_IF_ERROR(sampler_->Accept(s.token));
  if (stats_.completion_tokens == 0) stats_.ttft_seconds = (NowNs() - t_start_ns_) * 1e-9;
  stats_.completion_tokens++;
  output_.push_back(s.token);
  out.tokens.push_back(s.token);
  if (req_.sampling.n_logprobs > 0) out.logprobs.push_back(s);

  const auto& stop_ids = session_->model().tokenizer().stop_ids();
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
  } else if (stats_.completion_tokens >= req_.max_tokens ||
             session_->n_past() >= session_->n_ctx()) {
    Finish(FinishReason::kLength, &out);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Generation>> Generate(
    Session* session, GenerateRequest request,
    const std::function<bool(const StepOutput&)>& on_step) {
  ASSIGN_OR_RETURN(auto g, Generation::Create(session, std::move(request)));
  while (!g->done()) {
    ASSIGN_OR_RETURN(StepOutput out, g->Step());
    if (on_step && !on_step(out)) g->Cancel();
  }
  return g;
}

}  // namespace minfer::runtime
