// minferd as a real process: start-up from flags and a config file, SIGTERM
// drain (an in-flight stream finishes; health turns NOT_SERVING; exit 0;
// the ready file removed), the drain timeout, a second signal cutting the
// drain short, a client killed mid-stream, a FIFO as a model, a TLS key
// that is not the certificate's, and what reaches the log.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/minfer_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/daemon/test_util.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_models.h"

namespace minfer::daemon {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using minfer::testing::RunfilePath;
using minfer::testing::Subprocess;
using testing::ReferenceGenerate;
using testing::TextRequest;
using testing::WaitFor;
using Health = grpc::health::v1::HealthCheckResponse;

class MinferdProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto a = minfer::testing::TestModelPath("tiny-untied", "q8_0", 1);
    ASSERT_TRUE(a.ok()) << a.status();
    path_ = *a;
  }

  // Starts minferd with `args` plus loopback ports and a ready file, and
  // connects once it is serving.
  // Metrics off unless asked for: stopping the exposer costs up to 2 s.
  void Start(std::vector<std::string> args, bool metrics = false) {
    static int n = 0;
    ready_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/ready", n++, ".json");
    std::vector<std::string> argv = {RunfilePath("daemon/minferd"), "--listen", "127.0.0.1:0",
                                     "--metrics-listen", metrics ? "127.0.0.1:0" : "",
                                     "--ready-file", ready_};
    argv.insert(argv.end(), args.begin(), args.end());
    auto p = Subprocess::Start(argv);
    ASSERT_TRUE(p.ok()) << p.status();
    proc_ = std::move(*p);
    ASSERT_TRUE(WaitFor([&] { return std::ifstream(ready_).good() || !proc_->running(); },
                        std::chrono::seconds(20)))
        << proc_->ReadStderr();
    ASSERT_TRUE(proc_->running()) << proc_->ReadStderr();
    std::ifstream in(ready_);
    nlohmann::json j = nlohmann::json::parse(in);
    address_ = j["address"].get<std::string>();
    metrics_address_ = j["metrics_address"].get<std::string>();
    EXPECT_EQ(metrics_address_.empty(), !metrics);
    EXPECT_EQ(j["pid"].get<int64_t>(), proc_->pid());
    client::ClientOptions o;
    o.address = address_;
    client_ = *client::MinferClient::Create(o);
  }

  bool Serving(const std::string& name) {
    auto h = client_->Health(name);
    return h.ok() && *h == Health::SERVING;
  }

  std::string path_, ready_, address_, metrics_address_;
  std::unique_ptr<Subprocess> proc_;
  std::unique_ptr<client::MinferClient> client_;
};

TEST_F(MinferdProcessTest, SigtermDrainsTheInFlightStreamAndExitsZero) {
  Start({"--model", "a=" + path_, "--ctx", "2048", "--drain-timeout", "60"}, /*metrics=*/true);
  ASSERT_TRUE(WaitFor([&] { return Serving("a"); })) << proc_->ReadStderr();
  const auto req = TextRequest("a", "drain me", 1500);
  absl::StatusOr<client::GenerateResult> result;
  std::atomic<bool> streaming{false};
  std::thread stream([&] {
    result = client_->Generate(req, [&](const v1::GenerateResponse&) {
      streaming = true;
      return true;
    });
  });
  ASSERT_TRUE(WaitFor([&] { return streaming.load(); }));
  proc_->Signal(SIGTERM);
  // While it drains: NOT_SERVING, and no new generations.
  ASSERT_TRUE(WaitFor([&] {
    auto h = client_->Health("");
    return h.ok() && *h == Health::NOT_SERVING;
  }));
  auto late = client_->Generate(TextRequest("a", "late", 3));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kUnavailable) << late.status();
  stream.join();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->token_ids, ReferenceGenerate(path_, req, 2048)->ids);
  EXPECT_EQ(result->finish_reason, v1::FINISH_REASON_LENGTH);
  auto code = proc_->Wait(std::chrono::seconds(20));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << "minferd's stderr:\n" << proc_->ReadStderr();
  const std::string log = proc_->ReadStderr();
  EXPECT_THAT(log, HasSubstr("received SIGTERM"));
  EXPECT_THAT(log, HasSubstr("generate api=grpc model=a prompt="));
  EXPECT_THAT(log, HasSubstr("completion=1500"));
  EXPECT_THAT(log, HasSubstr("drained in"));
  // A clean exit takes its ready file along.
  EXPECT_FALSE(std::ifstream(ready_).good()) << ready_;
}

// --tenant on the command line: the key comes from a file, generation then
// needs it, and a malformed flag fails startup naming the part.
TEST_F(MinferdProcessTest, TenantFlagRequiresItsKey) {
  const std::string keys = absl::StrCat(std::getenv("TEST_TMPDIR"), "/team.keys");
  std::ofstream(keys) << "# team\nsk-team-1\n";
  Start({"--model", "a=" + path_, "--tenant",
         absl::StrCat("name=team,key_file=", keys, ",max_streams=4,models=a")});
  ASSERT_TRUE(WaitFor([&] { return Serving("a"); })) << proc_->ReadStderr();
  auto anonymous = client_->Generate(TextRequest("a", "hi", 3));
  EXPECT_EQ(anonymous.status().code(), absl::StatusCode::kUnauthenticated) << anonymous.status();
  client::ClientOptions o;
  o.address = address_;
  o.token = "sk-team-1";
  auto team = *client::MinferClient::Create(o);
  auto ok = team->Generate(TextRequest("a", "hi", 3));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->token_ids.size(), 3u);
  auto tenants = client_->ListTenants();  // the admin API is open here
  ASSERT_TRUE(tenants.ok());
  ASSERT_EQ(tenants->tenants_size(), 1);
  EXPECT_EQ(tenants->tenants(0).max_streams(), 4);
  EXPECT_EQ(tenants->tenants(0).admitted(), 1u);
  proc_->Signal(SIGTERM);
  ASSERT_TRUE(proc_->Wait(std::chrono::seconds(20)).ok());

  auto bad = minfer::testing::RunCommand(
      {RunfilePath("daemon/minferd"), "--listen", "127.0.0.1:0", "--tenant", "name=x,keys=sk"});
  ASSERT_TRUE(bad.ok());
  EXPECT_NE(bad->exit_code, 0);
  EXPECT_THAT(bad->err, HasSubstr("'keys=sk' is not accepted: give the keys in a file"));
}

// The second SIGTERM/SIGINT during a drain used to wait out the drain
// timeout; now what is left is cancelled and minferd exits 0 at once.
TEST_F(MinferdProcessTest, SecondSignalCutsTheDrainShort) {
  Start({"--model", "a=" + path_, "--ctx", "4096", "--parallel", "1", "--queue-size", "8",
         "--drain-timeout", "120"});
  ASSERT_TRUE(WaitFor([&] { return Serving("a"); })) << proc_->ReadStderr();
  // Six long streams one after another: far longer than the test waits.
  constexpr int kStreams = 6;
  std::vector<absl::StatusOr<client::GenerateResult>> results(kStreams);
  std::vector<std::thread> streams;
  for (int i = 0; i < kStreams; ++i) {
    streams.emplace_back(
        [&, i] { results[i] = client_->Generate(TextRequest("a", "long", 4000)); });
  }
  ASSERT_TRUE(WaitFor([&] {
    auto st = client_->GetModelStatus("a");
    return st.ok() && st->active_sequences() + st->queued_sequences() == kStreams;
  })) << proc_->ReadStderr();
  proc_->Signal(SIGTERM);
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(proc_->ReadStderr(), "draining:"); }));
  const auto t0 = std::chrono::steady_clock::now();
  proc_->Signal(SIGINT);
  auto code = proc_->Wait(std::chrono::seconds(10));
  ASSERT_TRUE(code.ok()) << "still draining after the second signal: " << proc_->ReadStderr();
  EXPECT_EQ(*code, 0) << "minferd's stderr:\n" << proc_->ReadStderr();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  for (auto& t : streams) t.join();
  int unavailable = 0;
  for (const auto& r : results) unavailable += r.status().code() == absl::StatusCode::kUnavailable;
  EXPECT_GE(unavailable, 1);
  const std::string log = proc_->ReadStderr();
  EXPECT_THAT(log, HasSubstr("received SIGINT again: cancelling"));
  EXPECT_FALSE(std::ifstream(ready_).good());
}

TEST_F(MinferdProcessTest, DrainTimeoutCancelsAndStillExitsZero) {
  Start({"--model", "a=" + path_, "--ctx", "4096", "--drain-timeout", "0.2"});
  ASSERT_TRUE(WaitFor([&] { return Serving("a"); })) << proc_->ReadStderr();
  std::atomic<bool> streaming{false};
  client::GenerateResult partial;
  absl::StatusOr<client::GenerateResult> result;
  std::thread stream([&] {
    result = client_->Generate(
        TextRequest("a", "endless", 4000),
        [&](const v1::GenerateResponse&) {
          streaming = true;
          return true;
        },
        0, &partial);
  });
  ASSERT_TRUE(WaitFor([&] { return streaming.load(); }));
  proc_->Signal(SIGINT);
  stream.join();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable) << result.status();
  EXPECT_EQ(partial.finish_reason, v1::FINISH_REASON_CANCELLED);
  auto code = proc_->Wait(std::chrono::seconds(20));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0) << "minferd's stderr:\n" << proc_->ReadStderr();
  EXPECT_THAT(proc_->ReadStderr(), HasSubstr("cancelling 1 streams"));
}

TEST_F(MinferdProcessTest, ClientKilledMidStreamIsCancelledAndTheDaemonServesOn) {
  Start({"--model", "a=" + path_, "--ctx", "4096"});
  ASSERT_TRUE(WaitFor([&] { return Serving("a"); }));
  auto ctl = Subprocess::Start({RunfilePath("client/minferctl"), "--addr", address_, "generate",
                                "a", "never mind", "-n", "4000", "--ignore-eos", "--temp", "0"});
  ASSERT_TRUE(ctl.ok());
  ASSERT_TRUE(WaitFor([&] { return (*ctl)->ReadStdout().size() > 20; })) << (*ctl)->ReadStderr();
  (*ctl)->Signal(SIGKILL);
  ASSERT_TRUE((*ctl)->Wait(std::chrono::seconds(5)).ok());
  ASSERT_TRUE(WaitFor([&] {
    auto st = client_->GetModelStatus("a");
    return st.ok() && st->active_sequences() == 0;
  }, std::chrono::seconds(5)));
  auto st = client_->GetModelStatus("a");
  EXPECT_EQ(st->counters().cancelled(), 1u);
  EXPECT_LT(st->counters().completion_tokens(), 4000u);
  const auto req = TextRequest("a", "next", 12);
  auto next = client_->Generate(req);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->token_ids, ReferenceGenerate(path_, req, 4096)->ids);
  proc_->Signal(SIGTERM);
  EXPECT_EQ(*proc_->Wait(std::chrono::seconds(20)), 0);
}

TEST_F(MinferdProcessTest, ConfigFileWithFlagOverrides) {
  const std::string config = absl::StrCat(std::getenv("TEST_TMPDIR"), "/minferd.json");
  std::ofstream(config) << R"({
    "listen": "127.0.0.1:1",
    "limits": {"max_tokens": 50},  // also caps the default of 256
    "models": [{"name": "m", "path": ")" << path_ << R"(", "n_ctx": 128, "parallel": 2}],
    "aliases": {"prod": "m"}
  })";
  // --listen (added by Start) overrides the file's unusable port 1.
  Start({"--config", config});
  ASSERT_TRUE(WaitFor([&] { return Serving("prod"); })) << proc_->ReadStderr();
  auto st = client_->GetModelStatus("prod");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->name(), "m");
  EXPECT_EQ(st->n_ctx(), 128);
  EXPECT_EQ(st->parallel(), 2);
  auto over = client_->Generate(TextRequest("prod", "x", 51));
  EXPECT_EQ(over.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(client_->Generate(TextRequest("prod", "x", 50)).ok());
  proc_->Signal(SIGTERM);
  EXPECT_EQ(*proc_->Wait(std::chrono::seconds(20)), 0);
}

// A FIFO used to hang the load in open() (LOADING forever), and SIGTERM
// with it (the slot's stop waited for the load).
TEST_F(MinferdProcessTest, FifoAsModelFailsAndSigtermStillExits) {
  const std::string fifo = absl::StrCat(std::getenv("TEST_TMPDIR"), "/start-fifo.gguf");
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Start({"--model", "f=" + fifo, "--model", "a=" + path_, "--drain-timeout", "1"});
  ASSERT_TRUE(WaitFor([&] { return Serving("a"); })) << proc_->ReadStderr();
  ASSERT_TRUE(WaitFor([&] {
    auto st = client_->GetModelStatus("f");
    return st.ok() && st->state() == v1::MODEL_STATE_FAILED;
  }, std::chrono::seconds(5))) << "the FIFO's load did not fail: " << proc_->ReadStderr();
  EXPECT_THAT(client_->GetModelStatus("f")->reason(),
              HasSubstr("'" + fifo + "' is a FIFO, not a regular file"));
  proc_->Signal(SIGTERM);
  auto code = proc_->Wait(std::chrono::seconds(10));
  if (!code.ok()) {
    int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // let the old open() return
    if (w >= 0) ::close(w);
  }
  ASSERT_TRUE(code.ok()) << "SIGTERM did not end minferd: " << proc_->ReadStderr();
  EXPECT_EQ(*code, 0) << "minferd's stderr:\n" << proc_->ReadStderr();
}

TEST_F(MinferdProcessTest, TlsKeyOfAnotherCertificateFailsStartupNamingBothFiles) {
  if (access("/usr/bin/openssl", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/openssl";
  const std::string dir = std::getenv("TEST_TMPDIR");
  const std::string cert = dir + "/p-cert.pem", other_key = dir + "/p-other-key.pem";
  for (const auto& [c, k] : {std::pair{cert, dir + "/p-key.pem"},
                             std::pair{dir + "/p-other-cert.pem", other_key}}) {
    auto made = minfer::testing::RunCommand(
        {"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", k,
         "-out", c, "-days", "1", "-subj", "/CN=localhost"});
    ASSERT_TRUE(made.ok() && made->exit_code == 0);
  }
  auto r = minfer::testing::RunCommand({RunfilePath("daemon/minferd"), "--listen", "127.0.0.1:0",
                                        "--metrics-listen", "", "--tls-cert", cert, "--tls-key",
                                        other_key});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 1);
  // minferd's own line (gRPC's core error, which named no file, does not
  // appear: the pair is checked before gRPC sees it).
  EXPECT_THAT(r->err,
              ::testing::EndsWith("minferd: TLS key '" + other_key +
                                  "' does not match the certificate '" + cert +
                                  "': the certificate's public key belongs to another "
                                  "private key\n"));
  EXPECT_THAT(r->err, Not(HasSubstr("ssl_transport_security")));
}

// What a client sends reaches the log bounded: a 1 MiB model name used to
// become a 1 MiB log line. And a deadline is logged as one.
TEST_F(MinferdProcessTest, TheLogQuotesClientInputShortAndNamesDeadlines) {
  Start({"--model", "a=" + path_, "--ctx", "4096"});
  ASSERT_TRUE(WaitFor([&] { return Serving("a"); })) << proc_->ReadStderr();
  const size_t before = proc_->ReadStderr().size();
  auto r = client_->Generate(TextRequest(std::string(1 << 20, 'x'), "hi", 3));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(proc_->ReadStderr(), "generate refused"); }));
  EXPECT_LT(proc_->ReadStderr().size() - before, 2000u);
  auto late = client_->Generate(TextRequest("a", "slow", 4000), nullptr, /*deadline_seconds=*/0.3);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(proc_->ReadStderr(), "finish=cancelled"); }))
      << proc_->ReadStderr();
  const std::string log = proc_->ReadStderr();
  EXPECT_THAT(log, HasSubstr("status=DEADLINE_EXCEEDED"));
  EXPECT_THAT(log, Not(HasSubstr("the client cancelled the stream")));
  proc_->Signal(SIGTERM);
  EXPECT_EQ(*proc_->Wait(std::chrono::seconds(20)), 0);
}

TEST_F(MinferdProcessTest, BadStartupExitsNonZeroWithOneLine) {
  auto r = minfer::testing::RunCommand(
      {RunfilePath("daemon/minferd"), "--listen", "127.0.0.1:0", "--metrics-listen", "",
       "--memory-limit", "lots"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_THAT(r->err, HasSubstr("minferd: --memory-limit"));
  auto c = minfer::testing::RunCommand(
      {RunfilePath("daemon/minferd"), "--config", "/nonexistent.json"});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->exit_code, 1);
  EXPECT_THAT(c->err, HasSubstr("/nonexistent.json"));
}

}  // namespace
}  // namespace minfer::daemon
