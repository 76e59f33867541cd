#include "engine/tokenizer/pretokenizer.h"

#include "engine/tokenizer/unicode.h"

namespace minfer::tokenizer {
namespace {

// Case-insensitive comparison used by the contraction alternative
// (?i:'s|'t|...): `cp` matches the lowercase ASCII letter `lower` when it is
// that letter in either case, or any other code point that case-folds to it
// (Oniguruma's and Rust regex's Unicode case-insensitivity; U+017F -> 's',
// U+212A KELVIN SIGN -> 'k').
inline bool FoldsTo(char32_t cp, char lower) {
  if (cp < 0x80) return (cp | 0x20) == static_cast<char32_t>(lower);
  return SimpleCaseFold(cp) == static_cast<char32_t>(lower);
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d) at `e` of the n code points `cps`: the end
// after it, or e when there is none. The alternatives share no prefix, so
// their order does not matter.
size_t ContractionEnd(const char32_t* cps, size_t n, size_t e) {
  if (e + 1 >= n || cps[e] != '\'') return e;
  const char32_t c1 = cps[e + 1];
  if (FoldsTo(c1, 's') || FoldsTo(c1, 't') || FoldsTo(c1, 'm') || FoldsTo(c1, 'd')) return e + 2;
  if (e + 2 < n) {
    const char32_t c2 = cps[e + 2];
    if ((FoldsTo(c1, 'r') || FoldsTo(c1, 'v')) && FoldsTo(c2, 'e')) return e + 3;
    if (FoldsTo(c1, 'l') && FoldsTo(c2, 'l')) return e + 3;
  }
  return e;
}

// The end of the match at `i` (a whitespace code point) of the patterns'
// shared tail, \s*[\r\n]+|\s+(?!\S)|\s+, over the n classes `cls`. Let
// [i, ws_end) be the whole whitespace run.
size_t WhitespaceMatchEnd(const uint8_t* cls, size_t n, size_t i) {
  size_t ws_end = i;
  size_t last_crlf = SIZE_MAX;
  while (ws_end < n && (cls[ws_end] & kCharWhitespace)) {
    if (cls[ws_end] & kCharCrLf) last_crlf = ws_end;
    ++ws_end;
  }
  // \s*[\r\n]+: \s* first takes the whole run, then gives characters back
  // until [\r\n]+ can match; the first success is at the run's last CR/LF,
  // and [\r\n]+ then stops right after it (what follows in the run is not
  // CR/LF).
  if (last_crlf != SIZE_MAX) return last_crlf + 1;
  // \s+(?!\S): the whole run when it reaches the end of the text; otherwise
  // the run minus its last character (which is whitespace, so the lookahead
  // holds there), provided that leaves at least one.
  if (ws_end == n) return n;
  if (ws_end - i >= 2) return ws_end - 1;
  // \s+: the single whitespace character.
  return ws_end;
}

// The scanner over one decoded text. Index n is one past the last code point.
class Scanner {
 public:
  // max_digits: the longest number run one piece takes (1: Qwen2's \p{N},
  // 3: Llama 3's \p{N}{1,3}).
  Scanner(const char32_t* cps, const uint8_t* classes, size_t n, size_t max_digits)
      : cps_(cps), cls_(classes), n_(n), max_digits_(max_digits) {}

  // End (code point index) of the match that starts at `i` (< n).
  size_t MatchAt(size_t i) const {
    const char32_t c = cps_[i];
    // 1. (?i:'s|'t|'re|'ve|'m|'ll|'d). The alternatives share no prefix, so
    //    their order does not matter.
    if (const size_t j = ContractionEnd(cps_, n_, i); j != i) return j;
    // 2. [^\r\n\p{L}\p{N}]?\p{L}+. The greedy optional cannot take a letter,
    //    so a letter here starts the run itself; any other character outside
    //    the excluded set is taken only when a letter follows (otherwise the
    //    engine backtracks to "no optional" and \p{L}+ fails on it).
    if (IsLetter(i)) return LetterRunEnd(i);
    if (!(cls_[i] & (kCharNumber | kCharCrLf)) && i + 1 < n_ && IsLetter(i + 1)) {
      return LetterRunEnd(i + 1);
    }
    // 3. \p{N} or \p{N}{1,3}: greedy, so as many digits as there are, up
    //    to the bound.
    if (cls_[i] & kCharNumber) {
      size_t j = i + 1;
      while (j < n_ && j - i < max_digits_ && (cls_[j] & kCharNumber)) ++j;
      return j;
    }
    // 4. " ?[^\s\p{L}\p{N}]+[\r\n]*". The optional space is kept only when
    //    the class matches right after it; the trailing [\r\n]* is greedy.
    size_t j = i;
    if (c == ' ' && i + 1 < n_ && IsOther(i + 1)) j = i + 1;
    if (IsOther(j)) {
      while (j < n_ && IsOther(j)) ++j;
      while (j < n_ && (cls_[j] & kCharCrLf)) ++j;
      return j;
    }
    // What is left starts with whitespace (neither letter, number nor
    // "other").
    return WhitespaceMatchEnd(cls_, n_, i);
  }

 private:
  bool IsLetter(size_t i) const { return cls_[i] & kCharLetter; }
  // [^\s\p{L}\p{N}]
  bool IsOther(size_t i) const {
    return !(cls_[i] & (kCharLetter | kCharNumber | kCharWhitespace));
  }
  size_t LetterRunEnd(size_t i) const {
    while (i < n_ && IsLetter(i)) ++i;
    return i;
  }

  const char32_t* cps_;
  const uint8_t* cls_;
  size_t n_;
  size_t max_digits_;
};

// The o200k pattern (pretokenizer.h), leftmost-first like the others.
class O200kScanner {
 public:
  O200kScanner(const char32_t* cps, const uint8_t* classes, size_t n)
      : cps_(cps), cls_(classes), n_(n) {}

  size_t MatchAt(size_t i) const {
    // 1. P?U*L+C? and 2. P?U+L*C?, each first with the optional prefix P =
    //    [^\r\n\p{L}\p{N}] taken (greedy), then without it.
    const bool prefix = !(cls_[i] & (kCharCrLf | kCharLetter | kCharNumber));
    for (size_t s : {prefix ? i + 1 : SIZE_MAX, i}) {
      if (s == SIZE_MAX) continue;
      if (const size_t e = WordLower(s); e != SIZE_MAX) return Contraction(e);
    }
    for (size_t s : {prefix ? i + 1 : SIZE_MAX, i}) {
      if (s == SIZE_MAX) continue;
      if (const size_t e = WordUpper(s); e != SIZE_MAX) return Contraction(e);
    }
    // 3. \p{N}{1,3}.
    if (cls_[i] & kCharNumber) {
      size_t j = i + 1;
      while (j < n_ && j - i < 3 && (cls_[j] & kCharNumber)) ++j;
      return j;
    }
    // 4. " ?[^\s\p{L}\p{N}]+[\r\n/]*".
    size_t j = i;
    if (cps_[i] == ' ' && i + 1 < n_ && IsOther(i + 1)) j = i + 1;
    if (IsOther(j)) {
      while (j < n_ && IsOther(j)) ++j;
      while (j < n_ && ((cls_[j] & kCharCrLf) || cps_[j] == '/')) ++j;
      return j;
    }
    // 5-7: the whitespace alternatives, as in Scanner.
    return WhitespaceMatchEnd(cls_, n_, i);
  }

 private:
  bool Is(size_t i, uint8_t bit) const { return i < n_ && (cls_[i] & bit); }
  bool IsOther(size_t i) const {
    return i < n_ && !(cls_[i] & (kCharLetter | kCharNumber | kCharWhitespace));
  }
  size_t RunEnd(size_t i, uint8_t bit) const {
    while (Is(i, bit)) ++i;
    return i;
  }
  // U*L+ from s: U* greedy, giving back one at a time until L+ can start;
  // the first (longest U*) start k with an L there wins, then L+ greedy.
  // SIZE_MAX when no k works.
  size_t WordLower(size_t s) const {
    if (s >= n_) return SIZE_MAX;
    const size_t u_end = RunEnd(s, kCharUpperWord);
    for (size_t k = u_end + 1; k-- > s;) {
      if (Is(k, kCharLowerWord)) return RunEnd(k, kCharLowerWord);
    }
    return SIZE_MAX;
  }
  // U+L* from s.
  size_t WordUpper(size_t s) const {
    if (!Is(s, kCharUpperWord)) return SIZE_MAX;
    return RunEnd(RunEnd(s, kCharUpperWord), kCharLowerWord);
  }
  // C? at e.
  size_t Contraction(size_t e) const { return ContractionEnd(cps_, n_, e); }

  const char32_t* cps_;
  const uint8_t* cls_;
  size_t n_;
};

// Classes of ASCII code points, without a function call per character.
struct AsciiClasses {
  uint8_t v[128];
  AsciiClasses() {
    for (char32_t c = 0; c < 128; ++c) v[c] = ClassifyCodePoint(c);
  }
};

}  // namespace

void SplitPieces(absl::string_view text, PreTokenizer kind, SplitScratch* scratch,
                 std::vector<PieceSpan>* out) {
  if (text.empty()) return;
  static const AsciiClasses* ascii = new AsciiClasses();
  auto& offsets = scratch->offsets;
  auto& cps = scratch->cps;
  auto& classes = scratch->classes;
  offsets.clear();
  cps.clear();
  classes.clear();
  const char* const begin = text.data();
  const char* const end = begin + text.size();
  for (const char* p = begin; p < end;) {
    offsets.push_back(static_cast<size_t>(p - begin));
    const uint8_t b = static_cast<uint8_t>(*p);
    if (b < 0x80) {
      cps.push_back(b);
      classes.push_back(ascii->v[b]);
      ++p;
      continue;
    }
    const Utf8Step step = DecodeUtf8(p, end);
    // The contract says valid UTF-8; an ill-formed subpart is still handled
    // the way the tokenizer would have replaced it (U+FFFD, an "other").
    const char32_t cp = step.kind == Utf8Step::kValid ? step.cp : kReplacementChar;
    cps.push_back(cp);
    classes.push_back(ClassifyCodePoint(cp));
    p += step.length;
  }
  const size_t n = cps.size();
  offsets.push_back(text.size());
  if (kind == PreTokenizer::kO200k) {
    const O200kScanner scanner(cps.data(), classes.data(), n);
    for (size_t i = 0; i < n;) {
      const size_t j = scanner.MatchAt(i);
      out->push_back({offsets[i], offsets[j]});
      i = j;
    }
    return;
  }
  const Scanner scanner(cps.data(), classes.data(), n, kind == PreTokenizer::kLlama3 ? 3 : 1);
  for (size_t i = 0; i < n;) {
    const size_t j = scanner.MatchAt(i);
    out->push_back({offsets[i], offsets[j]});
    i = j;
  }
}

std::vector<std::string> SplitPieces(absl::string_view text, PreTokenizer kind) {
  SplitScratch scratch;
  std::vector<PieceSpan> spans;
  SplitPieces(text, kind, &scratch, &spans);
  std::vector<std::string> pieces;
  pieces.reserve(spans.size());
  for (const PieceSpan& s : spans) {
    pieces.emplace_back(text.substr(s.begin, s.end - s.begin));
  }
  return pieces;
}

}  // namespace minfer::tokenizer
