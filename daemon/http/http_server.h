// minferd's OpenAI-compatible HTTP API (cpp-httplib), a second front door
// onto the same slots as gRPC:
//
//   POST /v1/chat/completions    chat, streaming (SSE) or not
//   POST /v1/completions         text completion, streaming or not
//   GET  /v1/models              ready models and aliases
//   GET  /v1/models/{id}
//   GET  /health                 200 while serving, 503 once draining
//
// Requests are translated by openai_api.h and submitted through
// SubmitGenerate (daemon/api/generate_request.h), exactly as gRPC's Generate
// submits them: the same admission, queue limits, aliases, drain and
// metrics. Streams count in ServingState, so the daemon's drain waits for
// them as for gRPC streams.
//
// Why cpp-httplib: a small, well-kept HTTP/1.1 server in Debian with TLS,
// keep-alive, chunked streaming, body limits and per-connection timeouts
// built in. It runs a connection on a pool thread (HttpOptions::threads);
// a streaming response holds its thread while it waits on the sequence,
// which for the few hundred streams a GPU serves is cheaper than an event
// loop's complexity. Past the pool, connections wait in its queue.
//
// A client that disconnects (FIN or reset, seen by poll(POLLRDHUP) every
// kPeerPoll while waiting, or a failed write) cancels its sequence, which
// the slot's worker then drops before its next step. One that never reads
// is cut after write_timeout once its socket buffer is full. A body over
// max_body_bytes is refused with 413, a request line over 8 KiB with 414,
// and a client that sends nothing for read_timeout is disconnected.
//
// Authorization: with api_keys set, /v1/* requires "Authorization: Bearer
// KEY" with one of them (401 otherwise); /health is open. The admin token
// is not an API key unless the key file lists it.
//
// Thread-safe.
#ifndef MINFER_DAEMON_HTTP_HTTP_SERVER_H_
#define MINFER_DAEMON_HTTP_HTTP_SERVER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/serving/limits.h"
#include "daemon/serving/metrics.h"
#include "daemon/serving/serving_state.h"
#include "daemon/serving/slot_manager.h"

namespace httplib {
class Server;
}

namespace minfer::daemon {

struct HttpOptions {
  std::string listen;  // "host:port"; port 0 picks a free one
  std::string tls_cert_file;  // both or neither: HTTPS
  std::string tls_key_file;
  std::vector<std::string> api_keys;  // empty: no authorization
  int threads = 128;                  // connections served at once
  size_t max_body_bytes = 8u << 20;
  int read_timeout_seconds = 30;
  int write_timeout_seconds = 60;
  int keep_alive_seconds = 5;
};

class HttpServer {
 public:
  // Binds and starts serving. Errors: the address cannot be bound, or the
  // TLS files cannot be used (INVALID_ARGUMENT naming them).
  // With `tenants` (may be null), generation requests must carry a
  // tenant's key (tenants.h) and options.api_keys must be empty.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(HttpOptions options,
                                                           SlotManager* slots,
                                                           GenerationLimits limits,
                                                           ServingState* state, Metrics* metrics,
                                                           Tenants* tenants = nullptr);
  // Stop().
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // "host:port" actually bound.
  const std::string& address() const { return address_; }
  bool tls() const { return !options_.tls_cert_file.empty(); }

  // The listening socket's accept-queue limit as the kernel holds it
  // (TCP_INFO); -1 if it cannot be read.
  int ListenBacklog() const;

  // Stops listening and joins the connection threads (a keep-alive
  // connection may hold its thread up to keep_alive_seconds). Streams must
  // have ended (the daemon stops the slots first). Idempotent.
  void Stop();

 private:
  HttpServer(HttpOptions options, SlotManager* slots, GenerationLimits limits,
             ServingState* state, Metrics* metrics, Tenants* tenants);
  absl::Status Init();
  void Route();

  const HttpOptions options_;
  SlotManager* const slots_;
  const GenerationLimits limits_;
  ServingState* const state_;
  Metrics* const metrics_;
  Tenants* const tenants_;
  const int64_t created_;  // Unix seconds: the models' "created"
  std::unique_ptr<httplib::Server> server_;
  std::thread listener_;
  std::string address_;
  int listen_fd_ = -1;  // owned by server_
};

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_HTTP_HTTP_SERVER_H_
