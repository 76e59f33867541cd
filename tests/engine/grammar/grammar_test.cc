// GrammarBuilder: UTF-8 expansion of code point sets (checked against an
// independent encoder over every code point class boundary and random
// points), Build's refusals, and the reference recognizer on small grammars.
#include "engine/grammar/grammar.h"

#include <random>
#include <string>

#include "gtest/gtest.h"
#include "tests/engine/grammar/recognizer.h"

namespace minfer::grammar {
namespace {

using testing::Recognize;

std::string Utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

Grammar OneRule(GrammarBuilder& b, ExprId body) {
  RuleId root = b.AddRule("root", body);
  absl::StatusOr<Grammar> g = std::move(b).Build(root);
  EXPECT_TRUE(g.ok()) << g.status();
  return *std::move(g);
}

TEST(CodepointSetTest, MatchesExactlyTheSetOverBoundaries) {
  const std::vector<std::pair<uint32_t, uint32_t>> ranges = {
      {0x41, 0x5A}, {0xE9, 0xE9}, {0x7FF, 0x801}, {0x3040, 0x30FF}, {0xFFFD, 0x10010}};
  for (bool negated : {false, true}) {
    GrammarBuilder b;
    Grammar g = OneRule(b, b.CodepointSet(ranges, negated));
    auto in_set = [&](uint32_t cp) {
      bool in = false;
      for (auto [lo, hi] : ranges) in = in || (cp >= lo && cp <= hi);
      return negated ? !in : in;
    };
    std::vector<uint32_t> probes = {0,      0x40,   0x41,    0x5A,    0x5B,    0x7F,    0x80,
                                    0xE8,   0xE9,   0xEA,    0x7FE,   0x7FF,   0x800,   0x801,
                                    0x802,  0xFFF,  0x1000,  0x303F,  0x3040,  0x30FF,  0x3100,
                                    0xD7FF, 0xE000, 0xFFFC,  0xFFFD,  0xFFFF,  0x10000, 0x10010,
                                    0x10011, 0x3FFFF, 0x40000, 0x10FFFF};
    std::mt19937 rng(7);
    for (int i = 0; i < 2000; ++i) {
      uint32_t cp = rng() % 0x110000;
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      probes.push_back(cp);
    }
    for (uint32_t cp : probes) {
      EXPECT_EQ(Recognize(g, Utf8(cp)), in_set(cp)) << std::hex << cp << " negated " << negated;
    }
    // Never a surrogate encoding, never a truncated or overlong sequence.
    EXPECT_FALSE(Recognize(g, "\xED\xA0\x80"));
    EXPECT_FALSE(Recognize(g, "\xC1\x81"));
    EXPECT_FALSE(Recognize(g, Utf8(0x30A0).substr(0, 2)));
  }
}

TEST(BuildTest, RefusesUndefinedAndLeftRecursiveRules) {
  {
    GrammarBuilder b;
    RuleId x = b.Declare("x");
    RuleId root = b.AddRule("root", b.Seq({b.Literal("a"), b.Ref(x)}));
    absl::StatusOr<Grammar> g = std::move(b).Build(root);
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.status().message().find("undefined rule 'x'"), std::string::npos) << g.status();
  }
  {
    // expr ::= expr "+" term | term: left recursive.
    GrammarBuilder b;
    RuleId expr = b.Declare("expr");
    RuleId term = b.AddRule("term", b.ByteRange('0', '9'));
    b.Define(expr, b.Alt({b.Seq({b.Ref(expr), b.Literal("+"), b.Ref(term)}), b.Ref(term)}));
    absl::StatusOr<Grammar> g = std::move(b).Build(expr);
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.status().message().find("left recursion"), std::string::npos) << g.status();
  }
  {
    // Hidden behind a nullable prefix: a ::= "x"? a "y" | "z".
    GrammarBuilder b;
    RuleId a = b.Declare("a");
    b.Define(a, b.Alt({b.Seq({b.Optional(b.Literal("x")), b.Ref(a), b.Literal("y")}),
                       b.Literal("z")}));
    EXPECT_FALSE(std::move(b).Build(a).ok());
  }
  {
    // Right recursion is fine: list ::= item ("," list)?.
    GrammarBuilder b;
    RuleId list = b.Declare("list");
    b.Define(list, b.Seq({b.ByteRange('a', 'c'), b.Optional(b.Seq({b.Literal(","), b.Ref(list)}))}));
    absl::StatusOr<Grammar> g = std::move(b).Build(list);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_TRUE(Recognize(*g, "a,b,c"));
    EXPECT_FALSE(Recognize(*g, "a,b,"));
    EXPECT_FALSE(Recognize(*g, "ab"));
  }
}

TEST(BuildTest, LimitsAreEnforced) {
  GrammarLimits lim;
  lim.max_exprs = 50;
  GrammarBuilder b(lim);
  std::vector<ExprId> items;
  for (int i = 0; i < 100; ++i) items.push_back(b.Literal(std::string(1, 'a' + i % 26)));
  RuleId root = b.AddRule("root", b.Alt(items));
  absl::StatusOr<Grammar> g = std::move(b).Build(root);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("too large"), std::string::npos);

  GrammarBuilder b2;
  b2.Repeat(b2.Literal("a"), 0, 1 << 20);
  RuleId r2 = b2.AddRule("root", b2.Empty());
  EXPECT_FALSE(std::move(b2).Build(r2).ok());
}

TEST(RecognizerTest, RepetitionBounds) {
  GrammarBuilder b;
  Grammar g = OneRule(b, b.Seq({b.Repeat(b.Literal("ab"), 2, 3), b.Literal("!")}));
  EXPECT_FALSE(Recognize(g, "ab!"));
  EXPECT_TRUE(Recognize(g, "abab!"));
  EXPECT_TRUE(Recognize(g, "ababab!"));
  EXPECT_FALSE(Recognize(g, "abababab!"));
  EXPECT_TRUE(testing::IsViablePrefix(g, "aba"));
  EXPECT_FALSE(testing::IsViablePrefix(g, "abb"));
}

TEST(GrammarTest, ToStringIsCanonical) {
  GrammarBuilder b;
  RuleId d = b.AddRule("digit", b.ByteRange('0', '9'));
  Grammar g = OneRule(b, b.Seq({b.Literal("n\"="), b.Plus(b.Ref(d))}));
  EXPECT_EQ(g.ToString(), "digit ::= [0-9]\nroot ::= \"n\\\"=\" digit{1,}\n# root: root\n");
}

}  // namespace
}  // namespace minfer::grammar
