#include "daemon/daemon.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "engine/base/logging.h"
#include "engine/base/status.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"

namespace minfer::daemon {
namespace {

constexpr const char* kServices[] = {"", "minfer.v1.GenerationService", "minfer.v1.AdminService"};

absl::StatusOr<std::string> ReadFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", what, " '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

Daemon::Daemon(DaemonConfig config, DaemonTestHooks hooks)
    : config_(std::move(config)), hooks_(std::move(hooks)) {}

Daemon::~Daemon() { Shutdown(); }

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(DaemonConfig config,
                                                      DaemonTestHooks hooks) {
  RETURN_IF_ERROR(FinalizeConfig(&config));
  std::unique_ptr<Daemon> d(new Daemon(std::move(config), std::move(hooks)));
  RETURN_IF_ERROR(d->Init());
  return d;
}

absl::Status Daemon::Init() {
  metrics_ = std::make_unique<Metrics>();
  if (!config_.metrics_listen.empty()) {
    RETURN_IF_ERROR(metrics_->StartExposer(config_.metrics_listen));
  }
  SlotManagerOptions so;
  so.memory_limit = config_.memory_limit;
  so.default_n_ctx = config_.default_n_ctx;
  so.default_parallel = config_.default_parallel;
  so.default_queue_size = config_.default_queue_size;
  so.default_drain_timeout = std::chrono::duration<double>(config_.drain_timeout_seconds);
  so.before_load = hooks_.before_model_load;
  slots_ = std::make_unique<SlotManager>(so, metrics_.get());
  generation_ = std::make_unique<GenerationServiceImpl>(slots_.get(), config_.limits, &state_,
                                                        metrics_.get());
  admin_ = std::make_unique<AdminServiceImpl>(slots_.get(), &state_, metrics_.get(),
                                              config_.admin_token);

  std::shared_ptr<grpc::ServerCredentials> creds;
  if (!config_.tls_cert_file.empty()) {
    ASSIGN_OR_RETURN(std::string cert, ReadFile(config_.tls_cert_file, "TLS certificate"));
    ASSIGN_OR_RETURN(std::string key, ReadFile(config_.tls_key_file, "TLS key"));
    grpc::SslServerCredentialsOptions opts;
    opts.pem_key_cert_pairs.push_back({key, cert});
    creds = grpc::SslServerCredentials(opts);
  } else {
    creds = grpc::InsecureServerCredentials();
    if (!config_.admin_token.empty() && config_.listen.rfind("127.0.0.1:", 0) != 0 &&
        config_.listen.rfind("localhost:", 0) != 0 && config_.listen.rfind("[::1]:", 0) != 0) {
      Logger("daemon")->warn(
          "an admin token is set but {} is served without TLS: the token crosses the network "
          "in clear text",
          config_.listen);
    }
  }

  // Process-wide switches; they apply to servers built afterwards.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(config_.listen, creds, &port);
  builder.RegisterService(generation_.get());
  builder.RegisterService(admin_.get());
  // Keepalive pings find clients that vanished without closing their
  // connection, so their streams are cancelled and their sequences freed.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on '", config_.listen, "'"));
  }
  address_ = absl::StrCat(config_.listen.substr(0, config_.listen.rfind(':')), ":", port);
  for (const char* s : kServices) server_->GetHealthCheckService()->SetServingStatus(s, true);
  Logger("daemon")->info("minferd serving gRPC on {}{}, metrics on {}", address_,
                         config_.tls_cert_file.empty() ? "" : " (TLS)",
                         metrics_address().empty() ? "(off)" : metrics_address());

  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_aliases_ = config_.aliases;
  }
  slots_->SetChangeListener([this] { OnChange(); });
  for (const SlotConfig& m : config_.models) {
    absl::StatusOr<std::shared_ptr<Slot>> slot = slots_->Load(m);
    if (!slot.ok()) return Annotate(slot.status(), absl::StrCat("model '", m.name, "'"));
  }
  return absl::OkStatus();
}

void Daemon::OnChange() {
  // Aliases from the config go live once their model is ready.
  std::vector<std::pair<std::string, std::string>> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = pending_aliases_.begin(); it != pending_aliases_.end();) {
      absl::StatusOr<std::shared_ptr<Slot>> slot = slots_->Find(it->second);
      // Not found yet: Init has not started that model's load.
      if (!slot.ok() || (*slot)->state() == SlotState::kLoading) {
        ++it;
        continue;
      }
      if ((*slot)->state() == SlotState::kReady) {
        ready.push_back(*it);
      } else {
        Logger("daemon")->error("alias '{}' not set: model '{}' did not load", it->first,
                                it->second);
      }
      it = pending_aliases_.erase(it);
    }
  }
  for (const auto& [alias, model] : ready) {
    absl::StatusOr<std::optional<std::string>> s = slots_->SetAlias(alias, model);
    if (!s.ok()) Logger("daemon")->error("alias '{}': {}", alias, s.status());
  }

  std::lock_guard<std::mutex> lock(mu_);
  if (draining_ || shut_down_ || server_ == nullptr) return;
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  std::set<std::string> now;
  std::map<std::string, bool> ready_by_model;
  for (const auto& slot : slots_->List()) {
    const bool serving = slot->state() == SlotState::kReady;
    ready_by_model[slot->name()] = serving;
    health->SetServingStatus(slot->name(), serving);
    now.insert(slot->name());
  }
  for (const auto& [alias, model] : slots_->ListAliases()) {
    health->SetServingStatus(alias, ready_by_model[model]);
    now.insert(alias);
  }
  // Names that are gone keep answering, as NOT_SERVING (the health service
  // cannot forget a name).
  for (const std::string& name : health_names_) {
    if (now.count(name) == 0) health->SetServingStatus(name, false);
  }
  health_names_.insert(now.begin(), now.end());
}

DrainResult Daemon::Drain(std::chrono::duration<double> timeout) {
  const auto t0 = std::chrono::steady_clock::now();
  DrainResult r;
  state_.SetDraining();
  metrics_->SetDraining(true);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!draining_ && server_ != nullptr) {
      draining_ = true;
      // Every name NOT_SERVING, and frozen so.
      server_->GetHealthCheckService()->Shutdown();
    }
  }
  r.streams_at_start = state_.streams();
  Logger("daemon")->info("draining: {} streams open, waiting up to {:.1f} s", r.streams_at_start,
                         timeout.count());
  const auto deadline = t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout);
  if (!state_.WaitForStreams(deadline)) {
    r.cancelled = state_.streams();
    Logger("daemon")->warn("drain timeout: cancelling {} streams", r.cancelled);
    slots_->CancelAll(absl::UnavailableError(absl::StrCat(
        "the server is shutting down: the stream was cancelled after the drain timeout of ",
        timeout.count(), " s")));
    // A cancelled sequence finishes within one step; allow for a long
    // prefill in progress.
    state_.WaitForStreams(std::chrono::steady_clock::now() + std::chrono::seconds(30));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Logger("daemon")->info("drained in {:.2f} s ({} of {} streams cancelled)", r.seconds,
                         r.cancelled, r.streams_at_start);
  return r;
}

void Daemon::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  state_.SetDraining();
  // Slots first: that finishes every stream and unload/knob call waiting on
  // a slot, so the server's shutdown below has no call left that only a
  // slot could end.
  if (slots_ != nullptr) slots_->Shutdown();
  if (server_ != nullptr) {
    // Streams are over by now; what may remain are short unary calls. The
    // deadline also bounds the wait for idle client connections, which
    // gRPC otherwise holds open until it (then cancels).
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    server_->Wait();
  }
  Logger("daemon")->info("minferd stopped");
}

}  // namespace minfer::daemon
