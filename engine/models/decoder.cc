#include "engine/models/decoder.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/status.h"
#include "engine/models/blocks.h"

namespace minfer::models {

using graph::Weight;

uint64_t DecoderModel::weight_bytes() const {
  uint64_t total = 0;
  for (const auto& w : weights_) total += w->nbytes;
  return total;
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
  m->spec_ = spec;
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
  // Mixtral and other mixture-of-experts files share the `llama` name: said
  // first, as the reason, whatever else their keys hold, for every family
  // without experts.
  if (spec->read_hparams == nullptr && f.Has(A + "expert_count")) {
    ASSIGN_OR_RETURN(int64_t experts, f.GetInt(A + "expert_count"));
    if (experts > 0) {
      return BadKey(f, A + "expert_count", absl::StrCat(experts),
                    absl::StrCat("(mixture-of-experts files of '", arch,
                                 "' are not supported; the MoE architectures minfer runs: "
                                 "qwen3moe)"));
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
    if (scaling == "yarn" && scaled && spec->yarn) {
      // YaRN as llama.cpp runs it (graph.h's RoPE): interpolation by
      // 1/factor past the original context's wavelengths, extrapolation
      // below, cos and sin scaled by attn_factor (1 + 0.1 ln factor).
      hp.yarn.freq_scale = static_cast<float>(1.0 / factor);
      hp.yarn.ext_factor = 1.0f;
      hp.yarn.n_ctx_orig = static_cast<int32_t>(hp.context_length);
      const std::string orig_key = A + "rope.scaling.original_context_length";
      if (f.Has(orig_key)) {
        int64_t orig = 0;
        RETURN_IF_ERROR(get_int(orig_key, &orig));
        hp.yarn.n_ctx_orig = static_cast<int32_t>(orig);
      }
      for (auto [key, out] : {std::pair{"rope.scaling.attn_factor", &hp.yarn.attn_factor},
                              std::pair{"rope.scaling.yarn_beta_fast", &hp.yarn.beta_fast},
                              std::pair{"rope.scaling.yarn_beta_slow", &hp.yarn.beta_slow}}) {
        if (f.Has(A + key)) RETURN_IF_ERROR(get_positive_float(A + key, out));
      }
    } else if (scaling == "longrope" || (scaling != "none" && scaled)) {
      return BadKey(f, f.Has(type_key) ? type_key : factor_key,
                    f.Has(type_key) ? absl::StrCat("'", scaling, "'") : absl::StrCat(factor),
                    absl::StrCat("(RoPE scaling '", scaling, "' at factor ", factor == 0 ? 1 : factor,
                                 ") is not supported; minfer runs unscaled RoPE and Llama 3's "
                                 "rope_freqs.weight factors"));
    }
  }
  if (spec->read_hparams != nullptr) RETURN_IF_ERROR(spec->read_hparams(f, hp));
  const gguf::TensorInfo* embd = f.FindTensor("token_embd.weight");
  if (embd == nullptr || embd->dims.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", f.path(), "': missing 2-D tensor 'token_embd.weight'"));
  }
  hp.n_vocab = embd->dims[1];

  const int64_t E = hp.n_embd, V = hp.n_vocab, HD = hp.head_dim;
  WeightResolver r(f, *m, head_dim_from);
  ASSIGN_OR_RETURN(m->token_embd_, r.Get("token_embd.weight", {E, V}, false));
  ASSIGN_OR_RETURN(m->output_norm_, r.Get("output_norm.weight", {E}, false));
  ASSIGN_OR_RETURN(m->output_, r.Get("output.weight", {E, V}, true));
  if (m->output_ == nullptr) {
    hp.tied_embeddings = true;
    m->output_ = m->token_embd_;
  }
  // Llama 3.1+'s frequency factors; llama.cpp reads them for every
  // architecture, so a file of another family that carries them gets them.
  ASSIGN_OR_RETURN(m->rope_freqs_, r.Get("rope_freqs.weight", {HD / 2}, true,
                                         absl::StrCat("half the ", r.hd_why())));
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
    DecoderLayer L;
    RETURN_IF_ERROR(spec->resolve_layer(r, static_cast<int>(l), L));
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

std::string BatchGraphParams::ToString() const {
  return absl::StrCat("nt=", n_tokens, " n_out=", n_out, " tiles=", n_tiles, " table_rows=",
                      n_table_rows, " max_blocks=", max_blocks, " kv_block=", kv_block,
                      " cache_rows=", cache_rows, " kv=", graph::DTypeName(kv_type),
                      " fuse_qkv=", fuse_qkv, " fuse_ffn=", fuse_ffn, " fuse_residual=", fuse_residual, " gpu=", gpu,
                      " top_k=", top_k, " vocab_limit=", vocab_limit,
                      " decode_only=", decode_only);
}

absl::StatusOr<graph::Graph> BuildDecoderBatchGraph(const DecoderModel& model,
                                                  const BatchGraphParams& gp) {
  return model.spec().build_graph(model, gp);
}

int64_t DecoderModel::active_params_per_token() const {
  int64_t total = 0;
  for (const auto& w : weights_) {
    int64_t n = 1;
    for (int64_t d : w->dims) n *= d;
    if (w.get() == token_embd_ && !hp_.tied_embeddings) {
      n = w->ne0();  // one row is read
    } else if (w->dims.size() == 3 && hp_.n_expert > 0) {
      n = n / hp_.n_expert * hp_.n_expert_used;  // the experts a token uses
    }
    total += n;
  }
  return total;
}

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
  const ArchitectureSpec* spec = FindArchitecture(hp.arch);
  const uint64_t layers = spec != nullptr ? spec->activation_bound(hp, n_tokens)
                                          : DenseActivationBound(hp, n_tokens);
  return layers + logits + top + masks + tables + inputs;
}

}  // namespace minfer::models
