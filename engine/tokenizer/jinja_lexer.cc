// The Jinja lexer: template text and tags, with Jinja2's whitespace rules
// as transformers configures them (trim_blocks, lstrip_blocks) and its
// token grammar (jinja2/lexer.py), written as a hand-made scanner.
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/tokenizer/jinja_internal.h"
#include "engine/tokenizer/unicode.h"

namespace minfer::tokenizer::jinja::internal {

std::string NormalizeSource(absl::string_view source) {
  // Jinja2 splits on \r\n, \r and \n and joins with \n, dropping one empty
  // last line (keep_trailing_newline is off).
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::string Program::Where(uint32_t offset) const {
  size_t line = 1, line_start = 0;
  const size_t end = std::min<size_t>(offset, source.size());
  for (size_t i = 0; i < end; ++i) {
    if (source[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  const size_t column =
      CodePointCount(absl::string_view(source).substr(line_start, end - line_start));
  return absl::StrCat("line ", line, ", column ", column + 1);
}

namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return absl::ascii_isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsNameChar(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_'; }
int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  explicit Lexer(const Program& program) : p_(program), src_(program.source) {}

  absl::StatusOr<std::vector<Token>> Run() {
    while (pos_ < src_.size()) {
      const size_t start = FindTagStart(pos_);
      if (start == absl::string_view::npos) {
        AddText(src_.substr(pos_), pos_);
        break;
      }
      RETURN_IF_ERROR(LexTag(start));
    }
    tokens_.push_back({Tok::kEof, static_cast<uint32_t>(src_.size()), ""});
    return std::move(tokens_);
  }

 private:
  absl::Status Fail(size_t offset, absl::string_view message) const {
    return absl::InvalidArgumentError(
        absl::StrCat(p_.Where(static_cast<uint32_t>(offset)), ": ", message));
  }

  size_t FindTagStart(size_t from) const {
    for (size_t i = src_.find('{', from); i != absl::string_view::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return absl::string_view::npos;
  }

  // Length of the Python-whitespace code point at `pos`, or 0.
  size_t SpaceAt(size_t pos) const {
    if (pos >= src_.size()) return 0;
    size_t len;
    const char32_t cp = CodePointAt(src_, pos, &len);
    return IsPySpace(cp) ? len : 0;
  }
  size_t SkipSpaces(size_t pos) const {
    for (size_t n; (n = SpaceAt(pos)) > 0;) pos += n;
    return pos;
  }

  void AddText(absl::string_view text, size_t offset) {
    if (text.empty()) return;
    tokens_.push_back({Tok::kText, static_cast<uint32_t>(offset), std::string(text)});
  }

  // Emits the text before a tag, applying the tag's whitespace control:
  // "-" strips all whitespace before it; otherwise, for block tags and
  // comments (lstrip_blocks, unless "+"), whitespace between the start of
  // the line and the tag.
  void AddTextBeforeTag(size_t begin, size_t end, char sign, bool lstrip_kind) {
    absl::string_view text = src_.substr(begin, end - begin);
    if (sign == '-') {
      size_t keep = 0;
      for (size_t i = 0; i < text.size();) {
        size_t len;
        const char32_t cp = CodePointAt(text, i, &len);
        i += len;
        if (!IsPySpace(cp)) keep = i;
      }
      text = text.substr(0, keep);
    } else if (sign != '+' && lstrip_kind) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == absl::string_view::npos ? 0 : nl + 1;
      if (l_pos > 0 || line_starting_) {
        bool all_space = l_pos < text.size();
        for (size_t i = l_pos; i < text.size() && all_space;) {
          size_t len;
          all_space = IsPySpace(CodePointAt(text, i, &len));
          i += len;
        }
        if (all_space) text = text.substr(0, l_pos);
      }
    }
    AddText(text, begin);
  }

  // After a block tag or comment ends at `pos` (just past "%}" or "#}"),
  // with the sign before it: "-" skips all whitespace, "+" nothing, else
  // trim_blocks drops one newline. Updates line_starting_.
  size_t AfterBlockEnd(size_t pos, char sign) {
    if (sign == '-') {
      const size_t end = SkipSpaces(pos);
      line_starting_ = end > pos && src_[end - 1] == '\n';
      return end;
    }
    if (sign != '+' && pos < src_.size() && src_[pos] == '\n') {
      line_starting_ = true;
      return pos + 1;
    }
    line_starting_ = false;
    return pos;
  }

  absl::Status LexTag(size_t start) {
    const char kind = src_[start + 1];
    char sign = 0;
    if (start + 2 < src_.size() && (src_[start + 2] == '-' || src_[start + 2] == '+')) {
      sign = src_[start + 2];
    }
    const size_t inner = start + 2 + (sign != 0 ? 1 : 0);
    if (kind == '#') {
      AddTextBeforeTag(pos_, start, sign, /*lstrip_kind=*/true);
      return LexComment(start, inner);
    }
    if (kind == '%' && IsRawBegin(inner)) {
      AddTextBeforeTag(pos_, start, sign, /*lstrip_kind=*/true);
      return LexRaw(start, inner);
    }
    AddTextBeforeTag(pos_, start, sign, /*lstrip_kind=*/kind == '%');
    tokens_.push_back(
        {kind == '%' ? Tok::kBlockBegin : Tok::kVarBegin, static_cast<uint32_t>(start), ""});
    return LexInside(start, inner, kind == '%');
  }

  absl::Status LexComment(size_t start, size_t inner) {
    // The comment ends at the first "#}"; a "-" or "+" just before it is
    // its whitespace control.
    const size_t close = src_.find("#}", inner);
    if (close == absl::string_view::npos) return Fail(start, "missing end of comment tag");
    char sign = 0;
    if (close > inner && (src_[close - 1] == '-' || src_[close - 1] == '+')) sign = src_[close - 1];
    pos_ = AfterBlockEnd(close + 2, sign);
    return absl::OkStatus();
  }

  // Whether "raw" (then whitespace or the tag end) follows a "{%" at `p`.
  bool IsRawBegin(size_t p) const {
    p = SkipSpaces(p);
    if (src_.substr(p, 3) != "raw") return false;
    p = SkipSpaces(p + 3);
    return src_.substr(p, 2) == "%}" || src_.substr(p, 3) == "-%}";
  }

  absl::Status LexRaw(size_t start, size_t inner) {
    size_t p = SkipSpaces(SkipSpaces(inner) + 3);
    if (src_[p] == '-') {
      const size_t end = SkipSpaces(p + 3);
      line_starting_ = end > p + 3 && src_[end - 1] == '\n';
      p = end;
    } else {
      p += 2;  // a raw tag's own end keeps the newline after it
      line_starting_ = false;
    }
    // Find {%[-+]? endraw [-+]?%}.
    for (size_t i = src_.find("{%", p); i != absl::string_view::npos; i = src_.find("{%", i + 1)) {
      char sign = 0;
      size_t q = i + 2;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
      q = SkipSpaces(q);
      if (src_.substr(q, 6) != "endraw") continue;
      q = SkipSpaces(q + 6);
      char end_sign = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) end_sign = src_[q++];
      if (src_.substr(q, 2) != "%}") continue;
      AddTextBeforeTag(p, i, sign, /*lstrip_kind=*/true);
      pos_ = AfterBlockEnd(q + 2, end_sign);
      return absl::OkStatus();
    }
    return Fail(start, "missing end of raw directive");
  }

  absl::Status LexInside(size_t start, size_t p, bool block) {
    std::vector<char> balance;
    while (true) {
      if (p >= src_.size()) {
        return Fail(start, block ? "unexpected end of template: the tag has no '%}'"
                                 : "unexpected end of template: the expression has no '}}'");
      }
      if (balance.empty()) {
        if (block) {
          if (src_.substr(p, 3) == "+%}" || src_.substr(p, 3) == "-%}") {
            tokens_.push_back({Tok::kBlockEnd, static_cast<uint32_t>(p), ""});
            pos_ = AfterBlockEnd(p + 3, src_[p]);
            return absl::OkStatus();
          }
          if (src_.substr(p, 2) == "%}") {
            tokens_.push_back({Tok::kBlockEnd, static_cast<uint32_t>(p), ""});
            pos_ = AfterBlockEnd(p + 2, 0);
            return absl::OkStatus();
          }
        } else {
          if (src_.substr(p, 3) == "-}}") {
            tokens_.push_back({Tok::kVarEnd, static_cast<uint32_t>(p), ""});
            const size_t end = SkipSpaces(p + 3);
            line_starting_ = end > p + 3 && src_[end - 1] == '\n';
            pos_ = end;
            return absl::OkStatus();
          }
          if (src_.substr(p, 2) == "}}") {
            tokens_.push_back({Tok::kVarEnd, static_cast<uint32_t>(p), ""});
            line_starting_ = false;
            pos_ = p + 2;
            return absl::OkStatus();
          }
        }
      }
      if (const size_t n = SpaceAt(p); n > 0) {
        p += n;
        continue;
      }
      const char c = src_[p];
      if (IsDigit(c)) {
        ASSIGN_OR_RETURN(p, LexNumber(p));
        continue;
      }
      if (IsNameStart(c)) {
        size_t q = p + 1;
        while (q < src_.size() && IsNameChar(src_[q])) ++q;
        tokens_.push_back(
            {Tok::kName, static_cast<uint32_t>(p), std::string(src_.substr(p, q - p))});
        p = q;
        continue;
      }
      if (c == '\'' || c == '"') {
        ASSIGN_OR_RETURN(p, LexString(p));
        continue;
      }
      ASSIGN_OR_RETURN(p, LexOperator(p, &balance));
    }
  }

  // Digits with single underscores between groups, from `p`; returns the
  // end (== p when there is no digit).
  size_t ScanDigits(size_t p, bool (*digit)(char)) const {
    size_t q = p;
    while (q < src_.size() && digit(src_[q])) {
      ++q;
      if (q + 1 < src_.size() && src_[q] == '_' && digit(src_[q + 1])) ++q;
    }
    return q;
  }

  absl::StatusOr<size_t> LexNumber(size_t p) {
    auto dec = [](char c) { return c >= '0' && c <= '9'; };
    // Float: digits, then a fraction and/or an exponent (not right after a
    // dot, so that "x.0.1" stays attribute access).
    if (p == 0 || src_[p - 1] != '.') {
      size_t q = ScanDigits(p, dec);
      bool is_float = false;
      if (q + 1 < src_.size() && src_[q] == '.' && dec(src_[q + 1])) {
        q = ScanDigits(q + 1, dec);
        is_float = true;
      }
      if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
        size_t r = q + 1;
        if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
        if (r < src_.size() && dec(src_[r])) {
          q = ScanDigits(r, dec);
          is_float = true;
        }
      }
      if (is_float) {
        std::string text;
        for (char c : src_.substr(p, q - p)) {
          if (c != '_') text.push_back(c);
        }
        Token t{Tok::kFloat, static_cast<uint32_t>(p), text};
        t.float_value = std::strtod(text.c_str(), nullptr);
        tokens_.push_back(std::move(t));
        return q;
      }
    }
    // Integer: 0b / 0o / 0x, a decimal without leading zeros, or zeros.
    int base = 10;
    size_t digits_at = p;
    size_t q;
    const char next = p + 1 < src_.size() ? static_cast<char>(absl::ascii_tolower(src_[p + 1])) : 0;
    auto bin = [](char c) { return c == '0' || c == '1'; };
    auto oct = [](char c) { return c >= '0' && c <= '7'; };
    auto hex = [](char c) { return HexValue(c) >= 0; };
    auto prefixed = [&](bool (*digit)(char)) -> size_t {
      // 0b(_?[01])+ : an underscore may also follow the prefix.
      size_t r = p + 2;
      size_t end = r;
      while (true) {
        size_t s = r;
        if (s < src_.size() && src_[s] == '_') ++s;
        if (s < src_.size() && digit(src_[s])) {
          r = s + 1;
          end = r;
        } else {
          break;
        }
      }
      return end;
    };
    if (src_[p] == '0' && (next == 'b' || next == 'o' || next == 'x')) {
      base = next == 'b' ? 2 : (next == 'o' ? 8 : 16);
      q = prefixed(base == 2 ? +bin : (base == 8 ? +oct : +hex));
      if (q == p + 2) {
        q = p + 1;  // just "0"; the letter starts a name
        base = 10;
      } else {
        digits_at = p + 2;
      }
    } else if (src_[p] == '0') {
      q = ScanDigits(p, [](char c) { return c == '0'; });
    } else {
      q = ScanDigits(p, dec);
    }
    uint64_t value = 0;
    for (char c : src_.substr(digits_at, q - digits_at)) {
      if (c == '_') continue;
      const uint64_t d = static_cast<uint64_t>(HexValue(c));
      if (value > (static_cast<uint64_t>(INT64_MAX) - d) / static_cast<uint64_t>(base)) {
        return Fail(p, "integer literal is too large");
      }
      value = value * static_cast<uint64_t>(base) + d;
    }
    Token t{Tok::kInt, static_cast<uint32_t>(p), std::string(src_.substr(p, q - p))};
    t.int_value = static_cast<int64_t>(value);
    tokens_.push_back(std::move(t));
    return q;
  }

  absl::StatusOr<size_t> LexString(size_t p) {
    const char quote = src_[p];
    size_t q = p + 1;
    while (q < src_.size() && src_[q] != quote) q += src_[q] == '\\' ? 2 : 1;
    if (q >= src_.size()) return Fail(p, "unterminated string literal");
    std::string value;
    RETURN_IF_ERROR(Unescape(p, src_.substr(p + 1, q - p - 1), &value));
    tokens_.push_back({Tok::kString, static_cast<uint32_t>(p), std::move(value)});
    return q + 1;
  }

  // Python's unicode-escape decoding, which Jinja2 applies to string
  // literals: unknown escapes stay as written.
  absl::Status Unescape(size_t at, absl::string_view s, std::string* out) const {
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] != '\\' || i + 1 >= s.size()) {
        out->push_back(s[i]);
        continue;
      }
      const char e = s[++i];
      switch (e) {
        case '\n':
          break;  // line continuation
        case '\\':
          out->push_back('\\');
          break;
        case '\'':
          out->push_back('\'');
          break;
        case '"':
          out->push_back('"');
          break;
        case 'a':
          out->push_back('\a');
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'v':
          out->push_back('\v');
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
          uint32_t cp = 0;
          for (size_t k = 0; k < n; ++k) {
            const int h = i + 1 + k < s.size() ? HexValue(s[i + 1 + k]) : -1;
            if (h < 0) {
              return Fail(at,
                          absl::StrCat("truncated \\", std::string(1, e), " escape in a string"));
            }
            cp = cp * 16 + static_cast<uint32_t>(h);
          }
          i += n;
          if (cp > 0x10FFFF) return Fail(at, "illegal Unicode character in a string escape");
          if (cp >= 0xD800 && cp <= 0xDFFF) cp = kReplacementChar;  // no lone surrogates in UTF-8
          AppendUtf8(cp, out);
          break;
        }
        case 'N':
          return Fail(at, "\\N{...} escapes are not supported");
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7'; ++k) {
              cp = cp * 8 + static_cast<uint32_t>(s[++i] - '0');
            }
            AppendUtf8(cp, out);
          } else {
            out->push_back('\\');
            out->push_back(e);
          }
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<size_t> LexOperator(size_t p, std::vector<char>* balance) {
    static constexpr absl::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (absl::string_view op : kTwo) {
      if (src_.substr(p, 2) == op) {
        tokens_.push_back({Tok::kOp, static_cast<uint32_t>(p), std::string(op)});
        return p + 2;
      }
    }
    const char c = src_[p];
    static constexpr absl::string_view kOne = "+-/*%~[](){}><=.:|,;";
    if (kOne.find(c) == absl::string_view::npos) {
      size_t len;
      const char32_t cp = CodePointAt(src_, p, &len);
      std::string shown;
      AppendUtf8(cp, &shown);
      return Fail(p, absl::StrCat("unexpected character '", shown, "'"));
    }
    if (c == '(' || c == '[' || c == '{') {
      balance->push_back(c == '(' ? ')' : (c == '[' ? ']' : '}'));
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance->empty()) return Fail(p, absl::StrCat("unexpected '", std::string(1, c), "'"));
      if (balance->back() != c) {
        return Fail(p, absl::StrCat("unexpected '", std::string(1, c), "', expected '",
                                    std::string(1, balance->back()), "'"));
      }
      balance->pop_back();
    }
    tokens_.push_back({Tok::kOp, static_cast<uint32_t>(p), std::string(1, c)});
    return p + 1;
  }

  const Program& p_;
  absl::string_view src_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Lex(const Program& program) { return Lexer(program).Run(); }

}  // namespace minfer::tokenizer::jinja::internal
