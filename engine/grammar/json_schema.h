// JSON Schema (and "any JSON") to Grammar: the front end behind OpenAI's
// response_format json_schema / json_object, llama-server's json_schema and
// vLLM's structured_outputs.json.
//
// Accepted: draft 2020-12 as OpenAI and vLLM take it — type (one or a list)
// object/array/string/number/integer/boolean/null, enum, const,
// anyOf/oneOf/allOf, $ref/$defs (and definitions) including recursion,
// properties (generated in the schema's order), required,
// additionalProperties (false, true, or a schema), items/prefixItems,
// minItems/maxItems, minLength/maxLength, pattern, format (date, time,
// date-time, uuid, email, ipv4, ipv6, uri), minimum/maximum and the
// exclusive forms, uniqueItems where it can be enforced. Annotations
// (title, description, examples, default, $schema, $id, $comment, ...) are
// ignored. A keyword that changes the language but cannot be enforced
// exactly is refused: INVALID_ARGUMENT naming the keyword and its JSON
// pointer ("unsupported keyword 'patternProperties' at /properties/a"),
// never silently ignored. So is a schema that does not parse (with its
// offset), one deeper or larger than the options allow, and a $ref that
// does not resolve.
//
// Output form: compact JSON plus bounded whitespace (JsonOptions), strings
// with JSON escapes, numbers in JSON's grammar. The grammar accepts exactly
// the JSON texts (within the whitespace rule) that validate against the
// schema, with one documented restriction: object properties appear in the
// order of `properties` (then additional ones), as OpenAI's Structured
// Outputs generate them.
#ifndef MINFER_ENGINE_GRAMMAR_JSON_SCHEMA_H_
#define MINFER_ENGINE_GRAMMAR_JSON_SCHEMA_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/grammar/grammar.h"

namespace minfer::grammar {

struct JsonOptions {
  // Whitespace between JSON tokens: at most this many whitespace bytes
  // ([ \t\n\r]) per gap. 0 = compact JSON only. The default leaves room for
  // a newline plus indentation while keeping a model from emitting endless
  // whitespace.
  int32_t max_whitespace = 16;
  // Caps on the input: schema text bytes and nesting depth.
  int64_t max_schema_bytes = 1 << 20;
  int32_t max_depth = 64;
  GrammarLimits limits;
};

// The grammar of JSON texts valid against the schema `schema_json`.
absl::StatusOr<Grammar> JsonSchemaToGrammar(absl::string_view schema_json,
                                            const JsonOptions& options = {});

// Any JSON object (OpenAI's json_object mode): `{...}` with any members.
absl::StatusOr<Grammar> JsonObjectGrammar(const JsonOptions& options = {});

}  // namespace minfer::grammar

#endif  // MINFER_ENGINE_GRAMMAR_JSON_SCHEMA_H_
