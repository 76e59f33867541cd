#include "daemon/grpc/admin_service.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "daemon/grpc/grpc_status.h"
#include "daemon/grpc/request_decoding.h"
#include "daemon/grpc/stream_reactor.h"
#include "daemon/grpc/unary.h"
#include "daemon/serving/client_input.h"
#include "daemon/serving/memory.h"
#include "daemon/version.h"
#include "engine/base/knobs.h"
#include "engine/base/logging.h"
#include "engine/base/status.h"
#include "engine/runtime/device_backend.h"

namespace minfer::daemon {
namespace {

v1::ModelState StateToProto(SlotState s) {
  switch (s) {
    case SlotState::kLoading:
      return v1::MODEL_STATE_LOADING;
    case SlotState::kReady:
      return v1::MODEL_STATE_READY;
    case SlotState::kSleeping:
      return v1::MODEL_STATE_SLEEPING;
    case SlotState::kWaking:
      return v1::MODEL_STATE_WAKING;
    case SlotState::kDraining:
      return v1::MODEL_STATE_DRAINING;
    case SlotState::kUnloading:
    case SlotState::kStopped:
      return v1::MODEL_STATE_UNLOADING;
    case SlotState::kFailed:
      return v1::MODEL_STATE_FAILED;
  }
  return v1::MODEL_STATE_UNSPECIFIED;
}

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "model name")) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) {
        return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
      }
    }
  }
  return "cpu";
}

// Streams a load's progress until the slot is READY or FAILED.
class LoadReactor final : public PullStreamReactor<v1::LoadModelResponse> {
 public:
  LoadReactor(ServingState* state, SlotManager* slots, Metrics* metrics, std::string name)
      : guard_(state), slots_(slots), metrics_(metrics), name_(std::move(name)) {}

  void Attach(std::shared_ptr<Slot> slot) {
    slot_ = std::move(slot);
    sub_ = slot_->state_notifier().Subscribe([this] { Pump(); });
    Pump();
  }

 private:
  bool Next(v1::LoadModelResponse* msg, std::optional<grpc::Status>* final) override {
    if (slot_ == nullptr) return false;
    const SlotStatus st = slot_->Status();
    switch (st.state) {
      case SlotState::kLoading:
        if (sent_any_ && st.load_bytes_done == last_done_) return false;
        sent_any_ = true;
        last_done_ = st.load_bytes_done;
        msg->set_state(v1::MODEL_STATE_LOADING);
        msg->set_bytes_done(st.load_bytes_done);
        msg->set_bytes_total(st.load_bytes_total);
        return true;
      case SlotState::kReady:
        msg->set_state(v1::MODEL_STATE_READY);
        msg->set_bytes_done(st.load_bytes_total);
        msg->set_bytes_total(st.load_bytes_total);
        ModelStatusToProto(st, slots_->AliasesOf(st.config.name), msg->mutable_status());
        *final = grpc::Status::OK;
        return true;
      case SlotState::kFailed:
        // UNAVAILABLE is the API's word for "draining, retry elsewhere";
        // a load that failed (e.g. a device backend that cannot take the
        // model) fails the same way when retried.
        *final = ToGrpcStatus(absl::IsUnavailable(st.error)
                                  ? absl::FailedPreconditionError(st.error.message())
                                  : st.error);
        return false;
      case SlotState::kSleeping:
      case SlotState::kWaking:
        // Ready, then asleep before this stream caught up (a short
        // sleep_after_seconds): the load itself succeeded.
        msg->set_state(StateToProto(st.state));
        msg->set_bytes_done(st.load_bytes_total);
        msg->set_bytes_total(st.load_bytes_total);
        ModelStatusToProto(st, slots_->AliasesOf(st.config.name), msg->mutable_status());
        *final = grpc::Status::OK;
        return true;
      case SlotState::kDraining:
      case SlotState::kUnloading:
      case SlotState::kStopped:
        *final = grpc::Status(grpc::StatusCode::ABORTED,
                              absl::StrCat("model '", name_, "' was unloaded while loading"));
        return false;
    }
    return false;
  }

  void Cleanup(const grpc::Status& final) override {
    if (slot_ != nullptr) slot_->state_notifier().Unsubscribe(sub_);
    if (metrics_ != nullptr) {
      metrics_->RecordRequest("LoadModel", name_, GrpcCodeName(final.error_code()));
    }
  }

  ServingState::Guard guard_;  // first: released after every other member
  SlotManager* const slots_;
  Metrics* const metrics_;
  const std::string name_;
  std::shared_ptr<Slot> slot_;
  Notifier::Id sub_ = 0;
  bool sent_any_ = false;
  uint64_t last_done_ = 0;
};

absl::Status CheckKnobRequest(const std::string& name, const std::string& model) {
  RETURN_IF_ERROR(CheckName(name, "name"));
  return CheckName(model, "model");
}

}  // namespace

void ModelStatusToProto(const SlotStatus& st, const std::vector<std::string>& aliases,
                        v1::ModelStatus* out) {
  out->set_name(st.config.name);
  out->set_path(st.config.path);
  out->set_state(StateToProto(st.state));
  if (!st.error.ok()) out->set_reason(st.error.ToString());
  out->set_backend(st.backend.empty() ? st.config.backend : st.backend);
  out->set_device(st.placement.device);
  out->set_device_label(st.placement.label);
  out->set_tensor_parallel(std::max(1, st.config.tensor_parallel));
  for (int32_t d : st.placement.devices) out->add_devices(d);
  const runtime::EngineSnapshot& e = st.engine;
  out->set_n_ctx(e.n_ctx > 0 ? e.n_ctx : st.config.n_ctx);
  out->set_parallel(st.config.parallel);
  out->set_kv_type(e.kv_block > 0 ? graph::DTypeName(e.kv_type) : st.config.kv_type);
  out->set_tool_parser(st.config.tool_parser);
  out->set_reasoning_parser(st.config.reasoning_parser);
  out->set_spec(st.config.spec);
  out->set_spec_k(st.spec_k);
  out->set_draft(st.config.draft);
  out->set_spec_drafted_tokens(static_cast<uint64_t>(e.spec_drafted));
  out->set_spec_accepted_tokens(static_cast<uint64_t>(e.spec_accepted));
  out->set_spec_gate_held_steps(static_cast<uint64_t>(std::max<int64_t>(e.spec_gate_held, 0)));
  if (e.spec_drafted > 0) {
    out->set_spec_acceptance_rate(static_cast<double>(e.spec_accepted) /
                                  static_cast<double>(e.spec_drafted));
  }
  out->set_kv_events(st.config.kv_events == "on");
  for (const auto& [k, v] : st.knobs) (*out->mutable_knobs())[k] = v;
  v1::MemoryUsage* mem = out->mutable_memory();
  const uint64_t kv = static_cast<uint64_t>(std::max<int64_t>(e.kv_bytes, 0));
  const uint64_t scratch = static_cast<uint64_t>(std::max<int64_t>(e.activation_bytes, 0));
  mem->set_weights_bytes(st.memory.weights);
  mem->set_kv_bytes(kv);
  mem->set_scratch_bytes(scratch);
  mem->set_draft_bytes(st.memory.draft);
  mem->set_host_bytes(st.memory.host_weights);
  mem->set_total_bytes(st.memory.weights + kv + scratch + st.memory.draft);
  mem->set_reserved_bytes(st.memory.reserved);
  mem->set_backend_bytes(st.backend_bytes);
  out->set_active_sequences(static_cast<int32_t>(e.running));
  out->set_queued_sequences(st.queued);
  out->set_queue_size(st.config.queue_size);
  v1::SleepStatus* sl = out->mutable_sleep();
  sl->set_level(st.memory.sleep_level);
  sl->set_sleeps(st.sleeps);
  sl->set_wakes(st.wakes);
  if (st.last_wake.has_value()) {
    sl->set_last_wake_unix_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                                  st.last_wake->time_since_epoch())
                                  .count());
  }
  sl->set_last_wake_seconds(st.last_wake_seconds);
  if (st.asleep_since.has_value()) {
    sl->set_asleep_seconds(std::chrono::duration<double>(std::chrono::system_clock::now() -
                                                         *st.asleep_since)
                               .count());
  }
  sl->set_sleep_after_seconds(st.config.sleep_after_seconds);
  if (e.kv_block > 0) {
    v1::KvPoolStatus* kvp = out->mutable_kv_pool();
    kvp->set_block_tokens(e.kv_block);
    kvp->set_blocks_total(e.kv_blocks_total);
    kvp->set_blocks_used(e.kv_blocks_used);
    kvp->set_block_bytes(static_cast<uint64_t>(e.kv_block_bytes));
    for (int64_t b : e.sequence_blocks) kvp->add_sequence_blocks(b);
    kvp->set_preemptions(static_cast<uint64_t>(e.preemptions));
    kvp->set_token_budget(e.token_budget);
    kvp->set_steps(static_cast<uint64_t>(e.steps));
    kvp->set_blocks_cached(e.kv_blocks_cached);
    kvp->set_prefix_cache(e.prefix_cache);
    kvp->set_prefix_hit_tokens(static_cast<uint64_t>(e.prefix_hit_tokens));
    kvp->set_prefix_evictions(static_cast<uint64_t>(e.prefix_evictions));
    v1::StructuredOutputStatus* so = out->mutable_structured_output();
    so->set_constrained_sequences(static_cast<int32_t>(st.grammar.constrained_running));
    so->set_constrained_requests(st.grammar.constrained_requests);
    so->set_grammar_compiles(st.grammar.compiles);
    so->set_grammar_cache_hits(st.grammar.cache_hits);
    so->set_grammar_refused(st.grammar.refused);
    so->set_grammar_masks(st.grammar.masks);
    so->set_grammar_mask_seconds(st.grammar.mask_seconds);
  }
  v1::ModelCounters* c = out->mutable_counters();
  c->set_requests(st.counters.requests);
  c->set_completed(st.counters.completed);
  c->set_cancelled(st.counters.cancelled);
  c->set_failed(st.counters.failed);
  c->set_rejected_queue_full(st.counters.rejected_queue_full);
  c->set_prompt_tokens(st.counters.prompt_tokens);
  c->set_completion_tokens(st.counters.completion_tokens);
  out->set_load_bytes_done(st.load_bytes_done);
  out->set_load_bytes_total(st.load_bytes_total);
  out->set_load_seconds(st.load_seconds);
  out->set_summary(st.summary);
  for (const auto& a : aliases) out->add_aliases(a);
}

AdminServiceImpl::AdminServiceImpl(SlotManager* slots, ServingState* state, Metrics* metrics,
                                   std::string admin_token, const Tenants* tenants)
    : slots_(slots), state_(state), tenants_(tenants), metrics_(metrics),
      admin_token_(std::move(admin_token)),
      started_(std::chrono::steady_clock::now()) {
  // Replaces the generated handlers (which answer a request that does not
  // parse with UNIMPLEMENTED and no message) with decoding ones.
  MarkMethodCallback(
      MethodIndex(v1::AdminService::service_full_name(), "LoadModel"),
      new grpc::internal::CallbackServerStreamingHandler<Decoded<v1::LoadModelRequest>,
                                                         v1::LoadModelResponse>(
          [this](grpc::CallbackServerContext* context,
                 const Decoded<v1::LoadModelRequest>* request)
              -> grpc::ServerWriteReactor<v1::LoadModelResponse>* {
            if (request->status.ok()) return LoadModel(context, &request->message);
            auto* reactor = new LoadReactor(state_, slots_, metrics_, "");
            const absl::Status auth = CheckAuth(context);
            reactor->FinishWith(ToGrpcStatus(auth.ok() ? request->status : auth));
            return reactor;
          }));
  RegisterDecoded("UnloadModel", &AdminServiceImpl::UnloadModel);
  RegisterDecoded("ListModels", &AdminServiceImpl::ListModels);
  RegisterDecoded("GetModelStatus", &AdminServiceImpl::GetModelStatus);
  RegisterDecoded("GetServerStatus", &AdminServiceImpl::GetServerStatus);
  RegisterDecoded("SleepModel", &AdminServiceImpl::SleepModel);
  RegisterDecoded("WakeModel", &AdminServiceImpl::WakeModel);
  RegisterDecoded("ListTenants", &AdminServiceImpl::ListTenants);
  RegisterDecoded("ListKnobs", &AdminServiceImpl::ListKnobs);
  RegisterDecoded("GetKnob", &AdminServiceImpl::GetKnob);
  RegisterDecoded("SetKnob", &AdminServiceImpl::SetKnob);
  RegisterDecoded("SetAlias", &AdminServiceImpl::SetAlias);
  RegisterDecoded("DeleteAlias", &AdminServiceImpl::DeleteAlias);
  RegisterDecoded("ListAliases", &AdminServiceImpl::ListAliases);
}

template <typename Request, typename Response>
void AdminServiceImpl::RegisterDecoded(
    const char* name, grpc::ServerUnaryReactor* (AdminServiceImpl::*method)(
                          grpc::CallbackServerContext*, const Request*, Response*)) {
  MarkMethodCallback(
      MethodIndex(v1::AdminService::service_full_name(), name),
      new grpc::internal::CallbackUnaryHandler<Decoded<Request>, Response>(
          [this, name, method](grpc::CallbackServerContext* context,
                               const Decoded<Request>* request, Response* response) {
            // Authentication first: an anonymous caller learns nothing,
            // not even whether its bytes decoded.
            if (absl::Status auth = CheckAuth(context); !auth.ok()) {
              return Done(context, name, "", auth);
            }
            if (!request->status.ok()) return Done(context, name, "", request->status);
            return (this->*method)(context, &request->message, response);
          }));
}

absl::Status AdminServiceImpl::CheckAuth(const grpc::CallbackServerContext* context) const {
  if (admin_token_.empty()) return absl::OkStatus();
  const auto& md = context->client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) {
    return absl::UnauthenticatedError(
        "admin methods need the metadata 'authorization: Bearer <token>' (minferctl --token)");
  }
  absl::string_view value(it->second.data(), it->second.size());
  if (!absl::ConsumePrefix(&value, "Bearer ") || !ConstantTimeEquals(value, admin_token_)) {
    return absl::UnauthenticatedError("the admin bearer token is not valid");
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* AdminServiceImpl::Done(grpc::CallbackServerContext* context,
                                                 const char* method, const std::string& model,
                                                 const absl::Status& status) {
  return FinishUnary(context, metrics_, method, model, status);
}

grpc::ServerWriteReactor<v1::LoadModelResponse>* AdminServiceImpl::LoadModel(
    grpc::CallbackServerContext* context, const v1::LoadModelRequest* request) {
  const absl::Status name = CheckName(request->name(), "name");
  // The name labels the call's metrics only once it is known to be sane.
  auto* reactor = new LoadReactor(state_, slots_, metrics_, name.ok() ? request->name() : "");
  if (absl::Status auth = CheckAuth(context); !auth.ok()) {
    reactor->FinishWith(ToGrpcStatus(auth));
    return reactor;
  }
  if (state_->draining()) {
    reactor->FinishWith(ToGrpcStatus(absl::UnavailableError("the server is draining")));
    return reactor;
  }
  absl::Status valid = name;
  if (valid.ok()) valid = CheckPath(request->path(), "path");
  if (valid.ok() && !request->draft().empty()) valid = CheckPath(request->draft(), "draft");
  if (valid.ok() && request->has_device() && request->device() < 0) {
    valid = absl::InvalidArgumentError(
        absl::StrCat("device must be a GPU index (>= 0), got ", request->device()));
  }
  if (valid.ok() && (request->tensor_parallel() < 0 || request->tensor_parallel() > 64)) {
    valid = absl::InvalidArgumentError(absl::StrCat(
        "tensor_parallel must be between 1 and 64 GPUs (0: 1), got ", request->tensor_parallel()));
  }
  const int32_t tp = std::max(1, request->tensor_parallel());
  if (valid.ok() && request->devices_size() > 0) {
    if (request->has_device()) {
      valid = absl::InvalidArgumentError("name the GPUs with either device or devices, not both");
    } else if (request->devices_size() != tp) {
      valid = absl::InvalidArgumentError(absl::StrCat(
          "devices names ", request->devices_size(), " GPUs for tensor_parallel ", tp));
    } else {
      std::vector<int32_t> seen(request->devices().begin(), request->devices().end());
      std::sort(seen.begin(), seen.end());
      if (seen.front() < 0 || std::adjacent_find(seen.begin(), seen.end()) != seen.end()) {
        valid = absl::InvalidArgumentError("devices must be distinct GPU indices (>= 0)");
      }
    }
  }
  if (valid.ok() && tp > 1 && request->has_device()) {
    valid = absl::InvalidArgumentError(
        "a split (tensor_parallel > 1) names its GPUs with devices, not device");
  }
  if (valid.ok() && tp > 1 && !request->draft().empty()) {
    valid = absl::InvalidArgumentError(
        "a draft model with tensor parallelism is not supported; use spec ngram or none");
  }
  if (valid.ok() && tp > 1 && request->backend() == "cpu" && request->devices_size() > 0) {
    valid = absl::InvalidArgumentError("devices were named with backend 'cpu'");
  }
  if (valid.ok() && request->backend() == "cuda") {
    bool linked = false;
    for (const runtime::DeviceBackendProvider& p : runtime::DeviceBackendProviders()) {
      linked = linked || p.name == "cuda";
    }
    if (!linked) {
      valid = absl::FailedPreconditionError(
          "backend: this minferd was built without the CUDA backend (bazel build "
          "--config=cuda); use backend cpu or auto");
    }
  }
  if (!valid.ok()) {
    reactor->FinishWith(ToGrpcStatus(valid));
    return reactor;
  }
  SlotConfig config;
  config.name = request->name();
  config.path = request->path();
  config.backend = request->backend();
  config.device = request->has_device() ? request->device() : -1;
  config.tensor_parallel = tp;
  config.devices.assign(request->devices().begin(), request->devices().end());
  config.n_ctx = request->n_ctx();
  config.parallel = request->parallel();
  config.kv_type = request->kv_type();
  config.knobs = KnobOverrides(request->knobs().begin(), request->knobs().end());
  config.queue_size = request->queue_size();
  config.kv_tokens = request->kv_tokens();
  config.tool_parser = request->tool_parser();
  config.reasoning_parser = request->reasoning_parser();
  config.spec = request->spec();
  config.draft = request->draft();
  config.spec_k = request->spec_k();
  config.kv_events = request->kv_events();
  config.sleep_after_seconds = request->sleep_after_seconds();
  config.sleep_level = request->sleep_level();
  absl::StatusOr<std::shared_ptr<Slot>> slot = slots_->Load(std::move(config));
  if (!slot.ok()) {
    reactor->FinishWith(ToGrpcStatus(slot.status()));
    return reactor;
  }
  reactor->Attach(*std::move(slot));
  return reactor;
}

grpc::ServerUnaryReactor* AdminServiceImpl::UnloadModel(grpc::CallbackServerContext* context,
                                                        const v1::UnloadModelRequest* request,
                                                        v1::UnloadModelResponse* response) {
  const std::string& name = request->name();
  if (absl::Status auth = CheckAuth(context); !auth.ok()) {
    return Done(context, "UnloadModel", "", auth);
  }
  if (absl::Status valid = CheckName(name, "name"); !valid.ok()) {
    return Done(context, "UnloadModel", "", valid);
  }
  std::optional<std::chrono::duration<double>> timeout;
  if (request->has_drain_timeout_seconds()) {
    const double t = request->drain_timeout_seconds();
    if (!(t >= 0 && std::isfinite(t))) {
      return Done(context, "UnloadModel", "",
                  absl::InvalidArgumentError(absl::StrCat(
                      "drain_timeout_seconds must be finite and >= 0, got ", t)));
    }
    timeout = std::chrono::duration<double>(t);
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status s = slots_->Unload(
      name, timeout, request->cancel(),
      [this, reactor, response, name](const UnloadResult& r) {
        response->set_completed_sequences(r.completed);
        response->set_cancelled_sequences(r.cancelled);
        response->set_seconds(r.seconds);
        if (metrics_ != nullptr) metrics_->RecordRequest("UnloadModel", name, "OK");
        reactor->Finish(grpc::Status::OK);
      });
  if (!s.ok()) {
    grpc::Status g = ToGrpcStatus(s);
    if (metrics_ != nullptr) metrics_->RecordRequest("UnloadModel", "", GrpcCodeName(g.error_code()));
    reactor->Finish(std::move(g));
  }
  return reactor;
}

grpc::ServerUnaryReactor* AdminServiceImpl::SleepModel(grpc::CallbackServerContext* context,
                                                       const v1::SleepModelRequest* request,
                                                       v1::SleepModelResponse* response) {
  if (absl::Status auth = CheckAuth(context); !auth.ok()) {
    return Done(context, "SleepModel", "", auth);
  }
  if (absl::Status valid = CheckName(request->name(), "name"); !valid.ok()) {
    return Done(context, "SleepModel", "", valid);
  }
  std::string model;
  absl::StatusOr<std::shared_ptr<Slot>> slot = slots_->Find(request->name(), &model);
  if (!slot.ok()) return Done(context, "SleepModel", "", slot.status());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  std::shared_ptr<Slot> held = *slot;
  absl::Status s = held->Sleep(
      request->level() == 0 ? 1 : request->level(),
      [this, reactor, response, held, model](absl::Status done) {
        if (done.ok()) {
          ModelStatusToProto(held->Status(), slots_->AliasesOf(model), response->mutable_status());
        }
        grpc::Status g = ToGrpcStatus(done);
        if (metrics_ != nullptr) {
          metrics_->RecordRequest("SleepModel", model, GrpcCodeName(g.error_code()));
        }
        reactor->Finish(std::move(g));
      });
  if (!s.ok()) {
    grpc::Status g = ToGrpcStatus(s);
    if (metrics_ != nullptr) metrics_->RecordRequest("SleepModel", model, GrpcCodeName(g.error_code()));
    reactor->Finish(std::move(g));
  }
  return reactor;
}

grpc::ServerUnaryReactor* AdminServiceImpl::WakeModel(grpc::CallbackServerContext* context,
                                                      const v1::WakeModelRequest* request,
                                                      v1::WakeModelResponse* response) {
  if (absl::Status auth = CheckAuth(context); !auth.ok()) {
    return Done(context, "WakeModel", "", auth);
  }
  if (absl::Status valid = CheckName(request->name(), "name"); !valid.ok()) {
    return Done(context, "WakeModel", "", valid);
  }
  std::string model;
  absl::StatusOr<std::shared_ptr<Slot>> slot = slots_->Find(request->name(), &model);
  if (!slot.ok()) return Done(context, "WakeModel", "", slot.status());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  std::shared_ptr<Slot> held = *slot;
  const uint64_t wakes_before = held->Status().wakes;
  absl::Status s = held->Wake([this, reactor, response, held, model, wakes_before](absl::Status done) {
    if (done.ok()) {
      const SlotStatus st = held->Status();
      ModelStatusToProto(st, slots_->AliasesOf(model), response->mutable_status());
      if (st.wakes > wakes_before) response->set_seconds(st.last_wake_seconds);
    }
    grpc::Status g = ToGrpcStatus(done);
    if (metrics_ != nullptr) metrics_->RecordRequest("WakeModel", model, GrpcCodeName(g.error_code()));
    reactor->Finish(std::move(g));
  });
  if (!s.ok()) {
    grpc::Status g = ToGrpcStatus(s);
    if (metrics_ != nullptr) metrics_->RecordRequest("WakeModel", model, GrpcCodeName(g.error_code()));
    reactor->Finish(std::move(g));
  }
  return reactor;
}

grpc::ServerUnaryReactor* AdminServiceImpl::ListModels(grpc::CallbackServerContext* context,
                                                       const v1::ListModelsRequest*,
                                                       v1::ListModelsResponse* response) {
  if (absl::Status auth = CheckAuth(context); !auth.ok()) {
    return Done(context, "ListModels", "", auth);
  }
  for (const auto& slot : slots_->List()) {
    ModelStatusToProto(slot->Status(), slots_->AliasesOf(slot->name()), response->add_models());
  }
  return Done(context, "ListModels", "", absl::OkStatus());
}

grpc::ServerUnaryReactor* AdminServiceImpl::GetModelStatus(grpc::CallbackServerContext* context,
                                                           const v1::GetModelStatusRequest* request,
                                                           v1::ModelStatus* response) {
  if (absl::Status auth = CheckAuth(context); !auth.ok()) {
    return Done(context, "GetModelStatus", "", auth);
  }
  if (absl::Status valid = CheckName(request->name(), "name"); !valid.ok()) {
    return Done(context, "GetModelStatus", "", valid);
  }
  std::string model;
  absl::StatusOr<std::shared_ptr<Slot>> slot = slots_->Find(request->name(), &model);
  if (!slot.ok()) return Done(context, "GetModelStatus", "", slot.status());
  ModelStatusToProto((*slot)->Status(), slots_->AliasesOf(model), response);
  return Done(context, "GetModelStatus", model, absl::OkStatus());
}

grpc::ServerUnaryReactor* AdminServiceImpl::GetServerStatus(grpc::CallbackServerContext* context,
                                                            const v1::GetServerStatusRequest*,
                                                            v1::ServerStatus* response) {
  if (absl::Status auth = CheckAuth(context); !auth.ok()) {
    return Done(context, "GetServerStatus", "", auth);
  }
  response->set_version(kMinferVersion);
  v1::Device* cpu = response->add_devices();
  cpu->set_kind("cpu");
  cpu->set_healthy(true);
  cpu->set_name(CpuModelName());
  cpu->set_cores(static_cast<int32_t>(std::thread::hardware_concurrency()));
  if (absl::StatusOr<HostMemory> host = ReadHostMemory(); host.ok()) {
    cpu->set_memory_total_bytes(host->total);
    cpu->set_memory_free_bytes(host->available);
  }
  // Devices of the linked device backends; asking may initialize the
  // device (it would be on the first load anyway).
  for (const SlotManager::DeviceStatus& d : slots_->Devices()) {
    v1::Device* dev = response->add_devices();
    dev->set_kind(d.provider);
    dev->set_name(d.info.name);
    dev->set_index(d.info.index);
    dev->set_cores(d.info.multiprocessors);
    dev->set_memory_total_bytes(d.info.total_bytes);
    dev->set_memory_free_bytes(d.info.free_bytes);
    dev->set_memory_pending_bytes(d.pending_bytes);
    for (const std::string& n : d.models) dev->add_models(n);
    dev->set_healthy(d.info.fault.empty());
    dev->set_fault(d.info.fault);
  }
  response->set_uptime_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
  response->set_draining(state_->draining());
  response->set_memory_limit_bytes(slots_->budget().limit());
  response->set_memory_reserved_bytes(slots_->budget().reserved());
  int32_t active = 0, queued = 0, models = 0;
  for (const auto& slot : slots_->List()) {
    SlotStatus st = slot->Status();
    active += static_cast<int32_t>(st.engine.running);
    queued += st.queued;
    ++models;
  }
  response->set_models(models);
  response->set_active_sequences(active);
  response->set_queued_sequences(queued);
  return Done(context, "GetServerStatus", "", absl::OkStatus());
}

absl::Status AdminServiceImpl::DescribeKnob(const std::string& name, const std::string& model,
                                            v1::Knob* out) {
  ASSIGN_OR_RETURN(KnobInfo info, KnobRegistry::Global().Get(name));
  out->set_name(info.spec.name);
  out->set_type(std::string(KnobTypeName(info.spec.type)));
  out->set_default_value(info.spec.default_value);
  out->set_value(info.value);
  out->set_scope(std::string(KnobScopeName(info.spec.scope)));
  out->set_effect(std::string(KnobEffectName(info.spec.effect)));
  out->set_help(info.spec.help);
  for (const auto& a : info.spec.allowed) out->add_allowed(a);
  out->set_from_environment(info.from_environment);
  if (!model.empty()) {
    std::string resolved;
    ASSIGN_OR_RETURN(std::shared_ptr<Slot> slot, slots_->Find(model, &resolved));
    out->set_model(resolved);
    const KnobOverrides knobs = slot->Status().knobs;
    if (auto it = knobs.find(name); it != knobs.end()) {
      out->set_value(it->second);
      out->set_overridden(true);
    }
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* AdminServiceImpl::ListKnobs(grpc::CallbackServerContext* context,
                                                      const v1::ListKnobsRequest* request,
                                                      v1::ListKnobsResponse* response) {
  if (absl::Status auth = CheckAuth(context); !auth.ok()) return Done(context, "ListKnobs", "", auth);
  if (absl::Status valid = CheckName(request->model(), "model"); !valid.ok()) {
    return Done(context, "ListKnobs", "", valid);
  }
  for (const KnobInfo& info : KnobRegistry::Global().List()) {
    absl::Status s = DescribeKnob(info.spec.name, request->model(), response->add_knobs());
    if (!s.ok()) return Done(context, "ListKnobs", "", s);
  }
  return Done(context, "ListKnobs", "", absl::OkStatus());
}

grpc::ServerUnaryReactor* AdminServiceImpl::GetKnob(grpc::CallbackServerContext* context,
                                                    const v1::GetKnobRequest* request,
                                                    v1::Knob* response) {
  if (absl::Status auth = CheckAuth(context); !auth.ok()) return Done(context, "GetKnob", "", auth);
  if (absl::Status valid = CheckKnobRequest(request->name(), request->model()); !valid.ok()) {
    return Done(context, "GetKnob", "", valid);
  }
  return Done(context, "GetKnob", "", DescribeKnob(request->name(), request->model(), response));
}

grpc::ServerUnaryReactor* AdminServiceImpl::SetKnob(grpc::CallbackServerContext* context,
                                                    const v1::SetKnobRequest* request,
                                                    v1::Knob* response) {
  if (absl::Status auth = CheckAuth(context); !auth.ok()) return Done(context, "SetKnob", "", auth);
  if (absl::Status valid = CheckKnobRequest(request->name(), request->model()); !valid.ok()) {
    return Done(context, "SetKnob", "", valid);
  }
  const std::string& name = request->name();
  absl::StatusOr<KnobInfo> info = KnobRegistry::Global().Get(name);
  if (!info.ok()) return Done(context, "SetKnob", "", info.status());
  if (request->model().empty() && info->spec.effect == KnobEffect::kRestart) {
    // Changing the registry would show a value nothing uses.
    return Done(context, "SetKnob", "",
                absl::FailedPreconditionError(absl::StrCat(
                    "knob ", name, " is read once when minferd starts (",
                    info->spec.help, "); set it in minferd's environment and restart it")));
  }
  if (request->model().empty()) {
    // Global: the registry is thread-safe, and sessions compare its
    // generation before each step, so graphs are rebuilt between steps.
    absl::Status s = request->reset() ? KnobRegistry::Global().Reset(name)
                                      : KnobRegistry::Global().Set(name, request->value());
    if (s.ok()) {
      Logger("daemon")->info("knob {} = '{}' (global{})", name,
                             KnobRegistry::Global().GetString(name),
                             request->reset() ? ", reset" : "");
      s = DescribeKnob(name, "", response);
    }
    return Done(context, "SetKnob", "", s);
  }
  if (info->spec.scope != KnobScope::kPerModel) {
    return Done(context, "SetKnob", "",
                absl::InvalidArgumentError(absl::StrCat(
                    "knob ", name, " is global; set it without a model")));
  }
  if (info->spec.effect == KnobEffect::kReload) {
    return Done(context, "SetKnob", "",
                absl::FailedPreconditionError(absl::StrCat(
                    "knob ", name, " takes effect when a model loads; pass it in LoadModel's "
                    "knobs (minferctl load --knob)")));
  }
  std::optional<std::string> value;
  if (!request->reset()) {
    if (absl::Status v = KnobRegistry::Global().ValidateOverrides({{name, request->value()}});
        !v.ok()) {
      return Done(context, "SetKnob", "", v);
    }
    value = request->value();
  }
  std::string model;
  absl::StatusOr<std::shared_ptr<Slot>> slot = slots_->Find(request->model(), &model);
  if (!slot.ok()) return Done(context, "SetKnob", "", slot.status());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // Applied by the slot's worker between two steps; answered from there.
  absl::Status posted = (*slot)->PostKnobChange(
      name, value, [this, reactor, response, name, model](absl::Status s) {
        if (s.ok()) {
          Logger("daemon")->info("knob {} for model '{}' changed", name, model);
          s = DescribeKnob(name, model, response);
        }
        grpc::Status g = ToGrpcStatus(s);
        if (metrics_ != nullptr) metrics_->RecordRequest("SetKnob", model, GrpcCodeName(g.error_code()));
        reactor->Finish(std::move(g));
      });
  if (!posted.ok()) {
    grpc::Status g = ToGrpcStatus(posted);
    if (metrics_ != nullptr) metrics_->RecordRequest("SetKnob", model, GrpcCodeName(g.error_code()));
    reactor->Finish(std::move(g));
  }
  return reactor;
}

grpc::ServerUnaryReactor* AdminServiceImpl::SetAlias(grpc::CallbackServerContext* context,
                                                     const v1::SetAliasRequest* request,
                                                     v1::SetAliasResponse* response) {
  if (absl::Status auth = CheckAuth(context); !auth.ok()) return Done(context, "SetAlias", "", auth);
  absl::Status valid = CheckName(request->alias(), "alias");
  if (valid.ok()) valid = CheckName(request->model(), "model");
  if (!valid.ok()) return Done(context, "SetAlias", "", valid);
  absl::StatusOr<std::optional<std::string>> previous =
      slots_->SetAlias(request->alias(), request->model());
  if (!previous.ok()) return Done(context, "SetAlias", "", previous.status());
  response->mutable_alias()->set_name(request->alias());
  response->mutable_alias()->set_model(request->model());
  if (previous->has_value()) response->set_previous_model(**previous);
  return Done(context, "SetAlias", request->model(), absl::OkStatus());
}

grpc::ServerUnaryReactor* AdminServiceImpl::DeleteAlias(grpc::CallbackServerContext* context,
                                                        const v1::DeleteAliasRequest* request,
                                                        v1::DeleteAliasResponse*) {
  if (absl::Status auth = CheckAuth(context); !auth.ok()) {
    return Done(context, "DeleteAlias", "", auth);
  }
  if (absl::Status valid = CheckName(request->alias(), "alias"); !valid.ok()) {
    return Done(context, "DeleteAlias", "", valid);
  }
  return Done(context, "DeleteAlias", "", slots_->DeleteAlias(request->alias()));
}

grpc::ServerUnaryReactor* AdminServiceImpl::ListAliases(grpc::CallbackServerContext* context,
                                                        const v1::ListAliasesRequest*,
                                                        v1::ListAliasesResponse* response) {
  if (absl::Status auth = CheckAuth(context); !auth.ok()) {
    return Done(context, "ListAliases", "", auth);
  }
  for (const auto& [alias, model] : slots_->ListAliases()) {
    v1::Alias* a = response->add_aliases();
    a->set_name(alias);
    a->set_model(model);
  }
  return Done(context, "ListAliases", "", absl::OkStatus());
}

grpc::ServerUnaryReactor* AdminServiceImpl::ListTenants(grpc::CallbackServerContext* context,
                                                        const v1::ListTenantsRequest*,
                                                        v1::ListTenantsResponse* response) {
  if (absl::Status auth = CheckAuth(context); !auth.ok()) {
    return Done(context, "ListTenants", "", auth);
  }
  if (tenants_ != nullptr) {
    for (const Tenants::Usage& u : tenants_->Snapshot()) {
      v1::TenantStatus* t = response->add_tenants();
      t->set_name(u.name);
      t->set_weight(u.weight);
      t->set_streams(u.streams);
      t->set_max_streams(u.max_streams);
      t->set_window_tokens(u.window_tokens);
      t->set_reserved_tokens(u.reserved_tokens);
      t->set_quota_tokens(u.quota_tokens);
      t->set_quota_window_seconds(u.quota_window_seconds);
      t->set_admitted(u.admitted);
      t->set_rejected_cap(u.rejected_cap);
      t->set_rejected_quota(u.rejected_quota);
      t->set_rejected_model(u.rejected_model);
      t->set_prompt_tokens(u.prompt_tokens);
      t->set_completion_tokens(u.completion_tokens);
      t->set_cached_tokens(u.cached_tokens);
    }
  }
  return Done(context, "ListTenants", "", absl::OkStatus());
}

}  // namespace minfer::daemon
