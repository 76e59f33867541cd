#include "daemon/http/tokenize_api.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/api/chat_tools.h"
#include "daemon/http/anthropic_api.h"
#include "daemon/http/json_fields.h"
#include "daemon/http/openai_api.h"
#include "engine/base/field_error.h"
#include "engine/base/status.h"

namespace minfer::daemon::tokenize_api {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
using http_api::Member;
using http_api::WrongType;
using openai::FieldError;

// The chat of a body in OpenAI's chat shape (messages, tools, tool_choice,
// parallel_tool_calls, chat_template_kwargs), read by the chat API's parser
// so it means what it means there; the body's other fields are not its.
absl::StatusOr<v1::Chat> ChatOf(const ojson& body) {
  ojson chat = ojson::object();
  // (The server resolved the model already; the parser wants one.)
  const ojson& model = Member(body, "model");
  chat["model"] = model.is_string() ? model : ojson("model");
  for (const char* key :
       {"messages", "tools", "tool_choice", "parallel_tool_calls", "chat_template_kwargs"}) {
    const ojson& v = Member(body, key);
    if (!v.is_null()) chat[key] = v;
  }
  ASSIGN_OR_RETURN(openai::ParsedRequest parsed,
                   openai::ParseRequest(openai::Endpoint::kChatCompletions, chat));
  return parsed.generate.chat();
}

// What the template renders `chat` with, errors named as the chat API names
// them ("tools[0].function.name", not "chat.tools[0].name").
absl::StatusOr<ChatTemplateInput> TemplateInputOf(const v1::Chat& chat) {
  absl::StatusOr<ChatTemplateInput> input = ChatTemplateInputOf(chat);
  if (!input.ok()) {
    return openai::ToApiFieldError(openai::Endpoint::kChatCompletions, input.status());
  }
  return input;
}

absl::Status RefuseUnsupported(const ojson& body) {
  ASSIGN_OR_RETURN(std::optional<bool> cont,
                   http_api::OptBool(body, "continue_final_message", "continue_final_message"));
  if (cont.value_or(false)) {
    return FieldError("continue_final_message",
                      "continue_final_message is not supported: the prompt ends with the "
                      "template's generation prompt or with the last message's end");
  }
  return absl::OkStatus();
}

// The chat template's error, as the generation path words it ("chat: ..."),
// renamed to the chat API's field.
absl::Status RenderError(const absl::Status& status) {
  return openai::ToApiFieldError(openai::Endpoint::kChatCompletions,
                                 InvalidField("chat", status.message()));
}

}  // namespace

absl::StatusOr<std::optional<std::string>> ModelOf(const ojson& body) {
  const ojson& model = Member(body, "model");
  if (model.is_null()) return std::optional<std::string>();
  if (!model.is_string()) return WrongType("model", "a string", model);
  return std::optional<std::string>(model.get<std::string>());
}

absl::StatusOr<json> Tokenize(const ojson& body, const tokenizer::Tokenizer& tok,
                              int64_t max_model_len, int64_t max_ids) {
  const ojson& prompt = Member(body, "prompt");
  const ojson& messages = Member(body, "messages");
  ASSIGN_OR_RETURN(std::optional<bool> add_special,
                   http_api::OptBool(body, "add_special_tokens", "add_special_tokens"));
  ASSIGN_OR_RETURN(std::optional<bool> add_generation_prompt,
                   http_api::OptBool(body, "add_generation_prompt", "add_generation_prompt"));
  ASSIGN_OR_RETURN(std::optional<bool> token_strs,
                   http_api::OptBool(body, "return_token_strs", "return_token_strs"));
  std::vector<int32_t> ids;
  std::string field;
  if (!prompt.is_null() && !messages.is_null()) {
    return FieldError("prompt", "give either prompt or messages, not both");
  }
  if (!prompt.is_null()) {
    field = "prompt";
    if (!prompt.is_string()) return WrongType("prompt", "a string", prompt);
    tokenizer::EncodeOptions eo;
    eo.parse_special = true;  // as Hugging Face tokenizers encode text
    eo.add_bos = add_special.value_or(true);
    ids = tok.Encode(prompt.get_ref<const std::string&>(), eo);
  } else if (!messages.is_null()) {
    field = "messages";
    RETURN_IF_ERROR(RefuseUnsupported(body));
    ASSIGN_OR_RETURN(const v1::Chat chat, ChatOf(body));
    ASSIGN_OR_RETURN(const ChatTemplateInput input, TemplateInputOf(chat));
    absl::StatusOr<std::vector<int32_t>> encoded =
        tok.EncodeChat(input.messages, add_generation_prompt.value_or(true), input.options);
    if (!encoded.ok()) return RenderError(encoded.status());
    ids = *std::move(encoded);
  } else {
    return FieldError("prompt", "give prompt (text) or messages (a chat)");
  }
  if (static_cast<int64_t>(ids.size()) > max_ids) {
    return FieldError(field, absl::StrCat(field, ": ", ids.size(),
                                          " tokens exceed the server's limit of ", max_ids,
                                          " (max_prompt_tokens)"));
  }
  json out = json::object();
  out["count"] = ids.size();
  out["max_model_len"] = max_model_len;
  out["tokens"] = ids;
  if (token_strs.value_or(false)) {
    json strs = json::array();
    for (int32_t id : ids) strs.push_back(std::string(tok.TokenText(id)));
    out["token_strs"] = std::move(strs);
  }
  return out;
}

absl::StatusOr<json> Detokenize(const ojson& body, const tokenizer::Tokenizer& tok,
                                int64_t max_ids) {
  const ojson& tokens = Member(body, "tokens");
  if (tokens.is_null()) return FieldError("tokens", "tokens is required: an array of token ids");
  if (!tokens.is_array()) return WrongType("tokens", "an array", tokens);
  if (static_cast<int64_t>(tokens.size()) > max_ids) {
    return FieldError("tokens", absl::StrCat("tokens: ", tokens.size(),
                                             " ids exceed the server's limit of ", max_ids,
                                             " (max_prompt_tokens + max_tokens)"));
  }
  std::vector<int32_t> ids;
  ids.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const ojson& t = tokens[i];
    const std::string f = absl::StrCat("tokens[", i, "]");
    if (!t.is_number_integer()) return WrongType(f, "an integer", t);
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id >= tok.vocab_size()) {
      return FieldError(f, absl::StrCat(f, ": ", id, " is not a token id of the model (0 to ",
                                        tok.vocab_size() - 1, ")"));
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  absl::StatusOr<std::string> text = tok.Decode(ids);
  if (!text.ok()) return FieldError("tokens", absl::StrCat("tokens: ", text.status().message()));
  return json{{"prompt", *std::move(text)}};
}

absl::StatusOr<json> ApplyTemplate(const ojson& body, const tokenizer::Tokenizer& tok) {
  ASSIGN_OR_RETURN(std::optional<bool> add_generation_prompt,
                   http_api::OptBool(body, "add_generation_prompt", "add_generation_prompt"));
  RETURN_IF_ERROR(RefuseUnsupported(body));
  ASSIGN_OR_RETURN(const v1::Chat chat, ChatOf(body));
  ASSIGN_OR_RETURN(const ChatTemplateInput input, TemplateInputOf(chat));
  absl::StatusOr<std::string> prompt =
      tok.RenderChat(input.messages, add_generation_prompt.value_or(true), input.options);
  if (!prompt.ok()) return RenderError(prompt.status());
  return json{{"prompt", *std::move(prompt)}};
}

http_api::ErrorReply CountTokens(const ojson& body, const tokenizer::Tokenizer& tok) {
  ojson b = body;
  // The body of /v1/messages, less what only a generation needs.
  if (b.is_object()) {
    if (Member(b, "max_tokens").is_null()) b["max_tokens"] = 1;
    b.erase("stream");
  }
  absl::StatusOr<http_api::ApiRequest> parsed = anthropic::ParseMessagesRequest(b);
  if (!parsed.ok()) return anthropic::ErrorFor(parsed.status());
  const v1::Chat& chat = parsed->generate.chat();
  absl::StatusOr<ChatTemplateInput> input = ChatTemplateInputOf(chat);
  if (!input.ok()) return parsed->error(input.status());
  absl::StatusOr<std::vector<int32_t>> ids =
      tok.EncodeChat(input->messages, /*add_generation_prompt=*/true, input->options);
  if (!ids.ok()) {
    return parsed->error(InvalidField("chat", ids.status().message()));
  }
  return {200, json{{"input_tokens", ids->size()}}};
}

}  // namespace minfer::daemon::tokenize_api
