// The built-in knobs. Each entry is a switch some module actually reads;
// add a knob here in the same change that makes it do something.
#include "engine/base/knobs.h"

namespace minfer {

void RegisterBuiltinKnobs(KnobRegistry& r) {
  auto add = [&r](KnobSpec s) { (void)r.Register(std::move(s)); };
  add({"MINFER_THREADS", KnobType::kInt, "0", KnobScope::kGlobal, KnobEffect::kReload,
       "CPU worker threads for the CPU backend and model writing (0 = one per core)."});
  add({"MINFER_CACHE_TYPE", KnobType::kEnum, "auto", KnobScope::kPerModel, KnobEffect::kReload,
       "KV cache element type for new sessions: auto (f32 on the CPU; f16 on a GPU when "
       "n_layers x n_kv_embd >= 8192), f32, f16 or q8_0.",
       {"auto", "f32", "f16", "q8_0"}});
  add({"MINFER_NO_FUSE_QKV", KnobType::kBool, "0", KnobScope::kPerModel,
       KnobEffect::kGraphRebuild,
       "Disable the decode QKV fusion (FusedQKV + QkvBiasRopeStore): separate q/k/v "
       "matmuls, bias adds, RoPE and KV store."});
  add({"MINFER_NO_FUSE_FFN", KnobType::kBool, "0", KnobScope::kPerModel,
       KnobEffect::kGraphRebuild,
       "Disable the decode FFN fusion (FusedFFN): separate gate/up matmuls and SwiGLU."});
  add({"MINFER_PREFILL_CHUNK", KnobType::kInt, "512", KnobScope::kPerModel,
       KnobEffect::kGraphRebuild, "Prompt tokens evaluated per prefill step."});
}

}  // namespace minfer
