// Dense Qwen3 (`qwen3`): the pre-norm decoder of decoder.h without biases,
// with a per-head RMSNorm of q and k before RoPE (attn_q_norm /
// attn_k_norm, [head_dim] gains each), head_dim from attention.key_length
// (so q and the attention output are n_head x head_dim wide, which need not
// be n_embd: Qwen3-0.6B has 16 x 128 over 1,024), NeoX RoPE at base 1e6.
#include "engine/models/architectures.h"
#include "engine/models/blocks.h"

namespace minfer::models {

const ArchitectureSpec& Qwen3Architecture() {
  static const ArchitectureSpec spec = {
      .name = "qwen3",
      .rope_style = graph::RopeStyle::kNeoX,
      .qk_norm = true,
      .default_rope_base = 1e6f,
      .resolve_layer = ResolveDenseLayer,
      .build_graph = BuildDenseDecoder,
      .activation_bound = DenseActivationBound,
  };
  return spec;
}

}  // namespace minfer::models
