#include "engine/tokenizer/gguf_tokenizer_writer.h"

namespace minfer::tokenizer {

void AddTokenizerToGguf(const TokenizerData& data, gguf::GgufWriter* writer) {
  writer->SetString("tokenizer.ggml.model", data.model);
  writer->SetString("tokenizer.ggml.pre", data.pre);
  writer->Set("tokenizer.ggml.tokens", gguf::Value::StringArray(data.tokens));
  if (!data.token_types.empty()) {
    writer->Set("tokenizer.ggml.token_type", gguf::Value::I32Array(data.token_types));
  }
  writer->Set("tokenizer.ggml.merges", gguf::Value::StringArray(data.merges));
  if (data.bos_id) writer->SetU32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(*data.bos_id));
  if (data.eos_id) writer->SetU32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(*data.eos_id));
  if (data.pad_id) {
    writer->SetU32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(*data.pad_id));
  }
  if (data.eot_id) writer->SetU32("tokenizer.ggml.eot_token_id", static_cast<uint32_t>(*data.eot_id));
  writer->SetBool("tokenizer.ggml.add_bos_token", data.add_bos);
  if (!data.chat_template.empty()) writer->SetString("tokenizer.chat_template", data.chat_template);
}

}  // namespace minfer::tokenizer
