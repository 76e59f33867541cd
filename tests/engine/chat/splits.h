// Ways to cut a text into stream deltas, for the parsers' guarantee that
// their collected events do not depend on the cut.

#ifndef MINFER_TESTS_ENGINE_CHAT_SPLITS_H_
#define MINFER_TESTS_ENGINE_CHAT_SPLITS_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace minfer::chat {

using Split = std::vector<std::string>;

// Every cut into one, two and three pieces (pieces may be empty at the ends
// of the text when `with_empty`), every one-byte-per-delta cut, and `random`
// random multi-cuts (seeded: the same every run). Three-piece cuts are
// enumerated only for texts up to `max_exhaustive3` bytes.
inline std::vector<Split> Splits(absl::string_view text, int random = 200,
                                 size_t max_exhaustive3 = 200) {
  const size_t n = text.size();
  std::vector<Split> out;
  out.push_back({std::string(text)});
  for (size_t i = 0; i <= n; ++i) {
    out.push_back({std::string(text.substr(0, i)), std::string(text.substr(i))});
    if (n > max_exhaustive3) continue;
    for (size_t j = i; j <= n; ++j) {
      out.push_back({std::string(text.substr(0, i)), std::string(text.substr(i, j - i)),
                     std::string(text.substr(j))});
    }
  }
  Split bytes;
  for (char c : text) bytes.push_back(std::string(1, c));
  out.push_back(bytes);
  std::mt19937 rng(static_cast<uint32_t>(n) * 2654435761u + 7);
  for (int r = 0; r < random; ++r) {
    Split s;
    size_t pos = 0;
    while (pos < n) {
      const size_t len = std::uniform_int_distribution<size_t>(0, 6)(rng);
      s.push_back(std::string(text.substr(pos, len)));
      pos += len;
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace minfer::chat

#endif  // MINFER_TESTS_ENGINE_CHAT_SPLITS_H_
