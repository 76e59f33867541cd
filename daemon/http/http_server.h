// minferd's OpenAI-compatible HTTP API, a second front door onto the same
// slots as gRPC:
//
//   POST /v1/chat/completions    chat, streaming (SSE) or not
//   POST /v1/completions         text completion, streaming or not
//   POST /v1/messages            Anthropic's Messages API (anthropic_api.h)
//   POST /v1/responses           OpenAI's Responses API, stateless (responses_api.h)
//   POST /v1/messages/count_tokens, /tokenize, /detokenize, /apply-template
//                                the model's tokenizer and chat template
//                                (tokenize_api.h)
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
// The transport is http::EventServer (event_server.h): an event loop, so a
// connection costs no thread, whatever it does; its limits and timeouts
// (HttpOptions::server) are the daemon's --http-* flags. A generation is
// driven by its sequence's notifications and by its client's progress: a
// stream's events are written as the sequence publishes them, up to
// kMaxPendingStreamBytes not yet taken by the client (then the sequence
// holds the rest, merged, until the client reads); a client that goes away
// cancels its sequence before the next step.
//
// Authorization: with api_keys (or tenants) set, /v1/* and the tokenizer
// routes require
// "Authorization: Bearer KEY" or "x-api-key: KEY" (401 otherwise; errors
// of /v1/messages in Anthropic's shape), checked when the request's
// head arrives, before its body is read; /health is open. The admin token
// is not an API key unless the key file lists it.
//
// A request with an output constraint (structured outputs) is submitted
// from a small lane of its own threads, not from a handler thread: its
// grammar compiles when it is submitted (up to the compiler's time cap), and
// the handler threads also write every stream's output. The time counts
// into the request's time to first token. At most
// ConstrainedLane::kMaxWaiting such requests wait (then 429).
//
// While the daemon drains, /health answers 503, new generations 503, and
// every answer closes its connection; open streams run to their end.
//
// Thread-safe.
#ifndef MINFER_DAEMON_HTTP_HTTP_SERVER_H_
#define MINFER_DAEMON_HTTP_HTTP_SERVER_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/api/generate_request.h"
#include "daemon/http/api_reply.h"
#include "daemon/http/event_server.h"
#include "daemon/http/openai_api.h"
#include "daemon/serving/limits.h"
#include "daemon/serving/metrics.h"
#include "daemon/serving/serving_state.h"
#include "daemon/serving/slot_manager.h"

namespace minfer::daemon {

struct HttpOptions {
  http::EventServerOptions server;    // listen address, TLS, limits, timeouts
  std::vector<std::string> api_keys;  // empty: no authorization
};

class HttpServer : private http::Handler {
 public:
  // SSE bytes written but not yet taken by the client, past which a stream
  // stops taking its sequence's output until the client reads.
  static constexpr size_t kMaxPendingStreamBytes = 256 << 10;

  // The routes served (see above).
  enum class Route {
    kNone,
    kHealth,
    kModels,
    kModel,
    kChat,
    kCompletions,
    kMessages,
    kResponses,
    kCountTokens,    // /v1/messages/count_tokens
    kTokenize,       // /tokenize
    kDetokenize,     // /detokenize
    kApplyTemplate,  // /apply-template
  };

  // Binds and starts serving. Errors: the address cannot be bound, the TLS
  // files cannot be used, an option is out of range (EventServer::Start).
  // With `tenants` (may be null), generation requests must carry a
  // tenant's key (tenants.h) and options.api_keys must be empty.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(HttpOptions options,
                                                           SlotManager* slots,
                                                           GenerationLimits limits,
                                                           ServingState* state, Metrics* metrics,
                                                           Tenants* tenants = nullptr);
  // Stop().
  ~HttpServer() override;
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // "host:port" actually bound.
  const std::string& address() const { return server_->address(); }
  bool tls() const { return server_->tls(); }
  // The listening socket's accept-queue limit as the kernel holds it.
  int ListenBacklog() const { return server_->ListenBacklog(); }
  http::EventServerStats stats() const { return server_->stats(); }

  // Stops listening and closes every connection. Streams must have ended
  // (the daemon stops the slots first). Idempotent.
  void Stop();

 private:
  class Generation;
  // Threads that submit constrained requests (see above).
  class ConstrainedLane {
   public:
    static constexpr int kThreads = 2;
    static constexpr size_t kMaxWaiting = 256;
    explicit ConstrainedLane(int threads);
    ~ConstrainedLane();
    // False when kMaxWaiting tasks wait or the lane stopped.
    bool Post(std::function<void()> fn);
    // Finishes the running tasks, drops the waiting ones, joins. Idempotent.
    void Stop();

   private:
    void Run();
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> tasks_;  // guarded by mu_
    bool stopped_ = false;                     // guarded by mu_
    std::vector<std::thread> threads_;
  };

  HttpServer(HttpOptions options, SlotManager* slots, GenerationLimits limits,
             ServingState* state, Metrics* metrics, Tenants* tenants);

  // http::Handler
  std::optional<http::HttpResponse> Screen(const http::HttpRequest& head) override;
  void Handle(http::HttpRequest request, std::shared_ptr<http::Exchange> exchange) override;
  http::HttpResponse ErrorResponse(int status, const std::string& message) override;

  // The authorization of a /v1/ request: OK, or UNAUTHENTICATED saying why.
  absl::Status Authorize(const http::HttpRequest& head) const;
  std::vector<std::string> ReadyNames(const http::HttpRequest& request) const;
  // A generation request of any API.
  void Generate(Route route, http::HttpRequest request, std::shared_ptr<http::Exchange> exchange);
  // Submits a parsed request and starts its answer (a handler thread, or
  // the constrained lane).
  void Submit(Clock::time_point arrival, http_api::ApiRequest request, TenantRef tenant,
              std::shared_ptr<http::Exchange> exchange);
  // Answers a tokenizer route (tokenize_api.h).
  void ServeTokenizer(Route route, const http::HttpRequest& request, http::Exchange& exchange);
  // Answers a refused generation request (and counts and logs it).
  void Refuse(const char* route, http::Exchange& exchange, const http_api::ErrorReply& error,
              const absl::Status& status);
  // An answer, with "Connection: close" while draining.
  void Send(http::Exchange& exchange, http::HttpResponse response) const;

  const HttpOptions options_;
  SlotManager* const slots_;
  const GenerationLimits limits_;
  ServingState* const state_;
  Metrics* const metrics_;
  Tenants* const tenants_;
  const int64_t created_;  // Unix seconds: the models' "created"
  std::unique_ptr<ConstrainedLane> constrained_;
  std::unique_ptr<http::EventServer> server_;
};

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_HTTP_HTTP_SERVER_H_
