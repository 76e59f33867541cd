#include "client/cli_util.h"

#include <algorithm>
#include <iostream>

#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"

namespace minfer::ctl {

void CommandTable::Add(CLI::App* sub, Action action) {
  actions_.emplace_back(sub, std::move(action));
}

const Action* CommandTable::Chosen() const {
  for (const auto& [sub, action] : actions_) {
    if (sub->parsed()) return &action;
  }
  return nullptr;
}

int Fail(const absl::Status& status) {
  std::cerr << "minferctl: " << absl::StatusCodeToString(status.code()) << ": "
            << status.message() << "\n";
  return 1;
}

void PrintJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = true;
  o.always_print_primitive_fields = true;
  o.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(message, &out, o);
  std::cout << out;
  if (out.empty() || out.back() != '\n') std::cout << "\n";
}

std::string Mib(uint64_t bytes) { return absl::StrFormat("%.1f MiB", bytes / 1048576.0); }

std::string StateName(v1::ModelState state) {
  switch (state) {
    case v1::MODEL_STATE_LOADING: return "loading";
    case v1::MODEL_STATE_READY: return "ready";
    case v1::MODEL_STATE_UNLOADING: return "unloading";
    case v1::MODEL_STATE_FAILED: return "failed";
    case v1::MODEL_STATE_SLEEPING: return "sleeping";
    case v1::MODEL_STATE_WAKING: return "waking";
    case v1::MODEL_STATE_DRAINING: return "draining";
    default: return "unknown";
  }
}

std::string FinishName(v1::FinishReason reason) {
  switch (reason) {
    case v1::FINISH_REASON_LENGTH: return "length";
    case v1::FINISH_REASON_STOP: return "stop";
    case v1::FINISH_REASON_EOS: return "eos";
    case v1::FINISH_REASON_CANCELLED: return "cancelled";
    case v1::FINISH_REASON_TOOL_CALLS: return "tool_calls";
    default: return "unspecified";
  }
}

std::string FormatTable(const Table& rows) {
  std::vector<size_t> width;
  for (const auto& r : rows) {
    width.resize(std::max(width.size(), r.size()), 0);
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  std::string out;
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size(); ++i) {
      out += r[i];
      if (i + 1 < r.size()) out += std::string(width[i] - r[i].size() + 2, ' ');
    }
    out += "\n";
  }
  return out;
}

void PrintTable(const Table& rows) { std::cout << FormatTable(rows); }

}  // namespace minfer::ctl
