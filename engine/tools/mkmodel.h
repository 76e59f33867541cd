// Writes synthetic Qwen2, Qwen3 and Llama 3 GGUF models: the real
// architecture, shapes and tokenizer, deterministic random weights (from a
// seed), any weight type. Llama files carry the Llama 3 tokenizer (BOS
// prepended), the chat template beside it, and rope_freqs.weight when the
// shape has rope scaling.
//
// The weights are shaped so next-token distributions are peaked with a clear
// top-1 margin (greedy-equality tests between backends need that):
//  * hidden states stay dominated by the current token's embedding row: the
//    residual branches add a context-dependent part of about 0.6x its norm
//    in total (scaled down by sqrt(2 * n_layer) per branch);
//  * untied models' output rows are a permutation of the embedding rows over
//    the ordinary tokens, so the top-1 continuation of token t is pi(t) with
//    a logit near `top_logit` against a noise floor of about
//    top_logit / sqrt(n_embd): greedy paths move token to token, with clear
//    top-2 margins (the equality tests against llama.cpp and between the
//    engine's paths use these). The head rows of special and padding tokens
//    are drawn independently, so they are never a top-1 continuation, and
//    after one the path joins the permutation. Tied models (head =
//    embedding) continue with t itself: their greedy paths repeat.
#ifndef MINFER_ENGINE_TOOLS_MKMODEL_H_
#define MINFER_ENGINE_TOOLS_MKMODEL_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "engine/base/thread_pool.h"
#include "engine/tools/model_spec.h"

namespace minfer::tools {

struct MkModelOptions {
  Qwen2Shape shape;
  QuantRecipe recipe;
  uint64_t seed = 1;
  std::string tokenizer_json;  // empty: DefaultTokenizerJsonPath(), or the Llama shape's package
  std::string output;
  double top_logit = 20.0;
  double residual_mix = 0.6;  // total residual-branch norm relative to the embedding row
  // tokenizer.chat_template; empty: the template beside the tokenizer.json
  // (Qwen3, Llama), else ChatML with Qwen2's default system prompt.
  std::string chat_template;
};

struct MkModelReport {
  uint64_t file_bytes = 0;
  int64_t n_params = 0;
  double seconds = 0;
  std::map<std::string, int> tensors_by_type;  // type name -> count (2-D tensors)
};

absl::StatusOr<MkModelReport> WriteSyntheticModel(const MkModelOptions& options,
                                                  ThreadPool* pool);

// The next-token map of an untied synthetic model: pi(t) for ordinary token
// ids t < n_normal (exposed for tests).
int64_t SyntheticSuccessor(int64_t token, int64_t n_normal);

}  // namespace minfer::tools

#endif  // MINFER_ENGINE_TOOLS_MKMODEL_H_
