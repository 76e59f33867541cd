// EventServer: minferd's HTTP/1.1 front door on an event loop (standalone
// Asio), with the request grammar of request_parser.h. It knows nothing of
// OpenAI or models: a Handler (http_server.h) answers the requests.
//
// Why an event loop: a connection costs a socket and a few KiB, never a
// thread, so thousands of idle keep-alive clients, slow readers and slow
// senders cannot starve /health or the API (the thread-per-connection
// server it replaces went down under 130 clients sending a byte every 5 s).
// docs/design.md ("The HTTP front door") says why Asio and http-parser.
//
// What a connection may do, and what happens when it does not:
//   - TLS: the handshake must end within tls_handshake_timeout.
//   - Headers: a request's head (line + headers) must arrive within
//     header_timeout of its first byte (of the connection's start, for the
//     first request): 408 otherwise, however slowly the bytes drip. Caps on
//     the target (414), header count and bytes (431), checked as they come.
//   - Body: Content-Length over the cap is 413 before a byte of it is read;
//     the body must arrive within body_timeout of the head (408).
//   - Before the body is read, Handler::Screen may refuse the request
//     (authorization, no route): nothing of an unauthorized body is held.
//   - Between requests, a keep-alive connection may idle idle_timeout.
//   - Pipelined requests are answered one at a time, in order.
//   - A client that half-closes (shutdown(SHUT_WR)) after its request gets
//     its answer; one that closes or resets is gone (Exchange::OnGone): the
//     first write, or a 100 Continue probe sent on its FIN to an HTTP/1.1
//     client still waiting for its response, finds the reset.
//   - Writes: a response that makes no progress for write_timeout (a client
//     that never reads) closes the connection (gone).
//   - TCP keepalive (30 s idle, 3 probes 10 s apart) finds a client whose
//     host vanished without a FIN or reset, even while nothing is written.
//   - At most max_connections at once, and max_connections_per_client from
//     one address (0: no cap; behind a proxy every client has its address):
//     past either, 503 and close.
//   - Errors the server answers itself use Handler::ErrorResponse's body
//     and close the connection after a lingering read, so the client reads
//     the answer instead of a reset.
//
// Threads: `loop_threads` run the loop; each connection's work is
// serialized on its own strand. Handler::Handle runs on a separate pool of
// `handler_threads`, so CPU work there (JSON, templates, tokenizing) never
// stalls the loop. Exchange methods may be called from any thread.
#ifndef MINFER_DAEMON_HTTP_EVENT_SERVER_H_
#define MINFER_DAEMON_HTTP_EVENT_SERVER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/http/request_parser.h"

namespace minfer::daemon::http {

struct EventServerOptions {
  std::string listen;  // "host:port"; port 0 picks a free one
  std::string tls_cert_file;  // both or neither: HTTPS
  std::string tls_key_file;
  HttpLimits limits;
  int loop_threads = 2;
  int handler_threads = 4;
  double tls_handshake_timeout_seconds = 10;
  double header_timeout_seconds = 10;
  double body_timeout_seconds = 30;
  double idle_timeout_seconds = 60;
  double write_timeout_seconds = 60;
  int max_connections = 10000;
  int max_connections_per_client = 1024;  // 0: no cap
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // besides the framing ones
  std::string body;
  bool close = false;  // "Connection: close": no further request on it
};

// One request's answer. Exactly one of Respond, or StartStream ... End, is
// called; an Exchange dropped without either answers 500. Thread-safe.
class Exchange {
 public:
  virtual ~Exchange() = default;

  virtual void Respond(HttpResponse response) = 0;

  // A streamed answer: the head now (chunked for HTTP/1.1, read to the
  // close for HTTP/1.0), then the body in pieces.
  virtual void StartStream(HttpResponse head) = 0;
  virtual void Write(std::string data) = 0;
  virtual void End() = 0;

  // Bytes handed to Write/Respond that the client has not taken yet.
  virtual size_t pending_bytes() const = 0;
  // Runs `fn` (on the connection's strand) each time everything written
  // has been taken by the client. Replaces an earlier callback.
  virtual void OnDrained(std::function<void()> fn) = 0;
  // Runs `fn` once, on the connection's strand, when the client is gone
  // before the answer was taken (closed, reset, never read, the server
  // stopped). At once if it already is.
  virtual void OnGone(std::function<void()> fn) = 0;
  virtual bool gone() const = 0;
  // Runs `fn` on the connection's strand (serialized with the callbacks
  // above); dropped if the connection is gone.
  virtual void Post(std::function<void()> fn) = 0;
};

class Handler {
 public:
  virtual ~Handler() = default;
  // After the head, before the body: a response to refuse the request with
  // (the body is then never read), or nullopt. On the loop: must be quick.
  virtual std::optional<HttpResponse> Screen(const HttpRequest& head) = 0;
  // The whole request, on a handler thread.
  virtual void Handle(HttpRequest request, std::shared_ptr<Exchange> exchange) = 0;
  // The answer to a request the server refuses itself (limits, timeouts,
  // not HTTP): `status` and why.
  virtual HttpResponse ErrorResponse(int status, const std::string& message) = 0;
};

// Counters, for status and tests.
struct EventServerStats {
  int64_t open_connections = 0;
  int64_t accepted = 0;
  int64_t refused_over_limit = 0;  // max_connections / per client
  int64_t timed_out = 0;           // handshake, head, body, idle, write
  int64_t protocol_errors = 0;     // 400/413/414/431/...
  int64_t requests = 0;
};

class EventServer {
 public:
  // Binds, then serves on its own threads. Errors: the address cannot be
  // bound (UNAVAILABLE), the TLS files cannot be used (INVALID_ARGUMENT
  // naming them), an option out of range (INVALID_ARGUMENT naming it).
  // `handler` must outlive the server.
  static absl::StatusOr<std::unique_ptr<EventServer>> Start(EventServerOptions options,
                                                            Handler* handler);
  // Stop().
  ~EventServer();
  EventServer(const EventServer&) = delete;
  EventServer& operator=(const EventServer&) = delete;

  // "host:port" actually bound.
  const std::string& address() const;
  bool tls() const;
  // The listening socket's accept-queue limit as the kernel holds it; -1
  // if it cannot be read.
  int ListenBacklog() const;
  EventServerStats stats() const;

  // Closes the listener and every connection (their exchanges are gone),
  // joins the threads. Idempotent.
  void Stop();

  // Runs `fn` on a handler thread (work that must not run on the thread
  // that has something to say: a producer's notification, say). Dropped
  // once the server has stopped.
  void PostWork(std::function<void()> fn);

  struct Impl;  // (event_server.cc)

 private:
  explicit EventServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace minfer::daemon::http

#endif  // MINFER_DAEMON_HTTP_EVENT_SERVER_H_
