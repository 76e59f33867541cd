// What the services echo back to a client is bounded: quoted input, and the
// name and path checks (the status-message cut: grpc/grpc_status_test.cc).
#include <string>

#include "daemon/serving/client_input.h"
#include "gtest/gtest.h"

namespace minfer::daemon {
namespace {

TEST(ClientInputTest, QuoteInputEscapesAndCuts) {
  EXPECT_EQ(QuoteInput("prod"), "'prod'");
  // (A hex digit after a \x escape is escaped too: "\x00b" would read as
  // one escape.)
  EXPECT_EQ(QuoteInput(std::string("a\0b\xff\n", 5)), "'a\\x00\\x62\\xff\\n'");
  EXPECT_EQ(QuoteInput(std::string(20480, 'x')), "'" + std::string(48, 'x') + "...' (20480 bytes)");
}

TEST(ClientInputTest, NamesAreBoundedAndChecked) {
  EXPECT_TRUE(CheckName("", "model").ok());
  EXPECT_TRUE(CheckName("qwen2.5-7b_Q4", "model").ok());
  EXPECT_TRUE(CheckName(std::string(64, 'a'), "model").ok());
  absl::Status long_name = CheckName(std::string(65, 'a'), "model");
  EXPECT_EQ(long_name.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(long_name.message(), "model must be at most 64 characters, got '" +
                                     std::string(48, 'a') + "...' (65 bytes)");
  absl::Status bad = CheckName("a b\x01", "alias");
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.message(),
            "alias may use only letters, digits, '.', '_' and '-', got 'a b\\x01'");
}

TEST(ClientInputTest, PathsAreBoundedAndChecked) {
  EXPECT_TRUE(CheckPath("/models/a.gguf", "path").ok());
  EXPECT_EQ(std::string(CheckPath("", "path").message()), "path must not be empty");
  EXPECT_TRUE(CheckPath(std::string(kMaxPathBytes, 'p'), "path").ok());
  absl::Status long_path = CheckPath(std::string(kMaxPathBytes + 1, 'p'), "path");
  EXPECT_EQ(long_path.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(long_path.message(), "path must be at most 4096 bytes, got '" + std::string(48, 'p') +
                                     "...' (4097 bytes)");
  EXPECT_EQ(std::string(CheckPath(std::string("a\0b", 3), "path").message()),
            "path must not contain a NUL byte, got 'a\\x00\\x62'");
}

TEST(ConstantTimeEqualsTest, EqualOnlyForTheSameBytes) {
  EXPECT_TRUE(ConstantTimeEquals("sk-team", "sk-team"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_FALSE(ConstantTimeEquals("sk-tea", "sk-team"));   // a prefix
  EXPECT_FALSE(ConstantTimeEquals("sk-teamX", "sk-team"));  // longer
  EXPECT_FALSE(ConstantTimeEquals("sk-teaM", "sk-team"));
  EXPECT_FALSE(ConstantTimeEquals("", "k"));
}

}  // namespace
}  // namespace minfer::daemon
