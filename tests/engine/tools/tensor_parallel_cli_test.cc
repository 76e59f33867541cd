// `minfer run` and `minfer bench` with --tensor-parallel (what the two-GPU
// runs of issue 34 use), on the CPU: a split over two ranks generates the
// whole model's greedy ids, bench runs it single-stream and batched, and
// contradictory flags are refused naming the problem.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/subprocess.h"
#include "tests/support/test_models.h"

namespace minfer {
namespace {

using ::testing::HasSubstr;

std::string Minfer() { return testing::RunfilePath("engine/tools/minfer"); }

std::vector<int> GreedyIds(const std::string& model, const std::string& tp) {
  auto r = testing::RunCommand({Minfer(), "run", "-m", model, "--backend", "cpu",
                                "--tensor-parallel", tp, "-p", "Once upon a time there was",
                                "-n", "32", "--temp", "0", "--ignore-eos", "--json", "-q"},
                               std::chrono::seconds(120));
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  EXPECT_EQ(r->exit_code, 0) << r->err;
  auto j = nlohmann::json::parse(r->out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r->out;
  if (j.is_discarded()) return {};
  return j["generated_ids"].get<std::vector<int>>();
}

TEST(TensorParallelCliTest, RunOverTwoRanksGivesTheWholeModelsIds) {
  auto path = testing::TestModelPath("tiny-untied", "q8_0", 1);
  ASSERT_TRUE(path.ok()) << path.status();
  const std::vector<int> whole = GreedyIds(*path, "1");
  const std::vector<int> split = GreedyIds(*path, "2");
  ASSERT_EQ(whole.size(), 32u);
  EXPECT_EQ(split, whole);
}

TEST(TensorParallelCliTest, BenchRunsASplitAndRefusesContradictions) {
  auto path = testing::TestModelPath("tiny-untied", "q8_0", 1);
  ASSERT_TRUE(path.ok()) << path.status();
  auto b = testing::RunCommand({Minfer(), "bench", "-m", *path, "--backend", "cpu",
                                "--tensor-parallel", "2", "-b", "1,4", "-p", "8", "-n", "8",
                                "-r", "1"},
                               std::chrono::seconds(120));
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->exit_code, 0) << b->err;
  EXPECT_THAT(b->out, HasSubstr("| cpu | 4 |"));
  auto pinned = testing::RunCommand({Minfer(), "bench", "-m", *path, "--gpu", "0",
                                     "--tensor-parallel", "2", "-p", "8", "-n", "8"});
  ASSERT_TRUE(pinned.ok());
  EXPECT_EQ(pinned->exit_code, 2);
  EXPECT_THAT(pinned->err, HasSubstr("--gpu pins one device"));
  auto devices = testing::RunCommand({Minfer(), "run", "-m", *path, "--backend", "cpu",
                                      "--tensor-parallel", "2", "--devices", "0,1", "-p", "hi",
                                      "-n", "1", "-q"});
  ASSERT_TRUE(devices.ok());
  EXPECT_NE(devices->exit_code, 0);
  EXPECT_THAT(devices->err, HasSubstr("tensor_parallel_devices name devices, but backend is cpu"));
}

}  // namespace
}  // namespace minfer
