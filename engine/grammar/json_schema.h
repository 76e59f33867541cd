// JSON Schema (and "any JSON") to Grammar: the front end behind OpenAI's
// response_format json_schema / json_object, llama-server's json_schema and
// vLLM's structured_outputs.json.
//
// Accepted: draft 2020-12 as OpenAI and vLLM take it — type (one or a list)
// object/array/string/number/integer/boolean/null, enum, const,
// anyOf/oneOf/allOf, $ref/$defs (and definitions) including recursion,
// properties (in any order; see below), required,
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
// Output form: the JSON value alone (no whitespace before or after it),
// with at most JsonOptions::max_whitespace bytes of [ \t\n\r] in each gap
// between tokens; strings with JSON escapes (\" \\ \/ \b \f \n \r \t and
// \uXXXX in either case, a character past FFFF as a surrogate pair), never a
// raw control character; numbers in JSON's grammar.
//
// The grammar accepts only JSON texts valid against the schema, and all of
// them except where a choice below says otherwise (each such choice is
// pinned by a "valid_rejected" case in tests/engine/grammar/
// json_schema_cases.json, checked against ajv):
//  - Objects: properties in any order, each optional one may be left out,
//    additional ones (where allowed) anywhere among the named ones — for
//    objects of at most JsonOptions::max_any_order_properties (12) named
//    properties, within max_any_order_rules per schema (a rule per set of
//    properties written: 2^n). Larger objects, objects past the budget
//    (the compiler meets nested objects before their parents) and
//    JsonOptions::PropertyOrder::kSchema take the order of `properties`
//    (then any additional ones), as OpenAI's Structured Outputs generate
//    them: a grammar linear in the number of properties.
//  - A key written twice is never accepted ({"a":1,"a":2}: JSON.parse and
//    most validators keep the last value; a duplicate is no output a
//    model should give).
//  - additionalProperties absent: when the schema names `properties`, no
//    other keys by default (JsonOptions::closed_objects: XGrammar's strict
//    mode, a model should not invent keys), or, with closed_objects off,
//    other keys with any value among the named ones as JSON Schema reads
//    it (llguidance's default); when it has no `properties` ({"type":
//    "object"}), any object. "properties": {} with closed_objects is the
//    empty object only (a tool's "no arguments"), else any object. `true` or a schema: additional keys among
//    the named ones, each any string other than a named key; `false`:
//    none. Inside allOf, an absent additionalProperties means "anything",
//    so allOf can add properties; the merged schema then follows the rule
//    above.
//  - oneOf is compiled as anyOf where that is exact: when every two
//    branches (each with the siblings) are provably disjoint — different
//    types, disjoint enum/const sets, or an object property required by
//    both with disjoint schemas or forbidden by one. The "exactly one of
//    these properties" form (every branch only `required` with one name)
//    is made exact by forbidding the other names in each branch. Any other
//    oneOf is refused ("oneOf with branches that may overlap").
//  - anyOf/oneOf with sibling keywords: the siblings are merged into each
//    branch (allOf rules). allOf: merged into one schema — types intersect,
//    bounds take the tighter, required and enums combine, a property named
//    on both sides takes both schemas; a keyword that both sides set
//    differently and that cannot be combined (pattern, format, two anyOfs,
//    prefixItems ...) is refused, naming allOf's location.
//  - $ref: references within the document only ("#", "#/$defs/x",
//    "#/definitions/x", any JSON pointer, percent-encoded or not), one rule
//    per target, so recursion works. $ref with sibling keywords is an allOf
//    of the target and the siblings. Remote references and anchors are
//    refused as unresolved.
//  - Integers are written as integers: 1.0 and 1e2 are integers to JSON
//    Schema but not accepted for "integer". Bounds (minimum, maximum and
//    the exclusive forms, draft 4's boolean exclusive forms too) are exact
//    digit-range grammars of any magnitude up to 1e37; -0 is accepted
//    where 0 is.
//  - Numbers with bounds: the bounds must be integral (a fractional bound
//    on "number" is refused naming the keyword) and the number is written
//    without an exponent ("1e1" is not accepted for maximum 10); exact
//    otherwise. Unbounded numbers take JSON's full number grammar.
//  - multipleOf: only 1 (= integer); anything else is refused.
//  - Strings: minLength/maxLength count characters (code points), however
//    each is spelled (an escape is one character); minLength at most
//    GrammarLimits::max_repeat, maxLength above
//    JsonOptions::max_string_length (2048) lowered to it (the strings
//    generated stay valid; longer valid ones are not accepted). pattern is an ECMAScript regex (regex.h)
//    matched anywhere unless anchored, over the decoded characters, each of
//    which may be spelled as an escape. A pattern with length bounds is
//    taken where exact without intersecting two grammars — the pattern's
//    strings all meet the bounds (dropped) or none does (nothing), or the
//    pattern is one character class repeated (the repetition takes the
//    bounds) — and refused otherwise; format with either is refused.
//  - Formats: date (days per month, Feb 29 in leap years), time and
//    date-time (RFC 3339: T or t, Z/z or ±hh:mm; no leap second 60; no
//    space for T), uuid (8-4-4-4-12 hex, no urn: prefix), ipv4 (dotted
//    decimal, no leading zeros), ipv6 (RFC 3986, with embedded ipv4; no
//    zone ids), uri (RFC 3986 absolute URI, no IPvFuture), email (a
//    conservative subset: dot-atom local part, a domain of LDH labels with
//    at least one dot; no quoted local parts or IP literals). Format
//    characters are written raw (a \u-escaped digit is not accepted).
//    The other formats JSON Schema defines are refused ("unsupported
//    format 'hostname'"); a format it does not define ("url", "int64") is
//    an annotation, as every validator reads it.
//  - enum/const: each value written compactly plus the whitespace rule;
//    objects in the value's key order; strings with any spelling of their
//    non-ASCII and special characters (but printable ASCII as itself);
//    numbers as written in the schema (2.0 also as 2). A schema with an
//    enum or const (its own or an allOf entry's) is the values valid
//    against the whole schema, each decided by json_validate.h — so any
//    keyword may sit beside them (not, if, patternProperties, uniqueItems
//    ...); where validation cannot decide (a defined format), only type,
//    lengths, numeric bounds and minItems/maxItems may, others are refused.
//  - uniqueItems: true only where it holds trivially (maxItems <= 1);
//    otherwise refused.
//  - A schema without "type" allows every type, each constrained by its own
//    keywords ({"minLength": 2} accepts 5 and "ab", not "a").
//  - String escapes of lone surrogates (\ud800 alone) are never accepted.
//
// Keywords: annotations (title, description, examples, default, $schema,
// $id, id, $comment, deprecated, readOnly, writeOnly, $anchor,
// $vocabulary, contentEncoding, contentMediaType, contentSchema,
// $dynamicAnchor, and any key starting "x-") are ignored; $defs and
// definitions hold referenced schemas. patternProperties: any number of
// keys matching a pattern, each with its schema, among the named
// properties (as additional ones) — exact when no named key matches a pattern and the patterns
// share one schema (keys matching none are not generated: exact under
// additionalProperties false and closed objects, a valid subset otherwise),
// refused otherwise. minProperties 1 (not empty) and maxProperties 0
// (empty), or bounds the required (named) members already meet; other
// counts refused. A JSON Schema keyword not listed as
// accepted above — not, if/then/else, propertyNames,
// dependentRequired, unevaluated*, contains — is refused by
// name, never ignored (outside an enum's schema, above). A key that is no
// JSON Schema keyword (OpenAPI's nullable, "_format", a misspelling) is an
// annotation, as validators read it.
//
// Limits (a hostile schema costs bounded time and memory): the text's
// size (max_schema_bytes); its nesting, counted over brackets before
// parsing (max_depth); schema nesting and allOf/$ref expansion depth
// (max_depth; a merged or distributed schema — allOf, $ref with siblings,
// anyOf with siblings — takes a level or two of its own) and expansion
// work (20,000 steps); the grammar's size
// (GrammarLimits, checked by the builder).
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
  // Digits of an unbounded JSON number: at most this many in its integer
  // part, and in its fraction; its exponent at most 4 (past any double).
  // 0 = no cap. Like the whitespace cap, it keeps a model from writing a
  // number forever (a random model at temperature 1 otherwise rarely stops
  // one); 32 digits are past any IEEE double's precision, so real values
  // fit. The same cap holds where bounds leave a number open: digits of a
  // magnitude above its only bound, a bounded number's fraction (a run of
  // zeros and a run after its first nonzero digit, each up to the cap), and
  // the fractional seconds of time and date-time. Bounds themselves are
  // exact as always.
  int32_t max_number_digits = 32;
  // Objects whose schema names properties but leaves additionalProperties
  // out: true (the default; XGrammar's strict mode, OpenAI's strict
  // schemas) closes them like additionalProperties: false — a subset of
  // the valid instances, never an invalid one, and a model does not invent
  // keys; false reads them as JSON Schema does (and llguidance): other keys
  // among the named ones, any value each. Open objects cost masks: every
  // key written passes positions of a trie excluding the named keys, each
  // classified against the whole vocabulary when first reached (see
  // docs/benchmarks.md, MaskBench open vs closed).
  bool closed_objects = true;
  // The order of an object's properties. kAny (the default; JSON Schema's
  // reading): named and additional properties in any order, each named one
  // at most once, exactly — for an object of at most
  // max_any_order_properties named properties (required names outside
  // `properties` count), while the schema's objects together stay within
  // max_any_order_rules. The grammar has a rule per set of named
  // properties already written (2^n for n properties), so larger objects,
  // and objects past the budget (in the order the compiler meets them),
  // fall back to the schema's order. kSchema: always the schema's order
  // (OpenAI's Structured Outputs generate in it; a linear grammar).
  enum class PropertyOrder : uint8_t { kAny, kSchema };
  PropertyOrder property_order = PropertyOrder::kAny;
  int32_t max_any_order_properties = 12;
  int64_t max_any_order_rules = 1 << 14;
  // maxLength above this is lowered to it (0: no lowering; past
  // limits.max_repeat it is refused). Every string generated is still
  // valid; a longer one, which a model rarely writes within a request's
  // tokens, is not accepted. The bound keeps the grammar small: each
  // character allowed is a few automaton states, built at compile time.
  int32_t max_string_length = 2048;
  // Caps on the input: schema text bytes, and nesting depth (of the text's
  // brackets, of schemas, and of allOf/$ref expansion).
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
