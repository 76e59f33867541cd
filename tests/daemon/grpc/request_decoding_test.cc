// DecodeMessage: what a request that does not decode is answered with —
// the field (by its path in the request) that is not UTF-8, or that the
// bytes are not protobuf at all — and that good requests decode as
// protobuf itself decodes them.
#include <string>

#include "daemon/grpc/request_decoding.h"
#include "gtest/gtest.h"
#include "minfer/v1/admin.pb.h"
#include "minfer/v1/generation.pb.h"

namespace minfer::daemon {
namespace {

// Field `number` (< 16) of wire type 2 (length-delimited) holding `value`.
std::string Field(int number, const std::string& value) {
  std::string out;
  out.push_back(static_cast<char>(number << 3 | 2));
  out.push_back(static_cast<char>(value.size()));  // values here are < 128 bytes
  return out + value;
}

TEST(RequestDecodingTest, DecodesWhatProtobufDecodes) {
  v1::GenerateRequest r;
  r.set_model("prod");
  v1::ChatMessage* m = r.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("héllo 😀");
  r.mutable_stopping()->set_max_tokens(7);
  r.mutable_stopping()->add_stop("\n\n");
  v1::GenerateRequest out;
  ASSERT_TRUE(DecodeMessage(r.SerializeAsString(), &out).ok());
  EXPECT_EQ(out.SerializeAsString(), r.SerializeAsString());
  // An empty message is a valid (empty) request; fields the server does
  // not know (a newer client's) are ignored.
  v1::GenerateRequest empty;
  EXPECT_TRUE(DecodeMessage("", &empty).ok());
  v1::TokenizeRequest t;
  ASSERT_TRUE(DecodeMessage(Field(1, "a") + Field(15, "\xff\xfe"), &t).ok());
  EXPECT_EQ(t.model(), "a");
}

TEST(RequestDecodingTest, InvalidUtf8NamesTheField) {
  v1::GenerateRequest g;
  absl::Status s = DecodeMessage(Field(1, "a\xff" "b"), &g);  // model
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "the request could not be decoded: model is not valid UTF-8 (byte 1 of 3); string "
            "fields must be UTF-8 text");
  // chat (field 3) -> messages (1) [1] -> content (2).
  const std::string ok_msg = Field(1, "user") + Field(2, "fine");
  const std::string bad_msg = Field(1, "user") + Field(2, "caf\xc3");
  v1::GenerateRequest chat;
  s = DecodeMessage(Field(3, Field(1, ok_msg) + Field(1, bad_msg)), &chat);
  EXPECT_EQ(s.message(),
            "the request could not be decoded: chat.messages[1].content is not valid UTF-8 "
            "(byte 3 of 4); string fields must be UTF-8 text");
  // stopping (field 6) -> stop (2) [0]: an overlong encoding of '/'.
  v1::GenerateRequest stop;
  s = DecodeMessage(Field(6, Field(2, "\xc0\xaf")), &stop);
  EXPECT_EQ(s.message(),
            "the request could not be decoded: stopping.stop[0] is not valid UTF-8 (byte 0 of "
            "2); string fields must be UTF-8 text");
  // A UTF-16 surrogate (U+D800 as UTF-8) is not UTF-8 either.
  v1::TokenizeRequest tok;
  s = DecodeMessage(Field(2, "x\xed\xa0\x80"), &tok);  // text
  EXPECT_EQ(s.message(),
            "the request could not be decoded: text is not valid UTF-8 (byte 1 of 4); string "
            "fields must be UTF-8 text");
  // A map key: LoadModelRequest.knobs (field 7), entry key (1).
  v1::LoadModelRequest load;
  s = DecodeMessage(Field(1, "m") + Field(7, Field(1, "K\x80") + Field(2, "1")), &load);
  EXPECT_EQ(s.message(),
            "the request could not be decoded: knobs.key is not valid UTF-8 (byte 1 of 2); "
            "string fields must be UTF-8 text");
}

TEST(RequestDecodingTest, GarbageIsNotProtobuf) {
  v1::GenerateRequest g;
  // Field 1, length-delimited, claiming 100 bytes of which 3 follow.
  absl::Status s = DecodeMessage(std::string("\x0a\x64" "abc", 5), &g);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "the request could not be decoded: its 5 bytes are not a protobuf message "
            "(minfer.v1.GenerateRequest)");
  // A field number of 0 and an end-group without a start.
  EXPECT_EQ(DecodeMessage(std::string("\x00\x01", 2), &g).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeMessage("\x0c", &g).code(), absl::StatusCode::kInvalidArgument);
  // A nested message that is not one: chat (3) holding a truncated field.
  s = DecodeMessage(Field(3, std::string("\x0a\x10", 2)), &g);
  EXPECT_EQ(s.message(),
            "the request could not be decoded: chat is not a valid minfer.v1.Chat message "
            "(malformed protobuf wire format)");
  // Packed token ids (tokens = 4, ids = 1) whose last varint never ends.
  s = DecodeMessage(Field(4, Field(1, "\x05\x85")), &g);
  EXPECT_EQ(s.message(),
            "the request could not be decoded: tokens.ids holds malformed packed varints");
}

TEST(RequestDecodingTest, ConsumesTheByteBuffer) {
  v1::TokenizeRequest r;
  r.set_model("m");
  const std::string bytes = r.SerializeAsString();
  grpc::Slice slice(bytes);
  grpc::ByteBuffer buffer(&slice, 1);
  v1::TokenizeRequest out;
  ASSERT_TRUE(DecodeMessage(&buffer, &out).ok());
  EXPECT_EQ(out.model(), "m");
  EXPECT_FALSE(buffer.Valid());
  EXPECT_EQ(DecodeMessage(static_cast<grpc::ByteBuffer*>(nullptr), &out).message(),
            "the call carried no request message");
}

}  // namespace
}  // namespace minfer::daemon
