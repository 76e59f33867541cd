#include "daemon/serving/lifecycle.h"

#include "absl/strings/str_cat.h"

namespace minfer::daemon {

const char* SlotStateName(SlotState state) {
  switch (state) {
    case SlotState::kLoading:
      return "loading";
    case SlotState::kReady:
      return "ready";
    case SlotState::kSleeping:
      return "sleeping";
    case SlotState::kWaking:
      return "waking";
    case SlotState::kDraining:
      return "draining";
    case SlotState::kUnloading:
      return "unloading";
    case SlotState::kFailed:
      return "failed";
    case SlotState::kStopped:
      return "stopped";
  }
  return "unknown";
}

bool TransitionAllowed(SlotState from, SlotState to) {
  using S = SlotState;
  switch (from) {
    case S::kLoading:
      return to == S::kReady || to == S::kFailed || to == S::kUnloading;
    case S::kReady:
      return to == S::kSleeping || to == S::kDraining;
    case S::kSleeping:
      return to == S::kWaking || to == S::kDraining;
    case S::kWaking:
      // Back to sleeping when the wake was refused admission (the memory
      // went to another model): nothing was lost, a later request retries.
      return to == S::kReady || to == S::kSleeping || to == S::kFailed;
    case S::kDraining:
      return to == S::kUnloading;
    case S::kUnloading:
      return to == S::kStopped;
    case S::kFailed:
      return to == S::kStopped;
    case S::kStopped:
      return false;
  }
  return false;
}

bool AcceptsRequests(SlotState state) {
  return state == SlotState::kReady || state == SlotState::kSleeping ||
         state == SlotState::kWaking;
}

absl::Status Lifecycle::To(SlotState next) {
  if (!TransitionAllowed(state_, next)) {
    return absl::FailedPreconditionError(absl::StrCat("model '", model_, "' cannot go from ",
                                                      SlotStateName(state_), " to ",
                                                      SlotStateName(next)));
  }
  state_ = next;
  since_ = Clock::now();
  return absl::OkStatus();
}

}  // namespace minfer::daemon
