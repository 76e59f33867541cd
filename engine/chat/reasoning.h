// Reasoning split from the answer: Qwen3-style <think>...</think>.
//
// A reasoning model writes its thinking between two tags before the answer:
//   "<think>\nLet me add.\n</think>\n\nIt is 4."
// -> reasoning "Let me add.", content "It is 4.". The OpenAI-compatible
// servers return the first as `reasoning_content`; Anthropic's API as a
// `thinking` block.
//
// Rules (ReasoningOptions picks the case):
// - enabled, closed start (the default): the reply is reasoning only if its
//   first non-whitespace text is the start tag; otherwise all of it is
//   content, verbatim (Qwen3 with enable_thinking=false, whose template
//   writes an empty think block into the prompt).
// - enabled, `starts_open`: the template already wrote the start tag into the
//   prompt (Qwen3-Thinking-2507, DeepSeek-R1 templates), so the reply begins
//   inside reasoning and only the end tag appears. A start tag the model
//   writes anyway at the very beginning is dropped.
// - disabled: everything is content, verbatim.
// Reasoning runs to the first end tag; a reply that ends before it (the token
// limit hit while thinking) is all reasoning. Reasoning is trimmed of
// whitespace at both ends and the content after the end tag of leading
// whitespace (the newlines the template writes there); a later start or end
// tag in the content is plain content.
//
// Streaming and whole splitting agree exactly: SplitReasoning(text) is the
// collected events of a stream fed `text`, and a stream's collected events
// are the same for every way of splitting the text into deltas. Bytes that
// may begin a tag, and whitespace that may turn out to be trimmed, are held
// until decided; everything else streams as it comes.
//
// Thread safety: a ReasoningStream belongs to one sequence; not thread-safe.

#ifndef MINFER_ENGINE_CHAT_REASONING_H_
#define MINFER_ENGINE_CHAT_REASONING_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "engine/chat/text_stream.h"

namespace minfer::chat {

struct ReasoningOptions {
  bool enabled = true;
  bool starts_open = false;
  // The tags; other families write the same shape with other tags. Must not
  // be empty, and neither may begin with whitespace.
  std::string start_tag = "<think>";
  std::string end_tag = "</think>";
};

struct ReasoningSplit {
  std::string reasoning;
  std::string content;

  friend bool operator==(const ReasoningSplit&, const ReasoningSplit&) = default;
};

struct ReasoningEvent {
  enum class Type { kReasoning, kContent };
  Type type = Type::kContent;
  std::string text;  // the next bytes of the reasoning or of the content

  friend bool operator==(const ReasoningEvent&, const ReasoningEvent&) = default;
};

// The incremental splitter of one reply. Feed the text as it is generated,
// then call Finish once; nothing may be fed after Finish (it is ignored).
class ReasoningStream {
 public:
  explicit ReasoningStream(ReasoningOptions options);

  std::vector<ReasoningEvent> Feed(absl::string_view delta);
  std::vector<ReasoningEvent> Finish();

 private:
  enum class State {
    kStart,      // before the first non-whitespace byte: a start tag may come
    kReasoning,  // inside the think block
    kAnswer,     // after the end tag, before the answer's first non-whitespace byte
    kPlain,      // content, passed through verbatim
  };

  void Process(bool at_end);
  void Emit(ReasoningEvent::Type type, std::string text);

  ReasoningOptions options_;
  State state_;
  bool finished_ = false;
  std::string buf_;           // fed text not yet decided
  TrimmedSpan reasoning_{/*trim_leading=*/true};
  std::vector<ReasoningEvent> out_;
};

// The whole reply at once (the collected events of one stream).
ReasoningSplit SplitReasoning(absl::string_view text, const ReasoningOptions& options = {});

// Folds events into a whole reply: each type's deltas concatenated.
ReasoningSplit CollectReasoningEvents(const std::vector<ReasoningEvent>& events);

}  // namespace minfer::chat

#endif  // MINFER_ENGINE_CHAT_REASONING_H_
