#include "engine/chat/harmony.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace minfer::chat {
namespace {

constexpr absl::string_view kStartTok = "<|start|>";
constexpr absl::string_view kChannel = "<|channel|>";
constexpr absl::string_view kMessage = "<|message|>";
constexpr absl::string_view kEnds[] = {"<|end|>", "<|return|>", "<|call|>"};

// Whether `s` is a proper prefix of `marker`.
bool ProperPrefix(absl::string_view s, absl::string_view marker) {
  return s.size() < marker.size() && absl::StartsWith(marker, s);
}

// The longest suffix of `s` that is a proper prefix of one of the body's
// end markers (what a body must hold back).
size_t HeldSuffix(absl::string_view s) {
  size_t held = 0;
  for (absl::string_view m : kEnds) {
    for (size_t n = std::min(s.size(), m.size() - 1); n > held; --n) {
      if (absl::StartsWith(m, s.substr(s.size() - n))) {
        held = n;
        break;
      }
    }
  }
  return held;
}

// The word after `key` in `header` (up to a space or a '<'), or "".
std::string WordAfter(absl::string_view header, absl::string_view key) {
  const size_t at = header.find(key);
  if (at == absl::string_view::npos) return "";
  absl::string_view rest = header.substr(at + key.size());
  const size_t end = rest.find_first_of(" <");
  return std::string(rest.substr(0, end));
}

}  // namespace

HarmonyStream::HarmonyStream(bool calls, ToolCallIdFn ids) : calls_(calls), ids_(std::move(ids)) {}

std::vector<HarmonyEvent> HarmonyStream::Feed(absl::string_view delta) {
  if (state_ == State::kDone) return {};
  buf_.append(delta.data(), delta.size());
  Process(false);
  return std::move(out_);
}

std::vector<HarmonyEvent> HarmonyStream::Finish() {
  if (state_ == State::kDone) return {};
  Process(true);
  state_ = State::kDone;
  return std::move(out_);
}

void HarmonyStream::Emit(Kind kind, std::string text) {
  if (text.empty()) return;
  HarmonyEvent e;
  e.type = kind == Kind::kReasoning ? HarmonyEvent::Type::kReasoning
           : kind == Kind::kCall    ? HarmonyEvent::Type::kArguments
                                    : HarmonyEvent::Type::kContent;
  e.text = std::move(text);
  if (kind == Kind::kCall) e.index = n_calls_ - 1;
  // Consecutive pieces of the same kind merge, so the events of a stream do
  // not depend on how its text was split.
  if (!out_.empty() && out_.back().type == e.type && out_.back().index == e.index &&
      e.type != HarmonyEvent::Type::kCallStart) {
    out_.back().text += e.text;
    return;
  }
  out_.push_back(std::move(e));
}

void HarmonyStream::BeginMessage(absl::string_view header) {
  const std::string recipient = WordAfter(header, "to=");
  const std::string channel = WordAfter(header, kChannel);
  if (calls_ && absl::StartsWith(recipient, "functions.") &&
      recipient.size() > std::string("functions.").size()) {
    HarmonyEvent e;
    e.type = HarmonyEvent::Type::kCallStart;
    e.index = n_calls_;
    e.name = recipient.substr(std::string("functions.").size());
    e.id = ids_ ? ids_(n_calls_) : absl::StrCat("call_", n_calls_);
    ++n_calls_;
    out_.push_back(std::move(e));
    kind_ = Kind::kCall;
  } else if (channel == "analysis" && recipient.empty()) {
    kind_ = Kind::kReasoning;
  } else {
    kind_ = Kind::kContent;
  }
}

void HarmonyStream::Process(bool at_end) {
  while (!buf_.empty()) {
    switch (state_) {
      case State::kStart:
        if (absl::StartsWith(buf_, kChannel) || absl::StartsWith(buf_, kStartTok)) {
          state_ = State::kHeader;
        } else if (!at_end && (ProperPrefix(buf_, kChannel) || ProperPrefix(buf_, kStartTok))) {
          return;  // undecided
        } else {
          state_ = State::kPlain;
        }
        break;
      case State::kPlain:
        Emit(Kind::kContent, std::move(buf_));
        buf_.clear();
        return;
      case State::kHeader: {
        const size_t at = absl::string_view(buf_).find(kMessage);
        if (at == absl::string_view::npos) {
          if (buf_.size() > kMaxHeaderBytes) {
            state_ = State::kPlain;  // no framing after all: all content
            break;
          }
          if (at_end) buf_.clear();  // a reply cut inside a header has no body
          return;
        }
        BeginMessage(absl::string_view(buf_).substr(0, at));
        buf_.erase(0, at + kMessage.size());
        state_ = State::kBody;
        break;
      }
      case State::kBody: {
        size_t end = absl::string_view::npos, len = 0;
        for (absl::string_view m : kEnds) {
          const size_t p = absl::string_view(buf_).find(m);
          if (p < end) end = p, len = m.size();
        }
        if (end != absl::string_view::npos) {
          Emit(kind_, buf_.substr(0, end));
          buf_.erase(0, end + len);
          state_ = State::kHeader;
          break;
        }
        const size_t held = at_end ? 0 : HeldSuffix(buf_);
        Emit(kind_, buf_.substr(0, buf_.size() - held));
        buf_.erase(0, buf_.size() - held);
        return;
      }
      case State::kDone:
        return;
    }
  }
}

HarmonyOutput ParseHarmony(absl::string_view text, bool calls, ToolCallIdFn ids) {
  HarmonyStream s(calls, std::move(ids));
  std::vector<HarmonyEvent> events = s.Feed(text);
  for (HarmonyEvent& e : s.Finish()) events.push_back(std::move(e));
  HarmonyOutput out;
  for (const HarmonyEvent& e : events) {
    switch (e.type) {
      case HarmonyEvent::Type::kReasoning: out.reasoning += e.text; break;
      case HarmonyEvent::Type::kContent: out.content += e.text; break;
      case HarmonyEvent::Type::kCallStart: out.calls.push_back({e.id, e.name, ""}); break;
      case HarmonyEvent::Type::kArguments: out.calls[e.index].arguments += e.text; break;
    }
  }
  return out;
}

}  // namespace minfer::chat
