#include "client/tool_file.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace minfer::ctl {
namespace {

using ojson = nlohmann::ordered_json;

absl::Status Bad(const std::string& where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

// One tool at `where` ("[0]"): OpenAI's {"type": "function", "function":
// {...}} or the function object itself.
absl::StatusOr<v1::Tool> ToolOf(const ojson& item, std::string where) {
  if (!item.is_object()) return Bad(where, "a tool is a JSON object");
  const ojson* f = &item;
  if (item.contains("function")) {
    if (item.contains("type") && item["type"] != "function") {
      return Bad(where + ".type", "only \"function\" tools are supported");
    }
    f = &item["function"];
    where += ".function";
    if (!f->is_object()) return Bad(where, "not an object");
  }
  v1::Tool tool;
  auto it = f->find("name");
  if (it == f->end() || !it->is_string()) return Bad(where + ".name", "a string is required");
  tool.set_name(it->get<std::string>());
  if (it = f->find("description"); it != f->end() && !it->is_null()) {
    if (!it->is_string()) return Bad(where + ".description", "not a string");
    tool.set_description(it->get<std::string>());
  }
  if (it = f->find("parameters"); it != f->end() && !it->is_null()) {
    if (!it->is_object()) return Bad(where + ".parameters", "not a JSON Schema object");
    tool.set_parameters(it->dump());  // key order kept (the grammar follows it)
  }
  if (it = f->find("strict"); it != f->end() && !it->is_null()) {
    if (!it->is_boolean()) return Bad(where + ".strict", "not a boolean");
    tool.set_strict(it->get<bool>());
  }
  return tool;
}

}  // namespace

absl::StatusOr<std::vector<v1::Tool>> ParseToolsJson(absl::string_view json) {
  ojson doc = ojson::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return absl::InvalidArgumentError("not valid JSON");
  std::string prefix;
  if (doc.is_object() && doc.contains("tools")) {
    doc = ojson(doc["tools"]);
    prefix = "tools";
  }
  std::vector<v1::Tool> tools;
  if (doc.is_object()) {  // one tool
    absl::StatusOr<v1::Tool> t = ToolOf(doc, prefix.empty() ? "(tool)" : prefix);
    if (!t.ok()) return t.status();
    tools.push_back(*std::move(t));
    return tools;
  }
  if (!doc.is_array()) {
    return absl::InvalidArgumentError(
        "want a JSON array of tools (or {\"tools\": [...]}, or one tool object)");
  }
  for (size_t i = 0; i < doc.size(); ++i) {
    absl::StatusOr<v1::Tool> t = ToolOf(doc[i], absl::StrCat(prefix, "[", i, "]"));
    if (!t.ok()) return t.status();
    tools.push_back(*std::move(t));
  }
  return tools;
}

absl::StatusOr<v1::ToolChoice> ParseToolChoice(absl::string_view value) {
  v1::ToolChoice c;
  if (value == "auto") {
    c.set_mode(v1::ToolChoice::TOOL_CHOICE_AUTO);
  } else if (value == "none") {
    c.set_mode(v1::ToolChoice::TOOL_CHOICE_NONE);
  } else if (value == "required") {
    c.set_mode(v1::ToolChoice::TOOL_CHOICE_REQUIRED);
  } else if (value.empty()) {
    return absl::InvalidArgumentError("auto, none, required or a function's name");
  } else {
    c.set_mode(v1::ToolChoice::TOOL_CHOICE_FUNCTION);
    c.set_function(std::string(value));
  }
  return c;
}

}  // namespace minfer::ctl
