// The GBNF front end (engine/grammar/gbnf.h): hand-written accept/reject
// vectors for grammars in llama.cpp's style (its example grammars'
// shapes: arithmetic, JSON, lists, chess moves, Japanese, C-like), the
// syntax corners (multi-line bodies, comments, escapes, repetitions), and
// the errors with their line and column.
#include "engine/grammar/gbnf.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/grammar/recognizer.h"

namespace minfer::grammar {
namespace {

using ::minfer::grammar::testing::Recognize;
using ::testing::HasSubstr;

struct GbnfCase {
  std::string name;
  std::string text;
  std::vector<std::string> accept;
  std::vector<std::string> reject;
};

std::vector<GbnfCase> Cases() {
  return {
      {"arithmetic",
       R"g(root  ::= (expr "=" ws term "\n")+
expr  ::= term ([-+*/] term)*
term  ::= ident | num | "(" ws expr ")" ws
ident ::= [a-z] [a-z0-9_]* ws
num   ::= [0-9]+ ws
ws    ::= [ \t\n]*
)g",
       {"1+2=3\n", "x = 4\n", "(a+b)*c=d\ne=f\n", "(x1 +22 )/y_z=0\n"},
       {"1+2=3", "1+=3\n", "A=1\n", "(a=b\n", "=1\n"}},
      {"json",
       R"g(root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9]{1,15})? ws

# Optional space, after literals where allowed
ws ::= | " " | "\n" [ \t]{0,20}
)g",
       {"{}", R"({"a":1})", R"({"a": [1, -2.5e3, true, null], "b": {"c": "d\n\u00e9"}})",
        "{\n  \"k\": \"v\"\n}", "{\"\xC3\xA9\": \"\xF0\x9F\x98\x80\"}"},
       {"[]", R"({"a":})", R"({"a":1,})", R"({a:1})", "{\"a\":\"\x01\"}", R"({"a":"\q"})",
        R"({"a":01x})"}},
      {"list",
       "root ::= item+\n"
       "\n"
       "# Excludes various line break characters\n"
       "item ::= \"- \" [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]+ \"\\n\"\n",
       {"- a\n", "- milk\n- eggs \xC3\xA9\n"},
       {"", "- \n", "- a", "* a\n", "- a\x0b\n", "- a\xE2\x80\xA8\n"}},
      {"chess",
       R"g(# a game: numbered pairs of moves
root ::= (
    # the first move pair
    "1. " move " " move "\n"

    # then more, numbered with one or two digits
    ([1-9] [0-9]? ". " move " " move "\n")+
)

move    ::= (pawn | nonpawn | castle) [+#]?

pawn    ::= [a-h] ([1-8] | "x" [a-h] [1-8]) ("=" [NBRQ])?
nonpawn ::= [NBKQR] [a-h]? [1-8]? "x"? [a-h] [1-8]
castle  ::= "O-O" "-O"?
)g",
       {"1. e4 e5\n2. Nf3 Nc6\n", "1. d4 d5\n2. c4 dxc4\n10. O-O-O Qxd8#\n",
        "1. e4 e5\n2. e8=Q+ Kxe8\n"},
       {"1. e4 e5\n", "1. e9 e5\n2. a1 a2\n", "1. e4 e5\n2. Zf3 Nc6\n", "1. e4 e5\n02 a3 a4\n"}},
      {"japanese",
       "root ::= jp-char+ ([ \\t\\n] jp-char+)*\n"
       "jp-char ::= hiragana | katakana | punctuation | cjk\n"
       "hiragana ::= [\xE3\x81\x81-\xE3\x82\x9F]\n"
       "katakana ::= [\xE3\x82\xA1-\xE3\x83\xBF]\n"
       "punctuation ::= [\xE3\x80\x81-\xE3\x80\xBE]\n"
       "cjk ::= [\xE4\xB8\x80-\xE9\xBF\xBF]\n",
       {"\xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF",
        "\xE6\x97\xA5\xE6\x9C\xAC \xE3\x82\xAB\xE3\x82\xBF\xE3\x80\x82"},
       {"", "abc", "\xE6\x97\xA5 ", "\xEA\xB0\x80"}},
      {"c-like",
       R"g(root ::= (declaration)*

declaration ::= dataType identifier "(" parameter? ")" "{" statement* "}"

dataType  ::= "int" ws | "float" ws | "char" ws
identifier ::= [a-zA-Z_] [a-zA-Z_0-9]*

parameter ::= dataType identifier

statement ::=
    ( dataType identifier ws "=" ws expression ";" ) |
    ( identifier ws "=" ws expression ";" ) |
    ( "return" ws expression ";" ) |
    ( "while" "(" condition ")" "{" statement* "}" )

condition ::= expression relationOperator expression
relationOperator ::= ("<=" | "<" | "==" | "!=" | ">=" | ">")

expression ::= term (("+" | "-") term)*
term ::= factor(("*" | "/") factor)*

factor ::= identifier | number | unaryTerm | "(" expression ")"
number ::= [0-9]+
unaryTerm ::= "-" factor

ws ::= ([ \t\n]+)
)g",
       {"", "int main(){return 0;}", "float f(int x){y = x*2+1;while(y<10){y = y+1;}return y;}"},
       {"int main(){return 0}", "main(){}", "int f(){return -;}", "int f(int){}"}},
      {"continuation lines",
       "root ::= \"a\"\n"
       "  | \"b\"\n"
       "  # a comment between alternatives\n"
       "\n"
       "  | \"c\" tail\n"
       "     \"d\"\n"
       "tail ::= \"t\"\n",
       {"a", "b", "ctd"},
       {"c", "ct", "td", "ab"}},
      {"comments and hashes in literals",
       "# leading comment\n"
       "root ::= \"#\" [#] x # trailing comment with \"quotes\" and ::=\n"
       "# between rules\n"
       "x ::= \"y\" # another\n"
       "# last line without newline",
       {"##y"},
       {"#", "##", "##y#"}},
      {"escapes",
       R"g(root ::= "\x41\u00e9\U0001F600\t\n\\\"" [\]\-\[] "\r")g",
       {"A\xC3\xA9\xF0\x9F\x98\x80\t\n\\\"]\r", "A\xC3\xA9\xF0\x9F\x98\x80\t\n\\\"-\r",
        "A\xC3\xA9\xF0\x9F\x98\x80\t\n\\\"[\r"},
       {"A\xC3\xA9\xF0\x9F\x98\x80\t\n\\\"a\r", "\\x41"}},
      {"negated non-ASCII class",
       "root ::= [^\xC3\xA9\\n]+\n",
       {"abc", "\xC3\xA8", "\xF0\x9F\x98\x80"},
       {"", "a\xC3\xA9", "a\nb", "\xFF"}},
      {"any character",
       "root ::= . . \"x\"\n",
       {"abx", "\n\nx", "\xF0\x9F\x98\x80\xC3\xA9x"},
       {"ax", "abcx", "\xFF\x61x"}},
      {"counted repetitions",
       "root ::= \"a\"{3} \"b\"{2,} \"c\"{1,2} \"d\"{ 0 , 1 }\n",
       {"aaabbc", "aaabbbbbccd"},
       {"aabbc", "aaabc", "aaabbcccd", "aaabbcdd", "aaabb"}},
      {"groups and postfix",
       "root ::= (\"ab\" | \"c\")+ (\"d\" (\"e\" | \"f\")?)*\n",
       {"ab", "cab", "abcdde", "cdfd"},
       {"", "a", "de", "abdef"}},
      {"space before postfix",
       "root ::= \"a\" * \"b\" +\n",
       {"b", "aabb"},
       {"", "a"}},
      {"empty alternatives",
       "root ::= ( | \"x\") \"y\" ws\n"
       "ws ::= | \" \"\n",
       {"y", "xy", "xy "},
       {"x", "xy  "}},
      {"right recursion",
       "root ::= \"(\" root \")\" | \"\"\n",
       {"", "()", "((()))"},
       {"(", "())", ")("}},
      {"forward references and unreachable rules",
       "root ::= greeting \" \" name\n"
       "unused ::= \"never\"\n"
       "name ::= [A-Z] [a-z]*\n"
       "greeting ::= \"hello\" | \"hi\"\n",
       {"hello World", "hi Bo"},
       {"hello world", "never", "hey Bo"}},
      {"body on the next line",
       "root ::=\n"
       "  \"x\" item\n"
       "item ::=\n"
       "\n"
       "  [0-9]\n",
       {"x1"},
       {"x", "1"}},
      {"sequence continued on the next line",
       "root ::= \"a\"\n"
       "   \"b\"\n"
       "\n"
       "   \"c\"\n",
       {"abc"},
       {"a", "ab", "bc"}},
      {"CRLF line endings",
       "root ::= a \"-\" b\r\na ::= \"x\"\r\nb ::= \"y\" |\r\n  \"z\"\r\n",
       {"x-y", "x-z"},
       {"x-", "x-\r"}},
      {"names with digits, case, dashes and underscores",
       "root ::= QAPair-1 item_2\n"
       "QAPair-1 ::= \"Q\"\n"
       "item_2 ::= \"2\"\n",
       {"Q2"},
       {"Q", "2"}},
      {"dash in classes",
       "root ::= [a-] [-b] [\\-]\n",
       {"a--", "-b-", "--\x2d"},
       {"ba-", "c--", "-ba"}},
      {"raw newlines inside quotes and classes",
       "root ::= \"a\nb\" [\n]\n",
       {"a\nb\n"},
       {"ab\n", "a\nb"}},
      {"control range",
       "root ::= [\\x00-\\x1F]+\n",
       {std::string(1, '\0'), "\x01\x1F"},
       {" ", "\x7F"}},
      {"bounded optional repetition",
       "root ::= \"a\"{0,100}\n",
       {"", std::string(100, 'a')},
       {std::string(101, 'a'), "b"}},
      {"sign-and-digits (number-like)",
       "root ::= [-+]? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)?\n",
       {"0", "-12", "+3.25"},
       {"01", "-", "1.", ".5"}},
      {"nested parentheses over lines",
       "root ::= (\n"
       "  \"a\" (\n"
       "    \"b\" |\n"
       "    \"c\"\n"
       "  )\n"
       "  |\n"
       "  \"d\"\n"
       ")+\n",
       {"ab", "acd", "dab"},
       {"a", "bd", ""}},
  };
}

TEST(Gbnf, AcceptsAndRejectsAsWritten) {
  int checked = 0;
  for (const GbnfCase& c : Cases()) {
    absl::StatusOr<Grammar> g = GbnfToGrammar(c.text);
    ASSERT_TRUE(g.ok()) << c.name << ": " << g.status();
    for (const std::string& s : c.accept) {
      EXPECT_TRUE(Recognize(*g, s)) << c.name << " should accept \"" << s << "\"";
      ++checked;
    }
    for (const std::string& s : c.reject) {
      EXPECT_FALSE(Recognize(*g, s)) << c.name << " should reject \"" << s << "\"";
      ++checked;
    }
  }
  EXPECT_GT(checked, 150);
}

struct ErrorCase {
  std::string text;
  std::string message;  // the whole message
};

TEST(Gbnf, ErrorsNameTheProblemAndItsPlace) {
  const std::vector<ErrorCase> errors = {
      {"root ::= foo bar\nfoo ::= \"x\"\n", "gbnf: line 1, column 14: undefined rule 'bar'"},
      {"root ::= \"a\"\n\nx ::= y\n", "gbnf: line 3, column 7: undefined rule 'y'"},
      {"a ::= \"x\"\n", "gbnf: the grammar has no 'root' rule"},
      {"", "gbnf: the grammar has no 'root' rule"},
      {"# only a comment\n", "gbnf: the grammar has no 'root' rule"},
      {"root ::= \"abc\nx ::= y\n", "gbnf: line 1, column 10: unterminated string literal"},
      {"root ::= (\"a\"\n", "gbnf: line 1, column 10: unclosed '('"},
      {"root = \"a\"\n", "gbnf: line 1, column 6: expected '::=' after the rule name 'root'"},
      {"root ::= \"a\"\n  ::= \"b\"\n",
       "gbnf: line 2, column 3: '::=' inside a rule body (a rule must start on a new line)"},
      {"root ::= [a", "gbnf: line 1, column 10: unterminated character class"},
      {"root ::= \"x\" \"\\q\"\n", "gbnf: line 1, column 15: unknown escape '\\q'"},
      {"root ::= \"\\x4g\"\n", "gbnf: line 1, column 11: expected 2 hexadecimal digits after '\\x'"},
      {"root ::= \"\\U00110000\"\n", "gbnf: line 1, column 11: code point past U+10FFFF"},
      {"root ::= [z-a]\n", "gbnf: line 1, column 11: character range out of order"},
      {"root ::= * \"a\"\n", "gbnf: line 1, column 10: '*' has nothing to repeat"},
      {"root ::= \"a\"{3,1}\n",
       "gbnf: line 1, column 13: repetition {3,1}: the maximum is below the minimum"},
      {"root ::= \"a\"{10001}\n",
       "gbnf: line 1, column 13: repetition bound 10001 exceeds the limit of 10000"},
      {"root ::= \"a\"{x}\n", "gbnf: line 1, column 14: expected a number after '{'"},
      {"root ::= \"a\"{2\n", "gbnf: line 1, column 15: expected '}' to close the repetition"},
      {"root ::= \"x\"\nroot ::= \"y\"\n", "gbnf: line 2, column 1: rule 'root' is defined twice"},
      {"root ::= <think>\n", "gbnf: line 1, column 10: token references (<...>) are not supported"},
      {"root ::= \"\xC3\xA9\" )\n", "gbnf: line 1, column 14: unexpected ')'"},
      {"root ::= \"a\" ; \n", "gbnf: line 1, column 14: unexpected ';'"},
      {"::= \"a\"\n", "gbnf: line 1, column 1: expected a rule name"},
      {"root ::= \"\xFF\"\n", "gbnf: line 1, column 11: invalid UTF-8"},
      {"root ::= \"\\uD800\"\n",
       "gbnf: line 1, column 11: a surrogate code point can not appear in UTF-8 text"},
  };
  for (const ErrorCase& e : errors) {
    absl::StatusOr<Grammar> g = GbnfToGrammar(e.text);
    ASSERT_FALSE(g.ok()) << e.text;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << e.text;
    EXPECT_EQ(g.status().message(), e.message) << e.text;
  }
}

TEST(Gbnf, LeftRecursionSurfacesNamingTheRule) {
  // Direct, and indirect through an optional (nullable) prefix.
  absl::StatusOr<Grammar> g =
      GbnfToGrammar("root ::= expr\nexpr ::= expr \"+\" term | term\nterm ::= [0-9]\n");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("left recursion"));
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("'expr'"));
  g = GbnfToGrammar("root ::= a\na ::= b? c\nb ::= \"y\"\nc ::= a \"x\" | \"z\"\n");
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("left recursion"));
  // The right-recursive form of the same language is fine.
  EXPECT_TRUE(GbnfToGrammar("root ::= term (\"+\" term)*\nterm ::= [0-9]\n").ok());
}

TEST(Gbnf, NestingIsBounded) {
  EXPECT_TRUE(
      GbnfToGrammar("root ::= " + std::string(200, '(') + "\"a\"" + std::string(200, ')')).ok());
  absl::StatusOr<Grammar> g =
      GbnfToGrammar("root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')'));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().message(), "gbnf: line 1, column 210: parentheses nested deeper than 200");
}

TEST(Gbnf, LimitsApply) {
  GrammarLimits limits;
  limits.max_repeat = 4;
  EXPECT_TRUE(GbnfToGrammar("root ::= \"a\"{4}\n", limits).ok());
  absl::StatusOr<Grammar> g = GbnfToGrammar("root ::= \"a\"{5}\n", limits);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("exceeds the limit of 4"));
  limits = {};
  limits.max_exprs = 8;
  g = GbnfToGrammar("root ::= \"a\" | \"b\" | \"c\" | \"d\" | \"e\" | \"f\" | \"g\" | \"h\" | \"i\"\n",
                    limits);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("too large"));
}

}  // namespace
}  // namespace minfer::grammar
