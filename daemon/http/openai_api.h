// The OpenAI-compatible HTTP API's JSON, translated to and from minfer's
// own generation request (minfer.v1.GenerateRequest) and stream (Sequence
// chunks): no HTTP here, so every rule is testable on its own. The HTTP
// server (http_server.h) submits what ParseRequest builds through the same
// path as gRPC's Generate (SubmitGenerate), so the two front doors cannot
// drift apart.
//
// Requests: POST /v1/chat/completions and /v1/completions bodies. Fields
// follow OpenAI's API; unknown fields are ignored as OpenAI's server
// ignores them, a known field of the wrong type or out of range is an
// error naming it. Features minfer does not serve (n > 1, the deprecated
// functions / function_call, tools as chat_template_kwargs.tools, audio,
// modalities other than text, prediction, web_search_options, logit_bias,
// echo, ...) are refused, never silently dropped: each would change what
// the response means.
//
// Tools (chat only): tools (function tools; strict accepted), tool_choice
// ("none": the tools are not shown and the reply is content; "auto": calls
// are parsed from the reply in the syntax the model's template teaches;
// "required" or {"type": "function", "function": {"name"}}: a call is
// forced by a grammar built from the tools' parameters), parallel_tool_calls,
// and history: assistant messages with tool_calls (arguments as JSON text,
// or an object), tool messages with tool_call_id, reasoning_content (or
// reasoning) on assistant messages. Calls come back as message.tool_calls
// ({id, type: "function", function: {name, arguments: JSON text}}) with
// finish_reason "tool_calls", streamed as delta.tool_calls (index, id,
// type and name in the first chunk of a call, arguments after). For a
// model whose template writes <think>, the reasoning comes back apart as
// reasoning_content (message and delta). See daemon/api/chat_tools.h.
//
// Structured outputs (one constraint per request; two are a 400 naming
// both): OpenAI's response_format {"type": "text" | "json_object" |
// "json_schema", "json_schema": {"name", "schema", "strict",
// "description"}} (and llama-server's {"type": "json_object", "schema"}),
// llama-server's grammar (GBNF) and json_schema, vLLM's structured_outputs
// {json, regex, choice, grammar, json_object, disable_any_whitespace} and
// its older guided_json / guided_regex / guided_choice / guided_grammar /
// guided_json_object. They map onto GenerateRequest's constraint oneof;
// the constraint is compiled when the request is submitted, and its errors
// name the field it came in (ToApiFieldError(ParsedRequest, ...)).
//
// Extensions, under llama-server's and vLLM's names: top_k, min_p,
// repetition_penalty (or repeat_penalty), repeat_last_n, ignore_eos,
// cache_salt (1 to 256 bytes: requests with different salts never share
// cached prompt blocks), and return_token_ids (each choice then carries the
// completion's token ids).
//
// Errors: absl::Status whose code maps to the HTTP status (ApiErrorFor);
// a request field's error carries the field's name as a payload (Param).
#ifndef MINFER_DAEMON_HTTP_OPENAI_API_H_
#define MINFER_DAEMON_HTTP_OPENAI_API_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/api/chat_tools.h"
#include "daemon/serving/sequence.h"
#include "engine/base/field_error.h"
#include "engine/tokenizer/tokenizer.h"
#include "minfer/v1/generation.pb.h"
#include "nlohmann/json.hpp"

namespace minfer::daemon::openai {

enum class Endpoint { kChatCompletions, kCompletions };

// An error as OpenAI's API reports it: the HTTP status and the body
// {"error": {"message", "type", "param", "code"}} (empty param / code are
// null).
struct ApiError {
  int http_status = 500;
  std::string type;
  std::string message;
  std::string param;
  std::string code;
};

// INVALID_ARGUMENT about request field `param` (the payload ApiErrorFor
// reads).
absl::Status FieldError(const std::string& param, const std::string& message);
// The field a FieldError names ("" for other statuses).
std::string Param(const absl::Status& status);

// The HTTP error for a status from parsing, authentication or the
// generation path: INVALID_ARGUMENT 400 (code: the status's ErrorReason,
// context_length_exceeded when the prompt does not fit), UNAUTHENTICATED
// 401, PERMISSION_DENIED 403, NOT_FOUND 404 (model_not_found), RESOURCE_EXHAUSTED 429 (queue_full, or
// quota_exceeded for a tenant's token quota: IsQuotaExceeded),
// FAILED_PRECONDITION 503 (model not ready), UNAVAILABLE 503 (draining),
// DEADLINE_EXCEEDED 504, CANCELLED 499, anything else 500.
ApiError ApiErrorFor(const absl::Status& status);
nlohmann::json ErrorBody(const ApiError& error);

// What a request asks for besides the generation itself.
struct ParsedRequest {
  Endpoint endpoint = Endpoint::kChatCompletions;
  // model, input (chat or text or tokens), sampling, stopping, options.
  v1::GenerateRequest generate;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;       // report the sampled tokens' logprobs
  int32_t top_logprobs = 0;    // and this many alternatives each
  bool return_token_ids = false;
  // The API field of the request's output constraint (the value in
  // generate's constraint oneof): "response_format.json_schema.schema",
  // "grammar", "structured_outputs.regex", ...; "" for none.
  std::string constraint_param;
};

// Parses a request body (already JSON, read in its key order: a JSON
// Schema's properties are generated in the order they are written). Errors
// are FieldErrors.
absl::StatusOr<ParsedRequest> ParseRequest(Endpoint endpoint, const nlohmann::ordered_json& body);

// The request model's field `path` (a field error's FieldPath, parsed:
// "chat.tools[1].parameters", "stopping.max_tokens", "sampling.top_p",
// "prompt") as this API names it ("tools[1].function.parameters",
// "max_tokens", "top_p", "messages" or "prompt"); "" for a path it has no
// name for. The other HTTP APIs fall back to it.
std::string ApiFieldName(Endpoint endpoint, const std::vector<FieldPathStep>& path);

// A field error of the generation path (BuildGenerateRequest, ValidateChatTools:
// they name the proto's fields as data, FieldPath) renamed to the API's
// field with ApiFieldName, as message and Param; other statuses as they are.
// No message text is read.
absl::Status ToApiFieldError(Endpoint endpoint, const absl::Status& status);
// The same, and a constraint's error (IsConstraintError: from compiling the
// schema, grammar, regex or choice) names the API field the constraint came
// in (request.constraint_param) instead of the proto's.
absl::Status ToApiFieldError(const ParsedRequest& request, const absl::Status& status);

// Builds the responses of one request.
class ResponseWriter {
 public:
  // `id`: "chatcmpl-..." / "cmpl-..."; `created`: Unix seconds; `model`:
  // the model that serves it; `tokenizer` (outliving the writer) renders
  // the logprobs' tokens; `parsers` the model's reply parsers.
  ResponseWriter(const ParsedRequest& request, std::string id, int64_t created,
                 std::string model, const tokenizer::Tokenizer* tokenizer,
                 const ChatParsers& parsers = {});

  // Streaming: the chunks for what a Sequence published (chat: the first
  // call also sends the role delta), then, with the chunk that carries the
  // result, the finish chunk and, with include_usage, the usage chunk. An
  // empty delta makes no chunk. Each element is one SSE event's data.
  std::vector<nlohmann::json> StreamChunks(const SequenceChunk& chunk);

  // Non-streaming: accumulates chunks, then the whole response.
  void Accumulate(const SequenceChunk& chunk);
  nlohmann::json Response(const SequenceResult& result) const;

 private:
  nlohmann::json Envelope(const char* object) const;
  nlohmann::json Choice(const std::string& text, const std::vector<int32_t>& ids,
                        const std::vector<SampledToken>& logprobs, const char* finish_reason);
  nlohmann::json LogprobsJson(const std::vector<SampledToken>& logprobs, size_t* text_offset) const;
  nlohmann::json Usage(const SequenceResult& result) const;
  // Chat: the chunks of reply events, in OpenAI's delta shapes.
  void AddEventChunks(std::vector<ChatOutputEvent> events, const SequenceChunk& chunk,
                      std::vector<nlohmann::json>* out);
  const char* FinishReasonOf(const SequenceResult& result, bool called) const;

  const ParsedRequest& request_;
  const std::string id_;
  const int64_t created_;
  const std::string model_;
  const tokenizer::Tokenizer* const tokenizer_;
  // Chat: how the reply is read (reasoning, tool calls), and the stream
  // reading it (shared by copies; Response reads the whole text afresh).
  ChatOutputOptions output_;
  std::shared_ptr<ChatOutputStream> stream_;
  bool called_ = false;  // the stream emitted a tool call
  bool sent_role_ = false;
  size_t text_offset_ = 0;  // completions' logprobs.text_offset, streamed
  // Non-streaming accumulation.
  std::string text_;
  std::vector<int32_t> ids_;
  std::vector<SampledToken> logprobs_;
};

// "stop" / "length": OpenAI's finish_reason for how a generation ended.
const char* OpenAiFinishReason(FinishReason reason);

// The model list of GET /v1/models: `names` are models and aliases.
nlohmann::json ModelList(const std::vector<std::string>& names, int64_t created);
nlohmann::json ModelObject(const std::string& name, int64_t created);

}  // namespace minfer::daemon::openai

#endif  // MINFER_DAEMON_HTTP_OPENAI_API_H_
