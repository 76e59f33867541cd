// Tools and reasoning on the chat request model (minfer.v1.Chat), for every
// front door: the OpenAI API translates its JSON into v1::Chat (tools,
// tool_choice, assistant tool_calls, tool messages), gRPC takes it as is,
// and the Anthropic and Responses APIs can do the same.
//
// Request side:
//  - ValidateChatTools: the one check of tools, tool choice and tool
//    history (INVALID_ARGUMENT naming the proto field, "chat.tools[1].name:
//    ...", "chat.messages[2].tool_calls[0].arguments: ...").
//  - ChatMessages / TemplateTools: what the chat template is given
//    (chat_template.h).
//  - ToolCallFamilyOf: the call syntax the model's template teaches
//    (engine/chat/tool_calls.h).
//  - ForcedToolCallGrammar: tool_choice required / a named function as a
//    grammar over the family's syntax with each tool's arguments compiled
//    from its JSON Schema (engine/grammar), so every reply parses as calls
//    whose arguments validate.
//
// Reply side: ChatOutputStream turns the generated text into reasoning,
// content and tool calls, whole or streamed (engine/chat's parsers chained:
// the <think> split first, then the family's call syntax in what is left).
//
// Thread safety: functions are pure; a ChatOutputStream belongs to one
// request.
#ifndef MINFER_DAEMON_API_CHAT_TOOLS_H_
#define MINFER_DAEMON_API_CHAT_TOOLS_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/chat/harmony.h"
#include "engine/chat/reasoning.h"
#include "engine/chat/tool_calls.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "minfer/v1/generation.pb.h"

namespace minfer::daemon {

inline constexpr size_t kMaxTools = 128;
inline constexpr size_t kMaxToolNameBytes = 64;
// The most calls a forced reply may make in parallel (ForcedToolCallGrammar):
// a grammar that allowed any number would let a model that never picks the
// end token loop on calls until max_tokens; 16 is more than agents issue in
// one turn (OpenAI's own replies rarely carry more than a handful).
inline constexpr int kMaxForcedToolCalls = 16;
// Whitespace bytes per gap in a constrained call's arguments JSON
// (JsonOptions::max_whitespace; the default 16 is for documents). Calls are
// written compactly ({"city": "Paris"}, or a newline and a short indent):
// a looser cap only lets a model pad its arguments, and a forced reply of
// several calls run into max_tokens.
inline constexpr int kToolArgumentsMaxWhitespace = 4;
// The JsonOptions of call grammars' arguments.
grammar::JsonOptions ToolArgumentsJsonOptions();

// Checks chat's tools, tool_choice and tool history: at most kMaxTools
// tools, each with a name of 1 to 64 letters, digits, '_', '-' or '.',
// unique, and parameters that are empty or a JSON object whose "type" (if
// any) is "object"; a function choice naming one of them; required or a
// function choice only with tools; tool_calls only on assistant messages,
// each with a name and arguments that are empty or a JSON object.
// INVALID_ARGUMENT naming the field.
absl::Status ValidateChatTools(const v1::Chat& chat);

// The chat's messages as the tokenizer's chat template takes them.
std::vector<tokenizer::ChatMessage> ChatMessages(const v1::Chat& chat);

// What the template renders `chat` with, checked: ValidateChatTools, then
// ChatMessages, and ChatTemplateOptionsOf (chat_options.h) with
// TemplateTools. Its errors.
struct ChatTemplateInput {
  std::vector<tokenizer::ChatMessage> messages;
  tokenizer::ChatTemplateOptions options;
};
absl::StatusOr<ChatTemplateInput> ChatTemplateInputOf(const v1::Chat& chat);
// The tools the template describes to the model: none for
// TOOL_CHOICE_NONE (the model is not to call any), else all.
std::vector<tokenizer::ChatTool> TemplateTools(const v1::Chat& chat);

// Whether the chat forces a call (tool_choice required or a function).
bool IsForcedToolChoice(const v1::Chat& chat);
// Whether the reply is parsed for calls (tools given, choice not none).
bool ParsesToolCalls(const v1::Chat& chat);

// The tool-call family (a registry name of engine/chat/tool_calls.h) the
// model's chat template teaches: chat::ToolCallFamilyForTemplate on its
// source; a ChatML model whose template shows no call syntax (Qwen2's
// plain template, the built-in ChatML) gets "hermes", what the Qwen2
// family is trained on. "" when unknown.
// A model's reply parsers as loaded (SlotConfig.tool_parser /
// reasoning_parser, checked by CheckChatParsers): "" = what the chat
// template says, "none" = off, else a tool-call family ("hermes",
// "llama3_json") or a reasoning parser ("qwen3": <think>...</think>).
struct ChatParsers {
  std::string tool;
  std::string reasoning;
};

// The family as above, or `parsers.tool` when the model was loaded with one
// ("" for "none").
std::string ToolCallFamilyOf(const tokenizer::Tokenizer& tok, const ChatParsers& parsers = {});

// The grammar of a reply that is only calls, in `family`'s syntax:
//   hermes:      <tool_call>\n{"name": "N", "arguments": ARGS}\n</tool_call>
//                (1 to kMaxForcedToolCalls of them joined by "\n" when
//                parallel_tool_calls is unset or true)
//   llama3_json: {"name": "N", "parameters": ARGS} (one call)
// N one of the tools (only the named one for a function choice), ARGS
// valid against that tool's parameters (no parameters: {}).
// INVALID_ARGUMENT naming "chat.tools[i].parameters" for a schema the
// grammar engine refuses, and for a family without a forced form.
absl::StatusOr<grammar::Grammar> ForcedToolCallGrammar(const v1::Chat& chat,
                                                       absl::string_view family,
                                                       const grammar::JsonOptions& json = {});

// Strict tools in auto mode (OpenAI's `strict: true`): whether `chat` has
// a strict tool and a choice that parses calls without forcing one; then
// the reply is free until the model opens a call (ToolCallTrigger), and
// from there follows StrictToolCallGrammar: the family's call syntax as in
// ForcedToolCallGrammar (required), over every tool, a strict tool's
// arguments valid against its parameters and another's any JSON object.
// The llama3_json trigger is `{"name": "` as its template shows a call; a
// call spelled otherwise is parsed unconstrained.
bool HasStrictAutoTools(const v1::Chat& chat);
absl::StatusOr<grammar::Grammar> StrictToolCallGrammar(const v1::Chat& chat,
                                                       absl::string_view family,
                                                       const grammar::JsonOptions& json = {});
// The text that opens a call in `family`'s syntax ("" if none is known).
std::string ToolCallTrigger(absl::string_view family);

// How a chat reply is to be read.
// Whether the model's replies are gpt-oss's Harmony framing (a template
// that writes <|channel|> and <|message|>), read by channel
// (engine/chat/harmony.h) unless `parsers` turn reasoning off.
bool IsHarmonyChat(const tokenizer::Tokenizer& tok, const ChatParsers& parsers = {});

struct ChatOutputOptions {
  // The family to parse calls in; "" parses none (content only).
  std::string tool_family;
  chat::ReasoningOptions reasoning;
  // gpt-oss's Harmony replies (a template that writes <|channel|> and
  // <|message|>): channels split into reasoning, content and, with
  // harmony_calls, calls (engine/chat/harmony.h), instead of the reasoning
  // split and the call families above.
  bool harmony = false;
  bool harmony_calls = false;
};

// The reading of a reply to `chat` by the model of `tok`: calls parsed
// when ParsesToolCalls and a family is known; reasoning split when the
// template writes <think> and </think> (Qwen3 and the like), starting
// inside it when the rendered prompt ends in an open <think> (then the
// prompt is rendered once more to see; a chat that does not render gets
// the closed start).
ChatOutputOptions ChatOutputOptionsFor(const v1::Chat& chat, const tokenizer::Tokenizer& tok,
                                       const ChatParsers& parsers = {});

struct ChatOutputEvent {
  enum class Type {
    kReasoning,  // `text`: the next bytes of the reasoning
    kContent,    // `text`: the next bytes of the content
    kCallStart,  // call `index` (0, 1, ...) named `name` with id `id`
    kArguments,  // `text`: the next bytes of call `index`'s arguments
  };
  Type type = Type::kContent;
  std::string text;
  int index = -1;
  std::string id;
  std::string name;
};

// A whole reply.
struct ChatOutput {
  std::string reasoning;
  std::string content;
  std::vector<chat::ToolCall> calls;
};

// A fresh call id, "call_" and 24 random letters and digits (OpenAI's shape).
std::string NewToolCallId();

// The reader of one reply: feed the generated text as it comes, then
// Finish once. Events are the same for every split of the text.
class ChatOutputStream {
 public:
  // `ids` names the calls (null: NewToolCallId).
  static absl::StatusOr<std::unique_ptr<ChatOutputStream>> Create(const ChatOutputOptions& options,
                                                                  chat::ToolCallIdFn ids = nullptr);
  // The reader every front door gives a reply: Create(*options, ids), or,
  // for a family the registry does not know (not reachable while families
  // come from it), a reader that takes the whole reply as content, with
  // *options reset to say so. Never null.
  static std::unique_ptr<ChatOutputStream> CreateOrContent(ChatOutputOptions* options,
                                                           chat::ToolCallIdFn ids = nullptr);

  std::vector<ChatOutputEvent> Feed(absl::string_view delta);
  std::vector<ChatOutputEvent> Finish();

 private:
  ChatOutputStream() = default;
  void Content(std::vector<chat::ToolCallEvent> events, std::vector<ChatOutputEvent>* out);
  void Route(std::vector<chat::ReasoningEvent> events, std::vector<ChatOutputEvent>* out);
  void Harmony(std::vector<chat::HarmonyEvent> events, std::vector<ChatOutputEvent>* out);

  std::unique_ptr<chat::HarmonyStream> harmony_;      // null: not Harmony
  std::unique_ptr<chat::ReasoningStream> reasoning_;  // null: no split
  std::unique_ptr<chat::ToolCallStream> calls_;       // null: no calls
};

// Folds events into a whole reply.
ChatOutput CollectChatOutput(const std::vector<ChatOutputEvent>& events);

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_API_CHAT_TOOLS_H_
