// Slot: one loaded model and the thread that owns it.
//
// The slot's thread first loads the model (admission against the memory
// budget — weights, the KV pool, the activations of the batched graphs —
// then Model::Load and the batched Engine with its KV pool), then becomes
// the slot's worker: the only thread that ever runs the model's engine and
// backends. gRPC handlers only Submit() sequences and read what the worker
// publishes.
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
// this thread (the model's overrides are only touched here).
//
// Lifecycle: LOADING -> READY -> UNLOADING -> STOPPED, or LOADING -> FAILED
// (-> STOPPED once unloaded). Unloading refuses new requests, lets in-flight
// and queued sequences run until the drain deadline, cancels what is left,
// then frees the engine, the model and the memory reservation.
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
#include "daemon/serving/memory.h"
#include "daemon/serving/metrics.h"
#include "daemon/serving/notifier.h"
#include "daemon/serving/sequence.h"
#include "engine/base/knobs.h"
#include "engine/graph/tensor.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/model.h"
#include "engine/runtime/model_drafter.h"

namespace minfer::daemon {

struct SlotConfig {
  std::string name;
  std::string path;
  std::string backend = "auto";  // cpu | cuda | auto
  int64_t n_ctx = 4096;          // clamped to the model's context length
  int32_t parallel = 16;  // sequences running at once
  std::string kv_type;    // "" (the model's default), "f32", "f16", "q8_0"
  KnobOverrides knobs;    // per-model knob overrides at load
  int32_t queue_size = 16;
  // KV pool size in tokens (rounded up to whole blocks); 0 = parallel x
  // n_ctx, every sequence can reach the full context at once.
  int64_t kv_tokens = 0;
  // Reply parsers (LoadModelRequest.tool_parser / reasoning_parser): "" =
  // from the chat template, "none", or a name (CheckChatParsers).
  std::string tool_parser;
  std::string reasoning_parser;
  // Speculative decoding (LoadModelRequest.spec / draft / spec_k;
  // CheckSpeculative): spec "" (the MINFER_SPEC_K knob), "off", "ngram" or
  // "draft"; the draft model's path (spec "draft"); drafted tokens per step
  // (0: kDefaultSpecK with ngram or draft).
  std::string spec;
  std::string draft;
  int32_t spec_k = 0;
};

inline constexpr int32_t kDefaultSpecK = 4;
inline constexpr int32_t kMaxSpecK = 16;

// The reasoning parsers a model may be loaded with (besides "" and "none").
std::vector<std::string> ReasoningParsers();
// INVALID_ARGUMENT naming config's tool_parser or reasoning_parser when it
// is not "", "none" or a known one (chat::ToolCallFamilies,
// ReasoningParsers), listing the known ones.
absl::Status CheckChatParsers(const SlotConfig& config);
// Validates and resolves config's speculative options: a draft with spec ""
// means "draft"; spec_k 0 with "ngram" or "draft" becomes kDefaultSpecK.
// INVALID_ARGUMENT naming the field (engine/base/field_error.h): an unknown
// spec (listing the known ones), spec "draft" without a draft, a draft with
// spec "off" or "ngram", spec_k outside [0, kMaxSpecK] or given without
// spec "ngram" or "draft".
absl::Status CheckSpeculative(SlotConfig* config);

// "" -> nullopt (the model's default); else the DType, or INVALID_ARGUMENT.
absl::StatusOr<std::optional<graph::DType>> ParseKvType(const std::string& kv_type);

enum class SlotState { kLoading, kReady, kUnloading, kFailed, kStopped };
const char* SlotStateName(SlotState state);  // "loading", "ready", ...

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

// A consistent snapshot of a slot, for status reports.
struct SlotStatus {
  SlotConfig config;  // as requested (n_ctx below is the effective one)
  SlotState state = SlotState::kLoading;
  absl::Status error;  // why it FAILED
  int64_t n_ctx = 0;
  std::string backend;  // where it runs, once loaded
  std::string kv_type;  // the sessions' KV type, once loaded
  std::string summary;
  KnobOverrides knobs;  // current per-model overrides
  MemoryEstimate estimate;  // what admission reserved
  uint64_t weights_bytes = 0;
  uint64_t kv_bytes = 0;
  uint64_t scratch_bytes = 0;  // measured once graphs exist, else estimated
  uint64_t backend_bytes = 0;  // what the backend holds (Backend::MemoryBytes)
  int32_t active = 0;
  int32_t queued = 0;
  // The KV pool (once loaded): blocks of kv_block rows; total excludes the
  // reserved block.
  int32_t kv_block = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;
  int64_t kv_blocks_cached = 0;  // free, holding a reusable prefix
  uint64_t kv_block_bytes = 0;
  std::vector<int64_t> sequence_blocks;  // per running sequence, admission order
  int64_t token_budget = 0;
  uint64_t preemptions = 0;
  bool prefix_cache = false;
  uint64_t prefix_hit_tokens = 0;  // prompt tokens taken from the prefix cache
  uint64_t prefix_evictions = 0;
  uint64_t steps = 0;
  // Speculative decoding: the effective drafted tokens per step (the
  // MINFER_SPEC_K knob's value now when config.spec is ""), and tokens
  // drafted into steps and accepted since the load.
  int32_t spec_k = 0;
  uint64_t spec_drafted = 0;
  uint64_t spec_accepted = 0;
  // A draft model's weights, KV pool and activations (once loaded).
  uint64_t draft_bytes = 0;
  SlotCounters counters;
  GrammarCounters grammar;
  uint64_t load_bytes_done = 0;
  uint64_t load_bytes_total = 0;
  double load_seconds = 0;
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
  // The model while READY or UNLOADING (e.g. for tokenizing; the Tokenizer
  // is thread-safe), else null. Never drive its sessions or backends.
  std::shared_ptr<const runtime::Model> model() const;
  // Effective context size (0 until loaded).
  int64_t n_ctx() const;

  // Queues a sequence. FAILED_PRECONDITION unless READY; RESOURCE_EXHAUSTED
  // when `parallel` sequences run and `queue_size` wait. Once accepted, the
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

  // Starts unloading: new requests are refused; queued and running
  // sequences continue until `drain_deadline` and are then cancelled with
  // `cancel_reason`; then memory is freed and `done` runs (on the slot's
  // thread, or before this returns for a FAILED slot).
  // FAILED_PRECONDITION while LOADING or when already unloading.
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
  // Cancels whatever runs or waits (UNAVAILABLE), lets a load in progress
  // complete, frees everything and joins the slot's thread. Idempotent; the
  // slot stays valid (STOPPED or FAILED) for whoever still holds it. Must
  // not be called on the slot's own thread.
  void Stop();

 private:
  struct Active;
  using Task = std::function<void()>;

  Slot(SlotConfig config, Hooks hooks);
  void ThreadMain();
  // Admits the model on the device its backend would use: the backend to
  // load with ("cpu" when "auto" does not fit the device), or
  // RESOURCE_EXHAUSTED when "cuda" was asked for and does not fit.
  // `device_estimate`: KV and graph scratch at the device's prefill chunk
  // (the weights are re-counted in the device's layout).
  // `draft`: a draft model's file, whose weights are counted too (its KV
  // and scratch are in `device_estimate`), or null.
  absl::StatusOr<std::string> AdmitOnDevice(const gguf::GgufFile& file,
                                            const gguf::GgufFile* draft,
                                            const MemoryEstimate& device_estimate);
  absl::Status Load();
  // The draft model's weights, KV pool and activations (0 without one);
  // the slot's thread only.
  uint64_t DraftBytes() const;
  void Serve();
  void Teardown();
  void SetState(SlotState state, absl::Status error = absl::OkStatus());
  // Ends a sequence the engine held (`stats` from its last event, or the
  // engine's view when it was taken out early).
  void FinishSequence(Active& a, absl::Status status, FinishReason reason,
                      const runtime::GenerationStats& stats);
  void FinishUnstarted(const std::shared_ptr<Sequence>& seq, absl::Status status);
  void UpdateGauges();
  void RecordStep(const runtime::EngineStepStats& step);
  std::string StateError() const;  // requires mu_

  const SlotConfig config_;
  const Hooks hooks_;
  ModelMetrics* metrics_ = nullptr;  // null without Hooks::metrics
  Notifier state_notifier_;
  std::thread thread_;

  // Owned by the slot's thread.
  std::unique_ptr<runtime::StepEngine> engine_;
  std::shared_ptr<runtime::Model> model_mut_;  // for knob changes
  // spec "draft": the engine's drafter (the engine drives it; the slot
  // reads its memory figures between steps).
  std::shared_ptr<runtime::ModelDrafter> drafter_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  // All guarded by mu_.
  SlotState state_ = SlotState::kLoading;
  absl::Status error_;
  std::shared_ptr<const runtime::Model> model_;
  int64_t n_ctx_ = 0;
  std::string kv_type_;
  int32_t kv_block_ = 0;
  int64_t kv_blocks_total_ = 0;
  uint64_t kv_block_bytes_ = 0;
  int64_t token_budget_ = 0;
  std::string summary_;
  KnobOverrides knobs_;
  MemoryEstimate estimate_;
  uint64_t kv_bytes_ = 0;
  uint64_t scratch_bytes_ = 0;
  uint64_t backend_bytes_ = 0;  // read on the slot's thread (load, each step)
  uint64_t backend_gen_ = 0;    // the backend's pool_gen() when it was read
  // Submitted, not yet handed to the engine (the worker takes them before
  // its next step).
  std::deque<std::shared_ptr<Sequence>> queue_;
  std::set<std::shared_ptr<Sequence>> live_;  // submitted and not finished
  int32_t running_ = 0;                        // the engine's running sequences
  int32_t waiting_ = 0;                        // ... and waiting ones
  int64_t kv_blocks_used_ = 0;
  int64_t kv_blocks_cached_ = 0;
  std::vector<int64_t> sequence_blocks_;
  uint64_t preemptions_ = 0;
  bool prefix_cache_ = false;
  uint64_t prefix_hit_tokens_ = 0;
  uint64_t prefix_evictions_ = 0;
  uint64_t steps_ = 0;
  uint64_t spec_drafted_ = 0;
  uint64_t spec_accepted_ = 0;
  uint64_t draft_bytes_ = 0;
  std::vector<Task> tasks_;
  SlotCounters counters_;
  bool stop_requested_ = false;  // the destructor: unload at once
  bool unloading_ = false;
  Clock::time_point drain_deadline_;
  absl::Status cancel_reason_;
  bool drain_cancelled_ = false;
  Clock::time_point unload_started_;
  SlotCounters counters_at_unload_;
  std::function<void(const UnloadResult&)> unload_done_;
  double load_seconds_ = 0;

  GrammarCounters grammar_;  // guarded by mu_
  // The engine's mask totals at the last UpdateGauges (the counters advance
  // by the difference); the slot's thread only.
  uint64_t masks_seen_ = 0;
  double mask_seconds_seen_ = 0;
  // ... and the engine's speculative totals (the same for the counters).
  uint64_t spec_drafted_seen_ = 0;
  uint64_t spec_accepted_seen_ = 0;
  // A constraint reached the model's GrammarCompiler: only then is its
  // stats() read (Model::grammars() builds the vocabulary on first use).
  std::atomic<bool> grammar_used_{false};

  std::atomic<uint64_t> load_done_{0};
  std::atomic<uint64_t> load_total_{0};
};

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_SERVING_SLOT_H_
