// A request's output constraint (v1::GenerateRequest.constraint: a JSON
// Schema, JSON mode, GBNF, a regex, a choice) as the grammar engine takes it,
// and its compilation against the serving model's vocabulary. Used by
// BuildGenerateRequest, so the gRPC and the HTTP front doors map constraints
// the same way (the HTTP API first translates response_format, llama-server's
// grammar / json_schema and vLLM's structured_outputs into the proto's
// oneof).
//
// Errors are field errors (engine/base/field_error.h) naming the proto
// field ("json_schema: unsupported keyword 'patternProperties' at
// /properties/a"; FieldPath "json_schema") and carry a payload marking them
// as the constraint's (IsConstraintError), so an API layer can name its own
// field for them without matching message text.
//
// Thread-safe (no state; GrammarCompiler::Compile is thread-safe).
#ifndef MINFER_DAEMON_API_CONSTRAINT_H_
#define MINFER_DAEMON_API_CONSTRAINT_H_

#include <cstddef>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/spec.h"
#include "engine/runtime/model.h"
#include "minfer/v1/generation.pb.h"

namespace minfer::daemon {

// Caps checked before anything is compiled: the text of a schema, grammar
// or regex, the choices (count and total bytes), and json_max_whitespace.
inline constexpr size_t kMaxConstraintBytes = 1 << 20;
inline constexpr int kMaxChoices = 4096;
inline constexpr int kMaxJsonWhitespace = 64;

// The proto field the request's constraint is in ("json_schema",
// "json_object", "gbnf", "regex", "choice"), "" for none.
const char* ConstraintField(const v1::GenerateRequest& request);

// The grammar spec of `request`'s constraint; nullopt when it has none
// (also json_object: false). INVALID_ARGUMENT (a constraint error) for an
// empty text, a text over kMaxConstraintBytes, no choices or too many,
// json_max_whitespace out of [0, kMaxJsonWhitespace] or set without a JSON
// constraint.
absl::StatusOr<std::optional<grammar::GrammarSpec>> ConstraintSpec(
    const v1::GenerateRequest& request);

// ConstraintSpec compiled with `model`'s GrammarCompiler (cached by the
// spec): null when there is no constraint. The compiler's INVALID_ARGUMENT
// (the front end's message: the keyword, rule or position at fault; or
// "grammar too complex") becomes a constraint error prefixed with the field;
// other codes keep theirs, prefixed too. Blocks for the compile (bounded by
// the compiler's time cap): call it in the request path, never on a slot's
// worker.
absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> CompileConstraint(
    const v1::GenerateRequest& request, const runtime::Model& model);

// The forced tool call of `chat` (IsForcedToolChoice, chat_tools.h) in
// `family`'s syntax, compiled with `model`'s GrammarCompiler, cached under
// the family, the tools, the choice and parallel_tool_calls (an agent
// sends the same tools every turn). ForcedToolCallGrammar's
// errors ("chat.tools[1].parameters: ..."), and the compiler's prefixed
// with "chat.tools: ". Blocks for the compile, as CompileConstraint. With
// `strict_auto`, StrictToolCallGrammar instead (cached apart).
absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> CompileForcedToolCall(
    const v1::Chat& chat, absl::string_view family, const runtime::Model& model,
    bool strict_auto = false);

// INVALID_ARGUMENT "<field>: <message>" about the constraint's proto field
// (a field error), marked as the constraint's.
absl::Status ConstraintError(absl::string_view field, absl::string_view message);
// Whether `status` came from ConstraintSpec / CompileConstraint.
bool IsConstraintError(const absl::Status& status);

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_API_CONSTRAINT_H_
