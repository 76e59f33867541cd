// Regular expressions and choices to Grammar.
//
// Regex dialect: ECMAScript (JSON Schema's `pattern` and vLLM's
// structured_outputs.regex are ECMAScript-flavoured), over Unicode code
// points, UTF-8 encoded: literals and escapes, `.`, classes [...] [^...]
// with ranges, \d \w \s \D \W \S (ASCII meanings, as ECMAScript without the
// u flag's extensions; \s is ECMAScript's whitespace set), groups (...) and
// (?:...), alternation, quantifiers * + ? {m} {m,} {m,n} and their lazy
// forms (laziness does not change the language), anchors ^ and $ only at
// the ends. Back-references, lookaround, and anchors elsewhere are refused
// with INVALID_ARGUMENT naming the construct and its offset.
//
// Matching: the whole output must match (as if anchored at both ends). For
// JSON Schema's `pattern`, which matches anywhere in the string,
// RegexToExpr's `search` mode wraps an unanchored side in `.*`.
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
  // anchored (^ / $); an unanchored side gets `.*`.
  bool search = false;
  // How a set of characters is written out. Empty: its raw UTF-8 bytes
  // (builder.CodepointSet(ranges)). A JSON string sets it to escape '"',
  // '\\' and control characters. Called for every literal character
  // (a one-code-point set) and every class, with the set as sorted,
  // disjoint, inclusive code point ranges, never negated (the front end
  // complements classes itself, within 0..10FFFF minus surrogates).
  std::function<ExprId(GrammarBuilder&, const std::vector<std::pair<uint32_t, uint32_t>>&)>
      char_set;
};

// The expression for `pattern` inside `builder` (for front ends that embed a
// regex, e.g. JSON Schema's pattern). Errors name the offset.
absl::StatusOr<ExprId> RegexToExpr(absl::string_view pattern, GrammarBuilder& builder,
                                   const RegexOptions& options = {});

// A whole grammar matching exactly `pattern`.
absl::StatusOr<Grammar> RegexToGrammar(absl::string_view pattern, const GrammarLimits& limits = {});

// A grammar matching exactly one of `choices` (at least one; any bytes).
absl::StatusOr<Grammar> ChoiceGrammar(const std::vector<std::string>& choices,
                                      const GrammarLimits& limits = {});

}  // namespace minfer::grammar

#endif  // MINFER_ENGINE_GRAMMAR_REGEX_H_
