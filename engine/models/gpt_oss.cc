// OpenAI gpt-oss (`gpt-oss`: gpt-oss-20b, gpt-oss-120b). A pre-norm decoder
// whose attention has q/k/v and output biases, a learned sink logit per
// query head (attn_sinks: joins the softmax's normalizer without a value),
// a sliding window of attention.sliding_window positions on alternate
// layers (attention.sliding_window_pattern, default 2: the even layers;
// the odd ones attend to everything) and NeoX RoPE with YaRN scaling
// (rope.scaling.type "yarn", factor 32 over an original 4,096 positions in
// the release); head_dim from attention.key_length (64, where n_embd /
// n_head would give 45). Every FFN is a mixture of experts: the router
// (ffn_gate_inp with a bias) keeps the expert_used_count largest logits
// and weights them by a softmax over those alone; each expert is gate/up/
// down with biases and the clamped SwiGLU x sigmoid(1.702 x) (y + 1), x =
// min(gate, 7), y = clamp(up, -7, 7); experts ship as MXFP4. The norm
// before the FFN is named post_attention_norm. Facts from llama.cpp's
// loader and graph for LLM_ARCH_OPENAI_MOE and OpenAI's reference model.
#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/models/architectures.h"
#include "engine/models/blocks.h"

namespace minfer::models {
namespace {

absl::Status ReadHparams(const gguf::GgufFile& f, DecoderHparams& hp) {
  RETURN_IF_ERROR(ReadMoeHparams(f, hp, {graph::MoeGating::kSoftmaxWeight}));
  hp.moe_norm = false;
  const std::string A = hp.arch + ".";
  ASSIGN_OR_RETURN(hp.n_swa, f.GetInt(A + "attention.sliding_window"));
  if (hp.n_swa <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("model '", f.path(), "': key '", A,
                                                   "attention.sliding_window' = ", hp.n_swa,
                                                   " must be positive"));
  }
  hp.swa_period = 2;
  if (f.Has(A + "attention.sliding_window_pattern")) {
    ASSIGN_OR_RETURN(hp.swa_period, f.GetInt(A + "attention.sliding_window_pattern"));
    if (hp.swa_period < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", f.path(), "': key '", A, "attention.sliding_window_pattern' = ",
                       hp.swa_period, " must be positive"));
    }
  }
  return absl::OkStatus();
}

absl::Status ResolveLayer(WeightResolver& r, int layer, DecoderLayer& L) {
  RETURN_IF_ERROR(ResolveAttention(r, layer, L));
  const std::string p = absl::StrCat("blk.", layer, ".");
  // The architecture's sinks and biases are required.
  for (const auto& [w, name] : {std::pair{L.attn_sinks, "attn_sinks.weight"},
                                std::pair{L.bq, "attn_q.bias"}, std::pair{L.bo, "attn_output.bias"}}) {
    if (w == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", r.file().path(), "': missing tensor '", p, name, "'"));
    }
  }
  return ResolveMoeFfn(r, layer, L, "post_attention_norm");
}

graph::NodeId Ffn(graph::GraphBuilder& b, const DecoderModel& model, const DecoderLayer& L,
                  graph::NodeId m, const BatchGraphParams&, const std::string& prefix) {
  return MoeFfnBlock(b, model, L, m, graph::MoeAct::kSwigluOai, prefix);
}

absl::StatusOr<graph::Graph> Build(const DecoderModel& model, const BatchGraphParams& gp) {
  return BuildPreNormDecoder(model, gp, Ffn);
}

}  // namespace

const ArchitectureSpec& GptOssArchitecture() {
  static const ArchitectureSpec spec = {
      .name = "gpt-oss",
      .rope_style = graph::RopeStyle::kNeoX,
      .default_rope_base = 10000.0f,
      .default_rms_eps = 1e-5f,
      .yarn = true,
      .read_hparams = ReadHparams,
      .resolve_layer = ResolveLayer,
      .build_graph = Build,
      .activation_bound = MoeActivationBound,
  };
  return spec;
}

}  // namespace minfer::models
