// The one mapping from absl::Status to grpc::Status at the service boundary.
#ifndef MINFER_DAEMON_GRPC_GRPC_STATUS_H_
#define MINFER_DAEMON_GRPC_GRPC_STATUS_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace minfer::daemon {

// The most bytes of a status message a client is sent (and the services
// log). A status message travels in the call's trailing metadata; a client
// that receives more metadata than its limit (8 KiB by default, and the
// message is percent-encoded, so a non-ASCII byte costs three) fails the
// whole HTTP/2 connection, every other stream on it included.
inline constexpr size_t kMaxStatusMessageBytes = 1024;

// `text` cut to at most `max_bytes` bytes at a UTF-8 character boundary,
// with " [... N more bytes]" appended when anything was cut (the note may
// take the result up to 32 bytes past `max_bytes`).
std::string TruncateMessage(absl::string_view text, size_t max_bytes = kMaxStatusMessageBytes);

// Same code (absl's canonical codes are gRPC's, value for value), same
// message, cut to kMaxStatusMessageBytes (TruncateMessage).
grpc::Status ToGrpcStatus(const absl::Status& status);

// "OK", "CANCELLED", "INVALID_ARGUMENT", ... (metrics labels, logs).
std::string GrpcCodeName(grpc::StatusCode code);

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_GRPC_GRPC_STATUS_H_
