// The soak (soak.h) against a real minferd process for 40 seconds: CI's
// version of scripts/soak.sh. Streams through an alias must all succeed with
// the same greedy output while a second model (the full Qwen2 tokenizer) is
// loaded, aliased and unloaded over and over with requests hitting it, and
// minferd's RSS and fds must stay flat after the warm-up. Longer runs:
//   bazel test //tests/daemon:soak_process_test --test_output=all
//       --test_env=MINFER_SOAK_SECONDS=600 --test_env=MINFER_SOAK_WARMUP=60
// (or scripts/soak.sh, which runs the same soak on a daemon of its own).
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/daemon/minferd_process.h"
#include "tests/daemon/soak.h"
#include "tests/support/test_models.h"

namespace minfer::daemon {
namespace {

double EnvDouble(const char* name, double fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atof(v) : fallback;
}

TEST(SoakProcessTest, StreamsSurviveModelCyclingAndMemoryStaysFlat) {
  auto steady = minfer::testing::TestModelPath("tiny-untied", "q8_0", 1);
  auto cycled = minfer::testing::TestModelPath("small", "q8_0", 1);
  ASSERT_TRUE(steady.ok() && cycled.ok());
  // The HTTP API too, its timeouts past the run: the soak's idle and slow
  // connections stay open throughout (the timeouts have tests of their own).
  auto m = testing::StartMinferd({"--model", "a=" + *steady, "--ctx", "512", "--parallel", "4",
                                  "--log-level", "warn", "--http-listen", "127.0.0.1:0",
                                  "--http-header-timeout", "3600", "--http-idle-timeout", "3600"});
  ASSERT_TRUE(m.ok()) << m.status();
  soak::SoakOptions o;
  o.address = m->address;
  o.pid = m->proc->pid();
  o.cycled_path = *cycled;
  o.streams = 4;
  o.http_address = m->http_address;
  o.http_streams = 2;
  o.idle_http = 200;
  o.slow_http = 50;
  o.seconds = EnvDouble("MINFER_SOAK_SECONDS", 40);
  o.warmup_seconds = EnvDouble("MINFER_SOAK_WARMUP", 15);
  o.max_tokens = 32;
  o.n_ctx = 512;
  o.parallel = 2;
  absl::StatusOr<soak::SoakReport> r = soak::RunSoak(o);
  ASSERT_TRUE(r.ok()) << r.status();
  std::printf("%s", soak::FormatReport(*r).c_str());
  std::string ends;
  for (const soak::Sample& s : r->cycle_ends) {
    absl::StrAppendFormat(&ends, " %.1f", s.anon_bytes / 1048576.0);
  }
  std::printf("anonymous RSS at each cycle end (MiB):%s\n", ends.c_str());
  EXPECT_EQ(r->failed(), 0);
  EXPECT_EQ(r->mismatched, 0);
  EXPECT_EQ(r->unexpected_probes, 0);
  EXPECT_GT(r->generations_ok, 100);
  EXPECT_GT(r->http_ok, 20);
  EXPECT_EQ(r->side_connections, 250);
  EXPECT_EQ(r->side_reopened, 0);
  EXPECT_GT(r->cycles, 5);
  // The probes did meet the cycled model loading or gone.
  EXPECT_GT(r->probes_by_code["FAILED_PRECONDITION"] + r->probes_by_code["NOT_FOUND"], 0);
  // The tiny daemon's heap is a few MiB, so a percentage says little in a
  // minute: at most 8 MiB of growth after the warm-up. (The creep this
  // guards against kept 25-30 MiB per cycle; the 10-minute run with larger
  // models holds to 1 %.)
  soak::SoakLimits limits;
  limits.max_rss_drift_percent = 1e9;
  limits.max_rss_growth_bytes = 8u << 20;
  const std::vector<std::string> v = soak::Violations(*r, limits);
  EXPECT_TRUE(v.empty()) << absl::StrJoin(v, "; ");
  m->proc->Signal(SIGTERM);
  auto code = m->proc->Wait(std::chrono::seconds(30));
  ASSERT_TRUE(code.ok()) << m->proc->ReadStderr();
  EXPECT_EQ(*code, 0) << "minferd's stderr:\n" << m->proc->ReadStderr();
  EXPECT_FALSE(std::ifstream(m->ready_file).good());
}

}  // namespace
}  // namespace minfer::daemon
