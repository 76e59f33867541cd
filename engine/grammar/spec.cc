#include "engine/grammar/spec.h"

#include "absl/strings/str_cat.h"
#include "engine/grammar/gbnf.h"
#include "engine/grammar/regex.h"

namespace minfer::grammar {
namespace {

// Length-prefixed, so no text can be mistaken for a separator: "3:abc".
void AppendField(std::string* out, absl::string_view s) {
  absl::StrAppend(out, s.size(), ":", s);
}

}  // namespace

const char* GrammarKindName(GrammarKind kind) {
  switch (kind) {
    case GrammarKind::kJsonSchema: return "json_schema";
    case GrammarKind::kJsonObject: return "json_object";
    case GrammarKind::kGbnf: return "gbnf";
    case GrammarKind::kRegex: return "regex";
    case GrammarKind::kChoice: return "choice";
  }
  return "unknown";
}

// The grammar limits (spec.json.limits) bound every front end, so they are
// part of every key; the JSON-only options only of the JSON kinds (a regex
// with a different max_whitespace is the same grammar and shares a cache
// entry). The text is unused by json_object and left out of its key.
std::string GrammarSpec::Key() const {
  std::string key = GrammarKindName(kind);
  const GrammarLimits& l = json.limits;
  absl::StrAppend(&key, "|limits=", l.max_exprs, ",", l.max_rules, ",", l.max_repeat, ",",
                  l.max_states);
  switch (kind) {
    case GrammarKind::kJsonSchema:
    case GrammarKind::kJsonObject:
      absl::StrAppend(&key, "|json=", json.max_whitespace, ",", json.max_number_digits, ",",
                      json.closed_objects ? "closed," : "open,", json.max_string_length, ",",
                      json.max_schema_bytes, ",", json.max_depth, ",",
                      json.property_order == JsonOptions::PropertyOrder::kAny ? "any" : "schema",
                      ",", json.max_any_order_properties, ",", json.max_any_order_rules);
      break;
    default: break;
  }
  key += '|';
  switch (kind) {
    case GrammarKind::kJsonObject: break;
    case GrammarKind::kChoice:
      absl::StrAppend(&key, choices.size(), "#");
      for (const std::string& c : choices) AppendField(&key, c);
      break;
    default: AppendField(&key, text); break;
  }
  return key;
}

absl::StatusOr<Grammar> BuildGrammar(const GrammarSpec& spec) {
  switch (spec.kind) {
    case GrammarKind::kJsonSchema: return JsonSchemaToGrammar(spec.text, spec.json);
    case GrammarKind::kJsonObject: return JsonObjectGrammar(spec.json);
    case GrammarKind::kGbnf: return GbnfToGrammar(spec.text, spec.json.limits);
    case GrammarKind::kRegex: return RegexToGrammar(spec.text, spec.json.limits);
    case GrammarKind::kChoice: return ChoiceGrammar(spec.choices, spec.json.limits);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown grammar kind ", static_cast<int>(spec.kind)));
}

}  // namespace minfer::grammar
