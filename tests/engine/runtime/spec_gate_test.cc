// SpecGate (engine/runtime/spec_gate.h) against simulated decode steps: a
// step of r rows costs a + b r seconds (the fixed part is reading the
// weights, the per-row part the rows' arithmetic), n sequences each draft
// k tokens, each accepted with probability alpha given the ones before it.
// The gate must reach nearly the better of "always draft" and "never
// draft" — whichever that is for the load — and follow a change of
// acceptance. The reference throughputs are computed from the same model,
// not from the gate.
#include "engine/runtime/spec_gate.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>

#include "gtest/gtest.h"

namespace minfer::runtime {
namespace {

struct Load {
  int64_t n;      // sequences
  int64_t k;      // drafts per sequence
  double alpha;   // acceptance per drafted token
  double a, b;    // step seconds = a + b * rows
};

// One step: (tokens emitted, seconds).
std::pair<int64_t, double> Step(const Load& l, bool draft, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  int64_t emitted = l.n, rows = l.n;
  if (draft) {
    rows += l.n * l.k;
    for (int64_t s = 0; s < l.n; ++s) {
      for (int64_t j = 0; j < l.k && u(rng) < l.alpha; ++j) ++emitted;
    }
  }
  return {emitted, l.a + l.b * static_cast<double>(rows)};
}

// Tokens per second over `steps` steps: with the gate, or always / never
// drafting. A step whose mode differs from the step before costs
// `switch_cost` seconds more.
enum class Policy { kGate, kAlways, kNever };
double Simulate(SpecGate& gate, const Load& l, Policy p, int steps, uint32_t seed,
                double switch_cost = 0) {
  std::mt19937 rng(seed);
  double tokens = 0, seconds = 0;
  int last = -1;
  for (int i = 0; i < steps; ++i) {
    const bool draft = p == Policy::kAlways ? true
                       : p == Policy::kNever ? false
                                             : gate.MayDraft(l.n);
    auto [e, t] = Step(l, draft, rng);
    if (last >= 0 && last != (draft ? 1 : 0)) t += switch_cost;
    last = draft ? 1 : 0;
    if (p == Policy::kGate) gate.Record(l.n, draft, e, t);
    tokens += static_cast<double>(e);
    seconds += t;
  }
  return tokens / seconds;
}

TEST(SpecGateTest, ClassesArePowersOfTwo) {
  EXPECT_EQ(SpecGate::ClassOf(1), 0);
  EXPECT_EQ(SpecGate::ClassOf(2), 1);
  EXPECT_EQ(SpecGate::ClassOf(3), 2);
  EXPECT_EQ(SpecGate::ClassOf(4), 2);
  EXPECT_EQ(SpecGate::ClassOf(5), 3);
  EXPECT_EQ(SpecGate::ClassOf(64), 6);
  EXPECT_EQ(SpecGate::ClassOf(65), 7);
  EXPECT_EQ(SpecGate::ClassOf(256), 8);
  EXPECT_EQ(SpecGate::ClassOf(257), 9);
  EXPECT_EQ(SpecGate::ClassOf(100000), SpecGate::kClasses - 1);
}

// The H100 figures of docs/benchmarks.md, roughly: one 7B stream's step
// 2.7 ms and nearly flat in rows; 64 streams' step 7.8 ms growing ~0.06 ms
// a row.
TEST(SpecGateTest, ReachesTheBetterPolicyAtEveryLoad) {
  const Load loads[] = {
      {1, 4, 0.7, 2.6e-3, 0.1e-3},    // one stream: drafts pay (~2x)
      {1, 4, 0.2, 2.6e-3, 0.1e-3},    // one stream, poor drafts: ~1.1x
      {4, 4, 0.7, 3.0e-3, 0.05e-3},   // a few streams: drafts pay
      {64, 4, 0.7, 4.0e-3, 0.06e-3},  // busy: drafts lose (0.8x)
      {64, 4, 0.3, 4.0e-3, 0.06e-3},  // busy, poor drafts: they lose more
      {16, 2, 0.9, 3.5e-3, 0.08e-3},  // near the line
  };
  for (const Load& l : loads) {
    SpecGate gate;
    const double always = Simulate(gate, l, Policy::kAlways, 4000, 1);
    const double never = Simulate(gate, l, Policy::kNever, 4000, 1);
    SpecGate fresh;
    const double gated = Simulate(fresh, l, Policy::kGate, 4000, 2);
    const double best = std::max(always, never);
    SCOPED_TRACE(testing::Message() << "n " << l.n << " alpha " << l.alpha << ": always "
                                    << always << ", never " << never << ", gated " << gated);
    // Within 3% of the better policy where the two differ by more than
    // 15% (issue 33: B = 64 within 3% of plain); near the line, where noise
    // decides and either choice costs little, within 6%.
    const bool decisive = std::max(always, never) > 1.15 * std::min(always, never);
    EXPECT_GE(gated, (decisive ? 0.97 : 0.94) * best);
    std::printf("n %ld k %ld alpha %.2f: always %.0f never %.0f gated %.0f tok/s\n", l.n, l.k,
                l.alpha, always, never, gated);
    if (always > 1.1 * never) {
      EXPECT_GT(fresh.allowed(), 3 * fresh.held()) << "drafts pay: mostly allowed";
    }
    if (never > 1.1 * always) {
      EXPECT_GT(fresh.held(), 3 * fresh.allowed()) << "drafts lose: mostly held";
    }
  }
}

// The shape of a measured B = 64 run (H100, 7B Q4_K_M, k = 4, acceptance
// 0.7, docs/benchmarks.md twenty-third session): a plain step of 64 rows
// takes 5.95 ms; in a drafting step only ~10 sequences draft (the others
// back off), and past 64 rows the step costs ~9 ms (the next tile of
// tokens), so drafts lose ~16%. The bench is 256 steps long: a gate that
// explores the loser every few steps while its estimate is young lost 4-5%
// there (the issue asks 3%). Deterministic seeds; the reference "never"
// runs the same steps without drafts.
TEST(SpecGateTest, ShortBusyRunsStayWithinThreePercentOfPlain) {
  auto step = [](bool draft, std::mt19937& rng) {
    std::uniform_real_distribution<double> u(0, 1);
    int64_t emitted = 64, rows = 64;
    if (draft) {
      rows += 10 * 4;
      for (int s = 0; s < 10; ++s) {
        for (int j = 0; j < 4 && u(rng) < 0.7; ++j) ++emitted;
      }
    }
    const double t = (rows <= 64 ? 5.95e-3 : 9.0e-3) * (1.0 + 0.02 * (u(rng) - 0.5));
    return std::pair<int64_t, double>{emitted, t};
  };
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    for (int steps : {256, 1024}) {
      SpecGate gate;
      std::mt19937 rng(seed), ref(seed);
      double tokens = 0, seconds = 0, plain_tokens = 0, plain_seconds = 0;
      for (int i = 0; i < steps; ++i) {
        const bool draft = gate.MayDraft(64);
        auto [e, t] = step(draft, rng);
        gate.Record(64, draft, e, t);
        tokens += static_cast<double>(e);
        seconds += t;
        auto [pe, pt] = step(false, ref);
        plain_tokens += static_cast<double>(pe);
        plain_seconds += pt;
      }
      const double ratio = (tokens / seconds) / (plain_tokens / plain_seconds);
      EXPECT_GE(ratio, 0.97) << "seed " << seed << ", " << steps << " steps";
      std::printf("seed %u, %d steps: %.3f of plain (%ld held, %ld allowed)\n", seed, steps, ratio,
                  gate.held(), gate.allowed());
    }
  }
}

// Switching modes costs the step after the switch (on the GPU: other
// graphs, other working sets). Charged to the mode switched to, that cost
// made the rarely run plain steps look slow while drafting, the usual
// mode, lost (B = 64, k = 4: 0.91x of plain on an H100). The gate leaves
// such steps out, so it sees each mode's steady cost.
TEST(SpecGateTest, TheCostOfSwitchingIsNotChargedToOneSide) {
  // Drafting loses by ~6% at 64 streams; a switch costs a quarter step.
  const Load busy{64, 4, 0.7, 4.0e-3, 0.06e-3};
  SpecGate ref;
  const double never = Simulate(ref, busy, Policy::kNever, 3000, 11);
  const double always = Simulate(ref, busy, Policy::kAlways, 3000, 11);
  ASSERT_LT(always, never);
  SpecGate gate;
  const double gated = Simulate(gate, busy, Policy::kGate, 3000, 12, 2.0e-3);
  // Within 4%: each turn of the loser now costs two steps and two
  // switches (a quarter step each here, a harsh case).
  EXPECT_GE(gated, 0.96 * never) << "always " << always << ", never " << never;
  EXPECT_GT(gate.held(), 4 * gate.allowed());
}

TEST(SpecGateTest, FollowsAChangeOfAcceptance) {
  // One stream whose drafts stop being accepted, then recover.
  SpecGate gate;
  const Load good{8, 4, 0.8, 3.0e-3, 0.1e-3}, bad{8, 4, 0.05, 3.0e-3, 0.1e-3};
  Simulate(gate, good, Policy::kGate, 500, 3);
  EXPECT_GT(gate.Throughput(8, true), gate.Throughput(8, false));
  const int64_t held0 = gate.held();
  Simulate(gate, bad, Policy::kGate, 1000, 4);
  EXPECT_GT(gate.held() - held0, 900) << "bad drafts held back within a few steps";
  const int64_t allowed0 = gate.allowed();
  Simulate(gate, good, Policy::kGate, 1000, 5);
  // Slower: the loser is measured rarely while far behind (max_interval),
  // and half its window must turn over.
  EXPECT_GT(gate.allowed() - allowed0, 400) << "good drafts come back within ~500 steps";
}

// A loser's turn lasts until a step of its mode is recorded: a step meant
// to draft in which no sequence drafted (all backing off) measured nothing.
TEST(SpecGateTest, ALosersTurnLastsUntilItsStepIsMeasured) {
  SpecGate gate;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(gate.MayDraft(4));
    gate.Record(4, true, 4, 2.0);  // drafts: 2 tokens/s
  }
  for (int i = 0; i < 3; ++i) {
    ASSERT_FALSE(gate.MayDraft(4));
    gate.Record(4, false, 4, 1.0);  // plain: 4 tokens/s, the winner
  }
  int plain_steps = 0;
  while (!gate.MayDraft(4)) {
    gate.Record(4, false, 4, 1.0);
    ASSERT_LT(++plain_steps, 1000);
  }
  EXPECT_GE(plain_steps, 1) << "the loser waits its turn";
  gate.Record(4, false, 4, 1.0);  // the turn's step drafted nothing
  EXPECT_TRUE(gate.MayDraft(4)) << "still the loser's turn";
  gate.Record(4, true, 4, 2.0);  // the first after a switch: not measured
  EXPECT_TRUE(gate.MayDraft(4)) << "still the loser's turn";
  gate.Record(4, true, 4, 2.0);  // now measured
  EXPECT_FALSE(gate.MayDraft(4));
}

// One stream whose first drafts all failed (the draft side starts far
// behind on three steps) and which then drafts well: the gate lets drafts
// back within a few dozen steps, not hundreds.
TEST(SpecGateTest, RecoversFromABadStartQuickly) {
  SpecGate gate;
  const Load plain_cost{1, 4, 0.0, 2.4e-3, 0.3e-3};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(gate.MayDraft(1));
    gate.Record(1, true, 1, plain_cost.a + plain_cost.b * 5);  // one token for a 5-row step
  }
  const Load good{1, 4, 0.7, 2.4e-3, 0.3e-3};
  Simulate(gate, good, Policy::kGate, 60, 8);
  int allowed = 0;
  for (int i = 0; i < 20; ++i) allowed += gate.MayDraft(1);
  EXPECT_GE(allowed, 18) << "drafts pay here (2.77 tokens for 1.4 steps)";
}

TEST(SpecGateTest, ClassesAreIndependent) {
  SpecGate gate;
  // Busy: drafts lose; alone: they win — each class learns its own.
  Simulate(gate, {64, 4, 0.7, 4.0e-3, 0.06e-3}, Policy::kGate, 300, 6);
  Simulate(gate, {1, 4, 0.7, 2.6e-3, 0.1e-3}, Policy::kGate, 300, 7);
  EXPECT_LT(gate.Throughput(64, true), gate.Throughput(64, false));
  EXPECT_GT(gate.Throughput(1, true), gate.Throughput(1, false));
  // Each decision followed by its step (at the loads' mean figures).
  auto decide = [&](int64_t n, int64_t drafted_tokens, double a, double b, int k) {
    const bool d = gate.MayDraft(n);
    gate.Record(n, d, d ? drafted_tokens : n, a + b * static_cast<double>(d ? n * (k + 1) : n));
    return d ? 1 : 0;
  };
  int drafts64 = 0, drafts1 = 0;
  for (int i = 0; i < 32; ++i) drafts64 += decide(64, 64 * 277 / 100, 4.0e-3, 0.06e-3, 4);
  for (int i = 0; i < 32; ++i) drafts1 += decide(1, 3, 2.6e-3, 0.1e-3, 4);
  EXPECT_LE(drafts64, 4);  // the exploring steps only
  EXPECT_GE(drafts1, 28);
}

TEST(SpecGateTest, StepsWithoutTimeOrTokensAreIgnored) {
  SpecGate gate;
  gate.Record(1, true, 5, 0.0);
  gate.Record(1, false, 0, 1.0);
  EXPECT_EQ(gate.Throughput(1, true), 0.0);
  EXPECT_EQ(gate.Throughput(1, false), 0.0);
  gate.Record(1, false, 4, 2.0);
  EXPECT_DOUBLE_EQ(gate.Throughput(1, false), 2.0);
  gate.Record(1, false, 8, 2.0);
  EXPECT_DOUBLE_EQ(gate.Throughput(1, false), 12.0 / 4.0) << "tokens over seconds";
  // A step far longer than the median (a graph capture) is left out.
  gate.Record(1, false, 4, 2.0);
  gate.Record(1, false, 1, 50.0);
  EXPECT_DOUBLE_EQ(gate.Throughput(1, false), 16.0 / 6.0);
  // Only the last `window` steps count.
  for (int i = 0; i < SpecGate::Options{}.window; ++i) gate.Record(1, false, 10, 1.0);
  EXPECT_DOUBLE_EQ(gate.Throughput(1, false), 10.0);
}

// Drafting's first steps each capture a CUDA graph (a new row count):
// tens of milliseconds against a few. They must not make the gate hold
// drafts that pay.
TEST(SpecGateTest, GraphCapturesDoNotCondemnDrafting) {
  SpecGate gate;
  const Load good{1, 8, 0.7, 2.4e-3, 0.3e-3};
  std::mt19937 rng(9);
  for (int i = 0; i < 6; ++i) {  // six captures among the first draft steps
    ASSERT_TRUE(i >= 3 || gate.MayDraft(1));
    gate.Record(1, true, 3, 0.030);
  }
  Simulate(gate, good, Policy::kGate, 200, 10);
  EXPECT_GT(gate.Throughput(1, true), gate.Throughput(1, false));
  int allowed = 0;
  for (int i = 0; i < 20; ++i) {
    const bool d = gate.MayDraft(1);
    allowed += d;
    const auto [e, t] = Step(good, d, rng);
    gate.Record(1, d, e, t);
  }
  EXPECT_GE(allowed, 18);
}

}  // namespace
}  // namespace minfer::runtime
