// minfer.v1.GenerationService over the SlotManager (gRPC callback API).
//
// The service only translates: it validates and tokenizes a request
// (errors name the proto field), submits a Sequence to the model's slot and
// streams what the slot's worker publishes. It never runs the model. A
// client that disconnects cancels its sequence (CANCELLED), one whose
// deadline passes stops it with DEADLINE_EXCEEDED; the worker stops it
// before its next step.
//
// Requests are decoded by the service (request_decoding.h): one that does
// not decode is answered INVALID_ARGUMENT saying why. Model names are
// checked at this boundary (client_input.h), so no error quotes more than a
// short prefix of one. Tokenize and Detokenize are held to the prompt
// limits, as Generate is, and with tenants to the tenant's models
// (PERMISSION_DENIED), as Generate is.
//
// Thread-safe (gRPC calls the handlers concurrently).
#ifndef MINFER_DAEMON_GRPC_GENERATION_SERVICE_H_
#define MINFER_DAEMON_GRPC_GENERATION_SERVICE_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "daemon/api/generate_request.h"
#include "daemon/grpc/pump_queue.h"
#include "daemon/serving/limits.h"
#include "daemon/serving/metrics.h"
#include "daemon/serving/sequence.h"
#include "daemon/serving/serving_state.h"
#include "daemon/serving/slot_manager.h"
#include "daemon/serving/tenants.h"
#include "engine/runtime/generation.h"
#include "engine/runtime/model.h"
#include "minfer/v1/generation.grpc.pb.h"

namespace minfer::daemon {

class GenerationServiceImpl final : public v1::GenerationService::CallbackService {
 public:
  // Pointers must outlive the service; `metrics` may be null.
  GenerationServiceImpl(SlotManager* slots, GenerationLimits limits, ServingState* state,
                        Metrics* metrics, Tenants* tenants = nullptr);

  // The methods, called with requests that decoded (the registered
  // handlers answer the others).
  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const v1::DetokenizeRequest* request,
                                       v1::DetokenizeResponse* response) override;

 private:
  // Registers `method` (a unary method of this class) with a handler that
  // decodes its request (request_decoding.h).
  template <typename Request, typename Response>
  void RegisterDecoded(const char* name,
                       grpc::ServerUnaryReactor* (GenerationServiceImpl::*method)(
                           grpc::CallbackServerContext*, const Request*, Response*));
  // Finishes a unary call, counting it in the metrics.
  grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context, const char* method,
                                 const std::string& model, const absl::Status& status);

  SlotManager* const slots_;
  const GenerationLimits limits_;
  ServingState* const state_;
  Metrics* const metrics_;
  Tenants* const tenants_;  // null: no tenants
  // The caller's tenant from its metadata (-1 without tenants).
  absl::StatusOr<int> Identify(grpc::CallbackServerContext* context) const;
  // PERMISSION_DENIED unless the caller's tenant may use `model` (as named)
  // resolved to `resolved`; OK without tenants.
  absl::Status CheckModelAllowed(grpc::CallbackServerContext* context, const std::string& model,
                                 const std::string& resolved) const;
  // Runs the streams' gRPC writes off the slots' decode loops.
  PumpQueue pumps_;
};

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_GRPC_GENERATION_SERVICE_H_
