// Finishing a unary callback RPC: map the status, count it, finish.
#ifndef MINFER_DAEMON_GRPC_UNARY_H_
#define MINFER_DAEMON_GRPC_UNARY_H_

#include <string>

#include "absl/status/status.h"
#include "daemon/serving/metrics.h"
#include "grpcpp/grpcpp.h"

namespace minfer::daemon {

// Finishes `context`'s default reactor with `status` (through the one
// absl -> gRPC mapping) and records the request in `metrics` (may be null).
grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context, Metrics* metrics,
                                      const char* method, const std::string& model,
                                      const absl::Status& status);

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_GRPC_UNARY_H_
