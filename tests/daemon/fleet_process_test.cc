// minferd as a fleet member, as a real process: KV-cache events read by a
// subscriber written against vLLM's wire format (Python, Debian's zmq,
// msgpack and cbor2: tests/daemon/kv_events_subscriber.py), the gateway
// protocol's gauges, and sleep and wake of real models.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/minfer_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/daemon/minferd_process.h"
#include "tests/daemon/test_util.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_models.h"

namespace minfer::daemon {
namespace {

using ::testing::HasSubstr;
using testing::StartMinferd;
using testing::WaitFor;

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  socklen_t len = sizeof(sa);
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  close(fd);
  return ntohs(sa.sin_port);
}

v1::GenerateRequest TokenRequest(const std::string& model, const std::vector<int32_t>& ids,
                                 int32_t max_tokens) {
  v1::GenerateRequest r;
  r.set_model(model);
  for (int32_t id : ids) r.mutable_tokens()->add_ids(id);
  r.mutable_sampling()->set_temperature(0.0f);
  r.mutable_stopping()->set_max_tokens(max_tokens);
  r.mutable_stopping()->set_ignore_eos(true);
  return r;
}

std::vector<int32_t> Ids(int n, int start) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(start + i);
  return v;
}

std::string Metrics(const std::string& address) {
  auto r = minfer::testing::RunCommand(
      {"/usr/bin/curl", "-s", absl::StrCat("http://", address, "/metrics")});
  return r.ok() ? r->out : "";
}

// The value of the series `name{labels}` (labels as printed), or -1.
double Series(const std::string& page, const std::string& name_and_labels) {
  for (absl::string_view line : absl::StrSplit(page, '\n')) {
    if (absl::StartsWith(line, name_and_labels + " ")) {
      double v = -1;
      (void)absl::SimpleAtod(line.substr(name_and_labels.size() + 1), &v);
      return v;
    }
  }
  return -1;
}

class Subscriber {
 public:
  Subscriber(const std::string& endpoint, const std::string& prefix, const std::string& replay) {
    stop_file_ = absl::StrCat(getenv("TEST_TMPDIR"), "/stop-", prefix.size(), "-", FreePort());
    std::vector<std::string> argv = {
        "/usr/bin/python3", minfer::testing::RunfilePath("tests/daemon/kv_events_subscriber.py"),
        endpoint, prefix, stop_file_, "--seconds", "120"};
    if (!replay.empty()) {
      argv.push_back("--replay");
      argv.push_back(replay);
    }
    auto p = minfer::testing::Subprocess::Start(argv);
    EXPECT_TRUE(p.ok()) << p.status();
    if (p.ok()) proc_ = std::move(*p);
    EXPECT_TRUE(WaitFor([&] { return absl::StartsWith(proc_->ReadStdout(), "ready"); },
                        std::chrono::milliseconds(20000)))
        << proc_->ReadStderr();
  }
  // Every message so far (and the replay line once stopped).
  std::vector<nlohmann::json> Messages() const {
    std::vector<nlohmann::json> out;
    for (absl::string_view line : absl::StrSplit(proc_->ReadStdout(), '\n')) {
      if (line.empty() || line == "ready") continue;
      out.push_back(nlohmann::json::parse(line));
    }
    return out;
  }
  std::vector<nlohmann::json> Stop() {
    std::ofstream(stop_file_) << "stop";
    auto code = proc_->Wait(std::chrono::milliseconds(20000));
    EXPECT_TRUE(code.ok() && *code == 0) << proc_->ReadStderr();
    return Messages();
  }

 private:
  std::string stop_file_;
  std::unique_ptr<minfer::testing::Subprocess> proc_;
};

// The events of one topic, flattened, in order.
std::vector<nlohmann::json> Events(const std::vector<nlohmann::json>& messages,
                                   const std::string& topic) {
  std::vector<nlohmann::json> out;
  for (const auto& m : messages) {
    if (!m.contains("topic") || m["topic"] != topic) continue;
    for (const auto& e : m["events"]) out.push_back(e);
  }
  return out;
}

TEST(FleetProcessTest, KvEventsReachAVllmStyleSubscriberAndTheGaugesMove) {
  auto path = minfer::testing::TestModelPath("tiny", "q8_0", 1);
  ASSERT_TRUE(path.ok()) << path.status();
  const int pub = FreePort(), replay = FreePort();
  const std::string endpoint = absl::StrCat("tcp://127.0.0.1:", pub);
  const std::string replay_endpoint = absl::StrCat("tcp://127.0.0.1:", replay);
  auto d = StartMinferd({"--kv-events", endpoint, "--kv-events-replay", replay_endpoint,
                         "--kv-events-topic", "kv@pod-a@{model}"},
                        /*metrics=*/true);
  ASSERT_TRUE(d.ok()) << d.status();
  // "ev": events on, a pool of 4 blocks of 16 tokens so that prompts evict
  // each other; "quiet": events off.
  v1::LoadModelRequest ev;
  ev.set_name("ev");
  ev.set_path(*path);
  ev.set_backend("cpu");
  ev.set_parallel(1);
  ev.set_n_ctx(64);
  ev.set_kv_tokens(64);
  ASSERT_TRUE(d->client->LoadModel(ev).ok());
  v1::LoadModelRequest quiet = ev;
  quiet.set_name("quiet");
  quiet.set_kv_events("off");
  quiet.set_kv_tokens(0);
  ASSERT_TRUE(d->client->LoadModel(quiet).ok());
  // "busy": the full Qwen2 vocabulary, slow enough on the CPU for a scrape
  // to see a long generation running.
  auto small = minfer::testing::TestModelPath("small", "q8_0", 1);
  ASSERT_TRUE(small.ok()) << small.status();
  v1::LoadModelRequest busy = quiet;
  busy.set_name("busy");
  busy.set_path(*small);
  busy.set_n_ctx(512);
  ASSERT_TRUE(d->client->LoadModel(busy).ok());
  auto st = d->client->GetModelStatus("ev");
  ASSERT_TRUE(st.ok());
  EXPECT_TRUE(st->kv_events());
  EXPECT_FALSE(d->client->GetModelStatus("quiet")->kv_events());

  Subscriber sub(endpoint, "kv@", replay_endpoint);
  // Prompt A: 40 tokens, 2 full blocks (the third is partial), then B and
  // C, whose blocks need A's cached ones.
  const std::vector<int32_t> a = Ids(40, 300), b = Ids(40, 500), c = Ids(40, 700);
  auto ra = d->client->Generate(TokenRequest("ev", a, 2));
  ASSERT_TRUE(ra.ok()) << ra.status();
  ASSERT_TRUE(d->client->Generate(TokenRequest("quiet", a, 2)).ok());
  ASSERT_TRUE(WaitFor([&] { return !Events(sub.Messages(), "kv@pod-a@ev").empty(); }));
  std::vector<nlohmann::json> events = Events(sub.Messages(), "kv@pod-a@ev");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["type"], "BlockStored");
  // Exactly the prompt's full blocks, hashed as vLLM would.
  EXPECT_EQ(events[0]["tokens"].get<std::vector<int32_t>>(), Ids(32, 300));
  EXPECT_EQ(events[0]["hashes"].size(), 2u);
  EXPECT_TRUE(events[0]["parent"].is_null());
  EXPECT_EQ(events[0]["block_size"], 16);
  EXPECT_TRUE(events[0]["lora_id"].is_null());
  EXPECT_EQ(events[0]["medium"], "CPU");
  EXPECT_TRUE(events[0]["hashes_ok"]) << events[0].dump();
  const std::vector<uint64_t> a_hashes = events[0]["hashes"].get<std::vector<uint64_t>>();

  // The gauges of the gateway protocol exist per model and move.
  std::string page = Metrics(d->metrics_address);
  for (const char* m : {"ev", "quiet", "busy"}) {
    const std::string l = absl::StrCat("{model=\"", m, "\"}");
    EXPECT_GE(Series(page, "minfer_queue_depth" + l), 0) << m;
    EXPECT_GE(Series(page, "minfer_active_sequences" + l), 0) << m;
    const double ratio = Series(page, "minfer_kv_cache_usage_ratio" + l);
    EXPECT_GE(ratio, 0) << m;
    EXPECT_LE(ratio, 1) << m;
  }
  {
    // Under load: a long generation holds blocks while it runs, a second
    // request waits behind it (parallel 1).
    std::thread t1([&] { (void)d->client->Generate(TokenRequest("busy", a, 400)); });
    std::thread t2([&] { (void)d->client->Generate(TokenRequest("busy", b, 400)); });
    double peak_ratio = 0, peak_active = 0, peak_queued = 0;
    for (int i = 0; i < 5000 && (peak_active < 1 || peak_queued < 1); ++i) {
      const std::string p = Metrics(d->metrics_address);
      peak_ratio =
          std::max(peak_ratio, Series(p, "minfer_kv_cache_usage_ratio{model=\"busy\"}"));
      peak_active = std::max(peak_active, Series(p, "minfer_active_sequences{model=\"busy\"}"));
      peak_queued = std::max(peak_queued, Series(p, "minfer_queue_depth{model=\"busy\"}"));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    t1.join();
    t2.join();
    EXPECT_GT(peak_ratio, 0);
    EXPECT_LE(peak_ratio, 1);
    EXPECT_EQ(peak_active, 1);
    // Both may wait at once, before the worker takes the first.
    EXPECT_GE(peak_queued, 1);
    EXPECT_LE(peak_queued, 2);
    const std::string after = Metrics(d->metrics_address);
    EXPECT_EQ(Series(after, "minfer_active_sequences{model=\"busy\"}"), 0);
    EXPECT_EQ(Series(after, "minfer_kv_cache_usage_ratio{model=\"busy\"}"), 0);
  }
  ASSERT_TRUE(d->client->Generate(TokenRequest("ev", b, 2)).ok());
  ASSERT_TRUE(d->client->Generate(TokenRequest("ev", c, 2)).ok());
  // A's blocks were evicted for B's and C's, and announced.
  ASSERT_TRUE(WaitFor([&] {
    std::set<uint64_t> removed;
    for (const auto& e : Events(sub.Messages(), "kv@pod-a@ev")) {
      if (e["type"] == "BlockRemoved") {
        for (uint64_t h : e["hashes"].get<std::vector<uint64_t>>()) removed.insert(h);
      }
    }
    return removed.count(a_hashes[0]) > 0 && removed.count(a_hashes[1]) > 0;
  }));
  // Unloading removes every block still cached.
  v1::UnloadModelRequest un;
  un.set_name("ev");
  ASSERT_TRUE(d->client->UnloadModel(un).ok());
  // (The last batch leaves the publisher's thread after the unload answers.)
  auto balanced = [&] {
    std::set<uint64_t> s, r;
    for (const auto& e : Events(sub.Messages(), "kv@pod-a@ev")) {
      auto hashes = e["hashes"].get<std::vector<uint64_t>>();
      (e["type"] == "BlockStored" ? s : r).insert(hashes.begin(), hashes.end());
    }
    return !s.empty() && s == r;
  };
  EXPECT_TRUE(WaitFor(balanced));
  std::vector<nlohmann::json> messages = sub.Stop();
  events = Events(messages, "kv@pod-a@ev");
  std::set<uint64_t> stored, removed;
  for (const auto& e : events) {
    auto hashes = e["hashes"].get<std::vector<uint64_t>>();
    if (e["type"] == "BlockStored") {
      EXPECT_TRUE(e["hashes_ok"]) << e.dump();
      stored.insert(hashes.begin(), hashes.end());
    } else if (e["type"] == "BlockRemoved") {
      removed.insert(hashes.begin(), hashes.end());
    }
  }
  EXPECT_EQ(removed, stored);  // everything stored was removed by the end
  EXPECT_EQ(events.back()["type"], "BlockRemoved");
  // Sequence numbers per topic: 0, 1, 2, ... without gaps; nothing from
  // the model with events off.
  std::vector<uint64_t> seqs;
  for (const auto& m : messages) {
    if (!m.contains("topic")) continue;
    EXPECT_EQ(m["topic"], "kv@pod-a@ev");
    EXPECT_EQ(m["rank"], 0);
    seqs.push_back(m["seq"]);
  }
  ASSERT_GE(seqs.size(), 3u);
  for (size_t i = 0; i < seqs.size(); ++i) EXPECT_EQ(seqs[i], i);
  // The replay socket returns the same batches.
  ASSERT_TRUE(messages.back().contains("replay")) << messages.back().dump();
  const auto replayed = messages.back()["replay"];
  ASSERT_EQ(replayed.size(), seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) EXPECT_EQ(replayed[i][0], seqs[i]);
  // The batches were counted.
  page = Metrics(d->metrics_address);
  EXPECT_THAT(page, HasSubstr("minfer_kv_events_batches_total{model=\"quiet\",result=\"queued\"} 0"));
}

uint64_t RssOf(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "VmRSS:")) {
      uint64_t kb = 0;
      std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (parts.size() >= 2) (void)absl::SimpleAtoi(parts[1], &kb);
      return kb * 1024;
    }
  }
  return 0;
}

TEST(FleetProcessTest, SleepFreesMemoryAndTheWakeGivesTheSameGreedyTokens) {
  // "small": the full Qwen2 vocabulary, a KV pool of 16,384 tokens.
  auto path = minfer::testing::TestModelPath("small", "q8_0", 1);
  ASSERT_TRUE(path.ok()) << path.status();
  auto d = StartMinferd({}, /*metrics=*/true);
  ASSERT_TRUE(d.ok()) << d.status();
  v1::LoadModelRequest load;
  load.set_name("m");
  load.set_path(*path);
  load.set_backend("cpu");
  load.set_parallel(2);
  load.set_n_ctx(512);
  load.set_kv_tokens(16384);
  load.set_kv_type("f32");
  ASSERT_TRUE(d->client->LoadModel(load).ok());
  ASSERT_TRUE(d->client->SetAlias("prod", "m").ok());
  const v1::GenerateRequest req = testing::TextRequest("m", "The quick brown fox", 12);
  auto before = d->client->Generate(req);
  ASSERT_TRUE(before.ok()) << before.status();
  auto awake = d->client->GetModelStatus("m");
  ASSERT_TRUE(awake.ok());
  const uint64_t kv = awake->memory().kv_bytes();
  ASSERT_GT(kv, uint64_t{48} << 20);
  const uint64_t rss_awake = RssOf(d->proc->pid());

  for (int level : {1, 2}) {
    SCOPED_TRACE(absl::StrCat("level ", level));
    v1::SleepModelRequest sleep;
    sleep.set_name("m");
    sleep.set_level(level);
    auto slept = d->client->SleepModel(sleep);
    ASSERT_TRUE(slept.ok()) << slept.status();
    const v1::ModelStatus& s = slept->status();
    EXPECT_EQ(s.state(), v1::MODEL_STATE_SLEEPING);
    EXPECT_EQ(s.sleep().level(), level);
    EXPECT_EQ(s.memory().kv_bytes(), 0u);
    EXPECT_EQ(s.memory().scratch_bytes(), 0u);
    EXPECT_EQ(s.memory().weights_bytes(), 0u);
    EXPECT_EQ(s.memory().host_bytes(), level == 1 ? awake->memory().weights_bytes() : 0u);
    // Admission keeps what stays: the weights at level 1, nothing at 2.
    EXPECT_EQ(s.memory().reserved_bytes(), level == 1 ? awake->memory().weights_bytes() : 0u);
    // The backend let go of the KV pool and the graphs' buffers (its own
    // accounting of what it allocated); the process's resident memory fell
    // (the pool is zeroed lazily, so only its touched pages were resident),
    // at level 2 by the weights' pages too.
    EXPECT_LE(s.memory().backend_bytes() + kv, awake->memory().backend_bytes())
        << s.memory().backend_bytes() << " vs " << awake->memory().backend_bytes();
    const uint64_t rss_asleep = RssOf(d->proc->pid());
    EXPECT_LT(rss_asleep, rss_awake);
    if (level == 2) {
      EXPECT_LT(rss_asleep + awake->memory().weights_bytes() / 2, rss_awake)
          << rss_asleep << " vs " << rss_awake;
    }
    // Health: serving on demand. The alias still resolves.
    auto health = d->client->Health("m");
    ASSERT_TRUE(health.ok());
    EXPECT_EQ(*health, grpc::health::v1::HealthCheckResponse::SERVING);
    std::string page = Metrics(d->metrics_address);
    EXPECT_EQ(Series(page, "minfer_slot_state{model=\"m\",state=\"sleeping\"}"), 1);

    // A request (through the alias) wakes it: the same greedy tokens.
    v1::GenerateRequest via_alias = req;
    via_alias.set_model("prod");
    auto after = d->client->Generate(via_alias);
    ASSERT_TRUE(after.ok()) << after.status();
    EXPECT_EQ(after->token_ids, before->token_ids);
    auto st = d->client->GetModelStatus("m");
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(st->state(), v1::MODEL_STATE_READY);
    EXPECT_EQ(st->memory().kv_bytes(), kv);
    EXPECT_EQ(st->sleep().wakes(), static_cast<uint64_t>(level));
    EXPECT_GT(st->sleep().last_wake_unix_ms(), 0);
    EXPECT_GT(st->sleep().last_wake_seconds(), 0);
    std::printf("wake from level %d: %.3f s (RSS %.1f MiB awake, %.1f MiB asleep)\n", level,
                st->sleep().last_wake_seconds(), rss_awake / 1048576.0, rss_asleep / 1048576.0);
    page = Metrics(d->metrics_address);
    EXPECT_EQ(Series(page, absl::StrCat("minfer_model_wakes_total{level=\"", level,
                                        "\",model=\"m\"}")),
              1);
  }
  // Unload while sleeping.
  v1::SleepModelRequest sleep;
  sleep.set_name("m");
  ASSERT_TRUE(d->client->SleepModel(sleep).ok());
  ASSERT_TRUE(d->client->DeleteAlias("prod").ok());
  v1::UnloadModelRequest un;
  un.set_name("m");
  auto unloaded = d->client->UnloadModel(un);
  ASSERT_TRUE(unloaded.ok()) << unloaded.status();
  EXPECT_FALSE(d->client->GetModelStatus("m").ok());
}

TEST(FleetProcessTest, AnIdleModelSleepsByItselfAndItsStatusSaysSo) {
  auto path = minfer::testing::TestModelPath("tiny", "q8_0", 1);
  ASSERT_TRUE(path.ok()) << path.status();
  auto d = StartMinferd({"--sleep-after", "0.2"});
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_TRUE(testing::Load(*d->client, "m", *path).ok());
  ASSERT_TRUE(WaitFor([&] {
    auto st = d->client->GetModelStatus("m");
    return st.ok() && st->state() == v1::MODEL_STATE_SLEEPING;
  }));
  auto st = d->client->GetModelStatus("m");
  EXPECT_EQ(st->sleep().level(), 1);
  EXPECT_DOUBLE_EQ(st->sleep().sleep_after_seconds(), 0.2);
  auto r = d->client->Generate(testing::TextRequest("m", "hello", 3));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->token_ids.size(), 3u);
  // Wake on demand without a request; a wrong level is refused by name.
  v1::SleepModelRequest bad;
  bad.set_name("m");
  bad.set_level(3);
  auto refused = d->client->SleepModel(bad);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("level"));
}

}  // namespace
}  // namespace minfer::daemon
