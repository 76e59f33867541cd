#include "daemon/http/event_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <array>
#include <asio.hpp>
#include <asio/ssl.hpp>
#include <chrono>
#include <cmath>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/base/logging.h"

namespace minfer::daemon::http {
namespace {

using tcp = asio::ip::tcp;
using Strand = asio::strand<asio::io_context::executor_type>;
using SteadyClock = std::chrono::steady_clock;

// One read's worth.
constexpr size_t kReadChunk = 16 << 10;
// Bytes read ahead of the request being answered (the next pipelined ones,
// or a FIN/reset to notice): past this the connection stops reading and
// TCP's window holds the rest at the client.
constexpr size_t kMaxReadAhead = 64 << 10;
// After an error answer: how much of what the client still sends is read
// and dropped, and for how long, before the close (so the client reads
// the answer rather than a reset).
constexpr size_t kLingerBytes = 1 << 20;
constexpr auto kLingerTime = std::chrono::seconds(2);
// How often a half-closed client still waiting for its answer is checked
// for a reset.
constexpr auto kGonePoll = std::chrono::milliseconds(100);
// Pieces gathered into one write.
constexpr size_t kMaxGather = 64;
// Accept-queue length (gRPC's figure; the kernel caps it at somaxconn).
constexpr int kListenBacklog = 4096;
// TCP keepalive: probes after 30 s of silence, every 10 s, 3 unanswered
// mean the peer is gone (gRPC's keepalive pings have the same purpose).
constexpr int kKeepAliveIdleSeconds = 30;
constexpr int kKeepAliveIntervalSeconds = 10;
constexpr int kKeepAliveProbes = 3;
// After a failed accept (no fds left): wait before the next.
constexpr auto kAcceptRetry = std::chrono::milliseconds(100);

SteadyClock::duration Seconds(double s) {
  return std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(s));
}

std::string HexSize(size_t n) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%zx", n);
  return buf;
}

// The status line; then the headers of `r` (framing added by the caller).
std::string StatusLine(int version_minor, int status) {
  return absl::StrCat("HTTP/1.", version_minor >= 1 ? 1 : 0, " ", status, " ",
                      ReasonPhrase(status), "\r\n");
}

void AppendHeaders(const HttpResponse& r, std::string* out) {
  if (!r.content_type.empty()) absl::StrAppend(out, "Content-Type: ", r.content_type, "\r\n");
  for (const auto& [k, v] : r.headers) absl::StrAppend(out, k, ": ", v, "\r\n");
}

// A whole answer with a Content-Length: `keep` says whether the connection
// carries another request after it (HTTP/1.0 must be told so).
std::string WholeResponse(const HttpResponse& r, int version_minor, bool keep, bool with_body) {
  std::string out = StatusLine(version_minor, r.status);
  AppendHeaders(r, &out);
  absl::StrAppend(&out, "Content-Length: ", r.body.size(), "\r\n");
  if (!keep) {
    out += "Connection: close\r\n";
  } else if (version_minor == 0) {
    out += "Connection: keep-alive\r\n";
  }
  out += "\r\n";
  if (with_body) out += r.body;
  return out;
}

const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

}  // namespace

// ---------------------------------------------------------------------------
// Shared by the server and its connections.

class ConnBase;

// What an exchange's handle and its connection share.
struct ExchangeState {
  std::atomic<size_t> pending{0};
  std::atomic<bool> gone{false};
  std::atomic<bool> answered{false};  // Respond or End called (by the handler)
  // On the connection's strand only:
  std::function<void()> on_gone;
  std::function<void()> on_drained;
};

struct EventServer::Impl {
  EventServerOptions options;
  Handler* handler = nullptr;
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  tcp::acceptor acceptor{io};
  std::unique_ptr<asio::ssl::context> ssl;
  std::unique_ptr<asio::thread_pool> workers;
  std::vector<std::thread> loops;
  std::string address;
  asio::steady_timer accept_retry{io};

  std::atomic<bool> stopping{false};
  std::atomic<int64_t> accepted{0}, refused{0}, timed_out{0}, protocol_errors{0}, requests{0};

  std::mutex mu;  // guards the two below
  std::map<ConnBase*, std::weak_ptr<ConnBase>> conns;
  std::map<std::string, int> per_client;
  std::mutex stop_mu;
  bool stopped = false;

  void Accept();
  void OnAccept(const asio::error_code& ec, tcp::socket socket);
  // Counts a new connection from `client`; false if a limit refuses it.
  bool Admit(const std::string& client);
  void Release(const std::string& client);
};

// The connection as its exchange handle sees it (the transport is a
// template parameter of the implementation).
class ConnBase : public std::enable_shared_from_this<ConnBase> {
 public:
  explicit ConnBase(EventServer::Impl* server, Strand strand)
      : server_(server), strand_(std::move(strand)) {}
  virtual ~ConnBase() = default;
  virtual void Start() = 0;
  // On the strand: the handle's calls for exchange `x`.
  virtual void DoRespond(const std::shared_ptr<ExchangeState>& x, HttpResponse r) = 0;
  virtual void DoStart(const std::shared_ptr<ExchangeState>& x, HttpResponse head) = 0;
  virtual void DoWrite(const std::shared_ptr<ExchangeState>& x, std::string data) = 0;
  virtual void DoEnd(const std::shared_ptr<ExchangeState>& x) = 0;
  virtual void DoOnGone(const std::shared_ptr<ExchangeState>& x, std::function<void()> fn) = 0;
  // On the strand: the connection is closed now (the server stops).
  virtual void Kill() = 0;
  Strand& strand() { return strand_; }

 protected:
  EventServer::Impl* const server_;
  Strand strand_;
};

namespace {

class ExchangeHandle : public Exchange {
 public:
  ExchangeHandle(std::weak_ptr<ConnBase> conn, Strand strand, std::shared_ptr<ExchangeState> state)
      : conn_(std::move(conn)), strand_(std::move(strand)), state_(std::move(state)) {}
  ~ExchangeHandle() override {
    if (!state_->answered.load()) {
      HttpResponse r;
      r.status = 500;
      r.content_type = "text/plain";
      r.body = "the server dropped the request without an answer\n";
      r.close = true;
      Respond(std::move(r));
    }
  }

  void Respond(HttpResponse response) override {
    if (state_->answered.exchange(true)) return;
    Run([x = state_, r = std::move(response)](ConnBase& c) mutable {
      c.DoRespond(x, std::move(r));
    });
  }
  void StartStream(HttpResponse head) override {
    if (state_->answered.load()) return;
    Run([x = state_, h = std::move(head)](ConnBase& c) mutable { c.DoStart(x, std::move(h)); });
  }
  void Write(std::string data) override {
    if (data.empty() || state_->answered.load()) return;
    state_->pending += data.size();
    Run([x = state_, d = std::move(data)](ConnBase& c) mutable { c.DoWrite(x, std::move(d)); });
  }
  void End() override {
    if (state_->answered.exchange(true)) return;
    Run([x = state_](ConnBase& c) { c.DoEnd(x); });
  }
  size_t pending_bytes() const override { return state_->pending.load(); }
  void OnDrained(std::function<void()> fn) override {
    Run([x = state_, f = std::move(fn)](ConnBase&) mutable { x->on_drained = std::move(f); });
  }
  void OnGone(std::function<void()> fn) override {
    auto conn = conn_.lock();
    if (conn == nullptr) {
      // The connection is gone already (and so is its strand's owner).
      fn();
      return;
    }
    asio::post(strand_, [conn, x = state_, f = std::move(fn)]() mutable {
      conn->DoOnGone(x, std::move(f));
    });
  }
  bool gone() const override { return state_->gone.load(); }
  void Post(std::function<void()> fn) override {
    auto conn = conn_.lock();
    if (conn == nullptr) return;
    asio::post(strand_, [conn, f = std::move(fn)] { f(); });
  }

 private:
  template <class F>
  void Run(F&& f) {
    auto conn = conn_.lock();
    if (conn == nullptr) return;
    asio::post(strand_, [conn, f = std::forward<F>(f)]() mutable { f(*conn); });
  }

  std::weak_ptr<ConnBase> conn_;
  Strand strand_;
  std::shared_ptr<ExchangeState> state_;
};

using PlainStream = tcp::socket;
using TlsStream = asio::ssl::stream<tcp::socket>;

template <class Stream>
class Connection : public ConnBase {
 public:
  Connection(EventServer::Impl* server, Strand strand, Stream stream, std::string client)
      : ConnBase(server, strand),
        stream_(std::move(stream)),
        parser_(server->options.limits),
        client_(std::move(client)),
        deadline_(strand_),
        write_timer_(strand_),
        probe_timer_(strand_) {}

  ~Connection() override = default;

  void Start() override {
    asio::post(strand_, [self = Self()] { self->Begin(); });
  }

  void Kill() override { Gone(); }

  void DoRespond(const std::shared_ptr<ExchangeState>& x, HttpResponse r) override {
    if (x != current_ || closed_ || answered_) return;
    const bool keep = request_keep_alive_ && !r.close && !peer_eof_ && !server_->stopping.load();
    std::string out = WholeResponse(r, request_minor_, keep, !head_only_);
    x->pending += out.size();
    Queue(std::move(out));
    answered_ = true;
    after_ = keep ? After::kNext : After::kClose;
    Flush();
    MaybeFinishExchange();
  }

  void DoStart(const std::shared_ptr<ExchangeState>& x, HttpResponse head) override {
    if (x != current_ || closed_ || answered_ || response_started_) return;
    response_started_ = true;
    chunked_ = request_minor_ >= 1;
    stream_keep_ = chunked_ && request_keep_alive_ && !head.close;
    std::string out = StatusLine(request_minor_, head.status);
    AppendHeaders(head, &out);
    if (chunked_) out += "Transfer-Encoding: chunked\r\n";
    if (!stream_keep_) out += "Connection: close\r\n";
    out += "\r\n";
    x->pending += out.size();
    Queue(std::move(out));
    Flush();
  }

  void DoWrite(const std::shared_ptr<ExchangeState>& x, std::string data) override {
    if (x != current_ || closed_ || answered_ || !response_started_ || head_only_) {
      x->pending -= std::min(x->pending.load(), data.size());
      return;
    }
    if (chunked_) {
      std::string framed = absl::StrCat(HexSize(data.size()), "\r\n");
      x->pending += framed.size() + 2;
      Queue(std::move(framed));
      Queue(std::move(data));
      Queue("\r\n");
    } else {
      Queue(std::move(data));
    }
    Flush();
  }

  void DoEnd(const std::shared_ptr<ExchangeState>& x) override {
    if (x != current_ || closed_ || answered_) return;
    if (!response_started_) {
      // End without a head: an empty 200.
      HttpResponse r;
      r.content_type.clear();
      DoRespond(x, std::move(r));
      return;
    }
    if (chunked_ && !head_only_) {
      x->pending += 5;
      Queue("0\r\n\r\n");
    }
    answered_ = true;
    after_ = stream_keep_ && !peer_eof_ && !server_->stopping.load() ? After::kNext : After::kClose;
    Flush();
    MaybeFinishExchange();
  }

  void DoOnGone(const std::shared_ptr<ExchangeState>& x, std::function<void()> fn) override {
    if (x->gone.load() || closed_ || x != current_) {
      x->gone = true;
      fn();
      return;
    }
    x->on_gone = std::move(fn);
  }

 private:
  enum class Phase { kHandshake, kIdle, kHead, kBody, kBusy, kLinger };
  enum class After { kNone, kNext, kClose };

  std::shared_ptr<Connection> Self() {
    return std::static_pointer_cast<Connection>(shared_from_this());
  }

  tcp::socket& Socket() {
    if constexpr (std::is_same_v<Stream, TlsStream>) {
      return stream_.next_layer();
    } else {
      return stream_;
    }
  }

  void Begin() {
    if (server_->stopping.load()) {
      CloseNow();
      return;
    }
    if constexpr (std::is_same_v<Stream, TlsStream>) {
      phase_ = Phase::kHandshake;
      ArmDeadline(server_->options.tls_handshake_timeout_seconds);
      stream_.async_handshake(asio::ssl::stream_base::server,
                              asio::bind_executor(strand_, [self = Self()](asio::error_code ec) {
                                if (self->closed_) return;
                                if (ec) {
                                  self->CloseNow();
                                  return;
                                }
                                self->BeginFirstRequest();
                              }));
    } else {
      BeginFirstRequest();
    }
  }

  // The first request's head is due header_timeout after the connection
  // (or its handshake): a client that connects and sends nothing is cut
  // then, not after the longer keep-alive idle time.
  void BeginFirstRequest() {
    phase_ = Phase::kHead;
    ArmDeadline(server_->options.header_timeout_seconds);
    Read();
  }

  // --- reading ---

  void Read() {
    if (reading_ || closed_ || peer_eof_ || inbuf_.size() >= kMaxReadAhead) return;
    reading_ = true;
    stream_.async_read_some(
        asio::buffer(readbuf_),
        asio::bind_executor(strand_, [self = Self()](asio::error_code ec, size_t n) {
          self->OnRead(ec, n);
        }));
  }

  void OnRead(const asio::error_code& ec, size_t n) {
    reading_ = false;
    if (closed_) return;
    if (ec) {
      const bool eof = ec == asio::error::eof || ec == asio::ssl::error::stream_truncated;
      if (eof) {
        OnEof();
      } else {
        Gone();
      }
      return;
    }
    if (phase_ == Phase::kLinger) {
      lingered_ += n;
      if (lingered_ > kLingerBytes) {
        CloseNow();
      } else {
        Read();
      }
      return;
    }
    inbuf_.append(readbuf_.data(), n);
    Process();
    Read();
  }

  // The client shut its sending side: it may still wait for answers.
  void OnEof() {
    peer_eof_ = true;
    if (phase_ == Phase::kLinger || !exchange_active_) {
      // Between requests (or mid-request, which can no longer complete).
      CloseNow();
      return;
    }
    // A request is being answered. A client that only half-closed reads on;
    // one that closed entirely resets the connection at the next bytes it
    // receives, so an HTTP/1.1 client whose answer has not begun gets a 100
    // Continue (which it must skip) to tell the two apart.
    if (!response_started_ && !answered_ && request_minor_ >= 1) {
      Queue(kContinue);
      Flush();
    }
    PollForReset();
  }

  void PollForReset() {
    probe_timer_.expires_after(kGonePoll);
    probe_timer_.async_wait(asio::bind_executor(strand_, [self = Self()](asio::error_code ec) {
      if (ec || self->closed_ || !self->exchange_active_) return;
      pollfd p{self->Socket().native_handle(), POLLIN, 0};
      if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) {
        self->Gone();
        return;
      }
      self->PollForReset();
    }));
  }

  // Parses what was read, up to the next request to answer.
  void Process() {
    while (!closed_ && !exchange_active_ && phase_ != Phase::kLinger && !inbuf_.empty()) {
      if (!parser_.in_request() && phase_ == Phase::kIdle) {
        phase_ = Phase::kHead;
        ArmDeadline(server_->options.header_timeout_seconds);
      }
      const RequestParser::Result r = parser_.Feed(inbuf_);
      inbuf_.erase(0, r.consumed);
      switch (r.event) {
        case RequestParser::Event::kNeedMore:
          return;
        case RequestParser::Event::kHeaders: {
          std::optional<HttpResponse> refuse = server_->handler->Screen(parser_.head());
          request_minor_ = parser_.head().version_minor;
          if (refuse.has_value()) {
            // The body (if any) is not read: the connection cannot carry
            // another request.
            Refuse(std::move(*refuse));
            return;
          }
          if (parser_.head().expect_continue) {
            Queue(kContinue);
            Flush();
          }
          phase_ = Phase::kBody;
          ArmDeadline(server_->options.body_timeout_seconds);
          continue;
        }
        case RequestParser::Event::kRequest:
          Dispatch(parser_.TakeRequest());
          return;
        case RequestParser::Event::kError:
          ++server_->protocol_errors;
          request_minor_ = parser_.head().version_minor;
          Refuse(server_->handler->ErrorResponse(parser_.error_status(), parser_.error_message()));
          return;
      }
    }
  }

  // Answers `r` and closes after a lingering read.
  void Refuse(HttpResponse r) {
    deadline_gen_++;
    deadline_.cancel();
    Queue(WholeResponse(r, request_minor_, /*keep=*/false, /*with_body=*/true));
    exchange_active_ = true;  // nothing more is parsed
    answered_ = true;
    after_ = After::kClose;
    Flush();
    MaybeFinishExchange();
  }

  void Dispatch(HttpRequest request) {
    ++server_->requests;
    phase_ = Phase::kBusy;
    deadline_gen_++;
    deadline_.cancel();
    exchange_active_ = true;
    response_started_ = false;
    answered_ = false;
    after_ = After::kNone;
    request_keep_alive_ = request.keep_alive;
    request_minor_ = request.version_minor;
    head_only_ = request.method == "HEAD";
    request.remote_address = client_;
    current_ = std::make_shared<ExchangeState>();
    auto handle = std::make_shared<ExchangeHandle>(weak_from_this(), strand_, current_);
    Handler* handler = server_->handler;
    asio::post(*server_->workers,
               [handler, handle = std::move(handle), req = std::move(request)]() mutable {
                 handler->Handle(std::move(req), std::move(handle));
               });
    // Keep reading: a FIN or a reset during the answer is how a gone
    // client shows.
    Read();
  }

  // The answer is queued: once it is written, the next request (or the
  // close).
  void MaybeFinishExchange() {
    if (!exchange_active_ || !answered_ || writing_ || !outq_.empty() || closed_) return;
    exchange_active_ = false;
    probe_timer_.cancel();
    current_.reset();
    // A FIN read after the answer was queued (keep-alive decided then) still
    // ends the connection: no request can follow it, and Read() no longer
    // reads after a FIN, so nothing else would close it before the idle
    // timeout.
    if (after_ != After::kNext || peer_eof_) {
      Linger();
      return;
    }
    phase_ = Phase::kIdle;
    ArmDeadline(server_->options.idle_timeout_seconds);
    Process();
    Read();
  }

  // Half-closes our side and drops what the client still sends, for a
  // while, so that it reads the answer before the close (a close with
  // unread bytes would reset the connection and could destroy the answer
  // in the client's buffers).
  void Linger() {
    if (peer_eof_) {
      CloseNow();
      return;
    }
    phase_ = Phase::kLinger;
    asio::error_code ignored;
    Socket().shutdown(tcp::socket::shutdown_send, ignored);
    deadline_gen_++;
    const uint64_t gen = deadline_gen_;
    deadline_.expires_after(kLingerTime);
    deadline_.async_wait(asio::bind_executor(strand_, [self = Self(), gen](asio::error_code ec) {
      if (!ec && gen == self->deadline_gen_) self->CloseNow();
    }));
    inbuf_.clear();
    Read();
  }

  // --- deadlines ---

  void ArmDeadline(double seconds) {
    const uint64_t gen = ++deadline_gen_;
    deadline_.expires_after(Seconds(seconds));
    deadline_.async_wait(asio::bind_executor(strand_, [self = Self(), gen](asio::error_code ec) {
      if (ec || gen != self->deadline_gen_ || self->closed_) return;
      self->OnDeadline();
    }));
  }

  void OnDeadline() {
    switch (phase_) {
      case Phase::kHandshake:
        ++server_->timed_out;
        CloseNow();
        return;
      case Phase::kIdle:
        CloseNow();
        return;
      case Phase::kHead:
      case Phase::kBody: {
        ++server_->timed_out;
        const bool head = phase_ == Phase::kHead;
        if (head && !parser_.in_request()) {
          // Nothing was sent at all: nothing to answer.
          CloseNow();
          return;
        }
        Refuse(server_->handler->ErrorResponse(
            408, absl::StrCat("the request's ", head ? "head" : "body", " did not arrive within ",
                              head ? server_->options.header_timeout_seconds
                                   : server_->options.body_timeout_seconds,
                              " s")));
        return;
      }
      case Phase::kBusy:
      case Phase::kLinger:
        return;
    }
  }

  // --- writing ---

  void Queue(std::string bytes) {
    if (bytes.empty() || closed_) return;
    outq_.push_back(std::move(bytes));
  }

  void Flush() {
    if (writing_ || closed_ || outq_.empty()) return;
    writing_ = true;
    gather_.clear();
    size_t i = 0;
    for (const std::string& s : outq_) {
      if (i == kMaxGather) break;
      const size_t off = i == 0 ? front_offset_ : 0;
      gather_.emplace_back(s.data() + off, s.size() - off);
      ++i;
    }
    const uint64_t gen = ++write_gen_;
    write_timer_.expires_after(Seconds(server_->options.write_timeout_seconds));
    write_timer_.async_wait(asio::bind_executor(strand_, [self = Self(), gen](asio::error_code ec) {
      if (ec || gen != self->write_gen_ || !self->writing_ || self->closed_) return;
      ++self->server_->timed_out;
      self->Gone();
    }));
    stream_.async_write_some(
        gather_, asio::bind_executor(strand_, [self = Self()](asio::error_code ec, size_t n) {
          self->OnWrite(ec, n);
        }));
  }

  void OnWrite(const asio::error_code& ec, size_t n) {
    writing_ = false;
    ++write_gen_;
    write_timer_.cancel();
    if (closed_) return;
    if (ec) {
      Gone();
      return;
    }
    // Pop what was written.
    size_t left = n;
    while (left > 0 && !outq_.empty()) {
      const size_t avail = outq_.front().size() - front_offset_;
      if (left >= avail) {
        left -= avail;
        outq_.pop_front();
        front_offset_ = 0;
      } else {
        front_offset_ += left;
        left = 0;
      }
    }
    if (current_ != nullptr) current_->pending -= std::min(current_->pending.load(), n);
    if (!outq_.empty()) {
      Flush();
      return;
    }
    if (current_ != nullptr && current_->on_drained) {
      auto fn = current_->on_drained;  // may replace itself
      fn();
    }
    if (!closed_) MaybeFinishExchange();
  }

  // --- closing ---

  // The client is gone: its exchange learns it (CloseNow), the socket closes.
  void Gone() { CloseNow(); }

  void CloseNow() {
    if (closed_) return;
    closed_ = true;
    deadline_gen_++;
    write_gen_++;
    asio::error_code ignored;
    deadline_.cancel();
    write_timer_.cancel();
    probe_timer_.cancel();
    Socket().close(ignored);
    outq_.clear();
    server_->Release(client_);
    {
      std::lock_guard<std::mutex> lock(server_->mu);
      server_->conns.erase(this);
    }
    if (current_ != nullptr) {
      std::shared_ptr<ExchangeState> x = std::move(current_);
      x->gone = true;
      if (x->on_gone) {
        auto fn = std::move(x->on_gone);
        fn();
      }
    }
  }

  Stream stream_;
  RequestParser parser_;
  const std::string client_;
  std::array<char, kReadChunk> readbuf_;
  std::string inbuf_;
  asio::steady_timer deadline_;
  asio::steady_timer write_timer_;
  asio::steady_timer probe_timer_;
  uint64_t deadline_gen_ = 0;
  uint64_t write_gen_ = 0;
  Phase phase_ = Phase::kIdle;
  bool reading_ = false;
  bool writing_ = false;
  bool closed_ = false;
  bool peer_eof_ = false;
  size_t lingered_ = 0;
  std::deque<std::string> outq_;
  size_t front_offset_ = 0;
  std::vector<asio::const_buffer> gather_;

  // The request being answered.
  std::shared_ptr<ExchangeState> current_;
  bool exchange_active_ = false;
  bool response_started_ = false;
  bool answered_ = false;
  bool chunked_ = false;
  bool stream_keep_ = false;
  bool request_keep_alive_ = true;
  bool head_only_ = false;
  int request_minor_ = 1;
  After after_ = After::kNone;
};

// A connection refused over a limit: a 503 and a close, on its own.
void RefuseConnection(EventServer::Impl* server, tcp::socket socket) {
  HttpResponse r = server->handler->ErrorResponse(
      503, "the server has too many connections (from this client or in all); try again later");
  const std::string out = WholeResponse(r, 1, /*keep=*/false, /*with_body=*/true);
  asio::error_code ignored;
  socket.non_blocking(true, ignored);
  // One attempt without waiting: a client that cannot take 200 bytes at
  // once is not owed them.
  socket.write_some(asio::buffer(out), ignored);
  socket.shutdown(tcp::socket::shutdown_send, ignored);
  socket.close(ignored);
}

bool SplitHostPort(const std::string& listen, std::string* host, int* port) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), port) ||
      *port < 0 || *port > 65535) {
    return false;
  }
  *host = listen.substr(0, colon);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  return true;
}

}  // namespace

bool EventServer::Impl::Admit(const std::string& client) {
  std::lock_guard<std::mutex> lock(mu);
  if (static_cast<int>(conns.size()) >= options.max_connections) return false;
  int& n = per_client[client];
  if (options.max_connections_per_client > 0 && n >= options.max_connections_per_client) {
    if (n == 0) per_client.erase(client);
    return false;
  }
  ++n;
  return true;
}

void EventServer::Impl::Release(const std::string& client) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = per_client.find(client);
  if (it != per_client.end() && --it->second <= 0) per_client.erase(it);
}

void EventServer::Impl::Accept() {
  acceptor.async_accept(asio::make_strand(io), [this](asio::error_code ec, tcp::socket socket) {
    OnAccept(ec, std::move(socket));
  });
}

void EventServer::Impl::OnAccept(const asio::error_code& ec, tcp::socket socket) {
  if (stopping.load() || ec == asio::error::operation_aborted) return;
  if (ec) {
    // Out of file descriptors, say: not a reason to spin or to stop.
    Logger("daemon")->warn("http accept: {}", ec.message());
    accept_retry.expires_after(kAcceptRetry);
    accept_retry.async_wait([this](asio::error_code e) {
      if (!e) Accept();
    });
    return;
  }
  ++accepted;
  asio::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);  // SSE events are small and latency-bound
  // TCP keepalive: a client whose host vanished (no FIN, no reset) is found
  // within about a minute even while its request is being answered and
  // nothing is written to it (a long non-streaming generation): the
  // pending read then fails and the exchange is gone.
  socket.set_option(asio::socket_base::keep_alive(true), ignored);
  const int fd = socket.native_handle();
  const int idle = kKeepAliveIdleSeconds, interval = kKeepAliveIntervalSeconds,
            count = kKeepAliveProbes;
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
  const tcp::endpoint peer = socket.remote_endpoint(ignored);
  const std::string client = peer.address().to_string();
  if (!Admit(client)) {
    ++refused;
    if (ssl == nullptr) {
      RefuseConnection(this, std::move(socket));
    }  // (over TLS there is no way to say it before a handshake: just the close)
    Accept();
    return;
  }
  Strand strand = asio::make_strand(io);
  std::shared_ptr<ConnBase> conn;
  if (ssl != nullptr) {
    conn = std::make_shared<Connection<TlsStream>>(this, strand, TlsStream(std::move(socket), *ssl),
                                                   client);
  } else {
    conn = std::make_shared<Connection<PlainStream>>(this, strand, std::move(socket), client);
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    conns.emplace(conn.get(), conn);
  }
  conn->Start();
  Accept();
}

EventServer::EventServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

EventServer::~EventServer() { Stop(); }

absl::StatusOr<std::unique_ptr<EventServer>> EventServer::Start(EventServerOptions options,
                                                                Handler* handler) {
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(what); };
  if (options.loop_threads < 1 || options.handler_threads < 1) {
    return bad("http threads must be at least 1");
  }
  for (const auto& [name, v] :
       {std::pair<const char*, double>{"tls handshake timeout", options.tls_handshake_timeout_seconds},
        {"header timeout", options.header_timeout_seconds},
        {"body timeout", options.body_timeout_seconds},
        {"idle timeout", options.idle_timeout_seconds},
        {"write timeout", options.write_timeout_seconds}}) {
    if (!std::isfinite(v) || v <= 0 || v > 86400) {
      return bad(absl::StrCat("http ", name, " must be in (0, 86400] seconds, got ", v));
    }
  }
  if (options.max_connections < 1) return bad("http max connections must be at least 1");
  if (options.max_connections_per_client < 0) {
    return bad("http max connections per client must be 0 (no cap) or more");
  }
  if (options.limits.max_headers < 1 || options.limits.max_header_bytes < 256 ||
      options.limits.max_target_bytes < 64) {
    return bad("http header limits are too small (at least 1 field, 256 bytes, a 64-byte target)");
  }
  std::string host;
  int port = -1;
  if (!SplitHostPort(options.listen, &host, &port)) {
    return bad(absl::StrCat("http listen address '", options.listen, "' is not host:port"));
  }

  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->handler = handler;
  if (!options.tls_cert_file.empty() || !options.tls_key_file.empty()) {
    auto ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
    asio::error_code ec;
    ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                         asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                         asio::ssl::context::no_tlsv1_1,
                     ec);
    if (!ec) ctx->use_certificate_chain_file(options.tls_cert_file, ec);
    if (!ec) ctx->use_private_key_file(options.tls_key_file, asio::ssl::context::pem, ec);
    if (ec) {
      return bad(absl::StrCat("HTTPS: cannot use the TLS certificate '", options.tls_cert_file,
                              "' and key '", options.tls_key_file, "': ", ec.message()));
    }
    impl->ssl = std::move(ctx);
  }

  asio::error_code ec;
  tcp::resolver resolver(impl->io);
  auto endpoints = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
  if (ec || endpoints.empty()) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on '", options.listen, "' (HTTP API): ", ec.message()));
  }
  const tcp::endpoint ep = endpoints.begin()->endpoint();
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(kListenBacklog, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on '", options.listen, "' (HTTP API): ", ec.message()));
  }
  const int bound = impl->acceptor.local_endpoint(ec).port();
  impl->address = absl::StrCat(options.listen.substr(0, options.listen.rfind(':')), ":", bound);
  impl->workers = std::make_unique<asio::thread_pool>(options.handler_threads);
  impl->work.emplace(impl->io.get_executor());
  impl->Accept();
  Impl* raw = impl.get();
  for (int i = 0; i < options.loop_threads; ++i) {
    impl->loops.emplace_back([raw] { raw->io.run(); });
  }
  return std::unique_ptr<EventServer>(new EventServer(std::move(impl)));
}

const std::string& EventServer::address() const { return impl_->address; }
bool EventServer::tls() const { return impl_->ssl != nullptr; }

int EventServer::ListenBacklog() const {
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (!impl_->acceptor.is_open() ||
      getsockopt(impl_->acceptor.native_handle(), IPPROTO_TCP, TCP_INFO, &info, &len) != 0) {
    return -1;
  }
  // For a listening socket the kernel reports the accept queue's limit in
  // tcpi_sacked.
  return static_cast<int>(info.tcpi_sacked);
}

void EventServer::PostWork(std::function<void()> fn) {
  if (impl_->stopping.load()) return;
  asio::post(*impl_->workers, std::move(fn));
}

EventServerStats EventServer::stats() const {
  EventServerStats s;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    s.open_connections = static_cast<int64_t>(impl_->conns.size());
  }
  s.accepted = impl_->accepted.load();
  s.refused_over_limit = impl_->refused.load();
  s.timed_out = impl_->timed_out.load();
  s.protocol_errors = impl_->protocol_errors.load();
  s.requests = impl_->requests.load();
  return s;
}

void EventServer::Stop() {
  std::lock_guard<std::mutex> stop_lock(impl_->stop_mu);
  if (impl_->stopped) return;
  impl_->stopped = true;
  impl_->stopping = true;
  asio::post(impl_->io, [impl = impl_.get()] {
    asio::error_code ignored;
    impl->acceptor.close(ignored);
    impl->accept_retry.cancel();
  });
  std::vector<std::shared_ptr<ConnBase>> open;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (auto& [raw, weak] : impl_->conns) {
      if (auto c = weak.lock()) open.push_back(std::move(c));
    }
  }
  for (auto& c : open) asio::post(c->strand(), [c] { c->Kill(); });
  open.clear();
  // The loop runs the closes above (each exchange learns its client is
  // gone); then the handlers finish what they hold, their answers dropped.
  const auto give_up = SteadyClock::now() + std::chrono::seconds(5);
  for (;;) {
    bool empty;
    {
      std::lock_guard<std::mutex> lock(impl_->mu);
      empty = impl_->conns.empty();
    }
    if (empty || SteadyClock::now() > give_up) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  impl_->workers->join();
  impl_->work.reset();
  impl_->io.stop();
  for (std::thread& t : impl_->loops) t.join();
  impl_->loops.clear();
}

}  // namespace minfer::daemon::http
