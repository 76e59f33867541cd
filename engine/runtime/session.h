// A session: one sequence's KV cache and position over a shared Model —
// the batch engine's forward (BatchRunner) with one sequence, so that there
// is one forward path: the same graphs, KV layout and kernels serve
// `minfer run`, `minfer bench` and the daemon's batches, and a session's
// logits equal a batched sequence's bit for bit on the CPU.
//
// Eval() appends tokens at positions n_past, n_past+1, ...: prompts are
// evaluated in chunks of MINFER_PREFILL_CHUNK tokens (PrefillChunk), at
// most kSessionLogitRows at a time when every token's logits are asked
// for. The session's KV pool holds exactly n_ctx rows (its blocks all
// belong to the one sequence), and its runner keeps the graphs of the
// shapes it met (BatchRunner: token buckets, rebuilt when a knob that
// shapes graphs changes).
//
// Not thread-safe: one thread drives a session at a time. Sessions of the
// same model must also not run concurrently (they share its backends).
#ifndef MINFER_ENGINE_RUNTIME_SESSION_H_
#define MINFER_ENGINE_RUNTIME_SESSION_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/runtime/batch_runner.h"
#include "engine/runtime/model.h"

namespace minfer::runtime {

// Prompt tokens per prefill step when MINFER_PREFILL_CHUNK is 0 (its
// default). On a GPU the int8 GEMMs run ~15% more operations per second at
// 2,048 tokens than at 512 (7B Q4_K_M pp2048: 9,570 -> 10,730 t/s on the
// H200) for ~360 MiB more graph buffers at 7B; on the CPU larger steps gain
// nothing and cost memory.
inline constexpr int64_t kGpuPrefillChunk = 2048;
inline constexpr int64_t kCpuPrefillChunk = 512;
// The chunk for a knob value (> 0: itself) and a placement.
inline int64_t PrefillChunk(int64_t knob, bool gpu) {
  if (knob > 0) return knob;
  return gpu ? kGpuPrefillChunk : kCpuPrefillChunk;
}

// Rows of logits one evaluation step of a session returns at most: an
// Eval with all_logits runs in steps of this many tokens (each row is
// n_vocab floats of the graph's activations).
inline constexpr int64_t kSessionLogitRows = 64;

struct SessionOptions {
  int64_t n_ctx = 4096;  // clamped to the model's context length
  // KV element type; unset = Model::DefaultKvType().
  std::optional<graph::DType> kv_type;
};

struct EvalStats {
  int64_t prefill_tokens = 0;
  double prefill_seconds = 0;
  int64_t decode_tokens = 0;
  double decode_seconds = 0;
  int64_t graph_builds = 0;
};

class Session {
 public:
  static absl::StatusOr<std::unique_ptr<Session>> Create(std::shared_ptr<const Model> model,
                                                         const SessionOptions& options = {});

  // Evaluates `tokens` after the current position. Returns the logits of
  // the last token ([n_vocab]), or of every token when `all_logits`
  // ([n_tokens x n_vocab], row-major). OUT_OF_RANGE (with the numbers) when
  // the tokens would not fit in n_ctx; INVALID_ARGUMENT for a token id
  // outside the vocabulary. On error the position is unchanged.
  absl::StatusOr<std::vector<float>> Eval(absl::Span<const int32_t> tokens,
                                          bool all_logits = false);

  int64_t n_past() const { return n_past_; }
  int64_t n_ctx() const { return runner_->n_ctx(); }
  graph::DType kv_type() const { return runner_->pool().dtype(); }
  // Forgets the sequence (the KV rows are simply overwritten later).
  void Reset() { n_past_ = 0; }
  // Keeps the first n tokens (n <= n_past), e.g. to reuse a common prefix.
  void Truncate(int64_t n) { n_past_ = std::min(n_past_, std::max<int64_t>(n, 0)); }

  const EvalStats& stats() const;
  const Model& model() const { return *model_; }
  int64_t kv_bytes() const { return runner_->pool().bytes(); }
  // Activation memory of the runner's graphs, over all backends.
  int64_t graph_bytes() const { return runner_->activation_bytes(); }

 private:
  Session() = default;

  std::shared_ptr<const Model> model_;
  std::unique_ptr<BatchRunner> runner_;
  std::vector<int32_t> blocks_;  // the sequence's block table: every block of the pool
  int64_t n_past_ = 0;
  mutable EvalStats stats_;
  std::vector<RowResult> results_, extra_;
};

}  // namespace minfer::runtime

#endif  // MINFER_ENGINE_RUNTIME_SESSION_H_
