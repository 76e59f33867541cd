#include "daemon/generation_service.h"

#include "daemon/chat_options.h"

#include <chrono>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/client_input.h"
#include "daemon/grpc_status.h"
#include "daemon/pump_queue.h"
#include "daemon/request_decoding.h"
#include "daemon/unary.h"
#include "daemon/sequence.h"
#include "daemon/stream_reactor.h"
#include "engine/base/logging.h"
#include "engine/base/status.h"
#include "engine/sampling/sampling_params.h"

namespace minfer::daemon {
namespace {

constexpr size_t kMaxStopStrings = 16;

// A passed deadline reaches the service as a cancellation: the server's own
// timer, or the client's, whose RST_STREAM can arrive first (the client's
// deadline is earlier than the server's by the request's transit, which on a
// busy machine is milliseconds). So a cancellation this close to the
// deadline, or after it, is counted as the deadline's.
constexpr Clock::duration kDeadlineSlack = std::chrono::milliseconds(50);

uint64_t RandomSeed() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  return rng();
}

// The sampler names its fields "SamplingParams.x"; the API calls them
// "sampling.x" (n_logprobs is options.top_logprobs, checked before).
absl::Status RenameSamplingField(const absl::Status& s) {
  std::string msg(s.message());
  if (absl::StartsWith(msg, "SamplingParams.")) msg = "sampling." + msg.substr(15);
  return absl::Status(s.code(), msg);
}

Clock::time_point SteadyDeadline(const grpc::CallbackServerContext* context) {
  const auto deadline = context->deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) {
    return Clock::time_point::max();
  }
  const auto left = deadline - std::chrono::system_clock::now();
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(left);
}

std::vector<tokenizer::ChatMessage> ChatMessages(const v1::Chat& chat) {
  std::vector<tokenizer::ChatMessage> out;
  out.reserve(chat.messages_size());
  for (const auto& m : chat.messages()) out.push_back({m.role(), m.content()});
  return out;
}

v1::FinishReason ToProto(FinishReason r) {
  switch (r) {
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case FinishReason::kEos:
      return v1::FINISH_REASON_EOS;
    case FinishReason::kCancelled:
      return v1::FINISH_REASON_CANCELLED;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

// Streams one Sequence to the client.
class GenerateReactor final : public PullStreamReactor<v1::GenerateResponse> {
 public:
  // `deadline`: the call's (Clock::time_point::max() for none).
  GenerateReactor(ServingState* state, Metrics* metrics, PumpQueue* pumps,
                  Clock::time_point deadline)
      : state_(state), metrics_(metrics), pumps_(pumps), deadline_(deadline) {
    state_->StreamStarted();
  }

  // Starts streaming `seq` (which the slot now runs). The slot's worker
  // only posts to the pump queue: the gRPC write runs there, off the
  // decode loop.
  void Attach(std::shared_ptr<Sequence> seq) {
    seq_ = std::move(seq);
    model_ = seq_->model();
    sub_ = seq_->notifier().Subscribe([this] { pumps_->Post(this, [this] { Pump(); }); });
    Pump();  // it may have published before we subscribed
  }

 private:
  bool Next(v1::GenerateResponse* msg, std::optional<grpc::Status>* final) override {
    SequenceChunk chunk;
    if (seq_ == nullptr || !seq_->TakeChunk(&chunk)) return false;
    msg->mutable_token_ids()->Add(chunk.tokens.begin(), chunk.tokens.end());
    msg->set_text(std::move(chunk.text));
    for (const SampledToken& s : chunk.logprobs) {
      v1::SampledTokenLogprobs* lp = msg->add_logprobs();
      lp->set_id(s.token);
      lp->set_logprob(s.logprob);
      for (const auto& t : s.top_logprobs) {
        v1::TokenLogprob* top = lp->add_top();
        top->set_id(t.token);
        top->set_logprob(t.logprob);
      }
    }
    if (chunk.first) msg->set_model(seq_->model());
    if (chunk.result.has_value()) {
      const SequenceResult& r = *chunk.result;
      msg->set_model(seq_->model());
      msg->set_finish_reason(ToProto(r.finish_reason));
      v1::Usage* u = msg->mutable_usage();
      u->set_prompt_tokens(r.stats.prompt_tokens);
      u->set_completion_tokens(r.stats.completion_tokens);
      u->set_time_to_first_token_seconds(r.ttft_seconds);
      u->set_decode_tokens_per_second(r.DecodeTokensPerSecond());
      u->set_decode_step_tokens_per_second(r.stats.DecodeTokensPerSecond());
      u->set_queue_seconds(r.queue_seconds);
      u->set_total_seconds(r.total_seconds);
      u->set_seed(r.seed);
      u->set_cached_prompt_tokens(r.stats.cached_prompt_tokens);
      *final = ToGrpcStatus(r.status);
    }
    return true;
  }

  // gRPC reports a passed deadline as a cancellation; tell them apart, so
  // the worker's log and the metrics say which it was.
  bool DeadlinePassed() const {
    return deadline_ != Clock::time_point::max() && Clock::now() + kDeadlineSlack >= deadline_;
  }

  void OnCancelled() override {
    if (seq_ == nullptr) return;
    seq_->Cancel(DeadlinePassed()
                     ? absl::DeadlineExceededError("the request's deadline passed")
                     : absl::CancelledError("the client cancelled the stream"));
  }

  void Cleanup(const grpc::Status& final) override {
    if (seq_ != nullptr) {
      seq_->notifier().Unsubscribe(sub_);
      pumps_->Remove(this);  // no queued or running Pump() outlives this
      // A stream that ended early (failed write) must not leave its
      // sequence running.
      seq_->Cancel(absl::CancelledError("the stream ended"));
    }
    if (seq_ == nullptr && !final.ok()) {
      // Refused before reaching a slot (the slot's worker logs the others).
      Logger("daemon")->info("generate refused: {}: {}", GrpcCodeName(final.error_code()),
                             final.error_message());
    }
    grpc::StatusCode code = final.error_code();
    if (code == grpc::StatusCode::CANCELLED && DeadlinePassed()) {
      code = grpc::StatusCode::DEADLINE_EXCEEDED;
    }
    if (metrics_ != nullptr) metrics_->RecordRequest("Generate", model_, GrpcCodeName(code));
    state_->StreamEnded();
  }

  ServingState* const state_;
  Metrics* const metrics_;
  PumpQueue* const pumps_;
  const Clock::time_point deadline_;
  std::shared_ptr<Sequence> seq_;
  std::string model_;
  Notifier::Id sub_ = 0;
};

}  // namespace

absl::StatusOr<runtime::GenerateRequest> BuildGenerateRequest(const v1::GenerateRequest& request,
                                                              const runtime::Model& model,
                                                              int64_t n_ctx,
                                                              const GenerationLimits& limits) {
  runtime::GenerateRequest out;
  const tokenizer::Tokenizer& tok = model.tokenizer();
  switch (request.input_case()) {
    case v1::GenerateRequest::kText: {
      if (request.text().empty()) return absl::InvalidArgumentError("text: the prompt is empty");
      tokenizer::EncodeOptions eo;
      eo.parse_special = request.options().parse_special();
      out.prompt = tok.Encode(request.text(), eo);
      break;
    }
    case v1::GenerateRequest::kChat: {
      if (request.chat().messages().empty()) {
        return absl::InvalidArgumentError("chat.messages: no messages");
      }
      ASSIGN_OR_RETURN(const tokenizer::ChatTemplateOptions options,
                       ChatTemplateOptionsOf(request.chat()));
      absl::StatusOr<std::vector<int32_t>> ids =
          tok.EncodeChat(ChatMessages(request.chat()), /*add_generation_prompt=*/true, options);
      if (!ids.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("chat: ", ids.status().message()));
      }
      out.prompt = std::move(*ids);
      break;
    }
    case v1::GenerateRequest::kTokens: {
      const auto& ids = request.tokens().ids();
      if (ids.empty()) return absl::InvalidArgumentError("tokens.ids: no tokens");
      const int64_t n_vocab = model.hparams().n_vocab;
      for (int i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= n_vocab) {
          return absl::InvalidArgumentError(absl::StrCat("tokens.ids[", i, "] = ", ids[i],
                                                         " is outside the vocabulary [0, ",
                                                         n_vocab, ")"));
        }
      }
      out.prompt.assign(ids.begin(), ids.end());
      break;
    }
    case v1::GenerateRequest::INPUT_NOT_SET:
      return absl::InvalidArgumentError("input: set one of text, chat or tokens");
  }
  const int64_t n_prompt = static_cast<int64_t>(out.prompt.size());
  if (n_prompt == 0) return absl::InvalidArgumentError("prompt: it encodes to no tokens");
  if (n_prompt > limits.max_prompt_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt: ", n_prompt, " tokens exceed the server's limit of ",
                     limits.max_prompt_tokens, " (max_prompt_tokens)"));
  }
  if (n_prompt >= n_ctx) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt: ", n_prompt, " tokens do not fit the model's context of ", n_ctx,
                     " (one position must remain for the completion)"));
  }

  const v1::SamplingParams& sp = request.sampling();
  SamplingParams& s = out.sampling;
  if (sp.has_temperature()) s.temperature = sp.temperature();
  if (sp.has_top_k()) s.top_k = sp.top_k();
  if (sp.has_top_p()) s.top_p = sp.top_p();
  if (sp.has_min_p()) s.min_p = sp.min_p();
  if (sp.has_repetition_penalty()) s.repetition_penalty = sp.repetition_penalty();
  if (sp.has_frequency_penalty()) s.frequency_penalty = sp.frequency_penalty();
  if (sp.has_presence_penalty()) s.presence_penalty = sp.presence_penalty();
  if (sp.has_penalty_last_n()) s.penalty_last_n = sp.penalty_last_n();
  s.seed = sp.has_seed() ? sp.seed() : RandomSeed();
  const int32_t top_logprobs = request.options().top_logprobs();
  if (top_logprobs < 0 || top_logprobs > kMaxLogprobs) {
    return absl::InvalidArgumentError(absl::StrCat("options.top_logprobs must be in [0, ",
                                                   kMaxLogprobs, "], got ", top_logprobs));
  }
  s.n_logprobs = top_logprobs;
  if (absl::Status v = s.Validate(); !v.ok()) return RenameSamplingField(v);

  const v1::StoppingCriteria& st = request.stopping();
  if (st.has_max_tokens()) {
    if (st.max_tokens() < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("stopping.max_tokens must be >= 1, got ", st.max_tokens()));
    }
    if (st.max_tokens() > limits.max_tokens) {
      return absl::InvalidArgumentError(
          absl::StrCat("stopping.max_tokens ", st.max_tokens(),
                       " exceeds the server's limit of ", limits.max_tokens));
    }
    out.max_tokens = st.max_tokens();
  } else {
    out.max_tokens = std::min(limits.default_max_tokens, limits.max_tokens);
  }
  if (static_cast<size_t>(st.stop_size()) > kMaxStopStrings) {
    return absl::InvalidArgumentError(absl::StrCat("stopping.stop: at most ", kMaxStopStrings,
                                                   " stop strings, got ", st.stop_size()));
  }
  for (int i = 0; i < st.stop_size(); ++i) {
    if (st.stop(i).empty()) {
      return absl::InvalidArgumentError(absl::StrCat("stopping.stop[", i, "] is empty"));
    }
    out.stop.push_back(st.stop(i));
  }
  out.ignore_eos = st.ignore_eos();
  return out;
}

absl::StatusOr<std::shared_ptr<Sequence>> SubmitGenerate(
    SlotManager* slots, const ServingState& state, const v1::GenerateRequest& request,
    const GenerationLimits& limits, Clock::time_point arrival, Clock::time_point deadline,
    const char* api, std::shared_ptr<const runtime::Model>* model_out, const TenantRef& tenant) {
  if (state.draining()) {
    return absl::UnavailableError("the server is draining; it accepts no new generations");
  }
  if (request.model().empty()) {
    return absl::InvalidArgumentError("model: name a loaded model or alias");
  }
  RETURN_IF_ERROR(CheckName(request.model(), "model"));
  return slots->Submit(
      request.model(),
      [&](Slot& slot, const std::string& model) -> absl::StatusOr<std::shared_ptr<Sequence>> {
        std::shared_ptr<const runtime::Model> m = slot.model();
        if (m == nullptr) {
          return absl::FailedPreconditionError(
              absl::StrCat("model '", model, "' is ", SlotStateName(slot.state()), ", not ready"));
        }
        ASSIGN_OR_RETURN(runtime::GenerateRequest r,
                         BuildGenerateRequest(request, *m, slot.n_ctx(), limits));
        r.priority = request.options().priority();
        std::shared_ptr<TenantLease> lease;
        if (tenant.tenants != nullptr) {
          ASSIGN_OR_RETURN(lease, tenant.tenants->Admit(tenant.index, request.model(), model));
          r.group = Tenants::Group(tenant.index);
          r.weight = tenant.tenants->weight(tenant.index);
        }
        auto seq = std::make_shared<Sequence>(std::move(r), model, arrival, deadline);
        seq->set_api(api);
        seq->set_tenant(std::move(lease));
        if (model_out != nullptr) *model_out = m;
        return seq;
      });
}

GenerationServiceImpl::GenerationServiceImpl(SlotManager* slots, GenerationLimits limits,
                                             ServingState* state, Metrics* metrics,
                                             Tenants* tenants)
    : slots_(slots), limits_(limits), state_(state), metrics_(metrics), tenants_(tenants) {
  // Replaces the generated handlers (which answer a request that does not
  // parse with UNIMPLEMENTED and no message) with decoding ones.
  MarkMethodCallback(
      MethodIndex(v1::GenerationService::service_full_name(), "Generate"),
      new grpc::internal::CallbackServerStreamingHandler<Decoded<v1::GenerateRequest>,
                                                         v1::GenerateResponse>(
          [this](grpc::CallbackServerContext* context,
                 const Decoded<v1::GenerateRequest>* request)
              -> grpc::ServerWriteReactor<v1::GenerateResponse>* {
            if (request->status.ok()) return Generate(context, &request->message);
            auto* reactor =
                new GenerateReactor(state_, metrics_, &pumps_, Clock::time_point::max());
            reactor->FinishWith(ToGrpcStatus(request->status));
            return reactor;
          }));
  RegisterDecoded("Tokenize", &GenerationServiceImpl::Tokenize);
  RegisterDecoded("Detokenize", &GenerationServiceImpl::Detokenize);
}

template <typename Request, typename Response>
void GenerationServiceImpl::RegisterDecoded(
    const char* name, grpc::ServerUnaryReactor* (GenerationServiceImpl::*method)(
                          grpc::CallbackServerContext*, const Request*, Response*)) {
  MarkMethodCallback(
      MethodIndex(v1::GenerationService::service_full_name(), name),
      new grpc::internal::CallbackUnaryHandler<Decoded<Request>, Response>(
          [this, name, method](grpc::CallbackServerContext* context,
                               const Decoded<Request>* request, Response* response) {
            // With tenants, Tokenize and Detokenize need a tenant's key too
            // (they reveal which models exist), checked first.
            if (absl::Status who = Identify(context).status(); !who.ok()) {
              return Done(context, name, "", who);
            }
            if (!request->status.ok()) return Done(context, name, "", request->status);
            return (this->*method)(context, &request->message, response);
          }));
}

absl::StatusOr<int> GenerationServiceImpl::Identify(grpc::CallbackServerContext* context) const {
  if (tenants_ == nullptr) return -1;
  const auto& md = context->client_metadata();
  auto it = md.find("authorization");
  return tenants_->Identify(it == md.end()
                                ? absl::string_view()
                                : absl::string_view(it->second.data(), it->second.size()));
}

grpc::ServerUnaryReactor* GenerationServiceImpl::Done(grpc::CallbackServerContext* context,
                                                      const char* method, const std::string& model,
                                                      const absl::Status& status) {
  return FinishUnary(context, metrics_, method, model, status);
}

grpc::ServerWriteReactor<v1::GenerateResponse>* GenerationServiceImpl::Generate(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  const Clock::time_point arrival = Clock::now();
  const Clock::time_point deadline = SteadyDeadline(context);
  auto* reactor = new GenerateReactor(state_, metrics_, &pumps_, deadline);
  TenantRef tenant;
  if (tenants_ != nullptr) {
    absl::StatusOr<int> who = Identify(context);
    if (!who.ok()) {
      reactor->FinishWith(ToGrpcStatus(who.status()));
      return reactor;
    }
    tenant = {tenants_, *who};
  }
  absl::StatusOr<std::shared_ptr<Sequence>> seq =
      SubmitGenerate(slots_, *state_, *request, limits_, arrival, deadline, "grpc", nullptr, tenant);
  if (!seq.ok()) {
    reactor->FinishWith(ToGrpcStatus(seq.status()));
    return reactor;
  }
  reactor->Attach(*std::move(seq));
  return reactor;
}

grpc::ServerUnaryReactor* GenerationServiceImpl::Tokenize(grpc::CallbackServerContext* context,
                                                          const v1::TokenizeRequest* request,
                                                          v1::TokenizeResponse* response) {
  if (absl::Status name = CheckName(request->model(), "model"); !name.ok()) {
    return Done(context, "Tokenize", "", name);
  }
  std::string model_name;
  absl::StatusOr<std::shared_ptr<Slot>> slot = slots_->Find(request->model(), &model_name);
  if (!slot.ok()) return Done(context, "Tokenize", model_name, slot.status());
  std::shared_ptr<const runtime::Model> model = (*slot)->model();
  if (model == nullptr) {
    return Done(context, "Tokenize", model_name, absl::FailedPreconditionError(absl::StrCat(
                                    "model '", model_name, "' is not ready")));
  }
  const tokenizer::Tokenizer& tok = model->tokenizer();
  std::vector<int32_t> ids;
  switch (request->input_case()) {
    case v1::TokenizeRequest::kText: {
      tokenizer::EncodeOptions eo;
      eo.parse_special = request->parse_special();
      ids = tok.Encode(request->text(), eo);
      break;
    }
    case v1::TokenizeRequest::kChat: {
      absl::StatusOr<tokenizer::ChatTemplateOptions> options = ChatTemplateOptionsOf(request->chat());
      if (!options.ok()) return Done(context, "Tokenize", model_name, options.status());
      absl::StatusOr<std::vector<int32_t>> chat =
          tok.EncodeChat(ChatMessages(request->chat()), /*add_generation_prompt=*/true, *options);
      if (!chat.ok()) {
        return Done(context, "Tokenize", model_name, absl::InvalidArgumentError(
                                        absl::StrCat("chat: ", chat.status().message())));
      }
      ids = std::move(*chat);
      break;
    }
    case v1::TokenizeRequest::INPUT_NOT_SET:
      return Done(context, "Tokenize", model_name, absl::InvalidArgumentError("input: set text or chat"));
  }
  // The prompt limit bounds the response too (two fields per token; a
  // client refuses a response over its message limit, 4 MiB by default).
  if (ids.size() > static_cast<size_t>(limits_.max_prompt_tokens)) {
    return Done(context, "Tokenize", model_name,
                absl::InvalidArgumentError(absl::StrCat(
                    request->input_case() == v1::TokenizeRequest::kText ? "text" : "chat", ": ",
                    ids.size(), " tokens exceed the server's limit of ",
                    limits_.max_prompt_tokens, " (max_prompt_tokens)")));
  }
  for (int32_t id : ids) {
    response->add_ids(id);
    response->add_tokens(std::string(tok.TokenText(id)));
  }
  response->set_model(model_name);
  return Done(context, "Tokenize", model_name, absl::OkStatus());
}

grpc::ServerUnaryReactor* GenerationServiceImpl::Detokenize(grpc::CallbackServerContext* context,
                                                            const v1::DetokenizeRequest* request,
                                                            v1::DetokenizeResponse* response) {
  if (absl::Status name = CheckName(request->model(), "model"); !name.ok()) {
    return Done(context, "Detokenize", "", name);
  }
  // A prompt and its completion: the most a client could want decoded.
  const int64_t max_ids =
      static_cast<int64_t>(limits_.max_prompt_tokens) + limits_.max_tokens;
  if (request->ids_size() > max_ids) {
    return Done(context, "Detokenize", "",
                absl::InvalidArgumentError(absl::StrCat(
                    "ids: ", request->ids_size(), " ids exceed the server's limit of ", max_ids,
                    " (max_prompt_tokens + max_tokens)")));
  }
  std::string model_name;
  absl::StatusOr<std::shared_ptr<Slot>> slot = slots_->Find(request->model(), &model_name);
  if (!slot.ok()) return Done(context, "Detokenize", model_name, slot.status());
  std::shared_ptr<const runtime::Model> model = (*slot)->model();
  if (model == nullptr) {
    return Done(context, "Detokenize", model_name, absl::FailedPreconditionError(absl::StrCat(
                                    "model '", model_name, "' is not ready")));
  }
  tokenizer::DecodeOptions d;
  d.skip_special = request->skip_special();
  std::vector<int32_t> ids(request->ids().begin(), request->ids().end());
  absl::StatusOr<std::string> text = model->tokenizer().Decode(ids, d);
  if (!text.ok()) {
    return Done(context, "Detokenize", model_name, absl::InvalidArgumentError(
                                    absl::StrCat("ids: ", text.status().message())));
  }
  response->set_text(std::move(*text));
  return Done(context, "Detokenize", model_name, absl::OkStatus());
}

}  // namespace minfer::daemon
