#include "engine/tokenizer/streaming_detokenizer.h"

#include "engine/base/status.h"
#include "engine/tokenizer/unicode.h"

namespace minfer::tokenizer {

absl::StatusOr<std::string> StreamingDetokenizer::Push(TokenId id) {
  ASSIGN_OR_RETURN(const absl::string_view bytes, tokenizer_->TokenBytes(id, options_));
  pending_.append(bytes.data(), bytes.size());
  std::string out;
  const size_t consumed = AppendUtf8Lossy(pending_, /*final=*/false, &out);
  pending_.erase(0, consumed);
  return out;
}

std::string StreamingDetokenizer::Finish() {
  std::string out;
  AppendUtf8Lossy(pending_, /*final=*/true, &out);
  pending_.clear();
  return out;
}

}  // namespace minfer::tokenizer
