#include "engine/runtime/scheduler.h"

#include <algorithm>

namespace minfer::runtime {

Scheduler::Scheduler(const SchedulerOptions& options, BlockAllocator* blocks)
    : opt_(options), alloc_(blocks) {
  opt_.token_budget = std::max<int64_t>(opt_.token_budget, 1);
  opt_.max_seqs = static_cast<int32_t>(
      std::clamp<int64_t>(opt_.max_seqs, 1, opt_.token_budget));
}

bool Scheduler::Fits(int64_t rows) const {
  return BlocksFor(std::min(rows, opt_.max_seq_rows), opt_.block_size) <= alloc_->total();
}

void Scheduler::Add(SeqId id, int64_t known, const std::vector<int32_t>* tokens) {
  Seq s;
  s.known = known;
  s.tokens = tokens;
  seqs_[id] = std::move(s);
  waiting_.push_back(id);
}

void Scheduler::Append(SeqId id) {
  auto it = seqs_.find(id);
  if (it != seqs_.end()) it->second.known++;
}

void Scheduler::Remove(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  alloc_->Free(it->second.blocks);
  if (it->second.running) {
    running_.erase(std::find(running_.begin(), running_.end(), id));
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), id));
  }
  seqs_.erase(it);
}

absl::Span<const int32_t> Scheduler::blocks(SeqId id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return {};
  return it->second.blocks;
}

std::optional<Scheduler::SeqInfo> Scheduler::Info(SeqId id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return std::nullopt;
  const Seq& s = it->second;
  return SeqInfo{s.known, s.computed, static_cast<int64_t>(s.blocks.size()), s.running, s.cached};
}

std::vector<int64_t> Scheduler::RunningBlocks() const {
  std::vector<int64_t> out;
  out.reserve(running_.size());
  for (SeqId id : running_) out.push_back(static_cast<int64_t>(seqs_.at(id).blocks.size()));
  return out;
}

void Scheduler::Preempt(SeqId id, Step* step, int64_t* budget) {
  Seq& s = seqs_[id];
  alloc_->Free(s.blocks);
  s.blocks.clear();
  s.computed = 0;
  s.published = 0;
  s.running = false;
  running_.erase(std::find(running_.begin(), running_.end(), id));
  waiting_.push_front(id);
  for (auto it = step->work.begin(); it != step->work.end(); ++it) {
    if (it->id == id) {
      *budget += it->count;
      step->tokens -= it->count;
      step->work.erase(it);
      break;
    }
  }
  step->preempted.push_back(id);
  preemptions_++;
}

bool Scheduler::Reserve(SeqId id, int64_t rows, Step* step, int64_t* budget) {
  Seq& s = seqs_[id];
  const int64_t need = BlocksFor(rows, opt_.block_size) - static_cast<int64_t>(s.blocks.size());
  while (!alloc_->Allocate(need, &s.blocks)) {
    const SeqId victim = running_.back();
    Preempt(victim, step, budget);
    if (victim == id) return false;
  }
  return true;
}

void Scheduler::TakeCachedPrefix(Seq& s) {
  s.cached = 0;
  if (!opt_.prefix_cache || s.tokens == nullptr || !s.blocks.empty()) return;
  // Leave at least the last known token to compute.
  const int64_t usable = std::min(s.known, opt_.max_seq_rows) - 1;
  if (usable < opt_.block_size) return;
  const int64_t n = alloc_->AcquirePrefix(
      absl::MakeConstSpan(*s.tokens).first(static_cast<size_t>(usable)), opt_.block_size,
      usable / opt_.block_size, salt_, &s.blocks);
  s.computed = n * opt_.block_size;
  s.published = n;
  s.cached = s.computed;
}

void Scheduler::PublishFull(Seq& s) {
  if (!opt_.prefix_cache || s.tokens == nullptr) return;
  const int64_t full = std::min<int64_t>(s.computed / opt_.block_size,
                                         static_cast<int64_t>(s.blocks.size()));
  for (; s.published < full; ++s.published) {
    const int64_t j = s.published;
    alloc_->Publish(s.blocks[j], j == 0 ? BlockAllocator::kNoParent : s.blocks[j - 1], salt_,
                    absl::MakeConstSpan(*s.tokens).subspan(j * opt_.block_size, opt_.block_size));
  }
}

Scheduler::Step Scheduler::Schedule() {
  Step step;
  int64_t budget = opt_.token_budget;
  auto schedule_running = [&](bool decode_pass) {
    // running_ may shrink (preemption) while we walk it: index by id.
    const std::vector<SeqId> order = running_;
    for (SeqId id : order) {
      if (budget <= 0) return;
      auto it = seqs_.find(id);
      if (it == seqs_.end() || !it->second.running) continue;  // preempted meanwhile
      Seq& s = it->second;
      const int64_t need = std::min(s.known, opt_.max_seq_rows) - s.computed;
      if (need <= 0 || (need == 1) != decode_pass) continue;
      const int64_t count = std::min(need, budget);
      if (!Reserve(id, s.computed + count, &step, &budget)) continue;
      step.work.push_back({id, s.computed, count, s.computed + count == s.known});
      step.tokens += count;
      budget -= count;
    }
  };
  schedule_running(/*decode_pass=*/true);
  schedule_running(/*decode_pass=*/false);
  // Admissions, FIFO, never preempting for them.
  while (!waiting_.empty() && budget > 0 && static_cast<int64_t>(running_.size()) < opt_.max_seqs) {
    const SeqId id = waiting_.front();
    Seq& s = seqs_[id];
    TakeCachedPrefix(s);
    const int64_t need = std::min(s.known, opt_.max_seq_rows) - s.computed;
    const int64_t count = std::min(need, budget);
    const int64_t blocks = BlocksFor(s.computed + count, opt_.block_size) -
                           static_cast<int64_t>(s.blocks.size());
    if (count <= 0 || !alloc_->Allocate(blocks, &s.blocks)) {
      // Not this step: give the cached blocks back (they stay cached).
      alloc_->Free(s.blocks);
      s.blocks.clear();
      s.computed = 0;
      s.published = 0;
      s.cached = 0;
      break;
    }
    prefix_hit_tokens_ += s.cached;
    step.cached += s.cached;
    waiting_.pop_front();
    s.running = true;
    running_.push_back(id);
    step.work.push_back({id, s.computed, count, s.computed + count == s.known});
    step.tokens += count;
    budget -= count;
  }
  return step;
}

void Scheduler::Commit(const Step& step) {
  for (const Work& w : step.work) {
    auto it = seqs_.find(w.id);
    if (it == seqs_.end()) continue;
    it->second.computed += w.count;
    PublishFull(it->second);
  }
}

}  // namespace minfer::runtime
