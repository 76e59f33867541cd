#include "daemon/grpc/unary.h"

#include "daemon/grpc/grpc_status.h"

namespace minfer::daemon {

grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context, Metrics* metrics,
                                      const char* method, const std::string& model,
                                      const absl::Status& status) {
  grpc::Status g = ToGrpcStatus(status);
  if (metrics != nullptr) metrics->RecordRequest(method, model, GrpcCodeName(g.error_code()));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(std::move(g));
  return reactor;
}

}  // namespace minfer::daemon
