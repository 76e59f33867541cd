#include "engine/tokenizer/gguf_tokenizer.h"

#include <cstdint>
#include <optional>

#include "absl/strings/str_cat.h"
#include "engine/base/status.h"

namespace minfer::tokenizer {
namespace {


// An optional token id key.
absl::Status ReadId(const gguf::GgufFile& file, const char* key, std::optional<TokenId>* out) {
  absl::StatusOr<int64_t> v = file.GetInt(key);
  if (absl::IsNotFound(v.status())) return absl::OkStatus();
  if (!v.ok()) return v.status();
  if (*v < 0 || *v > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("GGUF file '", file.path(), "': key '", key,
                                                   "' = ", *v, " is not a valid token id"));
  }
  *out = static_cast<TokenId>(*v);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TokenizerData> TokenizerDataFromGguf(const gguf::GgufFile& file) {
  TokenizerData data;
  absl::StatusOr<std::string> name = file.GetString("general.name");
  data.model_name = name.ok() && !name->empty() ? *name : file.path();

  ASSIGN_OR_RETURN(data.model, file.GetString("tokenizer.ggml.model"));
  absl::StatusOr<std::string> pre = file.GetString("tokenizer.ggml.pre");
  if (pre.ok()) {
    data.pre = *pre;
  } else if (absl::IsNotFound(pre.status())) {
    absl::StatusOr<std::string> arch = file.GetString("general.architecture");
    data.pre = arch.ok() && *arch == "qwen2" ? "qwen2" : "default";
  } else {
    return pre.status();
  }

  ASSIGN_OR_RETURN(data.tokens, file.GetStringArray("tokenizer.ggml.tokens"));

  absl::StatusOr<std::vector<int64_t>> types = file.GetIntArray("tokenizer.ggml.token_type");
  if (types.ok()) {
    data.token_types.reserve(types->size());
    for (int64_t t : *types) {
      // Out-of-range values are reported by Tokenizer::Create.
      data.token_types.push_back(t < INT32_MIN || t > INT32_MAX ? -1 : static_cast<int32_t>(t));
    }
  } else if (!absl::IsNotFound(types.status())) {
    return types.status();
  }

  absl::StatusOr<std::vector<std::string>> merges = file.GetStringArray("tokenizer.ggml.merges");
  if (merges.ok()) {
    data.merges = std::move(*merges);
  } else if (!absl::IsNotFound(merges.status())) {
    return merges.status();
  }

  RETURN_IF_ERROR(ReadId(file, "tokenizer.ggml.bos_token_id", &data.bos_id));
  RETURN_IF_ERROR(ReadId(file, "tokenizer.ggml.eos_token_id", &data.eos_id));
  RETURN_IF_ERROR(ReadId(file, "tokenizer.ggml.padding_token_id", &data.pad_id));
  RETURN_IF_ERROR(ReadId(file, "tokenizer.ggml.eot_token_id", &data.eot_id));

  absl::StatusOr<bool> add_bos = file.GetBool("tokenizer.ggml.add_bos_token");
  if (add_bos.ok()) {
    data.add_bos = *add_bos;
  } else if (!absl::IsNotFound(add_bos.status())) {
    return add_bos.status();
  }

  absl::StatusOr<std::string> chat = file.GetString("tokenizer.chat_template");
  if (chat.ok()) {
    data.chat_template = std::move(*chat);
  } else if (!absl::IsNotFound(chat.status())) {
    return chat.status();
  }
  return data;
}

}  // namespace minfer::tokenizer
