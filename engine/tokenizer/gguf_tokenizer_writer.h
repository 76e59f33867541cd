// Writes TokenizerData as GGUF tokenizer.ggml.* metadata (the keys
// gguf_tokenizer.h reads, with llama.cpp's types: token ids as u32, token
// types as arr[i32]), for model writers and tests.
#ifndef MINFER_ENGINE_TOKENIZER_GGUF_TOKENIZER_WRITER_H_
#define MINFER_ENGINE_TOKENIZER_GGUF_TOKENIZER_WRITER_H_

#include "engine/gguf/writer.h"
#include "engine/tokenizer/tokenizer_data.h"

namespace minfer::tokenizer {

// Sets the tokenizer keys of `writer` from `data` (optional fields only when
// present; an empty chat_template is not written). Does not set general.*.
void AddTokenizerToGguf(const TokenizerData& data, gguf::GgufWriter* writer);

}  // namespace minfer::tokenizer

#endif  // MINFER_ENGINE_TOKENIZER_GGUF_TOKENIZER_WRITER_H_
