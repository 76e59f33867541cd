#include "engine/sampling/stop_matcher.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace minfer {
namespace {

std::unique_ptr<StopMatcher> Make(std::vector<std::string> stops) {
  auto m = StopMatcher::Create(std::move(stops));
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(m).value() : nullptr;
}

struct Outcome {
  std::string text;  // everything emitted, flush included
  bool stopped = false;
  int matched = -1;
};

Outcome FeedPieces(const std::vector<std::string>& stops,
                   const std::vector<std::string>& pieces) {
  auto m = Make(stops);
  Outcome out;
  for (const std::string& piece : pieces) {
    StopFeedResult r = m->Feed(piece);
    out.text += r.emit;
    if (r.stopped) {
      out.stopped = true;
      break;
    }
  }
  out.text += m->Flush();
  out.matched = m->matched_stop();
  return out;
}

std::vector<std::string> Bytes(const std::string& s) {
  std::vector<std::string> out;
  for (char c : s) out.emplace_back(1, c);
  return out;
}

TEST(StopMatcherTest, EmptyStopIsRejected) {
  const auto m = StopMatcher::Create({"ok", ""});
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("stop string 1"),
            absl::string_view::npos);
}

TEST(StopMatcherTest, NoStopsPassesThrough) {
  auto m = Make({});
  EXPECT_EQ(m->Feed("hello ").emit, "hello ");
  EXPECT_EQ(m->Feed("world").emit, "world");
  EXPECT_EQ(m->Flush(), "");
  EXPECT_FALSE(m->stopped());
}

TEST(StopMatcherTest, StopSplitAcrossManyFeeds) {
  auto m = Make({"</answer>"});
  EXPECT_EQ(m->Feed("The answer is 42").emit, "The answer is 42");
  const std::vector<std::string> pieces = {"<",  "/", "ans",      "w",
                                           "er", ">", " trailing"};
  const size_t held[] = {1, 2, 5, 6, 8};
  for (size_t i = 0; i < pieces.size(); ++i) {
    StopFeedResult r = m->Feed(pieces[i]);
    EXPECT_EQ(r.emit, "") << i;  // nothing of the stop string leaks
    EXPECT_EQ(r.stopped, i >= 5) << i;
    if (i < 5) {
      EXPECT_EQ(m->held_size(), held[i]) << i;
    }
  }
  EXPECT_TRUE(m->stopped());
  EXPECT_EQ(m->matched_stop(), 0);
  EXPECT_EQ(m->Flush(), "");
  // After a stop, nothing more comes out.
  StopFeedResult r = m->Feed("more");
  EXPECT_EQ(r.emit, "");
  EXPECT_TRUE(r.stopped);
}

TEST(StopMatcherTest, TextBeforeStopInSamePieceIsEmitted) {
  auto m = Make({"STOP"});
  EXPECT_EQ(m->Feed("abc ST").emit, "abc ");
  StopFeedResult r = m->Feed("OP def");
  EXPECT_EQ(r.emit, "");
  EXPECT_TRUE(r.stopped);
  auto n = Make({"STOP"});
  r = n->Feed("xyzSTOPabc");
  EXPECT_EQ(r.emit, "xyz");
  EXPECT_TRUE(r.stopped);
}

TEST(StopMatcherTest, OverlappingCandidates) {
  // A naive matcher that restarts after a mismatch misses "abac" in "ababac".
  EXPECT_EQ(FeedPieces({"abac"}, Bytes("xababacz")).text, "xab");
  EXPECT_TRUE(FeedPieces({"abac"}, Bytes("xababacz")).stopped);
  // Two stops sharing a prefix.
  Outcome o = FeedPieces({"abab", "abac"}, Bytes("xabac!"));
  EXPECT_EQ(o.text, "x");
  EXPECT_EQ(o.matched, 1);
  o = FeedPieces({"abab", "abac"}, Bytes("xababy"));
  EXPECT_EQ(o.text, "x");
  EXPECT_EQ(o.matched, 0);
  o = FeedPieces({"abab", "abac"}, Bytes("xabaxab"));
  EXPECT_EQ(o.text, "xabaxab");  // no match; held "ab" comes out at Flush
  EXPECT_FALSE(o.stopped);
  // While "aba" is pending both stops are possible, then "abab" completes.
  auto m = Make({"abab", "abac"});
  EXPECT_EQ(m->Feed("zab").emit, "z");
  EXPECT_EQ(m->Feed("a").emit, "");
  EXPECT_EQ(m->held_size(), 3u);
  StopFeedResult r = m->Feed("b");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "");
}

TEST(StopMatcherTest, HoldIsTheLongestPendingPrefixOnly) {
  auto m = Make({"abcab"});
  // "abca" ends in "a" and "abca": hold the longest, 4.
  EXPECT_EQ(m->Feed("xabca").emit, "x");
  EXPECT_EQ(m->held_size(), 4u);
  // "abcac": no suffix is a prefix any more.
  EXPECT_EQ(m->Feed("c").emit, "abcac");
  EXPECT_EQ(m->held_size(), 0u);
}

TEST(StopMatcherTest, MultipleStopsFirstCompletedWins) {
  // "cd" completes (at byte 4) before "abcdef" would (byte 6), so it stops
  // the stream, even though "abcdef" starts earlier.
  Outcome whole = FeedPieces({"abcdef", "cd"}, {"abcdefg"});
  EXPECT_EQ(whole.text, "ab");
  EXPECT_EQ(whole.matched, 1);
  Outcome bytes = FeedPieces({"abcdef", "cd"}, Bytes("abcdefg"));
  EXPECT_EQ(bytes.text, "ab");
  EXPECT_EQ(bytes.matched, 1);
  // Same end: the longer (earlier-starting) stop is reported.
  Outcome same_end = FeedPieces({"b", "ab"}, {"xab"});
  EXPECT_EQ(same_end.text, "x");
  EXPECT_EQ(same_end.matched, 1);
  // A stop that is a prefix of another fires first.
  Outcome prefix = FeedPieces({"abc", "ab"}, Bytes("zabc"));
  EXPECT_EQ(prefix.text, "z");
  EXPECT_EQ(prefix.matched, 1);
}

TEST(StopMatcherTest, StopAtTheVeryStart) {
  auto m = Make({"<|im_end|>"});
  StopFeedResult r = m->Feed("<|im_end|>tail");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "");
  EXPECT_EQ(FeedPieces({"<|im_end|>"}, Bytes("<|im_end|>")).text, "");
}

TEST(StopMatcherTest, NoFalseHoldsAtFlush) {
  auto m = Make({"abc"});
  EXPECT_EQ(m->Feed("ab").emit, "");
  EXPECT_EQ(m->Feed("x").emit, "abx");
  EXPECT_EQ(m->held_size(), 0u);
  EXPECT_EQ(m->Flush(), "");
  // What is held at the end comes out at Flush, exactly once.
  EXPECT_EQ(m->Feed("hello ab").emit, "hello ");
  EXPECT_EQ(m->Flush(), "ab");
  EXPECT_EQ(m->Flush(), "");
  EXPECT_FALSE(m->stopped());
}

TEST(StopMatcherTest, Utf8StopsAndText) {
  const std::string text = "你好。世界";  // 。 is E3 80 82
  Outcome o = FeedPieces({"。"}, Bytes(text));
  EXPECT_EQ(o.text, "你好");
  EXPECT_TRUE(o.stopped);
  o = FeedPieces({"終わり"}, {"答え", "は終", "わ", "り！"});
  EXPECT_EQ(o.text, "答えは");
  // Emoji stop split inside its 4 bytes, among other emoji.
  o = FeedPieces({"🛑"}, Bytes("ok 👍🛑 no"));
  EXPECT_EQ(o.text, "ok 👍");
}

TEST(StopMatcherTest, IncompleteUtf8IsHeldUntilComplete) {
  auto m = Make({});
  const std::string ni = "你";  // E4 BD A0
  EXPECT_EQ(m->Feed(ni.substr(0, 1)).emit, "");
  EXPECT_EQ(m->Feed(ni.substr(1, 1)).emit, "");
  EXPECT_EQ(m->held_size(), 2u);
  EXPECT_EQ(m->Feed(ni.substr(2) + "a").emit, ni + "a");
  // Malformed bytes are not held (waiting would not fix them).
  EXPECT_EQ(m->Feed("\xFF").emit, "\xFF");
  EXPECT_EQ(m->Feed("\x80").emit, "\x80");
  // A truncated character at the end of generation still comes out.
  EXPECT_EQ(m->Feed("\xF0\x9F").emit, "");
  EXPECT_EQ(m->Flush(), "\xF0\x9F");
}

TEST(StopMatcherTest, EveryEmittedPieceIsValidUtf8) {
  auto valid = [](const std::string& s) {
    size_t i = 0;
    while (i < s.size()) {
      const unsigned char c = s[i];
      const size_t len = c < 0x80         ? 1
                         : (c >> 5) == 6  ? 2
                         : (c >> 4) == 14 ? 3
                         : (c >> 3) == 30 ? 4
                                          : 0;
      if (len == 0 || i + len > s.size()) return false;
      for (size_t k = 1; k < len; ++k) {
        if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
      }
      i += len;
    }
    return true;
  };
  auto m = Make({"世界!", "éé"});
  const std::string text = "héllo wörld, 世界? é😀世 end";
  std::string all;
  for (char c : text) {
    StopFeedResult r = m->Feed(std::string(1, c));
    EXPECT_TRUE(valid(r.emit)) << r.emit;
    all += r.emit;
  }
  all += m->Flush();
  EXPECT_EQ(all, text);
}

// Reference: the first stop to complete in the whole text (earliest end,
// then earliest start); the output is everything before it.
Outcome Reference(const std::vector<std::string>& stops,
                  const std::string& text) {
  Outcome o{text, false, -1};
  size_t best_end = std::string::npos, best_pos = 0;
  for (size_t i = 0; i < stops.size(); ++i) {
    const size_t pos = text.find(stops[i]);
    if (pos == std::string::npos) continue;
    const size_t end = pos + stops[i].size();
    if (end < best_end || (end == best_end && pos < best_pos)) {
      best_end = end;
      best_pos = pos;
      o.matched = static_cast<int>(i);
    }
  }
  if (o.matched >= 0) {
    o.text = text.substr(0, best_pos);
    o.stopped = true;
  }
  return o;
}

// Longest suffix of `s` that is a proper prefix of some stop.
size_t ReferenceHold(const std::vector<std::string>& stops,
                     const std::string& s) {
  size_t best = 0;
  for (const std::string& stop : stops) {
    for (size_t len = 1; len < stop.size() && len <= s.size(); ++len) {
      if (s.compare(s.size() - len, len, stop, 0, len) == 0)
        best = std::max(best, len);
    }
  }
  return best;
}

TEST(StopMatcherTest, RandomSplitsAgreeWithReference) {
  std::mt19937 gen(2718);
  std::uniform_int_distribution<int> letter(0, 2);
  std::uniform_int_distribution<int> len(1, 4);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::string> stops(1 + trial % 3);
    for (std::string& s : stops) {
      const int n = len(gen);
      for (int i = 0; i < n; ++i) s += static_cast<char>('a' + letter(gen));
    }
    std::string text;
    const int n = 5 + trial % 30;
    for (int i = 0; i < n; ++i)
      text += static_cast<char>('a' + letter(gen) + (i % 7 == 6));
    // Random split points.
    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size();) {
      const size_t take = std::min<size_t>(text.size() - i, len(gen) - 1);
      pieces.push_back(text.substr(i, take));
      i += take;
    }
    const Outcome want = Reference(stops, text);
    for (const auto& split :
         {pieces, Bytes(text), std::vector<std::string>{text}}) {
      const Outcome got = FeedPieces(stops, split);
      ASSERT_EQ(got.text, want.text) << "trial " << trial << " text " << text;
      ASSERT_EQ(got.stopped, want.stopped) << trial;
      ASSERT_EQ(got.matched, want.matched) << trial;
    }
    // Nothing is held beyond the longest pending stop prefix.
    if (!want.stopped) {
      auto m = Make(stops);
      std::string fed;
      for (const std::string& piece : pieces) {
        m->Feed(piece);
        fed += piece;
        ASSERT_EQ(m->held_size(), ReferenceHold(stops, fed))
            << trial << " " << fed;
      }
    }
  }
}

}  // namespace
}  // namespace minfer
