// KvEventPublisher: the daemon's KV-cache events on a ZeroMQ PUB socket, in
// vLLM's wire format, for KV-aware routers (llm-d's KV-cache manager,
// Dynamo's router, vLLM's kv_events_subscriber.py example).
//
// Each message is multipart [topic, sequence number (8 bytes, big-endian),
// payload], the payload a msgpack KVEventBatch: [timestamp (float seconds
// since the epoch), [events], data-parallel rank (0)], an event a tagged
// array:
//   ["BlockStored", [block hashes], parent hash | nil, [token ids],
//    block size, LoRA id (nil), medium ("GPU" | "CPU")]
//   ["BlockRemoved", [block hashes], medium]
//   ["AllBlocksCleared"]
// Block hashes are engine/runtime/kv_events.h's (vLLM's sha256_cbor chain,
// 64-bit integers). A model's batches go out under its topic (the template
// with {model} and {host} replaced; llm-d's convention is
// "kv@{host}@{model}"); sequence numbers count per topic from 0, so a
// subscriber of one model sees them without gaps unless it missed one.
//
// Routers that join late or missed messages ask the replay socket (a ZeroMQ
// ROUTER, optional): a request [start (8 bytes, big-endian)] — vLLM's — is
// answered with every buffered batch of every topic whose number is at
// least `start`, each as [sequence number, payload], then the end marker
// [-1 (8 bytes), empty]; a request [topic, start] replays that topic only.
// The last `buffer_batches` batches per topic are kept.
//
// Publish() never blocks the model's worker: batches queue (at most
// `max_queue`; beyond that they are dropped and counted, and the next batch
// of that topic starts with AllBlocksCleared so a router rebuilds its view
// rather than keep blocks it was never told were removed). One thread owns
// the sockets.
//
// Thread-safe.
#ifndef MINFER_DAEMON_SERVING_KV_EVENTS_H_
#define MINFER_DAEMON_SERVING_KV_EVENTS_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/runtime/kv_events.h"

namespace minfer::daemon {

struct KvEventsOptions {
  std::string endpoint;         // ZeroMQ endpoint to bind, e.g. tcp://*:5557
  std::string replay_endpoint;  // "" = no replay socket
  std::string topic = "kv@{host}@{model}";
  std::string host;  // for {host}; "" = the host name
  size_t buffer_batches = 10000;  // replay buffer per topic
  size_t max_queue = 100000;      // batches waiting to be sent
};

// The msgpack KVEventBatch (exposed for tests).
std::string EncodeKvEventBatch(double timestamp, const std::vector<runtime::KvEvent>& events,
                               int32_t block_size, absl::string_view medium);

class KvEventPublisher {
 public:
  // Binds the sockets. INVALID_ARGUMENT naming the endpoint that ZeroMQ
  // refuses (a bad address, a port in use).
  static absl::StatusOr<std::unique_ptr<KvEventPublisher>> Create(KvEventsOptions options);
  ~KvEventPublisher();  // sends what is queued (for up to a second), closes
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // The topic of `model`'s batches.
  std::string Topic(absl::string_view model) const;
  // Queues one batch of `model`'s events (nothing when empty); false when
  // it was dropped (the queue is full).
  bool Publish(const std::string& model, std::vector<runtime::KvEvent> events, int32_t block_size,
               absl::string_view medium);

  uint64_t batches_sent() const { return sent_.load(std::memory_order_relaxed); }
  uint64_t batches_dropped() const { return dropped_.load(std::memory_order_relaxed); }
  const KvEventsOptions& options() const { return options_; }

 private:
  struct Pending {
    std::string topic;
    std::string payload;
  };
  struct TopicState {
    uint64_t next_seq = 0;
    std::deque<std::pair<uint64_t, std::string>> buffer;  // (seq, payload)
  };
  explicit KvEventPublisher(KvEventsOptions options);
  void Loop();
  void Send(Pending p);
  void ServeReplay();

  KvEventsOptions options_;
  void* ctx_ = nullptr;
  void* pub_ = nullptr;
  void* replay_ = nullptr;
  std::thread thread_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;          // guarded by mu_
  std::map<std::string, bool> lost_;   // topics that dropped a batch; guarded by mu_
  bool stop_ = false;                  // guarded by mu_
  std::map<std::string, TopicState> topics_;  // the thread's
  std::atomic<uint64_t> sent_{0};
  std::atomic<uint64_t> dropped_{0};
};

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_SERVING_KV_EVENTS_H_
