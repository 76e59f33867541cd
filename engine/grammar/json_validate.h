// Validation of one JSON instance against a JSON Schema (draft 2020-12 and
// the earlier drafts' spellings real schemas still use: `definitions`,
// `dependencies`, array-form `items`, boolean exclusive bounds).
//
// The grammar front end uses it where a schema's values form a finite set
// (`enum`/`const`): the grammar is then the set of those values that are
// valid against the whole schema, whatever else the schema says — `not`,
// `if`, `patternProperties`, `uniqueItems` — which the grammar could not
// express itself. It is exact for every keyword it knows, and it answers
// UNIMPLEMENTED rather than guess: for a defined `format` (its checks are
// the grammar's), `$dynamicRef`, `unevaluated*`, a reference outside the
// document, or a `pattern` on non-ASCII text (std::regex reads bytes, not
// code points).

#ifndef MINFER_ENGINE_GRAMMAR_JSON_VALIDATE_H_
#define MINFER_ENGINE_GRAMMAR_JSON_VALIDATE_H_

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace minfer::grammar {

// Whether `instance` is valid against `schema`, a subschema of `root` (its
// "#..." references resolve in `root`). Unknown keywords are annotations.
absl::StatusOr<bool> ValidateInstance(const nlohmann::ordered_json& root,
                                      const nlohmann::ordered_json& schema,
                                      const nlohmann::ordered_json& instance);

// Whether `name` is a format JSON Schema 2020-12 defines (its validation
// vocabulary, section 7.3). Others are annotations; defined ones are
// asserted by the grammar and left undecided by ValidateInstance.
bool IsDefinedFormat(const std::string& name);

// JSON equality as JSON Schema defines it: numbers by value (1 == 1.0),
// objects regardless of member order, booleans never equal to numbers.
bool JsonEqual(const nlohmann::ordered_json& a, const nlohmann::ordered_json& b);

}  // namespace minfer::grammar

#endif  // MINFER_ENGINE_GRAMMAR_JSON_VALIDATE_H_
