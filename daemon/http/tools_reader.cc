#include "daemon/http/tools_reader.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "daemon/api/chat_tools.h"
#include "engine/base/status.h"

namespace minfer::daemon::http_api {

absl::Status ReadTools(const ojson& body, const ToolShape& shape, v1::Chat* chat) {
  const ojson& tools = Member(body, "tools");
  if (tools.is_null()) return absl::OkStatus();
  if (!tools.is_array()) return WrongType("tools", "an array", tools);
  if (tools.size() > kMaxTools) {
    return FieldError("tools",
                      absl::StrCat("tools holds ", tools.size(), " tools; at most ", kMaxTools));
  }
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& t = tools[i];
    const std::string f = absl::StrCat("tools[", i, "]");
    if (!t.is_object()) return WrongType(f, "an object", t);
    if (shape.check_type) RETURN_IF_ERROR(shape.check_type(t, f));
    // Where the function's fields are, and their names' prefix in errors.
    const ojson* fn = &t;
    std::string ff = f;
    if (shape.function != nullptr) {
      ff = absl::StrCat(f, ".", shape.function);
      fn = &Member(t, shape.function);
      if (fn->is_null()) return FieldError(ff, ff + " is required");
      if (!fn->is_object()) return WrongType(ff, "an object", *fn);
    }
    const ojson& name = Member(*fn, "name");
    if (name.is_null()) return FieldError(ff + ".name", ff + ".name is required");
    if (!name.is_string()) return WrongType(ff + ".name", "a string", name);
    v1::Tool* out = chat->add_tools();
    out->set_name(name.get<std::string>());
    ASSIGN_OR_RETURN(std::optional<std::string> description,
                     OptString(*fn, "description", ff + ".description"));
    if (description.has_value()) out->set_description(*description);
    // Required (issue 28 lists a tool without parameters as bad input,
    // though OpenAI reads it as "no arguments"): a call's arguments are
    // generated and checked against this schema, so it is said outright.
    const std::string sf = absl::StrCat(ff, ".", shape.schema);
    const ojson& schema = Member(*fn, shape.schema);
    if (schema.is_null()) {
      return FieldError(sf, shape.explain_schema
                                ? absl::StrCat(sf, " is required: the JSON Schema of the arguments "
                                                   "({\"type\": \"object\", \"properties\": {}} "
                                                   "for none)")
                                : absl::StrCat(sf, " is required"));
    }
    if (!schema.is_object()) return WrongType(sf, "a JSON Schema (an object)", schema);
    out->set_parameters(schema.dump());
    if (shape.strict) {
      ASSIGN_OR_RETURN(std::optional<bool> strict, OptBool(*fn, "strict", ff + ".strict"));
      if (strict.has_value()) out->set_strict(*strict);
    }
  }
  return absl::OkStatus();
}

}  // namespace minfer::daemon::http_api
