#include "engine/tokenizer/streaming_detokenizer.h"

#include <random>
#include <string>
#include <vector>

#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/unicode.h"
#include "gtest/gtest.h"
#include "tests/engine/tokenizer/test_util.h"

namespace minfer::tokenizer {
namespace {

using namespace ::minfer::tokenizer::testing;

const std::string kFffd = "\xEF\xBF\xBD";

std::unique_ptr<Tokenizer> Toy() {
  auto t = Tokenizer::Create(ToyData());
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

TokenId ByteId(const Tokenizer& tok, uint8_t b) {
  return *tok.FindToken(ByteLevelEncode(std::string(1, static_cast<char>(b))));
}

// Pushes `ids` one by one; returns each push's output.
std::vector<std::string> Stream(const Tokenizer& tok, const std::vector<TokenId>& ids,
                                DecodeOptions options = {}) {
  StreamingDetokenizer detok(&tok, options);
  std::vector<std::string> out;
  for (TokenId id : ids) {
    auto piece = detok.Push(id);
    EXPECT_TRUE(piece.ok()) << piece.status();
    out.push_back(piece.ok() ? *piece : "");
  }
  out.push_back(detok.Finish());
  return out;
}

TEST(StreamingDetokenizerTest, HoldsBackSplitCharacters) {
  auto tok = Toy();
  ASSERT_NE(tok, nullptr);
  // 中 = E4 B8 AD, one byte per token.
  const std::vector<TokenId> ids = {'a', ByteId(*tok, 0xE4), ByteId(*tok, 0xB8),
                                    ByteId(*tok, 0xAD), 'b'};
  EXPECT_EQ(Stream(*tok, ids), (std::vector<std::string>{"a", "", "", "\xE4\xB8\xAD", "b", ""}));
}

TEST(StreamingDetokenizerTest, InvalidSequencesBecomeReplacementCharacters) {
  auto tok = Toy();
  ASSERT_NE(tok, nullptr);
  const TokenId e4 = ByteId(*tok, 0xE4), ff = ByteId(*tok, 0xFF), b8 = ByteId(*tok, 0xB8);
  // A byte that can never start a sequence is replaced at once.
  EXPECT_EQ(Stream(*tok, {ff, 'a'}), (std::vector<std::string>{kFffd, "a", ""}));
  // A held prefix that the next byte does not continue: one U+FFFD, then it.
  EXPECT_EQ(Stream(*tok, {e4, b8, 'x'}), (std::vector<std::string>{"", "", kFffd + "x", ""}));
  // A prefix still held at the end is flushed as U+FFFD.
  EXPECT_EQ(Stream(*tok, {'a', e4, b8}), (std::vector<std::string>{"a", "", "", kFffd}));
  // A lone continuation byte.
  EXPECT_EQ(Stream(*tok, {b8}), (std::vector<std::string>{kFffd, ""}));
}

TEST(StreamingDetokenizerTest, SpecialTokens) {
  auto tok = Toy();
  ASSERT_NE(tok, nullptr);
  const TokenId e4 = ByteId(*tok, 0xE4), b8 = ByteId(*tok, 0xB8), ad = ByteId(*tok, 0xAD);
  // Rendered: a control token's text interrupts the pending sequence.
  EXPECT_EQ(Stream(*tok, {e4, kToyImEnd, b8}),
            (std::vector<std::string>{"", kFffd + "<|im_end|>", kFffd, ""}));
  // Skipped: as if it were not there, so the character completes.
  DecodeOptions skip;
  skip.skip_special = true;
  EXPECT_EQ(Stream(*tok, {e4, kToyImEnd, b8, ad}, skip),
            (std::vector<std::string>{"", "", "", "\xE4\xB8\xAD", ""}));
}

TEST(StreamingDetokenizerTest, OutOfRangeIdLeavesStateUnchanged) {
  auto tok = Toy();
  ASSERT_NE(tok, nullptr);
  StreamingDetokenizer detok(tok.get());
  EXPECT_EQ(*detok.Push(ByteId(*tok, 0xE4)), "");
  auto bad = detok.Push(tok->vocab_size());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(detok.pending_bytes(), 1u);
  EXPECT_EQ(*detok.Push(ByteId(*tok, 0xB8)), "");
  EXPECT_EQ(*detok.Push(ByteId(*tok, 0xAD)), "\xE4\xB8\xAD");
  EXPECT_EQ(detok.Finish(), "");
}

// Random byte streams: each push emits only valid UTF-8, and the whole
// equals the batch decode.
TEST(StreamingDetokenizerTest, MatchesBatchDecodeOnRandomBytes) {
  auto tok = Toy();
  ASSERT_NE(tok, nullptr);
  std::mt19937 rng(3);
  const uint8_t interesting[] = {0x41, 0x80, 0xBF, 0xC2, 0xC3, 0xA9, 0xE0, 0xA0, 0xE4, 0xB8,
                                 0xAD, 0xED, 0x9F, 0xF0, 0x9F, 0x98, 0x80, 0xF4, 0x8F, 0xFF};
  for (int round = 0; round < 2000; ++round) {
    std::vector<TokenId> ids;
    const int n = rng() % 12;
    for (int i = 0; i < n; ++i) ids.push_back(ByteId(*tok, interesting[rng() % 20]));
    std::string streamed;
    for (const std::string& piece : Stream(*tok, ids)) {
      EXPECT_TRUE(IsValidUtf8(piece));
      streamed += piece;
    }
    ASSERT_EQ(streamed, *tok->Decode(ids)) << "round " << round;
  }
}

// Real text through the real vocabulary: rare characters and emoji are
// split across byte-level tokens, so some pushes must emit nothing.
TEST(StreamingDetokenizerTest, QwenMultiByteCharactersSplitAcrossTokens) {
  const Tokenizer* tok = QwenTokenizer();
  ASSERT_NE(tok, nullptr);
  const std::string texts[] = {
      "Emoji: 👨‍👩‍👧‍👦 🏳️‍🌈 🇯🇵 👍🏽!",
      "CJK Ext B: 𠀋𠀍𠀎 and 𝕳𝖊𝖑𝖑𝖔",
      "混合 text with 한국어 and العربية and हिन्दी",
  };
  int held_back = 0;
  for (const std::string& text : texts) {
    const std::vector<TokenId> ids = tok->Encode(text);
    std::string streamed;
    const std::vector<std::string> pieces = Stream(*tok, ids);
    for (size_t i = 0; i < pieces.size(); ++i) {
      EXPECT_TRUE(IsValidUtf8(pieces[i])) << "piece " << i << " of " << Escape(text);
      if (i < ids.size() && pieces[i].empty()) ++held_back;
      streamed += pieces[i];
    }
    EXPECT_EQ(streamed, text);
    EXPECT_EQ(pieces.back(), "");  // nothing left at the end
  }
  EXPECT_GT(held_back, 5);
}

}  // namespace
}  // namespace minfer::tokenizer
