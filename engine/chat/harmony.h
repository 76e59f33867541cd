// gpt-oss's replies in the Harmony format, split into reasoning, content
// and tool calls. After the prompt's `<|start|>assistant` a reply is a
// sequence of messages, each a header up to `<|message|>` and a body up to
// `<|end|>` (or the `<|return|>` / `<|call|>` that ends the generation and
// is not part of the text):
//   <|channel|>analysis<|message|>Let me look.<|end|>
//   <|start|>assistant<|channel|>final<|message|>It is 4.
// or a call:
//   <|start|>assistant<|channel|>commentary to=functions.get_weather
//     <|constrain|>json<|message|>{"city":"Paris"}
// (the recipient may also follow the role: `assistant to=functions.X
// <|channel|>commentary`). The `analysis` channel is reasoning; `final`,
// and `commentary` without a recipient (a preamble), are content; a
// message to `functions.NAME` is a call of NAME whose arguments are its
// body, when calls are parsed (`calls`), else content. A reply that does
// not start with a header (`<|channel|>` or `<|start|>`) is all content.
// The framing tokens must be in the text: the o200k tokenizer keeps
// <|channel|>, <|message|>, <|start|>, <|end|> and <|constrain|> as
// user-defined tokens, which decode to their text.
//
// Streaming and whole parsing agree: ParseHarmony(text) is the collected
// events of a stream fed `text`, however it is split into deltas; bytes
// that may begin a marker are held until decided. A header longer than
// kMaxHeaderBytes without `<|message|>` turns the rest of the reply into
// content (a model writing no framing is not buffered without bound).
//
// Thread safety: a HarmonyStream belongs to one sequence; not thread-safe.
#ifndef MINFER_ENGINE_CHAT_HARMONY_H_
#define MINFER_ENGINE_CHAT_HARMONY_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "engine/chat/tool_calls.h"

namespace minfer::chat {

inline constexpr size_t kMaxHeaderBytes = 512;

struct HarmonyEvent {
  enum class Type {
    kReasoning,  // `text`: the next bytes of the reasoning
    kContent,    // `text`: the next bytes of the content
    kCallStart,  // call `index` named `name` with id `id`
    kArguments,  // `text`: the next bytes of call `index`'s arguments
  };
  Type type = Type::kContent;
  std::string text;
  int index = -1;
  std::string id;
  std::string name;
  friend bool operator==(const HarmonyEvent&, const HarmonyEvent&) = default;
};

struct HarmonyOutput {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> calls;  // arguments as the model wrote them
  friend bool operator==(const HarmonyOutput&, const HarmonyOutput&) = default;
};

class HarmonyStream {
 public:
  // calls: parse messages to functions.NAME as calls; ids: their ids
  // (null: "call_0", "call_1", ...).
  explicit HarmonyStream(bool calls, ToolCallIdFn ids = nullptr);
  std::vector<HarmonyEvent> Feed(absl::string_view delta);
  std::vector<HarmonyEvent> Finish();

 private:
  enum class State { kStart, kHeader, kBody, kPlain, kDone };
  enum class Kind { kReasoning, kContent, kCall };
  void Process(bool at_end);
  void Emit(Kind kind, std::string text);
  void BeginMessage(absl::string_view header);

  bool calls_;
  ToolCallIdFn ids_;
  State state_ = State::kStart;
  Kind kind_ = Kind::kContent;
  int n_calls_ = 0;
  std::string buf_;
  std::vector<HarmonyEvent> out_;
};

// The whole reply at once (the collected events of one stream).
HarmonyOutput ParseHarmony(absl::string_view text, bool calls, ToolCallIdFn ids = nullptr);

}  // namespace minfer::chat

#endif  // MINFER_ENGINE_CHAT_HARMONY_H_
