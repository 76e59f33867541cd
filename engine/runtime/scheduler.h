// Scheduler: the bookkeeping half of continuous batching — which sequences
// get how many tokens in the next forward step, under a token budget and
// the KV pool's free blocks. It touches no model and no device, so it is
// tested with a fake runner (tests/engine/runtime/scheduler_test.cc), the
// way vLLM tests its scheduler.
//
// A sequence has `known` tokens (prompt + sampled) and `computed` tokens
// (those whose K/V are in the pool); it needs known - computed more.
// Schedule() builds one step in three passes:
//   1. every running sequence that needs one token (decode) gets it, in
//      admission order;
//   2. running sequences still in their prompt get chunks of what the
//      budget leaves, in admission order;
//   3. waiting sequences are admitted in FIFO order, each with a chunk of
//      what is left, while a sequence slot, budget and blocks for the chunk
//      remain (the head of the queue is never skipped).
// So a long prompt is spread over several steps and every running sequence
// still advances every step: a new arrival delays the others by at most the
// step its chunk shares with them.
//
// Blocks: before a sequence runs rows [computed, computed + count) it holds
// BlocksFor(computed + count) blocks. When the pool runs dry in passes 1-2
// the most recently admitted running sequence is preempted: its blocks are
// freed, computed drops to 0, and it goes back to the front of the waiting
// queue to recompute later (its known tokens are kept: nothing is lost or
// repeated). The caller must not Add a sequence that could not fit the pool
// on its own (Fits), so the oldest sequence always progresses.
//
// Prefix caching (options.prefix_cache, for sequences added with their
// tokens): when a sequence is admitted with nothing computed, it first
// takes the longest chain of cached blocks holding its first tokens
// (BlockAllocator::AcquirePrefix) and starts computing after them; at
// least its last known token is always computed, as its row gives the next
// token. Whenever a step fills one of its blocks, the block is published
// for later sequences. A preempted sequence that is admitted again finds
// its own published blocks, unless they were evicted meanwhile. A sequence
// matches and publishes blocks only in its own cache namespace (Add's
// `cache_ns`; BlockAllocator explains why): sequences of different
// namespaces never share blocks.
//
// Fair sharing. Every sequence belongs to a group (a tenant) with a weight,
// and carries a priority. A group's load is its running sequences over its
// weight; its share of the max_seqs sequence slots is in proportion to its
// weight among the groups that have work (running or waiting).
//   - Admission takes the waiting sequence of the least-loaded group
//     (highest priority first within it, then queue order; preempted ones
//     are at the front). When every slot is taken and that group is below
//     its share, the newest sequence of the most-loaded group that is above
//     its share is preempted to make room.
//   - Prefill chunks (pass 2) first get the budget in proportion to their
//     groups' weights, then whatever is left in order.
//   - When the pool runs dry, the victim is the newest sequence of the
//     most-loaded group (with one group: the newest, as above).
// With one group and equal priorities all of this is the FIFO above.
//
// Not thread-safe.
#ifndef MINFER_ENGINE_RUNTIME_SCHEDULER_H_
#define MINFER_ENGINE_RUNTIME_SCHEDULER_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "engine/runtime/kv_pool.h"

namespace minfer::runtime {

struct SchedulerOptions {
  int32_t max_seqs = 16;        // running sequences at most (<= token_budget)
  int64_t token_budget = 512;   // tokens per step
  int32_t block_size = 16;      // KV rows per block
  int64_t max_seq_rows = 4096;  // KV rows one sequence may hold (n_ctx)
  bool prefix_cache = false;    // see the file comment
};

class Scheduler {
 public:
  using SeqId = uint64_t;

  // `blocks` must outlive the scheduler; max_seqs is clamped to the budget.
  Scheduler(const SchedulerOptions& options, BlockAllocator* blocks);

  // Prefix caching on or off, and the salt of the blocks published from now
  // on (what, besides the tokens, shapes a block's contents: blocks of
  // another salt are never matched). Apply between steps.
  void SetPrefixCache(bool on) { opt_.prefix_cache = on; }
  void SetPrefixSalt(uint64_t salt) { salt_ = salt; }

  // Changes the token budget from the next Schedule on (>= max_seqs).
  void SetTokenBudget(int64_t budget) { opt_.token_budget = std::max<int64_t>(budget, opt_.max_seqs); }

  // Whether a sequence that may grow to `rows` KV rows fits the pool alone.
  bool Fits(int64_t rows) const;

  // Queues a sequence whose first `known` tokens are known (its prompt).
  // `tokens` (prompt and sampled tokens, at least `known` of them whenever
  // Schedule or Commit runs; it must outlive the sequence) makes its blocks
  // cacheable; null: never cached. `cache_ns` is its prefix-cache namespace
  // ("" the default one).
  void Add(SeqId id, int64_t known, const std::vector<int32_t>* tokens = nullptr,
           std::string cache_ns = {});
  // Its group (share weight > 0) and priority; call right after Add.
  void SetClass(SeqId id, uint32_t group, double weight, int32_t priority);
  // One more token is known (sampled after the step that completed it).
  void Append(SeqId id);
  // Speculative decoding: the sequence's next decode step may also carry
  // `n` drafted tokens after its known ones (its `tokens` must hold them
  // until Commit). They are scheduled only in the decode pass, as far as the
  // budget, the context and the blocks allow (Work::drafts says how many);
  // the step's rows for them are verified by the caller, and Commit's
  // `rejected` takes back the KV rows of the drafts it refused. Cleared by
  // Schedule (a sequence that did not get them must be given them again)
  // and by Commit.
  void SetDrafts(SeqId id, int64_t n);
  // Forgets a sequence, waiting or running, and frees its blocks.
  void Remove(SeqId id);

  struct Work {
    SeqId id = 0;
    int64_t start = 0;  // first token evaluated (its position)
    int64_t count = 0;  // tokens evaluated
    // start + count == known (+ drafts): the step's row for the last token
    // gives the sequence's next token.
    bool completes = false;
    // Drafted tokens among the last of `count` (SetDrafts): the rows of the
    // last drafts + 1 tokens each give a token to verify.
    int64_t drafts = 0;
  };
  struct Step {
    std::vector<Work> work;        // passes 1, 2, 3 in order
    std::vector<SeqId> preempted;  // sent back to waiting while planning this step
    int64_t tokens = 0;
    int64_t cached = 0;  // tokens this step's admissions took from the prefix cache
    bool empty() const { return work.empty(); }
  };
  // Plans one step (see the file comment).
  Step Schedule();
  // The step ran: every scheduled sequence has `count` more tokens computed,
  // less `rejected[i]` for work i (empty: none; at most its drafts): the
  // KV rows of refused drafts are dropped, and the sequence's blocks past
  // what its computed rows need are freed (never published: a block is
  // published only once computed rows fill it).
  void Commit(const Step& step, absl::Span<const int64_t> rejected = {});

  // A sequence's block table (valid until the next Schedule/Remove).
  absl::Span<const int32_t> blocks(SeqId id) const;

  struct SeqInfo {
    int64_t known = 0;
    int64_t computed = 0;
    int64_t blocks = 0;
    bool running = false;
    int64_t cached = 0;  // tokens taken from the prefix cache at its last admission
    uint32_t group = 0;
  };
  std::optional<SeqInfo> Info(SeqId id) const;
  // Blocks held by each running sequence, in admission order.
  std::vector<int64_t> RunningBlocks() const;
  int64_t running() const { return static_cast<int64_t>(running_.size()); }
  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t size() const { return static_cast<int64_t>(seqs_.size()); }
  int64_t preemptions() const { return preemptions_; }
  // Tokens taken from the prefix cache instead of computed, over all
  // admissions.
  int64_t prefix_hit_tokens() const { return prefix_hit_tokens_; }
  const SchedulerOptions& options() const { return opt_; }

 private:
  struct Seq {
    int64_t known = 0;
    int64_t computed = 0;
    std::vector<int32_t> blocks;
    bool running = false;
    const std::vector<int32_t>* tokens = nullptr;
    std::string cache_ns;
    int64_t published = 0;  // leading blocks published (or taken from the cache)
    int64_t drafts = 0;     // SetDrafts, for the next Schedule
    int64_t cached = 0;
    uint32_t group = 0;
    double weight = 1.0;
    int32_t priority = 0;
  };
  // Running sequences of `group` over its weight.
  double Load(uint32_t group, double weight) const;
  // The next waiting sequence to admit (waiting_ must not be empty).
  std::deque<SeqId>::iterator PickWaiting();
  // The running sequence to preempt: the newest of the most-loaded group.
  SeqId PickVictim() const;
  // The most-loaded group's newest running sequence if that group is above
  // its share and `group` (weight w) below its own; 0 if none.
  SeqId FairnessVictim(uint32_t group, double w) const;
  // Groups with work and the sum of their weights.
  double ActiveWeight() const;
  // Prefix caching at admission: takes s's cached leading blocks.
  void TakeCachedPrefix(Seq& s);
  // Publishes the blocks of s that its computed rows fill.
  void PublishFull(Seq& s);
  // Grows s's blocks to cover `rows` rows, preempting the most recently
  // admitted running sequences as needed (passes 1-2). False when `id`
  // itself was preempted. Preempted work already in `step` is taken back.
  bool Reserve(SeqId id, int64_t rows, Step* step, int64_t* budget);
  void Preempt(SeqId id, Step* step, int64_t* budget);

  SchedulerOptions opt_;
  BlockAllocator* alloc_;
  std::map<SeqId, Seq> seqs_;
  std::vector<SeqId> running_;  // admission order
  std::deque<SeqId> waiting_;   // FIFO; preempted sequences go to the front
  int64_t preemptions_ = 0;
  uint64_t salt_ = 0;
  int64_t prefix_hit_tokens_ = 0;
  std::map<uint32_t, int64_t> running_by_group_;
};

}  // namespace minfer::runtime

#endif  // MINFER_ENGINE_RUNTIME_SCHEDULER_H_
