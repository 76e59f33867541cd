// OpenAI's Responses API (POST /v1/responses), stateless, on minfer's chat
// request model: the JSON translated into the same v1::GenerateRequest (a
// v1::Chat with tools, tool choice and tool history) as the chat
// completions API builds, the reply read by the same ChatOutputStream and
// written as a response object or its SSE event sequence. No HTTP here.
//
// Request: model, input (a string, or items: messages {role: user |
// system | developer | assistant, content: a string or input_text /
// output_text parts}, function_call {call_id, name, arguments},
// function_call_output {call_id, output}, reasoning (accepted, not shown to
// the model)), instructions (a system message first), tools ([{type:
// "function", name, description, parameters, strict}]), tool_choice (none,
// auto, required, {type: "function", name}), parallel_tool_calls,
// max_output_tokens, temperature, top_p, stream, text.format (text,
// json_object, json_schema {name, schema, strict}: the structured-output
// constraint), reasoning.effort (none / minimal: the template's
// enable_thinking false; low / medium / high: true). Echoed, not used:
// metadata, user, store (nothing is stored: the response says store false),
// truncation, include, service_tier. Refused with a 400 naming the field:
// previous_response_id and conversation (no response is stored),
// background, tools other than functions, content parts other than text
// (input_image, input_file), items of other types, a function_call_output
// whose call_id no earlier function_call carries.
//
// Response: {id: "resp_...", object: "response", created_at, status
// (completed, or incomplete with incomplete_details.reason
// "max_output_tokens"), model, output: [reasoning {summary: [summary_text]}?,
// message {content: [output_text]}?, function_call {call_id, name,
// arguments}...], usage {input_tokens, output_tokens, total_tokens, ...},
// and the request's settings}. The SDKs' output_text is theirs (the
// concatenated output_text parts). Streaming sends OpenAI's events, each
// with `event:` and a sequence_number: response.created,
// response.in_progress, response.output_item.added / done,
// response.content_part.added / done, response.output_text.delta / done,
// response.reasoning_summary_part.added / done,
// response.reasoning_summary_text.delta / done,
// response.function_call_arguments.delta / done, and response.completed
// (response.incomplete when cut at max_output_tokens); an error after the
// start is an `error` event.
//
// Errors: the OpenAI error shape (openai::ErrorBody) naming the field.
#ifndef MINFER_DAEMON_HTTP_RESPONSES_API_H_
#define MINFER_DAEMON_HTTP_RESPONSES_API_H_

#include "absl/status/statusor.h"
#include "daemon/http/api_reply.h"
#include "nlohmann/json.hpp"

namespace minfer::daemon::responses {

// Parses a /v1/responses body (read in key order). Errors are
// openai::FieldErrors naming the Responses API's field.
absl::StatusOr<http_api::ApiRequest> ParseResponsesRequest(const nlohmann::ordered_json& body);

}  // namespace minfer::daemon::responses

#endif  // MINFER_DAEMON_HTTP_RESPONSES_API_H_
