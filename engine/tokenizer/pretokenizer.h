// The Qwen2 and Llama 3 pre-tokenizers: split text into the pieces that
// byte-level BPE then encodes one by one, exactly as Hugging Face's
// tokenizers do with their split regexes (tokenizer.json, pre_tokenizer
// Split, behavior Isolated). Qwen2's:
//
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}
//   | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// Llama 3's (GGUF tokenizer.ggml.pre = llama-bpe) is the same pattern with
// numbers in runs of up to three digits, \p{N}{1,3}, instead of one:
// "12345" is "123" + "45".
//
// o200k's (gpt-4o and gpt-oss; tokenizer.ggml.pre = gpt-4o), with U =
// [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], L = [\p{Ll}\p{Lm}\p{Lo}\p{M}] and C =
// (?i:'s|'t|'re|'ve|'m|'ll|'d):
//
//   [^\r\n\p{L}\p{N}]?U*L+C?|[^\r\n\p{L}\p{N}]?U+L*C?|\p{N}{1,3}
//   | ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// (words split at case changes, contractions attached to the word before).
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

enum class PreTokenizer : uint8_t { kQwen2, kLlama3, kO200k };

// Reusable buffers for Split (keeps allocations out of the hot loop).
struct SplitScratch {
  std::vector<size_t> offsets;  // byte offset of each code point, plus the end
  std::vector<char32_t> cps;
  std::vector<uint8_t> classes;
};

// Splits `text` (valid UTF-8, already NFC-normalized as the tokenizer does)
// and appends the pieces, in order, to `out`. Empty text
// yields no pieces.
void SplitPieces(absl::string_view text, PreTokenizer kind, SplitScratch* scratch,
                 std::vector<PieceSpan>* out);
inline void SplitQwen2(absl::string_view text, SplitScratch* scratch,
                       std::vector<PieceSpan>* out) {
  SplitPieces(text, PreTokenizer::kQwen2, scratch, out);
}

// Convenience forms returning the pieces as strings (tests, tools).
std::vector<std::string> SplitPieces(absl::string_view text, PreTokenizer kind);
inline std::vector<std::string> SplitQwen2(absl::string_view text) {
  return SplitPieces(text, PreTokenizer::kQwen2);
}
inline std::vector<std::string> SplitLlama3(absl::string_view text) {
  return SplitPieces(text, PreTokenizer::kLlama3);
}

}  // namespace minfer::tokenizer

#endif  // MINFER_ENGINE_TOKENIZER_PRETOKENIZER_H_
