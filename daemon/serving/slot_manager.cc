#include "daemon/serving/slot_manager.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/knobs.h"
#include "engine/base/logging.h"
#include "engine/base/status.h"

namespace minfer::daemon {

absl::Status ValidateServingName(const std::string& name, const std::string& field) {
  if (name.empty() || name.size() > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " must be 1 to 64 characters, got '", name, "'"));
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, " may use only letters, digits, '.', '_' and '-', got '", name, "'"));
    }
  }
  // The health service reports these services under their own names.
  if (name.rfind("minfer.v1.", 0) == 0 || name.rfind("grpc.", 0) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " '", name, "' is reserved (it names a gRPC service)"));
  }
  return absl::OkStatus();
}

SlotManager::SlotManager(SlotManagerOptions options, Metrics* metrics)
    : options_(std::move(options)), metrics_(metrics), budget_(options_.memory_limit) {
  lifecycle_ = std::thread([this] { LifecycleLoop(); });
}

SlotManager::~SlotManager() { Shutdown(); }

void SlotManager::SetChangeListener(std::function<void()> listener) {
  listener_ = std::move(listener);
}

void SlotManager::NotifyChange() {
  if (listener_) listener_();
}

void SlotManager::Post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(tasks_mu_);
    tasks_.push_back(std::move(task));
  }
  tasks_cv_.notify_one();
}

void SlotManager::LifecycleLoop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(tasks_mu_);
      tasks_cv_.wait(lock, [&] { return tasks_stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopped and drained
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

absl::StatusOr<std::shared_ptr<Slot>> SlotManager::Load(SlotConfig config) {
  RETURN_IF_ERROR(ValidateServingName(config.name, "name"));
  if (config.path.empty()) return absl::InvalidArgumentError("path must not be empty");
  if (config.backend.empty()) config.backend = "auto";
  if (config.backend != "auto" && config.backend != "cpu" && config.backend != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("backend must be cpu, cuda or auto, got '", config.backend, "'"));
  }
  if (config.n_ctx < 0) {
    return absl::InvalidArgumentError(absl::StrCat("n_ctx must be >= 0, got ", config.n_ctx));
  }
  if (config.parallel < 0 || config.parallel > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel must be in [0, 256], got ", config.parallel));
  }
  if (config.queue_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("queue_size must be >= 0, got ", config.queue_size));
  }
  if (config.kv_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_tokens must be >= 0, got ", config.kv_tokens));
  }
  if (config.n_ctx == 0) config.n_ctx = options_.default_n_ctx;
  if (config.parallel == 0) config.parallel = options_.default_parallel;
  if (config.queue_size == 0) config.queue_size = options_.default_queue_size;
  RETURN_IF_ERROR(ParseKvType(config.kv_type).status());
  RETURN_IF_ERROR(CheckChatParsers(config));
  RETURN_IF_ERROR(CheckSpeculative(&config));
  if (config.sleep_level == 0) config.sleep_level = 1;
  if (config.sleep_after_seconds == 0) config.sleep_after_seconds = options_.default_sleep_after_seconds;
  RETURN_IF_ERROR(CheckSleepAndEvents(config));
  // Resolved here: "on" only when the daemon publishes events at all.
  config.kv_events = options_.kv_events != nullptr && config.kv_events != "off" ? "on" : "off";
  if (absl::Status s = KnobRegistry::Global().ValidateOverrides(config.knobs); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("knobs: ", s.message()));
  }

  // A FAILED slot of this name is replaced: take it out first (outside the
  // lock, since removing it calls back into listeners).
  std::shared_ptr<Slot> failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_) return absl::UnavailableError("the server is shutting down");
    auto it = slots_.find(config.name);
    if (it != slots_.end() && it->second->state() == SlotState::kFailed) {
      failed = it->second;
      slots_.erase(it);
    }
  }
  if (failed != nullptr) {
    (void)failed->BeginUnload(Clock::now(), absl::OkStatus(), nullptr);
    failed.reset();  // its thread has ended; this joins at once
  }

  std::shared_ptr<Slot> slot;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_) return absl::UnavailableError("the server is shutting down");
    if (auto it = slots_.find(config.name); it != slots_.end()) {
      return absl::AlreadyExistsError(absl::StrCat("model '", config.name, "' is already ",
                                                   SlotStateName(it->second->state())));
    }
    if (auto target = aliases_.Resolve(config.name)) {
      return absl::AlreadyExistsError(
          absl::StrCat("'", config.name, "' is an alias (of model '", *target, "')"));
    }
    Logger("daemon")->info(
        "model '{}': loading {} (backend {}, {} sequences, n_ctx {}, KV pool {} tokens, queue "
        "{}{})",
        config.name, config.path, config.backend, config.parallel, config.n_ctx,
        config.kv_tokens > 0 ? absl::StrCat(config.kv_tokens)
                             : absl::StrCat(config.parallel, " x n_ctx"),
        config.queue_size,
        config.spec.empty() ? std::string()
        : config.spec == "off"
            ? std::string(", speculation off")
            : absl::StrCat(", speculation ", config.spec, " k ", config.spec_k,
                           config.draft.empty() ? "" : " with draft ", config.draft));
    Slot::Hooks hooks;
    hooks.budget = &budget_;
    hooks.device_budget = &device_budget_;
    hooks.metrics = metrics_;
    hooks.on_state_change = [this](Slot&) { NotifyChange(); };
    hooks.before_load = options_.before_load;
    hooks.kv_events = options_.kv_events;
    hooks.make_loader = options_.make_loader;
    slot = Slot::Start(std::move(config), std::move(hooks));
    slots_[slot->name()] = slot;
  }
  NotifyChange();
  return slot;
}

absl::Status SlotManager::Unload(const std::string& name,
                                 std::optional<std::chrono::duration<double>> drain_timeout,
                                 bool cancel, std::function<void(const UnloadResult&)> done) {
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = slots_.find(name);
    if (it == slots_.end()) {
      if (auto target = aliases_.Resolve(name)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "'", name, "' is an alias (of model '", *target,
            "'); unload the model itself, or delete the alias"));
      }
      return absl::NotFoundError(absl::StrCat("no model named '", name, "' is loaded"));
    }
    std::vector<std::string> pointing = aliases_.AliasesOf(name);
    if (!pointing.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "model '", name, "' is the target of alias ", absl::StrJoin(pointing, ", "),
          "; re-point or delete the alias first"));
    }
    slot = it->second;
  }
  std::chrono::duration<double> timeout =
      cancel ? std::chrono::duration<double>(0) : drain_timeout.value_or(options_.default_drain_timeout);
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
  Slot* raw = slot.get();
  auto on_stopped = [this, raw, name, done = std::move(done)](const UnloadResult& result) {
    // On the slot's thread: hand the reaping to the lifecycle thread, which
    // may join the slot's thread.
    Post([this, raw, name, done, result] {
      std::shared_ptr<Slot> gone;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = slots_.find(name);
        if (it != slots_.end() && it->second.get() == raw) {
          gone = std::move(it->second);
          slots_.erase(it);
        }
      }
      if (gone != nullptr) gone->Join();
      gone.reset();
      NotifyChange();
      if (done) done(result);
    });
  };
  return slot->BeginUnload(deadline,
                           absl::CancelledError(absl::StrCat("model '", name, "' was unloaded")),
                           std::move(on_stopped));
}

absl::StatusOr<std::shared_ptr<Slot>> SlotManager::Find(const std::string& name,
                                                        std::string* model) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::optional<std::string> target = aliases_.Resolve(name);
  const std::string& resolved = target ? *target : name;
  auto it = slots_.find(resolved);
  if (it == slots_.end()) {
    if (target) {
      return absl::NotFoundError(absl::StrCat("alias '", name, "' points at model '", resolved,
                                              "', which is not loaded"));
    }
    return absl::NotFoundError(absl::StrCat("no model or alias named '", name, "'"));
  }
  if (model != nullptr) *model = resolved;
  return it->second;
}

absl::StatusOr<std::shared_ptr<Sequence>> SlotManager::Submit(const std::string& name,
                                                              const SequenceFactory& make) {
  for (int attempt = 0;; ++attempt) {
    std::string model;
    ASSIGN_OR_RETURN(std::shared_ptr<Slot> slot, Find(name, &model));
    ASSIGN_OR_RETURN(std::shared_ptr<Sequence> seq, make(*slot, model));
    absl::Status s = slot->Submit(seq);
    if (s.ok()) return seq;
    // Lost a race with an alias switch followed by the old model's unload:
    // the alias now leads elsewhere, so try again there.
    if (absl::IsFailedPrecondition(s) && attempt < 3 && model != name) {
      std::optional<std::string> now = aliases_.Resolve(name);
      if (now && *now != model) continue;
    }
    return s;
  }
}

std::vector<std::shared_ptr<Slot>> SlotManager::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<Slot>> out;
  for (const auto& [name, slot] : slots_) out.push_back(slot);
  return out;
}

std::vector<SlotManager::DeviceStatus> SlotManager::Devices() const {
  std::map<int32_t, std::vector<std::string>> placed;
  for (const auto& slot : List()) {
    SlotStatus st = slot->Status();
    // A split model is on each of its devices.
    for (int32_t d : st.placement.devices) placed[d].push_back(st.config.name);
    if (st.placement.devices.empty() && st.placement.device >= 0) {
      placed[st.placement.device].push_back(st.config.name);
    }
  }
  std::vector<DeviceStatus> out;
  for (const runtime::DeviceBackendProvider& p : runtime::DeviceBackendProviders()) {
    if (!p.devices) continue;
    absl::StatusOr<std::vector<runtime::DeviceInfo>> devices = p.devices();
    if (!devices.ok()) continue;
    std::vector<runtime::DeviceInfo> by_index = *devices;
    std::sort(by_index.begin(), by_index.end(),
              [](const runtime::DeviceInfo& a, const runtime::DeviceInfo& b) {
                return a.index < b.index;
              });
    for (const runtime::DeviceInfo& info : by_index) {
      DeviceStatus d;
      d.provider = p.name;
      d.info = info;
      d.pending_bytes = device_budget_.pending(info.index);
      d.models = placed[info.index];
      std::sort(d.models.begin(), d.models.end());
      out.push_back(std::move(d));
    }
  }
  return out;
}

absl::StatusOr<std::optional<std::string>> SlotManager::SetAlias(const std::string& alias,
                                                                  const std::string& model) {
  RETURN_IF_ERROR(ValidateServingName(alias, "alias"));
  std::optional<std::string> previous;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (slots_.count(alias) > 0) {
      return absl::AlreadyExistsError(
          absl::StrCat("'", alias, "' is the name of a loaded model; an alias needs its own name"));
    }
    if (aliases_.Resolve(model)) {
      return absl::InvalidArgumentError(
          absl::StrCat("model: '", model, "' is an alias; point an alias at a model"));
    }
    auto it = slots_.find(model);
    if (it == slots_.end()) {
      return absl::NotFoundError(absl::StrCat("no model named '", model, "' is loaded"));
    }
    // A sleeping model's aliases resolve: the request wakes it.
    if (SlotState st = it->second->state();
        st != SlotState::kReady && st != SlotState::kSleeping && st != SlotState::kWaking) {
      return absl::FailedPreconditionError(
          absl::StrCat("model '", model, "' is ", SlotStateName(st), ", not ready"));
    }
    previous = aliases_.Set(alias, model);
  }
  Logger("daemon")->info("alias '{}' -> '{}'{}", alias, model,
                         previous ? absl::StrCat(" (was '", *previous, "')") : std::string());
  NotifyChange();
  return previous;
}

absl::Status SlotManager::DeleteAlias(const std::string& alias) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aliases_.Remove(alias)) {
      return absl::NotFoundError(absl::StrCat("no alias named '", alias, "'"));
    }
  }
  Logger("daemon")->info("alias '{}' deleted", alias);
  NotifyChange();
  return absl::OkStatus();
}

std::vector<std::pair<std::string, std::string>> SlotManager::ListAliases() const {
  return aliases_.List();
}

std::vector<std::string> SlotManager::AliasesOf(const std::string& model) const {
  return aliases_.AliasesOf(model);
}

void SlotManager::CancelAll(const absl::Status& reason) {
  for (const auto& slot : List()) slot->CancelAll(reason);
}

int32_t SlotManager::InFlight() const {
  int32_t n = 0;
  for (const auto& slot : List()) n += slot->InFlight();
  return n;
}

void SlotManager::Shutdown() {
  std::map<std::string, std::shared_ptr<Slot>> slots;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_ && !lifecycle_.joinable()) return;
    shutdown_ = true;
    slots.swap(slots_);
  }
  for (auto& [name, slot] : slots) {
    slot->CancelAll(absl::UnavailableError("the server is shutting down"));
  }
  // Stop each slot here (after a load in progress completes), even if a
  // stream reactor still holds it: no slot thread may outlive the manager.
  // Unload completions this triggers go to the lifecycle thread, which is
  // drained before it stops.
  for (auto& [name, slot] : slots) slot->Stop();
  slots.clear();
  {
    std::lock_guard<std::mutex> lock(tasks_mu_);
    tasks_stop_ = true;
  }
  tasks_cv_.notify_all();
  if (lifecycle_.joinable()) lifecycle_.join();
}

}  // namespace minfer::daemon
