// An independent float64 Qwen2 forward, written plainly from the math (no
// graph, no backends), used as the oracle for the engine's logits. Weights
// are dequantized with the quant library's reference dequantizers (the
// format definitions, tested on their own against hand-built blocks).
#ifndef MINFER_TESTS_ENGINE_MODELS_REFERENCE_FORWARD_H_
#define MINFER_TESTS_ENGINE_MODELS_REFERENCE_FORWARD_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/gguf/gguf.h"

namespace minfer::testing {

class ReferenceQwen2 {
 public:
  static absl::StatusOr<ReferenceQwen2> Load(const gguf::GgufFile& f);

  // Logits [n_tokens][n_vocab] of every position of `tokens` (positions 0..).
  std::vector<std::vector<double>> Forward(const std::vector<int32_t>& tokens) const;
  // Greedy continuation of `prompt` by `n` tokens (recomputing from scratch).
  std::vector<int32_t> Greedy(std::vector<int32_t> prompt, int n) const;

  int64_t n_vocab() const { return n_vocab_; }

 private:
  using Mat = std::vector<double>;  // row-major [rows][cols]
  struct Layer {
    std::vector<double> attn_norm, bq, bk, bv, ffn_norm;
    Mat wq, wk, wv, wo, gate, up, down;
  };
  // y[r] = sum_c W[r][c] x[c] for W with `rows` rows of x.size() columns.
  static std::vector<double> MatVec(const Mat& w, const std::vector<double>& x);
  std::vector<double> RmsNorm(const std::vector<double>& x, const std::vector<double>& g) const;

  int64_t n_embd_ = 0, n_ff_ = 0, n_head_ = 0, n_head_kv_ = 0, head_dim_ = 0, n_vocab_ = 0;
  double rope_base_ = 0, eps_ = 0;
  Mat embd_, output_;
  std::vector<double> output_norm_;
  std::vector<Layer> layers_;
};

}  // namespace minfer::testing

#endif  // MINFER_TESTS_ENGINE_MODELS_REFERENCE_FORWARD_H_
