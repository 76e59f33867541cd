// Prometheus metrics of the daemon (prometheus-cpp), served by an HTTP
// exposer on their own address so scraping never competes with gRPC.
//
//   minfer_requests_total{api,method,model,code}     requests by final status: api
//                                                    "grpc" (method = RPC, code = gRPC
//                                                    code) or "http" (method = route,
//                                                    code = HTTP status)
//   minfer_prompt_tokens_total{model}                tokens in
//   minfer_completion_tokens_total{model}            tokens out
//   minfer_time_to_first_token_seconds{model}        arrival -> first token
//   minfer_inter_token_latency_seconds{model}        between streamed tokens
//   minfer_queue_depth{model}                        requests waiting
//   minfer_active_sequences{model}                   sequences running
//   minfer_slot_state{model,state}                   1 for the slot's state
//   minfer_slot_memory_bytes{model,kind}             weights / kv / scratch
//   minfer_backend_memory_bytes{model}               all the backend holds
//   minfer_kv_blocks{model,state}                    KV pool blocks used / free / cached
//   minfer_kv_cache_usage_ratio{model}               KV pool blocks used / allocatable, in
//                                                    [0, 1] (the Gateway API Inference
//                                                    Extension's KVCacheUtilization)
//                                                    (cached: free, holding a reusable prefix)
//   minfer_prefix_cache_hit_tokens_total{model}      prompt tokens taken from the prefix cache
//   minfer_prefix_cache_evictions_total{model}       cached blocks reused for other contents
//   minfer_preemptions_total{model}                  sequences preempted (KV pool dry)
//   minfer_step_sequences{model}                     sequences per batched step
//   minfer_step_tokens{model}                        tokens per batched step
//   minfer_step_seconds{model}                       wall time of a batched step
//   minfer_queue_time_seconds{model}                 arrival -> first step it ran in
//   minfer_time_per_output_token_seconds{model}      per finished stream, after the first
//   minfer_constrained_requests_total{model,kind}    requests admitted with a constraint, by
//                                                    kind (json_schema, json_object, gbnf,
//                                                    regex, choice)
//   minfer_constrained_sequences{model}              running sequences with a constraint
//   minfer_grammar_compile_seconds{model}            time a constrained request waited for its
//                                                    compiled grammar (near 0 on a cache hit)
//   minfer_grammar_cache_hits_total{model}           constraints served from the compiled cache
//   minfer_grammar_refused_total{model}              constraints refused (400 / INVALID_ARGUMENT)
//   minfer_grammar_masks_total{model}                token masks the engine computed
//   minfer_grammar_mask_seconds_total{model}         their total time (on the mask threads,
//                                                    overlapped with the forward)
//   minfer_spec_drafted_tokens_total{model}          speculative decoding: tokens drafted into
//                                                    steps (n-gram or draft model)
//   minfer_spec_accepted_tokens_total{model}         ... and accepted of them
//   minfer_spec_gate_held_steps_total{model}         decode steps not drafted because drafts
//                                                    did not pay at that load (spec_gate.h)
//   minfer_model_sleeps_total{model,level}           times the model went to sleep
//   minfer_model_wakes_total{model,level}            ... and woke (from that level)
//   minfer_model_wake_seconds{model}                 wall time of a wake (re-admit,
//                                                    weights back, engine rebuilt)
//   minfer_kv_events_batches_total{model,result}     KV-cache event batches queued for
//                                                    the publisher / dropped (queue full)
//   minfer_draining                                  1 while draining
//   minfer_http_connections                          HTTP connections open
//   minfer_http_connections_total{result}            accepted / refused (over a
//                                                    connection cap) / timed_out
//                                                    (handshake, head, body, write) /
//                                                    bad_request (431, 413, 400, ...)
//   minfer_tenant_streams{tenant}                    streams open
//   minfer_tenant_requests_total{tenant,result}      admitted / rejected_cap /
//                                                    rejected_quota / rejected_model
//   minfer_tenant_tokens_total{tenant,kind}          prompt / completion / cached
//   minfer_tenant_queue_time_seconds{tenant}         arrival -> first step, per stream
//   minfer_device_memory_bytes{device,kind}          a GPU's memory ("cuda:1"): total, free
//                                                    (as the device reports it), pending
//                                                    (reserved by loads in progress)
//   minfer_device_models{device}                     models placed on the GPU
//   minfer_device_healthy{device}                    1, or 0 once an error poisoned the
//                                                    GPU's CUDA context
//
// Per-model series of a slot are handed out as a ModelMetrics (stable
// pointers); the slot's gauges are removed when the slot goes away, the
// counters and histograms stay (Prometheus expects counters to persist).
//
// Thread-safe.
#ifndef MINFER_DAEMON_SERVING_METRICS_H_
#define MINFER_DAEMON_SERVING_METRICS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

class CivetServer;  // civetweb's HTTP server (what prometheus-cpp's Exposer runs on)

namespace minfer::daemon {

// The kind label of minfer_constrained_requests_total, indexed as
// grammar::GrammarKind (kJsonSchema = 0 ... kChoice = 4).
inline constexpr const char* kConstraintKinds[] = {"json_schema", "json_object", "gbnf", "regex",
                                                   "choice"};
inline constexpr int kNumConstraintKinds = 5;

// The series of one model. Pointers stay valid until Metrics::RemoveModel.
struct ModelMetrics {
  prometheus::Counter* prompt_tokens = nullptr;
  prometheus::Counter* completion_tokens = nullptr;
  prometheus::Histogram* ttft = nullptr;
  prometheus::Histogram* itl = nullptr;
  prometheus::Gauge* queue_depth = nullptr;
  prometheus::Gauge* active = nullptr;
  prometheus::Gauge* weights_bytes = nullptr;
  prometheus::Gauge* kv_bytes = nullptr;
  prometheus::Gauge* scratch_bytes = nullptr;
  prometheus::Gauge* backend_bytes = nullptr;
  prometheus::Gauge* kv_blocks_used = nullptr;
  prometheus::Gauge* kv_blocks_free = nullptr;
  prometheus::Gauge* kv_blocks_cached = nullptr;
  prometheus::Gauge* kv_usage = nullptr;
  prometheus::Counter* preemptions = nullptr;
  prometheus::Counter* prefix_hit_tokens = nullptr;
  prometheus::Counter* prefix_evictions = nullptr;
  prometheus::Histogram* step_sequences = nullptr;
  prometheus::Histogram* step_tokens = nullptr;
  prometheus::Histogram* step_seconds = nullptr;
  prometheus::Histogram* queue_time = nullptr;
  prometheus::Histogram* tpot = nullptr;
  prometheus::Counter* constrained_requests[kNumConstraintKinds] = {};
  prometheus::Gauge* constrained_sequences = nullptr;
  prometheus::Histogram* grammar_compile_seconds = nullptr;
  prometheus::Counter* grammar_cache_hits = nullptr;
  prometheus::Counter* grammar_refused = nullptr;
  prometheus::Counter* grammar_masks = nullptr;
  prometheus::Counter* grammar_mask_seconds = nullptr;
  prometheus::Counter* spec_drafted_tokens = nullptr;
  prometheus::Counter* spec_accepted_tokens = nullptr;
  prometheus::Counter* spec_gate_held_steps = nullptr;
  prometheus::Counter* sleeps[2] = {};  // by level - 1
  prometheus::Counter* wakes[2] = {};
  prometheus::Histogram* wake_seconds = nullptr;
  prometheus::Counter* kv_event_batches = nullptr;
  prometheus::Counter* kv_event_batches_dropped = nullptr;
};

class Metrics {
 public:
  Metrics();
  ~Metrics();

  // Serves /metrics on `address` ("host:port"; port 0 picks a free one):
  // Serialize(), and nothing else. (prometheus-cpp's Exposer is not used:
  // it adds a registry of its own whose exposer_request_latencies summary
  // prints its quantiles as "Nan" whenever no scrape fell in its window.)
  absl::Status StartExposer(const std::string& address);
  // "host:port" actually bound, empty when not serving.
  std::string exposer_address() const { return exposer_address_; }

  void RecordRequest(const std::string& method, const std::string& model,
                     const std::string& code, const std::string& api = "grpc");
  ModelMetrics* ForModel(const std::string& model);
  // A tenant's series (stable pointers; created on first use).
  struct TenantMetrics {
    prometheus::Gauge* streams = nullptr;
    prometheus::Counter* admitted = nullptr;
    prometheus::Counter* rejected_cap = nullptr;
    prometheus::Counter* rejected_quota = nullptr;
    prometheus::Counter* rejected_model = nullptr;
    prometheus::Counter* prompt_tokens = nullptr;
    prometheus::Counter* completion_tokens = nullptr;
    prometheus::Counter* cached_tokens = nullptr;
    prometheus::Histogram* queue_time = nullptr;
  };
  TenantMetrics* ForTenant(const std::string& tenant);
  // "loading", "ready", "unloading", "failed"; the other states read 0.
  void SetSlotState(const std::string& model, const std::string& state);
  // Drops the model's gauges (its counters and histograms stay).
  void RemoveModel(const std::string& model);
  void SetDraining(bool draining);

  // The HTTP front door's connection figures (totals since it started, and
  // the connections open now), read through `source` each time the
  // metrics are serialized; null stops reading them. The source must stay
  // valid until replaced.
  struct HttpConnections {
    int64_t open = 0;
    int64_t accepted = 0;
    int64_t refused = 0;
    int64_t timed_out = 0;
    int64_t bad_request = 0;
  };
  void SetHttpSource(std::function<HttpConnections()> source);

  // The GPUs' figures, read through `source` each time the metrics are
  // serialized (null: none). The source must stay valid until replaced.
  struct DeviceFigures {
    std::string device;  // "cuda:1"
    uint64_t total_bytes = 0;
    uint64_t free_bytes = 0;
    uint64_t pending_bytes = 0;
    int64_t models = 0;
    bool healthy = true;
  };
  void SetDeviceSource(std::function<std::vector<DeviceFigures>()> source);

  // The text exposition of every series (what /metrics serves). Only the
  // daemon's own families, which never print NaN: counters, gauges and
  // histograms (no summaries, whose empty quantiles are NaN).
  std::string Serialize() const;

 private:
  class Handler;

  std::shared_ptr<prometheus::Registry> registry_;
  // Declared before server_: the server (its threads) goes first.
  std::unique_ptr<Handler> handler_;
  std::unique_ptr<CivetServer> server_;
  std::string exposer_address_;

  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Counter>* prompt_tokens_;
  prometheus::Family<prometheus::Counter>* completion_tokens_;
  prometheus::Family<prometheus::Histogram>* ttft_;
  prometheus::Family<prometheus::Histogram>* itl_;
  prometheus::Family<prometheus::Gauge>* queue_depth_;
  prometheus::Family<prometheus::Gauge>* active_;
  prometheus::Family<prometheus::Gauge>* kv_usage_;
  prometheus::Family<prometheus::Gauge>* slot_state_;
  prometheus::Family<prometheus::Gauge>* slot_memory_;
  prometheus::Family<prometheus::Gauge>* backend_memory_;
  prometheus::Family<prometheus::Gauge>* kv_blocks_;
  prometheus::Family<prometheus::Counter>* preemptions_;
  prometheus::Family<prometheus::Counter>* prefix_hit_tokens_;
  prometheus::Family<prometheus::Counter>* prefix_evictions_;
  prometheus::Family<prometheus::Histogram>* step_sequences_;
  prometheus::Family<prometheus::Histogram>* step_tokens_;
  prometheus::Family<prometheus::Histogram>* step_seconds_;
  prometheus::Family<prometheus::Histogram>* queue_time_;
  prometheus::Family<prometheus::Histogram>* tpot_;
  prometheus::Family<prometheus::Counter>* constrained_requests_;
  prometheus::Family<prometheus::Gauge>* constrained_sequences_;
  prometheus::Family<prometheus::Histogram>* grammar_compile_seconds_;
  prometheus::Family<prometheus::Counter>* grammar_cache_hits_;
  prometheus::Family<prometheus::Counter>* grammar_refused_;
  prometheus::Family<prometheus::Counter>* grammar_masks_;
  prometheus::Family<prometheus::Counter>* grammar_mask_seconds_;
  prometheus::Family<prometheus::Counter>* spec_drafted_tokens_;
  prometheus::Family<prometheus::Counter>* spec_accepted_tokens_;
  prometheus::Family<prometheus::Counter>* spec_gate_held_steps_;
  prometheus::Family<prometheus::Counter>* sleeps_;
  prometheus::Family<prometheus::Counter>* wakes_;
  prometheus::Family<prometheus::Histogram>* wake_seconds_;
  prometheus::Family<prometheus::Counter>* kv_event_batches_;
  prometheus::Gauge* draining_;
  prometheus::Gauge* http_open_;
  prometheus::Family<prometheus::Counter>* http_connections_;
  // The HTTP source and what its totals read at the last serialization
  // (counters advance by the difference). Guarded by http_mu_.
  mutable std::mutex http_mu_;
  std::function<HttpConnections()> http_source_;
  mutable HttpConnections http_seen_;
  prometheus::Family<prometheus::Gauge>* device_memory_;
  prometheus::Family<prometheus::Gauge>* device_models_;
  prometheus::Family<prometheus::Gauge>* device_healthy_;
  mutable std::mutex device_mu_;
  std::function<std::vector<DeviceFigures>()> device_source_;  // guarded by device_mu_

  std::mutex mu_;
  std::map<std::string, std::unique_ptr<ModelMetrics>> models_;  // guarded by mu_
  std::map<std::string, std::unique_ptr<TenantMetrics>> tenants_;  // guarded by mu_
  prometheus::Family<prometheus::Gauge>* tenant_streams_;
  prometheus::Family<prometheus::Counter>* tenant_requests_;
  prometheus::Family<prometheus::Counter>* tenant_tokens_;
  prometheus::Family<prometheus::Histogram>* tenant_queue_time_;
};

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_SERVING_METRICS_H_
