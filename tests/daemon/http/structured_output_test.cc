// Structured outputs end to end, over both front doors: a daemon in this
// process serving tiny-untied (random weights, Qwen2's vocabulary) samples
// at temperature 1 under a JSON Schema, a regex, a choice and a GBNF
// grammar, over gRPC (GenerateRequest's constraint oneof) and over HTTP with
// the official `openai` npm client (structured_client.mjs: OpenAI's,
// llama-server's and vLLM's fields). Every output that finished is judged by
// an independent reference — ajv for the schema, JS RegExp for the regex,
// membership for the choice — in the node script. Refusals name the field
// and the problem, leave other streams alone, and count in the metrics and
// the model's status.
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/minfer_client.h"
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
using ::testing::Not;
using ::testing::StartsWith;

constexpr char kModules[] = "third_party/npm/node_modules";

// Finite by construction (bounded strings, integers and arrays), so a
// random model's sampled walk ends well within max_tokens.
constexpr char kSchema[] = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 8},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "colour": {"enum": ["red", "green", "blue"]},
    "member": {"type": "boolean"},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 3}
  },
  "required": ["name", "age", "colour", "member", "tags"],
  "additionalProperties": false
})";
constexpr char kRegex[] = "[a-z]{3,6}-[0-9]{2}";
const std::vector<std::string> kChoices = {"red", "green", "blue violet"};

std::string TmpPath(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
}

class StructuredOutputTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto path = minfer::testing::TestModelPath("tiny-untied", "q8_0", 1);
    ASSERT_TRUE(path.ok()) << path.status();
    DaemonConfig c = testing::TestConfig();
    c.http_listen = "127.0.0.1:0";
    c.default_n_ctx = 1024;
    c.default_parallel = 4;
    SlotConfig m;
    m.name = "a";
    m.path = *path;
    c.models.push_back(m);
    auto d = Daemon::Start(c);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = d->release();
    client_ = testing::ClientFor(*daemon_).release();
    ASSERT_TRUE(testing::WaitFor(
        [] {
          auto s = client_->GetModelStatus("a");
          return s.ok() && s->state() == v1::MODEL_STATE_READY;
        },
        std::chrono::seconds(30)));
  }
  static void TearDownTestSuite() {
    delete client_;
    delete daemon_;
  }

  static v1::GenerateRequest Sampled(const std::string& prompt, uint64_t seed,
                                     int32_t max_tokens) {
    v1::GenerateRequest r;
    r.set_model("a");
    r.set_text(prompt);
    r.mutable_sampling()->set_temperature(1);
    r.mutable_sampling()->set_seed(seed);
    r.mutable_stopping()->set_max_tokens(max_tokens);
    return r;
  }

  // A finished output: {"text", "finish"} ("stop" when the constraint ended
  // it, as HTTP says; "length" otherwise).
  static json Output(const client::GenerateResult& r) {
    const bool ended = r.finish_reason == v1::FINISH_REASON_EOS ||
                       r.finish_reason == v1::FINISH_REASON_STOP;
    return json{{"text", r.text}, {"finish", ended ? "stop" : "length"}};
  }

  static Daemon* daemon_;
  static client::MinferClient* client_;
};

Daemon* StructuredOutputTest::daemon_ = nullptr;
client::MinferClient* StructuredOutputTest::client_ = nullptr;

TEST_F(StructuredOutputTest, BothFrontDoorsProduceOutputsTheReferencesAccept) {
  ASSERT_TRUE(std::ifstream(absl::StrCat(kModules, "/openai/package.json")).good() &&
              std::ifstream(absl::StrCat(kModules, "/ajv/package.json")).good())
      << "npm packages missing: run scripts/install_deps.sh";

  // gRPC: the same constraints through GenerateRequest's oneof.
  json grpc = {{"schema", json::parse(kSchema)}, {"regex", kRegex}, {"choices", kChoices},
               {"json", json::array()}, {"regex_outputs", json::array()},
               {"choice_outputs", json::array()}};
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    v1::GenerateRequest r = Sampled("A person:", seed, 400);
    r.set_json_schema(kSchema);
    auto g = client_->Generate(r);
    ASSERT_TRUE(g.ok()) << g.status();
    grpc["json"].push_back(Output(*g));
  }
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    v1::GenerateRequest r = Sampled("A code:", seed, 64);
    r.set_regex(kRegex);
    auto g = client_->Generate(r);
    ASSERT_TRUE(g.ok()) << g.status();
    grpc["regex_outputs"].push_back(Output(*g));
  }
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    v1::GenerateRequest r = Sampled("Colour:", seed, 16);
    for (const std::string& c : kChoices) r.mutable_choice()->add_choices(c);
    auto g = client_->Generate(r);
    ASSERT_TRUE(g.ok()) << g.status();
    grpc["choice_outputs"].push_back(Output(*g));
  }
  const std::string grpc_file = TmpPath("grpc_outputs.json");
  std::ofstream(grpc_file) << grpc.dump();

  auto run = minfer::testing::RunCommand(
      {"/usr/bin/env", "node", "tests/daemon/http/structured_client.mjs", kModules,
       absl::StrCat("http://", daemon_->http_address()), "a", grpc_file},
      std::chrono::seconds(240));
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->exit_code, 0) << run->err;
  const json out = json::parse(run->out, nullptr, false);
  ASSERT_FALSE(out.is_discarded()) << run->out;

  // Every JSON output that finished by stop parses and validates; most
  // finish (the schema is finite, the whitespace bounded).
  int finished = 0, total = 0;
  auto check_json = [&](const json& o, const std::string& where) {
    ++total;
    const std::string finish = o.contains("finish_reason") ? o["finish_reason"].get<std::string>()
                                                           : o["finish"].get<std::string>();
    if (finish != "stop") return;
    ++finished;
    EXPECT_TRUE(o["parses"].get<bool>()) << where << ": " << o.dump();
    EXPECT_TRUE(o["valid"].get<bool>()) << where << ": " << o.dump();
  };
  for (const json& o : out["json_schema"]) check_json(o, "http response_format.json_schema");
  check_json(out["json_stream"], "http structured_outputs.json, streamed");
  for (const json& o : out["grpc"]["json"]) check_json(o, "grpc json_schema");
  EXPECT_GE(finished * 10, total * 8) << out.dump();
  check_json(out["json_object"], "http json_object");

  for (const json& o : out["regex"]) {
    if (o["finish_reason"] == "stop") {
      EXPECT_TRUE(o["matches"].get<bool>()) << o.dump();
    }
  }
  for (const json& o : out["grpc"]["regex"]) {
    if (o["finish"] == "stop") {
      EXPECT_TRUE(o["matches"].get<bool>()) << o.dump();
    }
  }
  // A choice always finishes within 16 tokens (the longest is 3 or so).
  for (const json& o : out["choice"]) {
    EXPECT_EQ(o["finish_reason"], "stop") << o.dump();
    EXPECT_TRUE(o["member"].get<bool>()) << o.dump();
  }
  for (const json& o : out["grpc"]["choice"]) {
    EXPECT_EQ(o["finish"], "stop") << o.dump();
    EXPECT_TRUE(o["member"].get<bool>()) << o.dump();
  }
  // Logprobs report the constrained distribution: no alternative the
  // choice forbids, no -inf (which JSON cannot carry).
  const json& lp = out["choice_logprobs"];
  EXPECT_TRUE(lp["alternatives_start_a_choice"].get<bool>()) << lp.dump();
  EXPECT_TRUE(lp["logprobs_finite"].get<bool>()) << lp.dump();
  EXPECT_FALSE(lp["alternatives"].empty()) << lp.dump();
  EXPECT_EQ(out["gbnf"]["finish_reason"], "stop") << out["gbnf"].dump();
  EXPECT_TRUE(out["gbnf"]["matches"].get<bool>()) << out["gbnf"].dump();

  // Refusals: 400, the field, the keyword; the neighbouring stream ran on.
  const json& bad = out["bad_schema"];
  EXPECT_TRUE(bad["thrown"].get<bool>());
  EXPECT_EQ(bad["status"], 400);
  EXPECT_EQ(bad["type"], "invalid_request_error");
  EXPECT_EQ(bad["param"], "response_format.json_schema.schema");
  EXPECT_THAT(bad["message"].get<std::string>(), HasSubstr("propertyNames"));
  EXPECT_EQ(out["neighbour"]["finish_reason"], "length");
  EXPECT_EQ(out["neighbour"]["completion_tokens"], 48);
  EXPECT_EQ(out["conflict"]["status"], 400);
  EXPECT_EQ(out["conflict"]["param"], "grammar");
  EXPECT_THAT(out["conflict"]["message"].get<std::string>(),
              HasSubstr("only one output constraint per request"));
  EXPECT_EQ(out["bad_gbnf"]["status"], 400);
  EXPECT_EQ(out["bad_gbnf"]["param"], "structured_outputs.grammar");
  EXPECT_THAT(out["bad_gbnf"]["message"].get<std::string>(),
              HasSubstr("structured_outputs.grammar: line 1"));
  EXPECT_THAT(out["bad_gbnf"]["message"].get<std::string>(), HasSubstr("'item'"));
}

TEST_F(StructuredOutputTest, GrpcRefusesBadConstraintsNamingTheField) {
  v1::GenerateRequest r = Sampled("x", 1, 8);
  r.set_json_schema(R"({"type": "object", "propertyNames": {"maxLength": 3}})");
  auto g = client_->Generate(r);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(g.status().message()), StartsWith("json_schema: "));
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("propertyNames"));

  r.set_gbnf("root ::= item");
  g = client_->Generate(r);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(g.status().message()), StartsWith("gbnf: line 1"));
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("item"));

  r.mutable_choice();
  g = client_->Generate(r);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().message(), "choice.choices: no choices");

  r.set_regex("a");
  r.set_json_max_whitespace(2);
  g = client_->Generate(r);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().message(),
            "json_max_whitespace: only with a json_schema or json_object constraint");
}

TEST_F(StructuredOutputTest, MetricsAndStatusCountConstrainedRequests) {
  v1::GenerateRequest ok = Sampled("Colour:", 4, 16);
  for (const std::string& c : kChoices) ok.mutable_choice()->add_choices(c);
  ASSERT_TRUE(client_->Generate(ok).ok());
  ASSERT_TRUE(client_->Generate(ok).ok());  // the compiled grammar from the cache
  v1::GenerateRequest bad = Sampled("x", 1, 8);
  bad.set_regex("(a)\\1");
  ASSERT_FALSE(client_->Generate(bad).ok());

  // The slot reads the engine's and the compiler's figures after each step.
  ASSERT_TRUE(client_->Generate(Sampled("x", 1, 2)).ok());
  auto st = client_->GetModelStatus("a");
  ASSERT_TRUE(st.ok()) << st.status();
  const v1::StructuredOutputStatus& so = st->structured_output();
  EXPECT_GE(so.constrained_requests(), 2u);
  EXPECT_GE(so.grammar_compiles(), 1u);
  EXPECT_GE(so.grammar_cache_hits(), 1u);
  EXPECT_GE(so.grammar_refused(), 1u);
  EXPECT_GE(so.grammar_masks(), 2u);
  EXPECT_GT(so.grammar_mask_seconds(), 0);
  EXPECT_EQ(so.constrained_sequences(), 0);

  const std::string metrics = daemon_->metrics().Serialize();
  for (const char* series :
       {"minfer_constrained_requests_total{kind=\"choice\",model=\"a\"}",
        "minfer_grammar_compile_seconds_count{model=\"a\"}",
        "minfer_grammar_cache_hits_total{model=\"a\"}", "minfer_grammar_refused_total{model=\"a\"}",
        "minfer_grammar_masks_total{model=\"a\"}", "minfer_grammar_mask_seconds_total{model=\"a\"}",
        "minfer_constrained_sequences{model=\"a\"} 0"}) {
    EXPECT_THAT(metrics, HasSubstr(series));
  }
  EXPECT_THAT(metrics, Not(HasSubstr("minfer_grammar_refused_total{model=\"a\"} 0")));
  EXPECT_THAT(metrics, Not(HasSubstr("minfer_grammar_masks_total{model=\"a\"} 0")));
}

}  // namespace
}  // namespace minfer::daemon
