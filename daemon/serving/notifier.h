// Notifier: "something changed" callbacks from a producer thread to any
// number of consumers, with unsubscription that is safe against a callback
// running at that moment.
//
// The daemon's producers (a slot's worker publishing tokens, a slot's loader
// reporting progress) use it to wake the gRPC stream reactors that pull from
// them. A reactor must unsubscribe before it is destroyed; Unsubscribe waits
// for a running invocation of its callback to return, so afterwards the
// callback's captures may be freed.
//
// Thread-safe. Callbacks run on the notifying thread, one at a time (they are
// serialized by an internal mutex); they must be short, must not block, and
// must not call back into the same Notifier.
#ifndef MINFER_DAEMON_SERVING_NOTIFIER_H_
#define MINFER_DAEMON_SERVING_NOTIFIER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>

namespace minfer::daemon {

class Notifier {
 public:
  using Id = uint64_t;

  Notifier() = default;
  Notifier(const Notifier&) = delete;
  Notifier& operator=(const Notifier&) = delete;

  Id Subscribe(std::function<void()> fn);
  // Removes the callback; when this returns it is not running and never
  // will again. Unknown ids are ignored.
  void Unsubscribe(Id id);
  // Calls every subscribed callback.
  void Notify();

 private:
  std::mutex mu_;  // held while callbacks run
  std::map<Id, std::function<void()>> fns_;
  Id next_id_ = 1;
};

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_SERVING_NOTIFIER_H_
