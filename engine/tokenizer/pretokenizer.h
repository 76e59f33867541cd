// The Qwen2 pre-tokenizer: splits text into the pieces that byte-level BPE
// then encodes one by one, exactly as Hugging Face's Qwen2 tokenizer does with
// its split regex (tokenizer.json, pre_tokenizer Split, behavior Isolated):
//
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}
//   | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// implemented as a hand-written scanner over code points (no regex engine):
// at each position the first alternative that matches wins, with the
// backtracking behaviour of a leftmost-first engine worked out per
// alternative in pretokenizer.cc. Semantics follow Hugging Face's Rust
// tokenizer (Oniguruma): \s is Unicode White_Space, \p{L}/\p{N} are general
// categories, and (?i:...) uses Unicode simple case folding (so "'ſ" is a
// contraction, as U+017F folds to 's'). The pattern matches every code point,
// so the pieces tile the input with no gaps. Linear time.
//
// Stateless and thread-safe.
#ifndef MINFER_ENGINE_TOKENIZER_PRETOKENIZER_H_
#define MINFER_ENGINE_TOKENIZER_PRETOKENIZER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace minfer::tokenizer {

// A piece of the input, as byte offsets [begin, end).
struct PieceSpan {
  size_t begin;
  size_t end;
};

// Reusable buffers for SplitQwen2 (keeps allocations out of the hot loop).
struct SplitScratch {
  std::vector<size_t> offsets;  // byte offset of each code point, plus the end
  std::vector<char32_t> cps;
  std::vector<uint8_t> classes;
};

// Splits `text` (valid UTF-8, already NFC-normalized as the tokenizer does)
// and appends the pieces, in order, to `out`. Empty text
// yields no pieces.
void SplitQwen2(absl::string_view text, SplitScratch* scratch, std::vector<PieceSpan>* out);

// Convenience form returning the pieces as strings (tests, tools).
std::vector<std::string> SplitQwen2(absl::string_view text);

}  // namespace minfer::tokenizer

#endif  // MINFER_ENGINE_TOKENIZER_PRETOKENIZER_H_
