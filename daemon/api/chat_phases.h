// When a chat reply is constrained, and how long it may think: the phases
// of runtime::GenerateRequest (completion.h: grammar_start, reasoning) that
// a chat request asks for, in one place for every front door.
//  - The think block: for a model whose template writes <think>...</think>
//    (ChatOutputOptionsFor), the completion is told the tags and whether
//    the prompt opened the block, so it can find the block's end.
//  - v1::Chat.reasoning_budget: the block's token budget; when spent the
//    block is closed with "\n</think>" (a grammar of that text).
//  - A grammar (a constraint or a forced call) with a think block: after the
//    block when the prompt opened it; with a closed start, from the first
//    token (no thinking) unless a budget is set, then after a block the
//    model may open (the union of the start tag and the grammar decides).
//  - Strict tools in auto mode (HasStrictAutoTools) without another
//    grammar: StrictToolCallGrammar from the family's trigger on.
// Compiles what it needs with the model's grammar compiler (cached), so it
// blocks like CompileConstraint: call it in the request path.
//
// Thread-safe (no state).
#ifndef MINFER_DAEMON_API_CHAT_PHASES_H_
#define MINFER_DAEMON_API_CHAT_PHASES_H_

#include "absl/status/status.h"
#include "daemon/api/chat_tools.h"
#include "engine/runtime/completion.h"
#include "engine/runtime/model.h"
#include "minfer/v1/generation.pb.h"

namespace minfer::daemon {

// Sets `out`'s grammar_start, grammar_trigger, reasoning and (strict auto
// tools) grammar for `chat`; `out->grammar` is the request's constraint or
// forced call, already compiled (or null). INVALID_ARGUMENT naming
// "chat.reasoning_budget" for a negative budget; the compiler's errors for
// the strict call grammar ("chat.tools[i].parameters: ...").
// `parsers`: the model's reply parsers (a load option; chat_tools.h).
absl::Status PlanChatReply(const v1::Chat& chat, const runtime::Model& model,
                           runtime::GenerateRequest* out, const ChatParsers& parsers = {});

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_API_CHAT_PHASES_H_
