#include "daemon/serving/aliases.h"

namespace minfer::daemon {

std::optional<std::string> AliasTable::Resolve(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = aliases_.find(name);
  if (it == aliases_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> AliasTable::Set(const std::string& alias, const std::string& model) {
  std::lock_guard<std::mutex> lock(mu_);
  std::optional<std::string> previous;
  auto it = aliases_.find(alias);
  if (it != aliases_.end()) previous = it->second;
  aliases_[alias] = model;
  return previous;
}

bool AliasTable::Remove(const std::string& alias) {
  std::lock_guard<std::mutex> lock(mu_);
  return aliases_.erase(alias) > 0;
}

std::vector<std::string> AliasTable::AliasesOf(const std::string& model) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [alias, target] : aliases_) {
    if (target == model) out.push_back(alias);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> AliasTable::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {aliases_.begin(), aliases_.end()};
}

}  // namespace minfer::daemon
