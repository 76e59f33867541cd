// GrammarSpec: what a request asks its output to match, in the request's own
// terms (a JSON Schema text, "any JSON object", GBNF, a regex, a choice), and
// BuildGrammar, which runs the matching front end.
#ifndef MINFER_ENGINE_GRAMMAR_SPEC_H_
#define MINFER_ENGINE_GRAMMAR_SPEC_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"

namespace minfer::grammar {

enum class GrammarKind : int {
  kJsonSchema = 0,  // text: the schema (JSON)
  kJsonObject = 1,  // any JSON object; text unused
  kGbnf = 2,        // text: GBNF
  kRegex = 3,       // text: the regular expression
  kChoice = 4,      // choices: the allowed outputs
};

// "json_schema", "json_object", "gbnf", "regex", "choice".
const char* GrammarKindName(GrammarKind kind);

struct GrammarSpec {
  GrammarKind kind = GrammarKind::kJsonObject;
  std::string text;
  std::vector<std::string> choices;
  JsonOptions json;  // kJsonSchema, kJsonObject

  // A key identifying the spec (kind, options and text), for caches.
  std::string Key() const;
};

// The grammar for `spec` (the front end's errors, INVALID_ARGUMENT).
absl::StatusOr<Grammar> BuildGrammar(const GrammarSpec& spec);

}  // namespace minfer::grammar

#endif  // MINFER_ENGINE_GRAMMAR_SPEC_H_
