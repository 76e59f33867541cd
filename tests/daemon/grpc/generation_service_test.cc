// In-process tests of minferd's generation path over a real gRPC server on a
// loopback port: streamed outputs against the engine's own output for the
// same request, concurrency across models, unload and alias switches under
// load, cancellation, deadlines, the queue bound and parameter validation.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/minfer_client.h"
#include "daemon/daemon.h"
#include "engine/base/thread_pool.h"
#include "engine/runtime/model.h"
#include "engine/tools/mkmodel.h"
#include "engine/tools/model_spec.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "minfer/v1/generation.grpc.pb.h"
#include "tests/daemon/test_util.h"
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
using Clock = std::chrono::steady_clock;

class GenerationServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Two models with different outputs (see test_util.h).
    auto a = minfer::testing::TestModelPath("tiny-untied", "q8_0", 1);
    auto b = minfer::testing::TestModelPath("tiny", "q8_0", 1);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    path_a_ = *a;
    path_b_ = *b;
  }

  void Start(DaemonConfig config = testing::TestConfig()) {
    auto d = Daemon::Start(std::move(config));
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
    client_ = ClientFor(*daemon_);
  }

  v1::ModelStatus Status(const std::string& name) {
    auto s = client_->GetModelStatus(name);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : v1::ModelStatus();
  }

  std::string path_a_, path_b_;
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<client::MinferClient> client_;
};

// A stream started on its own thread, recording what arrived and when.
struct Stream {
  absl::Status status;
  client::GenerateResult result;
  Clock::time_point first, last;
  std::thread thread;

  void Start(client::MinferClient* c, v1::GenerateRequest req, double deadline = 0) {
    thread = std::thread([this, c, req, deadline] {
      bool got = false;
      auto r = c->Generate(
          req,
          [&](const v1::GenerateResponse& chunk) {
            if (!chunk.token_ids().empty()) {
              if (!got) first = Clock::now();
              got = true;
              last = Clock::now();
            }
            return true;
          },
          deadline, &result);
      status = r.status();
      if (r.ok()) result = *r;
    });
  }
  void Join() {
    if (thread.joinable()) thread.join();
  }
};

// Chat template options reach the model's own template: a model whose
// template greets whoever template_kwargs names. The chat's ids equal the
// ids of the text the template renders, with and without the option; a
// reserved name is refused naming it.
TEST_F(GenerationServiceTest, ChatTemplateKwargsReachTheModelsTemplate) {
  auto json = minfer::testing::TokenizerJsonPath();
  ASSERT_TRUE(json.ok()) << json.status();
  tools::MkModelOptions opt;
  opt.shape = *tools::ShapePreset("tiny");
  opt.recipe = *tools::ParseQuantRecipe("q8_0");
  opt.tokenizer_json = *json;
  opt.output = absl::StrCat(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp",
                            "/greeter.gguf");
  opt.chat_template =
      "{% if greet is defined %}Hello {{ greet }}! {% endif %}"
      "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
      "{% if add_generation_prompt %}[assistant]{% endif %}";
  ThreadPool pool(0);
  ASSERT_TRUE(tools::WriteSyntheticModel(opt, &pool).ok());
  Start();
  ASSERT_TRUE(Load(*client_, "g", opt.output).ok());
  auto ids_of_text = [&](const std::string& text) {
    v1::TokenizeRequest t;
    t.set_model("g");
    t.set_text(text);
    auto r = client_->Tokenize(t);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::vector<int32_t>(r->ids().begin(), r->ids().end()) : std::vector<int32_t>{};
  };
  auto ids = [](const v1::TokenizeResponse& r) {
    return std::vector<int32_t>(r.ids().begin(), r.ids().end());
  };
  auto ids_of_chat = [&](const std::map<std::string, std::string>& kwargs) {
    v1::TokenizeRequest t;
    t.set_model("g");
    v1::ChatMessage* m = t.mutable_chat()->add_messages();
    m->set_role("user");
    m->set_content("two plus two");
    for (const auto& [k, v] : kwargs) (*t.mutable_chat()->mutable_template_kwargs())[k] = v;
    return client_->Tokenize(t);
  };
  auto plain = ids_of_chat({});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(ids(*plain), ids_of_text("[user] two plus two\n[assistant]"));
  auto greeted = ids_of_chat({{"greet", "\"Bob\""}});
  ASSERT_TRUE(greeted.ok()) << greeted.status();
  EXPECT_EQ(ids(*greeted), ids_of_text("Hello Bob! [user] two plus two\n[assistant]"));
  auto reserved = ids_of_chat({{"messages", "[]"}});
  EXPECT_EQ(reserved.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(reserved.status().message(), "messages")) << reserved.status();
  // Generate takes the same options: a greeted chat generates what its
  // rendered text generates.
  v1::GenerateRequest chat_req = TextRequest("g", "", 6);
  v1::ChatMessage* m = chat_req.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("two plus two");
  (*chat_req.mutable_chat()->mutable_template_kwargs())["greet"] = "\"Bob\"";
  auto from_chat = client_->Generate(chat_req);
  ASSERT_TRUE(from_chat.ok()) << from_chat.status();
  v1::GenerateRequest tok_req = TextRequest("g", "", 6);
  for (int32_t id : greeted->ids()) tok_req.mutable_tokens()->add_ids(id);
  auto from_ids = client_->Generate(tok_req);
  ASSERT_TRUE(from_ids.ok()) << from_ids.status();
  EXPECT_EQ(from_chat->token_ids, from_ids->token_ids);
  EXPECT_EQ(from_chat->usage.prompt_tokens(), greeted->ids_size());
}

TEST_F(GenerationServiceTest, StreamMatchesInProcessGeneration) {
  Start();
  ASSERT_TRUE(Load(*client_, "a", path_a_).ok());
  for (const auto& req : {TextRequest("a", "Hello world", 40),
                          TextRequest("a", "The quick brown fox", 33, /*seed=*/7)}) {
    int chunks = 0;
    auto r = client_->Generate(req, [&](const v1::GenerateResponse&) {
      ++chunks;
      return true;
    });
    ASSERT_TRUE(r.ok()) << r.status();
    auto ref = ReferenceGenerate(path_a_, req);
    ASSERT_TRUE(ref.ok()) << ref.status();
    EXPECT_EQ(r->token_ids, ref->ids);
    EXPECT_EQ(r->text, ref->text);
    EXPECT_EQ(r->finish_reason, v1::FINISH_REASON_LENGTH);
    EXPECT_EQ(r->usage.completion_tokens(), req.stopping().max_tokens());
    EXPECT_EQ(r->usage.seed(), req.sampling().seed());
    EXPECT_EQ(r->model, "a");
    EXPECT_GT(r->usage.time_to_first_token_seconds(), 0);
    EXPECT_GE(r->usage.total_seconds(), r->usage.time_to_first_token_seconds());
    // The stream's rate is wall time from its first token to its end; the
    // step rate counts only its own decode steps, so it is never lower.
    const v1::Usage& u = r->usage;
    EXPECT_NEAR(u.decode_tokens_per_second(),
                (u.completion_tokens() - 1) /
                    (u.total_seconds() - u.time_to_first_token_seconds()),
                1e-6 * u.decode_tokens_per_second());
    EXPECT_GT(u.decode_tokens_per_second(), 0);
    EXPECT_GE(u.decode_step_tokens_per_second(), u.decode_tokens_per_second());
    EXPECT_GE(chunks, 1);
  }
  {
    // Streamed, not one final blob: the first token is written as soon as
    // it exists, and the tokens produced while a write is in flight follow
    // in later messages. (A short generation of this tiny model can finish
    // before the first write starts on a loaded machine, so this uses a
    // long one.)
    int chunks = 0;
    auto r = client_->Generate(TextRequest("a", "Hello world", 400), [&](const auto&) {
      ++chunks;
      return true;
    });
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->token_ids.size(), 400u);
    EXPECT_GT(chunks, 1);
  }
  // Chat and token-id input.
  v1::GenerateRequest chat = TextRequest("a", "", 24);
  chat.clear_text();
  auto* m = chat.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("Write <|im_end|> a haiku");
  auto rc = client_->Generate(chat);
  auto refc = ReferenceGenerate(path_a_, chat);
  ASSERT_TRUE(rc.ok()) << rc.status();
  ASSERT_TRUE(refc.ok());
  EXPECT_EQ(rc->token_ids, refc->ids);
  v1::GenerateRequest ids = TextRequest("a", "", 16);
  ids.clear_text();
  for (int id : {9707, 11, 1879}) ids.mutable_tokens()->add_ids(id % 1000);
  auto ri = client_->Generate(ids);
  auto refi = ReferenceGenerate(path_a_, ids);
  ASSERT_TRUE(ri.ok()) << ri.status();
  EXPECT_EQ(ri->token_ids, refi->ids);
  EXPECT_EQ(ri->usage.prompt_tokens(), 3);
}

// A Llama 3 model through the daemon: text prompts start with BOS, a chat
// is framed by the file's own template (Llama 3.2's) with one BOS, and the
// streamed tokens equal the in-process generation's for both.
TEST_F(GenerationServiceTest, LlamaModelServesTextAndChat) {
  auto path = minfer::testing::TestModelPath("llama-tiny", "q8_0", 1);
  ASSERT_TRUE(path.ok()) << path.status();
  Start();
  ASSERT_TRUE(Load(*client_, "llama", *path).ok());
  v1::TokenizeRequest t;
  t.set_model("llama");
  t.set_text("Hello 12345");
  auto tok = client_->Tokenize(t);
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto model = runtime::Model::Load(*path, {.backend = "cpu"});
  ASSERT_TRUE(model.ok()) << model.status();
  const int32_t bos = *(*model)->tokenizer().bos_id();
  ASSERT_GE(tok->ids_size(), 2);
  EXPECT_EQ(tok->ids(0), bos);

  const v1::GenerateRequest text = TextRequest("llama", "Hello world", 24);
  auto r = client_->Generate(text);
  ASSERT_TRUE(r.ok()) << r.status();
  auto ref = ReferenceGenerate(*path, text);
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_EQ(r->token_ids, ref->ids);
  EXPECT_EQ(r->usage.completion_tokens(), 24);
  EXPECT_GE(std::set<int32_t>(r->token_ids.begin(), r->token_ids.end()).size(), 12u);

  v1::GenerateRequest chat = TextRequest("llama", "", 16);
  chat.clear_text();
  auto* m = chat.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("Write <|eot_id|> a haiku");
  auto rc = client_->Generate(chat);
  auto refc = ReferenceGenerate(*path, chat);
  ASSERT_TRUE(rc.ok()) << rc.status();
  ASSERT_TRUE(refc.ok()) << refc.status();
  EXPECT_EQ(rc->token_ids, refc->ids);
  auto want = (*model)->tokenizer().EncodeChat({{"user", "Write <|eot_id|> a haiku"}}, true);
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(rc->usage.prompt_tokens(), static_cast<int32_t>(want->size()));
  EXPECT_EQ((*want)[0], bos);
  EXPECT_EQ(std::count(want->begin(), want->end(), bos), 1);
  // The user's "<|eot_id|>" is text, not the control token: the only
  // <|eot_id|> ids are the template's own end-of-turn markers.
  const int32_t eot = *(*model)->tokenizer().FindToken("<|eot_id|>");
  EXPECT_EQ(std::count(want->begin(), want->end(), eot), 2);  // system turn, user turn
}

TEST_F(GenerationServiceTest, UnsetSeedIsDrawnAndReported) {
  Start();
  ASSERT_TRUE(Load(*client_, "a", path_a_).ok());
  v1::GenerateRequest req = TextRequest("a", "Once upon", 20, 1);
  req.mutable_sampling()->clear_seed();
  auto r = client_->Generate(req);
  ASSERT_TRUE(r.ok()) << r.status();
  // Replaying the reported seed reproduces the output.
  req.mutable_sampling()->set_seed(r->usage.seed());
  auto again = client_->Generate(req);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->token_ids, r->token_ids);
  // ...and the seed matters at this temperature.
  req.mutable_sampling()->set_seed(r->usage.seed() + 1);
  auto other = client_->Generate(req);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->token_ids, r->token_ids);
}

TEST_F(GenerationServiceTest, TwoModelsStreamConcurrently) {
  Start();
  ASSERT_TRUE(Load(*client_, "a", path_a_, 2).ok());
  ASSERT_TRUE(Load(*client_, "b", path_b_, 2).ok());
  // Sampled (seeded), so the two models' outputs differ.
  const auto req_a = TextRequest("a", "Alpha beta gamma", 300, /*seed=*/11);
  const auto req_b = TextRequest("b", "Alpha beta gamma", 300, /*seed=*/11);
  auto ref_a = ReferenceGenerate(path_a_, req_a);
  auto ref_b = ReferenceGenerate(path_b_, req_b);
  ASSERT_TRUE(ref_a.ok() && ref_b.ok());
  ASSERT_NE(ref_a->ids, ref_b->ids);  // different weights, different text
  std::vector<Stream> streams(4);
  for (int i = 0; i < 4; ++i) streams[i].Start(client_.get(), i % 2 == 0 ? req_a : req_b);
  for (auto& s : streams) s.Join();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(streams[i].status.ok()) << streams[i].status;
    EXPECT_EQ(streams[i].result.token_ids, (i % 2 == 0 ? ref_a : ref_b)->ids) << i;
  }
  // The two models' streams overlapped in time.
  EXPECT_LT(streams[0].first, streams[1].last);
  EXPECT_LT(streams[1].first, streams[0].last);
}

TEST_F(GenerationServiceTest, UnloadingOneModelLeavesTheOtherStreamUntouched) {
  Start();
  ASSERT_TRUE(Load(*client_, "a", path_a_, 1, 2048).ok());
  ASSERT_TRUE(Load(*client_, "b", path_b_, 1, 2048).ok());
  // Long enough that both still run when the unload starts, b the longest.
  const auto req_a = TextRequest("a", "Drain me", 800, /*seed=*/3);
  const auto req_b = TextRequest("b", "Keep going", 1500, /*seed=*/4);
  auto ref_a = ReferenceGenerate(path_a_, req_a, 2048);
  auto ref_b = ReferenceGenerate(path_b_, req_b, 2048);
  Stream sa, sb;
  sb.Start(client_.get(), req_b);
  sa.Start(client_.get(), req_a);
  ASSERT_TRUE(WaitFor([&] { return Status("b").active_sequences() == 1; }));
  ASSERT_TRUE(WaitFor([&] { return Status("a").active_sequences() == 1; }));
  v1::UnloadModelRequest unload;
  unload.set_name("a");
  unload.set_drain_timeout_seconds(30);
  auto u = client_->UnloadModel(unload);
  const auto unloaded_at = Clock::now();
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->cancelled_sequences(), 0);
  EXPECT_EQ(u->completed_sequences(), 1);
  sa.Join();
  sb.Join();
  // b was streaming before, during and after a's unload.
  EXPECT_LT(sb.first, unloaded_at);
  EXPECT_GT(sb.last, unloaded_at);
  // a's in-flight stream drained to its end; b never noticed.
  ASSERT_TRUE(sa.status.ok()) << sa.status;
  EXPECT_EQ(sa.result.token_ids, ref_a->ids);
  ASSERT_TRUE(sb.status.ok()) << sb.status;
  EXPECT_EQ(sb.result.token_ids, ref_b->ids);
  EXPECT_EQ(sb.result.text, ref_b->text);
  EXPECT_EQ(client_->GetModelStatus("a").status().code(), absl::StatusCode::kNotFound);
  auto after = client_->Generate(TextRequest("b", "still here", 8));
  EXPECT_TRUE(after.ok()) << after.status();
}

TEST_F(GenerationServiceTest, UnloadWithCancelStopsStreamsAtOnce) {
  Start();
  ASSERT_TRUE(Load(*client_, "a", path_a_, 1, 4096).ok());
  Stream s;
  s.Start(client_.get(), TextRequest("a", "long", 4000));
  ASSERT_TRUE(WaitFor([&] { return Status("a").active_sequences() == 1; }));
  v1::UnloadModelRequest unload;
  unload.set_name("a");
  unload.set_cancel(true);
  auto u = client_->UnloadModel(unload);
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->cancelled_sequences(), 1);
  s.Join();
  EXPECT_EQ(s.status.code(), absl::StatusCode::kCancelled) << s.status;
  EXPECT_THAT(std::string(s.status.message()), HasSubstr("unloaded"));
  // The last message still said why the stream ended.
  EXPECT_EQ(s.result.finish_reason, v1::FINISH_REASON_CANCELLED);
  EXPECT_LT(s.result.token_ids.size(), 4000u);
}

TEST_F(GenerationServiceTest, AliasRepointUnderLoadFailsNoStream) {
  Start();
  ASSERT_TRUE(Load(*client_, "v1", path_a_, 2).ok());
  ASSERT_TRUE(Load(*client_, "v2", path_b_, 2).ok());
  ASSERT_TRUE(client_->SetAlias("prod", "v1").ok());
  const auto req = TextRequest("prod", "Serve me", 24, /*seed=*/5);
  auto ref1 = ReferenceGenerate(path_a_, req);
  auto ref2 = ReferenceGenerate(path_b_, req);
  ASSERT_NE(ref1->ids, ref2->ids);
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, failed{0}, wrong{0}, on_v1{0}, on_v2{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 3; ++t) {
    clients.emplace_back([&] {
      auto c = ClientFor(*daemon_);
      while (!stop.load()) {
        auto r = c->Generate(req);
        if (!r.ok()) {
          ++failed;
          ADD_FAILURE() << r.status();
          continue;
        }
        ++ok;
        const auto& ref = r->model == "v1" ? ref1 : ref2;
        (r->model == "v1" ? on_v1 : on_v2)++;
        if (r->token_ids != ref->ids) ++wrong;
      }
    });
  }
  for (int i = 0; i < 30; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
    auto s = client_->SetAlias("prod", i % 2 == 0 ? "v2" : "v1");
    ASSERT_TRUE(s.ok()) << s.status();
  }
  stop = true;
  for (auto& t : clients) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(on_v1.load(), 0);
  EXPECT_GT(on_v2.load(), 0);
  std::printf("alias switches: 30, streams: %d ok (%d on v1, %d on v2), %d failed\n", ok.load(),
              on_v1.load(), on_v2.load(), failed.load());
}

TEST_F(GenerationServiceTest, CancelMidStreamFreesTheSequenceForTheNextRequest) {
  Start();
  ASSERT_TRUE(Load(*client_, "a", path_a_, /*parallel=*/1, /*n_ctx=*/4096, /*queue=*/1).ok());
  // A: long; cancelled by its client once it streams. B: waits in the queue.
  grpc::ClientContext ctx_a;
  auto stub = v1::GenerationService::NewStub(client_->channel());
  auto reader = stub->Generate(&ctx_a, TextRequest("a", "first", 4000));
  v1::GenerateResponse first;
  ASSERT_TRUE(reader->Read(&first));
  const auto req_b = TextRequest("a", "second", 30);
  Stream b;
  b.Start(client_.get(), req_b);
  ASSERT_TRUE(WaitFor([&] { return Status("a").queued_sequences() == 1; }));
  const auto cancelled_at = Clock::now();
  ctx_a.TryCancel();
  v1::GenerateResponse rest;
  while (reader->Read(&rest)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  b.Join();
  ASSERT_TRUE(b.status.ok()) << b.status;
  auto ref_b = ReferenceGenerate(path_a_, req_b, 4096);
  EXPECT_EQ(b.result.token_ids, ref_b->ids);
  // B was admitted as soon as A's session was free: well before A's 4000
  // tokens could have run.
  const double wait = std::chrono::duration<double>(b.first - cancelled_at).count();
  EXPECT_LT(wait, 1.0) << "B's first token came " << wait << " s after A was cancelled";
  v1::ModelStatus st = Status("a");
  EXPECT_EQ(st.active_sequences(), 0);
  EXPECT_EQ(st.queued_sequences(), 0);
  EXPECT_EQ(st.counters().cancelled(), 1u);
  EXPECT_EQ(st.counters().completed(), 1u);
  EXPECT_LT(st.counters().completion_tokens(), 4000u + 30u);
}

TEST_F(GenerationServiceTest, DeadlineExceededStopsAndFreesTheSequence) {
  Start();
  ASSERT_TRUE(Load(*client_, "a", path_a_, 1, 4096, 2).ok());
  Stream running, queued;
  running.Start(client_.get(), TextRequest("a", "long", 4000), /*deadline=*/0.3);
  ASSERT_TRUE(WaitFor([&] { return Status("a").active_sequences() == 1; }));
  queued.Start(client_.get(), TextRequest("a", "queued", 10), /*deadline=*/0.1);
  running.Join();
  queued.Join();
  EXPECT_EQ(running.status.code(), absl::StatusCode::kDeadlineExceeded) << running.status;
  EXPECT_EQ(queued.status.code(), absl::StatusCode::kDeadlineExceeded) << queued.status;
  ASSERT_TRUE(WaitFor([&] {
    v1::ModelStatus st = Status("a");
    return st.active_sequences() == 0 && st.queued_sequences() == 0;
  }, std::chrono::milliseconds(2000)));
  EXPECT_EQ(Status("a").counters().cancelled(), 2u);
  auto next = client_->Generate(TextRequest("a", "next", 5));
  EXPECT_TRUE(next.ok()) << next.status();
  // Counted as what they were (gRPC reports a passed deadline to the server
  // as a cancellation, which used to be counted as CANCELLED).
  std::string metrics;
  ASSERT_TRUE(WaitFor([&] {
    metrics = daemon_->metrics().Serialize();
    return absl::StrContains(
        metrics, "minfer_requests_total{api=\"grpc\",code=\"DEADLINE_EXCEEDED\",method=\"Generate\",model=\"a\"} 2");
  }, std::chrono::milliseconds(2000))) << metrics;
  EXPECT_THAT(metrics, Not(HasSubstr("code=\"CANCELLED\",method=\"Generate\"")));
}

TEST_F(GenerationServiceTest, ClientCancelIsStillCancelled) {
  Start();
  ASSERT_TRUE(Load(*client_, "a", path_a_, 1, 4096, 2).ok());
  int chunks = 0;
  auto r = client_->Generate(TextRequest("a", "stop me", 4000),
                             [&](const v1::GenerateResponse&) { return ++chunks < 3; },
                             /*deadline_seconds=*/60);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled);
  std::string metrics;
  ASSERT_TRUE(WaitFor([&] {
    metrics = daemon_->metrics().Serialize();
    return absl::StrContains(
        metrics, "minfer_requests_total{api=\"grpc\",code=\"CANCELLED\",method=\"Generate\",model=\"a\"} 1");
  }, std::chrono::milliseconds(2000))) << metrics;
  EXPECT_THAT(metrics, Not(HasSubstr("DEADLINE_EXCEEDED")));
}

TEST_F(GenerationServiceTest, QueueFullIsResourceExhausted) {
  Start();
  ASSERT_TRUE(Load(*client_, "a", path_a_, /*parallel=*/1, 4096, /*queue=*/1).ok());
  grpc::ClientContext ctx_a, ctx_b;
  auto stub = v1::GenerationService::NewStub(client_->channel());
  auto ra = stub->Generate(&ctx_a, TextRequest("a", "one", 4000));
  v1::GenerateResponse m;
  ASSERT_TRUE(ra->Read(&m));
  auto rb = stub->Generate(&ctx_b, TextRequest("a", "two", 4000));
  ASSERT_TRUE(WaitFor([&] { return Status("a").queued_sequences() == 1; }));
  auto rc = client_->Generate(TextRequest("a", "three", 5));
  EXPECT_EQ(rc.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(rc.status().message()), HasSubstr("'a' is at capacity"));
  EXPECT_EQ(Status("a").counters().rejected_queue_full(), 1u);
  ctx_a.TryCancel();
  ctx_b.TryCancel();
  while (ra->Read(&m)) {
  }
  while (rb->Read(&m)) {
  }
  ra->Finish();
  rb->Finish();
}

TEST_F(GenerationServiceTest, SlowReaderDoesNotHoldBackOtherStreams) {
  Start();
  ASSERT_TRUE(Load(*client_, "a", path_a_, 2).ok());
  const auto slow_req = TextRequest("a", "slow reader", 400);
  const auto fast_req = TextRequest("a", "fast reader", 400);
  // The slow client's transport buffers little ahead of its reads and never
  // widens its window, so the server's writes to it really stall.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 1024);
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  auto channel =
      grpc::CreateCustomChannel(daemon_->address(), grpc::InsecureChannelCredentials(), args);
  grpc::ClientContext ctx;
  auto stub = v1::GenerationService::NewStub(channel);
  auto slow = stub->Generate(&ctx, slow_req);
  v1::GenerateResponse m;
  ASSERT_TRUE(slow->Read(&m));
  std::vector<int32_t> slow_ids(m.token_ids().begin(), m.token_ids().end());
  // The slow client reads nothing more for a while; another stream of the
  // same model runs to its end meanwhile...
  const auto t0 = Clock::now();
  auto fast = client_->Generate(fast_req);
  const double fast_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_TRUE(fast.ok()) << fast.status();
  EXPECT_EQ(fast->token_ids, ReferenceGenerate(path_a_, fast_req)->ids);
  // ...and so does the slow stream's sequence: the worker never waited for
  // its client. Its output waits, merged, for the client to read it.
  ASSERT_TRUE(WaitFor([&] { return Status("a").active_sequences() == 0; }));
  EXPECT_EQ(Status("a").counters().completed(), 2u);
  int messages = 1;
  while (slow->Read(&m)) {
    ++messages;
    slow_ids.insert(slow_ids.end(), m.token_ids().begin(), m.token_ids().end());
  }
  ASSERT_TRUE(slow->Finish().ok());
  EXPECT_EQ(slow_ids, ReferenceGenerate(path_a_, slow_req)->ids);
  EXPECT_LT(messages, 200) << "pending output should have been merged";
  std::printf("fast stream: %.3f s; slow stream: 400 tokens in %d messages\n", fast_seconds,
              messages);
}

TEST_F(GenerationServiceTest, InvalidParametersNameTheField) {
  DaemonConfig c = testing::TestConfig();
  c.limits.max_prompt_tokens = 64;
  c.limits.max_tokens = 100;
  c.limits.default_max_tokens = 50;
  Start(c);
  ASSERT_TRUE(Load(*client_, "a", path_a_, 1, 128).ok());
  struct Case {
    std::function<void(v1::GenerateRequest*)> edit;
    absl::StatusCode code;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](auto* r) { r->mutable_sampling()->set_temperature(-1); },
       absl::StatusCode::kInvalidArgument, "sampling.temperature"},
      {[](auto* r) { r->mutable_sampling()->set_top_p(1.5f); },
       absl::StatusCode::kInvalidArgument, "sampling.top_p"},
      {[](auto* r) { r->mutable_sampling()->set_min_p(2); }, absl::StatusCode::kInvalidArgument,
       "sampling.min_p"},
      {[](auto* r) { r->mutable_sampling()->set_repetition_penalty(0); },
       absl::StatusCode::kInvalidArgument, "sampling.repetition_penalty"},
      {[](auto* r) { r->mutable_stopping()->set_max_tokens(0); },
       absl::StatusCode::kInvalidArgument, "stopping.max_tokens"},
      {[](auto* r) { r->mutable_stopping()->set_max_tokens(101); },
       absl::StatusCode::kInvalidArgument, "stopping.max_tokens 101 exceeds the server's limit"},
      {[](auto* r) { r->mutable_stopping()->add_stop(""); }, absl::StatusCode::kInvalidArgument,
       "stopping.stop[0]"},
      {[](auto* r) { r->mutable_options()->set_top_logprobs(21); },
       absl::StatusCode::kInvalidArgument, "options.top_logprobs"},
      {[](auto* r) { r->clear_text(); }, absl::StatusCode::kInvalidArgument, "input"},
      {[](auto* r) {
         r->mutable_tokens()->add_ids(5);
         r->mutable_tokens()->add_ids(1 << 20);
       },
       absl::StatusCode::kInvalidArgument, "tokens.ids[1]"},
      {[](auto* r) {
         std::string digits;
         for (int i = 0; i < 200; ++i) absl::StrAppend(&digits, " ", i % 10);
         r->set_text(digits);
       },
       absl::StatusCode::kInvalidArgument, "max_prompt_tokens"},
      {[](auto* r) {
         auto* m = r->mutable_chat()->add_messages();
         m->set_role("wizard");
         m->set_content("hi");
       },
       absl::StatusCode::kInvalidArgument, "chat"},
      {[](auto* r) { r->set_model("nope"); }, absl::StatusCode::kNotFound, "'nope'"},
      {[](auto* r) { r->set_model(""); }, absl::StatusCode::kInvalidArgument, "model"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    v1::GenerateRequest r = TextRequest("a", "hello", 10);
    cases[i].edit(&r);
    auto out = client_->Generate(r);
    EXPECT_EQ(out.status().code(), cases[i].code) << i << ": " << out.status();
    EXPECT_THAT(std::string(out.status().message()), HasSubstr(cases[i].field)) << i;
  }
  // A prompt under the server limit but over the model's context.
  v1::GenerateRequest r = TextRequest("a", "", 10);
  r.clear_text();
  for (int i = 0; i < 60; ++i) r.mutable_tokens()->add_ids(100 + i);
  auto loaded = Load(*client_, "short", path_a_, 1, 32);
  ASSERT_TRUE(loaded.ok());
  r.set_model("short");
  auto out = client_->Generate(r);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("context of 32"));
  // Nothing above reached a slot.
  EXPECT_EQ(Status("a").counters().requests(), 0u);
}

// A client's model name is not copied into the error unbounded: a 20 KiB
// or 1 MiB name used to come back whole in the status message, beyond the
// client's metadata limit, which failed every stream on the connection.
TEST_F(GenerationServiceTest, LongModelNamesAreRefusedBoundedAndSharedStreamsSurvive) {
  Start();
  ASSERT_TRUE(Load(*client_, "a", path_a_, 1, 4096, 2).ok());
  // On the same client, so the same channel and HTTP/2 connection.
  const auto req = TextRequest("a", "keep streaming", 3000);
  Stream healthy;
  healthy.Start(client_.get(), req);
  ASSERT_TRUE(WaitFor([&] { return Status("a").active_sequences() == 1; }));
  for (size_t n : {size_t{20} << 10, size_t{1} << 20}) {
    const std::string name(n, 'm');
    const std::string expected = absl::StrCat("model must be at most 64 characters, got '",
                                              std::string(48, 'm'), "...' (", n, " bytes)");
    auto g = client_->Generate(TextRequest(name, "x", 3));
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << n;
    EXPECT_EQ(std::string(g.status().message()), expected);
    v1::TokenizeRequest t;
    t.set_model(name);
    t.set_text("x");
    auto k = client_->Tokenize(t);
    EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument) << n;
    EXPECT_EQ(std::string(k.status().message()), expected);
    auto d = client_->Detokenize(name, {1, 2});
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << n;
    EXPECT_EQ(std::string(d.status().message()), expected);
  }
  // Other bytes than name characters are escaped, not echoed raw.
  auto odd = client_->Generate(TextRequest("a\nb", "x", 3));
  EXPECT_EQ(std::string(odd.status().message()),
            "model may use only letters, digits, '.', '_' and '-', got 'a\\nb'");
  healthy.Join();
  ASSERT_TRUE(healthy.status.ok()) << healthy.status;
  EXPECT_EQ(healthy.result.token_ids, ReferenceGenerate(path_a_, req, 4096)->ids);
}

// Requests that do not decode: gRPC's generated handlers answered them
// UNIMPLEMENTED with an empty message.
TEST_F(GenerationServiceTest, UndecodableRequestsAreInvalidArgumentSayingWhy) {
  Start();
  ASSERT_TRUE(Load(*client_, "a", path_a_).ok());
  auto channel = client_->channel();
  v1::GenerateRequest g = TextRequest("a", "x", 3);
  g.set_model(std::string("a\xff", 2));
  std::string bytes;
  // SerializePartialToString does not check UTF-8 (SerializeToString logs).
  ASSERT_TRUE(g.SerializePartialToString(&bytes));
  grpc::Status s = RawCall(channel, "/minfer.v1.GenerationService/Generate", bytes);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "the request could not be decoded: model is not valid UTF-8 (byte 1 of 2); string "
            "fields must be UTF-8 text");
  g = TextRequest("a", "caf\xe9", 3);  // Latin-1, not UTF-8
  ASSERT_TRUE(g.SerializePartialToString(&bytes));
  s = RawCall(channel, "/minfer.v1.GenerationService/Generate", bytes);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "the request could not be decoded: text is not valid UTF-8 (byte 3 of 4); string "
            "fields must be UTF-8 text");
  const std::string garbage("\x0a\x64garbage", 9);
  for (const char* method : {"Generate", "Tokenize", "Detokenize"}) {
    s = RawCall(channel, absl::StrCat("/minfer.v1.GenerationService/", method), garbage);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method;
    EXPECT_EQ(s.error_message(),
              absl::StrCat("the request could not be decoded: its 9 bytes are not a protobuf "
                           "message (minfer.v1.", method, "Request)"));
  }
  // A well-formed request on the same path still works, and the refusals
  // are counted.
  v1::TokenizeRequest t;
  t.set_model("a");
  t.set_text("fine");
  ASSERT_TRUE(t.SerializeToString(&bytes));
  EXPECT_TRUE(RawCall(channel, "/minfer.v1.GenerationService/Tokenize", bytes).ok());
  const std::string metrics = daemon_->metrics().Serialize();
  EXPECT_THAT(metrics, HasSubstr(
      "minfer_requests_total{api=\"grpc\",code=\"INVALID_ARGUMENT\",method=\"Tokenize\",model=\"\"} 1"));
  EXPECT_THAT(metrics, HasSubstr(
      "minfer_requests_total{api=\"grpc\",code=\"OK\",method=\"Tokenize\",model=\"a\"} 1"));
}

TEST_F(GenerationServiceTest, TokenizeAndDetokenizeAreHeldToThePromptLimits) {
  DaemonConfig c = testing::TestConfig();
  c.limits.max_prompt_tokens = 64;
  c.limits.max_tokens = 100;
  Start(c);
  ASSERT_TRUE(Load(*client_, "a", path_a_).ok());
  v1::TokenizeRequest t;
  t.set_model("a");
  std::string digits;
  for (int i = 0; i < 200; ++i) absl::StrAppend(&digits, " ", i % 10);
  t.set_text(digits);
  auto ids = client_->Tokenize(t);
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ids.status().message()),
              ::testing::MatchesRegex("text: [0-9]+ tokens exceed the server's limit of 64 "
                                      "\\(max_prompt_tokens\\)"));
  t.set_text("a short one");
  EXPECT_TRUE(client_->Tokenize(t).ok());
  std::vector<int32_t> many(165, 100);
  auto text = client_->Detokenize("a", many);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(text.status().message()),
            "ids: 165 ids exceed the server's limit of 164 (max_prompt_tokens + max_tokens)");
  many.pop_back();
  EXPECT_TRUE(client_->Detokenize("a", many).ok());
}

TEST_F(GenerationServiceTest, TokenizeAndDetokenizeRoundTrip) {
  Start();
  ASSERT_TRUE(Load(*client_, "a", path_a_).ok());
  ASSERT_TRUE(client_->SetAlias("prod", "a").ok());
  v1::TokenizeRequest t;
  t.set_model("prod");
  t.set_text("Hello <|im_start|> world");
  auto ids = client_->Tokenize(t);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->model(), "a");
  ASSERT_EQ(ids->ids_size(), ids->tokens_size());
  // Control tokens stay text unless asked for.
  for (const auto& tok : ids->tokens()) EXPECT_NE(tok, "<|im_start|>");
  t.set_parse_special(true);
  auto special = client_->Tokenize(t);
  ASSERT_TRUE(special.ok());
  EXPECT_THAT(special->tokens(), ::testing::Contains("<|im_start|>"));
  std::vector<int32_t> v(ids->ids().begin(), ids->ids().end());
  auto text = client_->Detokenize("a", v);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "Hello <|im_start|> world");
  EXPECT_EQ(client_->Detokenize("a", {1 << 20}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(GenerationServiceTest, LogprobsAreStreamed) {
  Start();
  ASSERT_TRUE(Load(*client_, "a", path_a_).ok());
  v1::GenerateRequest req = TextRequest("a", "Hello", 8);
  req.mutable_options()->set_top_logprobs(3);
  int n = 0;
  auto r = client_->Generate(req, [&](const v1::GenerateResponse& c) {
    EXPECT_EQ(c.logprobs_size(), c.token_ids_size());
    for (int i = 0; i < c.logprobs_size(); ++i) {
      EXPECT_EQ(c.logprobs(i).id(), c.token_ids(i));
      EXPECT_EQ(c.logprobs(i).top_size(), 3);
      // Greedy: the sampled token is the most likely one.
      EXPECT_EQ(c.logprobs(i).top(0).id(), c.token_ids(i));
      EXPECT_LE(c.logprobs(i).logprob(), 0);
      ++n;
    }
    return true;
  });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(n, 8);
}

TEST_F(GenerationServiceTest, DrainFinishesOpenStreamsAndRefusesNewOnes) {
  Start();
  ASSERT_TRUE(Load(*client_, "a", path_a_, 1, 2048).ok());
  const auto req = TextRequest("a", "drain", 1500);
  Stream s;
  s.Start(client_.get(), req);
  ASSERT_TRUE(WaitFor([&] { return Status("a").active_sequences() == 1; }));
  DrainResult drained;
  std::thread drain([&] { drained = daemon_->Drain(std::chrono::seconds(60)); });
  ASSERT_TRUE(WaitFor([&] {
    auto h = client_->Health("");
    return h.ok() && *h == grpc::health::v1::HealthCheckResponse::NOT_SERVING;
  }));
  auto refused = client_->Generate(TextRequest("a", "late", 5));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(*client_->Health("a"), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  drain.join();
  s.Join();
  ASSERT_TRUE(s.status.ok()) << s.status;
  EXPECT_EQ(s.result.token_ids, ReferenceGenerate(path_a_, req, 2048)->ids);
  EXPECT_EQ(drained.streams_at_start, 1);
  EXPECT_EQ(drained.cancelled, 0);
}

TEST_F(GenerationServiceTest, DrainTimeoutCancelsWithUnavailable) {
  Start();
  ASSERT_TRUE(Load(*client_, "a", path_a_, 1, 4096).ok());
  Stream s;
  s.Start(client_.get(), TextRequest("a", "too long", 4000));
  ASSERT_TRUE(WaitFor([&] { return Status("a").active_sequences() == 1; }));
  DrainResult drained = daemon_->Drain(std::chrono::milliseconds(100));
  s.Join();
  EXPECT_EQ(drained.cancelled, 1);
  EXPECT_EQ(s.status.code(), absl::StatusCode::kUnavailable) << s.status;
  EXPECT_EQ(s.result.finish_reason, v1::FINISH_REASON_CANCELLED);
  EXPECT_GT(s.result.token_ids.size(), 0u);
}

}  // namespace
}  // namespace minfer::daemon
