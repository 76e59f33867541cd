// What the services echo back to a client is bounded: status messages (the
// ToGrpcStatus cut), quoted input, and the name and path checks.
#include <string>

#include "daemon/client_input.h"
#include "daemon/grpc_status.h"
#include "gtest/gtest.h"

namespace minfer::daemon {
namespace {

TEST(GrpcStatusTest, ShortMessagesPassUnchanged) {
  grpc::Status g = ToGrpcStatus(absl::NotFoundError("no model or alias named 'x'"));
  EXPECT_EQ(g.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(g.error_message(), "no model or alias named 'x'");
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

TEST(GrpcStatusTest, LongMessagesAreCutToTheLimit) {
  const std::string huge(1 << 20, 'n');
  grpc::Status g = ToGrpcStatus(absl::InvalidArgumentError("name: " + huge));
  EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  const std::string expected =
      "name: " + std::string(kMaxStatusMessageBytes - 6, 'n') + " [... 1047558 more bytes]";
  EXPECT_EQ(g.error_message(), expected);
  EXPECT_LE(g.error_message().size(), kMaxStatusMessageBytes + 32);
}

TEST(GrpcStatusTest, TruncationKeepsUtf8CharactersWhole) {
  // "é" is two bytes (C3 A9): a cut at 3 would split the second one.
  EXPECT_EQ(TruncateMessage("aéé", 4), "aé [... 2 more bytes]");
  EXPECT_EQ(TruncateMessage("aéé", 5), "aéé");
  // A four-byte character (U+1F600) is never split either.
  EXPECT_EQ(TruncateMessage("\xF0\x9F\x98\x80xyz", 3), " [... 7 more bytes]");
  EXPECT_EQ(TruncateMessage("abcdef", 3), "abc [... 3 more bytes]");
}

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
