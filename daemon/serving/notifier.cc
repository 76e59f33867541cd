#include "daemon/serving/notifier.h"

#include <utility>

namespace minfer::daemon {

Notifier::Id Notifier::Subscribe(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  Id id = next_id_++;
  fns_.emplace(id, std::move(fn));
  return id;
}

void Notifier::Unsubscribe(Id id) {
  // Taking mu_ waits out a Notify in progress, which is what makes it safe
  // to destroy the callback's captures afterwards.
  std::lock_guard<std::mutex> lock(mu_);
  fns_.erase(id);
}

void Notifier::Notify() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, fn] : fns_) fn();
}

}  // namespace minfer::daemon
