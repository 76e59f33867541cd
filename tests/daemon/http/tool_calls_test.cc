// Tool calls end to end over /v1/chat/completions: a daemon in this process
// serving two random-weight models — qwen3-tiny (Qwen3's real template:
// Hermes <tool_call>, <think>) and llama-tiny (Llama 3.2's: JSON calls) —
// driven by the official `openai` npm client (tool_client.mjs). Forced calls
// (tool_choice "required" and a named function) at temperature 1 must come
// back as tool_calls that parse and validate against their tool's
// parameters (ajv), plain and streamed; a tool history renders; bad tool
// input is a 400 naming the field.
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/daemon.h"
#include "engine/chat/tool_calls.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/daemon/test_util.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_models.h"

namespace minfer::daemon {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

constexpr char kModules[] = "third_party/npm/node_modules";

TEST(ToolCallsTest, ForcedCallsParseAndValidateThroughTheOpenAiClient) {
  ASSERT_TRUE(std::ifstream(absl::StrCat(kModules, "/openai/package.json")).good() &&
              std::ifstream(absl::StrCat(kModules, "/ajv/package.json")).good())
      << "npm packages missing: run scripts/install_deps.sh";
  auto qwen = minfer::testing::TestModelPath("qwen3-tiny", "q8_0", 1);
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  auto llama = minfer::testing::TestModelPath("llama-tiny", "q8_0", 1);
  ASSERT_TRUE(llama.ok()) << llama.status();
  DaemonConfig c = testing::TestConfig();
  c.http_listen = "127.0.0.1:0";
  c.default_n_ctx = 2048;
  c.default_parallel = 2;
  SlotConfig q;
  q.name = "q";
  q.path = *qwen;
  SlotConfig l;
  l.name = "l";
  l.path = *llama;
  c.models = {q, l};
  auto d = Daemon::Start(c);
  ASSERT_TRUE(d.ok()) << d.status();
  std::unique_ptr<Daemon> daemon = *std::move(d);
  auto client = testing::ClientFor(*daemon);
  for (const char* name : {"q", "l"}) {
    ASSERT_TRUE(testing::WaitFor(
        [&] {
          auto s = client->GetModelStatus(name);
          return s.ok() && s->state() == v1::MODEL_STATE_READY;
        },
        std::chrono::seconds(30)));
  }

  // gRPC takes the same tools on v1::Chat: a forced named call's text
  // parses as a Hermes call of that tool.
  for (uint64_t seed = 1; seed <= 2; ++seed) {
    v1::GenerateRequest r;
    r.set_model("q");
    v1::ChatMessage* m = r.mutable_chat()->add_messages();
    m->set_role("user");
    m->set_content("Ping?");
    v1::Tool* t = r.mutable_chat()->add_tools();
    t->set_name("ping");
    t = r.mutable_chat()->add_tools();
    t->set_name("add");
    t->set_parameters(R"({"type": "object", "properties": {"a": {"type": "integer",
        "minimum": 0, "maximum": 9}}, "required": ["a"]})");
    r.mutable_chat()->mutable_tool_choice()->set_mode(v1::ToolChoice::TOOL_CHOICE_FUNCTION);
    r.mutable_chat()->mutable_tool_choice()->set_function("add");
    r.mutable_chat()->set_parallel_tool_calls(false);
    r.mutable_sampling()->set_temperature(1);
    r.mutable_sampling()->set_seed(seed);
    r.mutable_stopping()->set_max_tokens(200);
    auto g = client->Generate(r);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(g->finish_reason, v1::FINISH_REASON_TOOL_CALLS) << g->text;
    auto parser = chat::MakeToolCallParser("hermes");
    ASSERT_TRUE(parser.ok());
    const chat::ParsedToolCalls calls = (*parser)->Parse(g->text);
    ASSERT_EQ(calls.calls.size(), 1u) << g->text;
    EXPECT_EQ(calls.calls[0].name, "add");
    const json args = json::parse(calls.calls[0].arguments);
    ASSERT_TRUE(args.contains("a")) << g->text;
    EXPECT_TRUE(args["a"].is_number_integer() && args["a"] >= 0 && args["a"] <= 9) << g->text;
  }

  auto run = minfer::testing::RunCommand(
      {"/usr/bin/env", "node", "tests/daemon/http/tool_client.mjs", kModules,
       absl::StrCat("http://", daemon->http_address())},
      std::chrono::seconds(300));
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->exit_code, 0) << run->err;
  const json out = json::parse(run->out, nullptr, false);
  ASSERT_FALSE(out.is_discarded()) << run->out;

  int calls = 0, parallel_replies = 0;
  for (const json& r : out["forced"]) {
    const std::string where = r.dump();
    // Every forced reply ends as calls (the grammar ends it; nothing runs
    // into max_tokens) with no content beside them.
    EXPECT_EQ(r["finish_reason"], "tool_calls") << where;
    EXPECT_TRUE(r["content"].is_null() || r["content"] == "") << where;
    ASSERT_GE(r["calls"].size(), 1u) << where;
    if (!r["parallel"].get<bool>()) EXPECT_EQ(r["calls"].size(), 1u) << where;
    parallel_replies += r["calls"].size() > 1;
    if (r["stream"].get<bool>()) EXPECT_TRUE(r["first_deltas_ok"].get<bool>()) << where;
    for (const json& call : r["calls"]) {
      ++calls;
      EXPECT_EQ(call["type"], "function") << where;
      EXPECT_THAT(call["id"].get<std::string>(), ::testing::StartsWith("call_")) << where;
      EXPECT_TRUE(call["known"].get<bool>()) << where;
      EXPECT_TRUE(call["parses"].get<bool>()) << where;
      EXPECT_TRUE(call["valid"].get<bool>()) << where;
      EXPECT_TRUE(call["matches_choice"].get<bool>()) << where;
    }
  }
  EXPECT_GE(calls, 16);
  std::printf("%d forced calls judged by ajv (%d replies with parallel calls)\n", calls,
              parallel_replies);

  EXPECT_EQ(out["history"]["finish_reason"], "length") << out["history"].dump();
  EXPECT_GT(out["history"]["prompt_tokens"].get<int>(), 100);

  struct Bad {
    const char* key;
    const char* param;
    const char* message;
  };
  for (const Bad& b : {Bad{"unknown_tool", "tool_choice", "'nope', which is not one of the tools"},
                       Bad{"no_name", "tools[0].function.name", "is required"},
                       Bad{"no_parameters", "tools[0].function.parameters", "is required"},
                       Bad{"no_tools", "tool_choice", "no tools are given"},
                       Bad{"history_args", "messages[1].tool_calls[0].function.arguments",
                           "is not JSON"},
                       Bad{"refused_schema", "tools[0].function.parameters", "propertyNames"},
                       Bad{"with_format", "tool_choice", "can not be combined with json_object"}}) {
    const json& e = out["bad"][b.key];
    EXPECT_TRUE(e["thrown"].get<bool>()) << b.key;
    EXPECT_EQ(e["status"], 400) << b.key << ": " << e.dump();
    EXPECT_EQ(e["param"], b.param) << b.key << ": " << e.dump();
    EXPECT_THAT(e["message"].get<std::string>(), HasSubstr(b.message)) << b.key;
  }
}

}  // namespace
}  // namespace minfer::daemon
