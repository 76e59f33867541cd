#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "engine/sampling/rng.h"
#include "gtest/gtest.h"

namespace minfer {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> RandomLogits(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> l(n);
  for (float& x : l) x = dist(gen);
  return l;
}

std::unique_ptr<Sampler> MakeSampler(const SamplingParams& params,
                                     int64_t n_vocab) {
  auto s = Sampler::Create(params, n_vocab);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(s).value() : nullptr;
}

// Reference: the distribution the chain defines, in float64, following the
// header's description step by step (penalties are applied by the caller).
std::map<int32_t, double> ReferenceDistribution(const std::vector<float>& l,
                                                const SamplingParams& p) {
  const int64_t n = static_cast<int64_t>(l.size());
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  order.erase(std::remove_if(order.begin(), order.end(),
                             [&](int32_t t) { return l[t] == -kInf; }),
              order.end());
  if (p.temperature == 0.0f) return {{order[0], 1.0}};
  if (p.top_k > 0 && p.top_k < static_cast<int32_t>(order.size())) {
    order.resize(p.top_k);
  }
  const double max = l[order[0]];
  std::vector<double> w;
  for (int32_t t : order) w.push_back(std::exp((l[t] - max) / p.temperature));
  size_t kept = order.size();
  for (size_t j = 0; j < kept; ++j) {
    if (w[j] < p.min_p * w[0]) {
      kept = j;
      break;
    }
  }
  if (p.top_p < 1.0f) {
    const double mass = std::accumulate(w.begin(), w.begin() + kept, 0.0);
    double cum = 0.0;
    for (size_t j = 0; j < kept; ++j) {
      cum += w[j];
      if (cum >= p.top_p * mass) {
        kept = j + 1;
        break;
      }
    }
  }
  const double mass = std::accumulate(w.begin(), w.begin() + kept, 0.0);
  std::map<int32_t, double> out;
  for (size_t j = 0; j < kept; ++j) {
    if (w[j] > 0.0) out[order[j]] = w[j] / mass;
  }
  return out;
}

std::map<int32_t, double> ToMap(const std::vector<TokenProb>& dist) {
  std::map<int32_t, double> m;
  for (const TokenProb& tp : dist) m[tp.token] = tp.prob;
  return m;
}

void ExpectSameDistribution(const std::map<int32_t, double>& got,
                            const std::map<int32_t, double>& want,
                            double tol = 1e-6) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [token, prob] : want) {
    auto it = got.find(token);
    ASSERT_NE(it, got.end()) << "missing token " << token;
    EXPECT_NEAR(it->second, prob, tol) << "token " << token;
  }
}

// Draws `n` tokens and returns the count per token.
std::map<int32_t, int64_t> Draw(Sampler& s, const std::vector<float>& l,
                                int64_t n) {
  std::map<int32_t, int64_t> counts;
  for (int64_t i = 0; i < n; ++i) {
    auto t = s.Sample(l.data(), static_cast<int64_t>(l.size()));
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) break;
    ++counts[t->token];
  }
  return counts;
}

// Pearson chi-square of observed counts against probabilities; bins with an
// expected count below 5 are merged into one. Returns {statistic, dof}.
std::pair<double, int> ChiSquare(const std::map<int32_t, int64_t>& counts,
                                 const std::map<int32_t, double>& probs,
                                 int64_t n) {
  double chi2 = 0.0;
  int bins = 0;
  double small_expected = 0.0;
  double small_observed = 0.0;
  for (const auto& [token, prob] : probs) {
    const double expected = prob * n;
    auto it = counts.find(token);
    const double observed = it == counts.end() ? 0.0 : it->second;
    if (expected < 5.0) {
      small_expected += expected;
      small_observed += observed;
      continue;
    }
    chi2 += (observed - expected) * (observed - expected) / expected;
    ++bins;
  }
  if (small_expected > 0.0) {
    chi2 += (small_observed - small_expected) *
            (small_observed - small_expected) / small_expected;
    ++bins;
  }
  return {chi2, bins - 1};
}

// Upper 0.1% point of chi-square with `dof` degrees of freedom
// (Wilson-Hilferty; within 1% of the table for dof >= 3).
double ChiSquareCritical(int dof) {
  const double z = 3.0902;  // standard normal 99.9% quantile
  const double k = dof;
  const double t = 1.0 - 2.0 / (9.0 * k) + z * std::sqrt(2.0 / (9.0 * k));
  return k * t * t * t;
}

// ---------------------------------------------------------------- Creation

TEST(SamplerTest, CreateValidates) {
  SamplingParams bad;
  bad.top_p = 0.0f;
  EXPECT_EQ(Sampler::Create(bad, 10).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Sampler::Create(SamplingParams(), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  SamplingParams banned;
  banned.banned_tokens = {3, 10};
  const absl::Status s = Sampler::Create(banned, 10).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("banned_tokens[1]"), absl::string_view::npos) << s;
  EXPECT_TRUE(Sampler::Create(banned, 11).ok());
}

TEST(SamplerTest, RejectsBadLogits) {
  SamplingParams p;
  auto s = MakeSampler(p, 6);
  std::vector<float> l = {0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f};
  EXPECT_EQ(s->Sample(l.data(), 5).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->Sample(nullptr, 6).status().code(),
            absl::StatusCode::kInvalidArgument);
  l[4] = std::numeric_limits<float>::quiet_NaN();
  absl::Status st = s->Sample(l.data(), 6).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("token 4 is NaN"), absl::string_view::npos) << st;
  l[4] = kInf;
  st = s->Sample(l.data(), 6).status();
  EXPECT_NE(st.message().find("token 4 is +inf"), absl::string_view::npos)
      << st;
  std::fill(l.begin(), l.end(), -kInf);
  st = s->Sample(l.data(), 6).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("no token has a finite logit"),
            absl::string_view::npos)
      << st;
  // Failed calls leave no trace in the history.
  EXPECT_EQ(s->history_size(), 0);
}

TEST(SamplerTest, AllBannedIsAnError) {
  SamplingParams p;
  p.banned_tokens = {0, 1, 2};
  auto s = MakeSampler(p, 3);
  const std::vector<float> l = {1.0f, 2.0f, 3.0f};
  EXPECT_EQ(s->Sample(l.data(), 3).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SamplerTest, PenaltyOverflowToInfinityIsReported) {
  SamplingParams p;
  p.frequency_penalty = -3e38f;
  p.penalty_last_n = -1;
  p.temperature = 0.0f;
  auto s = MakeSampler(p, 4);
  ASSERT_TRUE(s->Accept(2).ok());
  ASSERT_TRUE(s->Accept(2).ok());
  const std::vector<float> l = {0.0f, 0.0f, 3e38f, 0.0f};
  const absl::Status st = s->Sample(l.data(), 4).status();
  EXPECT_NE(st.message().find("token 2"), absl::string_view::npos) << st;
  EXPECT_NE(st.message().find("after penalties"), absl::string_view::npos)
      << st;
}

// ------------------------------------------------------------------ Greedy

TEST(SamplerTest, GreedyIsArgmax) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_k = 5;  // irrelevant when greedy
  p.top_p = 0.5f;
  for (int64_t n : {1, 17, 1000, 152064}) {
    auto s = MakeSampler(p, n);
    for (uint32_t row = 0; row < 20; ++row) {
      const std::vector<float> l = RandomLogits(n, row * 7919 + n, 2.0f);
      const int32_t want = static_cast<int32_t>(
          std::max_element(l.begin(), l.end()) - l.begin());
      auto t = s->Sample(l.data(), n);
      ASSERT_TRUE(t.ok()) << t.status();
      EXPECT_EQ(t->token, want) << "n=" << n << " row=" << row;
    }
  }
}

TEST(SamplerTest, GreedyTiesGoToLowestId) {
  SamplingParams p;
  p.temperature = 0.0f;
  auto s = MakeSampler(p, 40);
  std::vector<float> l(40, -1.0f);
  l[31] = l[9] = l[17] = 2.5f;
  auto t = s->Sample(l.data(), 40);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->token, 9);
  // Equal logits everywhere: token 0.
  std::fill(l.begin(), l.end(), 0.25f);
  EXPECT_EQ(s->Sample(l.data(), 40)->token, 0);
  // Top-k ties are broken the same way.
  SamplingParams k;
  k.top_k = 3;
  auto sk = MakeSampler(k, 40);
  auto d = sk->Distribution(l.data(), 40);
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(d->size(), 3u);
  EXPECT_EQ((*d)[0].token, 0);
  EXPECT_EQ((*d)[1].token, 1);
  EXPECT_EQ((*d)[2].token, 2);
}

TEST(SamplerTest, BannedTokensAreNeverPicked) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.banned_tokens = {7, 3, 7};
  auto s = MakeSampler(p, 10);
  std::vector<float> l = {0, 1, 2, 9, 3, 4, 5, 8, 6, 7};
  EXPECT_EQ(s->Sample(l.data(), 10)->token, 9);  // 3 and 7 are banned
  p.temperature = 1.0f;
  for (int32_t top_k : {0, 4}) {
    p.top_k = top_k;
    auto r = MakeSampler(p, 10);
    const auto counts = Draw(*r, l, 5000);
    EXPECT_EQ(counts.count(3), 0u);
    EXPECT_EQ(counts.count(7), 0u);
  }
}

// ------------------------------------------------------------ Reproduction

TEST(SamplerTest, SameSeedSameTokensDifferentSeedDifferentTokens) {
  constexpr int64_t kVocab = 5000;
  for (int32_t top_k : {0, 40}) {
    SamplingParams p;
    p.temperature = 0.9f;
    p.top_k = top_k;
    p.top_p = 0.95f;
    p.min_p = 0.01f;
    p.repetition_penalty = 1.1f;
    p.seed = 1234;
    SamplingParams q = p;
    q.seed = 1235;
    auto a = MakeSampler(p, kVocab);
    auto b = MakeSampler(p, kVocab);
    auto c = MakeSampler(q, kVocab);
    std::vector<int32_t> seq_a, seq_c;
    for (uint32_t i = 0; i < 200; ++i) {
      const std::vector<float> l = RandomLogits(kVocab, i, 1.5f);
      auto ta = a->Sample(l.data(), kVocab);
      auto tb = b->Sample(l.data(), kVocab);
      auto tc = c->Sample(l.data(), kVocab);
      ASSERT_TRUE(ta.ok() && tb.ok() && tc.ok());
      ASSERT_EQ(ta->token, tb->token) << "draw " << i;
      // The accepted tokens feed the repetition penalty.
      ASSERT_TRUE(a->Accept(ta->token).ok());
      ASSERT_TRUE(b->Accept(tb->token).ok());
      ASSERT_TRUE(c->Accept(tc->token).ok());
      seq_a.push_back(ta->token);
      seq_c.push_back(tc->token);
    }
    int same = 0;
    for (int i = 0; i < 200; ++i) same += seq_a[i] == seq_c[i];
    EXPECT_LT(same, 100) << "different seeds should mostly differ";
    // Reset replays the exact sequence.
    a->Reset();
    for (uint32_t i = 0; i < 200; ++i) {
      const std::vector<float> l = RandomLogits(kVocab, i, 1.5f);
      auto t = a->Sample(l.data(), kVocab);
      ASSERT_EQ(t->token, seq_a[i]) << i;
      ASSERT_TRUE(a->Accept(t->token).ok());
    }
  }
}

// Pins the exact tokens of a seeded run: the determinism promise across
// CPUs (run it with MINFER_FORCE_SCALAR=1 too: same tokens) and a guard
// against silent changes of the algorithm. Logits come from SplitMix64, not
// <random>, whose distributions differ between standard libraries.
TEST(SamplerTest, GoldenSequenceIsStable) {
  constexpr int64_t kVocab = 152064;
  struct Config {
    const char* name;
    SamplingParams params;
    std::vector<int32_t> want;
  };
  SamplingParams top_p;
  top_p.temperature = 0.8f;
  top_p.top_p = 0.9f;
  top_p.min_p = 0.001f;
  top_p.seed = 20240607;
  SamplingParams top_k = top_p;
  top_k.top_k = 40;
  top_k.repetition_penalty = 1.3f;
  top_k.frequency_penalty = 0.5f;
  SamplingParams plain;
  plain.seed = 7;
  std::vector<Config> configs = {
      {"top_p",
       top_p,
       {80662, 120332, 83156, 17434, 56183, 129198, 132735, 88197, 132534,
        147881, 142894, 126359}},
      {"top_k",
       top_k,
       {106019, 117046, 83156, 90362, 18006, 115273, 17754, 104895, 37568,
        84396, 16226, 64286}},
      {"plain",
       plain,
       {106019, 42748, 126716, 149305, 150557, 132649, 9522, 15995, 61372,
        23717, 81231, 112122}},
  };
  std::vector<float> l(kVocab);
  for (Config& c : configs) {
    auto s = MakeSampler(c.params, kVocab);
    SplitMix64 gen(99);
    std::vector<int32_t> got;
    for (int step = 0; step < 12; ++step) {
      // Peaked-ish rows: uniform logits in [-8, 8) plus a few strong ones.
      for (float& x : l) {
        x = static_cast<float>(
            static_cast<double>(gen.Next() >> 11) * 0x1.0p-53 * 16.0 - 8.0);
      }
      for (int j = 0; j < 5; ++j) l[gen.Next() % kVocab] += 6.0f;
      auto t = s->Sample(l.data(), kVocab);
      ASSERT_TRUE(t.ok()) << t.status();
      ASSERT_TRUE(s->Accept(t->token).ok());
      got.push_back(t->token);
    }
    EXPECT_EQ(got, c.want) << c.name << ": got " << testing::PrintToString(got);
  }
}

TEST(SamplerTest, DistributionDoesNotAdvanceTheStream) {
  SamplingParams p;
  p.seed = 9;
  auto a = MakeSampler(p, 100);
  auto b = MakeSampler(p, 100);
  const std::vector<float> l = RandomLogits(100, 3);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(a->Distribution(l.data(), 100).ok());
  EXPECT_EQ(a->history_size(), 0);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(a->Sample(l.data(), 100)->token, b->Sample(l.data(), 100)->token);
  }
}

// -------------------------------------------------------------- Statistics

TEST(SamplerTest, PlainSamplingMatchesSoftmax) {
  // Small vocabulary, temperature 1, nothing truncated.
  const std::vector<float> l = {1.0f, 2.0f, 0.5f,  -1.0f, 3.0f,
                                2.5f, 0.0f, -0.5f, 1.5f,  2.2f};
  SamplingParams p;
  p.seed = 77;
  auto s = MakeSampler(p, 10);
  const auto want = ReferenceDistribution(l, p);
  ExpectSameDistribution(ToMap(*s->Distribution(l.data(), 10)), want);
  constexpr int64_t kDraws = 200000;
  const auto counts = Draw(*s, l, kDraws);
  double max_dev = 0.0;
  for (const auto& [token, prob] : want) {
    const double freq = counts.count(token) ? counts.at(token) : 0;
    max_dev = std::max(max_dev, std::fabs(freq / kDraws - prob));
  }
  // 5 standard deviations of the largest bin (p ~ 0.33).
  EXPECT_LT(max_dev, 5 * std::sqrt(0.25 / kDraws));
  const auto [chi2, dof] = ChiSquare(counts, want, kDraws);
  EXPECT_EQ(dof, 9);
  EXPECT_LT(chi2, ChiSquareCritical(dof)) << "chi2=" << chi2;
}

TEST(SamplerTest, LargeVocabularySamplingMatchesSoftmax) {
  // Several kMassBlock blocks, logits spread enough that a few hundred tokens
  // carry the mass: exercises the blocked inverse-CDF walk.
  constexpr int64_t kVocab = 6000;
  std::vector<float> l = RandomLogits(kVocab, 5, 2.5f);
  l[kVocab - 1] = 12.0f;  // a dominant token in the last, partial block
  SamplingParams p;
  p.seed = 2024;
  auto s = MakeSampler(p, kVocab);
  const auto want = ReferenceDistribution(l, p);
  ExpectSameDistribution(ToMap(*s->Distribution(l.data(), kVocab)), want, 1e-6);
  constexpr int64_t kDraws = 100000;
  const auto counts = Draw(*s, l, kDraws);
  const auto [chi2, dof] = ChiSquare(counts, want, kDraws);
  EXPECT_GT(dof, 20);
  EXPECT_LT(chi2, ChiSquareCritical(dof)) << "chi2=" << chi2 << " dof=" << dof;
}

TEST(SamplerTest, TopKKeepsExactlyTheKLargest) {
  constexpr int64_t kVocab = 3000;
  const std::vector<float> l = RandomLogits(kVocab, 11, 1.0f);
  std::vector<int32_t> order(kVocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  for (int32_t k : {1, 5, 40, 1500, 2999}) {  // heap and nth_element paths
    SamplingParams p;
    p.top_k = k;
    p.seed = k;
    auto s = MakeSampler(p, kVocab);
    const auto dist = ToMap(*s->Distribution(l.data(), kVocab));
    const std::set<int32_t> want(order.begin(), order.begin() + k);
    std::set<int32_t> got;
    for (const auto& [token, prob] : dist) got.insert(token);
    EXPECT_EQ(got, want) << "k=" << k;
    ExpectSameDistribution(dist, ReferenceDistribution(l, p));
    if (k <= 5) {
      const auto counts = Draw(*s, l, 20000);
      std::set<int32_t> drawn;
      for (const auto& [token, count] : counts) drawn.insert(token);
      EXPECT_EQ(drawn, want) << "k=" << k;
    }
  }
}

// Probabilities {0.5, 0.3, 0.15, 0.05} plus two masked tokens, so the top-k
// path (top_k = 5 < 6) sees the same candidates as the full path.
std::vector<float> FourTokenLogits() {
  return {std::log(0.5f),  std::log(0.3f), -kInf,
          std::log(0.15f), -kInf,          std::log(0.05f)};
}

TEST(SamplerTest, TopPHandComputed) {
  const std::vector<float> l = FourTokenLogits();
  for (int32_t top_k : {0, 5}) {
    SamplingParams p;
    p.top_k = top_k;
    struct Case {
      float top_p;
      std::map<int32_t, double> want;
    };
    const Case cases[] = {
        {0.4f, {{0, 1.0}}},
        {0.75f, {{0, 0.5 / 0.8}, {1, 0.3 / 0.8}}},
        {0.85f, {{0, 0.5 / 0.95}, {1, 0.3 / 0.95}, {3, 0.15 / 0.95}}},
        {0.97f, {{0, 0.5}, {1, 0.3}, {3, 0.15}, {5, 0.05}}},
    };
    for (const Case& c : cases) {
      p.top_p = c.top_p;
      auto s = MakeSampler(p, 6);
      SCOPED_TRACE(testing::Message()
                   << "top_k=" << top_k << " top_p=" << c.top_p);
      ExpectSameDistribution(ToMap(*s->Distribution(l.data(), 6)), c.want);
      const auto counts = Draw(*s, l, 4000);
      for (const auto& [token, count] : counts) {
        EXPECT_TRUE(c.want.count(token)) << "drew " << token;
      }
    }
  }
}

TEST(SamplerTest, TopPTiesKeepLowerIds) {
  const std::vector<float> l(10, 0.7f);
  for (int32_t top_k : {0, 9}) {
    SamplingParams p;
    p.top_k = top_k;
    p.top_p = 0.35f;
    auto s = MakeSampler(p, 10);
    ExpectSameDistribution(ToMap(*s->Distribution(l.data(), 10)),
                           {{0, 0.25}, {1, 0.25}, {2, 0.25}, {3, 0.25}});
  }
}

TEST(SamplerTest, TopPRandomMatchesReference) {
  constexpr int64_t kVocab = 20000;
  int checked = 0;
  for (uint32_t seed = 0; seed < 6; ++seed) {
    const std::vector<float> l = RandomLogits(kVocab, 100 + seed, 2.0f + seed);
    for (float top_p : {0.5f, 0.9f, 0.99f}) {
      for (int32_t top_k : {0, 1000, 19999}) {
        SamplingParams p;
        p.temperature = 0.8f;
        p.top_p = top_p;
        p.top_k = top_k;
        const auto want = ReferenceDistribution(l, p);
        // Only meaningful if rounding cannot decide the cut: the mass of the
        // kept prefix without its last token, and with it, must be clearly
        // on either side of top_p.
        SamplingParams untruncated = p;
        untruncated.top_p = 1.0f;
        std::vector<double> probs;
        for (const auto& [token, prob] :
             ReferenceDistribution(l, untruncated)) {
          probs.push_back(prob);
        }
        std::sort(probs.rbegin(), probs.rend());
        const double with_last =
            std::accumulate(probs.begin(), probs.begin() + want.size(), 0.0);
        const double without_last = with_last - probs[want.size() - 1];
        if (without_last > top_p - 1e-5 || with_last < top_p + 1e-7) continue;
        auto s = MakeSampler(p, kVocab);
        SCOPED_TRACE(testing::Message() << "seed=" << seed << " top_p=" << top_p
                                        << " top_k=" << top_k);
        ExpectSameDistribution(ToMap(*s->Distribution(l.data(), kVocab)), want,
                               1e-6);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 20);
}

TEST(SamplerTest, TopPDrawsFollowTruncatedDistribution) {
  constexpr int64_t kVocab = 4000;
  const std::vector<float> l = RandomLogits(kVocab, 42, 3.0f);
  SamplingParams p;
  p.top_p = 0.8f;
  p.temperature = 1.3f;
  p.seed = 5;
  const auto want = ReferenceDistribution(l, p);
  ASSERT_GT(want.size(), 20u);
  auto s = MakeSampler(p, kVocab);
  constexpr int64_t kDraws = 100000;
  const auto counts = Draw(*s, l, kDraws);
  for (const auto& [token, count] : counts) {
    ASSERT_TRUE(want.count(token)) << "token " << token << " is outside top-p";
  }
  const auto [chi2, dof] = ChiSquare(counts, want, kDraws);
  EXPECT_LT(chi2, ChiSquareCritical(dof)) << "chi2=" << chi2 << " dof=" << dof;
}

TEST(SamplerTest, MinPRemovesTokensBelowFractionOfMax) {
  // Probabilities {0.5, 0.3, 0.1, 0.06, 0.04} at temperature 1.
  const std::vector<float> l = {std::log(0.5f),  std::log(0.3f),
                                std::log(0.1f),  std::log(0.06f),
                                std::log(0.04f), -kInf};
  for (int32_t top_k : {0, 5}) {
    SamplingParams p;
    p.top_k = top_k;
    p.min_p = 0.15f;  // threshold 0.075: keeps 0.5, 0.3, 0.1
    auto s = MakeSampler(p, 6);
    ExpectSameDistribution(ToMap(*s->Distribution(l.data(), 6)),
                           {{0, 0.5 / 0.9}, {1, 0.3 / 0.9}, {2, 0.1 / 0.9}});
    // Min-p is measured after temperature: at T = 2 the ratios are the
    // square roots, sqrt(0.04 / 0.5) = 0.283 >= 0.15, so all five stay.
    p.temperature = 2.0f;
    auto t = MakeSampler(p, 6);
    const auto dist = ToMap(*t->Distribution(l.data(), 6));
    EXPECT_EQ(dist.size(), 5u);
    ExpectSameDistribution(dist, ReferenceDistribution(l, p));
    // Min-p then top-p: top-p's mass is measured on min-p's survivors.
    p.temperature = 1.0f;
    p.top_p = 0.85f;  // of 0.9: 0.765 -> {0.5, 0.3}
    auto u = MakeSampler(p, 6);
    ExpectSameDistribution(ToMap(*u->Distribution(l.data(), 6)),
                           {{0, 0.5 / 0.8}, {1, 0.3 / 0.8}});
  }
}

TEST(SamplerTest, TemperatureReshapesTheDistribution) {
  constexpr int64_t kVocab = 3000;
  const std::vector<float> l = RandomLogits(kVocab, 8, 1.0f);
  double prev_max = 0.0;
  for (float temperature : {4.0f, 1.0f, 0.5f, 0.1f}) {
    for (int32_t top_k : {0, 2999}) {
      SamplingParams p;
      p.temperature = temperature;
      p.top_k = top_k;
      auto s = MakeSampler(p, kVocab);
      const auto dist = *s->Distribution(l.data(), kVocab);
      ExpectSameDistribution(ToMap(dist), ReferenceDistribution(l, p), 1e-6);
      if (top_k == 0) {
        EXPECT_GT(dist[0].prob, prev_max) << "T=" << temperature;
        prev_max = dist[0].prob;
      }
    }
  }
  // Low temperature concentrates the draws on the argmax.
  SamplingParams cold;
  cold.temperature = 0.05f;
  cold.seed = 3;
  auto s = MakeSampler(cold, kVocab);
  const int32_t argmax =
      static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
  const auto counts = Draw(*s, l, 2000);
  const double share = counts.count(argmax) ? counts.at(argmax) / 2000.0 : 0.0;
  const double want = ReferenceDistribution(l, cold).at(argmax);
  EXPECT_GT(want, 20 * ReferenceDistribution(l, SamplingParams()).at(argmax));
  EXPECT_NEAR(share, want, 5 * std::sqrt(want * (1 - want) / 2000));
}

TEST(SamplerTest, ChainOrderTopKThenTemperatureThenMinPThenTopP) {
  constexpr int64_t kVocab = 500;
  const std::vector<float> l = RandomLogits(kVocab, 31, 1.5f);
  SamplingParams p;
  p.top_k = 60;
  p.temperature = 1.7f;
  p.min_p = 0.4f;
  p.top_p = 0.7f;
  auto s = MakeSampler(p, kVocab);
  const auto want = ReferenceDistribution(l, p);
  ExpectSameDistribution(ToMap(*s->Distribution(l.data(), kVocab)), want);
  // Sanity: each step changes the outcome here, so a different order would
  // be caught.
  SamplingParams no_min_p = p;
  no_min_p.min_p = 0.0f;
  SamplingParams no_top_p = p;
  no_top_p.top_p = 1.0f;
  EXPECT_NE(ReferenceDistribution(l, no_min_p).size(), want.size());
  EXPECT_NE(ReferenceDistribution(l, no_top_p).size(), want.size());
}

// --------------------------------------------------------------- Penalties

// Log-softmax in float64.
std::vector<double> LogSoftmax(const std::vector<double>& x) {
  double max = -INFINITY;
  for (double v : x) max = std::max(max, v);
  double sum = 0.0;
  for (double v : x) sum += std::exp(v - max);
  std::vector<double> out;
  for (double v : x) out.push_back(v - max - std::log(sum));
  return out;
}

// Runs a greedy sample reporting all 8 logprobs; returns logprob per token.
std::vector<double> LogprobsOf(Sampler& s, const std::vector<float>& l,
                               int32_t* token) {
  auto t = s.Sample(l.data(), static_cast<int64_t>(l.size()));
  EXPECT_TRUE(t.ok()) << t.status();
  std::vector<double> out(l.size(), -INFINITY);
  if (!t.ok()) return out;
  *token = t->token;
  for (const TokenLogprob& tl : t->top_logprobs) out[tl.token] = tl.logprob;
  return out;
}

const std::vector<float> kPenaltyLogits = {2.0f,  -1.0f, 0.9f, 2.5f,
                                           -2.0f, 0.0f,  1.0f, -0.5f};

TEST(SamplerTest, PenaltiesHandComputed) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.n_logprobs = 8;
  p.repetition_penalty = 1.5f;
  p.frequency_penalty = 0.25f;
  p.presence_penalty = 0.5f;
  p.penalty_last_n = -1;
  auto s = MakeSampler(p, 8);
  ASSERT_TRUE(s->SetPrompt({3, 1, 3, 6}).ok());
  ASSERT_TRUE(s->Accept(0).ok());
  EXPECT_EQ(s->history_size(), 5);
  // counts: 0 -> 1, 1 -> 1, 3 -> 2, 6 -> 1.
  const std::vector<double> want_logits = {
      2.0 / 1.5 - (0.25 + 0.5),      // 0.58333
      -1.0 * 1.5 - (0.25 + 0.5),     // -2.25
      0.9,                           //
      2.5 / 1.5 - (2 * 0.25 + 0.5),  // 0.66667
      -2.0,                          //
      0.0,                           //
      1.0 / 1.5 - (0.25 + 0.5),      // -0.08333
      -0.5};
  int32_t token = -1;
  const std::vector<double> got = LogprobsOf(*s, kPenaltyLogits, &token);
  const std::vector<double> want = LogSoftmax(want_logits);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
  // The penalties move the argmax from 3 to 2.
  EXPECT_EQ(token, 2);
}

TEST(SamplerTest, PenaltyWindowLimitsTheHistory) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.n_logprobs = 8;
  p.repetition_penalty = 1.5f;
  p.frequency_penalty = 0.25f;
  p.presence_penalty = 0.5f;
  p.penalty_last_n = 2;
  auto s = MakeSampler(p, 8);
  ASSERT_TRUE(s->SetPrompt({3, 1, 3, 6, 0}).ok());
  // Window = {6, 0}: only those two are penalized, once each.
  std::vector<double> want_logits(kPenaltyLogits.begin(), kPenaltyLogits.end());
  want_logits[6] = 1.0 / 1.5 - 0.75;
  want_logits[0] = 2.0 / 1.5 - 0.75;
  int32_t token = -1;
  std::vector<double> got = LogprobsOf(*s, kPenaltyLogits, &token);
  std::vector<double> want = LogSoftmax(want_logits);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
  EXPECT_EQ(token, 3);
  // Sampling alone leaves the history as it was.
  EXPECT_EQ(s->history_size(), 5);
  got = LogprobsOf(*s, kPenaltyLogits, &token);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
  // Accepting it slides the window: {0, 3}.
  ASSERT_TRUE(s->Accept(token).ok());
  EXPECT_EQ(s->history_size(), 6);
  want_logits.assign(kPenaltyLogits.begin(), kPenaltyLogits.end());
  want_logits[0] = 2.0 / 1.5 - 0.75;
  want_logits[3] = 2.5 / 1.5 - 0.75;
  got = LogprobsOf(*s, kPenaltyLogits, &token);
  want = LogSoftmax(want_logits);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;

  // penalty_last_n = 0 turns everything off.
  p.penalty_last_n = 0;
  auto off = MakeSampler(p, 8);
  ASSERT_TRUE(off->SetPrompt({3, 3, 3}).ok());
  got = LogprobsOf(*off, kPenaltyLogits, &token);
  want = LogSoftmax(
      std::vector<double>(kPenaltyLogits.begin(), kPenaltyLogits.end()));
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
}

TEST(SamplerTest, HistoryCallsValidateAndAreAtomic) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.n_logprobs = 8;
  p.presence_penalty = 1.0f;
  p.penalty_last_n = -1;
  auto s = MakeSampler(p, 8);
  ASSERT_TRUE(s->SetPrompt({1}).ok());
  EXPECT_EQ(s->SetPrompt({2, 8}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->SetPrompt({-1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->Accept(8).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->history_size(), 1);
  int32_t token;
  const std::vector<double> got = LogprobsOf(*s, kPenaltyLogits, &token);
  std::vector<double> want_logits(kPenaltyLogits.begin(), kPenaltyLogits.end());
  want_logits[1] -= 1.0;  // only the first prompt survived
  const std::vector<double> want = LogSoftmax(want_logits);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
  // Reset forgets the history.
  s->Reset();
  EXPECT_EQ(s->history_size(), 0);
}

// Random histories against a naive recount of the window every step.
TEST(SamplerTest, PenaltiesMatchNaiveWindowRecount) {
  constexpr int64_t kVocab = 50;
  for (int32_t last_n : {-1, 1, 7, 64}) {
    SamplingParams p;
    p.repetition_penalty = 1.3f;
    p.frequency_penalty = 0.2f;
    p.presence_penalty = -0.1f;
    p.penalty_last_n = last_n;
    p.seed = 17;
    auto s = MakeSampler(p, kVocab);
    std::mt19937 gen(last_n + 100);
    std::uniform_int_distribution<int32_t> pick(0, 9);  // repeats are common
    std::vector<int32_t> history(150);
    for (int32_t& t : history) t = pick(gen);
    ASSERT_TRUE(s->SetPrompt(history).ok());
    for (int step = 0; step < 120; ++step) {
      const std::vector<float> l = RandomLogits(kVocab, step, 1.0f);
      // Naive reference: count the window from the full history.
      const size_t begin =
          last_n < 0
              ? 0
              : history.size() - std::min<size_t>(last_n, history.size());
      std::map<int32_t, int> counts;
      for (size_t i = begin; i < history.size(); ++i) ++counts[history[i]];
      std::vector<float> penalized = l;
      for (const auto& [t, c] : counts) {
        float x = penalized[t];
        x = x > 0.0f ? x / p.repetition_penalty : x * p.repetition_penalty;
        x -= c * p.frequency_penalty + p.presence_penalty;
        penalized[t] = x;
      }
      const auto want = ReferenceDistribution(penalized, p);
      const auto got = ToMap(*s->Distribution(l.data(), kVocab));
      ASSERT_NO_FATAL_FAILURE(ExpectSameDistribution(got, want, 1e-6))
          << "last_n=" << last_n << " step=" << step;
      if (step % 3 == 0) {
        auto t = s->Sample(l.data(), kVocab);
        ASSERT_TRUE(t.ok());
        ASSERT_TRUE(s->Accept(t->token).ok());
        history.push_back(t->token);
      } else {
        const int32_t forced = pick(gen);
        ASSERT_TRUE(s->Accept(forced).ok());
        history.push_back(forced);
      }
    }
    EXPECT_EQ(s->history_size(), static_cast<int64_t>(history.size()));
  }
}

// ---------------------------------------------------------------- Logprobs

void CheckLogprobs(const SamplingParams& p, const std::vector<float>& l) {
  const int64_t n = static_cast<int64_t>(l.size());
  auto s = MakeSampler(p, n);
  std::set<int32_t> banned(p.banned_tokens.begin(), p.banned_tokens.end());
  double max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    if (!banned.count(i)) max = std::max(max, static_cast<double>(l[i]));
  }
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    if (!banned.count(i)) sum += std::exp(l[i] - max);
  }
  const double log_norm = max + std::log(sum);
  std::vector<int32_t> order;
  for (int64_t i = 0; i < n; ++i) {
    if (!banned.count(i)) order.push_back(static_cast<int32_t>(i));
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  for (int rep = 0; rep < 5; ++rep) {
    auto t = s->Sample(l.data(), n);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_NEAR(t->logprob, l[t->token] - log_norm, 2e-5);
    ASSERT_EQ(t->top_logprobs.size(), static_cast<size_t>(p.n_logprobs));
    for (int j = 0; j < p.n_logprobs; ++j) {
      EXPECT_EQ(t->top_logprobs[j].token, order[j]) << j;
      EXPECT_NEAR(t->top_logprobs[j].logprob, l[order[j]] - log_norm, 2e-5);
      if (j > 0) {
        EXPECT_GE(t->top_logprobs[j - 1].logprob, t->top_logprobs[j].logprob);
      }
    }
  }
}

TEST(SamplerTest, LogprobsMatchFloat64LogSoftmax) {
  constexpr int64_t kVocab = 152064;
  const std::vector<float> l = RandomLogits(kVocab, 99, 3.0f);
  SamplingParams p;
  p.n_logprobs = 20;
  p.temperature = 0.7f;  // logprobs ignore temperature and truncation
  p.top_p = 0.9f;
  {
    SCOPED_TRACE("full path");
    CheckLogprobs(p, l);
  }
  p.top_k = 40;
  {
    SCOPED_TRACE("top-k reuses candidates");
    CheckLogprobs(p, l);
  }
  p.top_k = 5;
  {
    SCOPED_TRACE("top-k smaller than n_logprobs");
    CheckLogprobs(p, l);
  }
  p.temperature = 0.0f;
  p.banned_tokens = {
      static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin())};
  {
    SCOPED_TRACE("greedy with the argmax banned");
    CheckLogprobs(p, l);
  }
}

TEST(SamplerTest, TopLogprobsWithFewFiniteLogitsAndTies) {
  SamplingParams p;
  p.n_logprobs = 5;
  p.top_k = 2;
  auto s = MakeSampler(p, 6);
  const std::vector<float> l = {-kInf, 1.0f, -kInf, 1.0f, 0.0f, -kInf};
  auto t = s->Sample(l.data(), 6);
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->top_logprobs.size(), 3u);  // only three finite logits
  EXPECT_EQ(t->top_logprobs[0].token, 1);
  EXPECT_EQ(t->top_logprobs[1].token, 3);
  EXPECT_EQ(t->top_logprobs[2].token, 4);
  const double norm = std::log(2 * std::exp(1.0) + 1.0);
  EXPECT_NEAR(t->top_logprobs[0].logprob, 1.0 - norm, 1e-6);
  EXPECT_NEAR(t->top_logprobs[2].logprob, 0.0 - norm, 1e-6);
}


// SampleTop on a row's candidates (what a device computes) draws exactly the
// token Sample draws from the whole row, consuming the same random numbers,
// whenever UsesOnlyTop holds; and UsesOnlyTop refuses every setting whose
// result depends on more than the candidates.
TEST(SamplerTest, SampleTopEqualsSampleOnTheWholeRow) {
  const int64_t n = 3000, limit = 2950;
  const int k = 64;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<SamplingParams> ps(4);
  ps[0].temperature = 0.0f;
  ps[1].temperature = 0.8f;
  ps[1].top_k = 40;
  ps[2].temperature = 1.3f;
  ps[2].top_k = 64;
  ps[2].top_p = 0.9f;
  ps[2].min_p = 0.02f;
  ps[3].temperature = 0.5f;
  ps[3].top_k = 7;
  for (size_t pi = 0; pi < ps.size(); ++pi) {
    SamplingParams p = ps[pi];
    p.seed = 77 + pi;
    for (int64_t id = limit; id < n; ++id) p.banned_tokens.push_back(static_cast<int32_t>(id));
    auto full = Sampler::Create(p, n);
    auto top = Sampler::Create(p, n);
    ASSERT_TRUE(full.ok() && top.ok());
    ASSERT_TRUE((*top)->UsesOnlyTop(k, limit)) << pi;
    for (int row = 0; row < 200; ++row) {
      std::vector<float> l(n);
      for (auto& x : l) x = std::round(nd(rng) * 4.0f) / 4.0f;  // ties
      // The candidates: the k best below the limit, (logit desc, id asc).
      std::vector<int32_t> ids(limit);
      std::iota(ids.begin(), ids.end(), 0);
      std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
      std::vector<TokenLogprob> cand;
      for (int j = 0; j < k; ++j) cand.push_back({ids[j], l[ids[j]]});
      auto a = (*full)->Sample(l.data(), n);
      auto b = (*top)->SampleTop(cand, 0.0);
      ASSERT_TRUE(a.ok() && b.ok());
      ASSERT_EQ(a->token, b->token) << "params " << pi << " row " << row;
      ASSERT_TRUE((*full)->Accept(a->token).ok());
      ASSERT_TRUE((*top)->Accept(b->token).ok());
    }
  }
  // Settings that need more than the candidates.
  auto make = [&](SamplingParams p, bool ban) {
    if (ban) {
      for (int64_t id = limit; id < n; ++id) p.banned_tokens.push_back(static_cast<int32_t>(id));
    }
    return *Sampler::Create(p, n);
  };
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 0;  // the whole vocabulary
  EXPECT_FALSE(make(p, true)->UsesOnlyTop(k, limit));
  p.top_k = 65;  // more than the candidates
  EXPECT_FALSE(make(p, true)->UsesOnlyTop(k, limit));
  p.top_k = 10;
  EXPECT_TRUE(make(p, true)->UsesOnlyTop(k, limit));
  EXPECT_FALSE(make(p, false)->UsesOnlyTop(k, limit));  // padding rows not banned
  p.n_logprobs = 2;
  EXPECT_FALSE(make(p, true)->UsesOnlyTop(k, limit));
  p.n_logprobs = 0;
  p.frequency_penalty = 0.5f;
  EXPECT_FALSE(make(p, true)->UsesOnlyTop(k, limit));
  p.frequency_penalty = 0.0f;
  p.banned_tokens = {5};  // a user ban below the limit
  EXPECT_FALSE(make(p, true)->UsesOnlyTop(k, limit));
}

}  // namespace
}  // namespace minfer
