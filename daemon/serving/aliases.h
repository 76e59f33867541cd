// AliasTable: serving names that point at loaded models ("prod" -> "qwen-v2").
//
// Re-pointing is a single map update: each request resolves its name exactly
// once, so it runs entirely on the old model or entirely on the new one, and
// streams already running on the old model finish there. The table does not
// know which models exist; SlotManager checks that (and refuses to unload a
// model an alias points at).
//
// Thread-safe.
#ifndef MINFER_DAEMON_SERVING_ALIASES_H_
#define MINFER_DAEMON_SERVING_ALIASES_H_

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace minfer::daemon {

class AliasTable {
 public:
  // The model `name` points at, if it is an alias.
  std::optional<std::string> Resolve(const std::string& name) const;
  // Points `alias` at `model`; returns the previous target (if any).
  std::optional<std::string> Set(const std::string& alias, const std::string& model);
  // Removes `alias`; false if there was none.
  bool Remove(const std::string& alias);
  // Aliases pointing at `model`, sorted.
  std::vector<std::string> AliasesOf(const std::string& model) const;
  // (alias, model) pairs sorted by alias.
  std::vector<std::pair<std::string, std::string>> List() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::string> aliases_;  // guarded by mu_
};

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_SERVING_ALIASES_H_
