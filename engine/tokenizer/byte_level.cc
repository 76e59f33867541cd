#include "engine/tokenizer/byte_level.h"

#include <array>

#include "engine/tokenizer/unicode.h"

namespace minfer::tokenizer {
namespace {

struct Tables {
  std::array<char32_t, 256> to_unicode;
  std::array<int16_t, 324> to_byte;  // the alphabet lies below U+0144

  Tables() {
    to_byte.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_unicode[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(next++);
      to_byte[to_unicode[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& GetTables() {
  static const Tables* tables = new Tables();
  return *tables;
}

}  // namespace

char32_t ByteToUnicode(uint8_t b) { return GetTables().to_unicode[b]; }

int UnicodeToByte(char32_t cp) {
  const auto& t = GetTables().to_byte;
  return cp < t.size() ? t[cp] : -1;
}

std::string ByteLevelEncode(absl::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) AppendUtf8(ByteToUnicode(static_cast<uint8_t>(c)), &out);
  return out;
}

bool ByteLevelDecode(absl::string_view token, std::string* out) {
  const char* p = token.data();
  const char* const end = p + token.size();
  while (p < end) {
    const Utf8Step step = DecodeUtf8(p, end);
    if (step.kind != Utf8Step::kValid) return false;
    const int b = UnicodeToByte(step.cp);
    if (b < 0) return false;
    out->push_back(static_cast<char>(b));
    p += step.length;
  }
  return true;
}

}  // namespace minfer::tokenizer
