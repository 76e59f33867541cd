// Qwen3 mixture of experts (`qwen3moe`: Qwen3-30B-A3B, 235B-A22B): Qwen3's
// attention (per-head q/k norms, head_dim from attention.key_length, NeoX
// RoPE at base 1e6) with every layer's FFN a mixture of experts: a router
// (ffn_gate_inp, f32 in llama.cpp's files) scores n_expert experts by a
// softmax over all of them, the top expert_used_count (8 of 128 in the
// 30B) are kept, their weights renormalized to sum 1 (Qwen3's
// norm_topk_prob, which llama.cpp applies to every qwen3moe file), and the
// token's FFN output is the weighted sum of those experts' SwiGLU FFNs
// (expert_feed_forward_length wide: 768 in the 30B).
#include "engine/base/status.h"
#include "engine/models/architectures.h"
#include "engine/models/blocks.h"

namespace minfer::models {
namespace {

absl::Status ReadHparams(const gguf::GgufFile& f, DecoderHparams& hp) {
  RETURN_IF_ERROR(ReadMoeHparams(f, hp, {graph::MoeGating::kSoftmax}));
  hp.moe_norm = true;
  return absl::OkStatus();
}

absl::Status ResolveLayer(WeightResolver& r, int layer, DecoderLayer& L) {
  RETURN_IF_ERROR(ResolveAttention(r, layer, L));
  return ResolveMoeFfn(r, layer, L);
}

graph::NodeId Ffn(graph::GraphBuilder& b, const DecoderModel& model, const DecoderLayer& L,
                  graph::NodeId m, const BatchGraphParams&, const std::string& prefix) {
  return MoeFfnBlock(b, model, L, m, graph::MoeAct::kSilu, prefix);
}

absl::StatusOr<graph::Graph> Build(const DecoderModel& model, const BatchGraphParams& gp) {
  return BuildPreNormDecoder(model, gp, Ffn);
}

}  // namespace

const ArchitectureSpec& Qwen3MoeArchitecture() {
  static const ArchitectureSpec spec = {
      .name = "qwen3moe",
      .rope_style = graph::RopeStyle::kNeoX,
      .qk_norm = true,
      .default_rope_base = 1e6f,
      .read_hparams = ReadHparams,
      .resolve_layer = ResolveLayer,
      .build_graph = Build,
      .activation_bound = MoeActivationBound,
  };
  return spec;
}

}  // namespace minfer::models
