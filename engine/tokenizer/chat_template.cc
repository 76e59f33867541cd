#include "engine/tokenizer/chat_template.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/jinja.h"

namespace minfer::tokenizer {
namespace {

// Reads the literal after "<|im_start|>system" + newline up to "<|im_end|>"
// inside a Jinja string literal. Returns false when what follows is not a
// plain literal (an expression such as `' + messages[0]['content'] + '`).
bool ReadLiteralPrompt(absl::string_view rest, std::string* prompt) {
  const size_t end = rest.find(kImEnd);
  if (end == absl::string_view::npos || end == 0) return false;
  std::string out;
  for (size_t i = 0; i < end; ++i) {
    const char c = rest[i];
    if (c == '\'' || c == '"' || c == '{' || c == '}') return false;  // literal ends
    if (c == '\\' && i + 1 < end) {
      const char e = rest[++i];
      switch (e) {
        case 'n':
          out.push_back('\n');
          break;
        case 't':
          out.push_back('\t');
          break;
        case '\\':
        case '\'':
        case '"':
          out.push_back(e);
          break;
        default:
          out.push_back('\\');
          out.push_back(e);
          break;
      }
      continue;
    }
    out.push_back(c);
  }
  *prompt = std::move(out);
  return true;
}

// Finds a hard-coded default system prompt in a ChatML template's source.
std::string FindDefaultSystemPrompt(absl::string_view source) {
  const std::string marker = absl::StrCat(kImStart, "system");
  for (size_t pos = source.find(marker); pos != absl::string_view::npos;
       pos = source.find(marker, pos + 1)) {
    absl::string_view rest = source.substr(pos + marker.size());
    // The newline after the role is "\n" inside a Jinja string literal, or
    // (rarely) a real newline.
    if (absl::StartsWith(rest, "\\n")) {
      rest.remove_prefix(2);
    } else if (absl::StartsWith(rest, "\n")) {
      rest.remove_prefix(1);
    } else {
      continue;
    }
    std::string prompt;
    if (ReadLiteralPrompt(rest, &prompt)) return prompt;
  }
  return "";
}

// The built-in ChatML of pre-tokenizer "qwen2" models without a template.
constexpr absl::string_view kChatMlTemplate =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

constexpr absl::string_view kReserved[] = {"messages", "add_generation_prompt", "bos_token",
                                           "eos_token"};

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::Create(absl::string_view template_text,
                                                  absl::string_view pre,
                                                  absl::string_view model_name,
                                                  const ChatSpecialTokens& tokens) {
  ChatTemplate t;
  t.model_name_ = std::string(model_name);
  t.tokens_ = tokens;
  if (template_text.empty()) {
    if (pre != "qwen2") {
      return absl::FailedPreconditionError(absl::StrCat(
          "model '", model_name, "' has no tokenizer.chat_template and its pre-tokenizer '", pre,
          "' has no known default chat format"));
    }
    // Parsed once per process: the text is a constant.
    static const absl::StatusOr<jinja::Template>* const chatml =
        new absl::StatusOr<jinja::Template>(jinja::Template::Parse(kChatMlTemplate));
    if (!chatml->ok()) return chatml->status();  // a bug in kChatMlTemplate
    t.template_ = **chatml;
    t.chatml_ = true;
    return t;
  }
  absl::StatusOr<jinja::Template> parsed = jinja::Template::Parse(template_text);
  if (!parsed.ok()) {
    // The file is at fault, not a request: INVALID_ARGUMENT, which refuses
    // the model at load (Tokenizer::Create).
    return absl::InvalidArgumentError(
        absl::StrCat("model '", model_name,
                     "': its chat template (tokenizer.chat_template) does not parse: ",
                     parsed.status().message()));
  }
  t.template_ = std::move(*parsed);
  t.from_model_ = true;
  t.source_ = std::string(template_text);
  t.chatml_ =
      absl::StrContains(template_text, kImStart) && absl::StrContains(template_text, kImEnd);
  t.default_system_prompt_ = FindDefaultSystemPrompt(template_text);
  return t;
}

namespace {

// A JSON text from a client as a template value, every string marked.
absl::StatusOr<jinja::Value> MarkedJson(absl::string_view json, absl::string_view what) {
  absl::StatusOr<jinja::Value> v = jinja::Value::FromJson(json, /*marked=*/true);
  if (!v.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is not JSON: ", v.status().message()));
  }
  return v;
}

// One message as transformers hands an OpenAI-style message to a template.
absl::StatusOr<jinja::Value> MessageValue(const ChatMessage& m, size_t i) {
  using jinja::Value;
  std::vector<std::pair<std::string, Value>> items = {{"role", Value::String(m.role)},
                                                      {"content", Value::MarkedString(m.content)}};
  if (!m.reasoning_content.empty()) {
    items.emplace_back("reasoning_content", Value::MarkedString(m.reasoning_content));
  }
  if (!m.tool_calls.empty()) {
    std::vector<Value> calls;
    calls.reserve(m.tool_calls.size());
    for (size_t j = 0; j < m.tool_calls.size(); ++j) {
      const ChatToolCall& c = m.tool_calls[j];
      // The arguments travel as JSON text (OpenAI's API); templates take
      // the object (vLLM parses it the same way).
      Value args = Value::Dict({});
      if (!c.arguments.empty()) {
        absl::StatusOr<Value> parsed = MarkedJson(
            c.arguments, absl::StrCat("chat message ", i, ": tool call ", j, "'s arguments"));
        if (!parsed.ok()) return parsed.status();
        args = *std::move(parsed);
      }
      std::vector<std::pair<std::string, Value>> call;
      if (!c.id.empty()) call.emplace_back("id", Value::MarkedString(c.id));
      call.emplace_back("type", Value::String("function"));
      call.emplace_back("function", Value::Dict({{"name", Value::MarkedString(c.name)},
                                                 {"arguments", std::move(args)}}));
      calls.push_back(Value::Dict(std::move(call)));
    }
    items.emplace_back("tool_calls", Value::List(std::move(calls)));
  }
  if (!m.tool_call_id.empty()) {
    items.emplace_back("tool_call_id", Value::MarkedString(m.tool_call_id));
  }
  if (!m.name.empty()) items.emplace_back("name", Value::MarkedString(m.name));
  return Value::Dict(std::move(items));
}

absl::StatusOr<jinja::Value> ToolsValue(absl::Span<const ChatTool> tools) {
  using jinja::Value;
  std::vector<Value> list;
  list.reserve(tools.size());
  for (size_t i = 0; i < tools.size(); ++i) {
    const ChatTool& t = tools[i];
    std::vector<std::pair<std::string, Value>> fn = {{"name", Value::MarkedString(t.name)}};
    if (!t.description.empty()) {
      fn.emplace_back("description", Value::MarkedString(t.description));
    }
    if (!t.parameters.empty()) {
      absl::StatusOr<Value> params =
          MarkedJson(t.parameters, absl::StrCat("tool ", i, " (", t.name, ")'s parameters"));
      if (!params.ok()) return params.status();
      fn.emplace_back("parameters", *std::move(params));
    }
    list.push_back(Value::Dict(
        {{"type", Value::String("function")}, {"function", Value::Dict(std::move(fn))}}));
  }
  return Value::List(std::move(list));
}

}  // namespace

absl::StatusOr<std::string> ChatTemplate::Render(absl::Span<const ChatMessage> messages,
                                                 bool add_generation_prompt,
                                                 std::vector<ContentRange>* content,
                                                 const ChatTemplateOptions& options) const {
  std::vector<jinja::Value> list;
  list.reserve(messages.size());
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", model_name_, "': chat message ", i, " has role '", role,
                       "' (expected system, user, assistant or tool)"));
    }
    absl::StatusOr<jinja::Value> m = MessageValue(messages[i], i);
    if (!m.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("model '", model_name_, "': ",
                                                     m.status().message()));
    }
    list.push_back(*std::move(m));
  }
  if (!options.tools.empty() && options.variables.count("tools") != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", model_name_, "': tools are given twice (as tools and as a template option)"));
  }
  for (absl::string_view name : kReserved) {
    if (options.variables.find(name) != options.variables.end()) {
      return absl::InvalidArgumentError(absl::StrCat("model '", model_name_,
                                                     "': the chat template option '", name,
                                                     "' is reserved (minfer sets it)"));
    }
  }
  jinja::Variables vars = options.variables;
  if (!options.tools.empty()) {
    absl::StatusOr<jinja::Value> tools = ToolsValue(options.tools);
    if (!tools.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", model_name_, "': ", tools.status().message()));
    }
    vars["tools"] = *std::move(tools);
  }
  vars["messages"] = jinja::Value::List(std::move(list));
  vars["add_generation_prompt"] = jinja::Value::Bool(add_generation_prompt);
  vars["bos_token"] = jinja::Value::String(tokens_.bos_token);
  vars["eos_token"] = jinja::Value::String(tokens_.eos_token);
  jinja::RenderOptions render;
  render.now = options.now;
  render.time_zone = options.time_zone;
  absl::StatusOr<jinja::RenderResult> r = template_.Render(vars, render);
  if (!r.ok()) {
    return absl::Status(
        r.status().code(),
        absl::StrCat("model '", model_name_, "': chat template: ", r.status().message()));
  }
  if (content != nullptr) {
    for (const auto& [b, e] : r->marked) content->push_back({b, e});
  }
  return std::move(r->text);
}

absl::string_view Qwen25ChatTemplate() {
  // A compact ChatML template of our own with the shape of Qwen2.5's: an
  // explicit system message, or Qwen2.5's default system prompt, then one
  // framed turn per message. (Written for minfer; not Qwen's template text.)
  static constexpr char kTemplate[] =
      "{%- if messages and messages[0]['role'] == 'system' %}"
      "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
      "{%- else %}"
      "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
      "assistant.<|im_end|>\\n' }}"
      "{%- endif %}"
      "{%- for message in messages %}"
      "{%- if not (loop.first and message['role'] == 'system') %}"
      "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
      "{%- endif %}"
      "{%- endfor %}"
      "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
  return kTemplate;
}

}  // namespace minfer::tokenizer
