// Per-request limits the generation service enforces.
#ifndef MINFER_DAEMON_SERVING_LIMITS_H_
#define MINFER_DAEMON_SERVING_LIMITS_H_

#include <cstdint>

namespace minfer::daemon {

struct GenerationLimits {
  int32_t max_prompt_tokens = 32768;
  int32_t max_tokens = 4096;         // the most a request may ask for
  int32_t default_max_tokens = 256;  // when a request does not say
};

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_SERVING_LIMITS_H_
