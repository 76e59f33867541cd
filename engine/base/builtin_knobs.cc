// The built-in knobs. Each entry is a switch some module actually reads;
// add a knob here in the same change that makes it do something.
#include "engine/base/knobs.h"

namespace minfer {

void RegisterBuiltinKnobs(KnobRegistry& r) {
  auto add = [&r](KnobSpec s) { (void)r.Register(std::move(s)); };
  add({"MINFER_THREADS", KnobType::kInt, "0", KnobScope::kGlobal, KnobEffect::kReload,
       "CPU worker threads for the CPU backend and model writing (0 = one per core)."});
}

}  // namespace minfer
