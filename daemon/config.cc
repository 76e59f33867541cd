#include "daemon/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "engine/base/status.h"
#include "nlohmann/json.hpp"

namespace minfer::daemon {
namespace {

using Json = nlohmann::json;

// Reads typed values out of a JSON object, naming the key path in errors and
// rejecting keys nobody asked for.
class ObjectReader {
 public:
  ObjectReader(const Json& obj, std::string path, std::string source)
      : obj_(obj), path_(std::move(path)), source_(std::move(source)) {}

  absl::Status Check() const {
    if (!obj_.is_object()) return Error(path_.empty() ? "the document" : path_, "an object");
    return absl::OkStatus();
  }

  const Json* Get(const std::string& key) {
    seen_.insert(key);
    auto it = obj_.find(key);
    return it == obj_.end() ? nullptr : &*it;
  }

  absl::Status String(const std::string& key, std::string* out) {
    const Json* v = Get(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_string()) return Error(Key(key), "a string");
    *out = v->get<std::string>();
    return absl::OkStatus();
  }

  template <typename Int>
  absl::Status Integer(const std::string& key, Int* out, int64_t min_value) {
    const Json* v = Get(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_number_integer() || v->get<int64_t>() < min_value ||
        v->get<int64_t>() > static_cast<int64_t>(std::numeric_limits<Int>::max())) {
      return Error(Key(key), absl::StrCat("an integer >= ", min_value));
    }
    *out = static_cast<Int>(v->get<int64_t>());
    return absl::OkStatus();
  }

  absl::Status Number(const std::string& key, double* out) {
    const Json* v = Get(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_number() || !(v->get<double>() >= 0) || !std::isfinite(v->get<double>())) {
      return Error(Key(key), "a number >= 0");
    }
    *out = v->get<double>();
    return absl::OkStatus();
  }

  absl::Status StringMap(const std::string& key, std::map<std::string, std::string>* out) {
    const Json* v = Get(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_object()) return Error(Key(key), "an object of strings");
    for (auto it = v->begin(); it != v->end(); ++it) {
      if (!it->is_string()) return Error(Key(key) + "." + it.key(), "a string");
      (*out)[it.key()] = it->get<std::string>();
    }
    return absl::OkStatus();
  }

  // INVALID_ARGUMENT naming the first key that was not read.
  absl::Status Done() const {
    for (auto it = obj_.begin(); it != obj_.end(); ++it) {
      if (seen_.count(it.key()) == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(source_, ": unknown key '", Key(it.key()), "'"));
      }
    }
    return absl::OkStatus();
  }

  std::string Key(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

  absl::Status Error(const std::string& key, const std::string& want) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": ", key, " must be ", want));
  }

 private:
  const Json& obj_;
  const std::string path_;
  const std::string source_;
  std::set<std::string> seen_;
};

// An array of strings at `key` (absent: left as is).
absl::Status ReadStringList(ObjectReader& r, const std::string& key,
                            std::vector<std::string>* out) {
  const Json* v = r.Get(key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_array()) return r.Error(r.Key(key), "an array of strings");
  out->clear();
  for (const Json& e : *v) {
    if (!e.is_string()) return r.Error(r.Key(key), "an array of strings");
    out->push_back(e.get<std::string>());
  }
  return absl::OkStatus();
}

absl::Status ReadTenant(const Json& j, const std::string& path, const std::string& source,
                        TenantConfig* t) {
  ObjectReader r(j, path, source);
  RETURN_IF_ERROR(r.Check());
  RETURN_IF_ERROR(r.String("name", &t->name));
  RETURN_IF_ERROR(ReadStringList(r, "api_keys", &t->api_keys));
  RETURN_IF_ERROR(r.String("api_key_file", &t->api_key_file));
  RETURN_IF_ERROR(r.Number("weight", &t->weight));
  RETURN_IF_ERROR(r.Integer("max_streams", &t->max_streams, 0));
  RETURN_IF_ERROR(r.Integer("max_streams_per_model", &t->max_streams_per_model, 0));
  if (const Json* q = r.Get("quota")) {
    ObjectReader qr(*q, path + ".quota", source);
    RETURN_IF_ERROR(qr.Check());
    RETURN_IF_ERROR(qr.Integer("tokens", &t->quota_tokens, 0));
    RETURN_IF_ERROR(qr.Number("window_seconds", &t->quota_window_seconds));
    RETURN_IF_ERROR(qr.Done());
  }
  RETURN_IF_ERROR(ReadStringList(r, "models", &t->models));
  RETURN_IF_ERROR(r.String("cache_group", &t->cache_group));
  return r.Done();
}

absl::Status ReadModel(const Json& j, const std::string& path, const std::string& source,
                       SlotConfig* m) {
  ObjectReader r(j, path, source);
  RETURN_IF_ERROR(r.Check());
  RETURN_IF_ERROR(r.String("name", &m->name));
  RETURN_IF_ERROR(r.String("path", &m->path));
  RETURN_IF_ERROR(r.String("backend", &m->backend));
  m->n_ctx = 0;
  m->parallel = 0;
  m->queue_size = 0;
  RETURN_IF_ERROR(r.Integer("n_ctx", &m->n_ctx, 1));
  RETURN_IF_ERROR(r.Integer("parallel", &m->parallel, 1));
  RETURN_IF_ERROR(r.Integer("queue_size", &m->queue_size, 1));
  RETURN_IF_ERROR(r.Integer("kv_tokens", &m->kv_tokens, 1));
  RETURN_IF_ERROR(r.String("kv_type", &m->kv_type));
  RETURN_IF_ERROR(r.String("tool_parser", &m->tool_parser));
  RETURN_IF_ERROR(r.String("reasoning_parser", &m->reasoning_parser));
  RETURN_IF_ERROR(r.String("spec", &m->spec));
  RETURN_IF_ERROR(r.String("draft", &m->draft));
  RETURN_IF_ERROR(r.Integer("spec_k", &m->spec_k, 0));
  RETURN_IF_ERROR(r.StringMap("knobs", &m->knobs));
  RETURN_IF_ERROR(r.String("kv_events", &m->kv_events));
  RETURN_IF_ERROR(r.Number("sleep_after_seconds", &m->sleep_after_seconds));
  RETURN_IF_ERROR(r.Integer("sleep_level", &m->sleep_level, 1));
  RETURN_IF_ERROR(r.Done());
  if (m->name.empty() || m->path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", path, " needs a name and a path"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<uint64_t> ParseByteSize(const std::string& text) {
  absl::string_view s = absl::StripAsciiWhitespace(text);
  std::string lower = absl::AsciiStrToLower(s);
  absl::string_view v = lower;
  uint64_t mult = 1;
  // Longest suffixes first; all binary (a "G" of RAM is a GiB).
  const std::pair<const char*, uint64_t> kUnits[] = {
      {"kib", 1ull << 10}, {"mib", 1ull << 20}, {"gib", 1ull << 30}, {"tib", 1ull << 40},
      {"kb", 1ull << 10},  {"mb", 1ull << 20},  {"gb", 1ull << 30},  {"tb", 1ull << 40},
      {"k", 1ull << 10},   {"m", 1ull << 20},   {"g", 1ull << 30},   {"t", 1ull << 40},
      {"b", 1}};
  for (const auto& [suffix, m] : kUnits) {
    if (absl::ConsumeSuffix(&v, suffix)) {
      mult = m;
      break;
    }
  }
  double number = 0;
  if (v.empty() || !absl::SimpleAtod(v, &number) || !(number >= 0) || !std::isfinite(number) ||
      number * static_cast<double>(mult) > 1.8e19) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "' is not a byte size (e.g. 1073741824, 512M, 8G, 1.5GiB)"));
  }
  return static_cast<uint64_t>(std::llround(number * static_cast<double>(mult)));
}

absl::Status ApplyConfigJson(const std::string& text, const std::string& source,
                             DaemonConfig* c) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false, /*ignore_comments=*/true);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not valid JSON"));
  }
  ObjectReader r(j, "", source);
  RETURN_IF_ERROR(r.Check());
  RETURN_IF_ERROR(r.String("listen", &c->listen));
  RETURN_IF_ERROR(r.String("metrics_listen", &c->metrics_listen));
  RETURN_IF_ERROR(r.String("http_listen", &c->http_listen));
  RETURN_IF_ERROR(r.Integer("http_threads", &c->http.loop_threads, 1));
  if (const Json* http = r.Get("http")) {
    ObjectReader h(*http, "http", source);
    RETURN_IF_ERROR(h.Check());
    http::EventServerOptions& o = c->http;
    RETURN_IF_ERROR(h.Integer("handler_threads", &o.handler_threads, 1));
    RETURN_IF_ERROR(h.Integer("max_connections", &o.max_connections, 1));
    RETURN_IF_ERROR(h.Integer("max_connections_per_client", &o.max_connections_per_client, 0));
    // (Integer's range check is for signed types: size_t goes through int64_t.)
    for (auto [key, out, min] : {std::tuple{"max_header_bytes", &o.limits.max_header_bytes, 256},
                                 std::tuple{"max_headers", &o.limits.max_headers, 1},
                                 std::tuple{"max_target_bytes", &o.limits.max_target_bytes, 64}}) {
      int64_t v = static_cast<int64_t>(*out);
      RETURN_IF_ERROR(h.Integer(key, &v, min));
      *out = static_cast<size_t>(v);
    }
    if (const Json* v = h.Get("max_body_bytes")) {
      if (v->is_number_unsigned()) {
        o.limits.max_body_bytes = v->get<uint64_t>();
      } else if (v->is_string()) {
        absl::StatusOr<uint64_t> bytes = ParseByteSize(v->get<std::string>());
        if (!bytes.ok()) return Annotate(bytes.status(), absl::StrCat(source, ": http.max_body_bytes"));
        o.limits.max_body_bytes = *bytes;
      } else {
        return h.Error("max_body_bytes", "a byte count or a size string like \"8M\"");
      }
    }
    RETURN_IF_ERROR(h.Number("tls_handshake_timeout_seconds", &o.tls_handshake_timeout_seconds));
    RETURN_IF_ERROR(h.Number("header_timeout_seconds", &o.header_timeout_seconds));
    RETURN_IF_ERROR(h.Number("body_timeout_seconds", &o.body_timeout_seconds));
    RETURN_IF_ERROR(h.Number("idle_timeout_seconds", &o.idle_timeout_seconds));
    RETURN_IF_ERROR(h.Number("write_timeout_seconds", &o.write_timeout_seconds));
    RETURN_IF_ERROR(h.Done());
  }
  RETURN_IF_ERROR(r.String("api_key_file", &c->api_key_file));
  if (const Json* v = r.Get("memory_limit")) {
    if (v->is_number_unsigned()) {
      c->memory_limit = v->get<uint64_t>();
    } else if (v->is_string()) {
      absl::StatusOr<uint64_t> bytes = ParseByteSize(v->get<std::string>());
      if (!bytes.ok()) return Annotate(bytes.status(), absl::StrCat(source, ": memory_limit"));
      c->memory_limit = *bytes;
    } else {
      return r.Error("memory_limit", "a byte count or a size string like \"8G\"");
    }
  }
  RETURN_IF_ERROR(r.Number("drain_timeout_seconds", &c->drain_timeout_seconds));
  RETURN_IF_ERROR(r.Number("sleep_after_seconds", &c->sleep_after_seconds));
  if (const Json* ev = r.Get("kv_events")) {
    ObjectReader k(*ev, "kv_events", source);
    RETURN_IF_ERROR(k.Check());
    RETURN_IF_ERROR(k.String("endpoint", &c->kv_events.endpoint));
    RETURN_IF_ERROR(k.String("replay_endpoint", &c->kv_events.replay_endpoint));
    RETURN_IF_ERROR(k.String("topic", &c->kv_events.topic));
    RETURN_IF_ERROR(k.Done());
  }
  if (const Json* tls = r.Get("tls")) {
    ObjectReader t(*tls, "tls", source);
    RETURN_IF_ERROR(t.Check());
    RETURN_IF_ERROR(t.String("cert", &c->tls_cert_file));
    RETURN_IF_ERROR(t.String("key", &c->tls_key_file));
    RETURN_IF_ERROR(t.Done());
  }
  RETURN_IF_ERROR(r.String("admin_token", &c->admin_token));
  RETURN_IF_ERROR(r.String("admin_token_file", &c->admin_token_file));
  if (const Json* limits = r.Get("limits")) {
    ObjectReader l(*limits, "limits", source);
    RETURN_IF_ERROR(l.Check());
    RETURN_IF_ERROR(l.Integer("max_prompt_tokens", &c->limits.max_prompt_tokens, 1));
    RETURN_IF_ERROR(l.Integer("max_tokens", &c->limits.max_tokens, 1));
    RETURN_IF_ERROR(l.Integer("default_max_tokens", &c->limits.default_max_tokens, 1));
    RETURN_IF_ERROR(l.Done());
  }
  if (const Json* defaults = r.Get("defaults")) {
    ObjectReader d(*defaults, "defaults", source);
    RETURN_IF_ERROR(d.Check());
    RETURN_IF_ERROR(d.Integer("n_ctx", &c->default_n_ctx, 1));
    RETURN_IF_ERROR(d.Integer("parallel", &c->default_parallel, 1));
    RETURN_IF_ERROR(d.Integer("queue_size", &c->default_queue_size, 0));
    RETURN_IF_ERROR(d.Done());
  }
  if (const Json* models = r.Get("models")) {
    if (!models->is_array()) return r.Error("models", "an array");
    for (size_t i = 0; i < models->size(); ++i) {
      SlotConfig m;
      RETURN_IF_ERROR(ReadModel((*models)[i], absl::StrCat("models[", i, "]"), source, &m));
      c->models.push_back(std::move(m));
    }
  }
  if (const Json* tenants = r.Get("tenants")) {
    if (!tenants->is_array()) return r.Error("tenants", "an array");
    c->tenants.clear();
    for (size_t i = 0; i < tenants->size(); ++i) {
      TenantConfig t;
      RETURN_IF_ERROR(ReadTenant((*tenants)[i], absl::StrCat("tenants[", i, "]"), source, &t));
      c->tenants.push_back(std::move(t));
    }
  }
  std::map<std::string, std::string> aliases;
  RETURN_IF_ERROR(r.StringMap("aliases", &aliases));
  for (auto& [alias, model] : aliases) c->aliases.emplace_back(alias, model);
  RETURN_IF_ERROR(r.String("log_level", &c->log_level));
  return r.Done();
}

absl::Status ApplyConfigFile(const std::string& path, DaemonConfig* config) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read config file '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ApplyConfigJson(ss.str(), path, config);
}

absl::StatusOr<SlotConfig> ParseModelFlag(const std::string& spec) {
  SlotConfig c;
  c.n_ctx = 0;  // the defaults, resolved by the slot manager
  c.parallel = 0;
  c.queue_size = 0;
  std::vector<std::string> parts = absl::StrSplit(spec, ',');
  const size_t eq = parts[0].find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == parts[0].size()) {
    return absl::InvalidArgumentError(absl::StrCat("--model wants NAME=PATH, got '", spec, "'"));
  }
  c.name = parts[0].substr(0, eq);
  c.path = parts[0].substr(eq + 1);
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    const size_t e = part.find('=');
    const std::string key = part.substr(0, e);
    const std::string value = e == std::string::npos ? "" : part.substr(e + 1);
    if (e != std::string::npos && key == "tool_parser") {
      c.tool_parser = value;
    } else if (e != std::string::npos && key == "reasoning_parser") {
      c.reasoning_parser = value;
    } else if (e != std::string::npos && key == "spec") {
      c.spec = value;
    } else if (e != std::string::npos && key == "draft") {
      c.draft = value;
    } else if (e != std::string::npos && key == "kv_events") {
      c.kv_events = value;
    } else if (e != std::string::npos && key == "sleep_after") {
      if (!absl::SimpleAtod(value, &c.sleep_after_seconds)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--model '", spec, "': sleep_after wants a number of seconds, got '", value, "'"));
      }
    } else if (e != std::string::npos && key == "sleep_level") {
      if (!absl::SimpleAtoi(value, &c.sleep_level)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--model '", spec, "': sleep_level wants 1 or 2, got '", value, "'"));
      }
    } else if (e != std::string::npos && key == "spec_k") {
      if (!absl::SimpleAtoi(value, &c.spec_k)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--model '", spec, "': spec_k wants an integer, got '", value, "'"));
      }
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--model '", spec, "': '", part,
                       "' is not an option (tool_parser=FAMILY|none, reasoning_parser=qwen3|none, "
                       "spec=off|ngram|draft, draft=PATH, spec_k=K, kv_events=on|off, "
                       "sleep_after=SECONDS, sleep_level=1|2)"));
    }
  }
  return c;
}

absl::StatusOr<TenantConfig> ParseTenantFlag(const std::string& spec) {
  TenantConfig t;
  auto bad = [&](absl::string_view part, absl::string_view want) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tenant '", spec, "': '", part, "' ", want));
  };
  for (absl::string_view part : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    const size_t eq = part.find('=');
    if (eq == absl::string_view::npos) return bad(part, "is not KEY=VALUE");
    const absl::string_view key = part.substr(0, eq), value = part.substr(eq + 1);
    if (key == "name") {
      t.name = std::string(value);
    } else if (key == "key_file") {
      t.api_key_file = std::string(value);
    } else if (key == "weight") {
      if (!absl::SimpleAtod(value, &t.weight) || !(t.weight > 0)) return bad(part, "wants a number > 0");
    } else if (key == "max_streams") {
      if (!absl::SimpleAtoi(value, &t.max_streams) || t.max_streams < 0) {
        return bad(part, "wants an integer >= 0");
      }
    } else if (key == "max_streams_per_model") {
      if (!absl::SimpleAtoi(value, &t.max_streams_per_model) || t.max_streams_per_model < 0) {
        return bad(part, "wants an integer >= 0");
      }
    } else if (key == "quota") {
      const std::vector<absl::string_view> q = absl::StrSplit(value, '/');
      if (q.size() != 2 || !absl::SimpleAtoi(q[0], &t.quota_tokens) || t.quota_tokens < 0 ||
          !absl::SimpleAtod(q[1], &t.quota_window_seconds) || !(t.quota_window_seconds > 0)) {
        return bad(part, "wants TOKENS/SECONDS, e.g. quota=1000000/3600");
      }
    } else if (key == "models") {
      t.models = absl::StrSplit(value, '+', absl::SkipEmpty());
    } else if (key == "cache_group") {
      t.cache_group = std::string(value);
    } else if (key == "keys" || key == "api_keys") {
      return bad(part, "is not accepted: give the keys in a file (key_file=PATH)");
    } else {
      return bad(part,
                 "has an unknown key (name, key_file, weight, max_streams, "
                 "max_streams_per_model, quota, models, cache_group)");
    }
  }
  if (t.name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--tenant '", spec, "' needs name=NAME"));
  }
  return t;
}

absl::Status FinalizeConfig(DaemonConfig* c) {
  if (!(c->sleep_after_seconds >= 0) || !std::isfinite(c->sleep_after_seconds)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sleep_after_seconds (--sleep-after) must be 0 (never) or a number of seconds, got ",
        c->sleep_after_seconds));
  }
  if (c->kv_events.endpoint.empty() && !c->kv_events.replay_endpoint.empty()) {
    return absl::InvalidArgumentError(
        "kv_events.replay_endpoint (--kv-events-replay) needs kv_events.endpoint (--kv-events)");
  }
  if (!c->admin_token_file.empty()) {
    std::ifstream in(c->admin_token_file);
    if (!in) {
      return absl::NotFoundError(
          absl::StrCat("cannot read admin token file '", c->admin_token_file, "'"));
    }
    std::stringstream ss;
    ss << in.rdbuf();
    c->admin_token = std::string(absl::StripTrailingAsciiWhitespace(ss.str()));
    if (c->admin_token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("admin token file '", c->admin_token_file, "' is empty"));
    }
  }
  if (!c->api_key_file.empty()) {
    std::ifstream in(c->api_key_file);
    if (!in) {
      return absl::NotFoundError(
          absl::StrCat("cannot read API key file '", c->api_key_file, "'"));
    }
    c->api_keys.clear();
    std::string line;
    while (std::getline(in, line)) {
      const std::string key(absl::StripAsciiWhitespace(line));
      if (!key.empty() && key[0] != '#') c->api_keys.push_back(key);
    }
    if (c->api_keys.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("API key file '", c->api_key_file, "' holds no key"));
    }
  }
  for (TenantConfig& t : c->tenants) {
    if (t.api_key_file.empty()) continue;
    std::ifstream in(t.api_key_file);
    if (!in) {
      return absl::NotFoundError(absl::StrCat("tenant '", t.name, "': cannot read API key file '",
                                              t.api_key_file, "'"));
    }
    std::string line;
    while (std::getline(in, line)) {
      const std::string key(absl::StripAsciiWhitespace(line));
      if (!key.empty() && key[0] != '#' &&
          std::find(t.api_keys.begin(), t.api_keys.end(), key) == t.api_keys.end()) {
        t.api_keys.push_back(key);
      }
    }
  }
  // The admin token is not an API key: a client holding one key must not
  // gain the other's powers (and a leaked tenant key must not be the admin
  // token). Keys are never echoed; the tenant is named.
  if (!c->admin_token.empty()) {
    for (const TenantConfig& t : c->tenants) {
      if (std::find(t.api_keys.begin(), t.api_keys.end(), c->admin_token) != t.api_keys.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tenant '", t.name, "': an API key equals the admin token; they must differ"));
      }
    }
    if (std::find(c->api_keys.begin(), c->api_keys.end(), c->admin_token) != c->api_keys.end()) {
      return absl::InvalidArgumentError(
          "api_key_file: a key equals the admin token; they must differ");
    }
  }
  if (!c->tenants.empty() && !c->api_key_file.empty()) {
    return absl::InvalidArgumentError(
        "api_key_file and tenants exclude each other: with tenants, the API keys are the "
        "tenants' (tenants[].api_keys or api_key_file)");
  }
  if (c->tls_cert_file.empty() != c->tls_key_file.empty()) {
    return absl::InvalidArgumentError("TLS needs both a certificate and a key file");
  }
  if (c->listen.empty()) return absl::InvalidArgumentError("listen: an address is required");
  if (c->limits.max_prompt_tokens < 1 || c->limits.max_tokens < 1 ||
      c->limits.default_max_tokens < 1) {
    return absl::InvalidArgumentError("limits must be positive");
  }
  std::set<std::string> names;
  for (const SlotConfig& m : c->models) {
    if (!names.insert(m.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("model '", m.name, "' is listed twice"));
    }
  }
  for (const auto& [alias, model] : c->aliases) {
    if (names.count(model) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "aliases: '", alias, "' points at '", model, "', which is not among the models"));
    }
  }
  return absl::OkStatus();
}

}  // namespace minfer::daemon
