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
  std::unique_ptr<Generation> g(new Generation);
  ASSIGN_OR_RETURN(g->c_, Completion::Create(session->model(), std::move(request),
                                             session->n_ctx()));
  g->session_ = session;
  session->Reset();
  return g;
}

void Generation::Cancel() { c_->Cancel(); }

absl::StatusOr<StepOutput> Generation::Step() {
  if (c_->done()) return StepOutput{};
  const int64_t t0 = NowNs();
  GenerationStats& stats = c_->stats();
  if (!started_) {
    started_ = true;
    t_start_ns_ = t0;
    ASSIGN_OR_RETURN(logits_, session_->Eval(c_->prompt()));
    stats.prefill_seconds = (NowNs() - t0) * 1e-9;
  } else {
    ASSIGN_OR_RETURN(logits_, session_->Eval({c_->output_tokens().back()}));
    stats.decode_seconds += (NowNs() - t0) * 1e-9;
  }
  ASSIGN_OR_RETURN(SampledToken s, c_->Sample(logits_.data(), static_cast<int64_t>(logits_.size())));
  if (stats.completion_tokens == 0) stats.ttft_seconds = (NowNs() - t_start_ns_) * 1e-9;
  return c_->Accept(s, session_->n_past());
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
