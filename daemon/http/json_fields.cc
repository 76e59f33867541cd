#include "daemon/http/json_fields.h"

#include <cmath>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace minfer::daemon::http_api {

namespace {
constexpr const char* kParamPayload = "type.minfer.dev/openai.param";
}  // namespace

absl::Status FieldError(const std::string& param, const std::string& message) {
  absl::Status s = absl::InvalidArgumentError(message);
  s.SetPayload(kParamPayload, absl::Cord(param));
  return s;
}

std::string Param(const absl::Status& status) {
  auto p = status.GetPayload(kParamPayload);
  return p.has_value() ? std::string(*p) : std::string();
}

absl::Status ToApiField(const absl::Status& status, const ApiFieldNamer& namer) {
  if (status.ok() || !Param(status).empty()) return status;
  const std::string path = FieldPath(status);
  if (path.empty()) return status;
  const std::string name = namer(ParseFieldPath(path));
  if (name.empty()) return status;
  absl::Status out = RenameField(status, name);
  out.SetPayload(kParamPayload, absl::Cord(name));
  return out;
}

const char* JsonTypeName(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null:
      return "null";
    case ojson::value_t::boolean:
      return "a boolean";
    case ojson::value_t::string:
      return "a string";
    case ojson::value_t::array:
      return "an array";
    case ojson::value_t::object:
      return "an object";
    case ojson::value_t::number_integer:
    case ojson::value_t::number_unsigned:
      return "an integer";
    case ojson::value_t::number_float:
      return "a number";
    default:
      return "another type";
  }
}

absl::Status WrongType(const std::string& field, const char* want, const ojson& got) {
  return FieldError(field,
                            absl::StrCat(field, " must be ", want, ", got ", JsonTypeName(got)));
}

const ojson& Member(const ojson& object, const char* key) {
  static const ojson kNull;
  if (!object.is_object()) return kNull;
  auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

absl::StatusOr<std::optional<double>> OptNumber(const ojson& object, const char* key,
                                                const std::string& field) {
  const ojson& v = Member(object, key);
  if (v.is_null()) return std::optional<double>();
  if (!v.is_number()) return WrongType(field, "a number", v);
  const double d = v.get<double>();
  if (!std::isfinite(d)) return FieldError(field, absl::StrCat(field, " must be finite"));
  return std::optional<double>(d);
}

absl::StatusOr<std::optional<int64_t>> OptInt(const ojson& object, const char* key,
                                              const std::string& field) {
  const ojson& v = Member(object, key);
  if (v.is_null()) return std::optional<int64_t>();
  if (v.is_number_integer()) return std::optional<int64_t>(v.get<int64_t>());
  if (v.is_number_float()) {
    // 5.0 is an integer to a JSON writer that has only doubles.
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) {
      return std::optional<int64_t>(static_cast<int64_t>(d));
    }
  }
  return WrongType(field, "an integer", v);
}

absl::StatusOr<std::optional<bool>> OptBool(const ojson& object, const char* key,
                                            const std::string& field) {
  const ojson& v = Member(object, key);
  if (v.is_null()) return std::optional<bool>();
  if (!v.is_boolean()) return WrongType(field, "a boolean", v);
  return std::optional<bool>(v.get<bool>());
}

absl::StatusOr<std::optional<std::string>> OptString(const ojson& object, const char* key,
                                                     const std::string& field) {
  const ojson& v = Member(object, key);
  if (v.is_null()) return std::optional<std::string>();
  if (!v.is_string()) return WrongType(field, "a string", v);
  return std::optional<std::string>(v.get<std::string>());
}

}  // namespace minfer::daemon::http_api
