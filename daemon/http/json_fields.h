// Reading a request's JSON fields with errors that name them: the helpers
// every HTTP API (OpenAI's, Anthropic's, Responses) reads its body with.
// Errors are FieldError: INVALID_ARGUMENT with the field's name as a
// payload (Param). Thread-safe (no state).
#ifndef MINFER_DAEMON_HTTP_JSON_FIELDS_H_
#define MINFER_DAEMON_HTTP_JSON_FIELDS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/base/field_error.h"
#include "nlohmann/json.hpp"

namespace minfer::daemon::http_api {

using ojson = nlohmann::ordered_json;

// INVALID_ARGUMENT `message` naming `param` (the API's field) in a payload.
absl::Status FieldError(const std::string& param, const std::string& message);
// The field an error names, "" if none.
std::string Param(const absl::Status& status);

// Maps a request-model field path (FieldPath, parsed) to the API's field
// name; "" when the API has no name for it.
using ApiFieldNamer = std::function<std::string(const std::vector<FieldPathStep>& path)>;

// A field error from the generation path (naming the request model's field,
// FieldPath: "chat.tools[1].parameters") as the API names it: the message
// says `namer`'s field ("tools[1].function.parameters: ..."), which is also
// the Param. Statuses that already name an API field (Param), that are not
// field errors, or whose path `namer` has no name for pass unchanged; the
// code and other payloads (ErrorReason) are kept. Never reads the message.
absl::Status ToApiField(const absl::Status& status, const ApiFieldNamer& namer);

// "a string", "an object", ...: for messages.
const char* JsonTypeName(const ojson& v);
// "FIELD must be WANT, got TYPE", naming FIELD.
absl::Status WrongType(const std::string& field, const char* want, const ojson& got);
// The member, or null when absent (an explicit null is "not given").
const ojson& Member(const ojson& object, const char* key);
absl::StatusOr<std::optional<double>> OptNumber(const ojson& object, const char* key,
                                                const std::string& field);
absl::StatusOr<std::optional<int64_t>> OptInt(const ojson& object, const char* key,
                                              const std::string& field);
absl::StatusOr<std::optional<bool>> OptBool(const ojson& object, const char* key,
                                            const std::string& field);
absl::StatusOr<std::optional<std::string>> OptString(const ojson& object, const char* key,
                                                     const std::string& field);

}  // namespace minfer::daemon::http_api

#endif  // MINFER_DAEMON_HTTP_JSON_FIELDS_H_
