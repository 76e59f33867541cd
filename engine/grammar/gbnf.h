// GBNF (llama.cpp's grammar format) to Grammar.
//
// The syntax as llama.cpp writes it: `name ::= alternatives` rules (names of
// letters, digits, '-' and '_'), `|` alternation, grouping `( ... )`,
// postfix `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}` (bounds up to
// GrammarLimits::max_repeat), string literals "..." and character classes
// [...] / [^...] (ranges a-z; a '-' first or last is literal) over code
// points, with escapes \n \r \t \\ \" \' \[ \] \- \^ \/ \xHH \uHHHH
// \UHHHHHHHH (a code point, UTF-8 encoded: "\xE9" is U+00E9), `.` (any
// code point, newline included), and `#` comments to the end of the line.
// A rule body may span lines: a newline ends it only where what follows
// (past blank and comment lines) is the end of the text or a new
// `name ::=`; inside parentheses and after `|` newlines are plain space.
// CR is space (CRLF files work). The root rule is `root`.
// Not supported (refused): llama.cpp's token references `<...>` / `!<...>`.
//
// Errors (INVALID_ARGUMENT, "gbnf: line L, column C: ..." with 1-based
// lines and columns counted in characters): a syntax error, a rule defined
// twice, an undefined rule (named, at its first reference, whether or not
// root reaches it), a repetition bound over the limit; without a position:
// no `root`, and Build's refusals — left recursion (naming the rule) and
// the size limits.
#ifndef MINFER_ENGINE_GRAMMAR_GBNF_H_
#define MINFER_ENGINE_GRAMMAR_GBNF_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/grammar/grammar.h"

namespace minfer::grammar {

absl::StatusOr<Grammar> GbnfToGrammar(absl::string_view text, const GrammarLimits& limits = {});

}  // namespace minfer::grammar

#endif  // MINFER_ENGINE_GRAMMAR_GBNF_H_
