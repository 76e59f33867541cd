// SlotConfig: how a model is loaded and served (LoadModelRequest, the
// config file), and the checks of its fields that need no file.
#ifndef MINFER_DAEMON_SERVING_SLOT_CONFIG_H_
#define MINFER_DAEMON_SERVING_SLOT_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/base/knobs.h"
#include "engine/graph/tensor.h"

namespace minfer::daemon {

struct SlotConfig {
  std::string name;
  std::string path;
  std::string backend = "auto";  // cpu | cuda | auto
  // The GPU (a device backend's device index) to load on; -1: MINFER_GPU
  // when it is set, else the device with the most free memory
  // (LoadModelRequest.device, placement.h).
  int32_t device = -1;
  // Tensor parallelism (LoadModelRequest.tensor_parallel / devices): the
  // model split over this many GPUs (1: not split), on `devices` when they
  // are named (as many as the split), else on the GPUs with the most room.
  int32_t tensor_parallel = 1;
  std::vector<int32_t> devices;
  int64_t n_ctx = 4096;          // clamped to the model's context length
  int32_t parallel = 16;  // sequences running at once
  std::string kv_type;    // "" (the model's default), "f32", "f16", "q8_0", "fp8"
  KnobOverrides knobs;    // per-model knob overrides at load
  int32_t queue_size = 16;
  // KV pool size in tokens (rounded up to whole blocks); 0 = parallel x
  // n_ctx, every sequence can reach the full context at once.
  int64_t kv_tokens = 0;
  // Reply parsers (LoadModelRequest.tool_parser / reasoning_parser): "" =
  // from the chat template, "none", or a name (CheckChatParsers).
  std::string tool_parser;
  std::string reasoning_parser;
  // Speculative decoding (LoadModelRequest.spec / draft / spec_k;
  // CheckSpeculative): spec "" (the MINFER_SPEC_K knob), "off", "ngram" or
  // "draft"; the draft model's path (spec "draft"); drafted tokens per step
  // (0: kDefaultSpecK with ngram or draft).
  std::string spec;
  std::string draft;
  int32_t spec_k = 0;
  // KV-cache events (kv_events.h) of this model, when the daemon publishes
  // them (--kv-events): "" (on), "on" or "off".
  std::string kv_events;
  // Sleep after this many idle seconds (nothing running or queued) at
  // sleep_level (1 or 2); 0: never (LoadModelRequest.sleep_after_seconds,
  // --sleep-after).
  double sleep_after_seconds = 0;
  int32_t sleep_level = 1;
};

// INVALID_ARGUMENT naming the field: kv_events not "", "on" or "off",
// sleep_after_seconds negative or not finite, sleep_level not 1 or 2.
absl::Status CheckSleepAndEvents(const SlotConfig& config);

inline constexpr int32_t kDefaultSpecK = 4;
inline constexpr int32_t kMaxSpecK = 16;

// The reasoning parsers a model may be loaded with (besides "" and "none").
std::vector<std::string> ReasoningParsers();
// INVALID_ARGUMENT naming config's tool_parser or reasoning_parser when it
// is not "", "none" or a known one (chat::ToolCallFamilies,
// ReasoningParsers), listing the known ones.
absl::Status CheckChatParsers(const SlotConfig& config);
// Validates and resolves config's speculative options: a draft with spec ""
// means "draft"; spec_k 0 with "ngram" or "draft" becomes kDefaultSpecK.
// INVALID_ARGUMENT naming the field (engine/base/field_error.h): an unknown
// spec (listing the known ones), spec "draft" without a draft, a draft with
// spec "off" or "ngram", spec_k outside [0, kMaxSpecK] or given without
// spec "ngram" or "draft".
absl::Status CheckSpeculative(SlotConfig* config);

// "" -> nullopt (the model's default); else the DType, or INVALID_ARGUMENT.
absl::StatusOr<std::optional<graph::DType>> ParseKvType(const std::string& kv_type);

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_SERVING_SLOT_CONFIG_H_
