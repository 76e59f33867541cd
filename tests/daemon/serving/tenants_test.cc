// Tenants (daemon/serving/tenants.h) on their own: configuration errors, key
// identification, model permissions, the stream cap and the token quota
// over a sliding window (a fake clock).
#include "daemon/serving/tenants.h"

#include "gtest/gtest.h"

namespace minfer::daemon {
namespace {

TenantConfig T(const std::string& name, std::vector<std::string> keys) {
  TenantConfig t;
  t.name = name;
  t.api_keys = std::move(keys);
  return t;
}

TEST(TenantsTest, ConfigurationErrorsNameTheTenantButNeverAKey) {
  auto err = [](std::vector<TenantConfig> c) {
    auto t = Tenants::Create(std::move(c));
    EXPECT_FALSE(t.ok());
    return std::string(t.status().message());
  };
  EXPECT_EQ(err({T("", {"k"})}), "tenants[0]: name is empty");
  EXPECT_EQ(err({T("a", {"k"}), T("a", {"j"})}), "tenant 'a' is listed twice");
  EXPECT_EQ(err({T("a", {})}), "tenant 'a': no API key (api_keys or api_key_file)");
  const std::string shared = err({T("a", {"secret-1"}), T("b", {"secret-1"})});
  EXPECT_EQ(shared, "tenant 'b': an API key is also another tenant's (or listed twice)");
  EXPECT_EQ(shared.find("secret"), std::string::npos);
  TenantConfig w = T("a", {"k"});
  w.weight = 0;
  EXPECT_EQ(err({w}), "tenant 'a': weight must be > 0");
  TenantConfig q = T("a", {"k"});
  q.quota_tokens = 10;
  q.quota_window_seconds = 0;
  EXPECT_EQ(err({q}), "tenant 'a': quota.window_seconds must be > 0");
}

TEST(TenantsTest, IdentifiesTheTenantOfABearerKey) {
  auto t = Tenants::Create({T("a", {"ka1", "ka2"}), T("b", {"kb"})});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*(*t)->Identify("Bearer ka2"), 0);
  EXPECT_EQ(*(*t)->Identify("Bearer kb"), 1);
  for (const char* bad : {"", "ka1", "Bearer ", "Bearer kb ", "Bearer k", "bearer kb", "Basic kb"}) {
    auto who = (*t)->Identify(bad);
    EXPECT_TRUE(absl::IsUnauthenticated(who.status())) << "'" << bad << "'";
  }
  EXPECT_EQ((*t)->Identify("").status().message(),
            "no API key: send 'Authorization: Bearer KEY' (gRPC metadata or HTTP header) with a "
            "tenant's key");
  EXPECT_EQ((*t)->Identify("Bearer nope").status().message(), "the API key is not valid");
  EXPECT_EQ(Tenants::Group(0), 1u);  // group 0 is the default (no tenant)
}

TEST(TenantsTest, ModelsCapAndQuota) {
  TenantConfig a = T("a", {"ka"});
  a.models = {"prod"};
  a.max_streams = 2;
  a.quota_tokens = 100;
  a.quota_window_seconds = 60;
  auto tt = Tenants::Create({a, T("b", {"kb"})});
  ASSERT_TRUE(tt.ok());
  Tenants& t = **tt;
  Tenants::Clock::time_point now{};
  t.set_clock([&] { return now; });

  // Models: the requested name (an alias) or the model it resolves to.
  EXPECT_TRUE(t.Admit(0, "prod", "m7").ok());
  EXPECT_TRUE(t.Admit(0, "m7", "prod").ok());
  auto denied = t.Admit(0, "other", "m7");
  EXPECT_TRUE(absl::IsPermissionDenied(denied.status()));
  EXPECT_EQ(denied.status().message(), "tenant 'a' may not use model 'm7'");
  EXPECT_TRUE(t.Admit(1, "other", "other").ok());  // b: every model

  // Cap: two streams at once; a third is refused until one ends.
  auto s1 = t.Admit(0, "prod", "m7");
  auto s2 = t.Admit(0, "prod", "m7");
  ASSERT_TRUE(s1.ok() && s2.ok());
  auto s3 = t.Admit(0, "prod", "m7");
  EXPECT_TRUE(absl::IsResourceExhausted(s3.status()));
  EXPECT_EQ(s3.status().message(), "tenant 'a' has 2 of its 2 concurrent streams open");
  EXPECT_EQ(t.Snapshot()[0].streams, 2);
  (*s1)->Finished(30, 50, 16, 0.0);  // the slot is free as soon as the stream ends
  EXPECT_EQ(t.Snapshot()[0].streams, 1);
  s1->reset();
  EXPECT_EQ(t.Snapshot()[0].streams, 1);

  // Quota: 80 of 100 booked; another stream may start, and after it books
  // 30 more (110 >= 100) the next one is refused, until the window passes.
  auto s4 = t.Admit(0, "prod", "m7");
  ASSERT_TRUE(s4.ok());
  now += std::chrono::seconds(10);
  (*s4)->Finished(10, 20, 0, 0.0);
  (*s4)->Finished(10, 20, 0, 0.0);  // once only
  s4->reset();
  EXPECT_EQ(t.Snapshot()[0].window_tokens, 110);
  auto over = t.Admit(0, "prod", "m7");
  EXPECT_TRUE(absl::IsResourceExhausted(over.status()));
  EXPECT_EQ(over.status().message(),
            "tenant 'a' used 110 of its 100 tokens in the last 60 s; retry later");
  now += std::chrono::seconds(55);  // the first booking (80) is 65 s old
  EXPECT_EQ(t.Snapshot()[0].window_tokens, 30);
  EXPECT_TRUE(t.Admit(0, "prod", "m7").ok());

  const Tenants::Usage u = t.Snapshot()[0];
  EXPECT_EQ(u.prompt_tokens, 40u);
  EXPECT_EQ(u.completion_tokens, 70u);
  EXPECT_EQ(u.cached_tokens, 16u);
  EXPECT_EQ(u.rejected_model, 1u);
  EXPECT_EQ(u.rejected_cap, 1u);
  EXPECT_EQ(u.rejected_quota, 1u);
  EXPECT_EQ(u.streams, 1);  // s2
}

TEST(TenantsTest, PerModelCap) {
  TenantConfig a = T("a", {"ka"});
  a.max_streams_per_model = 1;
  auto tt = Tenants::Create({a});
  ASSERT_TRUE(tt.ok());
  Tenants& t = **tt;
  auto on_m = t.Admit(0, "prod", "m");  // through an alias: counted on the model
  ASSERT_TRUE(on_m.ok());
  auto again = t.Admit(0, "m", "m");
  EXPECT_TRUE(absl::IsResourceExhausted(again.status()));
  EXPECT_EQ(again.status().message(),
            "tenant 'a' has 1 of its 1 concurrent streams on model 'm' open");
  auto other = t.Admit(0, "n", "n");  // another model: its own count
  EXPECT_TRUE(other.ok());
  on_m->reset();
  EXPECT_TRUE(t.Admit(0, "m", "m").ok());
}

}  // namespace
}  // namespace minfer::daemon
