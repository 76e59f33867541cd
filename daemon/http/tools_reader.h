// Reading a request's `tools` array into the chat request model's tools
// (v1::Chat.tools): the one reader of the three HTTP APIs, which write a
// function tool in different shapes —
//   OpenAI chat:  {"type": "function", "function": {"name", "description",
//                  "parameters", "strict"}}
//   Responses:    {"type": "function", "name", "description", "parameters",
//                  "strict"}
//   Anthropic:    {"type"?: "custom", "name", "description", "input_schema"}
// ToolShape says which. Errors are FieldErrors naming the API's field
// ("tools[1].function.parameters is required ..."); ValidateChatTools checks
// the rest (names, schemas) after. Thread-safe (no state).
#ifndef MINFER_DAEMON_HTTP_TOOLS_READER_H_
#define MINFER_DAEMON_HTTP_TOOLS_READER_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "daemon/http/json_fields.h"
#include "minfer/v1/generation.pb.h"

namespace minfer::daemon::http_api {

struct ToolShape {
  // The member that holds the function's fields ("function" in OpenAI's
  // chat tools; required and an object there); null: the tool itself.
  const char* function = nullptr;
  // The member that holds the arguments' JSON Schema (required, an object).
  const char* schema = "parameters";
  // Whether the "is required" message for a missing schema explains what
  // to send ({"type": "object", "properties": {}} for no arguments).
  bool explain_schema = true;
  // Whether the function's "strict" flag is read.
  bool strict = true;
  // The API's rule for a tool's "type" (`field`: "tools[i]"); OK accepts.
  std::function<absl::Status(const ojson& tool, const std::string& field)> check_type;
};

// Appends body["tools"] (absent or null: none) to chat->tools: an array of
// at most kMaxTools objects of `shape`.
absl::Status ReadTools(const ojson& body, const ToolShape& shape, v1::Chat* chat);

}  // namespace minfer::daemon::http_api

#endif  // MINFER_DAEMON_HTTP_TOOLS_READER_H_
