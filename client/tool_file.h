// minferctl's tool flags: `--tools FILE` (the functions a chat may call) and
// `--tool-choice`, read into minfer.v1.Chat's tools and tool_choice.
//
// A tools file is JSON: an array of tools, each either OpenAI's shape
//   {"type": "function", "function": {"name": ..., "description": ...,
//    "parameters": {...}, "strict": true}}
// or minfer's own (v1.Tool's fields)
//   {"name": ..., "description": ..., "parameters": {...}, "strict": true}
// An object {"tools": [...]} (a request body's shape) and a single tool
// object are taken too. The server checks the tools (names, schemas); this
// only reads the file's shape.
//
// Thread-safe (pure functions).
#ifndef MINFER_CLIENT_TOOL_FILE_H_
#define MINFER_CLIENT_TOOL_FILE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "minfer/v1/generation.pb.h"

namespace minfer::ctl {

// The tools in `json` (a tools file's text). INVALID_ARGUMENT naming the
// place ("[1].function.name: not a string") when it is not JSON or not of
// the shape above.
absl::StatusOr<std::vector<v1::Tool>> ParseToolsJson(absl::string_view json);

// "auto", "none", "required", or a function's name (TOOL_CHOICE_FUNCTION).
// INVALID_ARGUMENT for an empty value.
absl::StatusOr<v1::ToolChoice> ParseToolChoice(absl::string_view value);

}  // namespace minfer::ctl

#endif  // MINFER_CLIENT_TOOL_FILE_H_
