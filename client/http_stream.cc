#include "client/http_stream.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace minfer::client {
namespace {

using json = nlohmann::json;

absl::Status FromHttpStatus(int status, const std::string& message) {
  switch (status) {
    case 400:
      return absl::InvalidArgumentError(message);
    case 401:
      return absl::UnauthenticatedError(message);
    case 403:
      return absl::PermissionDeniedError(message);
    case 404:
      return absl::NotFoundError(message);
    case 429:
      return absl::ResourceExhaustedError(message);
    case 503:
      return absl::UnavailableError(message);
    case 504:
      return absl::DeadlineExceededError(message);
    default:
      return absl::InternalError(absl::StrCat("HTTP ", status, ": ", message));
  }
}

std::string ErrorMessage(const json& body, const std::string& raw) {
  if (body.is_object() && body.contains("error") && body["error"].is_object() &&
      body["error"].contains("message") && body["error"]["message"].is_string()) {
    return body["error"]["message"].get<std::string>();
  }
  return raw.substr(0, 200);
}

}  // namespace

absl::StatusOr<HttpStreamResult> HttpStream(const HttpTarget& target,
                                            const HttpStreamRequest& request,
                                            const std::function<void(size_t)>& on_tokens) {
  httplib::Client cli(target.url);
  if (!cli.is_valid()) {
    return absl::InvalidArgumentError(absl::StrCat("not an http(s) URL: '", target.url, "'"));
  }
  cli.set_read_timeout(600, 0);
  cli.set_write_timeout(60, 0);
  if (!target.ca_cert_file.empty()) cli.set_ca_cert_path(target.ca_cert_file.c_str());

  json body = {{"model", request.model},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}},
               {"temperature", 0},
               {"max_tokens", request.max_tokens},
               {"ignore_eos", true},
               {"return_token_ids", true}};
  if (request.chat) {
    body["messages"] = json::array({{{"role", "user"}, {"content", request.prompt}}});
  } else {
    body["prompt"] = request.prompt;
  }

  HttpStreamResult out;
  absl::Status event_error;
  std::string pending, raw;
  int status = 0;
  httplib::Request req;
  req.method = "POST";
  req.path = request.chat ? "/v1/chat/completions" : "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  if (!target.api_key.empty()) {
    req.set_header("Authorization", absl::StrCat("Bearer ", target.api_key));
  }
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    if (status != 200) {
      raw.append(data, len);
      return raw.size() < (1u << 20);
    }
    pending.append(data, len);
    size_t end;
    while ((end = pending.find("\n\n")) != std::string::npos) {
      const std::string event = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (!absl::StartsWith(event, "data: ")) continue;  // comments, other fields
      const std::string data_str = event.substr(6);
      if (data_str == "[DONE]") continue;
      const json e = json::parse(data_str, nullptr, /*allow_exceptions=*/false);
      if (e.is_discarded() || !e.is_object()) {
        event_error = absl::DataLossError(absl::StrCat("not a JSON event: ", data_str));
        return false;
      }
      if (e.contains("error")) {
        event_error = absl::UnavailableError(ErrorMessage(e, data_str));
        return false;
      }
      if (e.contains("usage") && e["usage"].is_object() &&
          e["usage"].contains("prompt_tokens") && e["usage"]["prompt_tokens"].is_number_integer()) {
        out.prompt_tokens = e["usage"]["prompt_tokens"].get<int32_t>();
      }
      if (!e.contains("choices") || !e["choices"].is_array() || e["choices"].empty()) continue;
      const json& c = e["choices"][0];
      if (c.contains("token_ids") && c["token_ids"].is_array() && !c["token_ids"].empty()) {
        for (const json& id : c["token_ids"]) {
          if (id.is_number_integer()) out.token_ids.push_back(id.get<int32_t>());
        }
        if (on_tokens) on_tokens(c["token_ids"].size());
      }
      if (request.chat) {
        if (c.contains("delta") && c["delta"].contains("content") &&
            c["delta"]["content"].is_string()) {
          out.text += c["delta"]["content"].get<std::string>();
        }
      } else if (c.contains("text") && c["text"].is_string()) {
        out.text += c["text"].get<std::string>();
      }
      if (c.contains("finish_reason") && c["finish_reason"].is_string()) {
        out.finish_reason = c["finish_reason"].get<std::string>();
      }
    }
    return true;
  };
  httplib::Result r = cli.send(req);
  if (!event_error.ok()) return event_error;
  if (!r) {
    return absl::UnavailableError(absl::StrCat("HTTP request to ", target.url, " failed: ",
                                               httplib::to_string(r.error())));
  }
  if (status != 200) {
    const json e = json::parse(raw, nullptr, /*allow_exceptions=*/false);
    return FromHttpStatus(status, ErrorMessage(e, raw));
  }
  if (out.finish_reason.empty()) {
    return absl::DataLossError("the stream ended without a finish_reason");
  }
  return out;
}

}  // namespace minfer::client
