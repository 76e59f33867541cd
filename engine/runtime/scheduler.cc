#include "engine/runtime/scheduler.h"

#include <algorithm>
#include <utility>

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

void Scheduler::Add(SeqId id, int64_t known, const std::vector<int32_t>* tokens,
                    std::string cache_ns) {
  Seq s;
  s.known = known;
  s.tokens = tokens;
  s.cache_ns = std::move(cache_ns);
  seqs_[id] = std::move(s);
  waiting_.push_back(id);
}

void Scheduler::SetClass(SeqId id, uint32_t group, double weight, int32_t priority) {
  auto it = seqs_.find(id);
  if (it == seqs_.end() || it->second.running) return;
  it->second.group = group;
  it->second.weight = weight > 0 ? weight : 1.0;
  it->second.priority = priority;
}

void Scheduler::Append(SeqId id) {
  auto it = seqs_.find(id);
  if (it != seqs_.end()) it->second.known++;
}

void Scheduler::SetDrafts(SeqId id, int64_t n) {
  auto it = seqs_.find(id);
  if (it != seqs_.end()) it->second.drafts = std::max<int64_t>(n, 0);
}

void Scheduler::Remove(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  alloc_->Free(it->second.blocks);
  if (it->second.running) {
    running_.erase(std::find(running_.begin(), running_.end(), id));
    running_by_group_[it->second.group]--;
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
  return SeqInfo{s.known,   s.computed, static_cast<int64_t>(s.blocks.size()),
                 s.running, s.cached,   s.group};
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
  running_by_group_[s.group]--;
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
    const SeqId victim = PickVictim();
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
      usable / opt_.block_size, salt_, s.cache_ns, &s.blocks);
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
                    s.cache_ns, absl::MakeConstSpan(*s.tokens).subspan(j * opt_.block_size, opt_.block_size));
  }
}

double Scheduler::Load(uint32_t group, double weight) const {
  auto it = running_by_group_.find(group);
  return (it == running_by_group_.end() ? 0.0 : static_cast<double>(it->second)) / weight;
}

double Scheduler::ActiveWeight() const {
  std::map<uint32_t, double> w;
  for (const auto& [id, s] : seqs_) w[s.group] = s.weight;
  double sum = 0;
  for (const auto& [g, x] : w) sum += x;
  return sum;
}

std::deque<Scheduler::SeqId>::iterator Scheduler::PickWaiting() {
  auto best = waiting_.begin();
  if (waiting_.size() == 1) return best;
  const Seq* b = &seqs_.at(*best);
  double best_load = Load(b->group, b->weight);
  for (auto it = std::next(waiting_.begin()); it != waiting_.end(); ++it) {
    const Seq& s = seqs_.at(*it);
    const double load = Load(s.group, s.weight);
    // Least-loaded group, then higher priority, then queue order.
    if (load < best_load || (load == best_load && s.priority > b->priority)) {
      best = it;
      b = &s;
      best_load = load;
    }
  }
  return best;
}

Scheduler::SeqId Scheduler::PickVictim() const {
  // Newest first: on equal loads the newest sequence's group is chosen, so
  // with one group this is running_.back().
  SeqId victim = running_.back();
  double worst = -1;
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    const Seq& s = seqs_.at(*it);
    const double load = Load(s.group, s.weight);
    if (load > worst) {
      worst = load;
      victim = *it;
    }
  }
  return victim;
}

Scheduler::SeqId Scheduler::FairnessVictim(uint32_t group, double w) const {
  const double total = ActiveWeight();
  const double slots = static_cast<double>(opt_.max_seqs);
  auto running_of = [&](uint32_t g) {
    auto it = running_by_group_.find(g);
    return it == running_by_group_.end() ? 0.0 : static_cast<double>(it->second);
  };
  // Admitting one more must keep `group` within its share.
  if (running_of(group) + 1 > slots * w / total) return 0;
  SeqId victim = 0;
  double worst = 0;
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    const Seq& s = seqs_.at(*it);
    if (s.group == group) continue;
    const double over = running_of(s.group) - slots * s.weight / total;
    if (over <= 0) continue;  // within its share
    const double load = running_of(s.group) / s.weight;
    if (victim == 0 || load > worst) {
      worst = load;
      victim = *it;
    }
  }
  return victim;
}

Scheduler::Step Scheduler::Schedule() {
  Step step;
  // Drafts are for this step only (SetDrafts).
  struct ClearDrafts {
    std::map<SeqId, Seq>* seqs;
    ~ClearDrafts() {
      for (auto& [id, s] : *seqs) s.drafts = 0;
    }
  } clear_drafts{&seqs_};
  int64_t budget = opt_.token_budget;
  // allowance: prefill tokens each group may still take this round (null:
  // no limit).
  auto schedule_running = [&](bool decode_pass, std::map<uint32_t, int64_t>* allowance) {
    // running_ may shrink (preemption) while we walk it: index by id.
    const std::vector<SeqId> order = running_;
    for (SeqId id : order) {
      if (budget <= 0) return;
      auto it = seqs_.find(id);
      if (it == seqs_.end() || !it->second.running) continue;  // preempted meanwhile
      Seq& s = it->second;
      const int64_t total_need = std::min(s.known, opt_.max_seq_rows) - s.computed;
      if (total_need <= 0 || (total_need == 1) != decode_pass) continue;
      // Scheduled already this step (the first round of prefill)?
      auto has = [&] {
        return std::find_if(step.work.begin(), step.work.end(),
                            [&](const Work& x) { return x.id == id; });
      };
      const auto prior = has();
      const int64_t already = prior != step.work.end() ? prior->count : 0;
      int64_t count = std::min(total_need - already, budget);
      if (allowance != nullptr) count = std::min(count, (*allowance)[s.group]);
      if (count <= 0) continue;
      // Drafts ride along a decode token, within the budget and the context.
      int64_t drafts = 0;
      if (decode_pass && s.drafts > 0) {
        drafts = std::min({s.drafts, budget - count, opt_.max_seq_rows - s.known});
        drafts = std::max<int64_t>(drafts, 0);
      }
      if (!Reserve(id, s.computed + already + count + drafts, &step, &budget)) continue;
      auto w = has();  // (Reserve may have taken other work items back)
      if (w != step.work.end()) {
        w->count += count;
      } else {
        step.work.push_back({id, s.computed, count, false});
        w = step.work.end() - 1;
      }
      w->completes = w->start + w->count == s.known;
      if (drafts > 0) {
        w->count += drafts;
        w->drafts = drafts;
        count += drafts;
      }
      step.tokens += count;
      budget -= count;
      if (allowance != nullptr) (*allowance)[s.group] -= count;
    }
  };
  schedule_running(/*decode_pass=*/true, nullptr);
  // Prefill chunks. With one group: in admission order, admissions get what
  // is left. With several (running prompts or waiting sequences of more
  // than one group): first each group's weighted share of the budget, a
  // waiting group's share going to its admissions, then the rest.
  std::map<uint32_t, double> weights;
  for (SeqId id : running_) {
    const Seq& s = seqs_.at(id);
    if (std::min(s.known, opt_.max_seq_rows) - s.computed > 1) weights[s.group] = s.weight;
  }
  for (SeqId id : waiting_) weights[seqs_.at(id).group] = seqs_.at(id).weight;
  const bool shared = weights.size() > 1;
  if (shared) {
    double total = 0;
    for (const auto& [g, w] : weights) total += w;
    std::map<uint32_t, int64_t> allowance;
    for (const auto& [g, w] : weights) {
      allowance[g] = static_cast<int64_t>(static_cast<double>(budget) * w / total);
    }
    schedule_running(/*decode_pass=*/false, &allowance);
  } else {
    schedule_running(/*decode_pass=*/false, nullptr);
  }
  // Admissions, never preempting for them except to give a group below its
  // share a sequence slot.
  while (!waiting_.empty() && budget > 0) {
    auto pick = PickWaiting();
    const SeqId id = *pick;
    Seq& s = seqs_[id];
    if (static_cast<int64_t>(running_.size()) >= opt_.max_seqs) {
      const SeqId victim = FairnessVictim(s.group, s.weight);
      if (victim == 0) break;
      Preempt(victim, &step, &budget);
      pick = std::find(waiting_.begin(), waiting_.end(), id);  // Preempt pushed to the front
    }
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
    waiting_.erase(pick);
    s.running = true;
    running_by_group_[s.group]++;
    running_.push_back(id);
    step.work.push_back({id, s.computed, count, s.computed + count == s.known});
    step.tokens += count;
    budget -= count;
  }
  if (shared) schedule_running(/*decode_pass=*/false, nullptr);
  return step;
}

void Scheduler::Commit(const Step& step, absl::Span<const int64_t> rejected) {
  for (size_t i = 0; i < step.work.size(); ++i) {
    const Work& w = step.work[i];
    auto it = seqs_.find(w.id);
    if (it == seqs_.end()) continue;
    Seq& s = it->second;
    const int64_t back = i < rejected.size() ? std::clamp<int64_t>(rejected[i], 0, w.drafts) : 0;
    s.computed += w.count - back;
    if (w.drafts > 0) {
      // The refused drafts' rows are gone: free the blocks only they used
      // (the next token's row is allocated when it is scheduled).
      const int64_t keep = BlocksFor(s.computed, opt_.block_size);
      if (static_cast<int64_t>(s.blocks.size()) > keep) {
        std::vector<int32_t> tail(s.blocks.begin() + keep, s.blocks.end());
        s.blocks.resize(keep);
        alloc_->Free(tail);
      }
    }
    PublishFull(s);
  }
}

}  // namespace minfer::runtime
