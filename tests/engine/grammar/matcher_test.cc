// GrammarMatcher against the reference recognizer (recognizer.h): at every
// step of random walks over several grammars, the bitmask must allow exactly
// the tokens t for which (bytes so far + t) is a viable prefix of the
// language, and the end tokens exactly when the bytes so far are in it.
// Also rollback, jump-forward, completion and termination, and the class
// cache shared between grammars.
#include "engine/grammar/matcher.h"

#include <random>
#include <string>
#include <vector>

#include "engine/grammar/json_schema.h"
#include "gtest/gtest.h"
#include "tests/engine/grammar/recognizer.h"

namespace minfer::grammar {
namespace {

using testing::IsViablePrefix;
using testing::Recognize;

// A vocabulary of single bytes (printable ASCII), every 2- and 3-byte string
// over a small alphabet, the UTF-8 encodings of some Greek letters split
// into fragments, and a few longer words. Id 0 is the end token; id 1 an
// empty (control) token.
std::shared_ptr<const Vocabulary> TestVocab() {
  std::vector<std::string> toks = {"", ""};
  for (int c = 0x20; c < 0x7f; ++c) toks.push_back(std::string(1, static_cast<char>(c)));
  const std::string alpha = "ab(),\"{}:0x1 ";
  for (char a : alpha) {
    for (char b : alpha) {
      toks.push_back(std::string{a, b});
      for (char c : std::string("ab\")}")) toks.push_back(std::string{a, b, c});
    }
  }
  for (const char* w : {"cat", "car", "dog", "do", "ca", "\"a\":", "\"b\":", "\":", "\",",
                        "\"}", "abab", "ababab", "\xCE\xB1", "\xCE\xB2", "\xCE", "\xB1",
                        "\xCF\x89", "\xCE\xB1!", "!", "yx", "yyx", "catdog", "\n", "  ",
                        " #\r\n", "a\n", "\t", "\t\t", "\"\t", ",\"", "\\n", "\\"}) {
    toks.push_back(w);
  }
  // All-plain subtrees of four nodes and more (Trie::plain_height), beside
  // prefixes that continue with a quote, an escape or UTF-8: the walk
  // accepts the former in one step where the position allows.
  for (const char* w : {"kl", "klm", "klmn", "klmo", "klmnop", "klmnopqrstuv", "kq", "kqr", "kqrs",
                        "kqrst", "kqr\"", "kqrs\xCE\xB1", "kqrs\\n"}) {
    toks.push_back(w);
  }
  // Plain subtrees with multi-byte UTF-8 (α, ω, € and U+1F600), cut inside
  // a character too, beside ill-formed sequences (an overlong form, a
  // surrogate, a lone continuation byte) that no plain subtree may hold.
  for (const char* w :
       {"\xCE\xB1\xCE\xB1", "\xCE\xB1\xCE\xB1\xCF\x89", "\xCE\xB1\xCE\xB1\xCE", "\xCE\xB1\xCE\xB1a",
        "\xCE\xB1\xCE\xB1\xCF\x89\xCF\x89", "w\xE2\x82\xAC", "w\xE2\x82\xACw", "w\xE2\x82", "w\xE2",
        "w\xE2\x82\xAC\xE2\x82\xAC", "w\xF0\x9F\x98\x80", "w\xF0\x9F", "w\xF0\x9F\x98\x80!",
        "v\xE2\x82\xAC", "v\xE2\x82\xACv", "v\xC0\x80", "v\xED\xA0\x80", "v\xB1", "vv",
        "\xE2\x82\xAC\xCE\xB1", "\xE2\x82\xAC\xCE\xB1\xCE\xB1", "\xE2\x82\xAC\xCE",
        // continuations, so that a walk cut inside a character can go on
        "\x82\xAC", "\xAC", "\x9F\x98\x80", "\x98\x80"}) {
    toks.push_back(w);
  }
  // Two first bytes with subtrees of 64 trie nodes and more, which
  // Classify records per state and replays at later positions
  // (Automata::subtree_memo): "q" and '"' followed by every pair over an
  // alphabet of key characters and JSON punctuation.
  const std::string keyish = "abq\":,{}";
  for (char lead : std::string("q\"")) {
    for (char x : keyish) {
      toks.push_back(std::string{lead, x});
      for (char y : keyish) toks.push_back(std::string{lead, x, y});
    }
  }
  return Vocabulary::Create(toks, {0}, static_cast<int32_t>(toks.size()) + 7);
}

struct Case {
  std::string name;
  Grammar grammar;
  int walks = 12;  // random walks checked against the reference
};

Grammar Must(absl::StatusOr<Grammar> g) {
  EXPECT_TRUE(g.ok()) << g.status();
  return *std::move(g);
}

std::vector<Case> Cases() {
  std::vector<Case> out;
  {  // {"a":<digits>,"b":"<ab>*"} with optional "b" and optional spaces
    GrammarBuilder b;
    RuleId ws = b.AddRule("ws", b.Repeat(b.Byte(' '), 0, 2));
    RuleId num = b.AddRule("num", b.Plus(b.ByteRange('0', '1')));
    RuleId str = b.AddRule("str", b.Seq({b.Byte('"'), b.Star(b.ByteRange('a', 'b')), b.Byte('"')}));
    RuleId root = b.AddRule(
        "root", b.Seq({b.Literal("{"), b.Ref(ws), b.Literal("\"a\":"), b.Ref(ws), b.Ref(num),
                       b.Optional(b.Seq({b.Literal(","), b.Ref(ws), b.Literal("\"b\":"), b.Ref(ws),
                                         b.Ref(str)})),
                       b.Ref(ws), b.Literal("}")}));
    out.push_back({"object", Must(std::move(b).Build(root))});
  }
  {  // s ::= "(" s* ")" | [ab]+
    GrammarBuilder b;
    RuleId s = b.Declare("s");
    b.Define(s, b.Alt({b.Seq({b.Literal("("), b.Star(b.Ref(s)), b.Literal(")")}),
                       b.Plus(b.ByteRange('a', 'b'))}));
    out.push_back({"parens", Must(std::move(b).Build(s))});
  }
  {
    GrammarBuilder b;
    RuleId r = b.AddRule("root", b.Alt({b.Literal("cat"), b.Literal("car"), b.Literal("dog"),
                                        b.Literal("do"), b.Literal("catdog")}));
    out.push_back({"words", Must(std::move(b).Build(r))});
  }
  {  // [α-ω]+ "!"
    GrammarBuilder b;
    RuleId r = b.AddRule("root", b.Seq({b.Plus(b.CodepointSet({{0x3B1, 0x3C9}})), b.Literal("!")}));
    out.push_back({"greek", Must(std::move(b).Build(r))});
  }
  {  // ("ab"){2,4} [01]{1,3}
    GrammarBuilder b;
    RuleId r = b.AddRule("root", b.Seq({b.Repeat(b.Literal("ab"), 2, 4),
                                        b.Repeat(b.ByteRange('0', '1'), 1, 3)}));
    out.push_back({"bounded", Must(std::move(b).Build(r))});
  }
  {  // a ::= b* "x"; b ::= "y"? (a nullable rule under a star)
    GrammarBuilder b;
    RuleId bb = b.AddRule("b", b.Optional(b.Literal("y")));
    RuleId a = b.AddRule("a", b.Seq({b.Star(b.Ref(bb)), b.Literal("x")}));
    out.push_back({"nullable", Must(std::move(b).Build(a))});
  }
  {  // list ::= item ("," item)*; item ::= "a" | "(" list ")"
    GrammarBuilder b;
    RuleId list = b.Declare("list");
    RuleId item = b.AddRule("item", b.Alt({b.Literal("a"), b.Seq({b.Literal("("), b.Ref(list),
                                                                 b.Literal(")")})}));
    b.Define(list, b.Seq({b.Ref(item), b.Star(b.Seq({b.Literal(","), b.Ref(item)}))}));
    out.push_back({"nested-list", Must(std::move(b).Build(list))});
  }
  {  // JSON-ish: strings exclude raw control characters
    GrammarBuilder b;
    RuleId ws = b.AddRule("ws", b.Repeat(b.ByteRange('\t', '\t'), 0, 3));
    ExprId esc = b.Seq({b.Literal("\\"), b.Bytes([] {
                          ByteSet s;
                          s.set('n');
                          s.set('"');
                          s.set('\\');
                          return s;
                        }())});
    RuleId chr = b.AddRule(
        "char", b.Alt({b.CodepointSet({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, true), esc}));
    RuleId str = b.AddRule("string", b.Seq({b.Literal("\""), b.Star(b.Ref(chr)), b.Literal("\"")}));
    RuleId member = b.AddRule("member", b.Seq({b.Ref(ws), b.Ref(str), b.Literal(":"), b.Ref(str)}));
    RuleId root = b.AddRule(
        "root", b.Seq({b.Ref(ws), b.Literal("{"),
                       b.Optional(b.Seq({b.Ref(member), b.Star(b.Seq({b.Literal(","), b.Ref(member)}))})),
                       b.Literal("}")}));
    out.push_back({"json-strings", Must(std::move(b).Build(root))});
  }
  {  // An object whose keys other than "qa", "qab" and "b" are additional:
     // the additional key's exclusion trie puts one position per character
     // of the names, whose walks share their subtrees (subtree_memo).
    JsonOptions o;
    o.closed_objects = false;
    o.max_whitespace = 0;
    out.push_back({"open-object", Must(JsonSchemaToGrammar(
                                      R"({"type": "object", "properties": {"qa": {"type": "string"},
                                      "qab": {"type": "integer"}, "b": {"enum": ["q", "qq"]}},
                                      "additionalProperties": {"type": "boolean"}})",
                                      o)),
                   /*walks=*/4});
  }
  {  // one to three strings of at most 7 characters: a bounded body's
     // positions differ by how many characters are left
    GrammarBuilder b;
    RuleId chr = b.AddRule("char", b.CodepointSet({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, true));
    RuleId str = b.AddRule("short", b.Seq({b.Literal("\""), b.Repeat(b.Ref(chr), 0, 7), b.Literal("\"")}));
    RuleId root = b.AddRule("root", b.Repeat(b.Ref(str), 1, 3));
    out.push_back({"bounded-strings", Must(std::move(b).Build(root))});
  }
  return out;
}

bool Bit(const std::vector<uint32_t>& m, int32_t id) { return (m[id / 32] >> (id % 32)) & 1; }

// The mask the reference recognizer implies after `prefix`.
std::vector<uint32_t> ReferenceMask(const Grammar& g, const Vocabulary& v,
                                    const std::string& prefix) {
  std::vector<uint32_t> m(v.mask_words(), 0);
  for (int32_t id = 0; id < v.size(); ++id) {
    bool ok;
    if (v.is_stop(id)) {
      ok = Recognize(g, prefix);
    } else if (v.token(id).empty()) {
      ok = false;
    } else {
      ok = IsViablePrefix(g, prefix + std::string(v.token(id)));
    }
    if (ok) m[id / 32] |= 1u << (id % 32);
  }
  return m;
}

TEST(MatcherTest, MasksEqualTheReferenceOnRandomWalks) {
  auto vocab = TestVocab();
  GrammarCompiler compiler(vocab);
  std::mt19937 rng(42);
  for (Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    Grammar ref = c.grammar;
    auto cg = compiler.CompileGrammar(std::move(c.grammar), GrammarKind::kGbnf);
    ASSERT_TRUE(cg.ok()) << cg.status();
    int completed = 0;
    for (int walk = 0; walk < c.walks; ++walk) {
      GrammarMatcher m(*cg);
      std::string text;
      std::vector<uint32_t> mask(vocab->mask_words());
      for (int step = 0; step < 40; ++step) {
        m.FillNextTokenBitmask(mask.data());
        std::vector<uint32_t> want = ReferenceMask(ref, *vocab, text);
        for (int32_t id = 0; id < vocab->n_rows(); ++id) {
          ASSERT_EQ(Bit(mask, id), id < vocab->size() && Bit(want, id))
              << "token " << id << " '" << (id < vocab->size() ? vocab->token(id) : "")
              << "' after '" << text << "'";
        }
        EXPECT_EQ(m.IsComplete(), Recognize(ref, text)) << text;
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < vocab->size(); ++id) {
          if (Bit(mask, id)) allowed.push_back(id);
        }
        ASSERT_FALSE(allowed.empty()) << "dead end after '" << text << "'";
        // Prefer text over the end token, so walks get long.
        int32_t pick = allowed[rng() % allowed.size()];
        if (pick == 0 && allowed.size() > 1 && rng() % 4 != 0) pick = allowed[1];
        EXPECT_TRUE(m.IsTokenAllowed(pick));
        ASSERT_TRUE(m.AcceptToken(pick).ok());
        if (pick == 0) {
          EXPECT_TRUE(m.IsTerminated());
          completed++;
          break;
        }
        text += std::string(vocab->token(pick));
      }
    }
    EXPECT_GT(completed, 0);
    if (c.name == "open-object") EXPECT_GT((*cg)->subtree_walks_replayed(), 0);
  }
}

TEST(MatcherTest, RefusesDisallowedTokensAndRollsBack) {
  auto vocab = TestVocab();
  GrammarCompiler compiler(vocab);
  auto cg = compiler.CompileGrammar(Cases()[2].grammar, GrammarKind::kChoice);  // words
  ASSERT_TRUE(cg.ok());
  GrammarMatcher m(*cg);
  auto id_of = [&](absl::string_view s) {
    for (int32_t id = 0; id < vocab->size(); ++id) {
      if (vocab->token(id) == s) return id;
    }
    return -1;
  };
  EXPECT_FALSE(m.AcceptToken(id_of("x")).ok());
  EXPECT_FALSE(m.AcceptToken(0).ok()) << "end before complete";
  ASSERT_TRUE(m.AcceptToken(id_of("ca")).ok());
  EXPECT_FALSE(m.IsComplete());
  ASSERT_TRUE(m.AcceptToken(id_of("t")).ok());
  EXPECT_TRUE(m.IsComplete());
  EXPECT_FALSE(m.IsTerminated()) << "catdog may follow";
  EXPECT_EQ(m.JumpForward(), "") << "the grammar may end here";
  ASSERT_TRUE(m.AcceptToken(id_of("d")).ok());
  EXPECT_EQ(m.JumpForward(), "og");
  EXPECT_EQ(m.steps(), 3);
  m.Rollback(2);
  EXPECT_EQ(m.steps(), 1);
  EXPECT_FALSE(m.IsComplete());
  // After "ca": "r" or "t" only.
  std::vector<uint32_t> mask(vocab->mask_words());
  m.FillNextTokenBitmask(mask.data());
  std::vector<std::string> allowed;
  for (int32_t id = 0; id < vocab->size(); ++id) {
    if (Bit(mask, id)) allowed.push_back(std::string(vocab->token(id)));
  }
  EXPECT_EQ(allowed, (std::vector<std::string>{"r", "t"}));
  ASSERT_TRUE(m.AcceptToken(id_of("r")).ok());
  EXPECT_TRUE(m.IsTerminated()) << "nothing can follow 'car'";
  ASSERT_TRUE(m.AcceptToken(0).ok());
  EXPECT_TRUE(m.IsTerminated());
  EXPECT_FALSE(m.AcceptToken(id_of("a")).ok());
  m.FillNextTokenBitmask(mask.data());
  EXPECT_TRUE(Bit(mask, 0));
  for (int32_t id = 1; id < vocab->size(); ++id) EXPECT_FALSE(Bit(mask, id));
}

TEST(MatcherTest, JumpForwardIsTheForcedPrefix) {
  auto vocab = TestVocab();
  GrammarCompiler compiler(vocab);
  Grammar ref = Cases()[0].grammar;  // object
  auto cg = compiler.CompileGrammar(ref, GrammarKind::kGbnf);
  ASSERT_TRUE(cg.ok());
  GrammarMatcher m(*cg);
  EXPECT_EQ(m.JumpForward(), "{");
  ASSERT_TRUE(m.AcceptBytes("{"));
  EXPECT_EQ(m.JumpForward(), "") << "a space or the key";
  ASSERT_TRUE(m.AcceptBytes("\""));
  EXPECT_EQ(m.JumpForward(), "a\":");
  EXPECT_FALSE(m.AcceptBytes("b"));
  EXPECT_TRUE(m.AcceptBytes("a\":1"));
  EXPECT_FALSE(m.IsComplete());
  EXPECT_TRUE(m.AcceptBytes("}"));
  EXPECT_TRUE(m.IsComplete());
  EXPECT_TRUE(m.IsTerminated());
}

TEST(MatcherTest, IdenticalPositionsShareClassesAcrossGrammars) {
  auto vocab = TestVocab();
  GrammarCompiler compiler(vocab);
  // Classes are computed up front only for wide rules and otherwise on a
  // position's first mask, so each compiled grammar is walked through the same
  // positions: the second walk must find every class the first one made.
  std::vector<uint32_t> mask(vocab->mask_words());
  auto walk = [&] {
    auto cg = compiler.CompileGrammar(Cases()[1].grammar, GrammarKind::kGbnf);
    ASSERT_TRUE(cg.ok());
    GrammarMatcher m(*cg);
    for (const char* step : {"(", "(", "a", ")"}) {
      m.FillNextTokenBitmask(mask.data());
      ASSERT_TRUE(m.AcceptBytes(step)) << step;
    }
    m.FillNextTokenBitmask(mask.data());
  };
  walk();
  const CompilerStats before = compiler.stats();
  EXPECT_GT(before.position_classes, 0);
  walk();
  const CompilerStats after = compiler.stats();
  EXPECT_EQ(after.position_classes, before.position_classes);
  EXPECT_GT(after.position_hits, before.position_hits);
}

// Plain text decoded character by character (the reference for
// Trie::plain_height): printable ASCII but '"' and '\\', or a well-formed
// multi-byte character (no overlong form, surrogate or code point past
// U+10FFFF); the last character may be cut short if some continuation
// completes it.
bool IsPlainText(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7F || c == '"' || c == '\\') return false;
      ++i;
      continue;
    }
    int n;
    uint32_t cp;
    if (c >= 0xC0 && c <= 0xDF) {
      n = 1, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2, cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF7) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    auto well_formed = [&](uint32_t v) {
      const uint32_t lo[] = {0, 0x80, 0x800, 0x10000};
      return v >= lo[n] && v <= 0x10FFFF && !(v >= 0xD800 && v <= 0xDFFF);
    };
    const size_t have = std::min<size_t>(n, s.size() - i - 1);
    for (size_t j = 1; j <= have; ++j) {
      const uint8_t x = static_cast<uint8_t>(s[i + j]);
      if ((x & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (x & 0x3F);
    }
    if (have == static_cast<size_t>(n)) {
      if (!well_formed(cp)) return false;
      i += n + 1;
      continue;
    }
    // Cut short: some completion must be well formed.
    bool any = false;
    for (uint32_t x = 0x80; x <= 0xBF && !any; ++x) {
      uint32_t v = (cp << 6) | (x & 0x3F);
      for (size_t j = have + 1; j < static_cast<size_t>(n); ++j) v <<= 6;
      any = well_formed(v);
    }
    return any;
  }
  return true;
}

TEST(MatcherTest, PlainHeightsMatchADecoder) {
  auto vocab = TestVocab();
  const Vocabulary::Trie& tr = vocab->trie();
  const int32_t nodes = static_cast<int32_t>(tr.byte.size());
  const int32_t ranks = static_cast<int32_t>(vocab->sorted().size());
  int plain_multibyte = 0;
  for (int32_t k = 0; k < nodes; ++k) {
    // The subtree's tokens, read from k's byte on.
    const int32_t r0 = tr.first[k], r1 = tr.end[k] < nodes ? tr.first[tr.end[k]] : ranks;
    bool plain = true;
    int32_t height = 0;
    for (int32_t r = r0; r < r1; ++r) {
      const std::string t(vocab->token(vocab->sorted()[r]));
      const std::string rest = t.substr(tr.depth[k] - 1);
      plain = plain && IsPlainText(rest);
      height = std::max<int32_t>(height, static_cast<int32_t>(rest.size()));
    }
    EXPECT_EQ(tr.plain_height[k], plain ? height : 0) << "node " << k << " at rank " << r0;
    plain_multibyte += plain && tr.byte[k] >= 0x80 && tr.end[k] - k >= 4;
  }
  EXPECT_GT(plain_multibyte, 2);
}

TEST(MatcherTest, StateCapIsEnforced) {
  auto vocab = TestVocab();
  GrammarLimits lim;
  lim.max_states = 100;
  GrammarBuilder b(lim);
  RuleId r = b.AddRule("root", b.Repeat(b.Literal("abcdef"), 0, 100));
  absl::StatusOr<Grammar> g = std::move(b).Build(r);
  ASSERT_TRUE(g.ok());
  GrammarCompiler compiler(vocab);
  auto cg = compiler.CompileGrammar(*std::move(g), GrammarKind::kGbnf);
  ASSERT_FALSE(cg.ok());
  EXPECT_NE(cg.status().message().find("too complex"), std::string::npos) << cg.status();
}

}  // namespace
}  // namespace minfer::grammar
