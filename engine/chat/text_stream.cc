#include "engine/chat/text_stream.h"

#include <algorithm>

namespace minfer::chat {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

size_t PartialTagSuffix(absl::string_view text, absl::string_view tag) {
  if (tag.empty()) return 0;
  const size_t longest = std::min(text.size(), tag.size() - 1);
  for (size_t n = longest; n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

std::string TrimmedSpan::Push(absl::string_view text) {
  std::string all = held_;
  all.append(text.data(), text.size());
  held_.clear();
  size_t begin = 0;
  if (trim_leading_) {
    while (begin < all.size() && IsSpace(all[begin])) ++begin;
    if (begin == all.size()) return "";  // only whitespace so far: dropped
  }
  size_t end = all.size();
  while (end > begin && IsSpace(all[end - 1])) --end;
  held_ = all.substr(end);
  if (end == begin) return "";
  trim_leading_ = false;
  return all.substr(begin, end - begin);
}

void TrimmedSpan::DropHeld(bool trim_leading) {
  held_.clear();
  trim_leading_ = trim_leading;
}

std::string TrimmedSpan::TakeHeld() {
  std::string out;
  if (!trim_leading_) out.swap(held_);
  held_.clear();
  return out;
}

}  // namespace minfer::chat
