// An independent float64 forward of the Qwen2 and Llama 3 architectures
// (general.architecture qwen2 / llama), written plainly from the math (no
// graph, no backends), used as the oracle for the engine's logits. Llama:
// RoPE on adjacent pairs (2i, 2i+1), pair i at angle pos * base^(-2i/d) /
// rope_freqs[i]. Weights
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
  // force_neox_no_factors (tests that the RoPE variant matters): rope a
  // llama file as Qwen2 does, ignoring its rope_freqs.
  static absl::StatusOr<ReferenceQwen2> Load(const gguf::GgufFile& f,
                                             bool force_neox_no_factors = false);

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
  bool adjacent_pairs_ = false;        // llama
  std::vector<double> rope_factors_;  // rope_freqs.weight; empty: none
  Mat embd_, output_;
  std::vector<double> output_norm_;
  std::vector<Layer> layers_;
};

}  // namespace minfer::testing

#endif  // MINFER_TESTS_ENGINE_MODELS_REFERENCE_FORWARD_H_
