#include "daemon/http/responses_api.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/api/chat_tools.h"
#include "daemon/api/constraint.h"
#include "daemon/http/json_fields.h"
#include "daemon/http/tools_reader.h"
#include "daemon/http/openai_api.h"
#include "engine/base/field_error.h"
#include "engine/base/status.h"

namespace minfer::daemon::responses {
namespace {

using json = nlohmann::json;
using http_api::Member;
using http_api::ojson;
using http_api::WrongType;
using openai::FieldError;

std::string NewId(const char* prefix) {
  return absl::StrCat(prefix, NewToolCallId().substr(5));
}

// The text of a string or of text parts (input_text, output_text, text).
absl::StatusOr<std::string> TextOf(const ojson& v, const std::string& field) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) return WrongType(field, "a string or an array of content parts", v);
  std::string text;
  for (size_t j = 0; j < v.size(); ++j) {
    const std::string f = absl::StrCat(field, "[", j, "]");
    if (!v[j].is_object()) return WrongType(f, "an object", v[j]);
    const ojson& type = Member(v[j], "type");
    if (!type.is_string()) return WrongType(f + ".type", "a string", type);
    const std::string& t = type.get_ref<const std::string&>();
    if (t != "input_text" && t != "output_text" && t != "text") {
      return FieldError(f + ".type", absl::StrCat(f, ".type '", t,
                                                  "' is not supported: this model reads text "
                                                  "parts only (input_text, output_text)"));
    }
    const ojson& s = Member(v[j], "text");
    if (!s.is_string()) return WrongType(f + ".text", "a string", s);
    text += s.get<std::string>();
  }
  return text;
}

absl::Status ParseInput(const ojson& body, v1::Chat* chat,
                        std::vector<std::string>* origins) {
  auto add = [&](const std::string& origin) {
    origins->push_back(origin);
    return chat->add_messages();
  };
  ASSIGN_OR_RETURN(std::optional<std::string> instructions,
                   http_api::OptString(body, "instructions", "instructions"));
  if (instructions.has_value() && !instructions->empty()) {
    v1::ChatMessage* m = add("instructions");
    m->set_role("system");
    m->set_content(*instructions);
  }
  const ojson& input = Member(body, "input");
  if (input.is_null()) return FieldError("input", "input is required");
  if (input.is_string()) {
    v1::ChatMessage* m = add("input");
    m->set_role("user");
    m->set_content(input.get<std::string>());
    return absl::OkStatus();
  }
  if (!input.is_array()) return WrongType("input", "a string or an array of items", input);
  if (input.empty()) return FieldError("input", "input must not be empty");
  std::map<std::string, std::string> calls;  // call_id -> name
  for (size_t i = 0; i < input.size(); ++i) {
    const ojson& item = input[i];
    const std::string f = absl::StrCat("input[", i, "]");
    if (!item.is_object()) return WrongType(f, "an object", item);
    ASSIGN_OR_RETURN(std::optional<std::string> type, http_api::OptString(item, "type", f + ".type"));
    const std::string t = type.value_or("message");
    if (t == "message") {
      ASSIGN_OR_RETURN(std::optional<std::string> role,
                       http_api::OptString(item, "role", f + ".role"));
      if (!role.has_value()) return FieldError(f + ".role", f + ".role is required");
      std::string r = *role == "developer" ? "system" : *role;
      if (r != "system" && r != "user" && r != "assistant") {
        return FieldError(f + ".role", absl::StrCat(f, ".role '", *role,
                                                    "' is not supported: user, assistant, "
                                                    "system or developer"));
      }
      ASSIGN_OR_RETURN(std::string text, TextOf(Member(item, "content"), f + ".content"));
      v1::ChatMessage* m = add(f);
      m->set_role(r);
      m->set_content(std::move(text));
    } else if (t == "function_call") {
      ASSIGN_OR_RETURN(std::optional<std::string> call_id,
                       http_api::OptString(item, "call_id", f + ".call_id"));
      ASSIGN_OR_RETURN(std::optional<std::string> name,
                       http_api::OptString(item, "name", f + ".name"));
      ASSIGN_OR_RETURN(std::optional<std::string> arguments,
                       http_api::OptString(item, "arguments", f + ".arguments"));
      if (!call_id.has_value() || call_id->empty()) {
        return FieldError(f + ".call_id", f + ".call_id is required");
      }
      if (!name.has_value() || name->empty()) return FieldError(f + ".name", f + ".name is required");
      // Consecutive calls are one assistant turn's.
      v1::ChatMessage* m = nullptr;
      if (chat->messages_size() > 0) {
        v1::ChatMessage* last = chat->mutable_messages(chat->messages_size() - 1);
        if (last->role() == "assistant" && last->tool_calls_size() > 0) m = last;
      }
      if (m == nullptr) {
        m = add(f);
        m->set_role("assistant");
      }
      v1::ToolCall* call = m->add_tool_calls();
      call->set_id(*call_id);
      call->set_name(*name);
      call->set_arguments(arguments.value_or(""));
      calls[*call_id] = *name;
    } else if (t == "function_call_output") {
      ASSIGN_OR_RETURN(std::optional<std::string> call_id,
                       http_api::OptString(item, "call_id", f + ".call_id"));
      if (!call_id.has_value()) return FieldError(f + ".call_id", f + ".call_id is required");
      auto call = calls.find(*call_id);
      if (call == calls.end()) {
        return FieldError(f + ".call_id", absl::StrCat(f, ".call_id '", call_id->substr(0, 80),
                                                       "' matches no earlier function_call"));
      }
      ASSIGN_OR_RETURN(std::string output, TextOf(Member(item, "output"), f + ".output"));
      v1::ChatMessage* m = add(f);
      m->set_role("tool");
      m->set_tool_call_id(call->first);
      m->set_name(call->second);
      m->set_content(std::move(output));
    } else if (t == "reasoning") {
      // An earlier turn's reasoning: templates drop it from past turns.
    } else {
      return FieldError(f + ".type", absl::StrCat(f, ".type '", t,
                                                  "' is not supported: message, function_call, "
                                                  "function_call_output or reasoning"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseTools(const ojson& body, v1::Chat* chat) {
  http_api::ToolShape shape;
  shape.check_type = [](const ojson& t, const std::string& f) -> absl::Status {
    ASSIGN_OR_RETURN(std::optional<std::string> type, http_api::OptString(t, "type", f + ".type"));
    if (type != "function") {
      return FieldError(f + ".type", absl::StrCat(f, ".type '", type.value_or(""),
                                                  "' is not supported: only function tools"));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(http_api::ReadTools(body, shape, chat));
  const ojson& choice = Member(body, "tool_choice");
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
      return FieldError("tool_choice", absl::StrCat("tool_choice '", c,
                                                    "' is not supported: none, auto, required "
                                                    "or {\"type\": \"function\", \"name\": ...}"));
    }
  } else if (choice.is_object()) {
    ASSIGN_OR_RETURN(std::optional<std::string> type,
                     http_api::OptString(choice, "type", "tool_choice.type"));
    if (type != "function") {
      return FieldError("tool_choice.type", "tool_choice.type must be \"function\"");
    }
    ASSIGN_OR_RETURN(std::optional<std::string> name,
                     http_api::OptString(choice, "name", "tool_choice.name"));
    if (!name.has_value()) return FieldError("tool_choice.name", "tool_choice.name is required");
    bool found = false;
    for (const v1::Tool& t : chat->tools()) found |= t.name() == *name;
    if (!found) {
      return FieldError("tool_choice.name", absl::StrCat("tool_choice.name '", name->substr(0, 80),
                                                         "' is not one of the tools"));
    }
    tc->set_mode(v1::ToolChoice::TOOL_CHOICE_FUNCTION);
    tc->set_function(*name);
  } else if (!choice.is_null()) {
    return WrongType("tool_choice", "a string or an object", choice);
  }
  if (tc->mode() == v1::ToolChoice::TOOL_CHOICE_REQUIRED && chat->tools().empty()) {
    return FieldError("tool_choice", "tool_choice asks for a tool call but no tools are given");
  }
  ASSIGN_OR_RETURN(std::optional<bool> parallel,
                   http_api::OptBool(body, "parallel_tool_calls", "parallel_tool_calls"));
  if (parallel.has_value()) chat->set_parallel_tool_calls(*parallel);
  return absl::OkStatus();
}

// text.format into the request's constraint.
absl::Status ParseTextFormat(const ojson& body, v1::GenerateRequest* g, json* echo) {
  *echo = {{"format", {{"type", "text"}}}};
  const ojson& text = Member(body, "text");
  if (text.is_null()) return absl::OkStatus();
  if (!text.is_object()) return WrongType("text", "an object", text);
  const ojson& format = Member(text, "format");
  if (format.is_null()) return absl::OkStatus();
  if (!format.is_object()) return WrongType("text.format", "an object", format);
  ASSIGN_OR_RETURN(std::optional<std::string> type,
                   http_api::OptString(format, "type", "text.format.type"));
  if (!type.has_value() || *type == "text") return absl::OkStatus();
  if (*type == "json_object") {
    g->set_json_object(true);
  } else if (*type == "json_schema") {
    const ojson& schema = Member(format, "schema");
    if (schema.is_null()) {
      return FieldError("text.format.schema", "text.format.schema is required with json_schema");
    }
    if (!schema.is_object() && !schema.is_boolean()) {
      return WrongType("text.format.schema", "a JSON Schema (an object)", schema);
    }
    ASSIGN_OR_RETURN(std::optional<std::string> name,
                     http_api::OptString(format, "name", "text.format.name"));
    if (!name.has_value() || name->empty()) {
      return FieldError("text.format.name", "text.format.name is required with json_schema");
    }
    g->set_json_schema(schema.dump());
  } else {
    return FieldError("text.format.type", absl::StrCat("text.format.type '", *type,
                                                       "' is not supported: text, json_object "
                                                       "or json_schema"));
  }
  (*echo)["format"] = json::parse(format.dump());
  return absl::OkStatus();
}

// The request model's field (FieldPath) as this API names it: the
// constraint is text.format.schema, the chat's messages the input items they
// came from (origins), stopping.max_tokens is max_output_tokens and the
// prompt as a whole is input; tools keep their flat shape (tools[i].name,
// tools[i].parameters); the rest as the chat API names it.
std::string ResponsesFieldName(const std::vector<FieldPathStep>& path, bool constraint,
                               const std::vector<std::string>& origins) {
  if (constraint) return "text.format.schema";
  auto name_at = [&](size_t i) -> std::string {
    return i < path.size() && !path[i].is_index() ? path[i].name : std::string();
  };
  auto from = [&](size_t i) {
    return FormatFieldPath(
        std::vector<FieldPathStep>(path.begin() + std::min(i, path.size()), path.end()));
  };
  if (name_at(0) == "chat") {
    if (name_at(1) == "tool_choice") return "tool_choice";
    if (name_at(1) == "tools") return from(1);
    if (name_at(1) == "messages" && path.size() > 2 && path[2].is_index() &&
        static_cast<size_t>(path[2].index) < origins.size()) {
      const std::string tail = from(3);
      const std::string& base = origins[path[2].index];
      return tail.empty() ? base : absl::StrCat(base, tail[0] == '[' ? "" : ".", tail);
    }
  }
  if (name_at(0) == "stopping" && name_at(1) == "max_tokens") return "max_output_tokens";
  const std::string chat_name = openai::ApiFieldName(openai::Endpoint::kChatCompletions, path);
  return chat_name == "messages" ? "input" : chat_name;
}

// A submission error in the API's names.
absl::Status ApiFieldError(const absl::Status& status, const std::vector<std::string>& origins) {
  const bool constraint = IsConstraintError(status);
  return http_api::ToApiField(status, [&](const std::vector<FieldPathStep>& path) {
    return ResponsesFieldName(path, constraint, origins);
  });
}

http_api::ErrorReply ErrorFor(const absl::Status& status) {
  const openai::ApiError e = openai::ApiErrorFor(status);
  return {e.http_status, openai::ErrorBody(e)};
}

// The settings a response object repeats.
struct Echo {
  json tools = json::array();
  json tool_choice = "auto";
  json text;
  json reasoning = {{"effort", nullptr}, {"summary", nullptr}};
  json instructions;
  json metadata = json::object();
  json temperature = 1.0;
  json top_p = 1.0;
  json max_output_tokens;
  bool parallel_tool_calls = true;
};

// The writer of one response.
class ResponseReply : public http_api::Reply {
 public:
  ResponseReply(const v1::GenerateRequest& request, std::shared_ptr<const Echo> echo,
                const http_api::ReplyContext& ctx)
      : echo_(std::move(echo)),
        id_(NewId("resp_")),
        model_(ctx.model),
        created_(std::chrono::duration_cast<std::chrono::seconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count()) {
    ChatOutputOptions options = ChatOutputOptionsFor(request.chat(), *ctx.tokenizer, ctx.parsers);
    stream_ = ChatOutputStream::CreateOrContent(&options);
  }

  std::string StreamEvents(const SequenceChunk& chunk) override {
    std::string out;
    if (!started_) {
      started_ = true;
      json r = Object("in_progress", nullptr);
      Event("response.created", {{"response", r}}, &out);
      Event("response.in_progress", {{"response", r}}, &out);
    }
    std::vector<ChatOutputEvent> events = stream_->Feed(chunk.text);
    const bool ok = chunk.result.has_value() && chunk.result->status.ok();
    if (ok) {
      for (ChatOutputEvent& e : stream_->Finish()) events.push_back(std::move(e));
    }
    for (ChatOutputEvent& e : events) Take(std::move(e), &out);
    FlushDelta(&out);
    if (!chunk.result.has_value()) return out;
    if (!ok) {
      const openai::ApiError e = openai::ApiErrorFor(chunk.result->status);
      Event("error", {{"code", e.code.empty() ? json(e.type) : json(e.code)},
                      {"message", e.message},
                      {"param", e.param.empty() ? json() : json(e.param)}},
            &out);
      return out;
    }
    CloseItem(&out);
    const bool cut = chunk.result->finish_reason == FinishReason::kLength;
    json r = Object(cut ? "incomplete" : "completed", &*chunk.result);
    Event(cut ? "response.incomplete" : "response.completed", {{"response", std::move(r)}}, &out);
    return out;
  }

  void Accumulate(const SequenceChunk& chunk) override {
    for (ChatOutputEvent& e : stream_->Feed(chunk.text)) Take(std::move(e), nullptr);
  }

  json Response(const SequenceResult& result) override {
    for (ChatOutputEvent& e : stream_->Finish()) Take(std::move(e), nullptr);
    CloseItem(nullptr);
    return Object(result.finish_reason == FinishReason::kLength ? "incomplete" : "completed",
                  &result);
  }

 private:
  enum class Kind { kNone, kReasoning, kMessage, kCall };

  void Event(const char* type, json data, std::string* out) {
    if (out == nullptr) return;
    json e = {{"type", type}, {"sequence_number", sequence_++}};
    for (auto& [k, v] : data.items()) e[k] = v;
    out->append(http_api::SseEvent(type, e));
  }

  json Object(const char* status, const SequenceResult* result) const {
    json r = {{"id", id_},
              {"object", "response"},
              {"created_at", created_},
              {"status", status},
              {"error", nullptr},
              {"incomplete_details", nullptr},
              {"instructions", echo_->instructions},
              {"max_output_tokens", echo_->max_output_tokens},
              {"model", model_},
              {"output", result == nullptr ? json::array() : output_},
              {"parallel_tool_calls", echo_->parallel_tool_calls},
              {"previous_response_id", nullptr},
              {"reasoning", echo_->reasoning},
              {"store", false},
              {"temperature", echo_->temperature},
              {"text", echo_->text},
              {"tool_choice", echo_->tool_choice},
              {"tools", echo_->tools},
              {"top_p", echo_->top_p},
              {"truncation", "disabled"},
              {"metadata", echo_->metadata},
              {"usage", nullptr}};
    if (std::string(status) == "incomplete") {
      r["incomplete_details"] = {{"reason", "max_output_tokens"}};
    }
    if (result != nullptr) {
      const auto& s = result->stats;
      r["usage"] = {{"input_tokens", s.prompt_tokens},
                    {"input_tokens_details", {{"cached_tokens", s.cached_prompt_tokens}}},
                    {"output_tokens", s.completion_tokens},
                    {"output_tokens_details", {{"reasoning_tokens", 0}}},
                    {"total_tokens", s.prompt_tokens + s.completion_tokens}};
    }
    return r;
  }

  // Opens the item an event belongs to (closing the one before).
  void OpenItem(Kind kind, const ChatOutputEvent& e, std::string* out) {
    CloseItem(out);
    kind_ = kind;
    text_.clear();
    json item;
    switch (kind) {
      case Kind::kReasoning:
        item = {{"type", "reasoning"}, {"id", NewId("rs_")}, {"summary", json::array()}};
        break;
      case Kind::kMessage:
        item = {{"type", "message"},
                {"id", NewId("msg_")},
                {"status", "in_progress"},
                {"role", "assistant"},
                {"content", json::array()}};
        break;
      case Kind::kCall:
        item = {{"type", "function_call"}, {"id", NewId("fc_")}, {"call_id", e.id},
                {"name", e.name},          {"arguments", ""},     {"status", "in_progress"}};
        break;
      case Kind::kNone:
        return;
    }
    item_ = item;
    Event("response.output_item.added",
          {{"output_index", output_.size()}, {"item", std::move(item)}}, out);
    if (kind == Kind::kMessage) {
      Event("response.content_part.added",
            {{"item_id", item_["id"]}, {"output_index", output_.size()}, {"content_index", 0},
             {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}},
            out);
    } else if (kind == Kind::kReasoning) {
      Event("response.reasoning_summary_part.added",
            {{"item_id", item_["id"]}, {"output_index", output_.size()}, {"summary_index", 0},
             {"part", {{"type", "summary_text"}, {"text", ""}}}},
            out);
    }
  }

  void FlushDelta(std::string* out) {
    if (pending_.empty()) return;
    const size_t index = output_.size();
    switch (kind_) {
      case Kind::kReasoning:
        Event("response.reasoning_summary_text.delta",
              {{"item_id", item_["id"]}, {"output_index", index}, {"summary_index", 0},
               {"delta", pending_}},
              out);
        break;
      case Kind::kMessage:
        Event("response.output_text.delta",
              {{"item_id", item_["id"]}, {"output_index", index}, {"content_index", 0},
               {"delta", pending_}, {"logprobs", json::array()}},
              out);
        break;
      case Kind::kCall:
        Event("response.function_call_arguments.delta",
              {{"item_id", item_["id"]}, {"output_index", index}, {"delta", pending_}}, out);
        break;
      case Kind::kNone:
        break;
    }
    pending_.clear();
  }

  void CloseItem(std::string* out) {
    FlushDelta(out);
    if (kind_ == Kind::kNone) return;
    const size_t index = output_.size();
    const json id = item_["id"];
    switch (kind_) {
      case Kind::kReasoning: {
        const json part = {{"type", "summary_text"}, {"text", text_}};
        Event("response.reasoning_summary_text.done",
              {{"item_id", id}, {"output_index", index}, {"summary_index", 0}, {"text", text_}},
              out);
        Event("response.reasoning_summary_part.done",
              {{"item_id", id}, {"output_index", index}, {"summary_index", 0}, {"part", part}},
              out);
        item_["summary"] = json::array({part});
        break;
      }
      case Kind::kMessage: {
        const json part = {{"type", "output_text"}, {"text", text_},
                           {"annotations", json::array()}, {"logprobs", json::array()}};
        Event("response.output_text.done",
              {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"text", text_},
               {"logprobs", json::array()}},
              out);
        Event("response.content_part.done",
              {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"part", part}},
              out);
        item_["status"] = "completed";
        item_["content"] = json::array({part});
        break;
      }
      case Kind::kCall:
        Event("response.function_call_arguments.done",
              {{"item_id", id}, {"output_index", index}, {"name", item_["name"]},
               {"arguments", text_}},
              out);
        item_["arguments"] = text_;
        item_["status"] = "completed";
        break;
      case Kind::kNone:
        break;
    }
    Event("response.output_item.done", {{"output_index", index}, {"item", item_}}, out);
    output_.push_back(std::move(item_));
    item_ = json();
    kind_ = Kind::kNone;
  }

  void Take(ChatOutputEvent e, std::string* out) {
    Kind kind = Kind::kNone;
    switch (e.type) {
      case ChatOutputEvent::Type::kReasoning:
        kind = Kind::kReasoning;
        break;
      case ChatOutputEvent::Type::kContent:
        kind = Kind::kMessage;
        break;
      case ChatOutputEvent::Type::kCallStart:
        OpenItem(Kind::kCall, e, out);
        return;
      case ChatOutputEvent::Type::kArguments:
        if (kind_ != Kind::kCall) return;
        text_ += e.text;
        pending_ += e.text;
        return;
    }
    if (e.text.empty()) return;
    if (kind_ != kind) OpenItem(kind, e, out);
    text_ += e.text;
    pending_ += e.text;
  }

  const std::shared_ptr<const Echo> echo_;
  const std::string id_;
  const std::string model_;
  const int64_t created_;
  std::unique_ptr<ChatOutputStream> stream_;
  bool started_ = false;
  int64_t sequence_ = 0;
  json output_ = json::array();  // the closed items
  Kind kind_ = Kind::kNone;      // the open item
  json item_;
  std::string text_;     // the open item's text so far
  std::string pending_;  // not yet sent as a delta
};

}  // namespace

absl::StatusOr<http_api::ApiRequest> ParseResponsesRequest(const ojson& body) {
  if (!body.is_object()) return WrongType("body", "a JSON object", body);
  http_api::ApiRequest out;
  out.route = "/v1/responses";
  v1::GenerateRequest& g = out.generate;
  const ojson& model = Member(body, "model");
  if (model.is_null()) return FieldError("model", "model is required: a loaded model or alias");
  if (!model.is_string()) return WrongType("model", "a string", model);
  g.set_model(model.get<std::string>());

  for (const char* f : {"previous_response_id", "conversation"}) {
    if (!Member(body, f).is_null()) {
      return FieldError(f, absl::StrCat(f, " is not supported: this server stores no responses; "
                                           "send the whole conversation as input"));
    }
  }
  ASSIGN_OR_RETURN(std::optional<bool> background,
                   http_api::OptBool(body, "background", "background"));
  if (background.value_or(false)) {
    return FieldError("background", "background is not supported: this server stores no "
                                    "responses");
  }

  auto echo = std::make_shared<Echo>();
  auto origins = std::make_shared<std::vector<std::string>>();
  v1::Chat* chat = g.mutable_chat();
  RETURN_IF_ERROR(ParseInput(body, chat, origins.get()));
  RETURN_IF_ERROR(ParseTools(body, chat));
  if (absl::Status st = ValidateChatTools(*chat); !st.ok()) return ApiFieldError(st, *origins);

  const ojson& reasoning = Member(body, "reasoning");
  if (!reasoning.is_null()) {
    if (!reasoning.is_object()) return WrongType("reasoning", "an object", reasoning);
    ASSIGN_OR_RETURN(std::optional<std::string> effort,
                     http_api::OptString(reasoning, "effort", "reasoning.effort"));
    if (effort.has_value()) {
      if (*effort == "none" || *effort == "minimal") {
        (*chat->mutable_template_kwargs())["enable_thinking"] = "false";
      } else if (*effort == "low" || *effort == "medium" || *effort == "high") {
        (*chat->mutable_template_kwargs())["enable_thinking"] = "true";
      } else {
        return FieldError("reasoning.effort",
                          absl::StrCat("reasoning.effort '", *effort,
                                       "' is not supported: none, minimal, low, medium or high"));
      }
      echo->reasoning["effort"] = *effort;
    }
  }

  ASSIGN_OR_RETURN(std::optional<bool> stream, http_api::OptBool(body, "stream", "stream"));
  out.stream = stream.value_or(false);
  // minfer's extension, as on the OpenAI routes: false opts this request
  // out of the model's speculative decoding (GenerateRequest.speculative).
  ASSIGN_OR_RETURN(std::optional<bool> speculative,
                   http_api::OptBool(body, "speculative", "speculative"));
  if (speculative.has_value()) g.set_speculative(*speculative);
  v1::SamplingParams* sp = g.mutable_sampling();
  ASSIGN_OR_RETURN(std::optional<double> temperature,
                   http_api::OptNumber(body, "temperature", "temperature"));
  if (temperature.has_value()) {
    if (*temperature < 0 || *temperature > 2) {
      return FieldError("temperature",
                        absl::StrCat("temperature must be in [0, 2], got ", *temperature));
    }
    sp->set_temperature(static_cast<float>(*temperature));
    echo->temperature = *temperature;
  }
  ASSIGN_OR_RETURN(std::optional<double> top_p, http_api::OptNumber(body, "top_p", "top_p"));
  if (top_p.has_value()) {
    if (*top_p <= 0 || *top_p > 1) {
      return FieldError("top_p", absl::StrCat("top_p must be in (0, 1], got ", *top_p));
    }
    sp->set_top_p(static_cast<float>(*top_p));
    echo->top_p = *top_p;
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> max_tokens,
                   http_api::OptInt(body, "max_output_tokens", "max_output_tokens"));
  if (max_tokens.has_value()) {
    if (*max_tokens < 1) {
      return FieldError("max_output_tokens",
                        absl::StrCat("max_output_tokens must be >= 1, got ", *max_tokens));
    }
    g.mutable_stopping()->set_max_tokens(
        static_cast<int32_t>(std::min<int64_t>(*max_tokens, INT32_MAX)));
    echo->max_output_tokens = *max_tokens;
  }
  RETURN_IF_ERROR(ParseTextFormat(body, &g, &echo->text));

  const ojson& metadata = Member(body, "metadata");
  if (!metadata.is_null()) {
    if (!metadata.is_object()) return WrongType("metadata", "an object", metadata);
    echo->metadata = json::parse(metadata.dump());
  }
  const ojson& instructions = Member(body, "instructions");
  if (instructions.is_string()) echo->instructions = instructions.get<std::string>();
  const ojson& tools = Member(body, "tools");
  if (tools.is_array()) echo->tools = json::parse(tools.dump());
  const ojson& choice = Member(body, "tool_choice");
  if (!choice.is_null()) echo->tool_choice = json::parse(choice.dump());
  echo->parallel_tool_calls = !chat->has_parallel_tool_calls() || chat->parallel_tool_calls();

  out.error = [origins](const absl::Status& status) {
    return ErrorFor(ApiFieldError(status, *origins));
  };
  const v1::GenerateRequest request = g;
  std::shared_ptr<const Echo> settings = echo;
  out.reply = [request, settings](
                  const http_api::ReplyContext& ctx) -> std::unique_ptr<http_api::Reply> {
    return std::make_unique<ResponseReply>(request, settings, ctx);
  };
  return out;
}

}  // namespace minfer::daemon::responses
