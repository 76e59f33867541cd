#include "engine/base/field_error.h"

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace minfer {
namespace {

TEST(FieldErrorTest, TheMessageIsThePathAndItsText) {
  const absl::Status a = InvalidField("chat.tools[1].parameters", "must be a JSON Schema object");
  EXPECT_EQ(a.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a.message(), "chat.tools[1].parameters: must be a JSON Schema object");
  EXPECT_EQ(FieldPath(a), "chat.tools[1].parameters");
  EXPECT_EQ(FieldText(a), ": must be a JSON Schema object");
  const absl::Status b = InvalidFieldThat("top_p", "must be in (0, 1]");
  EXPECT_EQ(b.message(), "top_p must be in (0, 1]");
  EXPECT_EQ(FieldPath(b), "top_p");
  // Not a field error.
  const absl::Status plain = absl::InvalidArgumentError("chat.tools: x");
  EXPECT_EQ(FieldPath(plain), "");
  EXPECT_EQ(FieldText(plain), "chat.tools: x");
  EXPECT_EQ(RenameField(plain, "tools"), plain);
  EXPECT_EQ(PrefixField(plain, "sampling"), plain);
  EXPECT_EQ(PrefixField(absl::OkStatus(), "sampling"), absl::OkStatus());
}

TEST(FieldErrorTest, RenamingKeepsTheTextCodeAndReason) {
  const absl::Status s =
      WithReason(InvalidField("prompt", "300 tokens do not fit"), kContextLengthExceeded);
  const absl::Status r = RenameField(s, "messages");
  EXPECT_EQ(r.message(), "messages: 300 tokens do not fit");
  EXPECT_EQ(FieldPath(r), "messages");
  EXPECT_EQ(ErrorReason(r), "context_length_exceeded");
  EXPECT_EQ(r.code(), absl::StatusCode::kInvalidArgument);
  const absl::Status p = PrefixField(InvalidFieldThat("top_p", "must be > 0"), "sampling");
  EXPECT_EQ(p.message(), "sampling.top_p must be > 0");
  EXPECT_EQ(FieldPath(p), "sampling.top_p");
  EXPECT_EQ(FieldPath(PrefixField(InvalidField("[2]", "x"), "ids")), "ids[2]");
  EXPECT_EQ(ErrorReason(InvalidField("a", "b")), "");
  EXPECT_TRUE(WithReason(absl::OkStatus(), "x").ok());
}

TEST(FieldErrorTest, PathsParseIntoNamesAndIndices) {
  const std::vector<FieldPathStep> steps = ParseFieldPath("chat.messages[3].tool_calls[0].name");
  ASSERT_EQ(steps.size(), 6u);
  EXPECT_EQ(steps[0].name, "chat");
  EXPECT_EQ(steps[1].name, "messages");
  EXPECT_TRUE(steps[2].is_index());
  EXPECT_EQ(steps[2].index, 3);
  EXPECT_EQ(steps[3].name, "tool_calls");
  EXPECT_EQ(steps[4].index, 0);
  EXPECT_EQ(steps[5].name, "name");
  EXPECT_EQ(FormatFieldPath(steps), "chat.messages[3].tool_calls[0].name");
  for (const char* p : {"", "a", "a.b", "a[1][2].c", "stop[0]", "[4]"}) {
    EXPECT_EQ(FormatFieldPath(ParseFieldPath(p)), p) << p;
  }
  // Not an index: kept as a name, never lost.
  EXPECT_EQ(FormatFieldPath(ParseFieldPath("a[x]")), "a[x]");
}

}  // namespace
}  // namespace minfer
