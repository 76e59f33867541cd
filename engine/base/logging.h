// Named spdlog loggers, one per subsystem ("gguf", "cuda", "daemon", ...).
//
// All loggers share one stderr sink and one level. The level starts from the
// MINFER_LOG_LEVEL environment variable (trace|debug|info|warn|error|off,
// default info) and can be changed at run time with SetLogLevel.
// Thread-safe.
#ifndef MINFER_ENGINE_BASE_LOGGING_H_
#define MINFER_ENGINE_BASE_LOGGING_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "spdlog/spdlog.h"

namespace minfer {

// Returns the logger named `subsystem`, creating it on first use.
std::shared_ptr<spdlog::logger> Logger(absl::string_view subsystem);

// Sets the level of every minfer logger (existing and future).
absl::Status SetLogLevel(absl::string_view level);

}  // namespace minfer

// Debian's Abseil has its own string_view type (not std::string_view), which
// fmt cannot format by itself; these let log calls take absl types directly.
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  template <typename FormatContext>
  auto format(absl::string_view s, FormatContext& ctx) const {
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(s.data(), s.size()), ctx);
  }
};

template <>
struct fmt::formatter<absl::Status> : fmt::formatter<fmt::string_view> {
  template <typename FormatContext>
  auto format(const absl::Status& s, FormatContext& ctx) const {
    std::string text = s.ToString();
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(text), ctx);
  }
};

#endif  // MINFER_ENGINE_BASE_LOGGING_H_
