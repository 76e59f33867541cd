// Daemon: minferd assembled — the slot manager, the gRPC server with the
// generation and admin services, standard health checking and reflection,
// and the metrics exposer — with the shutdown sequence. main.cc adds flags
// and signals; tests run it in-process on loopback ports.
//
// The OpenAI-compatible HTTP API (http_server.h), when http_listen is set,
// serves the same slots beside gRPC, with the same TLS pair.
//
// Health (grpc.health.v1): "" (overall) and the two API services are
// SERVING from start until the drain; each model name and alias is SERVING
// while its model is READY and NOT_SERVING otherwise; everything turns
// NOT_SERVING when the drain begins. Reflection: grpc.reflection.v1 and
// v1alpha.
//
// Memory: whenever a slot has freed its model (unloaded, or failed to
// load), the daemon hands the allocator's free memory back to the system
// once the model is gone (HeapTrimmer), so that a daemon which loads and
// unloads models all day keeps a flat resident size.
//
// Thread-safe.
#ifndef MINFER_DAEMON_DAEMON_H_
#define MINFER_DAEMON_DAEMON_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/config.h"
#include "daemon/grpc/admin_service.h"
#include "daemon/grpc/generation_service.h"
#include "daemon/grpc/reflection_v1.h"
#include "daemon/http/http_server.h"
#include "daemon/serving/heap_trim.h"
#include "daemon/serving/kv_events.h"
#include "daemon/serving/metrics.h"
#include "daemon/serving/serving_state.h"
#include "daemon/serving/slot_manager.h"
#include "grpcpp/grpcpp.h"

namespace minfer::daemon {

// Seams for tests.
struct DaemonTestHooks {
  // SlotManagerOptions::before_load.
  std::function<void(const std::string& name)> before_model_load;
};

struct DrainResult {
  int64_t streams_at_start = 0;  // Generate streams open when the drain began
  int64_t cancelled = 0;         // still open at the timeout, then cancelled
  double seconds = 0;
};

class Daemon {
 public:
  // Binds the gRPC, metrics and HTTP addresses (port 0 picks a free port), starts
  // serving, and starts loading the configured models in the background.
  // Errors: the config is invalid, an address cannot be bound, a TLS file
  // is unreadable or holds no PEM certificate / key, or the key is not the
  // certificate's (INVALID_ARGUMENT naming both files).
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(DaemonConfig config,
                                                       DaemonTestHooks hooks = {});
  // Shutdown(), then waits for slots that Shutdown left stopping.
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // "host:port" actually bound.
  const std::string& address() const { return address_; }
  // "" when metrics are off.
  std::string metrics_address() const { return metrics_->exposer_address(); }
  // The OpenAI-compatible HTTP API's "host:port"; "" when it is off.
  std::string http_address() const { return http_ != nullptr ? http_->address() : ""; }
  const HttpServer* http_server() const { return http_.get(); }  // null when off
  const Tenants* tenants() const { return tenants_.get(); }       // null: none configured
  const DaemonConfig& config() const { return config_; }
  SlotManager& slots() { return *slots_; }
  Metrics& metrics() { return *metrics_; }

  // Stops accepting generations and loads (UNAVAILABLE), turns health
  // NOT_SERVING, waits up to `timeout` for open Generate streams to finish,
  // then cancels the rest (they end with UNAVAILABLE after a last message
  // whose finish reason is "cancelled").
  // Returns at once after CutDrainShort.
  DrainResult Drain(std::chrono::duration<double> timeout);

  // Ends a Drain in progress now (minferd's second SIGTERM/SIGINT):
  // cancels every open stream with UNAVAILABLE naming `why`, as the drain
  // timeout would, and Drain returns without waiting for them to end; a
  // later Drain returns at once. Thread-safe; the server still shuts down
  // cleanly afterwards.
  void CutDrainShort(const std::string& why);

  // Stops every slot, then the gRPC and HTTP servers and the metrics
  // exposer.
  // Stopping a slot waits for a load in progress; with `slots_timeout`,
  // Shutdown waits that long for the slots, then logs which loads are
  // still running, shuts the server down anyway and returns false: the
  // slots go on stopping on a thread of their own, which the destructor
  // joins (a process that is exiting need not wait for a load stuck in
  // I/O: it can exit without destroying the Daemon). True when everything
  // stopped. Idempotent (a second call returns the first's result).
  bool Shutdown(std::optional<std::chrono::duration<double>> slots_timeout = std::nullopt);

 private:
  Daemon(DaemonConfig config, DaemonTestHooks hooks);
  absl::Status Init();
  // After any slot or alias change: health statuses, aliases from the
  // config whose model just became ready, and a heap trim once a slot has
  // let go of its model.
  void OnChange();

  DaemonConfig config_;
  const DaemonTestHooks hooks_;
  std::unique_ptr<Metrics> metrics_;
  // Before slots_: slots that stop late (the destructor) still reach it.
  std::unique_ptr<HeapTrimmer> trimmer_;
  std::unique_ptr<KvEventPublisher> kv_events_;  // --kv-events; before slots_
  std::unique_ptr<SlotManager> slots_;
  ServingState state_;
  std::unique_ptr<Tenants> tenants_;  // null: none configured
  std::unique_ptr<GenerationServiceImpl> generation_;
  std::unique_ptr<AdminServiceImpl> admin_;
  std::unique_ptr<ReflectionV1Service> reflection_v1_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::unique_ptr<HttpServer> http_;  // null when off

  std::atomic<bool> drain_cut_{false};  // CutDrainShort was called
  // Runs SlotManager::Shutdown (joined by the destructor).
  std::thread slots_stopper_;

  std::mutex mu_;
  bool draining_ = false;      // guarded by mu_ (health frozen)
  bool shut_down_ = false;     // guarded by mu_
  bool shutdown_complete_ = false;  // guarded by mu_: what Shutdown returned
  // Slots that are not stopped or failed, with their model once loaded;
  // guarded by mu_.
  std::map<const Slot*, std::weak_ptr<const runtime::Model>> holding_;
  std::set<std::string> health_names_;  // guarded by mu_: names ever reported
  std::vector<std::pair<std::string, std::string>> pending_aliases_;  // guarded by mu_
};

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_DAEMON_H_
