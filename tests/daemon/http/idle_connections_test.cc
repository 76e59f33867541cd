// A real minferd process with 1,000 idle keep-alive HTTP connections open
// (each has asked once and then says nothing): /health still answers at
// once and the daemon's memory grows by little. The old front door held a
// thread per connection, so 128 such clients took /health down. Prints its
// figures (docs/benchmarks.md records them):
//   bazel test //tests/daemon/http:idle_connections_test --test_output=all
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon/http/raw_client.h"
#include "tests/daemon/minferd_process.h"
#include "tests/daemon/soak.h"
#include "tests/support/test_models.h"
#include "client/minfer_client.h"

namespace minfer::daemon {
namespace {

using ::testing::HasSubstr;

// Milliseconds for one GET /health on a new connection.
double HealthMs(const std::string& address) {
  const auto t0 = std::chrono::steady_clock::now();
  const int fd = minfer::testing::ConnectTo(address);
  EXPECT_GE(fd, 0);
  minfer::testing::SendAll(fd, "GET /health HTTP/1.1\r\nConnection: close\r\n\r\n");
  const std::string r = minfer::testing::ReadUntil(fd, "\"ok\"", std::chrono::seconds(10));
  const double ms = 1000 * minfer::testing::SecondsSince(t0);
  EXPECT_THAT(r, HasSubstr("HTTP/1.1 200 OK"));
  close(fd);
  return ms;
}

TEST(IdleConnectionsTest, AThousandIdleKeepAliveClientsLeaveHealthFastAndMemoryFlat) {
  rlimit lim{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &lim), 0);
  if (lim.rlim_cur < 1200 && lim.rlim_max >= 1200) {
    lim.rlim_cur = lim.rlim_max;
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lim), 0);
  }
  ASSERT_GE(lim.rlim_cur, 1200u) << "this test needs 1,200 file descriptors";
  auto model = minfer::testing::TestModelPath("tiny-untied", "q8_0", 1);
  ASSERT_TRUE(model.ok());
  auto m = testing::StartMinferd({"--model", "a=" + *model, "--log-level", "warn",
                                  "--http-listen", "127.0.0.1:0"});
  ASSERT_TRUE(m.ok()) << m.status();
  const pid_t pid = m->proc->pid();
  // The model loads in the background; its mapped weights would count in
  // the RSS below.
  const auto ready_by = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    auto st = m->client->GetModelStatus("a");
    if (st.ok() && st->state() == v1::MODEL_STATE_READY) break;
    ASSERT_LT(std::chrono::steady_clock::now(), ready_by) << "model a did not load";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::vector<double> before;
  for (int i = 0; i < 20; ++i) before.push_back(HealthMs(m->http_address));
  const uint64_t rss0 = soak::ProcessRss(pid), anon0 = soak::ProcessRss(pid, "RssAnon");
  std::vector<int> fds;
  for (int i = 0; i < 1000; ++i) {
    const int fd = minfer::testing::ConnectTo(m->http_address);
    ASSERT_GE(fd, 0) << "connection " << i;
    ASSERT_TRUE(minfer::testing::SendAll(fd, "GET /health HTTP/1.1\r\n\r\n"));
    ASSERT_THAT(minfer::testing::ReadUntil(fd, "\"ok\"", std::chrono::seconds(10)),
                HasSubstr("200 OK"));
    fds.push_back(fd);
  }
  std::vector<double> during;
  for (int i = 0; i < 50; ++i) during.push_back(HealthMs(m->http_address));
  const uint64_t rss1 = soak::ProcessRss(pid), anon1 = soak::ProcessRss(pid, "RssAnon");
  const int daemon_fds = soak::ProcessFds(pid);
  std::sort(before.begin(), before.end());
  std::sort(during.begin(), during.end());
  const double p50 = during[during.size() / 2], p90 = during[during.size() * 9 / 10];
  std::printf(
      "1000 idle keep-alive connections: /health p50 %.2f ms, p90 %.2f ms, max %.2f ms "
      "(before: p50 %.2f ms); minferd RSS %.1f -> %.1f MiB (+%.1f MiB; anonymous +%.1f MiB), "
      "%d fds\n",
      p50, p90, during.back(), before[before.size() / 2], rss0 / 1048576.0, rss1 / 1048576.0,
      (static_cast<double>(rss1) - static_cast<double>(rss0)) / 1048576.0,
      (static_cast<double>(anon1) - static_cast<double>(anon0)) / 1048576.0, daemon_fds);
  EXPECT_LT(p50, 50.0);
  EXPECT_LT(static_cast<double>(rss1) - static_cast<double>(rss0), 100.0 * 1048576);
  EXPECT_GE(daemon_fds, 1000);  // they were all held
  for (int fd : fds) close(fd);
  m->proc->Signal(SIGTERM);
  auto code = m->proc->Wait(std::chrono::seconds(30));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0);
}

}  // namespace
}  // namespace minfer::daemon
