#include "daemon/serving/slot.h"

#include <malloc.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/base/logging.h"
#include "engine/base/status.h"
#include "engine/grammar/matcher.h"

namespace minfer::daemon {

namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Adds the engine's counters since the load (which restart with each
// engine, i.e. each wake) to `into`.
void Carry(const runtime::EngineSnapshot& from, runtime::EngineSnapshot* into) {
  into->preemptions += from.preemptions;
  into->prefix_hit_tokens += from.prefix_hit_tokens;
  into->prefix_evictions += from.prefix_evictions;
  into->steps += from.steps;
  into->grammar_masks += from.grammar_masks;
  into->grammar_mask_seconds += from.grammar_mask_seconds;
  into->spec_drafted += from.spec_drafted;
  into->spec_accepted += from.spec_accepted;
}

}  // namespace

// A sequence handed to the engine (worker-owned).
struct Slot::Active {
  std::shared_ptr<Sequence> seq;
  uint64_t id = 0;  // the engine's
  uint64_t seed = 0;
  Clock::time_point added;
  Clock::time_point last_token;
  double ttft_seconds = 0;
  bool got_token = false;
  runtime::GenerationStats stats;  // what the engine reported so far
};

Slot::Slot(SlotConfig config, Hooks hooks)
    : config_(std::move(config)), hooks_(std::move(hooks)), lifecycle_(config_.name) {
  knobs_ = config_.knobs;
  last_busy_ = Clock::now();
  if (hooks_.metrics != nullptr) {
    metrics_ = hooks_.metrics->ForModel(config_.name);
    hooks_.metrics->SetSlotState(config_.name, "loading");
  }
  if (hooks_.make_loader) {
    loader_ = hooks_.make_loader(config_);
  } else {
    EngineLoader::Hooks lh;
    lh.budget = hooks_.budget;
    lh.device_budget = hooks_.device_budget;
    lh.before_load = hooks_.before_load;
    lh.make_engine = hooks_.make_engine;
    lh.kv_events = hooks_.kv_events != nullptr && config_.kv_events != "off";
    lh.progress = [this](uint64_t done, uint64_t total) {
      load_done_.store(done, std::memory_order_relaxed);
      load_total_.store(total, std::memory_order_relaxed);
      state_notifier_.Notify();
    };
    loader_ = std::make_unique<EngineLoader>(config_, std::move(lh));
  }
}

std::shared_ptr<Slot> Slot::Start(SlotConfig config, Hooks hooks) {
  std::shared_ptr<Slot> slot(new Slot(std::move(config), std::move(hooks)));
  slot->thread_ = std::thread([s = slot.get()] { s->ThreadMain(); });
  return slot;
}

Slot::~Slot() { Stop(); }

void Slot::BeginDrainLocked(Clock::time_point deadline, absl::Status reason) {
  if (!unloading_) {
    unloading_ = true;
    unload_started_ = Clock::now();
    counters_at_unload_ = counters_;
    cancel_reason_ = std::move(reason);
  }
  drain_deadline_ = deadline;
}

void Slot::Stop() {
  SlotState moved_to = SlotState::kStopped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_requested_ = true;
    BeginDrainLocked(Clock::now(),
                     absl::UnavailableError(absl::StrCat("model '", config_.name, "' was stopped")));
    // A drain in progress ends now.
    drain_deadline_ = Clock::now();
    const SlotState st = lifecycle_.state();
    if ((st == SlotState::kReady || st == SlotState::kSleeping) &&
        MoveLocked(SlotState::kDraining)) {
      moved_to = SlotState::kDraining;
    }
  }
  if (moved_to == SlotState::kDraining) ReportState(moved_to);
  cv_.notify_all();
  Join();
}

void Slot::Join() {
  if (thread_.joinable()) thread_.join();
  if (wake_thread_.joinable()) wake_thread_.join();
}

SlotState Slot::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lifecycle_.state();
}

std::shared_ptr<const runtime::Model> Slot::model() const {
  std::lock_guard<std::mutex> lock(mu_);
  return model_;
}

int64_t Slot::n_ctx() const {
  std::lock_guard<std::mutex> lock(mu_);
  return snap_.n_ctx;
}

int32_t Slot::InFlight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int32_t>(live_.size());
}

SlotStatus Slot::Status() const {
  SlotStatus s;
  s.config = config_;
  s.load_bytes_done = load_done_.load(std::memory_order_relaxed);
  s.load_bytes_total = load_total_.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  s.state = lifecycle_.state();
  s.error = error_;
  s.knobs = knobs_;
  s.backend = backend_;
  s.placement = placement_;
  s.summary = summary_;
  s.engine = snap_;
  Carry(carried_, &s.engine);
  s.memory = memory_;
  s.backend_bytes = backend_bytes_;
  s.queued = static_cast<int32_t>(snap_.waiting + static_cast<int64_t>(queue_.size()));
  s.spec_k = config_.spec_k;
  if (config_.spec.empty()) {
    s.spec_k = static_cast<int32_t>(KnobRegistry::Global().GetInt("MINFER_SPEC_K", &knobs_));
  }
  s.counters = counters_;
  s.grammar = grammar_;
  s.load_seconds = load_seconds_;
  s.sleeps = sleeps_;
  s.wakes = wakes_;
  s.last_wake = last_wake_;
  s.last_wake_seconds = last_wake_seconds_;
  s.asleep_since = asleep_since_;
  return s;
}

std::string Slot::StateError() const {
  const SlotState st = lifecycle_.state();
  if (unloading_ && st != SlotState::kFailed) {
    return absl::StrCat("model '", config_.name, "' is being unloaded");
  }
  switch (st) {
    case SlotState::kLoading:
      return absl::StrCat("model '", config_.name, "' is still loading");
    case SlotState::kDraining:
    case SlotState::kUnloading:
    case SlotState::kStopped:
      return absl::StrCat("model '", config_.name, "' is being unloaded");
    case SlotState::kFailed:
      return absl::StrCat("model '", config_.name, "' failed: ", error_.message());
    case SlotState::kSleeping:
      return absl::StrCat("model '", config_.name, "' is sleeping");
    case SlotState::kWaking:
      return absl::StrCat("model '", config_.name, "' is waking");
    case SlotState::kReady:
      break;
  }
  return absl::StrCat("model '", config_.name, "' is ready");
}

absl::Status Slot::Submit(std::shared_ptr<Sequence> seq) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!AcceptsRequests(lifecycle_.state()) || unloading_) {
      return absl::FailedPreconditionError(StateError());
    }
    const size_t capacity = static_cast<size_t>(config_.parallel) + config_.queue_size;
    if (live_.size() >= capacity) {
      counters_.rejected_queue_full++;
      return absl::ResourceExhaustedError(absl::StrCat(
          "model '", config_.name, "' is at capacity: ", snap_.running, " sequences running and ",
          live_.size() - snap_.running, " queued (parallel ", config_.parallel, ", queue_size ",
          config_.queue_size, ")"));
    }
    counters_.requests++;
    if (const auto& g = seq->request().grammar; g != nullptr) {
      grammar_.constrained_requests++;
      if (metrics_ != nullptr) {
        metrics_->constrained_requests[static_cast<int>(g->kind())]->Increment();
      }
    }
    live_.insert(seq);
    queue_.push_back(std::move(seq));
    last_busy_ = Clock::now();
    if (metrics_ != nullptr) metrics_->queue_depth->Set(static_cast<double>(queue_.size()));
  }
  cv_.notify_all();
  return absl::OkStatus();
}

void Slot::RecordGrammarCompile(const absl::Status& status, double seconds) {
  grammar_used_.store(true, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!status.ok()) grammar_.refused++;
  }
  if (metrics_ == nullptr) return;
  if (status.ok()) {
    metrics_->grammar_compile_seconds->Observe(seconds);
  } else {
    metrics_->grammar_refused->Increment();
  }
}

void Slot::CancelAll(const absl::Status& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& seq : live_) seq->Cancel(reason);
  }
  cv_.notify_all();
}

absl::Status Slot::Sleep(int level, std::function<void(absl::Status)> done) {
  if (level != 1 && level != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "level must be 1 (weights kept in host memory) or 2 (weights dropped), got ", level));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    const SlotState st = lifecycle_.state();
    if (st == SlotState::kSleeping && !unloading_) {
      if (done) done(absl::OkStatus());
      return absl::OkStatus();
    }
    if (st != SlotState::kReady || unloading_) {
      return absl::FailedPreconditionError(StateError());
    }
    if (!live_.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "model '", config_.name, "' has ", live_.size(),
          " sequences running or queued; it can sleep once they finish (or unload it with a "
          "drain)"));
    }
    sleep_request_ = level;
    if (done) sleep_done_.push_back(std::move(done));
  }
  cv_.notify_all();
  return absl::OkStatus();
}

absl::Status Slot::Wake(std::function<void(absl::Status)> done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const SlotState st = lifecycle_.state();
    if (st == SlotState::kReady && !unloading_ && sleep_request_ == 0) {
      if (done) done(absl::OkStatus());
      return absl::OkStatus();
    }
    if ((st != SlotState::kSleeping && st != SlotState::kWaking && st != SlotState::kReady) ||
        unloading_) {
      return absl::FailedPreconditionError(StateError());
    }
    // Asked to sleep and to wake before the worker got to it: stay awake.
    if (st == SlotState::kReady) {
      sleep_request_ = 0;
      for (auto& d : sleep_done_) {
        d(absl::AbortedError(absl::StrCat("model '", config_.name, "' was woken before it slept")));
      }
      sleep_done_.clear();
      if (done) done(absl::OkStatus());
      return absl::OkStatus();
    }
    wake_request_ = true;
    if (done) wake_done_.push_back(std::move(done));
  }
  cv_.notify_all();
  return absl::OkStatus();
}

absl::Status Slot::BeginUnload(Clock::time_point drain_deadline, absl::Status cancel_reason,
                               std::function<void(const UnloadResult&)> done) {
  bool failed_slot = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const SlotState st = lifecycle_.state();
    if (st == SlotState::kLoading) {
      return absl::FailedPreconditionError(absl::StrCat(
          "model '", config_.name, "' is still loading; unload it once it is ready or failed"));
    }
    if (st == SlotState::kWaking) {
      return absl::FailedPreconditionError(absl::StrCat(
          "model '", config_.name, "' is waking; unload it once it is ready or failed"));
    }
    if (unloading_ || st == SlotState::kDraining || st == SlotState::kUnloading ||
        st == SlotState::kStopped) {
      return absl::FailedPreconditionError(
          absl::StrCat("model '", config_.name, "' is already being unloaded"));
    }
    BeginDrainLocked(drain_deadline, std::move(cancel_reason));
    if (st == SlotState::kFailed) {
      // Nothing runs and the thread has ended: there is nothing to free.
      MoveLocked(SlotState::kStopped);
      failed_slot = true;
    } else {
      MoveLocked(SlotState::kDraining);
      unload_done_ = std::move(done);
    }
  }
  cv_.notify_all();
  if (hooks_.metrics != nullptr && failed_slot) hooks_.metrics->RemoveModel(config_.name);
  Logger("daemon")->info("model '{}': {}", config_.name,
                         failed_slot ? "removed (it had failed)" : "draining");
  ReportState(failed_slot ? SlotState::kStopped : SlotState::kDraining);
  if (failed_slot && done) done(UnloadResult{});
  return absl::OkStatus();
}

absl::Status Slot::PostKnobChange(const std::string& name, std::optional<std::string> value,
                                  std::function<void(absl::Status)> done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (lifecycle_.state() != SlotState::kReady || unloading_) {
      return absl::FailedPreconditionError(StateError());
    }
    tasks_.push_back([this, name, value = std::move(value), done = std::move(done)]() mutable {
      std::shared_ptr<runtime::Model> model = loader_->model();
      absl::Status s = model->SetKnobOverride(name, value);
      if (s.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        knobs_ = model->knobs();
      }
      done(std::move(s));
    });
  }
  cv_.notify_all();
  return absl::OkStatus();
}

bool Slot::MoveLocked(SlotState state, absl::Status error) {
  absl::Status moved = lifecycle_.To(state);
  if (!moved.ok()) {
    Logger("daemon")->error("{} (a bug: the transition is not in lifecycle.h)", moved.message());
    return false;
  }
  error_ = std::move(error);
  return true;
}

void Slot::ReportState(SlotState state) {
  if (hooks_.metrics != nullptr && state != SlotState::kStopped) {
    hooks_.metrics->SetSlotState(config_.name, std::string(SlotStateName(state)));
  }
  if (hooks_.on_state_change) hooks_.on_state_change(*this);
  state_notifier_.Notify();
}

void Slot::SetState(SlotState state, absl::Status error) {
  bool moved;
  {
    std::lock_guard<std::mutex> lock(mu_);
    moved = MoveLocked(state, std::move(error));
  }
  if (moved) ReportState(state);
}

void Slot::ThreadMain() {
  auto t0 = Clock::now();
  absl::Status loaded = loader_->Load();
  if (!loaded.ok()) {
    loader_->Unload();
    Logger("daemon")->error("model '{}': load failed: {}", config_.name, loaded);
    SetState(SlotState::kFailed, loaded);
    return;
  }
  std::shared_ptr<runtime::Model> model = loader_->model();
  const runtime::EngineSnapshot snap = loader_->engine()->Snapshot();
  const int64_t backend_bytes = model != nullptr ? model->kv_backend()->MemoryBytes() : 0;
  const uint64_t backend_gen = model != nullptr ? model->kv_backend()->pool_gen() : 0;
  bool stop;
  {
    std::lock_guard<std::mutex> lock(mu_);
    load_seconds_ = Seconds(Clock::now() - t0);
    model_ = model;
    backend_ = model != nullptr ? model->kv_backend()->name() : std::string();
    placement_ = loader_->Placement();
    summary_ = loader_->Summary();
    snap_ = snap;
    memory_ = loader_->Memory();
    backend_bytes_ = static_cast<uint64_t>(std::max<int64_t>(backend_bytes, 0));
    backend_gen_ = backend_gen;
    stop = stop_requested_;
  }
  if (metrics_ != nullptr) {
    metrics_->weights_bytes->Set(static_cast<double>(memory_.weights));
    metrics_->kv_bytes->Set(static_cast<double>(snap.kv_bytes));
    metrics_->kv_blocks_free->Set(static_cast<double>(snap.kv_blocks_total));
    metrics_->kv_blocks_used->Set(0);
    metrics_->kv_usage->Set(0);
    metrics_->scratch_bytes->Set(static_cast<double>(snap.activation_bytes));
    metrics_->backend_bytes->Set(static_cast<double>(backend_bytes_));
  }
  Logger("daemon")->info(
      "model '{}': ready in {:.2f} s ({} sequences, n_ctx {}, KV {} pool of {} blocks x {} rows = "
      "{:.1f} MiB, {:.1f} MiB of activations for {} tokens per step): {}",
      config_.name, load_seconds_, config_.parallel, snap.n_ctx, graph::DTypeName(snap.kv_type),
      snap.kv_blocks_total, snap.kv_block, snap.kv_bytes / 1048576.0,
      snap.activation_bytes / 1048576.0, snap.token_budget, summary_);
  if (stop) {
    SetState(SlotState::kUnloading);
  } else {
    SetState(SlotState::kReady);
    if (!Serve()) return;  // failed to wake: freed, kept FAILED until unloaded
  }
  Teardown();
}

namespace {

// cv.wait_until that accepts time_point::max() (no deadline).
void WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
               Clock::time_point until) {
  if (until == Clock::time_point::max()) {
    cv.wait(lock);
  } else {
    cv.wait_until(lock, until);
  }
}

}  // namespace

bool Slot::Serve() {
  std::map<uint64_t, Active> active;  // by engine id
  std::vector<runtime::EngineEvent> events;
  for (;;) {
    std::vector<std::shared_ptr<Sequence>> admit;
    std::vector<std::shared_ptr<Sequence>> dropped;
    std::vector<Task> tasks;
    int sleep_level = 0;
    bool start_wake = false, finish_wake = false;
    SlotState st;
    {
      std::unique_lock<std::mutex> lock(mu_);
      for (;;) {
        const Clock::time_point now = Clock::now();
        st = lifecycle_.state();
        if (unloading_ && !drain_cancelled_ && now >= drain_deadline_) {
          for (const auto& seq : live_) seq->Cancel(cancel_reason_);
          drain_cancelled_ = true;
        }
        // Submitted sequences that were cancelled or expired leave at once,
        // asleep or waking too.
        Clock::time_point next_deadline = Clock::time_point::max();
        for (auto it = queue_.begin(); it != queue_.end();) {
          if ((*it)->cancel_requested() || now >= (*it)->deadline()) {
            dropped.push_back(std::move(*it));
            it = queue_.erase(it);
          } else {
            next_deadline = std::min(next_deadline, (*it)->deadline());
            ++it;
          }
        }
        if (st == SlotState::kWaking) {
          if (wake_finished_) {
            finish_wake = true;
            break;
          }
          if (!dropped.empty()) break;
          WaitUntil(cv_, lock, next_deadline);  // the wake thread notifies
          continue;
        }
        if (st == SlotState::kSleeping) {
          if (!dropped.empty()) break;
          if (!queue_.empty() || wake_request_) {
            start_wake = true;
            break;
          }
          WaitUntil(cv_, lock, next_deadline);
          continue;
        }
        // Ready or draining. Draining a sleeping model: nothing can run, so
        // whatever was queued ends now.
        if (loader_->engine() == nullptr) {
          for (auto& seq : queue_) dropped.push_back(std::move(seq));
          queue_.clear();
          if (!dropped.empty()) break;
          return true;
        }
        const bool idle = active.empty() && queue_.empty() && tasks_.empty();
        if (!idle) last_busy_ = now;
        if (st == SlotState::kReady && idle && !unloading_ && dropped.empty()) {
          if (sleep_request_ != 0) {
            sleep_level = sleep_request_;
            sleep_request_ = 0;
            break;
          }
          if (config_.sleep_after_seconds > 0) {
            const auto due = last_busy_ + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(
                                                  config_.sleep_after_seconds));
            if (now >= due) {
              sleep_level = config_.sleep_level;
              break;
            }
            next_deadline = std::min(next_deadline, due);
          }
        }
        if (!idle || !dropped.empty()) break;
        if (unloading_) return true;
        WaitUntil(cv_, lock, next_deadline);
      }
      if (sleep_level == 0 && !start_wake && !finish_wake &&
          (st == SlotState::kReady || st == SlotState::kDraining) && loader_->engine() != nullptr) {
        tasks.swap(tasks_);
        admit.assign(std::make_move_iterator(queue_.begin()),
                     std::make_move_iterator(queue_.end()));
        queue_.clear();
      }
    }
    for (auto& seq : dropped) {
      absl::Status why;
      if (seq->cancel_requested()) {
        why = seq->cancel_reason();
      } else if (Clock::now() >= seq->deadline()) {
        why = absl::DeadlineExceededError(
            st == SlotState::kWaking || st == SlotState::kSleeping
                ? absl::StrCat("deadline exceeded while model '", config_.name, "' was waking")
                : std::string("deadline exceeded while queued"));
      } else {
        why = cancel_reason_.ok() ? absl::UnavailableError(absl::StrCat(
                                        "model '", config_.name, "' is being unloaded"))
                                  : cancel_reason_;
      }
      FinishUnstarted(seq, why);
    }
    if (finish_wake) {
      if (!FinishWake()) return false;
      continue;
    }
    if (start_wake) {
      StartWake();
      continue;
    }
    if (sleep_level != 0) {
      GoToSleep(sleep_level);
      continue;
    }
    runtime::StepEngine* engine = loader_->engine();
    if (engine == nullptr) continue;
    // Knob changes run here, between two steps.
    for (Task& t : tasks) t();

    // New sequences join the engine's queue (its scheduler admits them).
    for (auto& seq : admit) {
      const int32_t prompt = seq->prompt_tokens();
      absl::StatusOr<uint64_t> id = engine->Add(seq->TakeRequest());
      if (!id.ok()) {
        FinishUnstarted(seq, id.status());
        continue;
      }
      Active a;
      a.seq = seq;
      a.id = *id;
      a.seed = seq->seed();
      a.added = Clock::now();
      Logger("daemon")->debug("model '{}': sequence of {} prompt tokens added {:.4f} s after arrival",
                              config_.name, prompt, Seconds(a.added - seq->arrival()));
      a.stats.prompt_tokens = prompt;
      if (metrics_ != nullptr) metrics_->prompt_tokens->Increment(prompt);
      {
        std::lock_guard<std::mutex> lock(mu_);
        counters_.prompt_tokens += prompt;
      }
      active.emplace(*id, std::move(a));
    }

    // Cancelled, disconnected or expired sequences leave before the step.
    const Clock::time_point now = Clock::now();
    for (auto it = active.begin(); it != active.end();) {
      Active& a = it->second;
      absl::Status stop;
      if (a.seq->cancel_requested()) {
        stop = a.seq->cancel_reason();
      } else if (now >= a.seq->deadline()) {
        stop = absl::DeadlineExceededError("deadline exceeded");
      }
      if (stop.ok()) {
        ++it;
        continue;
      }
      engine->Cancel(a.id);
      FinishSequence(a, stop, FinishReason::kCancelled, a.stats);
      it = active.erase(it);
    }
    if (active.empty()) {
      UpdateGauges();
      PublishKvEvents();
      continue;
    }

    // schedule -> run -> update.
    events.clear();
    absl::Status step = engine->Step(&events);
    if (!step.ok()) {
      Logger("daemon")->error("model '{}': step failed: {}", config_.name, step);
      // Health may have changed (a device fault): let the listeners look.
      if (hooks_.on_state_change) hooks_.on_state_change(*this);
    }
    RecordStep(engine->Snapshot().last_step);
    // The status and the metrics take this step's figures (the KV blocks it
    // freed, the drafts it counted) before any stream hears that it ended:
    // a client that reads the status after its last token sees them.
    UpdateGauges();
    PublishKvEvents();
    const Clock::time_point t_done = Clock::now();
    for (runtime::EngineEvent& ev : events) {
      auto it = active.find(ev.id);
      if (it == active.end()) continue;
      Active& a = it->second;
      if (!ev.out.tokens.empty()) {
        if (!a.got_token) {
          a.got_token = true;
          a.ttft_seconds = Seconds(t_done - a.seq->arrival());
          if (metrics_ != nullptr) metrics_->ttft->Observe(a.ttft_seconds);
        } else if (metrics_ != nullptr) {
          metrics_->itl->Observe(Seconds(t_done - a.last_token));
        }
        a.last_token = t_done;
        a.stats.completion_tokens += static_cast<int32_t>(ev.out.tokens.size());
        if (metrics_ != nullptr) {
          metrics_->completion_tokens->Increment(static_cast<double>(ev.out.tokens.size()));
        }
        a.seq->Publish(ev.out);
      }
      if (ev.finished) {
        FinishSequence(a, ev.status, ev.reason, ev.stats);
        active.erase(it);
      }
    }
  }
}

void Slot::GoToSleep(int level) {
  const auto t0 = Clock::now();
  runtime::StepEngine* engine = loader_->engine();
  // The prefix cache goes with the KV pool: routers are told.
  if (engine != nullptr) engine->ClearPrefixCache();
  PublishKvEvents();
  const runtime::EngineSnapshot last = engine != nullptr ? engine->Snapshot() : runtime::EngineSnapshot();
  absl::Status slept = loader_->Sleep(level);
  // What the engine freed goes back to the system now, not at the
  // allocator's leisure: sleeping is for another model to use it.
  malloc_trim(0);
  std::shared_ptr<runtime::Model> model = loader_->model();
  const int64_t backend_bytes =
      model != nullptr ? model->kv_backend()->MemoryBytes() : 0;
  std::vector<std::function<void(absl::Status)>> dones;
  bool moved = false;
  LoaderMemory memory;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dones.swap(sleep_done_);
    if (slept.ok()) {
      Carry(last, &carried_);
      runtime::EngineSnapshot asleep;
      asleep.n_ctx = snap_.n_ctx;
      asleep.kv_block = snap_.kv_block;
      asleep.kv_type = snap_.kv_type;
      asleep.kv_block_bytes = snap_.kv_block_bytes;
      asleep.token_budget = snap_.token_budget;
      asleep.prefix_cache = snap_.prefix_cache;
      snap_ = asleep;
      memory_ = loader_->Memory();
      memory = memory_;
      backend_bytes_ = static_cast<uint64_t>(std::max<int64_t>(backend_bytes, 0));
      sleeps_++;
      slept_level_ = level;
      asleep_since_ = std::chrono::system_clock::now();
      moved = MoveLocked(SlotState::kSleeping);
    }
  }
  if (slept.ok()) {
    if (metrics_ != nullptr) {
      metrics_->sleeps[level - 1]->Increment();
      metrics_->weights_bytes->Set(static_cast<double>(memory.weights));
      metrics_->kv_bytes->Set(0);
      metrics_->scratch_bytes->Set(0);
      metrics_->backend_bytes->Set(static_cast<double>(backend_bytes_));
      metrics_->kv_blocks_used->Set(0);
      metrics_->kv_blocks_free->Set(0);
      metrics_->kv_blocks_cached->Set(0);
      metrics_->kv_usage->Set(0);
      metrics_->queue_depth->Set(0);
      metrics_->active->Set(0);
    }
    Logger("daemon")->info(
        "model '{}': asleep at level {} in {:.3f} s (KV pool and activations freed; weights {}; "
        "{:.1f} MiB still reserved)",
        config_.name, level, Seconds(Clock::now() - t0),
        level == 1 ? "kept in host memory" : "dropped", memory.reserved / 1048576.0);
    if (moved) ReportState(SlotState::kSleeping);
  } else {
    Logger("daemon")->error("model '{}': could not sleep: {}", config_.name, slept);
  }
  for (auto& d : dones) d(slept);
}

void Slot::StartWake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!MoveLocked(SlotState::kWaking)) return;
    wake_request_ = false;
    wake_finished_ = false;
    wake_started_ = Clock::now();
  }
  ReportState(SlotState::kWaking);
  Logger("daemon")->info("model '{}': waking from level {}", config_.name, slept_level_);
  if (wake_thread_.joinable()) wake_thread_.join();
  // The wake runs beside this thread, which keeps ending queued requests
  // at their deadlines (it touches neither the engine nor the loader).
  wake_thread_ = std::thread([this] {
    absl::Status woke = loader_->Wake();
    {
      std::lock_guard<std::mutex> lock(mu_);
      wake_status_ = std::move(woke);
      wake_finished_ = true;
    }
    cv_.notify_all();
  });
}

bool Slot::FinishWake() {
  if (wake_thread_.joinable()) wake_thread_.join();
  absl::Status woke;
  std::vector<std::function<void(absl::Status)>> dones;
  std::vector<std::shared_ptr<Sequence>> failed;
  const double seconds = Seconds(Clock::now() - wake_started_);
  runtime::StepEngine* engine = loader_->engine();
  std::shared_ptr<runtime::Model> model = loader_->model();
  const bool asleep = loader_->Memory().sleep_level != 0;
  SlotState next;
  {
    std::lock_guard<std::mutex> lock(mu_);
    woke = wake_status_;
    dones.swap(wake_done_);
    if (woke.ok()) {
      next = SlotState::kReady;
    } else if (asleep) {
      next = SlotState::kSleeping;  // refused admission: still asleep, intact
    } else {
      next = SlotState::kFailed;
    }
    if (!woke.ok()) {
      // The requests that woke it get the reason.
      failed.assign(queue_.begin(), queue_.end());
      queue_.clear();
    }
  }
  if (next == SlotState::kFailed) loader_->Unload();
  const int64_t backend_bytes =
      woke.ok() && model != nullptr ? model->kv_backend()->MemoryBytes() : 0;
  const uint64_t backend_gen = woke.ok() && model != nullptr ? model->kv_backend()->pool_gen() : 0;
  bool drain = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (woke.ok()) {
      snap_ = engine->Snapshot();
      memory_ = loader_->Memory();
      summary_ = loader_->Summary();
      backend_ = model != nullptr ? model->kv_backend()->name() : std::string();
    placement_ = loader_->Placement();
      backend_bytes_ = static_cast<uint64_t>(std::max<int64_t>(backend_bytes, 0));
      backend_gen_ = backend_gen;
      wakes_++;
      last_wake_ = std::chrono::system_clock::now();
      last_wake_seconds_ = seconds;
      asleep_since_.reset();
      last_busy_ = Clock::now();
      MoveLocked(SlotState::kReady);
      if (unloading_) drain = MoveLocked(SlotState::kDraining);
    } else if (next == SlotState::kSleeping) {
      MoveLocked(SlotState::kSleeping);
    } else {
      model_.reset();
      memory_ = LoaderMemory();
      snap_ = runtime::EngineSnapshot();
      MoveLocked(SlotState::kFailed, absl::Status(woke.code(), absl::StrCat("waking: ", woke.message())));
    }
  }
  masks_seen_ = 0;
  mask_seconds_seen_ = 0;
  spec_drafted_seen_ = 0;
  spec_accepted_seen_ = 0;
  spec_gate_held_seen_ = 0;
  for (auto& seq : failed) {
    FinishUnstarted(seq, absl::Status(woke.code(), absl::StrCat("model '", config_.name,
                                                                "' could not wake: ",
                                                                woke.message())));
  }
  if (woke.ok()) {
    if (metrics_ != nullptr) {
      metrics_->wakes[std::max(slept_level_, 1) - 1]->Increment();
      metrics_->wake_seconds->Observe(seconds);
      metrics_->weights_bytes->Set(static_cast<double>(memory_.weights));
      metrics_->kv_bytes->Set(static_cast<double>(snap_.kv_bytes));
      metrics_->kv_blocks_free->Set(static_cast<double>(snap_.kv_blocks_total));
      metrics_->scratch_bytes->Set(static_cast<double>(snap_.activation_bytes));
      metrics_->backend_bytes->Set(static_cast<double>(backend_bytes_));
    }
    Logger("daemon")->info("model '{}': awake in {:.3f} s (from level {})", config_.name, seconds,
                           slept_level_);
    ReportState(SlotState::kReady);
    if (drain) ReportState(SlotState::kDraining);
  } else {
    Logger("daemon")->error("model '{}': could not wake ({}): {}", config_.name,
                            next == SlotState::kSleeping ? "it stays asleep" : "it failed", woke);
    ReportState(next);
  }
  for (auto& d : dones) d(woke);
  return next != SlotState::kFailed;
}

void Slot::PublishKvEvents() {
  if (hooks_.kv_events == nullptr || config_.kv_events == "off") return;
  runtime::StepEngine* engine = loader_->engine();
  if (engine == nullptr) return;
  std::vector<runtime::KvEvent> events;
  engine->TakeKvEvents(&events);
  if (events.empty()) return;
  int32_t block = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    block = snap_.kv_block;
  }
  std::shared_ptr<runtime::Model> model = loader_->model();
  const bool queued = hooks_.kv_events->Publish(config_.name, std::move(events), block,
                                                model != nullptr && model->gpu() ? "GPU" : "CPU");
  if (metrics_ != nullptr) {
    (queued ? metrics_->kv_event_batches : metrics_->kv_event_batches_dropped)->Increment();
  }
}

void Slot::RecordStep(const runtime::EngineStepStats& step) {
  if (step.sequences == 0) return;
  // One line per step at debug level: where a request's time goes (with the
  // admission line below), e.g. to tell a slow step from a wait before it.
  Logger("daemon")->debug(
      "model '{}': step of {} sequences, {} tokens ({} prefill, {} from the prefix cache), "
      "{:.4f} s",
      config_.name, step.sequences, step.tokens, step.prefill_tokens, step.cached_tokens,
      step.seconds);
  if (metrics_ == nullptr) return;
  metrics_->step_sequences->Observe(static_cast<double>(step.sequences));
  metrics_->step_tokens->Observe(static_cast<double>(step.tokens));
  metrics_->step_seconds->Observe(step.seconds);
  if (step.preempted > 0) metrics_->preemptions->Increment(static_cast<double>(step.preempted));
  if (step.cached_tokens > 0) {
    metrics_->prefix_hit_tokens->Increment(static_cast<double>(step.cached_tokens));
  }
  if (step.evictions > 0) metrics_->prefix_evictions->Increment(static_cast<double>(step.evictions));
}

void Slot::FinishSequence(Active& a, absl::Status status, FinishReason reason,
                          const runtime::GenerationStats& stats) {
  const Clock::time_point now = Clock::now();
  SequenceResult r;
  r.status = status;
  r.finish_reason = status.ok() ? reason : FinishReason::kCancelled;
  r.stats = stats;
  r.stats.prompt_tokens = a.stats.prompt_tokens;
  r.stats.completion_tokens = a.stats.completion_tokens;
  r.queue_seconds = Seconds(a.added - a.seq->arrival()) + stats.queue_seconds;
  r.ttft_seconds = a.ttft_seconds;
  r.total_seconds = Seconds(now - a.seq->arrival());
  r.seed = a.seed;
  if (metrics_ != nullptr) {
    metrics_->queue_time->Observe(r.queue_seconds);
    const double tpot = r.DecodeTokensPerSecond();
    if (tpot > 0) metrics_->tpot->Observe(1.0 / tpot);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    live_.erase(a.seq);
    counters_.completion_tokens += r.stats.completion_tokens;
    if (status.ok()) {
      counters_.completed++;
    } else if (absl::IsCancelled(status) || absl::IsDeadlineExceeded(status) ||
               absl::IsUnavailable(status)) {
      counters_.cancelled++;
    } else {
      counters_.failed++;
    }
  }
  Logger("daemon")->info(
      "generate api={} model={} prompt={} completion={} ttft={:.4f}s decode={:.1f}tok/s "
      "queue={:.4f}s total={:.3f}s finish={}{}{}{}",
      a.seq->api(), config_.name, r.stats.prompt_tokens, r.stats.completion_tokens, r.ttft_seconds,
      r.DecodeTokensPerSecond(), r.queue_seconds, r.total_seconds,
      FinishReasonName(r.finish_reason),
      r.stats.spec_drafted > 0 ? absl::StrCat(" drafted=", r.stats.spec_drafted,
                                              " accepted=", r.stats.spec_accepted)
                               : std::string(),
      status.ok() ? "" : " status=",
      status.ok() ? std::string() : status.ToString());
  a.seq->Finish(std::move(r));
}

void Slot::FinishUnstarted(const std::shared_ptr<Sequence>& seq, absl::Status status) {
  const Clock::time_point now = Clock::now();
  SequenceResult r;
  r.status = status;
  r.finish_reason = FinishReason::kCancelled;
  r.stats.prompt_tokens = seq->prompt_tokens();
  r.queue_seconds = Seconds(now - seq->arrival());
  r.total_seconds = r.queue_seconds;
  r.seed = seq->seed();
  {
    std::lock_guard<std::mutex> lock(mu_);
    live_.erase(seq);
    if (absl::IsCancelled(status) || absl::IsDeadlineExceeded(status) ||
        absl::IsUnavailable(status)) {
      counters_.cancelled++;
    } else {
      counters_.failed++;
    }
  }
  Logger("daemon")->info("generate api={} model={} not started: {}", seq->api(), config_.name,
                         status);
  seq->Finish(std::move(r));
}

void Slot::UpdateGauges() {
  runtime::StepEngine* engine = loader_->engine();
  if (engine == nullptr) return;
  std::shared_ptr<runtime::Model> model = loader_->model();
  // The backend's bookkeeping belongs to this thread (forwards change it).
  // MemoryBytes walks the device's weight registry: re-read it only when
  // the backend's buffers changed (pool_gen), not at every step.
  int64_t backend_bytes = -1;
  uint64_t backend_gen = 0;
  if (model != nullptr) {
    backend_gen = model->kv_backend()->pool_gen();
    if (backend_gen != backend_gen_) backend_bytes = model->kv_backend()->MemoryBytes();
  }
  runtime::EngineSnapshot snap = engine->Snapshot();
  const LoaderMemory memory = loader_->Memory();
  const uint64_t spec_drafted = static_cast<uint64_t>(std::max<int64_t>(snap.spec_drafted, 0));
  const uint64_t spec_accepted = static_cast<uint64_t>(std::max<int64_t>(snap.spec_accepted, 0));
  const uint64_t gate_held = static_cast<uint64_t>(std::max<int64_t>(snap.spec_gate_held, 0));
  const int64_t masks = snap.grammar_masks;
  const double mask_seconds = snap.grammar_mask_seconds;
  // The compiler's own counts (cache hits happen in the request path, where
  // a hit cannot be told from a compile without racing other requests).
  grammar::CompilerStats compiler;
  const bool grammar_used = grammar_used_.load(std::memory_order_relaxed) && model != nullptr;
  if (grammar_used) compiler = model->grammars().stats();
  if (metrics_ != nullptr && masks > static_cast<int64_t>(masks_seen_)) {
    metrics_->grammar_masks->Increment(static_cast<double>(masks - masks_seen_));
    metrics_->grammar_mask_seconds->Increment(std::max(0.0, mask_seconds - mask_seconds_seen_));
  }
  masks_seen_ = static_cast<uint64_t>(std::max<int64_t>(masks, 0));
  mask_seconds_seen_ = mask_seconds;
  if (metrics_ != nullptr && spec_drafted > spec_drafted_seen_) {
    metrics_->spec_drafted_tokens->Increment(static_cast<double>(spec_drafted - spec_drafted_seen_));
  }
  if (metrics_ != nullptr && spec_accepted > spec_accepted_seen_) {
    metrics_->spec_accepted_tokens->Increment(
        static_cast<double>(spec_accepted - spec_accepted_seen_));
  }
  if (metrics_ != nullptr && gate_held > spec_gate_held_seen_) {
    metrics_->spec_gate_held_steps->Increment(static_cast<double>(gate_held - spec_gate_held_seen_));
  }
  spec_drafted_seen_ = spec_drafted;
  spec_accepted_seen_ = spec_accepted;
  spec_gate_held_seen_ = gate_held;
  std::lock_guard<std::mutex> lock(mu_);
  if (grammar_used) {
    if (metrics_ != nullptr && compiler.cache_hits > static_cast<int64_t>(grammar_.cache_hits)) {
      metrics_->grammar_cache_hits->Increment(
          static_cast<double>(compiler.cache_hits - static_cast<int64_t>(grammar_.cache_hits)));
    }
    grammar_.compiles = static_cast<uint64_t>(compiler.compiles);
    grammar_.cache_hits = static_cast<uint64_t>(compiler.cache_hits);
  }
  grammar_.constrained_running = snap.constrained_running;
  grammar_.masks = static_cast<uint64_t>(std::max<int64_t>(carried_.grammar_masks, 0)) + masks_seen_;
  grammar_.mask_seconds = carried_.grammar_mask_seconds + mask_seconds;
  if (backend_bytes >= 0) {
    backend_bytes_ = static_cast<uint64_t>(backend_bytes);
    backend_gen_ = backend_gen;
  }
  // Activations are measured once graphs exist; keep the last figure.
  if (snap.activation_bytes <= 0) snap.activation_bytes = snap_.activation_bytes;
  snap_ = std::move(snap);
  memory_ = memory;
  if (metrics_ != nullptr) {
    const int64_t used = snap_.kv_blocks_used;
    metrics_->queue_depth->Set(static_cast<double>(snap_.waiting + static_cast<int64_t>(queue_.size())));
    metrics_->active->Set(static_cast<double>(snap_.running));
    metrics_->scratch_bytes->Set(static_cast<double>(snap_.activation_bytes));
    metrics_->backend_bytes->Set(static_cast<double>(backend_bytes_));
    metrics_->kv_blocks_used->Set(static_cast<double>(used));
    metrics_->kv_blocks_free->Set(static_cast<double>(snap_.kv_blocks_total - used));
    metrics_->kv_blocks_cached->Set(static_cast<double>(snap_.kv_blocks_cached));
    metrics_->kv_usage->Set(snap_.kv_blocks_total > 0
                                ? static_cast<double>(used) / snap_.kv_blocks_total
                                : 0.0);
    metrics_->constrained_sequences->Set(static_cast<double>(snap_.constrained_running));
  }
}

void Slot::Teardown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (lifecycle_.state() == SlotState::kDraining) MoveLocked(SlotState::kUnloading);
  }
  ReportState(SlotState::kUnloading);
  if (runtime::StepEngine* engine = loader_->engine(); engine != nullptr) {
    // Unloading empties the prefix cache: routers are told.
    engine->ClearPrefixCache();
    PublishKvEvents();
  }
  loader_->Unload();
  UnloadResult result;
  std::function<void(const UnloadResult&)> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    model_.reset();
    memory_ = LoaderMemory();
    result.completed = static_cast<int32_t>(counters_.completed - counters_at_unload_.completed);
    result.cancelled = static_cast<int32_t>((counters_.cancelled + counters_.failed) -
                                            (counters_at_unload_.cancelled + counters_at_unload_.failed));
    result.seconds = Seconds(Clock::now() - unload_started_);
    done = std::move(unload_done_);
  }
  if (hooks_.metrics != nullptr) hooks_.metrics->RemoveModel(config_.name);
  Logger("daemon")->info("model '{}': unloaded in {:.3f} s ({} finished, {} cancelled while draining)",
                         config_.name, result.seconds, result.completed, result.cancelled);
  SetState(SlotState::kStopped);
  if (done) done(result);
}

}  // namespace minfer::daemon
