// The agents' APIs end to end: a daemon in this process serving a
// random-weight Qwen3 model (its real template: Hermes <tool_call>,
// <think>) to the official clients agents use (agent_client.mjs):
// Anthropic's SDK on /v1/messages, the openai client's Responses API, and
// a Vercel AI SDK tool loop. Forced calls at temperature 1 must come
// back as tool_use blocks whose input validates against the tool's
// input_schema (ajv), plain and streamed (the SDK's MessageStream folds the
// events); bad input is a 400 naming it, its neighbour still served; keys
// work as x-api-key, and a tenant may use only its models.
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/daemon.h"
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
using ::testing::StartsWith;

constexpr char kModules[] = "third_party/npm/node_modules";

class AgentApisTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (const char* p : {"@anthropic-ai/sdk", "openai", "ai", "@ai-sdk/openai-compatible", "ajv"}) {
      if (!std::ifstream(absl::StrCat(kModules, "/", p, "/package.json")).good()) {
        missing_ = absl::StrCat("npm package ", p, " missing: run scripts/install_deps.sh");
        return;
      }
    }
    auto qwen = minfer::testing::TestModelPath("qwen3-tiny", "q8_0", 1);
    if (!qwen.ok()) {
      missing_ = std::string(qwen.status().message());
      return;
    }
    DaemonConfig c = testing::TestConfig();
    c.http_listen = "127.0.0.1:0";
    c.default_n_ctx = 2048;
    c.default_parallel = 2;
    TenantConfig a, b;
    a.name = "a";
    a.api_keys = {"key-a"};
    a.models = {"q"};
    b.name = "b";
    b.api_keys = {"key-b"};
    b.models = {"elsewhere"};
    c.tenants = {a, b};
    SlotConfig q;
    q.name = "q";
    q.path = *qwen;
    c.models = {q};
    auto d = Daemon::Start(c);
    if (!d.ok()) {
      missing_ = std::string(d.status().message());
      return;
    }
    daemon_ = d->release();
    auto client = testing::ClientFor(*daemon_);
    const bool ready = testing::WaitFor(
        [&] {
          auto s = client->GetModelStatus("q");
          return s.ok() && s->state() == v1::MODEL_STATE_READY;
        },
        std::chrono::seconds(30));
    if (!ready) {
      missing_ = "model q did not become ready";
      return;
    }
    auto run = minfer::testing::RunCommand(
        {"/usr/bin/env", "node", "tests/daemon/http/agent_client.mjs", kModules,
         absl::StrCat("http://", daemon_->http_address())},
        std::chrono::seconds(400));
    if (!run.ok()) {
      missing_ = std::string(run.status().message());
      return;
    }
    if (run->exit_code != 0) {
      missing_ = absl::StrCat("agent_client.mjs failed: ", run->err);
      return;
    }
    out_ = new json(json::parse(run->out, nullptr, false));
    if (out_->is_discarded()) missing_ = absl::StrCat("not JSON: ", run->out);
  }
  static void TearDownTestSuite() {
    delete daemon_;
    delete out_;
  }
  void SetUp() override { ASSERT_TRUE(missing_.empty()) << missing_; }

  static inline Daemon* daemon_ = nullptr;
  static inline json* out_ = nullptr;
  static inline std::string missing_;
};

void ExpectBad(const json& e, int status, const char* type, const char* field,
               const char* message) {
  EXPECT_TRUE(e["thrown"].get<bool>()) << e.dump();
  EXPECT_EQ(e["status"], status) << e.dump();
  EXPECT_EQ(e["body"]["type"], "error") << e.dump();
  EXPECT_EQ(e["body"]["error"]["type"], type) << e.dump();
  const std::string m = e["body"]["error"]["message"].get<std::string>();
  EXPECT_THAT(m, HasSubstr(field)) << e.dump();
  EXPECT_THAT(m, HasSubstr(message)) << e.dump();
}

TEST_F(AgentApisTest, AnthropicForcedToolUseValidates) {
  const json& a = (*out_)["anthropic"];
  int calls = 0;
  for (const json& r : a["forced"]) {
    const std::string where = r.dump();
    // With parallel use on, the grammar allows another call after each
    // one, and a random model may keep choosing one until max_tokens: the
    // complete calls are still calls, and only the unfinished last one is
    // text. One call (parallel off) always ends by itself.
    const bool cut = r["parallel"].get<bool>() && r["stop_reason"] == "max_tokens";
    if (!cut) EXPECT_EQ(r["stop_reason"], "tool_use") << where;
    EXPECT_EQ(r["type"], "message") << where;
    EXPECT_EQ(r["role"], "assistant") << where;
    EXPECT_THAT(r["id"].get<std::string>(), StartsWith("msg_")) << where;
    EXPECT_TRUE(r["usage_ok"].get<bool>()) << where;
    if (cut) {
      EXPECT_THAT(r["text"].get<std::string>(), StartsWith("<tool_call>")) << where;
    } else {
      EXPECT_EQ(r["text"], "") << where;
    }
    ASSERT_GE(r["calls"].size(), 1u) << where;
    for (const json& c : r["calls"]) {
      ++calls;
      EXPECT_THAT(c["id"].get<std::string>(), StartsWith("toolu_")) << where;
      EXPECT_TRUE(c["input_is_object"].get<bool>()) << where;
      EXPECT_TRUE(c["known"].get<bool>()) << where;
      EXPECT_TRUE(c["valid"].get<bool>()) << where;
      EXPECT_TRUE(c["matches_choice"].get<bool>()) << where;
    }
    if (r["stream"].get<bool>()) {
      // Anthropic's event order, and the streamed input is the final input.
      const json& t = r["types"];
      ASSERT_GE(t.size(), 5u) << where;
      EXPECT_EQ(t[0], "message_start") << where;
      EXPECT_EQ(t[t.size() - 2], "message_delta") << where;
      EXPECT_EQ(t[t.size() - 1], "message_stop") << where;
      EXPECT_NE(std::find(t.begin(), t.end(), "content_block_start"), t.end()) << where;
      EXPECT_NE(std::find(t.begin(), t.end(), "content_block_stop"), t.end()) << where;
      ASSERT_EQ(r["calls"].size(), 1u) << where;
      EXPECT_FALSE(r["streamed_json"].get<std::string>().empty()) << where;
    }
  }
  EXPECT_GE(calls, 4);
}

TEST_F(AgentApisTest, AnthropicStreamedTextAndHistory) {
  const json& a = (*out_)["anthropic"];
  const json& t = a["text"];
  EXPECT_EQ(t["stop_reason"], "max_tokens") << t.dump();
  EXPECT_EQ(t["output_tokens"], 12) << t.dump();
  // The SDK's text events add up to its final message.
  EXPECT_EQ(t["text"], t["final_text"]) << t.dump();
  EXPECT_EQ(t["types"][0], "message_start") << t.dump();
  EXPECT_EQ(t["types"][t["types"].size() - 1], "message_stop") << t.dump();

  EXPECT_EQ(a["history"]["stop_reason"], "max_tokens") << a["history"].dump();
  EXPECT_GT(a["history"]["input_tokens"].get<int>(), 100) << a["history"].dump();
}

TEST_F(AgentApisTest, AnthropicBadInputIsA400NamingIt) {
  const json& b = (*out_)["anthropic"]["bad"];
  ExpectBad(b["unknown_tool_result"], 400, "invalid_request_error",
            "messages[2].content[0].tool_use_id", "matches no tool_use");
  ExpectBad(b["image"], 400, "invalid_request_error", "messages[0].content[0].type",
            "'image' is not supported");
  ExpectBad(b["no_max_tokens"], 400, "invalid_request_error", "max_tokens", "is required");
  ExpectBad(b["unknown_tool"], 400, "invalid_request_error", "tool_choice.name",
            "'nope' is not one of the tools");
  EXPECT_EQ((*out_)["anthropic"]["after_bad"], "max_tokens");
}

TEST_F(AgentApisTest, AnthropicKeysAndTenants) {
  const json& a = (*out_)["anthropic"]["auth"];
  EXPECT_EQ(a["other_tenant"]["status"], 403) << a.dump();
  EXPECT_EQ(a["other_tenant"]["type"], "permission_error") << a.dump();
  EXPECT_EQ(a["bad_key"]["status"], 401) << a.dump();
  EXPECT_EQ(a["bad_key"]["type"], "authentication_error") << a.dump();
  EXPECT_EQ(a["bearer"]["status"], 200) << a.dump();
}

TEST_F(AgentApisTest, ResponsesForcedFunctionCallsValidate) {
  const json& r = (*out_)["responses"];
  int calls = 0;
  for (const json& f : r["forced"]) {
    const std::string where = f.dump();
    EXPECT_THAT(f["id"].get<std::string>(), StartsWith("resp_")) << where;
    EXPECT_EQ(f["object"], "response") << where;
    EXPECT_EQ(f["status"], "completed") << where;
    EXPECT_TRUE(f["usage_ok"].get<bool>()) << where;
    // (The SDK's stream leaves output_text unset.)
    EXPECT_TRUE(!f.contains("output_text") || f["output_text"] == "") << where;
    ASSERT_GE(f["calls"].size(), 1u) << where;
    for (const json& c : f["calls"]) {
      ++calls;
      EXPECT_THAT(c["call_id"].get<std::string>(), StartsWith("call_")) << where;
      EXPECT_TRUE(c["parses"].get<bool>()) << where;
      EXPECT_TRUE(c["known"].get<bool>()) << where;
      EXPECT_TRUE(c["valid"].get<bool>()) << where;
      EXPECT_TRUE(c["matches_choice"].get<bool>()) << where;
    }
    if (f["stream"].get<bool>()) {
      const json& t = f["event_types"];
      ASSERT_GE(t.size(), 5u) << where;
      EXPECT_EQ(t[0], "response.created") << where;
      EXPECT_EQ(t[t.size() - 1], "response.completed") << where;
      EXPECT_TRUE(f["seq_ok"].get<bool>()) << where;
      for (const char* e : {"response.output_item.added", "response.function_call_arguments.delta",
                            "response.function_call_arguments.done",
                            "response.output_item.done"}) {
        EXPECT_NE(std::find(t.begin(), t.end(), e), t.end()) << e << ": " << where;
      }
      EXPECT_FALSE(f["streamed_args"].get<std::string>().empty()) << where;
    }
  }
  EXPECT_GE(calls, 3);
}

TEST_F(AgentApisTest, ResponsesTextHistoryAndBadInput) {
  const json& r = (*out_)["responses"];
  EXPECT_EQ(r["text"]["status"], "incomplete") << r["text"].dump();
  EXPECT_EQ(r["text"]["incomplete_reason"], "max_output_tokens") << r["text"].dump();
  const json& ts = r["text_stream"];
  EXPECT_EQ(ts["types"][0], "response.created") << ts.dump();
  EXPECT_EQ(ts["types"][ts["types"].size() - 1], "response.incomplete") << ts.dump();
  EXPECT_EQ(r["history"]["status"], "incomplete") << r["history"].dump();
  EXPECT_GT(r["history"]["input_tokens"].get<int>(), 100) << r["history"].dump();

  struct Bad {
    const char* key;
    const char* param;
    const char* message;
  };
  for (const Bad& b : {Bad{"previous", "previous_response_id", "stores no responses"},
                       Bad{"unknown_output", "input[1].call_id", "matches no earlier"},
                       Bad{"unknown_tool", "tool_choice.name", "'nope' is not one of the tools"},
                       Bad{"image", "input[0].content[0].type", "'input_image' is not supported"}}) {
    const json& e = r["bad"][b.key];
    EXPECT_TRUE(e["thrown"].get<bool>()) << b.key;
    EXPECT_EQ(e["status"], 400) << b.key << ": " << e.dump();
    EXPECT_EQ(e["param"], b.param) << b.key << ": " << e.dump();
    EXPECT_THAT(e["message"].get<std::string>(), HasSubstr(b.message)) << b.key;
  }
  EXPECT_EQ(r["after_bad"], "incomplete");
}

TEST_F(AgentApisTest, VercelAiSdkRunsAToolLoop) {
  const json& v = (*out_)["vercel"];
  const std::string where = v.dump();
  ASSERT_EQ(v["steps"].size(), 2u) << where;
  // Step 1: a forced call, executed by the SDK with valid input.
  const json& first = v["steps"][0];
  EXPECT_EQ(first["finish_reason"], "tool-calls") << where;
  ASSERT_GE(first["calls"].size(), 1u) << where;
  for (const json& c : first["calls"]) {
    EXPECT_EQ(c["name"], "get_weather") << where;
    EXPECT_FALSE(c["invalid"].get<bool>()) << where;
    EXPECT_TRUE(c["valid"].get<bool>()) << where;
  }
  ASSERT_EQ(first["results"].size(), first["calls"].size()) << where;
  EXPECT_EQ(first["results"][0]["temperature"], -3) << where;
  ASSERT_GE(v["executed"].size(), 1u) << where;
  for (const json& ok : v["executed"]) EXPECT_TRUE(ok.get<bool>()) << where;
  // Step 2: with the result in its history, an answer without calls.
  const json& second = v["steps"][1];
  EXPECT_EQ(second["calls"].size(), 0u) << where;
  EXPECT_TRUE(second["finish_reason"] == "stop" || second["finish_reason"] == "length") << where;
  EXPECT_TRUE(v["text_is_string"].get<bool>()) << where;
}

}  // namespace
}  // namespace minfer::daemon
