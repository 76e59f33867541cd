#include "engine/models/blocks.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/status.h"

namespace minfer::models {

using graph::DType;
using graph::GraphBuilder;
using graph::KvKind;
using graph::NodeId;
using graph::Shape;
using graph::Weight;

WeightResolver::WeightResolver(const gguf::GgufFile& file, DecoderModel& model,
                               std::string head_dim_from)
    : file_(file), model_(model) {
  const DecoderHparams& hp = model.hp_;
  const std::string A = hp.arch + ".";
  q_why_ = absl::StrCat("'", A, "attention.head_count' ", hp.n_head, " x head dimension ",
                        hp.head_dim, " from ", head_dim_from);
  kv_why_ = absl::StrCat("'", A, "attention.head_count_kv' ", hp.n_head_kv, " x head dimension ",
                         hp.head_dim, " from ", head_dim_from);
  hd_why_ = absl::StrCat("head dimension from ", head_dim_from);
}

absl::StatusOr<const Weight*> WeightResolver::Get(const std::string& name,
                                                  std::vector<int64_t> dims, bool optional,
                                                  absl::string_view why) {
  const gguf::TensorInfo* t = file_.FindTensor(name);
  if (t == nullptr) {
    if (optional) return nullptr;
    return absl::InvalidArgumentError(
        absl::StrCat("model '", file_.path(), "': missing tensor '", name, "'"));
  }
  if (t->dims != dims) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", file_.path(), "': tensor '", name, "' has shape [", absl::StrJoin(t->dims, ", "),
        "], expected [", absl::StrJoin(dims, ", "), "]", why.empty() ? "" : " (", why,
        why.empty() ? "" : ")"));
  }
  auto w = std::make_unique<Weight>();
  w->name = name;
  w->type = t->type;
  w->dims = t->dims;
  w->data = t->data;
  w->nbytes = t->nbytes;
  model_.weights_.push_back(std::move(w));
  return model_.weights_.back().get();
}

absl::Status WeightResolver::RequireF32(const Weight* w) const {
  if (w != nullptr && w->type != GgmlType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat("model '", file_.path(), "': tensor '", w->name,
                                                   "' must be f32, is ", GgmlTypeName(w->type)));
  }
  return absl::OkStatus();
}

absl::Status ResolveAttention(WeightResolver& r, int layer, DecoderLayer& L) {
  const DecoderHparams& hp = r.hp();
  const int64_t E = hp.n_embd, Q = hp.n_embd_q(), KV = hp.n_embd_kv(), HD = hp.head_dim;
  const std::string p = absl::StrCat("blk.", layer, ".");
  ASSIGN_OR_RETURN(L.attn_norm, r.Get(p + "attn_norm.weight", {E}, false));
  ASSIGN_OR_RETURN(L.wq, r.Get(p + "attn_q.weight", {E, Q}, false, r.q_why()));
  ASSIGN_OR_RETURN(L.wk, r.Get(p + "attn_k.weight", {E, KV}, false, r.kv_why()));
  ASSIGN_OR_RETURN(L.wv, r.Get(p + "attn_v.weight", {E, KV}, false, r.kv_why()));
  // Biases are read when a file has them, for every family, as llama.cpp does.
  ASSIGN_OR_RETURN(L.bq, r.Get(p + "attn_q.bias", {Q}, true, r.q_why()));
  ASSIGN_OR_RETURN(L.bk, r.Get(p + "attn_k.bias", {KV}, true, r.kv_why()));
  ASSIGN_OR_RETURN(L.bv, r.Get(p + "attn_v.bias", {KV}, true, r.kv_why()));
  // Per-head q/k norms: required by the families whose row says so.
  const bool need_norms = r.spec().qk_norm;
  ASSIGN_OR_RETURN(L.q_norm, r.Get(p + "attn_q_norm.weight", {HD}, !need_norms, r.hd_why()));
  ASSIGN_OR_RETURN(L.k_norm, r.Get(p + "attn_k_norm.weight", {HD}, !need_norms, r.hd_why()));
  if ((L.q_norm == nullptr) != (L.k_norm == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat("model '", r.file().path(), "': layer ", layer,
                                                   " has one of attn_q_norm / attn_k_norm, not both"));
  }
  ASSIGN_OR_RETURN(L.wo, r.Get(p + "attn_output.weight", {Q, E}, false, r.q_why()));
  ASSIGN_OR_RETURN(L.bo, r.Get(p + "attn_output.bias", {E}, true));
  ASSIGN_OR_RETURN(L.attn_sinks,
                   r.Get(p + "attn_sinks.weight", {hp.n_head}, true,
                         absl::StrCat("'", hp.arch, ".attention.head_count' ", hp.n_head)));
  for (const Weight* w : {L.attn_norm, L.bq, L.bk, L.bv, L.q_norm, L.k_norm, L.bo, L.attn_sinks}) {
    RETURN_IF_ERROR(r.RequireF32(w));
  }
  return absl::OkStatus();
}

absl::Status ResolveDenseFfn(WeightResolver& r, int layer, DecoderLayer& L) {
  const DecoderHparams& hp = r.hp();
  const int64_t E = hp.n_embd, F = hp.n_ff;
  const std::string p = absl::StrCat("blk.", layer, ".");
  ASSIGN_OR_RETURN(L.ffn_norm, r.Get(p + "ffn_norm.weight", {E}, false));
  ASSIGN_OR_RETURN(L.w_gate, r.Get(p + "ffn_gate.weight", {E, F}, false));
  ASSIGN_OR_RETURN(L.w_up, r.Get(p + "ffn_up.weight", {E, F}, false));
  ASSIGN_OR_RETURN(L.w_down, r.Get(p + "ffn_down.weight", {F, E}, false));
  return r.RequireF32(L.ffn_norm);
}

absl::Status ResolveMoeFfn(WeightResolver& r, int layer, DecoderLayer& L,
                           absl::string_view norm) {
  const DecoderHparams& hp = r.hp();
  const int64_t E = hp.n_embd, F = hp.n_ff_exp, X = hp.n_expert;
  const std::string p = absl::StrCat("blk.", layer, ".");
  const std::string A = hp.arch + ".";
  const std::string x_why = absl::StrCat("'", A, "expert_count' ", X);
  const std::string f_why =
      absl::StrCat("expert width ", F, " and '", A, "expert_count' ", X);
  ASSIGN_OR_RETURN(L.ffn_norm, r.Get(absl::StrCat(p, norm, ".weight"), {E}, false));
  ASSIGN_OR_RETURN(L.ffn_gate_inp, r.Get(p + "ffn_gate_inp.weight", {E, X}, false, x_why));
  ASSIGN_OR_RETURN(L.ffn_gate_inp_b, r.Get(p + "ffn_gate_inp.bias", {X}, true, x_why));
  ASSIGN_OR_RETURN(L.ffn_gate_exps, r.Get(p + "ffn_gate_exps.weight", {E, F, X}, false, f_why));
  ASSIGN_OR_RETURN(L.ffn_up_exps, r.Get(p + "ffn_up_exps.weight", {E, F, X}, false, f_why));
  ASSIGN_OR_RETURN(L.ffn_down_exps, r.Get(p + "ffn_down_exps.weight", {F, E, X}, false, f_why));
  ASSIGN_OR_RETURN(L.ffn_gate_exps_b, r.Get(p + "ffn_gate_exps.bias", {F, X}, true, f_why));
  ASSIGN_OR_RETURN(L.ffn_up_exps_b, r.Get(p + "ffn_up_exps.bias", {F, X}, true, f_why));
  ASSIGN_OR_RETURN(L.ffn_down_exps_b, r.Get(p + "ffn_down_exps.bias", {E, X}, true, x_why));
  for (const Weight* w : {L.ffn_norm, L.ffn_gate_inp_b, L.ffn_gate_exps_b, L.ffn_up_exps_b,
                          L.ffn_down_exps_b}) {
    RETURN_IF_ERROR(r.RequireF32(w));
  }
  return absl::OkStatus();
}

absl::Status ReadMoeHparams(const gguf::GgufFile& f, DecoderHparams& hp,
                            std::vector<graph::MoeGating> gatings) {
  const std::string A = hp.arch + ".";
  auto bad = [&](const std::string& key, const std::string& value, const std::string& problem) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", f.path(), "': key '", key, "' = ", value, " ", problem));
  };
  ASSIGN_OR_RETURN(hp.n_expert, f.GetInt(A + "expert_count"));
  if (hp.n_expert < 1 || hp.n_expert > 4096) {
    return bad(A + "expert_count", absl::StrCat(hp.n_expert), "must be in [1, 4096]");
  }
  ASSIGN_OR_RETURN(hp.n_expert_used, f.GetInt(A + "expert_used_count"));
  if (hp.n_expert_used < 1 || hp.n_expert_used > hp.n_expert) {
    return bad(A + "expert_used_count", absl::StrCat(hp.n_expert_used),
               absl::StrCat("must be in [1, '", A, "expert_count' ", hp.n_expert, "]"));
  }
  if (f.Has(A + "expert_feed_forward_length")) {
    ASSIGN_OR_RETURN(hp.n_ff_exp, f.GetInt(A + "expert_feed_forward_length"));
    if (hp.n_ff_exp <= 0) {
      return bad(A + "expert_feed_forward_length", absl::StrCat(hp.n_ff_exp), "must be positive");
    }
  } else {
    hp.n_ff_exp = hp.n_ff / hp.n_expert_used;
  }
  if (f.Has(A + "expert_gating_func")) {
    ASSIGN_OR_RETURN(int64_t g, f.GetInt(A + "expert_gating_func"));
    // llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE numbering.
    const char* kNames[] = {"none", "softmax", "sigmoid", "softmax_weight"};
    std::vector<std::string> known;
    bool ok = false;
    for (graph::MoeGating m : gatings) {
      const int64_t code = m == graph::MoeGating::kSoftmax ? 1 : 3;
      known.push_back(absl::StrCat(code, " (", kNames[code], ")"));
      if (g == code) {
        hp.moe_gating = m;
        ok = true;
      }
    }
    if (!ok) {
      return bad(A + "expert_gating_func", absl::StrCat(g),
                 absl::StrCat("is not a gating function this architecture runs (",
                              absl::StrJoin(known, ", "), ")"));
    }
  } else {
    hp.moe_gating = gatings.front();
  }
  if (f.Has(A + "expert_weights_scale")) {
    ASSIGN_OR_RETURN(double s, f.GetFloat(A + "expert_weights_scale"));
    if (!std::isfinite(s) || s < 0) {
      return bad(A + "expert_weights_scale", absl::StrCat(s), "must be finite and >= 0");
    }
    hp.moe_scale = static_cast<float>(s);
  }
  return absl::OkStatus();
}

GraphInputs BuildInputs(GraphBuilder& b, const DecoderHparams& hp, const BatchGraphParams& gp) {
  const int64_t nt = gp.n_tokens;
  GraphInputs in;
  graph::GraphIO& io = in.io;
  io.tokens = b.Input(DType::kI32, Shape(nt), "tokens");
  io.positions = b.Input(DType::kI32, Shape(nt), "positions");
  io.kv_rows = b.Input(DType::kI32, Shape(nt), "kv_rows");
  io.attn_tiles = b.Input(DType::kI32, Shape(4, gp.n_tiles), "attn_tiles");
  io.block_tables = b.Input(DType::kI32, Shape(gp.max_blocks, gp.n_table_rows), "block_tables");
  io.out_rows = b.Input(DType::kI32, Shape(gp.n_out), "out_rows");
  io.top_mode = b.Input(DType::kI32, Shape(gp.n_out), "top_mode");
  // Allowed-token masks of constrained rows. Every batch graph has the
  // input rather than a masked variant of each graph: a step without masked
  // rows writes none of it and its TopK reads none of it (no row names a
  // column), so it costs unconstrained steps only these bytes of arena
  // (1/32 of the logits'), while a variant would double the graphs to build
  // and, on a GPU, to capture whenever constrained sequences come and go.
  io.top_mask = b.Input(DType::kI32, Shape(graph::TopKMaskWords(hp.n_vocab), gp.n_out),
                        "top_mask");
  in.kv_shape = Shape(hp.n_embd_kv(), gp.cache_rows);
  in.attn_scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
  return in;
}

namespace {

struct QkvNodes {
  NodeId q;      // roped q, [head_dim, n_head, nt]
  NodeId store;  // the layer's KV store (its cache loads depend on it)
};

// One layer's q, k and v from the normed stream n: with `fused`, one
// FusedQKV (planar q | k | v; one GEMM launch on a GPU) and one epilogue for
// the biases, the per-head q/k norms (Qwen3), RoPE and the KV store;
// otherwise the chain of matmuls, biases, norms, RoPE and the store, the same
// values (YaRN's angles included: gpt-oss). kv_rows: the cache rows the
// tokens' K/V go to.
QkvNodes BuildQkv(GraphBuilder& b, const DecoderModel& model, const DecoderLayer& L, int layer,
                  NodeId n, NodeId pos, NodeId kv_rows, int64_t nt, bool fused,
                  const std::string& p) {
  const DecoderHparams& hp = model.hparams();
  const int64_t hd = hp.head_dim;
  const int nh = static_cast<int>(hp.n_head), nkv = static_cast<int>(hp.n_head_kv);
  if (fused) {
    NodeId qkv = b.FusedQKV(n, L.wq, L.wk, L.wv, p + "qkv");
    NodeId q = b.QkvBiasRopeStore({qkv}, L.bq, L.bk, L.bv, pos, nh, nkv, static_cast<int>(hd),
                                  hp.rope_style, hp.rope_base, layer,
                                  p + "qkv_bias_rope_store", kv_rows, model.rope_freqs(),
                                  L.q_norm, L.k_norm, hp.rms_eps, hp.yarn);
    return {q, q};
  }
  NodeId q = b.MatMul(n, L.wq, p + "q");
  NodeId k = b.MatMul(n, L.wk, p + "k");
  NodeId v = b.MatMul(n, L.wv, p + "v");
  if (L.bq) q = b.Add(q, L.bq, p + "q_bias");
  if (L.bk) k = b.Add(k, L.bk, p + "k_bias");
  if (L.bv) v = b.Add(v, L.bv, p + "v_bias");
  q = b.Reshape(q, Shape(hd, nh, nt), p + "q_heads");
  k = b.Reshape(k, Shape(hd, nkv, nt), p + "k_heads");
  if (L.q_norm != nullptr) {
    q = b.QkNorm(q, L.q_norm, hp.rms_eps, p + "q_norm");
    k = b.QkNorm(k, L.k_norm, hp.rms_eps, p + "k_norm");
  }
  q = b.RoPE(q, pos, hp.rope_style, hp.rope_base, static_cast<int>(hd), p + "q_rope",
             model.rope_freqs(), hp.yarn);
  k = b.RoPE(k, pos, hp.rope_style, hp.rope_base, static_cast<int>(hd), p + "k_rope",
             model.rope_freqs(), hp.yarn);
  NodeId store = b.KvcacheStore(k, v, kv_rows, layer, p + "kv_store");
  return {q, store};
}

}  // namespace

NodeId AttentionBlock(GraphBuilder& b, const DecoderModel& model, const DecoderLayer& L,
                      int layer, NodeId n, const GraphInputs& in, const BatchGraphParams& gp,
                      const std::string& p) {
  const DecoderHparams& hp = model.hparams();
  const int nh = static_cast<int>(hp.n_head), nkv = static_cast<int>(hp.n_head_kv);
  const auto [q, store] = BuildQkv(b, model, L, layer, n, in.io.positions, in.io.kv_rows,
                                   gp.n_tokens, gp.fuse_qkv, p);
  NodeId kc = b.KvcacheLoad(store, layer, KvKind::kK, in.kv_shape, gp.kv_type, p + "k_cache");
  NodeId vc = b.KvcacheLoad(store, layer, KvKind::kV, in.kv_shape, gp.kv_type, p + "v_cache");
  const int window = hp.IsSwaLayer(layer) ? static_cast<int>(hp.n_swa) : 0;
  NodeId a = b.PagedAttn(q, kc, vc, in.io.positions, in.io.attn_tiles, in.io.block_tables,
                         gp.kv_block, nh, nkv, static_cast<int>(hp.head_dim), in.attn_scale,
                         layer, p + "attn", gp.decode_only, window, L.attn_sinks);
  NodeId out = b.MatMul(a, L.wo, p + "attn_out");
  if (L.bo != nullptr) out = b.Add(out, L.bo, p + "attn_out_bias");
  return out;
}

NodeId DenseFfnBlock(GraphBuilder& b, const DecoderModel&, const DecoderLayer& L, NodeId m,
                     const BatchGraphParams& gp, const std::string& p) {
  const int64_t nt = gp.n_tokens;
  NodeId s;
  // On a GPU a decode batch fuses gate/up too: one launch over both
  // weights' rows, its SwiGLU writing the down projection's activations.
  if (gp.fuse_ffn && (nt == 1 || (gp.gpu && nt <= kFusedFfnMaxTokens))) {
    s = b.FusedFFN(m, L.w_gate, L.w_up, p + "ffn_gate_up");
  } else {
    NodeId g = b.MatMul(m, L.w_gate, p + "gate");
    NodeId u = b.MatMul(m, L.w_up, p + "up");
    s = b.SwiGLU(g, u, p + "swiglu");
  }
  return b.MatMul(s, L.w_down, p + "down");
}

NodeId MoeFfnBlock(GraphBuilder& b, const DecoderModel& model, const DecoderLayer& L, NodeId m,
                   graph::MoeAct act, const std::string& p) {
  const DecoderHparams& hp = model.hparams();
  NodeId logits = b.MatMul(m, L.ffn_gate_inp, p + "ffn_moe_logits");
  // The router bias (gpt-oss) rides on the route: one launch fewer a layer.
  NodeId route = b.MoeRoute(logits, static_cast<int>(hp.n_expert_used), hp.moe_gating,
                            hp.moe_norm, hp.moe_scale, p + "ffn_moe_route", L.ffn_gate_inp_b);
  return b.MoeFFN(m, route, L.ffn_gate_exps, L.ffn_up_exps, L.ffn_down_exps, L.ffn_gate_exps_b,
                  L.ffn_up_exps_b, L.ffn_down_exps_b, act, p + "ffn_moe");
}

absl::StatusOr<graph::Graph> FinishWithHead(GraphBuilder& b, GraphInputs& in,
                                            const DecoderModel& model, NodeId x,
                                            const BatchGraphParams& gp) {
  const DecoderHparams& hp = model.hparams();
  x = b.GetRows(x, in.io.out_rows, "out_select");
  x = b.RmsNorm(x, model.output_norm(), hp.rms_eps, "output_norm");
  in.io.logits = b.MatMul(x, model.output(), "logits");
  in.io.top = b.TopK(in.io.logits, in.io.top_mode, gp.top_k, gp.vocab_limit, "top",
                     in.io.top_mask);
  return b.Finish(in.io, static_cast<int>(hp.n_layer));
}

namespace {

absl::Status CheckParams(const BatchGraphParams& gp) {
  if (gp.n_tokens <= 0 || gp.n_out <= 0 || gp.n_out > gp.n_tokens || gp.n_tiles <= 0 ||
      gp.n_table_rows <= 0 || gp.max_blocks <= 0 || gp.kv_block <= 0 || gp.cache_rows <= 0 ||
      gp.cache_rows % gp.kv_block != 0 || (gp.decode_only && gp.n_tiles != gp.n_tokens)) {
    return absl::InvalidArgumentError(
        absl::StrCat("decoder batch graph: bad params ", gp.ToString()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<graph::Graph> BuildPreNormDecoder(const DecoderModel& model,
                                                 const BatchGraphParams& gp, FfnBlockFn ffn) {
  RETURN_IF_ERROR(CheckParams(gp));
  const DecoderHparams& hp = model.hparams();
  GraphBuilder b;
  GraphInputs in = BuildInputs(b, hp, gp);
  NodeId x = b.GetRows(model.token_embd(), in.io.tokens, "embd");
  for (int l = 0; l < static_cast<int>(hp.n_layer); ++l) {
    const DecoderLayer& L = model.layers()[l];
    const std::string p = absl::StrCat("blk.", l, ".");
    NodeId n = b.RmsNorm(x, L.attn_norm, hp.rms_eps, p + "attn_norm");
    NodeId attn = AttentionBlock(b, model, L, l, n, in, gp, p);
    // A tensor-parallel rank's attention and FFN outputs are its partial
    // sums (its heads, its FFN slice): the ranks add them up.
    if (hp.tp_size > 1) attn = b.AllReduce(attn, p + "attn_allreduce");
    // The residual adds ride on the attention output's and the FFN's
    // last matmul where they can (AddInto): one launch fewer each on a GPU.
    auto residual = [&](NodeId y, const std::string& name) {
      return gp.fuse_residual ? b.AddInto(x, y, name) : b.Add(x, y, name);
    };
    x = residual(attn, p + "attn_residual");
    NodeId m = b.RmsNorm(x, L.ffn_norm, hp.rms_eps, p + "ffn_norm");
    NodeId ffn_out = ffn(b, model, L, m, gp, p);
    if (hp.tp_size > 1) ffn_out = b.AllReduce(ffn_out, p + "ffn_allreduce");
    x = residual(ffn_out, p + "ffn_residual");
  }
  return FinishWithHead(b, in, model, x, gp);
}

absl::Status ResolveDenseLayer(WeightResolver& r, int layer, DecoderLayer& L) {
  RETURN_IF_ERROR(ResolveAttention(r, layer, L));
  return ResolveDenseFfn(r, layer, L);
}

absl::StatusOr<graph::Graph> BuildDenseDecoder(const DecoderModel& model,
                                               const BatchGraphParams& gp) {
  return BuildPreNormDecoder(model, gp, DenseFfnBlock);
}

namespace {

// Activations of the attention half of a layer stack per token, as the
// planner lays them out: the stream, q / the attention output (Qwen3's q is
// wider than its stream), k and v.
uint64_t AttentionPerToken(const DecoderHparams& hp) {
  const uint64_t wide = static_cast<uint64_t>(std::max(hp.n_embd, hp.n_embd_q()));
  return 6 * wide + 4 * static_cast<uint64_t>(hp.n_embd_kv());
}

}  // namespace

uint64_t DenseActivationBound(const DecoderHparams& hp, int64_t n_tokens) {
  const uint64_t t = static_cast<uint64_t>(std::max<int64_t>(n_tokens, 1));
  const uint64_t per_token = AttentionPerToken(hp) + 3 * static_cast<uint64_t>(hp.n_ff);
  return 4 * t * per_token + 4 * static_cast<uint64_t>(hp.n_vocab) + 2 * t * hp.n_ff;
}

uint64_t MoeActivationBound(const DecoderHparams& hp, int64_t n_tokens) {
  const uint64_t t = static_cast<uint64_t>(std::max<int64_t>(n_tokens, 1));
  const uint64_t k = static_cast<uint64_t>(hp.n_expert_used);
  const uint64_t E = static_cast<uint64_t>(hp.n_embd), F = static_cast<uint64_t>(hp.n_ff_exp);
  // The graph's nodes: the router's logits and route, the MoE output.
  const uint64_t graph_per_token =
      AttentionPerToken(hp) + static_cast<uint64_t>(hp.n_expert) + 2 * k + 2 * E;
  // The CPU kernel's scratch per assignment (k per token): gate, up and
  // down outputs, the gathered activations as floats and as 8-bit blocks.
  const uint64_t kernel_per_token = k * (4 * (2 * F + E) + 4 * (E + F) + 2 * (E + F));
  return 4 * t * graph_per_token + t * kernel_per_token + 4 * static_cast<uint64_t>(hp.n_vocab);
}

}  // namespace minfer::models
