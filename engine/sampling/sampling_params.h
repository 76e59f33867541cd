// Per-request sampling settings, as a generation request states them.
//
// A plain value type: copy it freely. Validate() checks only what can be
// checked without a model (banned token ids against the vocabulary are
// checked by Sampler::Create). The defaults are the neutral settings: plain
// softmax sampling at temperature 1 with every filter and penalty off, seed 0.
// Serving policy (e.g. a default temperature of 0.7, or a fresh random seed
// per request) belongs to the caller, not here.
#ifndef MINFER_ENGINE_SAMPLING_SAMPLING_PARAMS_H_
#define MINFER_ENGINE_SAMPLING_SAMPLING_PARAMS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace minfer {

// Upper bound on SamplingParams::n_logprobs (OpenAI's top_logprobs limit).
inline constexpr int32_t kMaxLogprobs = 20;

struct SamplingParams {
  // 0 selects greedy decoding (argmax; top_k/top_p/min_p are then moot and no
  // random number is drawn). Otherwise logits are divided by it after top-k.
  float temperature = 1.0f;
  // Keep only the k highest logits (ties: lower token id first). 0 = off.
  int32_t top_k = 0;
  // Nucleus sampling: keep the smallest highest-probability prefix whose mass
  // is >= top_p (of the distribution left by min-p). 1 = off. In (0, 1].
  float top_p = 1.0f;
  // Drop tokens whose probability is below min_p * (highest probability),
  // measured after temperature. 0 = off. In [0, 1].
  float min_p = 0.0f;

  // Penalties over the window of the last `penalty_last_n` tokens of the
  // sampler's history (prompt + generated; see Sampler).
  // CTRL / llama.cpp repetition penalty, applied once per distinct token in
  // the window: positive logits are divided by it, negative ones multiplied.
  // 1 = off. Must be finite and > 0.
  float repetition_penalty = 1.0f;
  // OpenAI style: logit -= count * frequency_penalty
  //                         + (count > 0) * presence_penalty,
  // with count the token's occurrences in the window. 0 = off. Any finite
  // value (negative values encourage repetition).
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  // Window size in tokens. -1 = the whole history, 0 = penalties off.
  int32_t penalty_last_n = 64;

  // Same seed + same sequence of logits => same tokens.
  uint64_t seed = 0;

  // How many of the most likely tokens to report, with log-probabilities,
  // for every generated token. In [0, kMaxLogprobs].
  int32_t n_logprobs = 0;

  // Token ids that are never sampled (e.g. padding rows of the output
  // projection beyond the tokenizer's vocabulary). Each must be >= 0 and
  // < the sampler's vocabulary size. Duplicates are allowed.
  std::vector<int32_t> banned_tokens;

  // INVALID_ARGUMENT naming the first offending field and its value.
  absl::Status Validate() const;

  // True when some penalty can change a logit.
  bool PenaltiesEnabled() const {
    return penalty_last_n != 0 &&
           (repetition_penalty != 1.0f || frequency_penalty != 0.0f ||
            presence_penalty != 0.0f);
  }
};

}  // namespace minfer

#endif  // MINFER_ENGINE_SAMPLING_SAMPLING_PARAMS_H_
