#include "daemon/http/api_reply.h"

#include "absl/strings/str_cat.h"

namespace minfer::daemon::http_api {

std::string DumpJson(const nlohmann::json& j) {
  // Token text can end inside a UTF-8 character: replaced, not an exception.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string SseEvent(const char* event, const nlohmann::json& data) {
  std::string out;
  if (event != nullptr && *event != '\0') absl::StrAppend(&out, "event: ", event, "\n");
  absl::StrAppend(&out, "data: ", DumpJson(data), "\n\n");
  return out;
}

}  // namespace minfer::daemon::http_api
