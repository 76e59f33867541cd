// minferd's continuous batching end to end over gRPC (tiny-untied on the
// CPU): concurrent streams share the model's steps — prefill chunks of new
// prompts mixed with the decode tokens of running streams under a small
// token budget — and each stream's tokens equal the same request run alone
// in this process; with a KV pool too small for all of them at once the
// newest are preempted and recomputed, and still no stream differs or fails.
#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon/test_util.h"
#include "tests/support/test_models.h"

namespace minfer::daemon {
namespace {

using testing::ClientFor;
using testing::ReferenceGenerate;
using testing::TextRequest;

class BatchingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto a = minfer::testing::TestModelPath("tiny-untied", "q8_0", 1);
    ASSERT_TRUE(a.ok()) << a.status();
    path_ = *a;
    auto d = Daemon::Start(testing::TestConfig());
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
    client_ = ClientFor(*daemon_);
  }

  void LoadModel(int64_t kv_tokens, int spec_k = 0, const std::string& draft = "") {
    v1::LoadModelRequest r;
    r.set_name("m");
    r.set_path(path_);
    r.set_parallel(8);
    r.set_n_ctx(512);
    r.set_queue_size(16);
    r.set_kv_tokens(kv_tokens);
    (*r.mutable_knobs())["MINFER_BATCH_TOKENS"] = "24";
    // Drafts every step: these tests count them (the gate has its own).
    (*r.mutable_knobs())["MINFER_SPEC_GATE"] = "0";
    if (spec_k > 0 && draft.empty()) (*r.mutable_knobs())["MINFER_SPEC_K"] = absl::StrCat(spec_k);
    r.set_draft(draft);  // spec "draft", k 4
    auto st = client_->LoadModel(r);
    ASSERT_TRUE(st.ok()) << st.status();
  }

  // Runs the requests at once (a thread each) and checks every stream
  // against its alone run.
  std::vector<client::GenerateResult> RunConcurrently(const std::vector<v1::GenerateRequest>& reqs) {
    std::vector<absl::StatusOr<client::GenerateResult>> out(reqs.size(),
                                                             absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (size_t i = 0; i < reqs.size(); ++i) {
      threads.emplace_back([&, i] { out[i] = client_->Generate(reqs[i]); });
    }
    for (auto& t : threads) t.join();
    std::vector<client::GenerateResult> results;
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_TRUE(out[i].ok()) << "stream " << i << ": " << out[i].status();
      if (!out[i].ok()) return {};
      auto ref = ReferenceGenerate(path_, reqs[i]);
      EXPECT_TRUE(ref.ok()) << ref.status();
      if (!ref.ok()) return {};
      EXPECT_EQ(out[i]->token_ids, ref->ids) << "stream " << i;
      EXPECT_EQ(out[i]->text, ref->text) << "stream " << i;
      EXPECT_GE(std::set<int32_t>(ref->ids.begin(), ref->ids.end()).size(), 6u);
      results.push_back(*std::move(out[i]));
    }
    return results;
  }

  std::vector<v1::GenerateRequest> Requests() {
    std::vector<v1::GenerateRequest> reqs;
    for (int i = 0; i < 8; ++i) {
      std::string text = absl::StrCat("Stream ", i, " says:");
      for (int j = 0; j < i * 7; ++j) absl::StrAppend(&text, " word", j);  // prompts 4..60 tokens
      reqs.push_back(TextRequest("m", text, 30 + i, i % 2 == 0 ? std::nullopt
                                                               : std::optional<uint64_t>(11 + i)));
    }
    return reqs;
  }

  std::string path_;
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<client::MinferClient> client_;
};

TEST_F(BatchingTest, EightConcurrentStreamsEqualTheirAloneRuns) {
  LoadModel(0);
  RunConcurrently(Requests());
  auto st = client_->GetModelStatus("m");
  ASSERT_TRUE(st.ok());
  // The streams shared steps: far fewer steps than tokens.
  int64_t tokens = 0;
  for (int i = 0; i < 8; ++i) tokens += 30 + i;
  EXPECT_LT(st->kv_pool().steps(), static_cast<uint64_t>(tokens) / 2);
  EXPECT_EQ(st->kv_pool().blocks_used(), 0);
  EXPECT_EQ(st->kv_pool().token_budget(), 24);
  EXPECT_EQ(st->counters().completed(), 8u);
}

TEST_F(BatchingTest, PreemptedStreamsResumeWithoutALostOrRepeatedToken) {
  // 256 rows for 8 streams of 40 to ~200 rows (~900 in all): each fits
  // alone, together they run the pool dry.
  LoadModel(256);
  RunConcurrently(Requests());
  auto st = client_->GetModelStatus("m");
  ASSERT_TRUE(st.ok());
  EXPECT_GT(st->kv_pool().preemptions(), 0u);
  EXPECT_EQ(st->counters().failed(), 0u);
  EXPECT_EQ(st->counters().completed(), 8u);
}

TEST_F(BatchingTest, SpeculatingStreamsEqualTheirAloneRuns) {
  // n-gram drafts (MINFER_SPEC_K) on the greedy streams, with and without
  // a pool that runs dry: every stream still equals its alone run.
  for (int64_t kv : {0, 256}) {
    LoadModel(kv, /*spec_k=*/4);
    RunConcurrently(Requests());
    auto st = client_->GetModelStatus("m");
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(st->counters().failed(), 0u);
    EXPECT_EQ(st->counters().completed(), 8u);
    EXPECT_EQ(st->kv_pool().blocks_used(), 0);
    v1::UnloadModelRequest u;
    u.set_name("m");
    ASSERT_TRUE(client_->UnloadModel(u).ok());
  }
}

// A draft model (LoadModelRequest.draft: the same shape at q4_0, which
// shares the target's vocabulary and so its greedy continuations): four
// concurrent streams, greedy and seeded, each equal to its alone run on a
// plain engine; the drafts were made and accepted (per stream in usage,
// per model in the status and the metrics), and a request that opts out
// gets no drafts and the same tokens.
TEST_F(BatchingTest, DraftModelStreamsEqualTheirAloneRuns) {
  auto draft = minfer::testing::TestModelPath("tiny-untied", "q4_0", 1);
  ASSERT_TRUE(draft.ok()) << draft.status();
  LoadModel(0, 0, *draft);
  std::vector<v1::GenerateRequest> reqs = Requests();
  reqs.resize(4);  // rows to spare for drafts (the step's rows stay within parallel 8)
  const std::vector<client::GenerateResult> results = RunConcurrently(reqs);
  ASSERT_EQ(results.size(), reqs.size());
  int64_t drafted = 0, accepted = 0;
  for (const client::GenerateResult& r : results) {
    EXPECT_LE(r.usage.spec_accepted_tokens(), r.usage.spec_drafted_tokens());
    drafted += r.usage.spec_drafted_tokens();
    accepted += r.usage.spec_accepted_tokens();
  }
  EXPECT_GT(drafted, 0);
  EXPECT_GT(accepted, 0);
  auto st = client_->GetModelStatus("m");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->spec(), "draft");
  EXPECT_EQ(st->draft(), *draft);
  EXPECT_EQ(st->spec_k(), 4);
  EXPECT_EQ(st->spec_drafted_tokens(), static_cast<uint64_t>(drafted));
  EXPECT_EQ(st->spec_accepted_tokens(), static_cast<uint64_t>(accepted));
  EXPECT_DOUBLE_EQ(st->spec_acceptance_rate(), static_cast<double>(accepted) / drafted);
  EXPECT_GT(st->memory().draft_bytes(), 0u);
  EXPECT_EQ(st->counters().completed(), 4u);
  EXPECT_EQ(st->kv_pool().blocks_used(), 0);
  EXPECT_THAT(st->summary(), ::testing::HasSubstr("; draft "));
  const std::string metrics = daemon_->metrics().Serialize();
  EXPECT_NE(metrics.find(absl::StrCat("minfer_spec_drafted_tokens_total{model=\"m\"} ", drafted)),
            std::string::npos);
  EXPECT_NE(
      metrics.find(absl::StrCat("minfer_spec_accepted_tokens_total{model=\"m\"} ", accepted)),
      std::string::npos);
  // The gate is off here (MINFER_SPEC_GATE 0): it held nothing back.
  EXPECT_EQ(st->spec_gate_held_steps(), 0u);
  EXPECT_NE(metrics.find("minfer_spec_gate_held_steps_total{model=\"m\"} 0"), std::string::npos);

  // speculative: false -> no drafts, the same tokens.
  v1::GenerateRequest off = reqs[0];
  off.set_speculative(false);
  auto plain = client_->Generate(off);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->token_ids, results[0].token_ids);
  EXPECT_EQ(plain->usage.spec_drafted_tokens(), 0);
  EXPECT_EQ(plain->usage.spec_accepted_tokens(), 0);
  auto again = client_->GetModelStatus("m");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->spec_drafted_tokens(), static_cast<uint64_t>(drafted));
}

// spec "ngram" as a load option (not the knob), and "off" overriding the
// knob: both give each stream its alone run's tokens; only ngram drafts.
// The prompt is a greedy run's tokens followed by its first two again, so
// prompt lookup finds the continuation in the prompt.
TEST_F(BatchingTest, NgramAndOffLoadOptions) {
  auto chain = ReferenceGenerate(path_, TextRequest("x", "Once upon a time", 24));
  ASSERT_TRUE(chain.ok()) << chain.status();
  for (const char* spec : {"ngram", "off"}) {
    v1::LoadModelRequest r;
    r.set_name(spec);
    r.set_path(path_);
    r.set_parallel(8);
    r.set_n_ctx(512);
    r.set_spec(spec);
    (*r.mutable_knobs())["MINFER_SPEC_K"] = "4";  // ignored: the load option decides
    (*r.mutable_knobs())["MINFER_SPEC_GATE"] = "0";  // drafts every step
    auto loaded = client_->LoadModel(r);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->spec(), spec);
    EXPECT_EQ(loaded->spec_k(), std::string(spec) == "ngram" ? 4 : 0);
    v1::GenerateRequest req = TextRequest(spec, "unused", 16);
    for (int32_t id : chain->ids) req.mutable_tokens()->add_ids(id);
    req.mutable_tokens()->add_ids(chain->ids[0]);
    req.mutable_tokens()->add_ids(chain->ids[1]);
    auto out = client_->Generate(req);
    ASSERT_TRUE(out.ok()) << out.status();
    auto ref = ReferenceGenerate(path_, req);
    ASSERT_TRUE(ref.ok()) << ref.status();
    EXPECT_EQ(out->token_ids, ref->ids) << spec;
    auto st = client_->GetModelStatus(spec);
    ASSERT_TRUE(st.ok());
    if (std::string(spec) == "off") {
      EXPECT_EQ(out->usage.spec_drafted_tokens(), 0);
      EXPECT_EQ(st->spec_drafted_tokens(), 0u);
    } else {
      EXPECT_GT(out->usage.spec_drafted_tokens(), 0);
      EXPECT_EQ(st->spec_drafted_tokens(), static_cast<uint64_t>(out->usage.spec_drafted_tokens()));
    }
  }
}

// A load that names a GPU this server does not have is refused (not run on
// the CPU instead), as is one that names a device with backend "cpu".
TEST_F(BatchingTest, ALoadNamingAMissingDeviceIsRefused) {
  for (const char* backend : {"auto", "cpu"}) {
    v1::LoadModelRequest r;
    r.set_name("gone");
    r.set_path(path_);
    r.set_backend(backend);
    r.set_device(7);
    auto loaded = client_->LoadModel(r);
    ASSERT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument) << loaded.status();
    EXPECT_NE(std::string(loaded.status().message()).find("device 7"), std::string::npos)
        << loaded.status();
  }
  v1::LoadModelRequest negative;
  negative.set_name("neg");
  negative.set_path(path_);
  negative.set_device(-2);
  auto n = client_->LoadModel(negative);
  ASSERT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument) << n.status();
  EXPECT_NE(std::string(n.status().message()).find("got -2"), std::string::npos) << n.status();
  // The server still loads and serves.
  LoadModel(0);
  EXPECT_TRUE(client_->Generate(TextRequest("m", "still here", 4)).ok());
}

TEST_F(BatchingTest, RequestThatCanNeverFitThePoolIsRefusedWithTheFigures) {
  LoadModel(64);
  auto r = client_->Generate(TextRequest("m", "a prompt", 200));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_NE(std::string(r.status().message()).find("KV rows"), std::string::npos) << r.status();
  // A request that fits still runs.
  auto ok = client_->Generate(TextRequest("m", "a prompt", 20));
  EXPECT_TRUE(ok.ok()) << ok.status();
}

// Two requests with one long system prompt, one after the other: the second
// takes the first one's full KV blocks from the prefix cache (its usage and
// the model's status say how many tokens), and its tokens equal its alone
// run; with the per-model knob MINFER_PREFIX_CACHE=0 set at run time, the
// same prompt is computed whole again.
TEST_F(BatchingTest, ASharedPromptPrefixIsComputedOnce) {
  LoadModel(0);
  std::string system = "You are a careful assistant. Rules:";
  for (int j = 0; j < 40; ++j) absl::StrAppend(&system, " rule", j);
  auto first = client_->Generate(TextRequest("m", system + " First question?", 12));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->usage.cached_prompt_tokens(), 0);
  const v1::GenerateRequest second_req = TextRequest("m", system + " Another one?", 16);
  auto second = client_->Generate(second_req);
  ASSERT_TRUE(second.ok()) << second.status();
  auto ref = ReferenceGenerate(path_, second_req);
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_EQ(second->token_ids, ref->ids);
  // The shared prompt's whole blocks of 16 (the system prompt is ~90
  // tokens; its last partial block differs).
  const int32_t cached = second->usage.cached_prompt_tokens();
  EXPECT_GE(cached, 64);
  EXPECT_EQ(cached % 16, 0);
  EXPECT_LT(cached, second->usage.prompt_tokens());
  auto st = client_->GetModelStatus("m");
  ASSERT_TRUE(st.ok());
  EXPECT_TRUE(st->kv_pool().prefix_cache());
  EXPECT_EQ(st->kv_pool().prefix_hit_tokens(), static_cast<uint64_t>(cached));
  EXPECT_GT(st->kv_pool().blocks_cached(), 0);
  EXPECT_EQ(st->kv_pool().blocks_used(), 0);
  EXPECT_NE(daemon_->metrics().Serialize().find(absl::StrCat(
                "minfer_prefix_cache_hit_tokens_total{model=\"m\"} ", cached)),
            std::string::npos);

  v1::SetKnobRequest off;
  off.set_name("MINFER_PREFIX_CACHE");
  off.set_value("0");
  off.set_model("m");
  ASSERT_TRUE(client_->SetKnob(off).ok());
  auto third = client_->Generate(second_req);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->usage.cached_prompt_tokens(), 0);
  EXPECT_EQ(third->token_ids, ref->ids);
  st = client_->GetModelStatus("m");
  ASSERT_TRUE(st.ok());
  EXPECT_FALSE(st->kv_pool().prefix_cache());
}

}  // namespace
}  // namespace minfer::daemon
