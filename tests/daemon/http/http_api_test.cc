// minferd's OpenAI-compatible HTTP API end to end (daemon/http/http_server.h):
// a daemon in this process serving tiny-untied over gRPC and HTTP, driven
// by the official `openai` npm package (openai_client.mjs) and by curl
// (raw SSE framing, error shapes, limits, keep-alive). The reference for
// every generation is the same request over gRPC: the same greedy (and
// seeded) ids and text.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/minfer_client.h"
#include "daemon/daemon.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/daemon/http/raw_client.h"
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
constexpr char kKey[] = "sk-test-7f3a";

std::string TmpPath(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
}

class HttpApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto path = minfer::testing::TestModelPath("tiny-untied", "q8_0", 1);
    ASSERT_TRUE(path.ok()) << path.status();
    path_ = new std::string(*path);
    const std::string keys = TmpPath("api-keys");
    std::ofstream(keys) << "# keys for the test\n\n" << kKey << "\n";
    DaemonConfig c = testing::TestConfig();
    c.http_listen = "127.0.0.1:0";
    c.api_key_file = keys;
    c.default_n_ctx = 4096;
    c.default_parallel = 4;
    c.metrics_listen = "";
    SlotConfig m;
    m.name = "a";
    m.path = *path_;
    c.models.push_back(m);
    c.aliases.push_back({"prod", "a"});
    auto d = Daemon::Start(c);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = d->release();
    client_ = testing::ClientFor(*daemon_).release();
    ASSERT_TRUE(testing::WaitFor(
        [] {
          auto s = client_->GetModelStatus("a");
          return s.ok() && s->state() == v1::MODEL_STATE_READY &&
                 daemon_->slots().ListAliases().size() == 1;
        },
        std::chrono::seconds(30)));
  }
  static void TearDownTestSuite() {
    delete client_;
    delete daemon_;
    delete path_;
  }

  static std::string Base() { return absl::StrCat("http://", daemon_->http_address()); }

  // curl with the API key; `extra` before the URL.
  static minfer::testing::CommandResult Curl(std::vector<std::string> extra,
                                             const std::string& url, bool key = true) {
    std::vector<std::string> argv = {"/usr/bin/env", "curl", "-sS"};
    if (key) {
      argv.push_back("-H");
      argv.push_back(absl::StrCat("Authorization: Bearer ", kKey));
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back(url);
    auto r = minfer::testing::RunCommand(argv, std::chrono::seconds(60));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : minfer::testing::CommandResult();
  }

  // POSTs `body`; returns the body, and the HTTP status in *status.
  static std::string Post(const std::string& route, const std::string& body, int* status,
                          bool key = true) {
    auto r = Curl({"-X", "POST", "-H", "Content-Type: application/json", "--data-binary", body,
                   "-w", "\n%{http_code}"},
                  Base() + route, key);
    const size_t nl = r.out.rfind('\n');
    *status = nl == std::string::npos ? 0 : std::atoi(r.out.c_str() + nl + 1);
    return nl == std::string::npos ? r.out : r.out.substr(0, nl);
  }

  // The same generation over gRPC.
  static client::GenerateResult Grpc(const v1::GenerateRequest& r) {
    auto g = client_->Generate(r);
    EXPECT_TRUE(g.ok()) << g.status();
    return g.ok() ? *g : client::GenerateResult();
  }

  static v1::GenerateRequest ChatRequest(int32_t max_tokens) {
    v1::GenerateRequest r;
    r.set_model("prod");
    auto* s = r.mutable_chat()->add_messages();
    s->set_role("system");
    s->set_content("You are terse.");
    auto* u = r.mutable_chat()->add_messages();
    u->set_role("user");
    u->set_content("Name three colours.");
    r.mutable_sampling()->set_temperature(0);
    r.mutable_stopping()->set_max_tokens(max_tokens);
    r.mutable_stopping()->set_ignore_eos(true);
    return r;
  }

  static std::string TokenBytes(int32_t id) {
    auto slot = daemon_->slots().Find("a");
    EXPECT_TRUE(slot.ok());
    return std::string(*(*slot)->model()->tokenizer().TokenBytes(id));
  }

  static std::vector<int32_t> Ids(const json& j) { return j.get<std::vector<int32_t>>(); }

  static std::string* path_;
  static Daemon* daemon_;
  static client::MinferClient* client_;
};

std::string* HttpApiTest::path_ = nullptr;
Daemon* HttpApiTest::daemon_ = nullptr;
client::MinferClient* HttpApiTest::client_ = nullptr;

TEST_F(HttpApiTest, OpenAiSdkGetsWhatGrpcGets) {
  ASSERT_TRUE(std::ifstream(absl::StrCat(kModules, "/openai/package.json")).good())
      << "npm packages missing: run scripts/install_deps.sh";
  auto r = minfer::testing::RunCommand({"/usr/bin/env", "node", "tests/daemon/http/openai_client.mjs",
                                        kModules, Base(), kKey, "prod"},
                                       std::chrono::seconds(120));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->exit_code, 0) << r->err;
  const json out = json::parse(r->out, nullptr, false);
  ASSERT_FALSE(out.is_discarded()) << r->out;

  // Chat: the greedy ids and text of the same request over gRPC.
  const client::GenerateResult chat = Grpc(ChatRequest(24));
  ASSERT_EQ(chat.token_ids.size(), 24u);
  EXPECT_EQ(Ids(out["chat"]["token_ids"]), chat.token_ids);
  EXPECT_EQ(out["chat"]["content"], chat.text);
  EXPECT_EQ(out["chat"]["role"], "assistant");
  EXPECT_EQ(out["chat"]["finish_reason"], "length");
  EXPECT_EQ(out["chat"]["object"], "chat.completion");
  EXPECT_EQ(out["chat"]["model"], "a");  // the alias resolved
  EXPECT_THAT(out["chat"]["id"].get<std::string>(), StartsWith("chatcmpl-"));
  EXPECT_EQ(out["chat"]["usage"]["prompt_tokens"], chat.usage.prompt_tokens());
  EXPECT_EQ(out["chat"]["usage"]["completion_tokens"], 24);
  EXPECT_EQ(out["chat"]["usage"]["total_tokens"], chat.usage.prompt_tokens() + 24);

  // Streamed: role first, the same content and ids, one id for all
  // chunks, the usage chunk with no choices.
  const json& s = out["chat_stream"];
  EXPECT_EQ(s["first_role"], "assistant");
  EXPECT_EQ(s["content"], chat.text);
  EXPECT_EQ(Ids(s["token_ids"]), chat.token_ids);
  EXPECT_EQ(s["finish_reason"], "length");
  EXPECT_EQ(s["ids"], 1);
  EXPECT_EQ(s["usage_chunk_choices"], 0);
  EXPECT_EQ(s["usage"]["completion_tokens"], 24);
  EXPECT_GE(s["chunks"].get<int>(), 4);  // role, content..., finish, usage

  // Completions.
  v1::GenerateRequest text = testing::TextRequest("prod", "The colours of the rainbow are", 16);
  const client::GenerateResult completion = Grpc(text);
  EXPECT_EQ(Ids(out["completion"]["token_ids"]), completion.token_ids);
  EXPECT_EQ(out["completion"]["text"], completion.text);
  EXPECT_EQ(out["completion"]["object"], "text_completion");
  EXPECT_EQ(out["completion"]["finish_reason"], "length");
  EXPECT_EQ(out["completion_stream"]["text"], completion.text);
  EXPECT_EQ(out["completion_stream"]["finish_reason"], "length");

  // Stop: the text ends right before the stop string's first occurrence.
  const std::string greedy = out["stop"]["greedy"];
  const std::string stop = out["stop"]["stop"];
  ASSERT_FALSE(stop.empty());
  EXPECT_EQ(out["stop"]["text"], greedy.substr(0, greedy.find(stop)));
  EXPECT_EQ(out["stop"]["finish_reason"], "stop");

  // Seeds: reproducible, and the ids gRPC samples with the same seed.
  EXPECT_EQ(out["seed"]["a"], out["seed"]["b"]);
  v1::GenerateRequest seeded = ChatRequest(24);
  seeded.mutable_sampling()->set_temperature(1.0f);
  seeded.mutable_sampling()->set_seed(42);
  EXPECT_EQ(Ids(out["seed"]["a"]), Grpc(seeded).token_ids);
  seeded.mutable_sampling()->set_seed(43);
  EXPECT_EQ(Ids(out["seed"]["c"]), Grpc(seeded).token_ids);

  // Logprobs: one entry per token, the token's bytes, two alternatives in
  // decreasing order, the greedy token the most likely.
  const json& lp = out["logprobs"]["content"];
  const std::vector<int32_t> lp_ids = Ids(out["logprobs"]["token_ids"]);
  ASSERT_EQ(lp.size(), 8u);
  ASSERT_EQ(lp_ids.size(), 8u);
  for (size_t i = 0; i < lp.size(); ++i) {
    EXPECT_EQ(lp[i]["token"], TokenBytes(lp_ids[i]));
    const float logprob = lp[i]["logprob"];
    EXPECT_LE(logprob, 0.0f);
    ASSERT_EQ(lp[i]["top_logprobs"].size(), 2u);
    EXPECT_EQ(lp[i]["top_logprobs"][0]["token"], lp[i]["token"]);
    EXPECT_FLOAT_EQ(lp[i]["top_logprobs"][0]["logprob"].get<float>(), logprob);
    EXPECT_GE(lp[i]["top_logprobs"][0]["logprob"].get<float>(),
              lp[i]["top_logprobs"][1]["logprob"].get<float>());
  }

  // Errors as the SDK raises them.
  EXPECT_EQ(out["unknown_model"]["status"], 404);
  EXPECT_EQ(out["unknown_model"]["code"], "model_not_found");
  EXPECT_EQ(out["unknown_model"]["param"], "model");
  EXPECT_EQ(out["bad_key"]["status"], 401);
  EXPECT_EQ(out["bad_key"]["code"], "invalid_api_key");
  EXPECT_EQ(out["bad_field"]["status"], 400);
  EXPECT_EQ(out["bad_field"]["param"], "temperature");
  EXPECT_EQ(out["bad_field"]["type"], "invalid_request_error");
  EXPECT_EQ(out["models"], json::parse(R"(["a", "prod"])"));

  // The abandoned stream (3000 tokens asked, two chunks read): its sequence
  // is cancelled, not run to the end.
  EXPECT_EQ(out["cancelled"]["chunks_read"], 2);
  ASSERT_TRUE(testing::WaitFor(
      [] {
        auto st = client_->GetModelStatus("a");
        return st.ok() && st->active_sequences() == 0 && st->counters().cancelled() >= 1;
      },
      std::chrono::seconds(10)));
  auto st = client_->GetModelStatus("a");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->counters().cancelled(), 1u);
  EXPECT_LT(st->counters().completion_tokens(), 3000u);
  EXPECT_THAT(daemon_->metrics().Serialize(),
              HasSubstr("minfer_requests_total{api=\"http\",code=\"499\","
                        "method=\"/v1/chat/completions\",model=\"a\"} 1"));
}

// A model loaded with a draft (the same shape at q4_0): the SDK reads
// usage.completion_tokens_details with the accepted and rejected drafts
// (as gRPC's usage counts them, in the response and the streamed usage
// chunk), the ids are those of the model without drafts, "speculative":
// false drafts nothing, and a non-boolean is a 400 naming the field.
TEST_F(HttpApiTest, DraftedRequestsReportPredictionTokens) {
  auto draft = minfer::testing::TestModelPath("tiny-untied", "q4_0", 1);
  ASSERT_TRUE(draft.ok()) << draft.status();
  v1::LoadModelRequest load;
  load.set_name("spec");
  load.set_path(*path_);
  load.set_draft(*draft);
  // Drafts on every step (on the CPU a draft of the target's own size
  // rarely pays, and the gate would hold most of them back).
  (*load.mutable_knobs())["MINFER_SPEC_GATE"] = "0";
  auto loaded = client_->LoadModel(load);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto r = minfer::testing::RunCommand({"/usr/bin/env", "node",
                                        "tests/daemon/http/openai_client.mjs", kModules, Base(),
                                        kKey, "spec", "spec"},
                                       std::chrono::seconds(120));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->exit_code, 0) << r->err;
  const json out = json::parse(r->out, nullptr, false);
  ASSERT_FALSE(out.is_discarded()) << r->out;

  v1::GenerateRequest same = ChatRequest(24);
  const client::GenerateResult plain = Grpc(same);  // model "a": no drafts
  EXPECT_EQ(plain.usage.spec_drafted_tokens(), 0);
  same.set_model("spec");
  const client::GenerateResult grpc = Grpc(same);
  ASSERT_GT(grpc.usage.spec_drafted_tokens(), 0);
  ASSERT_GT(grpc.usage.spec_accepted_tokens(), 0);
  EXPECT_EQ(grpc.token_ids, plain.token_ids);
  const json want = {
      {"accepted_prediction_tokens", grpc.usage.spec_accepted_tokens()},
      {"rejected_prediction_tokens",
       grpc.usage.spec_drafted_tokens() - grpc.usage.spec_accepted_tokens()}};
  EXPECT_EQ(Ids(out["chat"]["token_ids"]), plain.token_ids);
  EXPECT_EQ(out["chat"]["usage"]["completion_tokens_details"], want);
  EXPECT_EQ(out["chat"]["accepted"], grpc.usage.spec_accepted_tokens());
  EXPECT_EQ(Ids(out["stream"]["token_ids"]), plain.token_ids);
  EXPECT_EQ(out["stream"]["usage"]["completion_tokens_details"], want);
  EXPECT_EQ(Ids(out["off"]["token_ids"]), plain.token_ids);
  EXPECT_FALSE(out["off"]["usage"].contains("completion_tokens_details")) << out["off"];
  EXPECT_EQ(out["bad"]["status"], 400);
  EXPECT_EQ(out["bad"]["param"], "speculative");
  EXPECT_THAT(out["bad"]["message"].get<std::string>(),
              HasSubstr("speculative must be a boolean, got a string"));
  // /v1/completions reads the opt-out too.
  int status = 0;
  json e = json::parse(Post("/v1/completions",
                            R"({"model": "spec", "prompt": "x", "speculative": 1})", &status));
  EXPECT_EQ(status, 400);
  EXPECT_EQ(e["error"]["param"], "speculative");
  auto st = client_->GetModelStatus("spec");
  ASSERT_TRUE(st.ok());
  EXPECT_GT(st->spec_accepted_tokens(), 0u);
  v1::UnloadModelRequest u;
  u.set_name("spec");
  EXPECT_TRUE(client_->UnloadModel(u).ok());
}

TEST_F(HttpApiTest, CurlSeesSseFramingAndDone) {
  const std::string body = R"({"model": "prod", "stream": true, "temperature": 0,
      "max_tokens": 12, "ignore_eos": true, "return_token_ids": true,
      "messages": [{"role": "system", "content": "You are terse."},
                   {"role": "user", "content": "Name three colours."}]})";
  auto r = Curl({"-N", "-i", "-X", "POST", "-H", "Content-Type: application/json",
                 "--data-binary", body},
                Base() + "/v1/chat/completions");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t head_end = r.out.find("\r\n\r\n");
  ASSERT_NE(head_end, std::string::npos);
  const std::string head = r.out.substr(0, head_end);
  EXPECT_THAT(head, StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(head, HasSubstr("Content-Type: text/event-stream"));
  EXPECT_THAT(head, HasSubstr("Transfer-Encoding: chunked"));
  // Events: "data: JSON" separated by blank lines, ending with [DONE].
  std::vector<std::string> events =
      absl::StrSplit(r.out.substr(head_end + 4), "\n\n", absl::SkipEmpty());
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "data: [DONE]");
  std::string content;
  std::vector<int32_t> ids;
  std::string finish;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    ASSERT_THAT(events[i], StartsWith("data: ")) << events[i];
    const json e = json::parse(events[i].substr(6), nullptr, false);
    ASSERT_FALSE(e.is_discarded()) << events[i];
    EXPECT_EQ(e["object"], "chat.completion.chunk");
    const json& c = e["choices"][0];
    content += c["delta"].value("content", "");
    for (int32_t id : Ids(c["token_ids"])) ids.push_back(id);
    if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
  }
  const client::GenerateResult ref = Grpc(ChatRequest(12));
  EXPECT_EQ(content, ref.text);
  EXPECT_EQ(ids, ref.token_ids);
  EXPECT_EQ(finish, "length");
}

TEST_F(HttpApiTest, ErrorsHaveOpenAisShapeAndStatus) {
  int status = 0;
  // Not JSON.
  json e = json::parse(Post("/v1/chat/completions", "{not json", &status));
  EXPECT_EQ(status, 400);
  EXPECT_EQ(e, json::parse(R"({"error": {"message": "the request body is not valid JSON",
      "type": "invalid_request_error", "param": "body", "code": null}})"));
  // A bad field.
  e = json::parse(Post("/v1/completions", R"({"model": "prod", "prompt": "x", "n": 3})", &status));
  EXPECT_EQ(status, 400);
  EXPECT_EQ(e["error"]["param"], "n");
  // An unknown model.
  e = json::parse(Post("/v1/completions", R"({"model": "nope", "prompt": "x"})", &status));
  EXPECT_EQ(status, 404);
  EXPECT_EQ(e["error"]["code"], "model_not_found");
  // A prompt over the context: 400 context_length_exceeded.
  std::string big(20000, 'z');
  for (size_t i = 1; i < big.size(); i += 2) big[i] = ' ';
  e = json::parse(Post("/v1/completions",
                       absl::StrCat(R"({"model": "prod", "max_tokens": 1, "prompt": ")", big, "\"}"),
                       &status));
  EXPECT_EQ(status, 400);
  EXPECT_EQ(e["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(e["error"]["param"], "prompt");
  // No key, a wrong key: 401 with a challenge.
  e = json::parse(Post("/v1/completions", R"({"model": "prod", "prompt": "x"})", &status,
                       /*key=*/false));
  EXPECT_EQ(status, 401);
  EXPECT_EQ(e["error"]["code"], "invalid_api_key");
  EXPECT_THAT(e["error"]["message"].get<std::string>(), HasSubstr("Authorization: Bearer"));
  auto wrong = Curl({"-i", "-H", "Authorization: Bearer nope"}, Base() + "/v1/models",
                    /*key=*/false);
  EXPECT_THAT(wrong.out, StartsWith("HTTP/1.1 401"));
  EXPECT_THAT(wrong.out, HasSubstr("WWW-Authenticate: Bearer"));
  // No such route.
  auto route = Curl({"-w", "\n%{http_code}"}, Base() + "/v1/nothing");
  EXPECT_THAT(route.out, HasSubstr("\"type\":\"not_found_error\""));
  EXPECT_THAT(route.out, HasSubstr("\n404"));
  // A known route with the wrong method: 405 naming the one it takes.
  auto method = Curl({"-i", "-X", "GET"}, Base() + "/v1/chat/completions");
  EXPECT_THAT(method.out, StartsWith("HTTP/1.1 405 Method Not Allowed"));
  EXPECT_THAT(method.out, HasSubstr("Allow: POST\r\n"));
  EXPECT_THAT(method.out, HasSubstr("takes POST, not"));
  // A body over the limit (8 MiB): 413, in the same shape.
  const std::string file = TmpPath("big-body.json");
  {
    std::ofstream f(file);
    f << R"({"model": "prod", "prompt": ")" << std::string(9u << 20, 'a') << "\"}";
  }
  auto large = Curl({"-X", "POST", "-H", "Content-Type: application/json", "--data-binary",
                     "@" + file, "-w", "\n%{http_code}"},
                    Base() + "/v1/completions");
  EXPECT_THAT(large.out, HasSubstr("is larger than 8388608 bytes"));
  EXPECT_THAT(large.out, HasSubstr("\"code\":\"request_too_large\""));
  EXPECT_THAT(large.out, HasSubstr("\n413"));
  // The daemon still serves.
  e = json::parse(Post("/v1/completions",
                       R"({"model": "prod", "prompt": "x", "max_tokens": 2, "temperature": 0})",
                       &status));
  EXPECT_EQ(status, 200);
  EXPECT_EQ(e["usage"]["completion_tokens"], 2);
}

TEST_F(HttpApiTest, ModelsHealthAndKeepAlive) {
  auto models = Curl({}, Base() + "/v1/models");
  json m = json::parse(models.out);
  ASSERT_EQ(m["data"].size(), 2u);
  EXPECT_EQ(m["data"][0]["id"], "a");
  EXPECT_EQ(m["data"][1]["id"], "prod");
  EXPECT_EQ(m["data"][1]["object"], "model");
  EXPECT_EQ(json::parse(Curl({}, Base() + "/v1/models/prod").out)["id"], "prod");
  auto missing = Curl({"-w", "\n%{http_code}"}, Base() + "/v1/models/none");
  EXPECT_THAT(missing.out, HasSubstr("\n404"));
  // /health needs no key.
  auto health = Curl({}, Base() + "/health", /*key=*/false);
  EXPECT_EQ(json::parse(health.out), json::parse(R"({"status": "ok"})"));
  // Two requests on one command line: curl reuses the connection when the
  // server keeps it alive (HTTP/1.1).
  std::vector<std::string> argv = {"/usr/bin/env", "curl", "-sv", "-H",
                                   absl::StrCat("Authorization: Bearer ", kKey),
                                   Base() + "/v1/models", Base() + "/v1/models/a"};
  auto both = minfer::testing::RunCommand(argv);
  ASSERT_TRUE(both.ok());
  EXPECT_THAT(both->err, HasSubstr("Re-using existing connection"));
  EXPECT_THAT(both->out, HasSubstr("\"id\":\"a\""));
}

// The accept queue takes a burst of clients: cpp-httplib's own backlog of 5
// dropped the SYNs of 16 clients connecting at once (retried after a
// second) and lost a stream now and then. The kernel's figure, capped by
// net.core.somaxconn.
TEST_F(HttpApiTest, ListenBacklogTakesABurstOfClients) {
  ASSERT_NE(daemon_->http_server(), nullptr);
  int somaxconn = 4096;
  std::ifstream("/proc/sys/net/core/somaxconn") >> somaxconn;
  EXPECT_EQ(daemon_->http_server()->ListenBacklog(), std::min(4096, somaxconn));
}


// The value of the counter line that starts with `series` ("name{labels}"),
// 0 if absent.
double CounterValue(const std::string& metrics, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
    if (absl::StartsWith(line, series + " ")) {
      double v = 0;
      EXPECT_TRUE(absl::SimpleAtod(line.substr(series.size() + 1), &v)) << line;
      return v;
    }
  }
  return 0;
}

std::string HttpSeries(const std::string& code, const std::string& route, const std::string& model) {
  return absl::StrCat("minfer_requests_total{api=\"http\",code=\"", code, "\",method=\"", route,
                      "\",model=\"", model, "\"}");
}

// A chat request's raw HTTP/1.1 bytes.
std::string RawChat(const std::string& key, bool stream, int max_tokens) {
  const std::string body = absl::StrCat(
      R"({"model": "prod", "temperature": 0, "ignore_eos": true, "stream": )",
      stream ? "true" : "false", R"(, "max_tokens": )", max_tokens,
      R"(, "messages": [{"role": "user", "content": "Name three colours."}]})");
  return absl::StrCat("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ",
                      key, "\r\nContent-Type: application/json\r\nContent-Length: ", body.size(),
                      "\r\n\r\n", body);
}

// Streams that ran to their end are 200, and a client that left is 499:
// never the "-1" or "499 for a finished stream" of the old front door.
TEST_F(HttpApiTest, StreamsAreCountedByHowTheyEnded) {
  const std::string ok = HttpSeries("200", "/v1/chat/completions", "a");
  const std::string gone = HttpSeries("499", "/v1/chat/completions", "a");
  const std::string m0 = daemon_->metrics().Serialize();
  for (int i = 0; i < 2; ++i) {
    auto r = Curl({"-N", "-X", "POST", "-H", "Content-Type: application/json", "--data-binary",
                   R"({"model": "prod", "stream": true, "max_tokens": 3,
                       "messages": [{"role": "user", "content": "hi"}]})"},
                  Base() + "/v1/chat/completions");
    EXPECT_THAT(r.out, HasSubstr("data: [DONE]"));
  }
  // A stream whose client goes after its first event.
  const int fd = minfer::testing::ConnectTo(daemon_->http_address());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(minfer::testing::SendAll(fd, RawChat(kKey, /*stream=*/true, 4000)));
  EXPECT_THAT(minfer::testing::ReadUntil(fd, "data: {", std::chrono::seconds(10)),
              HasSubstr("data: {"));
  close(fd);
  std::string m1;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        m1 = daemon_->metrics().Serialize();
        return CounterValue(m1, gone) == CounterValue(m0, gone) + 1;
      },
      std::chrono::seconds(5)))
      << m1;
  EXPECT_EQ(CounterValue(m1, ok), CounterValue(m0, ok) + 2);
  EXPECT_THAT(m1, Not(HasSubstr("code=\"-1\"")));
  // The sequence was cancelled, not run to its 4,000 tokens.
  ASSERT_TRUE(testing::WaitFor(
      [] { return client_->GetModelStatus("a")->active_sequences() == 0; },
      std::chrono::seconds(5)));
}

// A request with 20,000 header lines, no key: 431 at the cap, before any
// authorization, and the daemon serves on.
TEST_F(HttpApiTest, HeaderFloodsAre431WithoutAKey) {
  const std::string bad = "minfer_http_connections_total{result=\"bad_request\"}";
  const std::string accepted = "minfer_http_connections_total{result=\"accepted\"}";
  const std::string m0 = daemon_->metrics().Serialize();
  const int fd = minfer::testing::ConnectTo(daemon_->http_address());
  ASSERT_GE(fd, 0);
  std::string head = "POST /v1/chat/completions HTTP/1.1\r\n";
  for (int i = 0; i < 40; ++i) absl::StrAppend(&head, "X-Pad-", i, ": ", std::string(1000, 'p'), "\r\n");
  minfer::testing::SendAll(fd, head);
  const std::string r = minfer::testing::ReadFor(fd, std::chrono::seconds(5));
  EXPECT_THAT(r, StartsWith("HTTP/1.1 431"));
  EXPECT_THAT(r, HasSubstr("\"code\":\"request_header_fields_too_large\""));
  close(fd);
  int status = 0;
  Post("/v1/completions", R"({"model": "prod", "prompt": "x", "max_tokens": 1})", &status);
  EXPECT_EQ(status, 200);
  // The metrics count it, beside the connections accepted.
  const std::string m1 = daemon_->metrics().Serialize();
  EXPECT_EQ(CounterValue(m1, bad), CounterValue(m0, bad) + 1) << m1;
  EXPECT_GE(CounterValue(m1, accepted), CounterValue(m0, accepted) + 2);
  EXPECT_THAT(m1, HasSubstr("\nminfer_http_connections "));
}

// A client that sends its request and shuts its sending side gets the
// whole answer (the old front door took the FIN for a disconnect).
TEST_F(HttpApiTest, AHalfClosedClientGetsItsCompletion) {
  const int fd = minfer::testing::ConnectTo(daemon_->http_address());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(minfer::testing::SendAll(fd, RawChat(kKey, /*stream=*/false, 8)));
  shutdown(fd, SHUT_WR);
  bool closed = false;
  const std::string r = minfer::testing::ReadFor(fd, std::chrono::seconds(20), &closed);
  EXPECT_TRUE(closed);
  const size_t at = r.find("HTTP/1.1 200 OK");
  ASSERT_NE(at, std::string::npos) << r;
  const json j = json::parse(r.substr(r.find("\r\n\r\n", at) + 4), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r;
  EXPECT_EQ(j["usage"]["completion_tokens"], 8);
  EXPECT_EQ(j["choices"][0]["message"]["content"], Grpc(ChatRequest(8)).text);
  close(fd);
}

// Idle and dripping connections hold no worker: generations and /health
// go on beside 200 + 50 of them.
TEST_F(HttpApiTest, IdleAndSlowConnectionsDoNotStopTheApi) {
  std::vector<int> fds;
  for (int i = 0; i < 200; ++i) fds.push_back(minfer::testing::ConnectTo(daemon_->http_address()));
  for (int i = 0; i < 50; ++i) {
    fds.push_back(minfer::testing::ConnectTo(daemon_->http_address()));
    minfer::testing::SendAll(fds.back(), "POST /v1/completions HTTP/1.1\r\nX-Slow: ");
  }
  for (int fd : fds) ASSERT_GE(fd, 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto health = Curl({}, Base() + "/health", /*key=*/false);
  EXPECT_EQ(json::parse(health.out)["status"], "ok");
  EXPECT_LT(minfer::testing::SecondsSince(t0), 2.0);
  int status = 0;
  json r = json::parse(Post("/v1/chat/completions",
                            R"({"model": "prod", "max_tokens": 6, "temperature": 0, "ignore_eos": true,
                                "messages": [{"role": "user", "content": "Name three colours."}]})",
                            &status));
  EXPECT_EQ(status, 200);
  EXPECT_EQ(r["usage"]["completion_tokens"], 6);
  EXPECT_GE(daemon_->http_server()->stats().open_connections, 250);
  for (int fd : fds) close(fd);
}

// A daemon of its own serving tiny-untied as `model` over gRPC and HTTP,
// once the model is ready; null (and a failure) if it cannot start.
std::unique_ptr<Daemon> StartHttpDaemon(const std::string& model) {
  auto path = minfer::testing::TestModelPath("tiny-untied", "q8_0", 1);
  if (!path.ok()) {
    ADD_FAILURE() << path.status();
    return nullptr;
  }
  DaemonConfig c = testing::TestConfig();
  c.http_listen = "127.0.0.1:0";
  SlotConfig m;
  m.name = model;
  m.path = *path;
  c.models.push_back(m);
  auto d = Daemon::Start(c);
  if (!d.ok()) {
    ADD_FAILURE() << d.status();
    return nullptr;
  }
  auto client = testing::ClientFor(**d);
  if (!testing::WaitFor([&] {
        auto s = client->GetModelStatus(model);
        return s.ok() && s->state() == v1::MODEL_STATE_READY;
      }, std::chrono::seconds(30))) {
    ADD_FAILURE() << "model " << model << " did not load";
    return nullptr;
  }
  return *std::move(d);
}

// While the daemon drains, /health is 503 and a stream that was running
// finishes whole.
TEST(HttpApiDrainTest, HealthIs503WhileStreamsFinish) {
  std::unique_ptr<Daemon> d = StartHttpDaemon("prod");
  ASSERT_NE(d, nullptr);
  const std::string base = absl::StrCat("http://", d->http_address());
  const int fd = minfer::testing::ConnectTo(d->http_address());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(minfer::testing::SendAll(fd, RawChat("unused", /*stream=*/true, 300)));
  std::string got = minfer::testing::ReadUntil(fd, "data: {", std::chrono::seconds(10));
  ASSERT_THAT(got, HasSubstr("data: {"));
  DrainResult drained;
  std::thread drain([&] { drained = d->Drain(std::chrono::seconds(60)); });
  // (Drain sets the state first thing; the listener stays open meanwhile.)
  std::string health;
  for (int i = 0; i < 50 && !absl::EndsWith(health, "503"); ++i) {
    auto h = minfer::testing::RunCommand(
        {"/usr/bin/env", "curl", "-s", "-w", "\n%{http_code}", base + "/health"});
    ASSERT_TRUE(h.ok());
    health = h->out;
    if (!absl::EndsWith(health, "503")) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(health, "{\"status\":\"draining\"}\n503");
  EXPECT_THAT(got, Not(HasSubstr("[DONE]")));  // (300 tokens take longer than that)
  got += minfer::testing::ReadUntil(fd, "data: [DONE]", std::chrono::seconds(60));
  drain.join();
  EXPECT_THAT(got, HasSubstr("data: [DONE]"));
  EXPECT_THAT(got, HasSubstr("\"finish_reason\":\"length\""));
  EXPECT_EQ(drained.cancelled, 0);
  EXPECT_EQ(drained.streams_at_start, 1);
  close(fd);
}

// Its own daemon: a drain turns /health and new generations to 503.
TEST(HttpApiDrainTest, DrainingRefusesNewRequestsWith503) {
  std::unique_ptr<Daemon> d = StartHttpDaemon("a");
  ASSERT_NE(d, nullptr);
  const std::string base = absl::StrCat("http://", d->http_address());
  d->Drain(std::chrono::seconds(1));
  auto health = minfer::testing::RunCommand(
      {"/usr/bin/env", "curl", "-s", "-w", "\n%{http_code}", base + "/health"});
  ASSERT_TRUE(health.ok());
  EXPECT_EQ(health->out, "{\"status\":\"draining\"}\n503");
  auto gen = minfer::testing::RunCommand(
      {"/usr/bin/env", "curl", "-s", "-w", "\n%{http_code}", "-X", "POST", "--data-binary",
       R"({"model": "a", "prompt": "x"})", base + "/v1/completions"});
  ASSERT_TRUE(gen.ok());
  EXPECT_THAT(gen->out, HasSubstr("\"code\":\"unavailable\""));
  EXPECT_THAT(gen->out, HasSubstr("draining"));
  EXPECT_THAT(gen->out, HasSubstr("\n503"));
}

}  // namespace
}  // namespace minfer::daemon
