// MinferClient: a synchronous C++ client of minferd (minfer.v1 generation
// and admin services, grpc.health.v1), used by minferctl and the tests.
//
// Every method returns absl::Status / StatusOr with the server's gRPC code
// and message unchanged (FromGrpcStatus). Admin calls carry the bearer token
// when one is configured.
//
// Thread-safe: methods may be called concurrently (each call has its own
// gRPC context; the channel is shared).
#ifndef MINFER_CLIENT_MINFER_CLIENT_H_
#define MINFER_CLIENT_MINFER_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "minfer/v1/admin.grpc.pb.h"
#include "minfer/v1/generation.grpc.pb.h"

namespace minfer::client {

struct ClientOptions {
  std::string address = "127.0.0.1:50051";
  // Admin bearer token (sent as "authorization: Bearer <token>").
  std::string token;
  // A tenant's API key: the bearer of Generate, Tokenize and Detokenize
  // when set (else `token` is sent there too).
  std::string api_key;
  bool tls = false;
  std::string ca_cert_file;  // PEM roots to trust ("" = the system's)
  // Name to verify in the server's certificate instead of the address's
  // host (e.g. a self-signed certificate for "localhost").
  std::string tls_server_name;
  // Deadline for unary calls, in seconds (0 = none). Streams have none
  // unless the request passes one.
  double timeout_seconds = 0;
};

// Same code, same message.
absl::Status FromGrpcStatus(const grpc::Status& status);

// What a finished Generate stream delivered.
struct GenerateResult {
  std::vector<int32_t> token_ids;
  std::string text;
  v1::FinishReason finish_reason = v1::FINISH_REASON_UNSPECIFIED;
  v1::Usage usage;
  std::string model;
  int responses = 0;  // stream messages received
  // A chat request's reply as the server read it (GenerateResponse's typed
  // fields folded): the reasoning, the content, and each call whole (by
  // index: id and name from its first piece, the arguments' pieces joined).
  std::string reasoning;
  std::string content;
  std::vector<v1::ToolCall> tool_calls;
};

class MinferClient {
 public:
  static absl::StatusOr<std::unique_ptr<MinferClient>> Create(const ClientOptions& options);

  // Called with every streamed response; return false to cancel the stream
  // (Generate then returns CANCELLED).
  using ChunkFn = std::function<bool(const v1::GenerateResponse&)>;
  // Streams a generation to its end. `deadline_seconds` > 0 sets a call
  // deadline. On an error after some output (e.g. UNAVAILABLE when the
  // server drains), the output so far is in *partial when given.
  absl::StatusOr<GenerateResult> Generate(const v1::GenerateRequest& request,
                                          const ChunkFn& on_chunk = nullptr,
                                          double deadline_seconds = 0,
                                          GenerateResult* partial = nullptr);
  absl::StatusOr<v1::TokenizeResponse> Tokenize(const v1::TokenizeRequest& request);
  absl::StatusOr<std::string> Detokenize(const std::string& model, const std::vector<int32_t>& ids,
                                         bool skip_special = false);

  // Streams load progress to `on_progress`; returns the READY model's status.
  using ProgressFn = std::function<void(const v1::LoadModelResponse&)>;
  absl::StatusOr<v1::ModelStatus> LoadModel(const v1::LoadModelRequest& request,
                                            const ProgressFn& on_progress = nullptr);
  absl::StatusOr<v1::UnloadModelResponse> UnloadModel(const v1::UnloadModelRequest& request);
  // Sleep and wake (admin.proto): each answers once the model is asleep /
  // ready.
  absl::StatusOr<v1::SleepModelResponse> SleepModel(const v1::SleepModelRequest& request);
  absl::StatusOr<v1::WakeModelResponse> WakeModel(const v1::WakeModelRequest& request);
  absl::StatusOr<v1::ListModelsResponse> ListModels();
  absl::StatusOr<v1::ModelStatus> GetModelStatus(const std::string& name);
  absl::StatusOr<v1::ServerStatus> GetServerStatus();
  absl::StatusOr<v1::ListKnobsResponse> ListKnobs(const std::string& model = "");
  absl::StatusOr<v1::Knob> GetKnob(const std::string& name, const std::string& model = "");
  absl::StatusOr<v1::Knob> SetKnob(const v1::SetKnobRequest& request);
  absl::StatusOr<v1::SetAliasResponse> SetAlias(const std::string& alias, const std::string& model);
  absl::Status DeleteAlias(const std::string& alias);
  absl::StatusOr<v1::ListAliasesResponse> ListAliases();
  absl::StatusOr<v1::ListTenantsResponse> ListTenants();

  // grpc.health.v1 Check of `service` ("" = the server as a whole, or a
  // model/alias name).
  absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> Health(
      const std::string& service);

  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

 private:
  MinferClient(const ClientOptions& options, std::shared_ptr<grpc::Channel> channel);
  // Token metadata and the unary deadline.
  // `generation`: a GenerationService call (the API key's bearer).
  void Prepare(grpc::ClientContext* context, bool unary, bool generation = false) const;

  const ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::GenerationService::Stub> generation_;
  std::unique_ptr<v1::AdminService::Stub> admin_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
};

}  // namespace minfer::client

#endif  // MINFER_CLIENT_MINFER_CLIENT_H_
