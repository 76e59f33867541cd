// Requests decoded by the daemon, not by gRPC's generated handlers.
//
// With the generated callback handlers, a request whose bytes do not parse
// (garbage, or invalid UTF-8 in a proto3 string field) never reaches the
// service: gRPC answers UNIMPLEMENTED with an empty message, and libprotobuf
// logs an error for each such request. The services instead register every
// method with a handler whose request type is Decoded<Request>: its
// SerializationTraits (below) always hand the call on, with the decoding's
// outcome, so the method can answer INVALID_ARGUMENT saying what could not
// be decoded.
//
// Thread-safe (no state).
#ifndef MINFER_DAEMON_GRPC_REQUEST_DECODING_H_
#define MINFER_DAEMON_GRPC_REQUEST_DECODING_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "grpcpp/impl/serialization_traits.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/status.h"

namespace minfer::daemon {

// A request message and how decoding it went. When `status` is not OK,
// `message` is empty or partly filled and must not be used.
template <typename Message>
struct Decoded {
  Message message;
  absl::Status status;
};

// Decodes `bytes` into `message` (which must be empty). INVALID_ARGUMENT
// when the bytes are not protobuf wire format, or when a string field is
// not valid UTF-8, naming the field by its path in the request
// ("chat.messages[1].content") and the offset of the first bad byte. Never
// logs: the wire format and UTF-8 are checked before the typed parse (which
// would log), so the typed parse only runs on bytes that pass.
absl::Status DecodeMessage(absl::string_view bytes, google::protobuf::Message* message);

// The same for a gRPC message. Consumes `buffer` (clears it), as gRPC's
// own deserializers do; null (no message) is INVALID_ARGUMENT.
absl::Status DecodeMessage(grpc::ByteBuffer* buffer, google::protobuf::Message* message);

// The index gRPC's generated service class gives method `method` of the
// service `service` ("minfer.v1.GenerationService"): its position in the
// .proto, which is the descriptor's index. Aborts when there is no such
// method (a programming error, caught by any test that starts a server).
int MethodIndex(absl::string_view service, absl::string_view method);

}  // namespace minfer::daemon

namespace grpc {

// Decoding never fails the call: the outcome goes to the method.
template <typename Message>
class SerializationTraits<minfer::daemon::Decoded<Message>, void> {
 public:
  static Status Deserialize(ByteBuffer* buffer, minfer::daemon::Decoded<Message>* out) {
    out->status = minfer::daemon::DecodeMessage(buffer, &out->message);
    return Status::OK;
  }
};

}  // namespace grpc

#endif  // MINFER_DAEMON_GRPC_REQUEST_DECODING_H_
