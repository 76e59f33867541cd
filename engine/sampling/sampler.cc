#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/sampling/logit_kernels.h"

namespace minfer {
namespace {

using sampling_internal::kMassBlock;
using sampling_internal::kNumBuckets;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int32_t kMaxToken = std::numeric_limits<int32_t>::max();

// Rotating sink slots of the top-p histogram (a power of two).
constexpr uint32_t kDummySlots = 8;

// Above this k a heap loses to nth_element over the whole row.
constexpr int64_t kHeapTopKLimit = 1024;

// "a comes before b" in the order every truncation step keeps a prefix of.
bool Before(float a_value, int32_t a_token, float b_value, int32_t b_token) {
  return a_value > b_value || (a_value == b_value && a_token < b_token);
}

bool Kept(float p, int32_t token, float cut_p, int32_t cut_token) {
  return p > cut_p || (p == cut_p && token <= cut_token);
}

// A logit and its token id.
struct Candidate {
  float logit;
  int32_t token;
};

}  // namespace

// Working buffers of one thread. Plain scratch: nothing in them survives
// from one Sample/Distribution call to the next.
struct Sampler::Scratch {
  std::vector<float> adjusted;  // logits after penalties/bans
  std::vector<float> probs;     // p_i, full-vocabulary path
  std::vector<double> block_mass;
  std::vector<uint16_t> bucket_ids;  // top-p histogram bucket per token
  std::vector<double> hist_mass;
  std::vector<int32_t> hist_count;
  std::vector<int32_t> members;  // tokens of the top-p boundary bucket
  std::vector<std::pair<float, int32_t>> bucket;
  std::vector<Candidate> candidates;  // top-k, in order
  std::vector<double> weights;        // p of each candidate
  std::vector<Candidate> top;         // top-n logprobs

  // The calling thread's scratch with every per-token buffer holding at
  // least n entries. Buffers only grow.
  static Scratch& ForThread(int64_t n) {
    thread_local Scratch scratch;
    if (static_cast<int64_t>(scratch.adjusted.size()) < n) {
      scratch.adjusted.resize(n);
      scratch.probs.resize(n);
      scratch.bucket_ids.resize(n);
      scratch.block_mass.resize((n + kMassBlock - 1) / kMassBlock);
      scratch.hist_mass.resize(kNumBuckets + kDummySlots);
      scratch.hist_count.resize(kNumBuckets + kDummySlots);
    }
    return scratch;
  }
};

absl::StatusOr<std::unique_ptr<Sampler>> Sampler::Create(
    const SamplingParams& params, int64_t n_vocab) {
  RETURN_IF_ERROR(params.Validate());
  if (n_vocab < 1 || n_vocab > kMaxToken) {
    return absl::InvalidArgumentError(
        absl::StrCat("Sampler: n_vocab must be in [1, 2^31), got ", n_vocab));
  }
  for (size_t i = 0; i < params.banned_tokens.size(); ++i) {
    if (params.banned_tokens[i] >= n_vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SamplingParams.banned_tokens[", i, "] = ", params.banned_tokens[i],
          " is outside the vocabulary of ", n_vocab, " tokens"));
    }
  }
  return std::unique_ptr<Sampler>(new Sampler(params, n_vocab));
}

Sampler::Sampler(const SamplingParams& params, int64_t n_vocab)
    : params_(params),
      n_vocab_(n_vocab),
      kernels_(sampling_internal::GetLogitKernels()),
      penalties_(params.PenaltiesEnabled()),
      rng_(params.seed),
      banned_(params.banned_tokens) {
  std::sort(banned_.begin(), banned_.end());
  banned_.erase(std::unique(banned_.begin(), banned_.end()), banned_.end());
  if (penalties_) window_capacity_ = std::max(params_.penalty_last_n, 0);
}

bool Sampler::FullVocabularyPath() const {
  return params_.top_k == 0 || static_cast<int64_t>(params_.top_k) >= n_vocab_;
}

// ---- History and penalties -------------------------------------------------

void Sampler::Push(int32_t token) {
  ++history_size_;
  if (!penalties_) return;
  if (window_capacity_ > 0) {
    // The ring grows on demand (a huge penalty_last_n costs nothing until
    // that many tokens exist). Once full, the token in the slot being
    // overwritten leaves the window.
    if (static_cast<int64_t>(window_.size()) < window_capacity_) {
      window_.push_back(token);
    } else {
      int32_t& slot = window_[window_next_];
      auto it = counts_.find(slot);
      if (--it->second == 0) counts_.erase(it);
      slot = token;
      window_next_ = (window_next_ + 1) % window_capacity_;
    }
  }
  ++counts_[token];
}

void Sampler::ClearHistory() {
  counts_.clear();
  window_.clear();
  window_next_ = 0;
  history_size_ = 0;
}

absl::Status Sampler::SetPrompt(absl::Span<const int32_t> prompt) {
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (!InVocab(prompt[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("Sampler::SetPrompt: prompt[", i, "] = ", prompt[i],
                       " is outside the vocabulary of ", n_vocab_, " tokens"));
    }
  }
  ClearHistory();
  // Tokens older than the window can never count; skipping them keeps a
  // long prompt O(window).
  size_t first = 0;
  if (window_capacity_ > 0 &&
      static_cast<int64_t>(prompt.size()) > window_capacity_) {
    first = prompt.size() - window_capacity_;
  }
  history_size_ = static_cast<int64_t>(first);
  for (size_t i = first; i < prompt.size(); ++i) Push(prompt[i]);
  return absl::OkStatus();
}

absl::Status Sampler::Accept(int32_t token) {
  if (!InVocab(token)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Sampler::Accept: token ", token,
                     " is outside the vocabulary of ", n_vocab_, " tokens"));
  }
  Push(token);
  return absl::OkStatus();
}

void Sampler::Reset() {
  ClearHistory();
  rng_.Seed(params_.seed);
}

const float* Sampler::ApplyPenaltiesAndBans(const float* logits,
                                            Scratch& scratch) {
  const bool penalize = penalties_ && !counts_.empty();
  if (!penalize && banned_.empty()) return logits;  // no copy needed
  float* out = scratch.adjusted.data();
  std::memcpy(out, logits, n_vocab_ * sizeof(float));
  if (penalize) {
    const float rep = params_.repetition_penalty;
    const float freq = params_.frequency_penalty;
    const float presence = params_.presence_penalty;
    for (const auto& [token, count] : counts_) {
      // Same arithmetic as llama.cpp's penalties sampler, so settings carry
      // over: repetition first, then the additive OpenAI terms.
      float x = out[token];
      if (rep != 1.0f) x = x > 0.0f ? x / rep : x * rep;
      x -= static_cast<float>(count) * freq +
           static_cast<float>(count > 0) * presence;
      out[token] = x;
    }
  }
  for (int32_t token : banned_) out[token] = kNegInf;
  return out;
}

// ---- The chain -------------------------------------------------------------

absl::Status Sampler::BadLogitError(const float* logits,
                                    const float* adjusted) const {
  for (int64_t i = 0; i < n_vocab_; ++i) {
    if (std::isnan(logits[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("Sampler: logit of token ", i, " is NaN"));
    }
  }
  for (int64_t i = 0; i < n_vocab_; ++i) {
    if (adjusted[i] == std::numeric_limits<float>::infinity()) {
      if (logits[i] == adjusted[i]) {
        return absl::InvalidArgumentError(
            absl::StrCat("Sampler: logit of token ", i, " is +inf"));
      }
      return absl::InvalidArgumentError(
          absl::StrCat("Sampler: logit of token ", i, " (", logits[i],
                       ") is +inf after penalties"));
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("Sampler: no token has a finite logit (", banned_.size(),
                   " banned of ", n_vocab_, ")"));
}

namespace {

// The k best finite logits in (logit desc, id asc) order, into *out.
void SelectTopK(const sampling_internal::LogitKernels& kernels,
                const float* logits, int64_t n, int64_t k,
                std::vector<Candidate>* out) {
  out->clear();
  if (k <= 0) return;
  // Heap comparator "a is better": the heap's front is the worst kept.
  auto better = [](const Candidate& a, const Candidate& b) {
    return Before(a.logit, a.token, b.logit, b.token);
  };
  if (k <= kHeapTopKLimit) {
    out->reserve(k);
    // Scanning ids in increasing order, an equal logit never beats a kept
    // one, so only elements strictly above the heap's worst matter; once
    // the heap is full they are rare (about k ln(n/k) of them), and the SIMD
    // first_above skips the rest. -inf (banned/masked) never qualifies.
    float threshold = kNegInf;
    for (int64_t i = kernels.first_above(logits, 0, n, threshold); i < n;
         i = kernels.first_above(logits, i + 1, n, threshold)) {
      const Candidate c{logits[i], static_cast<int32_t>(i)};
      if (static_cast<int64_t>(out->size()) < k) {
        out->push_back(c);
        std::push_heap(out->begin(), out->end(), better);
        if (static_cast<int64_t>(out->size()) < k) continue;
      } else {
        std::pop_heap(out->begin(), out->end(), better);
        out->back() = c;
        std::push_heap(out->begin(), out->end(), better);
      }
      threshold = out->front().logit;
    }
    std::sort_heap(out->begin(), out->end(), better);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    if (logits[i] != kNegInf) {
      out->push_back({logits[i], static_cast<int32_t>(i)});
    }
  }
  if (static_cast<int64_t>(out->size()) > k) {
    std::nth_element(out->begin(), out->begin() + k, out->end(), better);
    out->resize(k);
  }
  std::sort(out->begin(), out->end(), better);
}

}  // namespace

void Sampler::ComputeTopPCut(Plan& plan, Scratch& scratch) const {
  const float* p = scratch.probs.data();
  // Mass of min-p's survivors: all tokens when min_p == 0 (the exp pass
  // summed them already), else a masked pass.
  double total = plan.p_total;
  if (params_.min_p > 0.0f) {
    kernels_.kept_block_mass(p, n_vocab_, params_.min_p, kMaxToken,
                             scratch.block_mass.data());
    total = 0.0;
    for (int64_t b = 0; b * kMassBlock < n_vocab_; ++b) {
      total += scratch.block_mass[b];
    }
  }
  const double target = static_cast<double>(params_.top_p) * total;

  // Tokens below `floor` never decide the cut: together they weigh at most
  // n * floor = (1 - top_p) * total / 2, so the tokens above it already
  // reach the target, with a margin far beyond rounding. Leaving them out of
  // the histogram makes peaked rows cheaper. It also puts floor above 2^-64
  // (total >= 1, 1 - top_p >= 2^-24, n < 2^31), so the catch-all bucket 1
  // of bucket_ids stays empty and every bucket spans 1/256 octave.
  const float floor = std::max(
      params_.min_p, static_cast<float>(0.5 * (1.0 - params_.top_p) * total /
                                        static_cast<double>(n_vocab_)));
  uint16_t* ids = scratch.bucket_ids.data();
  const int64_t n_in = kernels_.bucket_ids(p, n_vocab_, floor, ids);

  // Histogram of mass and count per bucket, in one scalar pass (~3 cycles
  // per token; it is most of top-p's cost). Left-out tokens (id 0) go to
  // kDummySlots rotating slots past the real buckets: a single slot would
  // chain every update through store-to-load forwarding. When few tokens
  // are in, groups of four left-out ids are skipped whole; above ~1/8 in,
  // that branch mispredicts often enough that the branch-free loop wins
  // (measured: ~3x either way at 0.5% and 28% of tokens in). Masses stay in
  // double: in flat rows a token holds ~1e-5 of the mass, and float bucket
  // sums (~1e-6 relative error) could move the cut by a token.
  double* mass = scratch.hist_mass.data();
  int32_t* count = scratch.hist_count.data();
  std::fill(mass, mass + kNumBuckets + kDummySlots, 0.0);
  std::fill(count, count + kNumBuckets + kDummySlots, 0);
  auto add = [&](int64_t j) {
    const uint32_t id = ids[j];
    const uint32_t slot =
        id != 0 ? id
                : kNumBuckets + static_cast<uint32_t>(j & (kDummySlots - 1));
    mass[slot] += p[j];
    ++count[slot];
  };
  int64_t i = 0;
  if (n_in < n_vocab_ / 8) {
    for (; i + 4 <= n_vocab_; i += 4) {
      uint64_t group;
      std::memcpy(&group, ids + i, sizeof(group));
      if (group == 0) continue;
      add(i);
      add(i + 1);
      add(i + 2);
      add(i + 3);
    }
  }
  for (; i < n_vocab_; ++i) add(i);

  // From the top bucket down, find the one where the running mass reaches
  // the target.
  int32_t boundary = -1;
  double cum = 0.0;
  for (int32_t b = kNumBuckets - 1; b >= 1; --b) {
    if (count[b] == 0) continue;
    boundary = b;
    if (cum + mass[b] >= target) break;
    cum += mass[b];
  }
  // boundary >= 1: the maximum (p = 1 >= floor) is always counted.

  // Sort only the boundary bucket, in the chain's order, and walk it.
  scratch.members.resize(count[boundary]);
  kernels_.find_id(ids, n_vocab_, static_cast<uint16_t>(boundary),
                   count[boundary], scratch.members.data());
  auto& bucket = scratch.bucket;
  bucket.clear();
  for (int32_t token : scratch.members) bucket.emplace_back(p[token], token);
  std::sort(bucket.begin(), bucket.end(), [](const auto& x, const auto& y) {
    return Before(x.first, x.second, y.first, y.second);
  });
  for (const auto& [x, token] : bucket) {
    plan.cut_p = x;
    plan.cut_token = token;
    cum += x;
    if (cum >= target) break;
  }
}

absl::StatusOr<Sampler::Plan> Sampler::BuildPlan(const float* logits,
                                                 int64_t n_vocab,
                                                 Scratch& scratch) {
  if (n_vocab != n_vocab_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Sampler: got ", n_vocab, " logits, vocabulary is ", n_vocab_));
  }
  if (logits == nullptr) {
    return absl::InvalidArgumentError("Sampler: logits is null");
  }
  Plan plan;
  plan.logits = ApplyPenaltiesAndBans(logits, scratch);
  const sampling_internal::MaxResult mr = kernels_.max(plan.logits, n_vocab_);
  if (mr.has_nan || !std::isfinite(mr.max)) {
    return BadLogitError(logits, plan.logits);
  }
  plan.max = mr.max;

  const float temperature = params_.temperature;
  if (temperature > 0.0f && FullVocabularyPath()) {
    plan.log_norm = std::log(
        kernels_.exp_sum(plan.logits, n_vocab_, plan.max, 1.0f / temperature,
                         scratch.probs.data(), &plan.p_total));
    // p_max is exactly 1, so min-p is a plain threshold on p.
    plan.cut_p = params_.min_p;
    plan.cut_token = kMaxToken;
    if (params_.top_p < 1.0f) ComputeTopPCut(plan, scratch);
    return plan;
  }
  // Greedy decoding without logprobs needs no normalizer: skip the
  // full-vocabulary exp pass (~0.1 ms per token at 152k, a few percent of
  // a GPU decode step).
  const bool need_norm = temperature != 0.0f || params_.n_logprobs > 0;
  plan.log_norm = need_norm ? std::log(kernels_.exp_sum(plan.logits, n_vocab_, plan.max,
                                                        1.0f, nullptr, nullptr))
                            : std::numeric_limits<double>::quiet_NaN();
  if (temperature == 0.0f) {
    plan.greedy = true;
    // The first maximum (ties go to the lowest id): the first element
    // above the next float below the maximum.
    plan.greedy_token = static_cast<int32_t>(kernels_.first_above(
        plan.logits, 0, n_vocab_, std::nextafter(plan.max, kNegInf)));
    return plan;
  }

  // Top-k path: everything after top-k works on the k candidates, which
  // come in (logit desc, id asc) order. p is computed in double, where
  // distinct logits give distinct p, so this is also the (p desc, id asc)
  // order the truncations are defined on.
  SelectTopK(kernels_, plan.logits, n_vocab_, params_.top_k, &scratch.candidates);
  PlanFromCandidates(plan, scratch);
  return plan;
}

void Sampler::PlanFromCandidates(Plan& plan, Scratch& scratch) const {
  const float temperature = params_.temperature;
  plan.from_candidates = true;
  std::vector<Candidate>& candidates = scratch.candidates;
  std::vector<double>& weights = scratch.weights;
  const int64_t n = static_cast<int64_t>(candidates.size());
  weights.resize(n);
  const double max = plan.max;
  for (int64_t j = 0; j < n; ++j) {
    weights[j] = std::exp((candidates[j].logit - max) / temperature);
  }
  int64_t kept = n;
  if (params_.min_p > 0.0f) {
    const double min_p = params_.min_p;  // times p_max = weights[0] = 1
    kept = std::find_if(weights.begin(), weights.begin() + n,
                        [min_p](double w) { return w < min_p; }) -
           weights.begin();
  }
  if (params_.top_p < 1.0f) {
    double mass = 0.0;
    for (int64_t j = 0; j < kept; ++j) mass += weights[j];
    const double target = static_cast<double>(params_.top_p) * mass;
    double cum = 0.0;
    for (int64_t j = 0; j < kept; ++j) {
      cum += weights[j];
      if (cum >= target) {
        kept = j + 1;
        break;
      }
    }
  }
  plan.n_kept = kept;
}

bool Sampler::UsesOnlyTop(int64_t k, int64_t vocab_limit) const {
  if (penalties_ || params_.n_logprobs > 0 || vocab_limit < 1 || vocab_limit > n_vocab_) {
    return false;
  }
  if (static_cast<int64_t>(banned_.size()) != n_vocab_ - vocab_limit ||
      (!banned_.empty() && banned_.front() != vocab_limit)) {
    return false;  // banned_ is sorted and unique: it is [vocab_limit, n_vocab) exactly
  }
  if (params_.temperature == 0.0f) return k >= 1;
  return !FullVocabularyPath() && params_.top_k <= k;
}

absl::StatusOr<SampledToken> Sampler::SampleTop(absl::Span<const TokenLogprob> top,
                                                double log_norm) {
  Scratch& scratch = Scratch::ForThread(1);
  if (top.empty() || !std::isfinite(top[0].logprob)) {
    return absl::InvalidArgumentError("Sampler: no token has a finite logit");
  }
  Plan plan;
  plan.max = top[0].logprob;
  plan.log_norm = log_norm;
  SampledToken out;
  if (params_.temperature == 0.0f) {
    // As Sample(): greedy without logprobs skips the normalizer.
    out.token = top[0].token;
    out.logprob = std::numeric_limits<float>::quiet_NaN();
    return out;
  }
  std::vector<Candidate>& candidates = scratch.candidates;
  candidates.clear();
  for (const TokenLogprob& t : top) {
    if (static_cast<int64_t>(candidates.size()) >= params_.top_k) break;
    if (!std::isfinite(t.logprob)) break;
    if (t.token < 0 || t.token >= n_vocab_) {
      return absl::InvalidArgumentError(
          absl::StrCat("Sampler: candidate token ", t.token, " is outside the vocabulary"));
    }
    candidates.push_back({t.logprob, t.token});
  }
  PlanFromCandidates(plan, scratch);
  out.token = Draw(plan, rng_.NextDouble(), scratch);
  float logit = plan.max;
  for (const Candidate& c : candidates) {
    if (c.token == out.token) logit = c.logit;
  }
  out.logprob = static_cast<float>(static_cast<double>(logit) - plan.max - plan.log_norm);
  return out;
}

int32_t Sampler::Draw(const Plan& plan, double u, Scratch& scratch) const {
  // Inverse CDF in a fixed order; a token is picked when the running mass
  // passes the target strictly, so zero-probability tokens never are.
  // Rounding can leave the running mass just short of the target at the
  // end; then the last positive survivor is the answer.
  if (plan.from_candidates) {
    const std::vector<double>& weights = scratch.weights;
    double mass = 0.0;
    for (int64_t j = 0; j < plan.n_kept; ++j) mass += weights[j];
    const double target = u * mass;
    double run = 0.0;
    int32_t last = scratch.candidates[0].token;
    for (int64_t j = 0; j < plan.n_kept; ++j) {
      if (weights[j] <= 0.0) continue;
      last = scratch.candidates[j].token;
      run += weights[j];
      if (run > target) return last;
    }
    return last;
  }
  // Full vocabulary, in id order: per-block survivor mass (SIMD) narrows the
  // walk to one block of kMassBlock tokens.
  double* block_mass = scratch.block_mass.data();
  kernels_.kept_block_mass(scratch.probs.data(), n_vocab_, plan.cut_p,
                           plan.cut_token, block_mass);
  const int64_t n_blocks = (n_vocab_ + kMassBlock - 1) / kMassBlock;
  double mass = 0.0;
  for (int64_t b = 0; b < n_blocks; ++b) mass += block_mass[b];
  const double target = u * mass;
  double run = 0.0;
  int64_t block = -1;
  for (int64_t b = 0; b < n_blocks; ++b) {
    if (block_mass[b] <= 0.0) continue;
    block = b;
    if (run + block_mass[b] > target) break;
    run += block_mass[b];
  }
  // block >= 0: the maximum survives with p = 1.
  const int64_t begin = block * kMassBlock;
  const int64_t end = std::min(begin + kMassBlock, n_vocab_);
  const float* p = scratch.probs.data();
  int32_t last = -1;
  for (int64_t i = begin; i < end; ++i) {
    const int32_t token = static_cast<int32_t>(i);
    if (p[i] <= 0.0f || !Kept(p[i], token, plan.cut_p, plan.cut_token)) {
      continue;
    }
    last = token;
    run += p[i];
    if (run > target) break;
  }
  return last;
}

void Sampler::FillTopLogprobs(const Plan& plan, Scratch& scratch,
                              std::vector<TokenLogprob>* out) const {
  const int64_t n = params_.n_logprobs;
  // The top-k candidates already hold the n best when n <= k, or when there
  // were fewer than k finite logits (then they are all of them).
  const std::vector<Candidate>* top = &scratch.candidates;
  if (!plan.from_candidates ||
      (n > params_.top_k &&
       static_cast<int64_t>(scratch.candidates.size()) == params_.top_k)) {
    SelectTopK(kernels_, plan.logits, n_vocab_, n, &scratch.top);
    top = &scratch.top;
  }
  const int64_t count = std::min<int64_t>(n, top->size());
  out->reserve(count);
  for (int64_t j = 0; j < count; ++j) {
    const Candidate& c = (*top)[j];
    out->push_back({c.token, static_cast<float>(static_cast<double>(c.logit) -
                                                plan.max - plan.log_norm)});
  }
}

absl::StatusOr<SampledToken> Sampler::Sample(const float* logits,
                                             int64_t n_vocab) {
  Scratch& scratch = Scratch::ForThread(n_vocab_);
  ASSIGN_OR_RETURN(const Plan plan, BuildPlan(logits, n_vocab, scratch));
  SampledToken out;
  out.token =
      plan.greedy ? plan.greedy_token : Draw(plan, rng_.NextDouble(), scratch);
  out.logprob = static_cast<float>(static_cast<double>(plan.logits[out.token]) -
                                   plan.max - plan.log_norm);
  if (params_.n_logprobs > 0) FillTopLogprobs(plan, scratch, &out.top_logprobs);
  return out;
}

absl::StatusOr<std::vector<TokenProb>> Sampler::Distribution(
    const float* logits, int64_t n_vocab) {
  Scratch& scratch = Scratch::ForThread(n_vocab_);
  ASSIGN_OR_RETURN(const Plan plan, BuildPlan(logits, n_vocab, scratch));
  std::vector<TokenProb> out;
  double mass = 0.0;
  if (plan.greedy) {
    out.push_back({plan.greedy_token, 1.0});
    mass = 1.0;
  } else if (plan.from_candidates) {
    for (int64_t j = 0; j < plan.n_kept; ++j) {
      if (scratch.weights[j] > 0.0) {
        out.push_back({scratch.candidates[j].token, scratch.weights[j]});
        mass += scratch.weights[j];
      }
    }
  } else {
    const float* p = scratch.probs.data();
    for (int64_t i = 0; i < n_vocab_; ++i) {
      const int32_t token = static_cast<int32_t>(i);
      if (p[i] > 0.0f && Kept(p[i], token, plan.cut_p, plan.cut_token)) {
        out.push_back({token, p[i]});
        mass += p[i];
      }
    }
  }
  for (TokenProb& tp : out) tp.prob /= mass;
  std::sort(out.begin(), out.end(), [](const TokenProb& a, const TokenProb& b) {
    return a.prob > b.prob || (a.prob == b.prob && a.token < b.token);
  });
  return out;
}

}  // namespace minfer
