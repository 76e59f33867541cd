#include "engine/sampling/sampling_params.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "engine/base/field_error.h"

namespace minfer {
namespace {

absl::Status Bad(absl::string_view field, absl::string_view requirement,
                 double value) {
  // The field as data (field_error.h); a request that holds these params
  // puts its own prefix before it (PrefixField).
  return InvalidFieldThat(field, absl::StrCat("must be ", requirement, ", got ", value));
}

}  // namespace

absl::Status SamplingParams::Validate() const {
  // Comparisons are written so that NaN fails them.
  if (!(std::isfinite(temperature) && temperature >= 0.0f)) {
    return Bad("temperature", "finite and >= 0", temperature);
  }
  if (top_k < 0) return Bad("top_k", ">= 0 (0 = off)", top_k);
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return Bad("top_p", "in (0, 1] (1 = off)", top_p);
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    return Bad("min_p", "in [0, 1] (0 = off)", min_p);
  }
  if (!(std::isfinite(repetition_penalty) && repetition_penalty > 0.0f)) {
    return Bad("repetition_penalty", "finite and > 0 (1 = off)",
               repetition_penalty);
  }
  if (!std::isfinite(frequency_penalty)) {
    return Bad("frequency_penalty", "finite", frequency_penalty);
  }
  if (!std::isfinite(presence_penalty)) {
    return Bad("presence_penalty", "finite", presence_penalty);
  }
  if (penalty_last_n < -1) {
    return Bad("penalty_last_n", ">= -1 (-1 = whole history, 0 = off)",
               penalty_last_n);
  }
  if (n_logprobs < 0 || n_logprobs > kMaxLogprobs) {
    return Bad("n_logprobs", absl::StrCat("in [0, ", kMaxLogprobs, "]"),
               n_logprobs);
  }
  for (size_t i = 0; i < banned_tokens.size(); ++i) {
    if (banned_tokens[i] < 0) {
      return InvalidFieldThat(absl::StrCat("banned_tokens[", i, "]"),
                              absl::StrCat("must be >= 0, got ", banned_tokens[i]));
    }
  }
  return absl::OkStatus();
}

}  // namespace minfer
