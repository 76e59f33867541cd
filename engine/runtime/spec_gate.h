// Whether drafts pay at the current load (EngineOptions::spec_k).
//
// A verified draft saves a whole step, but every drafted token costs a row
// of the step it rides in. At one sequence a decode step is bound by
// reading the weights, so a few more rows are nearly free and drafts pay
// even at modest acceptance; at 64 sequences the step is bound by the
// rows' arithmetic and drafts accepted 70% of the time make it slower (on
// an H100, 7B Q4_K_M, 64 streams: 0.83x of plain at k = 4). Which side of
// the line a load is on depends on the GPU, the model, the kernels and the
// acceptance, so SpecGate measures instead of modelling: per batch size
// class it keeps the throughput (tokens emitted per second of step) of
// decode steps that carried drafts and of steps that did not, and lets
// drafts run only while their throughput is at least the plain one.
//
// The losing mode still runs now and then so its estimate stays current
// (acceptance and load change): after the winner has run for m of the
// loser's step times, with m = gap / explore_cost (gap: the loser's
// shortfall in throughput; m within [min_interval, max_interval]; scaled
// down to early_scale while the loser has fewer than `window` steps
// measured, not at all by default). The turn
// lasts until a step of the loser's mode is recorded. An exploring step
// costs about gap x its time, so exploring costs about explore_cost of the
// time whatever the gap: modes far apart are rarely re-measured, modes
// close together (where noise could mislead) often.
//
// A mode's throughput is the ratio of sums (tokens over seconds) over its
// last `window` steps, leaving out steps that took more than `outlier`
// times its median or `cross_outlier` times the other mode's: a step that
// captured a new CUDA graph (each new verify row count's first step takes
// tens of milliseconds) must not condemn drafting, and a draft step has at
// most twice a plain step's rows. A mode with fewer than `warmup` steps
// left is measured before anything is decided.
//
// The first step after a change of mode is not recorded: on the GPU a
// plain step after a verify step (or the reverse) may pay for the switch
// (other graphs, other kernels' working sets), and charged to the side
// switched to, that cost made plain steps look slow while drafting won
// (B = 64 at k = 4 kept drafting at 0.91x of plain). A losing mode's turn
// therefore lasts two steps.
//
// Steps with prefill rows say nothing about decoding and are not recorded.
// Classes are batch sizes rounded up to a power of two (1, 2, 4, ... 256+):
// within one, a step's cost changes little with the exact count.
//
// Not thread-safe: an Engine uses it from its own thread.
#ifndef MINFER_ENGINE_RUNTIME_SPEC_GATE_H_
#define MINFER_ENGINE_RUNTIME_SPEC_GATE_H_

#include <array>
#include <cstdint>

namespace minfer::runtime {

class SpecGate {
 public:
  struct Options {
    // The share of time exploring the losing mode may cost.
    double explore_cost = 0.01;
    // Bounds of the winner's run between two exploring steps, in the
    // loser's step times.
    double min_interval = 2, max_interval = 64;
    // Steps of a mode its estimate covers (at most kMaxWindow).
    int32_t window = 32;
    // Steps longer than this many times the mode's median, or than
    // cross_outlier times the other mode's, are left out.
    double outlier = 3.0;
    double cross_outlier = 6.0;
    // Steps of each mode a class measures before it decides.
    int32_t warmup = 3;
    // While the loser has fewer than `window` steps measured, the winner's
    // run is scaled by samples / window, but not below this (1: not at
    // all). It was 0.125, so that an estimate from few steps was measured
    // sooner; on a 256-step bench at 64 sequences that ran a verify step of
    // ~100 rows every ~3 plain steps until the draft side had 32 samples
    // and lost 4-5% (H100; docs/benchmarks.md, twenty-third session): the
    // warm-up's 3 steps per side already decide, and a wrong early call is
    // corrected at the next turn.
    double early_scale = 1.0;
  };
  SpecGate() : SpecGate(Options{}) {}
  explicit SpecGate(const Options& o) : opt_(o) {}

  // Whether the next step of `sequences` running sequences may draft.
  bool MayDraft(int64_t sequences);
  // A decode-only step of `sequences` sequences ran in `seconds`, emitting
  // `emitted` tokens; `drafted`: it carried draft rows.
  void Record(int64_t sequences, bool drafted, int64_t emitted, double seconds);

  // Decisions that held drafts back, and that let them run (for metrics).
  int64_t held() const { return held_; }
  int64_t allowed() const { return allowed_; }
  // A class's moving throughputs (tokens per second; 0 before a sample).
  double Throughput(int64_t sequences, bool drafted) const;

  static constexpr int kClasses = 10;  // 1, 2, 4, ..., 256 and above
  static int ClassOf(int64_t sequences);

 private:
  static constexpr int kMaxWindow = 64;
  struct Mode {
    std::array<double, kMaxWindow> tokens{}, seconds{};  // the last steps, a ring
    int32_t filled = 0, next = 0;
    int32_t samples = 0;  // steps recorded in all
    double Median() const;
  };
  // A mode's estimate against the other's median (0: none yet).
  struct Estimate {
    double tps = 0, step_seconds = 0;
    int32_t valid = 0;  // steps not left out
  };
  Estimate Estimated(const Mode& m, const Mode& other) const;
  struct Class {
    Mode plain, draft;
    double since_explore = 0;  // seconds the winner ran since the loser last did
    int last = -1;             // the mode of the class's last step (1: drafted)
  };
  Options opt_;
  std::array<Class, kClasses> classes_{};
  int64_t held_ = 0, allowed_ = 0;
};

}  // namespace minfer::runtime

#endif  // MINFER_ENGINE_RUNTIME_SPEC_GATE_H_
