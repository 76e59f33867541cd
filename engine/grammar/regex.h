// Regular expressions and choices to Grammar.
//
// Regex dialect: ECMAScript (JSON Schema's `pattern` and vLLM's
// structured_outputs.regex are ECMAScript-flavoured) as RegExp reads it with
// the `u` flag, over Unicode code points, UTF-8 encoded:
//   - literals; escapes \n \r \t \f \v \0 \cX \xHH \uHHHH (a \uD83D\uDE00
//     surrogate pair is one code point; a lone surrogate matches nothing)
//     \u{H...}, and escaped non-alphanumerics standing for themselves;
//   - `.` (any code point but the line terminators \n \r U+2028 U+2029);
//   - classes [...] [^...] with ranges and escapes (\b inside is backspace);
//     [] matches nothing, [^] anything;
//   - \d \w (ASCII) and \s (ECMAScript's WhiteSpace and LineTerminator: TAB
//     LF VT FF CR SP U+00A0 U+1680 U+2000-200A U+2028 U+2029 U+202F U+205F
//     U+3000 U+FEFF), and \D \W \S;
//   - groups (...), (?:...), (?<name>...) (captures mean nothing here);
//   - alternation; quantifiers * + ? {m} {m,} {m,n} and their lazy forms
//     (laziness does not change the language); bounds above
//     GrammarLimits::max_repeat are refused;
//   - anchors ^ and $ only at the start / end of the pattern or of a
//     top-level alternative.
// Annex B leniencies accepted because real schemas use them: `\-` and other
// escaped punctuation outside classes, [\w-.] (a class escape beside '-'
// is the union with '-'), and a `{` or `}` or `]` that does not form a
// quantifier or class is a literal.
// Refused with INVALID_ARGUMENT naming the construct and its byte offset in
// the pattern ("regex: lookahead '(?=' at offset 3 is not supported"): word
// boundaries \b \B, back-references \1 \k<n>, lookahead and lookbehind,
// anchors elsewhere, Unicode property escapes \p{..}, inline modifier
// groups, octal escapes; so are syntax errors (with their offset).
//
// Matching: the whole output must match (as if anchored at both ends). For
// JSON Schema's `pattern`, which matches anywhere in the string,
// RegexToExpr's `search` mode pads each unanchored side of each top-level
// alternative with "any string" (any code point, newlines included).
#ifndef MINFER_ENGINE_GRAMMAR_REGEX_H_
#define MINFER_ENGINE_GRAMMAR_REGEX_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/grammar/grammar.h"

namespace minfer::grammar {

struct RegexOptions {
  // JSON Schema `pattern` semantics: the regex may match anywhere unless
  // anchored (^ / $); an unanchored side gets "any string" ([\s\S]*, not
  // `.*`: the match may sit past a newline).
  bool search = false;
  // How a set of characters is written out. Empty: its raw UTF-8 bytes
  // (builder.CodepointSet(ranges); runs of literal characters become one
  // Literal). A JSON string sets it to escape '"', '\\' and control
  // characters. Called for every literal character (a one-code-point set),
  // every class, `.`, and the search padding, with the set as sorted,
  // disjoint, non-adjacent, inclusive code point ranges within 0..10FFFF
  // without surrogates, never empty (an empty class is Nothing() without a
  // call), never negated (the front end complements classes itself).
  std::function<ExprId(GrammarBuilder&, const std::vector<std::pair<uint32_t, uint32_t>>&)>
      char_set;
};

// The expression for `pattern` inside `builder` (for front ends that embed a
// regex, e.g. JSON Schema's pattern). Errors are INVALID_ARGUMENT, start
// with "regex: " and name the byte offset; the builder's own sticky error
// (limits) surfaces at Build.
absl::StatusOr<ExprId> RegexToExpr(absl::string_view pattern, GrammarBuilder& builder,
                                   const RegexOptions& options = {});

// A whole grammar matching exactly `pattern`.
absl::StatusOr<Grammar> RegexToGrammar(absl::string_view pattern, const GrammarLimits& limits = {});

// A grammar matching exactly one of `choices` (at least one; any bytes; the
// empty string allowed; duplicates ignored). Written as a prefix trie so
// shared prefixes are one path in the matcher's automaton.
absl::StatusOr<Grammar> ChoiceGrammar(const std::vector<std::string>& choices,
                                      const GrammarLimits& limits = {});

}  // namespace minfer::grammar

#endif  // MINFER_ENGINE_GRAMMAR_REGEX_H_
