// GrammarCompiler::Compile: the spec-level entry, in its own target so that
// the matcher (and its tests) do not depend on every front end.
#include "engine/grammar/matcher.h"
#include "engine/grammar/spec.h"

namespace minfer::grammar {

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> GrammarCompiler::Compile(
    const GrammarSpec& spec) {
  return CompileKeyed(spec.Key(), [&] { return BuildGrammar(spec); }, spec.kind);
}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> GrammarCompiler::CompileKeyed(
    const std::string& key, absl::FunctionRef<absl::StatusOr<Grammar>()> build, GrammarKind kind) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      stats_.cache_hits++;
      return it->second->second;
    }
  }
  absl::StatusOr<Grammar> g = build();
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> cg =
      g.ok() ? CompileGrammar(*std::move(g), kind)
             : absl::StatusOr<std::shared_ptr<const CompiledGrammar>>(g.status());
  std::lock_guard<std::mutex> lock(mu_);
  if (!cg.ok()) {
    stats_.refused++;
    return cg.status();
  }
  stats_.compiles++;
  auto it = index_.find(key);
  if (it != index_.end()) return it->second->second;  // raced: keep the first
  lru_.emplace_front(key, *cg);
  index_[key] = lru_.begin();
  while (static_cast<int32_t>(lru_.size()) > options_.cache_entries) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return *cg;
}

}  // namespace minfer::grammar
