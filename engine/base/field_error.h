// Errors about a request's fields, carried as data.
//
// A request is validated in several layers (the engine's request, the
// daemon's request model, each HTTP API's parser), and each front door names
// fields its own way ("stopping.max_tokens" in minfer.v1, "max_tokens" in
// OpenAI's API, "max_output_tokens" in the Responses API). So the layer that
// finds a bad field says which one in a Status payload, and a front door maps
// that path to its own field name without reading the message.
//
// The contract of a field error (InvalidField):
//   - code INVALID_ARGUMENT (or the one given to FieldErrorWithCode);
//   - payload kFieldPathUrl: the field path in the terms of the layer that
//     made it, as dot-separated names with [i] indices
//     ("chat.tools[1].parameters", "stop[0]", "sampling.top_p");
//   - payload kFieldTextUrl: what the message says after the field path, so
//     that the message is exactly path + text ("stop[0]" + " is empty",
//     "prompt" + ": 300 tokens do not fit ..."). RenameField rebuilds the
//     message for a new path from it; the message always names the field,
//     so gRPC clients and logs read it unchanged.
// An error reason (WithReason) is a second, independent payload: a short
// machine-readable cause ("context_length_exceeded") that a front door may
// report as its error code.
//
// Header-only-dependency on absl; usable from every layer (engine, daemon).
// All functions are pure and thread-safe.
#ifndef MINFER_ENGINE_BASE_FIELD_ERROR_H_
#define MINFER_ENGINE_BASE_FIELD_ERROR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace minfer {

inline constexpr char kFieldPathUrl[] = "type.minfer.dev/field";
inline constexpr char kFieldTextUrl[] = "type.minfer.dev/field.text";
inline constexpr char kErrorReasonUrl[] = "type.minfer.dev/reason";

// The reason of a prompt that does not fit the model's context (with one
// position left for the completion).
inline constexpr char kContextLengthExceeded[] = "context_length_exceeded";

// INVALID_ARGUMENT "<field_path>: <message>" about `field_path`.
absl::Status InvalidField(absl::string_view field_path, absl::string_view message);
// INVALID_ARGUMENT "<field_path> <predicate>", for messages that read on
// from the field's name: InvalidFieldThat("top_p", "must be in (0, 1]").
absl::Status InvalidFieldThat(absl::string_view field_path, absl::string_view predicate);

// "<field_path>: <message>" with another code (a limit of the server's
// building a grammar for the field, say).
absl::Status FieldErrorWithCode(absl::StatusCode code, absl::string_view field_path,
                                absl::string_view message);

// The path a field error names; "" for other statuses.
std::string FieldPath(const absl::Status& status);
// What the message says after the path (": detail" or " predicate"); the
// whole message for a status that is not a field error.
std::string FieldText(const absl::Status& status);

// `status` (a field error) naming `new_path` instead: same code, the same
// payloads (a reason survives), the message new_path + FieldText. A status
// that is not a field error is returned unchanged.
absl::Status RenameField(const absl::Status& status, absl::string_view new_path);
// `status` with `prefix` + "." put before its field path ("top_p" ->
// "sampling.top_p"); unchanged when it is not a field error.
absl::Status PrefixField(const absl::Status& status, absl::string_view prefix);

// `status` with the error reason `reason` set (OK passes through).
absl::Status WithReason(absl::Status status, absl::string_view reason);
// The reason set by WithReason; "" if none.
std::string ErrorReason(const absl::Status& status);

// One step of a field path: a name ("tools") or an index ([1]).
struct FieldPathStep {
  std::string name;    // empty for an index
  int64_t index = -1;  // >= 0 for an index
  bool is_index() const { return index >= 0; }
  bool operator==(const FieldPathStep&) const = default;
};

// "chat.tools[1].parameters" -> {chat, tools, [1], parameters}. A malformed
// index ("[x]") is kept as a name, so parsing never fails.
std::vector<FieldPathStep> ParseFieldPath(absl::string_view path);
// The inverse of ParseFieldPath.
std::string FormatFieldPath(const std::vector<FieldPathStep>& steps);

}  // namespace minfer

#endif  // MINFER_ENGINE_BASE_FIELD_ERROR_H_
