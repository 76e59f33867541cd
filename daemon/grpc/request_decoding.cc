#include "daemon/grpc/request_decoding.h"

#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/unknown_field_set.h"
#include "grpcpp/support/slice.h"

namespace minfer::daemon {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::UnknownField;
using google::protobuf::UnknownFieldSet;

// Deeper than any minfer.v1 message nests; bounds the walk on crafted input.
constexpr int kMaxDepth = 32;

// Offset of the first byte of `s` that is not part of a well-formed UTF-8
// sequence (RFC 3629: no overlong forms, no surrogates, nothing above
// U+10FFFF, as protobuf checks), or nullopt when all of it is.
std::optional<size_t> FirstInvalidUtf8(absl::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return i;
    }
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
    }
    i += len;
  }
  return std::nullopt;
}

// Whether `s` is a run of well-formed varints (packed repeated integers).
bool ValidPackedVarints(absl::string_view s) {
  size_t bytes = 0;
  for (char ch : s) {
    ++bytes;
    if (bytes > 10) return false;
    if ((static_cast<unsigned char>(ch) & 0x80) == 0) bytes = 0;
  }
  return bytes == 0;
}

bool IsVarintType(FieldDescriptor::Type t) {
  switch (t) {
    case FieldDescriptor::TYPE_INT32:
    case FieldDescriptor::TYPE_INT64:
    case FieldDescriptor::TYPE_UINT32:
    case FieldDescriptor::TYPE_UINT64:
    case FieldDescriptor::TYPE_SINT32:
    case FieldDescriptor::TYPE_SINT64:
    case FieldDescriptor::TYPE_BOOL:
    case FieldDescriptor::TYPE_ENUM:
      return true;
    default:
      return false;
  }
}

// Size of one element of a fixed-width packable type, else 0.
size_t FixedWidth(FieldDescriptor::Type t) {
  switch (t) {
    case FieldDescriptor::TYPE_FIXED32:
    case FieldDescriptor::TYPE_SFIXED32:
    case FieldDescriptor::TYPE_FLOAT:
      return 4;
    case FieldDescriptor::TYPE_FIXED64:
    case FieldDescriptor::TYPE_SFIXED64:
    case FieldDescriptor::TYPE_DOUBLE:
      return 8;
    default:
      return 0;
  }
}

// The first thing in `fields` (a message of type `type` at `path`, parsed
// as wire format only) that the typed parse would refuse, described for the
// client; nullopt when there is none.
std::optional<std::string> FindUndecodable(const Descriptor& type, const UnknownFieldSet& fields,
                                           const std::string& path, int depth) {
  if (depth > kMaxDepth) return absl::StrCat(path, " nests deeper than ", kMaxDepth, " levels");
  std::map<int, int> seen;  // field number -> occurrences so far
  for (int i = 0; i < fields.field_count(); ++i) {
    const UnknownField& f = fields.field(i);
    const FieldDescriptor* fd = type.FindFieldByNumber(f.number());
    // Unknown fields (a newer client's) are kept and ignored, as proto3 does.
    if (fd == nullptr) continue;
    std::string name = path.empty() ? fd->name() : absl::StrCat(path, ".", fd->name());
    if (fd->is_repeated() && fd->type() == FieldDescriptor::TYPE_MESSAGE && !fd->is_map()) {
      absl::StrAppend(&name, "[", seen[f.number()]++, "]");
    } else if (fd->is_repeated() && fd->type() == FieldDescriptor::TYPE_STRING) {
      absl::StrAppend(&name, "[", seen[f.number()]++, "]");
    }
    // A known field sent with another wire type is kept as an unknown
    // field by the typed parse too, so only length-delimited values of
    // string, message and packed fields can fail it.
    if (f.type() != UnknownField::TYPE_LENGTH_DELIMITED) continue;
    const std::string& value = f.length_delimited();
    switch (fd->type()) {
      case FieldDescriptor::TYPE_STRING:
        if (std::optional<size_t> bad = FirstInvalidUtf8(value)) {
          return absl::StrCat(name, " is not valid UTF-8 (byte ", *bad, " of ", value.size(),
                              "); string fields must be UTF-8 text");
        }
        break;
      case FieldDescriptor::TYPE_MESSAGE: {
        UnknownFieldSet inner;
        if (!inner.ParseFromString(value)) {
          return absl::StrCat(name, " is not a valid ", fd->message_type()->full_name(),
                              " message (malformed protobuf wire format)");
        }
        std::optional<std::string> problem =
            FindUndecodable(*fd->message_type(), inner, name, depth + 1);
        if (problem) return problem;
        break;
      }
      default:
        if (!fd->is_repeated()) break;
        if (IsVarintType(fd->type()) && !ValidPackedVarints(value)) {
          return absl::StrCat(name, " holds malformed packed varints");
        }
        if (const size_t w = FixedWidth(fd->type()); w > 0 && value.size() % w != 0) {
          return absl::StrCat(name, " holds packed values of ", value.size(),
                              " bytes, not a multiple of ", w);
        }
        break;
    }
  }
  return std::nullopt;
}

}  // namespace

absl::Status DecodeMessage(absl::string_view bytes, google::protobuf::Message* message) {
  const Descriptor& type = *message->GetDescriptor();
  UnknownFieldSet fields;
  if (!fields.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request could not be decoded: its ", bytes.size(),
                     " bytes are not a protobuf message (", type.full_name(), ")"));
  }
  if (std::optional<std::string> problem = FindUndecodable(type, fields, "", 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request could not be decoded: ", *problem));
  }
  if (!message->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    // Not expected after the checks above; still a client's fault.
    return absl::InvalidArgumentError(absl::StrCat(
        "the request could not be decoded as a ", type.full_name(), " message"));
  }
  return absl::OkStatus();
}

absl::Status DecodeMessage(grpc::ByteBuffer* buffer, google::protobuf::Message* message) {
  if (buffer == nullptr || !buffer->Valid()) {
    return absl::InvalidArgumentError("the call carried no request message");
  }
  grpc::Slice slice;
  grpc::Status dumped = buffer->DumpToSingleSlice(&slice);
  buffer->Clear();
  if (!dumped.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request could not be read: ", dumped.error_message()));
  }
  return DecodeMessage(
      absl::string_view(reinterpret_cast<const char*>(slice.begin()), slice.size()), message);
}

int MethodIndex(absl::string_view service, absl::string_view method) {
  const google::protobuf::ServiceDescriptor* s =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(std::string(service));
  const google::protobuf::MethodDescriptor* m =
      s == nullptr ? nullptr : s->FindMethodByName(std::string(method));
  if (m == nullptr) std::abort();
  return m->index();
}

}  // namespace minfer::daemon
