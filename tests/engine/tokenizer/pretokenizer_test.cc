#include "engine/tokenizer/pretokenizer.h"

#include <chrono>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace minfer::tokenizer {
namespace {

using Pieces = std::vector<std::string>;

// Expected splits worked out by hand from the regex's alternatives (see
// pretokenizer.h); the corpus test checks the same against Hugging Face.
TEST(Qwen2SplitTest, HandDerivedCases) {
  struct Case {
    std::string in;
    Pieces out;
  };
  const Case cases[] = {
      {"", {}},
      {"Hello world", {"Hello", " world"}},
      {"  hello", {" ", " hello"}},
      {"   ", {"   "}},
      {"   x", {"  ", " x"}},
      {"a  ", {"a", "  "}},
      {"a\n\nb", {"a", "\n\n", "b"}},
      {"x  \n  y", {"x", "  \n", " ", " y"}},
      {"a\r\n\r\nb", {"a", "\r\n\r\n", "b"}},
      {"\t\tx", {"\t", "\tx"}},
      // Contractions: case-insensitive, taken even when letters follow.
      {"I'LL", {"I", "'LL"}},
      {"they'Re", {"they", "'Re"}},
      {"'sun", {"'s", "un"}},
      {"'lx", {"'lx"}},  // not 'll: the letter rule takes it
      {"x'\xC5\xBFx", {"x", "'\xC5\xBF", "x"}},  // 'ſ folds to 's (Oniguruma)
      // Digits one at a time; letter runs with one leading non-letter.
      {"abc123", {"abc", "1", "2", "3"}},
      {"$abc", {"$abc"}},
      {"!!a", {"!!", "a"}},
      {" ...", {" ..."}},
      {"...\n\n", {"...\n\n"}},
      {"a.\nb", {"a", ".\n", "b"}},
      {"hello\xC2\xA0world", {"hello", "\xC2\xA0world"}},   // NBSP is \s but not CR/LF
      {"\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87",  // नमस्ते
       {"\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8", "\xE0\xA5\x8D\xE0\xA4\xA4",
        "\xE0\xA5\x87"}},
      {"\n\xE4\xBD\xA0", {"\n", "\xE4\xBD\xA0"}},  // newline cannot lead a letter run
      {" \n x", {" \n", " x"}},
      {"x\xE2\x80\xA8y", {"x", "\xE2\x80\xA8y"}},  // U+2028 is \s, not CR/LF
  };
  for (const Case& c : cases) {
    EXPECT_EQ(SplitQwen2(c.in), c.out) << "input: " << c.in;
  }
}

// Llama 3's split differs only in numbers: runs of up to three digits
// (\p{N}{1,3}, greedy), any Unicode number included.
TEST(Llama3SplitTest, NumbersInRunsOfThree) {
  struct Case {
    std::string in;
    Pieces out;
  };
  const Case cases[] = {
      {"", {}},
      {"1", {"1"}},
      {"12", {"12"}},
      {"123", {"123"}},
      {"1234567", {"123", "456", "7"}},
      {"abc123", {"abc", "123"}},
      {" 12345 x", {" ", "123", "45", " x"}},
      {"3.14159", {"3", ".", "141", "59"}},
      {"\xD9\xA1\xD9\xA2\xD9\xA3\xD9\xA4", {"\xD9\xA1\xD9\xA2\xD9\xA3", "\xD9\xA4"}},  // Arabic-Indic 1234
      // Everything else as Qwen2's.
      {"I'LL", {"I", "'LL"}},
      {"Hello world", {"Hello", " world"}},
      {"x  \n  y", {"x", "  \n", " ", " y"}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(SplitLlama3(c.in), c.out) << "input: " << c.in;
  }
  EXPECT_EQ(SplitQwen2("1234"), (Pieces{"1", "2", "3", "4"}));
}

TEST(Qwen2SplitTest, PiecesTileTheInput) {
  const std::string s = "Mixed: 中文, English123 'S   \n\n\t end!! \xF0\x9F\x98\x80\xF0\x9F\x98\x80 ";
  std::string joined;
  for (const std::string& p : SplitQwen2(s)) {
    EXPECT_FALSE(p.empty());
    joined += p;
  }
  EXPECT_EQ(joined, s);
}

TEST(Qwen2SplitTest, LinearOnLongRuns) {
  SplitScratch scratch;
  std::vector<PieceSpan> spans;
  for (const char c : {'a', ' ', '!', '\n'}) {
    const std::string s(1 << 20, c);
    const auto start = std::chrono::steady_clock::now();
    spans.clear();
    SplitQwen2(s, &scratch, &spans);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_EQ(spans.size(), 1u) << "char " << int(c);
    EXPECT_LT(secs, 1.0);
  }
  // Alternating space/letter: many pieces, each found in O(length).
  std::string s;
  for (int i = 0; i < 100000; ++i) s += "  a";
  spans.clear();
  SplitQwen2(s, &scratch, &spans);
  EXPECT_EQ(spans.size(), 200000u);
}

}  // namespace
}  // namespace minfer::tokenizer
