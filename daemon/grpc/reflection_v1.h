// grpc.reflection.v1.ServerReflection over protobuf's generated descriptor
// pool: what libgrpc++_reflection's v1alpha service answers, under the
// package current clients ask for first (grpcurl falls back to v1alpha only
// after v1 fails, and some clients never do). Debian's gRPC (1.51) has no
// v1 implementation, so minferd serves this one beside it.
//
// Every linked .proto (the API, grpc.health.v1, both reflection versions)
// is described; the service list is what the daemon registered.
//
// Thread-safe (each stream is answered on its own thread; the descriptor
// pool is immutable).
#ifndef MINFER_DAEMON_GRPC_REFLECTION_V1_H_
#define MINFER_DAEMON_GRPC_REFLECTION_V1_H_

#include <string>
#include <vector>

#include "grpc/reflection/v1/reflection.grpc.pb.h"

namespace minfer::daemon {

class ReflectionV1Service final : public grpc::reflection::v1::ServerReflection::Service {
 public:
  // `services`: the full names list_services reports.
  explicit ReflectionV1Service(std::vector<std::string> services);

  grpc::Status ServerReflectionInfo(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<grpc::reflection::v1::ServerReflectionResponse,
                               grpc::reflection::v1::ServerReflectionRequest>* stream) override;

  // The answer to one request. A file answer holds the file and every file
  // it imports, transitively, each once (as gRPC's v1alpha service does:
  // a client need not have kept what earlier answers sent).
  grpc::reflection::v1::ServerReflectionResponse Answer(
      const grpc::reflection::v1::ServerReflectionRequest& request) const;

 private:
  const std::vector<std::string> services_;
};

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_GRPC_REFLECTION_V1_H_
