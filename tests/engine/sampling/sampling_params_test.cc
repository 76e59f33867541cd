#include "engine/sampling/sampling_params.h"

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "engine/sampling/finish_reason.h"
#include "gtest/gtest.h"

namespace minfer {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(SamplingParamsTest, DefaultsAreValidAndNeutral) {
  SamplingParams p;
  EXPECT_TRUE(p.Validate().ok());
  EXPECT_FALSE(p.PenaltiesEnabled());
  EXPECT_EQ(p.temperature, 1.0f);
  EXPECT_EQ(p.top_k, 0);
  EXPECT_EQ(p.top_p, 1.0f);
  EXPECT_EQ(p.min_p, 0.0f);
}

TEST(SamplingParamsTest, BoundaryValuesAreValid) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_p = 1.0f;
  p.min_p = 1.0f;
  p.n_logprobs = kMaxLogprobs;
  p.penalty_last_n = -1;
  p.frequency_penalty = -2.0f;
  p.presence_penalty = -2.0f;
  p.banned_tokens = {0, 5, 5};
  EXPECT_TRUE(p.Validate().ok()) << p.Validate();
  p.top_p = 1e-6f;
  p.min_p = 0.0f;
  EXPECT_TRUE(p.Validate().ok());
}

struct BadCase {
  std::string field;
  std::function<void(SamplingParams&)> mutate;
};

TEST(SamplingParamsTest, EachBadFieldIsNamed) {
  const BadCase cases[] = {
      {"temperature", [](SamplingParams& p) { p.temperature = -0.1f; }},
      {"temperature", [](SamplingParams& p) { p.temperature = kNaN; }},
      {"temperature", [](SamplingParams& p) { p.temperature = kInf; }},
      {"top_k", [](SamplingParams& p) { p.top_k = -1; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 0.0f; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 1.01f; }},
      {"top_p", [](SamplingParams& p) { p.top_p = kNaN; }},
      {"min_p", [](SamplingParams& p) { p.min_p = -0.01f; }},
      {"min_p", [](SamplingParams& p) { p.min_p = 1.5f; }},
      {"min_p", [](SamplingParams& p) { p.min_p = kNaN; }},
      {"repetition_penalty",
       [](SamplingParams& p) { p.repetition_penalty = 0.0f; }},
      {"repetition_penalty",
       [](SamplingParams& p) { p.repetition_penalty = -1.1f; }},
      {"repetition_penalty",
       [](SamplingParams& p) { p.repetition_penalty = kInf; }},
      {"frequency_penalty",
       [](SamplingParams& p) { p.frequency_penalty = kNaN; }},
      {"frequency_penalty",
       [](SamplingParams& p) { p.frequency_penalty = -kInf; }},
      {"presence_penalty",
       [](SamplingParams& p) { p.presence_penalty = kInf; }},
      {"penalty_last_n", [](SamplingParams& p) { p.penalty_last_n = -2; }},
      {"n_logprobs", [](SamplingParams& p) { p.n_logprobs = 21; }},
      {"n_logprobs", [](SamplingParams& p) { p.n_logprobs = -1; }},
      {"banned_tokens[1]",
       [](SamplingParams& p) {
         p.banned_tokens = {3, -1};
       }},
  };
  for (const BadCase& c : cases) {
    SamplingParams p;
    c.mutate(p);
    const absl::Status s = p.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(s.message().find(c.field), absl::string_view::npos)
        << c.field << ": " << s;
  }
}

TEST(SamplingParamsTest, PenaltiesEnabled) {
  SamplingParams p;
  p.repetition_penalty = 1.1f;
  EXPECT_TRUE(p.PenaltiesEnabled());
  p.penalty_last_n = 0;
  EXPECT_FALSE(p.PenaltiesEnabled());
  p = SamplingParams();
  p.presence_penalty = 0.5f;
  EXPECT_TRUE(p.PenaltiesEnabled());
  p = SamplingParams();
  p.frequency_penalty = -0.5f;
  EXPECT_TRUE(p.PenaltiesEnabled());
}

TEST(FinishReasonTest, Names) {
  EXPECT_EQ(FinishReasonName(FinishReason::kLength), "length");
  EXPECT_EQ(FinishReasonName(FinishReason::kStop), "stop");
  EXPECT_EQ(FinishReasonName(FinishReason::kEos), "eos");
  EXPECT_EQ(FinishReasonName(FinishReason::kCancelled), "cancelled");
}

}  // namespace
}  // namespace minfer
