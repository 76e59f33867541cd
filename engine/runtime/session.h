// A session: one sequence's KV cache and position over a shared Model, with
// the built graphs it reuses.
//
// Eval() appends tokens at positions n_past, n_past+1, ...: prompts are
// evaluated in chunks of MINFER_PREFILL_CHUNK tokens (PrefillChunk), single
// tokens by the decode graph. A graph is built once per GraphParams (tokens per step,
// rows of logits, n_ctx, KV type, fusion switches, GPU participation) and
// re-executed with new inputs at the same buffers; a knob change that
// affects graphs (knob registry generation) rebuilds them between steps.
//
// Not thread-safe: one thread drives a session at a time. Sessions of the
// same model must also not run concurrently (they share its backends).
#ifndef MINFER_ENGINE_RUNTIME_SESSION_H_
#define MINFER_ENGINE_RUNTIME_SESSION_H_

#include <cstdint>
#include <list>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/graph/executor.h"
#include "engine/graph/kv_cache.h"
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
  int64_t n_ctx() const { return n_ctx_; }
  graph::DType kv_type() const { return kv_->layout().dtype; }
  // Forgets the sequence (the KV rows are simply overwritten later).
  void Reset() { n_past_ = 0; }
  // Keeps the first n tokens (n <= n_past), e.g. to reuse a common prefix.
  void Truncate(int64_t n) { n_past_ = std::min(n_past_, std::max<int64_t>(n, 0)); }

  const EvalStats& stats() const { return stats_; }
  const Model& model() const { return *model_; }
  int64_t kv_bytes() const { return kv_->bytes(); }
  // Activation memory of the currently cached graphs, per backend.
  int64_t graph_bytes() const;

 private:
  Session() = default;
  struct CachedGraph {
    models::GraphParams params;
    std::shared_ptr<graph::Graph> graph;
    std::unique_ptr<graph::GraphExec> exec;
  };
  absl::StatusOr<graph::GraphExec*> GetGraph(int64_t n_tokens, int64_t n_out);
  absl::Status Step(absl::Span<const int32_t> tokens, bool all_logits, std::vector<float>* out);

  std::shared_ptr<const Model> model_;
  std::unique_ptr<graph::KvCache> kv_;
  int64_t n_ctx_ = 0;
  int64_t n_past_ = 0;
  uint64_t knob_gen_ = 0;
  std::list<CachedGraph> graphs_;  // most recently used first
  EvalStats stats_;
  std::vector<int32_t> positions_, rows_;
};

}  // namespace minfer::runtime

#endif  // MINFER_ENGINE_RUNTIME_SESSION_H_
