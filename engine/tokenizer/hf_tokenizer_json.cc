#include "engine/tokenizer/hf_tokenizer_json.h"

#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/base/mapped_file.h"
#include "engine/base/status.h"
#include "nlohmann/json.hpp"

namespace minfer::tokenizer {
namespace {

using nlohmann::json;

absl::Status Malformed(absl::string_view name, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": ", what));
}

// Parses without exceptions (minfer code does not throw or catch).
absl::StatusOr<json> ParseJson(absl::string_view text, absl::string_view name) {
  json j = json::parse(text.data(), text.data() + text.size(), nullptr,
                       /*allow_exceptions=*/false);
  if (j.is_discarded()) return Malformed(name, "not valid JSON");
  return j;
}

const json* Member(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

std::optional<std::string> StringMember(const json& obj, const char* key) {
  const json* v = Member(obj, key);
  if (v == nullptr || !v->is_string()) return std::nullopt;
  return v->get<std::string>();
}

// llama.cpp's convert_hf_to_gguf.py treats these added tokens as control
// tokens even when tokenizer.json does not flag them "special".
bool LooksSpecial(absl::string_view s) {
  return (absl::StartsWith(s, "<|") && absl::EndsWith(s, "|>") && s.size() >= 4) ||
         (absl::StartsWith(s, "<\xEF\xBD\x9C") && absl::EndsWith(s, "\xEF\xBD\x9C>"));
}

// The split regex of a Split + ByteLevel(use_regex false) pre-tokenizer
// sequence (Qwen2's and Llama 3's shape), or nullopt for any other shape.
std::optional<std::string> SplitRegex(const json& pre) {
  const std::optional<std::string> type = StringMember(pre, "type");
  if (!type || *type != "Sequence") return std::nullopt;
  const json* list = Member(pre, "pretokenizers");
  if (list == nullptr || !list->is_array() || list->size() != 2) return std::nullopt;
  const json& split = (*list)[0];
  const json& byte_level = (*list)[1];
  if (StringMember(split, "type") != std::optional<std::string>("Split")) return std::nullopt;
  const json* pattern = Member(split, "pattern");
  if (pattern == nullptr) return std::nullopt;
  std::optional<std::string> regex = StringMember(*pattern, "Regex");
  if (StringMember(split, "behavior") != std::optional<std::string>("Isolated")) return std::nullopt;
  const json* invert = Member(split, "invert");
  if (invert != nullptr && !(invert->is_boolean() && !invert->get<bool>())) return std::nullopt;
  if (StringMember(byte_level, "type") != std::optional<std::string>("ByteLevel")) {
    return std::nullopt;
  }
  const json* use_regex = Member(byte_level, "use_regex");
  const json* prefix = Member(byte_level, "add_prefix_space");
  if (use_regex == nullptr || !use_regex->is_boolean() || use_regex->get<bool>()) {
    return std::nullopt;
  }
  if (prefix != nullptr && !(prefix->is_boolean() && !prefix->get<bool>())) return std::nullopt;
  return regex;
}

// The special token a TemplateProcessing post-processor (alone or in a
// Sequence) puts before a single sequence: how Llama 3's tokenizer.json
// says "prepend BOS". nullopt when there is none.
std::optional<std::string> PrependedSpecial(const json& post) {
  const std::optional<std::string> type = StringMember(post, "type");
  if (type == std::optional<std::string>("Sequence")) {
    const json* list = Member(post, "processors");
    if (list == nullptr || !list->is_array()) return std::nullopt;
    for (const json& p : *list) {
      if (std::optional<std::string> t = PrependedSpecial(p)) return t;
    }
    return std::nullopt;
  }
  if (type != std::optional<std::string>("TemplateProcessing")) return std::nullopt;
  const json* single = Member(post, "single");
  if (single == nullptr || !single->is_array() || single->empty()) return std::nullopt;
  const json* special = Member((*single)[0], "SpecialToken");
  if (special == nullptr) return std::nullopt;
  return StringMember(*special, "id");
}

// A token named in tokenizer_config.json: a string or {"content": ...}.
std::optional<std::string> ConfigToken(const json& config, const char* key) {
  const json* v = Member(config, key);
  if (v == nullptr) return std::nullopt;
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object()) return StringMember(*v, "content");
  return std::nullopt;
}

absl::Status ApplyConfig(const json& config, TokenizerData* data) {
  std::map<std::string, TokenId, std::less<>> index;
  for (size_t i = 0; i < data->tokens.size(); ++i) {
    if (data->token_types[i] == static_cast<int32_t>(TokenType::kControl) ||
        data->token_types[i] == static_cast<int32_t>(TokenType::kUserDefined)) {
      index.emplace(data->tokens[i], static_cast<TokenId>(i));
    }
  }
  auto lookup = [&](const char* key) -> std::optional<TokenId> {
    const std::optional<std::string> name = ConfigToken(config, key);
    if (!name) return std::nullopt;
    auto it = index.find(*name);
    if (it == index.end()) return std::nullopt;
    return it->second;
  };
  if (std::optional<TokenId> bos = lookup("bos_token")) data->bos_id = bos;
  data->eos_id = lookup("eos_token");
  data->pad_id = lookup("pad_token");
  if (const json* add_bos = Member(config, "add_bos_token"); add_bos && add_bos->is_boolean()) {
    data->add_bos = add_bos->get<bool>() && data->bos_id.has_value();
  }
  if (std::optional<std::string> t = StringMember(config, "chat_template")) {
    data->chat_template = std::move(*t);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TokenizerData> TokenizerDataFromHfJsonText(absl::string_view text,
                                                          const HfTokenizerJsonOptions& options) {
  const std::string name = options.model_name.empty() ? "tokenizer.json" : options.model_name;
  ASSIGN_OR_RETURN(const json root, ParseJson(text, name));
  if (!root.is_object()) return Malformed(name, "top level is not an object");
  const json* model = Member(root, "model");
  if (model == nullptr || !model->is_object()) return Malformed(name, "no \"model\" object");
  if (StringMember(*model, "type").value_or("BPE") != "BPE") {
    return absl::UnimplementedError(absl::StrCat(
        name, ": model type '", StringMember(*model, "type").value_or(""),
        "' is not supported (only byte-level BPE)"));
  }
  const json* pre = Member(root, "pre_tokenizer");
  const std::optional<std::string> regex = pre == nullptr ? std::nullopt : SplitRegex(*pre);
  const bool qwen2 = regex == std::optional<std::string>(std::string(kQwen2SplitRegex));
  const bool o200k = regex == std::optional<std::string>(std::string(kO200kSplitRegex));
  // o200k takes Llama 3's rules below (no normalizer, ignore_merges).
  const bool llama3 =
      o200k || regex == std::optional<std::string>(std::string(kLlama3SplitRegex));
  if (!qwen2 && !llama3) {
    return absl::UnimplementedError(
        absl::StrCat(name, ": pre-tokenizer is not Qwen2's, Llama 3's or o200k's (Split on "
                           "their regex, then ByteLevel); minfer supports only those"));
  }
  const json* normalizer = Member(root, "normalizer");
  const bool nfc = normalizer != nullptr &&
                   StringMember(*normalizer, "type") == std::optional<std::string>("NFC");
  const bool no_normalizer = normalizer == nullptr || normalizer->is_null();
  if (qwen2 && !nfc) {
    return absl::UnimplementedError(
        absl::StrCat(name, ": normalizer is not NFC, which the Qwen2 pre-tokenizer needs"));
  }
  if (llama3 && !no_normalizer) {
    return absl::UnimplementedError(
        absl::StrCat(name, ": Llama 3's pre-tokenizer with a normalizer is not supported"));
  }
  // Llama 3's tokenizer (what minfer's llama-bpe implements) takes whole
  // vocabulary entries as they are; a file without that setting would
  // tokenize differently.
  if (llama3) {
    const json* ignore = Member(*model, "ignore_merges");
    if (ignore == nullptr || !ignore->is_boolean() || !ignore->get<bool>()) {
      return absl::UnimplementedError(
          absl::StrCat(name, ": Llama 3's pre-tokenizer without ignore_merges is not supported"));
    }
  }

  const json* vocab = Member(*model, "vocab");
  if (vocab == nullptr || !vocab->is_object() || vocab->empty()) {
    return Malformed(name, "model.vocab is missing or empty");
  }
  const int64_t limit = options.vocab_limit < 0 ? INT32_MAX : options.vocab_limit;
  struct Entry {
    std::string text;
    int32_t type;
  };
  std::vector<std::optional<Entry>> entries;
  auto place = [&](int64_t id, std::string text, TokenType type) -> absl::Status {
    // Ids index a dense table (gaps become padding entries), so an absurd id
    // must not turn into an absurd allocation.
    constexpr int64_t kMaxId = 1 << 24;
    if (id < 0 || id >= kMaxId) {
      return Malformed(name, absl::StrCat("token id ", id, " is out of range [0, ", kMaxId, ")"));
    }
    if (id >= limit) return absl::OkStatus();
    if (static_cast<size_t>(id) >= entries.size()) entries.resize(id + 1);
    entries[id] = Entry{std::move(text), static_cast<int32_t>(type)};
    return absl::OkStatus();
  };
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_integer()) {
      return Malformed(name, absl::StrCat("vocab entry '", it.key(), "' has no integer id"));
    }
    RETURN_IF_ERROR(place(it.value().get<int64_t>(), it.key(), TokenType::kNormal));
  }
  if (const json* added = Member(root, "added_tokens"); added != nullptr) {
    if (!added->is_array()) return Malformed(name, "added_tokens is not an array");
    for (const json& a : *added) {
      const json* id = Member(a, "id");
      const std::optional<std::string> content = StringMember(a, "content");
      if (id == nullptr || !id->is_number_integer() || !content) {
        return Malformed(name, "an added_tokens entry lacks an integer id or a content string");
      }
      const json* special = Member(a, "special");
      const bool is_special = special != nullptr && special->is_boolean() && special->get<bool>();
      const TokenType type =
          is_special || LooksSpecial(*content) ? TokenType::kControl : TokenType::kUserDefined;
      RETURN_IF_ERROR(place(id->get<int64_t>(), *content, type));
    }
  }

  TokenizerData data;
  data.model_name = name;
  data.model = "gpt2";
  data.pre = o200k ? "gpt-4o" : llama3 ? "llama-bpe" : "qwen2";
  data.tokens.reserve(entries.size());
  data.token_types.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].has_value()) {
      data.tokens.push_back(std::move(entries[i]->text));
      data.token_types.push_back(entries[i]->type);
    } else {
      data.tokens.push_back(absl::StrCat("[PAD", i, "]"));
      data.token_types.push_back(static_cast<int32_t>(TokenType::kUnused));
    }
  }

  const json* merges = Member(*model, "merges");
  if (merges == nullptr || !merges->is_array()) return Malformed(name, "model.merges is missing");
  data.merges.reserve(merges->size());
  for (const json& m : *merges) {
    if (m.is_string()) {
      data.merges.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      data.merges.push_back(
          absl::StrCat(m[0].get_ref<const std::string&>(), " ", m[1].get_ref<const std::string&>()));
    } else {
      return Malformed(name, absl::StrCat("merge #", data.merges.size(),
                                          " is neither \"a b\" nor [\"a\", \"b\"]"));
    }
  }
  // A post-processor that prepends a special token to every input is BOS
  // handling (Llama 3: <|begin_of_text|>).
  if (const json* post = Member(root, "post_processor"); post != nullptr) {
    if (std::optional<std::string> first = PrependedSpecial(*post)) {
      for (size_t i = 0; i < data.tokens.size(); ++i) {
        if (data.tokens[i] == *first &&
            data.token_types[i] == static_cast<int32_t>(TokenType::kControl)) {
          data.bos_id = static_cast<TokenId>(i);
          data.add_bos = true;
          break;
        }
      }
    }
  }
  return data;
}

absl::StatusOr<TokenizerData> TokenizerDataFromHfJson(const std::string& path,
                                                      const HfTokenizerJsonOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  HfTokenizerJsonOptions opts = options;
  if (opts.model_name.empty()) opts.model_name = path;
  ASSIGN_OR_RETURN(
      TokenizerData data,
      TokenizerDataFromHfJsonText(
          absl::string_view(reinterpret_cast<const char*>(file->data()), file->size()), opts));
  if (options.read_tokenizer_config) {
    const size_t slash = path.rfind('/');
    const std::string config_path =
        (slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) +
        "tokenizer_config.json";
    absl::StatusOr<std::unique_ptr<MappedFile>> config_file = MappedFile::Open(config_path);
    if (config_file.ok()) {
      ASSIGN_OR_RETURN(
          const json config,
          ParseJson(absl::string_view(reinterpret_cast<const char*>((*config_file)->data()),
                                      (*config_file)->size()),
                    config_path));
      RETURN_IF_ERROR(ApplyConfig(config, &data));
    } else if (config_file.status().code() != absl::StatusCode::kNotFound) {
      return config_file.status();
    }
  }
  return data;
}

}  // namespace minfer::tokenizer
