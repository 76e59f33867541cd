#include "daemon/api/chat_tools.h"

#include <functional>
#include <random>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "daemon/api/chat_options.h"
#include "engine/base/field_error.h"
#include "engine/base/status.h"
#include "nlohmann/json.hpp"

namespace minfer::daemon {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// The field as data (field_error.h): each API names it its own way.
absl::Status Invalid(const std::string& field, absl::string_view message) {
  return InvalidField(field, message);
}

bool ValidToolName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxToolNameBytes) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') {
      return false;
    }
  }
  return true;
}

// Arguments: empty, or the JSON text of an object.
absl::Status CheckArguments(const std::string& field, const std::string& text) {
  if (text.empty()) return absl::OkStatus();
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Invalid(field, "is not JSON");
  if (!j.is_object()) return Invalid(field, "must be a JSON object");
  return absl::OkStatus();
}

// The schema a tool's arguments are generated from: its parameters, typed
// "object" where they leave the type out; {} (no properties, no others)
// when it has none.
absl::StatusOr<std::string> ArgumentsSchema(const v1::Tool& tool, const std::string& field) {
  if (tool.parameters().empty()) {
    return std::string(R"({"type": "object", "properties": {}, "additionalProperties": false})");
  }
  ojson j = ojson::parse(tool.parameters(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Invalid(field, "must be a JSON Schema object");
  if (!j.contains("type")) j["type"] = "object";
  return j.dump();
}

// Copies `g`'s rules into `b`; returns the id its root has there.
grammar::RuleId Graft(const grammar::Grammar& g, absl::string_view prefix,
                      grammar::GrammarBuilder* b) {
  std::vector<grammar::RuleId> rules(g.rules().size());
  for (size_t r = 0; r < g.rules().size(); ++r) {
    rules[r] = b->Declare(absl::StrCat(prefix, g.rules()[r].name));
    if (g.rules()[r].no_inline) b->NoInline(rules[r]);
  }
  std::vector<grammar::ExprId> done(g.exprs().size(), -1);
  // Memoized: an expression shared by several parents is copied once.
  std::function<grammar::ExprId(grammar::ExprId)> copy = [&](grammar::ExprId i) {
    if (done[i] >= 0) return done[i];
    const grammar::Expr& e = g.exprs()[i];
    std::vector<grammar::ExprId> kids;
    for (grammar::ExprId c : e.children) kids.push_back(copy(c));
    grammar::ExprId out = -1;
    switch (e.kind) {
      case grammar::ExprKind::kEmpty:
        out = b->Empty();
        break;
      case grammar::ExprKind::kNothing:
        out = b->Nothing();
        break;
      case grammar::ExprKind::kBytes:
        out = b->Bytes(e.bytes);
        break;
      case grammar::ExprKind::kLiteral:
        out = b->Literal(e.literal);
        break;
      case grammar::ExprKind::kRef:
        out = b->Ref(rules[e.rule]);
        break;
      case grammar::ExprKind::kSeq:
        out = b->Seq(std::move(kids));
        break;
      case grammar::ExprKind::kAlt:
        out = b->Alt(std::move(kids));
        break;
      case grammar::ExprKind::kRepeat:
        out = b->Repeat(kids[0], e.min, e.max);
        break;
    }
    done[i] = out;
    return out;
  };
  for (size_t r = 0; r < g.rules().size(); ++r) copy(g.rules()[r].body);
  for (size_t r = 0; r < g.rules().size(); ++r) b->Define(rules[r], copy(g.rules()[r].body));
  return rules[g.root()];
}

}  // namespace

absl::Status ValidateChatTools(const v1::Chat& chat) {
  if (static_cast<size_t>(chat.tools_size()) > kMaxTools) {
    return Invalid("chat.tools", absl::StrCat(chat.tools_size(), " tools, at most ", kMaxTools));
  }
  absl::flat_hash_set<std::string> names;
  for (int i = 0; i < chat.tools_size(); ++i) {
    const v1::Tool& t = chat.tools(i);
    const std::string f = absl::StrCat("chat.tools[", i, "]");
    if (t.name().empty()) return Invalid(f + ".name", "a tool needs a name");
    if (!ValidToolName(t.name())) {
      return Invalid(f + ".name", absl::StrCat("'", t.name().substr(0, 80),
                                               "' is not 1 to 64 letters, digits, '_', '-' or '.'"));
    }
    if (!names.insert(t.name()).second) {
      return Invalid(f + ".name", absl::StrCat("a second tool named '", t.name(), "'"));
    }
    if (!t.parameters().empty()) {
      const json j = json::parse(t.parameters(), nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object()) {
        return Invalid(f + ".parameters", "must be a JSON Schema object");
      }
      if (j.contains("type") && j["type"] != "object") {
        return Invalid(f + ".parameters",
                       absl::StrCat("the arguments are an object: \"type\" must be \"object\", got ",
                                    j["type"].dump()));
      }
    }
  }
  const v1::ToolChoice& choice = chat.tool_choice();
  switch (choice.mode()) {
    case v1::ToolChoice::TOOL_CHOICE_REQUIRED:
      if (chat.tools().empty()) return Invalid("chat.tool_choice", "required needs tools");
      break;
    case v1::ToolChoice::TOOL_CHOICE_FUNCTION:
      if (chat.tools().empty()) {
        return Invalid("chat.tool_choice",
                       absl::StrCat("names function '", choice.function(), "' but no tools are given"));
      }
      if (!names.contains(choice.function())) {
        return Invalid("chat.tool_choice.function",
                       absl::StrCat("'", choice.function(), "' is not one of the tools"));
      }
      break;
    case v1::ToolChoice::TOOL_CHOICE_AUTO:
    case v1::ToolChoice::TOOL_CHOICE_NONE:
      if (!choice.function().empty()) {
        return Invalid("chat.tool_choice.function", "only with TOOL_CHOICE_FUNCTION");
      }
      break;
    default:
      return Invalid("chat.tool_choice.mode", absl::StrCat("unknown mode ", choice.mode()));
  }
  for (int i = 0; i < chat.messages_size(); ++i) {
    const v1::ChatMessage& m = chat.messages(i);
    const std::string f = absl::StrCat("chat.messages[", i, "]");
    if (m.tool_calls().empty()) continue;
    if (m.role() != "assistant") {
      return Invalid(f + ".tool_calls", "only assistant messages make tool calls");
    }
    for (int j = 0; j < m.tool_calls_size(); ++j) {
      const v1::ToolCall& c = m.tool_calls(j);
      const std::string cf = absl::StrCat(f, ".tool_calls[", j, "]");
      if (c.name().empty()) return Invalid(cf + ".name", "a tool call needs a name");
      if (absl::Status s = CheckArguments(cf + ".arguments", c.arguments()); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

std::vector<tokenizer::ChatMessage> ChatMessages(const v1::Chat& chat) {
  std::vector<tokenizer::ChatMessage> out;
  out.reserve(chat.messages_size());
  for (const v1::ChatMessage& m : chat.messages()) {
    tokenizer::ChatMessage c{m.role(), m.content()};
    for (const v1::ToolCall& call : m.tool_calls()) {
      c.tool_calls.push_back({call.id(), call.name(), call.arguments()});
    }
    c.reasoning_content = m.reasoning_content();
    c.tool_call_id = m.tool_call_id();
    c.name = m.name();
    out.push_back(std::move(c));
  }
  return out;
}

absl::StatusOr<ChatTemplateInput> ChatTemplateInputOf(const v1::Chat& chat) {
  RETURN_IF_ERROR(ValidateChatTools(chat));
  ChatTemplateInput in;
  ASSIGN_OR_RETURN(in.options, ChatTemplateOptionsOf(chat));
  in.options.tools = TemplateTools(chat);
  in.messages = ChatMessages(chat);
  return in;
}

std::vector<tokenizer::ChatTool> TemplateTools(const v1::Chat& chat) {
  std::vector<tokenizer::ChatTool> out;
  if (chat.tool_choice().mode() == v1::ToolChoice::TOOL_CHOICE_NONE) return out;
  out.reserve(chat.tools_size());
  for (const v1::Tool& t : chat.tools()) out.push_back({t.name(), t.description(), t.parameters()});
  return out;
}

bool IsForcedToolChoice(const v1::Chat& chat) {
  const auto mode = chat.tool_choice().mode();
  return !chat.tools().empty() && (mode == v1::ToolChoice::TOOL_CHOICE_REQUIRED ||
                                   mode == v1::ToolChoice::TOOL_CHOICE_FUNCTION);
}

bool ParsesToolCalls(const v1::Chat& chat) {
  return !chat.tools().empty() && chat.tool_choice().mode() != v1::ToolChoice::TOOL_CHOICE_NONE;
}

std::string ToolCallFamilyOf(const tokenizer::Tokenizer& tok, const ChatParsers& parsers) {
  if (parsers.tool == "none") return "";
  if (!parsers.tool.empty()) return parsers.tool;
  const absl::StatusOr<tokenizer::ChatTemplate>& t = tok.chat_template();
  if (!t.ok()) return "";
  const absl::string_view family = chat::ToolCallFamilyForTemplate(t->source());
  if (!family.empty()) return std::string(family);
  return t->is_chatml() ? "hermes" : "";
}

namespace {

// The calls grammar: forced (ForcedToolCallGrammar) or, with `strict_auto`,
// what follows the trigger in auto mode (StrictToolCallGrammar): every tool,
// a strict one's arguments by its schema, another's any JSON object.
absl::StatusOr<grammar::Grammar> CallsGrammar(const v1::Chat& chat, absl::string_view family,
                                              const grammar::JsonOptions& json, bool strict_auto) {
  if (family != "hermes" && family != "llama3_json") {
    return Invalid(strict_auto ? "chat.tools" : "chat.tool_choice",
                   absl::StrCat(strict_auto ? "strict tools need " : "",
                                "the model's tool-call syntax ('", family,
                                "') has no constrained form (hermes and llama3_json have)"));
  }
  const bool hermes = family == "hermes";
  const bool named =
      !strict_auto && chat.tool_choice().mode() == v1::ToolChoice::TOOL_CHOICE_FUNCTION;
  grammar::GrammarBuilder b(json.limits);
  std::vector<grammar::ExprId> calls;
  for (int i = 0; i < chat.tools_size(); ++i) {
    const v1::Tool& t = chat.tools(i);
    if (named && t.name() != chat.tool_choice().function()) continue;
    const std::string field = absl::StrCat("chat.tools[", i, "].parameters");
    absl::StatusOr<std::string> schema = ArgumentsSchema(t, field);
    if (!schema.ok()) return schema.status();
    absl::StatusOr<grammar::Grammar> args = strict_auto && !t.strict()
                                                ? grammar::JsonObjectGrammar(json)
                                                : grammar::JsonSchemaToGrammar(*schema, json);
    if (!args.ok()) {
      return FieldErrorWithCode(args.status().code(), field, args.status().message());
    }
    const grammar::RuleId root = Graft(*args, absl::StrCat("t", i, "_"), &b);
    // The name is a JSON string; ValidateChatTools allows no byte that
    // needs escaping in it.
    calls.push_back(b.Seq({b.Literal(absl::StrCat(hermes ? "<tool_call>\n" : "", "{\"name\": \"",
                                                  t.name(), "\", \"",
                                                  hermes ? "arguments" : "parameters", "\": ")),
                           b.Ref(root), b.Literal(hermes ? "}\n</tool_call>" : "}")}));
  }
  if (calls.empty()) {
    return Invalid("chat.tool_choice", "no tool to call");
  }
  const grammar::ExprId call = b.AddRule("call", b.Alt(std::move(calls)));
  grammar::ExprId body = b.Ref(call);
  const bool parallel = !chat.has_parallel_tool_calls() || chat.parallel_tool_calls();
  if (hermes && parallel) {
    // 1 to kMaxForcedToolCalls calls: the bound ends a reply that would
    // otherwise only stop at max_tokens.
    body = b.Seq({body, b.Repeat(b.Seq({b.Literal("\n"), b.Ref(call)}), 0,
                                 kMaxForcedToolCalls - 1)});
  }
  const grammar::RuleId root = b.AddRule("root", body);
  absl::StatusOr<grammar::Grammar> g = std::move(b).Build(root);
  if (!g.ok()) {
    return FieldErrorWithCode(g.status().code(), "chat.tools",
                              absl::StrCat("the forced call grammar: ", g.status().message()));
  }
  return g;
}

}  // namespace

absl::StatusOr<grammar::Grammar> ForcedToolCallGrammar(const v1::Chat& chat,
                                                       absl::string_view family,
                                                       const grammar::JsonOptions& json) {
  return CallsGrammar(chat, family, json, /*strict_auto=*/false);
}

grammar::JsonOptions ToolArgumentsJsonOptions() {
  grammar::JsonOptions o;
  o.max_whitespace = kToolArgumentsMaxWhitespace;
  return o;
}

bool HasStrictAutoTools(const v1::Chat& chat) {
  if (!ParsesToolCalls(chat) || IsForcedToolChoice(chat)) return false;
  for (const v1::Tool& t : chat.tools()) {
    if (t.strict()) return true;
  }
  return false;
}

absl::StatusOr<grammar::Grammar> StrictToolCallGrammar(const v1::Chat& chat,
                                                       absl::string_view family,
                                                       const grammar::JsonOptions& json) {
  return CallsGrammar(chat, family, json, /*strict_auto=*/true);
}

std::string ToolCallTrigger(absl::string_view family) {
  if (family == "hermes") return "<tool_call>";
  if (family == "llama3_json") return "{\"name\": \"";
  return "";
}

bool IsHarmonyChat(const tokenizer::Tokenizer& tok, const ChatParsers& parsers) {
  const absl::StatusOr<tokenizer::ChatTemplate>& t = tok.chat_template();
  return parsers.reasoning != "none" && t.ok() && absl::StrContains(t->source(), "<|channel|>") &&
         absl::StrContains(t->source(), "<|message|>");
}

ChatOutputOptions ChatOutputOptionsFor(const v1::Chat& chat, const tokenizer::Tokenizer& tok,
                                       const ChatParsers& parsers) {
  ChatOutputOptions o;
  if (ParsesToolCalls(chat)) o.tool_family = ToolCallFamilyOf(tok, parsers);
  const absl::StatusOr<tokenizer::ChatTemplate>& t = tok.chat_template();
  if (parsers.reasoning == "none") {
    o.reasoning.enabled = false;
  } else if (!parsers.reasoning.empty()) {
    // "qwen3", the one named parser: ReasoningOptions' default tags.
    o.reasoning.enabled = true;
  } else {
    o.reasoning.enabled = t.ok() && absl::StrContains(t->source(), o.reasoning.start_tag) &&
                          absl::StrContains(t->source(), o.reasoning.end_tag);
  }
  // Harmony (gpt-oss): the channels say what is reasoning, content or a
  // call, whatever the template's other words.
  if (IsHarmonyChat(tok, parsers)) {
    o.harmony = true;
    o.harmony_calls = ParsesToolCalls(chat);
    o.tool_family.clear();
    o.reasoning.enabled = false;
    return o;
  }
  if (o.reasoning.enabled) {
    // A template that opens the think block in the generation prompt
    // (Qwen3-Thinking, DeepSeek-R1): the reply starts inside it.
    absl::StatusOr<ChatTemplateInput> in = ChatTemplateInputOf(chat);
    if (in.ok()) {
      absl::StatusOr<std::string> prompt =
          tok.RenderChat(in->messages, /*add_generation_prompt=*/true, in->options);
      o.reasoning.starts_open =
          prompt.ok() && absl::EndsWith(absl::StripTrailingAsciiWhitespace(*prompt),
                                        o.reasoning.start_tag);
    }
  }
  return o;
}

std::string NewToolCallId() {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id.push_back(kAlphabet[rng() % (sizeof(kAlphabet) - 1)]);
  return id;
}

absl::StatusOr<std::unique_ptr<ChatOutputStream>> ChatOutputStream::Create(
    const ChatOutputOptions& options, chat::ToolCallIdFn ids) {
  std::unique_ptr<ChatOutputStream> s(new ChatOutputStream());
  if (options.harmony) {
    if (ids == nullptr) ids = [](int) { return NewToolCallId(); };
    s->harmony_ = std::make_unique<chat::HarmonyStream>(options.harmony_calls, std::move(ids));
    return s;
  }
  if (options.reasoning.enabled) s->reasoning_ = std::make_unique<chat::ReasoningStream>(options.reasoning);
  if (!options.tool_family.empty()) {
    absl::StatusOr<std::unique_ptr<chat::ToolCallParser>> parser =
        chat::MakeToolCallParser(options.tool_family);
    if (!parser.ok()) return parser.status();
    if (ids == nullptr) ids = [](int) { return NewToolCallId(); };
    s->calls_ = (*parser)->NewStream(std::move(ids));
  }
  return s;
}

std::unique_ptr<ChatOutputStream> ChatOutputStream::CreateOrContent(ChatOutputOptions* options,
                                                                   chat::ToolCallIdFn ids) {
  absl::StatusOr<std::unique_ptr<ChatOutputStream>> s = Create(*options, ids);
  if (s.ok()) return *std::move(s);
  *options = ChatOutputOptions();
  options->reasoning.enabled = false;
  // No family and no split: nothing here can fail.
  return std::unique_ptr<ChatOutputStream>(new ChatOutputStream());
}

namespace {

// A parser's event as a ChatOutputEvent: the parsers' event types have the
// same fields, and `type` is theirs mapped.
template <class Event>
void AppendEvent(ChatOutputEvent::Type type, Event& e, std::vector<ChatOutputEvent>* out) {
  ChatOutputEvent o;
  o.type = type;
  o.text = std::move(e.text);
  o.index = e.index;
  o.id = std::move(e.id);
  o.name = std::move(e.name);
  out->push_back(std::move(o));
}

}  // namespace

void ChatOutputStream::Content(std::vector<chat::ToolCallEvent> events,
                               std::vector<ChatOutputEvent>* out) {
  using T = chat::ToolCallEvent::Type;
  for (chat::ToolCallEvent& e : events) {
    AppendEvent(e.type == T::kCallStart  ? ChatOutputEvent::Type::kCallStart
                : e.type == T::kArguments ? ChatOutputEvent::Type::kArguments
                                          : ChatOutputEvent::Type::kContent,
                e, out);
  }
}

void ChatOutputStream::Route(std::vector<chat::ReasoningEvent> events,
                             std::vector<ChatOutputEvent>* out) {
  for (chat::ReasoningEvent& e : events) {
    if (e.type == chat::ReasoningEvent::Type::kReasoning) {
      out->push_back({ChatOutputEvent::Type::kReasoning, std::move(e.text)});
    } else if (calls_ != nullptr) {
      Content(calls_->Feed(e.text), out);
    } else {
      out->push_back({ChatOutputEvent::Type::kContent, std::move(e.text)});
    }
  }
}

void ChatOutputStream::Harmony(std::vector<chat::HarmonyEvent> events,
                               std::vector<ChatOutputEvent>* out) {
  using T = chat::HarmonyEvent::Type;
  for (chat::HarmonyEvent& e : events) {
    AppendEvent(e.type == T::kReasoning   ? ChatOutputEvent::Type::kReasoning
                : e.type == T::kCallStart ? ChatOutputEvent::Type::kCallStart
                : e.type == T::kArguments ? ChatOutputEvent::Type::kArguments
                                          : ChatOutputEvent::Type::kContent,
                e, out);
  }
}

std::vector<ChatOutputEvent> ChatOutputStream::Feed(absl::string_view delta) {
  std::vector<ChatOutputEvent> out;
  if (harmony_ != nullptr) {
    Harmony(harmony_->Feed(delta), &out);
  } else if (reasoning_ != nullptr) {
    Route(reasoning_->Feed(delta), &out);
  } else if (calls_ != nullptr) {
    Content(calls_->Feed(delta), &out);
  } else if (!delta.empty()) {
    out.push_back({ChatOutputEvent::Type::kContent, std::string(delta)});
  }
  return out;
}

std::vector<ChatOutputEvent> ChatOutputStream::Finish() {
  std::vector<ChatOutputEvent> out;
  if (harmony_ != nullptr) Harmony(harmony_->Finish(), &out);
  if (reasoning_ != nullptr) Route(reasoning_->Finish(), &out);
  if (calls_ != nullptr) Content(calls_->Finish(), &out);
  return out;
}

ChatOutput CollectChatOutput(const std::vector<ChatOutputEvent>& events) {
  ChatOutput out;
  for (const ChatOutputEvent& e : events) {
    switch (e.type) {
      case ChatOutputEvent::Type::kReasoning:
        out.reasoning += e.text;
        break;
      case ChatOutputEvent::Type::kContent:
        out.content += e.text;
        break;
      case ChatOutputEvent::Type::kCallStart:
        out.calls.push_back({e.id, e.name, ""});
        break;
      case ChatOutputEvent::Type::kArguments:
        if (e.index >= 0 && static_cast<size_t>(e.index) < out.calls.size()) {
          out.calls[e.index].arguments += e.text;
        }
        break;
    }
  }
  return out;
}

}  // namespace minfer::daemon
