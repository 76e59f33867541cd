#include "engine/grammar/regex.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/unicode.h"

namespace minfer::grammar {
namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

constexpr uint32_t kMaxCp = 0x10FFFF;

constexpr int kMaxGroupDepth = 200;

bool IsSurrogate(uint32_t cp) { return cp >= 0xD800 && cp <= 0xDFFF; }


// Sorted, merged, clipped to 0..10FFFF, surrogates cut out: the form the
// char_set hook is promised.
Ranges Normalize(Ranges r) {
  for (auto& [lo, hi] : r) {
    if (lo > hi) std::swap(lo, hi);
  }
  std::sort(r.begin(), r.end());
  Ranges merged;
  for (auto [lo, hi] : r) {
    if (lo > kMaxCp) continue;
    hi = std::min(hi, kMaxCp);
    if (!merged.empty() && lo <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, hi);
    } else {
      merged.emplace_back(lo, hi);
    }
  }
  Ranges out;
  for (auto [lo, hi] : merged) {
    if (hi < 0xD800 || lo > 0xDFFF) {
      out.emplace_back(lo, hi);
      continue;
    }
    if (lo < 0xD800) out.emplace_back(lo, 0xD7FF);
    if (hi > 0xDFFF) out.emplace_back(0xE000, hi);
  }
  return out;
}

// The scalar values not in `r` (r need not be normalized).
Ranges Complement(const Ranges& r) {
  Ranges n = Normalize(r);
  Ranges out;
  uint32_t next = 0;
  for (auto [lo, hi] : n) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCp) out.emplace_back(next, kMaxCp);
  return Normalize(std::move(out));  // drops the surrogate block
}

// ECMAScript's class escapes (without the i flag, where \w would grow).
const Ranges& DigitSet() {
  static const Ranges r = {{'0', '9'}};
  return r;
}
const Ranges& WordSet() {
  static const Ranges r = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
  return r;
}
// WhiteSpace and LineTerminator (ECMA-262 §22.2.2.9 CharacterClassEscape
// :: s): TAB VT FF SP NBSP ZWNBSP, the Zs category, LF CR LS PS.
const Ranges& SpaceSet() {
  static const Ranges r = {{0x09, 0x0D},     {0x20, 0x20},     {0xA0, 0xA0},
                           {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029},
                           {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
                           {0xFEFF, 0xFEFF}};
  return r;
}
// `.`: anything but a LineTerminator.
const Ranges& DotSet() {
  static const Ranges r = Complement({{0x0A, 0x0A}, {0x0D, 0x0D}, {0x2028, 0x2029}});
  return r;
}
const Ranges& AnySet() {
  static const Ranges r = Complement({});
  return r;
}

bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
uint32_t HexValue(char c) {
  return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
}
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAsciiAlnum(uint32_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// One parsed term of an alternative: an expression, or (when no char_set
// hook is set) a plain character kept apart so runs of them become one
// Literal instead of a chain of one-character nodes.
struct Item {
  ExprId expr = -1;
  int64_t cp = -1;  // >= 0: an unquantified literal character
};

// A character-class atom: one character (a possible range endpoint) or a
// class escape such as \d (never a range endpoint).
struct ClassAtom {
  bool is_set = false;
  uint32_t cp = 0;
  Ranges set;
};

// Recursive descent over the pattern's bytes (decoding UTF-8 where a
// character is read). Builds expressions straight into the builder; the
// first error stops the parse and is reported with its byte offset.
class RegexParser {
 public:
  RegexParser(absl::string_view pattern, GrammarBuilder& b, const RegexOptions& options)
      : p_(pattern), b_(b), opts_(options) {}

  absl::StatusOr<ExprId> Parse() {
    // Top level: alternatives, each possibly anchored at either end; in
    // search mode an unanchored side is padded with "any string".
    std::vector<ExprId> alts;
    while (true) {
      bool anchored_start = false, anchored_end = false;
      ExprId body = ParseAlternative(/*depth=*/0, &anchored_start, &anchored_end);
      if (!error_.ok()) return error_;
      if (opts_.search) {
        std::vector<ExprId> seq;
        if (!anchored_start) seq.push_back(AnyString());
        seq.push_back(body);
        if (!anchored_end) seq.push_back(AnyString());
        body = b_.Seq(std::move(seq));
      }
      alts.push_back(body);
      if (pos_ >= p_.size()) break;
      if (p_[pos_] == ')') {
        Error(absl::StrCat("unmatched ')' at offset ", pos_));
        return error_;
      }
      ++pos_;  // '|'
    }
    return b_.Alt(std::move(alts));
  }

 private:
  void Error(std::string message) {
    if (error_.ok()) error_ = absl::InvalidArgumentError(absl::StrCat("regex: ", message));
  }
  // Records an error and gives the caller an id to return (never used).
  ExprId Fail(std::string message) {
    Error(std::move(message));
    return -1;
  }
  ExprId Unsupported(absl::string_view construct, size_t offset) {
    return Fail(absl::StrCat(construct, " at offset ", offset, " is not supported"));
  }

  bool AtEnd() const { return pos_ >= p_.size(); }
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < p_.size() ? p_[pos_ + ahead] : '\0';
  }

  // Decodes the UTF-8 character at pos_ and advances; false (with an error)
  // on malformed input.
  bool NextChar(uint32_t* cp) {
    const size_t start = pos_;
    const auto c0 = static_cast<unsigned char>(p_[pos_]);
    int len = c0 < 0x80 ? 1 : (c0 >> 5) == 0x6 ? 2 : (c0 >> 4) == 0xE ? 3 : (c0 >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || start + len > p_.size()) {
      Fail(absl::StrCat("invalid UTF-8 at offset ", start));
      return false;
    }
    uint32_t v = len == 1 ? c0 : len == 2 ? (c0 & 0x1F) : len == 3 ? (c0 & 0x0F) : (c0 & 0x07);
    for (int i = 1; i < len; ++i) {
      const auto c = static_cast<unsigned char>(p_[start + i]);
      if ((c & 0xC0) != 0x80) {
        Fail(absl::StrCat("invalid UTF-8 at offset ", start));
        return false;
      }
      v = (v << 6) | (c & 0x3F);
    }
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < kMin[len] || v > kMaxCp || IsSurrogate(v)) {
      Fail(absl::StrCat("invalid UTF-8 at offset ", start));
      return false;
    }
    pos_ += len;
    *cp = v;
    return true;
  }

  // Equal sets share one expression (\d in \d{4}-\d{2}, every `.`): the
  // grammar is a DAG, and a set's UTF-8 expansion is the bulk of its nodes.
  ExprId EmitSet(const Ranges& ranges) {
    Ranges r = Normalize(ranges);
    if (r.empty()) return b_.Nothing();
    auto it = sets_.find(r);
    if (it != sets_.end()) return it->second;
    const ExprId e = opts_.char_set ? opts_.char_set(b_, r) : b_.CodepointSet(r);
    sets_.emplace(std::move(r), e);
    return e;
  }
  ExprId EmitChar(uint32_t cp) {
    // A lone surrogate (\uD800) can be written but never matches UTF-8 text.
    if (IsSurrogate(cp)) return b_.Nothing();
    if (opts_.char_set) return EmitSet({{cp, cp}});
    std::string s;
    tokenizer::AppendUtf8(cp, &s);
    return b_.Literal(s);
  }
  ExprId AnyString() {
    if (any_string_ < 0) any_string_ = b_.Star(EmitSet(AnySet()));
    return any_string_;
  }

  // Alternation inside a group (depth > 0).
  ExprId ParseDisjunction(int depth) {
    std::vector<ExprId> alts;
    while (true) {
      ExprId e = ParseAlternative(depth, nullptr, nullptr);
      if (!error_.ok()) return -1;
      alts.push_back(e);
      if (AtEnd() || Peek() != '|') break;
      ++pos_;
    }
    return b_.Alt(std::move(alts));
  }

  // Terms up to '|', ')' or the end. At depth 0 the anchors are legal at the
  // alternative's two ends and reported through the flags.
  ExprId ParseAlternative(int depth, bool* anchored_start, bool* anchored_end) {
    std::vector<Item> items;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      const size_t at = pos_;
      const char c = Peek();
      if (c == '^') {
        if (depth != 0 || !items.empty()) {
          return Unsupported(
              "anchor '^' away from the start of the pattern or of a top-level alternative", at);
        }
        ++pos_;
        *anchored_start = true;
        continue;
      }
      if (c == '$') {
        ++pos_;
        if (depth != 0 || !(AtEnd() || Peek() == '|')) {
          return Unsupported(
              "anchor '$' away from the end of the pattern or of a top-level alternative", at);
        }
        *anchored_end = true;
        continue;
      }
      Item item;
      if (!ParseAtom(depth, &item)) return -1;
      int32_t min = 0, max = 0;
      if (ParseQuantifier(&min, &max)) {
        if (!error_.ok()) return -1;
        if (!AtEnd() && Peek() == '?') ++pos_;  // lazy: same language
        int32_t m2, n2;
        const size_t again = pos_;
        if (ParseQuantifier(&m2, &n2)) {
          if (!error_.ok()) return -1;
          return Fail(absl::StrCat("nothing to repeat at offset ", again));
        }
        if (!error_.ok()) return -1;
        const ExprId base = item.cp >= 0 ? EmitChar(static_cast<uint32_t>(item.cp)) : item.expr;
        item = Item{b_.Repeat(base, min, max), -1};
      }
      if (!error_.ok()) return -1;
      items.push_back(item);
    }
    // Merge runs of plain characters into literals.
    std::vector<ExprId> seq;
    std::string run;
    for (const Item& it : items) {
      if (it.cp >= 0) {
        tokenizer::AppendUtf8(static_cast<char32_t>(it.cp), &run);
        continue;
      }
      if (!run.empty()) {
        seq.push_back(b_.Literal(run));
        run.clear();
      }
      seq.push_back(it.expr);
    }
    if (!run.empty()) seq.push_back(b_.Literal(run));
    return b_.Seq(std::move(seq));
  }

  // Reads an unsigned decimal at pos_, saturating (the bound check follows).
  bool ReadInt(size_t* at, int64_t* v) {
    if (*at >= p_.size() || !IsDigit(p_[*at])) return false;
    int64_t x = 0;
    while (*at < p_.size() && IsDigit(p_[*at])) {
      x = std::min<int64_t>(x * 10 + (p_[*at] - '0'), int64_t{1} << 40);
      ++*at;
    }
    *v = x;
    return true;
  }

  // A braced quantifier {m} {m,} {m,n} starting at `at` (which holds '{');
  // false if the text there is not one (then, as in ECMAScript's Annex B,
  // the '{' is an ordinary character). On success *end is past the '}'.
  bool BracedQuantifier(size_t at, int64_t* m, int64_t* n, size_t* end) {
    size_t i = at + 1;
    if (!ReadInt(&i, m)) return false;
    *n = *m;
    if (i < p_.size() && p_[i] == ',') {
      ++i;
      if (!ReadInt(&i, n)) *n = -1;
    }
    if (i >= p_.size() || p_[i] != '}') return false;
    *end = i + 1;
    return true;
  }

  // A quantifier at pos_ (consumed): true with its bounds. An error (bounds
  // out of order or over the limit) also returns true, with error_ set.
  bool ParseQuantifier(int32_t* min, int32_t* max) {
    if (AtEnd()) return false;
    const size_t at = pos_;
    switch (Peek()) {
      case '*': ++pos_; *min = 0; *max = kUnbounded; return true;
      case '+': ++pos_; *min = 1; *max = kUnbounded; return true;
      case '?': ++pos_; *min = 0; *max = 1; return true;
      case '{': {
        int64_t m, n;
        size_t end;
        if (!BracedQuantifier(at, &m, &n, &end)) return false;
        pos_ = end;
        if (n >= 0 && n < m) {
          Fail(absl::StrCat("quantifier bounds out of order at offset ", at));
          return true;
        }
        const int64_t limit = b_.limits().max_repeat;
        if (m > limit || n > limit) {
          Fail(absl::StrCat("repetition bound ", std::max(m, n), " at offset ", at,
                            " exceeds the limit of ", limit));
          return true;
        }
        *min = static_cast<int32_t>(m);
        *max = n < 0 ? kUnbounded : static_cast<int32_t>(n);
        return true;
      }
      default: return false;
    }
  }

  bool ParseAtom(int depth, Item* item) {
    const size_t at = pos_;
    const char c = Peek();
    switch (c) {
      case '*':
      case '+':
      case '?':
        Fail(absl::StrCat("nothing to repeat at offset ", at));
        return false;
      case '{': {
        int64_t m, n;
        size_t end;
        if (BracedQuantifier(at, &m, &n, &end)) {
          Fail(absl::StrCat("nothing to repeat at offset ", at));
          return false;
        }
        ++pos_;
        SetChar(item, '{');
        return true;
      }
      case '.':
        ++pos_;
        item->expr = EmitSet(DotSet());
        return true;
      case '[':
        item->expr = ParseClass();
        return error_.ok();
      case '(':
        item->expr = ParseGroup(depth);
        return error_.ok();
      case '\\': return ParseEscape(item);
      default: {
        uint32_t cp;
        if (!NextChar(&cp)) return false;
        SetChar(item, cp);
        return true;
      }
    }
  }

  void SetChar(Item* item, uint32_t cp) {
    if (opts_.char_set || IsSurrogate(cp)) {
      item->expr = EmitChar(cp);
    } else {
      item->cp = cp;
    }
  }

  ExprId ParseGroup(int depth) {
    const size_t at = pos_;
    // The parse recurses per group: bound it so a hostile pattern cannot
    // exhaust a worker's stack (nor later passes that walk expressions).
    if (depth >= kMaxGroupDepth) {
      return Fail(absl::StrCat("groups nested deeper than ", kMaxGroupDepth, " at offset ", at));
    }
    ++pos_;  // '('
    if (Peek() == '?') {
      if (Peek(1) == ':') {
        pos_ += 2;
      } else if (Peek(1) == '=') {
        return Unsupported("lookahead '(?='", at);
      } else if (Peek(1) == '!') {
        return Unsupported("negative lookahead '(?!'", at);
      } else if (Peek(1) == '<' && Peek(2) == '=') {
        return Unsupported("lookbehind '(?<='", at);
      } else if (Peek(1) == '<' && Peek(2) == '!') {
        return Unsupported("negative lookbehind '(?<!'", at);
      } else if (Peek(1) == '<') {
        // A named group: the name only labels a capture, which a grammar
        // has no use for; check it is an identifier and move on.
        pos_ += 2;
        const size_t name_at = pos_;
        while (!AtEnd() && Peek() != '>') {
          uint32_t cp;
          if (!NextChar(&cp)) return -1;
          const bool ok = IsAsciiAlnum(cp) || cp == '_' || cp == '$' || cp >= 0x80;
          if (!ok || (pos_ - 1 == name_at && IsDigit(static_cast<char>(cp)))) {
            return Fail(absl::StrCat("invalid group name at offset ", name_at));
          }
        }
        if (AtEnd() || pos_ == name_at) {
          return Fail(absl::StrCat("invalid group name at offset ", name_at));
        }
        ++pos_;  // '>'
      } else if (std::isalpha(static_cast<unsigned char>(Peek(1))) || Peek(1) == '-') {
        return Unsupported(absl::StrCat("group syntax '(?", std::string(1, Peek(1)), "'"), at);
      } else {
        return Fail(absl::StrCat("invalid group at offset ", at));
      }
    }
    ExprId e = ParseDisjunction(depth + 1);
    if (!error_.ok()) return -1;
    if (AtEnd()) return Fail(absl::StrCat("unterminated group at offset ", at));
    ++pos_;  // ')'
    return e;
  }

  // \u escapes: \uHHHH (pairing a high surrogate with a following \uLLLL,
  // as ECMAScript's u mode does) or \u{H...}. pos_ is at the 'u'.
  bool UnicodeEscape(size_t at, uint32_t* cp) {
    ++pos_;
    if (Peek() == '{') {
      size_t i = pos_ + 1;
      uint64_t v = 0;
      const size_t digits_at = i;
      while (i < p_.size() && IsHex(p_[i])) {
        v = std::min<uint64_t>(v * 16 + HexValue(p_[i]), uint64_t{1} << 32);
        ++i;
      }
      if (i == digits_at || i >= p_.size() || p_[i] != '}' || v > kMaxCp) {
        Fail(absl::StrCat("invalid Unicode escape at offset ", at));
        return false;
      }
      pos_ = i + 1;
      *cp = static_cast<uint32_t>(v);
      return true;
    }
    auto hex4 = [&](size_t i, uint32_t* out) {
      if (i + 4 > p_.size()) return false;
      uint32_t v = 0;
      for (size_t k = i; k < i + 4; ++k) {
        if (!IsHex(p_[k])) return false;
        v = v * 16 + HexValue(p_[k]);
      }
      *out = v;
      return true;
    };
    uint32_t v;
    if (!hex4(pos_, &v)) {
      Fail(absl::StrCat("invalid Unicode escape at offset ", at));
      return false;
    }
    pos_ += 4;
    uint32_t lo;
    if (v >= 0xD800 && v <= 0xDBFF && Peek() == '\\' && Peek(1) == 'u' && hex4(pos_ + 2, &lo) &&
        lo >= 0xDC00 && lo <= 0xDFFF) {
      pos_ += 6;
      v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
    }
    *cp = v;
    return true;
  }

  // The escapes shared by atoms and class atoms that denote one character
  // (\n, \xHH, \u..., \cX, \0, identity escapes). pos_ is past the '\'.
  // `at` is the backslash's offset.
  bool CharacterEscape(size_t at, bool in_class, uint32_t* cp) {
    const char c = Peek();
    switch (c) {
      case 'n': ++pos_; *cp = '\n'; return true;
      case 'r': ++pos_; *cp = '\r'; return true;
      case 't': ++pos_; *cp = '\t'; return true;
      case 'f': ++pos_; *cp = '\f'; return true;
      case 'v': ++pos_; *cp = '\v'; return true;
      case '0':
        if (IsDigit(Peek(1))) {
          Unsupported("octal escape", at);
          return false;
        }
        ++pos_;
        *cp = 0;
        return true;
      case 'c': {
        const char l = Peek(1);
        if (!((l >= 'a' && l <= 'z') || (l >= 'A' && l <= 'Z'))) {
          Fail(absl::StrCat("invalid control escape at offset ", at));
          return false;
        }
        pos_ += 2;
        *cp = static_cast<uint32_t>(l) % 32;
        return true;
      }
      case 'x':
        if (!IsHex(Peek(1)) || !IsHex(Peek(2))) {
          Fail(absl::StrCat("invalid hexadecimal escape at offset ", at));
          return false;
        }
        *cp = HexValue(Peek(1)) * 16 + HexValue(Peek(2));
        pos_ += 3;
        return true;
      case 'u': return UnicodeEscape(at, cp);
      default: break;
    }
    if (in_class && c == 'b') {
      ++pos_;
      *cp = 0x08;
      return true;
    }
    uint32_t v;
    const size_t char_at = pos_;
    if (!NextChar(&v)) return false;
    // ECMAScript's u mode allows only syntax characters and '/' here; Annex
    // B allows any non-letter. Schemas in the wild escape '-', ':', '"', '@'
    // and the like, so any character other than a letter or digit stands
    // for itself. A letter or digit escape we do not know is an error
    // rather than a guess.
    if (v < 0x80 && IsAsciiAlnum(v)) {
      pos_ = char_at;
      Fail(absl::StrCat("unknown escape '\\", std::string(1, static_cast<char>(v)),
                        "' at offset ", at));
      return false;
    }
    *cp = v;
    return true;
  }

  // \d \w \s and their complements; false if `c` is none of them.
  static bool ClassEscapeSet(char c, Ranges* set) {
    switch (c) {
      case 'd': *set = DigitSet(); return true;
      case 'D': *set = Complement(DigitSet()); return true;
      case 'w': *set = WordSet(); return true;
      case 'W': *set = Complement(WordSet()); return true;
      case 's': *set = SpaceSet(); return true;
      case 'S': *set = Complement(SpaceSet()); return true;
      default: return false;
    }
  }

  bool ParseEscape(Item* item) {
    const size_t at = pos_;
    ++pos_;  // '\'
    if (AtEnd()) {
      Fail(absl::StrCat("'\\' at the end of the pattern at offset ", at));
      return false;
    }
    const char c = Peek();
    Ranges set;
    if (ClassEscapeSet(c, &set)) {
      ++pos_;
      item->expr = EmitSet(set);
      return true;
    }
    switch (c) {
      case 'b':
        Unsupported("word boundary '\\b'", at);
        return false;
      case 'B':
        Unsupported("non-word boundary '\\B'", at);
        return false;
      case 'k':
        Unsupported("named back-reference '\\k'", at);
        return false;
      case 'p':
      case 'P':
        Unsupported(absl::StrCat("Unicode property escape '\\", std::string(1, c), "'"), at);
        return false;
      default: break;
    }
    if (c >= '1' && c <= '9') {
      Unsupported(absl::StrCat("back-reference '\\", std::string(1, c), "'"), at);
      return false;
    }
    uint32_t cp;
    if (!CharacterEscape(at, /*in_class=*/false, &cp)) return false;
    SetChar(item, cp);
    return true;
  }

  bool ParseClassAtom(ClassAtom* a) {
    const size_t at = pos_;
    if (Peek() != '\\') {
      a->is_set = false;
      return NextChar(&a->cp);
    }
    ++pos_;
    if (AtEnd()) {
      Fail(absl::StrCat("unterminated character class escape at offset ", at));
      return false;
    }
    const char c = Peek();
    if (ClassEscapeSet(c, &a->set)) {
      ++pos_;
      a->is_set = true;
      return true;
    }
    if (c == 'p' || c == 'P') {
      Unsupported(absl::StrCat("Unicode property escape '\\", std::string(1, c), "'"), at);
      return false;
    }
    if (c == 'B') {
      Fail(absl::StrCat("invalid escape '\\B' in a character class at offset ", at));
      return false;
    }
    if (c >= '1' && c <= '9') {
      Unsupported("octal escape", at);
      return false;
    }
    if (c == '-') {
      ++pos_;
      a->is_set = false;
      a->cp = '-';
      return true;
    }
    a->is_set = false;
    return CharacterEscape(at, /*in_class=*/true, &a->cp);
  }

  ExprId ParseClass() {
    const size_t at = pos_;
    ++pos_;  // '['
    bool negated = false;
    if (Peek() == '^' && !AtEnd()) {
      negated = true;
      ++pos_;
    }
    Ranges ranges;
    while (true) {
      if (AtEnd()) return Fail(absl::StrCat("unterminated character class at offset ", at));
      if (Peek() == ']') {
        ++pos_;
        break;
      }
      ClassAtom lo;
      const size_t lo_at = pos_;
      if (!ParseClassAtom(&lo)) return -1;
      if (Peek() == '-' && pos_ + 1 < p_.size() && p_[pos_ + 1] != ']') {
        ++pos_;
        ClassAtom hi;
        if (!ParseClassAtom(&hi)) return -1;
        if (lo.is_set || hi.is_set) {
          // [\w-.]: an error in u mode; Annex B reads it as the union with
          // '-', which is what such patterns in schemas mean.
          for (const ClassAtom* x : {&lo, &hi}) {
            if (x->is_set) {
              ranges.insert(ranges.end(), x->set.begin(), x->set.end());
            } else {
              ranges.emplace_back(x->cp, x->cp);
            }
          }
          ranges.emplace_back('-', '-');
          continue;
        }
        if (lo.cp > hi.cp) {
          return Fail(absl::StrCat("character class range out of order at offset ", lo_at));
        }
        ranges.emplace_back(lo.cp, hi.cp);
        continue;
      }
      if (lo.is_set) {
        ranges.insert(ranges.end(), lo.set.begin(), lo.set.end());
      } else {
        ranges.emplace_back(lo.cp, lo.cp);
      }
    }
    return EmitSet(negated ? Complement(ranges) : ranges);
  }

  absl::string_view p_;
  GrammarBuilder& b_;
  const RegexOptions& opts_;
  size_t pos_ = 0;
  absl::Status error_;
  ExprId any_string_ = -1;
  std::map<Ranges, ExprId> sets_;
};

// The choices as a trie with compressed edges: shared prefixes are written
// once, so the matcher's automaton stays deterministic on them instead of
// holding one branch per choice. `strs` is sorted and unique; [lo, hi) all
// share the first `depth` bytes.
// `level` counts the nesting: past kMaxTrieLevels (choices that are
// prefixes of one another, hundreds deep) the rest is a flat alternation, so
// the recursion stays shallow whatever the input.
constexpr int kMaxTrieLevels = 200;

ExprId ChoiceTrie(GrammarBuilder& b, const std::vector<std::string>& strs, size_t lo, size_t hi,
                  size_t depth, int level) {
  if (hi - lo == 1) return b.Literal(absl::string_view(strs[lo]).substr(depth));
  if (level >= kMaxTrieLevels) {
    std::vector<ExprId> flat;
    for (size_t i = lo; i < hi; ++i) flat.push_back(b.Literal(absl::string_view(strs[i]).substr(depth)));
    return b.Alt(std::move(flat));
  }
  // Longest common prefix of the range past `depth` (sorted: compare the
  // first and the last).
  const std::string& f = strs[lo];
  const std::string& l = strs[hi - 1];
  size_t common = depth;
  while (common < f.size() && common < l.size() && f[common] == l[common]) ++common;
  std::vector<ExprId> alts;
  size_t i = lo;
  if (strs[i].size() == common) {  // one choice ends here (sorted first)
    alts.push_back(b.Empty());
    ++i;
  }
  while (i < hi) {
    size_t j = i + 1;
    while (j < hi && strs[j][common] == strs[i][common]) ++j;
    alts.push_back(ChoiceTrie(b, strs, i, j, common, level + 1));
    i = j;
  }
  return b.Seq({b.Literal(absl::string_view(f).substr(depth, common - depth)), b.Alt(std::move(alts))});
}

}  // namespace

absl::StatusOr<ExprId> RegexToExpr(absl::string_view pattern, GrammarBuilder& builder,
                                   const RegexOptions& options) {
  RegexParser parser(pattern, builder, options);
  return parser.Parse();
}

absl::StatusOr<Grammar> RegexToGrammar(absl::string_view pattern, const GrammarLimits& limits) {
  GrammarBuilder b(limits);
  absl::StatusOr<ExprId> e = RegexToExpr(pattern, b);
  if (!e.ok()) return e.status();
  const RuleId root = b.AddRule("root", *e);
  return std::move(b).Build(root);
}

absl::StatusOr<Grammar> ChoiceGrammar(const std::vector<std::string>& choices,
                                      const GrammarLimits& limits) {
  if (choices.empty()) return absl::InvalidArgumentError("choice: no choices given");
  std::vector<std::string> strs = choices;
  std::sort(strs.begin(), strs.end());
  strs.erase(std::unique(strs.begin(), strs.end()), strs.end());
  GrammarBuilder b(limits);
  const RuleId root = b.AddRule("root", ChoiceTrie(b, strs, 0, strs.size(), 0, 0));
  return std::move(b).Build(root);
}

}  // namespace minfer::grammar
