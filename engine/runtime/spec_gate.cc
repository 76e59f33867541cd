#include "engine/runtime/spec_gate.h"

#include <algorithm>

namespace minfer::runtime {

int SpecGate::ClassOf(int64_t sequences) {
  int c = 0;
  for (int64_t n = 1; n < sequences && c < kClasses - 1; n *= 2) ++c;
  return c;
}

bool SpecGate::MayDraft(int64_t sequences) {
  Class& c = classes_[ClassOf(sequences)];
  // Measure both modes first (drafts first: the engine only asks when it
  // speculates, and a class without draft samples has nothing to lose).
  bool draft;
  if (c.draft.samples < opt_.warmup) {
    draft = true;
  } else if (c.plain.samples < opt_.warmup) {
    draft = false;
  } else {
    const bool winner = c.draft.Tps() >= c.plain.Tps();
    const Mode& win = winner ? c.draft : c.plain;
    const Mode& loser = winner ? c.plain : c.draft;
    const double gap = 1.0 - loser.Tps() / win.Tps();
    // A loser judged on few steps is measured sooner: its estimate is what
    // is uncertain, not the cost of a step.
    const double m = std::clamp(gap / opt_.explore_cost, opt_.min_interval, opt_.max_interval) *
                     std::clamp(loser.samples / opt_.window, 0.125, 1.0);
    // The loser's turn lasts until a step of its mode is recorded (Record
    // resets the count): a step meant to draft in which no sequence drafted
    // (all backing off) measured nothing.
    draft = c.since_explore >= m * loser.StepSeconds() ? !winner : winner;
  }
  (draft ? allowed_ : held_)++;
  return draft;
}

void SpecGate::Record(int64_t sequences, bool drafted, int64_t emitted, double seconds) {
  if (seconds <= 0 || emitted <= 0) return;
  Class& c = classes_[ClassOf(sequences)];
  Mode& m = drafted ? c.draft : c.plain;
  const double keep = 1.0 - 1.0 / opt_.window;
  m.tokens *= keep;
  m.seconds *= keep;
  m.steps *= keep;
  m.tokens += static_cast<double>(emitted);
  m.seconds += seconds;
  m.steps += 1;
  m.samples = std::min(m.samples + 1, 1 << 30);
  // Time the winner ran, toward the loser's next turn; a loser's step ends
  // its turn.
  const bool winner = c.draft.Tps() >= c.plain.Tps();
  if (drafted == winner) {
    c.since_explore += seconds;
  } else {
    c.since_explore = 0;
  }
}

double SpecGate::Throughput(int64_t sequences, bool drafted) const {
  const Class& c = classes_[ClassOf(sequences)];
  return (drafted ? c.draft : c.plain).Tps();
}

}  // namespace minfer::runtime
