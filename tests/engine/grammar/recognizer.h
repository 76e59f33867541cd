// A reference recognizer for grammar.h's Grammar, for tests only: does a
// whole byte string belong to the grammar's language? Written to be
// obviously right rather than fast — memoized recursion computing, for an
// expression and a start offset, every offset where a match can end — so the
// front ends and the matcher (matcher.h) are checked against something
// independent of the automata the matcher builds. Exponential-free (the memo
// is per (rule, offset)); fine for inputs of a few hundred bytes.
#ifndef MINFER_TESTS_ENGINE_GRAMMAR_RECOGNIZER_H_
#define MINFER_TESTS_ENGINE_GRAMMAR_RECOGNIZER_H_

#include "absl/strings/string_view.h"
#include "engine/grammar/grammar.h"

namespace minfer::grammar::testing {

bool Recognize(const Grammar& grammar, absl::string_view bytes);

// Whether some continuation of `bytes` is in the language (bytes is a
// viable prefix). Slow: for tests of prefix behaviour on short inputs.
bool IsViablePrefix(const Grammar& grammar, absl::string_view bytes);

}  // namespace minfer::grammar::testing

#endif  // MINFER_TESTS_ENGINE_GRAMMAR_RECOGNIZER_H_
