// Chat prompts: turns a list of messages into the model's prompt text.
//
// minfer runs the model's own chat template (GGUF tokenizer.chat_template,
// Jinja) the way Hugging Face transformers' apply_chat_template does, with
// the interpreter of jinja.h. The template sees:
//   messages               a list of dicts, each as transformers (and vLLM)
//                          hand an OpenAI-style message to a template:
//                            role, content (always a string, "" for none),
//                            reasoning_content (only when non-empty),
//                            tool_calls (only when non-empty): a list of
//                              {"id" (when set), "type": "function",
//                               "function": {"name", "arguments"}} with the
//                              arguments parsed from their JSON text into a
//                              dict (templates print them with tojson),
//                            tool_call_id and name (only when non-empty)
//   tools                  only when ChatTemplateOptions::tools is
//                          non-empty: a list of {"type": "function",
//                          "function": {"name", "description" (when set),
//                          "parameters" (the schema, when set)}}
//   add_generation_prompt  bool
//   bos_token, eos_token   the texts of the model's BOS and EOS tokens (""
//                          when the model has none; llama.cpp does the same)
//   + ChatTemplateOptions::variables (e.g. enable_thinking = false for Qwen3)
// and strftime_now() reports ChatTemplateOptions::now (Llama 3.x's "Today
// Date"). raise_exception(msg) in the template fails the rendering with
// INVALID_ARGUMENT carrying msg.
//
// A model without a template gets ChatML, the format of the Qwen2 family,
// when its pre-tokenizer is "qwen2" (an error for anything else):
//
//   <|im_start|>system\nSYSTEM<|im_end|>\n
//   <|im_start|>user\nUSER<|im_end|>\n
//   <|im_start|>assistant\n            (the generation prompt, optional)
//
// Content ranges. Message contents are handed to the template as marked
// strings (jinja.h), so the renderer knows which output bytes came from
// them however the template uses a content: whole, trimmed (Llama's
// "| trim"), or cut apart (Qwen3 splits an assistant turn at "</think>" into
// its reasoning and its answer). Render reports those byte ranges; an
// encoder keeps control tokens written inside them from being parsed. Text
// the template computes from a content in other ways (upper-casing it,
// tojson) is reported whole. Marked string values among the options are
// reported the same way (use jinja::Value::MarkedString for text from
// users). Tool calls' names and arguments, tool results, reasoning and the
// tool definitions are client text too: every string in them is marked.
//
// Roles are system, user, assistant and tool.
//
// Immutable after Create; thread-safe.
#ifndef MINFER_ENGINE_TOKENIZER_CHAT_TEMPLATE_H_
#define MINFER_ENGINE_TOKENIZER_CHAT_TEMPLATE_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/tokenizer/jinja.h"

namespace minfer::tokenizer {

// A call the assistant made, in a conversation's history.
struct ChatToolCall {
  std::string id;         // "" when the client gave none
  std::string name;
  std::string arguments;  // JSON text of an object ("" is {})
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" or "tool"
  std::string content;
  // assistant: the calls of this turn, and its reasoning (Qwen3's template
  // writes it back into the last turns as <think>...</think>).
  std::vector<ChatToolCall> tool_calls = {};
  std::string reasoning_content = {};
  // tool: which call this is the result of, and the function's name.
  std::string tool_call_id = {};
  std::string name = {};
};

// A function the model may call (OpenAI's tools[].function).
struct ChatTool {
  std::string name;
  std::string description;  // "" for none
  std::string parameters;   // JSON Schema text; "" for none
};

// Byte range [begin, end) of a rendered prompt that holds message content.
struct ContentRange {
  size_t begin;
  size_t end;
};

// The special token texts a template may print.
struct ChatSpecialTokens {
  std::string bos_token;
  std::string eos_token;
};

struct ChatTemplateOptions {
  // Extra template variables, e.g. {"enable_thinking", Bool(false)}. They
  // may not be named messages, add_generation_prompt, bos_token or
  // eos_token (INVALID_ARGUMENT).
  jinja::Variables variables;
  // The `tools` variable (absent when empty; then `variables` may carry
  // one, as the chat_template_kwargs of some servers do).
  std::vector<ChatTool> tools;
  // What strftime_now() reports: absl::Now() at render time when left at
  // InfinitePast.
  absl::Time now = absl::InfinitePast();
  absl::TimeZone time_zone = absl::LocalTimeZone();
};

inline constexpr absl::string_view kImStart = "<|im_start|>";
inline constexpr absl::string_view kImEnd = "<|im_end|>";

class ChatTemplate {
 public:
  // Parses `template_text` (empty = the model has none) once, for a model
  // with pre-tokenizer `pre`. Errors name `model_name`: INVALID_ARGUMENT
  // when the template does not parse (with its line and column, 1-based),
  // FAILED_PRECONDITION when it is absent for a non-qwen2 model.
  static absl::StatusOr<ChatTemplate> Create(absl::string_view template_text, absl::string_view pre,
                                             absl::string_view model_name,
                                             const ChatSpecialTokens& tokens = {});

  // Renders `messages` (roles system/user/assistant/tool; INVALID_ARGUMENT
  // otherwise, and for tool-call arguments or tool parameters that are not
  // JSON) and, with `add_generation_prompt`, the opening of the
  // assistant's turn. When `content` is given, the byte ranges of message
  // content in the prompt (see the header comment: sorted, disjoint,
  // non-empty) are appended to it. Errors name the model: INVALID_ARGUMENT
  // when the template fails or refuses the conversation (raise_exception's
  // message), RESOURCE_EXHAUSTED when it exceeds jinja::Limits.
  absl::StatusOr<std::string> Render(absl::Span<const ChatMessage> messages,
                                     bool add_generation_prompt,
                                     std::vector<ContentRange>* content = nullptr,
                                     const ChatTemplateOptions& options = {}) const;

  // A default system prompt the template hard-codes (a literal
  // '<|im_start|>system\n...<|im_end|>' in its source, as Qwen2's "You are a
  // helpful assistant." and Qwen2.5's "You are Qwen, created by Alibaba
  // Cloud. You are a helpful assistant."), found by scanning the source;
  // empty when none. Informational: the template itself inserts it.
  const std::string& default_system_prompt() const { return default_system_prompt_; }

  // Whether the prompt is ChatML: the template frames turns with
  // <|im_start|> and <|im_end|>, or the model has no template (qwen2). An
  // encoder then needs those two as control tokens.
  bool is_chatml() const { return chatml_; }
  // Whether the model's own template is used (false: built-in ChatML).
  bool from_model() const { return from_model_; }
  // The template's source text ("" for the built-in ChatML): what callers
  // read the model's tool-call and reasoning syntax from.
  const std::string& source() const { return source_; }

 private:
  ChatTemplate() = default;

  std::string model_name_;
  std::string default_system_prompt_;
  std::string source_;
  ChatSpecialTokens tokens_;
  jinja::Template template_;
  bool chatml_ = false;
  bool from_model_ = false;
};

// A ChatML template in the shape of Qwen2.5 (Instruct) models' (explicit or
// default system prompt, framed turns), written for minfer's tests and model
// writers; it is not Qwen's published template text.
absl::string_view Qwen25ChatTemplate();

}  // namespace minfer::tokenizer

#endif  // MINFER_ENGINE_TOKENIZER_CHAT_TEMPLATE_H_
