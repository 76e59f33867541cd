// The model interface the runtime, the backends and the daemon see: a
// decoder's hyperparameters and resolved weights (DecoderModel), the batched
// forward graph over a paged KV pool (BuildDecoderBatchGraph) and its
// activation bound (BatchScratchBound). What differs between architectures
// lives in one file per family (engine/models/<family>.cc: its tensors, its
// graph on the shared blocks of blocks.h, its bound), reached through the
// registry row of architectures.h; nothing here or outside engine/models
// names a family.
//
// Every family so far is a pre-norm decoder with GQA attention and RoPE:
//   h   = x + W_o · Attn(RoPE(N_q(W_q·n + b_q)), RoPE(N_k(W_k·n + b_k)), W_v·n + b_v),
//         n = RmsNorm(x) * g_attn
//   x'  = h + FFN(m),  m = RmsNorm(h) * g_ffn
// logits = W_out · (RmsNorm(x_L) * g_out)   (W_out = token_embd when tied)
// FFN is dense (W_down · (silu(W_gate·m) * (W_up·m))) or a mixture of
// experts (graph.h's MoeRoute + MoeFFN: a router picks k of n_expert
// expert FFNs per token and sums their outputs, weighted).
#ifndef MINFER_ENGINE_MODELS_DECODER_H_
#define MINFER_ENGINE_MODELS_DECODER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/gguf/gguf.h"
#include "engine/graph/graph.h"
#include "engine/graph/weight.h"
#include "engine/models/architectures.h"

namespace minfer::models {

struct DecoderHparams {
  int64_t n_embd = 0;
  int64_t n_ff = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t n_vocab = 0;
  int64_t context_length = 0;
  float rope_base = 1e6f;
  float rms_eps = 1e-6f;
  graph::RopeStyle rope_style = graph::RopeStyle::kNeoX;
  bool tied_embeddings = false;
  std::string arch = "qwen2";  // general.architecture
  // Mixture of experts (n_expert 0: every layer's FFN is dense).
  int64_t n_expert = 0;       // {arch}.expert_count
  int64_t n_expert_used = 0;  // {arch}.expert_used_count: experts per token
  int64_t n_ff_exp = 0;       // one expert's FFN width
  graph::MoeGating moe_gating = graph::MoeGating::kSoftmax;
  bool moe_norm = false;      // chosen weights renormalized to sum 1
  float moe_scale = 0.0f;     // chosen weights scaled (0: not)
  // Sliding-window attention (n_swa 0: none): layer l attends to the last
  // n_swa positions when l % swa_period < swa_period - 1 (llama.cpp's
  // pattern; period 2: the even layers), to all of them otherwise. The KV
  // pool keeps every position of every layer (the window is a mask).
  int64_t n_swa = 0;
  int64_t swa_period = 0;
  // YaRN RoPE scaling (freq_scale 1: none), from rope.scaling.* keys.
  graph::RopeYarn yarn;
  // Tensor parallelism (DecoderModel::Shard): this model is rank tp_rank of
  // tp_size, its n_head, n_head_kv and n_ff that rank's share, and its
  // graph sums the attention and FFN outputs over the ranks (AllReduce).
  int32_t tp_size = 1;
  int32_t tp_rank = 0;

  int64_t n_embd_kv() const { return n_head_kv * head_dim; }
  int64_t n_embd_q() const { return n_head * head_dim; }  // q and attention output
  bool moe() const { return n_expert > 0; }
  bool IsSwaLayer(int64_t l) const {
    return n_swa > 0 && swa_period > 0 && l % swa_period < swa_period - 1;
  }
};


struct DecoderLayer {
  const graph::Weight* attn_norm = nullptr;
  const graph::Weight* wq = nullptr;
  const graph::Weight* wk = nullptr;
  const graph::Weight* wv = nullptr;
  const graph::Weight* bq = nullptr;  // biases are optional
  const graph::Weight* bk = nullptr;
  const graph::Weight* bv = nullptr;
  const graph::Weight* q_norm = nullptr;  // qwen3: per-head RMSNorm gains [head_dim]
  const graph::Weight* k_norm = nullptr;
  const graph::Weight* wo = nullptr;
  const graph::Weight* bo = nullptr;          // attn_output.bias (optional)
  const graph::Weight* attn_sinks = nullptr;  // [n_head] sink logits (optional)
  // The norm before the FFN (ffn_norm; gpt-oss names it post_attention_norm).
  const graph::Weight* ffn_norm = nullptr;
  const graph::Weight* w_gate = nullptr;
  const graph::Weight* w_up = nullptr;
  const graph::Weight* w_down = nullptr;
  // Mixture of experts: the router [n_embd, n_expert] (and its bias), the
  // experts' 3-D weights (graph.h, MoeFFN) and their optional biases.
  const graph::Weight* ffn_gate_inp = nullptr;
  const graph::Weight* ffn_gate_inp_b = nullptr;
  const graph::Weight* ffn_gate_exps = nullptr;
  const graph::Weight* ffn_up_exps = nullptr;
  const graph::Weight* ffn_down_exps = nullptr;
  const graph::Weight* ffn_gate_exps_b = nullptr;
  const graph::Weight* ffn_up_exps_b = nullptr;
  const graph::Weight* ffn_down_exps_b = nullptr;
};

class WeightResolver;

// Hyperparameters and resolved weights of one decoder GGUF file. Holds
// pointers into the file's mapping: the GgufFile must outlive it.
class DecoderModel {
 public:
  // Reads hyperparameters and resolves every weight by name once, checking
  // its shape. Every error is INVALID_ARGUMENT (the file is corrupt, crafted
  // or of a kind minfer does not run) naming the GGUF key and its value or
  // the tensor and its shape: a missing key; a count that is not positive;
  // rope.freq_base or the RMS epsilon not finite and positive; an unknown
  // rope.scaling.type, or a known one that changes the angles (linear or
  // YaRN at a factor other than 1, LongRoPE); attention.value_length other
  // than the key head dimension; rope.dimension_count other than the head
  // dimension (the head dimension is attention.key_length, else
  // embedding_length / head_count, and must agree with the tensors first);
  // an architecture without a registry row (the message names the
  // supported ones); a mixture-of-experts file of a dense family, or one
  // whose expert keys and tensors disagree (expert_used_count above
  // expert_count, expert tensors of another count, an unknown gating
  // function), naming the key.
  static absl::StatusOr<std::unique_ptr<DecoderModel>> FromGguf(const gguf::GgufFile& file);

  const DecoderHparams& hparams() const { return hp_; }
  // The family's registry row.
  const ArchitectureSpec& spec() const { return *spec_; }
  const graph::Weight* token_embd() const { return token_embd_; }
  const graph::Weight* output_norm() const { return output_norm_; }
  const graph::Weight* output() const { return output_; }  // token_embd when tied
  // RoPE frequency factors (rope_freqs.weight, f32 [head_dim/2]), or null.
  const graph::Weight* rope_freqs() const { return rope_freqs_; }
  const std::vector<DecoderLayer>& layers() const { return layers_; }
  // Every weight (for registration on device backends and accounting).
  const std::vector<std::unique_ptr<graph::Weight>>& weights() const { return weights_; }
  uint64_t weight_bytes() const;
  // Parameters one token reads: every weight but the experts a token does
  // not use (n_expert_used of n_expert) and the embedding rows of other
  // tokens. Equals the parameter count of a dense model less its
  // embedding table's other rows.
  int64_t active_params_per_token() const;

  // Rank `rank` of `size` of a tensor-parallel split (Megatron's):
  // attention heads and KV heads split in contiguous ranges (q/k/v rows and
  // their biases, the sinks), the attention output's columns with them;
  // the FFN's gate/up rows and the down projection's columns split in
  // ranges of n_ff / size; norms, embedding and head replicated; the
  // output biases kept by rank 0 only (they are added once, before the
  // sum). Row ranges are views of this model's weights (which must outlive
  // the shard); column ranges are copies the shard owns. INVALID_ARGUMENT
  // naming the figure when the model cannot be split that way: heads, KV
  // heads or the FFN width not divisible by size, a split column range
  // that is not a whole number of its weight type's blocks, a mixture of
  // experts; or rank out of range.
  absl::StatusOr<std::unique_ptr<DecoderModel>> Shard(int rank, int size) const;

 private:
  friend class WeightResolver;
  DecoderModel() = default;
  // FromGguf's checks, with the reader's own codes (NOT_FOUND for a missing key).
  static absl::StatusOr<std::unique_ptr<DecoderModel>> ReadGguf(
      const gguf::GgufFile& file);
  // The tensor `name` of shape `dims`; `why` (if any) says where the
  // expected shape came from, for the error.
  absl::StatusOr<const graph::Weight*> Resolve(const gguf::GgufFile& f, const std::string& name,
                                               std::vector<int64_t> dims, bool optional,
                                               absl::string_view why = {});

  DecoderHparams hp_;
  const ArchitectureSpec* spec_ = nullptr;
  std::vector<std::unique_ptr<graph::Weight>> weights_;
  // Bytes of weights a shard copied (column ranges); empty otherwise.
  std::vector<std::vector<uint8_t>> owned_;
  const graph::Weight* token_embd_ = nullptr;
  const graph::Weight* output_norm_ = nullptr;
  const graph::Weight* output_ = nullptr;
  const graph::Weight* rope_freqs_ = nullptr;
  std::vector<DecoderLayer> layers_;
};

// The parameters of a batched graph over a paged KV pool (graph.h's paged
// Attn): n_tokens tokens of any number of sequences, each with its own
// positions, cache rows and block table; logits for n_out selected rows and
// their TopK candidates. Equal params give identical graphs.
// The most tokens a GPU batch graph's FusedFFN covers (its backend keeps
// gate and up in a scratch of 2 n_ff kFusedFfnMaxTokens floats): a decode
// batch up to the Hopper GEMM's 256 tokens, so gate and up share one
// launch and its SwiGLU can sum their split-k partials (MINFER_GEMM_FUSE).
inline constexpr int64_t kFusedFfnMaxTokens = 256;

struct BatchGraphParams {
  int64_t n_tokens = 1;
  int64_t n_out = 1;
  int64_t n_tiles = 1;       // attention tile entries (graph.h)
  int64_t n_table_rows = 1;  // block-table rows
  int32_t max_blocks = 1;    // block-table entries per sequence
  int32_t kv_block = 16;     // rows per KV block
  int64_t cache_rows = 0;    // rows of the pool's cache (blocks x kv_block)
  graph::DType kv_type = graph::DType::kF32;
  bool fuse_qkv = true;      // n_tokens == 1: MINFER_NO_FUSE_QKV; else MINFER_NO_FUSE_QKV_PREFILL
  bool fuse_ffn = true;      // n_tokens == 1, or up to kFusedFfnMaxTokens on a GPU
  bool fuse_residual = true;  // residual adds on their matmul (AddInto): MINFER_NO_FUSE_RESIDUAL
  bool gpu = false;
  int32_t top_k = 1;         // TopK candidates per row
  int32_t vocab_limit = 1;   // ids at or above are never candidates
  // Every item of the step is one decode token: n_tiles == n_tokens, one
  // token per tile, and attention needs no multi-token path.
  bool decode_only = false;

  bool operator==(const BatchGraphParams& o) const = default;
  std::string ToString() const;
};

// The model's one forward graph (a Session is a one-sequence batch), built
// by its family (ArchitectureSpec::build_graph on blocks.h): K/V stored at
// the tokens' kv_rows and attention reading each token's own sequence
// through its block table; logits for the out_rows and their TopK.
absl::StatusOr<graph::Graph> BuildDecoderBatchGraph(const DecoderModel& model,
                                                  const BatchGraphParams& params);

// Activation memory, for admission before a model is loaded (the family's
// ArchitectureSpec::activation_bound for the layers): an upper bound
// on the bytes of a batched graph of n_tokens tokens producing n_rows rows of
// logits (rounded up to the runner's power-of-two row buckets) with
// max_blocks block-table entries per sequence: the graph's activations
// plus logits, TopK candidates and masks, block tables and the per-token inputs.
uint64_t BatchScratchBound(const DecoderHparams& hp, int64_t n_tokens, int64_t n_rows,
                           int64_t max_blocks);

}  // namespace minfer::models

#endif  // MINFER_ENGINE_MODELS_DECODER_H_
