// Tenants: who may generate, how much, and with what share of a model.
//
// The daemon's config lists tenants (config.h "tenants"), each with its API
// keys, a weight, a cap on concurrent streams, a token quota over a sliding
// window, and the models it may use. Both front doors identify the tenant
// from "Authorization: Bearer KEY" (gRPC metadata, HTTP header), and
// SubmitGenerate (daemon/api/generate_request.h) admits the request against the
// tenant's limits and tags it with the tenant's share group and weight,
// which the model's scheduler uses to share sequence slots and the token
// budget (engine/runtime/scheduler.h). Without tenants configured nothing
// of this applies and behaviour is as before.
//
// Quotas are reserved at admission: a stream reserves what it may use
// (prompt + max_tokens), counted against the quota with the window's
// booked tokens and the other streams' reservations, and settles with the
// real figures when it finishes (the unused part returns at once). So
// streams admitted together can never exceed the quota between them,
// however many race for it.
//
// Prefix-cache isolation: each tenant's requests use their own prefix-cache
// namespace (CacheNamespace), so one tenant can not learn another's prompts
// from cached token counts or timing; tenants that name the same
// cache_group share one namespace (a common system prompt, by the
// operator's choice).
//
// Keys are compared in constant time (over every key of every tenant) and
// never logged or echoed. Thread-safe.
#ifndef MINFER_DAEMON_SERVING_TENANTS_H_
#define MINFER_DAEMON_SERVING_TENANTS_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/serving/metrics.h"

namespace minfer::daemon {

struct TenantConfig {
  std::string name;
  std::vector<std::string> api_keys;
  std::string api_key_file;  // read into api_keys by FinalizeConfig
  double weight = 1.0;       // share of a model against other tenants (> 0)
  int32_t max_streams = 0;   // concurrent streams over all models; 0 = no cap
  int32_t max_streams_per_model = 0;  // concurrent streams on any one model; 0 = no cap
  // Prompt + completion tokens of finished streams within the last
  // quota_window_seconds; 0 = no quota.
  int64_t quota_tokens = 0;
  double quota_window_seconds = 60;
  std::vector<std::string> models;  // models or aliases it may use; empty = all
  // Tenants naming the same group share their prefix cache with each other;
  // empty: the tenant's cache is its own.
  std::string cache_group;
};

// A refusal because a tenant's token quota is spent: RESOURCE_EXHAUSTED
// whose message starts with "quota_exceeded: ", marked (a status payload)
// so API layers tell it from other RESOURCE_EXHAUSTED errors (a full queue,
// a stream cap) without reading the message.
absl::Status QuotaExceededError(absl::string_view message);
bool IsQuotaExceeded(const absl::Status& status);

class Tenants;

// One admitted stream of a tenant: counts against its caps, and its
// reservation against the quota, until it has Finished() (which books its
// real tokens against the quota and drops the reservation) or, if it never
// ran, until the lease is destroyed (nothing booked). Finished comes before
// the client sees the stream's end, so a client that opens its next stream
// at once is never refused for the one that just ended.
class TenantLease {
 public:
  ~TenantLease();
  TenantLease(const TenantLease&) = delete;
  TenantLease& operator=(const TenantLease&) = delete;
  void Finished(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens,
                double queue_seconds);
  const std::string& tenant() const;

 private:
  friend class Tenants;
  TenantLease(Tenants* owner, int index, std::string model, int64_t reserved)
      : owner_(owner), index_(index), model_(std::move(model)), reserved_(reserved) {}
  Tenants* owner_;
  int index_;
  std::string model_;  // resolved
  int64_t reserved_;   // quota tokens held until Finished
  bool finished_ = false;
};

class Tenants {
 public:
  using Clock = std::chrono::steady_clock;

  // INVALID_ARGUMENT naming the tenant and field: empty or duplicate names,
  // no key, a key shared by two tenants, weight <= 0, negative caps. (A key
  // equal to the admin token is refused by FinalizeConfig, which sees both.)
  static absl::StatusOr<std::unique_ptr<Tenants>> Create(std::vector<TenantConfig> configs);

  int size() const { return static_cast<int>(tenants_.size()); }

  // The tenant of an "Authorization" value ("Bearer KEY"); -1 with
  // UNAUTHENTICATED when it is missing, malformed or not a tenant's key.
  absl::StatusOr<int> Identify(absl::string_view authorization) const;

  // Admits one stream of tenant `index` to `model` (as requested) resolved
  // to `resolved`, that may use up to `prompt_tokens` + `max_completion_tokens`
  // tokens (reserved against the quota until the lease settles):
  // PERMISSION_DENIED when neither name is among its models,
  // RESOURCE_EXHAUSTED (saying which limit, with the figures) over its
  // stream cap, and QuotaExceededError when the window's booked tokens, the
  // reservations of its streams in flight and this one's would pass the
  // quota (or this one's alone would).
  absl::StatusOr<std::shared_ptr<TenantLease>> Admit(int index, const std::string& model,
                                                     const std::string& resolved,
                                                     int64_t prompt_tokens,
                                                     int64_t max_completion_tokens);

  // Whether tenant `index` may use `model` (as named) resolved to `resolved`.
  bool Allows(int index, const std::string& model, const std::string& resolved) const;

  const std::string& name(int index) const { return tenants_[index].config.name; }
  double weight(int index) const { return tenants_[index].config.weight; }
  // The scheduler's share group of a tenant (0 is the default group).
  static uint32_t Group(int index) { return static_cast<uint32_t>(index) + 1; }
  // The tenant's prefix-cache namespace: its cache group's, or its own. Never
  // empty (the empty namespace is that of requests without a tenant) and
  // never equal for two tenants unless they name the same cache_group.
  std::string CacheNamespace(int index) const;

  struct Usage {
    std::string name;
    double weight = 1;
    int32_t streams = 0;
    int32_t max_streams = 0;
    int64_t window_tokens = 0;    // booked within the quota window
    int64_t reserved_tokens = 0;  // held by streams in flight
    int64_t quota_tokens = 0;
    double quota_window_seconds = 0;
    uint64_t admitted = 0;
    uint64_t rejected_cap = 0;
    uint64_t rejected_quota = 0;
    uint64_t rejected_model = 0;
    uint64_t prompt_tokens = 0;
    uint64_t completion_tokens = 0;
    uint64_t cached_tokens = 0;
  };
  std::vector<Usage> Snapshot() const;

  // Publishes each tenant's series (metrics.h) from now on; `metrics` must
  // outlive this.
  void set_metrics(Metrics* metrics);

  // Tests: the clock the quota window reads.
  void set_clock(std::function<Clock::time_point()> now) { now_ = std::move(now); }

 private:
  friend class TenantLease;
  struct Tenant {
    TenantConfig config;
    int32_t streams = 0;
    std::map<std::string, int32_t> model_streams;  // by resolved model
    std::deque<std::pair<Clock::time_point, int64_t>> booked;  // finished streams' tokens
    int64_t reserved = 0;  // quota tokens its streams in flight hold
    Usage counters;
    Metrics::TenantMetrics* metrics = nullptr;
  };
  explicit Tenants(std::vector<Tenant> t) : tenants_(std::move(t)) {}
  int64_t WindowTokens(Tenant& t, Clock::time_point now) const;
  // Ends a stream: drops its stream counts and its reservation.
  void Release(int index, const std::string& model, int64_t reserved);
  void Book(int index, int64_t prompt, int64_t completion, int64_t cached, double queue_seconds);

  mutable std::mutex mu_;
  // Guarded by mu_ (configs are immutable); mutable: reading the quota
  // window drops what fell out of it.
  mutable std::vector<Tenant> tenants_;
  std::function<Clock::time_point()> now_ = [] { return Clock::now(); };
};

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_SERVING_TENANTS_H_
