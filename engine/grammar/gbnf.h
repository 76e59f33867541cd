// GBNF (llama.cpp's grammar format) to Grammar.
//
// The syntax as llama.cpp writes it: `name ::= alternatives` rules (names of
// letters, digits and '-'), `|` alternation, grouping `( ... )`, postfix
// `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}`, string literals "..." and character
// classes [...] / [^...] with escapes \n \r \t \\ \" \] \- \xHH \uHHHH
// \UHHHHHHHH, `.` (any character), and `#` comments. A rule body may span
// lines; a newline ends it only where the next line starts a new rule. The
// root rule is `root`.
//
// Errors (INVALID_ARGUMENT, with line and column): a syntax error, an
// undefined rule (naming it), no `root`, left recursion, limits exceeded.
#ifndef MINFER_ENGINE_GRAMMAR_GBNF_H_
#define MINFER_ENGINE_GRAMMAR_GBNF_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/grammar/grammar.h"

namespace minfer::grammar {

absl::StatusOr<Grammar> GbnfToGrammar(absl::string_view text, const GrammarLimits& limits = {});

}  // namespace minfer::grammar

#endif  // MINFER_ENGINE_GRAMMAR_GBNF_H_
