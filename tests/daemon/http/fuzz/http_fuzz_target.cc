// libFuzzer entry point for the HTTP front door's input side: the request
// parser (daemon/http/request_parser.h) and the OpenAI request decoders
// (daemon/http/openai_api.h ParseRequest), which together take every byte
// an unauthenticated client can send.
//
// The first byte picks the mode:
//   even: the rest is a byte stream from a client, fed to one parser in
//         pieces whose sizes come from that byte (pipelined requests, bodies
//         split anywhere); each request's body is decoded as both
//         endpoints' JSON;
//   odd:  the rest is a request body, decoded as both endpoints' JSON.
// Invariants checked: errors carry a status and a message; the parser's
// caps hold (no request over its limits comes out); what it consumes never
// exceeds what it was fed.
//
// Built two ways: by scripts/fuzz_http.sh with clang -fsanitize=fuzzer,
// address,undefined (the fuzzer), and into http_corpus_test (a regular
// test that replays the committed corpus).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/http/openai_api.h"
#include "daemon/http/request_parser.h"
#include "nlohmann/json.hpp"

namespace {

using minfer::daemon::http::HttpLimits;
using minfer::daemon::http::HttpRequest;
using minfer::daemon::http::RequestParser;
namespace openai = minfer::daemon::openai;

void DecodeBody(std::string_view body) {
  // Read as the server reads it: in key order (a schema's properties keep
  // theirs).
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(
      body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return;
  for (openai::Endpoint e : {openai::Endpoint::kChatCompletions, openai::Endpoint::kCompletions}) {
    auto r = openai::ParseRequest(e, j);
    if (!r.ok()) {
      if (r.status().message().empty()) __builtin_trap();
      // The renaming of generation-path errors must keep them errors.
      if (openai::ToApiFieldError(e, r.status()).ok()) __builtin_trap();
      (void)openai::ApiErrorFor(r.status());
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) {
    DecodeBody(rest);
    return 0;
  }
  HttpLimits limits;
  limits.max_target_bytes = 256;
  limits.max_header_bytes = 1024;
  limits.max_headers = 16;
  limits.max_body_bytes = 4096;
  RequestParser parser(limits);
  const size_t step = 1 + (data[0] >> 1);  // 1..128 bytes a read
  std::string pending;
  size_t pos = 0;
  int requests = 0;
  while (pos < rest.size() || !pending.empty()) {
    const size_t n = std::min(step, rest.size() - pos);
    pending.append(rest.substr(pos, n));
    pos += n;
    bool need_more = false;
    while (!pending.empty() && !need_more) {
      const RequestParser::Result r = parser.Feed(pending);
      if (r.consumed > pending.size()) __builtin_trap();
      pending.erase(0, r.consumed);
      switch (r.event) {
        case RequestParser::Event::kNeedMore:
          need_more = true;
          break;
        case RequestParser::Event::kHeaders:
          if (parser.head().headers.size() > limits.max_headers) __builtin_trap();
          if (parser.head().target.size() > limits.max_target_bytes) __builtin_trap();
          break;
        case RequestParser::Event::kRequest: {
          HttpRequest req = parser.TakeRequest();
          if (req.body.size() > limits.max_body_bytes) __builtin_trap();
          (void)req.Header("Authorization");
          DecodeBody(req.body);
          ++requests;
          break;
        }
        case RequestParser::Event::kError:
          if (parser.error_status() < 400 || parser.error_message().empty()) __builtin_trap();
          return 0;
      }
      if (r.event != RequestParser::Event::kNeedMore && r.consumed == 0 &&
          r.event != RequestParser::Event::kHeaders && r.event != RequestParser::Event::kRequest) {
        __builtin_trap();
      }
    }
    if (pos >= rest.size() && !pending.empty() && need_more) break;
  }
  parser.Feed(std::string_view());  // the end of the stream
  return 0;
}
