#include "engine/grammar/gbnf.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/unicode.h"

namespace minfer::grammar {
namespace {

constexpr uint32_t kMaxCp = 0x10FFFF;
constexpr int kMaxGroupDepth = 200;

bool IsWordChar(char c) {
  // llama.cpp's rule names are letters, digits and '-'; '_' is accepted too
  // (hand-written grammars use it, and it cannot clash with any syntax).
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '-' || c == '_';
}
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsHex(char c) {
  return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
uint32_t HexValue(char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }


// Recursive descent over the text's bytes. Rules are declared in the
// builder when first named (defined or referenced) so references may come
// before definitions; the first error stops the parse.
class GbnfParser {
 public:
  GbnfParser(absl::string_view text, const GrammarLimits& limits) : t_(text), b_(limits) {}

  absl::StatusOr<Grammar> Parse() {
    SkipSpace(/*newlines=*/true);
    while (ok() && !AtEnd()) {
      ParseRule();
      if (!ok()) break;
      SkipSpace(/*newlines=*/true);
    }
    if (!ok()) return error_;
    // Every reference resolves (reachable from root or not, as llama.cpp
    // checks); reported at the first reference in the text.
    const RuleInfo* undefined = nullptr;
    std::string undefined_name;
    for (const auto& [name, info] : rules_) {
      if (!info.defined && (undefined == nullptr || info.first_ref < undefined->first_ref)) {
        undefined = &info;
        undefined_name = name;
      }
    }
    if (undefined != nullptr) {
      return Located(undefined->first_ref, absl::StrCat("undefined rule '", undefined_name, "'"));
    }
    auto root = rules_.find("root");
    if (root == rules_.end()) {
      return absl::InvalidArgumentError("gbnf: the grammar has no 'root' rule");
    }
    absl::StatusOr<Grammar> g = std::move(b_).Build(root->second.id);
    // Build's own refusals (left recursion, naming the rule; limits) carry
    // no position; say where they come from.
    if (!g.ok()) return absl::InvalidArgumentError(absl::StrCat("gbnf: ", g.status().message()));
    return g;
  }

 private:
  struct RuleInfo {
    RuleId id = -1;
    bool defined = false;
    size_t first_ref = 0;  // offset of the first reference (if not defined)
  };

  bool ok() const { return error_.ok(); }
  bool AtEnd() const { return pos_ >= t_.size(); }
  char Peek(size_t ahead = 0) const { return pos_ + ahead < t_.size() ? t_[pos_ + ahead] : '\0'; }

  // "line L, column C" (1-based; columns count characters, not bytes).
  absl::Status Located(size_t offset, absl::string_view message) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < offset && i < t_.size(); ++i) {
      if (t_[i] == '\n') {
        ++line;
        col = 1;
      } else if ((static_cast<unsigned char>(t_[i]) & 0xC0) != 0x80) {
        ++col;
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat("gbnf: line ", line, ", column ", col, ": ", message));
  }
  ExprId Fail(size_t offset, absl::string_view message) {
    if (error_.ok()) error_ = Located(offset, message);
    return -1;
  }

  // Spaces, tabs, carriage returns and comments; newlines too when
  // `newlines` (between rules, inside parentheses, after '|').
  void SkipSpace(bool newlines) {
    while (!AtEnd()) {
      const char c = Peek();
      if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++pos_;
      } else if (c == '#') {
        while (!AtEnd() && Peek() != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  // Whether `name ::=` starts at `at` (spaces allowed before '::=').
  bool RuleStartsAt(size_t at) const {
    size_t i = at;
    while (i < t_.size() && IsWordChar(t_[i])) ++i;
    if (i == at) return false;
    while (i < t_.size() && (t_[i] == ' ' || t_[i] == '\t')) ++i;
    return t_.substr(i, 3) == "::=";
  }

  // Between the items of a rule body. Inside parentheses newlines are plain
  // space. At the top level a newline ends the body only when what follows
  // (past blank lines and comments) is the end or a new `name ::=` rule;
  // otherwise the body continues on the next line. Leaves pos_ on the
  // newline that ends the body.
  void SkipBodySpace(bool nested) {
    while (true) {
      SkipSpace(nested);
      if (AtEnd() || Peek() != '\n') return;
      const size_t newline = pos_;
      SkipSpace(/*newlines=*/true);
      if (AtEnd() || RuleStartsAt(pos_)) {
        pos_ = newline;
        return;
      }
    }
  }

  RuleId RuleFor(const std::string& name, size_t ref_at) {
    auto [it, inserted] = rules_.try_emplace(name);
    if (inserted) {
      it->second.id = b_.Declare(name);
      it->second.first_ref = ref_at;
    }
    return it->second.id;
  }

  void ParseRule() {
    const size_t name_at = pos_;
    while (!AtEnd() && IsWordChar(Peek())) ++pos_;
    if (pos_ == name_at) {
      Fail(pos_, "expected a rule name");
      return;
    }
    const std::string name(t_.substr(name_at, pos_ - name_at));
    SkipSpace(/*newlines=*/false);
    if (t_.substr(pos_, 3) != "::=") {
      Fail(pos_, absl::StrCat("expected '::=' after the rule name '", name, "'"));
      return;
    }
    pos_ += 3;
    const RuleId id = RuleFor(name, name_at);
    RuleInfo& info = rules_[name];
    if (info.defined) {
      Fail(name_at, absl::StrCat("rule '", name, "' is defined twice"));
      return;
    }
    info.defined = true;
    // A body may start on the next line (`object ::=` then the body); an
    // empty body followed by the next rule stays empty.
    SkipBodySpace(/*nested=*/false);
    const ExprId body = ParseAlternates(/*nested=*/false);
    if (!ok()) return;
    if (!AtEnd() && Peek() != '\n') {
      Fail(pos_, absl::StrCat("unexpected '", std::string(1, Peek()), "'"));
      return;
    }
    b_.Define(id, body);
  }

  ExprId ParseAlternates(bool nested) {
    std::vector<ExprId> alts;
    while (true) {
      const ExprId seq = ParseSequence(nested);
      if (!ok()) return -1;
      alts.push_back(seq);
      if (Peek() != '|') break;
      ++pos_;
      SkipSpace(/*newlines=*/true);  // a newline after '|' continues the rule
    }
    return b_.Alt(std::move(alts));
  }

  ExprId ParseSequence(bool nested) {
    std::vector<ExprId> items;
    while (true) {
      SkipBodySpace(nested);
      if (AtEnd() || Peek() == '|' || Peek() == ')' || Peek() == '\n') break;
      const size_t at = pos_;
      const char c = Peek();
      ExprId item = -1;
      if (c == '"') {
        item = ParseLiteral();
      } else if (c == '[') {
        item = ParseClass();
      } else if (c == '(') {
        // Recursion per parenthesis: bounded so hostile text cannot exhaust
        // the stack (here or in the passes that walk expressions).
        if (++group_depth_ > kMaxGroupDepth) {
          return Fail(at, absl::StrCat("parentheses nested deeper than ", kMaxGroupDepth));
        }
        ++pos_;
        SkipSpace(/*newlines=*/true);
        item = ParseAlternates(/*nested=*/true);
        --group_depth_;
        if (!ok()) return -1;
        SkipSpace(/*newlines=*/true);
        if (Peek() != ')') return Fail(at, "unclosed '('");
        ++pos_;
      } else if (c == '.') {
        ++pos_;
        item = b_.AnyCodepoint();
      } else if (IsWordChar(c)) {
        while (!AtEnd() && IsWordChar(Peek())) ++pos_;
        item = b_.Ref(RuleFor(std::string(t_.substr(at, pos_ - at)), at));
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        return Fail(at, absl::StrCat("'", std::string(1, c), "' has nothing to repeat"));
      } else if (c == '<' || c == '!') {
        return Fail(at, "token references (<...>) are not supported");
      } else if (c == ':' && t_.substr(pos_, 3) == "::=") {
        return Fail(at, "'::=' inside a rule body (a rule must start on a new line)");
      } else if (static_cast<unsigned char>(c) >= 0x80) {
        return Fail(at, "unexpected non-ASCII character (quote it)");
      } else {
        return Fail(at, absl::StrCat("unexpected '", std::string(1, c), "'"));
      }
      if (!ok()) return -1;
      // Postfix operators (llama.cpp allows space before them and applies
      // several in a row to the same item).
      while (true) {
        SkipSpace(/*newlines=*/nested);
        const char op = Peek();
        if (op == '*') {
          item = b_.Star(item);
        } else if (op == '+') {
          item = b_.Plus(item);
        } else if (op == '?') {
          item = b_.Optional(item);
        } else if (op == '{') {
          int32_t min, max;
          if (!ParseBraces(&min, &max)) return -1;
          item = b_.Repeat(item, min, max);
          continue;
        } else {
          break;
        }
        ++pos_;
      }
      items.push_back(item);
    }
    return b_.Seq(std::move(items));
  }

  bool ReadInt(int64_t* v) {
    if (!IsDigit(Peek())) return false;
    int64_t x = 0;
    while (IsDigit(Peek())) {
      x = std::min<int64_t>(x * 10 + (Peek() - '0'), int64_t{1} << 40);
      ++pos_;
    }
    *v = x;
    return true;
  }

  // {m} {m,} {m,n} at pos_.
  bool ParseBraces(int32_t* min, int32_t* max) {
    const size_t at = pos_;
    ++pos_;
    SkipSpace(false);
    int64_t m, n;
    if (!ReadInt(&m)) {
      Fail(pos_, "expected a number after '{'");
      return false;
    }
    SkipSpace(false);
    n = m;
    if (Peek() == ',') {
      ++pos_;
      SkipSpace(false);
      if (!ReadInt(&n)) n = -1;
      SkipSpace(false);
    }
    if (Peek() != '}') {
      Fail(pos_, "expected '}' to close the repetition");
      return false;
    }
    ++pos_;
    if (n >= 0 && n < m) {
      Fail(at, absl::StrCat("repetition {", m, ",", n, "}: the maximum is below the minimum"));
      return false;
    }
    const int64_t limit = b_.limits().max_repeat;
    if (m > limit || n > limit) {
      Fail(at, absl::StrCat("repetition bound ", std::max(m, n), " exceeds the limit of ", limit));
      return false;
    }
    *min = static_cast<int32_t>(m);
    *max = n < 0 ? kUnbounded : static_cast<int32_t>(n);
    return true;
  }

  // One character of a literal or class at pos_ (an escape or a UTF-8
  // sequence), as a code point.
  bool ParseChar(uint32_t* cp) {
    const size_t at = pos_;
    const auto c0 = static_cast<unsigned char>(Peek());
    if (c0 == '\\') {
      const char e = Peek(1);
      pos_ += 2;
      int digits = 0;
      switch (e) {
        case 'n': *cp = '\n'; return true;
        case 'r': *cp = '\r'; return true;
        case 't': *cp = '\t'; return true;
        case '\\':
        case '"':
        case '\'':
        case '[':
        case ']':
        case '-':
        case '^':
        case '/': *cp = static_cast<uint8_t>(e); return true;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        default:
          if (e == '\0' && pos_ - 1 >= t_.size()) {
            Fail(at, "unterminated escape");
          } else {
            Fail(at, absl::StrCat("unknown escape '\\", std::string(1, e), "'"));
          }
          return false;
      }
      uint64_t v = 0;
      for (int i = 0; i < digits; ++i) {
        if (!IsHex(Peek())) {
          Fail(at, absl::StrCat("expected ", digits, " hexadecimal digits after '\\",
                                std::string(1, e), "'"));
          return false;
        }
        v = v * 16 + HexValue(Peek());
        ++pos_;
      }
      if (v > kMaxCp) {
        Fail(at, "code point past U+10FFFF");
        return false;
      }
      *cp = static_cast<uint32_t>(v);
      return true;
    }
    const int len = c0 < 0x80 ? 1 : (c0 >> 5) == 0x6 ? 2 : (c0 >> 4) == 0xE ? 3 : (c0 >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || pos_ + len > t_.size()) {
      Fail(at, "invalid UTF-8");
      return false;
    }
    uint32_t v = len == 1 ? c0 : len == 2 ? (c0 & 0x1F) : len == 3 ? (c0 & 0x0F) : (c0 & 0x07);
    for (int i = 1; i < len; ++i) {
      const auto c = static_cast<unsigned char>(t_[pos_ + i]);
      if ((c & 0xC0) != 0x80) {
        Fail(at, "invalid UTF-8");
        return false;
      }
      v = (v << 6) | (c & 0x3F);
    }
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < kMin[len] || v > kMaxCp || (v >= 0xD800 && v <= 0xDFFF)) {
      Fail(at, "invalid UTF-8");
      return false;
    }
    pos_ += len;
    *cp = v;
    return true;
  }

  ExprId ParseLiteral() {
    const size_t at = pos_;
    ++pos_;  // '"'
    std::string bytes;
    while (true) {
      // A raw newline inside quotes is part of the literal, as in llama.cpp.
      if (AtEnd()) return Fail(at, "unterminated string literal");
      if (Peek() == '"') {
        ++pos_;
        break;
      }
      const size_t char_at = pos_;
      uint32_t cp;
      if (!ParseChar(&cp)) return -1;
      if (cp >= 0xD800 && cp <= 0xDFFF) {
        return Fail(char_at, "a surrogate code point can not appear in UTF-8 text");
      }
      tokenizer::AppendUtf8(cp, &bytes);
    }
    return b_.Literal(bytes);
  }

  ExprId ParseClass() {
    const size_t at = pos_;
    ++pos_;  // '['
    bool negated = false;
    if (Peek() == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    while (true) {
      if (AtEnd()) return Fail(at, "unterminated character class");
      if (Peek() == ']') {
        ++pos_;
        break;
      }
      const size_t lo_at = pos_;
      uint32_t lo, hi;
      if (!ParseChar(&lo)) return -1;
      hi = lo;
      if (Peek() == '-' && Peek(1) != ']' && pos_ + 1 < t_.size()) {
        ++pos_;
        if (!ParseChar(&hi)) return -1;
        if (hi < lo) return Fail(lo_at, "character range out of order");
      }
      ranges.emplace_back(lo, hi);
    }
    return b_.CodepointSet(std::move(ranges), negated);
  }

  absl::string_view t_;
  GrammarBuilder b_;
  size_t pos_ = 0;
  absl::Status error_;
  std::map<std::string, RuleInfo> rules_;
  int group_depth_ = 0;
};

}  // namespace

absl::StatusOr<Grammar> GbnfToGrammar(absl::string_view text, const GrammarLimits& limits) {
  GbnfParser parser(text, limits);
  return parser.Parse();
}

}  // namespace minfer::grammar
