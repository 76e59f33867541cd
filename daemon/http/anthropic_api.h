// Anthropic's Messages API (POST /v1/messages) on minfer's chat request
// model: the JSON translated into the same v1::GenerateRequest (a v1::Chat
// with tools, tool choice and tool history) that the OpenAI API builds, and
// the reply read by the same ChatOutputStream (reasoning, content, calls),
// written as Anthropic's message or its SSE event sequence. No HTTP here.
//
// Request: model, max_tokens (required, >= 1), system (a string or text
// blocks), messages (role user or assistant; content a string or blocks:
// text, tool_use {id, name, input}, tool_result {tool_use_id, content (a
// string or text blocks), is_error}, thinking {thinking} and
// redacted_thinking), tools ({name, description, input_schema}; type
// absent or "custom"), tool_choice ({type: auto | any | tool | none, name,
// disable_parallel_tool_use}), stop_sequences, temperature ([0, 1]),
// top_p, top_k, metadata (accepted, unused), thinking ({type: enabled,
// budget_tokens} / {type: disabled}: the template's enable_thinking, and
// the budget as v1::Chat.reasoning_budget: the think block is closed when
// it is spent), stream. Refused with a 400 naming the
// field: a missing max_tokens, block types other than those (image,
// document, ...), a tool_result whose tool_use_id no earlier tool_use
// carries, server tools (a tool with another type), a tool_choice naming
// no tool, mcp_servers and container. Unknown fields are ignored.
//
// A tool_result becomes a tool message (its content prefixed "Error: "
// when is_error); text blocks of one turn are joined with "\n".
//
// Response: {id: "msg_...", type: "message", role: "assistant", model,
// content: [thinking?, text?, tool_use...], stop_reason: end_turn |
// max_tokens | stop_sequence | tool_use, stop_sequence, usage:
// {input_tokens, output_tokens, cache_read_input_tokens}}. stop_sequence is
// the request's stop sequence when it gave exactly one; with several, which
// one matched is not reported (null).
//
// Errors: {type: "error", error: {type, message}} with the HTTP status of
// openai::ApiErrorFor; the message names the field.
#ifndef MINFER_DAEMON_HTTP_ANTHROPIC_API_H_
#define MINFER_DAEMON_HTTP_ANTHROPIC_API_H_

#include <memory>

#include "absl/status/statusor.h"
#include "daemon/http/api_reply.h"
#include "nlohmann/json.hpp"

namespace minfer::daemon::anthropic {

// Parses a /v1/messages body (read in key order: a schema's properties are
// generated in theirs). Errors are openai::FieldErrors naming Anthropic's
// field.
absl::StatusOr<http_api::ApiRequest> ParseMessagesRequest(const nlohmann::ordered_json& body);

// A refusal in Anthropic's shape, with openai::ApiErrorFor's HTTP status:
// 400 invalid_request_error, 401 authentication_error, 403
// permission_error, 404 not_found_error, 413 request_too_large, 429
// rate_limit_error, 503 overloaded_error, other api_error.
http_api::ErrorReply ErrorFor(const absl::Status& status);

}  // namespace minfer::daemon::anthropic

#endif  // MINFER_DAEMON_HTTP_ANTHROPIC_API_H_
