#include "daemon/http/request_parser.h"

#include <http_parser.h>

#include <limits>
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace minfer::daemon::http {
namespace {

// http-parser has a process-wide cap on the bytes of a request's head, 80
// KiB by default. Ours (HttpLimits) are per server and checked first; the
// library's is raised once so that it never fires before them for any
// sane configuration.
constexpr uint32_t kLibraryHeaderCap = 1u << 20;

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX decoded; a malformed escape stays as it is (routes then do not
// match it, which is the right answer for it).
std::string PercentDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && HexValue(s[i + 1]) >= 0 && HexValue(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

}  // namespace

const std::string* HttpRequest::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (absl::EqualsIgnoreCase(k, absl::string_view(name.data(), name.size()))) return &v;
  }
  return nullptr;
}

struct RequestParser::Impl {
  http_parser parser;
  http_parser_settings settings;
};

RequestParser::RequestParser(HttpLimits limits) : limits_(limits), impl_(new Impl) {
  static std::once_flag once;
  std::call_once(once, [] { http_parser_set_max_header_size(kLibraryHeaderCap); });
  http_parser_init(&impl_->parser, HTTP_REQUEST);
  impl_->parser.data = this;
  http_parser_settings_init(&impl_->settings);
  impl_->settings.on_message_begin = [](http_parser* p) { return OnMessageBegin(p->data); };
  impl_->settings.on_url = [](http_parser* p, const char* at, size_t n) {
    return OnUrl(p->data, at, n);
  };
  impl_->settings.on_header_field = [](http_parser* p, const char* at, size_t n) {
    return OnHeaderField(p->data, at, n);
  };
  impl_->settings.on_header_value = [](http_parser* p, const char* at, size_t n) {
    return OnHeaderValue(p->data, at, n);
  };
  impl_->settings.on_headers_complete = [](http_parser* p) { return OnHeadersComplete(p->data); };
  impl_->settings.on_body = [](http_parser* p, const char* at, size_t n) {
    return OnBody(p->data, at, n);
  };
  impl_->settings.on_message_complete = [](http_parser* p) { return OnMessageComplete(p->data); };
}

RequestParser::~RequestParser() = default;

int RequestParser::Fail(int status, std::string message) {
  if (error_status_ == 0) {
    error_status_ = status;
    error_message_ = std::move(message);
  }
  return -1;
}

int RequestParser::OnMessageBegin(void* p) {
  auto* self = static_cast<RequestParser*>(p);
  self->request_ = HttpRequest();
  self->in_message_ = true;
  self->headers_done_ = false;
  self->complete_ = false;
  self->last_was_value_ = false;
  self->header_bytes_ = 0;
  return 0;
}

int RequestParser::OnUrl(void* p, const char* at, size_t n) {
  auto* self = static_cast<RequestParser*>(p);
  if (self->request_.target.size() + n > self->limits_.max_target_bytes) {
    return self->Fail(414, absl::StrCat("the request target is longer than ",
                                        self->limits_.max_target_bytes, " bytes"));
  }
  self->request_.target.append(at, n);
  return 0;
}

int RequestParser::OnHeaderField(void* p, const char* at, size_t n) {
  auto* self = static_cast<RequestParser*>(p);
  HttpRequest& r = self->request_;
  if (r.headers.empty() || self->last_was_value_) {
    if (r.headers.size() >= self->limits_.max_headers) {
      return self->Fail(431, absl::StrCat("the request has more than ", self->limits_.max_headers,
                                          " header fields"));
    }
    r.headers.emplace_back();
  }
  self->last_was_value_ = false;
  self->header_bytes_ += n;
  if (self->header_bytes_ > self->limits_.max_header_bytes) {
    return self->Fail(431, absl::StrCat("the request's header fields exceed ",
                                        self->limits_.max_header_bytes, " bytes"));
  }
  r.headers.back().first.append(at, n);
  return 0;
}

int RequestParser::OnHeaderValue(void* p, const char* at, size_t n) {
  auto* self = static_cast<RequestParser*>(p);
  HttpRequest& r = self->request_;
  if (r.headers.empty()) r.headers.emplace_back();  // (the parser never does this)
  self->last_was_value_ = true;
  self->header_bytes_ += n;
  if (self->header_bytes_ > self->limits_.max_header_bytes) {
    return self->Fail(431, absl::StrCat("the request's header fields exceed ",
                                        self->limits_.max_header_bytes, " bytes"));
  }
  r.headers.back().second.append(at, n);
  return 0;
}

int RequestParser::OnHeadersComplete(void* p) {
  auto* self = static_cast<RequestParser*>(p);
  http_parser* hp = &self->impl_->parser;
  HttpRequest& r = self->request_;
  r.method = http_method_str(static_cast<http_method>(hp->method));
  r.version_major = hp->http_major;
  r.version_minor = hp->http_minor;
  if (r.version_major != 1) {
    return self->Fail(505, absl::StrCat("HTTP/", r.version_major, ".", r.version_minor,
                                        " is not supported (HTTP/1.0 and 1.1 are)"));
  }
  if (hp->method == HTTP_CONNECT) {
    return self->Fail(501, "the CONNECT method is not supported");
  }
  r.keep_alive = http_should_keep_alive(hp) != 0;
  r.chunked = (hp->flags & F_CHUNKED) != 0;
  if (const std::string* cl = r.Header("Content-Length"); cl != nullptr) {
    // The parser accepted it, so it is a decimal that fits 64 bits.
    if (hp->content_length > self->limits_.max_body_bytes) {
      return self->Fail(413, absl::StrCat("the request body (Content-Length ", *cl,
                                          ") is larger than ", self->limits_.max_body_bytes,
                                          " bytes"));
    }
    r.content_length = static_cast<int64_t>(hp->content_length);
  }
  if (const std::string* e = r.Header("Expect"); e != nullptr) {
    if (!absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(*e), "100-continue")) {
      return self->Fail(417, "the only Expect this server meets is 100-continue");
    }
    r.expect_continue = r.version_minor >= 1;
  }
  const size_t q = r.target.find('?');
  r.path = PercentDecode(std::string_view(r.target).substr(0, q));
  if (q != std::string::npos) r.query = r.target.substr(q + 1);
  self->headers_done_ = true;
  // Stop here: the server decides whether it wants the body.
  http_parser_pause(hp, 1);
  return 0;
}

int RequestParser::OnBody(void* p, const char* at, size_t n) {
  auto* self = static_cast<RequestParser*>(p);
  if (self->request_.body.size() + n > self->limits_.max_body_bytes) {
    return self->Fail(413, absl::StrCat("the request body is larger than ",
                                        self->limits_.max_body_bytes, " bytes"));
  }
  self->request_.body.append(at, n);
  return 0;
}

int RequestParser::OnMessageComplete(void* p) {
  auto* self = static_cast<RequestParser*>(p);
  self->complete_ = true;
  // Stop here: a pipelined request waits until this one is answered.
  http_parser_pause(&self->impl_->parser, 1);
  return 0;
}

RequestParser::Result RequestParser::Feed(std::string_view data) {
  Result out;
  if (error_status_ != 0) {
    out.event = Event::kError;
    return out;
  }
  if (data.empty()) {
    // The end of the stream. In a request, that request is cut short;
    // between requests it is a close. (http-parser's own EOF handling is
    // for responses without a length, which requests never are.)
    if (in_message_) {
      Fail(400, "the connection ended in the middle of a request");
      out.event = Event::kError;
    }
    return out;
  }
  http_parser* hp = &impl_->parser;
  if (HTTP_PARSER_ERRNO(hp) == HPE_PAUSED) http_parser_pause(hp, 0);
  const bool headers_before = headers_done_;
  const size_t n = http_parser_execute(hp, &impl_->settings, data.data(), data.size());
  out.consumed = n;
  const http_errno err = HTTP_PARSER_ERRNO(hp);
  if (err != HPE_OK && err != HPE_PAUSED) {
    if (error_status_ == 0) {
      switch (err) {
        case HPE_HEADER_OVERFLOW:
          Fail(431, "the request's header fields are too large");
          break;
        case HPE_INVALID_CONTENT_LENGTH:
        case HPE_UNEXPECTED_CONTENT_LENGTH:
          Fail(400, "the request's Content-Length is not valid");
          break;
        case HPE_INVALID_METHOD:
          Fail(501, "the request method is not supported");
          break;
        case HPE_INVALID_VERSION:
          Fail(505, "the HTTP version is not supported");
          break;
        default:
          Fail(400, absl::StrCat("the request is not valid HTTP/1.1 (",
                                 http_errno_description(err), ")"));
      }
    }
    out.event = Event::kError;
    return out;
  }
  if (complete_) {
    complete_ = false;
    out.event = Event::kRequest;
  } else if (headers_done_ && !headers_before && err == HPE_PAUSED) {
    out.event = Event::kHeaders;
  }
  return out;
}

HttpRequest RequestParser::TakeRequest() {
  in_message_ = false;
  headers_done_ = false;
  HttpRequest r = std::move(request_);
  request_ = HttpRequest();
  return r;
}

const char* ReasonPhrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 417: return "Expectation Failed";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

}  // namespace minfer::daemon::http
