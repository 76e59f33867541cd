#include "tests/engine/models/reference_forward.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/quant/quantize.h"

namespace minfer::testing {
namespace {

absl::StatusOr<std::vector<double>> Load(const gguf::GgufFile& f, const std::string& name,
                                         bool optional = false) {
  const gguf::TensorInfo* t = f.FindTensor(name);
  if (t == nullptr) {
    if (optional) return std::vector<double>();
    return absl::NotFoundError(absl::StrCat("reference: missing ", name));
  }
  std::vector<float> tmp(t->n_elements);
  const int64_t ne0 = t->dims[0];
  const int64_t row_bytes = RowBytes(t->type, ne0);
  for (int64_t r = 0; r < t->n_elements / ne0; ++r) {
    RETURN_IF_ERROR(DequantizeRow(t->type, t->data + r * row_bytes, tmp.data() + r * ne0, ne0));
  }
  return std::vector<double>(tmp.begin(), tmp.end());
}

}  // namespace

absl::StatusOr<ReferenceQwen2> ReferenceQwen2::Load(const gguf::GgufFile& f,
                                                    bool force_neox_no_factors) {
  ReferenceQwen2 m;
  ASSIGN_OR_RETURN(const std::string arch, f.GetString("general.architecture"));
  if (arch != "qwen2" && arch != "llama") {
    return absl::InvalidArgumentError(absl::StrCat("reference: architecture ", arch));
  }
  const std::string A = arch + ".";
  ASSIGN_OR_RETURN(m.n_embd_, f.GetInt(A + "embedding_length"));
  ASSIGN_OR_RETURN(m.n_ff_, f.GetInt(A + "feed_forward_length"));
  ASSIGN_OR_RETURN(int64_t n_layer, f.GetInt(A + "block_count"));
  ASSIGN_OR_RETURN(m.n_head_, f.GetInt(A + "attention.head_count"));
  ASSIGN_OR_RETURN(m.n_head_kv_, f.GetInt(A + "attention.head_count_kv"));
  ASSIGN_OR_RETURN(m.rope_base_, f.GetFloat(A + "rope.freq_base"));
  ASSIGN_OR_RETURN(m.eps_, f.GetFloat(A + "attention.layer_norm_rms_epsilon"));
  m.head_dim_ = m.n_embd_ / m.n_head_;
  m.adjacent_pairs_ = arch == "llama";
  ASSIGN_OR_RETURN(m.rope_factors_, minfer::testing::Load(f, "rope_freqs.weight", true));
  if (force_neox_no_factors) {
    m.adjacent_pairs_ = false;
    m.rope_factors_.clear();
  }
  ASSIGN_OR_RETURN(m.embd_, minfer::testing::Load(f, "token_embd.weight"));
  m.n_vocab_ = static_cast<int64_t>(m.embd_.size()) / m.n_embd_;
  ASSIGN_OR_RETURN(m.output_norm_, minfer::testing::Load(f, "output_norm.weight"));
  ASSIGN_OR_RETURN(m.output_, minfer::testing::Load(f, "output.weight", true));
  if (m.output_.empty()) m.output_ = m.embd_;
  for (int64_t l = 0; l < n_layer; ++l) {
    std::string p = absl::StrCat("blk.", l, ".");
    Layer L;
    ASSIGN_OR_RETURN(L.attn_norm, minfer::testing::Load(f, p + "attn_norm.weight"));
    ASSIGN_OR_RETURN(L.wq, minfer::testing::Load(f, p + "attn_q.weight"));
    ASSIGN_OR_RETURN(L.wk, minfer::testing::Load(f, p + "attn_k.weight"));
    ASSIGN_OR_RETURN(L.wv, minfer::testing::Load(f, p + "attn_v.weight"));
    ASSIGN_OR_RETURN(L.bq, minfer::testing::Load(f, p + "attn_q.bias", true));
    ASSIGN_OR_RETURN(L.bk, minfer::testing::Load(f, p + "attn_k.bias", true));
    ASSIGN_OR_RETURN(L.bv, minfer::testing::Load(f, p + "attn_v.bias", true));
    ASSIGN_OR_RETURN(L.wo, minfer::testing::Load(f, p + "attn_output.weight"));
    ASSIGN_OR_RETURN(L.ffn_norm, minfer::testing::Load(f, p + "ffn_norm.weight"));
    ASSIGN_OR_RETURN(L.gate, minfer::testing::Load(f, p + "ffn_gate.weight"));
    ASSIGN_OR_RETURN(L.up, minfer::testing::Load(f, p + "ffn_up.weight"));
    ASSIGN_OR_RETURN(L.down, minfer::testing::Load(f, p + "ffn_down.weight"));
    m.layers_.push_back(std::move(L));
  }
  return m;
}

std::vector<double> ReferenceQwen2::MatVec(const Mat& w, const std::vector<double>& x) {
  const size_t cols = x.size(), rows = w.size() / cols;
  std::vector<double> y(rows, 0.0);
  for (size_t r = 0; r < rows; ++r) {
    double s = 0;
    for (size_t c = 0; c < cols; ++c) s += w[r * cols + c] * x[c];
    y[r] = s;
  }
  return y;
}

std::vector<double> ReferenceQwen2::RmsNorm(const std::vector<double>& x,
                                            const std::vector<double>& g) const {
  double ss = 0;
  for (double v : x) ss += v * v;
  double inv = 1.0 / std::sqrt(ss / x.size() + eps_);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * g[i];
  return y;
}

std::vector<std::vector<double>> ReferenceQwen2::Forward(const std::vector<int32_t>& tokens) const {
  const size_t T = tokens.size();
  const int64_t hd = head_dim_, kvd = n_head_kv_ * hd, group = n_head_ / n_head_kv_;
  std::vector<std::vector<double>> x(T);
  for (size_t t = 0; t < T; ++t) {
    x[t].assign(embd_.begin() + tokens[t] * n_embd_, embd_.begin() + (tokens[t] + 1) * n_embd_);
  }
  auto rope = [&](std::vector<double>& v, int64_t n_heads, int64_t pos) {
    for (int64_t h = 0; h < n_heads; ++h) {
      for (int64_t i = 0; i < hd / 2; ++i) {
        double theta = pos * std::pow(rope_base_, -2.0 * i / hd);
        if (!rope_factors_.empty()) theta /= rope_factors_[i];
        double c = std::cos(theta), s = std::sin(theta);
        const int64_t i0 = adjacent_pairs_ ? 2 * i : i;
        const int64_t i1 = adjacent_pairs_ ? 2 * i + 1 : i + hd / 2;
        double a = v[h * hd + i0], b = v[h * hd + i1];
        v[h * hd + i0] = a * c - b * s;
        v[h * hd + i1] = a * s + b * c;
      }
    }
  };
  auto add = [](std::vector<double>& a, const std::vector<double>& b) {
    for (size_t i = 0; i < b.size(); ++i) a[i] += b[i];
  };
  for (const Layer& L : layers_) {
    std::vector<std::vector<double>> q(T), k(T), v(T);
    for (size_t t = 0; t < T; ++t) {
      std::vector<double> n = RmsNorm(x[t], L.attn_norm);
      q[t] = MatVec(L.wq, n);
      k[t] = MatVec(L.wk, n);
      v[t] = MatVec(L.wv, n);
      if (!L.bq.empty()) add(q[t], L.bq);
      if (!L.bk.empty()) add(k[t], L.bk);
      if (!L.bv.empty()) add(v[t], L.bv);
      rope(q[t], n_head_, static_cast<int64_t>(t));
      rope(k[t], n_head_kv_, static_cast<int64_t>(t));
    }
    for (size_t t = 0; t < T; ++t) {
      std::vector<double> att(n_embd_, 0.0);
      for (int64_t h = 0; h < n_head_; ++h) {
        const int64_t hk = h / group;
        std::vector<double> s(t + 1);
        double mx = -1e300;
        for (size_t p = 0; p <= t; ++p) {
          double d = 0;
          for (int64_t i = 0; i < hd; ++i) d += q[t][h * hd + i] * k[p][hk * hd + i];
          s[p] = d / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, s[p]);
        }
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (size_t p = 0; p <= t; ++p) {
          for (int64_t i = 0; i < hd; ++i) att[h * hd + i] += s[p] / sum * v[p][hk * hd + i];
        }
      }
      add(x[t], MatVec(L.wo, att));
      std::vector<double> m = RmsNorm(x[t], L.ffn_norm);
      std::vector<double> g = MatVec(L.gate, m), u = MatVec(L.up, m);
      for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      add(x[t], MatVec(L.down, g));
    }
    (void)kvd;
  }
  std::vector<std::vector<double>> logits(T);
  for (size_t t = 0; t < T; ++t) logits[t] = MatVec(output_, RmsNorm(x[t], output_norm_));
  return logits;
}

std::vector<int32_t> ReferenceQwen2::Greedy(std::vector<int32_t> tokens, int n) const {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    auto logits = Forward(tokens).back();
    int32_t best = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(best);
    tokens.push_back(best);
  }
  return out;
}

}  // namespace minfer::testing
