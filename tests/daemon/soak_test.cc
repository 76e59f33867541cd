// Soak: N concurrent streams for M seconds through an alias while models
// are loaded, the alias re-pointed and the old model unloaded (drained) in
// a cycle. Asserts zero failed streams, every output equal to the engine's
// for the model that served it, and a stable RSS; prints its figures.
//
// CI runs a short one; longer runs:
//   bazel test //tests/daemon:soak_test --test_output=all
//       --test_env=MINFER_SOAK_SECONDS=600 --test_env=MINFER_SOAK_STREAMS=16
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/daemon.h"
#include "gtest/gtest.h"
#include "tests/daemon/test_util.h"
#include "tests/support/test_models.h"

namespace minfer::daemon {
namespace {

using testing::ClientFor;
using testing::Load;
using testing::ReferenceGenerate;
using testing::RssBytes;
using testing::TextRequest;
using Clock = std::chrono::steady_clock;

double EnvDouble(const char* name, double fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atof(v) : fallback;
}

TEST(SoakTest, StreamsSurviveLoadUnloadAndAliasCycling) {
  const double seconds = EnvDouble("MINFER_SOAK_SECONDS", 6);
  const int streams = static_cast<int>(EnvDouble("MINFER_SOAK_STREAMS", 4));
  // Two models with different outputs (see test_util.h).
  const std::string paths[2] = {*minfer::testing::TestModelPath("tiny-untied", "q8_0", 1),
                                *minfer::testing::TestModelPath("tiny", "q8_0", 1)};
  auto d = Daemon::Start(testing::TestConfig());
  ASSERT_TRUE(d.ok()) << d.status();
  std::unique_ptr<Daemon> daemon = std::move(*d);
  auto admin = ClientFor(*daemon);

  // References for each prompt length on both models.
  constexpr int kLengths[] = {8, 16, 32};
  std::map<std::pair<int, int>, std::vector<int32_t>> ref;  // (path index, length)
  for (int p = 0; p < 2; ++p) {
    for (int n : kLengths) {
      auto r = ReferenceGenerate(paths[p], TextRequest("x", "soak prompt", n, /*seed=*/n), 256);
      ASSERT_TRUE(r.ok());
      ref[{p, n}] = r->ids;
    }
  }
  ASSERT_NE(ref[std::make_pair(0, 32)], ref[std::make_pair(1, 32)]);
  // Model "mK" uses paths[K % 2].
  ASSERT_TRUE(Load(*admin, "m0", paths[0], 2, 256, 16).ok());
  ASSERT_TRUE(admin->SetAlias("prod", "m0").ok());

  std::atomic<bool> stop{false};
  std::atomic<int64_t> ok{0}, failed{0}, wrong{0}, tokens{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < streams; ++t) {
    clients.emplace_back([&, t] {
      auto c = ClientFor(*daemon);
      for (int i = 0; !stop.load(); ++i) {
        const int n = kLengths[(t + i) % 3];
        auto r = c->Generate(TextRequest("prod", "soak prompt", n, /*seed=*/n));
        if (!r.ok()) {
          ++failed;
          std::fprintf(stderr, "stream failed: %s\n", r.status().ToString().c_str());
          continue;
        }
        const int k = std::stoi(r->model.substr(1));
        if (r->token_ids != ref[{k % 2, n}]) ++wrong;
        ++ok;
        tokens += static_cast<int64_t>(r->token_ids.size());
      }
    });
  }

  const auto t0 = Clock::now();
  const auto end = t0 + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(seconds));
  int cycles = 0;
  uint64_t rss_warm = 0, rss_max = 0;
  for (int k = 1; Clock::now() < end; ++k) {
    const std::string name = absl::StrCat("m", k), old = absl::StrCat("m", k - 1);
    auto loaded = Load(*admin, name, paths[k % 2], 2, 256, 16);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    ASSERT_TRUE(admin->SetAlias("prod", name).ok());
    v1::UnloadModelRequest u;
    u.set_name(old);
    u.set_drain_timeout_seconds(30);
    auto unloaded = admin->UnloadModel(u);
    ASSERT_TRUE(unloaded.ok()) << unloaded.status();
    EXPECT_EQ(unloaded->cancelled_sequences(), 0);
    ++cycles;
    const uint64_t rss = RssBytes();
    // The first quarter warms up allocator pools and page tables.
    if (rss_warm == 0 && Clock::now() - t0 > (end - t0) / 4) rss_warm = rss;
    rss_max = std::max(rss_max, rss);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  stop = true;
  for (auto& c : clients) c.join();
  const uint64_t rss_end = RssBytes();
  if (rss_warm == 0) rss_warm = rss_end;
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf(
      "soak: %.1f s, %d streams, %d load/alias/unload cycles; %ld generations ok, %ld failed, "
      "%ld wrong; %ld tokens (%.0f tok/s); RSS warm %.1f MiB, max %.1f MiB, end %.1f MiB\n",
      elapsed, streams, cycles, ok.load(), failed.load(), wrong.load(), tokens.load(),
      tokens.load() / elapsed, rss_warm / 1048576.0, rss_max / 1048576.0, rss_end / 1048576.0);
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(ok.load(), 0);
  EXPECT_GT(cycles, 2);
  // Every cycle maps and frees a model, KV caches and graphs; none of that
  // may accumulate.
  EXPECT_LT(rss_end, rss_warm + (32u << 20))
      << "RSS grew from " << rss_warm << " to " << rss_end << " bytes";
}

}  // namespace
}  // namespace minfer::daemon
