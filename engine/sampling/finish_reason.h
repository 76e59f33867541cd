// Why a generation ended. Shared by the runtime's generation loop (which
// decides) and the daemon (which reports it to clients).
#ifndef MINFER_ENGINE_SAMPLING_FINISH_REASON_H_
#define MINFER_ENGINE_SAMPLING_FINISH_REASON_H_

#include <string_view>

namespace minfer {

enum class FinishReason {
  kLength,     // hit max_tokens or the context limit
  kStop,       // a stop string matched (StopMatcher)
  kEos,        // the model produced an end-of-sequence/end-of-turn token
  kCancelled,  // the client or the server stopped the request
};

// Lower-case wire name: "length", "stop", "eos", "cancelled".
constexpr std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

}  // namespace minfer

#endif  // MINFER_ENGINE_SAMPLING_FINISH_REASON_H_
