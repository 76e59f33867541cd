#include "daemon/http/anthropic_api.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/api/chat_tools.h"
#include "daemon/http/json_fields.h"
#include "daemon/http/tools_reader.h"
#include "daemon/http/openai_api.h"
#include "engine/base/field_error.h"
#include "engine/base/status.h"

namespace minfer::daemon::anthropic {
namespace {

using json = nlohmann::json;
using http_api::ojson;
using http_api::Member;
using http_api::WrongType;
using openai::FieldError;

constexpr size_t kMaxStopSequences = 16;

// Where each message of the built chat came from, to name the API's field
// in errors about it ("chat.messages[3].tool_calls[0].arguments" ->
// "messages[2].content[1].input").
struct Origins {
  std::vector<std::string> messages;            // per chat message
  std::vector<std::vector<std::string>> calls;  // per chat message, per tool call
};

// Text of a string or an array of text blocks (`what` names what it is in
// errors about other block types).
absl::StatusOr<std::string> TextOf(const ojson& v, const std::string& field) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) return WrongType(field, "a string or an array of text blocks", v);
  std::string text;
  for (size_t j = 0; j < v.size(); ++j) {
    const std::string f = absl::StrCat(field, "[", j, "]");
    const ojson& b = v[j];
    if (!b.is_object()) return WrongType(f, "an object", b);
    const ojson& type = Member(b, "type");
    if (!type.is_string()) return WrongType(f + ".type", "a string", type);
    if (type.get<std::string>() != "text") {
      return FieldError(f + ".type", absl::StrCat(f, ".type '", type.get<std::string>(),
                                                  "' is not supported here: only text blocks"));
    }
    const ojson& t = Member(b, "text");
    if (!t.is_string()) return WrongType(f + ".text", "a string", t);
    if (!text.empty()) text += "\n";
    text += t.get<std::string>();
  }
  return text;
}

absl::Status UnsupportedBlock(const std::string& field, const std::string& type,
                              const char* role) {
  return FieldError(field + ".type",
                    absl::StrCat(field, ".type '", type, "' is not supported in ", role,
                                 " messages: this server reads text, tool_use, tool_result and "
                                 "thinking blocks"));
}

absl::Status ParseMessages(const ojson& body, v1::Chat* chat, Origins* origins) {
  auto add = [&](const std::string& origin) {
    origins->messages.push_back(origin);
    origins->calls.emplace_back();
    return chat->add_messages();
  };
  const ojson& system = Member(body, "system");
  if (!system.is_null()) {
    ASSIGN_OR_RETURN(std::string text, TextOf(system, "system"));
    if (!text.empty()) {
      v1::ChatMessage* m = add("system");
      m->set_role("system");
      m->set_content(std::move(text));
    }
  }
  const ojson& messages = Member(body, "messages");
  if (messages.is_null()) return FieldError("messages", "messages is required");
  if (!messages.is_array()) return WrongType("messages", "an array", messages);
  if (messages.empty()) return FieldError("messages", "messages must not be empty");
  std::map<std::string, std::string> tool_uses;  // id -> name, of the turns so far
  for (size_t i = 0; i < messages.size(); ++i) {
    const ojson& msg = messages[i];
    const std::string f = absl::StrCat("messages[", i, "]");
    if (!msg.is_object()) return WrongType(f, "an object", msg);
    const ojson& role = Member(msg, "role");
    if (!role.is_string()) return WrongType(f + ".role", "a string", role);
    const std::string r = role.get<std::string>();
    if (r != "user" && r != "assistant") {
      return FieldError(f + ".role",
                        absl::StrCat(f, ".role '", r, "' is not supported: user or assistant "
                                                      "(the system prompt is the system field)"));
    }
    const ojson& content = Member(msg, "content");
    if (content.is_string()) {
      v1::ChatMessage* m = add(f);
      m->set_role(r);
      m->set_content(content.get<std::string>());
      continue;
    }
    if (!content.is_array()) {
      return WrongType(f + ".content", "a string or an array of content blocks", content);
    }
    if (r == "assistant") {
      v1::ChatMessage* m = add(f);
      m->set_role("assistant");
      std::string text, reasoning;
      for (size_t j = 0; j < content.size(); ++j) {
        const ojson& b = content[j];
        const std::string bf = absl::StrCat(f, ".content[", j, "]");
        if (!b.is_object()) return WrongType(bf, "an object", b);
        const ojson& type = Member(b, "type");
        if (!type.is_string()) return WrongType(bf + ".type", "a string", type);
        const std::string& t = type.get_ref<const std::string&>();
        if (t == "text") {
          const ojson& v = Member(b, "text");
          if (!v.is_string()) return WrongType(bf + ".text", "a string", v);
          if (!text.empty()) text += "\n";
          text += v.get<std::string>();
        } else if (t == "thinking") {
          const ojson& v = Member(b, "thinking");
          if (!v.is_string()) return WrongType(bf + ".thinking", "a string", v);
          reasoning += v.get<std::string>();
        } else if (t == "redacted_thinking") {
          // Another server's encrypted reasoning: nothing this model can read.
        } else if (t == "tool_use") {
          const ojson& id = Member(b, "id");
          if (!id.is_string() || id.get<std::string>().empty()) {
            return FieldError(bf + ".id", absl::StrCat(bf, ".id is required"));
          }
          const ojson& name = Member(b, "name");
          if (!name.is_string() || name.get<std::string>().empty()) {
            return FieldError(bf + ".name", absl::StrCat(bf, ".name is required"));
          }
          const ojson& input = Member(b, "input");
          if (!input.is_null() && !input.is_object()) {
            return WrongType(bf + ".input", "an object", input);
          }
          v1::ToolCall* call = m->add_tool_calls();
          call->set_id(id.get<std::string>());
          call->set_name(name.get<std::string>());
          call->set_arguments(input.is_null() ? "{}" : input.dump());
          origins->calls.back().push_back(bf + ".input");
          tool_uses[id.get<std::string>()] = name.get<std::string>();
        } else {
          return UnsupportedBlock(bf, t, "assistant");
        }
      }
      m->set_content(std::move(text));
      m->set_reasoning_content(std::move(reasoning));
      continue;
    }
    // A user turn: its tool results become tool messages, its text a user
    // message, in the order they come.
    std::string text;
    std::string text_origin;
    auto flush = [&] {
      if (text_origin.empty()) return;
      v1::ChatMessage* m = add(text_origin);
      m->set_role("user");
      m->set_content(std::move(text));
      text.clear();
      text_origin.clear();
    };
    for (size_t j = 0; j < content.size(); ++j) {
      const ojson& b = content[j];
      const std::string bf = absl::StrCat(f, ".content[", j, "]");
      if (!b.is_object()) return WrongType(bf, "an object", b);
      const ojson& type = Member(b, "type");
      if (!type.is_string()) return WrongType(bf + ".type", "a string", type);
      const std::string& t = type.get_ref<const std::string&>();
      if (t == "text") {
        const ojson& v = Member(b, "text");
        if (!v.is_string()) return WrongType(bf + ".text", "a string", v);
        if (text_origin.empty()) {
          text_origin = bf;
        } else {
          text += "\n";
        }
        text += v.get<std::string>();
      } else if (t == "tool_result") {
        flush();
        const ojson& id = Member(b, "tool_use_id");
        if (!id.is_string()) return WrongType(bf + ".tool_use_id", "a string", id);
        auto use = tool_uses.find(id.get<std::string>());
        if (use == tool_uses.end()) {
          const std::string& s = id.get_ref<const std::string&>();
          return FieldError(bf + ".tool_use_id",
                            absl::StrCat(bf, ".tool_use_id '", s.substr(0, 80),
                                         "' matches no tool_use block of an earlier assistant "
                                         "turn"));
        }
        std::string result;
        const ojson& c = Member(b, "content");
        if (!c.is_null()) {
          ASSIGN_OR_RETURN(result, TextOf(c, bf + ".content"));
        }
        ASSIGN_OR_RETURN(std::optional<bool> is_error,
                         http_api::OptBool(b, "is_error", bf + ".is_error"));
        if (is_error.value_or(false)) result = absl::StrCat("Error: ", result);
        v1::ChatMessage* m = add(bf);
        m->set_role("tool");
        m->set_tool_call_id(use->first);
        m->set_name(use->second);
        m->set_content(std::move(result));
      } else {
        return UnsupportedBlock(bf, t, "user");
      }
    }
    flush();
  }
  return absl::OkStatus();
}

absl::Status ParseTools(const ojson& body, v1::Chat* chat) {
  http_api::ToolShape shape;
  shape.schema = "input_schema";
  shape.explain_schema = false;
  shape.strict = false;
  shape.check_type = [](const ojson& t, const std::string& f) -> absl::Status {
    const ojson& type = Member(t, "type");
    if (!type.is_null() && !(type.is_string() && type.get<std::string>() == "custom")) {
      return FieldError(f + ".type",
                        absl::StrCat(f, ".type ", type.dump(),
                                     " is not supported: only client tools (no type, or "
                                     "\"custom\") with an input_schema; server tools do not "
                                     "run here"));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(http_api::ReadTools(body, shape, chat));
  const ojson& choice = Member(body, "tool_choice");
  if (choice.is_null()) return absl::OkStatus();
  if (!choice.is_object()) return WrongType("tool_choice", "an object", choice);
  ASSIGN_OR_RETURN(std::optional<std::string> type,
                   http_api::OptString(choice, "type", "tool_choice.type"));
  if (!type.has_value()) return FieldError("tool_choice.type", "tool_choice.type is required");
  v1::ToolChoice* tc = chat->mutable_tool_choice();
  if (*type == "auto") {
    tc->set_mode(v1::ToolChoice::TOOL_CHOICE_AUTO);
  } else if (*type == "any") {
    tc->set_mode(v1::ToolChoice::TOOL_CHOICE_REQUIRED);
  } else if (*type == "none") {
    tc->set_mode(v1::ToolChoice::TOOL_CHOICE_NONE);
  } else if (*type == "tool") {
    ASSIGN_OR_RETURN(std::optional<std::string> name,
                     http_api::OptString(choice, "name", "tool_choice.name"));
    if (!name.has_value()) {
      return FieldError("tool_choice.name", "tool_choice.name is required with type \"tool\"");
    }
    bool found = false;
    for (const v1::Tool& t : chat->tools()) found |= t.name() == *name;
    if (!found) {
      return FieldError("tool_choice.name",
                        absl::StrCat("tool_choice.name '", name->substr(0, 80),
                                     "' is not one of the tools"));
    }
    tc->set_mode(v1::ToolChoice::TOOL_CHOICE_FUNCTION);
    tc->set_function(*name);
  } else {
    return FieldError("tool_choice.type",
                      absl::StrCat("tool_choice.type '", *type,
                                   "' is not supported: auto, any, tool or none"));
  }
  if ((*type == "any" || *type == "tool") && chat->tools().empty()) {
    return FieldError("tool_choice", "tool_choice asks for a tool call but no tools are given");
  }
  ASSIGN_OR_RETURN(std::optional<bool> no_parallel,
                   http_api::OptBool(choice, "disable_parallel_tool_use",
                                     "tool_choice.disable_parallel_tool_use"));
  if (no_parallel.has_value()) chat->set_parallel_tool_calls(!*no_parallel);
  return absl::OkStatus();
}

// The request model's field (FieldPath) as this API names it:
// chat.tools[i].parameters -> tools[i].input_schema, the chat's messages and
// history calls -> the blocks they came from (origins), chat.tool_choice ->
// tool_choice (.name for the named tool), stopping.stop[i] ->
// stop_sequences[i]; the rest as the chat API names it.
std::string AnthropicFieldName(const std::vector<FieldPathStep>& path, const Origins& origins) {
  auto name_at = [&](size_t i) -> std::string {
    return i < path.size() && !path[i].is_index() ? path[i].name : std::string();
  };
  auto from = [&](size_t i) {
    return FormatFieldPath(
        std::vector<FieldPathStep>(path.begin() + std::min(i, path.size()), path.end()));
  };
  if (name_at(0) == "chat" && name_at(1) == "tool_choice") {
    return name_at(2) == "function" ? "tool_choice.name" : "tool_choice";
  }
  if (name_at(0) == "chat" && name_at(1) == "tools") {
    // Anthropic's tools are flat: tools[i].name, tools[i].input_schema.
    if (path.size() == 4 && path[2].is_index() && name_at(3) == "parameters") {
      return absl::StrCat("tools[", path[2].index, "].input_schema");
    }
    return from(1);
  }
  if (name_at(0) == "chat" && name_at(1) == "messages" && path.size() > 2 && path[2].is_index()) {
    const size_t k = static_cast<size_t>(path[2].index);
    if (k < origins.messages.size()) {
      // A history call is one tool_use block.
      if (name_at(3) == "tool_calls" && path.size() > 4 && path[4].is_index() &&
          static_cast<size_t>(path[4].index) < origins.calls[k].size()) {
        return origins.calls[k][path[4].index];
      }
      const std::string tail = from(3);
      return tail.empty() ? origins.messages[k]
                          : absl::StrCat(origins.messages[k], tail[0] == '[' ? "" : ".", tail);
    }
  }
  if (name_at(0) == "stopping" && name_at(1) == "stop") {
    return absl::StrCat("stop_sequences", from(2));
  }
  return openai::ApiFieldName(openai::Endpoint::kChatCompletions, path);
}

// A submission error in the API's names.
absl::Status ApiFieldError(const absl::Status& status, const Origins& origins) {
  return http_api::ToApiField(status, [&origins](const std::vector<FieldPathStep>& path) {
    return AnthropicFieldName(path, origins);
  });
}

std::string NewId(const char* prefix) {
  // NewToolCallId's 24 letters and digits after its "call_".
  return absl::StrCat(prefix, NewToolCallId().substr(5));
}

json ParseInput(const std::string& arguments) {
  if (arguments.empty()) return json::object();
  json v = json::parse(arguments, nullptr, /*allow_exceptions=*/false);
  return v.is_object() ? v : json::object();
}

// The writer of one message.
class MessageReply : public http_api::Reply {
 public:
  MessageReply(const v1::GenerateRequest& request, const http_api::ReplyContext& ctx)
      : id_(NewId("msg_")), model_(ctx.model), prompt_tokens_(ctx.prompt_tokens) {
    if (request.stopping().stop_size() == 1) only_stop_ = request.stopping().stop(0);
    ChatOutputOptions options = ChatOutputOptionsFor(request.chat(), *ctx.tokenizer, ctx.parsers);
    stream_ = ChatOutputStream::CreateOrContent(&options, [](int) { return NewId("toolu_"); });
  }

  std::string StreamEvents(const SequenceChunk& chunk) override {
    std::string out;
    if (!started_) {
      started_ = true;
      json message = Envelope();
      message["content"] = json::array();
      message["stop_reason"] = nullptr;
      message["stop_sequence"] = nullptr;
      message["usage"] = {{"input_tokens", prompt_tokens_}, {"output_tokens", 0}};
      out += http_api::SseEvent("message_start",
                                {{"type", "message_start"}, {"message", std::move(message)}});
      out += http_api::SseEvent("ping", {{"type", "ping"}});
    }
    std::vector<ChatOutputEvent> events = stream_->Feed(chunk.text);
    const bool ok = chunk.result.has_value() && chunk.result->status.ok();
    if (ok) {
      for (ChatOutputEvent& e : stream_->Finish()) events.push_back(std::move(e));
    }
    for (ChatOutputEvent& e : events) {
      called_ |= e.type == ChatOutputEvent::Type::kCallStart;
      StreamEvent(e, &out);
    }
    FlushDelta(&out);
    if (!chunk.result.has_value()) return out;
    if (!ok) {
      out += http_api::SseEvent("error", ErrorFor(chunk.result->status).body);
      return out;
    }
    CloseBlock(&out);
    const SequenceResult& r = *chunk.result;
    json delta = {{"stop_reason", StopReason(r, called_)}, {"stop_sequence", StopSequence(r)}};
    out += http_api::SseEvent("message_delta",
                              {{"type", "message_delta"}, {"delta", std::move(delta)},
                               {"usage", Usage(r)}});
    out += http_api::SseEvent("message_stop", {{"type", "message_stop"}});
    return out;
  }

  void Accumulate(const SequenceChunk& chunk) override {
    for (ChatOutputEvent& e : stream_->Feed(chunk.text)) events_.push_back(std::move(e));
  }

  json Response(const SequenceResult& result) override {
    for (ChatOutputEvent& e : stream_->Finish()) events_.push_back(std::move(e));
    const ChatOutput reply = CollectChatOutput(events_);
    json content = json::array();
    if (!reply.reasoning.empty()) {
      content.push_back({{"type", "thinking"}, {"thinking", reply.reasoning}, {"signature", ""}});
    }
    if (!reply.content.empty()) content.push_back({{"type", "text"}, {"text", reply.content}});
    for (const chat::ToolCall& c : reply.calls) {
      content.push_back(
          {{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", ParseInput(c.arguments)}});
    }
    json m = Envelope();
    m["content"] = std::move(content);
    m["stop_reason"] = StopReason(result, !reply.calls.empty());
    m["stop_sequence"] = StopSequence(result);
    m["usage"] = Usage(result);
    return m;
  }

 private:
  // The open content block: none, thinking, text, or tool call `index`.
  enum class Block { kNone, kThinking, kText, kTool };

  json Envelope() const {
    return json{{"id", id_}, {"type", "message"}, {"role", "assistant"}, {"model", model_}};
  }

  static const char* StopReason(const SequenceResult& r, bool called) {
    if (r.finish_reason == FinishReason::kLength) return "max_tokens";
    if (called) return "tool_use";
    if (r.finish_reason == FinishReason::kStop) return "stop_sequence";
    return "end_turn";
  }

  json StopSequence(const SequenceResult& r) const {
    return r.finish_reason == FinishReason::kStop && !only_stop_.empty() ? json(only_stop_)
                                                                         : json();
  }

  static json Usage(const SequenceResult& r) {
    return json{{"input_tokens", r.stats.prompt_tokens},
                {"output_tokens", r.stats.completion_tokens},
                {"cache_creation_input_tokens", 0},
                {"cache_read_input_tokens", r.stats.cached_prompt_tokens}};
  }

  void StartBlock(Block kind, json block, std::string* out) {
    CloseBlock(out);
    block_ = kind;
    out->append(http_api::SseEvent("content_block_start", {{"type", "content_block_start"},
                                                          {"index", index_},
                                                          {"content_block", std::move(block)}}));
  }

  void CloseBlock(std::string* out) {
    FlushDelta(out);
    if (block_ == Block::kNone) return;
    out->append(http_api::SseEvent("content_block_stop",
                                   {{"type", "content_block_stop"}, {"index", index_}}));
    block_ = Block::kNone;
    ++index_;
  }

  // Consecutive pieces of one block go out as one delta per chunk.
  void FlushDelta(std::string* out) {
    if (pending_.empty()) return;
    json delta;
    switch (block_) {
      case Block::kThinking:
        delta = {{"type", "thinking_delta"}, {"thinking", pending_}};
        break;
      case Block::kText:
        delta = {{"type", "text_delta"}, {"text", pending_}};
        break;
      case Block::kTool:
        delta = {{"type", "input_json_delta"}, {"partial_json", pending_}};
        break;
      case Block::kNone:
        pending_.clear();
        return;
    }
    pending_.clear();
    out->append(http_api::SseEvent(
        "content_block_delta",
        {{"type", "content_block_delta"}, {"index", index_}, {"delta", std::move(delta)}}));
  }

  void StreamEvent(const ChatOutputEvent& e, std::string* out) {
    switch (e.type) {
      case ChatOutputEvent::Type::kReasoning:
        if (e.text.empty()) return;
        if (block_ != Block::kThinking) {
          StartBlock(Block::kThinking, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}},
                     out);
        }
        pending_ += e.text;
        return;
      case ChatOutputEvent::Type::kContent:
        if (e.text.empty()) return;
        if (block_ != Block::kText) StartBlock(Block::kText, {{"type", "text"}, {"text", ""}}, out);
        pending_ += e.text;
        return;
      case ChatOutputEvent::Type::kCallStart:
        StartBlock(Block::kTool,
                   {{"type", "tool_use"}, {"id", e.id}, {"name", e.name}, {"input", json::object()}},
                   out);
        return;
      case ChatOutputEvent::Type::kArguments:
        if (block_ == Block::kTool) pending_ += e.text;
        return;
    }
  }

  const std::string id_;
  const std::string model_;
  const int32_t prompt_tokens_;
  std::string only_stop_;
  std::unique_ptr<ChatOutputStream> stream_;
  // Streaming.
  bool started_ = false;
  bool called_ = false;
  Block block_ = Block::kNone;
  int index_ = 0;
  std::string pending_;
  // Non-streaming.
  std::vector<ChatOutputEvent> events_;
};

}  // namespace

http_api::ErrorReply ErrorFor(const absl::Status& status) {
  const openai::ApiError e = openai::ApiErrorFor(status);
  const char* type = "api_error";
  switch (e.http_status) {
    case 400:
      type = "invalid_request_error";
      break;
    case 401:
      type = "authentication_error";
      break;
    case 403:
      type = "permission_error";
      break;
    case 404:
      type = "not_found_error";
      break;
    case 413:
      type = "request_too_large";
      break;
    case 429:
      type = "rate_limit_error";
      break;
    case 503:
      type = "overloaded_error";
      break;
    default:
      break;
  }
  return {e.http_status,
          json{{"type", "error"}, {"error", {{"type", type}, {"message", e.message}}}}};
}

absl::StatusOr<http_api::ApiRequest> ParseMessagesRequest(const ojson& body) {
  if (!body.is_object()) return WrongType("body", "a JSON object", body);
  http_api::ApiRequest out;
  out.route = "/v1/messages";
  v1::GenerateRequest& g = out.generate;
  const ojson& model = Member(body, "model");
  if (model.is_null()) return FieldError("model", "model is required: a loaded model or alias");
  if (!model.is_string()) return WrongType("model", "a string", model);
  g.set_model(model.get<std::string>());

  ASSIGN_OR_RETURN(std::optional<int64_t> max_tokens,
                   http_api::OptInt(body, "max_tokens", "max_tokens"));
  if (!max_tokens.has_value()) return FieldError("max_tokens", "max_tokens is required");
  if (*max_tokens < 1) {
    return FieldError("max_tokens", absl::StrCat("max_tokens must be >= 1, got ", *max_tokens));
  }
  g.mutable_stopping()->set_max_tokens(static_cast<int32_t>(std::min<int64_t>(*max_tokens, INT32_MAX)));

  for (const char* f : {"mcp_servers", "container"}) {
    if (!Member(body, f).is_null()) {
      return FieldError(f, absl::StrCat(f, " is not supported by this server"));
    }
  }

  auto origins = std::make_shared<Origins>();
  v1::Chat* chat = g.mutable_chat();
  RETURN_IF_ERROR(ParseMessages(body, chat, origins.get()));
  RETURN_IF_ERROR(ParseTools(body, chat));

  const ojson& thinking = Member(body, "thinking");
  if (!thinking.is_null()) {
    if (!thinking.is_object()) return WrongType("thinking", "an object", thinking);
    ASSIGN_OR_RETURN(std::optional<std::string> type,
                     http_api::OptString(thinking, "type", "thinking.type"));
    if (type == "enabled") {
      ASSIGN_OR_RETURN(std::optional<int64_t> budget,
                       http_api::OptInt(thinking, "budget_tokens", "thinking.budget_tokens"));
      if (!budget.has_value() || *budget < 1) {
        return FieldError("thinking.budget_tokens",
                          "thinking.budget_tokens is required with type \"enabled\" (>= 1)");
      }
      if (*budget > std::numeric_limits<int32_t>::max()) {
        return FieldError("thinking.budget_tokens",
                          absl::StrCat("thinking.budget_tokens is too large: ", *budget));
      }
      (*chat->mutable_template_kwargs())["enable_thinking"] = "true";
      chat->set_reasoning_budget(static_cast<int32_t>(*budget));
    } else if (type == "disabled") {
      (*chat->mutable_template_kwargs())["enable_thinking"] = "false";
    } else {
      return FieldError("thinking.type", "thinking.type must be \"enabled\" or \"disabled\"");
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
    if (*temperature < 0 || *temperature > 1) {
      return FieldError("temperature",
                        absl::StrCat("temperature must be in [0, 1], got ", *temperature));
    }
    sp->set_temperature(static_cast<float>(*temperature));
  }
  ASSIGN_OR_RETURN(std::optional<double> top_p, http_api::OptNumber(body, "top_p", "top_p"));
  if (top_p.has_value()) {
    if (*top_p <= 0 || *top_p > 1) {
      return FieldError("top_p", absl::StrCat("top_p must be in (0, 1], got ", *top_p));
    }
    sp->set_top_p(static_cast<float>(*top_p));
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> top_k, http_api::OptInt(body, "top_k", "top_k"));
  if (top_k.has_value()) {
    if (*top_k < 0 || *top_k > INT32_MAX) {
      return FieldError("top_k", absl::StrCat("top_k must be >= 0, got ", *top_k));
    }
    sp->set_top_k(static_cast<int32_t>(*top_k));
  }
  const ojson& stops = Member(body, "stop_sequences");
  if (!stops.is_null()) {
    if (!stops.is_array()) return WrongType("stop_sequences", "an array of strings", stops);
    if (stops.size() > kMaxStopSequences) {
      return FieldError("stop_sequences", absl::StrCat("stop_sequences holds ", stops.size(),
                                                       " strings; at most ", kMaxStopSequences));
    }
    for (size_t i = 0; i < stops.size(); ++i) {
      const std::string f = absl::StrCat("stop_sequences[", i, "]");
      if (!stops[i].is_string()) return WrongType(f, "a string", stops[i]);
      if (stops[i].get<std::string>().empty()) return FieldError(f, f + " must not be empty");
      g.mutable_stopping()->add_stop(stops[i].get<std::string>());
    }
  }
  const ojson& metadata = Member(body, "metadata");
  if (!metadata.is_null() && !metadata.is_object()) {
    return WrongType("metadata", "an object", metadata);
  }

  // Tools, tool choice and history, checked once for every front door.
  if (absl::Status st = ValidateChatTools(*chat); !st.ok()) {
    return ApiFieldError(st, *origins);
  }
  out.error = [origins](const absl::Status& status) {
    return ErrorFor(ApiFieldError(status, *origins));
  };
  const v1::GenerateRequest request = g;
  out.reply = [request](const http_api::ReplyContext& ctx) -> std::unique_ptr<http_api::Reply> {
    return std::make_unique<MessageReply>(request, ctx);
  };
  return out;
}

}  // namespace minfer::daemon::anthropic
