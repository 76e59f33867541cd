// Sequence: one generation request on its way through a slot, shared by the
// gRPC stream that asked for it (the consumer) and the slot worker that runs
// it (the producer).
//
// The worker publishes each step's tokens and text; they accumulate in a
// pending chunk until the stream takes them, so a client that reads slowly
// gets larger, merged responses and never makes the worker wait (memory is
// bounded by the request's max_tokens). The worker finishes every sequence
// exactly once, with a result; cancellation (client gone, deadline, unload,
// drain) only sets a flag that the worker checks before each step, so a
// cancelled sequence runs at most the step in progress and then frees its
// session.
//
// Thread-safe.
#ifndef MINFER_DAEMON_SERVING_SEQUENCE_H_
#define MINFER_DAEMON_SERVING_SEQUENCE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/serving/notifier.h"
#include "daemon/serving/tenants.h"
#include "engine/runtime/generation.h"
#include "engine/sampling/finish_reason.h"

namespace minfer::daemon {

using Clock = std::chrono::steady_clock;

// How a sequence ended.
struct SequenceResult {
  // OK when the generation ran to a finish reason of its own (length, stop,
  // eos); otherwise why it was stopped (CANCELLED, DEADLINE_EXCEEDED,
  // UNAVAILABLE when the server drains) or the engine's error.
  absl::Status status;
  FinishReason finish_reason = FinishReason::kCancelled;
  runtime::GenerationStats stats;  // what ran (zeros if it never started)
  double queue_seconds = 0;        // arrival -> admitted to a session
  double ttft_seconds = 0;         // arrival -> first token (0 if none)
  double total_seconds = 0;        // arrival -> finished
  uint64_t seed = 0;

  // Completion tokens after the first per second of wall time from the
  // first token to the end: the rate the stream saw (with other sequences
  // interleaved, below the model's own step rate, stats.DecodeTokensPerSecond()).
  double DecodeTokensPerSecond() const {
    const double span = total_seconds - ttft_seconds;
    return stats.completion_tokens > 1 && span > 0 ? (stats.completion_tokens - 1) / span : 0;
  }
};

// What the stream sends next: everything published since the last take.
struct SequenceChunk {
  std::vector<int32_t> tokens;
  std::string text;
  std::vector<SampledToken> logprobs;
  bool first = false;                    // the stream's first chunk
  std::optional<SequenceResult> result;  // set on the last chunk
};

class Sequence {
 public:
  // `deadline` = Clock::time_point::max() for none. `arrival` is when the
  // server received the request (latencies are measured from it).
  Sequence(runtime::GenerateRequest request, std::string model, Clock::time_point arrival,
           Clock::time_point deadline);
  Sequence(const Sequence&) = delete;
  Sequence& operator=(const Sequence&) = delete;

  const std::string& model() const { return model_; }
  Clock::time_point arrival() const { return arrival_; }
  Clock::time_point deadline() const { return deadline_; }
  const runtime::GenerateRequest& request() const { return request_; }
  // Of the request as submitted (still valid after TakeRequest).
  int32_t prompt_tokens() const { return prompt_tokens_; }
  uint64_t seed() const { return seed_; }
  // Which API the request came through ("grpc", "http"): the slot's log
  // says. Set before the sequence is submitted.
  void set_api(const char* api) { api_ = api; }
  const char* api() const { return api_; }
  // The tenant's hold on this stream (tenants.h): its tokens are booked when
  // the sequence finishes; the stream counts against the tenant's cap until
  // the sequence is destroyed. Set before the sequence is submitted.
  void set_tenant(std::shared_ptr<TenantLease> lease) { tenant_ = std::move(lease); }
  const TenantLease* tenant() const { return tenant_.get(); }

  // --- consumer side ---
  // Asks the worker to stop this sequence; the first reason wins.
  void Cancel(absl::Status reason);
  // Moves what is pending into *out; false when there is nothing to send.
  bool TakeChunk(SequenceChunk* out);
  // Notified on every Publish and on Finish.
  Notifier& notifier() { return notifier_; }

  // --- producer side (the slot worker) ---
  bool cancel_requested() const { return cancel_requested_.load(std::memory_order_acquire); }
  absl::Status cancel_reason() const;
  // Moves the request out (into the Generation); call once.
  runtime::GenerateRequest TakeRequest() { return std::move(request_); }
  void Publish(const runtime::StepOutput& step);
  // Ends the sequence; later calls are ignored.
  void Finish(SequenceResult result);
  bool finished() const;

 private:
  std::shared_ptr<TenantLease> tenant_;
  runtime::GenerateRequest request_;
  const int32_t prompt_tokens_;
  const uint64_t seed_;
  const std::string model_;
  const Clock::time_point arrival_;
  const Clock::time_point deadline_;
  const char* api_ = "grpc";  // a string literal
  std::atomic<bool> cancel_requested_{false};
  Notifier notifier_;

  mutable std::mutex mu_;
  absl::Status cancel_reason_;  // guarded by mu_
  // Pending output, guarded by mu_.
  std::vector<int32_t> tokens_;
  std::string text_;
  std::vector<SampledToken> logprobs_;
  std::optional<SequenceResult> result_;
  bool taken_any_ = false;
  bool result_taken_ = false;
};

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_SERVING_SEQUENCE_H_
