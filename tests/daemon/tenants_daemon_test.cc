// Tenants end to end (tiny-untied on the CPU, 8 sequence slots): who may
// generate (a wrong or missing key, a model the tenant may not use), a
// tenant's stream cap, the HTTP API's Bearer keys, and fairness: tenant A
// opens 16 streams, then tenant B 2, equal weights; B's streams start at
// once (the scheduler preempts two of A's for B's share) and each gets at
// least the per-stream rate of A's. The prefix cache is each tenant's own
// (two tenants of one cache_group share theirs), Tokenize and Detokenize
// check the tenant's models, and a quota holds against concurrent streams.
#include <cstdio>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/daemon/test_util.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_models.h"

namespace minfer::daemon {
namespace {

using testing::TextRequest;

class TenantsDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto path = minfer::testing::TestModelPath("tiny-untied", "q8_0", 1);
    ASSERT_TRUE(path.ok()) << path.status();
    DaemonConfig c = testing::TestConfig();
    c.http_listen = "127.0.0.1:0";
    TenantConfig a, b, r;
    a.name = "alpha";
    a.api_keys = {"key-alpha"};
    b.name = "beta";
    b.api_keys = {"key-beta"};
    b.max_streams = 2;
    r.name = "restricted";
    r.api_keys = {"key-restricted"};
    r.models = {"elsewhere"};
    TenantConfig g1, g2, q;
    g1.name = "docs-1";
    g1.api_keys = {"key-docs-1"};
    g1.cache_group = "docs";
    g2.name = "docs-2";
    g2.api_keys = {"key-docs-2"};
    g2.cache_group = "docs";
    q.name = "metered";
    q.api_keys = {"key-metered"};
    q.quota_tokens = 100;
    q.quota_window_seconds = 60;
    c.tenants = {a, b, r, g1, g2, q};
    SlotConfig m;
    m.name = "m";
    m.path = *path;
    m.parallel = 8;
    m.n_ctx = 512;
    m.queue_size = 32;
    m.knobs = {{"MINFER_BATCH_TOKENS", "64"}};
    c.models = {m};
    auto d = Daemon::Start(c);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
    admin_ = testing::ClientFor(*daemon_);
    ASSERT_TRUE(testing::WaitFor([&] {
      auto st = admin_->GetModelStatus("m");
      return st.ok() && st->state() == v1::MODEL_STATE_READY;
    }));
  }

  std::unique_ptr<client::MinferClient> As(const std::string& key) {
    return testing::ClientFor(*daemon_, key);
  }

  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<client::MinferClient> admin_;
};

TEST_F(TenantsDaemonTest, KeysModelsAndCaps) {
  const v1::GenerateRequest req = TextRequest("m", "hello there", 4);
  auto none = admin_->Generate(req);  // no key at all
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnauthenticated) << none.status();
  auto wrong = As("key-nobody")->Generate(req);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kUnauthenticated) << wrong.status();
  EXPECT_EQ(wrong.status().message(), "the API key is not valid");
  auto denied = As("key-restricted")->Generate(req);
  EXPECT_EQ(denied.status().code(), absl::StatusCode::kPermissionDenied) << denied.status();
  v1::TokenizeRequest tok;
  tok.set_model("m");
  tok.set_text("hello");
  EXPECT_EQ(admin_->Tokenize(tok).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(As("key-alpha")->Tokenize(tok).ok());
  auto ok = As("key-alpha")->Generate(req);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->token_ids.size(), 4u);

  // Beta's cap: two long streams open, a third is refused with the figures.
  auto beta = As("key-beta");
  std::vector<std::thread> open;
  std::vector<absl::StatusOr<client::GenerateResult>> long_runs(2, absl::UnknownError(""));
  for (int i = 0; i < 2; ++i) {
    open.emplace_back([&, i] { long_runs[i] = beta->Generate(TextRequest("m", "long", 300)); });
  }
  ASSERT_TRUE(testing::WaitFor([&] {
    auto st = admin_->GetModelStatus("m");
    return st.ok() && st->active_sequences() == 2;
  }));
  auto third = beta->Generate(req);
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted) << third.status();
  EXPECT_EQ(third.status().message(), "tenant 'beta' has 2 of its 2 concurrent streams open");
  for (auto& t : open) t.join();
  for (auto& r : long_runs) EXPECT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(beta->Generate(req).ok());  // the streams ended: room again

  // The HTTP API takes the same keys.
  const std::string url = absl::StrCat("http://", daemon_->http_address(), "/v1/completions");
  auto curl = [&](const std::string& key) {
    auto r = minfer::testing::RunCommand(
        {"/usr/bin/env", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-H",
         "Authorization: Bearer " + key, "-H", "Content-Type: application/json", "-d",
         R"({"model": "m", "prompt": "hi", "max_tokens": 3})", url});
    EXPECT_TRUE(r.ok());
    return r.ok() ? r->out : std::string();
  };
  EXPECT_EQ(curl("key-beta"), "200");
  EXPECT_EQ(curl("key-nobody"), "401");
  EXPECT_EQ(curl("key-restricted"), "403");
  // /v1/models lists what the caller's tenant may use.
  auto models = [&](const std::string& key) {
    auto r = minfer::testing::RunCommand(
        {"/usr/bin/env", "curl", "-s", "-H", "Authorization: Bearer " + key,
         absl::StrCat("http://", daemon_->http_address(), "/v1/models")});
    EXPECT_TRUE(r.ok());
    return r.ok() ? r->out : std::string();
  };
  EXPECT_NE(models("key-beta").find("\"id\":\"m\""), std::string::npos) << models("key-beta");
  EXPECT_EQ(models("key-restricted").find("\"id\":\"m\""), std::string::npos)
      << models("key-restricted");

  const auto usage = daemon_->tenants()->Snapshot();
  ASSERT_EQ(usage.size(), 6u);
  EXPECT_EQ(usage[1].name, "beta");
  EXPECT_EQ(usage[1].rejected_cap, 1u);
  EXPECT_EQ(usage[1].streams, 0);
  EXPECT_GT(usage[1].completion_tokens, 600u);
  EXPECT_EQ(usage[2].rejected_model, 2u);

  // The same through the admin API (minferctl tenants) and the metrics.
  auto listed = admin_->ListTenants();
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->tenants_size(), 6);
  EXPECT_EQ(listed->tenants(1).name(), "beta");
  EXPECT_EQ(listed->tenants(1).max_streams(), 2);
  EXPECT_EQ(listed->tenants(1).rejected_cap(), 1u);
  EXPECT_EQ(listed->tenants(1).completion_tokens(), usage[1].completion_tokens);
  const std::string metrics = daemon_->metrics().Serialize();
  EXPECT_NE(metrics.find("minfer_tenant_requests_total{result=\"rejected_cap\",tenant=\"beta\"} 1"),
            std::string::npos);
  EXPECT_NE(metrics.find("minfer_tenant_requests_total{result=\"rejected_model\",tenant=\"restricted\"} 2"),
            std::string::npos);
  EXPECT_NE(metrics.find(absl::StrCat("minfer_tenant_tokens_total{kind=\"completion\",tenant=\"beta\"} ",
                                      usage[1].completion_tokens)),
            std::string::npos);
  EXPECT_NE(metrics.find("minfer_tenant_streams{tenant=\"beta\"} 0"), std::string::npos);
}

// The release test's attack: tenant beta resends tenant alpha's prompt (or
// its opening) and reads from usage whether alpha sent it. With the prefix
// cache keyed by tenant, beta computes every token (cached 0) while alpha's
// own resend is served from the cache; tenants of one cache_group share; a
// request's cache_salt splits a tenant's cache.
TEST_F(TenantsDaemonTest, ThePrefixCacheIsEachTenantsOwn) {
  std::string secret = "The quarterly figures of the confidential merger between";
  for (int i = 0; i < 12; ++i) secret += absl::StrCat(" clause ", i, " reads as follows;");
  auto cached = [&](const std::string& key, const std::string& salt = "") -> int32_t {
    v1::GenerateRequest r = TextRequest("m", secret, 2);
    r.set_cache_salt(salt);
    auto g = As(key)->Generate(r);
    EXPECT_TRUE(g.ok()) << g.status();
    return g.ok() ? g->usage.cached_prompt_tokens() : -1;
  };
  EXPECT_EQ(cached("key-alpha"), 0);
  const int32_t alpha_again = cached("key-alpha");
  EXPECT_GE(alpha_again, 64);  // the cache works (its full blocks)
  EXPECT_EQ(cached("key-beta"), 0);  // another tenant: nothing cached for it
  EXPECT_EQ(cached("key-beta"), alpha_again);  // its own copy from now on
  // One cache group: docs-2 finds what docs-1 computed (not alpha's).
  EXPECT_EQ(cached("key-docs-1"), 0);
  EXPECT_EQ(cached("key-docs-2"), alpha_again);
  // cache_salt: the same tenant with another salt shares nothing; the same
  // salt shares.
  EXPECT_EQ(cached("key-alpha", "user-17"), 0);
  EXPECT_EQ(cached("key-alpha", "user-18"), 0);
  EXPECT_EQ(cached("key-alpha", "user-17"), alpha_again);
  // A salt over 256 bytes is refused, naming the field.
  v1::GenerateRequest big = TextRequest("m", "hi", 2);
  big.set_cache_salt(std::string(257, 's'));
  auto refused = As("key-alpha")->Generate(big);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message(), "cache_salt: 257 bytes, at most 256");
  // The HTTP API: beta's completion of alpha's prompt reports no cached
  // tokens; alpha's reports its own.
  const std::string url = absl::StrCat("http://", daemon_->http_address(), "/v1/completions");
  auto http_cached = [&](const std::string& key) {
    auto r = minfer::testing::RunCommand(
        {"/usr/bin/env", "curl", "-s", "-H", "Authorization: Bearer " + key, "-H",
         "Content-Type: application/json", "-d",
         absl::StrCat(R"({"model": "m", "max_tokens": 2, "cache_salt": "web", "prompt": ")",
                      secret, R"("})"),
         url});
    EXPECT_TRUE(r.ok());
    return r.ok() ? r->out : std::string();
  };
  EXPECT_NE(http_cached("key-alpha").find(R"("cached_tokens":0)"), std::string::npos);
  const std::string again = http_cached("key-alpha");
  EXPECT_NE(again.find(absl::StrCat(R"("cached_tokens":)", alpha_again)), std::string::npos)
      << again;
  EXPECT_NE(http_cached("key-beta").find(R"("cached_tokens":0)"), std::string::npos);
}

// Tokenize and Detokenize name a model: a tenant may use them only on its
// models, as Generate (PERMISSION_DENIED).
TEST_F(TenantsDaemonTest, TokenizeAndDetokenizeCheckTheTenantsModels) {
  v1::TokenizeRequest tok;
  tok.set_model("m");
  tok.set_text("hello");
  auto denied = As("key-restricted")->Tokenize(tok);
  EXPECT_EQ(denied.status().code(), absl::StatusCode::kPermissionDenied) << denied.status();
  EXPECT_EQ(denied.status().message(), "tenant 'restricted' may not use model 'm'");
  auto de_denied = As("key-restricted")->Detokenize("m", {1});
  EXPECT_EQ(de_denied.status().code(), absl::StatusCode::kPermissionDenied) << de_denied.status();
  EXPECT_EQ(de_denied.status().message(), "tenant 'restricted' may not use model 'm'");
  auto ok = As("key-alpha")->Tokenize(tok);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_GT(ok->ids_size(), 0);
  auto text = As("key-alpha")->Detokenize("m", {ok->ids().begin(), ok->ids().end()});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "hello");
}

// A tenant granted an alias follows it when the alias is re-pointed (what
// hot swap is for), and is never granted the models behind it by name.
TEST_F(TenantsDaemonTest, ATenantGrantedAnAliasFollowsItWhenRePointed) {
  auto path = minfer::testing::TestModelPath("tiny-untied", "q8_0", 1);
  ASSERT_TRUE(path.ok());
  v1::LoadModelRequest load;
  load.set_name("m2");
  load.set_path(*path);
  load.set_n_ctx(512);
  load.set_parallel(2);
  ASSERT_TRUE(admin_->LoadModel(load).ok());
  ASSERT_TRUE(admin_->SetAlias("elsewhere", "m").ok());
  auto restricted = As("key-restricted");
  auto first = restricted->Generate(TextRequest("elsewhere", "hello", 3));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->model, "m");
  ASSERT_TRUE(admin_->SetAlias("elsewhere", "m2").ok());
  auto second = restricted->Generate(TextRequest("elsewhere", "hello", 3));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->model, "m2");
  for (const char* direct : {"m", "m2"}) {
    EXPECT_EQ(restricted->Generate(TextRequest(direct, "hello", 3)).status().code(),
              absl::StatusCode::kPermissionDenied)
        << direct;
  }
}

// Quota 100 tokens / 60 s: eight 60-token streams (a short prompt +
// max_tokens 56) asked for at once. Each reserves its prompt + max_tokens at
// admission, so one runs and seven are refused with quota_exceeded (before
// reservations all eight ran: 480 tokens). Over HTTP the refusal is a 429
// whose code says quota_exceeded.
TEST_F(TenantsDaemonTest, AQuotaHoldsAgainstConcurrentStreams) {
  auto metered = As("key-metered");
  std::vector<absl::StatusOr<client::GenerateResult>> runs(8, absl::UnknownError(""));
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] { runs[i] = metered->Generate(TextRequest("m", "count", 56)); });
  }
  for (auto& t : threads) t.join();
  int ok = 0, refused = 0;
  int64_t used = 0;
  for (const auto& r : runs) {
    if (r.ok()) {
      ++ok;
      used += r->usage.prompt_tokens() + r->usage.completion_tokens();
      continue;
    }
    EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
    EXPECT_TRUE(absl::StartsWith(r.status().message(), "quota_exceeded: ")) << r.status();
    ++refused;
  }
  EXPECT_EQ(ok, 1);
  EXPECT_EQ(refused, 7);
  EXPECT_LE(used, 100);
  const auto usage = daemon_->tenants()->Snapshot();
  EXPECT_EQ(usage[5].name, "metered");
  EXPECT_EQ(usage[5].reserved_tokens, 0);
  EXPECT_EQ(usage[5].window_tokens, used);
  EXPECT_EQ(usage[5].rejected_quota, 7u);
  // The admin API reports the same (reservations settled: none left).
  auto listed = admin_->ListTenants();
  ASSERT_TRUE(listed.ok()) << listed.status();
  bool seen = false;
  for (const v1::TenantStatus& t : listed->tenants()) {
    if (t.name() != "metered") continue;
    seen = true;
    EXPECT_EQ(t.reserved_tokens(), 0);
    EXPECT_EQ(t.window_tokens(), used);
    EXPECT_EQ(t.rejected_quota(), 7u);
  }
  EXPECT_TRUE(seen);
  auto r = minfer::testing::RunCommand(
      {"/usr/bin/env", "curl", "-s", "-w", "\n%{http_code}", "-H",
       "Authorization: Bearer key-metered", "-H", "Content-Type: application/json", "-d",
       R"({"model": "m", "prompt": "count", "max_tokens": 90})",
       absl::StrCat("http://", daemon_->http_address(), "/v1/completions")});
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->out.find(R"("code":"quota_exceeded")"), std::string::npos) << r->out;
  EXPECT_NE(r->out.find("\n429"), std::string::npos) << r->out;
}

TEST_F(TenantsDaemonTest, ASmallTenantGetsAtLeastTheBigTenantsPerStreamRate) {
  // Long enough that alpha's first wave is still decoding when its last
  // stream has queued, even on a loaded 2-core CI machine (48 tokens took
  // ~25 ms a wave there, shorter than starting 16 client threads).
  constexpr int kA = 16, kB = 2, kTokens = 256;
  auto alpha = As("key-alpha");
  auto beta = As("key-beta");
  std::vector<absl::StatusOr<client::GenerateResult>> a(kA, absl::UnknownError("")),
      b(kB, absl::UnknownError(""));
  std::vector<std::thread> threads;
  for (int i = 0; i < kA; ++i) {
    threads.emplace_back([&, i] {
      a[i] = alpha->Generate(TextRequest("m", absl::StrCat("alpha stream ", i), kTokens));
    });
  }
  // Alpha holds every slot before beta arrives.
  const bool alpha_holds_all = testing::WaitFor([&] {
    auto st = admin_->GetModelStatus("m");
    return st.ok() && st->active_sequences() == 8 && st->queued_sequences() == kA - 8;
  });
  if (!alpha_holds_all) {
    for (auto& t : threads) t.join();  // a failed test must not leave threads running
    FAIL() << "alpha's 16 streams never held 8 slots with 8 queued";
  }
  for (int i = 0; i < kB; ++i) {
    threads.emplace_back([&, i] {
      b[i] = beta->Generate(TextRequest("m", absl::StrCat("beta stream ", i), kTokens));
    });
  }
  for (auto& t : threads) t.join();
  // Per stream: its tokens over its whole time, queueing included.
  auto rate = [](const client::GenerateResult& r) {
    return r.token_ids.size() / r.usage.total_seconds();
  };
  double a_mean = 0;
  for (const auto& r : a) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->token_ids.size(), static_cast<size_t>(kTokens));
    a_mean += rate(*r) / kA;
  }
  for (const auto& r : b) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->token_ids.size(), static_cast<size_t>(kTokens));
    EXPECT_GE(rate(*r), a_mean) << "beta's stream waited behind alpha's";
    // It started within a few steps, not after alpha's first wave.
    EXPECT_LT(r->usage.queue_seconds(), a[0]->usage.total_seconds() / 2);
  }
  std::printf("per-stream tok/s over the whole request: alpha mean %.1f; beta %.1f, %.1f\n",
              a_mean, rate(*b[0]), rate(*b[1]));
  auto st = admin_->GetModelStatus("m");
  ASSERT_TRUE(st.ok());
  EXPECT_GE(st->kv_pool().preemptions(), 2u);  // alpha's newest two gave way
}

}  // namespace
}  // namespace minfer::daemon
