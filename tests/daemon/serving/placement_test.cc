// PlacementOrder (daemon/serving/placement.h): which devices a load tries,
// in which order, against a DeviceBudget with loads in progress.
#include "daemon/serving/placement.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace minfer::daemon {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kGiB = uint64_t{1} << 30;

std::vector<int32_t> Indices(const std::vector<runtime::DeviceInfo>& order) {
  std::vector<int32_t> out;
  for (const runtime::DeviceInfo& d : order) out.push_back(d.index);
  return out;
}

std::vector<runtime::DeviceInfo> ThreeGpus() {
  // Listed as a provider lists them: its default device (2) first.
  return {{2, "H200", 132, 141 * kGiB, 60 * kGiB},
          {0, "H200", 132, 141 * kGiB, 100 * kGiB},
          {1, "H200", 132, 141 * kGiB, 60 * kGiB}};
}

TEST(PlacementTest, UnplacedLoadsTryTheRoomiestDeviceFirst) {
  DeviceBudget budget;
  auto order = PlacementOrder(ThreeGpus(), -1, budget);
  ASSERT_TRUE(order.ok()) << order.status();
  // 0 has the most free; 2 and 1 tie and keep the provider's order.
  EXPECT_EQ(Indices(*order), (std::vector<int32_t>{0, 2, 1}));
}

TEST(PlacementTest, LoadsInProgressCountAgainstTheirDevice) {
  DeviceBudget budget;
  // 50 GiB uploading to device 0 leaves it 50 - headroom: less than 1 and 2.
  ASSERT_TRUE(budget.Reserve("big", 0, "cuda:0", MemoryEstimate{50 * kGiB, 0, 0}, 100 * kGiB,
                             141 * kGiB)
                  .ok());
  auto order = PlacementOrder(ThreeGpus(), -1, budget);
  ASSERT_TRUE(order.ok());
  EXPECT_EQ(Indices(*order), (std::vector<int32_t>{2, 1, 0}));
  // Device 2 uploading 10 GiB: device 1 is now the roomiest.
  ASSERT_TRUE(budget.Reserve("mid", 2, "cuda:2", MemoryEstimate{10 * kGiB, 0, 0}, 60 * kGiB,
                             141 * kGiB)
                  .ok());
  order = PlacementOrder(ThreeGpus(), -1, budget);
  ASSERT_TRUE(order.ok());
  EXPECT_EQ(Indices(*order), (std::vector<int32_t>{1, 2, 0}));
  budget.Release("big");
  budget.Release("mid");
  order = PlacementOrder(ThreeGpus(), -1, budget);
  ASSERT_TRUE(order.ok());
  EXPECT_EQ(Indices(*order), (std::vector<int32_t>{0, 2, 1}));
}

TEST(PlacementTest, ANamedDeviceIsTheOnlyOneTried) {
  DeviceBudget budget;
  auto order = PlacementOrder(ThreeGpus(), 1, budget);
  ASSERT_TRUE(order.ok());
  EXPECT_EQ(Indices(*order), (std::vector<int32_t>{1}));
  EXPECT_EQ((*order)[0].free_bytes, 60 * kGiB);
}

TEST(PlacementTest, ADeviceThatIsNotThereIsRefusedNamingTheOthers) {
  DeviceBudget budget;
  auto order = PlacementOrder(ThreeGpus(), 3, budget);
  ASSERT_EQ(order.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(order.status().message()),
              HasSubstr("device 3 does not exist; this server's GPUs are 2, 0, 1"));
  auto none = PlacementOrder({}, 0, budget);
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("GPUs are none"));
}

TEST(PlacementTest, LabelsNameTheProviderIndexAndModel) {
  EXPECT_EQ(DeviceLabel("cuda", runtime::DeviceInfo{1, "NVIDIA H200", 132, 0, 0}),
            "cuda:1 (NVIDIA H200)");
}

}  // namespace
}  // namespace minfer::daemon
