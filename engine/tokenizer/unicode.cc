#include "engine/tokenizer/unicode.h"

#include <array>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "unicode/bytestream.h"
#include "unicode/normalizer2.h"
#include "unicode/stringpiece.h"
#include "unicode/uchar.h"
#include "unicode/utypes.h"

namespace minfer::tokenizer {
namespace {

inline bool InRange(uint8_t b, uint8_t lo, uint8_t hi) { return b >= lo && b <= hi; }

uint8_t ComputeClass(UChar32 c) {
  uint8_t r = 0;
  const uint32_t mask = U_GET_GC_MASK(c);
  if (mask & U_GC_L_MASK) r |= kCharLetter;
  if (mask & U_GC_N_MASK) r |= kCharNumber;
  if (u_isUWhiteSpace(c)) r |= kCharWhitespace;
  if (c == '\r' || c == '\n') r |= kCharCrLf;
  if (mask & (U_GC_LU_MASK | U_GC_LT_MASK | U_GC_LM_MASK | U_GC_LO_MASK | U_GC_M_MASK)) {
    r |= kCharUpperWord;
  }
  if (mask & (U_GC_LL_MASK | U_GC_LM_MASK | U_GC_LO_MASK | U_GC_M_MASK)) r |= kCharLowerWord;
  return r;
}

// The BMP is queried constantly (every code point of every prompt); one byte
// per code point, filled from ICU once, keeps that to a single load.
const std::array<uint8_t, 0x10000>& BmpClasses() {
  static const auto* table = [] {
    auto* t = new std::array<uint8_t, 0x10000>();
    for (UChar32 c = 0; c < 0x10000; ++c) (*t)[c] = ComputeClass(c);
    return t;
  }();
  return *table;
}

struct NfcInstance {
  const icu::Normalizer2* normalizer = nullptr;
  UErrorCode error = U_ZERO_ERROR;
};

const NfcInstance& Nfc() {
  static const NfcInstance instance = [] {
    NfcInstance n;
    n.normalizer = icu::Normalizer2::getNFCInstance(n.error);
    return n;
  }();
  return instance;
}

bool IsAscii(absl::string_view s) {
  const char* p = s.data();
  size_t n = s.size();
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    if (w & 0x8080808080808080ULL) return false;
    p += 8;
    n -= 8;
  }
  for (; n > 0; --n, ++p) {
    if (static_cast<uint8_t>(*p) & 0x80) return false;
  }
  return true;
}

}  // namespace

Utf8Step DecodeUtf8(const char* p, const char* end) {
  const uint8_t b0 = static_cast<uint8_t>(p[0]);
  if (b0 < 0x80) return {Utf8Step::kValid, 1, b0};
  int need;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  char32_t cp;
  if (b0 < 0xC2) {
    return {Utf8Step::kInvalid, 1, 0};  // continuation byte or overlong lead
  } else if (b0 < 0xE0) {
    need = 2;
    cp = b0 & 0x1F;
  } else if (b0 < 0xF0) {
    need = 3;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;  // no overlongs
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 < 0xF5) {
    need = 4;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;  // no overlongs
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {Utf8Step::kInvalid, 1, 0};
  }
  for (int i = 1; i < need; ++i) {
    if (p + i >= end) return {Utf8Step::kIncomplete, static_cast<uint8_t>(i), 0};
    const uint8_t b = static_cast<uint8_t>(p[i]);
    if (i == 1 ? !InRange(b, lo, hi) : !InRange(b, 0x80, 0xBF)) {
      return {Utf8Step::kInvalid, static_cast<uint8_t>(i), 0};
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  return {Utf8Step::kValid, static_cast<uint8_t>(need), cp};
}

bool IsValidUtf8(absl::string_view s) {
  const char* p = s.data();
  const char* end = p + s.size();
  while (p < end) {
    if (static_cast<uint8_t>(*p) < 0x80) {
      ++p;
      continue;
    }
    const Utf8Step step = DecodeUtf8(p, end);
    if (step.kind != Utf8Step::kValid) return false;
    p += step.length;
  }
  return true;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t AppendUtf8Lossy(absl::string_view bytes, bool final, std::string* out) {
  const char* const begin = bytes.data();
  const char* const end = begin + bytes.size();
  const char* p = begin;
  const char* run = p;  // start of bytes that are copied through unchanged
  while (p < end) {
    if (static_cast<uint8_t>(*p) < 0x80) {
      ++p;
      continue;
    }
    const Utf8Step step = DecodeUtf8(p, end);
    if (step.kind == Utf8Step::kValid) {
      p += step.length;
      continue;
    }
    out->append(run, p - run);
    if (step.kind == Utf8Step::kIncomplete && !final) return p - begin;
    AppendUtf8(kReplacementChar, out);
    p += step.length;
    run = p;
  }
  out->append(run, p - run);
  return p - begin;
}

std::string ToValidUtf8(absl::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  AppendUtf8Lossy(s, /*final=*/true, &out);
  return out;
}

uint8_t ClassifyCodePoint(char32_t cp) {
  if (cp < 0x10000) return BmpClasses()[cp];
  if (cp > 0x10FFFF) return 0;
  return ComputeClass(static_cast<UChar32>(cp));
}

char32_t SimpleCaseFold(char32_t cp) {
  return static_cast<char32_t>(u_foldCase(static_cast<UChar32>(cp), U_FOLD_CASE_DEFAULT));
}

absl::Status CheckNfcAvailable() {
  const NfcInstance& nfc = Nfc();
  if (nfc.normalizer == nullptr || U_FAILURE(nfc.error)) {
    return absl::InternalError(absl::StrCat("ICU NFC normalizer unavailable: ",
                                            u_errorName(nfc.error)));
  }
  return absl::OkStatus();
}

void AppendNfc(absl::string_view utf8, std::string* out) {
  if (IsAscii(utf8)) {
    out->append(utf8.data(), utf8.size());
    return;
  }
  const NfcInstance& nfc = Nfc();
  if (nfc.normalizer == nullptr || U_FAILURE(nfc.error)) {
    // Tokenizer::Create checks availability, so this is unreachable there.
    out->append(utf8.data(), utf8.size());
    return;
  }
  const icu::StringPiece piece(utf8.data(), static_cast<int32_t>(utf8.size()));
  UErrorCode error = U_ZERO_ERROR;
  if (nfc.normalizer->isNormalizedUTF8(piece, error) && U_SUCCESS(error)) {
    out->append(utf8.data(), utf8.size());
    return;
  }
  const size_t mark = out->size();
  error = U_ZERO_ERROR;
  icu::StringByteSink<std::string> sink(out);
  nfc.normalizer->normalizeUTF8(0, piece, sink, nullptr, error);
  if (U_FAILURE(error)) {
    // Only allocation failures get here; keep the text as given.
    out->resize(mark);
    out->append(utf8.data(), utf8.size());
  }
}

std::string ToNfc(absl::string_view utf8) {
  std::string out;
  out.reserve(utf8.size());
  AppendNfc(utf8, &out);
  return out;
}

}  // namespace minfer::tokenizer
