// RequestParser: HTTP/1.1 requests out of a byte stream, under limits, with
// no I/O (so every rule is testable and fuzzable on its own; the event
// server, event_server.h, feeds it what it reads).
//
// The grammar is nodejs' http-parser (Debian's libhttp-parser-dev): request
// line, headers, Content-Length and chunked bodies, keep-alive rules, and the
// smuggling shapes it refuses (Content-Length with Transfer-Encoding, bad
// lengths, bare LFs in strict mode). This class adds what a server exposed
// to hostile clients needs on top:
//   - a cap on the request target (414), on the number of header fields and
//     on their total bytes (431), checked as the bytes arrive, so no client
//     can make the server hold more than the caps;
//   - a cap on the body (413), checked against Content-Length as soon as the
//     headers end, before a byte of the body is read, and against the bytes
//     of a chunked body as they arrive;
//   - a stop after the headers (kHeaders), so that the server can refuse a
//     request (authorization, an unknown route) before it reads a body;
//   - a stop after each request (kRequest), so that pipelined requests are
//     answered one at a time, in order: the caller feeds the rest again.
//
// Not thread-safe (one per connection).
#ifndef MINFER_DAEMON_HTTP_REQUEST_PARSER_H_
#define MINFER_DAEMON_HTTP_REQUEST_PARSER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace minfer::daemon::http {

struct HttpLimits {
  size_t max_target_bytes = 8 << 10;   // the request target (URI): 414 past it
  size_t max_header_bytes = 32 << 10;  // names + values of all header fields: 431
  size_t max_headers = 64;             // header fields: 431
  size_t max_body_bytes = 8 << 20;     // 413
};

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: "/v1/models/a%2Fb?x=1"
  std::string path;    // percent-decoded, without the query: "/v1/models/a/b"
  std::string query;   // after '?', as sent
  int version_major = 1;
  int version_minor = 1;
  std::vector<std::pair<std::string, std::string>> headers;  // in order, as sent
  std::string body;
  bool keep_alive = true;        // the connection may carry another request
  bool expect_continue = false;  // "Expect: 100-continue"
  bool chunked = false;          // a chunked body
  int64_t content_length = -1;   // -1: none given
  std::string remote_address;    // filled by the server

  // The first header of that name (ASCII case-insensitive), or null.
  const std::string* Header(std::string_view name) const;
};

class RequestParser {
 public:
  explicit RequestParser(HttpLimits limits);
  ~RequestParser();
  RequestParser(const RequestParser&) = delete;
  RequestParser& operator=(const RequestParser&) = delete;

  enum class Event {
    kNeedMore,  // everything was consumed; feed more
    kHeaders,   // the headers of a request are complete (head() is valid)
    kRequest,   // a whole request is complete (TakeRequest)
    kError,     // the stream is not HTTP/1.x or breaks a limit (error_*)
  };
  struct Result {
    Event event = Event::kNeedMore;
    size_t consumed = 0;  // bytes of the input used; feed the rest again
  };

  // Parses as much of `data` as it may. After kHeaders or kRequest the
  // caller feeds the unconsumed rest (and later input) again; after kError
  // every call returns kError. An input of zero bytes is the end of the
  // stream (the peer closed its side): kError if a request was in
  // progress, kNeedMore otherwise.
  Result Feed(std::string_view data);

  // The request whose headers are complete (kHeaders until its kRequest).
  const HttpRequest& head() const { return request_; }
  // After kRequest: the request; the parser starts on the next one.
  HttpRequest TakeRequest();

  // True between the first byte of a request and its kRequest.
  bool in_request() const { return in_message_; }
  // True between kHeaders and kRequest (the body is being read).
  bool in_body() const { return headers_done_ && in_message_; }

  // After kError: the HTTP status to answer with (400, 413, 414, 431, 501,
  // 505) and why, in words fit for the client.
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }

 private:
  struct Impl;
  static int OnMessageBegin(void* p);
  static int OnUrl(void* p, const char* at, size_t n);
  static int OnHeaderField(void* p, const char* at, size_t n);
  static int OnHeaderValue(void* p, const char* at, size_t n);
  static int OnHeadersComplete(void* p);
  static int OnBody(void* p, const char* at, size_t n);
  static int OnMessageComplete(void* p);
  int Fail(int status, std::string message);

  const HttpLimits limits_;
  std::unique_ptr<Impl> impl_;
  HttpRequest request_;
  bool in_message_ = false;
  bool headers_done_ = false;
  bool complete_ = false;
  bool last_was_value_ = false;
  size_t header_bytes_ = 0;
  int error_status_ = 0;
  std::string error_message_;
};

// The reason phrase of an HTTP status ("Not Found"); "Unknown" if none.
const char* ReasonPhrase(int status);

}  // namespace minfer::daemon::http

#endif  // MINFER_DAEMON_HTTP_REQUEST_PARSER_H_
