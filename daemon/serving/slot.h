// Slot: one model being served, and the thread that owns it.
//
// The slot is three pieces with one owner each:
//   the loader (model_loader.h) holds the model in memory: admission,
//     load, sleep, wake, unload (a fake in tests);
//   the lifecycle (lifecycle.h) is the state, moved only along its checked
//     transitions;
//   the worker loop (Serve) is the slot's thread once loaded: the only
//     thread that runs the model's engine and backends. Request threads only
//     Submit() sequences and read what the worker publishes: one stored
//     engine snapshot, the counters, the state.
//
// Scheduling is the engine's (engine/runtime/engine.h): continuous
// batching, one forward pass per step for every running sequence. The
// worker loops schedule -> run -> update: before each step it hands new
// sequences to the engine and takes out the ones that were cancelled, lost
// their client or passed their deadline (they run no further step); the
// step runs every running sequence's next token and, within the token
// budget (MINFER_BATCH_TOKENS), chunks of new prompts, so a long prompt
// delays the others by at most the steps it shares with them; then the
// worker publishes each sequence's token and finishes those that are done.
// Up to `parallel` sequences run at once, sharing the model's KV pool
// (kv_tokens, by default parallel x n_ctx); when it runs dry the engine
// preempts the newest and recomputes it later, without losing a token. Up
// to `queue_size` more wait. Per-model knob changes run between steps, on
// this thread (the model's overrides are only touched here). After each
// step the prefix cache's KV events go to the publisher (kv_events.h).
//
// Sleep: Sleep(level), or sleep_after_seconds of idleness, frees the
// model's memory between steps (the loader's Sleep; the prefix cache's
// blocks are announced removed). A sleeping slot still accepts requests
// (built with the model's tokenizer, which stays): the first one wakes it
// on a thread of the slot's while the worker keeps expiring queued
// requests at their deadlines (DEADLINE_EXCEEDED while waking); once awake
// they run. A wake that fails (the memory went elsewhere, the file is gone)
// fails the slot with the reason, and the queued requests with it.
//
// Unloading (draining) refuses new requests, lets in-flight and queued
// sequences run until the drain deadline, cancels what is left, then frees
// everything (unloading -> stopped).
//
// Thread-safe: every public method may be called from any thread (but the
// destructor not from the slot's own thread, which it joins).
#ifndef MINFER_DAEMON_SERVING_SLOT_H_
#define MINFER_DAEMON_SERVING_SLOT_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/serving/kv_events.h"
#include "daemon/serving/lifecycle.h"
#include "daemon/serving/memory.h"
#include "daemon/serving/metrics.h"
#include "daemon/serving/model_loader.h"
#include "daemon/serving/notifier.h"
#include "daemon/serving/sequence.h"
#include "daemon/serving/slot_config.h"
#include "engine/base/knobs.h"
#include "engine/graph/tensor.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/model.h"
#include "engine/runtime/model_drafter.h"

namespace minfer::daemon {

struct SlotCounters {
  uint64_t requests = 0;  // admitted to the queue
  uint64_t completed = 0;
  uint64_t cancelled = 0;
  uint64_t failed = 0;
  uint64_t rejected_queue_full = 0;
  uint64_t prompt_tokens = 0;
  uint64_t completion_tokens = 0;
};

// Structured outputs of a slot since its model was loaded.
struct GrammarCounters {
  int64_t constrained_running = 0;    // running sequences with a grammar
  uint64_t constrained_requests = 0;  // admitted with a grammar
  uint64_t compiles = 0;              // the model's GrammarCompiler: compiled,
  uint64_t cache_hits = 0;            // served from its cache
  uint64_t refused = 0;               // constraints refused in the request path
  uint64_t masks = 0;                 // token masks the engine computed
  double mask_seconds = 0;            // and their total time
};

// A consistent view of a slot, for status reports and metrics.
struct SlotStatus {
  SlotConfig config;  // as requested (the effective n_ctx is engine.n_ctx)
  SlotState state = SlotState::kLoading;
  absl::Status error;  // why it FAILED
  std::string backend;  // where it runs, once loaded
  DevicePlacement placement;  // which device, once loaded (-1: the CPU)
  std::string summary;
  KnobOverrides knobs;  // current per-model overrides
  // The engine as of the last step (the one stored snapshot): KV pool,
  // scheduler, activations. Counters (steps, preemptions, prefix hits and
  // evictions, drafts) are since the load, across sleeps. While asleep its
  // memory figures (kv_bytes, activation_bytes, blocks) are 0.
  runtime::EngineSnapshot engine;
  LoaderMemory memory;          // admission and what is held now
  uint64_t backend_bytes = 0;   // what the backend holds (Backend::MemoryBytes)
  int32_t queued = 0;           // waiting: the engine's and the slot's queue
  int32_t spec_k = 0;           // effective drafted tokens per step
  SlotCounters counters;
  GrammarCounters grammar;
  uint64_t load_bytes_done = 0;
  uint64_t load_bytes_total = 0;
  double load_seconds = 0;
  // Sleep and wake: times, the last wake's time (wall clock) and duration.
  uint64_t sleeps = 0;
  uint64_t wakes = 0;
  std::optional<std::chrono::system_clock::time_point> last_wake;
  double last_wake_seconds = 0;
  std::optional<std::chrono::system_clock::time_point> asleep_since;
};

struct UnloadResult {
  int32_t completed = 0;  // sequences that finished normally while draining
  int32_t cancelled = 0;  // cancelled by the deadline (or at once)
  double seconds = 0;
};

class Slot {
 public:
  struct Hooks {
    MemoryBudget* budget = nullptr;  // required; must outlive the slot
    // GPU admission (models whose backend is not "cpu"); optional; must
    // outlive the slot.
    DeviceBudget* device_budget = nullptr;
    Metrics* metrics = nullptr;      // optional; must outlive the slot
    // KV-cache events of this model go here (null: none); must outlive the
    // slot.
    KvEventPublisher* kv_events = nullptr;
    // Called after every state change, on whichever thread made it (the
    // slot's thread, or the caller of BeginUnload), with no slot lock held.
    // Must not block.
    std::function<void(Slot&)> on_state_change;
    // Tests: runs on the slot's thread after admission, before the model is
    // read (a test can hold a load in LOADING with it).
    std::function<void(const std::string& name)> before_load;
    // Tests: makes the engine that runs the model's sequences (default: the
    // batched runtime::Engine, its largest graph prepared).
    std::function<absl::StatusOr<std::unique_ptr<runtime::StepEngine>>(
        std::shared_ptr<runtime::Model>, const runtime::EngineOptions&)>
        make_engine;
    // Tests: makes the loader (default: EngineLoader with the hooks above),
    // so the lifecycle can be driven without a model.
    std::function<std::unique_ptr<ModelLoader>(const SlotConfig&)> make_loader;
  };

  // Creates the slot (LOADING) and starts its thread. `config` must be
  // valid (SlotManager validates requests).
  static std::shared_ptr<Slot> Start(SlotConfig config, Hooks hooks);
  // Stop().
  ~Slot();
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;

  const std::string& name() const { return config_.name; }
  // The configuration it was loaded with (as validated by the manager).
  const SlotConfig& config() const { return config_; }
  SlotState state() const;
  SlotStatus Status() const;
  // The model from the load until unloading ends — asleep too, its weights
  // released but its tokenizer and chat template usable — else null.
  // Never drive its sessions or backends.
  std::shared_ptr<const runtime::Model> model() const;
  // Effective context size (0 until loaded).
  int64_t n_ctx() const;

  // Queues a sequence. FAILED_PRECONDITION unless READY, SLEEPING (the
  // sequence wakes the model) or WAKING; RESOURCE_EXHAUSTED when
  // `parallel` sequences run and `queue_size` wait. Once accepted, the
  // sequence is finished exactly once by the worker.
  absl::Status Submit(std::shared_ptr<Sequence> seq);
  // A constrained request's grammar compile, in the request path (before
  // Submit): `status` is the compile's (not OK: the constraint was refused),
  // `seconds` the wall time the request spent getting its compiled grammar
  // (near 0 for a cache hit). Feeds the metrics and GrammarCounters.
  void RecordGrammarCompile(const absl::Status& status, double seconds);
  // Cancels every queued and running sequence with `reason` (they finish
  // within one step); the slot keeps serving new ones.
  void CancelAll(const absl::Status& reason);
  // Number of sequences queued or running.
  int32_t InFlight() const;

  // Puts the model to sleep at `level` (1: weights kept in host memory, 2:
  // dropped) between two steps; `done` gets the outcome on the slot's
  // thread. FAILED_PRECONDITION unless READY with nothing running or queued
  // (naming how many); INVALID_ARGUMENT for another level. Sleeping
  // already: OK at once (done runs with OK).
  absl::Status Sleep(int level, std::function<void(absl::Status)> done);
  // Wakes a sleeping model without a request; `done` gets the outcome.
  // READY: OK at once. FAILED_PRECONDITION while loading or unloading.
  absl::Status Wake(std::function<void(absl::Status)> done);

  // Starts unloading: new requests are refused; queued and running
  // sequences continue until `drain_deadline` and are then cancelled with
  // `cancel_reason`; then memory is freed and `done` runs (on the slot's
  // thread, or before this returns for a FAILED slot).
  // FAILED_PRECONDITION while LOADING or WAKING, or when already unloading.
  absl::Status BeginUnload(Clock::time_point drain_deadline, absl::Status cancel_reason,
                           std::function<void(const UnloadResult&)> done);

  // Sets (value) or removes (nullopt) a per-model knob override between two
  // steps; `done` gets the outcome on the slot's thread. FAILED_PRECONDITION
  // unless READY.
  absl::Status PostKnobChange(const std::string& name, std::optional<std::string> value,
                              std::function<void(absl::Status)> done);

  // Notified on load progress and on every state change.
  Notifier& state_notifier() { return state_notifier_; }

  // Waits for the slot's thread to end (after FAILED or STOPPED).
  void Join();
  // Cancels whatever runs or waits (UNAVAILABLE), lets a load or wake in
  // progress complete, frees everything and joins the slot's thread.
  // Idempotent; the slot stays valid (STOPPED or FAILED) for whoever still
  // holds it. Must not be called on the slot's own thread.
  void Stop();

 private:
  struct Active;
  using Task = std::function<void()>;

  Slot(SlotConfig config, Hooks hooks);
  void ThreadMain();
  // The worker loop; false when a failed wake left the slot FAILED (freed
  // already, nothing to tear down).
  bool Serve();
  void Teardown();
  // Moves the lifecycle (logging an error for a transition the diagram
  // lacks, which is a bug) and reports the change; `error` for FAILED.
  void SetState(SlotState state, absl::Status error = absl::OkStatus());
  // Requires mu_; returns whether it moved.
  bool MoveLocked(SlotState state, absl::Status error = absl::OkStatus());
  void ReportState(SlotState state);
  // Between steps, nothing running: the loader's Sleep.
  void GoToSleep(int level);
  // Starts the wake thread; the worker finishes the transition (false:
  // the slot FAILED).
  void StartWake();
  bool FinishWake();
  // Ends a sequence the engine held (`stats` from its last event, or the
  // engine's view when it was taken out early).
  void FinishSequence(Active& a, absl::Status status, FinishReason reason,
                      const runtime::GenerationStats& stats);
  void FinishUnstarted(const std::shared_ptr<Sequence>& seq, absl::Status status);
  void UpdateGauges();
  void PublishKvEvents();
  void RecordStep(const runtime::EngineStepStats& step);
  std::string StateError() const;  // requires mu_
  // Starts draining (requires mu_): new requests refused, the queue and
  // running sequences end by `deadline`.
  void BeginDrainLocked(Clock::time_point deadline, absl::Status reason);

  const SlotConfig config_;
  const Hooks hooks_;
  ModelMetrics* metrics_ = nullptr;  // null without Hooks::metrics
  Notifier state_notifier_;
  std::thread thread_;

  // The slot's thread (and the wake thread while waking).
  std::unique_ptr<ModelLoader> loader_;
  std::thread wake_thread_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  // All guarded by mu_.
  Lifecycle lifecycle_;
  absl::Status error_;
  std::shared_ptr<const runtime::Model> model_;
  std::string backend_;
  DevicePlacement placement_;  // guarded by mu_
  std::string summary_;
  KnobOverrides knobs_;
  runtime::EngineSnapshot snap_;     // the one stored engine snapshot
  runtime::EngineSnapshot carried_;  // counters of engines before the last wake
  LoaderMemory memory_;
  uint64_t backend_bytes_ = 0;  // read on the slot's thread (load, each step)
  uint64_t backend_gen_ = 0;    // the backend's pool_gen() when it was read
  // Submitted, not yet handed to the engine (the worker takes them before
  // its next step, once awake).
  std::deque<std::shared_ptr<Sequence>> queue_;
  std::set<std::shared_ptr<Sequence>> live_;  // submitted and not finished
  std::vector<Task> tasks_;
  SlotCounters counters_;
  GrammarCounters grammar_;
  bool stop_requested_ = false;  // the destructor: unload at once
  bool unloading_ = false;
  Clock::time_point drain_deadline_;
  absl::Status cancel_reason_;
  bool drain_cancelled_ = false;
  Clock::time_point unload_started_;
  SlotCounters counters_at_unload_;
  std::function<void(const UnloadResult&)> unload_done_;
  double load_seconds_ = 0;
  // Sleep and wake.
  int sleep_request_ = 0;  // a level to sleep at between steps
  std::vector<std::function<void(absl::Status)>> sleep_done_;
  bool wake_request_ = false;
  std::vector<std::function<void(absl::Status)>> wake_done_;
  bool wake_finished_ = false;  // the wake thread is done; wake_status_ set
  absl::Status wake_status_;
  Clock::time_point wake_started_;
  Clock::time_point last_busy_;  // last time something ran or waited
  uint64_t sleeps_ = 0;
  uint64_t wakes_ = 0;
  int slept_level_ = 0;
  std::optional<std::chrono::system_clock::time_point> last_wake_;
  double last_wake_seconds_ = 0;
  std::optional<std::chrono::system_clock::time_point> asleep_since_;

  // The engine's totals at the last UpdateGauges (metrics advance by the
  // difference); the slot's thread only. Reset when an engine is built.
  uint64_t masks_seen_ = 0;
  double mask_seconds_seen_ = 0;
  uint64_t spec_drafted_seen_ = 0;
  uint64_t spec_gate_held_seen_ = 0;
  uint64_t spec_accepted_seen_ = 0;
  // A constraint reached the model's GrammarCompiler: only then is its
  // stats() read (Model::grammars() builds the vocabulary on first use).
  std::atomic<bool> grammar_used_{false};

  std::atomic<uint64_t> load_done_{0};
  std::atomic<uint64_t> load_total_{0};
};

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_SERVING_SLOT_H_
