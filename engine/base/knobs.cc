#include "engine/base/knobs.h"

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/logging.h"

namespace minfer {

absl::string_view KnobTypeName(KnobType t) {
  switch (t) {
    case KnobType::kBool: return "bool";
    case KnobType::kInt: return "int";
    case KnobType::kString: return "string";
    case KnobType::kEnum: return "enum";
  }
  return "?";
}

absl::string_view KnobScopeName(KnobScope s) {
  return s == KnobScope::kGlobal ? "global" : "per-model";
}

absl::string_view KnobEffectName(KnobEffect e) {
  switch (e) {
    case KnobEffect::kImmediate: return "immediate";
    case KnobEffect::kGraphRebuild: return "graph-rebuild";
    case KnobEffect::kRecapture: return "recapture";
    case KnobEffect::kReload: return "reload";
    case KnobEffect::kRestart: return "restart";
  }
  return "?";
}

KnobRegistry& KnobRegistry::Global() {
  static KnobRegistry* registry = [] {
    auto* r = new KnobRegistry;
    RegisterBuiltinKnobs(*r);
    absl::Status s = r->LoadFromEnvironment();
    if (!s.ok()) Logger("knobs")->warn("{}", s.message());
    return r;
  }();
  return *registry;
}

absl::StatusOr<std::string> KnobRegistry::Normalize(const KnobSpec& spec,
                                                    absl::string_view value) {
  std::string v(absl::StripAsciiWhitespace(value));
  switch (spec.type) {
    case KnobType::kBool: {
      std::string l = absl::AsciiStrToLower(v);
      if (l == "1" || l == "true" || l == "on" || l == "yes") return std::string("1");
      if (l == "0" || l == "false" || l == "off" || l == "no" || l.empty()) return std::string("0");
      return absl::InvalidArgumentError(
          absl::StrCat("knob ", spec.name, " is a bool (1/0, true/false, on/off); got '", v, "'"));
    }
    case KnobType::kInt: {
      int64_t n;
      if (!absl::SimpleAtoi(v, &n)) {
        return absl::InvalidArgumentError(
            absl::StrCat("knob ", spec.name, " is an integer; got '", v, "'"));
      }
      return absl::StrCat(n);
    }
    case KnobType::kString:
      return v;
    case KnobType::kEnum: {
      std::string l = absl::AsciiStrToLower(v);
      for (const auto& a : spec.allowed) {
        if (a == l) return l;
      }
      return absl::InvalidArgumentError(absl::StrCat("knob ", spec.name, " must be one of ",
                                                     absl::StrJoin(spec.allowed, "|"), "; got '",
                                                     v, "'"));
    }
  }
  return absl::InternalError("unknown knob type");
}

absl::Status KnobRegistry::Register(KnobSpec spec) {
  auto def = Normalize(spec, spec.default_value);
  if (!def.ok()) return def.status();
  spec.default_value = *def;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = knobs_.find(spec.name);
  if (it != knobs_.end()) {
    const KnobSpec& old = it->second.spec;
    if (old.type == spec.type && old.default_value == spec.default_value &&
        old.scope == spec.scope && old.allowed == spec.allowed) {
      return absl::OkStatus();
    }
    return absl::AlreadyExistsError(
        absl::StrCat("knob ", spec.name, " registered twice with different specs"));
  }
  std::string name = spec.name;
  Entry e{std::move(spec), "", false};
  e.value = e.spec.default_value;
  knobs_.emplace(std::move(name), std::move(e));
  return absl::OkStatus();
}

absl::Status KnobRegistry::LoadFromEnvironment() {
  std::vector<std::string> errors;
  bool changed = false;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [name, e] : knobs_) {
    const char* env = std::getenv(name.c_str());
    if (env == nullptr) continue;
    auto v = Normalize(e.spec, env);
    if (!v.ok()) {
      errors.push_back(std::string(v.status().message()));
      continue;
    }
    if (e.value != *v) changed = true;
    e.value = *v;
    e.from_environment = true;
  }
  if (changed) generation_.fetch_add(1, std::memory_order_acq_rel);
  if (!errors.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ignored invalid environment knobs (defaults kept): ", absl::StrJoin(errors, "; ")));
  }
  return absl::OkStatus();
}

const KnobRegistry::Entry* KnobRegistry::Find(absl::string_view name) const {
  auto it = knobs_.find(name);
  return it == knobs_.end() ? nullptr : &it->second;
}

absl::StatusOr<KnobInfo> KnobRegistry::Get(absl::string_view name) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Entry* e = Find(name);
  if (e == nullptr) return absl::NotFoundError(absl::StrCat("unknown knob '", name, "'"));
  return KnobInfo{e->spec, e->value, e->from_environment};
}

std::vector<KnobInfo> KnobRegistry::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<KnobInfo> out;
  out.reserve(knobs_.size());
  for (const auto& [name, e] : knobs_) out.push_back({e.spec, e.value, e.from_environment});
  return out;
}

absl::Status KnobRegistry::Set(absl::string_view name, absl::string_view value) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = knobs_.find(name);
  if (it == knobs_.end()) return absl::NotFoundError(absl::StrCat("unknown knob '", name, "'"));
  auto v = Normalize(it->second.spec, value);
  if (!v.ok()) return v.status();
  if (it->second.value != *v) {
    it->second.value = *v;
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  return absl::OkStatus();
}

absl::Status KnobRegistry::Reset(absl::string_view name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = knobs_.find(name);
  if (it == knobs_.end()) return absl::NotFoundError(absl::StrCat("unknown knob '", name, "'"));
  if (it->second.value != it->second.spec.default_value) {
    it->second.value = it->second.spec.default_value;
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  it->second.from_environment = false;
  return absl::OkStatus();
}

absl::Status KnobRegistry::ValidateOverrides(const KnobOverrides& overrides) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, value] : overrides) {
    const Entry* e = Find(name);
    if (e == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown knob '", name, "'"));
    if (e->spec.scope != KnobScope::kPerModel) {
      return absl::InvalidArgumentError(
          absl::StrCat("knob ", name, " is global; it cannot be overridden per model"));
    }
    auto v = Normalize(e->spec, value);
    if (!v.ok()) return v.status();
  }
  return absl::OkStatus();
}

namespace {

void ReportMisuse(absl::string_view name, absl::string_view what) {
  Logger("knobs")->error("knob {}: {}", std::string(name), std::string(what));
}

}  // namespace

std::string KnobRegistry::GetString(absl::string_view name,
                                    const KnobOverrides* overrides) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Entry* e = Find(name);
  if (e == nullptr) {
    ReportMisuse(name, "read but never registered");
    return "";
  }
  if (overrides != nullptr && e->spec.scope == KnobScope::kPerModel) {
    auto it = overrides->find(std::string(name));
    if (it != overrides->end()) {
      auto v = Normalize(e->spec, it->second);
      if (v.ok()) return *v;
    }
  }
  return e->value;
}

bool KnobRegistry::GetBool(absl::string_view name, const KnobOverrides* overrides) const {
  return GetString(name, overrides) == "1";
}

int64_t KnobRegistry::GetInt(absl::string_view name, const KnobOverrides* overrides) const {
  int64_t n = 0;
  std::string v = GetString(name, overrides);
  if (!absl::SimpleAtoi(v, &n)) ReportMisuse(name, "read as int but is not an integer");
  return n;
}

}  // namespace minfer
