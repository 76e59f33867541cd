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

  void LoadModel(int64_t kv_tokens, int spec_k = 0) {
    v1::LoadModelRequest r;
    r.set_name("m");
    r.set_path(path_);
    r.set_parallel(8);
    r.set_n_ctx(512);
    r.set_queue_size(16);
    r.set_kv_tokens(kv_tokens);
    (*r.mutable_knobs())["MINFER_BATCH_TOKENS"] = "24";
    if (spec_k > 0) (*r.mutable_knobs())["MINFER_SPEC_K"] = absl::StrCat(spec_k);
    auto st = client_->LoadModel(r);
    ASSERT_TRUE(st.ok()) << st.status();
  }

  // Runs the requests at once (a thread each) and checks every stream
  // against its alone run.
  void RunConcurrently(const std::vector<v1::GenerateRequest>& reqs) {
    std::vector<absl::StatusOr<client::GenerateResult>> out(reqs.size(),
                                                             absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (size_t i = 0; i < reqs.size(); ++i) {
      threads.emplace_back([&, i] { out[i] = client_->Generate(reqs[i]); });
    }
    for (auto& t : threads) t.join();
    for (size_t i = 0; i < reqs.size(); ++i) {
      ASSERT_TRUE(out[i].ok()) << "stream " << i << ": " << out[i].status();
      auto ref = ReferenceGenerate(path_, reqs[i]);
      ASSERT_TRUE(ref.ok()) << ref.status();
      EXPECT_EQ(out[i]->token_ids, ref->ids) << "stream " << i;
      EXPECT_EQ(out[i]->text, ref->text) << "stream " << i;
      EXPECT_GE(std::set<int32_t>(ref->ids.begin(), ref->ids.end()).size(), 6u);
    }
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
