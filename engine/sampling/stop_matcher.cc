#include "engine/sampling/stop_matcher.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace minfer {
namespace {

// Number of bytes at the end of `text` that form an incomplete (but so far
// well-formed) UTF-8 sequence: a lead byte announcing more continuation
// bytes than follow it. Malformed bytes are not held: waiting would not make
// them whole.
size_t IncompleteUtf8Tail(std::string_view text) {
  const size_t n = text.size();
  for (size_t back = 1; back <= std::min<size_t>(3, n); ++back) {
    const unsigned char c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking
    size_t need = 0;
    if ((c & 0xE0) == 0xC0) {
      need = 2;
    } else if ((c & 0xF0) == 0xE0) {
      need = 3;
    } else if ((c & 0xF8) == 0xF0) {
      need = 4;
    }
    return need > back ? back : 0;
  }
  return 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<StopMatcher>> StopMatcher::Create(
    std::vector<std::string> stops) {
  for (size_t i = 0; i < stops.size(); ++i) {
    if (stops[i].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("StopMatcher: stop string ", i, " is empty"));
    }
  }
  return std::unique_ptr<StopMatcher>(new StopMatcher(std::move(stops)));
}

StopMatcher::StopMatcher(std::vector<std::string> stops)
    : stops_(std::move(stops)) {
  for (const std::string& s : stops_) {
    max_stop_len_ = std::max(max_stop_len_, s.size());
  }
}

size_t StopMatcher::HoldLength(std::string_view text) const {
  size_t hold = 0;
  // Longest suffix that is a proper prefix of a stop string (a complete one
  // would have matched already).
  const size_t longest =
      max_stop_len_ == 0 ? 0 : std::min(text.size(), max_stop_len_ - 1);
  for (size_t len = longest; len > 0 && hold == 0; --len) {
    const std::string_view suffix = text.substr(text.size() - len);
    for (const std::string& s : stops_) {
      if (s.size() > len && std::string_view(s).substr(0, len) == suffix) {
        hold = len;
        break;
      }
    }
  }
  return std::max(hold, IncompleteUtf8Tail(text));
}

StopFeedResult StopMatcher::Feed(std::string_view text) {
  StopFeedResult result;
  if (stopped()) {
    result.stopped = true;
    return result;
  }
  held_.append(text);
  const std::string_view all = held_;
  // held_ had no complete stop before this piece, so a match must end in
  // the new bytes: start searching each stop where that is possible.
  const size_t old_size = all.size() - text.size();
  size_t best_end = std::string_view::npos;
  size_t best_pos = 0;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const std::string& s = stops_[i];
    const size_t from = old_size >= s.size() ? old_size - s.size() + 1 : 0;
    const size_t pos = all.find(s, from);
    if (pos == std::string_view::npos) continue;
    const size_t end = pos + s.size();
    if (best_end == std::string_view::npos || end < best_end ||
        (end == best_end && pos < best_pos)) {
      best_end = end;
      best_pos = pos;
      matched_ = static_cast<int>(i);
    }
  }
  if (stopped()) {
    result.emit.assign(all.substr(0, best_pos));
    result.stopped = true;
    held_.clear();
    return result;
  }
  const size_t hold = HoldLength(all);
  result.emit.assign(all.substr(0, all.size() - hold));
  held_.erase(0, all.size() - hold);
  return result;
}

std::string StopMatcher::Flush() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace minfer
