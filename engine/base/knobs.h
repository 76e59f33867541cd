// The knob registry: every tuning switch of minfer in one place.
//
// Each `MINFER_*` environment variable the engine honours is a knob with a
// name, a type, a default, a scope (global, or overridable per model slot),
// a help text, and what a change invalidates. Knobs are read from the
// environment once at start (LoadFromEnvironment) and can be read and set at
// run time (the daemon's admin API does so). Components that cache a knob's
// effect (built graphs, captured CUDA graphs) compare `generation()` between
// steps and rebuild when it moved; nothing re-reads knobs inside a kernel
// launch sequence.
//
// Thread-safe: all methods may be called concurrently.
#ifndef MINFER_ENGINE_BASE_KNOBS_H_
#define MINFER_ENGINE_BASE_KNOBS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace minfer {

enum class KnobType { kBool, kInt, kString, kEnum };
enum class KnobScope { kGlobal, kPerModel };
// What must happen before a new value takes effect.
enum class KnobEffect {
  kImmediate,     // read fresh on every use
  kGraphRebuild,  // built compute graphs (and their captures) are rebuilt
  kRecapture,     // captured CUDA graphs are dropped and re-captured
  kReload,        // takes effect for models loaded afterwards
  kRestart,       // read once per process (the thread pool, the CUDA device)
};

absl::string_view KnobTypeName(KnobType t);
absl::string_view KnobScopeName(KnobScope s);
absl::string_view KnobEffectName(KnobEffect e);

struct KnobSpec {
  std::string name;  // the environment variable, e.g. "MINFER_NO_CUDA_GRAPH"
  KnobType type = KnobType::kBool;
  std::string default_value;
  KnobScope scope = KnobScope::kGlobal;
  KnobEffect effect = KnobEffect::kImmediate;
  std::string help;
  std::vector<std::string> allowed;  // kEnum: the accepted values
};

struct KnobInfo {
  KnobSpec spec;
  std::string value;  // current global value
  bool from_environment = false;
};

// Per-model overrides of kPerModel knobs (name -> value), validated by
// KnobRegistry::ValidateOverrides.
using KnobOverrides = std::map<std::string, std::string>;

class KnobRegistry {
 public:
  // The process-wide registry, with every built-in knob registered.
  static KnobRegistry& Global();

  KnobRegistry() = default;

  // Registers a knob. Re-registering an identical spec is a no-op;
  // a conflicting spec is an error naming the knob.
  absl::Status Register(KnobSpec spec);

  // Applies every registered knob's environment variable, if set and valid.
  // Returns an error listing the invalid ones (they keep their defaults).
  absl::Status LoadFromEnvironment();

  absl::StatusOr<KnobInfo> Get(absl::string_view name) const;
  std::vector<KnobInfo> List() const;

  // Validates and sets the global value; bumps generation().
  absl::Status Set(absl::string_view name, absl::string_view value);
  // Restores the default; bumps generation().
  absl::Status Reset(absl::string_view name);

  // Checks that every override names a per-model knob with a valid value.
  absl::Status ValidateOverrides(const KnobOverrides& overrides) const;

  // Typed reads of the effective value: the override when present, else the
  // global value. Unknown names or type mismatches return the fallback and
  // log once (a programming error, not a user error).
  bool GetBool(absl::string_view name, const KnobOverrides* overrides = nullptr) const;
  int64_t GetInt(absl::string_view name, const KnobOverrides* overrides = nullptr) const;
  std::string GetString(absl::string_view name,
                        const KnobOverrides* overrides = nullptr) const;

  // Increments on every successful Set/Reset/LoadFromEnvironment change.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

  // Checks `value` against the knob's type; returns the normalized value.
  static absl::StatusOr<std::string> Normalize(const KnobSpec& spec, absl::string_view value);

 private:
  struct Entry {
    KnobSpec spec;
    std::string value;
    bool from_environment = false;
  };
  const Entry* Find(absl::string_view name) const;  // requires mu_

  mutable std::mutex mu_;
  std::map<std::string, Entry, std::less<>> knobs_;
  std::atomic<uint64_t> generation_{0};
};

// Registers the built-in knobs into `registry` (called by Global()).
void RegisterBuiltinKnobs(KnobRegistry& registry);

}  // namespace minfer

#endif  // MINFER_ENGINE_BASE_KNOBS_H_
