#include "daemon/api/chat_options.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "engine/base/field_error.h"
#include "engine/tokenizer/jinja.h"
#include "nlohmann/json.hpp"

namespace minfer::daemon {
namespace {

using json = nlohmann::json;
using tokenizer::jinja::Value;

Value FromJson(const json& j) {
  switch (j.type()) {
    case json::value_t::null:
      return Value::None();
    case json::value_t::boolean:
      return Value::Bool(j.get<bool>());
    case json::value_t::number_integer:
      return Value::Int(j.get<int64_t>());
    case json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      // Beyond int64: the float Python's json would not make either, but
      // nothing a template can do with it depends on the last digits.
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::Float(static_cast<double>(u));
      return Value::Int(static_cast<int64_t>(u));
    }
    case json::value_t::number_float:
      return Value::Float(j.get<double>());
    case json::value_t::string:
      return Value::MarkedString(j.get<std::string>());
    case json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const json& e : j) items.push_back(FromJson(e));
      return Value::List(std::move(items));
    }
    case json::value_t::object: {
      std::vector<std::pair<std::string, Value>> items;
      items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) items.emplace_back(it.key(), FromJson(*it));
      return Value::Dict(std::move(items));
    }
    default:
      return Value::None();
  }
}

bool IsIdentifier(const std::string& s) {
  if (s.empty() || !(absl::ascii_isalpha(s[0]) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return absl::ascii_isalnum(c) || c == '_'; });
}

}  // namespace

bool IsRefusedTemplateKwarg(absl::string_view key) { return key == "tools" || key == "functions"; }

absl::StatusOr<tokenizer::ChatTemplateOptions> ChatTemplateOptionsOf(const v1::Chat& chat) {
  tokenizer::ChatTemplateOptions options;
  const auto& kwargs = chat.template_kwargs();
  if (kwargs.size() > kMaxTemplateKwargs) {
    return InvalidField("chat.template_kwargs", absl::StrCat(kwargs.size(), " entries (at most ",
                                                             kMaxTemplateKwargs, ")"));
  }
  // Sorted, so errors and the variables do not depend on the map's order.
  std::map<std::string, std::string> sorted(kwargs.begin(), kwargs.end());
  size_t bytes = 0;
  for (const auto& [key, text] : sorted) {
    bytes += key.size() + text.size();
    if (bytes > kMaxTemplateKwargsBytes) {
      return InvalidField("chat.template_kwargs", absl::StrCat("more than ", kMaxTemplateKwargsBytes,
                                                               " bytes of keys and values"));
    }
    if (!IsIdentifier(key)) {
      return InvalidField("chat.template_kwargs",
                          absl::StrCat("key '", key.substr(0, 64),
                                       "' is not a template variable name (letters, digits, _)"));
    }
    if (key == "messages" || key == "add_generation_prompt" || key == "bos_token" ||
        key == "eos_token") {
      return InvalidField("chat.template_kwargs",
                          absl::StrCat("'", key, "' is set by the server, not by template_kwargs"));
    }
    if (IsRefusedTemplateKwarg(key)) {
      return InvalidField(absl::StrCat("chat.template_kwargs.", key),
                          absl::StrCat(key, " are given in chat.tools, not as a template variable"));
    }
    // A value that is not JSON (a bare word) is the string itself.
    json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    options.variables[key] = j.is_discarded() ? Value::MarkedString(text) : FromJson(j);
  }
  return options;
}

}  // namespace minfer::daemon
