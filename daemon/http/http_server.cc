#include "daemon/http/http_server.h"

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/api/chat_tools.h"
#include "daemon/api/generate_request.h"
#include "daemon/http/anthropic_api.h"
#include "daemon/http/api_reply.h"
#include "daemon/http/openai_api.h"
#include "daemon/http/responses_api.h"
#include "daemon/http/tokenize_api.h"
#include "daemon/serving/client_input.h"
#include "daemon/serving/notifier.h"
#include "daemon/serving/sequence.h"
#include "engine/base/logging.h"
#include "engine/base/status.h"
#include "nlohmann/json.hpp"

namespace minfer::daemon {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

std::string Dump(const json& j) {
  // Token text can end inside a UTF-8 character (logprobs' token strings):
  // replaced, not an exception.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

http::HttpResponse JsonResponse(int status, const json& body) {
  http::HttpResponse r;
  r.status = status;
  r.body = Dump(body);
  return r;
}

http::HttpResponse ErrorFor(const absl::Status& status) {
  const openai::ApiError e = openai::ApiErrorFor(status);
  return JsonResponse(e.http_status, openai::ErrorBody(e));
}

std::string RandomId(const char* prefix) {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(rng()));
  return absl::StrCat(prefix, buf);
}

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The request's key as "Bearer KEY": its Authorization header or, as
// Anthropic's clients send it, its x-api-key header (Authorization wins
// when both come). Every check of keys and tenants reads this.
std::string AuthorizationOf(const http::HttpRequest& r) {
  const std::string* a = r.Header("Authorization");
  if (a != nullptr) return *a;
  const std::string* key = r.Header("x-api-key");
  return key == nullptr ? std::string() : absl::StrCat("Bearer ", *key);
}

using Route = HttpServer::Route;

Route RouteOf(const std::string& path) {
  if (path == "/health") return Route::kHealth;
  if (path == "/v1/models") return Route::kModels;
  if (path == "/v1/chat/completions") return Route::kChat;
  if (path == "/v1/completions") return Route::kCompletions;
  if (path == "/v1/messages") return Route::kMessages;
  if (path == "/v1/responses") return Route::kResponses;
  if (path == "/v1/messages/count_tokens") return Route::kCountTokens;
  if (path == "/tokenize") return Route::kTokenize;
  if (path == "/detokenize") return Route::kDetokenize;
  if (path == "/apply-template") return Route::kApplyTemplate;
  if (absl::StartsWith(path, "/v1/models/") && path.size() > 11 &&
      path.find('/', 11) == std::string::npos) {
    return Route::kModel;
  }
  return Route::kNone;
}

bool IsGet(const std::string& method) { return method == "GET" || method == "HEAD"; }

bool IsGeneration(Route route) {
  return route == Route::kChat || route == Route::kCompletions || route == Route::kMessages ||
         route == Route::kResponses;
}

// The tokenizer's routes (tokenize_api.h): POST, authorized as /v1/ is.
bool IsTokenizerRoute(Route route) {
  return route == Route::kTokenize || route == Route::kDetokenize ||
         route == Route::kApplyTemplate || route == Route::kCountTokens;
}

const char* RouteName(Route route) {
  switch (route) {
    case Route::kTokenize:
      return "/tokenize";
    case Route::kDetokenize:
      return "/detokenize";
    case Route::kApplyTemplate:
      return "/apply-template";
    case Route::kCountTokens:
      return "/v1/messages/count_tokens";
    case Route::kChat:
      return "/v1/chat/completions";
    case Route::kCompletions:
      return "/v1/completions";
    case Route::kMessages:
      return "/v1/messages";
    case Route::kResponses:
      return "/v1/responses";
    default:
      return "";
  }
}

http_api::ErrorReply OpenAiError(const absl::Status& status) {
  const openai::ApiError e = openai::ApiErrorFor(status);
  return {e.http_status, openai::ErrorBody(e)};
}

// The error shape of the API a route belongs to.
http_api::ErrorReply RouteError(Route route, const absl::Status& status) {
  return route == Route::kMessages || route == Route::kCountTokens ? anthropic::ErrorFor(status)
                                                                     : OpenAiError(status);
}

// The OpenAI API's answer (openai::ResponseWriter) as a Reply.
class OpenAiReply : public http_api::Reply {
 public:
  OpenAiReply(std::shared_ptr<const openai::ParsedRequest> request, bool chat,
              const http_api::ReplyContext& ctx)
      : request_(std::move(request)),
        writer_(*request_, RandomId(chat ? "chatcmpl-" : "cmpl-"), UnixNow(), ctx.model,
                ctx.tokenizer, ctx.parsers) {}

  std::string StreamEvents(const SequenceChunk& chunk) override {
    std::string out;
    for (const json& c : writer_.StreamChunks(chunk)) absl::StrAppend(&out, "data: ", Dump(c), "\n\n");
    if (chunk.result.has_value()) {
      if (!chunk.result->status.ok()) {
        const openai::ApiError e = openai::ApiErrorFor(chunk.result->status);
        absl::StrAppend(&out, "data: ", Dump(openai::ErrorBody(e)), "\n\n");
      } else {
        out += "data: [DONE]\n\n";
      }
    }
    return out;
  }
  void Accumulate(const SequenceChunk& chunk) override { writer_.Accumulate(chunk); }
  json Response(const SequenceResult& result) override { return writer_.Response(result); }

 private:
  const std::shared_ptr<const openai::ParsedRequest> request_;  // the writer reads it
  openai::ResponseWriter writer_;
};

absl::StatusOr<http_api::ApiRequest> OpenAiRequest(bool chat, const ojson& body) {
  ASSIGN_OR_RETURN(openai::ParsedRequest p,
                   openai::ParseRequest(
                       chat ? openai::Endpoint::kChatCompletions : openai::Endpoint::kCompletions,
                       body));
  auto parsed = std::make_shared<const openai::ParsedRequest>(std::move(p));
  http_api::ApiRequest out;
  out.route = chat ? "/v1/chat/completions" : "/v1/completions";
  out.generate = parsed->generate;
  out.stream = parsed->stream;
  out.error = [parsed](const absl::Status& status) {
    return OpenAiError(openai::ToApiFieldError(*parsed, status));
  };
  out.reply = [parsed, chat](const http_api::ReplyContext& ctx) -> std::unique_ptr<http_api::Reply> {
    return std::make_unique<OpenAiReply>(parsed, chat, ctx);
  };
  return out;
}

}  // namespace

// One generation request from its submission to the end of its answer,
// driven by its sequence's notifications and its client's progress. Every
// step (Pump) runs on a handler thread under mu_: a notification only
// schedules one, so the slot's worker never waits on a client.
class HttpServer::Generation : public std::enable_shared_from_this<Generation> {
 public:
  Generation(HttpServer* server, http::EventServer* transport, http_api::ApiRequest request,
             std::shared_ptr<Sequence> seq, std::shared_ptr<const runtime::Model> model,
             const ChatParsers& parsers, std::shared_ptr<http::Exchange> exchange)
      : server_(server),
        transport_(transport),
        route_(request.route),
        stream_(request.stream),
        error_(std::move(request.error)),
        seq_(std::move(seq)),
        model_(std::move(model)),
        exchange_(std::move(exchange)) {
    // The tokenizer lives as long as model_, which this object holds.
    reply_ = request.reply({seq_->model(), &model_->tokenizer(), seq_->prompt_tokens(), parsers});
  }

  void Begin() {
    // A pump that a notification starts meanwhile waits for the set-up.
    std::lock_guard<std::mutex> lock(mu_);
    self_ = shared_from_this();
    std::weak_ptr<Generation> weak = self_;
    if (stream_) {
      // The status is 200 from here on; a failure after this point is an
      // SSE error event (what OpenAI's clients raise).
      http::HttpResponse head;
      head.content_type = "text/event-stream";
      head.headers = {{"Cache-Control", "no-cache"},
                      {"X-Accel-Buffering", "no"}};  // proxies: do not buffer the stream
      head.close = server_->state_->draining();
      exchange_->StartStream(std::move(head));
      exchange_->OnDrained([weak] {
        if (auto g = weak.lock()) g->Schedule();
      });
    }
    exchange_->OnGone([weak] {
      if (auto g = weak.lock()) {
        g->seq_->Cancel(absl::CancelledError("the HTTP client disconnected"));
        g->Schedule();
      }
    });
    sub_ = seq_->notifier().Subscribe([weak] {
      if (auto g = weak.lock()) g->Schedule();
    });
    Schedule();
  }

 private:
  void Schedule() {
    if (scheduled_.exchange(true)) return;
    std::weak_ptr<Generation> weak = weak_from_this();
    transport_->PostWork([weak] {
      if (auto g = weak.lock()) {
        g->scheduled_ = false;
        g->Pump();
      }
    });
  }

  void Pump() {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    SequenceChunk chunk;
    for (;;) {
      if (stream_ && !exchange_->gone() &&
          exchange_->pending_bytes() > kMaxPendingStreamBytes) {
        return;  // OnDrained schedules the next pump
      }
      if (!seq_->TakeChunk(&chunk)) return;
      if (stream_) {
        std::string out = reply_->StreamEvents(chunk);
        if (chunk.result.has_value()) {
          const int code = chunk.result->status.ok()
                               ? 200
                               : openai::ApiErrorFor(chunk.result->status).http_status;
          exchange_->Write(std::move(out));
          exchange_->End();
          Finish(code);
          return;
        }
        exchange_->Write(std::move(out));
      } else {
        reply_->Accumulate(chunk);
        if (chunk.result.has_value()) {
          http::HttpResponse r;
          if (chunk.result->status.ok()) {
            r = JsonResponse(200, reply_->Response(*chunk.result));
          } else {
            const http_api::ErrorReply e = error_(chunk.result->status);
            r = JsonResponse(e.http_status, e.body);
          }
          const int code = r.status;
          server_->Send(*exchange_, std::move(r));
          Finish(code);
          return;
        }
      }
      chunk = SequenceChunk();
    }
  }

  // The answer is handed over (or the client is gone): the stream is over.
  void Finish(int code) {
    done_ = true;
    seq_->notifier().Unsubscribe(sub_);
    // The sequence must not outlive its answer.
    seq_->Cancel(absl::CancelledError("the HTTP stream ended"));
    // A client that went away is 499, whatever the sequence made of it
    // (nginx's code for it; OpenAI's clients never see it).
    if (exchange_->gone()) code = 499;
    if (server_->metrics_ != nullptr) {
      server_->metrics_->RecordRequest(route_, seq_->model(), std::to_string(code), "http");
    }
    exchange_.reset();
    server_->state_->StreamEnded();
    // (The pump that called this holds a reference of its own.)
    self_.reset();
  }

  HttpServer* const server_;
  http::EventServer* const transport_;
  const char* const route_;
  const bool stream_;
  const std::function<http_api::ErrorReply(const absl::Status&)> error_;
  const std::shared_ptr<Sequence> seq_;
  const std::shared_ptr<const runtime::Model> model_;
  std::atomic<bool> scheduled_{false};
  Notifier::Id sub_ = 0;

  std::mutex mu_;  // guards what follows; held by Pump
  std::shared_ptr<http::Exchange> exchange_;
  std::unique_ptr<http_api::Reply> reply_;
  std::shared_ptr<Generation> self_;  // alive until Finish
  bool done_ = false;
};

HttpServer::HttpServer(HttpOptions options, SlotManager* slots, GenerationLimits limits,
                       ServingState* state, Metrics* metrics, Tenants* tenants)
    : options_(std::move(options)),
      slots_(slots),
      limits_(limits),
      state_(state),
      metrics_(metrics),
      tenants_(tenants),
      created_(UnixNow()),
      constrained_(std::make_unique<ConstrainedLane>(ConstrainedLane::kThreads)) {}

HttpServer::~HttpServer() { Stop(); }

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(HttpOptions options,
                                                              SlotManager* slots,
                                                              GenerationLimits limits,
                                                              ServingState* state,
                                                              Metrics* metrics,
                                                              Tenants* tenants) {
  std::unique_ptr<HttpServer> s(
      new HttpServer(std::move(options), slots, limits, state, metrics, tenants));
  ASSIGN_OR_RETURN(s->server_, http::EventServer::Start(s->options_.server, s.get()));
  if (metrics != nullptr) {
    http::EventServer* server = s->server_.get();
    metrics->SetHttpSource([server] {
      const http::EventServerStats st = server->stats();
      Metrics::HttpConnections c;
      c.open = st.open_connections;
      c.accepted = st.accepted;
      c.refused = st.refused_over_limit;
      c.timed_out = st.timed_out;
      c.bad_request = st.protocol_errors;
      return c;
    });
  }
  Logger("daemon")->info("minferd serving the OpenAI-compatible HTTP API on {}{}{}",
                         s->address(), s->tls() ? " (TLS)" : "",
                         s->options_.api_keys.empty() && tenants == nullptr
                             ? ""
                             : " (API keys required)");
  return s;
}

void HttpServer::Stop() {
  if (metrics_ != nullptr) metrics_->SetHttpSource(nullptr);
  // Submissions in progress finish first (they may start an answer on the
  // server); waiting ones are dropped with their connections.
  if (constrained_ != nullptr) constrained_->Stop();
  if (server_ != nullptr) server_->Stop();
}

absl::Status HttpServer::Authorize(const http::HttpRequest& head) const {
  if (options_.api_keys.empty() && tenants_ == nullptr) return absl::OkStatus();
  const std::string auth = AuthorizationOf(head);
  if (tenants_ != nullptr) return tenants_->Identify(auth).status();
  if (auth.empty()) {
    return absl::UnauthenticatedError(
        "no API key: send the header 'Authorization: Bearer KEY' with a key from the server's "
        "key file");
  }
  if (!absl::StartsWith(auth, "Bearer ")) {
    return absl::UnauthenticatedError("the Authorization header must read 'Bearer KEY'");
  }
  const std::string key = auth.substr(7);
  bool ok = false;
  for (const std::string& k : options_.api_keys) ok |= ConstantTimeEquals(key, k);
  if (!ok) return absl::UnauthenticatedError("the API key is not valid");
  return absl::OkStatus();
}

// Refusals that need no body: authorization first (an unauthorized client
// learns nothing else, not even which routes exist), then the route and
// its method.
std::optional<http::HttpResponse> HttpServer::Screen(const http::HttpRequest& head) {
  const Route route = RouteOf(head.path);
  if (absl::StartsWith(head.path, "/v1/") || IsTokenizerRoute(route)) {
    if (absl::Status st = Authorize(head); !st.ok()) {
      const http_api::ErrorReply e = RouteError(route, st);
      http::HttpResponse r = JsonResponse(e.http_status, e.body);
      r.headers.push_back({"WWW-Authenticate", "Bearer"});
      if (metrics_ != nullptr) metrics_->RecordRequest(head.path, "", "401", "http");
      return r;
    }
  }
  const bool post = IsGeneration(route) || IsTokenizerRoute(route);
  if (route == Route::kNone) {
    return ErrorResponse(404, absl::StrCat("no route ", head.method, " ", QuoteInput(head.path)));
  }
  if (post ? head.method != "POST" : !IsGet(head.method)) {
    http::HttpResponse r = ErrorResponse(
        405, absl::StrCat("the route ", head.path, " takes ", post ? "POST" : "GET", ", not ",
                          QuoteInput(head.method)));
    r.headers.push_back({"Allow", post ? "POST" : "GET, HEAD"});
    return r;
  }
  return std::nullopt;
}

http::HttpResponse HttpServer::ErrorResponse(int status, const std::string& message) {
  openai::ApiError e;
  e.http_status = status;
  e.type = status == 404 ? "not_found_error" : status >= 500 ? "server_error"
                                                             : "invalid_request_error";
  e.message = message;
  if (status == 408) e.code = "request_timeout";
  if (status == 413) e.code = "request_too_large";
  if (status == 431) e.code = "request_header_fields_too_large";
  if (status == 503) e.code = "unavailable";
  return JsonResponse(status, openai::ErrorBody(e));
}

void HttpServer::Send(http::Exchange& exchange, http::HttpResponse response) const {
  if (state_->draining()) response.close = true;
  exchange.Respond(std::move(response));
}

std::vector<std::string> HttpServer::ReadyNames(const http::HttpRequest& request) const {
  int tenant = -1;
  if (tenants_ != nullptr) {
    absl::StatusOr<int> who = tenants_->Identify(AuthorizationOf(request));
    if (who.ok()) tenant = *who;
  }
  auto allowed = [&](const std::string& name, const std::string& resolved) {
    return tenants_ == nullptr || (tenant >= 0 && tenants_->Allows(tenant, name, resolved));
  };
  std::vector<std::string> names;
  std::map<std::string, bool> ready;
  for (const auto& slot : slots_->List()) {
    ready[slot->name()] = AcceptsRequests(slot->state());  // sleeping: served on demand
    if (ready[slot->name()] && allowed(slot->name(), slot->name())) names.push_back(slot->name());
  }
  for (const auto& [alias, model] : slots_->ListAliases()) {
    if (ready[model] && allowed(alias, model)) names.push_back(alias);
  }
  return names;
}

void HttpServer::Handle(http::HttpRequest request, std::shared_ptr<http::Exchange> exchange) {
  const Route route = RouteOf(request.path);
  switch (route) {
    case Route::kHealth: {
      const bool draining = state_->draining();
      Send(*exchange, JsonResponse(draining ? 503 : 200,
                                   json{{"status", draining ? "draining" : "ok"}}));
      return;
    }
    case Route::kModels:
      Send(*exchange, JsonResponse(200, openai::ModelList(ReadyNames(request), created_)));
      if (metrics_ != nullptr) metrics_->RecordRequest("/v1/models", "", "200", "http");
      return;
    case Route::kModel: {
      const std::string id = request.path.substr(11);
      for (const std::string& n : ReadyNames(request)) {
        if (n == id) {
          Send(*exchange, JsonResponse(200, openai::ModelObject(n, created_)));
          return;
        }
      }
      Send(*exchange, ErrorFor(absl::NotFoundError(absl::StrCat(
                          "the model ", QuoteInput(id), " does not exist or is not ready"))));
      return;
    }
    case Route::kChat:
    case Route::kCompletions:
    case Route::kMessages:
    case Route::kResponses:
      Generate(route, std::move(request), std::move(exchange));
      return;
    case Route::kTokenize:
    case Route::kDetokenize:
    case Route::kApplyTemplate:
    case Route::kCountTokens:
      ServeTokenizer(route, request, *exchange);
      return;
    case Route::kNone:
      break;
  }
  Send(*exchange, ErrorResponse(404, "no route"));  // (Screen refused these)
}

void HttpServer::Refuse(const char* route, http::Exchange& exchange,
                        const http_api::ErrorReply& error, const absl::Status& status) {
  http::HttpResponse r = JsonResponse(error.http_status, error.body);
  if (metrics_ != nullptr) metrics_->RecordRequest(route, "", std::to_string(r.status), "http");
  Logger("daemon")->info("http {} refused: {} {}", route, r.status, status.message());
  Send(exchange, std::move(r));
}

void HttpServer::Generate(Route route, http::HttpRequest request,
                          std::shared_ptr<http::Exchange> exchange) {
  const Clock::time_point arrival = Clock::now();
  const char* name = RouteName(route);
  auto refuse = [&](const absl::Status& status) {
    Refuse(name, *exchange, RouteError(route, status), status);
  };
  // Read in key order: a schema's properties are generated in theirs.
  const ojson body = ojson::parse(request.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    refuse(openai::FieldError("body", "the request body is not valid JSON"));
    return;
  }
  absl::StatusOr<http_api::ApiRequest> parsed =
      route == Route::kMessages    ? anthropic::ParseMessagesRequest(body)
      : route == Route::kResponses ? responses::ParseResponsesRequest(body)
                                   : OpenAiRequest(route == Route::kChat, body);
  if (!parsed.ok()) {
    refuse(parsed.status());
    return;
  }
  TenantRef tenant;
  if (tenants_ != nullptr) {
    // (Screen refused requests without a valid key.)
    absl::StatusOr<int> who = tenants_->Identify(AuthorizationOf(request));
    if (!who.ok()) {
      refuse(who.status());
      return;
    }
    tenant = {tenants_, *who};
  }
  // A forced tool call compiles a grammar too, and so do strict tools in
  // auto mode and a reasoning budget (chat_tools.h, chat_phases.h).
  const bool compiles =
      parsed->generate.constraint_case() != v1::GenerateRequest::CONSTRAINT_NOT_SET ||
      (parsed->generate.has_chat() && (IsForcedToolChoice(parsed->generate.chat()) ||
                                       HasStrictAutoTools(parsed->generate.chat()) ||
                                       parsed->generate.chat().has_reasoning_budget()));
  if (!compiles) {
    Submit(arrival, *std::move(parsed), tenant, std::move(exchange));
    return;
  }
  // A constraint is compiled when the request is submitted, which can take
  // up to the compiler's time cap: not on a handler thread, which every
  // stream's output also waits for.
  auto p = std::make_shared<http_api::ApiRequest>(*std::move(parsed));
  const bool posted = constrained_->Post([this, arrival, p, tenant, exchange] {
    Submit(arrival, std::move(*p), tenant, exchange);
  });
  if (!posted) {
    refuse(absl::ResourceExhaustedError(absl::StrCat(
        "too many requests with output constraints are waiting to be compiled (",
        ConstrainedLane::kMaxWaiting, "); try again later")));
  }
}

void HttpServer::Submit(Clock::time_point arrival, http_api::ApiRequest request, TenantRef tenant,
                        std::shared_ptr<http::Exchange> exchange) {
  std::shared_ptr<const runtime::Model> model;
  ChatParsers parsers;
  absl::StatusOr<std::shared_ptr<Sequence>> seq =
      SubmitGenerate(slots_, *state_, request.generate, limits_, arrival,
                     Clock::time_point::max(), "http", &model, tenant, &parsers);
  if (!seq.ok()) {
    Refuse(request.route, *exchange, request.error(seq.status()), seq.status());
    return;
  }
  state_->StreamStarted();
  auto gen = std::make_shared<Generation>(this, server_.get(), std::move(request),
                                          *std::move(seq), std::move(model), parsers,
                                          std::move(exchange));
  gen->Begin();
}

HttpServer::ConstrainedLane::ConstrainedLane(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

HttpServer::ConstrainedLane::~ConstrainedLane() { Stop(); }

bool HttpServer::ConstrainedLane::Post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_ || tasks_.size() >= kMaxWaiting) return false;
    tasks_.push_back(std::move(fn));
  }
  cv_.notify_one();
  return true;
}

void HttpServer::ConstrainedLane::Stop() {
  std::deque<std::function<void()>> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    dropped.swap(tasks_);
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  // Dropped tasks release their exchanges (whose connections are closing)
  // outside the lock.
}

void HttpServer::ConstrainedLane::Run() {
  for (;;) {
    std::function<void()> fn;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopped_ || !tasks_.empty(); });
      if (stopped_) return;
      fn = std::move(tasks_.front());
      tasks_.pop_front();
    }
    fn();
  }
}

}  // namespace minfer::daemon

namespace minfer::daemon {

// Answers without generating: a tokenizer's work, on the handler thread
// (as gRPC's Tokenize answers on its). Authorization as for generations
// (Screen checked the key); a tenant may only name models it may use.
void HttpServer::ServeTokenizer(Route route, const http::HttpRequest& request,
                           http::Exchange& exchange) {
  const char* name = RouteName(route);
  std::string model_name;
  auto answer = [&](const http_api::ErrorReply& reply) {
    http::HttpResponse r = JsonResponse(reply.http_status, reply.body);
    if (metrics_ != nullptr) {
      metrics_->RecordRequest(name, model_name, std::to_string(r.status), "http");
    }
    Send(exchange, std::move(r));
  };
  auto refuse = [&](const absl::Status& status) {
    const http_api::ErrorReply e = RouteError(route, status);
    Logger("daemon")->info("http {} refused: {} {}", name, e.http_status, status.message());
    answer(e);
  };
  const ojson body = ojson::parse(request.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    refuse(openai::FieldError("body", "the request body is not valid JSON"));
    return;
  }
  if (!body.is_object()) {
    refuse(openai::FieldError("body", "the request body must be a JSON object"));
    return;
  }
  absl::StatusOr<std::optional<std::string>> asked = tokenize_api::ModelOf(body);
  if (!asked.ok()) {
    refuse(asked.status());
    return;
  }
  int tenant = -1;
  if (tenants_ != nullptr) {
    absl::StatusOr<int> who = tenants_->Identify(AuthorizationOf(request));
    if (!who.ok()) {
      refuse(who.status());
      return;
    }
    tenant = *who;
  }
  std::string asked_name;
  if (asked->has_value()) {
    asked_name = **asked;
  } else if (route == Route::kApplyTemplate) {
    // llama-server serves one model: without a name, the one this client
    // may use, if there is exactly one.
    const std::vector<std::string> names = ReadyNames(request);
    if (names.size() != 1) {
      refuse(openai::FieldError(
          "model", absl::StrCat("model is required: this key may use ", names.size(),
                                " ready models and aliases, not exactly one (name one)")));
      return;
    }
    asked_name = names[0];
  } else {
    refuse(openai::FieldError("model", "model is required: a loaded model or alias"));
    return;
  }
  if (absl::Status st = CheckName(asked_name, "model"); !st.ok()) {
    refuse(openai::FieldError("model", std::string(st.message())));
    return;
  }
  absl::StatusOr<std::shared_ptr<Slot>> slot = slots_->Find(asked_name, &model_name);
  if (!slot.ok()) {
    refuse(slot.status());
    return;
  }
  if (tenants_ != nullptr && !tenants_->Allows(tenant, asked_name, model_name)) {
    refuse(absl::PermissionDeniedError(absl::StrCat("tenant '", tenants_->name(tenant),
                                                    "' may not use model '", model_name, "'")));
    return;
  }
  std::shared_ptr<const runtime::Model> model = (*slot)->model();
  if (model == nullptr) {
    refuse(absl::FailedPreconditionError(
        absl::StrCat("model '", model_name, "' is ", SlotStateName((*slot)->state()),
                     ", not ready")));
    return;
  }
  const tokenizer::Tokenizer& tok = model->tokenizer();
  if (route == Route::kCountTokens) {
    answer(tokenize_api::CountTokens(body, tok));
    return;
  }
  absl::StatusOr<json> out =
      route == Route::kTokenize
          ? tokenize_api::Tokenize(body, tok, (*slot)->n_ctx(), limits_.max_prompt_tokens)
      : route == Route::kDetokenize
          ? tokenize_api::Detokenize(
                body, tok, static_cast<int64_t>(limits_.max_prompt_tokens) + limits_.max_tokens)
          : tokenize_api::ApplyTemplate(body, tok);
  if (!out.ok()) {
    refuse(out.status());
    return;
  }
  answer({200, *std::move(out)});
}

}  // namespace minfer::daemon
