#include "daemon/http/http_server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/api/generate_request.h"
#include "daemon/http/openai_api.h"
#include "daemon/serving/client_input.h"
#include "daemon/serving/notifier.h"
#include "daemon/serving/sequence.h"
#include "engine/base/logging.h"
#include "engine/base/status.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace minfer::daemon {
namespace {

using json = nlohmann::json;

// How often a waiting request looks at its client's socket.
constexpr auto kPeerPoll = std::chrono::milliseconds(50);

// Connections waiting to be accepted (gRPC's figure).
constexpr int kListenBacklog = 4096;

std::string Dump(const json& j) {
  // Token text can end inside a UTF-8 character (logprobs' token strings):
  // replaced, not an exception.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

void SetError(httplib::Response& res, const absl::Status& status) {
  const openai::ApiError e = openai::ApiErrorFor(status);
  res.status = e.http_status;
  res.set_content(Dump(openai::ErrorBody(e)), "application/json");
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

// The port and numeric address of a socket address.
bool AddrOf(const sockaddr_storage& a, std::string* host, int* port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
    *port = ntohs(in->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf));
    *port = ntohs(in6->sin6_port);
  } else {
    return false;
  }
  *host = buf;
  return true;
}

// The socket of the connection that carries `req`, found by its two
// endpoints (cpp-httplib 0.11 does not hand a handler its socket), or -1.
// The connection's thread runs the handler, so the socket stays open (and
// its number ours) while the handler runs.
int ConnectionSocket(const httplib::Request& req) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    int fd = 0;
    if (!absl::SimpleAtoi(e->d_name, &fd) || fd == dirfd(dir)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t ll = sizeof(local), pl = sizeof(peer);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0) continue;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    std::string lh, ph;
    int lp = 0, pp = 0;
    if (!AddrOf(local, &lh, &lp) || !AddrOf(peer, &ph, &pp)) continue;
    if (lp == req.local_port && pp == req.remote_port && ph == req.remote_addr) {
      found = fd;
      break;
    }
  }
  closedir(dir);
  return found;
}

// True once the client has closed or reset its end. POLLRDHUP is set on a
// FIN even with unread bytes (a TLS close_notify, a pipelined request), so
// it tells "gone" apart from "sent more".
bool PeerGone(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLRDHUP, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

// Wakes a waiting HTTP thread whenever its sequence publishes.
class SequenceWaiter {
 public:
  explicit SequenceWaiter(std::shared_ptr<Sequence> seq) : seq_(std::move(seq)) {
    sub_ = seq_->notifier().Subscribe([this] {
      {
        std::lock_guard<std::mutex> lock(mu_);
        signalled_ = true;
      }
      cv_.notify_all();
    });
  }
  ~SequenceWaiter() { seq_->notifier().Unsubscribe(sub_); }
  SequenceWaiter(const SequenceWaiter&) = delete;
  SequenceWaiter& operator=(const SequenceWaiter&) = delete;

  // The next chunk, waiting up to `timeout` for one; false if none came.
  bool Next(SequenceChunk* chunk, std::chrono::milliseconds timeout) {
    if (seq_->TakeChunk(chunk)) return true;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return signalled_; });
    signalled_ = false;
    lock.unlock();
    return seq_->TakeChunk(chunk);
  }

 private:
  std::shared_ptr<Sequence> seq_;
  Notifier::Id sub_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool signalled_ = false;
};

// One generation request from parse to the end of its response.
struct Generation {
  openai::ParsedRequest request;
  std::shared_ptr<Sequence> seq;
  std::unique_ptr<openai::ResponseWriter> writer;
  int fd = -1;
};

}  // namespace

HttpServer::HttpServer(HttpOptions options, SlotManager* slots, GenerationLimits limits,
                       ServingState* state, Metrics* metrics, Tenants* tenants)
    : options_(std::move(options)),
      slots_(slots),
      limits_(limits),
      state_(state),
      metrics_(metrics),
      tenants_(tenants),
      created_(UnixNow()) {}

HttpServer::~HttpServer() { Stop(); }

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(HttpOptions options,
                                                              SlotManager* slots,
                                                              GenerationLimits limits,
                                                              ServingState* state,
                                                              Metrics* metrics,
                                                              Tenants* tenants) {
  std::unique_ptr<HttpServer> s(
      new HttpServer(std::move(options), slots, limits, state, metrics, tenants));
  RETURN_IF_ERROR(s->Init());
  return s;
}

absl::Status HttpServer::Init() {
  const size_t colon = options_.listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(options_.listen.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("http listen address '", options_.listen, "' is not host:port"));
  }
  std::string host = options_.listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (!options_.tls_cert_file.empty()) {
    auto ssl = std::make_unique<httplib::SSLServer>(options_.tls_cert_file.c_str(),
                                                    options_.tls_key_file.c_str());
    if (!ssl->is_valid()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "HTTPS: cannot use the TLS certificate '", options_.tls_cert_file, "' and key '",
          options_.tls_key_file, "'"));
    }
    server_ = std::move(ssl);
  } else {
    server_ = std::make_unique<httplib::Server>();
  }
  const int threads = std::max(options_.threads, 2);
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server_->set_payload_max_length(options_.max_body_bytes);
  server_->set_read_timeout(options_.read_timeout_seconds, 0);
  server_->set_write_timeout(options_.write_timeout_seconds, 0);
  server_->set_keep_alive_timeout(options_.keep_alive_seconds);
  server_->set_keep_alive_max_count(10000);
  server_->set_tcp_nodelay(true);  // SSE events are small and latency-bound
  // The library's own socket options (SO_REUSEADDR), and the socket kept
  // for the backlog below.
  server_->set_socket_options([this](int fd) {
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    listen_fd_ = fd;
  });
  Route();

  const int bound = port == 0 ? server_->bind_to_any_port(host) : (server_->bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on '", options_.listen, "' (HTTP API)"));
  }
  // cpp-httplib listens with a backlog of 5: 16 clients connecting at once
  // overflowed it (the kernel's ListenOverflows counter), their SYNs were
  // dropped and retried a second later (TTFT +1 s), and one in about ten
  // such bursts lost a stream. A second listen() on a listening socket
  // only sets the new limit (capped by net.core.somaxconn), as gRPC's.
  if (listen_fd_ < 0 || ::listen(listen_fd_, kListenBacklog) != 0) {
    return absl::InternalError(absl::StrCat("cannot set the HTTP API's listen backlog on '",
                                            options_.listen, "'"));
  }
  address_ = absl::StrCat(options_.listen.substr(0, colon), ":", bound);
  listener_ = std::thread([this] { server_->listen_after_bind(); });
  Logger("daemon")->info("minferd serving the OpenAI-compatible HTTP API on {}{}{}", address_,
                         tls() ? " (TLS)" : "",
                         options_.api_keys.empty() ? "" : " (API keys required)");
  return absl::OkStatus();
}

int HttpServer::ListenBacklog() const {
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (listen_fd_ < 0 || getsockopt(listen_fd_, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) {
    return -1;
  }
  // For a listening socket the kernel reports the accept queue's limit in
  // tcpi_sacked (and its current length in tcpi_unacked).
  return static_cast<int>(info.tcpi_sacked);
}

void HttpServer::Stop() {
  if (server_ == nullptr) return;
  server_->stop();
  if (listener_.joinable()) listener_.join();
}

void HttpServer::Route() {
  httplib::Server& s = *server_;

  // Authorization before routing, so an unauthorized client learns
  // nothing else (not even which models exist).
  s.set_pre_routing_handler([this](const httplib::Request& req,
                                   httplib::Response& res) -> httplib::Server::HandlerResponse {
    if ((options_.api_keys.empty() && tenants_ == nullptr) || !absl::StartsWith(req.path, "/v1/")) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    const std::string auth = req.get_header_value("Authorization");
    absl::Status st;
    if (tenants_ != nullptr) {
      st = tenants_->Identify(auth).status();
    } else if (auth.empty()) {
      st = absl::UnauthenticatedError(
          "no API key: send the header 'Authorization: Bearer KEY' with a key from the server's "
          "key file");
    } else if (!absl::StartsWith(auth, "Bearer ")) {
      st = absl::UnauthenticatedError("the Authorization header must read 'Bearer KEY'");
    } else {
      const std::string key = auth.substr(7);
      bool ok = false;
      for (const std::string& k : options_.api_keys) ok |= ConstantTimeEquals(key, k);
      if (!ok) st = absl::UnauthenticatedError("the API key is not valid");
    }
    if (st.ok()) return httplib::Server::HandlerResponse::Unhandled;
    SetError(res, st);
    res.set_header("WWW-Authenticate", "Bearer");
    if (metrics_ != nullptr) metrics_->RecordRequest(req.path, "", "401", "http");
    return httplib::Server::HandlerResponse::Handled;
  });

  // What the library answers itself (no route, a body over the limit, a
  // request it cannot parse) gets OpenAI's error shape too.
  s.set_error_handler(httplib::Server::HandlerWithResponse(
      [](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string msg;
    switch (res.status) {
      case 404:
        msg = absl::StrCat("no route ", req.method, " ", QuoteInput(req.path));
        break;
      case 413:
        msg = "the request body is too large";
        break;
      case 414:
        msg = "the request URI is too long";
        break;
      default:
        msg = absl::StrCat("the request could not be read (HTTP ", res.status, ")");
    }
    openai::ApiError e;
    e.http_status = res.status;
    e.type = res.status == 404 ? "not_found_error" : "invalid_request_error";
    e.message = msg;
    res.set_content(Dump(openai::ErrorBody(e)), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }));

  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool draining = state_->draining();
    res.status = draining ? 503 : 200;
    res.set_content(Dump(json{{"status", draining ? "draining" : "ok"}}), "application/json");
  });

  // Ready models and aliases; with tenants, only those the caller's tenant
  // may use (pre-routing checked the key).
  auto ready_names = [this](const httplib::Request& req) {
    int tenant = -1;
    if (tenants_ != nullptr) {
      absl::StatusOr<int> who = tenants_->Identify(req.get_header_value("Authorization"));
      if (who.ok()) tenant = *who;
    }
    auto allowed = [&](const std::string& name, const std::string& resolved) {
      return tenants_ == nullptr || (tenant >= 0 && tenants_->Allows(tenant, name, resolved));
    };
    std::vector<std::string> names;
    std::map<std::string, bool> ready;
    for (const auto& slot : slots_->List()) {
      ready[slot->name()] = slot->state() == SlotState::kReady;
      if (ready[slot->name()] && allowed(slot->name(), slot->name())) names.push_back(slot->name());
    }
    for (const auto& [alias, model] : slots_->ListAliases()) {
      if (ready[model] && allowed(alias, model)) names.push_back(alias);
    }
    return names;
  };
  s.Get("/v1/models", [this, ready_names](const httplib::Request& req, httplib::Response& res) {
    res.set_content(Dump(openai::ModelList(ready_names(req), created_)), "application/json");
    if (metrics_ != nullptr) metrics_->RecordRequest("/v1/models", "", "200", "http");
  });
  s.Get(R"(/v1/models/([^/]+))",
        [this, ready_names](const httplib::Request& req, httplib::Response& res) {
          const std::string id = req.matches[1];
          for (const std::string& n : ready_names(req)) {
            if (n == id) {
              res.set_content(Dump(openai::ModelObject(n, created_)), "application/json");
              return;
            }
          }
          SetError(res, absl::NotFoundError(
                            absl::StrCat("the model ", QuoteInput(id), " does not exist or is "
                                         "not ready")));
        });

  auto generate = [this](openai::Endpoint endpoint) {
    return [this, endpoint](const httplib::Request& req, httplib::Response& res) {
      const char* route =
          endpoint == openai::Endpoint::kChatCompletions ? "/v1/chat/completions" : "/v1/completions";
      const Clock::time_point arrival = Clock::now();
      auto fail = [&](const absl::Status& st, const std::string& model) {
        SetError(res, st);
        if (metrics_ != nullptr) {
          metrics_->RecordRequest(route, model, std::to_string(res.status), "http");
        }
        Logger("daemon")->info("http {} refused: {} {}", route, res.status, st.message());
      };
      const json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
      if (body.is_discarded()) {
        fail(openai::FieldError("body", "the request body is not valid JSON"), "");
        return;
      }
      absl::StatusOr<openai::ParsedRequest> parsed = openai::ParseRequest(endpoint, body);
      if (!parsed.ok()) {
        fail(parsed.status(), "");
        return;
      }
      auto gen = std::make_shared<Generation>();
      gen->request = *std::move(parsed);
      std::shared_ptr<const runtime::Model> model;
      TenantRef tenant;
      if (tenants_ != nullptr) {
        // (Pre-routing refused requests without a valid key.)
        absl::StatusOr<int> who = tenants_->Identify(req.get_header_value("Authorization"));
        if (!who.ok()) {
          fail(who.status(), "");
          return;
        }
        tenant = {tenants_, *who};
      }
      absl::StatusOr<std::shared_ptr<Sequence>> seq =
          SubmitGenerate(slots_, *state_, gen->request.generate, limits_, arrival,
                         Clock::time_point::max(), "http", &model, tenant);
      if (!seq.ok()) {
        fail(openai::ToApiFieldError(endpoint, seq.status()), "");
        return;
      }
      gen->seq = *std::move(seq);
      const bool chat = endpoint == openai::Endpoint::kChatCompletions;
      // The tokenizer lives as long as `model`, which this handler (and
      // the stream's provider) holds.
      gen->writer = std::make_unique<openai::ResponseWriter>(
          gen->request, RandomId(chat ? "chatcmpl-" : "cmpl-"), UnixNow(), gen->seq->model(),
          &model->tokenizer());
      gen->fd = ConnectionSocket(req);
      state_->StreamStarted();

      if (!gen->request.stream) {
        SequenceWaiter waiter(gen->seq);
        SequenceChunk chunk;
        std::optional<SequenceResult> result;
        while (!result.has_value()) {
          if (waiter.Next(&chunk, kPeerPoll)) {
            gen->writer->Accumulate(chunk);
            if (chunk.result.has_value()) result = std::move(chunk.result);
            chunk = SequenceChunk();
          } else if (PeerGone(gen->fd)) {
            gen->seq->Cancel(absl::CancelledError("the HTTP client disconnected"));
          }
        }
        if (result->status.ok()) {
          res.set_content(Dump(gen->writer->Response(*result)), "application/json");
        } else {
          SetError(res, result->status);
        }
        if (metrics_ != nullptr) {
          metrics_->RecordRequest(route, gen->seq->model(), std::to_string(res.status), "http");
        }
        state_->StreamEnded();
        return;
      }

      // Streaming: the status is 200 from here on; a failure after this
      // point is an SSE error event (what OpenAI's clients raise).
      res.set_header("Cache-Control", "no-cache");
      res.set_header("X-Accel-Buffering", "no");  // proxies: do not buffer the stream
      res.set_chunked_content_provider(
          "text/event-stream",
          [gen, model](size_t, httplib::DataSink& sink) {
            SequenceWaiter waiter(gen->seq);
            auto send = [&](const json& data) {
              const std::string event = absl::StrCat("data: ", Dump(data), "\n\n");
              return sink.write(event.data(), event.size());
            };
            SequenceChunk chunk;
            for (;;) {
              if (!waiter.Next(&chunk, kPeerPoll)) {
                if (PeerGone(gen->fd)) {
                  gen->seq->Cancel(absl::CancelledError("the HTTP client disconnected"));
                  return false;
                }
                continue;
              }
              for (const json& c : gen->writer->StreamChunks(chunk)) {
                if (!send(c)) {
                  gen->seq->Cancel(absl::CancelledError("the HTTP client disconnected"));
                  return false;
                }
              }
              if (chunk.result.has_value()) {
                if (!chunk.result->status.ok()) {
                  send(openai::ErrorBody(openai::ApiErrorFor(chunk.result->status)));
                } else {
                  static const std::string kDone = "data: [DONE]\n\n";
                  sink.write(kDone.data(), kDone.size());
                }
                sink.done();
                return true;
              }
              chunk = SequenceChunk();
            }
          },
          [this, gen, route](bool success) {
            // The response is over (or the connection is): the sequence
            // must not outlive it.
            gen->seq->Cancel(absl::CancelledError("the HTTP stream ended"));
            if (metrics_ != nullptr) {
              metrics_->RecordRequest(route, gen->seq->model(), success ? "200" : "499", "http");
            }
            state_->StreamEnded();
          });
    };
  };
  s.Post("/v1/chat/completions", generate(openai::Endpoint::kChatCompletions));
  s.Post("/v1/completions", generate(openai::Endpoint::kCompletions));
}

}  // namespace minfer::daemon
