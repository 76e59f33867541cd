// The typed chat reply over gRPC: a Generate with a v1.Chat streams the reply
// split into reasoning_text, content_text and tool_calls (the reading the
// HTTP APIs give it), beside the raw token ids and text. A daemon in this
// process serves a random-weight Qwen3 model (Qwen3's real template: Hermes
// <tool_call>, <think>). Forced calls (a named function, required) at
// temperature 1 must arrive as typed calls whose streamed argument pieces
// concatenate to JSON valid against the tool's parameters, the same call as
// the raw text parses to; output forced by a choice constraint checks the
// reasoning split and calls read in auto mode.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/minfer_client.h"
#include "daemon/daemon.h"
#include "engine/chat/tool_calls.h"
#include "engine/grammar/json_validate.h"
#include "gtest/gtest.h"
#include "minfer/v1/generation.pb.h"
#include "nlohmann/json.hpp"
#include "tests/daemon/test_util.h"
#include "tests/support/test_models.h"

namespace minfer::daemon {
namespace {

using ojson = nlohmann::ordered_json;

constexpr char kAddSchema[] =
    R"({"type": "object", "properties": {"a": {"type": "integer", "minimum": 0,
        "maximum": 9}, "b": {"type": "string", "maxLength": 8}}, "required": ["a", "b"]})";
constexpr char kMoveSchema[] =
    R"({"type": "object", "properties": {"dir": {"enum": ["up", "down"]}},
        "required": ["dir"]})";

// A stream's typed output, folded.
struct Typed {
  std::string text, reasoning, content;
  struct Call {
    std::string id, name, arguments;
    int pieces = 0;
  };
  std::map<int, Call> calls;  // by index
  std::vector<std::string> errors;  // protocol violations seen
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
};

class ChatOutputTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto qwen = minfer::testing::TestModelPath("qwen3-tiny", "q8_0", 1);
    ASSERT_TRUE(qwen.ok()) << qwen.status();
    DaemonConfig c = testing::TestConfig();
    c.default_n_ctx = 2048;
    SlotConfig q;
    q.name = "q";
    q.path = *qwen;
    c.models = {q};
    auto d = Daemon::Start(c);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d).release();
    client_ = testing::ClientFor(*daemon_).release();
    ASSERT_TRUE(testing::WaitFor(
        [&] {
          auto s = client_->GetModelStatus("q");
          return s.ok() && s->state() == v1::MODEL_STATE_READY;
        },
        std::chrono::seconds(30)));
  }
  static void TearDownTestSuite() {
    delete client_;
    delete daemon_;
  }

  static v1::GenerateRequest ChatRequest(const std::string& user) {
    v1::GenerateRequest r;
    r.set_model("q");
    v1::ChatMessage* m = r.mutable_chat()->add_messages();
    m->set_role("user");
    m->set_content(user);
    r.mutable_stopping()->set_max_tokens(200);
    return r;
  }

  static void AddTools(v1::GenerateRequest* r) {
    v1::Tool* t = r->mutable_chat()->add_tools();
    t->set_name("add");
    t->set_description("adds");
    t->set_parameters(kAddSchema);
    t = r->mutable_chat()->add_tools();
    t->set_name("move");
    t->set_parameters(kMoveSchema);
  }

  static Typed Run(const v1::GenerateRequest& r) {
    Typed out;
    auto g = client_->Generate(r, [&](const v1::GenerateResponse& m) {
      out.text += m.text();
      out.reasoning += m.reasoning_text();
      out.content += m.content_text();
      for (const v1::ToolCallDelta& d : m.tool_calls()) {
        Typed::Call& c = out.calls[d.index()];
        if (c.pieces == 0) {
          if (d.id().empty() || d.name().empty()) {
            out.errors.push_back(absl::StrCat("call ", d.index(), ": first piece lacks id/name"));
          }
          c.id = d.id();
          c.name = d.name();
        } else if (!d.id().empty() || !d.name().empty()) {
          out.errors.push_back(absl::StrCat("call ", d.index(), ": id/name repeated"));
        }
        c.arguments += d.arguments();
        ++c.pieces;
      }
      return true;
    });
    EXPECT_TRUE(g.ok()) << g.status();
    if (g.ok()) {
      out.finish = g->finish_reason;
      EXPECT_EQ(out.text, g->text);
    }
    return out;
  }

  static inline Daemon* daemon_ = nullptr;
  static inline client::MinferClient* client_ = nullptr;
};

// Checks that `args` is a JSON object valid against `schema`.
void ExpectValid(const std::string& args, const char* schema, const std::string& context) {
  ASSERT_TRUE(ojson::accept(args)) << args << "\n" << context;
  const ojson root = ojson::parse(schema);
  absl::StatusOr<bool> ok = grammar::ValidateInstance(root, root, ojson::parse(args));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(*ok) << args << "\n" << context;
}

TEST_F(ChatOutputTest, ForcedNamedCallArrivesTyped) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    v1::GenerateRequest r = ChatRequest("Add something.");
    AddTools(&r);
    r.mutable_chat()->mutable_tool_choice()->set_mode(v1::ToolChoice::TOOL_CHOICE_FUNCTION);
    r.mutable_chat()->mutable_tool_choice()->set_function("add");
    r.mutable_chat()->set_parallel_tool_calls(false);
    r.mutable_sampling()->set_temperature(1);
    r.mutable_sampling()->set_seed(seed);
    const Typed t = Run(r);
    EXPECT_TRUE(t.errors.empty()) << t.errors[0];
    EXPECT_EQ(t.finish, v1::FINISH_REASON_TOOL_CALLS) << t.text;
    ASSERT_EQ(t.calls.size(), 1u) << t.text;
    const Typed::Call& c = t.calls.begin()->second;
    EXPECT_EQ(t.calls.begin()->first, 0);
    EXPECT_EQ(c.name, "add");
    EXPECT_EQ(c.id.rfind("call_", 0), 0u) << c.id;
    ExpectValid(c.arguments, kAddSchema, t.text);
    EXPECT_EQ(t.reasoning, "");
    // The raw text still carries the call, and parses to the same one.
    auto parser = chat::MakeToolCallParser("hermes");
    ASSERT_TRUE(parser.ok());
    const chat::ParsedToolCalls raw = (*parser)->Parse(t.text);
    ASSERT_EQ(raw.calls.size(), 1u) << t.text;
    EXPECT_EQ(raw.calls[0].name, "add");
    EXPECT_EQ(ojson::parse(raw.calls[0].arguments), ojson::parse(c.arguments));
  }
}

TEST_F(ChatOutputTest, RequiredCallsArriveTypedAndValid) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    v1::GenerateRequest r = ChatRequest("Do something.");
    AddTools(&r);
    r.mutable_chat()->mutable_tool_choice()->set_mode(v1::ToolChoice::TOOL_CHOICE_REQUIRED);
    r.mutable_sampling()->set_temperature(1);
    r.mutable_sampling()->set_seed(seed);
    r.mutable_stopping()->set_max_tokens(400);
    const Typed t = Run(r);
    EXPECT_TRUE(t.errors.empty()) << t.errors[0];
    ASSERT_GE(t.calls.size(), 1u) << t.text;
    auto parser = chat::MakeToolCallParser("hermes");
    ASSERT_TRUE(parser.ok());
    const chat::ParsedToolCalls raw = (*parser)->Parse(t.text);
    if (t.finish == v1::FINISH_REASON_LENGTH) continue;  // cut mid-call: nothing to check
    EXPECT_EQ(t.finish, v1::FINISH_REASON_TOOL_CALLS) << t.text;
    ASSERT_EQ(raw.calls.size(), t.calls.size()) << t.text;
    int i = 0;
    for (const auto& [index, c] : t.calls) {
      EXPECT_EQ(index, i);
      ASSERT_TRUE(c.name == "add" || c.name == "move") << c.name;
      ExpectValid(c.arguments, c.name == "add" ? kAddSchema : kMoveSchema, t.text);
      EXPECT_EQ(raw.calls[i].name, c.name);
      EXPECT_EQ(ojson::parse(raw.calls[i].arguments), ojson::parse(c.arguments));
      ++i;
    }
  }
}

TEST_F(ChatOutputTest, ABudgetLetsTheModelThinkBeforeAForcedCall) {
  // Qwen3's template leaves the think block to the model: with a budget the
  // first token may open it (then at most 4 tokens of thought, closed by
  // "\n</think>") or start the call; either way the call is forced.
  int thought = 0;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    v1::GenerateRequest r = ChatRequest("Add something.");
    AddTools(&r);
    r.mutable_chat()->mutable_tool_choice()->set_mode(v1::ToolChoice::TOOL_CHOICE_FUNCTION);
    r.mutable_chat()->mutable_tool_choice()->set_function("add");
    r.mutable_chat()->set_parallel_tool_calls(false);
    r.mutable_chat()->set_reasoning_budget(4);
    r.mutable_sampling()->set_temperature(1);
    r.mutable_sampling()->set_seed(seed);
    const Typed t = Run(r);
    EXPECT_TRUE(t.errors.empty()) << t.errors[0];
    EXPECT_EQ(t.finish, v1::FINISH_REASON_TOOL_CALLS) << t.text;
    ASSERT_EQ(t.calls.size(), 1u) << t.text;
    EXPECT_EQ(t.calls.begin()->second.name, "add");
    ExpectValid(t.calls.begin()->second.arguments, kAddSchema, t.text);
    if (t.text.rfind("<think>", 0) == 0) {
      thought++;
      EXPECT_NE(t.text.find("\n</think>"), std::string::npos) << t.text;
      EXPECT_EQ(t.content, "") << t.text;
    } else {
      EXPECT_EQ(t.reasoning, "") << t.text;
    }
  }
  // Both ways happen (fixed seeds: the same every run).
  EXPECT_GT(thought, 0);
  EXPECT_LT(thought, 10);
}

TEST_F(ChatOutputTest, StrictToolsInAutoModeServe) {
  // A random model rarely opens a call by itself; the request must still
  // be served as a plain auto-mode reply (the strict grammar waits for the
  // call tag; grammar_start_test and chat_phases_test check what it does).
  v1::GenerateRequest r = ChatRequest("Anything.");
  AddTools(&r);
  r.mutable_chat()->mutable_tools(0)->set_strict(true);
  r.mutable_sampling()->set_temperature(1);
  r.mutable_sampling()->set_seed(3);
  r.mutable_stopping()->set_max_tokens(24);
  const Typed t = Run(r);
  EXPECT_TRUE(t.errors.empty()) << t.errors[0];
  EXPECT_FALSE(t.text.empty());
}

TEST_F(ChatOutputTest, ReasoningAndAutoCallsFromForcedText) {
  // A choice constraint makes the model write a think block, content and a
  // Hermes call: the reply's typed fields split it.
  v1::GenerateRequest r = ChatRequest("Think, then call.");
  AddTools(&r);  // auto: calls are parsed from what the model writes
  r.mutable_choice()->add_choices(
      "<think>\nsome thought\n</think>\n\nHello.\n<tool_call>\n"
      "{\"name\": \"move\", \"arguments\": {\"dir\": \"up\"}}\n</tool_call>");
  r.mutable_sampling()->set_temperature(1);
  r.mutable_sampling()->set_seed(7);
  const Typed t = Run(r);
  EXPECT_TRUE(t.errors.empty()) << t.errors[0];
  EXPECT_EQ(t.reasoning, "some thought") << t.text;
  EXPECT_EQ(t.content, "Hello.") << t.text;
  ASSERT_EQ(t.calls.size(), 1u) << t.text;
  EXPECT_EQ(t.calls.at(0).name, "move");
  EXPECT_EQ(ojson::parse(t.calls.at(0).arguments), ojson::parse(R"({"dir": "up"})"));
  EXPECT_EQ(t.finish, v1::FINISH_REASON_TOOL_CALLS);

  // tool_choice none: the same text is content (no calls parsed).
  r.mutable_chat()->mutable_tool_choice()->set_mode(v1::ToolChoice::TOOL_CHOICE_NONE);
  const Typed n = Run(r);
  EXPECT_TRUE(n.calls.empty());
  EXPECT_EQ(n.reasoning, "some thought");
  EXPECT_NE(n.content.find("<tool_call>"), std::string::npos) << n.content;
  EXPECT_EQ(n.finish, v1::FINISH_REASON_EOS);
}

TEST_F(ChatOutputTest, PlainChatIsContentAndTextRequestsUntyped) {
  v1::GenerateRequest r = ChatRequest("Hi");
  r.mutable_choice()->add_choices("Hello there, friend.");
  const Typed t = Run(r);
  EXPECT_EQ(t.text, "Hello there, friend.");
  EXPECT_EQ(t.content, t.text);
  EXPECT_EQ(t.reasoning, "");
  EXPECT_TRUE(t.calls.empty());
  EXPECT_EQ(t.finish, v1::FINISH_REASON_EOS);

  v1::GenerateRequest p;
  p.set_model("q");
  p.set_text("Hello");
  p.mutable_stopping()->set_max_tokens(8);
  const Typed u = Run(p);
  EXPECT_FALSE(u.text.empty());
  EXPECT_EQ(u.content, "");
  EXPECT_EQ(u.reasoning, "");
  EXPECT_TRUE(u.calls.empty());
}

}  // namespace
}  // namespace minfer::daemon
