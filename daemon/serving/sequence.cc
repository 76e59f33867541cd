#include "daemon/serving/sequence.h"

#include <utility>

namespace minfer::daemon {

Sequence::Sequence(runtime::GenerateRequest request, std::string model,
                   Clock::time_point arrival, Clock::time_point deadline)
    : request_(std::move(request)),
      prompt_tokens_(static_cast<int32_t>(request_.prompt.size())),
      seed_(request_.sampling.seed),
      model_(std::move(model)),
      arrival_(arrival),
      deadline_(deadline) {}

void Sequence::Cancel(absl::Status reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancel_requested_.load(std::memory_order_relaxed)) return;
    cancel_reason_ = std::move(reason);
    cancel_requested_.store(true, std::memory_order_release);
  }
}

absl::Status Sequence::cancel_reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancel_reason_;
}

bool Sequence::TakeChunk(SequenceChunk* out) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool final_pending = result_.has_value() && !result_taken_;
  if (tokens_.empty() && text_.empty() && !final_pending) return false;
  out->tokens = std::move(tokens_);
  out->text = std::move(text_);
  out->logprobs = std::move(logprobs_);
  tokens_.clear();
  text_.clear();
  logprobs_.clear();
  out->first = !taken_any_;
  taken_any_ = true;
  out->result.reset();
  if (final_pending) {
    out->result = *result_;
    result_taken_ = true;
  }
  return true;
}

void Sequence::Publish(const runtime::StepOutput& step) {
  if (step.tokens.empty() && step.text.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (result_.has_value()) return;
    tokens_.insert(tokens_.end(), step.tokens.begin(), step.tokens.end());
    text_ += step.text;
    logprobs_.insert(logprobs_.end(), step.logprobs.begin(), step.logprobs.end());
  }
  notifier_.Notify();
}

void Sequence::Finish(SequenceResult result) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (result_.has_value()) return;
    result_ = std::move(result);
  }
  if (tenant_ != nullptr) {
    tenant_->Finished(result_->stats.prompt_tokens, result_->stats.completion_tokens,
                      result_->stats.cached_prompt_tokens, result_->queue_seconds);
  }
  notifier_.Notify();
}

bool Sequence::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return result_.has_value();
}

}  // namespace minfer::daemon
