#include "daemon/serving/metrics.h"

#include <exception>
#include <sstream>

#include "CivetServer.h"
#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"

namespace minfer::daemon {
namespace {

constexpr const char* kStates[] = {"loading",  "ready",     "sleeping", "waking",
                                   "draining", "unloading", "failed"};

prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  // 0.5 ms ... ~16 s, doubling: covers a GPU decode step through a long
  // CPU prefill.
  prometheus::Histogram::BucketBoundaries b;
  for (double v = 0.0005; v < 20; v *= 2) b.push_back(v);
  return b;
}

// Counts per step (sequences, tokens): 1, 2, 4, ... 8192.
prometheus::Histogram::BucketBoundaries CountBuckets() {
  prometheus::Histogram::BucketBoundaries b;
  for (double v = 1; v <= 8192; v *= 2) b.push_back(v);
  return b;
}

}  // namespace

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  auto& r = *registry_;
  requests_ = &prometheus::BuildCounter()
                   .Name("minfer_requests_total")
                   .Help("Requests by API (grpc, http), method or route, model and final status.")
                   .Register(r);
  prompt_tokens_ = &prometheus::BuildCounter()
                        .Name("minfer_prompt_tokens_total")
                        .Help("Prompt tokens of admitted generation requests.")
                        .Register(r);
  completion_tokens_ = &prometheus::BuildCounter()
                            .Name("minfer_completion_tokens_total")
                            .Help("Generated tokens.")
                            .Register(r);
  ttft_ = &prometheus::BuildHistogram()
               .Name("minfer_time_to_first_token_seconds")
               .Help("From the request's arrival to its first token (queueing included).")
               .Register(r);
  itl_ = &prometheus::BuildHistogram()
              .Name("minfer_inter_token_latency_seconds")
              .Help("Time between consecutive tokens of a stream.")
              .Register(r);
  queue_depth_ = &prometheus::BuildGauge()
                      .Name("minfer_queue_depth")
                      .Help("Generation requests waiting for a free sequence.")
                      .Register(r);
  active_ = &prometheus::BuildGauge()
                 .Name("minfer_active_sequences")
                 .Help("Sequences being generated.")
                 .Register(r);
  slot_state_ = &prometheus::BuildGauge()
                     .Name("minfer_slot_state")
                     .Help("1 for the model slot's current state.")
                     .Register(r);
  slot_memory_ = &prometheus::BuildGauge()
                      .Name("minfer_slot_memory_bytes")
                      .Help("Memory of a model slot by kind (weights, kv, scratch).")
                      .Register(r);
  backend_memory_ = &prometheus::BuildGauge()
                        .Name("minfer_backend_memory_bytes")
                        .Help("Everything a model's backend holds (on a GPU: weights and the planes "
                              "derived from them, KV cache, graph buffers, kernel workspaces).")
                        .Register(r);
  kv_blocks_ = &prometheus::BuildGauge()
                    .Name("minfer_kv_blocks")
                    .Help("Blocks of the model's KV pool by state (used, free; cached: free "
                          "blocks that hold a prefix a new sequence can reuse).")
                    .Register(r);
  kv_usage_ = &prometheus::BuildGauge()
                   .Name("minfer_kv_cache_usage_ratio")
                   .Help("Share of the model's KV pool blocks in use, in [0, 1] (what the Gateway "
                         "API Inference Extension's endpoint picker reads as KV-cache "
                         "utilization, beside minfer_queue_depth and minfer_active_sequences).")
                   .Register(r);
  preemptions_ = &prometheus::BuildCounter()
                      .Name("minfer_preemptions_total")
                      .Help("Sequences preempted because the KV pool ran dry (recomputed later).")
                      .Register(r);
  prefix_hit_tokens_ = &prometheus::BuildCounter()
                            .Name("minfer_prefix_cache_hit_tokens_total")
                            .Help("Prompt tokens whose KV came from the prefix cache instead of "
                                  "being computed.")
                            .Register(r);
  prefix_evictions_ = &prometheus::BuildCounter()
                           .Name("minfer_prefix_cache_evictions_total")
                           .Help("Cached KV blocks reused for other contents (the pool needed "
                                 "them).")
                           .Register(r);
  step_sequences_ = &prometheus::BuildHistogram()
                         .Name("minfer_step_sequences")
                         .Help("Sequences evaluated per batched forward step.")
                         .Register(r);
  step_tokens_ = &prometheus::BuildHistogram()
                      .Name("minfer_step_tokens")
                      .Help("Tokens evaluated per batched forward step (decodes + prefill chunks).")
                      .Register(r);
  step_seconds_ = &prometheus::BuildHistogram()
                       .Name("minfer_step_seconds")
                       .Help("Wall time of a batched step (schedule, forward, sampling).")
                       .Register(r);
  queue_time_ = &prometheus::BuildHistogram()
                     .Name("minfer_queue_time_seconds")
                     .Help("From a request's arrival to the first step it ran in.")
                     .Register(r);
  tpot_ = &prometheus::BuildHistogram()
               .Name("minfer_time_per_output_token_seconds")
               .Help("Per finished stream: time from its first token to its last over the "
                     "tokens after the first.")
               .Register(r);
  constrained_requests_ = &prometheus::BuildCounter()
                              .Name("minfer_constrained_requests_total")
                              .Help("Generation requests admitted with an output constraint, by "
                                    "kind (json_schema, json_object, gbnf, regex, choice).")
                              .Register(r);
  constrained_sequences_ = &prometheus::BuildGauge()
                               .Name("minfer_constrained_sequences")
                               .Help("Running sequences with an output constraint.")
                               .Register(r);
  grammar_compile_seconds_ = &prometheus::BuildHistogram()
                                 .Name("minfer_grammar_compile_seconds")
                                 .Help("Time a constrained request waited for its compiled "
                                       "grammar, in the request path (near 0 on a cache hit).")
                                 .Register(r);
  grammar_cache_hits_ = &prometheus::BuildCounter()
                            .Name("minfer_grammar_cache_hits_total")
                            .Help("Constraints served from the model's compiled-grammar cache.")
                            .Register(r);
  grammar_refused_ = &prometheus::BuildCounter()
                         .Name("minfer_grammar_refused_total")
                         .Help("Constraints refused (bad, unsupported or too complex; answered "
                               "400 / INVALID_ARGUMENT).")
                         .Register(r);
  grammar_masks_ = &prometheus::BuildCounter()
                       .Name("minfer_grammar_masks_total")
                       .Help("Token masks computed for constrained sequences.")
                       .Register(r);
  grammar_mask_seconds_ = &prometheus::BuildCounter()
                              .Name("minfer_grammar_mask_seconds_total")
                              .Help("Time spent computing token masks (on the mask threads, "
                                    "overlapped with the forward pass).")
                              .Register(r);
  spec_drafted_tokens_ = &prometheus::BuildCounter()
                             .Name("minfer_spec_drafted_tokens_total")
                             .Help("Speculative decoding: tokens drafted (n-gram or draft model) "
                                   "into steps and verified.")
                             .Register(r);
  spec_accepted_tokens_ = &prometheus::BuildCounter()
                              .Name("minfer_spec_accepted_tokens_total")
                              .Help("Speculative decoding: drafted tokens the model accepted "
                                    "(each saves a step of its sequence).")
                              .Register(r);
  spec_gate_held_steps_ = &prometheus::BuildCounter()
                              .Name("minfer_spec_gate_held_steps_total")
                              .Help("Speculative decoding: decode steps in which the engine did "
                                    "not draft because drafting measured slower than plain "
                                    "decoding at that load.")
                              .Register(r);
  sleeps_ = &prometheus::BuildCounter()
                 .Name("minfer_model_sleeps_total")
                 .Help("Times the model went to sleep, by sleep level (1: weights kept in host "
                       "memory, 2: dropped).")
                 .Register(r);
  wakes_ = &prometheus::BuildCounter()
                .Name("minfer_model_wakes_total")
                .Help("Times the model woke, by the level it slept at.")
                .Register(r);
  wake_seconds_ = &prometheus::BuildHistogram()
                       .Name("minfer_model_wake_seconds")
                       .Help("Wall time of a wake: memory re-admitted, weights back, engine "
                             "rebuilt.")
                       .Register(r);
  kv_event_batches_ = &prometheus::BuildCounter()
                           .Name("minfer_kv_events_batches_total")
                           .Help("KV-cache event batches handed to the publisher (queued) or "
                                 "dropped because its queue was full.")
                           .Register(r);
  tenant_streams_ = &prometheus::BuildGauge()
                         .Name("minfer_tenant_streams")
                         .Help("A tenant's streams open now (counted against its cap).")
                         .Register(r);
  tenant_requests_ = &prometheus::BuildCounter()
                          .Name("minfer_tenant_requests_total")
                          .Help("A tenant's generation requests by admission result.")
                          .Register(r);
  tenant_tokens_ = &prometheus::BuildCounter()
                        .Name("minfer_tenant_tokens_total")
                        .Help("A tenant's tokens of finished streams: prompt, completion, and "
                              "cached (prompt tokens taken from the prefix cache).")
                        .Register(r);
  tenant_queue_time_ = &prometheus::BuildHistogram()
                            .Name("minfer_tenant_queue_time_seconds")
                            .Help("Per finished stream of a tenant: arrival to the first step.")
                            .Register(r);
  draining_ = &prometheus::BuildGauge()
                   .Name("minfer_draining")
                   .Help("1 while the server drains before exiting.")
                   .Register(r)
                   .Add({});
  http_open_ = &prometheus::BuildGauge()
                    .Name("minfer_http_connections")
                    .Help("HTTP API connections open now.")
                    .Register(r)
                    .Add({});
  http_connections_ = &prometheus::BuildCounter()
                           .Name("minfer_http_connections_total")
                           .Help("HTTP API connections: accepted, refused over a connection cap, "
                                 "closed for a timeout (TLS handshake, head, body, write), and "
                                 "answered as bad requests by the server itself (400, 413, 414, "
                                 "431, ...).")
                           .Register(r);
  for (const char* result : {"accepted", "refused", "timed_out", "bad_request"}) {
    http_connections_->Add({{"result", result}});
  }
  device_memory_ = &prometheus::BuildGauge()
                        .Name("minfer_device_memory_bytes")
                        .Help("A GPU's memory: total, free (as the device reports it; other "
                              "processes' use included) and pending (reserved by model loads "
                              "still uploading to it).")
                        .Register(r);
  device_models_ = &prometheus::BuildGauge()
                        .Name("minfer_device_models")
                        .Help("Models placed on the GPU.")
                        .Register(r);
  device_healthy_ = &prometheus::BuildGauge()
                         .Name("minfer_device_healthy")
                         .Help("1 while the GPU is usable; 0 once an error poisoned its CUDA "
                               "context (its models fail; ServerStatus gives the error).")
                         .Register(r);
}

void Metrics::SetDeviceSource(std::function<std::vector<DeviceFigures>()> source) {
  std::lock_guard<std::mutex> lock(device_mu_);
  device_source_ = std::move(source);
}

void Metrics::SetHttpSource(std::function<HttpConnections()> source) {
  std::lock_guard<std::mutex> lock(http_mu_);
  http_source_ = std::move(source);
}

// GET /metrics: the registry's text exposition (civetweb runs it on its own
// threads; Serialize is thread-safe).
class Metrics::Handler : public CivetHandler {
 public:
  explicit Handler(const Metrics* metrics) : metrics_(metrics) {}

  bool handleGet(CivetServer* server, mg_connection* conn) override {
    return handleGet(server, conn, nullptr);
  }
  bool handleGet(CivetServer*, mg_connection* conn, int* status_code) override {
    const std::string body = metrics_->Serialize();
    mg_send_http_ok(conn, "text/plain; version=0.0.4; charset=utf-8",
                    static_cast<long long>(body.size()));
    mg_write(conn, body.data(), body.size());
    if (status_code != nullptr) *status_code = 200;
    return true;
  }

 private:
  const Metrics* metrics_;
};

Metrics::~Metrics() {
  // Stop serving (joining civetweb's threads) before the handler and the
  // registry it reads go away.
  server_.reset();
}

absl::Status Metrics::StartExposer(const std::string& address) {
  // civetweb reports a failure to bind by throwing; this is the boundary
  // where that becomes a Status.
  handler_ = std::make_unique<Handler>(this);
  try {
    server_ = std::make_unique<CivetServer>(
        std::vector<std::string>{"listening_ports", address, "num_threads", "2"});
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on '", address, "': ", e.what()));
  }
  server_->addHandler("/metrics", handler_.get());
  std::vector<int> ports = server_->getListeningPorts();
  const std::string host = address.substr(0, address.rfind(':'));
  exposer_address_ = absl::StrCat(host, ":", ports.empty() ? 0 : ports.front());
  return absl::OkStatus();
}

void Metrics::RecordRequest(const std::string& method, const std::string& model,
                            const std::string& code, const std::string& api) {
  requests_->Add({{"api", api}, {"method", method}, {"model", model}, {"code", code}})
      .Increment();
}

Metrics::TenantMetrics* Metrics::ForTenant(const std::string& tenant) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& t = tenants_[tenant];
  if (t == nullptr) {
    t = std::make_unique<TenantMetrics>();
    const prometheus::Labels l = {{"tenant", tenant}};
    t->streams = &tenant_streams_->Add(l);
    auto req = [&](const char* result) {
      return &tenant_requests_->Add({{"tenant", tenant}, {"result", result}});
    };
    t->admitted = req("admitted");
    t->rejected_cap = req("rejected_cap");
    t->rejected_quota = req("rejected_quota");
    t->rejected_model = req("rejected_model");
    auto tok = [&](const char* kind) {
      return &tenant_tokens_->Add({{"tenant", tenant}, {"kind", kind}});
    };
    t->prompt_tokens = tok("prompt");
    t->completion_tokens = tok("completion");
    t->cached_tokens = tok("cached");
    t->queue_time = &tenant_queue_time_->Add(l, LatencyBuckets());
  }
  return t.get();
}

ModelMetrics* Metrics::ForModel(const std::string& model) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = models_[model];
  if (slot == nullptr) {
    slot = std::make_unique<ModelMetrics>();
    const prometheus::Labels l = {{"model", model}};
    slot->prompt_tokens = &prompt_tokens_->Add(l);
    slot->completion_tokens = &completion_tokens_->Add(l);
    slot->ttft = &ttft_->Add(l, LatencyBuckets());
    slot->itl = &itl_->Add(l, LatencyBuckets());
    slot->queue_depth = &queue_depth_->Add(l);
    slot->active = &active_->Add(l);
    slot->weights_bytes = &slot_memory_->Add({{"model", model}, {"kind", "weights"}});
    slot->kv_bytes = &slot_memory_->Add({{"model", model}, {"kind", "kv"}});
    slot->scratch_bytes = &slot_memory_->Add({{"model", model}, {"kind", "scratch"}});
    slot->backend_bytes = &backend_memory_->Add(l);
    slot->kv_blocks_used = &kv_blocks_->Add({{"model", model}, {"state", "used"}});
    slot->kv_blocks_free = &kv_blocks_->Add({{"model", model}, {"state", "free"}});
    slot->kv_blocks_cached = &kv_blocks_->Add({{"model", model}, {"state", "cached"}});
    slot->kv_usage = &kv_usage_->Add(l);
    slot->preemptions = &preemptions_->Add(l);
    slot->prefix_hit_tokens = &prefix_hit_tokens_->Add(l);
    slot->prefix_evictions = &prefix_evictions_->Add(l);
    slot->step_sequences = &step_sequences_->Add(l, CountBuckets());
    slot->step_tokens = &step_tokens_->Add(l, CountBuckets());
    slot->step_seconds = &step_seconds_->Add(l, LatencyBuckets());
    slot->queue_time = &queue_time_->Add(l, LatencyBuckets());
    slot->tpot = &tpot_->Add(l, LatencyBuckets());
    for (int k = 0; k < kNumConstraintKinds; ++k) {
      slot->constrained_requests[k] =
          &constrained_requests_->Add({{"model", model}, {"kind", kConstraintKinds[k]}});
    }
    slot->constrained_sequences = &constrained_sequences_->Add(l);
    slot->grammar_compile_seconds = &grammar_compile_seconds_->Add(l, LatencyBuckets());
    slot->grammar_cache_hits = &grammar_cache_hits_->Add(l);
    slot->grammar_refused = &grammar_refused_->Add(l);
    slot->grammar_masks = &grammar_masks_->Add(l);
    slot->grammar_mask_seconds = &grammar_mask_seconds_->Add(l);
    slot->spec_drafted_tokens = &spec_drafted_tokens_->Add(l);
    slot->spec_accepted_tokens = &spec_accepted_tokens_->Add(l);
    slot->spec_gate_held_steps = &spec_gate_held_steps_->Add(l);
    for (int level = 1; level <= 2; ++level) {
      slot->sleeps[level - 1] = &sleeps_->Add({{"model", model}, {"level", std::to_string(level)}});
      slot->wakes[level - 1] = &wakes_->Add({{"model", model}, {"level", std::to_string(level)}});
    }
    slot->wake_seconds = &wake_seconds_->Add(l, LatencyBuckets());
    slot->kv_event_batches = &kv_event_batches_->Add({{"model", model}, {"result", "queued"}});
    slot->kv_event_batches_dropped =
        &kv_event_batches_->Add({{"model", model}, {"result", "dropped"}});
  }
  return slot.get();
}

void Metrics::SetSlotState(const std::string& model, const std::string& state) {
  for (const char* s : kStates) {
    slot_state_->Add({{"model", model}, {"state", s}}).Set(state == s ? 1 : 0);
  }
}

void Metrics::RemoveModel(const std::string& model) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(model);
  if (it != models_.end()) {
    ModelMetrics& m = *it->second;
    queue_depth_->Remove(m.queue_depth);
    active_->Remove(m.active);
    slot_memory_->Remove(m.weights_bytes);
    slot_memory_->Remove(m.kv_bytes);
    slot_memory_->Remove(m.scratch_bytes);
    backend_memory_->Remove(m.backend_bytes);
    kv_blocks_->Remove(m.kv_blocks_used);
    kv_blocks_->Remove(m.kv_blocks_free);
    kv_blocks_->Remove(m.kv_blocks_cached);
    kv_usage_->Remove(m.kv_usage);
    constrained_sequences_->Remove(m.constrained_sequences);
    // Counters and histograms stay registered; forget only our pointers to
    // the removed gauges by dropping the entry (a reload re-adds them).
    models_.erase(it);
  }
  for (const char* s : kStates) {
    slot_state_->Remove(&slot_state_->Add({{"model", model}, {"state", s}}));
  }
}

void Metrics::SetDraining(bool draining) { draining_->Set(draining ? 1 : 0); }

std::string Metrics::Serialize() const {
  {
    std::lock_guard<std::mutex> lock(http_mu_);
    if (http_source_) {
      const HttpConnections now = http_source_();
      http_open_->Set(static_cast<double>(now.open));
      auto advance = [&](const char* result, int64_t then, int64_t total) {
        if (total > then) {
          http_connections_->Add({{"result", result}}).Increment(static_cast<double>(total - then));
        }
      };
      advance("accepted", http_seen_.accepted, now.accepted);
      advance("refused", http_seen_.refused, now.refused);
      advance("timed_out", http_seen_.timed_out, now.timed_out);
      advance("bad_request", http_seen_.bad_request, now.bad_request);
      http_seen_ = now;
    }
  }
  {
    std::lock_guard<std::mutex> lock(device_mu_);
    if (device_source_) {
      for (const DeviceFigures& d : device_source_()) {
        device_memory_->Add({{"device", d.device}, {"kind", "total"}})
            .Set(static_cast<double>(d.total_bytes));
        device_memory_->Add({{"device", d.device}, {"kind", "free"}})
            .Set(static_cast<double>(d.free_bytes));
        device_memory_->Add({{"device", d.device}, {"kind", "pending"}})
            .Set(static_cast<double>(d.pending_bytes));
        device_models_->Add({{"device", d.device}}).Set(static_cast<double>(d.models));
        device_healthy_->Add({{"device", d.device}}).Set(d.healthy ? 1.0 : 0.0);
      }
    }
  }
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry_->Collect());
  return out.str();
}

}  // namespace minfer::daemon
