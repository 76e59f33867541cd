// SlotManager: the daemon's model lifecycle, independent of gRPC (the
// services translate to and from it). Owns the slots by name, the alias
// table and the memory budget, and a lifecycle thread that reaps unloaded
// slots (joins their threads) off the callers' threads.
//
// Loads run on the new slot's own thread and unloads drain on the slot's
// thread, so the manager never blocks on either and other slots keep
// serving throughout.
//
// Thread-safe. Callbacks (the change listener, unload completions) run with
// no manager lock held, on a slot's thread or the lifecycle thread; they must
// not block.
#ifndef MINFER_DAEMON_SERVING_SLOT_MANAGER_H_
#define MINFER_DAEMON_SERVING_SLOT_MANAGER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/serving/aliases.h"
#include "daemon/serving/memory.h"
#include "daemon/serving/metrics.h"
#include "daemon/serving/sequence.h"
#include "daemon/serving/slot.h"
#include "engine/runtime/device_backend.h"

namespace minfer::daemon {

struct SlotManagerOptions {
  uint64_t memory_limit = 0;  // 0: the host's available memory
  // Used for LoadModel fields left at 0.
  int64_t default_n_ctx = 4096;
  int32_t default_parallel = 16;
  int32_t default_queue_size = 16;
  // Used for UnloadModel without a drain timeout.
  std::chrono::duration<double> default_drain_timeout = std::chrono::seconds(30);
  // Tests: Slot::Hooks::before_load of every slot.
  std::function<void(const std::string& name)> before_load;
  // Tests: Slot::Hooks::make_loader of every slot.
  std::function<std::unique_ptr<ModelLoader>(const SlotConfig&)> make_loader;
  // Used for LoadModel's sleep_after_seconds left at 0 (0: never).
  double default_sleep_after_seconds = 0;
  // KV-cache events of the models (null: none); must outlive the manager.
  KvEventPublisher* kv_events = nullptr;
};

// Checks a model or alias name: [A-Za-z0-9._-], 1 to 64 characters, not a
// name the health service uses for the API services. INVALID_ARGUMENT names
// `field`.
absl::Status ValidateServingName(const std::string& name, const std::string& field);

class SlotManager {
 public:
  // `metrics` may be null; it must outlive the manager.
  SlotManager(SlotManagerOptions options, Metrics* metrics);
  // Shutdown().
  ~SlotManager();
  SlotManager(const SlotManager&) = delete;
  SlotManager& operator=(const SlotManager&) = delete;

  // Called after any slot state or alias change (for health reporting).
  // Set it before the first Load.
  void SetChangeListener(std::function<void()> listener);

  // Validates `config` (zeros take the defaults) and starts loading.
  // INVALID_ARGUMENT names the bad field; ALREADY_EXISTS when the name is
  // taken by a model that has not failed, or by an alias (a FAILED model of
  // that name is replaced); UNAVAILABLE after Shutdown.
  absl::StatusOr<std::shared_ptr<Slot>> Load(SlotConfig config);

  // Starts unloading model `name` (not an alias). Drains for `drain_timeout`
  // (default: the options'), or cancels at once with `cancel`. `done` runs
  // on the lifecycle thread once the slot's memory is freed and it is gone
  // from the manager. NOT_FOUND, INVALID_ARGUMENT (an alias),
  // FAILED_PRECONDITION (loading, already unloading, or an alias points at
  // it).
  absl::Status Unload(const std::string& name,
                      std::optional<std::chrono::duration<double>> drain_timeout, bool cancel,
                      std::function<void(const UnloadResult&)> done);

  // The slot serving `name` (a model or an alias, resolved once); sets
  // *model to the model name. NOT_FOUND names what is missing.
  absl::StatusOr<std::shared_ptr<Slot>> Find(const std::string& name,
                                             std::string* model = nullptr) const;

  // Builds a sequence for the slot serving `name` with `make` (which may
  // tokenize with the slot's model) and submits it. If the slot started
  // unloading in between and `name` is an alias that has since been
  // re-pointed, it retries on the new target, so alias switches never fail
  // a request.
  using SequenceFactory = std::function<absl::StatusOr<std::shared_ptr<Sequence>>(
      Slot& slot, const std::string& model)>;
  absl::StatusOr<std::shared_ptr<Sequence>> Submit(const std::string& name,
                                                   const SequenceFactory& make);

  // Slots sorted by name.
  std::vector<std::shared_ptr<Slot>> List() const;

  // Aliases. SetAlias: INVALID_ARGUMENT (bad alias name, or the target is
  // an alias), ALREADY_EXISTS (a model has that name), NOT_FOUND (no such
  // model), FAILED_PRECONDITION (the model is not READY,
  // SLEEPING or WAKING). Returns the
  // previous target, if any.
  absl::StatusOr<std::optional<std::string>> SetAlias(const std::string& alias,
                                                      const std::string& model);
  absl::Status DeleteAlias(const std::string& alias);
  std::vector<std::pair<std::string, std::string>> ListAliases() const;
  std::vector<std::string> AliasesOf(const std::string& model) const;

  // Cancels every queued and running sequence of every slot.
  void CancelAll(const absl::Status& reason);
  // Sequences queued or running, over all slots.
  int32_t InFlight() const;

  MemoryBudget& budget() { return budget_; }
  const DeviceBudget& device_budget() const { return device_budget_; }

  // The GPUs of the linked device backends (by provider, then index), each
  // with what loads in progress reserve there and the models placed on it
  // (sorted). Asking may initialize the devices.
  struct DeviceStatus {
    std::string provider;  // "cuda"
    runtime::DeviceInfo info;
    uint64_t pending_bytes = 0;
    std::vector<std::string> models;
  };
  std::vector<DeviceStatus> Devices() const;
  const SlotManagerOptions& options() const { return options_; }

  // Refuses new loads, stops every slot (cancelling what runs, waiting for
  // loads in progress), and stops the lifecycle thread. Idempotent.
  void Shutdown();

 private:
  void Post(std::function<void()> task);
  void LifecycleLoop();
  void NotifyChange();

  const SlotManagerOptions options_;
  Metrics* const metrics_;
  MemoryBudget budget_;
  DeviceBudget device_budget_;
  AliasTable aliases_;
  std::function<void()> listener_;

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Slot>> slots_;  // guarded by mu_
  bool shutdown_ = false;                               // guarded by mu_

  std::mutex tasks_mu_;
  std::condition_variable tasks_cv_;
  std::deque<std::function<void()>> tasks_;  // guarded by tasks_mu_
  bool tasks_stop_ = false;                  // guarded by tasks_mu_
  std::thread lifecycle_;
};

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_SERVING_SLOT_MANAGER_H_
