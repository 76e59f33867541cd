// The one mapping from absl::Status to grpc::Status at the service boundary.
#ifndef MINFER_DAEMON_GRPC_STATUS_H_
#define MINFER_DAEMON_GRPC_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace minfer::daemon {

// Same code (absl's canonical codes are gRPC's, value for value), same
// message.
grpc::Status ToGrpcStatus(const absl::Status& status);

// "OK", "CANCELLED", "INVALID_ARGUMENT", ... (metrics labels, logs).
std::string GrpcCodeName(grpc::StatusCode code);

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_GRPC_STATUS_H_
