// GGUF <-> TokenizerData: reads the tokenizer.ggml.* metadata of a GGUF file
// (and writes it, for model writers and tests).
//
// Keys read (llama.cpp's names):
//   tokenizer.ggml.model            str, required
//   tokenizer.ggml.pre              str; when absent and general.architecture
//                                   is qwen2, "qwen2" (GGUFs converted before
//                                   the key existed)
//   tokenizer.ggml.tokens           arr[str], required
//   tokenizer.ggml.token_type       arr[int], optional (all normal)
//   tokenizer.ggml.merges           arr[str], optional (no merges)
//   tokenizer.ggml.bos_token_id, eos_token_id, padding_token_id,
//   eot_token_id                    int, optional
//   tokenizer.ggml.add_bos_token    bool, optional (false)
//   tokenizer.chat_template         str, optional
// The model name (for messages) is general.name, else the file path.
#ifndef MINFER_ENGINE_TOKENIZER_GGUF_TOKENIZER_H_
#define MINFER_ENGINE_TOKENIZER_GGUF_TOKENIZER_H_

#include "absl/status/statusor.h"
#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer_data.h"

namespace minfer::tokenizer {

// Errors name the file and key: NOT_FOUND for a missing required key,
// INVALID_ARGUMENT for a key of the wrong type or an id out of int32 range.
// Content checks (empty vocabulary, bad merges) happen in Tokenizer::Create.
absl::StatusOr<TokenizerData> TokenizerDataFromGguf(const gguf::GgufFile& file);

}  // namespace minfer::tokenizer

#endif  // MINFER_ENGINE_TOKENIZER_GGUF_TOKENIZER_H_
