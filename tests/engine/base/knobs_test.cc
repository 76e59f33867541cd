#include "engine/base/knobs.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace minfer {
namespace {

KnobSpec BoolKnob(std::string name, std::string def = "0",
                  KnobScope scope = KnobScope::kGlobal) {
  return {std::move(name), KnobType::kBool, std::move(def), scope, KnobEffect::kImmediate,
          "test knob"};
}

TEST(KnobsTest, BoolNormalizationAndGeneration) {
  KnobRegistry r;
  ASSERT_TRUE(r.Register(BoolKnob("MINFER_TEST_A")).ok());
  EXPECT_FALSE(r.GetBool("MINFER_TEST_A"));
  uint64_t g0 = r.generation();
  ASSERT_TRUE(r.Set("MINFER_TEST_A", "on").ok());
  EXPECT_TRUE(r.GetBool("MINFER_TEST_A"));
  EXPECT_EQ(r.Get("MINFER_TEST_A")->value, "1");
  EXPECT_EQ(r.generation(), g0 + 1);
  // Setting the same value again does not invalidate anything.
  ASSERT_TRUE(r.Set("MINFER_TEST_A", "true").ok());
  EXPECT_EQ(r.generation(), g0 + 1);
  absl::Status bad = r.Set("MINFER_TEST_A", "maybe");
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("MINFER_TEST_A"), std::string::npos);
  ASSERT_TRUE(r.Reset("MINFER_TEST_A").ok());
  EXPECT_FALSE(r.GetBool("MINFER_TEST_A"));
}

TEST(KnobsTest, UnknownKnobIsNotFound) {
  KnobRegistry r;
  EXPECT_EQ(r.Set("MINFER_NOPE", "1").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(r.Get("MINFER_NOPE").status().code(), absl::StatusCode::kNotFound);
}

TEST(KnobsTest, EnumAndIntValidation) {
  KnobRegistry r;
  ASSERT_TRUE(r.Register({"MINFER_TEST_E", KnobType::kEnum, "auto", KnobScope::kPerModel,
                          KnobEffect::kReload, "e", {"auto", "f32", "f16"}})
                  .ok());
  ASSERT_TRUE(r.Register({"MINFER_TEST_I", KnobType::kInt, "4", KnobScope::kGlobal,
                          KnobEffect::kReload, "i"})
                  .ok());
  EXPECT_EQ(r.GetString("MINFER_TEST_E"), "auto");
  EXPECT_TRUE(r.Set("MINFER_TEST_E", "F16").ok());
  EXPECT_EQ(r.GetString("MINFER_TEST_E"), "f16");
  EXPECT_FALSE(r.Set("MINFER_TEST_E", "q2").ok());
  EXPECT_EQ(r.GetInt("MINFER_TEST_I"), 4);
  EXPECT_FALSE(r.Set("MINFER_TEST_I", "4x").ok());
  EXPECT_TRUE(r.Set("MINFER_TEST_I", " -3 ").ok());
  EXPECT_EQ(r.GetInt("MINFER_TEST_I"), -3);
}

TEST(KnobsTest, PerModelOverrides) {
  KnobRegistry r;
  ASSERT_TRUE(r.Register(BoolKnob("MINFER_TEST_G")).ok());
  ASSERT_TRUE(r.Register(BoolKnob("MINFER_TEST_P", "0", KnobScope::kPerModel)).ok());
  KnobOverrides ov{{"MINFER_TEST_P", "1"}};
  EXPECT_TRUE(r.ValidateOverrides(ov).ok());
  EXPECT_TRUE(r.GetBool("MINFER_TEST_P", &ov));
  EXPECT_FALSE(r.GetBool("MINFER_TEST_P"));
  KnobOverrides global_ov{{"MINFER_TEST_G", "1"}};
  EXPECT_EQ(r.ValidateOverrides(global_ov).code(), absl::StatusCode::kInvalidArgument);
  KnobOverrides bad_ov{{"MINFER_TEST_P", "zzz"}};
  EXPECT_EQ(r.ValidateOverrides(bad_ov).code(), absl::StatusCode::kInvalidArgument);
}

TEST(KnobsTest, EnvironmentIsRead) {
  KnobRegistry r;
  ASSERT_TRUE(r.Register(BoolKnob("MINFER_TEST_ENV")).ok());
  ASSERT_TRUE(r.Register(BoolKnob("MINFER_TEST_ENV_BAD")).ok());
  setenv("MINFER_TEST_ENV", "1", 1);
  setenv("MINFER_TEST_ENV_BAD", "garbage", 1);
  absl::Status s = r.LoadFromEnvironment();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("MINFER_TEST_ENV_BAD"), std::string::npos);
  EXPECT_TRUE(r.GetBool("MINFER_TEST_ENV"));
  EXPECT_TRUE(r.Get("MINFER_TEST_ENV")->from_environment);
  EXPECT_FALSE(r.GetBool("MINFER_TEST_ENV_BAD"));
}

TEST(KnobsTest, ConflictingRegistrationFails) {
  KnobRegistry r;
  ASSERT_TRUE(r.Register(BoolKnob("MINFER_TEST_C")).ok());
  EXPECT_TRUE(r.Register(BoolKnob("MINFER_TEST_C")).ok());
  EXPECT_FALSE(r.Register(BoolKnob("MINFER_TEST_C", "1")).ok());
}

}  // namespace
}  // namespace minfer
