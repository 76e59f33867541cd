#include "engine/base/logging.h"

#include <cstdlib>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "spdlog/sinks/stdout_color_sinks.h"

namespace minfer {
namespace {

struct LogState {
  std::mutex mu;
  spdlog::sink_ptr sink;
  spdlog::level::level_enum level = spdlog::level::info;
};

bool ParseLevel(absl::string_view text, spdlog::level::level_enum* out) {
  static constexpr struct {
    const char* name;
    spdlog::level::level_enum level;
  } kLevels[] = {{"trace", spdlog::level::trace}, {"debug", spdlog::level::debug},
                 {"info", spdlog::level::info},   {"warn", spdlog::level::warn},
                 {"error", spdlog::level::err},   {"off", spdlog::level::off}};
  for (const auto& l : kLevels) {
    if (text == l.name) {
      *out = l.level;
      return true;
    }
  }
  return false;
}

LogState& State() {
  static LogState* state = [] {
    auto* s = new LogState;
    s->sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    s->sink->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%^%l%$] %v");
    if (const char* env = std::getenv("MINFER_LOG_LEVEL")) {
      ParseLevel(env, &s->level);
    }
    return s;
  }();
  return *state;
}

}  // namespace

std::shared_ptr<spdlog::logger> Logger(absl::string_view subsystem) {
  LogState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  std::string name(subsystem);
  if (auto existing = spdlog::get(name)) return existing;
  auto logger = std::make_shared<spdlog::logger>(name, s.sink);
  logger->set_level(s.level);
  spdlog::register_logger(logger);
  return logger;
}

absl::Status SetLogLevel(absl::string_view level) {
  spdlog::level::level_enum parsed;
  if (!ParseLevel(level, &parsed)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "log level '", level, "' is not one of trace|debug|info|warn|error|off"));
  }
  LogState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  s.level = parsed;
  spdlog::apply_all([parsed](std::shared_ptr<spdlog::logger> l) { l->set_level(parsed); });
  return absl::OkStatus();
}

}  // namespace minfer
