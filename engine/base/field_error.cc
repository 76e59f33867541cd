#include "engine/base/field_error.h"

#include <optional>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace minfer {
namespace {

absl::Status MakeFieldError(absl::StatusCode code, absl::string_view path, std::string text) {
  absl::Status s(code, absl::StrCat(path, text));
  s.SetPayload(kFieldPathUrl, absl::Cord(path));
  s.SetPayload(kFieldTextUrl, absl::Cord(text));
  return s;
}

std::optional<std::string> Payload(const absl::Status& status, const char* url) {
  auto p = status.GetPayload(url);
  if (!p.has_value()) return std::nullopt;
  return std::string(*p);
}

}  // namespace

absl::Status InvalidField(absl::string_view field_path, absl::string_view message) {
  return MakeFieldError(absl::StatusCode::kInvalidArgument, field_path,
                        absl::StrCat(": ", message));
}

absl::Status FieldErrorWithCode(absl::StatusCode code, absl::string_view field_path,
                                absl::string_view message) {
  return MakeFieldError(code, field_path, absl::StrCat(": ", message));
}

absl::Status InvalidFieldThat(absl::string_view field_path, absl::string_view predicate) {
  return MakeFieldError(absl::StatusCode::kInvalidArgument, field_path,
                        absl::StrCat(" ", predicate));
}

std::string FieldPath(const absl::Status& status) {
  return Payload(status, kFieldPathUrl).value_or("");
}

std::string FieldText(const absl::Status& status) {
  std::optional<std::string> text = Payload(status, kFieldTextUrl);
  return text.has_value() ? *std::move(text) : std::string(status.message());
}

absl::Status RenameField(const absl::Status& status, absl::string_view new_path) {
  if (!status.GetPayload(kFieldPathUrl).has_value()) return status;
  const std::string text = FieldText(status);
  absl::Status out(status.code(), absl::StrCat(new_path, text));
  status.ForEachPayload(
      [&](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  out.SetPayload(kFieldPathUrl, absl::Cord(new_path));
  return out;
}

absl::Status PrefixField(const absl::Status& status, absl::string_view prefix) {
  if (!status.GetPayload(kFieldPathUrl).has_value()) return status;
  const std::string path = FieldPath(status);
  // An index step joins without a dot: "prompt" + "[3]".
  return RenameField(status, path.empty() || path[0] == '['
                                 ? absl::StrCat(prefix, path)
                                 : absl::StrCat(prefix, ".", path));
}

absl::Status WithReason(absl::Status status, absl::string_view reason) {
  if (!status.ok()) status.SetPayload(kErrorReasonUrl, absl::Cord(reason));
  return status;
}

std::string ErrorReason(const absl::Status& status) {
  return Payload(status, kErrorReasonUrl).value_or("");
}

std::vector<FieldPathStep> ParseFieldPath(absl::string_view path) {
  std::vector<FieldPathStep> out;
  size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '.') {
      ++i;
      continue;
    }
    if (path[i] == '[') {
      const size_t close = path.find(']', i);
      int64_t index = -1;
      if (close != absl::string_view::npos &&
          absl::SimpleAtoi(path.substr(i + 1, close - i - 1), &index) && index >= 0) {
        out.push_back({"", index});
        i = close + 1;
        continue;
      }
      // Not an index: the rest of this step is a name.
    }
    size_t end = path.find_first_of(".[", i + 1);
    if (end == absl::string_view::npos) end = path.size();
    out.push_back({std::string(path.substr(i, end - i)), -1});
    i = end;
  }
  return out;
}

std::string FormatFieldPath(const std::vector<FieldPathStep>& steps) {
  std::string out;
  for (const FieldPathStep& s : steps) {
    if (s.is_index()) {
      absl::StrAppend(&out, "[", s.index, "]");
    } else {
      // A name that is not a valid index ("[x]") joins as it was written.
      const bool dot = !out.empty() && !(!s.name.empty() && s.name[0] == '[');
      absl::StrAppend(&out, dot ? "." : "", s.name);
    }
  }
  return out;
}

}  // namespace minfer
