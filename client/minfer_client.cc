#include "client/minfer_client.h"

#include <chrono>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"

namespace minfer::client {
namespace {

template <typename Response, typename Call>
absl::StatusOr<Response> Unary(Call&& call) {
  Response response;
  grpc::Status s = call(&response);
  if (!s.ok()) return FromGrpcStatus(s);
  return response;
}

}  // namespace

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  // gRPC's codes are absl's canonical codes, value for value.
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

absl::StatusOr<std::unique_ptr<MinferClient>> MinferClient::Create(const ClientOptions& options) {
  if (options.address.empty()) return absl::InvalidArgumentError("no server address");
  std::shared_ptr<grpc::ChannelCredentials> creds;
  grpc::ChannelArguments args;
  if (options.tls) {
    grpc::SslCredentialsOptions ssl;
    if (!options.ca_cert_file.empty()) {
      std::ifstream in(options.ca_cert_file);
      if (!in) {
        return absl::NotFoundError(absl::StrCat("cannot read CA file '", options.ca_cert_file, "'"));
      }
      std::stringstream ss;
      ss << in.rdbuf();
      ssl.pem_root_certs = ss.str();
    }
    creds = grpc::SslCredentials(ssl);
    if (!options.tls_server_name.empty()) {
      args.SetSslTargetNameOverride(options.tls_server_name);
    }
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(options.address, creds, args);
  return std::unique_ptr<MinferClient>(new MinferClient(options, std::move(channel)));
}

MinferClient::MinferClient(const ClientOptions& options, std::shared_ptr<grpc::Channel> channel)
    : options_(options), channel_(std::move(channel)),
      generation_(v1::GenerationService::NewStub(channel_)),
      admin_(v1::AdminService::NewStub(channel_)),
      health_(grpc::health::v1::Health::NewStub(channel_)) {}

void MinferClient::Prepare(grpc::ClientContext* context, bool unary, bool generation) const {
  const std::string& bearer =
      generation && !options_.api_key.empty() ? options_.api_key : options_.token;
  if (!bearer.empty()) context->AddMetadata("authorization", "Bearer " + bearer);
  if (unary && options_.timeout_seconds > 0) {
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::duration_cast<std::chrono::system_clock::duration>(
                              std::chrono::duration<double>(options_.timeout_seconds)));
  }
}

absl::StatusOr<GenerateResult> MinferClient::Generate(const v1::GenerateRequest& request,
                                                      const ChunkFn& on_chunk,
                                                      double deadline_seconds,
                                                      GenerateResult* partial) {
  grpc::ClientContext context;
  Prepare(&context, /*unary=*/false, /*generation=*/true);
  if (deadline_seconds > 0) {
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::duration_cast<std::chrono::system_clock::duration>(
                             std::chrono::duration<double>(deadline_seconds)));
  }
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      generation_->Generate(&context, request);
  GenerateResult result;
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
    ++result.responses;
    result.token_ids.insert(result.token_ids.end(), response.token_ids().begin(),
                            response.token_ids().end());
    result.text += response.text();
    result.reasoning += response.reasoning_text();
    result.content += response.content_text();
    for (const v1::ToolCallDelta& d : response.tool_calls()) {
      if (d.index() < 0 || d.index() >= (1 << 16)) continue;  // a broken server
      const size_t i = static_cast<size_t>(d.index());
      if (i >= result.tool_calls.size()) result.tool_calls.resize(i + 1);
      v1::ToolCall& call = result.tool_calls[i];
      if (!d.id().empty()) call.set_id(d.id());
      if (!d.name().empty()) call.set_name(d.name());
      call.mutable_arguments()->append(d.arguments());
    }
    if (!response.model().empty()) result.model = response.model();
    if (response.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      result.finish_reason = response.finish_reason();
      result.usage = response.usage();
    }
    if (on_chunk && !on_chunk(response)) {
      context.TryCancel();
      break;
    }
  }
  grpc::Status status = reader->Finish();
  if (partial != nullptr) *partial = result;
  if (!status.ok()) return FromGrpcStatus(status);
  return result;
}

absl::StatusOr<v1::TokenizeResponse> MinferClient::Tokenize(const v1::TokenizeRequest& request) {
  return Unary<v1::TokenizeResponse>([&](v1::TokenizeResponse* r) {
    grpc::ClientContext c;
    Prepare(&c, true, /*generation=*/true);
    return generation_->Tokenize(&c, request, r);
  });
}

absl::StatusOr<std::string> MinferClient::Detokenize(const std::string& model,
                                                     const std::vector<int32_t>& ids,
                                                     bool skip_special) {
  v1::DetokenizeRequest request;
  request.set_model(model);
  request.mutable_ids()->Add(ids.begin(), ids.end());
  request.set_skip_special(skip_special);
  absl::StatusOr<v1::DetokenizeResponse> r =
      Unary<v1::DetokenizeResponse>([&](v1::DetokenizeResponse* out) {
        grpc::ClientContext c;
        Prepare(&c, true, /*generation=*/true);
        return generation_->Detokenize(&c, request, out);
      });
  if (!r.ok()) return r.status();
  return r->text();
}

absl::StatusOr<v1::ModelStatus> MinferClient::LoadModel(const v1::LoadModelRequest& request,
                                                        const ProgressFn& on_progress) {
  grpc::ClientContext context;
  Prepare(&context, /*unary=*/false);
  std::unique_ptr<grpc::ClientReader<v1::LoadModelResponse>> reader =
      admin_->LoadModel(&context, request);
  v1::LoadModelResponse response;
  v1::ModelStatus status;
  while (reader->Read(&response)) {
    if (on_progress) on_progress(response);
    if (response.has_status()) status = response.status();
  }
  grpc::Status s = reader->Finish();
  if (!s.ok()) return FromGrpcStatus(s);
  return status;
}

absl::StatusOr<v1::UnloadModelResponse> MinferClient::UnloadModel(
    const v1::UnloadModelRequest& request) {
  return Unary<v1::UnloadModelResponse>([&](v1::UnloadModelResponse* r) {
    grpc::ClientContext c;
    Prepare(&c, true);
    return admin_->UnloadModel(&c, request, r);
  });
}

absl::StatusOr<v1::SleepModelResponse> MinferClient::SleepModel(
    const v1::SleepModelRequest& request) {
  return Unary<v1::SleepModelResponse>([&](v1::SleepModelResponse* r) {
    grpc::ClientContext c;
    Prepare(&c, true);
    return admin_->SleepModel(&c, request, r);
  });
}

absl::StatusOr<v1::WakeModelResponse> MinferClient::WakeModel(const v1::WakeModelRequest& request) {
  return Unary<v1::WakeModelResponse>([&](v1::WakeModelResponse* r) {
    grpc::ClientContext c;
    Prepare(&c, true);
    return admin_->WakeModel(&c, request, r);
  });
}

absl::StatusOr<v1::ListModelsResponse> MinferClient::ListModels() {
  return Unary<v1::ListModelsResponse>([&](v1::ListModelsResponse* r) {
    grpc::ClientContext c;
    Prepare(&c, true);
    return admin_->ListModels(&c, v1::ListModelsRequest(), r);
  });
}

absl::StatusOr<v1::ModelStatus> MinferClient::GetModelStatus(const std::string& name) {
  v1::GetModelStatusRequest request;
  request.set_name(name);
  return Unary<v1::ModelStatus>([&](v1::ModelStatus* r) {
    grpc::ClientContext c;
    Prepare(&c, true);
    return admin_->GetModelStatus(&c, request, r);
  });
}

absl::StatusOr<v1::ListTenantsResponse> MinferClient::ListTenants() {
  return Unary<v1::ListTenantsResponse>([&](v1::ListTenantsResponse* r) {
    grpc::ClientContext c;
    Prepare(&c, true);
    return admin_->ListTenants(&c, v1::ListTenantsRequest(), r);
  });
}

absl::StatusOr<v1::ServerStatus> MinferClient::GetServerStatus() {
  return Unary<v1::ServerStatus>([&](v1::ServerStatus* r) {
    grpc::ClientContext c;
    Prepare(&c, true);
    return admin_->GetServerStatus(&c, v1::GetServerStatusRequest(), r);
  });
}

absl::StatusOr<v1::ListKnobsResponse> MinferClient::ListKnobs(const std::string& model) {
  v1::ListKnobsRequest request;
  request.set_model(model);
  return Unary<v1::ListKnobsResponse>([&](v1::ListKnobsResponse* r) {
    grpc::ClientContext c;
    Prepare(&c, true);
    return admin_->ListKnobs(&c, request, r);
  });
}

absl::StatusOr<v1::Knob> MinferClient::GetKnob(const std::string& name, const std::string& model) {
  v1::GetKnobRequest request;
  request.set_name(name);
  request.set_model(model);
  return Unary<v1::Knob>([&](v1::Knob* r) {
    grpc::ClientContext c;
    Prepare(&c, true);
    return admin_->GetKnob(&c, request, r);
  });
}

absl::StatusOr<v1::Knob> MinferClient::SetKnob(const v1::SetKnobRequest& request) {
  return Unary<v1::Knob>([&](v1::Knob* r) {
    grpc::ClientContext c;
    Prepare(&c, true);
    return admin_->SetKnob(&c, request, r);
  });
}

absl::StatusOr<v1::SetAliasResponse> MinferClient::SetAlias(const std::string& alias,
                                                            const std::string& model) {
  v1::SetAliasRequest request;
  request.set_alias(alias);
  request.set_model(model);
  return Unary<v1::SetAliasResponse>([&](v1::SetAliasResponse* r) {
    grpc::ClientContext c;
    Prepare(&c, true);
    return admin_->SetAlias(&c, request, r);
  });
}

absl::Status MinferClient::DeleteAlias(const std::string& alias) {
  v1::DeleteAliasRequest request;
  request.set_alias(alias);
  return Unary<v1::DeleteAliasResponse>([&](v1::DeleteAliasResponse* r) {
           grpc::ClientContext c;
           Prepare(&c, true);
           return admin_->DeleteAlias(&c, request, r);
         })
      .status();
}

absl::StatusOr<v1::ListAliasesResponse> MinferClient::ListAliases() {
  return Unary<v1::ListAliasesResponse>([&](v1::ListAliasesResponse* r) {
    grpc::ClientContext c;
    Prepare(&c, true);
    return admin_->ListAliases(&c, v1::ListAliasesRequest(), r);
  });
}

absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> MinferClient::Health(
    const std::string& service) {
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  absl::StatusOr<grpc::health::v1::HealthCheckResponse> r =
      Unary<grpc::health::v1::HealthCheckResponse>(
          [&](grpc::health::v1::HealthCheckResponse* out) {
            grpc::ClientContext c;
            Prepare(&c, true);
            return health_->Check(&c, request, out);
          });
  if (!r.ok()) return r.status();
  return r->status();
}

}  // namespace minfer::client
