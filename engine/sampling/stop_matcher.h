// Stop strings over a streamed, detokenized text.
//
// Generation produces text in token-sized pieces; a stop string can span any
// number of them. StopMatcher sits between the detokenizer and the client:
// Feed() each piece, send what it emits. It emits text only once that text
// can no longer be the beginning of a stop string, so the client never sees
// a prefix of a stop string that later completes.
//
// Semantics (on bytes; stop strings and text are UTF-8):
//  - A stop fires when some stop string first occurs completely in the text
//    fed so far. If several complete in the same Feed, the one ending first
//    wins (ties: the one starting first, i.e. the longest). The result is
//    what feeding one byte at a time would give, so it does not depend on
//    how the text is split into pieces.
//  - On a stop, the text before the stop string is emitted; the stop string
//    and everything after it are dropped. Later Feed() calls emit nothing.
//  - Held back: the longest suffix of the text that is a proper prefix of
//    some stop string, and an incomplete UTF-8 sequence at the very end (a
//    token may end inside a character; clients and protobuf string fields
//    need whole characters). Nothing else is held: at every point, emitted +
//    held == the text fed so far (up to a stop).
//  - Flush() at the end of generation returns the held text (possibly an
//    incomplete UTF-8 sequence, if that is how the text really ended).
// Matching is exact and case-sensitive; since UTF-8 is self-synchronizing, a
// byte match of a valid stop string in valid text is a character match, and
// emitted pieces of valid text are valid UTF-8.
//
// Cost per Feed: O((held + piece) * number of stops) with the stops' lengths
// bounding `held`.
//
// Thread safety: none; one matcher per generation stream.
#ifndef MINFER_ENGINE_SAMPLING_STOP_MATCHER_H_
#define MINFER_ENGINE_SAMPLING_STOP_MATCHER_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace minfer {

struct StopFeedResult {
  std::string emit;      // text safe to send now (may be empty)
  bool stopped = false;  // a stop string has matched (now or earlier)
};

class StopMatcher {
 public:
  // INVALID_ARGUMENT if any stop string is empty. No stop strings at all is
  // fine (only incomplete UTF-8 is then held back). Duplicates are allowed.
  static absl::StatusOr<std::unique_ptr<StopMatcher>> Create(
      std::vector<std::string> stops);

  StopMatcher(const StopMatcher&) = delete;
  StopMatcher& operator=(const StopMatcher&) = delete;

  StopFeedResult Feed(std::string_view text);

  // The held-back text; call once generation ends without a stop (after a
  // stop it returns ""). The matcher is then empty; feeding more continues
  // as if the stream went on.
  std::string Flush();

  bool stopped() const { return matched_ >= 0; }
  // Index into the stops given to Create of the stop string that matched,
  // or -1.
  int matched_stop() const { return matched_; }
  // Bytes currently held back.
  size_t held_size() const { return held_.size(); }

 private:
  explicit StopMatcher(std::vector<std::string> stops);

  // Length of the suffix of `text` that must be held back.
  size_t HoldLength(std::string_view text) const;

  const std::vector<std::string> stops_;
  size_t max_stop_len_ = 0;
  std::string held_;
  int matched_ = -1;
};

}  // namespace minfer

#endif  // MINFER_ENGINE_SAMPLING_STOP_MATCHER_H_
