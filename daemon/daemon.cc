#include "daemon/daemon.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <condition_variable>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/logging.h"
#include "engine/base/status.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"

namespace minfer::daemon {
namespace {

constexpr const char* kServices[] = {"", "minfer.v1.GenerationService", "minfer.v1.AdminService"};

// What reflection's list_services reports (both versions' own names too).
constexpr const char* kReflectedServices[] = {
    "minfer.v1.GenerationService", "minfer.v1.AdminService", "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"};

// How often Drain looks for CutDrainShort while it waits for streams.
constexpr auto kDrainPoll = std::chrono::milliseconds(20);

// gRPC reports a certificate and key that do not belong together only as a
// core error on stderr and a server that does not start; this says which
// files do not match. An encrypted key is refused (no passphrase prompt).
absl::Status CheckTlsPair(const std::string& cert_pem, const std::string& key_pem,
                          const std::string& cert_file, const std::string& key_file) {
  auto no_passphrase = [](char*, int, int, void*) { return 0; };
  BIO* cert_bio = BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  X509* cert = PEM_read_bio_X509(cert_bio, nullptr, no_passphrase, nullptr);
  BIO_free(cert_bio);
  BIO* key_bio = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio, nullptr, no_passphrase, nullptr);
  BIO_free(key_bio);
  absl::Status status;
  if (cert == nullptr) {
    status = absl::InvalidArgumentError(
        absl::StrCat("TLS certificate '", cert_file, "' holds no PEM certificate"));
  } else if (key == nullptr) {
    status = absl::InvalidArgumentError(absl::StrCat(
        "TLS key '", key_file, "' holds no PEM private key (or an encrypted one, which minferd "
        "cannot unlock)"));
  } else if (X509_check_private_key(cert, key) != 1) {
    status = absl::InvalidArgumentError(absl::StrCat(
        "TLS key '", key_file, "' does not match the certificate '", cert_file,
        "': the certificate's public key belongs to another private key"));
  }
  X509_free(cert);
  EVP_PKEY_free(key);
  ERR_clear_error();  // OpenSSL's error queue is per thread; leave it empty
  return status;
}

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

Daemon::~Daemon() {
  Shutdown();
  // A scrape must not read the slots while they are destroyed.
  if (metrics_ != nullptr) metrics_->SetDeviceSource(nullptr);
  if (slots_stopper_.joinable()) slots_stopper_.join();
}

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(DaemonConfig config,
                                                      DaemonTestHooks hooks) {
  RETURN_IF_ERROR(FinalizeConfig(&config));
  std::unique_ptr<Daemon> d(new Daemon(std::move(config), std::move(hooks)));
  RETURN_IF_ERROR(d->Init());
  return d;
}

absl::Status Daemon::Init() {
  metrics_ = std::make_unique<Metrics>();
  trimmer_ = std::make_unique<HeapTrimmer>();
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
  so.default_sleep_after_seconds = config_.sleep_after_seconds;
  if (!config_.kv_events.endpoint.empty()) {
    ASSIGN_OR_RETURN(kv_events_, KvEventPublisher::Create(config_.kv_events));
    so.kv_events = kv_events_.get();
  }
  slots_ = std::make_unique<SlotManager>(so, metrics_.get());
  // The GPUs' memory and models, read at each scrape.
  metrics_->SetDeviceSource([slots = slots_.get()] {
    std::vector<Metrics::DeviceFigures> out;
    for (const SlotManager::DeviceStatus& d : slots->Devices()) {
      Metrics::DeviceFigures f;
      f.device = absl::StrCat(d.provider, ":", d.info.index);
      f.total_bytes = d.info.total_bytes;
      f.free_bytes = d.info.free_bytes;
      f.pending_bytes = d.pending_bytes;
      f.models = static_cast<int64_t>(d.models.size());
      f.healthy = d.info.fault.empty();
      out.push_back(std::move(f));
    }
    return out;
  });
  if (!config_.tenants.empty()) {
    ASSIGN_OR_RETURN(tenants_, Tenants::Create(config_.tenants));
    tenants_->set_metrics(metrics_.get());
  }
  generation_ = std::make_unique<GenerationServiceImpl>(slots_.get(), config_.limits, &state_,
                                                        metrics_.get(), tenants_.get());
  admin_ = std::make_unique<AdminServiceImpl>(slots_.get(), &state_, metrics_.get(),
                                              config_.admin_token, tenants_.get());

  std::shared_ptr<grpc::ServerCredentials> creds;
  if (!config_.tls_cert_file.empty()) {
    ASSIGN_OR_RETURN(std::string cert, ReadFile(config_.tls_cert_file, "TLS certificate"));
    ASSIGN_OR_RETURN(std::string key, ReadFile(config_.tls_key_file, "TLS key"));
    RETURN_IF_ERROR(CheckTlsPair(cert, key, config_.tls_cert_file, config_.tls_key_file));
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
  reflection_v1_ = std::make_unique<ReflectionV1Service>(
      std::vector<std::string>(std::begin(kReflectedServices), std::end(kReflectedServices)));
  builder.RegisterService(reflection_v1_.get());
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
  if (!config_.http_listen.empty()) {
    HttpOptions ho;
    ho.server = config_.http;
    ho.server.listen = config_.http_listen;
    ho.server.tls_cert_file = config_.tls_cert_file;
    ho.server.tls_key_file = config_.tls_key_file;
    ho.api_keys = config_.api_keys;
    ASSIGN_OR_RETURN(http_, HttpServer::Start(ho, slots_.get(), config_.limits, &state_,
                                              metrics_.get(), tenants_.get()));
  }
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
  // A slot that has stopped, failed or gone has freed its model: give the
  // memory back once the model's last user lets go of it too.
  {
    // Under mu_, so that concurrent calls (from several slots' threads)
    // compare snapshots in the order they were taken.
    std::lock_guard<std::mutex> lock(mu_);
    std::map<const Slot*, std::weak_ptr<const runtime::Model>> holding;
    for (const auto& slot : slots_->List()) {
      const SlotState st = slot->state();
      if (st == SlotState::kStopped || st == SlotState::kFailed) continue;
      std::weak_ptr<const runtime::Model>& model = holding[slot.get()];
      if (auto it = holding_.find(slot.get()); it != holding_.end()) model = it->second;
      if (std::shared_ptr<const runtime::Model> m = slot->model()) model = m;
    }
    for (const auto& [slot, model] : holding_) {
      if (holding.count(slot) == 0) trimmer_->Watch(model);
    }
    holding_.swap(holding);
  }

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
      if (AcceptsRequests((*slot)->state())) {
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
  // Models on a faulted GPU (a poisoned CUDA context) fail every request:
  // NOT_SERVING, while the other GPUs' models go on.
  std::set<std::string> on_faulted;
  for (const SlotManager::DeviceStatus& d : slots_->Devices()) {
    if (!d.info.fault.empty()) on_faulted.insert(d.models.begin(), d.models.end());
  }
  for (const auto& slot : slots_->List()) {
    // A sleeping model serves on demand: the request wakes it (a readiness
    // probe must not take the replica out of its pool for that).
    const bool serving =
        AcceptsRequests(slot->state()) && on_faulted.count(slot->name()) == 0;
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
  // In slices, so that CutDrainShort ends the wait.
  bool drained = false;
  while (!drained && !drain_cut_.load() && std::chrono::steady_clock::now() < deadline) {
    drained =
        state_.WaitForStreams(std::min(deadline, std::chrono::steady_clock::now() + kDrainPoll));
  }
  if (drain_cut_.load() && !drained) {
    r.cancelled = state_.streams();
  } else if (!drained && !state_.WaitForStreams(deadline)) {
    r.cancelled = state_.streams();
    Logger("daemon")->warn("drain timeout: cancelling {} streams", r.cancelled);
    slots_->CancelAll(absl::UnavailableError(absl::StrCat(
        "the server is shutting down: the stream was cancelled after the drain timeout of ",
        timeout.count(), " s")));
    // A cancelled sequence finishes within one step; allow for a long
    // prefill in progress (unless the drain is cut short meanwhile).
    const auto grace = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!drain_cut_.load() && std::chrono::steady_clock::now() < grace &&
           !state_.WaitForStreams(std::min(grace, std::chrono::steady_clock::now() + kDrainPoll))) {
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Logger("daemon")->info("drained in {:.2f} s ({} of {} streams cancelled)", r.seconds,
                         r.cancelled, r.streams_at_start);
  return r;
}

void Daemon::CutDrainShort(const std::string& why) {
  drain_cut_.store(true);
  state_.SetDraining();
  Logger("daemon")->warn("{}: cancelling {} open streams and stopping now", why, state_.streams());
  if (slots_ != nullptr) {
    slots_->CancelAll(absl::UnavailableError(absl::StrCat("the server is shutting down: ", why)));
  }
}

bool Daemon::Shutdown(std::optional<std::chrono::duration<double>> slots_timeout) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return shutdown_complete_;
    shut_down_ = true;
  }
  state_.SetDraining();
  // Slots first: that finishes every stream and unload/knob call waiting on
  // a slot, so the server's shutdown below has no call left that only a
  // slot could end. On a thread of its own, so that a load stuck in I/O
  // (which Slot::Stop waits for) cannot hold the shutdown past the timeout.
  bool complete = true;
  if (slots_ != nullptr) {
    std::vector<std::string> loading;
    for (const auto& slot : slots_->List()) {
      if (slot->state() == SlotState::kLoading) {
        loading.push_back(absl::StrCat("'", slot->name(), "' (", slot->Status().config.path, ")"));
      }
    }
    auto done = std::make_shared<std::pair<std::mutex, std::condition_variable>>();
    auto stopped = std::make_shared<bool>(false);
    slots_stopper_ = std::thread([this, done, stopped] {
      slots_->Shutdown();
      std::lock_guard<std::mutex> lock(done->first);
      *stopped = true;
      done->second.notify_all();
    });
    {
      std::unique_lock<std::mutex> lock(done->first);
      if (slots_timeout.has_value()) {
        complete = done->second.wait_for(lock, *slots_timeout, [&] { return *stopped; });
      } else {
        done->second.wait(lock, [&] { return *stopped; });
      }
    }
    if (complete) {
      slots_stopper_.join();
    } else {
      Logger("daemon")->error(
          "shutdown: the slots did not stop within {:.1f} s (loads in progress: {}); stopping the "
          "server without them",
          slots_timeout->count(), loading.empty() ? "none" : absl::StrJoin(loading, ", "));
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_complete_ = complete;
  }
  if (server_ != nullptr) {
    // Streams are over by now; what may remain are short unary calls. The
    // deadline also bounds the wait for idle client connections, which
    // gRPC otherwise holds open until it (then cancels).
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    server_->Wait();
  }
  // Its streams ended with the slots; what remains are idle keep-alive
  // connections.
  if (http_ != nullptr) http_->Stop();
  // gRPC may still be running finished streams' OnDone on its own threads
  // (after Wait returned): their cleanup uses the metrics and the slots,
  // which the destructor frees next.
  if (!state_.WaitForReactors(std::chrono::steady_clock::now() + std::chrono::seconds(5))) {
    Logger("daemon")->error("shutdown: gRPC stream callbacks still running after 5 s");
  }
  Logger("daemon")->info(complete ? "minferd stopped" : "minferd stopped (slots still stopping)");
  return complete;
}

}  // namespace minfer::daemon
