#include "engine/tools/mkmodel.h"

#include "engine/chat/harmony_template.h"

#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/gguf/writer.h"
#include "engine/quant/quantize.h"
#include "engine/tools/qwen_vocab.h"
#include "nlohmann/json.hpp"

namespace minfer::tools {
namespace {

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t HashName(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// A small, fast generator for one row (xoshiro256**), seeded from
// (model seed, tensor name, row) so every row is reproducible no matter how
// the writer chunks or orders the work.
class RowRng {
 public:
  RowRng(uint64_t seed, uint64_t name_hash, int64_t row) {
    uint64_t x = SplitMix(seed ^ SplitMix(name_hash ^ SplitMix(static_cast<uint64_t>(row))));
    for (auto& w : s_) w = x = SplitMix(x);
  }
  uint64_t Next() {
    uint64_t r = Rotl(s_[1] * 5, 7) * 9;
    uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return r;
  }
  // Approximately standard normal (Irwin-Hall sum of four 16-bit uniforms,
  // rescaled to unit variance): fast, bounded at +-3.46.
  float Normal() {
    uint64_t r = Next();
    float sum = static_cast<float>((r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) +
                                   (r >> 48)) *
                (1.0f / 65536.0f);
    return (sum - 2.0f) * 1.7320508f;
  }
  float Uniform() { return static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f); }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

int64_t Gcd(int64_t a, int64_t b) { return b == 0 ? a : Gcd(b, a % b); }

// Multiplier of the successor permutation: near n * golden ratio, coprime.
int64_t SuccessorMultiplier(int64_t n) {
  int64_t a = static_cast<int64_t>(static_cast<double>(n) * 0.6180339887) | 1;
  while (Gcd(a, n) != 1) a += 2;
  return a;
}

constexpr int64_t kSuccessorOffset = 7;

// Inverse of SyntheticSuccessor over [0, n).
int64_t Predecessor(int64_t k, int64_t n) {
  // a^-1 mod n by the extended Euclid algorithm.
  int64_t a = SuccessorMultiplier(n);
  int64_t t = 0, new_t = 1, r = n, new_r = a % n;
  while (new_r != 0) {
    int64_t q = r / new_r;
    std::tie(t, new_t) = std::make_pair(new_t, t - q * new_t);
    std::tie(r, new_r) = std::make_pair(new_r, r - q * new_r);
  }
  int64_t inv = t < 0 ? t + n : t;
  int64_t d = ((k - kSuccessorOffset) % n + n) % n;
  return static_cast<int64_t>((static_cast<__int128>(d) * inv) % n);
}

// How each tensor's float rows are made.
struct TensorPlan {
  std::string name;
  std::vector<int64_t> dims;
  GgmlType type;
  enum Kind { kGaussian, kNormGain, kEmbedding, kOutputHead, kValues } kind;
  float scale = 1.0f;
  std::vector<float> values;  // kValues: the whole (1-D) tensor
};

}  // namespace

// The chat_template of the tokenizer_config.json beside `tokenizer_json`
// (the npm tokenizer packages ship both), or "" when there is none.
static std::string TemplateBeside(const std::string& tokenizer_json) {
  const size_t slash = tokenizer_json.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : tokenizer_json.substr(0, slash);
  std::ifstream in(dir + "/tokenizer_config.json");
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("chat_template") ||
      !j["chat_template"].is_string()) {
    return "";
  }
  return j["chat_template"].get<std::string>();
}

int64_t SyntheticSuccessor(int64_t token, int64_t n_normal) {
  return static_cast<int64_t>(
      (static_cast<__int128>(token) * SuccessorMultiplier(n_normal) + kSuccessorOffset) % n_normal);
}

absl::StatusOr<MkModelReport> WriteSyntheticModel(const MkModelOptions& opt, ThreadPool* pool) {
  auto t0 = std::chrono::steady_clock::now();
  const Qwen2Shape& s = opt.shape;
  if (s.arch != "qwen2" && s.arch != "qwen3" && s.arch != "llama" && s.arch != "qwen3moe" &&
      s.arch != "gpt-oss") {
    return absl::InvalidArgumentError(
        absl::StrCat("architecture '", s.arch,
                     "' is not one mkmodel writes (qwen2, qwen3, llama, qwen3moe, gpt-oss)"));
  }
  const bool gpt_oss = s.arch == "gpt-oss";
  const bool moe = s.arch == "qwen3moe" || gpt_oss;
  if (moe && (s.n_expert < 1 || s.n_expert_used < 1 || s.n_expert_used > s.n_expert ||
              s.n_ff_exp < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("bad experts: ", s.n_expert_used, " of ",
                                                   s.n_expert, " experts of width ", s.n_ff_exp));
  }
  const bool qwen3 = s.arch == "qwen3" || s.arch == "qwen3moe";
  const bool llama = s.arch == "llama";
  const bool biases = s.arch == "qwen2" || gpt_oss;
  if (s.n_head <= 0 || s.n_head_kv <= 0 || (s.head_dim <= 0 && s.n_embd % s.n_head != 0) ||
      s.n_head % s.n_head_kv != 0) {
    return absl::InvalidArgumentError(absl::StrCat("bad head configuration: n_embd ", s.n_embd,
                                                   ", n_head ", s.n_head, ", n_head_kv ", s.n_head_kv));
  }
  // Llama 3's and gpt-oss's tokenizers are tiktoken vocabularies (ids are
  // ranks, added tokens after them); Qwen's has its own added tokens.
  const bool tiktoken = llama || gpt_oss;
  std::string json = !opt.tokenizer_json.empty() ? opt.tokenizer_json
                     : tiktoken                   ? TokenizerJsonFor(s)
                                                  : DefaultTokenizerJsonPath();
  ASSIGN_OR_RETURN(QwenVocab vocab, tiktoken ? LoadLlama3Vocab(json, s.n_vocab_base, s.n_vocab)
                                             : LoadQwenVocab(json, s.n_vocab_base, s.n_vocab));

  const int64_t head_dim = s.HeadDim();
  const int64_t n_embd_kv = head_dim * s.n_head_kv;
  const int64_t n_embd_q = head_dim * s.n_head;
  const double d = static_cast<double>(s.n_embd);
  // Embedding row rms: a tied head scores <norm(x), E_j> ~ n_embd * r for the
  // current token, so r = top/n_embd puts that logit near top_logit; untied
  // heads are scaled instead and the embedding keeps unit rms.
  const float emb_rms = s.tied ? static_cast<float>(opt.top_logit / d) : 1.0f;
  const float head_scale = static_cast<float>(opt.top_logit / d);
  const float branch = static_cast<float>(opt.residual_mix / std::sqrt(2.0 * s.n_layer)) * emb_rms;
  const float in_scale = static_cast<float>(1.0 / std::sqrt(d));
  // silu(g) * u with g, u ~ N(0, 1) has rms ~ 0.6.
  const float down_scale = branch / (0.6f * std::sqrt(static_cast<float>(s.n_ff)));
  const float out_scale = branch / std::sqrt(static_cast<float>(n_embd_q));
  // The experts' weighted sum has about one expert's norm (weights sum to 1).
  const float moe_down_scale =
      moe ? branch / (0.6f * std::sqrt(static_cast<float>(s.n_ff_exp))) : 0.0f;

  std::vector<TensorPlan> plans;
  auto add = [&](std::string name, std::vector<int64_t> dims, TensorPlan::Kind kind, float scale) {
    GgmlType type = TensorTypeFor(opt.recipe, s, name, dims);
    plans.push_back({std::move(name), std::move(dims), type, kind, scale, {}});
  };
  add("token_embd.weight", {s.n_embd, s.n_vocab}, TensorPlan::kEmbedding, emb_rms);
  // Llama 3.1's frequency factors, where llama.cpp's converter puts them.
  std::vector<float> rope_factors = Llama3RopeFactors(s);
  if (!rope_factors.empty()) {
    plans.push_back({"rope_freqs.weight", {head_dim / 2}, GgmlType::kF32, TensorPlan::kValues, 1.0f,
                     rope_factors});
  }
  for (int64_t l = 0; l < s.n_layer; ++l) {
    std::string p = absl::StrCat("blk.", l, ".");
    add(p + "attn_norm.weight", {s.n_embd}, TensorPlan::kNormGain, 0.1f);
    add(p + "attn_q.weight", {s.n_embd, n_embd_q}, TensorPlan::kGaussian, in_scale);
    if (biases) add(p + "attn_q.bias", {n_embd_q}, TensorPlan::kGaussian, 0.1f);
    add(p + "attn_k.weight", {s.n_embd, n_embd_kv}, TensorPlan::kGaussian, in_scale);
    if (biases) add(p + "attn_k.bias", {n_embd_kv}, TensorPlan::kGaussian, 0.1f);
    add(p + "attn_v.weight", {s.n_embd, n_embd_kv}, TensorPlan::kGaussian, in_scale);
    if (biases) add(p + "attn_v.bias", {n_embd_kv}, TensorPlan::kGaussian, 0.1f);
    if (qwen3) {
      add(p + "attn_q_norm.weight", {head_dim}, TensorPlan::kNormGain, 0.1f);
      add(p + "attn_k_norm.weight", {head_dim}, TensorPlan::kNormGain, 0.1f);
    }
    add(p + "attn_output.weight", {n_embd_q, s.n_embd}, TensorPlan::kGaussian, out_scale);
    if (gpt_oss) {
      add(p + "attn_output.bias", {s.n_embd}, TensorPlan::kGaussian, 0.3f * branch);
      // Sink logits of the order of the attention scores: some heads put
      // real mass on the sink, others little.
      add(p + "attn_sinks.weight", {s.n_head}, TensorPlan::kGaussian, 1.0f);
    }
    add(p + (gpt_oss ? "post_attention_norm.weight" : "ffn_norm.weight"), {s.n_embd},
        TensorPlan::kNormGain, 0.1f);
    if (moe) {
      // Router logits of unit scale: a softmax over them is far from
      // uniform and far from one-hot, so the top-k experts change from
      // token to token (a router that always picked the same ones would
      // test nothing of the routing).
      add(p + "ffn_gate_inp.weight", {s.n_embd, s.n_expert}, TensorPlan::kGaussian, in_scale);
      if (gpt_oss) add(p + "ffn_gate_inp.bias", {s.n_expert}, TensorPlan::kGaussian, 0.5f);
      add(p + "ffn_gate_exps.weight", {s.n_embd, s.n_ff_exp, s.n_expert}, TensorPlan::kGaussian,
          in_scale);
      add(p + "ffn_up_exps.weight", {s.n_embd, s.n_ff_exp, s.n_expert}, TensorPlan::kGaussian,
          in_scale);
      add(p + "ffn_down_exps.weight", {s.n_ff_exp, s.n_embd, s.n_expert}, TensorPlan::kGaussian,
          moe_down_scale);
      if (gpt_oss) {
        add(p + "ffn_gate_exps.bias", {s.n_ff_exp, s.n_expert}, TensorPlan::kGaussian, 0.2f);
        add(p + "ffn_up_exps.bias", {s.n_ff_exp, s.n_expert}, TensorPlan::kGaussian, 0.2f);
        add(p + "ffn_down_exps.bias", {s.n_embd, s.n_expert}, TensorPlan::kGaussian,
            0.3f * branch);
      }
    } else {
      add(p + "ffn_gate.weight", {s.n_embd, s.n_ff}, TensorPlan::kGaussian, in_scale);
      add(p + "ffn_up.weight", {s.n_embd, s.n_ff}, TensorPlan::kGaussian, in_scale);
      add(p + "ffn_down.weight", {s.n_ff, s.n_embd}, TensorPlan::kGaussian, down_scale);
    }
  }
  add("output_norm.weight", {s.n_embd}, TensorPlan::kNormGain, 0.1f);
  if (!s.tied) add("output.weight", {s.n_embd, s.n_vocab}, TensorPlan::kOutputHead, head_scale);

  gguf::GgufWriter w;
  w.SetString("general.architecture", s.arch);
  w.SetString("general.type", "model");
  w.SetString("general.name", absl::StrCat(gpt_oss ? "minfer synthetic gpt-oss "
                                           : moe   ? "minfer synthetic Qwen3 MoE "
                                           : qwen3 ? "minfer synthetic Qwen3 "
                                           : llama ? "minfer synthetic Llama 3 "
                                                   : "minfer synthetic Qwen2.5 ",
                                           s.name, " ", opt.recipe.name));
  w.SetU32("general.file_type", opt.recipe.file_type);
  w.SetString("general.description",
              absl::StrCat("Synthetic weights (seed ", opt.seed, ") written by minfer mkmodel"));
  const std::string A = s.arch + ".";
  w.SetU32(A + "block_count", static_cast<uint32_t>(s.n_layer));
  w.SetU32(A + "context_length", static_cast<uint32_t>(s.context_length));
  w.SetU32(A + "embedding_length", static_cast<uint32_t>(s.n_embd));
  w.SetU32(A + "feed_forward_length", static_cast<uint32_t>(s.n_ff));
  w.SetU32(A + "attention.head_count", static_cast<uint32_t>(s.n_head));
  w.SetU32(A + "attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
  w.SetF32(A + "rope.freq_base", static_cast<float>(s.rope_freq_base));
  w.SetF32(A + "attention.layer_norm_rms_epsilon", static_cast<float>(s.rms_eps));
  if (qwen3 || gpt_oss) {
    w.SetU32(A + "attention.key_length", static_cast<uint32_t>(head_dim));
    w.SetU32(A + "attention.value_length", static_cast<uint32_t>(head_dim));
  }
  if (moe) {  // what llama.cpp's converters write for Qwen3 MoE and gpt-oss
    w.SetU32(A + "expert_count", static_cast<uint32_t>(s.n_expert));
    w.SetU32(A + "expert_used_count", static_cast<uint32_t>(s.n_expert_used));
    w.SetU32(A + "expert_feed_forward_length", static_cast<uint32_t>(s.n_ff_exp));
  }
  if (gpt_oss) {
    w.SetU32(A + "attention.sliding_window", static_cast<uint32_t>(s.n_swa));
    w.SetString(A + "rope.scaling.type", "yarn");
    w.SetF32(A + "rope.scaling.factor", static_cast<float>(s.yarn_factor));
    w.SetU32(A + "rope.scaling.original_context_length",
             static_cast<uint32_t>(s.yarn_original_context));
  }
  if (llama) {  // what llama.cpp's converter writes for Llama 3
    w.SetU32(A + "rope.dimension_count", static_cast<uint32_t>(head_dim));
    w.SetU32(A + "vocab_size", static_cast<uint32_t>(s.n_vocab));
  }
  w.SetString("tokenizer.ggml.model", "gpt2");
  w.SetString("tokenizer.ggml.pre", llama ? "llama-bpe" : gpt_oss ? "gpt-4o" : "qwen2");
  w.Set("tokenizer.ggml.tokens", gguf::Value::StringArray(vocab.tokens));
  w.Set("tokenizer.ggml.token_type", gguf::Value::I32Array(vocab.types));
  w.Set("tokenizer.ggml.merges", gguf::Value::StringArray(vocab.merges));
  w.SetU32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(vocab.eos_id));
  if (vocab.pad_id >= 0) {
    w.SetU32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(vocab.pad_id));
  }
  w.SetU32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(vocab.bos_id));
  // Llama 3 prompts start with <|begin_of_text|>; Qwen2's have no BOS.
  w.SetBool("tokenizer.ggml.add_bos_token", llama);
  // The chat template: the one asked for; for Qwen3 and Llama 3 the real
  // one shipped beside the tokenizer (Qwen3's thinking switch included);
  // else the ChatML framing Qwen2 models are trained on.
  std::string chat_template = opt.chat_template;
  if (chat_template.empty() && (qwen3 || llama)) chat_template = TemplateBeside(json);
  // gpt-oss: Harmony (no npm package ships OpenAI's template; minfer's own
  // renders the same format).
  if (chat_template.empty() && gpt_oss) chat_template = std::string(chat::kHarmonyChatTemplate);
  w.SetString("tokenizer.chat_template",
              !chat_template.empty() ? chat_template :
              "{%- for message in messages %}"
              "{%- if loop.first and message['role'] != 'system' %}"
              "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
              "{%- endif %}"
              "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
              "{%- endfor %}"
              "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}");
  w.SetU32("general.quantization_version", 2);

  MkModelReport report;
  const uint64_t seed = opt.seed;
  const int64_t n_normal = vocab.n_normal;
  const uint64_t embd_hash = HashName("token_embd.weight");
  for (const TensorPlan& plan : plans) {
    int64_t n = 1;
    for (int64_t dim : plan.dims) n *= dim;
    report.n_params += n;
    if (plan.dims.size() >= 2) report.tensors_by_type[GgmlTypeName(plan.type)]++;
    const int64_t ne0 = plan.dims[0];
    const uint64_t hash = HashName(plan.name);
    RETURN_IF_ERROR(w.AddTensor(
        plan.name, plan.dims, plan.type,
        [plan, ne0, hash, seed, n_normal, embd_hash](int64_t b, int64_t e, uint8_t* dst) -> absl::Status {
          std::vector<float> row(ne0);
          const int64_t row_bytes = RowBytes(plan.type, ne0);
          for (int64_t r = b; r < e; ++r) {
            switch (plan.kind) {
              case TensorPlan::kValues:
                row = plan.values;
                break;
              case TensorPlan::kGaussian: {
                RowRng rng(seed, hash, r);
                for (auto& v : row) v = rng.Normal() * plan.scale;
                break;
              }
              case TensorPlan::kNormGain: {
                RowRng rng(seed, hash, r);
                for (auto& v : row) v = 1.0f + (2.0f * rng.Uniform() - 1.0f) * plan.scale;
                break;
              }
              case TensorPlan::kEmbedding:
              case TensorPlan::kOutputHead: {
                // Output row j copies embedding row pi^-1(j), so the head
                // scores pi(t) highest after token t. The rows of special
                // and padding tokens are drawn on their own (a copy of the
                // token's embedding row would make each the top-1
                // continuation of itself, a path that never moves).
                int64_t src = r;
                uint64_t src_hash = embd_hash;
                if (plan.kind == TensorPlan::kOutputHead) {
                  if (r < n_normal) {
                    src = Predecessor(r, n_normal);
                  } else {
                    src_hash = hash;
                  }
                }
                RowRng rng(seed, src_hash, src);
                for (auto& v : row) v = rng.Normal() * plan.scale;
                break;
              }
            }
            RETURN_IF_ERROR(QuantizeRow(plan.type, row.data(), dst + (r - b) * row_bytes, ne0));
          }
          return absl::OkStatus();
        }));
  }
  RETURN_IF_ERROR(w.WriteFile(opt.output, pool));
  report.file_bytes = w.FileSize();
  report.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace minfer::tools
