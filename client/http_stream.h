// One streaming generation through minferd's OpenAI-compatible HTTP API
// (cpp-httplib's client, SSE parsed as it arrives): what `minferctl bench
// --http` measures, so the HTTP and the gRPC front doors can be compared
// under the same load.
#ifndef MINFER_CLIENT_HTTP_STREAM_H_
#define MINFER_CLIENT_HTTP_STREAM_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace minfer::client {

struct HttpTarget {
  std::string url;      // "http://host:port" or "https://host:port"
  std::string api_key;  // sent as "Authorization: Bearer KEY" when set
  std::string ca_cert_file;  // with https: the roots to trust
};

struct HttpStreamRequest {
  std::string model;
  std::string prompt;
  bool chat = false;  // /v1/chat/completions with one user message, else /v1/completions
  int32_t max_tokens = 128;
  // Greedy with ignore_eos, so every stream makes exactly max_tokens.
};

struct HttpStreamResult {
  std::vector<int32_t> token_ids;  // return_token_ids
  std::string text;
  std::string finish_reason;
  int32_t prompt_tokens = 0;  // from the usage chunk
};

// Streams `request` to its end, calling `on_tokens` with the number of new
// token ids of every event that has some. Errors: the connection fails
// (UNAVAILABLE), the server answers an error status or sends an error event
// (its message, the code mapped back from the HTTP status).
absl::StatusOr<HttpStreamResult> HttpStream(const HttpTarget& target,
                                            const HttpStreamRequest& request,
                                            const std::function<void(size_t)>& on_tokens);

}  // namespace minfer::client

#endif  // MINFER_CLIENT_HTTP_STREAM_H_
