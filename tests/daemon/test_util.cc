#include "tests/daemon/test_util.h"

#include <unistd.h>

#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/runtime/generation.h"
#include "engine/runtime/model.h"
#include "engine/runtime/session.h"
#include "grpcpp/generic/generic_stub.h"

namespace minfer::daemon::testing {

DaemonConfig TestConfig() {
  DaemonConfig c;
  c.listen = "127.0.0.1:0";
  // Off: stopping the HTTP exposer takes up to 2 s (civetweb polls), which
  // adds up over many tests; the metrics test turns it on.
  c.metrics_listen = "";
  c.default_n_ctx = 512;
  c.default_parallel = 1;
  c.default_queue_size = 4;
  c.drain_timeout_seconds = 10;
  return c;
}

std::unique_ptr<client::MinferClient> ClientFor(const Daemon& daemon, const std::string& token) {
  client::ClientOptions o;
  o.address = daemon.address();
  o.token = token;
  return *client::MinferClient::Create(o);
}

absl::StatusOr<v1::ModelStatus> Load(client::MinferClient& client, const std::string& name,
                                     const std::string& path, int32_t parallel, int64_t n_ctx,
                                     int32_t queue_size) {
  v1::LoadModelRequest r;
  r.set_name(name);
  r.set_path(path);
  r.set_parallel(parallel);
  r.set_n_ctx(n_ctx);
  r.set_queue_size(queue_size);
  r.set_backend("cpu");
  return client.LoadModel(r);
}

v1::GenerateRequest TextRequest(const std::string& model, const std::string& text,
                                int32_t max_tokens, std::optional<uint64_t> seed,
                                bool ignore_eos) {
  v1::GenerateRequest r;
  r.set_model(model);
  r.set_text(text);
  if (seed) {
    // Hot: the synthetic models are peaked, so lower temperatures sample
    // their argmax and the seed would not matter.
    r.mutable_sampling()->set_temperature(3.0f);
    r.mutable_sampling()->set_seed(*seed);
  } else {
    r.mutable_sampling()->set_temperature(0.0f);
    r.mutable_sampling()->set_seed(0);
  }
  r.mutable_stopping()->set_max_tokens(max_tokens);
  r.mutable_stopping()->set_ignore_eos(ignore_eos);
  return r;
}

absl::StatusOr<Reference> ReferenceGenerate(const std::string& path,
                                            const v1::GenerateRequest& request, int64_t n_ctx) {
  static std::mutex mu;
  static auto* models = new std::map<std::string, std::shared_ptr<runtime::Model>>;
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<runtime::Model>& model = (*models)[path];
  if (model == nullptr) {
    runtime::ModelOptions mo;
    mo.backend = "cpu";
    ASSIGN_OR_RETURN(model, runtime::Model::Load(path, mo));
  }
  runtime::GenerateRequest g;
  const tokenizer::Tokenizer& tok = model->tokenizer();
  if (request.has_chat()) {
    std::vector<tokenizer::ChatMessage> msgs;
    for (const auto& m : request.chat().messages()) msgs.push_back({m.role(), m.content()});
    ASSIGN_OR_RETURN(g.prompt, tok.EncodeChat(msgs, true));
  } else if (request.has_tokens()) {
    g.prompt.assign(request.tokens().ids().begin(), request.tokens().ids().end());
  } else {
    tokenizer::EncodeOptions eo;
    eo.parse_special = false;
    g.prompt = tok.Encode(request.text(), eo);
  }
  const auto& s = request.sampling();
  g.sampling.temperature = s.has_temperature() ? s.temperature() : 1.0f;
  if (s.has_top_k()) g.sampling.top_k = s.top_k();
  if (s.has_top_p()) g.sampling.top_p = s.top_p();
  g.sampling.seed = s.seed();
  g.max_tokens = request.stopping().max_tokens();
  g.stop.assign(request.stopping().stop().begin(), request.stopping().stop().end());
  g.ignore_eos = request.stopping().ignore_eos();
  runtime::SessionOptions so;
  so.n_ctx = n_ctx;
  ASSIGN_OR_RETURN(std::unique_ptr<runtime::Session> session, runtime::Session::Create(model, so));
  ASSIGN_OR_RETURN(std::unique_ptr<runtime::Generation> gen,
                   runtime::Generate(session.get(), std::move(g), nullptr));
  Reference ref;
  ref.ids = gen->output_tokens();
  ref.text = gen->text();
  ref.reason = gen->finish_reason();
  return ref;
}

bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

grpc::Status RawCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                     const std::string& bytes, const std::string& token) {
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  auto wait = [&] {
    void* tag = nullptr;
    bool ok = false;
    return cq.Next(&tag, &ok) && ok;
  };
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call = stub.PrepareCall(&ctx, method, &cq);
  call->StartCall(reinterpret_cast<void*>(1));
  if (wait()) {
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    call->WriteLast(request, grpc::WriteOptions(), reinterpret_cast<void*>(2));
    wait();
    grpc::ByteBuffer response;
    for (;;) {
      call->Read(&response, reinterpret_cast<void*>(3));
      if (!wait()) break;
    }
  }
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(4));
  wait();
  return status;
}

uint64_t RssBytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace minfer::daemon::testing
