// The tokenizer routes end to end (daemon/http/tokenize_api.h): /tokenize,
// /detokenize, /apply-template and /v1/messages/count_tokens on a daemon in
// this process serving qwen3-tiny (Qwen3's real template: tools, <think>),
// with two tenants. References: the daemon's own tokenizer and chat
// template (Encode, EncodeChat, RenderChat), gRPC's Tokenize of the same
// chat, and the input_tokens a /v1/messages call reports.
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/api/chat_tools.h"
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
using ojson = nlohmann::ordered_json;
using ::testing::HasSubstr;

class TokenizeApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto qwen = minfer::testing::TestModelPath("qwen3-tiny", "q8_0", 1);
    ASSERT_TRUE(qwen.ok()) << qwen.status();
    DaemonConfig c = testing::TestConfig();
    c.http_listen = "127.0.0.1:0";
    c.default_n_ctx = 2048;
    c.default_parallel = 1;
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
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = d->release();
    client_ = testing::ClientFor(*daemon_, "key-a").release();
    ASSERT_TRUE(testing::WaitFor(
        [] {
          auto s = client_->GetModelStatus("q");
          return s.ok() && s->state() == v1::MODEL_STATE_READY;
        },
        std::chrono::seconds(30)));
  }
  static void TearDownTestSuite() {
    delete client_;
    delete daemon_;
  }

  static const tokenizer::Tokenizer& Tok() {
    auto slot = daemon_->slots().Find("q");
    EXPECT_TRUE(slot.ok());
    return (*slot)->model()->tokenizer();
  }

  // POSTs `body` with `key` ("" for none); the parsed answer, its status in
  // *status.
  static json Post(const std::string& route, const nlohmann::ordered_json& body, int* status,
                   const std::string& key = "key-a") {
    const std::string file = absl::StrCat(std::getenv("TEST_TMPDIR"), "/body.json");
    std::ofstream(file, std::ios::binary | std::ios::trunc) << body.dump();
    std::vector<std::string> argv = {"/usr/bin/env", "curl", "-sS", "-X", "POST", "-H",
                                     "Content-Type: application/json"};
    if (!key.empty()) {
      argv.push_back("-H");
      argv.push_back(absl::StrCat("Authorization: Bearer ", key));
    }
    for (std::string a : {std::string("--data-binary"), "@" + file, std::string("-w"),
                          std::string("\n%{http_code}")}) {
      argv.push_back(a);
    }
    argv.push_back(absl::StrCat("http://", daemon_->http_address(), route));
    auto r = minfer::testing::RunCommand(argv, std::chrono::seconds(60));
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return json();
    const size_t nl = r->out.rfind('\n');
    *status = nl == std::string::npos ? 0 : std::atoi(r->out.c_str() + nl + 1);
    return json::parse(r->out.substr(0, nl), nullptr, false);
  }

  // (Key order as written: a tool's parameters render in theirs.)
  static ojson Chat() {
    return ojson::parse(R"({"model": "q", "messages": [
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": "Weather in Paris? <|im_end|>"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "18C, sunny"}],
      "tools": [{"type": "function", "function": {"name": "weather",
        "description": "Current weather", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]})");
  }

  // The same chat as v1::Chat.
  static v1::Chat ProtoChat() {
    v1::Chat c;
    auto add = [&](const char* role, const char* content) {
      v1::ChatMessage* m = c.add_messages();
      m->set_role(role);
      m->set_content(content);
      return m;
    };
    add("system", "You are terse.");
    add("user", "Weather in Paris? <|im_end|>");
    v1::ToolCall* call = add("assistant", "")->add_tool_calls();
    call->set_id("c1");
    call->set_name("weather");
    call->set_arguments(R"({"city": "Paris"})");
    add("tool", "18C, sunny")->set_tool_call_id("c1");
    v1::Tool* t = c.add_tools();
    t->set_name("weather");
    t->set_description("Current weather");
    t->set_parameters(
        R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})");
    return c;
  }

  static Daemon* daemon_;
  static client::MinferClient* client_;
};

Daemon* TokenizeApiTest::daemon_ = nullptr;
client::MinferClient* TokenizeApiTest::client_ = nullptr;

TEST_F(TokenizeApiTest, PromptTokensAreTheTokenizersAndDetokenizeInverts) {
  const std::string text = "Héllo, wörld!<|im_start|> 12345 \n\tcode();";
  int status = 0;
  const json t = Post("/tokenize", {{"model", "q"}, {"prompt", text}}, &status);
  ASSERT_EQ(status, 200) << t.dump();
  const std::vector<int32_t> want = Tok().Encode(text);  // control tokens parsed
  EXPECT_EQ(t["tokens"].get<std::vector<int32_t>>(), want);
  EXPECT_EQ(t["count"], want.size());
  EXPECT_EQ(t["max_model_len"], (*daemon_->slots().Find("q"))->n_ctx());
  EXPECT_FALSE(t.contains("token_strs"));

  const json s = Post("/tokenize",
                      {{"model", "q"}, {"prompt", text}, {"add_special_tokens", false},
                       {"return_token_strs", true}},
                      &status);
  ASSERT_EQ(status, 200) << s.dump();
  EXPECT_EQ(s["tokens"], t["tokens"]);  // Qwen adds no BOS
  ASSERT_EQ(s["token_strs"].size(), want.size());
  EXPECT_EQ(s["token_strs"][0], std::string(Tok().TokenText(want[0])));

  const json d = Post("/detokenize", {{"model", "q"}, {"tokens", t["tokens"]}}, &status);
  ASSERT_EQ(status, 200) << d.dump();
  EXPECT_EQ(d["prompt"], text);
}

TEST_F(TokenizeApiTest, ChatTokensAreTheGenerationsPrompt) {
  int status = 0;
  const json applied = Post("/apply-template", Chat(), &status);
  ASSERT_EQ(status, 200) << applied.dump();
  // The daemon's own rendering of the same chat (C++ ChatTemplate).
  auto input = ChatTemplateInputOf(ProtoChat());
  ASSERT_TRUE(input.ok()) << input.status();
  auto rendered = Tok().RenderChat(input->messages, true, input->options);
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  EXPECT_EQ(applied["prompt"].get<std::string>(), *rendered);
  EXPECT_THAT(*rendered, HasSubstr("\"name\": \"weather\""));  // the tool is described
  EXPECT_THAT(*rendered, HasSubstr("<tool_response>"));        // and its result

  const json t = Post("/tokenize", Chat(), &status);
  ASSERT_EQ(status, 200) << t.dump();
  auto ids = Tok().EncodeChat(input->messages, true, input->options);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(t["tokens"].get<std::vector<int32_t>>(), *ids);
  EXPECT_EQ(t["count"], ids->size());
  // gRPC's Tokenize takes the same chat with tools.
  v1::TokenizeRequest g;
  g.set_model("q");
  *g.mutable_chat() = ProtoChat();
  auto grpc = client_->Tokenize(g);
  ASSERT_TRUE(grpc.ok()) << grpc.status();
  EXPECT_EQ(std::vector<int32_t>(grpc->ids().begin(), grpc->ids().end()), *ids);

  // The rendered prompt as text: the same ids, except where a message
  // writes a control token's text (EncodeChat never parses it).
  ojson plain = Chat();
  plain["messages"][1]["content"] = "Weather in Paris?";
  const json applied2 = Post("/apply-template", plain, &status);
  ASSERT_EQ(status, 200);
  const json chat_ids = Post("/tokenize", plain, &status);
  ASSERT_EQ(status, 200);
  const json text_ids = Post(
      "/tokenize", {{"model", "q"}, {"prompt", applied2["prompt"]}, {"add_special_tokens", false}},
      &status);
  ASSERT_EQ(status, 200);
  EXPECT_EQ(text_ids["tokens"], chat_ids["tokens"]);
  EXPECT_NE(t["tokens"], chat_ids["tokens"]);

  // add_generation_prompt false: the prompt ends with the tool turn.
  ojson no_gen = plain;
  no_gen["add_generation_prompt"] = false;
  const json ended = Post("/apply-template", no_gen, &status);
  ASSERT_EQ(status, 200);
  EXPECT_LT(ended["prompt"].get<std::string>().size(),
            applied2["prompt"].get<std::string>().size());
  EXPECT_EQ(applied2["prompt"].get<std::string>().rfind(ended["prompt"].get<std::string>(), 0),
            0u);

  // /apply-template with one model for the tenant: model may be left out.
  ojson unnamed = plain;
  unnamed.erase("model");
  const json a3 = Post("/apply-template", unnamed, &status);
  ASSERT_EQ(status, 200) << a3.dump();
  EXPECT_EQ(a3["prompt"], applied2["prompt"]);
}

TEST_F(TokenizeApiTest, CountTokensIsTheMessagesPromptLength) {
  const json body = json::parse(R"({"model": "q", "system": "Be brief.",
    "messages": [{"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "weather",
        "input": {"city": "Oslo"}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
        "content": "3C"}]}],
    "tools": [{"name": "weather", "input_schema": {"type": "object",
      "properties": {"city": {"type": "string"}}}}]})");
  int status = 0;
  const json count = Post("/v1/messages/count_tokens", body, &status);
  ASSERT_EQ(status, 200) << count.dump();
  json gen = body;
  gen["max_tokens"] = 1;
  const json msg = Post("/v1/messages", gen, &status);
  ASSERT_EQ(status, 200) << msg.dump();
  EXPECT_EQ(count["input_tokens"], msg["usage"]["input_tokens"]);
  EXPECT_GT(count["input_tokens"].get<int>(), 20);

  // Bad input: Anthropic's error shape, naming the field.
  json bad = body;
  bad["messages"][2]["content"][0]["tool_use_id"] = "nope";
  const json e = Post("/v1/messages/count_tokens", bad, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(e["type"], "error") << e.dump();
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_THAT(e["error"]["message"].get<std::string>(), HasSubstr("tool_use_id"));
  const json u = Post("/v1/messages/count_tokens", body, &status, "");
  EXPECT_EQ(status, 401);
  EXPECT_EQ(u["error"]["type"], "authentication_error") << u.dump();
}

TEST_F(TokenizeApiTest, BadInputIsRefusedNamingTheField) {
  int status = 0;
  auto param = [](const json& j) {
    return j.contains("error") && j["error"]["param"].is_string()
               ? j["error"]["param"].get<std::string>()
               : j.dump();
  };
  json e = Post("/detokenize", {{"model", "q"}, {"tokens", {1, 2, 10000000}}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(param(e), "tokens[2]");
  e = Post("/detokenize", {{"model", "q"}, {"tokens", {1, "x"}}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(param(e), "tokens[1]");
  e = Post("/detokenize", {{"model", "q"}, {"tokens", {-1}}}, &status);
  EXPECT_EQ(param(e), "tokens[0]");
  e = Post("/tokenize", {{"model", "q"}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(param(e), "prompt");
  e = Post("/tokenize", {{"model", "q"}, {"prompt", 3}}, &status);
  EXPECT_EQ(param(e), "prompt");
  e = Post("/tokenize", {{"model", "q"}, {"prompt", "x"}, {"add_special_tokens", "yes"}},
           &status);
  EXPECT_EQ(param(e), "add_special_tokens");
  ojson chat = Chat();
  chat["messages"][1]["role"] = "wizard";
  e = Post("/tokenize", chat, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(param(e), "messages[1].role");
  chat = Chat();
  chat["tools"][0]["function"]["name"] = "bad name!";
  e = Post("/apply-template", chat, &status);
  EXPECT_EQ(status, 400);
  EXPECT_THAT(param(e), HasSubstr("tools[0]"));
  e = Post("/tokenize", {{"prompt", "x"}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(param(e), "model");
  e = Post("/tokenize", {{"model", "nope"}, {"prompt", "x"}}, &status);
  EXPECT_EQ(status, 404) << e.dump();
  // Tenancy: a key is required; a tenant names only its models.
  e = Post("/tokenize", {{"model", "q"}, {"prompt", "x"}}, &status, "");
  EXPECT_EQ(status, 401) << e.dump();
  e = Post("/detokenize", {{"model", "q"}, {"tokens", {1}}}, &status, "key-b");
  EXPECT_EQ(status, 403) << e.dump();
  e = Post("/apply-template", {{"messages", Chat()["messages"]}}, &status, "key-b");
  EXPECT_EQ(status, 400) << e.dump();  // no model of its own to default to
  EXPECT_EQ(param(e), "model");
}

}  // namespace
}  // namespace minfer::daemon
