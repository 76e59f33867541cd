#include "engine/runtime/engine.h"

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "engine/base/knobs.h"
#include "engine/base/thread_pool.h"
#include "engine/base/status.h"

namespace minfer::runtime {
namespace {

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Engine::MaskWorker::MaskWorker() : thread_([this] { Loop(); }) {}

Engine::MaskWorker::~MaskWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Engine::MaskWorker::Run(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = std::move(job);
    done_ = false;
  }
  cv_.notify_all();
}

void Engine::MaskWorker::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return done_; });
}

void Engine::MaskWorker::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return quit_ || job_ != nullptr; });
    if (quit_) return;
    std::function<void()> job = std::move(job_);
    job_ = nullptr;
    lock.unlock();
    job();
    lock.lock();
    done_ = true;
    cv_.notify_all();
  }
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(std::shared_ptr<const Model> model,
                                                       const EngineOptions& options) {
  EngineOptions o = options;
  KnobRegistry& knobs = KnobRegistry::Global();
  std::unique_ptr<Engine> e(new Engine);
  e->model_ = model;
  if (o.token_budget <= 0) o.token_budget = e->BudgetKnob();
  if (o.kv_block <= 0) o.kv_block = static_cast<int32_t>(knobs.GetInt("MINFER_KV_BLOCK", &model->knobs()));
  if (o.max_seqs < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_seqs must be >= 1, got ", o.max_seqs));
  }
  o.max_seqs = static_cast<int32_t>(std::min<int64_t>(o.max_seqs, o.token_budget));
  e->options_spec_fixed_ = o.spec_k.has_value();
  e->spec_k_ = static_cast<int32_t>(
      o.spec_k.value_or(knobs.GetInt("MINFER_SPEC_K", &model->knobs())));
  if (e->spec_k_ < 0) {
    return absl::InvalidArgumentError(absl::StrCat("spec_k must be >= 0, got ", e->spec_k_));
  }
  e->options_gate_fixed_ = o.spec_gate.has_value();
  e->spec_gate_on_ = o.spec_gate.value_or(knobs.GetBool("MINFER_SPEC_GATE", &model->knobs()));
  e->late_masks_ = knobs.GetBool("MINFER_LATE_MASKS", &model->knobs());
  if (!o.spec_rows.has_value()) {
    o.spec_rows = e->spec_k_ > 0 || o.drafter != nullptr ? SpecRows(o.max_seqs) : 0;
  }
  if (*o.spec_rows < 0) {
    return absl::InvalidArgumentError(absl::StrCat("spec_rows must be >= 0, got ", *o.spec_rows));
  }
  BatchRunnerOptions ro;
  ro.max_tokens = o.token_budget;
  ro.max_seqs = o.max_seqs;
  ro.max_rows = o.max_seqs + *o.spec_rows;
  ro.n_ctx = o.n_ctx;
  ro.kv_block = o.kv_block;
  ro.kv_blocks = o.kv_blocks;
  ro.kv_type = o.kv_type;
  ro.top_k = o.top_k;
  ASSIGN_OR_RETURN(e->runner_, BatchRunner::Create(model, ro));
  e->knob_gen_ = knobs.generation() + model->knob_generation();
  o.n_ctx = e->runner_->n_ctx();
  o.kv_blocks = e->runner_->pool().n_blocks();
  e->opt_ = o;
  e->options_budget_fixed_ = options.token_budget > 0;
  SchedulerOptions so;
  so.max_seqs = o.max_seqs;
  so.token_budget = o.token_budget;
  so.block_size = o.kv_block;
  so.max_seq_rows = o.n_ctx;
  e->options_cache_fixed_ = options.prefix_cache.has_value();
  if (!o.prefix_cache.has_value()) {
    o.prefix_cache = knobs.GetBool("MINFER_PREFIX_CACHE", &model->knobs());
  }
  e->opt_.prefix_cache = o.prefix_cache;
  e->backend_masks_ = options.backend_masks.value_or(model->gpu());
  e->opt_.backend_masks = e->backend_masks_;
  so.prefix_cache = *o.prefix_cache;
  e->scheduler_ = std::make_unique<Scheduler>(so, &e->runner_->pool().blocks());
  // Blocks are only ever matched within one knob generation: a knob that
  // shapes the numbers (kernels, fusions, KV handling) must not let blocks
  // computed before it changed stand for blocks computed after.
  e->scheduler_->SetPrefixSalt(e->knob_gen_);
  if (o.kv_events) {
    e->kv_hasher_ = std::make_unique<KvBlockHasher>(o.kv_hash_seed);
    e->runner_->pool().blocks().RecordEvents(e->kv_hasher_.get());
  }
  e->drafter_ = o.drafter != nullptr ? o.drafter : std::make_shared<NgramDrafter>();
  return e;
}

// Engine::spec_rate_ below this: the engine's drafts mostly fail.
constexpr double kSpecLowRate = 0.2;
// Recent drafted tokens accepted (Engine::spec_accepted_avg_ over
// spec_drafted_avg_) at or above
// this: a round whose drafts were all refused is taken for noise, not a
// reason to back off. At an acceptance of 0.7 per token three rounds in ten
// refuse their first draft, so two in a row come every ~11 rounds; backing
// off then (a skipped step after two misses, three after three) cost the
// 7B's single stream a fifth of its steps (--spec oracle, k = 12: 394 steps
// for 1,024 tokens where the drafts allow 314; on an H100 1.44x -> 1.56x
// with the gate off, 1.43x -> 1.49x with it on; twentieth session). Per
// token, not per round (spec_rate_): a drafter that stops at its first
// wrong token makes every round's ratio low. A drafter that fails for a
// stretch of text drags this below the line within a few rounds and backs
// off as before.
constexpr double kSpecBackoffRate = 0.5;

// Steps a sequence skips after `misses` drafting rounds in a row with every
// draft refused: none after one (at an acceptance of 0.7 per token three
// rounds in ten refuse the first draft, and skipping a step after each cost
// a single stream about a tenth of its speed-up on the GPU), then 1, 3, 7,
// ... 2^(misses - 1) - 1.
int32_t SkipAfter(int32_t misses) { return misses < 2 ? 0 : (1 << (misses - 1)) - 1; }

void Engine::ProposeDrafts() {
  // Every sequence that may run this step (at most max_seqs) may take an
  // output row; drafts get the rows left (BatchRunnerOptions::max_rows).
  int64_t rows = runner_->options().max_rows -
                 std::min<int64_t>(scheduler_->running() + scheduler_->waiting(), opt_.max_seqs);
  std::vector<DraftQuery> queries;
  // When rows are short, the sequences after the last one served go first
  // (round robin): served in id order, the same few would always draft and
  // finish long before the rest, leaving a tail of small, slow steps.
  auto start = seqs_.upper_bound(draft_cursor_);
  for (size_t n = 0; n < seqs_.size(); ++n, ++start) {
    if (start == seqs_.end()) start = seqs_.begin();
    if (rows <= 0) break;
    const uint64_t id = start->first;
    Seq& s = start->second;
    const Completion& c = *s.c;
    if (c.done() || !c.request().speculative) continue;
    // Backend masks are computed before the forward: only under one
    // matcher can they be for drafted positions (EngineOptions::spec_k).
    if (backend_masks_ && c.MayConstrain() && !c.DraftMasksComputable()) continue;
    const std::optional<Scheduler::SeqInfo> info = scheduler_->Info(id);
    if (!info.has_value() || !info->running || info->known - info->computed != 1) continue;
    if (s.skip > 0) {
      --s.skip;
      continue;
    }
    // Tokens the completion may still take after this step's first one,
    // and the positions its context has left.
    const int64_t left = c.request().max_tokens - c.stats().completion_tokens - 1;
    const int64_t room = opt_.n_ctx - static_cast<int64_t>(s.tokens.size());
    const int64_t k = std::min<int64_t>({spec_k_, left, room, rows});
    if (k <= 0) continue;
    queries.push_back({id, s.tokens, k});
    rows -= k;
    draft_cursor_ = id;
  }
  if (queries.empty()) return;
  drafter_->ProposeAll(queries, &drafts_);
  for (size_t i = 0; i < queries.size(); ++i) {
    const std::vector<int32_t>& draft = drafts_[i];
    int64_t n = std::min<int64_t>(static_cast<int64_t>(draft.size()), queries[i].k);
    Seq& s = seqs_.at(queries[i].seq);
    // A draft the grammar forbids would be refused: it gets no row.
    if (n > 0 && s.c->MayConstrain()) {
      n = s.c->AllowedDrafts(absl::MakeConstSpan(draft).first(n));
    }
    if (n == 0) continue;
    s.tokens.insert(s.tokens.end(), draft.begin(), draft.begin() + n);
    s.drafts = n;
    scheduler_->SetDrafts(queries[i].seq, n);
  }
}

int64_t Engine::BudgetKnob() const {
  const int64_t b = KnobRegistry::Global().GetInt("MINFER_BATCH_TOKENS", &model_->knobs());
  return b > 0 ? b : model_->gpu() ? 2048 : 512;
}

void Engine::RefreshKnobs() {
  const uint64_t gen = KnobRegistry::Global().generation() + model_->knob_generation();
  if (gen == knob_gen_) return;
  knob_gen_ = gen;
  scheduler_->SetPrefixSalt(gen);
  // Blocks of the old salt can never match again: free them as plain
  // blocks now (and tell the routers) rather than let them age out.
  runner_->pool().blocks().UnpublishAll();
  if (!options_cache_fixed_) {
    const bool on = KnobRegistry::Global().GetBool("MINFER_PREFIX_CACHE", &model_->knobs());
    opt_.prefix_cache = on;
    scheduler_->SetPrefixCache(on);
  }
  if (!options_spec_fixed_) {
    spec_k_ = static_cast<int32_t>(std::max<int64_t>(
        0, KnobRegistry::Global().GetInt("MINFER_SPEC_K", &model_->knobs())));
  }
  if (!options_gate_fixed_) {
    spec_gate_on_ = KnobRegistry::Global().GetBool("MINFER_SPEC_GATE", &model_->knobs());
  }
  late_masks_ = KnobRegistry::Global().GetBool("MINFER_LATE_MASKS", &model_->knobs());
  if (options_budget_fixed_) return;
  const int64_t b = std::max<int64_t>(BudgetKnob(), opt_.max_seqs);
  if (b == opt_.token_budget) return;
  opt_.token_budget = b;
  runner_->SetMaxTokens(b);
  scheduler_->SetTokenBudget(b);
}

void Engine::TakeKvEvents(std::vector<KvEvent>* out) { runner_->pool().blocks().TakeEvents(out); }

int64_t Engine::ClearPrefixCache() { return runner_->pool().blocks().UnpublishAll(); }

absl::StatusOr<uint64_t> Engine::Add(GenerateRequest request) {
  ASSIGN_OR_RETURN(std::unique_ptr<Completion> c,
                   Completion::Create(*model_, std::move(request), opt_.n_ctx));
  const int64_t prompt = static_cast<int64_t>(c->prompt().size());
  // The most rows it can hold: the prompt and all but the last sampled token.
  const int64_t rows = std::min(prompt + c->request().max_tokens - 1, opt_.n_ctx);
  if (!scheduler_->Fits(rows)) {
    const KvPool& pool = runner_->pool();
    return absl::ResourceExhaustedError(absl::StrCat(
        "request needs up to ", rows, " KV rows (", BlocksFor(rows, pool.block_size()),
        " blocks of ", pool.block_size(), "), the pool holds ", pool.blocks().total(),
        " blocks; lower max_tokens or the prompt"));
  }
  const uint64_t id = next_id_++;
  Seq& s = seqs_[id];
  if (spec_rate_ < kSpecLowRate) {
    s.misses = 7;
    s.skip = SkipAfter(s.misses);
  }
  s.tokens = c->prompt();
  s.c = std::move(c);
  s.added = std::chrono::steady_clock::now();
  // The map's node (and so s.tokens) stays put until the sequence ends.
  const GenerateRequest& r = s.c->request();
  scheduler_->Add(id, prompt, &s.tokens, r.cache_ns);
  scheduler_->SetClass(id, r.group, r.weight, r.priority);
  return id;
}

EngineSnapshot Engine::Snapshot() const {
  EngineSnapshot s;
  const KvPool& pool = runner_->pool();
  s.running = scheduler_->running();
  s.waiting = scheduler_->waiting();
  s.kv_block = pool.block_size();
  s.kv_blocks_total = pool.blocks().total();
  s.kv_blocks_used = pool.blocks().used();
  s.kv_blocks_cached = pool.blocks().cached();
  s.kv_block_bytes = pool.block_bytes();
  s.kv_bytes = pool.bytes();
  s.kv_type = pool.dtype();
  s.activation_bytes = runner_->activation_bytes();
  s.sequence_blocks = scheduler_->RunningBlocks();
  s.preemptions = scheduler_->preemptions();
  s.prefix_cache = scheduler_->options().prefix_cache;
  s.prefix_hit_tokens = scheduler_->prefix_hit_tokens();
  s.prefix_evictions = static_cast<int64_t>(pool.blocks().evictions());
  s.steps = steps_;
  for (const auto& [id, seq] : seqs_) s.constrained_running += seq.c->constrained() ? 1 : 0;
  s.grammar_masks = grammar_masks_;
  s.spec_drafted = spec_drafted_;
  s.spec_accepted = spec_accepted_;
  s.spec_gate_held = gate_.held();
  s.grammar_mask_seconds = grammar_mask_seconds_;
  s.token_budget = opt_.token_budget;
  s.n_ctx = opt_.n_ctx;
  s.last_step = last_;
  return s;
}

void Engine::Cancel(uint64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  it->second.c->Cancel();
  scheduler_->Remove(id);
  if (drafter_ != nullptr) drafter_->Forget(id);
  seqs_.erase(it);
}

void Engine::Finish(uint64_t id, Seq& s, std::vector<EngineEvent>* events, absl::Status status) {
  EngineEvent ev;
  ev.id = id;
  ev.finished = true;
  ev.reason = status.ok() ? s.c->finish_reason() : FinishReason::kCancelled;
  ev.status = std::move(status);
  s.c->stats().decode_seconds = s.decode_seconds;
  ev.stats = s.c->stats();
  events->push_back(std::move(ev));
  scheduler_->Remove(id);
  if (drafter_ != nullptr) drafter_->Forget(id);
}

absl::Status Engine::Step(std::vector<EngineEvent>* events) {
  const auto t0 = std::chrono::steady_clock::now();
  last_ = EngineStepStats{};
  steps_++;
  RefreshKnobs();
  const uint64_t evictions = runner_->pool().blocks().evictions();
  // The gate's class is the load of the step before (the running
  // sequences); a step that may not draft leaves the drafter alone.
  const int64_t load = scheduler_->running();
  if (spec_k_ > 0 && (!spec_gate_on_ || gate_.MayDraft(std::max<int64_t>(load, 1)))) {
    ProposeDrafts();
  }
  Scheduler::Step step = scheduler_->Schedule();
  // Drafts the scheduler did not take (budget, context, preemption) leave
  // the sequence's tokens again.
  if (spec_k_ > 0) {
    for (auto& [id, s] : seqs_) {
      if (s.drafts == 0) continue;
      int64_t taken = 0;
      for (const Scheduler::Work& w : step.work) {
        if (w.id == id) taken = w.drafts;
      }
      s.tokens.resize(s.tokens.size() - (s.drafts - taken));
      s.drafts = taken;
    }
  }
  last_.preempted = static_cast<int64_t>(step.preempted.size());
  last_.cached_tokens = step.cached;
  last_.evictions = static_cast<int64_t>(runner_->pool().blocks().evictions() - evictions);
  if (step.empty()) return absl::OkStatus();
  items_.clear();
  to_mask_.clear();
  for (const Scheduler::Work& w : step.work) {
    Seq& s = seqs_.at(w.id);
    if (!s.scheduled) {
      s.scheduled = true;
      s.c->stats().queue_seconds = Since(s.added);
      s.c->stats().cached_prompt_tokens = static_cast<int32_t>(scheduler_->Info(w.id)->cached);
    }
    BatchItem it;
    it.tokens = absl::MakeConstSpan(s.tokens).subspan(w.start, w.count);
    it.pos0 = w.start;
    it.blocks = scheduler_->blocks(w.id);
    it.logits = w.completes;
    it.extra_rows = static_cast<int32_t>(w.drafts);
    if (w.completes && s.c->constrained()) {
      to_mask_.push_back({s.c.get(), static_cast<int64_t>(items_.size()), w.drafts});
      if (backend_masks_) {
        // Masked on the backend: the mask must exist before the sampling
        // kernel reads it (computed below, before the forward or while it
        // runs); its buffer is known now.
        if (w.drafts == 0) {
          it.mask = s.c->mask();
        } else {
          // A mask per drafted row, then the last row's.
          it.extra_masks = s.c->ReserveDraftMasks(w.drafts);
          it.mask = it.extra_masks + graph::TopKMaskWords(model_->hparams().n_vocab) * w.drafts;
        }
        it.mode = !s.c->UsesOnlyTop(opt_.top_k) ? RowMode::kFull
                  : s.c->request().sampling.temperature == 0.0f ? RowMode::kArgmax
                                                                 : RowMode::kTop;
      } else {
        // Masked on the host: the mask thread fills it while the forward
        // runs; the whole row is read and masked (Completion::Sample).
        it.mode = RowMode::kFull;
      }
    } else if (w.completes && w.drafts > 0 && s.c->MayConstrain()) {
      // Not constrained yet, but a drafted token may start the constraint
      // (a trigger, a think block's end): every row is read whole, so the
      // rows after it are masked on the host (EngineOptions::spec_k).
      it.mode = RowMode::kFull;
    } else if (w.completes) {
      it.mode = !s.c->UsesOnlyTop(opt_.top_k) ? RowMode::kFull
                : s.c->request().sampling.temperature == 0.0f ? RowMode::kArgmax
                                                               : RowMode::kTop;
    }
    items_.push_back(it);
    if (w.count - w.drafts > 1) last_.prefill_tokens += w.count - w.drafts;
  }
  last_.sequences = static_cast<int64_t>(step.work.size());
  last_.tokens = step.tokens;
  // Structured outputs: backend masks in parallel over sequences, while
  // the device runs the forward (the runner calls back once it is issued;
  // MINFER_LATE_MASKS) or before it; host masks on the mask thread,
  // overlapped with the forward pass (the completions are not touched here
  // until Wait).
  std::function<absl::Status()> fill_masks;
  if (!to_mask_.empty() && backend_masks_) {
    fill_masks = [this]() -> absl::Status {
      const auto m0 = std::chrono::steady_clock::now();
      DefaultThreadPool().ParallelFor(static_cast<int64_t>(to_mask_.size()), [this](int64_t i, int) {
        const ToMask& m = to_mask_[i];
        if (m.drafts == 0) {
          m.c->ComputeMask();
          return;
        }
        // The drafts are the item's last tokens; a mask per drafted row,
        // into the buffer reserved above.
        absl::Span<const int32_t> tokens = items_[m.item].tokens;
        m.c->ComputeDraftMasks(tokens.last(m.drafts));
      });
      for (const ToMask& m : to_mask_) grammar_masks_ += 1 + m.drafts;
      grammar_mask_seconds_ += Since(m0);
      return absl::OkStatus();
    };
  } else if (!to_mask_.empty()) {
    if (mask_worker_ == nullptr) mask_worker_ = std::make_unique<MaskWorker>();
    mask_worker_->Run([this] {
      const auto m0 = std::chrono::steady_clock::now();
      for (const ToMask& m : to_mask_) m.c->ComputeMask();
      mask_seconds_step_ = Since(m0);
    });
  }
  absl::Status run = absl::OkStatus();
  if (fill_masks && !late_masks_) {
    run = fill_masks();
    fill_masks = nullptr;
  }
  if (run.ok()) {
    const auto f0 = std::chrono::steady_clock::now();
    run = runner_->Run(items_, &results_, &extra_, fill_masks);
    last_.forward_seconds = Since(f0);
  }
  if (!to_mask_.empty() && !backend_masks_) {
    mask_worker_->Wait();
    grammar_masks_ += static_cast<int64_t>(to_mask_.size());
    grammar_mask_seconds_ += mask_seconds_step_;
  }
  if (!run.ok()) {
    for (const Scheduler::Work& w : step.work) {
      auto it = seqs_.find(w.id);
      Finish(w.id, it->second, events, run);
      seqs_.erase(it);
    }
    last_.seconds = Since(t0);
    return run;
  }
  const double secs = Since(t0);
  const int64_t n_vocab = model_->hparams().n_vocab;
  bool drafted = false;
  for (const Scheduler::Work& w : step.work) drafted = drafted || w.drafts > 0;
  int64_t emitted = 0;
  // Sample (and verify drafts) first, then commit the computed rows (less
  // the refused drafts'), then report: a sequence that finished still
  // publishes its full blocks for the prefix cache.
  struct Outcome {
    absl::StatusOr<StepOutput> out = StepOutput{};
    bool sampled = false;
    // The last token sampled is a draft accepted as the sequence ended
    // (already in the sequence's tokens), not a new one.
    bool last_was_draft = false;
  };
  std::vector<Outcome> outcomes(step.work.size());
  std::vector<int64_t> rejected(step.work.size(), 0);
  int64_t extra_base = 0;
  for (size_t i = 0; i < step.work.size(); ++i) {
    const Scheduler::Work& w = step.work[i];
    Seq& s = seqs_.at(w.id);
    if (s.got_token) s.decode_seconds += secs;
    const int64_t base = extra_base;
    extra_base += w.drafts;
    if (!w.completes) continue;
    outcomes[i].sampled = true;
    // Rows j = 0..drafts: row j follows token start + count - 1 - drafts + j;
    // its sample is kept, and the next row is read only while the sample
    // equals the draft it is compared with (the token row j + 1 was fed).
    const int64_t first = w.start + w.count - 1 - w.drafts;  // the last known token
    StepOutput all;
    int64_t accepted = 0;
    absl::Status failed;
    for (int64_t j = 0; j <= w.drafts; ++j) {
      const RowResult& rr = j < w.drafts ? extra_[base + j] : results_[i];
      absl::StatusOr<SampledToken> st = rr.logits != nullptr ? s.c->Sample(rr.logits, n_vocab)
                                                             : s.c->SampleTop(rr.top, rr.log_norm);
      absl::StatusOr<StepOutput> out =
          st.ok() ? s.c->Accept(*st, first + j + 1) : absl::StatusOr<StepOutput>(st.status());
      if (!out.ok()) {
        failed = out.status();
        break;
      }
      all.tokens.insert(all.tokens.end(), out->tokens.begin(), out->tokens.end());
      all.text += out->text;
      all.logprobs.insert(all.logprobs.end(), out->logprobs.begin(), out->logprobs.end());
      // The draft this row verifies (the token fed after it) is accepted
      // when the sample equals it — also when that token ends the output.
      const bool match = j < w.drafts && st->token == s.tokens[first + 1 + j];
      if (match) ++accepted;
      if (s.c->done() || !match) {
        outcomes[i].last_was_draft = match;
        break;
      }
    }
    if (!failed.ok()) {
      outcomes[i].out = failed;
      continue;
    }
    if (w.drafts > 0) {
      spec_drafted_ += w.drafts;
      spec_accepted_ += accepted;
      s.c->stats().spec_drafted += static_cast<int32_t>(w.drafts);
      s.c->stats().spec_accepted += static_cast<int32_t>(accepted);
      rejected[i] = w.drafts - accepted;
      spec_rate_ += (static_cast<double>(accepted) / w.drafts - spec_rate_) / 4;
      // Per token, over roughly the last 8 rounds.
      spec_accepted_avg_ += (static_cast<double>(accepted) - spec_accepted_avg_) / 8;
      spec_drafted_avg_ += (static_cast<double>(w.drafts) - spec_drafted_avg_) / 8;
      if (accepted > 0) {
        s.misses = 0;
      } else {
        s.misses = std::min(s.misses + 1, spec_rate_ < kSpecLowRate ? 8 : 6);
        const bool mostly_refused = spec_accepted_avg_ < kSpecBackoffRate * spec_drafted_avg_;
        s.skip = mostly_refused ? SkipAfter(s.misses) : 0;
      }
      // Keep the accepted drafts (they equal the samples), drop the rest.
      s.tokens.resize(first + 1 + accepted);
      s.drafts = 0;
    }
    outcomes[i].out = std::move(all);
  }
  scheduler_->Commit(step, rejected);
  for (size_t i = 0; i < step.work.size(); ++i) {
    const Scheduler::Work& w = step.work[i];
    if (!outcomes[i].sampled) continue;
    auto it = seqs_.find(w.id);
    Seq& s = it->second;
    if (!outcomes[i].out.ok()) {
      Finish(w.id, s, events, outcomes[i].out.status());
      seqs_.erase(it);
      continue;
    }
    StepOutput& out = *outcomes[i].out;
    if (!s.got_token) {
      s.got_token = true;
      GenerationStats& gs = s.c->stats();
      gs.ttft_seconds = Since(s.added);
      gs.prefill_seconds = gs.ttft_seconds;
    }
    // The accepted drafts are in s.tokens already; the last sample is new
    // unless it was an accepted draft that ended the output.
    if (!out.tokens.empty() && !outcomes[i].last_was_draft) s.tokens.push_back(out.tokens.back());
    EngineEvent ev;
    ev.id = w.id;
    ev.out = std::move(out);
    const int64_t n_new = static_cast<int64_t>(ev.out.tokens.size());
    emitted += n_new;
    if (s.c->done()) {
      s.c->stats().decode_seconds = s.decode_seconds;
      ev.finished = true;
      ev.reason = s.c->finish_reason();
      ev.stats = s.c->stats();
      events->push_back(std::move(ev));
      scheduler_->Remove(w.id);
      seqs_.erase(it);
    } else {
      events->push_back(std::move(ev));
      for (int64_t k = 0; k < n_new; ++k) scheduler_->Append(w.id);
    }
  }
  last_.seconds = Since(t0);
  // Decode steps (no prefill rows) tell the gate what drafts cost now.
  if (spec_k_ > 0 && spec_gate_on_ && last_.prefill_tokens == 0) {
    gate_.Record(std::max<int64_t>(load, 1), drafted, emitted, last_.seconds);
  }
  return absl::OkStatus();
}

}  // namespace minfer::runtime
