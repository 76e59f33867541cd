#include "daemon/api/constraint.h"

#include <string>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "daemon/api/chat_tools.h"
#include "engine/base/field_error.h"

namespace minfer::daemon {
namespace {

constexpr const char* kConstraintPayload = "type.minfer.dev/constraint";

// A field error marked as the constraint's.
absl::Status MarkConstraint(absl::Status s) {
  s.SetPayload(kConstraintPayload, absl::Cord("1"));
  return s;
}

absl::Status CheckText(const char* field, const std::string& text) {
  if (text.empty()) return ConstraintError(field, "empty");
  if (text.size() > kMaxConstraintBytes) {
    return ConstraintError(field, absl::StrCat(text.size(), " bytes, at most ",
                                               kMaxConstraintBytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ConstraintError(absl::string_view field, absl::string_view message) {
  return MarkConstraint(InvalidField(field, message));
}

bool IsConstraintError(const absl::Status& status) {
  return status.GetPayload(kConstraintPayload).has_value();
}

const char* ConstraintField(const v1::GenerateRequest& request) {
  switch (request.constraint_case()) {
    case v1::GenerateRequest::kJsonSchema:
      return "json_schema";
    case v1::GenerateRequest::kJsonObject:
      return "json_object";
    case v1::GenerateRequest::kGbnf:
      return "gbnf";
    case v1::GenerateRequest::kRegex:
      return "regex";
    case v1::GenerateRequest::kChoice:
      return "choice";
    case v1::GenerateRequest::CONSTRAINT_NOT_SET:
      break;
  }
  return "";
}

absl::StatusOr<std::optional<grammar::GrammarSpec>> ConstraintSpec(
    const v1::GenerateRequest& request) {
  grammar::GrammarSpec spec;
  bool json = false;
  switch (request.constraint_case()) {
    case v1::GenerateRequest::kJsonSchema:
      if (absl::Status s = CheckText("json_schema", request.json_schema()); !s.ok()) return s;
      spec.kind = grammar::GrammarKind::kJsonSchema;
      spec.text = request.json_schema();
      json = true;
      break;
    case v1::GenerateRequest::kJsonObject:
      // A oneof bool can be set to false; it then asks for nothing.
      if (!request.json_object()) break;
      spec.kind = grammar::GrammarKind::kJsonObject;
      json = true;
      break;
    case v1::GenerateRequest::kGbnf:
      if (absl::Status s = CheckText("gbnf", request.gbnf()); !s.ok()) return s;
      spec.kind = grammar::GrammarKind::kGbnf;
      spec.text = request.gbnf();
      break;
    case v1::GenerateRequest::kRegex:
      if (absl::Status s = CheckText("regex", request.regex()); !s.ok()) return s;
      spec.kind = grammar::GrammarKind::kRegex;
      spec.text = request.regex();
      break;
    case v1::GenerateRequest::kChoice: {
      const auto& choices = request.choice().choices();
      if (choices.empty()) return ConstraintError("choice.choices", "no choices");
      if (choices.size() > kMaxChoices) {
        return ConstraintError("choice.choices",
                               absl::StrCat(choices.size(), " choices, at most ", kMaxChoices));
      }
      size_t bytes = 0;
      for (const std::string& c : choices) bytes += c.size();
      if (bytes > kMaxConstraintBytes) {
        return ConstraintError("choice.choices",
                               absl::StrCat(bytes, " bytes, at most ", kMaxConstraintBytes));
      }
      spec.kind = grammar::GrammarKind::kChoice;
      spec.choices.assign(choices.begin(), choices.end());
      break;
    }
    case v1::GenerateRequest::CONSTRAINT_NOT_SET:
      break;
  }
  if (request.has_json_max_whitespace()) {
    const int32_t ws = request.json_max_whitespace();
    if (!json) {
      return ConstraintError("json_max_whitespace",
                             "only with a json_schema or json_object constraint");
    }
    if (ws < 0 || ws > kMaxJsonWhitespace) {
      return MarkConstraint(InvalidFieldThat(
          "json_max_whitespace", absl::StrCat("must be in [0, ", kMaxJsonWhitespace, "], got ", ws)));
    }
    spec.json.max_whitespace = ws;
  }
  if (request.has_json_closed_objects()) {
    if (request.constraint_case() != v1::GenerateRequest::kJsonSchema) {
      return ConstraintError("json_closed_objects", "only with a json_schema constraint");
    }
    spec.json.closed_objects = request.json_closed_objects();
  }
  const bool none = request.constraint_case() == v1::GenerateRequest::CONSTRAINT_NOT_SET ||
                    (request.constraint_case() == v1::GenerateRequest::kJsonObject &&
                     !request.json_object());
  if (none) return std::optional<grammar::GrammarSpec>();
  return std::optional<grammar::GrammarSpec>(std::move(spec));
}

absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> CompileForcedToolCall(
    const v1::Chat& chat, absl::string_view family, const runtime::Model& model,
    bool strict_auto) {
  // Agents send the same tools with every turn: the grammar is cached under
  // what it is built from (the family, the tools, the choice and the
  // parallel flag; no maps, so the serialization is deterministic).
  v1::Chat basis;
  *basis.mutable_tools() = chat.tools();
  *basis.mutable_tool_choice() = chat.tool_choice();
  if (chat.has_parallel_tool_calls()) basis.set_parallel_tool_calls(chat.parallel_tool_calls());
  std::string key = absl::StrCat(strict_auto ? "strict_call|" : "tool_call|", family, "|");
  if (!basis.AppendToString(&key)) {
    return FieldErrorWithCode(absl::StatusCode::kInternal, "chat.tools",
                              "cannot serialize the tools");
  }
  bool built = true;
  absl::Status build_error;
  absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> compiled = model.grammars().CompileKeyed(
      key,
      [&]() -> absl::StatusOr<grammar::Grammar> {
        const grammar::JsonOptions json = ToolArgumentsJsonOptions();
        absl::StatusOr<grammar::Grammar> g = strict_auto
                                                 ? StrictToolCallGrammar(chat, family, json)
                                                 : ForcedToolCallGrammar(chat, family, json);
        if (!g.ok()) {
          built = false;
          build_error = g.status();
        }
        return g;
      },
      grammar::GrammarKind::kJsonSchema);
  if (!built) return build_error;  // already names its field
  if (compiled.ok()) return compiled;
  return FieldErrorWithCode(compiled.status().code(), "chat.tools", compiled.status().message());
}

absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> CompileConstraint(
    const v1::GenerateRequest& request, const runtime::Model& model) {
  absl::StatusOr<std::optional<grammar::GrammarSpec>> spec = ConstraintSpec(request);
  if (!spec.ok()) return spec.status();
  if (!spec->has_value()) return std::shared_ptr<const grammar::CompiledGrammar>();
  absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> compiled =
      model.grammars().Compile(**spec);
  if (compiled.ok()) return compiled;
  // Front ends may name their kind already ("gbnf: line 1, column 10:
  // ..."); the field is said once.
  const std::string field = ConstraintField(request);
  absl::string_view reason = compiled.status().message();
  absl::ConsumePrefix(&reason, absl::StrCat(field, ": "));
  if (absl::IsInvalidArgument(compiled.status())) return ConstraintError(field, reason);
  return FieldErrorWithCode(compiled.status().code(), field, reason);
}

}  // namespace minfer::daemon
