// TokenizerData: everything needed to build a Tokenizer, independent of where
// it came from (GGUF metadata, a Hugging Face tokenizer.json, a test).
// Field meanings follow GGUF's tokenizer.ggml.* keys.
#ifndef MINFER_ENGINE_TOKENIZER_TOKENIZER_DATA_H_
#define MINFER_ENGINE_TOKENIZER_TOKENIZER_DATA_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace minfer::tokenizer {

using TokenId = int32_t;

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  kUndefined = 0,    // treated as kNormal
  kNormal = 1,       // ordinary vocabulary entry, produced by BPE
  kUnknown = 2,      // decodes to its text; never produced by encoding
  kControl = 3,      // special token (<|im_start|>, <|endoftext|>, ...):
                     // matched in text only when special parsing is on;
                     // skippable on decode
  kUserDefined = 4,  // added token matched in text whole, always
  kUnused = 5,       // padding entry; decodes to nothing
  kByte = 6,         // "<0xHH>" byte token; decodes to that byte
};

struct TokenizerData {
  // Names the model in error messages (general.name or the file name).
  std::string model_name;
  // tokenizer.ggml.model; only "gpt2" (byte-level BPE) is supported.
  std::string model = "gpt2";
  // tokenizer.ggml.pre; "qwen2" and Llama 3's "llama-bpe" (also spelled
  // "llama3", "llama-v3") are supported.
  std::string pre = "qwen2";
  // tokenizer.ggml.tokens: token id -> vocabulary string (byte-level alphabet
  // for normal tokens, plain text for added ones).
  std::vector<std::string> tokens;
  // tokenizer.ggml.token_type: per token; empty means all kNormal.
  std::vector<int32_t> token_types;
  // tokenizer.ggml.merges: "left right", highest priority first.
  std::vector<std::string> merges;
  std::optional<TokenId> bos_id;  // tokenizer.ggml.bos_token_id
  std::optional<TokenId> eos_id;  // tokenizer.ggml.eos_token_id
  std::optional<TokenId> pad_id;  // tokenizer.ggml.padding_token_id
  std::optional<TokenId> eot_id;  // tokenizer.ggml.eot_token_id
  bool add_bos = false;           // tokenizer.ggml.add_bos_token
  // tokenizer.chat_template (Jinja source); empty when absent.
  std::string chat_template;
};

}  // namespace minfer::tokenizer

#endif  // MINFER_ENGINE_TOKENIZER_TOKENIZER_DATA_H_
