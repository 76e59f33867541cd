// Engine: continuous batching over one model — every running sequence in
// one forward pass per step, the shape vLLM's engine core has:
//   schedule  the Scheduler picks each sequence's tokens for this step
//             (decodes first, then prefill chunks, under the token budget
//             and the KV pool's blocks; preempting when the pool is dry);
//   run       the BatchRunner evaluates them in one graph;
//   update    each sequence that completed a row samples its next token
//             (its own Completion: sampler, seed, penalties, stop strings,
//             max tokens), and finished sequences free their blocks.
// Per-sequence semantics stay per sequence; a sequence's greedy tokens do
// not depend on what else shares its steps (BatchRunner's numerics note).
//
// The engine owns no thread: the caller (the daemon's slot worker, the
// bench) calls Step() in a loop and Cancel() between steps.
//
// Not thread-safe.
#ifndef MINFER_ENGINE_RUNTIME_ENGINE_H_
#define MINFER_ENGINE_RUNTIME_ENGINE_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/runtime/batch_runner.h"
#include "engine/runtime/completion.h"
#include "engine/runtime/drafter.h"
#include "engine/runtime/spec_gate.h"
#include "engine/runtime/kv_events.h"
#include "engine/runtime/scheduler.h"

namespace minfer::runtime {

struct EngineOptions {
  int32_t max_seqs = 16;     // sequences running at once
  int64_t token_budget = 0;  // tokens per step; 0: MINFER_BATCH_TOKENS
  int64_t n_ctx = 4096;      // tokens per sequence at most
  int32_t kv_block = 0;      // rows per KV block; 0: MINFER_KV_BLOCK
  // KV pool size in blocks (the reserved block included); 0: max_seqs
  // sequences of n_ctx.
  int64_t kv_blocks = 0;
  std::optional<graph::DType> kv_type;
  int32_t top_k = 64;  // candidates computed where the logits are
  // Automatic prefix caching (scheduler.h); unset: MINFER_PREFIX_CACHE.
  std::optional<bool> prefix_cache;
  // Where constrained rows are masked. On the backend (BatchItem::mask):
  // masks are computed before the forward (in parallel over sequences) and
  // the device's top-k applies them, so no row is read back. On the host:
  // masks are computed on the mask thread while the forward runs, and the
  // whole row is read and masked before sampling. Unset: the backend on a
  // GPU (a row read back costs more than the overlap gains), the host on
  // the CPU (the row is already in memory).
  std::optional<bool> backend_masks;
  // Speculative decoding with n-gram drafts (drafter.h): up to spec_k
  // drafted tokens ride along a sequence's decode token, and the step's
  // rows for them are verified in order — the sequence samples each row as
  // it would have (same sampler, same random draws, rows equal to a plain
  // step's) and a draft is accepted while it equals the sample. A draft is
  // one token (the drafter's distribution q is one-hot), so this is the
  // standard rejection rule exactly: the draft d survives with probability
  // p(d) = min(1, p(d)/q(d)), and on refusal the sample is a draw from the
  // normalized residual max(0, p - q); greedy or sampled, the output equals
  // the plain run's, seeds included. Constrained sequences draft too: a
  // draft the grammar forbids is cut before it costs a row, and each
  // drafted row is sampled under the grammar's state at its position —
  // with masks on the host, the whole row is read and masked after the
  // tokens before it are accepted (so drafts may cross a think block's end
  // or a trigger); with masks on the backend, the masks of every drafted
  // position are computed before the forward by advancing the matcher
  // over the drafts and rolling it back (Completion::ComputeDraftMasks),
  // so only sequences under one matcher to their end draft there.
  // 0: off; unset: the model's MINFER_SPEC_K knob (read between steps).
  std::optional<int32_t> spec_k;
  // Output rows a step may spend on drafts beyond one per sequence
  // (BatchRunnerOptions::max_rows = max_seqs + spec_rows). Unset:
  // SpecRows(max_seqs) when speculation is on at creation (spec_k > 0, or
  // a drafter given), else 0: a MINFER_SPEC_K raised later then drafts
  // only into the rows that sequences not running leave free.
  std::optional<int32_t> spec_rows;
  // The drafter (null: NgramDrafter) — a draft model's (ModelDrafter,
  // which then serves this engine alone), or a test's.
  std::shared_ptr<Drafter> drafter;
  // Drafts only where they pay (spec_gate.h: decode throughput with and
  // without drafts measured per batch size). Unset: the model's
  // MINFER_SPEC_GATE knob (read between steps).
  std::optional<bool> spec_gate;
  // KV-cache events (kv_events.h): recorded as the prefix cache changes,
  // taken with TakeKvEvents; the hash chain's seed.
  bool kv_events = false;
  std::string kv_hash_seed = std::string(kDefaultKvHashSeed);
};

// The draft rows an engine of max_seqs sequences gets by default
// (EngineOptions::spec_rows): a row per sequence, so that at full
// concurrency each can verify a draft or two, and at least 16, so that one
// stream can verify long runs (spec_k up to 16). Each costs a row of logits
// in the largest graph.
inline int32_t SpecRows(int32_t max_seqs) { return std::max<int32_t>(max_seqs, 16); }

// What a step did for one sequence.
struct EngineEvent {
  uint64_t id = 0;
  StepOutput out;           // the token sampled this step, if any
  bool finished = false;
  FinishReason reason = FinishReason::kLength;
  absl::Status status;      // an engine error that ended the sequence
  GenerationStats stats;    // set when finished
};

struct EngineStepStats {
  int64_t sequences = 0;  // scheduled this step
  int64_t tokens = 0;
  int64_t prefill_tokens = 0;
  int64_t preempted = 0;
  int64_t cached_tokens = 0;  // prompt tokens admissions took from the prefix cache
  int64_t evictions = 0;      // cached blocks reused for other contents
  double seconds = 0;
  // Of `seconds`, the batch runner's part: the device's forward and the
  // rows' readback (the rest is the host's scheduling, drafting and
  // sampling).
  double forward_seconds = 0;
};

// A snapshot of an engine for status reports and metrics.
struct EngineSnapshot {
  int64_t running = 0;
  int64_t waiting = 0;
  int32_t kv_block = 0;          // rows per block
  int64_t kv_blocks_total = 0;   // allocatable
  int64_t kv_blocks_used = 0;
  int64_t kv_blocks_cached = 0;  // free blocks holding a cached prefix
  int64_t kv_block_bytes = 0;    // over all layers
  int64_t kv_bytes = 0;          // the pool
  graph::DType kv_type = graph::DType::kF32;
  int64_t activation_bytes = 0;  // the graphs' arenas
  std::vector<int64_t> sequence_blocks;  // per running sequence, admission order
  int64_t preemptions = 0;
  bool prefix_cache = false;
  int64_t prefix_hit_tokens = 0;  // prompt tokens taken from the cache, not computed
  int64_t prefix_evictions = 0;   // cached blocks reused for other contents
  int64_t steps = 0;
  // Structured outputs: sequences with a grammar now, masks computed so far
  // and their total time (on the mask thread, overlapped with the forward).
  int64_t constrained_running = 0;
  int64_t grammar_masks = 0;
  double grammar_mask_seconds = 0;
  // Speculative decoding: tokens drafted into steps and accepted of them.
  int64_t spec_drafted = 0;
  int64_t spec_accepted = 0;
  // Steps whose drafts the gate (EngineOptions::spec_gate) held back.
  int64_t spec_gate_held = 0;
  int64_t token_budget = 0;
  int64_t n_ctx = 0;
  EngineStepStats last_step;
};

// What drives sequences step by step: the Engine below, or a fake in tests
// of its callers (the daemon's slot).
class StepEngine {
 public:
  virtual ~StepEngine() = default;
  // Validates and queues a request; returns its id.
  virtual absl::StatusOr<uint64_t> Add(GenerateRequest request) = 0;
  // Ends a sequence now; no event follows. Unknown ids are ignored.
  virtual void Cancel(uint64_t id) = 0;
  // One step; appends an event for every sequence that got a token or
  // finished.
  virtual absl::Status Step(std::vector<EngineEvent>* events) = 0;
  virtual EngineSnapshot Snapshot() const = 0;
  // KV-cache events since the last call (EngineOptions::kv_events).
  virtual void TakeKvEvents(std::vector<KvEvent>* /*out*/) {}
  // Empties the prefix cache (its blocks stay with the sequences holding
  // them but are no longer reusable), recording their removal; returns how
  // many blocks it held. Before the pool is freed (unload, sleep).
  virtual int64_t ClearPrefixCache() { return 0; }
};

class Engine : public StepEngine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(std::shared_ptr<const Model> model,
                                                        const EngineOptions& options);

  // Validates and queues a request (Completion::Create's errors), or
  // RESOURCE_EXHAUSTED with the figures when it could not fit the KV pool
  // even alone. Returns its id.
  absl::StatusOr<uint64_t> Add(GenerateRequest request) override;
  // Ends a sequence now (its blocks are freed; no event follows). Unknown
  // ids are ignored.
  void Cancel(uint64_t id) override;

  // One step: schedule -> run -> update. Appends an event for every
  // sequence that sampled a token or finished. A failed forward ends the
  // step's sequences with its status (events) and is also returned.
  absl::Status Step(std::vector<EngineEvent>* events) override;
  EngineSnapshot Snapshot() const override;
  void TakeKvEvents(std::vector<KvEvent>* out) override;
  int64_t ClearPrefixCache() override;

  bool HasWork() const { return scheduler_->size() > 0; }
  int64_t sequences() const { return scheduler_->size(); }
  int64_t running() const { return scheduler_->running(); }
  int64_t waiting() const { return scheduler_->waiting(); }
  const EngineStepStats& last_step() const { return last_; }
  int64_t preemptions() const { return scheduler_->preemptions(); }
  int64_t steps() const { return steps_; }
  // The step number (Step calls made so far) of each token a sequence got,
  // for scheduling tests; cleared on finish.
  const Scheduler& scheduler() const { return *scheduler_; }
  const BatchRunner& runner() const { return *runner_; }
  BatchRunner& runner() { return *runner_; }
  const KvPool& pool() const { return runner_->pool(); }
  int64_t n_ctx() const { return runner_->n_ctx(); }
  const EngineOptions& options() const { return opt_; }  // effective values

 private:
  Engine() = default;
  struct Seq {
    std::unique_ptr<Completion> c;
    std::vector<int32_t> tokens;  // prompt + sampled
    std::chrono::steady_clock::time_point added;
    bool got_token = false;
    bool scheduled = false;
    double decode_seconds = 0;
    int64_t drafts = 0;  // drafted tokens at the end of `tokens` (this step's)
    // Drafts back off while they fail: after `misses` steps in a row whose
    // drafts were all refused, while the engine's recent drafted tokens are
    // accepted less than half the time, the sequence skips 2^(misses - 1) - 1 steps
    // (none after a single miss; at most 31; 127 while the engine's drafts
    // mostly fail, spec_rate_); an accepted draft resets it. A sequence that
    // starts while drafts mostly fail starts backed off (its first draft
    // after 63 steps). So text
    // that does not repeat, or a draft model that disagrees with the
    // target, costs a few rounds, not one a step.
    int32_t misses = 0;
    int32_t skip = 0;
  };
  void Finish(uint64_t id, Seq& s, std::vector<EngineEvent>* events, absl::Status status);
  // MINFER_BATCH_TOKENS changes apply between steps.
  void RefreshKnobs();
  int64_t BudgetKnob() const;

  std::shared_ptr<const Model> model_;
  EngineOptions opt_;
  std::unique_ptr<KvBlockHasher> kv_hasher_;  // with EngineOptions::kv_events
  std::unique_ptr<BatchRunner> runner_;
  std::unique_ptr<Scheduler> scheduler_;
  std::map<uint64_t, Seq> seqs_;
  uint64_t next_id_ = 1;
  uint64_t knob_gen_ = 0;
  bool options_budget_fixed_ = false;  // EngineOptions::token_budget given: the knob is not read
  bool options_cache_fixed_ = false;   // EngineOptions::prefix_cache given
  int64_t steps_ = 0;
  EngineStepStats last_;
  std::vector<BatchItem> items_;
  std::vector<RowResult> results_;
  std::vector<RowResult> extra_;  // speculative rows (BatchRunner::Run)
  // Speculative decoding (EngineOptions::spec_k): drafts for the next step.
  std::shared_ptr<Drafter> drafter_;
  std::vector<std::vector<int32_t>> drafts_;  // ProposeAll's output (reused)
  void ProposeDrafts();
  uint64_t draft_cursor_ = 0;  // the last sequence given drafts (round robin)
  int32_t spec_k_ = 0;  // effective
  bool options_spec_fixed_ = false;  // EngineOptions::spec_k given
  bool spec_gate_on_ = true;
  bool options_gate_fixed_ = false;  // EngineOptions::spec_gate given
  SpecGate gate_;
  int64_t spec_drafted_ = 0;
  // Acceptance of recent drafting rounds (accepted / drafted, an average
  // with weight 1/4 per round), optimistic at first: below kSpecLowRate,
  // the engine's drafts mostly fail and sequences back off further.
  double spec_rate_ = 1.0;
  // Drafted tokens accepted, recently: averages of the accepted and drafted
  // counts per round (weight 1/8; each starts at one round of one accepted
  // draft, so the first rounds' misses do not weigh as a rate of zero).
  // While their ratio is below kSpecBackoffRate a round with every draft
  // refused starts the sequence's back-off (Seq::misses). Two rounds in a
  // row that refuse everything take a ratio of 0.7 to ~0.6, a drafter that
  // is always wrong (k = 4) to 0.45.
  double spec_accepted_avg_ = 1;
  double spec_drafted_avg_ = 1;
  int64_t spec_accepted_ = 0;

  // One thread that computes the step's grammar masks while the caller's
  // thread runs the forward pass. Created at the first constrained step.
  class MaskWorker {
   public:
    MaskWorker();
    ~MaskWorker();
    void Run(std::function<void()> job);  // starts job on the thread
    void Wait();                          // until it has finished
   private:
    void Loop();
    std::mutex mu_;
    std::condition_variable cv_;
    std::function<void()> job_;
    bool done_ = true;
    bool quit_ = false;
    std::thread thread_;
  };
  std::unique_ptr<MaskWorker> mask_worker_;
  // A constrained row's completion, its item, and the drafts at the end of
  // the item's tokens (masks for each drafted row too).
  struct ToMask {
    Completion* c;
    int64_t item;
    int64_t drafts;
  };
  std::vector<ToMask> to_mask_;
  bool backend_masks_ = false;
  bool late_masks_ = true;  // MINFER_LATE_MASKS: backend masks overlap the forward
  int64_t grammar_masks_ = 0;
  double grammar_mask_seconds_ = 0;
  double mask_seconds_step_ = 0;
};

}  // namespace minfer::runtime

#endif  // MINFER_ENGINE_RUNTIME_ENGINE_H_
