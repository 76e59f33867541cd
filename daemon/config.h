// minferd's configuration: a JSON file (every key optional), overridden by
// command-line flags (main.cc). Example:
//
//   {
//     "listen": "127.0.0.1:50051",
//     "metrics_listen": "127.0.0.1:9464",      // "" turns metrics off
//     "http_listen": "127.0.0.1:8080",         // the OpenAI-compatible API; "" (default) = off
//     "http_threads": 2,                       // the HTTP API's event-loop threads
//     "http": {"max_connections": 10000, "max_connections_per_client": 1024,  // 0: no cap
//              "max_header_bytes": 32768, "max_headers": 64, "max_target_bytes": 8192,
//              "max_body_bytes": "8M", "handler_threads": 4,
//              "tls_handshake_timeout_seconds": 10, "header_timeout_seconds": 10,
//              "body_timeout_seconds": 30, "idle_timeout_seconds": 60,
//              "write_timeout_seconds": 60},     // the HTTP front door's limits
//     "api_key_file": "/etc/minfer/api-keys",  // one key per line; the HTTP API then
//                                              // requires "Authorization: Bearer KEY"
//     "memory_limit": "8G",                    // bytes, or K/M/G/T (binary)
//     "drain_timeout_seconds": 30,
//     "tls": {"cert": "/etc/minfer/tls.crt", "key": "/etc/minfer/tls.key"},
//     "admin_token_file": "/etc/minfer/admin-token",
//     "limits": {"max_prompt_tokens": 32768, "max_tokens": 4096,
//                "default_max_tokens": 256},     // (capped by max_tokens)
//     "defaults": {"n_ctx": 4096, "parallel": 16, "queue_size": 16},
//     "models": [{"name": "default", "path": "models/default.gguf",
//                 "n_ctx": 4096, "parallel": 4, "kv_type": "f16", "kv_tokens": 8192,
//                 "backend": "auto", "queue_size": 16,
//                 "tool_parser": "hermes", "reasoning_parser": "none",  // "": the template's
//                 "spec": "draft", "draft": "models/draft.gguf", "spec_k": 4,  // "": the knob
//                 "knobs": {"MINFER_PREFILL_CHUNK": "256"},
//                 "kv_events": "off",                 // "" / "on": with the daemon's
//                 "sleep_after_seconds": 600, "sleep_level": 1}],  // 0: the daemon's
//     "kv_events": {"endpoint": "tcp://*:5557",     // KV-cache events (ZeroMQ PUB)
//                   "replay_endpoint": "tcp://*:5558", "topic": "kv@{host}@{model}"},
//     "sleep_after_seconds": 0,                // idle models sleep (0: never)
//     "aliases": {"prod": "default"},
//     "tenants": [{"name": "search", "api_keys": ["..."],  // or "api_key_file"
//                  "weight": 2, "max_streams": 32,
//                  "quota": {"tokens": 1000000, "window_seconds": 3600},
//                  "models": ["prod"],                  // empty or absent: all
//                  "cache_group": "shared"}],           // share the prefix cache with
//                                                       // tenants of the same group
//     "log_level": "info"
//   }
//
// Unknown keys are errors (a typo must not silently fall back to a
// default); errors name the key ("config.json: limits.max_tokens must be a
// positive integer").
#ifndef MINFER_DAEMON_CONFIG_H_
#define MINFER_DAEMON_CONFIG_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/http/event_server.h"
#include "daemon/serving/limits.h"
#include "daemon/serving/slot.h"
#include "daemon/serving/tenants.h"

namespace minfer::daemon {

struct DaemonConfig {
  std::string listen = "127.0.0.1:50051";
  std::string metrics_listen = "127.0.0.1:9464";  // empty: no metrics
  std::string http_listen;                        // empty: no HTTP API
  // The HTTP front door's threads, limits and timeouts (listen and TLS come
  // from http_listen and tls_*).
  http::EventServerOptions http;
  std::string api_key_file;           // read into api_keys by Finalize
  std::vector<std::string> api_keys;  // empty: the HTTP API is open
  uint64_t memory_limit = 0;                      // 0: the host's available memory
  double drain_timeout_seconds = 30;
  // KV-cache events (serving/kv_events.h); endpoint "" = off.
  KvEventsOptions kv_events;
  double sleep_after_seconds = 0;  // models' default idle timeout; 0: never
  std::string tls_cert_file;  // both or neither
  std::string tls_key_file;
  std::string admin_token;       // empty: admin API open
  std::string admin_token_file;  // read into admin_token by Finalize
  GenerationLimits limits;
  int64_t default_n_ctx = 4096;
  int32_t default_parallel = 16;
  int32_t default_queue_size = 16;
  std::vector<SlotConfig> models;  // loaded at start (fields 0 = defaults)
  std::vector<std::pair<std::string, std::string>> aliases;  // set once ready
  std::string log_level;  // empty: MINFER_LOG_LEVEL / info
  // Who may generate (tenants.h); empty: anyone who reaches the ports (the
  // HTTP API then checks api_keys, if any).
  std::vector<TenantConfig> tenants;
};

// Applies the JSON document `text` on top of `config`. `source` names the
// file in errors.
absl::Status ApplyConfigJson(const std::string& text, const std::string& source,
                             DaemonConfig* config);
// Reads and applies the file at `path`.
absl::Status ApplyConfigFile(const std::string& path, DaemonConfig* config);

// Reads admin_token_file into admin_token (trailing whitespace stripped),
// api_key_file into api_keys (one per line; blank lines and lines starting
// with '#' skipped) and
// checks cross-field rules: limits positive, TLS cert and key together,
// model names unique, aliases pointing at listed models, no API key (a
// tenant's or api_key_file's) equal to the admin token (INVALID_ARGUMENT
// naming the tenant).
absl::Status FinalizeConfig(DaemonConfig* config);

// minferd's --tenant flag: comma-separated KEY=VALUE pairs, e.g.
//   name=search,key_file=/etc/minfer/search.keys,weight=2,max_streams=32,
//   max_streams_per_model=16,quota=1000000/3600,models=prod+m7,cache_group=shared
// (quota = TOKENS/SECONDS; models joined by '+'). Keys only from a file:
// a key on the command line would show in every process listing.
// INVALID_ARGUMENT naming the part that is wrong.
absl::StatusOr<TenantConfig> ParseTenantFlag(const std::string& spec);

// minferd's --model flag: NAME=PATH, then optional comma-separated
// per-model options tool_parser=FAMILY|none, reasoning_parser=qwen3|none,
// spec=off|ngram|draft, draft=PATH, spec_k=K, kv_events=on|off,
// sleep_after=SECONDS and sleep_level=1|2 (e.g.
// "m=/models/a.gguf,tool_parser=llama3_json,draft=/models/small.gguf"); so
// a PATH holds no comma. n_ctx, parallel and queue_size are left 0 (the
// server defaults). INVALID_ARGUMENT naming the part that is wrong; the
// parser names and the speculative options are checked when the model
// loads (CheckChatParsers, CheckSpeculative).
absl::StatusOr<SlotConfig> ParseModelFlag(const std::string& spec);

// "1073741824", "512M", "8G", "1.5GiB", "64KiB" -> bytes (binary units).
absl::StatusOr<uint64_t> ParseByteSize(const std::string& text);

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_CONFIG_H_
