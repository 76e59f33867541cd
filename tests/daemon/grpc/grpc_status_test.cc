// Status messages that reach a gRPC client are bounded: ToGrpcStatus cuts a
// long one, and the cut never splits a UTF-8 character.
#include "daemon/grpc/grpc_status.h"

#include <string>

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

}  // namespace
}  // namespace minfer::daemon
