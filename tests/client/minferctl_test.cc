// minferctl end to end against a real minferd process: load (with its
// progress bar), generate (text equal to the engine's), status, list,
// tokenize, knobs, aliases, health, unload; JSON output; errors as one line
// with a non-zero exit code.
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/daemon/test_util.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_models.h"

namespace minfer {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using testing::CommandResult;
using testing::RunfilePath;
using testing::Subprocess;
using Json = nlohmann::json;

class MinferctlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // tiny-untied: varied text (tiny only echoes its prompt's last token).
    auto a = testing::TestModelPath("tiny-untied", "q8_0", 1);
    ASSERT_TRUE(a.ok()) << a.status();
    path_ = *a;
  }

  void StartDaemon(std::vector<std::string> extra = {}) {
    const std::string ready = absl::StrCat(std::getenv("TEST_TMPDIR"), "/ready.json");
    std::remove(ready.c_str());
    std::vector<std::string> argv = {RunfilePath("daemon/minferd"), "--listen", "127.0.0.1:0",
                                     "--metrics-listen", "", "--ready-file", ready};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto p = Subprocess::Start(argv);
    ASSERT_TRUE(p.ok());
    daemon_ = std::move(*p);
    ASSERT_TRUE(daemon::testing::WaitFor([&] { return std::ifstream(ready).good(); },
                                         std::chrono::seconds(20)))
        << daemon_->ReadStderr();
    std::ifstream in(ready);
    addr_ = Json::parse(in)["address"].get<std::string>();
  }

  CommandResult Ctl(std::vector<std::string> args) {
    std::vector<std::string> argv = {RunfilePath("client/minferctl"), "--addr", addr_};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = testing::RunCommand(argv);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : CommandResult{};
  }

  void TearDown() override {
    if (daemon_ != nullptr) {
      daemon_->Signal(SIGTERM);
      auto code = daemon_->Wait(std::chrono::seconds(20));
      EXPECT_TRUE(code.ok() && *code == 0) << daemon_->ReadStderr();
    }
  }

  std::string path_, addr_;
  std::unique_ptr<Subprocess> daemon_;
};

TEST_F(MinferctlTest, LoadGenerateStatusUnload) {
  StartDaemon();
  CommandResult load = Ctl({"load", "tiny", path_, "--ctx", "256", "--parallel", "2", "--knob",
                            "MINFER_PREFILL_CHUNK=128"});
  ASSERT_EQ(load.exit_code, 0) << load.err;
  EXPECT_THAT(load.out, StartsWith("loaded tiny: qwen2 2 layers"));
  EXPECT_THAT(load.err, HasSubstr("loading tiny ["));
  EXPECT_THAT(load.err, HasSubstr("] 100% "));

  // generate streams exactly the engine's text (plus a newline).
  auto req = daemon::testing::TextRequest("tiny", "Hello world", 24);
  auto ref = daemon::testing::ReferenceGenerate(path_, req, 256);
  ASSERT_TRUE(ref.ok());
  CommandResult gen =
      Ctl({"generate", "tiny", "Hello world", "-n", "24", "--temp", "0", "--ignore-eos"});
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  EXPECT_EQ(gen.out, ref->text + "\n");
  EXPECT_THAT(gen.err, HasSubstr("[length] tiny: "));
  EXPECT_THAT(gen.err, HasSubstr(" prompt + 24 completion tokens"));

  CommandResult json = Ctl({"--json", "generate", "tiny", "Hello world", "-n", "24", "--temp",
                            "0", "--ignore-eos", "--logprobs", "2"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  Json j = Json::parse(json.out);
  EXPECT_EQ(j["token_ids"].get<std::vector<int32_t>>(), ref->ids);
  EXPECT_EQ(j["text"].get<std::string>(), ref->text);
  EXPECT_EQ(j["finish_reason"], "FINISH_REASON_LENGTH");
  EXPECT_EQ(j["usage"]["completion_tokens"], 24);
  EXPECT_EQ(j["logprobs"].size(), 24u);
  EXPECT_EQ(j["model"], "tiny");

  CommandResult list = Ctl({"list"});
  ASSERT_EQ(list.exit_code, 0);
  std::vector<std::string> lines = absl::StrSplit(list.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_THAT(lines[0], StartsWith("NAME"));
  std::vector<std::string> cols = absl::StrSplit(lines[1], ' ', absl::SkipEmpty());
  EXPECT_EQ(cols[0], "tiny");
  EXPECT_EQ(cols[1], "ready");
  EXPECT_EQ(cols[2], "cpu");
  EXPECT_EQ(cols[3], "256");
  EXPECT_EQ(cols[4], "2");

  CommandResult status = Ctl({"status", "tiny"});
  ASSERT_EQ(status.exit_code, 0);
  EXPECT_THAT(status.out, HasSubstr("requests:   2 (2 completed"));
  EXPECT_THAT(status.out, HasSubstr("knobs:      MINFER_PREFILL_CHUNK=128"));
  CommandResult sj = Ctl({"--json", "status", "tiny"});
  Json s = Json::parse(sj.out);
  EXPECT_EQ(s["state"], "MODEL_STATE_READY");
  EXPECT_EQ(s["n_ctx"], "256");  // int64 is a JSON string
  EXPECT_EQ(s["parallel"], 2);
  EXPECT_EQ(s["counters"]["completion_tokens"], "48");
  // The paged pool: 2 sequences x 256 tokens in blocks of 16, plus the reserved block 0 that
  // padding rows write to, x {K,V} x 2 layers x 64 (2 KV heads of 32) x f32.
  EXPECT_EQ(s["memory"]["kv_bytes"], std::to_string((2 * 256 / 16 + 1) * 16 * 2 * 2 * 64 * 4));
  CommandResult server = Ctl({"status"});
  EXPECT_THAT(server.out, HasSubstr("version:"));
  EXPECT_THAT(server.out, HasSubstr("device:"));
  CommandResult tenants = Ctl({"tenants"});
  EXPECT_EQ(tenants.exit_code, 0);
  EXPECT_EQ(tenants.out, "no tenants configured: generation is open to every client\n");

  CommandResult tok = Ctl({"--json", "tokenize", "tiny", "Hello world"});
  ASSERT_EQ(tok.exit_code, 0);
  Json t = Json::parse(tok.out);
  EXPECT_EQ(t["ids"].size(), t["tokens"].size());
  EXPECT_GE(t["ids"].size(), 2u);
  std::vector<std::string> detok = {"detokenize", "tiny"};
  for (const auto& id : t["ids"]) detok.push_back(std::to_string(id.get<int>()));
  EXPECT_EQ(Ctl(detok).out, "Hello world\n");

  // --cache-salt: a prompt of 3 full KV blocks and more, sent with salt x
  // twice, then with salt y: only x's second request finds cached blocks.
  std::string long_prompt;
  for (int i = 0; i < 20; ++i) long_prompt += absl::StrCat(" word", i);
  auto cached = [&](const std::string& salt) -> int64_t {
    CommandResult r = Ctl({"--json", "generate", "tiny", long_prompt, "-n", "2", "--cache-salt",
                           salt});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    if (r.exit_code != 0) return -1;
    const Json u = Json::parse(r.out)["usage"];
    return u.contains("cached_prompt_tokens") ? u["cached_prompt_tokens"].get<int64_t>() : 0;
  };
  EXPECT_EQ(cached("x"), 0);
  EXPECT_GE(cached("x"), 32);
  EXPECT_EQ(cached("y"), 0);

  CommandResult unload = Ctl({"unload", "tiny"});
  ASSERT_EQ(unload.exit_code, 0) << unload.err;
  EXPECT_THAT(unload.out, StartsWith("unloaded tiny in"));
  CommandResult gone = Ctl({"generate", "tiny", "x"});
  EXPECT_EQ(gone.exit_code, 1);
  EXPECT_EQ(gone.err, "minferctl: NOT_FOUND: no model or alias named 'tiny'\n");
  EXPECT_EQ(gone.out, "");
}

// load --draft / --spec / --spec-k: a refused combination names the field;
// a draft model's streams are the engine's tokens; generate reports the
// drafts (and --no-speculative opts out); status shows the mode and the
// acceptance in the table and as JSON.
TEST_F(MinferctlTest, SpeculativeLoadOptionsAndStatus) {
  StartDaemon();
  auto draft = testing::TestModelPath("tiny-untied", "q4_0", 1);
  ASSERT_TRUE(draft.ok()) << draft.status();
  CommandResult bad = Ctl({"load", "s", path_, "--spec", "draft", "-q"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.err, HasSubstr("draft: spec 'draft' needs a draft model"));
  CommandResult load = Ctl({"load", "s", path_, "--ctx", "256", "--parallel", "2", "--draft",
                            *draft, "--spec-k", "3", "-q"});
  ASSERT_EQ(load.exit_code, 0) << load.err;
  EXPECT_THAT(load.out, HasSubstr("; draft qwen2 2 layers"));

  auto req = daemon::testing::TextRequest("s", "Hello world", 24);
  auto ref = daemon::testing::ReferenceGenerate(path_, req, 256);
  ASSERT_TRUE(ref.ok());
  CommandResult gen =
      Ctl({"generate", "s", "Hello world", "-n", "24", "--temp", "0", "--ignore-eos"});
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  EXPECT_EQ(gen.out, ref->text + "\n");
  EXPECT_THAT(gen.err, HasSubstr(" drafted tokens accepted"));
  CommandResult off = Ctl({"--json", "generate", "s", "Hello world", "-n", "24", "--temp", "0",
                           "--ignore-eos", "--no-speculative"});
  ASSERT_EQ(off.exit_code, 0) << off.err;
  Json o = Json::parse(off.out);
  EXPECT_EQ(o["token_ids"].get<std::vector<int32_t>>(), ref->ids);
  EXPECT_EQ(o["usage"]["spec_drafted_tokens"], 0);

  CommandResult status = Ctl({"status", "s"});
  ASSERT_EQ(status.exit_code, 0);
  EXPECT_THAT(status.out, HasSubstr(absl::StrCat("spec:       draft model ", *draft, ", k 3: ")));
  EXPECT_THAT(status.out, HasSubstr(" accepted ("));
  EXPECT_THAT(status.out, HasSubstr(", draft model "));  // memory
  Json s = Json::parse(Ctl({"--json", "status", "s"}).out);
  EXPECT_EQ(s["spec"], "draft");
  EXPECT_EQ(s["spec_k"], 3);
  EXPECT_EQ(s["draft"], *draft);
  EXPECT_GT(std::stoll(s["spec_drafted_tokens"].get<std::string>()), 0);  // uint64: a string
  EXPECT_GT(std::stoll(s["spec_accepted_tokens"].get<std::string>()), 0);
  EXPECT_GT(s["spec_acceptance_rate"].get<double>(), 0);
  EXPECT_LE(s["spec_acceptance_rate"].get<double>(), 1);
  // The gate is on (the default): on the CPU a draft of the target's own
  // size may or may not pay, so only the report's consistency is checked.
  const int64_t held =
      s.contains("spec_gate_held_steps") ? std::stoll(s["spec_gate_held_steps"].get<std::string>()) : 0;
  EXPECT_EQ(status.out.find("held back on") != std::string::npos, held > 0) << status.out;

  CommandResult help = Ctl({"load", "--help"});
  EXPECT_THAT(help.out, HasSubstr("--draft"));
  EXPECT_THAT(help.out, HasSubstr("--spec-k"));
  EXPECT_THAT(help.out, HasSubstr("off, ngram"));
}

TEST_F(MinferctlTest, GenerateWithOutputConstraints) {
  StartDaemon();
  ASSERT_EQ(Ctl({"load", "m", path_, "--ctx", "512", "-q"}).exit_code, 0);
  const std::string dir = std::getenv("TEST_TMPDIR");

  // Each output is exactly what its constraint allows (sampled at
  // temperature 1 from a random model; printed with a newline).
  CommandResult choice = Ctl({"generate", "m", "Pick:", "--temp", "1", "--seed", "3", "-n", "16",
                              "--choice", "yes,no,not sure"});
  ASSERT_EQ(choice.exit_code, 0) << choice.err;
  EXPECT_THAT(choice.out, ::testing::AnyOf("yes\n", "no\n", "not sure\n"));
  EXPECT_THAT(choice.err, HasSubstr("[eos] m: "));

  CommandResult regex = Ctl({"generate", "m", "Code:", "--temp", "1", "--seed", "1", "-n", "32",
                             "--regex", "[A-Z]{2}[0-9]{3}"});
  ASSERT_EQ(regex.exit_code, 0) << regex.err;
  EXPECT_TRUE(std::regex_match(regex.out, std::regex("[A-Z]{2}[0-9]{3}\n"))) << regex.out;

  const std::string grammar = dir + "/answer.gbnf";
  std::ofstream(grammar) << "# yes or no, then a digit\nroot ::= (\"yes\" | \"no\") \" \" [0-9]\n";
  CommandResult gbnf = Ctl({"generate", "m", "Answer:", "--temp", "1", "--seed", "2", "-n", "16",
                            "--grammar", grammar});
  ASSERT_EQ(gbnf.exit_code, 0) << gbnf.err;
  EXPECT_TRUE(std::regex_match(gbnf.out, std::regex("(yes|no) [0-9]\n"))) << gbnf.out;

  const std::string schema = dir + "/schema.json";
  std::ofstream(schema) << R"({"type": "object", "properties": {
      "ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0, "maximum": 9}},
      "required": ["ok", "n"], "additionalProperties": false})";
  CommandResult js = Ctl({"--json", "generate", "m", "JSON:", "--temp", "1", "--seed", "4", "-n",
                          "200", "--json-schema", schema, "--json-whitespace", "0"});
  ASSERT_EQ(js.exit_code, 0) << js.err;
  const Json r = Json::parse(js.out);
  EXPECT_EQ(r["finish_reason"], "FINISH_REASON_EOS");
  const Json value = Json::parse(r["text"].get<std::string>(), nullptr, false);
  ASSERT_TRUE(value.is_object()) << r["text"];
  ASSERT_EQ(value.size(), 2u) << r["text"];
  EXPECT_TRUE(value["ok"].is_boolean());
  EXPECT_TRUE(value["n"].is_number_integer() && value["n"] >= 0 && value["n"] <= 9);
  // Compact: no whitespace anywhere (none can be inside these values).
  EXPECT_EQ(r["text"].get<std::string>().find_first_of(" \n\t\r"), std::string::npos);

  // Usage errors: two constraints, whitespace without JSON, a missing file.
  CommandResult two = Ctl({"generate", "m", "x", "--regex", "a", "--choice", "b"});
  EXPECT_EQ(two.exit_code, 2);
  EXPECT_THAT(two.err, HasSubstr("excludes"));
  CommandResult ws = Ctl({"generate", "m", "x", "--regex", "a", "--json-whitespace", "1"});
  EXPECT_EQ(ws.exit_code, 2);
  EXPECT_EQ(ws.err, "minferctl: --json-whitespace needs --json-schema or --json-object\n");
  CommandResult missing = Ctl({"generate", "m", "x", "--json-schema", dir + "/nope.json"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("--json-schema: cannot read"));
  // The server's refusal names the field and the problem.
  std::ofstream(schema) << R"({"type": "object", "propertyNames": {"maxLength": 3}})";
  CommandResult bad = Ctl({"generate", "m", "x", "--json-schema", schema});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.err, StartsWith("minferctl: INVALID_ARGUMENT: json_schema: "));
  EXPECT_THAT(bad.err, HasSubstr("propertyNames"));

  CommandResult status = Ctl({"status", "m"});
  ASSERT_EQ(status.exit_code, 0);
  EXPECT_THAT(status.out, HasSubstr("grammars:   0 constrained sequences running, 4 requests; "
                                    "4 compiled, 0 cache hits, 1 refused; "));
}

TEST_F(MinferctlTest, GenerateWithTools) {
  StartDaemon();
  ASSERT_EQ(Ctl({"load", "m", path_, "--ctx", "1024", "-q"}).exit_code, 0);
  const std::string dir = std::getenv("TEST_TMPDIR");
  const std::string tools = dir + "/tools.json";
  // One tool in OpenAI's shape, one in minfer's.
  std::ofstream(tools) << R"([
      {"type": "function", "function": {"name": "add", "description": "adds",
       "parameters": {"type": "object", "properties": {
         "a": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["a"]}}},
      {"name": "ping", "parameters": {"type": "object", "properties": {}}}])";

  // A forced call of "add": typed in --json, arguments valid.
  CommandResult js = Ctl({"--json", "generate", "m", "Add:", "--chat", "--tools", tools,
                          "--tool-choice", "add", "--no-parallel-tool-calls", "--temp", "1",
                          "--seed", "5", "-n", "200"});
  ASSERT_EQ(js.exit_code, 0) << js.err;
  const Json r = Json::parse(js.out);
  EXPECT_EQ(r["finish_reason"], "FINISH_REASON_TOOL_CALLS") << js.out;
  ASSERT_EQ(r["tool_calls"].size(), 1u) << js.out;
  const Json& call = r["tool_calls"][0];
  EXPECT_EQ(call["name"], "add");
  EXPECT_EQ(call["index"], 0);
  EXPECT_THAT(call["id"].get<std::string>(), StartsWith("call_"));
  const Json args = Json::parse(call["arguments"].get<std::string>(), nullptr, false);
  ASSERT_TRUE(args.is_object()) << call;
  EXPECT_TRUE(args["a"].is_number_integer() && args["a"] >= 0 && args["a"] <= 9) << args;
  EXPECT_THAT(r["text"].get<std::string>(), HasSubstr("<tool_call>"));

  // The same call printed: one line per call.
  CommandResult text = Ctl({"generate", "m", "Add:", "--chat", "--tools", tools, "--tool-choice",
                            "add", "--no-parallel-tool-calls", "--temp", "1", "--seed", "5",
                            "-n", "200"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  // (Ids are random; the seed repeats the arguments.)
  EXPECT_THAT(text.out, StartsWith("[tool call 0] add (call_"));
  EXPECT_THAT(text.out, ::testing::EndsWith(
                            absl::StrCat(") ", call["arguments"].get<std::string>(), "\n")));
  EXPECT_EQ(std::count(text.out.begin(), text.out.end(), '\n'), 1) << text.out;
  EXPECT_THAT(text.err, HasSubstr("[tool_calls] m: "));

  // Usage errors: tools without --chat, a file of the wrong shape; the
  // server names an unknown function.
  CommandResult no_chat = Ctl({"generate", "m", "x", "--tools", tools});
  EXPECT_EQ(no_chat.exit_code, 2);
  EXPECT_THAT(no_chat.err, HasSubstr("need --chat"));
  const std::string bad = dir + "/bad.json";
  std::ofstream(bad) << R"([{"type": "function", "function": {"description": "no name"}}])";
  CommandResult shape = Ctl({"generate", "m", "x", "--chat", "--tools", bad});
  EXPECT_EQ(shape.exit_code, 2);
  EXPECT_THAT(shape.err, HasSubstr("[0].function.name: a string is required"));
  CommandResult unknown =
      Ctl({"generate", "m", "x", "--chat", "--tools", tools, "--tool-choice", "nope"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_THAT(unknown.err, StartsWith("minferctl: INVALID_ARGUMENT: chat.tool_choice"));
}

TEST_F(MinferctlTest, BenchStreamsConcurrentlyAndMatchesTheEngine) {
  StartDaemon();
  ASSERT_EQ(Ctl({"load", "a", path_, "--ctx", "256", "--parallel", "2", "-q"}).exit_code, 0);
  ASSERT_EQ(Ctl({"load", "b", path_, "--ctx", "256", "--parallel", "1", "-q"}).exit_code, 0);
  const std::string prompt = "Once upon a time";
  auto ref = daemon::testing::ReferenceGenerate(
      path_, daemon::testing::TextRequest("a", prompt, 16), 256);
  ASSERT_TRUE(ref.ok());
  // 2 streams per model: "b" has one sequence, so its second stream queues.
  CommandResult r =
      Ctl({"--json", "bench", "a", "b", "-c", "2", "-n", "16", "-p", prompt});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out);
  ASSERT_EQ(j["streams"].size(), 4u);
  for (const Json& st : j["streams"]) {
    EXPECT_TRUE(st["ok"].get<bool>());
    EXPECT_EQ(st["ids"].get<std::vector<int32_t>>(), ref->ids) << st["model"];
    // The client's own rate needs tokens in two messages or more, which a
    // loaded machine may coalesce into one for a model this fast; the
    // server's is always there.
    EXPECT_GE(st["decode_tps"].get<double>(), 0);
    EXPECT_GT(st["server_decode_tps"].get<double>(), 0);
    EXPECT_GE(st["step_tps"].get<double>(), st["server_decode_tps"].get<double>());
    EXPECT_GT(st["ttft_s"].get<double>(), 0);
  }
  EXPECT_EQ(j["tokens"], 64);
  EXPECT_EQ(j["failed"], 0);
  EXPECT_EQ(j["mismatched"], 0);
  EXPECT_GT(j["aggregate_tps"].get<double>(), 0);
  CommandResult table = Ctl({"bench", "a", "-n", "4"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("1 streams, 0 failed, 0 greedy mismatches; 4 tokens in"));
  CommandResult missing = Ctl({"bench", "nope", "-n", "4"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("NOT_FOUND"));
}

TEST_F(MinferctlTest, KnobsAliasesHealthAndErrors) {
  StartDaemon({"--model", "m=" + path_});
  ASSERT_TRUE(daemon::testing::WaitFor([&] { return Ctl({"health", "m"}).exit_code == 0; }));
  EXPECT_EQ(Ctl({"health"}).out, "SERVING\n");
  CommandResult ghost = Ctl({"health", "ghost"});
  EXPECT_EQ(ghost.exit_code, 1);
  EXPECT_THAT(ghost.err, StartsWith("minferctl: NOT_FOUND"));

  CommandResult knobs = Ctl({"knobs", "list"});
  ASSERT_EQ(knobs.exit_code, 0);
  EXPECT_THAT(knobs.out, HasSubstr("MINFER_PREFILL_CHUNK"));
  EXPECT_THAT(knobs.out, HasSubstr("graph-rebuild"));
  CommandResult set = Ctl({"--json", "knobs", "set", "MINFER_NO_FUSE_FFN", "1", "--model", "m"});
  ASSERT_EQ(set.exit_code, 0) << set.err;
  Json k = Json::parse(set.out);
  EXPECT_EQ(k["value"], "1");
  EXPECT_EQ(k["overridden"], true);
  EXPECT_THAT(Ctl({"knobs", "get", "MINFER_NO_FUSE_FFN", "--model", "m"}).out,
              HasSubstr("1 (override of model m)"));
  EXPECT_THAT(Ctl({"knobs", "get", "MINFER_NO_FUSE_FFN"}).out, HasSubstr("value:    0"));
  CommandResult bad = Ctl({"knobs", "set", "MINFER_PREFILL_CHUNK", "many"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.err, StartsWith("minferctl: INVALID_ARGUMENT"));
  EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1);

  // -n 0 is sent as 0 (it used to mean the default of 256): the server
  // refuses it, naming the field.
  CommandResult zero = Ctl({"generate", "m", "hello", "-n", "0"});
  EXPECT_EQ(zero.exit_code, 1);
  EXPECT_EQ(zero.err, "minferctl: INVALID_ARGUMENT: stopping.max_tokens must be >= 1, got 0\n");
  EXPECT_EQ(zero.out, "");

  ASSERT_EQ(Ctl({"alias", "set", "prod", "m"}).exit_code, 0);
  EXPECT_THAT(Ctl({"alias", "list"}).out, HasSubstr("prod   m"));
  EXPECT_EQ(Ctl({"health", "prod"}).out, "SERVING\n");
  CommandResult refused = Ctl({"unload", "m"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr("FAILED_PRECONDITION: model 'm' is the target of alias prod"));
  ASSERT_EQ(Ctl({"alias", "delete", "prod"}).exit_code, 0);
  EXPECT_EQ(Ctl({"unload", "m", "--cancel"}).exit_code, 0);

  CommandResult missing = Ctl({"load", "x", "/no/such.gguf"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("minferctl: NOT_FOUND:"));
  EXPECT_EQ(Ctl({"frobnicate"}).exit_code, 2);
  EXPECT_EQ(Ctl({"unload", "m", "--cancel", "--drain-timeout", "3"}).exit_code, 2);
}

TEST_F(MinferctlTest, AdminTokenFromFlagOrEnvironment) {
  const std::string token_file = absl::StrCat(std::getenv("TEST_TMPDIR"), "/token");
  std::ofstream(token_file) << "letmein\n";
  StartDaemon({"--admin-token-file", token_file});
  CommandResult no = Ctl({"list"});
  EXPECT_EQ(no.exit_code, 1);
  EXPECT_THAT(no.err, StartsWith("minferctl: UNAUTHENTICATED"));
  EXPECT_EQ(Ctl({"--token", "letmein", "list"}).exit_code, 0);
  EXPECT_EQ(Ctl({"health"}).exit_code, 0);  // health needs no token
}

// With tenants and an admin token: --api-key is the bearer of generation
// calls, --token of the admin ones.
TEST_F(MinferctlTest, ApiKeyForGenerationTokenForAdmin) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  std::ofstream(dir + "/admin") << "letmein\n";
  std::ofstream(dir + "/team.keys") << "sk-team\n";
  StartDaemon({"--admin-token-file", dir + "/admin", "--model", "tiny=" + path_, "--tenant",
               absl::StrCat("name=team,key_file=", dir, "/team.keys,max_streams=2")});
  ASSERT_TRUE(daemon::testing::WaitFor([&] {
    // (Exactly: "NOT_SERVING" contains "SERVING".)
    return Ctl({"health", "tiny"}).out == "SERVING\n";
  }, std::chrono::seconds(20)));
  const std::vector<std::string> gen = {"generate", "tiny", "Hello", "-n", "4", "--ignore-eos"};
  auto with = [](std::vector<std::string> pre, const std::vector<std::string>& cmd) {
    pre.insert(pre.end(), cmd.begin(), cmd.end());
    return pre;
  };
  CommandResult admin_only = Ctl(with({"--token", "letmein"}, gen));
  EXPECT_EQ(admin_only.exit_code, 1);
  EXPECT_THAT(admin_only.err, StartsWith("minferctl: UNAUTHENTICATED"));
  CommandResult both = Ctl(with({"--token", "letmein", "--api-key", "sk-team"}, gen));
  EXPECT_EQ(both.exit_code, 0) << both.err;
  CommandResult tenants = Ctl({"--token", "letmein", "--api-key", "sk-team", "tenants"});
  EXPECT_EQ(tenants.exit_code, 0) << tenants.err;
  EXPECT_THAT(tenants.out, HasSubstr("team"));
  EXPECT_THAT(tenants.out, HasSubstr("0 of 2"));
  CommandResult key_only = Ctl({"--api-key", "sk-team", "tenants"});  // not an admin token
  EXPECT_EQ(key_only.exit_code, 1);
  EXPECT_THAT(key_only.err, StartsWith("minferctl: UNAUTHENTICATED"));
}

TEST_F(MinferctlTest, UnreachableServerIsAnError) {
  addr_ = "127.0.0.1:1";
  CommandResult r = Ctl({"--timeout", "2", "list"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, StartsWith("minferctl: UNAVAILABLE"));
}

}  // namespace
}  // namespace minfer
