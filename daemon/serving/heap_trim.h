// HeapTrimmer: gives the heap's free memory back to the system
// (malloc_trim) once the models that were unloaded are really gone.
//
// glibc keeps what is freed in the arena it came from (an arena per thread,
// up to 8 per core) and returns only the top of a heap to the system. A
// slot's thread allocates its model's tokenizer (tens of megabytes for
// Qwen's 151,936 tokens), graphs and KV memory in its arena; when threads
// come and go meanwhile (gRPC's synchronous health service starts one per
// concurrent check), the next load lands in another arena and the freed
// memory stays resident: 25-30 MiB per load/unload cycle, until every arena
// holds a model's worth. malloc_trim(0) walks every arena and releases all
// free chunks in whole pages (madvise), however fragmented; it costs
// milliseconds, once per unload. (It does not reach the free top of a
// per-thread heap: minferd's main() fixes malloc's trim threshold for that.)
//
// A slot frees its model when it stops, but a request that was tokenizing
// with the model (Tokenize, a Generate being validated) may hold the last
// reference a little longer, and a trim before that would miss the model's
// memory. So Watch() takes what was freed as a weak_ptr, and the trimmer's
// thread trims once everything watched has been destroyed (or `max_wait`
// after the first watch, whichever comes first).
//
// Thread-safe.
#ifndef MINFER_DAEMON_SERVING_HEAP_TRIM_H_
#define MINFER_DAEMON_SERVING_HEAP_TRIM_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace minfer::daemon {

class HeapTrimmer {
 public:
  explicit HeapTrimmer(std::chrono::milliseconds max_wait = std::chrono::seconds(30));
  // Stops the thread (a pending trim is dropped).
  ~HeapTrimmer();
  HeapTrimmer(const HeapTrimmer&) = delete;
  HeapTrimmer& operator=(const HeapTrimmer&) = delete;

  // Trims once `freed` (and whatever else is watched) is destroyed; an
  // empty or expired pointer means "now".
  void Watch(std::weak_ptr<const void> freed);

  // Trims done so far (tests).
  uint64_t trims() const;

 private:
  void Loop();

  const std::chrono::milliseconds max_wait_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::weak_ptr<const void>> pending_;  // guarded by mu_
  std::chrono::steady_clock::time_point first_watch_;  // guarded by mu_
  uint64_t trims_ = 0;                              // guarded by mu_
  bool stop_ = false;                               // guarded by mu_
  std::thread thread_;
};

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_SERVING_HEAP_TRIM_H_
