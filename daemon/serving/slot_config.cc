#include "daemon/serving/slot_config.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/field_error.h"
#include "engine/base/status.h"
#include "engine/chat/tool_calls.h"

namespace minfer::daemon {

std::vector<std::string> ReasoningParsers() { return {"qwen3"}; }

absl::Status CheckChatParsers(const SlotConfig& config) {
  // The lists come from the registries, so a family added there is
  // accepted here without a second list to keep.
  auto check = [](const char* field, const std::string& name,
                  const std::vector<std::string>& known) -> absl::Status {
    if (name.empty() || name == "none") return absl::OkStatus();
    for (const std::string& k : known) {
      if (name == k) return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat(
        field, " '", name.substr(0, 64), "' is not known: ", absl::StrJoin(known, ", "),
        " or none (empty: the chat template's)"));
  };
  RETURN_IF_ERROR(check("tool_parser", config.tool_parser, chat::ToolCallFamilies()));
  return check("reasoning_parser", config.reasoning_parser, ReasoningParsers());
}

absl::Status CheckSpeculative(SlotConfig* config) {
  std::string& spec = config->spec;
  if (spec.empty() && !config->draft.empty()) spec = "draft";
  if (!spec.empty() && spec != "off" && spec != "ngram" && spec != "draft") {
    return InvalidField("spec", absl::StrCat("'", spec.substr(0, 64),
                                             "' is not known: off, ngram or draft (empty: the "
                                             "MINFER_SPEC_K knob)"));
  }
  if (config->spec_k < 0 || config->spec_k > kMaxSpecK) {
    return InvalidFieldThat("spec_k", absl::StrCat("must be in [0, ", kMaxSpecK, "] (0: ",
                                                   kDefaultSpecK, "), got ", config->spec_k));
  }
  if (spec == "draft" && config->draft.empty()) {
    return InvalidField("draft", "spec 'draft' needs a draft model: the path of its GGUF file");
  }
  if (spec != "draft" && !config->draft.empty()) {
    return InvalidField("draft", absl::StrCat("a draft model drafts with spec 'draft' (or empty), "
                                              "not with spec '", spec, "'"));
  }
  const bool speculates = spec == "ngram" || spec == "draft";
  if (!speculates && config->spec_k != 0) {
    return InvalidField("spec_k", absl::StrCat("set with spec '", spec,
                                               "': spec_k applies to spec ngram or draft (the "
                                               "knob MINFER_SPEC_K sets it otherwise)"));
  }
  if (speculates && config->spec_k == 0) config->spec_k = kDefaultSpecK;
  return absl::OkStatus();
}

absl::StatusOr<std::optional<graph::DType>> ParseKvType(const std::string& kv_type) {
  if (kv_type.empty() || kv_type == "auto") return std::optional<graph::DType>();
  if (kv_type == "f32") return std::optional<graph::DType>(graph::DType::kF32);
  if (kv_type == "f16") return std::optional<graph::DType>(graph::DType::kF16);
  if (kv_type == "q8_0") return std::optional<graph::DType>(graph::DType::kQ8_0);
  if (kv_type == "fp8") return std::optional<graph::DType>(graph::DType::kFp8);
  return absl::InvalidArgumentError(absl::StrCat(
      "kv_type must be f32, f16, q8_0 or fp8 (empty for the model's default), got '",
      kv_type.substr(0, 64), kv_type.size() > 64 ? "...'" : "'"));
}

absl::Status CheckSleepAndEvents(const SlotConfig& config) {
  if (!config.kv_events.empty() && config.kv_events != "on" && config.kv_events != "off") {
    return InvalidField("kv_events", absl::StrCat("must be on, off or empty (on when the daemon "
                                                  "publishes events), got '",
                                                  config.kv_events.substr(0, 32), "'"));
  }
  if (!(config.sleep_after_seconds >= 0) || config.sleep_after_seconds > 1e9) {
    return InvalidFieldThat("sleep_after_seconds",
                            absl::StrCat("must be 0 (never) or a number of seconds, got ",
                                         config.sleep_after_seconds));
  }
  if (config.sleep_level != 1 && config.sleep_level != 2) {
    return InvalidFieldThat("sleep_level",
                            absl::StrCat("must be 1 (weights kept in host memory) or 2 (weights "
                                         "dropped), got ",
                                         config.sleep_level));
  }
  return absl::OkStatus();
}

}  // namespace minfer::daemon
