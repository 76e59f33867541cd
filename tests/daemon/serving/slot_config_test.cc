// ParseKvType (daemon/serving/slot_config.h): every cache type a load may
// name, the model's default for "" and "auto", and a refusal that names the
// bad value, cut short when it is long.
#include "daemon/serving/slot_config.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace minfer::daemon {
namespace {

TEST(ParseKvTypeTest, EveryCacheTypeAndTheDefault) {
  EXPECT_FALSE(ParseKvType("")->has_value());
  EXPECT_FALSE(ParseKvType("auto")->has_value());
  EXPECT_EQ(**ParseKvType("f32"), graph::DType::kF32);
  EXPECT_EQ(**ParseKvType("f16"), graph::DType::kF16);
  EXPECT_EQ(**ParseKvType("q8_0"), graph::DType::kQ8_0);
  EXPECT_EQ(**ParseKvType("fp8"), graph::DType::kFp8);
}

TEST(ParseKvTypeTest, RefusesOtherValuesNamingThemShort) {
  auto bad = ParseKvType("fp9");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "'fp9'")) << bad.status();
  auto huge = ParseKvType(std::string(5000, 'x'));
  ASSERT_FALSE(huge.ok());
  EXPECT_LT(huge.status().message().size(), 200u) << huge.status().message().size();
  EXPECT_TRUE(absl::StrContains(huge.status().message(), std::string(64, 'x') + "...'"));
}

}  // namespace
}  // namespace minfer::daemon
