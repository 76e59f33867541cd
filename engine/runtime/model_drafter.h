// ModelDrafter: speculative drafts from a smaller model of the same
// vocabulary (a draft model: Qwen2.5-0.5B for a Qwen2.5-7B, or the target's
// own weights at a cheaper quantization).
//
// It runs an Engine of its own on the draft model — its own KV pool and
// batched steps — with the prefix cache on: each step, every sequence that
// speculates becomes one greedy request of k tokens whose prompt is the
// sequence so far, and the draft engine's steps run them all together (one
// prefill step for the tokens the draft has not seen, then k - 1 decode
// steps, batched over the sequences). A sequence's earlier request left its
// full KV blocks in the draft's prefix cache, so each round computes only
// the tokens past the last full block (at most kv_block - 1 of them) plus
// what the target accepted since: the draft's cache follows the target's
// through rejections without a rollback of its own. The drafts are greedy,
// so the draft distribution q is one-hot and the engine's verification is
// the exact rejection rule (engine.h, EngineOptions::spec_k).
//
// A ModelDrafter serves one Engine (its draft engine is stateful) on that
// engine's thread.
#ifndef MINFER_ENGINE_RUNTIME_MODEL_DRAFTER_H_
#define MINFER_ENGINE_RUNTIME_MODEL_DRAFTER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/runtime/drafter.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/model.h"

namespace minfer::runtime {

// OK when `draft` can draft for `target`: the same tokens under the same
// ids, up to kDraftVocabSlack ids more or fewer at the end (a family pads
// its vocabulary per size: Qwen2.5-0.5B's files list 151,936 tokens, the
// 7B's 152,064, the extra ones "[PAD...]"). A draft id past the target's
// vocabulary ends the draft (ProposeAll); a sequence holding an id past the
// draft's gets no draft (the draft engine refuses it). Else
// INVALID_ARGUMENT saying what differs (the vocabulary sizes, or the first
// id whose token differs, with both tokens).
inline constexpr int32_t kDraftVocabSlack = 128;
absl::Status CheckDraftVocabulary(const Model& draft, const Model& target);

class ModelDrafter : public Drafter {
 public:
  // The draft engine takes `target_options`' max_seqs, n_ctx, kv_block and
  // kv_type (so any sequence of the target fits it), with the prefix cache
  // on and no speculation of its own.
  static absl::StatusOr<std::shared_ptr<ModelDrafter>> Create(std::shared_ptr<const Model> draft,
                                                              const Model& target,
                                                              const EngineOptions& target_options);

  int64_t Propose(absl::Span<const int32_t> tokens, int64_t k,
                  std::vector<int32_t>* out) override;
  void ProposeAll(absl::Span<const DraftQuery> queries,
                  std::vector<std::vector<int32_t>>* out) override;

  const Model& model() const { return *draft_; }
  const Engine& engine() const { return *engine_; }
  // Draft steps run and their wall time, over all rounds.
  int64_t steps() const { return steps_; }
  double seconds() const { return seconds_; }

 private:
  ModelDrafter() = default;
  std::shared_ptr<const Model> draft_;
  std::unique_ptr<Engine> engine_;
  int32_t target_vocab_ = 0;
  int64_t steps_ = 0;
  double seconds_ = 0;
};

}  // namespace minfer::runtime

#endif  // MINFER_ENGINE_RUNTIME_MODEL_DRAFTER_H_
