#include "engine/runtime/spec_gate.h"

#include <algorithm>
#include <array>

namespace minfer::runtime {

int SpecGate::ClassOf(int64_t sequences) {
  int c = 0;
  for (int64_t n = 1; n < sequences && c < kClasses - 1; n *= 2) ++c;
  return c;
}

double SpecGate::Mode::Median() const {
  if (filled == 0) return 0;
  std::array<double, kMaxWindow> sorted{};
  std::copy(seconds.begin(), seconds.begin() + filled, sorted.begin());
  std::nth_element(sorted.begin(), sorted.begin() + filled / 2, sorted.begin() + filled);
  return sorted[filled / 2];
}

SpecGate::Estimate SpecGate::Estimated(const Mode& m, const Mode& other) const {
  Estimate e;
  const double own = m.Median(), theirs = other.Median();
  double limit = opt_.outlier * own;
  if (theirs > 0) limit = std::min(limit, opt_.cross_outlier * theirs);
  double t = 0, s = 0;
  for (int32_t i = 0; i < m.filled; ++i) {
    if (m.seconds[i] > limit) continue;
    t += m.tokens[i];
    s += m.seconds[i];
    ++e.valid;
  }
  e.tps = s > 0 ? t / s : 0;
  e.step_seconds = e.valid > 0 ? s / e.valid : own;
  return e;
}

bool SpecGate::MayDraft(int64_t sequences) {
  Class& c = classes_[ClassOf(sequences)];
  // Measure both modes first (drafts first: the engine only asks when it
  // speculates, and a class without draft samples has nothing to lose).
  const Estimate d = Estimated(c.draft, c.plain), p = Estimated(c.plain, c.draft);
  bool draft;
  if (d.valid < opt_.warmup) {
    draft = true;
  } else if (p.valid < opt_.warmup) {
    draft = false;
  } else {
    const bool winner = d.tps >= p.tps;
    const Estimate& win = winner ? d : p;
    const Estimate& loser = winner ? p : d;
    const Mode& loser_mode = winner ? c.plain : c.draft;
    const double gap = 1.0 - loser.tps / win.tps;
    // A loser judged on few steps is measured sooner: its estimate is what
    // is uncertain, not the cost of a step.
    const double m =
        std::clamp(gap / opt_.explore_cost, opt_.min_interval, opt_.max_interval) *
        std::clamp(static_cast<double>(loser_mode.samples) / opt_.window,
                   std::min(opt_.early_scale, 1.0), 1.0);
    // The loser's turn lasts until a step of its mode is recorded (Record
    // resets the count): a step meant to draft in which no sequence drafted
    // (all backing off) measured nothing.
    draft = c.since_explore >= m * loser.step_seconds ? !winner : winner;
  }
  (draft ? allowed_ : held_)++;
  return draft;
}

void SpecGate::Record(int64_t sequences, bool drafted, int64_t emitted, double seconds) {
  if (seconds <= 0 || emitted <= 0) return;
  Class& c = classes_[ClassOf(sequences)];
  const bool switched = c.last >= 0 && c.last != (drafted ? 1 : 0);
  c.last = drafted ? 1 : 0;
  if (switched) return;  // it carries the switch's cost
  Mode& m = drafted ? c.draft : c.plain;
  const int32_t window = std::clamp(opt_.window, 1, kMaxWindow);
  m.tokens[m.next] = static_cast<double>(emitted);
  m.seconds[m.next] = seconds;
  m.next = (m.next + 1) % window;
  m.filled = std::min(m.filled + 1, window);
  m.samples = std::min(m.samples + 1, 1 << 30);
  // Time the winner ran, toward the loser's next turn; a loser's step ends
  // its turn.
  const bool winner = Estimated(c.draft, c.plain).tps >= Estimated(c.plain, c.draft).tps;
  if (drafted == winner) {
    c.since_explore += seconds;
  } else {
    c.since_explore = 0;
  }
}

double SpecGate::Throughput(int64_t sequences, bool drafted) const {
  const Class& c = classes_[ClassOf(sequences)];
  return drafted ? Estimated(c.draft, c.plain).tps : Estimated(c.plain, c.draft).tps;
}

}  // namespace minfer::runtime
