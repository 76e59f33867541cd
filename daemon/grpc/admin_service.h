// minfer.v1.AdminService over the SlotManager and the knob registry (gRPC
// callback API). Translation only: requests become SlotManager / knob
// calls, their results and errors become responses and gRPC statuses.
// Nothing here blocks a gRPC thread: loads stream progress from the loading
// slot, unloads and per-model knob changes answer from the slot's side when
// they are done.
//
// When an admin token is configured, every method requires the metadata
// "authorization: Bearer <token>" (UNAUTHENTICATED otherwise).
//
// Requests are decoded by the service (request_decoding.h): one that does
// not decode is answered INVALID_ARGUMENT saying why (after the token
// check). Names and paths are checked at this boundary (client_input.h),
// so no error quotes more than a short prefix of one. A load the build
// cannot serve (backend cuda without the CUDA backend) and a load that
// fails are FAILED_PRECONDITION or INVALID_ARGUMENT, never UNAVAILABLE,
// which the API keeps for a draining server.
//
// Thread-safe.
#ifndef MINFER_DAEMON_GRPC_ADMIN_SERVICE_H_
#define MINFER_DAEMON_GRPC_ADMIN_SERVICE_H_

#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "daemon/serving/metrics.h"
#include "daemon/serving/serving_state.h"
#include "daemon/serving/slot_manager.h"
#include "daemon/serving/tenants.h"
#include "minfer/v1/admin.grpc.pb.h"

namespace minfer::daemon {

// Fills `out` from a slot's status and the aliases pointing at it.
void ModelStatusToProto(const SlotStatus& status, const std::vector<std::string>& aliases,
                        v1::ModelStatus* out);

class AdminServiceImpl final : public v1::AdminService::CallbackService {
 public:
  // Pointers must outlive the service; `metrics` may be null. An empty
  // `admin_token` leaves the admin API open.
  AdminServiceImpl(SlotManager* slots, ServingState* state, Metrics* metrics,
                   std::string admin_token, const Tenants* tenants = nullptr);

  grpc::ServerWriteReactor<v1::LoadModelResponse>* LoadModel(
      grpc::CallbackServerContext* context, const v1::LoadModelRequest* request) override;
  grpc::ServerUnaryReactor* UnloadModel(grpc::CallbackServerContext* context,
                                        const v1::UnloadModelRequest* request,
                                        v1::UnloadModelResponse* response) override;
  grpc::ServerUnaryReactor* SleepModel(grpc::CallbackServerContext* context,
                                       const v1::SleepModelRequest* request,
                                       v1::SleepModelResponse* response) override;
  grpc::ServerUnaryReactor* WakeModel(grpc::CallbackServerContext* context,
                                      const v1::WakeModelRequest* request,
                                      v1::WakeModelResponse* response) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const v1::ListModelsRequest* request,
                                       v1::ListModelsResponse* response) override;
  grpc::ServerUnaryReactor* GetModelStatus(grpc::CallbackServerContext* context,
                                           const v1::GetModelStatusRequest* request,
                                           v1::ModelStatus* response) override;
  grpc::ServerUnaryReactor* ListTenants(grpc::CallbackServerContext* context,
                                        const v1::ListTenantsRequest* request,
                                        v1::ListTenantsResponse* response) override;
  grpc::ServerUnaryReactor* GetServerStatus(grpc::CallbackServerContext* context,
                                            const v1::GetServerStatusRequest* request,
                                            v1::ServerStatus* response) override;
  grpc::ServerUnaryReactor* ListKnobs(grpc::CallbackServerContext* context,
                                      const v1::ListKnobsRequest* request,
                                      v1::ListKnobsResponse* response) override;
  grpc::ServerUnaryReactor* GetKnob(grpc::CallbackServerContext* context,
                                    const v1::GetKnobRequest* request,
                                    v1::Knob* response) override;
  grpc::ServerUnaryReactor* SetKnob(grpc::CallbackServerContext* context,
                                    const v1::SetKnobRequest* request,
                                    v1::Knob* response) override;
  grpc::ServerUnaryReactor* SetAlias(grpc::CallbackServerContext* context,
                                     const v1::SetAliasRequest* request,
                                     v1::SetAliasResponse* response) override;
  grpc::ServerUnaryReactor* DeleteAlias(grpc::CallbackServerContext* context,
                                        const v1::DeleteAliasRequest* request,
                                        v1::DeleteAliasResponse* response) override;
  grpc::ServerUnaryReactor* ListAliases(grpc::CallbackServerContext* context,
                                        const v1::ListAliasesRequest* request,
                                        v1::ListAliasesResponse* response) override;

 private:
  // Registers `method` (a unary method of this class) with a handler that
  // checks the token, then decodes its request (request_decoding.h).
  template <typename Request, typename Response>
  void RegisterDecoded(const char* name,
                       grpc::ServerUnaryReactor* (AdminServiceImpl::*method)(
                           grpc::CallbackServerContext*, const Request*, Response*));
  absl::Status CheckAuth(const grpc::CallbackServerContext* context) const;
  // Finishes a unary call, counting it in the metrics.
  grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context, const char* method,
                                 const std::string& model, const absl::Status& status);
  // Fills `out` for knob `name` as seen by `model` ("" = global).
  absl::Status DescribeKnob(const std::string& name, const std::string& model, v1::Knob* out);

  SlotManager* const slots_;
  ServingState* const state_;
  const Tenants* const tenants_;  // null: none configured
  Metrics* const metrics_;
  const std::string admin_token_;
  const std::chrono::steady_clock::time_point started_;
};

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_GRPC_ADMIN_SERVICE_H_
