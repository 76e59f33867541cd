#include "daemon/api/chat_phases.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/api/chat_tools.h"
#include "daemon/api/constraint.h"
#include "engine/base/field_error.h"
#include "engine/grammar/spec.h"

namespace minfer::daemon {
namespace {

// A grammar of exactly `text` (a choice of one), compiled and cached.
absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> Literal(
    const runtime::Model& model, const std::string& text) {
  grammar::GrammarSpec spec;
  spec.kind = grammar::GrammarKind::kChoice;
  spec.choices = {text};
  return model.grammars().Compile(spec);
}

}  // namespace

absl::Status PlanChatReply(const v1::Chat& chat, const runtime::Model& model,
                           runtime::GenerateRequest* out, const ChatParsers& parsers) {
  using Start = runtime::GenerateRequest::GrammarStart;
  if (chat.has_reasoning_budget() && chat.reasoning_budget() < 0) {
    return InvalidFieldThat("chat.reasoning_budget",
                            absl::StrCat("must be >= 0 (tokens), got ", chat.reasoning_budget()));
  }
  const tokenizer::Tokenizer& tok = model.tokenizer();
  if (out->grammar == nullptr && HasStrictAutoTools(chat)) {
    const std::string family = ToolCallFamilyOf(tok, parsers);
    const std::string trigger = ToolCallTrigger(family);
    if (!trigger.empty()) {
      absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> g =
          CompileForcedToolCall(chat, family, model, /*strict_auto=*/true);
      if (!g.ok()) return g.status();
      out->grammar = *std::move(g);
      out->grammar_start = Start::kAtTrigger;
      out->grammar_trigger = trigger;
    }
  }
  // The think block matters only for a grammar or a budget: the rest of
  // the time the completion need not track it (and the prompt need not be
  // rendered again to see whether it opens the block).
  if (out->grammar == nullptr && !chat.has_reasoning_budget()) return absl::OkStatus();
  const ChatOutputOptions reading = ChatOutputOptionsFor(chat, tok, parsers);
  if (!reading.reasoning.enabled) return absl::OkStatus();
  runtime::GenerateRequest::Reasoning r;
  r.start_tag = reading.reasoning.start_tag;
  r.end_tag = reading.reasoning.end_tag;
  r.starts_open = reading.reasoning.starts_open;
  if (chat.has_reasoning_budget()) {
    r.budget = chat.reasoning_budget();
    absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> close =
        Literal(model, "\n" + r.end_tag);
    if (!close.ok()) return close.status();
    r.close = *std::move(close);
  }
  if (out->grammar != nullptr && out->grammar_start == Start::kNow) {
    if (r.starts_open) {
      out->grammar_start = Start::kAfterReasoning;
    } else if (chat.has_reasoning_budget()) {
      absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> open =
          Literal(model, r.start_tag);
      if (!open.ok()) return open.status();
      r.open = *std::move(open);
      out->grammar_start = Start::kAfterReasoning;
    }
  }
  out->reasoning = std::move(r);
  return absl::OkStatus();
}

}  // namespace minfer::daemon
