// The scheduler with a fake runner (no model): a step "evaluates" the
// scheduled tokens by checking that each covers exactly the rows its
// sequence is missing and holds the blocks for them, and a sequence whose
// step completes gets a deterministic next token. The tests pin the
// scheduling contract: order, budget, chunking, the one-step delay bound,
// preemption and resume without lost or repeated tokens, removal.
#include "engine/runtime/scheduler.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace minfer::runtime {
namespace {

using SeqId = Scheduler::SeqId;

// Drives a Scheduler like the engine does and records what happened.
class FakeEngine {
 public:
  FakeEngine(SchedulerOptions opt, int64_t n_blocks)
      : alloc_(n_blocks, 1), sched_(opt, &alloc_), opt_(opt) {}

  // A sequence with a prompt of n tokens that wants `max_new` tokens.
  void Add(SeqId id, int64_t prompt, int64_t max_new) {
    sched_.Add(id, prompt);
    seqs_[id] = {prompt, max_new, {}};
  }
  // The same with the prompt's token ids (cacheable: the scheduler sees
  // the ids, and each sampled token is appended to them).
  void AddTokens(SeqId id, std::vector<int32_t> prompt, int64_t max_new,
                 std::string cache_ns = {}) {
    const int64_t n = static_cast<int64_t>(prompt.size());
    ids_[id] = std::move(prompt);
    sched_.Add(id, n, &ids_[id], std::move(cache_ns));
    seqs_[id] = {n, max_new, {}};
  }
  // A sequence of a share group (a tenant) with a weight and priority.
  void AddInGroup(SeqId id, int64_t prompt, int64_t max_new, uint32_t group, double weight,
                  int32_t priority = 0) {
    Add(id, prompt, max_new);
    sched_.SetClass(id, group, weight, priority);
    group_[id] = group;
    added_step_[id] = steps_;
  }
  void Remove(SeqId id) {
    sched_.Remove(id);
    seqs_.erase(id);
  }
  // Tokens per step from Add to the last token.
  double Rate(SeqId id) {
    const auto& t = token_steps_[id];
    return static_cast<double>(t.size()) / static_cast<double>(t.back() - added_step_[id]);
  }
  int64_t RunningIn(uint32_t group) const {
    int64_t n = 0;
    for (const auto& [id, g] : group_) {
      auto info = sched_.Info(id);
      if (info.has_value() && info->running && g == group) ++n;
    }
    return n;
  }
  // Every block a known sequence holds is held (refs >= 1), whatever was
  // evicted: the pool never hands out a block in use.
  void CheckHeldBlocks() const {
    std::map<int32_t, int32_t> holders;
    for (const auto& [id, s] : seqs_) {
      for (int32_t b : sched_.blocks(id)) holders[b]++;
    }
    for (const auto& [b, n] : holders) {
      EXPECT_EQ(alloc_.refs(b), n) << "block " << b;
    }
  }

  // One step; returns the plan it ran.
  Scheduler::Step Step() {
    Scheduler::Step st = sched_.Schedule();
    ++steps_;
    for (SeqId p : st.preempted) {
      if (auto g = group_.find(p); g != group_.end()) preempted_in_[g->second]++;
    }
    EXPECT_LE(st.tokens, opt_.token_budget);
    int64_t sum = 0;
    std::set<SeqId> seen;
    for (const auto& w : st.work) {
      EXPECT_TRUE(seen.insert(w.id).second) << "sequence " << w.id << " twice in a step";
      auto info = sched_.Info(w.id);
      EXPECT_TRUE(info.has_value());
      // The step covers the rows the sequence is missing, from the first.
      EXPECT_EQ(w.start, info->computed);
      EXPECT_GE(w.count, 1);
      EXPECT_LE(w.start + w.count, info->known);
      EXPECT_EQ(w.completes, w.start + w.count == info->known);
      // It holds the blocks for them.
      EXPECT_GE(info->blocks * opt_.block_size, w.start + w.count);
      sum += w.count;
    }
    EXPECT_EQ(sum, st.tokens);
    EXPECT_LE(static_cast<int64_t>(st.work.size()), opt_.max_seqs);
    sched_.Commit(st);
    for (const auto& w : st.work) {
      evaluated_[w.id] += w.count;
      if (!w.completes) continue;
      auto& s = seqs_[w.id];
      // The token index is the sequence's known length: after a preemption
      // the recomputation must end at the same place, so the token stream
      // never repeats or skips an index.
      s.tokens.push_back(s.prompt + static_cast<int64_t>(s.tokens.size()));
      token_steps_[w.id].push_back(steps_);
      if (auto it = ids_.find(w.id); it != ids_.end()) {
        it->second.push_back(static_cast<int32_t>(7919 * it->second.size() % 50000));
        outputs_[w.id].push_back(it->second.back());
      }
      if (static_cast<int64_t>(s.tokens.size()) >= s.max_new) {
        finished_.push_back(w.id);
        Remove(w.id);
        ids_.erase(w.id);
      } else {
        sched_.Append(w.id);
      }
    }
    EXPECT_EQ(alloc_.used() + alloc_.free(), alloc_.total());
    EXPECT_LE(alloc_.cached(), alloc_.free());
    CheckHeldBlocks();
    return st;
  }
  void RunToEnd(int max_steps = 10000) {
    for (int i = 0; i < max_steps && sched_.size() > 0; ++i) Step();
    ASSERT_EQ(sched_.size(), 0) << "not finished after " << max_steps << " steps";
  }

  struct S {
    int64_t prompt, max_new;
    std::vector<int64_t> tokens;
  };
  BlockAllocator alloc_;
  Scheduler sched_;
  SchedulerOptions opt_;
  std::map<SeqId, S> seqs_;
  std::map<SeqId, std::vector<int64_t>> token_steps_;
  std::map<SeqId, int64_t> evaluated_;
  std::map<SeqId, std::vector<int32_t>> ids_;      // AddTokens: prompt + sampled
  std::map<SeqId, std::vector<int32_t>> outputs_;  // AddTokens: sampled
  std::map<SeqId, uint32_t> group_;                 // AddInGroup
  std::map<SeqId, int64_t> added_step_;
  std::map<uint32_t, int64_t> preempted_in_;
  std::vector<SeqId> finished_;
  int64_t steps_ = 0;
};

SchedulerOptions Opt(int32_t max_seqs, int64_t budget, int32_t bs = 16, int64_t rows = 4096,
                     bool cache = false) {
  SchedulerOptions o;
  o.prefix_cache = cache;
  o.max_seqs = max_seqs;
  o.token_budget = budget;
  o.block_size = bs;
  o.max_seq_rows = rows;
  return o;
}

TEST(SchedulerTest, DecodesFirstThenChunksInFifoOrder) {
  FakeEngine e(Opt(8, 32), 1000);
  e.Add(1, 10, 100);
  e.Add(2, 50, 100);
  e.Add(3, 5, 100);
  // Step 1: seq 1's whole prompt (10), then 22 of seq 2's 50; seq 3 waits
  // (the budget is spent; FIFO never skips the head).
  Scheduler::Step st = e.Step();
  ASSERT_EQ(st.work.size(), 2u);
  EXPECT_EQ(st.work[0].id, 1u);
  EXPECT_EQ(st.work[0].count, 10);
  EXPECT_TRUE(st.work[0].completes);
  EXPECT_EQ(st.work[1].id, 2u);
  EXPECT_EQ(st.work[1].count, 22);
  EXPECT_FALSE(st.work[1].completes);
  // Step 2: seq 1 decodes (1 token, first), seq 2 continues (28, completes),
  // seq 3 is admitted with its whole prompt (3 left... 32 - 1 - 28 = 3 of 5).
  st = e.Step();
  ASSERT_EQ(st.work.size(), 3u);
  EXPECT_EQ(st.work[0].id, 1u);
  EXPECT_EQ(st.work[0].count, 1);
  EXPECT_EQ(st.work[1].id, 2u);
  EXPECT_EQ(st.work[1].count, 28);
  EXPECT_TRUE(st.work[1].completes);
  EXPECT_EQ(st.work[2].id, 3u);
  EXPECT_EQ(st.work[2].count, 3);
  EXPECT_EQ(st.tokens, 32);
  // Step 3: two decodes first, then the rest of seq 3's prompt.
  st = e.Step();
  ASSERT_EQ(st.work.size(), 3u);
  EXPECT_EQ(st.work[0].count, 1);
  EXPECT_EQ(st.work[1].count, 1);
  EXPECT_EQ(st.work[2].id, 3u);
  EXPECT_EQ(st.work[2].start, 3);
  EXPECT_EQ(st.work[2].count, 2);
  e.RunToEnd();
  for (SeqId id : {1u, 2u, 3u}) EXPECT_EQ(e.seqs_.count(id), 0u);
  EXPECT_EQ(e.finished_.size(), 3u);
  EXPECT_EQ(e.alloc_.used(), 0);
}

TEST(SchedulerTest, RespectsMaxSequences) {
  FakeEngine e(Opt(2, 64), 1000);
  for (SeqId id = 1; id <= 4; ++id) e.Add(id, 4, 3);
  Scheduler::Step st = e.Step();
  EXPECT_EQ(st.work.size(), 2u);
  EXPECT_EQ(e.sched_.running(), 2);
  EXPECT_EQ(e.sched_.waiting(), 2);
  e.RunToEnd();
  EXPECT_EQ(e.finished_, (std::vector<SeqId>{1, 2, 3, 4}));
}

TEST(SchedulerTest, LongPromptDelaysRunningStreamsByOneStepAtMost) {
  // Four streams decode; a 2,000-token prompt arrives: it is chunked over
  // many steps and every running stream still gets a token every step.
  FakeEngine e(Opt(8, 64), 1000);
  for (SeqId id = 1; id <= 4; ++id) e.Add(id, 8, 200);
  for (int i = 0; i < 5; ++i) e.Step();
  e.Add(99, 2000, 5);
  const int64_t arrival = e.steps_;
  while (e.seqs_.count(99) && e.token_steps_[99].empty()) e.Step();
  ASSERT_FALSE(e.token_steps_[99].empty());
  const int64_t first = e.token_steps_[99].front();
  EXPECT_GE(first - arrival, 2000 / 60);  // chunked: ~(64 - 4) tokens per step
  for (SeqId id = 1; id <= 4; ++id) {
    const auto& ts = e.token_steps_[id];
    for (size_t i = 1; i < ts.size(); ++i) {
      EXPECT_EQ(ts[i] - ts[i - 1], 1) << "stream " << id << " skipped a step at " << ts[i];
    }
  }
}

TEST(SchedulerTest, PreemptsTheNewestAndResumesWithoutLosingTokens) {
  // 16-row blocks, 10 allocatable: three sequences that each grow to ~60
  // rows (4 blocks) cannot all fit; the newest is preempted and resumes.
  FakeEngine e(Opt(4, 64, 16), 11);
  e.Add(1, 20, 40);
  e.Add(2, 20, 40);
  e.Add(3, 20, 40);
  int64_t preempted_steps = 0;
  std::set<SeqId> victims;
  for (int i = 0; i < 2000 && e.sched_.size() > 0; ++i) {
    Scheduler::Step st = e.Step();
    for (SeqId v : st.preempted) victims.insert(v);
    if (!st.preempted.empty()) ++preempted_steps;
  }
  ASSERT_EQ(e.sched_.size(), 0);
  EXPECT_GT(e.sched_.preemptions(), 0);
  EXPECT_EQ(victims.count(1), 0u) << "the oldest sequence is never preempted";
  EXPECT_EQ(e.finished_.size(), 3u);
  // Every sequence produced exactly its tokens, in order, once each.
  for (SeqId id : {1u, 2u, 3u}) {
    ASSERT_EQ(e.seqs_.count(id), 0u);
  }
  for (SeqId id : {1u, 2u, 3u}) {
    const auto& steps = e.token_steps_[id];
    EXPECT_EQ(steps.size(), 40u) << "sequence " << id;
  }
  // A preempted sequence recomputed its rows: it evaluated more than
  // prompt + generated - 1 tokens.
  for (SeqId v : victims) EXPECT_GT(e.evaluated_[v], 20 + 40 - 1);
  EXPECT_EQ(e.evaluated_[1], 20 + 40 - 1);
  EXPECT_EQ(e.alloc_.used(), 0);
}

TEST(SchedulerTest, TokenIndicesNeverRepeatAcrossPreemption) {
  FakeEngine e(Opt(3, 48, 8), 12);
  for (SeqId id = 1; id <= 5; ++id) e.Add(id, 10 + 7 * id, 30);
  // Capture each sequence's tokens before it is removed.
  std::map<SeqId, std::vector<int64_t>> tokens;
  for (int i = 0; i < 5000 && e.sched_.size() > 0; ++i) {
    for (auto& [id, s] : e.seqs_) tokens[id] = s.tokens;
    e.Step();
  }
  ASSERT_EQ(e.sched_.size(), 0);
  EXPECT_GT(e.sched_.preemptions(), 0);
  for (auto& [id, t] : tokens) {
    // The fake's token is the sequence's length when it was sampled: a
    // strictly increasing run prompt, prompt + 1, ... means no loss and no
    // repeat (the last one is taken before the final step).
    for (size_t i = 0; i < t.size(); ++i) EXPECT_EQ(t[i], 10 + 7 * id + static_cast<int64_t>(i));
  }
}

TEST(SchedulerTest, RemoveFreesBlocksOfRunningAndWaitingSequences) {
  FakeEngine e(Opt(1, 32, 16), 100);
  e.Add(1, 40, 10);
  e.Add(2, 40, 10);
  e.Step();
  EXPECT_EQ(e.alloc_.used(), 2);  // 32 rows of seq 1
  e.Remove(2);                    // waiting
  e.Remove(1);                    // running
  EXPECT_EQ(e.alloc_.used(), 0);
  EXPECT_EQ(e.sched_.size(), 0);
  EXPECT_TRUE(e.sched_.Schedule().empty());
}

TEST(SchedulerTest, FitsCountsTheWholePool) {
  BlockAllocator a(5, 1);  // 4 blocks of 16 rows
  Scheduler s(Opt(4, 64, 16, 1000), &a);
  EXPECT_TRUE(s.Fits(64));
  EXPECT_FALSE(s.Fits(65));
  Scheduler capped(Opt(4, 64, 16, 50), &a);
  EXPECT_TRUE(capped.Fits(1000));  // a sequence never holds more than max_seq_rows
}

TEST(SchedulerTest, ContextLimitStopsScheduling) {
  FakeEngine e(Opt(2, 64, 16, 32), 100);
  e.Add(1, 30, 100);
  e.Step();  // prompt: 30 rows
  e.Step();  // row 30
  e.Step();  // row 31: the context is full
  auto info = e.sched_.Info(1);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->computed, 32);
  // Nothing more can run for it: the engine finishes it (length).
  EXPECT_TRUE(e.sched_.Schedule().empty());
}

TEST(BlockAllocatorTest, AllOrNothing) {
  BlockAllocator a(6, 1);
  std::vector<int32_t> got;
  EXPECT_TRUE(a.Allocate(3, &got));
  EXPECT_EQ(got, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_FALSE(a.Allocate(3, &got));
  EXPECT_EQ(got.size(), 3u);
  EXPECT_EQ(a.free(), 2);
  a.Free(got);
  EXPECT_EQ(a.free(), 5);
  EXPECT_EQ(a.total(), 5);
}

// Prefix caching.

std::vector<int32_t> Ids(int64_t n, int32_t seed) {
  std::vector<int32_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<int32_t>((seed * 131 + i * 17) % 9973));
  return v;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(BlockAllocatorTest, PublishedBlocksAreFoundByTheirChainAndTokens) {
  BlockAllocator a(10, 1);
  const std::vector<int32_t> t = Ids(12, 1);  // 3 blocks of 4
  std::vector<int32_t> b;
  ASSERT_TRUE(a.Allocate(3, &b));
  a.Publish(b[0], BlockAllocator::kNoParent, 7, absl::MakeConstSpan(t).subspan(0, 4));
  a.Publish(b[1], b[0], 7, absl::MakeConstSpan(t).subspan(4, 4));
  // (b[2] is not full: never published.)
  std::vector<int32_t> got;
  EXPECT_EQ(a.AcquirePrefix(t, 4, 3, 7, &got), 2);
  EXPECT_EQ(got, (std::vector<int32_t>{b[0], b[1]}));
  EXPECT_EQ(a.refs(b[0]), 2);
  // Another salt, other tokens in the first block, or a limit: no or fewer.
  std::vector<int32_t> none;
  EXPECT_EQ(a.AcquirePrefix(t, 4, 3, 8, &none), 0);
  std::vector<int32_t> t2 = t;
  t2[1]++;
  EXPECT_EQ(a.AcquirePrefix(t2, 4, 3, 7, &none), 0);
  EXPECT_EQ(a.AcquirePrefix(t, 4, 1, 7, &none), 1);
  EXPECT_EQ(none, (std::vector<int32_t>{b[0]}));
  // The second block's tokens after another first block: not a match.
  std::vector<int32_t> t3 = t;
  t3[0]++;
  std::vector<int32_t> c;
  ASSERT_TRUE(a.Allocate(1, &c));
  a.Publish(c[0], BlockAllocator::kNoParent, 7, absl::MakeConstSpan(t3).subspan(0, 4));
  std::vector<int32_t> got3;
  EXPECT_EQ(a.AcquirePrefix(t3, 4, 3, 7, &got3), 1);
  EXPECT_EQ(got3, c);
}

// Namespaces (tenants, cache salts): a chain published in one is found
// only in the same one, compared exactly, and its later blocks are not
// reachable from another namespace's first block either.
TEST(BlockAllocatorTest, NamespacesNeverShareBlocks) {
  BlockAllocator a(10, 1);
  const std::vector<int32_t> t = Ids(8, 4);  // 2 blocks of 4
  std::vector<int32_t> b;
  ASSERT_TRUE(a.Allocate(2, &b));
  a.Publish(b[0], BlockAllocator::kNoParent, 7, "tenant-a", absl::MakeConstSpan(t).subspan(0, 4));
  a.Publish(b[1], b[0], 7, "tenant-a", absl::MakeConstSpan(t).subspan(4, 4));
  std::vector<int32_t> none;
  EXPECT_EQ(a.AcquirePrefix(t, 4, 2, 7, "tenant-b", &none), 0);
  EXPECT_EQ(a.AcquirePrefix(t, 4, 2, 7, &none), 0);              // the default namespace
  EXPECT_EQ(a.AcquirePrefix(t, 4, 2, 7, "tenant-", &none), 0);   // a prefix of the name
  EXPECT_EQ(a.AcquirePrefix(t, 4, 2, 7, "tenant-aa", &none), 0);
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(a.refs(b[0]), 1);
  std::vector<int32_t> got;
  EXPECT_EQ(a.AcquirePrefix(t, 4, 2, 7, "tenant-a", &got), 2);
  EXPECT_EQ(got, b);
  // Another namespace publishes the same tokens in blocks of its own; both
  // chains are then cached side by side, each found only by its own.
  std::vector<int32_t> c;
  ASSERT_TRUE(a.Allocate(2, &c));
  a.Publish(c[0], BlockAllocator::kNoParent, 7, "tenant-b", absl::MakeConstSpan(t).subspan(0, 4));
  a.Publish(c[1], c[0], 7, "tenant-b", absl::MakeConstSpan(t).subspan(4, 4));
  EXPECT_TRUE(a.published(c[0]) && a.published(c[1]));
  std::vector<int32_t> got_b, got_a;
  EXPECT_EQ(a.AcquirePrefix(t, 4, 2, 7, "tenant-b", &got_b), 2);
  EXPECT_EQ(got_b, c);
  EXPECT_EQ(a.AcquirePrefix(t, 4, 2, 7, "tenant-a", &got_a), 2);
  EXPECT_EQ(got_a, b);
}

TEST(BlockAllocatorTest, CachedBlocksAreEvictedLeastRecentFirstAndNeverWhileHeld) {
  BlockAllocator a(5, 1);  // 4 blocks
  const std::vector<int32_t> t = Ids(8, 2);
  std::vector<int32_t> b;
  ASSERT_TRUE(a.Allocate(2, &b));
  a.Publish(b[0], BlockAllocator::kNoParent, 0, absl::MakeConstSpan(t).subspan(0, 4));
  a.Publish(b[1], b[0], 0, absl::MakeConstSpan(t).subspan(4, 4));
  std::vector<int32_t> holder;  // a second sequence holds the first block
  ASSERT_EQ(a.AcquirePrefix(t, 4, 1, 0, &holder), 1);
  a.Free(b);  // the first sequence ends: b[1] is cached, b[0] still held
  EXPECT_EQ(a.used(), 1);
  EXPECT_EQ(a.cached(), 1);
  EXPECT_EQ(a.free(), 3);
  // Three blocks: the two never-published ones first, then b[1] (evicted);
  // b[0] is held and is not handed out.
  std::vector<int32_t> fresh;
  ASSERT_TRUE(a.Allocate(3, &fresh));
  EXPECT_EQ(a.evictions(), 1u);
  EXPECT_EQ(std::count(fresh.begin(), fresh.end(), b[0]), 0);
  EXPECT_EQ(std::count(fresh.begin(), fresh.end(), b[1]), 1);
  EXPECT_FALSE(a.published(b[1]));
  EXPECT_FALSE(a.Allocate(1, &fresh));  // b[0] is held
  // The chain now stops after b[0].
  std::vector<int32_t> got;
  EXPECT_EQ(a.AcquirePrefix(t, 4, 2, 0, &got), 1);
}

TEST(BlockAllocatorTest, AnEvictedParentInvalidatesItsChildren) {
  BlockAllocator a(4, 1);  // 3 blocks
  const std::vector<int32_t> t = Ids(8, 3);
  std::vector<int32_t> b;
  ASSERT_TRUE(a.Allocate(2, &b));
  a.Publish(b[0], BlockAllocator::kNoParent, 0, absl::MakeConstSpan(t).subspan(0, 4));
  a.Publish(b[1], b[0], 0, absl::MakeConstSpan(t).subspan(4, 4));
  a.Free({b[0]});  // released first: evicted first
  a.Free({b[1]});
  std::vector<int32_t> x;
  ASSERT_TRUE(a.Allocate(2, &x));  // the fresh block, then b[0]
  ASSERT_EQ(x[1], b[0]);
  // b[0] now holds other tokens of the same first block; republished, it
  // must not make b[1] (computed after b[0]'s old contents) reachable.
  a.Publish(b[0], BlockAllocator::kNoParent, 0, absl::MakeConstSpan(t).subspan(0, 4));
  std::vector<int32_t> got;
  EXPECT_EQ(a.AcquirePrefix(t, 4, 2, 0, &got), 1);
  EXPECT_EQ(got, (std::vector<int32_t>{b[0]}));
}

TEST(SchedulerTest, APromptStartingWithACachedPrefixComputesOnlyTheRest) {
  FakeEngine e(Opt(4, 64, 16, 4096, /*cache=*/true), 100);
  const std::vector<int32_t> system = Ids(70, 5);  // 4 full blocks + 6
  e.AddTokens(1, Concat(system, Ids(9, 6)), 3);
  e.RunToEnd();
  EXPECT_EQ(e.evaluated_[1], 79 + 2);
  // Same system prompt, another question: the 64 tokens of its 4 full
  // blocks come from the cache.
  e.AddTokens(2, Concat(system, Ids(20, 7)), 3);
  Scheduler::Step st = e.Step();
  ASSERT_EQ(st.work.size(), 1u);
  EXPECT_EQ(st.work[0].start, 64);
  EXPECT_EQ(st.work[0].count, 90 - 64);
  EXPECT_EQ(e.sched_.Info(2)->cached, 64);
  e.RunToEnd();
  EXPECT_EQ(e.evaluated_[2], 90 - 64 + 2);
  EXPECT_EQ(e.sched_.prefix_hit_tokens(), 64);
  // The same prompt again: everything but its last token could be cached,
  // but only whole blocks are (80 of 90, the rows it computed).
  e.AddTokens(3, Concat(system, Ids(20, 7)), 1);
  st = e.Step();
  ASSERT_EQ(st.work.size(), 1u);
  EXPECT_EQ(st.work[0].start, 80);
  EXPECT_EQ(st.work[0].count, 10);
  e.RunToEnd();
  // A prompt that is exactly the cached blocks still computes its last one.
  e.AddTokens(4, Ids(64, 5), 1);
  st = e.Step();
  ASSERT_EQ(st.work.size(), 1u);
  EXPECT_EQ(st.work[0].start, 48);
  EXPECT_EQ(st.work[0].count, 16);
  e.RunToEnd();
  EXPECT_EQ(e.alloc_.used(), 0);
  EXPECT_GT(e.alloc_.cached(), 0);
}

// Two namespaces (two tenants, or two cache salts) sending the same prompt:
// the second namespace computes all of it; a second request of the first
// namespace takes the cached blocks.
TEST(SchedulerTest, SequencesOfAnotherNamespaceNeverTakeCachedBlocks) {
  FakeEngine e(Opt(4, 128, 16, 4096, /*cache=*/true), 100);
  const std::vector<int32_t> prompt = Ids(70, 5);  // 4 full blocks + 6
  e.AddTokens(1, prompt, 2, "a");
  e.RunToEnd();
  e.AddTokens(2, prompt, 2, "b");
  Scheduler::Step st = e.Step();
  ASSERT_EQ(st.work.size(), 1u);
  EXPECT_EQ(st.work[0].start, 0);
  EXPECT_EQ(st.cached, 0);
  EXPECT_EQ(e.sched_.Info(2)->cached, 0);
  e.RunToEnd();
  EXPECT_EQ(e.sched_.prefix_hit_tokens(), 0);
  e.AddTokens(3, prompt, 2, "");  // the default namespace: nothing either
  st = e.Step();
  EXPECT_EQ(st.cached, 0);
  e.RunToEnd();
  e.AddTokens(4, prompt, 2, "a");
  st = e.Step();
  ASSERT_EQ(st.work.size(), 1u);
  EXPECT_EQ(st.work[0].start, 64);
  EXPECT_EQ(st.cached, 64);
  e.RunToEnd();
  e.AddTokens(5, prompt, 2, "b");  // b's own blocks, published by sequence 2
  EXPECT_EQ(e.Step().cached, 64);
  e.RunToEnd();
  EXPECT_EQ(e.sched_.prefix_hit_tokens(), 128);
}

TEST(SchedulerTest, AChatOfFiveTurnsRecomputesOnlyEachTurnsNewTokens) {
  FakeEngine e(Opt(2, 32, 16, 4096, /*cache=*/true), 200);
  std::vector<int32_t> history = Ids(40, 9);  // system prompt + first question
  int64_t previous = 0;
  for (SeqId turn = 1; turn <= 5; ++turn) {
    e.AddTokens(turn, history, 12);
    e.RunToEnd();
    // The turn computed its new tokens (what was not in the previous
    // turn's prompt and answer), plus at most the partial block before
    // them, plus one row per sampled token but the last.
    const int64_t fresh = static_cast<int64_t>(history.size()) - previous;
    EXPECT_LE(e.evaluated_[turn], fresh + 16 + 11) << "turn " << turn;
    EXPECT_GE(e.evaluated_[turn], fresh + 11) << "turn " << turn;
    // The next prompt: this one, its answer, the next question.
    previous = static_cast<int64_t>(history.size() + e.outputs_[turn].size());
    history = Concat(Concat(history, e.outputs_[turn]), Ids(15 + turn, 20 + turn));
  }
  EXPECT_GT(e.sched_.prefix_hit_tokens(), 4 * 40);
}

TEST(SchedulerTest, EvictionUnderPressureNeverTakesABlockInUse) {
  // A pool far smaller than what the sequences would like to keep cached:
  // sequences with shared and unshared prefixes come and go, preemptions
  // happen, and after every step each held block is held as often as the
  // block tables say (FakeEngine::Step checks it).
  FakeEngine e(Opt(4, 24, 4, 4096, /*cache=*/true), 1 + 24);
  const std::vector<int32_t> shared = Ids(18, 11);
  SeqId next = 1;
  for (int round = 0; round < 30; ++round) {
    if (e.sched_.size() < 6) {
      std::vector<int32_t> p = round % 3 == 0 ? Ids(10 + round % 7, 100 + round)
                                              : Concat(shared, Ids(round % 5 + 1, round));
      e.AddTokens(next++, p, 10 + round % 11);
    }
    for (int k = 0; k < 3 && e.sched_.size() > 0; ++k) e.Step();
  }
  e.RunToEnd();
  EXPECT_GT(e.alloc_.evictions(), 0u) << "the pool was never short";
  EXPECT_GT(e.sched_.prefix_hit_tokens(), 0);
  EXPECT_GT(e.sched_.preemptions(), 0);
  EXPECT_EQ(e.alloc_.used(), 0);
  // Every sequence got its tokens in order (the fake's token indices).
  for (const auto& [id, toks] : e.outputs_) EXPECT_FALSE(toks.empty()) << id;
}

// Fair sharing between groups (tenants).

// Tenant A opens 16 streams, then tenant B 2, equal weights, 8 sequence
// slots: B's streams start at the next step (two of A's newest are
// preempted: B is below its share of 4, A above), and each of B's streams
// gets at least the per-stream rate of A's.
TEST(SchedulerTest, ASmallTenantGetsItsShareAtOnce) {
  FakeEngine e(Opt(8, 32), 1000);
  for (SeqId id = 1; id <= 16; ++id) e.AddInGroup(id, 8, 40, /*group=*/1, 1.0);
  for (int i = 0; i < 3; ++i) e.Step();
  EXPECT_EQ(e.RunningIn(1), 8);
  e.AddInGroup(101, 8, 40, /*group=*/2, 1.0);
  e.AddInGroup(102, 8, 40, /*group=*/2, 1.0);
  const Scheduler::Step st = e.Step();
  EXPECT_EQ(st.preempted.size(), 2u);
  EXPECT_EQ(e.RunningIn(2), 2);
  EXPECT_EQ(e.RunningIn(1), 6);
  e.RunToEnd();
  double a = 0;
  for (SeqId id = 1; id <= 16; ++id) a += e.Rate(id) / 16;
  for (SeqId id : {101u, 102u}) {
    EXPECT_GE(e.Rate(id), a) << "stream " << id;
    EXPECT_EQ(e.seqs_.count(id), 0u);
  }
  EXPECT_EQ(e.preempted_in_[2], 0);
}

// Weights 3 : 1 share 8 slots 6 : 2 when both have more work than that.
TEST(SchedulerTest, WeightsShareTheSequenceSlots) {
  FakeEngine e(Opt(8, 64), 1000);
  SeqId id = 1;
  for (int i = 0; i < 12; ++i) e.AddInGroup(id++, 4, 30, /*group=*/2, 1.0);
  for (int i = 0; i < 12; ++i) e.AddInGroup(id++, 4, 30, /*group=*/1, 3.0);
  for (int i = 0; i < 5; ++i) {
    e.Step();
    EXPECT_EQ(e.RunningIn(1), 6) << "step " << i;
    EXPECT_EQ(e.RunningIn(2), 2) << "step " << i;
  }
  e.RunToEnd();
}

// Within a group, a higher priority is admitted first; equal ones in order.
TEST(SchedulerTest, PriorityOrdersAdmissionWithinAGroup) {
  FakeEngine e(Opt(1, 16), 100);
  e.AddInGroup(1, 4, 2, 0, 1.0, /*priority=*/0);
  e.AddInGroup(2, 4, 2, 0, 1.0, /*priority=*/5);
  e.AddInGroup(3, 4, 2, 0, 1.0, /*priority=*/1);
  e.AddInGroup(4, 4, 2, 0, 1.0, /*priority=*/1);
  e.RunToEnd();
  EXPECT_EQ(e.finished_, (std::vector<SeqId>{2, 3, 4, 1}));
}

// The pool runs dry: the victims come from the most-loaded group (A: 6
// streams, weight 1), never from the lighter one (B: 2 streams, weight 3).
TEST(SchedulerTest, PoolPressurePreemptsTheTenantOverItsShare) {
  FakeEngine e(Opt(8, 64, 16), 1 + 24);  // 384 rows for 8 x 100
  for (SeqId id = 1; id <= 6; ++id) e.AddInGroup(id, 20, 80, /*group=*/1, 1.0);
  for (SeqId id = 11; id <= 12; ++id) e.AddInGroup(id, 20, 80, /*group=*/2, 3.0);
  e.RunToEnd();
  EXPECT_GT(e.preempted_in_[1], 0);
  EXPECT_EQ(e.preempted_in_[2], 0);
  EXPECT_EQ(e.finished_.size(), 8u);
}

// Prefill chunks share the budget by weight: a tenant's long prompt does
// not hold back another tenant's admission (with one group it would: an
// admission gets only what the running prompts leave). Weights 1 : 1 give
// 16 + 16 of a 32-token budget, 3 : 1 give 24 + 8.
TEST(SchedulerTest, PrefillBudgetIsSharedByWeight) {
  for (double w2 : {1.0, 1.0 / 3}) {
    FakeEngine e(Opt(4, 32), 1000);
    e.AddInGroup(1, 200, 2, /*group=*/1, 1.0);
    Scheduler::Step st = e.Step();  // alone: the whole budget
    ASSERT_EQ(st.work.size(), 1u);
    EXPECT_EQ(st.work[0].count, 32);
    e.AddInGroup(2, 200, 2, /*group=*/2, w2);
    const int64_t second = w2 == 1.0 ? 16 : 8;
    for (int i = 0; i < 3; ++i) {
      st = e.Step();
      ASSERT_EQ(st.work.size(), 2u);
      EXPECT_EQ(st.work[0].id, 1u);
      EXPECT_EQ(st.work[0].count, 32 - second) << "w2 " << w2 << " step " << i;
      EXPECT_EQ(st.work[1].id, 2u);
      EXPECT_EQ(st.work[1].count, second) << "w2 " << w2 << " step " << i;
    }
    e.RunToEnd();
  }
  // One group: the running prompt takes the budget, the next one waits.
  FakeEngine one(Opt(4, 32), 1000);
  one.Add(1, 200, 2);
  one.Step();
  one.Add(2, 200, 2);
  Scheduler::Step st = one.Step();
  ASSERT_EQ(st.work.size(), 1u);
  EXPECT_EQ(st.work[0].count, 32);
}

}  // namespace
}  // namespace minfer::runtime
