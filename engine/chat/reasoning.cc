#include "engine/chat/reasoning.h"

#include <utility>

#include "absl/strings/match.h"

namespace minfer::chat {

ReasoningStream::ReasoningStream(ReasoningOptions options)
    : options_(std::move(options)), state_(options_.enabled ? State::kStart : State::kPlain) {}

std::vector<ReasoningEvent> ReasoningStream::Feed(absl::string_view delta) {
  if (finished_) return {};
  buf_.append(delta.data(), delta.size());
  Process(/*at_end=*/false);
  return std::move(out_);
}

std::vector<ReasoningEvent> ReasoningStream::Finish() {
  if (finished_) return {};
  finished_ = true;
  Process(/*at_end=*/true);
  return std::move(out_);
}

void ReasoningStream::Emit(ReasoningEvent::Type type, std::string text) {
  if (text.empty()) return;
  if (!out_.empty() && out_.back().type == type) {
    out_.back().text += text;
    return;
  }
  out_.push_back(ReasoningEvent{type, std::move(text)});
}

void ReasoningStream::Process(bool at_end) {
  while (true) {
    switch (state_) {
      case State::kStart: {
        size_t first = 0;
        while (first < buf_.size() && IsSpace(buf_[first])) ++first;
        const absl::string_view rest = absl::string_view(buf_).substr(first);
        if (absl::StartsWith(rest, options_.start_tag)) {
          buf_.erase(0, first + options_.start_tag.size());
          state_ = State::kReasoning;
          continue;
        }
        // Only whitespace, or the start of the tag: wait for the next byte.
        if (!at_end && absl::StartsWith(options_.start_tag, rest)) return;
        // No start tag. With starts_open the reply is reasoning anyway (the
        // whitespace is trimmed there); without, it is content, verbatim.
        state_ = options_.starts_open ? State::kReasoning : State::kPlain;
        continue;
      }
      case State::kReasoning: {
        const size_t end = buf_.find(options_.end_tag);
        if (end != std::string::npos) {
          Emit(ReasoningEvent::Type::kReasoning,
               reasoning_.Push(absl::string_view(buf_).substr(0, end)));
          reasoning_.DropHeld(/*trim_leading=*/true);
          buf_.erase(0, end + options_.end_tag.size());
          state_ = State::kAnswer;
          continue;
        }
        const size_t keep = at_end ? 0 : PartialTagSuffix(buf_, options_.end_tag);
        Emit(ReasoningEvent::Type::kReasoning,
             reasoning_.Push(absl::string_view(buf_).substr(0, buf_.size() - keep)));
        buf_.erase(0, buf_.size() - keep);
        // A reply that ends while thinking: the held whitespace is trailing.
        if (at_end) reasoning_.DropHeld(/*trim_leading=*/true);
        return;
      }
      case State::kAnswer: {
        size_t first = 0;
        while (first < buf_.size() && IsSpace(buf_[first])) ++first;
        buf_.erase(0, first);
        if (buf_.empty()) return;
        state_ = State::kPlain;
        continue;
      }
      case State::kPlain:
        Emit(ReasoningEvent::Type::kContent, std::move(buf_));
        buf_.clear();
        return;
    }
  }
}

ReasoningSplit SplitReasoning(absl::string_view text, const ReasoningOptions& options) {
  ReasoningStream stream(options);
  std::vector<ReasoningEvent> events = stream.Feed(text);
  std::vector<ReasoningEvent> tail = stream.Finish();
  events.insert(events.end(), std::make_move_iterator(tail.begin()),
                std::make_move_iterator(tail.end()));
  return CollectReasoningEvents(events);
}

ReasoningSplit CollectReasoningEvents(const std::vector<ReasoningEvent>& events) {
  ReasoningSplit out;
  for (const ReasoningEvent& e : events) {
    (e.type == ReasoningEvent::Type::kReasoning ? out.reasoning : out.content) += e.text;
  }
  return out;
}

}  // namespace minfer::chat
