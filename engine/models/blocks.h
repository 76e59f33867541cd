// The building blocks the families' files (engine/models/<family>.cc) are
// made of: resolving a layer's tensors (attention, dense FFN, MoE FFN) and
// building its graph (inputs, attention, the FFNs, the output head). For use
// inside engine/models only; the rest of the tree sees decoder.h.
#ifndef MINFER_ENGINE_MODELS_BLOCKS_H_
#define MINFER_ENGINE_MODELS_BLOCKS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/gguf/gguf.h"
#include "engine/graph/graph.h"
#include "engine/models/decoder.h"

namespace minfer::models {

// Resolves tensors of a file being loaded into the model's weights, checking
// their shapes; errors are INVALID_ARGUMENT naming the tensor, its shape and
// where the expected one came from.
class WeightResolver {
 public:
  // head_dim_from: where the head dimension came from (for messages).
  WeightResolver(const gguf::GgufFile& file, DecoderModel& model, std::string head_dim_from);

  const gguf::GgufFile& file() const { return file_; }
  const DecoderHparams& hp() const { return model_.hp_; }
  const ArchitectureSpec& spec() const { return *model_.spec_; }

  // The tensor `name` of shape `dims`, or null when `optional` and absent.
  absl::StatusOr<const graph::Weight*> Get(const std::string& name, std::vector<int64_t> dims,
                                           bool optional, absl::string_view why = {});
  // OK when w is null or f32; else names the tensor and its type.
  absl::Status RequireF32(const graph::Weight* w) const;

  // Why the attention tensors have their widths (the keys behind them).
  const std::string& q_why() const { return q_why_; }
  const std::string& kv_why() const { return kv_why_; }
  const std::string& hd_why() const { return hd_why_; }

 private:
  const gguf::GgufFile& file_;
  DecoderModel& model_;
  std::string q_why_, kv_why_, hd_why_;
};

// attn_norm, attn_q/k/v (+ optional biases), attn_q_norm / attn_k_norm
// (required when the row says qk_norm), attn_output (+ optional bias),
// attn_sinks (optional, [n_head]).
absl::Status ResolveAttention(WeightResolver& r, int layer, DecoderLayer& L);
// ffn_norm, ffn_gate, ffn_up, ffn_down.
absl::Status ResolveDenseFfn(WeightResolver& r, int layer, DecoderLayer& L);
// The pre-FFN norm (`norm`: "ffn_norm", gpt-oss's "post_attention_norm"),
// the router ffn_gate_inp [n_embd, n_expert] (+ optional bias),
// ffn_gate_exps / ffn_up_exps [n_embd, n_ff_exp, n_expert], ffn_down_exps
// [n_ff_exp, n_embd, n_expert] (+ optional biases).
absl::Status ResolveMoeFfn(WeightResolver& r, int layer, DecoderLayer& L,
                           absl::string_view norm = "ffn_norm");

// The expert keys shared by MoE families: {arch}.expert_count (>= 1),
// expert_used_count (1..expert_count), expert_feed_forward_length (default
// feed_forward_length / expert_used_count, as llama.cpp), and
// expert_gating_func when present, which must name one of `gatings`
// (llama.cpp's numbering: 1 softmax, 2 sigmoid, 3 softmax over the chosen
// weights); expert_weights_scale (default none). Errors name the key.
absl::Status ReadMoeHparams(const gguf::GgufFile& file, DecoderHparams& hp,
                            std::vector<graph::MoeGating> gatings);

// Every batch graph's inputs (decoder.h's BatchGraphParams).
struct GraphInputs {
  graph::GraphIO io;
  graph::Shape kv_shape;  // one layer's cache region
  float attn_scale = 1.0f;
};
GraphInputs BuildInputs(graph::GraphBuilder& b, const DecoderHparams& hp,
                        const BatchGraphParams& gp);

// W_o · PagedAttn(q, K, V) (+ b_o) of one layer from its normed stream n:
// q/k/v as FusedQKV + QkvBiasRopeStore when gp.fuse_qkv (and the layer has
// no q/k norms and RoPE no YaRN), else the chain of matmuls, biases, q/k
// norms, RoPE and the store; the layer's sliding window (hp.IsSwaLayer)
// and sinks when it has them.
graph::NodeId AttentionBlock(graph::GraphBuilder& b, const DecoderModel& model,
                             const DecoderLayer& L, int layer, graph::NodeId n,
                             const GraphInputs& in, const BatchGraphParams& gp,
                             const std::string& prefix);

// W_down · SwiGLU(W_gate m, W_up m): FusedFFN at one token and, on a GPU, up
// to kFusedFfnMaxTokens (one launch for gate and up); the CPU keeps gate, up
// and SwiGLU apart at nt > 1, where its batched matmul is faster.
graph::NodeId DenseFfnBlock(graph::GraphBuilder& b, const DecoderModel& model,
                            const DecoderLayer& L, graph::NodeId m, const BatchGraphParams& gp,
                            const std::string& prefix);

// The mixture of experts: router logits (ffn_gate_inp · m, + bias), MoeRoute
// with the model's gating, MoeFFN with `act`.
graph::NodeId MoeFfnBlock(graph::GraphBuilder& b, const DecoderModel& model,
                          const DecoderLayer& L, graph::NodeId m, graph::MoeAct act,
                          const std::string& prefix);

// The output rows, the final norm, the head and TopK; finishes the graph.
absl::StatusOr<graph::Graph> FinishWithHead(graph::GraphBuilder& b, GraphInputs& in,
                                            const DecoderModel& model, graph::NodeId x,
                                            const BatchGraphParams& gp);

// A pre-norm decoder: per layer x += Attention(RmsNorm(x)), then x +=
// ffn(RmsNorm(x)), then the head. Checks gp first.
using FfnBlockFn = graph::NodeId (*)(graph::GraphBuilder& b, const DecoderModel& model,
                                     const DecoderLayer& L, graph::NodeId m,
                                     const BatchGraphParams& gp, const std::string& prefix);
absl::StatusOr<graph::Graph> BuildPreNormDecoder(const DecoderModel& model,
                                                 const BatchGraphParams& gp, FfnBlockFn ffn);

// The dense pre-norm families' layer (attention, then the dense FFN) and
// graph: what qwen2, qwen3 and llama share, their rows' functions.
absl::Status ResolveDenseLayer(WeightResolver& r, int layer, DecoderLayer& L);
absl::StatusOr<graph::Graph> BuildDenseDecoder(const DecoderModel& model,
                                               const BatchGraphParams& gp);

// Activation bounds (ArchitectureSpec::activation_bound) of a dense and of a
// mixture-of-experts layer stack at n_tokens tokens.
uint64_t DenseActivationBound(const DecoderHparams& hp, int64_t n_tokens);
uint64_t MoeActivationBound(const DecoderHparams& hp, int64_t n_tokens);

}  // namespace minfer::models

#endif  // MINFER_ENGINE_MODELS_BLOCKS_H_
