// What the HTTP server needs from each API it serves (OpenAI's chat and
// completions, Anthropic's Messages, OpenAI's Responses): the generation
// request the API's JSON became, and a writer of the answer in the API's
// shape. The server (http_server.h) owns the transport, admission and the
// stream's pacing; an API only turns JSON into a v1::GenerateRequest and
// sequence output into JSON, so each API is testable without HTTP.
//
// Thread safety: a Reply belongs to one request and is used under its
// generation's lock.
#ifndef MINFER_DAEMON_HTTP_API_REPLY_H_
#define MINFER_DAEMON_HTTP_API_REPLY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "daemon/api/chat_tools.h"
#include "daemon/serving/sequence.h"
#include "engine/tokenizer/tokenizer.h"
#include "minfer/v1/generation.pb.h"
#include "nlohmann/json.hpp"

namespace minfer::daemon::http_api {

// An error answer: its HTTP status and its JSON body.
struct ErrorReply {
  int http_status = 500;
  nlohmann::json body;
};

// The answer to one submitted generation request.
class Reply {
 public:
  virtual ~Reply() = default;
  // Streaming: the bytes of the SSE events for what the sequence published.
  // The chunk that carries the result also ends the stream (its closing
  // events, or an error event for a result that is not OK).
  virtual std::string StreamEvents(const SequenceChunk& chunk) = 0;
  // Non-streaming: takes every chunk, then the body of the 200 answer for
  // an OK result.
  virtual void Accumulate(const SequenceChunk& chunk) = 0;
  virtual nlohmann::json Response(const SequenceResult& result) = 0;
};

// What the model that serves a request gives its reply: the name the
// answer reports, its tokenizer (outlives the reply), the prompt's length.
struct ReplyContext {
  std::string model;
  const tokenizer::Tokenizer* tokenizer = nullptr;
  int32_t prompt_tokens = 0;
  ChatParsers parsers;  // the model's reply parsers (load options)
};

// A generation request of some API, parsed and valid as far as the API can
// tell without the model.
struct ApiRequest {
  const char* route = "";  // "/v1/messages": metrics and logs
  v1::GenerateRequest generate;
  bool stream = false;
  // The answer to a refused request (parse, authorization, submission), in
  // the API's error shape; submission errors (which speak the proto's field
  // names) are renamed to the API's fields first.
  std::function<ErrorReply(const absl::Status&)> error;
  // The writer of the answer, once the request is submitted.
  std::function<std::unique_ptr<Reply>(const ReplyContext&)> reply;
};

// One SSE event: "event: NAME\n" (when `event` is not empty) and
// "data: JSON\n\n". Bytes that are not UTF-8 are replaced.
std::string SseEvent(const char* event, const nlohmann::json& data);
// JSON text with invalid UTF-8 replaced (never throws).
std::string DumpJson(const nlohmann::json& j);

}  // namespace minfer::daemon::http_api

#endif  // MINFER_DAEMON_HTTP_API_REPLY_H_
