// The front ends' grammars run by the matcher (matcher.h) over a byte
// vocabulary: after every byte of every input the matcher's verdict (still
// viable / complete) must equal the reference recognizer's on the same
// grammar. Catches front-end shapes the automata might mishandle — sets
// shared between positions, nullable bodies under repetition, recursion
// through GBNF rules, search-mode padding — on top of regex_test's and
// gbnf_test's language checks against RegExp and by hand.
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/spec.h"
#include "tests/engine/grammar/recognizer.h"

namespace minfer::grammar {
namespace {

using ::minfer::grammar::testing::IsViablePrefix;
using ::minfer::grammar::testing::Recognize;

// Token 0: the end of generation; token 1 + b: the byte b.
std::shared_ptr<const Vocabulary> ByteVocab() {
  std::vector<std::string> toks = {""};
  for (int b = 0; b < 256; ++b) toks.push_back(std::string(1, static_cast<char>(b)));
  return Vocabulary::Create(toks, {0}, static_cast<int32_t>(toks.size()));
}

struct Case {
  GrammarSpec spec;
  std::vector<std::string> inputs;
};

GrammarSpec Spec(GrammarKind kind, std::string text, std::vector<std::string> choices = {}) {
  GrammarSpec s;
  s.kind = kind;
  s.text = std::move(text);
  s.choices = std::move(choices);
  return s;
}

TEST(FrontEndsOnTheMatcher, MatcherAgreesWithRecognizerByteByByte) {
  const std::vector<Case> cases = {
      {Spec(GrammarKind::kRegex, "(a*)*b"), {"b", "aab", "a", "ba"}},
      {Spec(GrammarKind::kRegex, "(a|)+c"), {"c", "aac", "ca"}},
      {Spec(GrammarKind::kRegex, "\\d{2}:\\d{2}|\\d{4}"), {"12:34", "1234", "12:3", "123a"}},
      {Spec(GrammarKind::kRegex, "[^\"\\\\]{0,3}x"), {"x", "abcx", "abcdx", "\xC3\xA9x", "\"x"}},
      {Spec(GrammarKind::kRegex, ".+\\s\\S"), {"a b", "\xF0\x9F\x98\x80\xC2\xA0\xC3\xA9", "a\nb c"}},
      {Spec(GrammarKind::kRegex, "^(0|[1-9]\\d*)\\.(0|[1-9]\\d*)$"), {"1.0", "10.20", "01.1", "1."}},
      {Spec(GrammarKind::kRegex, "(?:ab|a)(?:bc|c)"), {"abc", "abbc", "ac", "ab"}},
      {Spec(GrammarKind::kChoice, "", {"cat", "car", "ca", "dog"}), {"ca", "cat", "cars", "do"}},
      {Spec(GrammarKind::kGbnf,
            "root ::= \"(\" root \")\" | \"\"\n"),
       {"", "(())", "(()", "())"}},
      {Spec(GrammarKind::kGbnf,
            "root ::= (expr \"=\" ws term \"\\n\")+\n"
            "expr ::= term ([-+*/] term)*\n"
            "term ::= ident | num | \"(\" ws expr \")\" ws\n"
            "ident ::= [a-z] [a-z0-9_]* ws\n"
            "num ::= [0-9]+ ws\n"
            "ws ::= [ \\t\\n]*\n"),
       {"1+2=3\n", "(a+b)*c=d\n", "1+=3\n", "x = 4\n"}},
      {Spec(GrammarKind::kGbnf,
            "root ::= item{2,3}\n"
            "item ::= \"- \" [^\\n]+ \"\\n\"\n"),
       {"- a\n- b\n", "- a\n", "- a\n- b\n- c\n- d\n", "- \xC3\xA9\n- x\n"}},
  };
  GrammarCompiler compiler(ByteVocab());
  int checked = 0;
  for (const Case& c : cases) {
    absl::StatusOr<std::shared_ptr<const CompiledGrammar>> cg = compiler.Compile(c.spec);
    ASSERT_TRUE(cg.ok()) << c.spec.Key() << ": " << cg.status();
    const Grammar& g = (*cg)->grammar();
    for (const std::string& s : c.inputs) {
      GrammarMatcher m(*cg);
      for (size_t i = 0; i < s.size(); ++i) {
        const bool viable = IsViablePrefix(g, s.substr(0, i + 1));
        ASSERT_EQ(m.AcceptBytes(s.substr(i, 1)), viable)
            << c.spec.Key() << " on \"" << s << "\" at byte " << i;
        if (!viable) break;
        EXPECT_EQ(m.IsComplete(), Recognize(g, s.substr(0, i + 1)))
            << c.spec.Key() << " on \"" << s << "\" after byte " << i;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 100);
}

}  // namespace
}  // namespace minfer::grammar
