#include "engine/tokenizer/unicode.h"

#include <string>

#include "engine/tokenizer/byte_level.h"
#include "gtest/gtest.h"

namespace minfer::tokenizer {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

std::string Rep(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += kFffd;
  return s;
}

TEST(Utf8Test, DecodesWellFormedSequences) {
  const std::string s = "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80";  // a é 中 😀
  const char* p = s.data();
  const char* end = p + s.size();
  const char32_t expected[] = {U'a', 0xE9, 0x4E2D, 0x1F600};
  for (char32_t cp : expected) {
    const Utf8Step step = DecodeUtf8(p, end);
    ASSERT_EQ(step.kind, Utf8Step::kValid);
    EXPECT_EQ(step.cp, cp);
    p += step.length;
  }
  EXPECT_EQ(p, end);
  EXPECT_TRUE(IsValidUtf8(s));
}

// Replacement follows the "maximal subpart" practice (Unicode §3.9, the
// WHATWG decoder): the cases are the standard's own examples and edges.
TEST(Utf8Test, ReplacesMaximalSubparts) {
  struct Case {
    std::string in, out;
  };
  const Case cases[] = {
      {"\xFF", Rep(1)},
      {"\x80\xBF", Rep(2)},                      // lone continuation bytes
      {"\xC0\xAF", Rep(2)},                      // overlong '/'
      {"\xE0\x80\xAF", Rep(3)},                  // overlong, 3 bytes
      {"\xED\xA0\x80", Rep(3)},                  // surrogate U+D800
      {"\xF4\x90\x80\x80", Rep(4)},              // above U+10FFFF
      {"\xF5\x80", Rep(2)},
      {"\xE4\xB8", Rep(1)},                      // truncated: one subpart
      {"\xF0\x9F\x98", Rep(1)},
      {"\xE4\xB8" "a", Rep(1) + "a"},
      {"\xE2\x82\x28", Rep(1) + "("},
      {"\xF0\x28\x8C\xBC", Rep(1) + "(" + Rep(2)},
      {"a\xFF" "b\xC3", "a" + Rep(1) + "b" + Rep(1)},
      {"\xEF\xBF\xBF", "\xEF\xBF\xBF"},          // U+FFFF is well-formed
      {"\xED\x9F\xBF", "\xED\x9F\xBF"},          // U+D7FF
      {"\xF4\x8F\xBF\xBF", "\xF4\x8F\xBF\xBF"},  // U+10FFFF
  };
  for (const Case& c : cases) {
    EXPECT_EQ(IsValidUtf8(c.in), c.in == c.out);
    EXPECT_EQ(ToValidUtf8(c.in), c.out) << "input bytes: " << c.in.size();
  }
}

TEST(Utf8Test, LossyAppendHoldsBackIncompleteTail) {
  std::string out;
  EXPECT_EQ(AppendUtf8Lossy("ab\xE4\xB8", /*final=*/false, &out), 2u);
  EXPECT_EQ(out, "ab");
  out.clear();
  EXPECT_EQ(AppendUtf8Lossy("\xFF\xE4", /*final=*/false, &out), 1u);
  EXPECT_EQ(out, kFffd);
  out.clear();
  EXPECT_EQ(AppendUtf8Lossy("\xE4\xB8", /*final=*/true, &out), 2u);
  EXPECT_EQ(out, kFffd);
}

TEST(UnicodeTest, ClassesComeFromIcu) {
  // Letters also carry o200k's word classes: lowercase (Ll) the lower one,
  // uppercase and titlecase (Lu, Lt) the upper one, Lm and Lo both.
  constexpr uint8_t kUpper = kCharUpperWord, kLower = kCharLowerWord;
  EXPECT_EQ(ClassifyCodePoint('a'), kCharLetter | kLower);
  EXPECT_EQ(ClassifyCodePoint('A'), kCharLetter | kUpper);
  EXPECT_EQ(ClassifyCodePoint(0x4E2D), kCharLetter | kUpper | kLower);  // 中 (Lo)
  EXPECT_EQ(ClassifyCodePoint(0x02B0), kCharLetter | kUpper | kLower);  // ʰ (Lm)
  EXPECT_EQ(ClassifyCodePoint(0x01C5), kCharLetter | kUpper);           // ǅ (Lt)
  EXPECT_EQ(ClassifyCodePoint('7'), kCharNumber);
  EXPECT_EQ(ClassifyCodePoint(0x0663), kCharNumber);   // Arabic-Indic 3 (Nd)
  EXPECT_EQ(ClassifyCodePoint(0x216B), kCharNumber);   // Ⅻ (Nl)
  EXPECT_EQ(ClassifyCodePoint(0x00BD), kCharNumber);   // ½ (No)
  EXPECT_EQ(ClassifyCodePoint(0x1D7D8), kCharNumber);  // 𝟘 (Nd, astral)
  EXPECT_EQ(ClassifyCodePoint(0x1D573), kCharLetter | kUpper);  // 𝕳 (Lu, astral)
  // A combining mark is no letter but belongs to both o200k word classes.
  EXPECT_EQ(ClassifyCodePoint(0x0301), kUpper | kLower);
  EXPECT_EQ(ClassifyCodePoint('\n'), kCharWhitespace | kCharCrLf);
  EXPECT_EQ(ClassifyCodePoint('\r'), kCharWhitespace | kCharCrLf);
  // White_Space, as Hugging Face's regex engines define \s.
  for (char32_t ws : {0x09, 0x0B, 0x0C, 0x20, 0x85, 0xA0, 0x1680, 0x2000, 0x200A, 0x2028, 0x2029,
                      0x202F, 0x205F, 0x3000}) {
    EXPECT_EQ(ClassifyCodePoint(ws), kCharWhitespace) << std::hex << static_cast<uint32_t>(ws);
  }
  // Not White_Space (though some are "spaces" elsewhere).
  for (char32_t other : {0x1C, 0x1F, 0x200B, 0xFEFF, 0x180E, 0xFFFD, 0x1F600, 0x110000}) {
    EXPECT_EQ(ClassifyCodePoint(other), 0) << std::hex << static_cast<uint32_t>(other);
  }
}

TEST(UnicodeTest, CaseFolding) {
  EXPECT_EQ(SimpleCaseFold('S'), U's');
  EXPECT_EQ(SimpleCaseFold(0x017F), U's');  // ſ
  EXPECT_EQ(SimpleCaseFold(0x212A), U'k');  // Kelvin sign
  EXPECT_EQ(SimpleCaseFold(0x00DF), 0xDFu);  // ß has only a full (two-letter) fold
}

TEST(UnicodeTest, Nfc) {
  ASSERT_TRUE(CheckNfcAvailable().ok());
  EXPECT_EQ(ToNfc("plain ascii"), "plain ascii");
  EXPECT_EQ(ToNfc("e\xCC\x81"), "\xC3\xA9");                         // e + U+0301 -> é
  EXPECT_EQ(ToNfc("\xE2\x84\xAB"), "\xC3\x85");                      // Å sign -> Å
  EXPECT_EQ(ToNfc("a\xCC\x82\xCC\xA3"), "\xE1\xBA\xAD");             // reordered -> ậ
  EXPECT_EQ(ToNfc("\xE1\x84\x80\xE1\x85\xA1"), "\xEA\xB0\x80");      // jamo -> 가
  EXPECT_EQ(ToNfc("\xEF\xAC\x81"), "\xEF\xAC\x81");                  // ﬁ: NFC keeps it
  EXPECT_EQ(ToNfc("\xC5\xBF"), "\xC5\xBF");                          // ſ: NFC keeps it
}

TEST(ByteLevelTest, Gpt2Alphabet) {
  EXPECT_EQ(ByteToUnicode('A'), U'A');
  EXPECT_EQ(ByteToUnicode(' '), 0x120u);   // Ġ
  EXPECT_EQ(ByteToUnicode('\n'), 0x10Au);  // Ċ
  EXPECT_EQ(ByteToUnicode(0), 0x100u);
  EXPECT_EQ(ByteToUnicode(0xAD), 0x143u);  // the soft hyphen is the last remapped byte
  EXPECT_EQ(ByteToUnicode(0xE9), 0xE9u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(UnicodeToByte(ByteToUnicode(b)), b);
  EXPECT_EQ(UnicodeToByte(' '), -1);
  EXPECT_EQ(UnicodeToByte(0x4E2D), -1);
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string back;
  ASSERT_TRUE(ByteLevelDecode(ByteLevelEncode(all), &back));
  EXPECT_EQ(back, all);
  EXPECT_FALSE(ByteLevelDecode("a b", &back));
}

}  // namespace
}  // namespace minfer::tokenizer
