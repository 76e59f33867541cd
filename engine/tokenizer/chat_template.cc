#include "engine/tokenizer/chat_template.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

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
        case 'n': out.push_back('\n'); break;
        case 't': out.push_back('\t'); break;
        case '\\': case '\'': case '"': out.push_back(e); break;
        default: out.push_back('\\'); out.push_back(e); break;
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

void AppendTurn(absl::string_view role, absl::string_view content, std::string* out,
                std::vector<ContentRange>* ranges) {
  absl::StrAppend(out, kImStart, role, "\n");
  const size_t begin = out->size();
  out->append(content.data(), content.size());
  if (ranges != nullptr) ranges->push_back({begin, out->size()});
  absl::StrAppend(out, kImEnd, "\n");
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::Create(absl::string_view template_text,
                                                  absl::string_view pre,
                                                  absl::string_view model_name) {
  ChatTemplate t;
  t.model_name_ = std::string(model_name);
  if (template_text.empty()) {
    if (pre == "qwen2") return t;  // Qwen2-family default: plain ChatML
    return absl::FailedPreconditionError(absl::StrCat(
        "model '", model_name, "' has no tokenizer.chat_template and its pre-tokenizer '", pre,
        "' has no known default chat format"));
  }
  if (!absl::StrContains(template_text, kImStart) || !absl::StrContains(template_text, kImEnd)) {
    constexpr size_t kShown = 80;
    return absl::FailedPreconditionError(absl::StrCat(
        "model '", model_name,
        "': unknown chat template (minfer renders only ChatML, framed by <|im_start|> and "
        "<|im_end|>); the template begins: \"",
        template_text.substr(0, kShown), template_text.size() > kShown ? "...\"" : "\""));
  }
  t.default_system_prompt_ = FindDefaultSystemPrompt(template_text);
  return t;
}

absl::StatusOr<std::string> ChatTemplate::Render(absl::Span<const ChatMessage> messages,
                                                 bool add_generation_prompt,
                                                 std::vector<ContentRange>* content) const {
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant") {
      return absl::InvalidArgumentError(absl::StrCat(
          "model '", model_name_, "': chat message ", i, " has role '", role,
          "' (expected system, user or assistant)"));
    }
  }
  std::string out;
  if (!default_system_prompt_.empty() && (messages.empty() || messages[0].role != "system")) {
    AppendTurn("system", default_system_prompt_, &out, content);
  }
  for (const ChatMessage& m : messages) AppendTurn(m.role, m.content, &out, content);
  if (add_generation_prompt) absl::StrAppend(&out, kImStart, "assistant\n");
  return out;
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
