#include "daemon/serving/tenants.h"

#include <algorithm>
#include <set>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "daemon/serving/client_input.h"

namespace minfer::daemon {
namespace {

constexpr char kQuotaPayload[] = "type.minfer.dev/quota_exceeded";

}  // namespace

absl::Status QuotaExceededError(absl::string_view message) {
  absl::Status s = absl::ResourceExhaustedError(absl::StrCat("quota_exceeded: ", message));
  s.SetPayload(kQuotaPayload, absl::Cord("1"));
  return s;
}

bool IsQuotaExceeded(const absl::Status& status) {
  return absl::IsResourceExhausted(status) && status.GetPayload(kQuotaPayload).has_value();
}

TenantLease::~TenantLease() {
  if (!finished_) owner_->Release(index_, model_, reserved_);
}

void TenantLease::Finished(int64_t prompt_tokens, int64_t completion_tokens,
                           int64_t cached_tokens, double queue_seconds) {
  if (finished_) return;
  finished_ = true;
  owner_->Book(index_, prompt_tokens, completion_tokens, cached_tokens, queue_seconds);
  owner_->Release(index_, model_, reserved_);
}

const std::string& TenantLease::tenant() const { return owner_->name(index_); }

absl::StatusOr<std::unique_ptr<Tenants>> Tenants::Create(std::vector<TenantConfig> configs) {
  std::set<std::string> names, keys;
  std::vector<Tenant> out;
  for (size_t i = 0; i < configs.size(); ++i) {
    TenantConfig& c = configs[i];
    const std::string where = c.name.empty() ? absl::StrCat("tenants[", i, "]")
                                             : absl::StrCat("tenant '", c.name, "'");
    if (c.name.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": name is empty"));
    if (!names.insert(c.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(where, " is listed twice"));
    }
    if (c.api_keys.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": no API key (api_keys or api_key_file)"));
    }
    for (const std::string& k : c.api_keys) {
      if (k.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": an API key is empty"));
      if (!keys.insert(k).second) {
        // Never the key itself.
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": an API key is also another tenant's (or listed twice)"));
      }
    }
    if (!(c.weight > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": weight must be > 0"));
    }
    if (c.max_streams < 0 || c.max_streams_per_model < 0 || c.quota_tokens < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": max_streams, max_streams_per_model and quota.tokens must be >= 0"));
    }
    if (c.quota_tokens > 0 && !(c.quota_window_seconds > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": quota.window_seconds must be > 0"));
    }
    Tenant t;
    t.counters.name = c.name;
    t.config = std::move(c);
    out.push_back(std::move(t));
  }
  return std::unique_ptr<Tenants>(new Tenants(std::move(out)));
}

absl::StatusOr<int> Tenants::Identify(absl::string_view authorization) const {
  if (authorization.empty()) {
    return absl::UnauthenticatedError(
        "no API key: send 'Authorization: Bearer KEY' (gRPC metadata or HTTP header) with a "
        "tenant's key");
  }
  if (!absl::ConsumePrefix(&authorization, "Bearer ")) {
    return absl::UnauthenticatedError("the Authorization value must read 'Bearer KEY'");
  }
  int found = -1;
  // Every key is compared, whichever matches, so the time says nothing
  // about which tenant (or how much of a key) matched.
  for (size_t i = 0; i < tenants_.size(); ++i) {
    for (const std::string& k : tenants_[i].config.api_keys) {
      if (ConstantTimeEquals(authorization, k)) found = static_cast<int>(i);
    }
  }
  if (found < 0) return absl::UnauthenticatedError("the API key is not valid");
  return found;
}

int64_t Tenants::WindowTokens(Tenant& t, Clock::time_point now) const {
  const auto window = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(t.config.quota_window_seconds));
  while (!t.booked.empty() && now - t.booked.front().first > window) t.booked.pop_front();
  int64_t sum = 0;
  for (const auto& [when, n] : t.booked) sum += n;
  return sum;
}

bool Tenants::Allows(int index, const std::string& model, const std::string& resolved) const {
  // (configs are immutable: no lock)
  const std::vector<std::string>& m = tenants_[index].config.models;
  return m.empty() || std::find(m.begin(), m.end(), model) != m.end() ||
         std::find(m.begin(), m.end(), resolved) != m.end();
}

std::string Tenants::CacheNamespace(int index) const {
  // (configs are immutable: no lock.) Prefixes keep a group and a tenant of
  // the same name apart.
  const TenantConfig& c = tenants_[index].config;
  return c.cache_group.empty() ? absl::StrCat("tenant:", c.name)
                               : absl::StrCat("group:", c.cache_group);
}

absl::StatusOr<std::shared_ptr<TenantLease>> Tenants::Admit(int index, const std::string& model,
                                                           const std::string& resolved,
                                                           int64_t prompt_tokens,
                                                           int64_t max_completion_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  Tenant& t = tenants_[index];
  const TenantConfig& c = t.config;
  if (!Allows(index, model, resolved)) {
    t.counters.rejected_model++;
    if (t.metrics != nullptr) t.metrics->rejected_model->Increment();
    return absl::PermissionDeniedError(
        absl::StrCat("tenant '", c.name, "' may not use model '", resolved, "'"));
  }
  if (c.max_streams > 0 && t.streams >= c.max_streams) {
    t.counters.rejected_cap++;
    if (t.metrics != nullptr) t.metrics->rejected_cap->Increment();
    return absl::ResourceExhaustedError(absl::StrCat("tenant '", c.name, "' has ", t.streams,
                                                     " of its ", c.max_streams,
                                                     " concurrent streams open"));
  }
  if (c.max_streams_per_model > 0 && t.model_streams[resolved] >= c.max_streams_per_model) {
    t.counters.rejected_cap++;
    if (t.metrics != nullptr) t.metrics->rejected_cap->Increment();
    return absl::ResourceExhaustedError(absl::StrCat(
        "tenant '", c.name, "' has ", t.model_streams[resolved], " of its ",
        c.max_streams_per_model, " concurrent streams on model '", resolved, "' open"));
  }
  const int64_t reserve = std::max<int64_t>(prompt_tokens, 0) +
                          std::max<int64_t>(max_completion_tokens, 0);
  if (c.quota_tokens > 0) {
    // What this stream may use is held from now on, so streams admitted at
    // the same moment see each other's reservations and can not overrun
    // the quota together.
    auto refuse = [&](const std::string& message) {
      t.counters.rejected_quota++;
      if (t.metrics != nullptr) t.metrics->rejected_quota->Increment();
      return QuotaExceededError(message);
    };
    if (reserve > c.quota_tokens) {
      return refuse(absl::StrFormat(
          "a request of tenant '%s' may use %d tokens (prompt %d + max_tokens %d), more than "
          "its whole quota of %d tokens per %g s; lower max_tokens",
          c.name, reserve, prompt_tokens, max_completion_tokens, c.quota_tokens,
          c.quota_window_seconds));
    }
    const int64_t used = WindowTokens(t, now_());
    if (used + t.reserved + reserve > c.quota_tokens) {
      return refuse(absl::StrFormat(
          "tenant '%s' used %d and holds %d for streams in flight of its %d tokens in the last "
          "%g s; this request may use %d (prompt %d + max_tokens %d); retry later",
          c.name, used, t.reserved, c.quota_tokens, c.quota_window_seconds, reserve,
          prompt_tokens, max_completion_tokens));
    }
  }
  // Without a quota nothing is held (and nothing given back).
  const int64_t held = c.quota_tokens > 0 ? reserve : 0;
  t.reserved += held;
  t.streams++;
  t.model_streams[resolved]++;
  t.counters.admitted++;
  if (t.metrics != nullptr) {
    t.metrics->admitted->Increment();
    t.metrics->streams->Set(t.streams);
  }
  return std::shared_ptr<TenantLease>(new TenantLease(this, index, resolved, held));
}

void Tenants::Release(int index, const std::string& model, int64_t reserved) {
  std::lock_guard<std::mutex> lock(mu_);
  Tenant& t = tenants_[index];
  t.reserved -= reserved;
  t.streams--;
  if (--t.model_streams[model] <= 0) t.model_streams.erase(model);
  if (t.metrics != nullptr) t.metrics->streams->Set(t.streams);
}

void Tenants::set_metrics(Metrics* metrics) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Tenant& t : tenants_) {
    t.metrics = metrics != nullptr ? metrics->ForTenant(t.config.name) : nullptr;
    if (t.metrics != nullptr) t.metrics->streams->Set(t.streams);
  }
}

void Tenants::Book(int index, int64_t prompt, int64_t completion, int64_t cached,
                   double queue_seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  Tenant& t = tenants_[index];
  if (t.metrics != nullptr) {
    t.metrics->prompt_tokens->Increment(static_cast<double>(prompt));
    t.metrics->completion_tokens->Increment(static_cast<double>(completion));
    t.metrics->cached_tokens->Increment(static_cast<double>(cached));
    t.metrics->queue_time->Observe(queue_seconds);
  }
  t.booked.emplace_back(now_(), prompt + completion);
  t.counters.prompt_tokens += static_cast<uint64_t>(prompt);
  t.counters.completion_tokens += static_cast<uint64_t>(completion);
  t.counters.cached_tokens += static_cast<uint64_t>(cached);
}

std::vector<Tenants::Usage> Tenants::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Usage> out;
  for (Tenant& t : tenants_) {
    Usage u = t.counters;
    u.weight = t.config.weight;
    u.streams = t.streams;
    u.max_streams = t.config.max_streams;
    u.quota_tokens = t.config.quota_tokens;
    u.quota_window_seconds = t.config.quota_window_seconds;
    u.window_tokens = WindowTokens(t, now_());
    u.reserved_tokens = t.reserved;
    out.push_back(std::move(u));
  }
  return out;
}

}  // namespace minfer::daemon
