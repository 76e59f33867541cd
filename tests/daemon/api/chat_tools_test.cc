// Tools on the chat request model (daemon/api/chat_tools.h): validation
// naming the proto field, what the template is given, the forced-call
// grammar (random walks over a byte vocabulary always end in replies the
// family's parser reads as calls of the allowed tools with arguments that
// validate against the tool's schema, judged by engine/grammar's
// validator), and the reply stream chaining the <think> split and the call
// parser, the same in every split of the text.
#include "daemon/api/chat_tools.h"

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/field_error.h"
#include "engine/grammar/json_validate.h"
#include "engine/grammar/matcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace minfer::daemon {
namespace {

using ::testing::HasSubstr;
using ojson = nlohmann::ordered_json;

constexpr char kWeather[] = R"({"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 6},
    "days": {"type": "integer", "minimum": 1, "maximum": 7},
    "units": {"enum": ["C", "F"]}}, "required": ["city", "days"],
    "additionalProperties": false})";
constexpr char kClock[] = R"({"properties": {"zone": {"$ref": "#/$defs/zone"}},
    "required": ["zone"], "$defs": {"zone": {"enum": ["UTC", "CET"]}}})";

v1::Chat ToolChat() {
  v1::Chat c;
  c.add_messages()->set_role("user");
  c.mutable_messages(0)->set_content("hi");
  v1::Tool* w = c.add_tools();
  w->set_name("get_weather");
  w->set_description("Weather");
  w->set_parameters(kWeather);
  v1::Tool* k = c.add_tools();
  k->set_name("clock");
  k->set_parameters(kClock);
  v1::Tool* n = c.add_tools();
  n->set_name("ping");  // no parameters: {}
  return c;
}

absl::Status Check(const v1::Chat& c) { return ValidateChatTools(c); }

TEST(ChatToolsTest, ValidationNamesTheField) {
  EXPECT_TRUE(Check(ToolChat()).ok());
  struct Bad {
    std::function<void(v1::Chat*)> edit;
    std::string message;
  };
  const std::vector<Bad> bad = {
      {[](v1::Chat* c) { c->mutable_tools(1)->clear_name(); },
       "chat.tools[1].name: a tool needs a name"},
      {[](v1::Chat* c) { c->mutable_tools(1)->set_name("a b"); }, "chat.tools[1].name: 'a b'"},
      {[](v1::Chat* c) { c->mutable_tools(2)->set_name("clock"); },
       "chat.tools[2].name: a second tool named 'clock'"},
      {[](v1::Chat* c) { c->mutable_tools(0)->set_parameters("{"); },
       "chat.tools[0].parameters: must be a JSON Schema object"},
      {[](v1::Chat* c) { c->mutable_tools(0)->set_parameters(R"({"type": "string"})"); },
       "chat.tools[0].parameters: the arguments are an object"},
      {[](v1::Chat* c) {
         c->mutable_tool_choice()->set_mode(v1::ToolChoice::TOOL_CHOICE_FUNCTION);
         c->mutable_tool_choice()->set_function("nope");
       },
       "chat.tool_choice.function: 'nope' is not one of the tools"},
      {[](v1::Chat* c) {
         c->clear_tools();
         c->mutable_tool_choice()->set_mode(v1::ToolChoice::TOOL_CHOICE_REQUIRED);
       },
       "chat.tool_choice: required needs tools"},
      {[](v1::Chat* c) {
         v1::ChatMessage* m = c->add_messages();
         m->set_role("assistant");
         v1::ToolCall* call = m->add_tool_calls();
         call->set_name("clock");
         call->set_arguments("{\"zone\": ");
       },
       "chat.messages[1].tool_calls[0].arguments: is not JSON"},
      {[](v1::Chat* c) {
         v1::ChatMessage* m = c->add_messages();
         m->set_role("assistant");
         m->add_tool_calls()->set_arguments("{}");
       },
       "chat.messages[1].tool_calls[0].name: a tool call needs a name"},
      {[](v1::Chat* c) {
         v1::ToolCall* call = c->mutable_messages(0)->add_tool_calls();
         call->set_name("clock");
       },
       "chat.messages[0].tool_calls: only assistant messages make tool calls"},
      {[](v1::Chat* c) {
         v1::ChatMessage* m = c->add_messages();
         m->set_role("assistant");
         v1::ToolCall* call = m->add_tool_calls();
         call->set_name("clock");
         call->set_arguments("[1]");
       },
       "chat.messages[1].tool_calls[0].arguments: must be a JSON object"},
  };
  for (const Bad& b : bad) {
    v1::Chat c = ToolChat();
    b.edit(&c);
    absl::Status s = Check(c);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << b.message;
    EXPECT_THAT(std::string(s.message()), HasSubstr(b.message));
    // The field travels as data too (field_error.h): the path the message
    // starts with.
    EXPECT_EQ(FieldPath(s), b.message.substr(0, b.message.find(": "))) << s;
  }
}

TEST(ChatToolsTest, TemplateInputCarriesToolsAndHistory) {
  v1::Chat c = ToolChat();
  v1::ChatMessage* a = c.add_messages();
  a->set_role("assistant");
  a->set_reasoning_content("thought");
  v1::ToolCall* call = a->add_tool_calls();
  call->set_id("c1");
  call->set_name("clock");
  call->set_arguments(R"({"zone": "UTC"})");
  v1::ChatMessage* t = c.add_messages();
  t->set_role("tool");
  t->set_content("12:00");
  t->set_tool_call_id("c1");
  auto in = ChatTemplateInputOf(c);
  ASSERT_TRUE(in.ok()) << in.status();
  ASSERT_EQ(in->messages.size(), 3u);
  EXPECT_EQ(in->messages[1].reasoning_content, "thought");
  ASSERT_EQ(in->messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(in->messages[1].tool_calls[0].arguments, R"({"zone": "UTC"})");
  EXPECT_EQ(in->messages[2].tool_call_id, "c1");
  ASSERT_EQ(in->options.tools.size(), 3u);
  EXPECT_EQ(in->options.tools[0].description, "Weather");
  // tool_choice none: the model is not shown the tools.
  c.mutable_tool_choice()->set_mode(v1::ToolChoice::TOOL_CHOICE_NONE);
  in = ChatTemplateInputOf(c);
  ASSERT_TRUE(in.ok());
  EXPECT_TRUE(in->options.tools.empty());
  EXPECT_FALSE(ParsesToolCalls(c));
  EXPECT_FALSE(IsForcedToolChoice(c));
  // Tools as a template variable are refused: they belong in chat.tools.
  (*c.mutable_template_kwargs())["tools"] = "[]";
  EXPECT_FALSE(ChatTemplateInputOf(c).ok());
}

// Token 0 ends the generation; token 1 + b is the byte b.
std::shared_ptr<const grammar::Vocabulary> ByteVocab() {
  std::vector<std::string> toks = {""};
  for (int b = 0; b < 256; ++b) toks.push_back(std::string(1, static_cast<char>(b)));
  return grammar::Vocabulary::Create(toks, {0}, static_cast<int32_t>(toks.size()));
}

// A random walk through the grammar: each step a uniformly drawn allowed
// token (the end, once allowed, with probability 1/2), as a random-weight
// model at temperature 1 would, give or take the weights.
std::string Walk(const std::shared_ptr<const grammar::CompiledGrammar>& g, std::mt19937* rng) {
  grammar::GrammarMatcher m(g);
  std::vector<uint32_t> mask(g->vocab().mask_words());
  std::string out;
  for (int step = 0; step < 4000; ++step) {
    m.FillNextTokenBitmask(mask.data());
    std::vector<int32_t> allowed;
    for (int32_t id = 1; id < 257; ++id) {
      if (mask[id / 32] >> (id % 32) & 1) allowed.push_back(id);
    }
    const bool can_end = mask[0] & 1;
    if (allowed.empty() || (can_end && (*rng)() % 2 == 0)) break;
    const int32_t id = allowed[(*rng)() % allowed.size()];
    EXPECT_TRUE(m.AcceptToken(id).ok());
    out.push_back(static_cast<char>(id - 1));
  }
  EXPECT_TRUE(m.IsComplete()) << out;
  return out;
}

TEST(ChatToolsTest, ForcedCallsAlwaysParseAndValidate) {
  grammar::GrammarCompiler compiler(ByteVocab());
  std::mt19937 rng(7);
  struct Mode {
    std::string family;
    v1::ToolChoice::Mode choice;
    std::string function;
    bool parallel;
  };
  for (const Mode& mode : std::vector<Mode>{
           {"hermes", v1::ToolChoice::TOOL_CHOICE_REQUIRED, "", true},
           {"hermes", v1::ToolChoice::TOOL_CHOICE_REQUIRED, "", false},
           {"hermes", v1::ToolChoice::TOOL_CHOICE_FUNCTION, "clock", true},
           {"llama3_json", v1::ToolChoice::TOOL_CHOICE_REQUIRED, "", true},
           {"llama3_json", v1::ToolChoice::TOOL_CHOICE_FUNCTION, "get_weather", false}}) {
    v1::Chat c = ToolChat();
    c.mutable_tool_choice()->set_mode(mode.choice);
    c.mutable_tool_choice()->set_function(mode.function);
    c.set_parallel_tool_calls(mode.parallel);
    ASSERT_TRUE(ValidateChatTools(c).ok());
    auto g = ForcedToolCallGrammar(c, mode.family);
    ASSERT_TRUE(g.ok()) << g.status();
    auto compiled = compiler.CompileGrammar(*std::move(g), grammar::GrammarKind::kJsonSchema);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    auto parser = chat::MakeToolCallParser(mode.family);
    ASSERT_TRUE(parser.ok());
    int multi = 0;
    for (int i = 0; i < 60; ++i) {
      const std::string text = Walk(*compiled, &rng);
      const chat::ParsedToolCalls parsed = (*parser)->Parse(text);
      const std::string where = absl::StrCat(mode.family, " ", mode.function, ": ", text);
      EXPECT_EQ(parsed.content, "") << where;
      ASSERT_GE(parsed.calls.size(), 1u) << where;
      if (!mode.parallel) {
        EXPECT_EQ(parsed.calls.size(), 1u) << where;
      }
      multi += parsed.calls.size() > 1;
      for (const chat::ToolCall& call : parsed.calls) {
        if (!mode.function.empty()) {
          EXPECT_EQ(call.name, mode.function) << where;
        }
        int tool = -1;
        for (int t = 0; t < c.tools_size(); ++t) {
          if (c.tools(t).name() == call.name) tool = t;
        }
        ASSERT_GE(tool, 0) << where;
        const std::string schema =
            c.tools(tool).parameters().empty() ? R"({"type": "object", "maxProperties": 0})"
                                               : c.tools(tool).parameters();
        const ojson root = ojson::parse(schema);
        auto valid = grammar::ValidateInstance(root, root, ojson::parse(call.arguments));
        ASSERT_TRUE(valid.ok()) << valid.status();
        EXPECT_TRUE(*valid) << where;
      }
    }
    if (mode.family == "hermes" && mode.parallel) {
      EXPECT_GT(multi, 0) << "no parallel calls";
    }
  }
}

// Parallel forced calls are bounded: after kMaxForcedToolCalls calls the
// grammar allows no further "\n<tool_call>", only the end.
TEST(ChatToolsTest, ForcedParallelCallsStopAtTheCap) {
  grammar::GrammarCompiler compiler(ByteVocab());
  v1::Chat c = ToolChat();
  c.mutable_tool_choice()->set_mode(v1::ToolChoice::TOOL_CHOICE_FUNCTION);
  c.mutable_tool_choice()->set_function("ping");
  c.set_parallel_tool_calls(true);
  auto g = ForcedToolCallGrammar(c, "hermes");
  ASSERT_TRUE(g.ok()) << g.status();
  auto compiled = compiler.CompileGrammar(*std::move(g), grammar::GrammarKind::kJsonSchema);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  grammar::GrammarMatcher m(*compiled);
  std::vector<uint32_t> mask((*compiled)->vocab().mask_words());
  auto accept = [&](const std::string& text) {
    for (char ch : text) {
      const int32_t id = 1 + static_cast<unsigned char>(ch);
      ASSERT_TRUE(m.AcceptToken(id).ok()) << "at '" << ch << "' of " << text;
    }
  };
  const int32_t newline = 1 + '\n';
  const std::string call = R"(<tool_call>
{"name": "ping", "arguments": {}}
</tool_call>)";
  for (int k = 1; k <= kMaxForcedToolCalls; ++k) {
    if (k > 1) accept("\n");
    accept(call);
    EXPECT_TRUE(m.IsComplete()) << k << " calls";
    m.FillNextTokenBitmask(mask.data());
    const bool more = mask[newline / 32] >> (newline % 32) & 1;
    EXPECT_EQ(more, k < kMaxForcedToolCalls) << k << " calls";
    EXPECT_TRUE(mask[0] & 1) << "the end is allowed after " << k << " calls";
  }
  EXPECT_FALSE(m.AcceptToken(newline).ok());
}

TEST(ChatToolsTest, ForcedGrammarErrorsNameTheTool) {
  v1::Chat c = ToolChat();
  c.mutable_tool_choice()->set_mode(v1::ToolChoice::TOOL_CHOICE_REQUIRED);
  c.mutable_tools(1)->set_parameters(R"({"type": "object", "propertyNames": {"maxLength": 3}})");
  auto g = ForcedToolCallGrammar(c, "hermes");
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("chat.tools[1].parameters: "));
  EXPECT_EQ(FieldPath(g.status()), "chat.tools[1].parameters");
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("propertyNames"));
  // A named choice compiles only its tool: the bad one is not reached.
  c.mutable_tool_choice()->set_mode(v1::ToolChoice::TOOL_CHOICE_FUNCTION);
  c.mutable_tool_choice()->set_function("ping");
  EXPECT_TRUE(ForcedToolCallGrammar(c, "hermes").ok());
  EXPECT_FALSE(ForcedToolCallGrammar(c, "unknown").ok());
}

std::vector<ChatOutputEvent> Stream(const ChatOutputOptions& o, const std::vector<std::string>& parts) {
  auto s = ChatOutputStream::Create(o, [](int i) { return absl::StrCat("id", i); });
  EXPECT_TRUE(s.ok());
  std::vector<ChatOutputEvent> all;
  for (const std::string& p : parts) {
    for (ChatOutputEvent& e : (*s)->Feed(p)) all.push_back(std::move(e));
  }
  for (ChatOutputEvent& e : (*s)->Finish()) all.push_back(std::move(e));
  return all;
}

TEST(ChatToolsTest, OutputStreamSplitsReasoningContentAndCalls) {
  ChatOutputOptions o;
  o.tool_family = "hermes";
  const std::string text =
      "<think>\nI should call.\n<tool_call>not here</tool_call>\n</think>\n\nLet me check.\n"
      "<tool_call>\n{\"name\": \"clock\", \"arguments\": {\"zone\": \"UTC\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"ping\"}\n</tool_call>";
  const ChatOutput whole = CollectChatOutput(Stream(o, {text}));
  EXPECT_EQ(whole.reasoning, "I should call.\n<tool_call>not here</tool_call>");
  EXPECT_EQ(whole.content, "Let me check.");
  ASSERT_EQ(whole.calls.size(), 2u);
  EXPECT_EQ(whole.calls[0].id, "id0");
  EXPECT_EQ(whole.calls[0].name, "clock");
  EXPECT_EQ(whole.calls[0].arguments, R"({"zone":"UTC"})");
  EXPECT_EQ(whole.calls[1].name, "ping");
  EXPECT_EQ(whole.calls[1].arguments, "{}");
  for (size_t i = 0; i <= text.size(); ++i) {
    for (size_t j = i; j <= text.size(); j += 7) {
      const ChatOutput split = CollectChatOutput(
          Stream(o, {text.substr(0, i), text.substr(i, j - i), text.substr(j)}));
      ASSERT_EQ(split.reasoning, whole.reasoning) << i << " " << j;
      ASSERT_EQ(split.content, whole.content) << i << " " << j;
      ASSERT_EQ(split.calls.size(), 2u);
      ASSERT_EQ(split.calls[0].arguments, whole.calls[0].arguments);
    }
  }
  // No family: calls stay content; no reasoning: think tags stay content.
  ChatOutputOptions plain;
  plain.reasoning.enabled = false;
  const ChatOutput p = CollectChatOutput(Stream(plain, {text}));
  EXPECT_EQ(p.content, text);
  EXPECT_TRUE(p.calls.empty());
  // A malformed call is content.
  const ChatOutput bad = CollectChatOutput(Stream(o, {"<tool_call>\n{\"name\": 3}\n</tool_call>"}));
  EXPECT_TRUE(bad.calls.empty());
  EXPECT_EQ(bad.content, "<tool_call>\n{\"name\": 3}\n</tool_call>");
}

}  // namespace
}  // namespace minfer::daemon
