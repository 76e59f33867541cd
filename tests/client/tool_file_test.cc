// minferctl's --tools files and --tool-choice values.
#include "client/tool_file.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace minfer::ctl {
namespace {

using ::testing::HasSubstr;

TEST(ToolFileTest, OpenAiAndMinferShapes) {
  auto tools = ParseToolsJson(R"([
      {"type": "function", "function": {"name": "get_weather", "description": "Weather.",
       "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                      "unit": {"enum": ["c", "f"]}}, "required": ["city"]},
       "strict": true}},
      {"name": "ping"},
      {"name": "add", "parameters": {"type": "object", "properties": {"b": {}, "a": {}}}}])");
  ASSERT_TRUE(tools.ok()) << tools.status();
  ASSERT_EQ(tools->size(), 3u);
  const v1::Tool& w = (*tools)[0];
  EXPECT_EQ(w.name(), "get_weather");
  EXPECT_EQ(w.description(), "Weather.");
  EXPECT_TRUE(w.strict());
  EXPECT_EQ(nlohmann::json::parse(w.parameters()),
            nlohmann::json::parse(R"({"type": "object", "properties": {"city": {"type":
                "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city"]})"));
  EXPECT_EQ((*tools)[1].name(), "ping");
  EXPECT_EQ((*tools)[1].parameters(), "");  // none: {} on the server
  EXPECT_FALSE((*tools)[1].strict());
  // Property order survives (a forced call's grammar follows it).
  EXPECT_EQ((*tools)[2].parameters(), R"({"type":"object","properties":{"b":{},"a":{}}})");
}

TEST(ToolFileTest, RequestBodyAndSingleTool) {
  auto body = ParseToolsJson(R"({"model": "x", "tools": [{"type": "function",
                                   "function": {"name": "a"}}, {"name": "b"}]})");
  ASSERT_TRUE(body.ok()) << body.status();
  ASSERT_EQ(body->size(), 2u);
  EXPECT_EQ((*body)[1].name(), "b");
  auto one = ParseToolsJson(R"({"name": "solo", "description": "d"})");
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].name(), "solo");
  auto empty = ParseToolsJson("[]");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(ToolFileTest, ErrorsNameThePlace) {
  auto msg = [](const char* json) {
    auto r = ParseToolsJson(json);
    EXPECT_FALSE(r.ok()) << json;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(r.status().message());
  };
  EXPECT_EQ(msg("[{"), "not valid JSON");
  EXPECT_THAT(msg("3"), HasSubstr("want a JSON array of tools"));
  EXPECT_EQ(msg(R"([{"name": "a"}, 7])"), "[1]: a tool is a JSON object");
  EXPECT_EQ(msg(R"([{"type": "function", "function": {"description": "x"}}])"),
            "[0].function.name: a string is required");
  EXPECT_EQ(msg(R"([{"type": "code", "function": {"name": "x"}}])"),
            "[0].type: only \"function\" tools are supported");
  EXPECT_EQ(msg(R"([{"name": "a", "parameters": "{}"}])"),
            "[0].parameters: not a JSON Schema object");
  EXPECT_EQ(msg(R"({"tools": [{"name": 1}]})"), "tools[0].name: a string is required");
  EXPECT_EQ(msg(R"([{"name": "a", "strict": "yes"}])"), "[0].strict: not a boolean");
}

TEST(ToolFileTest, ToolChoice) {
  auto c = ParseToolChoice("auto");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->mode(), v1::ToolChoice::TOOL_CHOICE_AUTO);
  EXPECT_EQ(ParseToolChoice("none")->mode(), v1::ToolChoice::TOOL_CHOICE_NONE);
  EXPECT_EQ(ParseToolChoice("required")->mode(), v1::ToolChoice::TOOL_CHOICE_REQUIRED);
  auto f = ParseToolChoice("get_weather");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->mode(), v1::ToolChoice::TOOL_CHOICE_FUNCTION);
  EXPECT_EQ(f->function(), "get_weather");
  EXPECT_FALSE(ParseToolChoice("").ok());
}

}  // namespace
}  // namespace minfer::ctl
