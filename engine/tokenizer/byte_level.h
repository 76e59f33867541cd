// GPT-2's byte-level alphabet ("bytes_to_unicode"): every byte value maps to
// one printable code point, so a byte string can be written as a vocabulary
// string. Printable Latin-1 bytes ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF)
// map to themselves; the other 68 bytes map, in increasing order, to U+0100,
// U+0101, ... (so ' ' is U+0120 'Ġ' and '\n' is U+010A 'Ċ').
#ifndef MINFER_ENGINE_TOKENIZER_BYTE_LEVEL_H_
#define MINFER_ENGINE_TOKENIZER_BYTE_LEVEL_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace minfer::tokenizer {

// The code point standing for byte `b`.
char32_t ByteToUnicode(uint8_t b);

// The byte a code point stands for, or -1 when `cp` is not in the alphabet.
int UnicodeToByte(char32_t cp);

// `bytes` written in the byte-level alphabet (UTF-8).
std::string ByteLevelEncode(absl::string_view bytes);

// Maps a vocabulary string back to the bytes it stands for. Returns false
// (and leaves `out` unspecified) when `token` is not valid UTF-8 or holds a
// code point outside the alphabet.
bool ByteLevelDecode(absl::string_view token, std::string* out);

}  // namespace minfer::tokenizer

#endif  // MINFER_ENGINE_TOKENIZER_BYTE_LEVEL_H_
