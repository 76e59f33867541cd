#include "daemon/http/openai_api.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/api/chat_options.h"
#include "daemon/api/chat_tools.h"
#include "daemon/api/constraint.h"
#include "daemon/api/generate_request.h"
#include "daemon/http/json_fields.h"
#include "daemon/http/tools_reader.h"
#include "daemon/serving/tenants.h"
#include "engine/base/field_error.h"
#include "engine/base/status.h"
#include "engine/sampling/sampling_params.h"

namespace minfer::daemon::openai {
namespace {

using json = nlohmann::json;
// Requests are read in their own key order: a JSON Schema's `properties`
// order is the order its output is generated in.
using ojson = nlohmann::ordered_json;

// Stop strings a request may give: OpenAI allows 4, the generation path 16.
constexpr size_t kMaxStop = 16;

// The body readers of every HTTP API (json_fields.h); here the field's
// name is also its key in the body.
using http_api::WrongType;
// The field's value, or null when absent: OpenAI treats an explicit null as
// "not given".
const ojson& Get(const ojson& body, const char* field) { return http_api::Member(body, field); }
absl::StatusOr<std::optional<double>> OptNumber(const ojson& body, const char* field) {
  return http_api::OptNumber(body, field, field);
}
absl::StatusOr<std::optional<int64_t>> OptInt(const ojson& body, const char* field) {
  return http_api::OptInt(body, field, field);
}
absl::StatusOr<std::optional<bool>> OptBool(const ojson& body, const char* field) {
  return http_api::OptBool(body, field, field);
}

absl::Status InRange(const char* field, double v, double lo, double hi) {
  if (v < lo || v > hi) {
    return FieldError(field, absl::StrCat(field, " must be in [", lo, ", ", hi, "], got ", v));
  }
  return absl::OkStatus();
}

// The text of a message's content: a string, or an array of text parts.
absl::StatusOr<std::string> ContentText(const ojson& content, const std::string& field) {
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return WrongType(field, "a string or an array of content parts", content);
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const ojson& part = content[j];
    const std::string pf = absl::StrCat(field, "[", j, "]");
    if (!part.is_object()) return WrongType(pf, "an object", part);
    const ojson& type = Get(part, "type");
    if (!type.is_string()) return WrongType(pf + ".type", "a string", type);
    if (type.get<std::string>() != "text") {
      return FieldError(pf + ".type",
                        absl::StrCat(pf, ".type '", type.get<std::string>(),
                                     "' is not supported: this model reads text parts only"));
    }
    const ojson& t = Get(part, "text");
    if (!t.is_string()) return WrongType(pf + ".text", "a string", t);
    text += t.get<std::string>();
  }
  return text;
}

std::string QuoteForError(const std::string& s) {
  return absl::StrCat("'", s.size() > 40 ? absl::StrCat(s.substr(0, 40), "...") : s, "'");
}

// An assistant message's tool_calls: [{"id", "type": "function",
// "function": {"name", "arguments": JSON text (or, as vLLM takes it, an
// object)}}].
absl::Status ParseToolCalls(const ojson& calls, const std::string& field, v1::ChatMessage* out) {
  if (!calls.is_array()) return WrongType(field, "an array", calls);
  for (size_t j = 0; j < calls.size(); ++j) {
    const ojson& c = calls[j];
    const std::string f = absl::StrCat(field, "[", j, "]");
    if (!c.is_object()) return WrongType(f, "an object", c);
    const ojson& type = Get(c, "type");
    if (!type.is_null() && !(type.is_string() && type.get<std::string>() == "function")) {
      return FieldError(f + ".type", absl::StrCat(f, ".type must be \"function\""));
    }
    const ojson& fn = Get(c, "function");
    if (!fn.is_object()) return WrongType(f + ".function", "an object", fn);
    const ojson& name = Get(fn, "name");
    if (!name.is_string() || name.get<std::string>().empty()) {
      return FieldError(f + ".function.name", absl::StrCat(f, ".function.name is required"));
    }
    v1::ToolCall* call = out->add_tool_calls();
    call->set_name(name.get<std::string>());
    const ojson& id = Get(c, "id");
    if (!id.is_null()) {
      if (!id.is_string()) return WrongType(f + ".id", "a string", id);
      call->set_id(id.get<std::string>());
    }
    const ojson& args = Get(fn, "arguments");
    const std::string af = f + ".function.arguments";
    if (args.is_object()) {
      call->set_arguments(args.dump());
    } else if (args.is_string()) {
      const std::string& text = args.get_ref<const std::string&>();
      if (!text.empty()) {
        const ojson parsed = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
        if (parsed.is_discarded()) {
          return FieldError(af, absl::StrCat(af, " is not JSON: ", QuoteForError(text)));
        }
        if (!parsed.is_object()) return FieldError(af, af + " must be a JSON object");
      }
      call->set_arguments(text);
    } else if (!args.is_null()) {
      return WrongType(af, "a string of JSON", args);
    }
  }
  return absl::OkStatus();
}

absl::Status ParseMessages(const ojson& body, v1::Chat* chat) {
  const ojson& messages = Get(body, "messages");
  if (messages.is_null()) return FieldError("messages", "messages is required");
  if (!messages.is_array()) return WrongType("messages", "an array", messages);
  if (messages.empty()) return FieldError("messages", "messages must not be empty");
  for (size_t i = 0; i < messages.size(); ++i) {
    const ojson& m = messages[i];
    const std::string f = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return WrongType(f, "an object", m);
    const ojson& role = Get(m, "role");
    if (!role.is_string()) return WrongType(f + ".role", "a string", role);
    std::string r = role.get<std::string>();
    // OpenAI's newer name for the system role.
    if (r == "developer") r = "system";
    if (r != "system" && r != "user" && r != "assistant" && r != "tool") {
      return FieldError(f + ".role",
                        absl::StrCat(f, ".role '", r,
                                     "' is not supported: use system, developer, user, "
                                     "assistant or tool"));
    }
    v1::ChatMessage* out = chat->add_messages();
    const ojson& calls = Get(m, "tool_calls");
    if (!calls.is_null() && !(calls.is_array() && calls.empty())) {
      if (r != "assistant") {
        return FieldError(f + ".tool_calls",
                          absl::StrCat(f, ".tool_calls: only assistant messages make tool calls"));
      }
      RETURN_IF_ERROR(ParseToolCalls(calls, f + ".tool_calls", out));
    }
    ASSIGN_OR_RETURN(std::string text, ContentText(Get(m, "content"), f + ".content"));
    out->set_role(r);
    out->set_content(std::move(text));
    if (r == "assistant") {
      // vLLM's field for the reasoning of an earlier turn (and its newer
      // name, "reasoning").
      for (const char* key : {"reasoning_content", "reasoning"}) {
        const ojson& v = Get(m, key);
        if (v.is_null()) continue;
        if (!v.is_string()) return WrongType(absl::StrCat(f, ".", key), "a string", v);
        out->set_reasoning_content(v.get<std::string>());
      }
    }
    if (r == "tool") {
      const ojson& id = Get(m, "tool_call_id");
      if (!id.is_null()) {
        if (!id.is_string()) return WrongType(f + ".tool_call_id", "a string", id);
        out->set_tool_call_id(id.get<std::string>());
      }
      const ojson& name = Get(m, "name");
      if (!name.is_null()) {
        if (!name.is_string()) return WrongType(f + ".name", "a string", name);
        out->set_name(name.get<std::string>());
      }
    }
  }
  // vLLM's and SGLang's name for the template's extra variables (Qwen3's
  // enable_thinking); each value travels as its JSON text.
  const ojson& kwargs = Get(body, "chat_template_kwargs");
  if (!kwargs.is_null()) {
    if (!kwargs.is_object()) return WrongType("chat_template_kwargs", "an object", kwargs);
    for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
      // The template would render tools minfer does not know of: they
      // belong in the request's own tools field.
      if (IsRefusedTemplateKwarg(it.key())) {
        const std::string f = "chat_template_kwargs." + it.key();
        return FieldError(f, absl::StrCat(f, " is not supported: give tools in the request's "
                                             "tools field"));
      }
      (*chat->mutable_template_kwargs())[it.key()] = it->dump();
    }
  }
  // vLLM's name for the think block's token budget (v1::Chat.reasoning_budget).
  ASSIGN_OR_RETURN(std::optional<int64_t> budget, OptInt(body, "thinking_token_budget"));
  if (budget.has_value()) {
    if (*budget < 0 || *budget > std::numeric_limits<int32_t>::max()) {
      return FieldError("thinking_token_budget",
                        absl::StrCat("thinking_token_budget must be in [0, 2^31), got ", *budget));
    }
    chat->set_reasoning_budget(static_cast<int32_t>(*budget));
  }
  return absl::OkStatus();
}

// OpenAI's tools ([{"type": "function", "function": {"name",
// "description", "parameters", "strict"}}]), tool_choice ("none", "auto",
// "required", {"type": "function", "function": {"name"}}) and
// parallel_tool_calls, into the chat.
absl::Status ParseTools(const ojson& body, v1::Chat* chat) {
  http_api::ToolShape shape;
  shape.function = "function";
  shape.check_type = [](const ojson& t, const std::string& f) -> absl::Status {
    const ojson& type = Get(t, "type");
    if (!type.is_string()) return WrongType(f + ".type", "a string", type);
    if (type.get<std::string>() != "function") {
      return FieldError(f + ".type", absl::StrCat(f, ".type '", type.get<std::string>(),
                                                  "' is not supported: only function tools"));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(http_api::ReadTools(body, shape, chat));
  const ojson& choice = Get(body, "tool_choice");
  v1::ToolChoice* tc = chat->mutable_tool_choice();
  if (choice.is_string()) {
    const std::string& c = choice.get_ref<const std::string&>();
    if (c == "none") {
      tc->set_mode(v1::ToolChoice::TOOL_CHOICE_NONE);
    } else if (c == "auto") {
      tc->set_mode(v1::ToolChoice::TOOL_CHOICE_AUTO);
    } else if (c == "required") {
      tc->set_mode(v1::ToolChoice::TOOL_CHOICE_REQUIRED);
    } else {
      return FieldError("tool_choice",
                        absl::StrCat("tool_choice '", c,
                                     "' is not supported: none, auto, required or "
                                     "{\"type\": \"function\", \"function\": {\"name\": ...}}"));
    }
  } else if (choice.is_object()) {
    const ojson& type = Get(choice, "type");
    if (!(type.is_string() && type.get<std::string>() == "function")) {
      return FieldError("tool_choice.type", "tool_choice.type must be \"function\"");
    }
    const ojson& fn = Get(choice, "function");
    const ojson& name = fn.is_object() ? Get(fn, "name") : fn;
    if (!name.is_string()) {
      return FieldError("tool_choice.function.name", "tool_choice.function.name is required");
    }
    tc->set_mode(v1::ToolChoice::TOOL_CHOICE_FUNCTION);
    tc->set_function(name.get<std::string>());
  } else if (!choice.is_null()) {
    return WrongType("tool_choice", "a string or an object", choice);
  }
  const bool forced = tc->mode() == v1::ToolChoice::TOOL_CHOICE_REQUIRED ||
                      tc->mode() == v1::ToolChoice::TOOL_CHOICE_FUNCTION;
  if (forced && chat->tools().empty()) {
    return FieldError("tool_choice", "tool_choice names a tool call but no tools are given");
  }
  if (tc->mode() == v1::ToolChoice::TOOL_CHOICE_FUNCTION) {
    bool found = false;
    for (const v1::Tool& t : chat->tools()) found |= t.name() == tc->function();
    if (!found) {
      return FieldError("tool_choice", absl::StrCat("tool_choice names function '",
                                                    tc->function().substr(0, 80),
                                                    "', which is not one of the tools"));
    }
  }
  ASSIGN_OR_RETURN(std::optional<bool> parallel, OptBool(body, "parallel_tool_calls"));
  if (parallel.has_value()) chat->set_parallel_tool_calls(*parallel);
  // The rest of the checks (names, schemas, history) once, for every front
  // door, with the proto's field names (renamed by ToApiFieldError).
  return ToApiFieldError(Endpoint::kChatCompletions, ValidateChatTools(*chat));
}

absl::Status ParsePrompt(const ojson& body, v1::GenerateRequest* g) {
  const ojson& prompt = Get(body, "prompt");
  if (prompt.is_null()) return FieldError("prompt", "prompt is required");
  auto token_ids = [&](const ojson& ids, const std::string& field) -> absl::Status {
    v1::TokenIds* t = g->mutable_tokens();
    for (size_t i = 0; i < ids.size(); ++i) {
      if (!ids[i].is_number_integer()) {
        return WrongType(absl::StrCat(field, "[", i, "]"), "an integer token id", ids[i]);
      }
      const int64_t id = ids[i].get<int64_t>();
      if (id < 0 || id > INT32_MAX) {
        return FieldError(field, absl::StrCat(field, "[", i, "] = ", id, " is not a token id"));
      }
      t->add_ids(static_cast<int32_t>(id));
    }
    return absl::OkStatus();
  };
  if (prompt.is_string()) {
    g->set_text(prompt.get<std::string>());
    return absl::OkStatus();
  }
  if (!prompt.is_array()) {
    return WrongType("prompt", "a string, an array of one string or an array of token ids",
                     prompt);
  }
  if (prompt.empty()) return FieldError("prompt", "prompt must not be empty");
  if (prompt[0].is_number()) return token_ids(prompt, "prompt");
  if (prompt.size() > 1) {
    return FieldError("prompt", absl::StrCat("prompt holds ", prompt.size(),
                                             " prompts; minfer serves one per request"));
  }
  if (prompt[0].is_string()) {
    g->set_text(prompt[0].get<std::string>());
    return absl::OkStatus();
  }
  if (prompt[0].is_array()) return token_ids(prompt[0], "prompt[0]");
  return WrongType("prompt[0]", "a string or an array of token ids", prompt[0]);
}

absl::Status ParseStop(const ojson& body, v1::StoppingCriteria* st) {
  const ojson& stop = Get(body, "stop");
  if (stop.is_null()) return absl::OkStatus();
  if (stop.is_string()) {
    if (!stop.get<std::string>().empty()) st->add_stop(stop.get<std::string>());
    return absl::OkStatus();
  }
  if (!stop.is_array()) return WrongType("stop", "a string or an array of strings", stop);
  if (stop.size() > kMaxStop) {
    return FieldError("stop", absl::StrCat("stop holds ", stop.size(), " strings; at most ",
                                           kMaxStop));
  }
  for (size_t i = 0; i < stop.size(); ++i) {
    if (!stop[i].is_string()) return WrongType(absl::StrCat("stop[", i, "]"), "a string", stop[i]);
    // An empty stop string would end every generation at once; OpenAI
    // ignores it.
    if (!stop[i].get<std::string>().empty()) st->add_stop(stop[i].get<std::string>());
  }
  return absl::OkStatus();
}

// Fields minfer cannot honour: refused rather than silently ignored.
absl::Status RefuseUnsupported(Endpoint endpoint, const ojson& body) {
  ASSIGN_OR_RETURN(std::optional<int64_t> n, OptInt(body, "n"));
  if (n.has_value() && *n != 1) {
    return FieldError("n", absl::StrCat("n = ", *n, " is not supported: minfer returns one choice "
                                        "per request (send several requests)"));
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> best_of, OptInt(body, "best_of"));
  if (best_of.has_value() && *best_of != 1) {
    return FieldError("best_of", "best_of is not supported (only 1)");
  }
  if (endpoint == Endpoint::kCompletions) {
    for (const char* f : {"tools", "tool_choice", "parallel_tool_calls"}) {
      const ojson& v = Get(body, f);
      if (!v.is_null() && !(v.is_array() && v.empty())) {
        return FieldError(f, absl::StrCat(f, " is only for /v1/chat/completions"));
      }
    }
  }
  // OpenAI's deprecated functions / function_call: tools and tool_choice
  // say the same.
  const ojson& functions = Get(body, "functions");
  if (!functions.is_null() && !(functions.is_array() && functions.empty())) {
    return FieldError("functions", "functions is not supported: use tools");
  }
  const ojson& function_call = Get(body, "function_call");
  if (!function_call.is_null() &&
      !(function_call.is_string() && (function_call.get<std::string>() == "none" ||
                                      function_call.get<std::string>() == "auto"))) {
    return FieldError("function_call", "function_call is not supported: use tool_choice");
  }
  // Output other than text, predicted outputs and web search would change
  // what the response is; refused until minfer serves them.
  for (const char* f : {"audio", "prediction", "web_search_options"}) {
    if (!Get(body, f).is_null()) {
      return FieldError(f, absl::StrCat(f, " is not supported"));
    }
  }
  const ojson& modalities = Get(body, "modalities");
  if (!modalities.is_null()) {
    if (!modalities.is_array()) return WrongType("modalities", "an array", modalities);
    for (const ojson& m : modalities) {
      if (!m.is_string() || m.get<std::string>() != "text") {
        return FieldError("modalities",
                          "modalities: only [\"text\"] is supported (no audio output)");
      }
    }
  }
  const ojson& bias = Get(body, "logit_bias");
  if (!bias.is_null() && !(bias.is_object() && bias.empty())) {
    return FieldError("logit_bias", "logit_bias is not supported");
  }
  if (endpoint == Endpoint::kCompletions) {
    ASSIGN_OR_RETURN(std::optional<bool> echo, OptBool(body, "echo"));
    if (echo.value_or(false)) return FieldError("echo", "echo is not supported");
    const ojson& suffix = Get(body, "suffix");
    if (!suffix.is_null() && !(suffix.is_string() && suffix.get<std::string>().empty())) {
      return FieldError("suffix", "suffix is not supported");
    }
  }
  return absl::OkStatus();
}

// One output constraint a request asks for, in the proto's terms, with the
// API field it came from.
struct Constraint {
  std::string param;  // where its value is ("response_format.json_schema.schema")
  v1::GenerateRequest::ConstraintCase kind = v1::GenerateRequest::CONSTRAINT_NOT_SET;
  std::string text;  // json_schema, gbnf, regex
  std::vector<std::string> choices;
};

// A JSON Schema given as JSON (an object, or true / false) or, where the
// API allows it (vLLM's json), as its text.
absl::StatusOr<std::string> SchemaText(const ojson& v, const std::string& field,
                                       bool allow_string) {
  if (v.is_object() || v.is_boolean()) return v.dump();
  if (allow_string && v.is_string()) return v.get<std::string>();
  return WrongType(field, allow_string ? "a JSON Schema (an object or its text)"
                                       : "a JSON Schema (an object)",
                   v);
}

absl::StatusOr<std::string> StringField(const ojson& v, const std::string& field) {
  if (!v.is_string()) return WrongType(field, "a string", v);
  return v.get<std::string>();
}

absl::StatusOr<std::vector<std::string>> Choices(const ojson& v, const std::string& field) {
  if (!v.is_array()) return WrongType(field, "an array of strings", v);
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) return WrongType(absl::StrCat(field, "[", i, "]"), "a string", v[i]);
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

bool ValidSchemaName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

// OpenAI's response_format: text (nothing), json_object (llama-server: with
// a "schema", that schema), json_schema.
absl::Status ParseResponseFormat(const ojson& body, std::vector<Constraint>* out) {
  const ojson& format = Get(body, "response_format");
  if (format.is_null()) return absl::OkStatus();
  if (!format.is_object()) return WrongType("response_format", "an object", format);
  const ojson& type = Get(format, "type");
  if (type.is_null()) {
    return FieldError("response_format.type",
                      "response_format.type is required: text, json_object or json_schema");
  }
  if (!type.is_string()) return WrongType("response_format.type", "a string", type);
  const std::string& t = type.get_ref<const std::string&>();
  if (t == "text") return absl::OkStatus();
  if (t == "json_object") {
    const ojson& schema = Get(format, "schema");
    if (schema.is_null()) {
      out->push_back({"response_format", v1::GenerateRequest::kJsonObject, "", {}});
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(std::string text, SchemaText(schema, "response_format.schema", false));
    out->push_back({"response_format.schema", v1::GenerateRequest::kJsonSchema, std::move(text),
                    {}});
    return absl::OkStatus();
  }
  if (t != "json_schema") {
    return FieldError("response_format.type",
                      absl::StrCat("response_format.type '", t,
                                   "' is not supported: text, json_object or json_schema"));
  }
  const ojson& js = Get(format, "json_schema");
  if (js.is_null()) {
    return FieldError("response_format.json_schema",
                      "response_format.json_schema is required with type json_schema");
  }
  if (!js.is_object()) return WrongType("response_format.json_schema", "an object", js);
  const ojson& name = Get(js, "name");
  if (name.is_null()) {
    return FieldError("response_format.json_schema.name",
                      "response_format.json_schema.name is required");
  }
  if (!name.is_string()) return WrongType("response_format.json_schema.name", "a string", name);
  if (!ValidSchemaName(name.get<std::string>())) {
    return FieldError("response_format.json_schema.name",
                      "response_format.json_schema.name must be 1 to 64 characters of a-z, "
                      "A-Z, 0-9, '_' and '-'");
  }
  const ojson& description = Get(js, "description");
  if (!description.is_null() && !description.is_string()) {
    return WrongType("response_format.json_schema.description", "a string", description);
  }
  // strict: the schema is always enforced exactly (or refused), so both
  // values mean the same here.
  const ojson& strict = Get(js, "strict");
  if (!strict.is_null() && !strict.is_boolean()) {
    return WrongType("response_format.json_schema.strict", "a boolean", strict);
  }
  const ojson& schema = Get(js, "schema");
  // OpenAI's schema is optional: without one, any JSON value.
  std::string text = "{}";
  if (!schema.is_null()) {
    ASSIGN_OR_RETURN(text, SchemaText(schema, "response_format.json_schema.schema", false));
  }
  out->push_back({"response_format.json_schema.schema", v1::GenerateRequest::kJsonSchema,
                  std::move(text), {}});
  return absl::OkStatus();
}

// vLLM's structured_outputs object (and its older guided_* fields): json,
// regex, choice, grammar, json_object, disable_any_whitespace and
// disable_additional_properties. Keys that
// would change the output in ways minfer does not enforce are refused, and
// so are unknown keys (a misspelt constraint must not be dropped).
absl::Status ParseStructuredOutputs(const ojson& body, std::vector<Constraint>* out,
                                    bool* compact_json, std::optional<bool>* closed_objects) {
  const ojson& so = Get(body, "structured_outputs");
  if (!so.is_null()) {
    if (!so.is_object()) return WrongType("structured_outputs", "an object", so);
    for (auto it = so.begin(); it != so.end(); ++it) {
      const std::string& key = it.key();
      const ojson& v = it.value();
      const std::string f = "structured_outputs." + key;
      if (v.is_null()) continue;
      if (key == "json") {
        ASSIGN_OR_RETURN(std::string text, SchemaText(v, f, true));
        out->push_back({f, v1::GenerateRequest::kJsonSchema, std::move(text), {}});
      } else if (key == "regex") {
        ASSIGN_OR_RETURN(std::string text, StringField(v, f));
        out->push_back({f, v1::GenerateRequest::kRegex, std::move(text), {}});
      } else if (key == "grammar") {
        ASSIGN_OR_RETURN(std::string text, StringField(v, f));
        out->push_back({f, v1::GenerateRequest::kGbnf, std::move(text), {}});
      } else if (key == "choice") {
        ASSIGN_OR_RETURN(std::vector<std::string> choices, Choices(v, f));
        out->push_back({f, v1::GenerateRequest::kChoice, "", std::move(choices)});
      } else if (key == "json_object") {
        if (!v.is_boolean()) return WrongType(f, "a boolean", v);
        if (v.get<bool>()) out->push_back({f, v1::GenerateRequest::kJsonObject, "", {}});
      } else if (key == "disable_any_whitespace") {
        if (!v.is_boolean()) return WrongType(f, "a boolean", v);
        *compact_json = v.get<bool>();
      } else if (key == "disable_additional_properties") {
        if (!v.is_boolean()) return WrongType(f, "a boolean", v);
        *closed_objects = v.get<bool>();
      } else if (key == "disable_fallback" || key == "backend") {
        // Which engine serves the constraint: minfer has one.
      } else if (key == "whitespace_pattern") {
        return FieldError(f, absl::StrCat(f, " is not supported (disable_any_whitespace is)"));
      } else {
        return FieldError(f, absl::StrCat(f, " is not supported"));
      }
    }
  }
  // vLLM's earlier names for the same.
  const ojson& gj = Get(body, "guided_json");
  if (!gj.is_null()) {
    ASSIGN_OR_RETURN(std::string text, SchemaText(gj, "guided_json", true));
    out->push_back({"guided_json", v1::GenerateRequest::kJsonSchema, std::move(text), {}});
  }
  const ojson& gr = Get(body, "guided_regex");
  if (!gr.is_null()) {
    ASSIGN_OR_RETURN(std::string text, StringField(gr, "guided_regex"));
    out->push_back({"guided_regex", v1::GenerateRequest::kRegex, std::move(text), {}});
  }
  const ojson& gc = Get(body, "guided_choice");
  if (!gc.is_null()) {
    ASSIGN_OR_RETURN(std::vector<std::string> choices, Choices(gc, "guided_choice"));
    out->push_back({"guided_choice", v1::GenerateRequest::kChoice, "", std::move(choices)});
  }
  const ojson& gg = Get(body, "guided_grammar");
  if (!gg.is_null()) {
    ASSIGN_OR_RETURN(std::string text, StringField(gg, "guided_grammar"));
    out->push_back({"guided_grammar", v1::GenerateRequest::kGbnf, std::move(text), {}});
  }
  ASSIGN_OR_RETURN(std::optional<bool> gjo, OptBool(body, "guided_json_object"));
  if (gjo.value_or(false)) {
    out->push_back({"guided_json_object", v1::GenerateRequest::kJsonObject, "", {}});
  }
  if (!Get(body, "guided_whitespace_pattern").is_null()) {
    return FieldError("guided_whitespace_pattern",
                      "guided_whitespace_pattern is not supported "
                      "(structured_outputs.disable_any_whitespace is)");
  }
  return absl::OkStatus();
}

// Every constraint field of the request, at most one set: into `g`'s oneof.
absl::Status ParseConstraint(const ojson& body, v1::GenerateRequest* g, std::string* param) {
  std::vector<Constraint> found;
  bool compact_json = false;
  std::optional<bool> closed_objects;
  RETURN_IF_ERROR(ParseResponseFormat(body, &found));
  // llama-server's fields: a GBNF grammar, a JSON Schema. An empty grammar
  // is llama-server's "none".
  const ojson& grammar = Get(body, "grammar");
  if (!grammar.is_null()) {
    ASSIGN_OR_RETURN(std::string text, StringField(grammar, "grammar"));
    if (!text.empty()) {
      found.push_back({"grammar", v1::GenerateRequest::kGbnf, std::move(text), {}});
    }
  }
  const ojson& schema = Get(body, "json_schema");
  if (!schema.is_null()) {
    ASSIGN_OR_RETURN(std::string text, SchemaText(schema, "json_schema", false));
    found.push_back({"json_schema", v1::GenerateRequest::kJsonSchema, std::move(text), {}});
  }
  RETURN_IF_ERROR(ParseStructuredOutputs(body, &found, &compact_json, &closed_objects));
  if (found.empty()) return absl::OkStatus();
  if (found.size() > 1) {
    std::vector<std::string> names;
    for (const Constraint& c : found) names.push_back(c.param);
    return FieldError(found[1].param,
                      absl::StrCat("only one output constraint per request, got ",
                                   absl::StrJoin(names, " and ")));
  }
  Constraint& c = found[0];
  switch (c.kind) {
    case v1::GenerateRequest::kJsonSchema:
      g->set_json_schema(std::move(c.text));
      break;
    case v1::GenerateRequest::kJsonObject:
      g->set_json_object(true);
      break;
    case v1::GenerateRequest::kGbnf:
      g->set_gbnf(std::move(c.text));
      break;
    case v1::GenerateRequest::kRegex:
      g->set_regex(std::move(c.text));
      break;
    case v1::GenerateRequest::kChoice:
      for (std::string& s : c.choices) g->mutable_choice()->add_choices(std::move(s));
      break;
    case v1::GenerateRequest::CONSTRAINT_NOT_SET:
      break;
  }
  // Whitespace applies to JSON output only (vLLM ignores it otherwise).
  const bool json = c.kind == v1::GenerateRequest::kJsonSchema ||
                    c.kind == v1::GenerateRequest::kJsonObject;
  if (compact_json && json) g->set_json_max_whitespace(0);
  if (closed_objects.has_value() && c.kind == v1::GenerateRequest::kJsonSchema) {
    g->set_json_closed_objects(*closed_objects);
  }
  *param = c.param;
  return absl::OkStatus();
}

std::string TokenString(const tokenizer::Tokenizer* tok, int32_t id) {
  absl::StatusOr<absl::string_view> bytes = tok->TokenBytes(id);
  return bytes.ok() ? std::string(*bytes) : std::string();
}

json Bytes(const std::string& s) {
  json out = json::array();
  for (unsigned char c : s) out.push_back(static_cast<int>(c));
  return out;
}

}  // namespace

absl::Status FieldError(const std::string& param, const std::string& message) {
  return http_api::FieldError(param, message);
}

std::string Param(const absl::Status& status) { return http_api::Param(status); }

ApiError ApiErrorFor(const absl::Status& status) {
  ApiError e;
  e.message = std::string(status.message());
  e.param = Param(status);
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      e.http_status = 400;
      e.type = "invalid_request_error";
      // The cause as data (ErrorReason: context_length_exceeded), never
      // read from the message.
      e.code = ErrorReason(status);
      break;
    case absl::StatusCode::kUnauthenticated:
      e.http_status = 401;
      e.type = "invalid_request_error";
      e.code = "invalid_api_key";
      break;
    case absl::StatusCode::kPermissionDenied:
      e.http_status = 403;
      e.type = "permission_error";
      break;
    case absl::StatusCode::kNotFound:
      e.http_status = 404;
      e.type = "invalid_request_error";
      e.code = "model_not_found";
      if (e.param.empty()) e.param = "model";
      break;
    case absl::StatusCode::kResourceExhausted:
      e.http_status = 429;
      e.type = "rate_limit_error";
      // A tenant's token quota is marked as such (tenants.h); a full queue
      // and a tenant's stream cap are not.
      e.code = IsQuotaExceeded(status) ? "quota_exceeded" : "queue_full";
      break;
    case absl::StatusCode::kFailedPrecondition:
      e.http_status = 503;
      e.type = "service_unavailable";
      e.code = "model_not_ready";
      break;
    case absl::StatusCode::kUnavailable:
      e.http_status = 503;
      e.type = "service_unavailable";
      e.code = "unavailable";
      break;
    case absl::StatusCode::kDeadlineExceeded:
      e.http_status = 504;
      e.type = "timeout";
      break;
    case absl::StatusCode::kCancelled:
      // nginx's "client closed request": nobody reads it, the logs do.
      e.http_status = 499;
      e.type = "cancelled";
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
      break;
  }
  return e;
}

json ErrorBody(const ApiError& error) {
  json e = {{"message", error.message},
            {"type", error.type},
            {"param", error.param.empty() ? json() : json(error.param)},
            {"code", error.code.empty() ? json() : json(error.code)}};
  return json{{"error", std::move(e)}};
}

absl::StatusOr<ParsedRequest> ParseRequest(Endpoint endpoint, const ojson& body) {
  if (!body.is_object()) return WrongType("body", "a JSON object", body);
  ParsedRequest out;
  out.endpoint = endpoint;
  v1::GenerateRequest& g = out.generate;

  const ojson& model = Get(body, "model");
  if (model.is_null()) return FieldError("model", "model is required: a loaded model or alias");
  if (!model.is_string()) return WrongType("model", "a string", model);
  g.set_model(model.get<std::string>());

  RETURN_IF_ERROR(RefuseUnsupported(endpoint, body));
  if (endpoint == Endpoint::kChatCompletions) {
    RETURN_IF_ERROR(ParseMessages(body, g.mutable_chat()));
    RETURN_IF_ERROR(ParseTools(body, g.mutable_chat()));
  } else {
    RETURN_IF_ERROR(ParsePrompt(body, &g));
  }

  ASSIGN_OR_RETURN(std::optional<bool> stream, OptBool(body, "stream"));
  out.stream = stream.value_or(false);
  const ojson& so = Get(body, "stream_options");
  if (!so.is_null()) {
    if (!so.is_object()) return WrongType("stream_options", "an object", so);
    if (!out.stream) {
      return FieldError("stream_options", "stream_options is only allowed with stream: true");
    }
    ASSIGN_OR_RETURN(std::optional<bool> usage, OptBool(so, "include_usage"));
    out.include_usage = usage.value_or(false);
  }

  v1::SamplingParams* sp = g.mutable_sampling();
  ASSIGN_OR_RETURN(std::optional<double> temperature, OptNumber(body, "temperature"));
  if (temperature.has_value()) {
    RETURN_IF_ERROR(InRange("temperature", *temperature, 0, 2));
    sp->set_temperature(static_cast<float>(*temperature));
  }
  ASSIGN_OR_RETURN(std::optional<double> top_p, OptNumber(body, "top_p"));
  if (top_p.has_value()) {
    if (*top_p <= 0 || *top_p > 1) {
      return FieldError("top_p", absl::StrCat("top_p must be in (0, 1], got ", *top_p));
    }
    sp->set_top_p(static_cast<float>(*top_p));
  }
  for (const char* f : {"presence_penalty", "frequency_penalty"}) {
    ASSIGN_OR_RETURN(std::optional<double> v, OptNumber(body, f));
    if (!v.has_value()) continue;
    RETURN_IF_ERROR(InRange(f, *v, -2, 2));
    if (f[0] == 'p') {
      sp->set_presence_penalty(static_cast<float>(*v));
    } else {
      sp->set_frequency_penalty(static_cast<float>(*v));
    }
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> seed, OptInt(body, "seed"));
  if (seed.has_value()) sp->set_seed(static_cast<uint64_t>(*seed));
  // Extensions (llama-server's and vLLM's names).
  ASSIGN_OR_RETURN(std::optional<int64_t> top_k, OptInt(body, "top_k"));
  if (top_k.has_value()) {
    // vLLM's "off" is -1, llama-server's 0.
    if (*top_k < -1 || *top_k > INT32_MAX) {
      return FieldError("top_k", absl::StrCat("top_k must be >= 0 (or -1: off), got ", *top_k));
    }
    sp->set_top_k(static_cast<int32_t>(std::max<int64_t>(*top_k, 0)));
  }
  ASSIGN_OR_RETURN(std::optional<double> min_p, OptNumber(body, "min_p"));
  if (min_p.has_value()) {
    RETURN_IF_ERROR(InRange("min_p", *min_p, 0, 1));
    sp->set_min_p(static_cast<float>(*min_p));
  }
  for (const char* f : {"repetition_penalty", "repeat_penalty"}) {
    ASSIGN_OR_RETURN(std::optional<double> v, OptNumber(body, f));
    if (!v.has_value()) continue;
    if (*v <= 0) return FieldError(f, absl::StrCat(f, " must be > 0, got ", *v));
    sp->set_repetition_penalty(static_cast<float>(*v));
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> last_n, OptInt(body, "repeat_last_n"));
  if (last_n.has_value()) {
    if (*last_n < -1 || *last_n > INT32_MAX) {
      return FieldError("repeat_last_n",
                        absl::StrCat("repeat_last_n must be >= -1, got ", *last_n));
    }
    sp->set_penalty_last_n(static_cast<int32_t>(*last_n));
  }

  v1::StoppingCriteria* st = g.mutable_stopping();
  // max_completion_tokens is the chat API's newer name; either may come.
  for (const char* f : {"max_tokens", "max_completion_tokens"}) {
    ASSIGN_OR_RETURN(std::optional<int64_t> v, OptInt(body, f));
    if (!v.has_value()) continue;
    if (*v < 1) return FieldError(f, absl::StrCat(f, " must be >= 1, got ", *v));
    st->set_max_tokens(static_cast<int32_t>(std::min<int64_t>(*v, INT32_MAX)));
  }
  RETURN_IF_ERROR(ParseStop(body, st));
  ASSIGN_OR_RETURN(std::optional<bool> ignore_eos, OptBool(body, "ignore_eos"));
  st->set_ignore_eos(ignore_eos.value_or(false));
  // minfer's extension: false opts this request out of the model's
  // speculative decoding (GenerateRequest.speculative).
  ASSIGN_OR_RETURN(std::optional<bool> speculative, OptBool(body, "speculative"));
  if (speculative.has_value()) g.set_speculative(*speculative);
  // vLLM's name: orders the request within its tenant (higher first).
  ASSIGN_OR_RETURN(std::optional<int64_t> priority, OptInt(body, "priority"));
  if (priority.has_value()) {
    RETURN_IF_ERROR(InRange("priority", static_cast<double>(*priority), -1000000, 1000000));
    g.mutable_options()->set_priority(static_cast<int32_t>(*priority));
  }

  // Logprobs: chat has logprobs (bool) + top_logprobs; completions has
  // logprobs (the number of alternatives).
  if (endpoint == Endpoint::kChatCompletions) {
    ASSIGN_OR_RETURN(std::optional<bool> lp, OptBool(body, "logprobs"));
    out.logprobs = lp.value_or(false);
    ASSIGN_OR_RETURN(std::optional<int64_t> top, OptInt(body, "top_logprobs"));
    if (top.has_value()) {
      if (!out.logprobs) {
        return FieldError("top_logprobs", "top_logprobs needs logprobs: true");
      }
      RETURN_IF_ERROR(InRange("top_logprobs", static_cast<double>(*top), 0, kMaxLogprobs));
      out.top_logprobs = static_cast<int32_t>(*top);
    }
  } else {
    ASSIGN_OR_RETURN(std::optional<int64_t> lp, OptInt(body, "logprobs"));
    if (lp.has_value()) {
      RETURN_IF_ERROR(InRange("logprobs", static_cast<double>(*lp), 0, kMaxLogprobs));
      out.logprobs = true;
      out.top_logprobs = static_cast<int32_t>(*lp);
    }
  }
  // The sampler reports a token's logprob only with at least one
  // alternative (greedy skips the normalization otherwise); the writer
  // trims to what was asked.
  if (out.logprobs) g.mutable_options()->set_top_logprobs(std::max(out.top_logprobs, 1));

  // vLLM's prefix-cache salt: requests with different salts never share
  // cached blocks (BuildGenerateRequest checks it again for gRPC).
  const ojson& salt = Get(body, "cache_salt");
  if (!salt.is_null()) {
    if (!salt.is_string()) return WrongType("cache_salt", "a string", salt);
    const std::string& v = salt.get_ref<const std::string&>();
    if (v.empty() || v.size() > kMaxCacheSaltBytes) {
      return FieldError("cache_salt", absl::StrCat("cache_salt must be 1 to ", kMaxCacheSaltBytes,
                                                   " bytes, got ", v.size()));
    }
    g.set_cache_salt(v);
  }

  RETURN_IF_ERROR(ParseConstraint(body, &g, &out.constraint_param));

  ASSIGN_OR_RETURN(std::optional<bool> ids, OptBool(body, "return_token_ids"));
  out.return_token_ids = ids.value_or(false);
  const ojson& user = Get(body, "user");
  if (!user.is_null() && !user.is_string()) return WrongType("user", "a string", user);
  return out;
}

std::string ApiFieldName(Endpoint endpoint, const std::vector<FieldPathStep>& path) {
  if (path.empty() || path[0].is_index()) return "";
  const std::string prompt = endpoint == Endpoint::kChatCompletions ? "messages" : "prompt";
  const std::string& head = path[0].name;
  auto name_at = [&](size_t i) -> std::string {
    return i < path.size() && !path[i].is_index() ? path[i].name : std::string();
  };
  auto rest = [&](size_t from) {
    return std::vector<FieldPathStep>(path.begin() + std::min(from, path.size()), path.end());
  };
  auto join = [](std::vector<FieldPathStep> front, const std::vector<FieldPathStep>& back) {
    front.insert(front.end(), back.begin(), back.end());
    return FormatFieldPath(front);
  };
  if (head == "chat") {
    const std::string part = name_at(1);
    if (part.empty()) return prompt;  // the template's error: the whole chat
    if (part == "tool_choice") return "tool_choice";
    if (part == "template_kwargs") return join({{"chat_template_kwargs"}}, rest(2));
    // A tool's and a history call's name, parameters, description and
    // arguments sit under "function" in OpenAI's shape.
    auto functioned = [](const std::string& s) {
      return s == "name" || s == "parameters" || s == "description" || s == "arguments";
    };
    if (part == "tools" && path.size() >= 4 && path[2].is_index() && functioned(name_at(3))) {
      return join({{"tools"}, path[2], {"function"}}, rest(3));
    }
    if (part == "messages" && path.size() >= 6 && path[2].is_index() &&
        name_at(3) == "tool_calls" && path[4].is_index() && functioned(name_at(5))) {
      return join({{"messages"}, path[2], {"tool_calls"}, path[4], {"function"}}, rest(5));
    }
    return FormatFieldPath(rest(1));
  }
  if (head == "text" || head == "prompt" || head == "input") {
    // prompt[i] (a completion's token ids) keeps its index.
    if (endpoint == Endpoint::kCompletions && path.size() > 1 && path[1].is_index()) {
      return join({{"prompt"}}, rest(1));
    }
    return prompt;
  }
  if (head == "tokens") {
    if (endpoint == Endpoint::kCompletions && path.size() > 2 && path[2].is_index()) {
      return join({{"prompt"}}, rest(2));
    }
    return prompt;
  }
  if (head == "stopping") {
    // OpenAI's empty stop strings are dropped, so a proto index may not be
    // the API's: the field is "stop".
    if (name_at(1) == "stop") return "stop";
    return FormatFieldPath(rest(1));
  }
  if (head == "options" && name_at(1) == "top_logprobs") return "top_logprobs";
  if (head == "sampling") {
    if (name_at(1) == "penalty_last_n") return "repeat_last_n";
    return FormatFieldPath(rest(1));
  }
  if (head == "cache_salt" || head == "model") return head;
  return "";
}

absl::Status ToApiFieldError(Endpoint endpoint, const absl::Status& status) {
  return http_api::ToApiField(status, [endpoint](const std::vector<FieldPathStep>& path) {
    return ApiFieldName(endpoint, path);
  });
}

absl::Status ToApiFieldError(const ParsedRequest& request, const absl::Status& status) {
  if (!IsConstraintError(status) || request.constraint_param.empty()) {
    return ToApiFieldError(request.endpoint, status);
  }
  // "json_schema: unsupported keyword ..." -> the API field the schema came
  // in: "response_format.json_schema.schema: unsupported keyword ...".
  const std::string param = request.constraint_param;
  return http_api::ToApiField(status,
                              [&param](const std::vector<FieldPathStep>&) { return param; });
}

const char* OpenAiFinishReason(FinishReason reason) {
  return reason == FinishReason::kLength ? "length" : "stop";
}

ResponseWriter::ResponseWriter(const ParsedRequest& request, std::string id, int64_t created,
                               std::string model, const tokenizer::Tokenizer* tokenizer,
                               const ChatParsers& parsers)
    : request_(request),
      id_(std::move(id)),
      created_(created),
      model_(std::move(model)),
      tokenizer_(tokenizer) {
  if (request_.endpoint == Endpoint::kChatCompletions) {
    output_ = ChatOutputOptionsFor(request_.generate.chat(), *tokenizer_, parsers);
    stream_ = ChatOutputStream::CreateOrContent(&output_);
  }
}

const char* ResponseWriter::FinishReasonOf(const SequenceResult& result, bool called) const {
  // A reply that made calls and ended by itself (not cut at max_tokens).
  if (called && result.finish_reason != FinishReason::kLength) return "tool_calls";
  return OpenAiFinishReason(result.finish_reason);
}

void ResponseWriter::AddEventChunks(std::vector<ChatOutputEvent> events,
                                    const SequenceChunk& chunk, std::vector<json>* out) {
  // Consecutive events of one kind (reasoning, content, one call) make one
  // delta; the first delta carries the tokens' logprobs and ids.
  std::vector<json> deltas;
  int kind = -1;  // 0 reasoning, 1 content, 2 + index: a call
  for (ChatOutputEvent& e : events) {
    int k = 0;
    switch (e.type) {
      case ChatOutputEvent::Type::kReasoning:
        k = 0;
        break;
      case ChatOutputEvent::Type::kContent:
        k = 1;
        break;
      case ChatOutputEvent::Type::kCallStart:
        k = -2;  // always a new delta
        break;
      case ChatOutputEvent::Type::kArguments:
        k = 2 + e.index;
        break;
    }
    if (e.type == ChatOutputEvent::Type::kCallStart) {
      called_ = true;
      deltas.push_back({{"tool_calls", json::array({{{"index", e.index},
                                                     {"id", e.id},
                                                     {"type", "function"},
                                                     {"function", {{"name", e.name},
                                                                   {"arguments", ""}}}}})}});
      kind = 2 + e.index;
      continue;
    }
    if (k != kind || deltas.empty()) {
      kind = k;
      if (k == 0) {
        deltas.push_back({{"reasoning_content", ""}});
      } else if (k == 1) {
        deltas.push_back({{"content", ""}});
      } else {
        deltas.push_back({{"tool_calls", json::array({{{"index", e.index},
                                                       {"function", {{"arguments", ""}}}}})}});
      }
    }
    json& d = deltas.back();
    if (k == 0) {
      d["reasoning_content"] = d["reasoning_content"].get<std::string>() + e.text;
    } else if (k == 1) {
      d["content"] = d["content"].get<std::string>() + e.text;
    } else {
      json& args = d["tool_calls"][0]["function"]["arguments"];
      args = args.get<std::string>() + e.text;
    }
  }
  if (deltas.empty() && !chunk.tokens.empty()) deltas.push_back({{"content", ""}});
  for (size_t i = 0; i < deltas.size(); ++i) {
    json choice = i == 0 ? Choice(chunk.text, chunk.tokens, chunk.logprobs, nullptr)
                         : Choice("", {}, {}, nullptr);
    choice["delta"] = std::move(deltas[i]);
    json c = Envelope("chat.completion.chunk");
    c["choices"] = json::array({std::move(choice)});
    if (request_.include_usage) c["usage"] = nullptr;
    out->push_back(std::move(c));
  }
}

json ResponseWriter::Envelope(const char* object) const {
  return json{{"id", id_},
              {"object", object},
              {"created", created_},
              {"model", model_},
              {"system_fingerprint", "minfer"}};
}

json ResponseWriter::LogprobsJson(const std::vector<SampledToken>& logprobs,
                                  size_t* text_offset) const {
  const size_t n_top = static_cast<size_t>(request_.top_logprobs);
  if (request_.endpoint == Endpoint::kChatCompletions) {
    json content = json::array();
    for (const SampledToken& s : logprobs) {
      const std::string tok = TokenString(tokenizer_, s.token);
      json top = json::array();
      for (size_t i = 0; i < s.top_logprobs.size() && i < n_top; ++i) {
        const std::string t = TokenString(tokenizer_, s.top_logprobs[i].token);
        top.push_back({{"token", t}, {"logprob", s.top_logprobs[i].logprob}, {"bytes", Bytes(t)}});
      }
      content.push_back(
          {{"token", tok}, {"logprob", s.logprob}, {"bytes", Bytes(tok)}, {"top_logprobs", top}});
    }
    return json{{"content", std::move(content)}, {"refusal", nullptr}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  for (const SampledToken& s : logprobs) {
    const std::string tok = TokenString(tokenizer_, s.token);
    tokens.push_back(tok);
    token_logprobs.push_back(s.logprob);
    json alternatives = json::object();
    for (size_t i = 0; i < s.top_logprobs.size() && i < n_top; ++i) {
      alternatives[TokenString(tokenizer_, s.top_logprobs[i].token)] = s.top_logprobs[i].logprob;
    }
    top.push_back(std::move(alternatives));
    offsets.push_back(*text_offset);
    *text_offset += tok.size();
  }
  return json{{"tokens", std::move(tokens)},
              {"token_logprobs", std::move(token_logprobs)},
              {"top_logprobs", std::move(top)},
              {"text_offset", std::move(offsets)}};
}

json ResponseWriter::Choice(const std::string& text, const std::vector<int32_t>& ids,
                            const std::vector<SampledToken>& logprobs,
                            const char* finish_reason) {
  json choice = {{"index", 0}};
  choice["logprobs"] = request_.logprobs && !logprobs.empty()
                           ? LogprobsJson(logprobs, &text_offset_)
                           : json();
  choice["finish_reason"] = finish_reason != nullptr ? json(finish_reason) : json();
  if (request_.return_token_ids) choice["token_ids"] = ids;
  return choice;
}

json ResponseWriter::Usage(const SequenceResult& result) const {
  json u = {{"prompt_tokens", result.stats.prompt_tokens},
            {"completion_tokens", result.stats.completion_tokens},
            {"total_tokens", result.stats.prompt_tokens + result.stats.completion_tokens},
            // OpenAI's field for prompt tokens served from a prompt cache.
            {"prompt_tokens_details", {{"cached_tokens", result.stats.cached_prompt_tokens}}}};
  // Speculative decoding, in the fields OpenAI reports Predicted Outputs
  // in: drafted tokens the model accepted, and those it refused (they were
  // computed, not returned). Only when something was drafted.
  if (result.stats.spec_drafted > 0) {
    u["completion_tokens_details"] = {
        {"accepted_prediction_tokens", result.stats.spec_accepted},
        {"rejected_prediction_tokens", result.stats.spec_drafted - result.stats.spec_accepted}};
  }
  return u;
}

std::vector<json> ResponseWriter::StreamChunks(const SequenceChunk& chunk) {
  const bool chat = request_.endpoint == Endpoint::kChatCompletions;
  const char* object = chat ? "chat.completion.chunk" : "text_completion";
  std::vector<json> out;
  auto add = [&](json choice) {
    json c = Envelope(object);
    c["choices"] = json::array({std::move(choice)});
    if (request_.include_usage) c["usage"] = nullptr;
    out.push_back(std::move(c));
  };
  if (chat && !sent_role_) {
    sent_role_ = true;
    json choice = Choice("", {}, {}, nullptr);
    choice["delta"] = {{"role", "assistant"}, {"content", ""}};
    add(std::move(choice));
  }
  if (chat) {
    std::vector<ChatOutputEvent> events = stream_->Feed(chunk.text);
    if (chunk.result.has_value() && chunk.result->status.ok()) {
      for (ChatOutputEvent& e : stream_->Finish()) events.push_back(std::move(e));
    }
    AddEventChunks(std::move(events), chunk, &out);
  } else if (!chunk.text.empty() || !chunk.tokens.empty()) {
    json choice = Choice(chunk.text, chunk.tokens, chunk.logprobs, nullptr);
    choice["text"] = chunk.text;
    add(std::move(choice));
  }
  if (chunk.result.has_value() && chunk.result->status.ok()) {
    json choice = Choice("", {}, {}, FinishReasonOf(*chunk.result, called_));
    if (chat) {
      choice["delta"] = json::object();
    } else {
      choice["text"] = "";
    }
    add(std::move(choice));
    if (request_.include_usage) {
      json u = Envelope(object);
      u["choices"] = json::array();
      u["usage"] = Usage(*chunk.result);
      out.push_back(std::move(u));
    }
  }
  return out;
}

void ResponseWriter::Accumulate(const SequenceChunk& chunk) {
  text_ += chunk.text;
  ids_.insert(ids_.end(), chunk.tokens.begin(), chunk.tokens.end());
  logprobs_.insert(logprobs_.end(), chunk.logprobs.begin(), chunk.logprobs.end());
}

json ResponseWriter::Response(const SequenceResult& result) const {
  // Choice() advances the streaming text offset; a copy keeps this const.
  ResponseWriter w = *this;
  w.text_offset_ = 0;
  const bool chat = request_.endpoint == Endpoint::kChatCompletions;
  if (chat) {
    // The whole text read afresh (the same events as streamed: the readers
    // do not depend on how the text was cut).
    std::vector<ChatOutputEvent> events;
    absl::StatusOr<std::unique_ptr<ChatOutputStream>> s = ChatOutputStream::Create(output_);
    if (s.ok()) {
      events = (*s)->Feed(text_);
      for (ChatOutputEvent& e : (*s)->Finish()) events.push_back(std::move(e));
    } else {
      events.push_back({ChatOutputEvent::Type::kContent, text_});
    }
    const ChatOutput reply = CollectChatOutput(events);
    json choice = w.Choice(text_, ids_, logprobs_, FinishReasonOf(result, !reply.calls.empty()));
    json message = {{"role", "assistant"}};
    // OpenAI: content is null in a reply that is only calls.
    message["content"] =
        reply.content.empty() && !reply.calls.empty() ? json() : json(reply.content);
    if (!reply.reasoning.empty()) message["reasoning_content"] = reply.reasoning;
    if (!reply.calls.empty()) {
      json calls = json::array();
      for (const chat::ToolCall& c : reply.calls) {
        calls.push_back({{"id", c.id},
                         {"type", "function"},
                         {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
      }
      message["tool_calls"] = std::move(calls);
    }
    message["refusal"] = nullptr;
    choice["message"] = std::move(message);
    json r = Envelope("chat.completion");
    r["choices"] = json::array({std::move(choice)});
    r["usage"] = Usage(result);
    return r;
  }
  json choice = w.Choice(text_, ids_, logprobs_, OpenAiFinishReason(result.finish_reason));
  choice["text"] = text_;
  json r = Envelope("text_completion");
  r["choices"] = json::array({std::move(choice)});
  r["usage"] = Usage(result);
  return r;
}

json ModelObject(const std::string& name, int64_t created) {
  return json{{"id", name}, {"object", "model"}, {"created", created}, {"owned_by", "minfer"}};
}

json ModelList(const std::vector<std::string>& names, int64_t created) {
  json data = json::array();
  for (const std::string& n : names) data.push_back(ModelObject(n, created));
  return json{{"object", "list"}, {"data", std::move(data)}};
}

}  // namespace minfer::daemon::openai
