// Tenants (daemon/serving/tenants.h) on their own: configuration errors, key
// identification, model permissions, the stream cap and the token quota
// over a sliding window (a fake clock).
#include "daemon/serving/tenants.h"

#include <memory>
#include <vector>

#include "absl/strings/match.h"
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
  EXPECT_TRUE(t.Admit(0, "prod", "m7", 0, 0).ok());
  EXPECT_TRUE(t.Admit(0, "m7", "prod", 0, 0).ok());
  auto denied = t.Admit(0, "other", "m7", 0, 0);
  EXPECT_TRUE(absl::IsPermissionDenied(denied.status()));
  EXPECT_EQ(denied.status().message(), "tenant 'a' may not use model 'm7'");
  EXPECT_TRUE(t.Admit(1, "other", "other", 0, 0).ok());  // b: every model

  // Cap: two streams at once; a third is refused until one ends.
  auto s1 = t.Admit(0, "prod", "m7", 0, 0);
  auto s2 = t.Admit(0, "prod", "m7", 0, 0);
  ASSERT_TRUE(s1.ok() && s2.ok());
  auto s3 = t.Admit(0, "prod", "m7", 0, 0);
  EXPECT_TRUE(absl::IsResourceExhausted(s3.status()));
  EXPECT_EQ(s3.status().message(), "tenant 'a' has 2 of its 2 concurrent streams open");
  EXPECT_EQ(t.Snapshot()[0].streams, 2);
  (*s1)->Finished(30, 50, 16, 0.0);  // the slot is free as soon as the stream ends
  EXPECT_EQ(t.Snapshot()[0].streams, 1);
  s1->reset();
  EXPECT_EQ(t.Snapshot()[0].streams, 1);

  // Quota: 80 of 100 booked; a stream that may use 20 (prompt 10 +
  // max_tokens 10) may start; it uses 15 and the unused 5 come back. Then
  // one that may use 6 is refused (95 + 6 > 100), one of 5 is not, until
  // the window passes.
  auto s4 = t.Admit(0, "prod", "m7", 10, 10);
  ASSERT_TRUE(s4.ok());
  EXPECT_EQ(t.Snapshot()[0].reserved_tokens, 20);
  now += std::chrono::seconds(10);
  (*s4)->Finished(10, 5, 0, 0.0);
  (*s4)->Finished(10, 5, 0, 0.0);  // once only
  s4->reset();
  EXPECT_EQ(t.Snapshot()[0].window_tokens, 95);
  EXPECT_EQ(t.Snapshot()[0].reserved_tokens, 0);
  auto over = t.Admit(0, "prod", "m7", 3, 3);
  EXPECT_TRUE(absl::IsResourceExhausted(over.status()));
  EXPECT_TRUE(IsQuotaExceeded(over.status()));
  EXPECT_EQ(over.status().message(),
            "quota_exceeded: tenant 'a' used 95 and holds 0 for streams in flight of its 100 "
            "tokens in the last 60 s; this request may use 6 (prompt 3 + max_tokens 3); retry "
            "later");
  EXPECT_TRUE(t.Admit(0, "prod", "m7", 3, 2).ok());  // (released at once: never ran)
  now += std::chrono::seconds(55);  // the first booking (80) is 65 s old
  EXPECT_EQ(t.Snapshot()[0].window_tokens, 15);
  EXPECT_TRUE(t.Admit(0, "prod", "m7", 40, 45).ok());

  const Tenants::Usage u = t.Snapshot()[0];
  EXPECT_EQ(u.prompt_tokens, 40u);
  EXPECT_EQ(u.completion_tokens, 55u);
  EXPECT_EQ(u.cached_tokens, 16u);
  EXPECT_EQ(u.rejected_model, 1u);
  EXPECT_EQ(u.rejected_cap, 1u);
  EXPECT_EQ(u.rejected_quota, 1u);
  EXPECT_EQ(u.streams, 1);  // s2
}

// The race of the release test: quota 100 tokens / 60 s, no stream cap,
// eight streams of 60 tokens (prompt 10 + max_tokens 50) asked for at the
// same moment. Each reserves its 60 at admission, so only the first is
// admitted (a second would make 120); the rest are refused with
// quota_exceeded. When the first finishes with 30 tokens, 70 are left: one
// more 60-token stream fits, and then none, until the window moves on.
TEST(TenantsTest, ConcurrentAdmissionsReserveAgainstTheQuota) {
  TenantConfig a = T("a", {"ka"});
  a.quota_tokens = 100;
  a.quota_window_seconds = 60;
  auto tt = Tenants::Create({a});
  ASSERT_TRUE(tt.ok());
  Tenants& t = **tt;
  Tenants::Clock::time_point now{};
  t.set_clock([&] { return now; });
  std::vector<std::shared_ptr<TenantLease>> admitted;
  int refused = 0;
  for (int i = 0; i < 8; ++i) {
    auto lease = t.Admit(0, "m", "m", 10, 50);
    if (lease.ok()) {
      admitted.push_back(*lease);
    } else {
      EXPECT_TRUE(IsQuotaExceeded(lease.status())) << lease.status();
      EXPECT_TRUE(absl::StartsWith(lease.status().message(), "quota_exceeded: "));
      ++refused;
    }
  }
  EXPECT_EQ(admitted.size(), 1u);
  EXPECT_EQ(refused, 7);
  Tenants::Usage u = t.Snapshot()[0];
  EXPECT_EQ(u.streams, 1);
  EXPECT_EQ(u.reserved_tokens, 60);
  EXPECT_EQ(u.rejected_quota, 7u);
  now += std::chrono::seconds(5);
  admitted[0]->Finished(10, 20, 0, 0.0);  // settles: 30 booked, 30 returned
  u = t.Snapshot()[0];
  EXPECT_EQ(u.window_tokens, 30);
  EXPECT_EQ(u.reserved_tokens, 0);
  auto second = t.Admit(0, "m", "m", 10, 50);
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(t.Admit(0, "m", "m", 10, 50).ok());
  EXPECT_EQ(t.Snapshot()[0].reserved_tokens, 60);
  // A stream that never ran books nothing: its reservation just returns.
  second->reset();
  EXPECT_EQ(t.Snapshot()[0].reserved_tokens, 0);
  EXPECT_EQ(t.Snapshot()[0].window_tokens, 30);
  // A request that could never fit the quota says so.
  auto huge = t.Admit(0, "m", "m", 10, 200);
  EXPECT_TRUE(IsQuotaExceeded(huge.status()));
  EXPECT_EQ(huge.status().message(),
            "quota_exceeded: a request of tenant 'a' may use 210 tokens (prompt 10 + max_tokens "
            "200), more than its whole quota of 100 tokens per 60 s; lower max_tokens");
  // Other RESOURCE_EXHAUSTED refusals are not quota refusals.
  EXPECT_FALSE(IsQuotaExceeded(absl::ResourceExhaustedError("quota_exceeded: queue")));
}

// Without a quota nothing is reserved, whatever a request may use.
TEST(TenantsTest, NoQuotaNoReservation) {
  auto tt = Tenants::Create({T("a", {"ka"})});
  ASSERT_TRUE(tt.ok());
  std::vector<std::shared_ptr<TenantLease>> leases;
  for (int i = 0; i < 8; ++i) {
    auto l = (*tt)->Admit(0, "m", "m", 1000, 4096);
    ASSERT_TRUE(l.ok());
    leases.push_back(*l);
  }
  EXPECT_EQ((*tt)->Snapshot()[0].reserved_tokens, 0);
  EXPECT_EQ((*tt)->Snapshot()[0].streams, 8);
}

// Prefix-cache namespaces: one per tenant, shared by tenants of one
// cache_group, never empty (the namespace of requests without tenants),
// and a group never meets a tenant of the same name.
TEST(TenantsTest, CacheNamespaces) {
  TenantConfig a = T("a", {"ka"}), b = T("b", {"kb"}), c = T("c", {"kc"}), d = T("d", {"kd"}),
               e = T("e", {"ke"});
  c.cache_group = "docs";
  d.cache_group = "docs";
  e.cache_group = "a";
  auto tt = Tenants::Create({a, b, c, d, e});
  ASSERT_TRUE(tt.ok());
  const Tenants& t = **tt;
  EXPECT_EQ(t.CacheNamespace(0), "tenant:a");
  EXPECT_EQ(t.CacheNamespace(1), "tenant:b");
  EXPECT_EQ(t.CacheNamespace(2), "group:docs");
  EXPECT_EQ(t.CacheNamespace(3), "group:docs");
  EXPECT_EQ(t.CacheNamespace(4), "group:a");
}

TEST(TenantsTest, PerModelCap) {
  TenantConfig a = T("a", {"ka"});
  a.max_streams_per_model = 1;
  auto tt = Tenants::Create({a});
  ASSERT_TRUE(tt.ok());
  Tenants& t = **tt;
  auto on_m = t.Admit(0, "prod", "m", 0, 0);  // through an alias: counted on the model
  ASSERT_TRUE(on_m.ok());
  auto again = t.Admit(0, "m", "m", 0, 0);
  EXPECT_TRUE(absl::IsResourceExhausted(again.status()));
  EXPECT_EQ(again.status().message(),
            "tenant 'a' has 1 of its 1 concurrent streams on model 'm' open");
  auto other = t.Admit(0, "n", "n", 0, 0);  // another model: its own count
  EXPECT_TRUE(other.ok());
  on_m->reset();
  EXPECT_TRUE(t.Admit(0, "m", "m", 0, 0).ok());
}

}  // namespace
}  // namespace minfer::daemon
