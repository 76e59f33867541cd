// Unicode helpers for the tokenizer: strict UTF-8 decoding with U+FFFD
// replacement, the character classes the Qwen2 split pattern needs, and NFC
// normalization. All Unicode properties come from ICU (libicu), never from
// tables written by hand.
//
// Everything here is stateless and thread-safe.
#ifndef MINFER_ENGINE_TOKENIZER_UNICODE_H_
#define MINFER_ENGINE_TOKENIZER_UNICODE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace minfer::tokenizer {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Result of decoding one UTF-8 sequence at the front of a byte range.
struct Utf8Step {
  enum Kind : uint8_t {
    kValid,       // a well-formed sequence encoding `cp`
    kInvalid,     // a maximal ill-formed subpart: replace by one U+FFFD
    kIncomplete,  // a well-formed prefix cut short by the end of the range
  };
  Kind kind;
  uint8_t length;  // bytes consumed (1..4); for kIncomplete, the prefix length
  char32_t cp;     // the code point (kValid only)
};

// Decodes the sequence starting at `p` (requires p < end), following the
// Unicode standard's well-formedness table (§3.9, Table 3-7): no overlongs,
// no surrogates, nothing above U+10FFFF. An ill-formed sequence is split into
// "maximal subparts" exactly as the standard's recommended practice, the
// WHATWG Encoding spec, Python's errors="replace" and Rust's
// String::from_utf8_lossy do, so one U+FFFD replaces each subpart.
Utf8Step DecodeUtf8(const char* p, const char* end);

// Whether `s` is well-formed UTF-8.
bool IsValidUtf8(absl::string_view s);

// Appends `bytes` to `out` as UTF-8, replacing each maximal ill-formed
// subpart by U+FFFD. With `final` false a trailing incomplete-but-so-far-valid
// sequence is not consumed (a later chunk may complete it). Returns the number
// of bytes consumed (== bytes.size() when `final`).
size_t AppendUtf8Lossy(absl::string_view bytes, bool final, std::string* out);

// `s` with every ill-formed subpart replaced by U+FFFD.
std::string ToValidUtf8(absl::string_view s);

// Appends the UTF-8 encoding of `cp` (a Unicode scalar value) to `out`.
void AppendUtf8(char32_t cp, std::string* out);

// Character classes of the Qwen2 split pattern. A code point may be in
// several (CR and LF are also whitespace).
enum CharClass : uint8_t {
  kCharLetter = 1,      // \p{L}: general category Lu, Ll, Lt, Lm or Lo
  kCharNumber = 2,      // \p{N}: general category Nd, Nl or No
  kCharWhitespace = 4,  // \s: the Unicode White_Space property (what Hugging
                        // Face's Oniguruma and Rust regex engines use)
  kCharCrLf = 8,        // U+000D or U+000A
  // The o200k (gpt-4o) pattern's word classes:
  kCharUpperWord = 16,  // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
  kCharLowerWord = 32,  // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
};

// The CharClass bits of `cp` (ICU's data; BMP values are cached in a table
// built from ICU on first use).
uint8_t ClassifyCodePoint(char32_t cp);

// ICU's simple case folding of `cp` (e.g. U+017F LATIN SMALL LETTER LONG S
// folds to 's').
char32_t SimpleCaseFold(char32_t cp);

// OK when ICU's NFC data is usable (libicudata linked and loadable).
absl::Status CheckNfcAvailable();

// Appends the NFC normalization of `utf8` (which must be valid UTF-8) to
// `out`. ASCII and already-normalized text are copied without conversion.
void AppendNfc(absl::string_view utf8, std::string* out);
std::string ToNfc(absl::string_view utf8);

}  // namespace minfer::tokenizer

#endif  // MINFER_ENGINE_TOKENIZER_UNICODE_H_
