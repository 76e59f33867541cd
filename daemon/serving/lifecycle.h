// The lifecycle of a model's slot: its states and the transitions allowed
// between them, checked, so a state the code did not plan for cannot
// happen silently (sleep/wake added two states and seven transitions).
//
//   loading --> ready <--> sleeping --> waking --> ready
//      |          |           |           |
//      |          v           v           v
//      |       draining <-----+        failed (wake failed), or back to
//      |          |                    sleeping (wake refused admission)
//      v          v
//   failed     unloading --> stopped
//      |                        ^
//      +------------------------+
//
// loading: admission and the load run on the slot's thread; a load stopped
//   midway ends in unloading once the load returns.
// ready: serving. sleeping: the model's memory freed (sleep level 1 keeps
//   the weights in host memory, level 2 drops them); requests are accepted
//   and wake it. waking: the memory re-admitted and reloaded while the
//   requests that woke it wait (bounded by their deadlines).
// draining: unloading, new requests refused, the running and queued ones
//   finish until the drain deadline. unloading: freeing. stopped: gone.
// failed: the load (or a wake) failed; kept with its reason until unloaded.
//
// Not thread-safe: the slot guards it with its own mutex.
#ifndef MINFER_DAEMON_SERVING_LIFECYCLE_H_
#define MINFER_DAEMON_SERVING_LIFECYCLE_H_

#include <chrono>
#include <string>

#include "absl/status/status.h"

namespace minfer::daemon {

enum class SlotState {
  kLoading,
  kReady,
  kSleeping,
  kWaking,
  kDraining,
  kUnloading,
  kFailed,
  kStopped,
};
inline constexpr SlotState kAllSlotStates[] = {
    SlotState::kLoading,  SlotState::kReady,     SlotState::kSleeping, SlotState::kWaking,
    SlotState::kDraining, SlotState::kUnloading, SlotState::kFailed,   SlotState::kStopped};

// "loading", "ready", "sleeping", "waking", "draining", "unloading",
// "failed", "stopped".
const char* SlotStateName(SlotState state);
// Whether the diagram above has an edge from -> to.
bool TransitionAllowed(SlotState from, SlotState to);
// States in which a request may be submitted: ready, and sleeping (it
// wakes the model) or waking.
bool AcceptsRequests(SlotState state);

class Lifecycle {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Lifecycle(std::string model) : model_(std::move(model)), since_(Clock::now()) {}

  SlotState state() const { return state_; }
  // When the current state was entered.
  Clock::time_point since() const { return since_; }
  // Moves to `next`, or FAILED_PRECONDITION naming the model and both
  // states when the diagram has no such edge (the state is unchanged).
  absl::Status To(SlotState next);

 private:
  std::string model_;
  SlotState state_ = SlotState::kLoading;
  Clock::time_point since_;
};

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_SERVING_LIFECYCLE_H_
