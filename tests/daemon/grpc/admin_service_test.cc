// In-process tests of minferd's admin path over a real gRPC server on a
// loopback port: loading (progress, errors, memory admission), health
// transitions, knobs, aliases, auth, reflection and metrics.
#include <sys/socket.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include <condition_variable>
#include <fstream>
#include <future>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/minfer_client.h"
#include "daemon/daemon.h"
#include "daemon/serving/memory.h"
#include "engine/base/knobs.h"
#include "engine/gguf/gguf.h"
#include "engine/models/decoder.h"
#include "engine/runtime/device_backend.h"
#include "engine/runtime/engine.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/unknown_field_set.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/daemon/test_util.h"
#include "tests/support/gguf_rewrite.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_models.h"

namespace minfer::daemon {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::ClientFor;
using testing::Load;
using testing::RawCall;
using testing::ReferenceGenerate;
using testing::TextRequest;
using testing::WaitFor;
using Health = grpc::health::v1::HealthCheckResponse;

class AdminServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto a = minfer::testing::TestModelPath("tiny", "q8_0", 1);
    ASSERT_TRUE(a.ok()) << a.status();
    path_ = *a;
  }

  void Start(DaemonConfig config = testing::TestConfig(), DaemonTestHooks hooks = {}) {
    auto d = Daemon::Start(std::move(config), std::move(hooks));
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
    client_ = ClientFor(*daemon_, config_token_);
  }

  std::string TempFile(const std::string& name, const std::string& bytes) {
    std::string p = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }

  std::string path_;
  std::string config_token_;
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<client::MinferClient> client_;
};

TEST_F(AdminServiceTest, LoadStreamsProgressAndReportsMemory) {
  Start();
  v1::LoadModelRequest r;
  r.set_name("a");
  r.set_path(path_);
  r.set_parallel(2);
  r.set_n_ctx(256);
  r.set_kv_type("f16");
  std::vector<v1::LoadModelResponse> progress;
  auto st = client_->LoadModel(r, [&](const v1::LoadModelResponse& p) { progress.push_back(p); });
  ASSERT_TRUE(st.ok()) << st.status();
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(progress.back().state(), v1::MODEL_STATE_READY);
  EXPECT_GT(progress.back().bytes_total(), 0u);
  EXPECT_EQ(progress.back().bytes_done(), progress.back().bytes_total());
  EXPECT_EQ(st->state(), v1::MODEL_STATE_READY);
  EXPECT_EQ(st->n_ctx(), 256);
  EXPECT_EQ(st->parallel(), 2);
  EXPECT_EQ(st->kv_type(), "f16");
  EXPECT_EQ(st->backend(), "cpu");
  EXPECT_EQ(st->tool_parser(), "");  // from the template
  EXPECT_EQ(st->reasoning_parser(), "");
  // KV: the pool, parallel x n_ctx/16 blocks of 16 rows plus the reserved
  // block, x {K,V} x n_layer x n_kv_embd x 2 bytes (f16); the tiny shape has
  // 2 layers, 2 KV heads of 64.
  EXPECT_EQ(st->memory().kv_bytes(), (2u * 256 / 16 + 1) * 16 * 2 * 2 * 128 * 2);
  EXPECT_EQ(st->kv_pool().block_tokens(), 16);
  EXPECT_EQ(st->kv_pool().blocks_total(), 2 * 256 / 16);
  EXPECT_EQ(st->kv_pool().blocks_used(), 0);
  EXPECT_EQ(st->kv_pool().block_bytes(), 16u * 2 * 2 * 128 * 2);
  EXPECT_EQ(st->kv_pool().token_budget(), 512);
  auto file = gguf::GgufFile::Open(path_);
  ASSERT_TRUE(file.ok());
  uint64_t tensor_bytes = 0;
  for (const auto& t : (*file)->tensors()) tensor_bytes += t.nbytes;
  EXPECT_EQ(st->memory().weights_bytes(), tensor_bytes);
  EXPECT_GE(st->memory().reserved_bytes(), st->memory().total_bytes());
  // The CPU backend holds the KV cache (its weights are memory-mapped).
  EXPECT_GE(st->memory().backend_bytes(), st->memory().kv_bytes());
  auto server = client_->GetServerStatus();
  ASSERT_TRUE(server.ok());
  EXPECT_EQ(server->memory_reserved_bytes(), st->memory().reserved_bytes());
  EXPECT_EQ(server->models(), 1);
  ASSERT_GE(server->devices_size(), 1);
  EXPECT_EQ(server->devices(0).kind(), "cpu");
  EXPECT_GT(server->devices(0).memory_total_bytes(), 0u);
  EXPECT_FALSE(server->version().empty());
  // The name is taken now.
  auto again = client_->LoadModel(r);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(AdminServiceTest, LoadErrorsAndTheDaemonKeepsServing) {
  Start();
  ASSERT_TRUE(Load(*client_, "good", path_).ok());
  // Missing file.
  auto missing = Load(*client_, "missing", "/nonexistent/model.gguf");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("/nonexistent/model.gguf"));
  // Not a GGUF file at all.
  auto garbage = Load(*client_, "garbage", TempFile("garbage.gguf", std::string(4096, 'z')));
  EXPECT_EQ(garbage.status().code(), absl::StatusCode::kInvalidArgument) << garbage.status();
  // A real model cut short: its tensors run past the end of the file.
  std::ifstream in(path_, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto truncated =
      Load(*client_, "truncated", TempFile("truncated.gguf", bytes.substr(0, bytes.size() / 2)));
  EXPECT_EQ(truncated.status().code(), absl::StatusCode::kInvalidArgument) << truncated.status();
  // Bad requests.
  EXPECT_EQ(Load(*client_, "bad name!", path_).status().code(),
            absl::StatusCode::kInvalidArgument);
  v1::LoadModelRequest kv;
  kv.set_name("kv");
  kv.set_path(path_);
  kv.set_kv_type("f8");
  EXPECT_THAT(std::string(client_->LoadModel(kv).status().message()), HasSubstr("kv_type"));
  v1::LoadModelRequest knob = kv;
  knob.set_kv_type("");
  (*knob.mutable_knobs())["MINFER_THREADS"] = "2";  // global: not per model
  EXPECT_EQ(client_->LoadModel(knob).status().code(), absl::StatusCode::kInvalidArgument);
  // An unknown tool-call family is refused, naming it and the known ones.
  v1::LoadModelRequest parser = kv;
  parser.set_kv_type("");
  parser.set_tool_parser("mistral");
  absl::Status refused = client_->LoadModel(parser).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("tool_parser 'mistral'"));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("hermes, llama3_json"));
  // A known one loads and shows in the status.
  parser.set_name("parsed");
  parser.set_tool_parser("llama3_json");
  parser.set_reasoning_parser("none");
  auto loaded = client_->LoadModel(parser);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->tool_parser(), "llama3_json");
  EXPECT_EQ(loaded->reasoning_parser(), "none");
  EXPECT_EQ(loaded->spec(), "");  // the MINFER_SPEC_K knob: off by default
  EXPECT_EQ(loaded->spec_k(), 0);
  EXPECT_EQ(loaded->memory().draft_bytes(), 0u);

  // Speculative decoding options that do not go together are refused at
  // the request, naming the field.
  v1::LoadModelRequest spec = kv;
  spec.set_name("spec");
  spec.set_kv_type("");
  spec.set_spec("draft");
  absl::Status no_draft = client_->LoadModel(spec).status();
  EXPECT_EQ(no_draft.code(), absl::StatusCode::kInvalidArgument) << no_draft;
  EXPECT_THAT(std::string(no_draft.message()), HasSubstr("draft: spec 'draft' needs a draft model"));
  spec.set_spec("medusa");
  EXPECT_THAT(std::string(client_->LoadModel(spec).status().message()),
              HasSubstr("spec: 'medusa' is not known: off, ngram or draft"));
  spec.set_spec("ngram");
  spec.set_spec_k(17);
  EXPECT_THAT(std::string(client_->LoadModel(spec).status().message()),
              HasSubstr("spec_k must be in [0, 16]"));
  // A draft that is not there fails the load, naming its path (a draft
  // alone means spec "draft").
  spec.set_spec("");
  spec.set_spec_k(0);
  spec.set_draft("/nonexistent/draft.gguf");
  absl::Status no_file = client_->LoadModel(spec).status();
  EXPECT_EQ(no_file.code(), absl::StatusCode::kNotFound) << no_file;
  EXPECT_THAT(std::string(no_file.message()), HasSubstr("draft '/nonexistent/draft.gguf'"));
  // A draft with another tokenizer: CheckDraftVocabulary's reason, after
  // the draft's path.
  auto llama = minfer::testing::TestModelPath("llama-tiny", "q8_0", 1);
  ASSERT_TRUE(llama.ok()) << llama.status();
  spec.set_name("spec-vocab");
  spec.set_draft(*llama);
  absl::Status vocab = client_->LoadModel(spec).status();
  EXPECT_EQ(vocab.code(), absl::StatusCode::kInvalidArgument) << vocab;
  EXPECT_THAT(std::string(vocab.message()), HasSubstr(absl::StrCat("draft '", *llama, "': ")));
  EXPECT_THAT(std::string(vocab.message()), HasSubstr("a draft must share the target's tokenizer"));
  auto vocab_status = client_->GetModelStatus("spec-vocab");
  ASSERT_TRUE(vocab_status.ok());
  EXPECT_EQ(vocab_status->state(), v1::MODEL_STATE_FAILED);
  EXPECT_THAT(vocab_status->reason(), HasSubstr("a draft must share the target's tokenizer"));
  EXPECT_EQ(vocab_status->spec(), "draft");
  EXPECT_EQ(vocab_status->draft(), *llama);

  // Failed loads stay visible with their reason until replaced.
  auto failed = client_->GetModelStatus("garbage");
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(failed->state(), v1::MODEL_STATE_FAILED);
  EXPECT_THAT(failed->reason(), HasSubstr("INVALID_ARGUMENT"));
  EXPECT_EQ(*client_->Health("garbage"), Health::NOT_SERVING);
  // The good model never noticed.
  const auto req = TextRequest("good", "still serving", 20);
  auto out = client_->Generate(req);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->token_ids, ReferenceGenerate(path_, req)->ids);
  EXPECT_EQ(*client_->Health(""), Health::SERVING);
  // Reloading a failed name replaces it.
  ASSERT_TRUE(Load(*client_, "garbage", path_).ok());
  v1::UnloadModelRequest u;
  u.set_name("missing");
  EXPECT_TRUE(client_->UnloadModel(u).ok());
  EXPECT_EQ(client_->GetModelStatus("missing").status().code(), absl::StatusCode::kNotFound);
}

// admin.proto: a corrupt or unsupported GGUF is INVALID_ARGUMENT (a missing
// file NOT_FOUND). Crafted copies of the good model came back UNIMPLEMENTED
// (experts, a tokenizer kind, "partial rotary" for what was a head count
// that disagrees with the tensors) or NOT_FOUND (a missing key), and one
// with an infinite RoPE base or a template that does not parse loaded.
TEST_F(AdminServiceTest, RefusedModelFilesAreInvalidArgumentWithTheRealReason) {
  Start();
  using minfer::testing::GgufEdit;
  struct Case {
    const char* name;
    GgufEdit edit;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {"experts",
       {.keys = [](gguf::GgufWriter& w) { w.SetU32("qwen2.expert_count", 8); }},
       {"key 'qwen2.expert_count' = 8", "mixture-of-experts"}},
      {"missing-key", {.drop_keys = {"qwen2.block_count"}}, {"missing key 'qwen2.block_count'"}},
      {"tokenizer",
       {.keys = [](gguf::GgufWriter& w) { w.SetString("tokenizer.ggml.pre", "deepseek-llm"); }},
       {"pre-tokenizer 'deepseek-llm' is not supported"}},
      {"head-count",
       {.keys =
            [](gguf::GgufWriter& w) {
              w.SetU32("qwen2.attention.head_count", 8);
              w.SetU32("qwen2.rope.dimension_count", 64);
            }},
       {"tensor 'blk.0.attn_k.weight' has shape [256, 128], expected [256, 64]",
        "'qwen2.embedding_length' 256 / 'qwen2.attention.head_count' 8"}},
      {"freq-base",
       {.keys =
            [](gguf::GgufWriter& w) {
              w.SetF32("qwen2.rope.freq_base", std::numeric_limits<float>::infinity());
            }},
       {"key 'qwen2.rope.freq_base' = inf"}},
      {"scaling",
       {.keys =
            [](gguf::GgufWriter& w) { w.SetString("qwen2.rope.scaling.type", "ntk-aware"); }},
       {"key 'qwen2.rope.scaling.type' = 'ntk-aware'"}},
      {"template",
       {.keys =
            [](gguf::GgufWriter& w) {
              w.SetString("tokenizer.chat_template", "{% for m in messages %}\n{{ m.content }");
            }},
       {"tokenizer.chat_template", "does not parse: line 2, column 14"}},
  };
  for (const Case& c : cases) {
    auto path = minfer::testing::RewriteGguf(path_, absl::StrCat(c.name, ".gguf"), c.edit);
    ASSERT_TRUE(path.ok()) << path.status();
    auto load = Load(*client_, c.name, *path);
    ASSERT_FALSE(load.ok()) << c.name;
    EXPECT_EQ(load.status().code(), absl::StatusCode::kInvalidArgument)
        << c.name << ": " << load.status();
    for (const std::string& say : c.says) {
      EXPECT_THAT(std::string(load.status().message()), HasSubstr(say)) << c.name;
    }
    EXPECT_THAT(std::string(load.status().message()), Not(HasSubstr("partial rotary")));
    auto failed = client_->GetModelStatus(c.name);
    ASSERT_TRUE(failed.ok());
    EXPECT_EQ(failed->state(), v1::MODEL_STATE_FAILED);
  }
  // The unedited copy loads: the edits are what was refused.
  auto copy = minfer::testing::RewriteGguf(path_, "copy.gguf", {});
  ASSERT_TRUE(copy.ok());
  EXPECT_TRUE(Load(*client_, "copy", *copy).ok());
}

// Names and paths a client sends are checked at the service and quoted
// short: no error copies a megabyte back into the status (or the log, or a
// metrics label).
TEST_F(AdminServiceTest, LongNamesAndPathsAreRefusedBounded) {
  Start();
  ASSERT_TRUE(Load(*client_, "a", path_).ok());
  const std::string huge(1 << 20, 'n');
  const std::string quoted = "'" + std::string(48, 'n') + "...' (1048576 bytes)";
  auto load = Load(*client_, huge, path_);
  EXPECT_EQ(load.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(load.status().message()), "name must be at most 64 characters, got " + quoted);
  auto path = Load(*client_, "b", "/models/" + huge);
  EXPECT_EQ(path.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(path.status().message()),
            "path must be at most 4096 bytes, got '/models/" + std::string(40, 'n') +
                "...' (1048584 bytes)");
  v1::UnloadModelRequest u;
  u.set_name(huge);
  EXPECT_EQ(std::string(client_->UnloadModel(u).status().message()),
            "name must be at most 64 characters, got " + quoted);
  EXPECT_EQ(std::string(client_->GetModelStatus(huge).status().message()),
            "name must be at most 64 characters, got " + quoted);
  EXPECT_EQ(std::string(client_->SetAlias(huge, "a").status().message()),
            "alias must be at most 64 characters, got " + quoted);
  EXPECT_EQ(std::string(client_->SetAlias("prod", huge).status().message()),
            "model must be at most 64 characters, got " + quoted);
  EXPECT_EQ(std::string(client_->DeleteAlias(huge).message()),
            "alias must be at most 64 characters, got " + quoted);
  EXPECT_EQ(std::string(client_->GetKnob("MINFER_PREFILL_CHUNK", huge).status().message()),
            "model must be at most 64 characters, got " + quoted);
  EXPECT_EQ(std::string(client_->GetKnob(huge).status().message()),
            "name must be at most 64 characters, got " + quoted);
  v1::SetKnobRequest k;
  k.set_name("MINFER_NO_FUSE_FFN");
  k.set_value("1");
  k.set_model(huge);
  EXPECT_EQ(std::string(client_->SetKnob(k).status().message()),
            "model must be at most 64 characters, got " + quoted);
  EXPECT_EQ(std::string(client_->ListKnobs(huge).status().message()),
            "model must be at most 64 characters, got " + quoted);
  // Still serving; and the refused load is counted without its name.
  EXPECT_TRUE(client_->Generate(TextRequest("a", "hi", 3)).ok());
  const std::string metrics = daemon_->metrics().Serialize();
  EXPECT_THAT(metrics, HasSubstr(
      "minfer_requests_total{api=\"grpc\",code=\"INVALID_ARGUMENT\",method=\"LoadModel\",model=\"\"} 1"));
  EXPECT_THAT(metrics, Not(HasSubstr("nnnnnnnn")));
}

TEST_F(AdminServiceTest, UndecodableAdminRequestsAreInvalidArgumentAfterTheToken) {
  DaemonConfig c = testing::TestConfig();
  c.admin_token = "t";
  config_token_ = "t";
  Start(c);
  v1::LoadModelRequest r;
  r.set_name("a");
  r.set_path(std::string("/models/\xc3\x28.gguf"));
  std::string bytes;
  ASSERT_TRUE(r.SerializePartialToString(&bytes));
  grpc::Status s = RawCall(client_->channel(), "/minfer.v1.AdminService/LoadModel", bytes, "t");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "the request could not be decoded: path is not valid UTF-8 (byte 8 of 15); string "
            "fields must be UTF-8 text");
  // Without the token, nothing is said about the bytes.
  s = RawCall(client_->channel(), "/minfer.v1.AdminService/LoadModel", bytes);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  const std::string garbage("\xff\xff\xff", 3);
  s = RawCall(client_->channel(), "/minfer.v1.AdminService/SetAlias", garbage, "t");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "the request could not be decoded: its 3 bytes are not a protobuf message "
            "(minfer.v1.SetAliasRequest)");
  s = RawCall(client_->channel(), "/minfer.v1.AdminService/SetAlias", garbage);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(client_->ListModels().ok());
}

// A FIFO used to block the load's open() forever: LOADING for good, unload
// refused, shutdown hung. It is refused at once now.
TEST_F(AdminServiceTest, LoadingAFifoFailsAtOnce) {
  Start();
  const std::string fifo = absl::StrCat(std::getenv("TEST_TMPDIR"), "/model-fifo.gguf");
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto loading = std::async(std::launch::async, [&] { return Load(*client_, "f", fifo); });
  if (loading.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    ADD_FAILURE() << "the load of a FIFO blocked";
    int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // unblocks the old open()
    if (w >= 0) ::close(w);
  }
  absl::StatusOr<v1::ModelStatus> loaded = loading.get();
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument) << loaded.status();
  EXPECT_THAT(std::string(loaded.status().message()),
              HasSubstr("'" + fifo + "' is a FIFO, not a regular file"));
  auto st = client_->GetModelStatus("f");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->state(), v1::MODEL_STATE_FAILED);
  v1::UnloadModelRequest u;
  u.set_name("f");
  EXPECT_TRUE(client_->UnloadModel(u).ok());
}

TEST_F(AdminServiceTest, CudaOnABuildWithoutCudaIsFailedPrecondition) {
  for (const auto& p : runtime::DeviceBackendProviders()) {
    if (p.name == "cuda") GTEST_SKIP() << "this build has the CUDA backend";
  }
  Start();
  v1::LoadModelRequest r;
  r.set_name("g");
  r.set_path(path_);
  r.set_backend("cuda");
  auto out = client_->LoadModel(r);
  // Not UNAVAILABLE: the API keeps that (retryable) code for a draining server.
  EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition) << out.status();
  EXPECT_EQ(std::string(out.status().message()),
            "backend: this minferd was built without the CUDA backend (bazel build "
            "--config=cuda); use backend cpu or auto");
  EXPECT_EQ(client_->GetModelStatus("g").status().code(), absl::StatusCode::kNotFound);
}

// Slot::Stop waits for a load in progress; Shutdown with a timeout does not
// wait past it (a load stuck in I/O must not hold the process).
TEST_F(AdminServiceTest, ShutdownDoesNotWaitForAStuckLoad) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false, reached = false;
  DaemonTestHooks hooks;
  hooks.before_model_load = [&](const std::string&) {
    std::unique_lock<std::mutex> lock(mu);
    reached = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  };
  Start(testing::TestConfig(), hooks);
  absl::StatusOr<v1::ModelStatus> loaded;
  std::thread load([&] { loaded = Load(*client_, "stuck", path_); });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return reached; });
  }
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(daemon_->Shutdown(std::chrono::milliseconds(300)));
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 3.0);
  load.join();  // the server's shutdown ended the LoadModel stream
  EXPECT_FALSE(loaded.ok());
  EXPECT_FALSE(daemon_->Shutdown());  // idempotent: the first call's answer
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  daemon_.reset();  // joins the slots' stop, now that the load can end
}

TEST_F(AdminServiceTest, MemoryAdmissionRefusesWithTheFigures) {
  DaemonConfig c = testing::TestConfig();
  c.memory_limit = 64u << 20;  // 64 MiB
  Start(c);
  // n_ctx 4096 x 8 sequences of f32 KV: (8 x 256 + 1) blocks of 16 rows x
  // {K,V} x 2 layers x 128 x 4 bytes, just over 64 MiB of KV.
  v1::LoadModelRequest r;
  r.set_name("big");
  r.set_path(path_);
  r.set_n_ctx(4096);
  r.set_parallel(8);
  r.set_kv_type("f32");
  auto big = client_->LoadModel(r);
  ASSERT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted) << big.status();
  auto file = gguf::GgufFile::Open(path_);
  uint64_t weights = 0;
  for (const auto& t : (*file)->tensors()) weights += t.nbytes;
  const uint64_t kv = (8ull * 4096 / 16 + 1) * 16 * 2 * 2 * 128 * 4;
  // Scratch: the arena of the largest batched graph, 512 tokens with 8
  // output rows (tiny: n_embd 256, n_embd_kv 128, n_ff 512, vocab 1046).
  auto hp = models::DecoderModel::FromGguf(**file);
  ASSERT_TRUE(hp.ok());
  const uint64_t scratch = models::BatchScratchBound((*hp)->hparams(), 512, 8, 4096 / 16);
  const uint64_t total = weights + kv + scratch;
  const std::string msg(big.status().message());
  EXPECT_THAT(msg, HasSubstr(absl::StrCat("weights 1.5 MiB (", weights, " B)")));
  EXPECT_THAT(msg, HasSubstr(absl::StrCat("KV 64.0 MiB (", kv, " B)")));
  EXPECT_THAT(msg, HasSubstr(absl::StrCat("(", scratch, " B)")));
  EXPECT_THAT(msg, HasSubstr(absl::StrCat("= ", absl::StrFormat("%.1f", total / 1048576.0),
                                          " MiB (", total, " B)")));
  EXPECT_THAT(msg, HasSubstr("the memory limit is 64.0 MiB (67108864 B)"));
  auto failed = client_->GetModelStatus("big");
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(failed->state(), v1::MODEL_STATE_FAILED);
  EXPECT_THAT(failed->reason(), HasSubstr("RESOURCE_EXHAUSTED"));
  // A smaller configuration of the same model fits, and serves.
  auto small = Load(*client_, "small", path_, 1, 256);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->memory().reserved_bytes(),
            weights + (256ull / 16 + 1) * 16 * 2 * 2 * 128 * 4 +
                models::BatchScratchBound((*hp)->hparams(), 512, 1, 256 / 16));
  EXPECT_TRUE(client_->Generate(TextRequest("small", "fits", 5)).ok());
  // What it reserved counts against the next load.
  auto server = client_->GetServerStatus();
  EXPECT_EQ(server->memory_limit_bytes(), 64u << 20);
  EXPECT_EQ(server->memory_reserved_bytes(), small->memory().reserved_bytes());
  // (6 x 256 + 1) blocks of 16 rows of f32 KV (~50 MiB) with its weights
  // and activations fits the limit alone, not beside "small".
  r.set_name("big2");
  r.set_n_ctx(4096);
  r.set_parallel(6);
  auto refused = client_->LoadModel(r);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr(absl::StrCat(small->memory().reserved_bytes(), " B) reserved by other")));
}

// A draft model is admitted with its target: its weights, its KV pool
// (parallel x n_ctx, counted as f32) and its activations join the
// target's, and a draft that does not fit beside its target is refused with
// the figures, naming the draft.
TEST_F(AdminServiceTest, DraftModelsAreAdmittedWithTheirTarget) {
  DaemonConfig c = testing::TestConfig();
  c.memory_limit = 64u << 20;  // 64 MiB
  Start(c);
  auto draft = minfer::testing::TestModelPath("tiny", "q4_0", 1);
  ASSERT_TRUE(draft.ok()) << draft.status();
  auto weights_of = [](const std::string& path) {
    auto file = gguf::GgufFile::Open(path);
    uint64_t w = 0;
    for (const auto& t : (*file)->tensors()) w += t.nbytes;
    return w;
  };
  const uint64_t weights = weights_of(path_), draft_weights = weights_of(*draft);
  auto file = gguf::GgufFile::Open(path_);
  ASSERT_TRUE(file.ok());
  auto hp = models::DecoderModel::FromGguf(**file);
  ASSERT_TRUE(hp.ok());
  // (6 x 256 + 1) blocks of 16 rows of f32 KV (~50 MiB) fits the limit
  // alone (MemoryAdmissionRefusesWithTheFigures), not twice.
  v1::LoadModelRequest r;
  r.set_name("big");
  r.set_path(path_);
  r.set_n_ctx(4096);
  r.set_parallel(6);
  r.set_kv_type("f32");
  r.set_draft(*draft);
  auto big = client_->LoadModel(r);
  ASSERT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted) << big.status();
  const uint64_t kv = (6ull * 4096 / 16 + 1) * 16 * 2 * 2 * 128 * 4;
  // The target's graphs hold a row per sequence and its draft rows
  // (runtime::SpecRows); the draft engine's, a row per sequence.
  const uint64_t scratch =
      models::BatchScratchBound((*hp)->hparams(), 512, 6 + runtime::SpecRows(6), 4096 / 16);
  const uint64_t draft_scratch = models::BatchScratchBound((*hp)->hparams(), 512, 6, 4096 / 16);
  const uint64_t total = weights + kv + scratch + draft_weights + kv + draft_scratch;
  const std::string msg(big.status().message());
  EXPECT_THAT(msg, HasSubstr("model 'big' does not fit in memory"));
  EXPECT_THAT(msg, HasSubstr(absl::StrCat("weights ", absl::StrFormat("%.1f", (weights + draft_weights) / 1048576.0),
                                          " MiB (", weights + draft_weights, " B)")));
  EXPECT_THAT(msg, HasSubstr(absl::StrCat("KV ", absl::StrFormat("%.1f", 2 * kv / 1048576.0),
                                          " MiB (", 2 * kv, " B)")));
  EXPECT_THAT(msg, HasSubstr(absl::StrCat("= ", absl::StrFormat("%.1f", total / 1048576.0),
                                          " MiB (", total, " B)")));
  EXPECT_THAT(msg, HasSubstr("the memory limit is 64.0 MiB (67108864 B)"));
  EXPECT_THAT(msg, HasSubstr(absl::StrCat("the figures include draft '", *draft, "': weights ")));
  EXPECT_THAT(msg, HasSubstr(absl::StrCat("(", draft_weights, " B) + KV ")));
  auto failed = client_->GetModelStatus("big");
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(failed->state(), v1::MODEL_STATE_FAILED);
  // A smaller configuration with its draft fits, reserves both, and serves
  // the tokens of a plain engine.
  r.set_name("small");
  r.set_n_ctx(256);
  r.set_parallel(1);
  std::vector<v1::LoadModelResponse> progress;
  auto small =
      client_->LoadModel(r, [&](const v1::LoadModelResponse& p) { progress.push_back(p); });
  ASSERT_TRUE(small.ok()) << small.status();
  // Progress runs over both files' weights.
  auto draft_file = gguf::GgufFile::Open(*draft);
  ASSERT_TRUE(draft_file.ok());
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(progress.back().bytes_total(),
            (*file)->file_size() - (*file)->data_offset() + (*draft_file)->file_size() -
                (*draft_file)->data_offset());
  EXPECT_EQ(progress.back().bytes_done(), progress.back().bytes_total());
  const uint64_t small_kv = (256ull / 16 + 1) * 16 * 2 * 2 * 128 * 4;
  const uint64_t small_scratch =
      models::BatchScratchBound((*hp)->hparams(), 512, 1 + runtime::SpecRows(1), 256 / 16);
  const uint64_t small_draft_scratch =
      models::BatchScratchBound((*hp)->hparams(), 512, 1, 256 / 16);
  EXPECT_EQ(small->memory().reserved_bytes(),
            weights + small_kv + small_scratch + draft_weights + small_kv + small_draft_scratch);
  EXPECT_EQ(small->spec(), "draft");
  EXPECT_EQ(small->spec_k(), 4);
  EXPECT_EQ(small->draft(), *draft);
  // The draft's weights and its pool (f32 on the CPU) at least.
  EXPECT_GE(small->memory().draft_bytes(), draft_weights + small_kv);
  EXPECT_EQ(small->memory().total_bytes(),
            small->memory().weights_bytes() + small->memory().kv_bytes() +
                small->memory().scratch_bytes() + small->memory().draft_bytes());
  const auto req = TextRequest("small", "drafted", 12);
  auto out = client_->Generate(req);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->token_ids, ReferenceGenerate(path_, req, 256)->ids);
}

TEST_F(AdminServiceTest, HealthFollowsLoadUnloadAndDrain) {
  // Hold the load in LOADING until the test lets it go.
  std::mutex mu;
  std::condition_variable cv;
  bool release = false, reached = false;
  DaemonTestHooks hooks;
  hooks.before_model_load = [&](const std::string& name) {
    std::unique_lock<std::mutex> lock(mu);
    reached = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  };
  Start(testing::TestConfig(), hooks);
  EXPECT_EQ(*client_->Health(""), Health::SERVING);
  EXPECT_EQ(*client_->Health("minfer.v1.GenerationService"), Health::SERVING);
  EXPECT_EQ(*client_->Health("minfer.v1.AdminService"), Health::SERVING);
  EXPECT_EQ(client_->Health("a").status().code(), absl::StatusCode::kNotFound);

  absl::StatusOr<v1::ModelStatus> loaded;
  std::thread load([&] { loaded = Load(*client_, "a", path_); });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return reached; });
  }
  EXPECT_EQ(*client_->Health("a"), Health::NOT_SERVING);
  EXPECT_EQ(client_->GetModelStatus("a")->state(), v1::MODEL_STATE_LOADING);
  auto early = client_->Generate(TextRequest("a", "too early", 5));
  EXPECT_EQ(early.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(early.status().message()), HasSubstr("loading"));
  v1::UnloadModelRequest u;
  u.set_name("a");
  EXPECT_EQ(client_->UnloadModel(u).status().code(), absl::StatusCode::kFailedPrecondition);
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  load.join();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*client_->Health("a"), Health::SERVING);
  ASSERT_TRUE(client_->SetAlias("prod", "a").ok());
  EXPECT_EQ(*client_->Health("prod"), Health::SERVING);
  ASSERT_TRUE(client_->DeleteAlias("prod").ok());
  EXPECT_EQ(*client_->Health("prod"), Health::NOT_SERVING);
  ASSERT_TRUE(client_->UnloadModel(u).ok());
  EXPECT_EQ(*client_->Health("a"), Health::NOT_SERVING);

  ASSERT_TRUE(Load(*client_, "b", path_).ok());
  EXPECT_EQ(*client_->Health("b"), Health::SERVING);
  daemon_->Drain(std::chrono::seconds(1));
  EXPECT_EQ(*client_->Health(""), Health::NOT_SERVING);
  EXPECT_EQ(*client_->Health("b"), Health::NOT_SERVING);
  EXPECT_EQ(*client_->Health("minfer.v1.GenerationService"), Health::NOT_SERVING);
  EXPECT_EQ(client_->Generate(TextRequest("b", "x", 2)).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(Load(*client_, "c", path_).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(AdminServiceTest, KnobsOverTheApi) {
  Start();
  ASSERT_TRUE(Load(*client_, "a", path_).ok());
  auto list = client_->ListKnobs();
  ASSERT_TRUE(list.ok());
  // Exactly the registry.
  const auto registry = KnobRegistry::Global().List();
  ASSERT_EQ(list->knobs_size(), static_cast<int>(registry.size()));
  for (int i = 0; i < list->knobs_size(); ++i) {
    EXPECT_EQ(list->knobs(i).name(), registry[i].spec.name);
    EXPECT_EQ(list->knobs(i).default_value(), registry[i].spec.default_value);
    EXPECT_FALSE(list->knobs(i).help().empty());
  }
  // Global set and reset; the registry sees it.
  v1::SetKnobRequest set;
  set.set_name("MINFER_PREFILL_CHUNK");
  set.set_value("64");
  auto k = client_->SetKnob(set);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->value(), "64");
  EXPECT_EQ(KnobRegistry::Global().GetInt("MINFER_PREFILL_CHUNK"), 64);
  EXPECT_EQ(client_->GetKnob("MINFER_PREFILL_CHUNK")->value(), "64");
  set.set_reset(true);
  ASSERT_TRUE(client_->SetKnob(set).ok());
  EXPECT_EQ(KnobRegistry::Global().GetInt("MINFER_PREFILL_CHUNK"), 0);  // the default: by placement

  // Per model: applied by the slot between steps; generation still equals
  // the engine's (the fusion switch changes the graph, not the math).
  const auto req = TextRequest("a", "A prompt of some length to prefill", 30);
  auto before = client_->Generate(req);
  ASSERT_EQ(client_->GetModelStatus("a")->kv_pool().token_budget(), 512);
  v1::SetKnobRequest per;
  per.set_name("MINFER_PREFILL_CHUNK");
  per.set_value("2");
  per.set_model("a");
  auto pk = client_->SetKnob(per);
  ASSERT_TRUE(pk.ok()) << pk.status();
  EXPECT_TRUE(pk->overridden());
  EXPECT_EQ(pk->value(), "2");
  EXPECT_EQ(KnobRegistry::Global().GetInt("MINFER_PREFILL_CHUNK"), 0);  // global untouched
  EXPECT_EQ(client_->GetModelStatus("a")->knobs().at("MINFER_PREFILL_CHUNK"), "2");
  EXPECT_EQ(client_->GetKnob("MINFER_PREFILL_CHUNK", "a")->value(), "2");
  EXPECT_EQ(client_->GetKnob("MINFER_PREFILL_CHUNK")->value(), "0");
  per.set_name("MINFER_NO_FUSE_QKV");
  per.set_value("1");
  ASSERT_TRUE(client_->SetKnob(per).ok());
  auto after = client_->Generate(req);
  ASSERT_TRUE(before.ok() && after.ok());
  EXPECT_EQ(after->token_ids, before->token_ids);
  EXPECT_EQ(after->token_ids, ReferenceGenerate(path_, req)->ids);
  // The batched engine's token budget, per model, between steps.
  per.set_name("MINFER_BATCH_TOKENS");
  per.set_value("64");
  ASSERT_TRUE(client_->SetKnob(per).ok());
  auto third = client_->Generate(req);
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->token_ids, before->token_ids);
  EXPECT_EQ(client_->GetModelStatus("a")->kv_pool().token_budget(), 64);

  // Errors.
  v1::SetKnobRequest bad;
  bad.set_name("MINFER_NOPE");
  bad.set_value("1");
  EXPECT_EQ(client_->SetKnob(bad).status().code(), absl::StatusCode::kNotFound);
  bad.set_name("MINFER_PREFILL_CHUNK");
  bad.set_value("lots");
  EXPECT_EQ(client_->SetKnob(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad.set_name("MINFER_THREADS");
  bad.set_value("2");
  bad.set_model("a");
  EXPECT_EQ(client_->SetKnob(bad).status().code(), absl::StatusCode::kInvalidArgument);
  // Read once per process: refused rather than shown changed but unused.
  v1::SetKnobRequest restart;
  restart.set_name("MINFER_THREADS");
  restart.set_value("1");
  auto rs = client_->SetKnob(restart);
  EXPECT_EQ(rs.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(rs.status().message()), HasSubstr("restart"));
  EXPECT_EQ(client_->GetKnob("MINFER_THREADS")->effect(), "restart");
  EXPECT_EQ(KnobRegistry::Global().GetInt("MINFER_THREADS"), 0);
  bad.set_name("MINFER_CACHE_TYPE");
  bad.set_value("f16");
  auto reload = client_->SetKnob(bad);
  EXPECT_EQ(reload.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(reload.status().message()), HasSubstr("LoadModel"));
  bad.set_name("MINFER_NO_FUSE_FFN");
  bad.set_value("1");
  bad.set_model("ghost");
  EXPECT_EQ(client_->SetKnob(bad).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(AdminServiceTest, AliasRules) {
  Start();
  ASSERT_TRUE(Load(*client_, "a", path_).ok());
  ASSERT_TRUE(Load(*client_, "b", path_).ok());
  EXPECT_EQ(client_->SetAlias("b", "a").status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(client_->SetAlias("prod", "ghost").status().code(), absl::StatusCode::kNotFound);
  auto set = client_->SetAlias("prod", "a");
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(set->previous_model(), "");
  EXPECT_EQ(client_->SetAlias("prod2", "prod").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Load(*client_, "prod", path_).status().code(), absl::StatusCode::kAlreadyExists);
  auto moved = client_->SetAlias("prod", "b");
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(moved->previous_model(), "a");
  v1::UnloadModelRequest u;
  u.set_name("b");
  auto refused = client_->UnloadModel(u);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("prod"));
  u.set_name("prod");
  EXPECT_EQ(client_->UnloadModel(u).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->GetModelStatus("prod")->name(), "b");
  EXPECT_THAT(client_->GetModelStatus("b")->aliases(), ::testing::ElementsAre("prod"));
  auto list = client_->ListAliases();
  ASSERT_EQ(list->aliases_size(), 1);
  EXPECT_EQ(list->aliases(0).model(), "b");
  ASSERT_TRUE(client_->DeleteAlias("prod").ok());
  EXPECT_EQ(client_->DeleteAlias("prod").code(), absl::StatusCode::kNotFound);
  u.set_name("b");
  EXPECT_TRUE(client_->UnloadModel(u).ok());
}

TEST_F(AdminServiceTest, AdminTokenIsRequiredWhenConfigured) {
  DaemonConfig c = testing::TestConfig();
  c.admin_token = "s3cret";
  config_token_ = "s3cret";
  Start(c);
  ASSERT_TRUE(Load(*client_, "a", path_).ok());
  auto anonymous = ClientFor(*daemon_);
  EXPECT_EQ(anonymous->ListModels().status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Load(*anonymous, "b", path_).status().code(), absl::StatusCode::kUnauthenticated);
  auto wrong = ClientFor(*daemon_, "s3cres");
  EXPECT_EQ(wrong->ListKnobs().status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(client_->ListModels().ok());
  // Generation and health stay open.
  EXPECT_TRUE(anonymous->Generate(TextRequest("a", "hi", 3)).ok());
  EXPECT_EQ(*anonymous->Health("a"), Health::SERVING);
}

TEST_F(AdminServiceTest, ServesTlsWhenConfigured) {
  if (access("/usr/bin/openssl", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/openssl to make a certificate";
  const std::string dir = std::getenv("TEST_TMPDIR");
  const std::string cert = dir + "/cert.pem", key = dir + "/key.pem";
  auto made = minfer::testing::RunCommand(
      {"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out",
       cert, "-days", "1", "-subj", "/CN=localhost", "-addext",
       "subjectAltName=DNS:localhost,IP:127.0.0.1"});
  ASSERT_TRUE(made.ok() && made->exit_code == 0) << (made.ok() ? made->err : "");
  DaemonConfig c = testing::TestConfig();
  c.tls_cert_file = cert;
  c.tls_key_file = key;
  c.admin_token = "t";
  config_token_ = "t";
  auto d = Daemon::Start(c);
  ASSERT_TRUE(d.ok()) << d.status();
  daemon_ = std::move(*d);
  client::ClientOptions o;
  o.address = daemon_->address();
  o.token = "t";
  o.tls = true;
  o.ca_cert_file = cert;
  o.tls_server_name = "localhost";
  auto tls = client::MinferClient::Create(o);
  ASSERT_TRUE(tls.ok());
  ASSERT_TRUE(Load(**tls, "a", path_).ok());
  const auto req = TextRequest("a", "over TLS", 12);
  auto out = (*tls)->Generate(req);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->token_ids, ReferenceGenerate(path_, req)->ids);
  // A plaintext client gets nowhere.
  auto plain = ClientFor(*daemon_, "t");
  EXPECT_EQ(plain->ListModels().status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(AdminServiceTest, TlsKeyOfAnotherCertificateIsNamedAtStart) {
  if (access("/usr/bin/openssl", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/openssl to make a certificate";
  const std::string dir = std::getenv("TEST_TMPDIR");
  const std::string cert = dir + "/mismatch-cert.pem", key = dir + "/mismatch-key.pem",
                    other = dir + "/other-key.pem";
  for (const auto& [c, k] : {std::pair{cert, key}, std::pair{dir + "/other-cert.pem", other}}) {
    auto made = minfer::testing::RunCommand(
        {"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", k,
         "-out", c, "-days", "1", "-subj", "/CN=localhost"});
    ASSERT_TRUE(made.ok() && made->exit_code == 0) << (made.ok() ? made->err : "");
  }
  DaemonConfig c = testing::TestConfig();
  c.tls_cert_file = cert;
  c.tls_key_file = other;
  auto d = Daemon::Start(c);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << d.status();
  EXPECT_EQ(std::string(d.status().message()),
            "TLS key '" + other + "' does not match the certificate '" + cert +
                "': the certificate's public key belongs to another private key");
  c.tls_key_file = TempFile("not-a-key.pem", "hello");
  d = Daemon::Start(c);
  EXPECT_EQ(std::string(d.status().message()),
            "TLS key '" + c.tls_key_file +
                "' holds no PEM private key (or an encrypted one, which minferd cannot unlock)");
  c.tls_key_file = key;
  c.tls_cert_file = key;  // a key where the certificate should be
  d = Daemon::Start(c);
  EXPECT_EQ(std::string(d.status().message()),
            "TLS certificate '" + key + "' holds no PEM certificate");
  c.tls_cert_file = cert;
  d = Daemon::Start(c);
  EXPECT_TRUE(d.ok()) << d.status();
}

// Server reflection by hand: a generic stub and the proto wire format (the
// v1alpha messages' C++ classes live inside libgrpc++_reflection). Both
// versions' messages are the same, field for field.
std::vector<std::string> ReflectionQuery(const std::shared_ptr<grpc::Channel>& channel,
                                         int field, const std::string& value, int want_field,
                                         const std::string& version = "v1alpha") {
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  auto call = stub.PrepareCall(
      &ctx, absl::StrCat("/grpc.reflection.", version, ".ServerReflection/ServerReflectionInfo"),
      &cq);
  auto wait = [&] {
    void* tag;
    bool ok = false;
    cq.Next(&tag, &ok);
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  EXPECT_TRUE(wait());
  std::string req;
  req.push_back(static_cast<char>(field << 3 | 2));
  req.push_back(static_cast<char>(value.size()));
  req += value;
  grpc::Slice slice(req);
  grpc::ByteBuffer buf(&slice, 1);
  call->Write(buf, reinterpret_cast<void*>(2));
  EXPECT_TRUE(wait());
  grpc::ByteBuffer reply;
  call->Read(&reply, reinterpret_cast<void*>(3));
  EXPECT_TRUE(wait());
  call->WritesDone(reinterpret_cast<void*>(4));
  wait();
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  wait();
  std::vector<grpc::Slice> slices;
  (void)reply.Dump(&slices);
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  google::protobuf::UnknownFieldSet response;
  EXPECT_TRUE(response.ParseFromString(bytes));
  std::vector<std::string> out;
  for (int i = 0; i < response.field_count(); ++i) {
    if (response.field(i).number() != want_field) continue;
    google::protobuf::UnknownFieldSet inner;
    inner.ParseFromString(response.field(i).length_delimited());
    for (int j = 0; j < inner.field_count(); ++j) {
      if (inner.field(j).type() == google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) {
        out.push_back(inner.field(j).length_delimited());
      }
    }
  }
  return out;
}

// grpc.reflection.v1 (what current grpcurl asks first; it answered
// UNIMPLEMENTED) and v1alpha describe the same API.
class ReflectionTest : public AdminServiceTest,
                       public ::testing::WithParamInterface<const char*> {};

TEST_P(ReflectionTest, DescribesTheApi) {
  const std::string version = GetParam();
  Start();
  // list_services (field 7) -> list_services_response (6) of ServiceResponse.
  std::vector<std::string> services;
  for (const std::string& s : ReflectionQuery(client_->channel(), 7, "*", 6, version)) {
    google::protobuf::UnknownFieldSet svc;
    svc.ParseFromString(s);
    services.push_back(svc.field(0).length_delimited());
  }
  EXPECT_THAT(services, ::testing::IsSupersetOf({"minfer.v1.GenerationService",
                                                 "minfer.v1.AdminService",
                                                 "grpc.health.v1.Health",
                                                 "grpc.reflection.v1.ServerReflection",
                                                 "grpc.reflection.v1alpha.ServerReflection"}));
  // file_containing_symbol (4) -> file_descriptor_response (4).
  for (const char* symbol :
       {"minfer.v1.GenerationService", "grpc.health.v1.Health"}) {
    std::vector<std::string> files = ReflectionQuery(client_->channel(), 4, symbol, 4, version);
    ASSERT_FALSE(files.empty()) << symbol;
    bool found = false;
    for (const std::string& f : files) {
      google::protobuf::FileDescriptorProto fd;
      ASSERT_TRUE(fd.ParseFromString(f));
      for (const auto& svc : fd.service()) {
        if (absl::StrCat(fd.package(), ".", svc.name()) != symbol) continue;
        found = true;
        if (svc.name() == "GenerationService") {
          EXPECT_EQ(fd.name(), "minfer/v1/generation.proto");
          EXPECT_EQ(svc.method(0).name(), "Generate");
          EXPECT_TRUE(svc.method(0).server_streaming());
        }
      }
    }
    EXPECT_TRUE(found) << symbol;
  }
  // file_by_filename (3), and a method's symbol.
  for (auto [field, value] : {std::pair{3, "minfer/v1/admin.proto"},
                              std::pair{4, "minfer.v1.AdminService.LoadModel"}}) {
    std::vector<std::string> files = ReflectionQuery(client_->channel(), field, value, 4, version);
    ASSERT_FALSE(files.empty()) << value;
    google::protobuf::FileDescriptorProto fd;
    ASSERT_TRUE(fd.ParseFromString(files[0]));
    EXPECT_EQ(fd.name(), "minfer/v1/admin.proto");
    ASSERT_GT(fd.service_size(), 0);
    EXPECT_EQ(fd.service(0).name(), "AdminService");
  }
  // An unknown symbol: error_response (7), whose one string is the message.
  EXPECT_EQ(ReflectionQuery(client_->channel(), 4, "no.such.Symbol", 7, version).size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Versions, ReflectionTest, ::testing::Values("v1", "v1alpha"));

std::string HttpGet(const std::string& address, const std::string& path) {
  std::vector<std::string> hp = absl::StrSplit(address, ':');
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(std::stoi(hp[1])));
  inet_pton(AF_INET, hp[0].c_str(), &sa.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    close(fd);
    return "";
  }
  std::string req = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", address, "\r\n\r\n");
  (void)!write(fd, req.data(), req.size());
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, n);
  close(fd);
  return out;
}

TEST_F(AdminServiceTest, MetricsAreServedOverHttp) {
  DaemonConfig c = testing::TestConfig();
  c.metrics_listen = "127.0.0.1:0";
  Start(c);
  ASSERT_TRUE(Load(*client_, "a", path_, 1, 256).ok());
  int completion = 0;
  for (int i = 0; i < 3; ++i) {
    auto r = client_->Generate(TextRequest("a", "count me", 10 + i));
    ASSERT_TRUE(r.ok());
    completion += r->usage.completion_tokens();
  }
  EXPECT_FALSE(client_->Generate(TextRequest("a", "bad", 0)).ok());
  // The server counts an RPC when its reactor is done, which can come just
  // after the client saw the final status: poll until both counters landed.
  std::string body;
  for (int attempt = 0; attempt < 100; ++attempt) {
    body = HttpGet(daemon_->metrics_address(), "/metrics");
    if (absl::StrContains(body, "method=\"Generate\",model=\"a\"} 3") &&
        absl::StrContains(body, "code=\"INVALID_ARGUMENT\",method=\"Generate\"")) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_THAT(body, HasSubstr("200 OK"));
  EXPECT_THAT(body, HasSubstr(
      "minfer_requests_total{api=\"grpc\",code=\"OK\",method=\"Generate\",model=\"a\"} 3"));
  EXPECT_THAT(body, HasSubstr(
      "minfer_requests_total{api=\"grpc\",code=\"INVALID_ARGUMENT\",method=\"Generate\",model=\"\"} 1"));
  EXPECT_THAT(body, HasSubstr(absl::StrCat("minfer_completion_tokens_total{model=\"a\"} ",
                                           completion)));
  EXPECT_THAT(body, HasSubstr("minfer_time_to_first_token_seconds_count{model=\"a\"} 3"));
  EXPECT_THAT(body, HasSubstr(absl::StrCat(
                        "minfer_inter_token_latency_seconds_count{model=\"a\"} ",
                        completion - 3)));
  EXPECT_THAT(body, HasSubstr("minfer_slot_state{model=\"a\",state=\"ready\"} 1"));
  EXPECT_THAT(body, HasSubstr(absl::StrCat("minfer_slot_memory_bytes{kind=\"kv\",model=\"a\"} ",
                                           (256 / 16 + 1) * 16 * 2 * 2 * 128 * 4)));
  EXPECT_THAT(body, HasSubstr("minfer_kv_blocks{model=\"a\",state=\"used\"} 0"));
  EXPECT_THAT(body, HasSubstr("minfer_kv_cache_usage_ratio{model=\"a\"} 0"));
  EXPECT_THAT(body, HasSubstr("minfer_step_sequences_count{model=\"a\"} "));
  EXPECT_THAT(body, HasSubstr("minfer_preemptions_total{model=\"a\"} 0"));
  EXPECT_THAT(body, HasSubstr("minfer_queue_depth{model=\"a\"} 0"));
  EXPECT_THAT(body, HasSubstr("minfer_backend_memory_bytes{model=\"a\"} "));
}

// /metrics never prints NaN: prometheus-cpp's Exposer added its own
// exposer_request_latencies summary, whose quantiles read "Nan" on the first
// scrape and whenever none fell in its window. Scraped fresh (nothing
// observed yet anywhere) and after traffic.
TEST_F(AdminServiceTest, MetricsNeverPrintNan) {
  DaemonConfig c = testing::TestConfig();
  c.metrics_listen = "127.0.0.1:0";
  Start(c);
  auto no_nan = [](const std::string& body) {
    for (absl::string_view line : absl::StrSplit(body, '\n')) {
      EXPECT_FALSE(absl::StrContains(absl::AsciiStrToLower(line), "nan")) << line;
    }
  };
  const std::string fresh = HttpGet(daemon_->metrics_address(), "/metrics");
  EXPECT_THAT(fresh, HasSubstr("200 OK"));
  EXPECT_THAT(fresh, HasSubstr("text/plain; version=0.0.4"));
  EXPECT_THAT(fresh, HasSubstr("\nminfer_draining 0"));
  EXPECT_THAT(fresh, Not(HasSubstr("exposer_")));
  no_nan(fresh);
  // A second scrape right away (the exposer's summary had one observation
  // then, and printed Nan again once it aged out of the window).
  no_nan(HttpGet(daemon_->metrics_address(), "/metrics"));

  ASSERT_TRUE(Load(*client_, "a", path_, 1, 256).ok());
  auto r = client_->Generate(TextRequest("a", "count me", 7));
  ASSERT_TRUE(r.ok()) << r.status();
  std::string body;
  for (int attempt = 0; attempt < 100; ++attempt) {
    body = HttpGet(daemon_->metrics_address(), "/metrics");
    if (absl::StrContains(body, "method=\"Generate\",model=\"a\"} 1")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_THAT(body, HasSubstr(
      "minfer_requests_total{api=\"grpc\",code=\"OK\",method=\"Generate\",model=\"a\"} 1"));
  EXPECT_THAT(body, HasSubstr(absl::StrCat("minfer_completion_tokens_total{model=\"a\"} ",
                                           r->usage.completion_tokens())));
  EXPECT_THAT(body, HasSubstr("minfer_time_to_first_token_seconds_count{model=\"a\"} 1"));
  EXPECT_THAT(body, HasSubstr("minfer_slot_state{model=\"a\",state=\"ready\"} 1"));
  no_nan(body);
  // Only /metrics is served.
  EXPECT_THAT(HttpGet(daemon_->metrics_address(), "/other"), HasSubstr("404"));
}

}  // namespace
}  // namespace minfer::daemon
