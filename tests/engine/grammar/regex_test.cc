// The regex front end (engine/grammar/regex.h) against JavaScript's RegExp
// (node, regex_reference.mjs): for every pattern, hand-picked strings,
// random strings over the pattern's alphabet, strings sampled from the
// grammar itself and mutations of those are judged by node and by the
// reference recognizer on the grammar; they must agree.
//
// The reference flag is 'u': the front end works on code points, as RegExp
// does with 'u' (without it `.` and classes see UTF-16 units, and an astral
// character counts as two). Patterns that use Annex B leniencies the front
// end also accepts (`\-` outside a class, `[\w-.]`, a lone `{`) are invalid
// under 'u' and are checked without a flag, on BMP-only inputs, where the
// two readings agree.
//
// Also: search mode (JSON Schema's unanchored `pattern`) against an
// unanchored RegExp, the char_set hook's contract, the refusals (construct
// and offset named), limits, and ChoiceGrammar against a std::set.
#include "engine/grammar/regex.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/grammar/recognizer.h"
#include "tests/support/subprocess.h"

namespace minfer::grammar {
namespace {

using ::minfer::grammar::testing::Recognize;
using ::testing::HasSubstr;
using json = nlohmann::json;

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

// Code points of valid UTF-8 (the test's own strings).
std::vector<uint32_t> Decode(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    uint32_t v = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < n; ++k) v = (v << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(v);
    i += n;
  }
  return out;
}

std::string Encode(const std::vector<uint32_t>& cps) {
  std::string s;
  for (uint32_t c : cps) s += Utf8(c);
  return s;
}

// A random member of the grammar's language: repetitions take a few rounds
// past their minimum, alternations a random branch.
void Sample(const Grammar& g, ExprId id, std::mt19937& rng, std::string* out) {
  const Expr& e = g.expr(id);
  switch (e.kind) {
    case ExprKind::kEmpty:
    case ExprKind::kNothing: break;
    case ExprKind::kBytes: {
      std::vector<int> bytes;
      for (int b = 0; b < 256; ++b) {
        if (e.bytes[b]) bytes.push_back(b);
      }
      out->push_back(static_cast<char>(bytes[rng() % bytes.size()]));
      break;
    }
    case ExprKind::kLiteral: *out += e.literal; break;
    case ExprKind::kRef: Sample(g, g.rule(e.rule).body, rng, out); break;
    case ExprKind::kSeq:
      for (ExprId c : e.children) Sample(g, c, rng, out);
      break;
    case ExprKind::kAlt: Sample(g, e.children[rng() % e.children.size()], rng, out); break;
    case ExprKind::kRepeat: {
      int n = e.min + static_cast<int>(rng() % 3);
      if (e.max != kUnbounded) n = std::min(n, e.max);
      for (int i = 0; i < n; ++i) Sample(g, e.children[0], rng, out);
      break;
    }
  }
}

struct Case {
  std::string pattern;
  std::vector<std::string> inputs;  // hand-picked
  bool annex_b = false;             // checked without the u flag, BMP inputs only
};

std::vector<Case> FullCases() {
  return {
      {"abc", {"abc", "ab", "abcd", "", "ABC"}},
      {"a|b|cd", {"a", "b", "cd", "c", "ab", ""}},
      {"a*", {"", "a", "aaaa", "b", "aab"}},
      {"a+b?", {"a", "ab", "aab", "b", "abb", ""}},
      {"(ab)*c", {"c", "abc", "ababc", "abac", "ab"}},
      {"(?:ab|cd)+", {"ab", "cdab", "abcdcd", "", "abc"}},
      {"a{3}", {"aaa", "aa", "aaaa"}},
      {"a{2,}", {"a", "aa", "aaaaaa"}},
      {"a{1,3}b{0,2}", {"a", "aaab", "aaaabb", "abbb", "b", "aabb"}},
      {"a*?b+?c??", {"b", "aabbc", "c", "abcc"}},
      {"x{2,4}?y", {"xxy", "xxxxy", "xy", "xxxxxy"}},
      {".", {"a", "\n", "\r", "\xE2\x80\xA8", "\xE2\x80\xA9", "\xC3\xA9", "\xF0\x9F\x98\x80", "", "ab",
             "\x0B", "\xC2\x85"}},
      {".*", {"", "hello world", "a\nb", "\xE2\x82\xAC\xE2\x82\xAC", "tab\there"}},
      {"[abc]", {"a", "c", "d", "", "ab"}},
      {"[^abc]", {"a", "d", "\n", "\xC3\xA9", "\xF0\x9F\x98\x80", ""}},
      {"[a-z0-9_]+", {"abc_09", "ABC", "a-b", "", "z9_"}},
      {"[^a-z]*", {"ABC", "abc", "", "1\n2", "\xCE\xB1"}},
      {"[]", {"", "a", "]"}},
      {"[^]", {"a", "\n", "", "\xF0\x9F\x98\x80"}},
      {"[-a]+", {"-", "a-a", "b"}},
      {"[a-]+", {"-", "a-a", "b"}},
      {"[\\]\\\\]+", {"]", "\\", "]\\]", "["}},
      {"[\\d\\s]+", {"1 2", "\t9", "a", "\xC2\xA0"}},
      {"[^\\W]+", {"abc", "a_1", "a b", ""}},
      {"[\\b]", {"\b", "b", "\\"}},
      {"\\d+", {"0123", "12a", "", "\xD9\xA3"}},
      {"\\D+", {"abc", "a1", "\xD9\xA3", "\n"}},
      {"\\w+", {"Az_09", "a-b", "\xC3\xA9"}},
      {"\\W", {"-", "a", "_", " ", "\xC3\xA9"}},
      {"\\s", {" ", "\t", "\n", "\r", "\x0B", "\x0C", "\xC2\xA0", "\xEF\xBB\xBF", "\xE2\x80\xA8",
               "\xE1\x9A\x80", "\xE1\xA0\x8E", "\xE2\x80\x8B", "\xE2\x80\x8A", "\xE3\x80\x80",
               "\xC2\x85", "a"}},
      {"\\S+", {"abc", "a b", "\xC3\xA9\xC3\xA9", "\xC2\xA0"}},
      {"\\n\\t\\r\\f\\v", {"\n\t\r\f\v", "ntrfv"}},
      {"\\x41\\u0042\\u{1F600}", {"AB\xF0\x9F\x98\x80", "AB", "x41"}},
      {"a\\0b", {std::string("a\0b", 3), "a0b"}},
      {"\\cJ\\ca", {"\n\x01", "cJca"}},
      {"\\/\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\^\\$\\\\", {"/.*+?()[]{}|^$\\", ""}},
      {"^abc$", {"abc", "abcd", ""}},
      {"^a|b$", {"a", "b", "ab", ""}},
      {"^(?:a|b)$", {"a", "b", "ab"}},
      {"(?<year>\\d{4})-(?<m>\\d{2})", {"2024-05", "24-05", "2024-5"}},
      {"\xC3\xA9+", {"\xC3\xA9", "\xC3\xA9\xC3\xA9", "e", ""}},
      {"[\xCE\xB1-\xCF\x89]+", {"\xCE\xB1\xCE\xB2", "\xCF\x89", "a", "\xCE\x91"}},
      {"[\xF0\x9F\x98\x80-\xF0\x9F\x98\x82]", {"\xF0\x9F\x98\x80", "\xF0\x9F\x98\x81",
                                              "\xF0\x9F\x98\x83", "\xE2\x98\x80"}},
      {"\\uD83D\\uDE00", {"\xF0\x9F\x98\x80", ""}},
      {"[\\uD83D\\uDE00x]", {"\xF0\x9F\x98\x80", "x", "\xF0\x9F\x98\x81"}},
      {"[^\xC3\xA9]", {"\xC3\xA9", "e", "\xC3\xA8", "\xF0\x9F\x98\x80"}},
      {"\xE2\x82\xAC{2}", {"\xE2\x82\xAC\xE2\x82\xAC", "\xE2\x82\xAC"}},
      {"[\\u{10000}-\\u{10FFFF}]", {"\xF0\x90\x80\x80", "\xF4\x8F\xBF\xBF", "\xEF\xBF\xBF"}},
      {"[\\0-\\x1F\\x7F]", {std::string(1, '\0'), "\x1F", "\x7F", " "}},
      {"^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\\.[a-zA-Z]{2,}$",
       {"john.doe@example.com", "a@b.c", "a@b.cd", "@b.cd", "a b@c.de"}},
      {"^\\d{4}-\\d{2}-\\d{2}$", {"2024-01-31", "2024-1-31", "2024-01-311"}},
      {"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
       {"123e4567-e89b-12d3-a456-426614174000", "123e4567-e89b-12d3-a456-42661417400",
        "123E4567-e89b-12d3-a456-426614174000"}},
      {"^\\+?[0-9 ()-]{7,15}$", {"+1 (555) 123-4567", "12345", "555-1234"}},
      {"^(0|[1-9]\\d*)\\.(0|[1-9]\\d*)\\.(0|[1-9]\\d*)(?:-[0-9A-Za-z-]+)?$",
       {"1.2.3", "0.10.0-beta-1", "01.2.3", "1.2", "1.2.3-"}},
      {"((25[0-5]|2[0-4]\\d|1?\\d?\\d)\\.){3}(25[0-5]|2[0-4]\\d|1?\\d?\\d)",
       {"192.168.0.1", "255.255.255.255", "256.1.1.1", "1.2.3", "01.2.3.4"}},
      {"#[0-9a-fA-F]{3}([0-9a-fA-F]{3})?", {"#fff", "#A0b1C2", "#ffff", "fff"}},
      {"", {"", "a"}},
      {"()", {"", "a"}},
      {"(|a)b", {"b", "ab", "a"}},
      {"a||b", {"", "a", "b", "ab"}},
      {"(a|ab)(c|bcd)(d*)", {"abcd", "acd", "abcdd", "abd"}},
      {"(?:a(?:b(?:c)?)?)?", {"", "a", "ab", "abc", "ac", "b"}},
      {"[\\s\\S]{0,3}", {"", "\n\n\n", "abcd", "\xF0\x9F\x98\x80\xF0\x9F\x98\x80"}},
      {"(a*)*b", {"b", "aab", "a", ""}},
      {"(a|)+c", {"c", "aac", "ac", "a"}},
      {"(?:)*x", {"x", ""}},
      {"(a?){3}", {"", "aaa", "aaaa"}},
      {"(?:a{0,2}b?){2,3}", {"", "aaaaaa", "aaaaaaa", "abab", "bbbb"}},
      {"\\d{2}:\\d{2}|\\d{4}", {"12:34", "1234", "12:3", "123"}},
      {"\\u{61}+\\x{2}", {"a", "aa"}},  // \x not followed by hex: an error in u mode
      // Annex B leniencies (no u flag; BMP inputs).
      {"a\\-b", {"a-b", "ab", "a\\-b"}, true},
      {"[\\w-.]+", {"a-b.c", "a_b", "a b"}, true},
      {"[\\w-]+", {"a-b", "a b"}, true},
      {"a{", {"a{", "a"}, true},
      {"a{1", {"a{1", "a"}, true},
      {"x{,3}", {"x{,3}", "xxx", "x"}, true},
      {"]}", {"]}", "]"}, true},
      {"\\:\\\"\\'\\@", {":\"'@", ":"}, true},
  };
}

// Patterns that the front end must refuse and RegExp also refuses under u
// (so the full cases above cannot hide a pattern we accept by mistake).
bool IsError(const json& j) { return j.is_object() && j.contains("error"); }

class RegexVsJs : public ::testing::Test {
 protected:
  // Runs node over `cases` (array of objects), returns its verdicts.
  static json Judge(const json& cases) {
    const char* tmp = std::getenv("TEST_TMPDIR");
    const std::string path = absl::StrCat(tmp ? tmp : "/tmp", "/regex_cases_", getpid(), ".json");
    std::ofstream(path) << cases.dump();
    auto r = minfer::testing::RunCommand(
        {"/usr/bin/env", "node", "tests/engine/grammar/regex_reference.mjs", path},
        std::chrono::seconds(60));
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return json::array();
    EXPECT_EQ(r->exit_code, 0) << r->err;
    json out = json::parse(r->out, nullptr, false);
    EXPECT_FALSE(out.is_discarded()) << r->out;
    return out;
  }
};

// Checks the char_set hook's promise (sorted, disjoint, non-adjacent, no
// surrogates, within 0..10FFFF, never empty) and emits the set.
ExprId CheckingHook(GrammarBuilder& b, const std::vector<std::pair<uint32_t, uint32_t>>& r) {
  EXPECT_FALSE(r.empty());
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_LE(r[i].first, r[i].second);
    EXPECT_LE(r[i].second, 0x10FFFFu);
    EXPECT_TRUE(r[i].second < 0xD800 || r[i].first > 0xDFFF)
        << std::hex << r[i].first << "-" << r[i].second;
    if (i > 0) {
      EXPECT_GT(r[i].first, r[i - 1].second + 1);
    }
  }
  return b.CodepointSet(r);
}

absl::StatusOr<Grammar> Build(absl::string_view pattern, const RegexOptions& options) {
  GrammarBuilder b;
  absl::StatusOr<ExprId> e = RegexToExpr(pattern, b, options);
  if (!e.ok()) return e.status();
  return std::move(b).Build(b.AddRule("root", *e));
}

TEST_F(RegexVsJs, WholeStringMatchAgreesWithRegExp) {
  std::mt19937 rng(27);
  const std::vector<uint32_t> extras = {'a', 'b', '0', '5', '_', '-', ' ', '\n', '\r', '.',
                                        0xE9, 0xA0, 0x20AC, 0x2028, 0x1F600};
  json cases = json::array();
  std::vector<Grammar> grammars, hooked;
  std::vector<Case> all = FullCases();
  // A pattern node must refuse (the \x case above): kept apart.
  std::vector<size_t> expect_error;
  for (size_t ci = 0; ci < all.size(); ++ci) {
    const Case& c = all[ci];
    absl::StatusOr<Grammar> g = RegexToGrammar(c.pattern);
    if (c.pattern == "\\u{61}+\\x{2}") {
      EXPECT_FALSE(g.ok()) << c.pattern;
      expect_error.push_back(ci);
      cases.push_back({{"pattern", c.pattern}, {"flags", "u"}, {"mode", "full"},
                       {"inputs", json::array()}});
      grammars.emplace_back();
      hooked.emplace_back();
      continue;
    }
    ASSERT_TRUE(g.ok()) << c.pattern << ": " << g.status();
    RegexOptions hook;
    hook.char_set = CheckingHook;
    absl::StatusOr<Grammar> h = Build(c.pattern, hook);
    ASSERT_TRUE(h.ok()) << c.pattern << ": " << h.status();
    // Inputs: hand-picked, random over the alphabet, sampled from the
    // grammar, and one-character mutations of the samples.
    std::vector<std::string> inputs = c.inputs;
    std::vector<uint32_t> alphabet = Decode(c.pattern);
    alphabet.insert(alphabet.end(), extras.begin(), extras.end());
    for (int i = 0; i < 25; ++i) {
      std::vector<uint32_t> s(rng() % 8);
      for (uint32_t& x : s) x = alphabet[rng() % alphabet.size()];
      inputs.push_back(Encode(s));
    }
    for (int i = 0; i < 6; ++i) {
      std::string s;
      Sample(*g, g->rule(g->root()).body, rng, &s);
      inputs.push_back(s);
      for (int m = 0; m < 2; ++m) {
        std::vector<uint32_t> cps = Decode(s);
        const uint32_t x = alphabet[rng() % alphabet.size()];
        const size_t at = cps.empty() ? 0 : rng() % (cps.size() + 1);
        switch (rng() % 3) {
          case 0: cps.insert(cps.begin() + at, x); break;
          case 1:
            if (at < cps.size()) cps.erase(cps.begin() + at);
            break;
          default:
            if (at < cps.size()) cps[at] = x;
        }
        inputs.push_back(Encode(cps));
      }
    }
    if (c.annex_b) {  // BMP only: without u, RegExp sees UTF-16 units
      std::erase_if(inputs, [](const std::string& s) {
        for (uint32_t x : Decode(s)) {
          if (x > 0xFFFF) return true;
        }
        return false;
      });
    }
    cases.push_back({{"pattern", c.pattern},
                     {"flags", c.annex_b ? "" : "u"},
                     {"mode", "full"},
                     {"inputs", inputs}});
    grammars.push_back(*std::move(g));
    hooked.push_back(*std::move(h));
  }
  const json verdicts = Judge(cases);
  ASSERT_EQ(verdicts.size(), cases.size());
  int checked = 0, accepted = 0;
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const std::string& pattern = cases[ci]["pattern"].get_ref<const std::string&>();
    if (std::find(expect_error.begin(), expect_error.end(), ci) != expect_error.end()) {
      EXPECT_TRUE(IsError(verdicts[ci])) << pattern;
      continue;
    }
    ASSERT_FALSE(IsError(verdicts[ci])) << pattern << ": " << verdicts[ci].dump();
    const json& inputs = cases[ci]["inputs"];
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::string& s = inputs[i].get_ref<const std::string&>();
      const bool want = verdicts[ci][i].get<bool>();
      EXPECT_EQ(Recognize(grammars[ci], s), want) << "/" << pattern << "/ on \"" << s << "\"";
      EXPECT_EQ(Recognize(hooked[ci], s), want)
          << "/" << pattern << "/ (char_set hook) on \"" << s << "\"";
      ++checked;
      accepted += want;
    }
  }
  // Both verdicts are well represented (a test that can not fail is a defect).
  EXPECT_GT(checked, 3000);
  EXPECT_GT(accepted, 600);
}

TEST_F(RegexVsJs, SearchModeAgreesWithUnanchoredRegExp) {
  const std::vector<std::string> patterns = {"ab",      "^ab",   "ab$",     "^ab$", "^a|b$",
                                             "a*",      "\\d{3}", "^$",      "",     ".",
                                             "^.+$",    "x|^y|z$", "[^a]",  "^\\s*$"};
  const std::vector<std::string> inputs = {
      "",      "ab",    "xaby",  "abab", "ba",     "a\nb",   "\nab\n", "123", "12a3",
      "a1234", "\n",    "a",     "b",    "y",      "xy",     "zx",     " \t", "\xC3\xA9",
      "aaa",   "ya",    "z",     "az",   "\xE2\x80\xA8", "bab", "a b", "12 345"};
  json cases = json::array();
  std::vector<Grammar> grammars, hooked;
  for (const std::string& p : patterns) {
    RegexOptions o;
    o.search = true;
    absl::StatusOr<Grammar> g = Build(p, o);
    ASSERT_TRUE(g.ok()) << p << ": " << g.status();
    o.char_set = CheckingHook;
    absl::StatusOr<Grammar> h = Build(p, o);
    ASSERT_TRUE(h.ok()) << p << ": " << h.status();
    grammars.push_back(*std::move(g));
    hooked.push_back(*std::move(h));
    cases.push_back({{"pattern", p}, {"flags", "u"}, {"mode", "search"}, {"inputs", inputs}});
  }
  const json verdicts = Judge(cases);
  ASSERT_EQ(verdicts.size(), cases.size());
  int accepted = 0;
  for (size_t ci = 0; ci < patterns.size(); ++ci) {
    ASSERT_FALSE(IsError(verdicts[ci])) << patterns[ci];
    for (size_t i = 0; i < inputs.size(); ++i) {
      const bool want = verdicts[ci][i].get<bool>();
      EXPECT_EQ(Recognize(grammars[ci], inputs[i]), want)
          << "search /" << patterns[ci] << "/ on \"" << inputs[i] << "\"";
      EXPECT_EQ(Recognize(hooked[ci], inputs[i]), want)
          << "search /" << patterns[ci] << "/ (hook) on \"" << inputs[i] << "\"";
      accepted += want;
    }
  }
  EXPECT_GT(accepted, 100);
}

TEST(Regex, RejectsInvalidUtf8Input) {
  absl::StatusOr<Grammar> g = RegexToGrammar(".*");
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(Recognize(*g, "\xC3\xA9"));
  EXPECT_FALSE(Recognize(*g, "\xFF"));
  EXPECT_FALSE(Recognize(*g, "\xC3"));
  EXPECT_FALSE(Recognize(*g, "\xED\xA0\x80"));  // an encoded surrogate
}

TEST(Regex, CharSetHookSeesEveryCharacterAndComplementsItself) {
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> calls;
  RegexOptions o;
  o.char_set = [&](GrammarBuilder& b, const std::vector<std::pair<uint32_t, uint32_t>>& r) {
    calls.push_back(r);
    return b.CodepointSet(r);
  };
  GrammarBuilder b;
  ASSERT_TRUE(RegexToExpr("x[^a-c].", b, o).ok());
  using R = std::vector<std::pair<uint32_t, uint32_t>>;
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0], (R{{'x', 'x'}}));
  EXPECT_EQ(calls[1], (R{{0, 'a' - 1}, {'c' + 1, 0xD7FF}, {0xE000, 0x10FFFF}}));
  EXPECT_EQ(calls[2], (R{{0, 9}, {11, 12}, {14, 0x2027}, {0x202A, 0xD7FF}, {0xE000, 0x10FFFF}}));
  // Search padding goes through the hook too: "any character".
  calls.clear();
  o.search = true;
  ASSERT_TRUE(RegexToExpr("^a", b, o).ok());
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[1], (R{{0, 0xD7FF}, {0xE000, 0x10FFFF}}));
}

struct Refusal {
  std::string pattern;
  std::string message;
};

TEST(Regex, RefusesNamingConstructAndOffset) {
  const std::vector<Refusal> refusals = {
      {"a\\b", "word boundary '\\b' at offset 1 is not supported"},
      {"\\Ba", "non-word boundary '\\B' at offset 0 is not supported"},
      {"(a)\\1", "back-reference '\\1' at offset 3 is not supported"},
      {"(?<n>a)\\k<n>", "named back-reference '\\k' at offset 7 is not supported"},
      {"a(?=b)", "lookahead '(?=' at offset 1 is not supported"},
      {"a(?!b)", "negative lookahead '(?!' at offset 1 is not supported"},
      {"(?<=a)b", "lookbehind '(?<=' at offset 0 is not supported"},
      {"x(?<!a)b", "negative lookbehind '(?<!' at offset 1 is not supported"},
      {"a^b", "anchor '^' away from the start of the pattern or of a top-level alternative at "
              "offset 1 is not supported"},
      {"(^a)", "anchor '^' away from the start"},
      {"(^a)", "at offset 1"},
      {"a$b", "anchor '$' away from the end of the pattern or of a top-level alternative at "
              "offset 1 is not supported"},
      {"(a$)", "at offset 2"},
      {"\\p{L}", "Unicode property escape '\\p' at offset 0 is not supported"},
      {"x\\P{L}", "Unicode property escape '\\P' at offset 1"},
      {"(?i:a)", "group syntax '(?i' at offset 0 is not supported"},
      {"a\\02", "octal escape at offset 1 is not supported"},
      {"a{10001}", "repetition bound 10001 at offset 1 exceeds the limit of 10000"},
      {"a{1,99999999999999}", "at offset 1 exceeds the limit of 10000"},
      {"*a", "nothing to repeat at offset 0"},
      {"a**", "nothing to repeat at offset 2"},
      {"a{2}{3}", "nothing to repeat at offset 4"},
      {"{2}", "nothing to repeat at offset 0"},
      {"(a", "unterminated group at offset 0"},
      {"a)", "unmatched ')' at offset 1"},
      {"[a", "unterminated character class at offset 0"},
      {"x[z-a]", "character class range out of order at offset 2"},
      {"a{3,2}", "quantifier bounds out of order at offset 1"},
      {"ab\\", "'\\' at the end of the pattern at offset 2"},
      {"\\q", "unknown escape '\\q' at offset 0"},
      {"\\x4", "invalid hexadecimal escape at offset 0"},
      {"\\u{110000}", "invalid Unicode escape at offset 0"},
      {"\\u12", "invalid Unicode escape at offset 0"},
      {"\\c1", "invalid control escape at offset 0"},
      {"(?<1a>x)", "invalid group name at offset 3"},
      {"(?x", "group syntax '(?x' at offset 0"},
      {"(?", "invalid group at offset 0"},
      {"ab\xFF", "invalid UTF-8 at offset 2"},
  };
  for (const Refusal& r : refusals) {
    absl::StatusOr<Grammar> g = RegexToGrammar(r.pattern);
    ASSERT_FALSE(g.ok()) << r.pattern;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << r.pattern;
    EXPECT_THAT(std::string(g.status().message()), HasSubstr(r.message)) << r.pattern;
    EXPECT_THAT(std::string(g.status().message()), ::testing::StartsWith("regex: "));
  }
}

TEST(Regex, RepeatBoundFollowsTheLimits) {
  GrammarLimits limits;
  limits.max_repeat = 5;
  EXPECT_TRUE(RegexToGrammar("a{5}", limits).ok());
  EXPECT_TRUE(RegexToGrammar("a{0,5}b{5,}", limits).ok());
  absl::StatusOr<Grammar> g = RegexToGrammar("ab{6}", limits);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(std::string(g.status().message()),
              HasSubstr("repetition bound 6 at offset 2 exceeds the limit of 5"));
  EXPECT_FALSE(RegexToGrammar("a{6,}", limits).ok());
  // Too many expression nodes: the builder's limit surfaces.
  limits = {};
  limits.max_exprs = 10;
  EXPECT_FALSE(RegexToGrammar("a|b|c|d|e|f|g|h|i|j|k|l", limits).ok());
}

TEST(Regex, NestingIsBounded) {
  EXPECT_TRUE(RegexToGrammar(std::string(200, '(') + "a" + std::string(200, ')')).ok());
  absl::StatusOr<Grammar> g =
      RegexToGrammar(std::string(100000, '(') + "a" + std::string(100000, ')'));
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(std::string(g.status().message()),
              HasSubstr("groups nested deeper than 200 at offset 200"));
}

TEST(Regex, RunsOfCharactersBecomeOneLiteral) {
  absl::StatusOr<Grammar> g = RegexToGrammar("hello, w\xC3\xB6rld");
  ASSERT_TRUE(g.ok());
  const Expr& body = g->expr(g->rule(g->root()).body);
  EXPECT_EQ(body.kind, ExprKind::kLiteral);
  EXPECT_EQ(body.literal, "hello, w\xC3\xB6rld");
  g = RegexToGrammar("abc+");  // the quantifier takes the last character only
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(Recognize(*g, "abccc"));
  EXPECT_FALSE(Recognize(*g, "abcabc"));
}

TEST(Choice, ExactlyOneOfTheStrings) {
  std::mt19937 rng(5);
  std::vector<std::vector<std::string>> sets = {
      {"yes", "no", "maybe"},
      {"a", "ab", "abc", "", "b"},
      {"dup", "dup", "duplicate"},
      {"caf\xC3\xA9", "cafe", "caf\xC3\xA8", "\xF0\x9F\x98\x80"},
      {std::string("nul\0byte", 8), "nul"},
  };
  std::vector<std::string> deep;  // prefixes of one another, past the trie's depth cap
  for (int i = 1; i <= 230; ++i) deep.push_back(std::string(i, 'a'));
  sets.push_back(deep);
  std::vector<std::string> many;
  for (int i = 0; i < 500; ++i) many.push_back(absl::StrCat("item-", i * 7919 % 1000));
  sets.push_back(many);
  for (const auto& set : sets) {
    absl::StatusOr<Grammar> g = ChoiceGrammar(set);
    ASSERT_TRUE(g.ok()) << g.status();
    const std::set<std::string> members(set.begin(), set.end());
    std::vector<std::string> probes(set.begin(), set.end());
    for (const std::string& s : set) {
      probes.push_back(s + "a");
      if (!s.empty()) probes.push_back(s.substr(0, s.size() - 1));
      if (!s.empty()) probes.push_back(s.substr(1));
    }
    for (int i = 0; i < 50; ++i) probes.push_back(std::string(rng() % 4, "ab-"[rng() % 3]));
    for (const std::string& p : probes) {
      EXPECT_EQ(Recognize(*g, p), members.count(p) > 0) << "choice probe \"" << p << "\"";
    }
  }
  absl::StatusOr<Grammar> none = ChoiceGrammar({});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace minfer::grammar
