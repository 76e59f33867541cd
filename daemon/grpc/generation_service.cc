#include "daemon/grpc/generation_service.h"

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/api/chat_options.h"
#include "daemon/api/chat_tools.h"
#include "daemon/api/generate_request.h"
#include "daemon/grpc/grpc_status.h"
#include "daemon/grpc/pump_queue.h"
#include "daemon/grpc/request_decoding.h"
#include "daemon/grpc/stream_reactor.h"
#include "daemon/grpc/unary.h"
#include "daemon/serving/client_input.h"
#include "daemon/serving/sequence.h"
#include "engine/base/logging.h"
#include "engine/base/status.h"
#include "engine/sampling/sampling_params.h"

namespace minfer::daemon {
namespace {

// A passed deadline reaches the service as a cancellation: the server's own
// timer, or the client's, whose RST_STREAM can arrive first (the client's
// deadline is earlier than the server's by the request's transit, which on a
// busy machine is milliseconds). So a cancellation this close to the
// deadline, or after it, is counted as the deadline's.
constexpr Clock::duration kDeadlineSlack = std::chrono::milliseconds(50);

Clock::time_point SteadyDeadline(const grpc::CallbackServerContext* context) {
  const auto deadline = context->deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) {
    return Clock::time_point::max();
  }
  const auto left = deadline - std::chrono::system_clock::now();
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(left);
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

// The reader of a chat reply to `chat` by the model of `tok`: the reading
// the HTTP APIs give it (ChatOutputOptionsFor decides the call family and
// the reasoning split; CreateOrContent the fallback).
std::unique_ptr<ChatOutputStream> ChatReplyReader(const v1::Chat& chat,
                                                  const tokenizer::Tokenizer& tok,
                                                  const ChatParsers& parsers) {
  ChatOutputOptions options = ChatOutputOptionsFor(chat, tok, parsers);
  return ChatOutputStream::CreateOrContent(&options);
}

// Adds the reader's events to the response's typed fields. Consecutive
// pieces of one call share one ToolCallDelta.
void AddChatEvents(std::vector<ChatOutputEvent> events, v1::GenerateResponse* msg,
                   bool* called) {
  for (ChatOutputEvent& e : events) {
    switch (e.type) {
      case ChatOutputEvent::Type::kReasoning:
        msg->mutable_reasoning_text()->append(e.text);
        break;
      case ChatOutputEvent::Type::kContent:
        msg->mutable_content_text()->append(e.text);
        break;
      case ChatOutputEvent::Type::kCallStart: {
        *called = true;
        v1::ToolCallDelta* d = msg->add_tool_calls();
        d->set_index(e.index);
        d->set_id(std::move(e.id));
        d->set_name(std::move(e.name));
        break;
      }
      case ChatOutputEvent::Type::kArguments: {
        const int n = msg->tool_calls_size();
        v1::ToolCallDelta* d = n > 0 && msg->tool_calls(n - 1).index() == e.index
                                   ? msg->mutable_tool_calls(n - 1)
                                   : msg->add_tool_calls();
        d->set_index(e.index);
        d->mutable_arguments()->append(e.text);
        break;
      }
    }
  }
}

// Streams one Sequence to the client.
class GenerateReactor final : public PullStreamReactor<v1::GenerateResponse> {
 public:
  // `deadline`: the call's (Clock::time_point::max() for none).
  GenerateReactor(ServingState* state, Metrics* metrics, PumpQueue* pumps,
                  Clock::time_point deadline)
      : guard_(state), state_(state), metrics_(metrics), pumps_(pumps), deadline_(deadline) {
    state_->StreamStarted();
  }

  // Starts streaming `seq` (which the slot now runs). The slot's worker
  // only posts to the pump queue: the gRPC write runs there, off the
  // decode loop. `chat` (null for a prompt that is not a chat) reads the
  // reply into the responses' typed fields.
  void Attach(std::shared_ptr<Sequence> seq, std::unique_ptr<ChatOutputStream> chat = nullptr) {
    chat_ = std::move(chat);
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
    if (chat_ != nullptr) {
      AddChatEvents(chat_->Feed(chunk.text), msg, &called_);
      if (chunk.result.has_value()) AddChatEvents(chat_->Finish(), msg, &called_);
    }
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
      // As OpenAI's finish_reason "tool_calls": calls, and the reply ended
      // by itself.
      if (called_ && (r.finish_reason == FinishReason::kEos ||
                      r.finish_reason == FinishReason::kStop)) {
        msg->set_finish_reason(v1::FINISH_REASON_TOOL_CALLS);
      }
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
      u->set_spec_drafted_tokens(r.stats.spec_drafted);
      u->set_spec_accepted_tokens(r.stats.spec_accepted);
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

  ServingState::Guard guard_;  // first: released after every other member
  ServingState* const state_;
  Metrics* const metrics_;
  PumpQueue* const pumps_;
  const Clock::time_point deadline_;
  std::shared_ptr<Sequence> seq_;
  std::unique_ptr<ChatOutputStream> chat_;  // null: not a chat
  bool called_ = false;                     // chat_ saw a call start
  std::string model_;
  Notifier::Id sub_ = 0;
};

}  // namespace


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

absl::Status GenerationServiceImpl::CheckModelAllowed(grpc::CallbackServerContext* context,
                                                      const std::string& model,
                                                      const std::string& resolved) const {
  if (tenants_ == nullptr) return absl::OkStatus();
  // (The registered handler identified the caller already; Identify is a
  // constant-time scan of the keys, cheap beside tokenizing.)
  ASSIGN_OR_RETURN(const int who, Identify(context));
  if (tenants_->Allows(who, model, resolved)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat("tenant '", tenants_->name(who),
                                                  "' may not use model '", resolved, "'"));
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
  std::shared_ptr<const runtime::Model> model;
  ChatParsers parsers;
  absl::StatusOr<std::shared_ptr<Sequence>> seq = SubmitGenerate(
      slots_, *state_, *request, limits_, arrival, deadline, "grpc", &model, tenant, &parsers);
  if (!seq.ok()) {
    reactor->FinishWith(ToGrpcStatus(seq.status()));
    return reactor;
  }
  std::unique_ptr<ChatOutputStream> chat;
  if (request->input_case() == v1::GenerateRequest::kChat && model != nullptr) {
    chat = ChatReplyReader(request->chat(), model->tokenizer(), parsers);
  }
  reactor->Attach(*std::move(seq), std::move(chat));
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
  if (absl::Status allowed = CheckModelAllowed(context, request->model(), model_name);
      !allowed.ok()) {
    return Done(context, "Tokenize", model_name, allowed);
  }
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
      absl::StatusOr<ChatTemplateInput> input = ChatTemplateInputOf(request->chat());
      if (!input.ok()) return Done(context, "Tokenize", model_name, input.status());
      absl::StatusOr<std::vector<int32_t>> chat =
          tok.EncodeChat(input->messages, /*add_generation_prompt=*/true, input->options);
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
  if (absl::Status allowed = CheckModelAllowed(context, request->model(), model_name);
      !allowed.ok()) {
    return Done(context, "Detokenize", model_name, allowed);
  }
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
