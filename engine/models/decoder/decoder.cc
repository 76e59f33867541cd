#include "engine/models/decoder/decoder.h"

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
using graph::RopeStyle;
using graph::Shape;
using graph::Weight;

uint64_t DecoderModel::weight_bytes() const {
  uint64_t total = 0;
  for (const auto& w : weights_) total += w->nbytes;
  return total;
}

absl::StatusOr<const Weight*> DecoderModel::Resolve(const gguf::GgufFile& f, const std::string& name,
                                                  std::vector<int64_t> dims, bool optional,
                                                  absl::string_view why) {
  const gguf::TensorInfo* t = f.FindTensor(name);
  if (t == nullptr) {
    if (optional) return nullptr;
    return absl::InvalidArgumentError(
        absl::StrCat("model '", f.path(), "': missing tensor '", name, "'"));
  }
  if (t->dims != dims) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", f.path(), "': tensor '", name, "' has shape [", absl::StrJoin(t->dims, ", "),
        "], expected [", absl::StrJoin(dims, ", "), "]", why.empty() ? "" : " (", why,
        why.empty() ? "" : ")"));
  }
  auto w = std::make_unique<Weight>();
  w->name = name;
  w->type = t->type;
  w->dims = t->dims;
  w->data = t->data;
  w->nbytes = t->nbytes;
  weights_.push_back(std::move(w));
  return weights_.back().get();
}

namespace {

// RoPE scaling types a GGUF file may name (llama.cpp's
// LLAMA_ROPE_SCALING_TYPES; llama.cpp refuses any other name at load).
constexpr absl::string_view kRopeScalingTypes[] = {"none", "linear", "yarn", "longrope"};

absl::Status BadKey(const gguf::GgufFile& f, absl::string_view key, absl::string_view value,
                    absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat("model '", f.path(), "': key '", key, "' = ", value, " ", problem));
}

}  // namespace

absl::StatusOr<std::unique_ptr<DecoderModel>> DecoderModel::FromGguf(const gguf::GgufFile& f) {
  absl::StatusOr<std::unique_ptr<DecoderModel>> m = ReadGguf(f);
  if (m.ok()) return m;
  // Everything that fails here is the file's fault: a key it lacks (the
  // reader's NOT_FOUND) or a feature minfer does not run is a model the
  // caller can not load, which the admin API documents as INVALID_ARGUMENT.
  return absl::InvalidArgumentError(m.status().message());
}

absl::StatusOr<std::unique_ptr<DecoderModel>> DecoderModel::ReadGguf(
    const gguf::GgufFile& f) {
  ASSIGN_OR_RETURN(std::string arch, f.GetString("general.architecture"));
  const ArchitectureSpec* spec = FindArchitecture(arch);
  if (spec == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("model '", f.path(), "': architecture '", arch,
                                                   "' is not supported (supported: ",
                                                   SupportedArchitectures(), ")"));
  }
  std::unique_ptr<DecoderModel> m(new DecoderModel);
  DecoderHparams& hp = m->hp_;
  hp.arch = arch;
  hp.rope_style = spec->rope_style;
  // Defaults where a file leaves the key out.
  hp.rope_base = spec->default_rope_base;
  hp.rms_eps = spec->default_rms_eps;
  // Keys are named after the architecture: "qwen3.block_count", ...
  const std::string A = arch + ".";
  auto get_int = [&](const std::string& key, int64_t* out) -> absl::Status {
    ASSIGN_OR_RETURN(*out, f.GetInt(key));
    if (*out <= 0) {
      return BadKey(f, key, absl::StrCat(*out), "must be positive");
    }
    return absl::OkStatus();
  };
  // A float key the math divides by or raises to a power: a NaN, an
  // infinity or a value <= 0 would give every logit as NaN or garbage
  // (checked as the float the kernels use: 1e300 is finite as a double).
  auto get_positive_float = [&](const std::string& key, float* out) -> absl::Status {
    ASSIGN_OR_RETURN(double v, f.GetFloat(key));
    const float fv = static_cast<float>(v);
    if (!std::isfinite(fv) || !(fv > 0)) {
      return BadKey(f, key, absl::StrCat(v), "must be a finite positive number");
    }
    *out = fv;
    return absl::OkStatus();
  };
  // Mixtral and other mixture-of-experts files share the `llama` name: said first, as
  // the reason, whatever else their keys hold.
  if (f.Has(A + "expert_count")) {
    ASSIGN_OR_RETURN(int64_t experts, f.GetInt(A + "expert_count"));
    if (experts > 0) {
      return BadKey(f, A + "expert_count", absl::StrCat(experts),
                    "(mixture-of-experts models are not supported)");
    }
  }
  RETURN_IF_ERROR(get_int(A + "embedding_length", &hp.n_embd));
  RETURN_IF_ERROR(get_int(A + "feed_forward_length", &hp.n_ff));
  RETURN_IF_ERROR(get_int(A + "block_count", &hp.n_layer));
  RETURN_IF_ERROR(get_int(A + "attention.head_count", &hp.n_head));
  RETURN_IF_ERROR(get_int(A + "context_length", &hp.context_length));
  hp.n_head_kv = hp.n_head;
  if (f.Has(A + "attention.head_count_kv")) {
    RETURN_IF_ERROR(get_int(A + "attention.head_count_kv", &hp.n_head_kv));
  }
  if (hp.n_head % hp.n_head_kv != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", f.path(), "': key '", A, "attention.head_count' = ", hp.n_head,
                     " is not a multiple of '", A, "attention.head_count_kv' = ", hp.n_head_kv));
  }
  // head_dim: attention.key_length when the file has it (Qwen3 always),
  // else n_embd / n_head. Values as wide as keys is what the attention
  // kernels implement, so attention.value_length, when present, must equal
  // the head dimension however it was found.
  std::string head_dim_from;  // where head_dim came from, for messages
  if (f.Has(A + "attention.key_length")) {
    RETURN_IF_ERROR(get_int(A + "attention.key_length", &hp.head_dim));
    head_dim_from = absl::StrCat("'", A, "attention.key_length'");
  } else if (hp.n_embd % hp.n_head != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", f.path(), "': key '", A, "embedding_length' = ", hp.n_embd,
        " is not a multiple of '", A, "attention.head_count' = ", hp.n_head, " and the file has no ",
        A, "attention.key_length"));
  } else {
    hp.head_dim = hp.n_embd / hp.n_head;
    head_dim_from = absl::StrCat("'", A, "embedding_length' ", hp.n_embd, " / '", A,
                                 "attention.head_count' ", hp.n_head);
  }
  if (f.Has(A + "attention.value_length")) {
    int64_t value_length = 0;
    RETURN_IF_ERROR(get_int(A + "attention.value_length", &value_length));
    if (value_length != hp.head_dim) {
      return BadKey(f, A + "attention.value_length", absl::StrCat(value_length),
                    absl::StrCat("differs from the key head dimension ", hp.head_dim, " (",
                                 head_dim_from, "); minfer runs only equal key and value heads"));
    }
  }
  if (hp.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("model '", f.path(), "': head dimension ",
                                                   hp.head_dim, " (", head_dim_from,
                                                   ") is odd; RoPE turns pairs of dimensions"));
  }
  if (f.Has(A + "rope.freq_base")) {
    RETURN_IF_ERROR(get_positive_float(A + "rope.freq_base", &hp.rope_base));
  }
  if (f.Has(A + "attention.layer_norm_rms_epsilon")) {
    RETURN_IF_ERROR(get_positive_float(A + "attention.layer_norm_rms_epsilon", &hp.rms_eps));
  }
  // RoPE scaling, read as llama.cpp reads it: the type defaults to "linear"
  // when the file gives a factor (rope.scaling.factor, or the older
  // rope.scale_linear), and a factor of 0 means none. The graph turns pair i
  // by pos * base^(-2i/d) (times rope_freqs.weight's factor, Llama 3's
  // scaling baked into the file); a scheme that changes the angles (linear
  // and YaRN at a factor other than 1, LongRoPE) would silently give other
  // numbers, and an unknown name is a file llama.cpp refuses too.
  {
    std::string factor_key;
    for (const char* k : {"rope.scaling.factor", "rope.scale_linear"}) {
      if (f.Has(A + k)) {
        factor_key = A + k;
        break;
      }
    }
    double factor = 0;
    if (!factor_key.empty()) {
      ASSIGN_OR_RETURN(factor, f.GetFloat(factor_key));
      if (!std::isfinite(factor) || factor < 0) {
        return BadKey(f, factor_key, absl::StrCat(factor), "must be a finite positive number");
      }
    }
    const std::string type_key = A + "rope.scaling.type";
    std::string scaling = "linear";
    if (f.Has(type_key)) {
      ASSIGN_OR_RETURN(scaling, f.GetString(type_key));
      if (std::find(std::begin(kRopeScalingTypes), std::end(kRopeScalingTypes), scaling) ==
          std::end(kRopeScalingTypes)) {
        return BadKey(f, type_key, absl::StrCat("'", scaling, "'"),
                      absl::StrCat("is not a RoPE scaling type (known: ",
                                   absl::StrJoin(kRopeScalingTypes, ", "), ")"));
      }
    }
    const bool scaled = factor != 0 && factor != 1;
    if (scaling == "longrope" || (scaling != "none" && scaled)) {
      return BadKey(f, f.Has(type_key) ? type_key : factor_key,
                    f.Has(type_key) ? absl::StrCat("'", scaling, "'") : absl::StrCat(factor),
                    absl::StrCat("(RoPE scaling '", scaling, "' at factor ", factor == 0 ? 1 : factor,
                                 ") is not supported; minfer runs unscaled RoPE and Llama 3's "
                                 "rope_freqs.weight factors"));
    }
  }
  const gguf::TensorInfo* embd = f.FindTensor("token_embd.weight");
  if (embd == nullptr || embd->dims.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", f.path(), "': missing 2-D tensor 'token_embd.weight'"));
  }
  hp.n_vocab = embd->dims[1];

  const int64_t E = hp.n_embd, Q = hp.n_embd_q(), KV = hp.n_embd_kv(), F = hp.n_ff, V = hp.n_vocab;
  const int64_t HD = hp.head_dim;
  // Why the attention tensors have the widths they must: a file whose
  // head-count or head-dimension keys disagree with its tensors shows here,
  // and the message says which keys the expectation came from.
  const std::string q_why = absl::StrCat("'", A, "attention.head_count' ", hp.n_head,
                                         " x head dimension ", HD, " from ", head_dim_from);
  const std::string kv_why = absl::StrCat("'", A, "attention.head_count_kv' ", hp.n_head_kv,
                                          " x head dimension ", HD, " from ", head_dim_from);
  const std::string hd_why = absl::StrCat("head dimension from ", head_dim_from);
  ASSIGN_OR_RETURN(m->token_embd_, m->Resolve(f, "token_embd.weight", {E, V}, false));
  ASSIGN_OR_RETURN(m->output_norm_, m->Resolve(f, "output_norm.weight", {E}, false));
  ASSIGN_OR_RETURN(m->output_, m->Resolve(f, "output.weight", {E, V}, true));
  if (m->output_ == nullptr) {
    hp.tied_embeddings = true;
    m->output_ = m->token_embd_;
  }
  // Llama 3.1+'s frequency factors; llama.cpp reads them for every
  // architecture, so a file of another family that carries them gets them.
  ASSIGN_OR_RETURN(m->rope_freqs_, m->Resolve(f, "rope_freqs.weight", {HD / 2}, true,
                                                absl::StrCat("half the ", hd_why)));
  if (m->rope_freqs_ != nullptr) {
    if (m->rope_freqs_->type != GgmlType::kF32) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", f.path(), "': tensor 'rope_freqs.weight' must be f32, is ",
                       GgmlTypeName(m->rope_freqs_->type)));
    }
    const float* factors = reinterpret_cast<const float*>(m->rope_freqs_->data);
    for (int64_t i = 0; i < HD / 2; ++i) {
      if (!(factors[i] > 0) || !std::isfinite(factors[i])) {
        return absl::InvalidArgumentError(absl::StrCat("model '", f.path(),
                                                       "': rope_freqs.weight[", i, "] = ",
                                                       factors[i], " is not a positive factor"));
      }
    }
  }
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    const std::string p = absl::StrCat("blk.", l, ".");
    DecoderLayer L;
    ASSIGN_OR_RETURN(L.attn_norm, m->Resolve(f, p + "attn_norm.weight", {E}, false));
    ASSIGN_OR_RETURN(L.wq, m->Resolve(f, p + "attn_q.weight", {E, Q}, false, q_why));
    ASSIGN_OR_RETURN(L.wk, m->Resolve(f, p + "attn_k.weight", {E, KV}, false, kv_why));
    ASSIGN_OR_RETURN(L.wv, m->Resolve(f, p + "attn_v.weight", {E, KV}, false, kv_why));
    ASSIGN_OR_RETURN(L.bq, m->Resolve(f, p + "attn_q.bias", {Q}, true, q_why));
    ASSIGN_OR_RETURN(L.bk, m->Resolve(f, p + "attn_k.bias", {KV}, true, kv_why));
    ASSIGN_OR_RETURN(L.bv, m->Resolve(f, p + "attn_v.bias", {KV}, true, kv_why));
    // Qwen3's per-head q/k norms are part of the architecture: required.
    ASSIGN_OR_RETURN(L.q_norm, m->Resolve(f, p + "attn_q_norm.weight", {HD}, !spec->qk_norm, hd_why));
    ASSIGN_OR_RETURN(L.k_norm, m->Resolve(f, p + "attn_k_norm.weight", {HD}, !spec->qk_norm, hd_why));
    if ((L.q_norm == nullptr) != (L.k_norm == nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model '", f.path(), "': layer ", l, " has one of attn_q_norm / attn_k_norm, not both"));
    }
    ASSIGN_OR_RETURN(L.wo, m->Resolve(f, p + "attn_output.weight", {Q, E}, false, q_why));
    ASSIGN_OR_RETURN(L.ffn_norm, m->Resolve(f, p + "ffn_norm.weight", {E}, false));
    ASSIGN_OR_RETURN(L.w_gate, m->Resolve(f, p + "ffn_gate.weight", {E, F}, false));
    ASSIGN_OR_RETURN(L.w_up, m->Resolve(f, p + "ffn_up.weight", {E, F}, false));
    ASSIGN_OR_RETURN(L.w_down, m->Resolve(f, p + "ffn_down.weight", {F, E}, false));
    for (const Weight* w : {L.attn_norm, L.ffn_norm, L.bq, L.bk, L.bv, L.q_norm, L.k_norm}) {
      if (w != nullptr && w->type != GgmlType::kF32) {
        return absl::InvalidArgumentError(absl::StrCat("model '", f.path(), "': tensor '", w->name,
                                                       "' must be f32, is ", GgmlTypeName(w->type)));
      }
    }
    m->layers_.push_back(L);
  }
  if (m->output_norm_->type != GgmlType::kF32) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", f.path(), "': tensor 'output_norm.weight' must be f32"));
  }
  // The graph ropes every dimension of a head. Checked after the tensors:
  // when the head-dimension keys disagree with the tensors, that is the
  // file's real inconsistency (reported above with the keys it came from),
  // not a partial rotary embedding.
  if (f.Has(A + "rope.dimension_count")) {
    int64_t n_rot = 0;
    RETURN_IF_ERROR(get_int(A + "rope.dimension_count", &n_rot));
    if (n_rot > HD || n_rot % 2 != 0) {
      return BadKey(f, A + "rope.dimension_count", absl::StrCat(n_rot),
                    absl::StrCat("is inconsistent with the head dimension ", HD, " (",
                                 head_dim_from, ", which the attention tensors confirm): RoPE "
                                 "turns an even number of dimensions, at most a head's"));
    }
    if (n_rot != HD) {
      return BadKey(f, A + "rope.dimension_count", absl::StrCat(n_rot),
                    absl::StrCat("turns only part of the head dimension ", HD, " (", head_dim_from,
                                 "); partial rotary embedding is not supported"));
    }
  }
  return m;
}

namespace {

struct QkvNodes {
  NodeId q;      // roped q, [head_dim, n_head, nt]
  NodeId store;  // the layer's KV store (its cache loads depend on it)
};

// One layer's q, k and v from the normed stream n: with `fused`, one
// FusedQKV (planar q | k | v; one GEMM launch on a GPU) and one epilogue for
// the biases, RoPE and the KV store; otherwise the chain of matmuls, biases,
// per-head q/k norms (Qwen3), RoPE and the store, the same values. The q/k-norm
// layers always take the chain: the fused epilogue has no norm between the
// bias and RoPE. kv_rows: the cache rows the tokens' K/V go to.
QkvNodes BuildQkv(GraphBuilder& b, const DecoderModel& model, const DecoderLayer& L, int layer,
                  NodeId n, NodeId pos, NodeId kv_rows, int64_t nt, bool fused,
                  const std::string& p) {
  const DecoderHparams& hp = model.hparams();
  const int64_t hd = hp.head_dim;
  const int nh = static_cast<int>(hp.n_head), nkv = static_cast<int>(hp.n_head_kv);
  if (fused && L.q_norm == nullptr) {
    NodeId qkv = b.FusedQKV(n, L.wq, L.wk, L.wv, p + "qkv");
    NodeId q = b.QkvBiasRopeStore({qkv}, L.bq, L.bk, L.bv, pos, nh, nkv, static_cast<int>(hd),
                                  hp.rope_style, hp.rope_base, layer,
                                  p + "qkv_bias_rope_store", kv_rows, model.rope_freqs());
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
             model.rope_freqs());
  k = b.RoPE(k, pos, hp.rope_style, hp.rope_base, static_cast<int>(hd), p + "k_rope",
             model.rope_freqs());
  NodeId store = b.KvcacheStore(k, v, kv_rows, layer, p + "kv_store");
  return {q, store};
}

}  // namespace

std::string BatchGraphParams::ToString() const {
  return absl::StrCat("nt=", n_tokens, " n_out=", n_out, " tiles=", n_tiles, " table_rows=",
                      n_table_rows, " max_blocks=", max_blocks, " kv_block=", kv_block,
                      " cache_rows=", cache_rows, " kv=", graph::DTypeName(kv_type),
                      " fuse_qkv=", fuse_qkv, " fuse_ffn=", fuse_ffn, " gpu=", gpu,
                      " top_k=", top_k, " vocab_limit=", vocab_limit,
                      " decode_only=", decode_only);
}

absl::StatusOr<graph::Graph> BuildDecoderBatchGraph(const DecoderModel& model,
                                                  const BatchGraphParams& gp) {
  const DecoderHparams& hp = model.hparams();
  const int64_t nt = gp.n_tokens, hd = hp.head_dim;
  const int nh = static_cast<int>(hp.n_head), nkv = static_cast<int>(hp.n_head_kv);
  if (nt <= 0 || gp.n_out <= 0 || gp.n_out > nt || gp.n_tiles <= 0 || gp.n_table_rows <= 0 ||
      gp.max_blocks <= 0 || gp.kv_block <= 0 || gp.cache_rows <= 0 ||
      gp.cache_rows % gp.kv_block != 0 || (gp.decode_only && gp.n_tiles != nt)) {
    return absl::InvalidArgumentError(absl::StrCat("decoder batch graph: bad params ", gp.ToString()));
  }
  GraphBuilder b;
  graph::GraphIO io;
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
  const NodeId pos = io.positions;
  const Shape kv_shape(hp.n_embd_kv(), gp.cache_rows);
  const float attn_scale = 1.0f / std::sqrt(static_cast<float>(hd));

  NodeId x = b.GetRows(model.token_embd(), io.tokens, "embd");
  for (int l = 0; l < static_cast<int>(hp.n_layer); ++l) {
    const DecoderLayer& L = model.layers()[l];
    const std::string p = absl::StrCat("blk.", l, ".");
    NodeId n = b.RmsNorm(x, L.attn_norm, hp.rms_eps, p + "attn_norm");
    const auto [q, store] = BuildQkv(b, model, L, l, n, pos, io.kv_rows, nt, gp.fuse_qkv, p);
    NodeId kc = b.KvcacheLoad(store, l, KvKind::kK, kv_shape, gp.kv_type, p + "k_cache");
    NodeId vc = b.KvcacheLoad(store, l, KvKind::kV, kv_shape, gp.kv_type, p + "v_cache");
    NodeId a = b.PagedAttn(q, kc, vc, pos, io.attn_tiles, io.block_tables, gp.kv_block, nh, nkv,
                           static_cast<int>(hd), attn_scale, l, p + "attn", gp.decode_only);
    x = b.Add(x, b.MatMul(a, L.wo, p + "attn_out"), p + "attn_residual");
    NodeId m = b.RmsNorm(x, L.ffn_norm, hp.rms_eps, p + "ffn_norm");
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
    x = b.Add(x, b.MatMul(s, L.w_down, p + "down"), p + "ffn_residual");
  }
  x = b.GetRows(x, io.out_rows, "out_select");
  x = b.RmsNorm(x, model.output_norm(), hp.rms_eps, "output_norm");
  io.logits = b.MatMul(x, model.output(), "logits");
  io.top = b.TopK(io.logits, io.top_mode, gp.top_k, gp.vocab_limit, "top", io.top_mask);
  return b.Finish(io, static_cast<int>(hp.n_layer));
}

namespace {

// The activations of one graph of n_tokens tokens (its residual stream,
// q/k/v, attention output, FFN, one row of logits), as the planner lays
// them out: BatchScratchBound's part for the layers.
uint64_t GraphScratchBound(const DecoderHparams& hp, int64_t n_tokens) {
  const uint64_t t = static_cast<uint64_t>(std::max<int64_t>(n_tokens, 1));
  // Activations of the widest of the stream and q / the attention output
  // (Qwen3's q is wider than its stream).
  const uint64_t wide = static_cast<uint64_t>(std::max(hp.n_embd, hp.n_embd_q()));
  const uint64_t per_token = 6 * wide + 4 * hp.n_embd_kv() + 3 * hp.n_ff;
  return 4 * t * per_token + 4 * static_cast<uint64_t>(hp.n_vocab) + 2 * t * hp.n_ff;
}

}  // namespace

uint64_t BatchScratchBound(const DecoderHparams& hp, int64_t n_tokens, int64_t n_rows,
                           int64_t max_blocks) {
  const uint64_t t = static_cast<uint64_t>(std::max<int64_t>(n_tokens, 1));
  const uint64_t r = static_cast<uint64_t>(std::clamp<int64_t>(n_rows, 1, n_tokens));
  // Rows are rounded up to a power of two (the runner's row buckets).
  uint64_t rows = 1;
  while (rows < r) rows <<= 1;
  rows = std::min(rows, t);
  const uint64_t logits = 4 * static_cast<uint64_t>(hp.n_vocab) * rows;
  const uint64_t top = 4 * (2 + 2 * 1024) * rows;  // TopK rows, at its largest k
  const uint64_t masks = 4 * static_cast<uint64_t>(graph::TopKMaskWords(hp.n_vocab)) * rows;
  const uint64_t tables = 4 * (t + 1) * static_cast<uint64_t>(std::max<int64_t>(max_blocks, 1));
  const uint64_t inputs = 4 * (4 * t) + 16 * (t + 1 + t / 64) + 8 * rows;
  return GraphScratchBound(hp, n_tokens) + logits + top + masks + tables + inputs;
}

}  // namespace minfer::models
