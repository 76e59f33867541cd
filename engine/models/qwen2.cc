// Qwen2 / Qwen2.5 (`qwen2`): the dense pre-norm decoder of decoder.h with
// q/k/v biases, no q/k norms, head_dim = n_embd / n_head, NeoX RoPE (pairs
// i, i + head_dim / 2) at base 1e6 by default.
#include "engine/models/architectures.h"
#include "engine/models/blocks.h"

namespace minfer::models {

const ArchitectureSpec& Qwen2Architecture() {
  static const ArchitectureSpec spec = {
      .name = "qwen2",
      .rope_style = graph::RopeStyle::kNeoX,
      .default_rope_base = 1e6f,
      .resolve_layer = ResolveDenseLayer,
      .build_graph = BuildDenseDecoder,
      .activation_bound = DenseActivationBound,
  };
  return spec;
}

}  // namespace minfer::models
