// Qwen2 / Qwen2.5 (`qwen2`): the dense pre-norm decoder of decoder.h with
// q/k/v biases, no q/k norms, head_dim = n_embd / n_head, NeoX RoPE (pairs
// i, i + head_dim / 2) at base 1e6 by default.
#include "engine/base/status.h"
#include "engine/models/architectures.h"
#include "engine/models/blocks.h"

namespace minfer::models {
namespace {

absl::Status ResolveLayer(WeightResolver& r, int layer, DecoderLayer& L) {
  RETURN_IF_ERROR(ResolveAttention(r, layer, L));
  return ResolveDenseFfn(r, layer, L);
}

absl::StatusOr<graph::Graph> Build(const DecoderModel& model, const BatchGraphParams& gp) {
  return BuildPreNormDecoder(model, gp, DenseFfnBlock);
}

}  // namespace

const ArchitectureSpec& Qwen2Architecture() {
  static const ArchitectureSpec spec = {
      .name = "qwen2",
      .rope_style = graph::RopeStyle::kNeoX,
      .default_rope_base = 1e6f,
      .resolve_layer = ResolveLayer,
      .build_graph = Build,
      .activation_bound = DenseActivationBound,
  };
  return spec;
}

}  // namespace minfer::models
