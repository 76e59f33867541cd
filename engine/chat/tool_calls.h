// Tool calls in a model's reply, parsed per model family.
//
// Chat templates teach each family its own call syntax; this file turns a
// reply written in it back into calls (name, arguments, id) and the plain
// text around them, whole or streamed:
//   "hermes"      Qwen2.5 / Qwen3:  <tool_call>\n{"name": N, "arguments": {..}}\n</tool_call>
//                 Several blocks in one reply are parallel calls. Text outside
//                 the blocks is content; whitespace touching a valid block (the
//                 newlines the template writes around it) is not.
//   "llama3_json" Llama 3.1 / 3.2 / 3.3: the whole reply (after leading
//                 whitespace, optionally after <|python_tag|>) is
//                 {"name": N, "parameters": {..}} ("arguments" is accepted for
//                 "parameters"); several objects separated by ";" are parallel
//                 calls. After <|python_tag|>, Llama 3.1's built-in tool
//                 syntax is a call too: brave_search.call(query="x") is the
//                 call brave_search with {"query":"x"} (keyword arguments
//                 whose values are Python string, number, True/False/None
//                 literals). Any other reply is content, verbatim.
//
// Malformed calls are content, never errors: a block whose JSON does not
// parse, is not an object, has no non-empty string "name", has "arguments"
// (or "parameters") that is not an object, or is nested deeper than 64
// levels; a <tool_call> with no </tool_call> before the end of the reply; for
// llama3_json, a reply that starts like a call but is not entirely calls.
// Such text comes back verbatim. A hermes block without "arguments" is a call
// with "{}"; a llama3_json object must carry its parameters (without them
// `{"name": "Bob"}` would be a call, where a JSON answer is more likely).
//
// Arguments are the compact JSON text of the object (no insignificant
// whitespace, keys in the model's order), as OpenAI's API sends them. Numbers
// go through a double or 64-bit integer: "1e2" comes back as "100.0".
//
// Streaming and whole parsing agree exactly: ToolCallParser::Parse(text) is
// the collected events of a stream fed `text`, and a stream's events (once
// collected with CollectToolCallEvents) are the same for every way of
// splitting the text into deltas. That guarantee has a price: a call can not
// be announced before it is known to be well formed, so a hermes call is
// emitted (start, then its whole arguments as one delta) when its
// </tool_call> arrives, and llama3_json calls when the reply ends. Content
// streams as it comes, except the bytes that may begin a tag (held until
// decided) and whitespace that may touch a call.
//
// Thread safety: a ToolCallParser is immutable and may be shared; a
// ToolCallStream belongs to one sequence and is not thread-safe.

#ifndef MINFER_ENGINE_CHAT_TOOL_CALLS_H_
#define MINFER_ENGINE_CHAT_TOOL_CALLS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace minfer::chat {

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // compact JSON object text, e.g. {"city":"Paris"}

  friend bool operator==(const ToolCall&, const ToolCall&) = default;
};

// A whole reply: the content (text outside calls) and the calls in order.
struct ParsedToolCalls {
  std::string content;
  std::vector<ToolCall> calls;

  friend bool operator==(const ParsedToolCalls&, const ParsedToolCalls&) = default;
};

// One streamed event, in OpenAI's delta vocabulary.
struct ToolCallEvent {
  enum class Type {
    kContent,    // `text`: the next bytes of the content
    kCallStart,  // call `index` (0, 1, ... in reply order) named `name` with id `id`
    kArguments,  // `text`: the next bytes of call `index`'s arguments
  };
  Type type = Type::kContent;
  std::string text;
  int index = -1;
  std::string id;
  std::string name;

  friend bool operator==(const ToolCallEvent&, const ToolCallEvent&) = default;
};

// Makes the id of the reply's call number `index` (0-based, in order). Called
// once per call, in order, when the call is emitted. Null: "call_<index>".
using ToolCallIdFn = std::function<std::string(int index)>;

// The incremental parser of one reply. Feed the text as it is generated, then
// call Finish once; nothing may be fed after Finish (it is ignored).
class ToolCallStream {
 public:
  virtual ~ToolCallStream() = default;
  virtual std::vector<ToolCallEvent> Feed(absl::string_view delta) = 0;
  virtual std::vector<ToolCallEvent> Finish() = 0;
};

// One family's syntax.
class ToolCallParser {
 public:
  virtual ~ToolCallParser() = default;

  // The registry name ("hermes", "llama3_json").
  virtual absl::string_view family() const = 0;

  // A stream for one reply; `ids` names its calls (null: "call_0", ...).
  virtual std::unique_ptr<ToolCallStream> NewStream(ToolCallIdFn ids = nullptr) const = 0;

  // The whole reply at once (the collected events of one stream).
  ParsedToolCalls Parse(absl::string_view text, ToolCallIdFn ids = nullptr) const;
};

// The parser of `family`; NOT_FOUND naming it and the known families.
absl::StatusOr<std::unique_ptr<ToolCallParser>> MakeToolCallParser(absl::string_view family);

// The registered families, in registry order.
std::vector<std::string> ToolCallFamilies();

// The family a chat template's source teaches its model, guessed from the
// syntax it writes: "<tool_call>" -> "hermes"; "<|python_tag|>" or an
// "ipython" role -> "llama3_json"; otherwise "" (the template has no tool
// syntax we know; a load option must name the family).
absl::string_view ToolCallFamilyForTemplate(absl::string_view chat_template);

// Folds events into a whole reply: content deltas concatenated, each call's
// arguments deltas appended to the call its kCallStart opened.
ParsedToolCalls CollectToolCallEvents(const std::vector<ToolCallEvent>& events);

}  // namespace minfer::chat

#endif  // MINFER_ENGINE_CHAT_TOOL_CALLS_H_
