// Incremental detokenization for streaming generation: text comes out as
// tokens arrive, never half of a UTF-8 sequence.
//
// Bytes of a sequence that a later token may still complete (a well-formed
// prefix such as E4 B8 of U+4E2D) are held back; bytes that can no longer
// form a sequence become U+FFFD, one per maximal ill-formed subpart. The
// concatenation of every Push result and Finish() equals
// Tokenizer::Decode(all ids) with the same options.
//
// Not thread-safe (one per stream); the Tokenizer must outlive it.
#ifndef MINFER_ENGINE_TOKENIZER_STREAMING_DETOKENIZER_H_
#define MINFER_ENGINE_TOKENIZER_STREAMING_DETOKENIZER_H_

#include <string>

#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"

namespace minfer::tokenizer {

class StreamingDetokenizer {
 public:
  StreamingDetokenizer(const Tokenizer* tokenizer, DecodeOptions options = {})
      : tokenizer_(tokenizer), options_(options) {}

  // Adds `id`; returns the text it completes (possibly empty). An
  // out-of-range id is INVALID_ARGUMENT and leaves the state unchanged.
  absl::StatusOr<std::string> Push(TokenId id);

  // Ends the stream: returns what is held back (an incomplete sequence, as
  // U+FFFD) and resets, ready for a new stream.
  std::string Finish();

  // Bytes currently held back (0..3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  DecodeOptions options_;
  std::string pending_;
};

}  // namespace minfer::tokenizer

#endif  // MINFER_ENGINE_TOKENIZER_STREAMING_DETOKENIZER_H_
