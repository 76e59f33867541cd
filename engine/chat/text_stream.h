// Building blocks of the chat output parsers' streaming state machines.
//
// Every parser in engine/chat promises that its events do not depend on how
// the text was split into deltas. The two helpers here are the places where
// a split could otherwise leak into the output: a tag cut in two ("<tool" +
// "_call>") and whitespace whose fate (kept or trimmed) depends on what
// follows it.

#ifndef MINFER_ENGINE_CHAT_TEXT_STREAM_H_
#define MINFER_ENGINE_CHAT_TEXT_STREAM_H_

#include <string>

#include "absl/strings/string_view.h"

namespace minfer::chat {

// Whether `c` is JSON / template whitespace (space, tab, CR, LF).
bool IsSpace(char c);

// The length of the longest proper suffix of `text` that is a prefix of
// `tag`: the bytes a streaming parser must hold back because the next delta
// may complete the tag. 0 when `tag` is empty.
size_t PartialTagSuffix(absl::string_view text, absl::string_view tag);

// A span of streamed text whose leading whitespace may have to be trimmed
// (after a tag the template writes a newline behind) and whose trailing
// whitespace is held until it is known to be interior (non-whitespace
// follows: emitted) or an edge (a tag or the end follows: the owner decides).
// Push and the Take* calls return what to emit; concatenated over any split
// of the same text they return the same bytes.
class TrimmedSpan {
 public:
  // A new span; `trim_leading`: drop whitespace before its first other byte.
  explicit TrimmedSpan(bool trim_leading) : trim_leading_(trim_leading) {}

  // Appends `text`; returns the bytes now known to be emitted.
  std::string Push(absl::string_view text);

  // Ends the span at a boundary that trims: the held trailing whitespace is
  // dropped. The span then restarts with `trim_leading`.
  void DropHeld(bool trim_leading);

  // Ends the span keeping its trailing whitespace unless nothing but
  // whitespace was pushed since the span started trimming (that whitespace
  // is an edge on both sides). Returns the bytes to emit.
  std::string TakeHeld();

  // Whether nothing other than whitespace was emitted since the span
  // (re)started with trim_leading.
  bool trimming() const { return trim_leading_; }

 private:
  bool trim_leading_;
  std::string held_;  // whitespace not yet emitted
};

}  // namespace minfer::chat

#endif  // MINFER_ENGINE_CHAT_TEXT_STREAM_H_
