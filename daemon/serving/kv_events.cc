#include "daemon/serving/kv_events.h"

#include <msgpack.h>
#include <unistd.h>
#include <zmq.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "engine/base/logging.h"

namespace minfer::daemon {

namespace {

void PackStr(msgpack_packer* pk, absl::string_view s) {
  msgpack_pack_str(pk, s.size());
  msgpack_pack_str_body(pk, s.data(), s.size());
}

std::string BigEndian(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
  return out;
}

absl::Status ZmqError(absl::string_view what, absl::string_view endpoint) {
  return absl::InvalidArgumentError(
      absl::StrCat("KV events: cannot ", what, " ", endpoint, ": ", zmq_strerror(zmq_errno())));
}

// Receives the rest of a multipart message's frames (after the first).
std::vector<std::string> RecvFrames(void* socket) {
  std::vector<std::string> frames;
  for (;;) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, socket, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&msg);
      break;
    }
    frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
    const bool more = zmq_msg_more(&msg) != 0;
    zmq_msg_close(&msg);
    if (!more) break;
  }
  return frames;
}

void SendFrames(void* socket, const std::vector<absl::string_view>& frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    zmq_send(socket, frames[i].data(), frames[i].size(), i + 1 < frames.size() ? ZMQ_SNDMORE : 0);
  }
}

}  // namespace

std::string EncodeKvEventBatch(double timestamp, const std::vector<runtime::KvEvent>& events,
                               int32_t block_size, absl::string_view medium) {
  msgpack_sbuffer sbuf;
  msgpack_sbuffer_init(&sbuf);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sbuf, msgpack_sbuffer_write);
  msgpack_pack_array(&pk, 3);
  msgpack_pack_double(&pk, timestamp);
  msgpack_pack_array(&pk, events.size());
  for (const runtime::KvEvent& e : events) {
    switch (e.type) {
      case runtime::KvEvent::Type::kBlockStored:
        msgpack_pack_array(&pk, 7);
        PackStr(&pk, "BlockStored");
        msgpack_pack_array(&pk, e.block_hashes.size());
        for (uint64_t h : e.block_hashes) msgpack_pack_uint64(&pk, h);
        if (e.parent_block_hash.has_value()) {
          msgpack_pack_uint64(&pk, *e.parent_block_hash);
        } else {
          msgpack_pack_nil(&pk);
        }
        msgpack_pack_array(&pk, e.token_ids.size());
        for (int32_t t : e.token_ids) msgpack_pack_int32(&pk, t);
        msgpack_pack_int32(&pk, block_size);
        msgpack_pack_nil(&pk);  // LoRA id
        PackStr(&pk, medium);
        break;
      case runtime::KvEvent::Type::kBlockRemoved:
        msgpack_pack_array(&pk, 3);
        PackStr(&pk, "BlockRemoved");
        msgpack_pack_array(&pk, e.block_hashes.size());
        for (uint64_t h : e.block_hashes) msgpack_pack_uint64(&pk, h);
        PackStr(&pk, medium);
        break;
      case runtime::KvEvent::Type::kAllBlocksCleared:
        msgpack_pack_array(&pk, 1);
        PackStr(&pk, "AllBlocksCleared");
        break;
    }
  }
  msgpack_pack_int32(&pk, 0);  // data-parallel rank: one engine per model
  std::string out(sbuf.data, sbuf.size);
  msgpack_sbuffer_destroy(&sbuf);
  return out;
}

KvEventPublisher::KvEventPublisher(KvEventsOptions options) : options_(std::move(options)) {
  if (options_.host.empty()) {
    char host[256] = {0};
    if (gethostname(host, sizeof(host) - 1) == 0) options_.host = host;
  }
}

absl::StatusOr<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Create(
    KvEventsOptions options) {
  std::unique_ptr<KvEventPublisher> p(new KvEventPublisher(std::move(options)));
  p->ctx_ = zmq_ctx_new();
  if (p->ctx_ == nullptr) return absl::InternalError("KV events: cannot create a ZeroMQ context");
  p->pub_ = zmq_socket(p->ctx_, ZMQ_PUB);
  // A slow subscriber loses messages at the high-water mark (ZeroMQ's PUB
  // drops, never blocks); the sequence numbers and replay tell it so.
  const int hwm = 100000, linger_ms = 1000;
  zmq_setsockopt(p->pub_, ZMQ_SNDHWM, &hwm, sizeof(hwm));
  zmq_setsockopt(p->pub_, ZMQ_LINGER, &linger_ms, sizeof(linger_ms));
  if (zmq_bind(p->pub_, p->options_.endpoint.c_str()) != 0) {
    return ZmqError("bind --kv-events", p->options_.endpoint);
  }
  if (!p->options_.replay_endpoint.empty()) {
    p->replay_ = zmq_socket(p->ctx_, ZMQ_ROUTER);
    zmq_setsockopt(p->replay_, ZMQ_LINGER, &linger_ms, sizeof(linger_ms));
    if (zmq_bind(p->replay_, p->options_.replay_endpoint.c_str()) != 0) {
      return ZmqError("bind --kv-events-replay", p->options_.replay_endpoint);
    }
  }
  p->thread_ = std::thread([q = p.get()] { q->Loop(); });
  Logger("daemon")->info("KV events: publishing on {}{}, topic {}", p->options_.endpoint,
                         p->replay_ != nullptr ? absl::StrCat(", replay on ",
                                                              p->options_.replay_endpoint)
                                               : std::string(),
                         p->options_.topic);
  return p;
}

KvEventPublisher::~KvEventPublisher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (replay_ != nullptr) zmq_close(replay_);
  if (pub_ != nullptr) zmq_close(pub_);
  if (ctx_ != nullptr) zmq_ctx_term(ctx_);
}

std::string KvEventPublisher::Topic(absl::string_view model) const {
  return absl::StrReplaceAll(options_.topic, {{"{model}", model}, {"{host}", options_.host}});
}

bool KvEventPublisher::Publish(const std::string& model, std::vector<runtime::KvEvent> events,
                               int32_t block_size, absl::string_view medium) {
  if (events.empty()) return true;
  const double ts =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string topic = Topic(model);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.size() >= options_.max_queue) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      lost_[topic] = true;
      return false;
    }
    auto lost = lost_.find(topic);
    if (lost != lost_.end()) {
      // The router's view of this model is stale: start it over.
      events.insert(events.begin(), runtime::KvEvent{runtime::KvEvent::Type::kAllBlocksCleared, {}, {}, {}});
      lost_.erase(lost);
    }
    queue_.push_back(Pending{std::move(topic), EncodeKvEventBatch(ts, events, block_size, medium)});
  }
  cv_.notify_all();
  return true;
}

void KvEventPublisher::Send(Pending p) {
  TopicState& t = topics_[p.topic];
  const uint64_t seq = t.next_seq++;
  const std::string seq_bytes = BigEndian(seq);
  SendFrames(pub_, {p.topic, seq_bytes, p.payload});
  sent_.fetch_add(1, std::memory_order_relaxed);
  t.buffer.emplace_back(seq, std::move(p.payload));
  while (t.buffer.size() > options_.buffer_batches) t.buffer.pop_front();
}

void KvEventPublisher::ServeReplay() {
  for (;;) {
    zmq_msg_t id;
    zmq_msg_init(&id);
    if (zmq_msg_recv(&id, replay_, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&id);
      return;
    }
    const std::string identity(static_cast<const char*>(zmq_msg_data(&id)), zmq_msg_size(&id));
    const bool more = zmq_msg_more(&id) != 0;
    zmq_msg_close(&id);
    std::vector<std::string> frames;
    if (more) frames = RecvFrames(replay_);
    // A REQ client's request starts with an empty delimiter; answers carry
    // it too (a DEALER's may omit it).
    const size_t i = !frames.empty() && frames[0].empty() ? 1 : 0;
    std::string topic;
    std::string start_bytes;
    if (frames.size() - i == 1) {
      start_bytes = frames[i];
    } else if (frames.size() - i == 2) {
      topic = frames[i];
      start_bytes = frames[i + 1];
    }
    auto reply = [&](absl::string_view seq, absl::string_view payload) {
      std::vector<absl::string_view> out = {identity};
      out.push_back(absl::string_view());  // the delimiter: vLLM always sends it
      out.push_back(seq);
      out.push_back(payload);
      SendFrames(replay_, out);
    };
    if (start_bytes.size() == 8) {
      uint64_t start = 0;
      for (unsigned char c : start_bytes) start = (start << 8) | c;
      for (const auto& [name, state] : topics_) {
        if (!topic.empty() && name != topic) continue;
        for (const auto& [seq, payload] : state.buffer) {
          if (seq >= start) reply(BigEndian(seq), payload);
        }
      }
    }
    reply(BigEndian(~uint64_t{0}), absl::string_view());  // the end marker (-1)
  }
}

void KvEventPublisher::Loop() {
  for (;;) {
    if (replay_ != nullptr) {
      zmq_pollitem_t item = {replay_, 0, ZMQ_POLLIN, 0};
      if (zmq_poll(&item, 1, 10) > 0) ServeReplay();
    }
    std::deque<Pending> batch;
    bool stop;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (replay_ == nullptr) {
        cv_.wait_for(lock, std::chrono::milliseconds(200),
                     [this] { return stop_ || !queue_.empty(); });
      }
      batch.swap(queue_);
      stop = stop_;
    }
    for (Pending& p : batch) Send(std::move(p));
    if (stop) return;
  }
}

}  // namespace minfer::daemon
