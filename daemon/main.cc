// minferd: serves GGUF models over gRPC (see daemon.h and the README).
//
// Signals: SIGTERM or SIGINT starts the drain — new generations are refused
// (UNAVAILABLE), health turns NOT_SERVING, open streams get up to
// --drain-timeout seconds to finish and are then cancelled — and the
// process exits 0. A second SIGTERM or SIGINT during the drain ends it at
// once: what still runs is cancelled (UNAVAILABLE) and the process shuts
// down and exits 0 as after a drain. The signals are blocked in every
// thread and taken by sigwait()/sigtimedwait() on the main thread, so no
// work happens in a signal handler.
//
// Memory: see SetMallocThresholds.
//
// Exit: the ready file is removed. A model load still in progress is waited
// for at most kSlotsStopTimeout; past it (a load stuck in I/O) minferd
// logs which and exits anyway, without running destructors that would wait
// for it.
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "daemon/config.h"
#include "daemon/daemon.h"
#include "daemon/version.h"
#include "engine/base/knobs.h"
#include "engine/base/logging.h"
#include "nlohmann/json.hpp"

namespace {

using minfer::daemon::DaemonConfig;

// How long the exit waits for slots to stop (a model load in progress).
constexpr std::chrono::seconds kSlotsStopTimeout(10);

const char* SignalName(int sig) { return sig == SIGTERM ? "SIGTERM" : "SIGINT"; }

// Fixed malloc thresholds and one arena, so that memory freed at an unload
// goes back to the system.
//
// Thresholds: glibc raises both whenever a large mmap'ed block is freed (up
// to a 32 MiB mmap threshold and a 64 MiB trim threshold), and then keeps up
// to that much free memory at the top of every per-thread heap, where
// malloc_trim (which the daemon calls after an unload, heap_trim.h) does not
// reach: about 9 MiB more resident for every arena a load had used. Setting
// them turns the raising off: blocks of 32 MiB and more are mapped on their
// own (freed at once), and a heap whose free top exceeds 1 MiB shrinks when
// the block is freed. Measured by tests/daemon/minferd_memory_test (10
// load/unload cycles, 6 clients refused meanwhile): RSS +35 MiB with
// malloc_trim alone, +2 MiB with both, +190 MiB with the thresholds alone.
//
// One arena: with an arena per thread, a load's short-lived small blocks
// (the tokenizer's 151,936 token strings and merges, parsed and dropped)
// share arenas with gRPC threads' long-lived ones, and the pages those pin
// stay resident after the unload: the one-minute soak
// (tests/daemon/soak_process_test) saw steps of 6-37 MiB after a few dozen
// cycles in about half of its runs. With one arena, 0 of 6 runs grew more
// than 1.2 MiB, and streams were not slower (4,260-4,850 tok/s against
// 3,500-4,130 on the 2-core CI machine): the hot paths allocate little, and
// glibc's per-thread cache serves the small blocks they do without the
// arena's lock. An operator's own MALLOC_* / GLIBC_TUNABLES settings win.
void SetMallocThresholds() {
  if (std::getenv("GLIBC_TUNABLES") != nullptr) return;
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr) mallopt(M_ARENA_MAX, 1);
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") == nullptr &&
      std::getenv("MALLOC_TRIM_THRESHOLD_") == nullptr) {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 20);
  }
}

int Fail(const std::string& message) {
  std::cerr << "minferd: " << message << "\n";
  return 1;
}

// NAME=VALUE -> (NAME, VALUE).
bool SplitPair(const std::string& s, std::pair<std::string, std::string>* out) {
  size_t eq = s.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == s.size()) return false;
  *out = {s.substr(0, eq), s.substr(eq + 1)};
  return true;
}

}  // namespace

// Every HTTP connection is a file descriptor, and idle keep-alive clients
// are cheap on the event loop: the soft limit (often 1,024) would refuse
// accepts long before memory or the connection caps do. Raised to the hard
// limit, as nginx's worker_rlimit_nofile or Go's runtime do.
void RaiseFdLimit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

int main(int argc, char** argv) {
  SetMallocThresholds();
  RaiseFdLimit();
  // Before any thread exists, so that every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  CLI::App app{"minferd: serves GGUF language models over gRPC (minfer.v1)", "minferd"};
  std::string config_file, listen, metrics_listen, memory_limit, tls_cert, tls_key;
  std::string admin_token, admin_token_file, ready_file, log_level, http_listen, api_key_file;
  int32_t http_threads = 0;
  double drain_timeout = 0, sleep_after = 0;
  std::string kv_events, kv_events_replay, kv_events_topic;
  int64_t ctx = 0;
  int32_t parallel = 0, queue_size = 0, max_prompt_tokens = 0, max_tokens = 0,
          default_max_tokens = 0;
  std::vector<std::string> models, aliases, tenant_flags;
  bool version = false;
  app.add_option("--config", config_file, "JSON config file (flags override it)");
  auto* o_listen = app.add_option("--listen", listen, "gRPC address (default 127.0.0.1:50051)");
  auto* o_metrics = app.add_option("--metrics-listen", metrics_listen,
                                   "Prometheus /metrics address (default 127.0.0.1:9464; \"\" = off)");
  auto* o_http = app.add_option("--http-listen", http_listen,
                                "OpenAI-compatible HTTP API address, e.g. 127.0.0.1:8080 (default: off)");
  auto* o_http_threads =
      app.add_option("--http-threads", http_threads, "HTTP API event-loop threads (2)");
  // The HTTP front door's limits and timeouts (docs in README): each flag
  // overrides the config file's "http" object.
  int32_t http_max_conns = 0, http_max_conns_client = 0, http_max_headers = 0;
  std::string http_max_body, http_max_header_bytes;
  double http_tls_timeout = 0, http_header_timeout = 0, http_body_timeout = 0,
         http_idle_timeout = 0, http_write_timeout = 0;
  auto* o_http_mc = app.add_option("--http-max-connections", http_max_conns,
                                   "HTTP connections open at once (10000)");
  auto* o_http_mcc = app.add_option("--http-max-connections-per-client", http_max_conns_client,
                                    "HTTP connections from one address (1024; 0 = no cap)");
  auto* o_http_mh = app.add_option("--http-max-headers", http_max_headers,
                                   "header fields per HTTP request (64; more: 431)");
  auto* o_http_mhb = app.add_option("--http-max-header-bytes", http_max_header_bytes,
                                    "bytes of an HTTP request's header fields (32K; more: 431)");
  auto* o_http_mb = app.add_option("--http-max-body", http_max_body,
                                   "bytes of an HTTP request body (8M; more: 413)");
  auto* o_http_tt = app.add_option("--http-tls-handshake-timeout", http_tls_timeout,
                                   "seconds for a TLS handshake (10)");
  auto* o_http_ht = app.add_option("--http-header-timeout", http_header_timeout,
                                   "seconds for a request's head once begun (10; then 408)");
  auto* o_http_bt = app.add_option("--http-body-timeout", http_body_timeout,
                                   "seconds for a request's body after its head (30; then 408)");
  auto* o_http_it = app.add_option("--http-idle-timeout", http_idle_timeout,
                                   "seconds a keep-alive connection may idle (60)");
  auto* o_http_wt = app.add_option("--http-write-timeout", http_write_timeout,
                                   "seconds an answer may make no progress (60; then closed)");
  auto* o_keys = app.add_option("--api-key-file", api_key_file,
                                "file of API keys, one per line: the HTTP API then requires one");
  auto* o_mem = app.add_option("--memory-limit", memory_limit,
                               "memory budget for models, e.g. 8G (default: host available memory)");
  auto* o_drain = app.add_option("--drain-timeout", drain_timeout,
                                 "seconds streams may run after SIGTERM (default 30)");
  auto* o_kv = app.add_option("--kv-events", kv_events,
                              "publish KV-cache events (vLLM's format) on this ZeroMQ endpoint, "
                              "e.g. tcp://*:5557 (default: off)");
  auto* o_kv_replay = app.add_option("--kv-events-replay", kv_events_replay,
                                     "ZeroMQ ROUTER endpoint replaying recent event batches to "
                                     "routers that missed them, e.g. tcp://*:5558");
  auto* o_kv_topic = app.add_option("--kv-events-topic", kv_events_topic,
                                    "topic of a model's events; {model} and {host} are replaced "
                                    "(default kv@{host}@{model})");
  auto* o_sleep = app.add_option("--sleep-after", sleep_after,
                                 "seconds a model may sit idle before it sleeps at level 1 "
                                 "(per model: sleep_after=; default 0: never)");
  auto* o_cert = app.add_option("--tls-cert", tls_cert, "TLS certificate (PEM)");
  auto* o_key = app.add_option("--tls-key", tls_key, "TLS private key (PEM)");
  auto* o_token = app.add_option("--admin-token", admin_token,
                                 "bearer token required by the admin API")
                      ->envname("MINFER_ADMIN_TOKEN");
  auto* o_token_file =
      app.add_option("--admin-token-file", admin_token_file, "file holding the admin token");
  app.add_option("--model", models,
                 "NAME=PATH[,tool_parser=FAMILY|none][,reasoning_parser=qwen3|none]"
                 "[,spec=off|ngram|draft][,draft=PATH][,spec_k=K][,kv_events=on|off]"
                 "[,sleep_after=SECONDS][,sleep_level=1|2]: load a model at start "
                 "(repeatable; draft=PATH drafts speculative tokens with that model)");
  app.add_option("--alias", aliases, "ALIAS=MODEL: set once MODEL is ready (repeatable)");
  app.add_option("--tenant", tenant_flags,
                 "name=N,key_file=F[,weight=W][,max_streams=S][,max_streams_per_model=M]"
                 "[,quota=TOKENS/SECONDS][,models=A+B]: a tenant (repeatable; replaces the "
                 "config file's tenant of that name)");
  auto* o_ctx = app.add_option("--ctx", ctx, "default context size per sequence (4096)");
  auto* o_parallel = app.add_option("--parallel", parallel, "default concurrent sequences per model (16)");
  auto* o_queue = app.add_option("--queue-size", queue_size, "default queue beyond parallel (16)");
  auto* o_mpt = app.add_option("--max-prompt-tokens", max_prompt_tokens, "limit (32768)");
  auto* o_mt = app.add_option("--max-tokens", max_tokens, "limit on a request's max_tokens (4096)");
  auto* o_dmt = app.add_option("--default-max-tokens", default_max_tokens,
                               "max_tokens when a request does not say (256)");
  app.add_option("--ready-file", ready_file,
                 "write {\"address\",\"metrics_address\",\"http_address\",\"pid\"} as JSON here "
                 "once serving");
  auto* o_log = app.add_option("--log-level", log_level, "trace|debug|info|warn|error|off");
  app.add_flag("--version", version, "print the version and exit");
  // CLI11 reports usage errors by throwing; this is the one place minferd
  // catches, and only CLI11's own exception type.
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (version) {
    std::cout << "minferd " << minfer::kMinferVersion << "\n";
    return 0;
  }

  DaemonConfig config;
  if (!config_file.empty()) {
    if (absl::Status s = minfer::daemon::ApplyConfigFile(config_file, &config); !s.ok()) {
      return Fail(std::string(s.message()));
    }
  }
  if (*o_listen) config.listen = listen;
  if (*o_metrics) config.metrics_listen = metrics_listen;
  if (*o_http) config.http_listen = http_listen;
  if (*o_http_threads) config.http.loop_threads = http_threads;
  if (*o_http_mc) config.http.max_connections = http_max_conns;
  if (*o_http_mcc) config.http.max_connections_per_client = http_max_conns_client;
  if (*o_http_mh) config.http.limits.max_headers = http_max_headers;
  for (auto [flag, text, out] : {std::tuple{o_http_mhb, &http_max_header_bytes,
                                            &config.http.limits.max_header_bytes},
                                 std::tuple{o_http_mb, &http_max_body,
                                            &config.http.limits.max_body_bytes}}) {
    if (!*flag) continue;
    absl::StatusOr<uint64_t> bytes = minfer::daemon::ParseByteSize(*text);
    if (!bytes.ok()) return Fail(absl::StrCat(flag->get_name(), ": ", bytes.status().message()));
    *out = *bytes;
  }
  if (*o_http_tt) config.http.tls_handshake_timeout_seconds = http_tls_timeout;
  if (*o_http_ht) config.http.header_timeout_seconds = http_header_timeout;
  if (*o_http_bt) config.http.body_timeout_seconds = http_body_timeout;
  if (*o_http_it) config.http.idle_timeout_seconds = http_idle_timeout;
  if (*o_http_wt) config.http.write_timeout_seconds = http_write_timeout;
  if (*o_keys) config.api_key_file = api_key_file;
  if (*o_mem) {
    absl::StatusOr<uint64_t> bytes = minfer::daemon::ParseByteSize(memory_limit);
    if (!bytes.ok()) return Fail(absl::StrCat("--memory-limit: ", bytes.status().message()));
    config.memory_limit = *bytes;
  }
  if (*o_drain) config.drain_timeout_seconds = drain_timeout;
  if (*o_kv) config.kv_events.endpoint = kv_events;
  if (*o_kv_replay) config.kv_events.replay_endpoint = kv_events_replay;
  if (*o_kv_topic) config.kv_events.topic = kv_events_topic;
  if (*o_sleep) config.sleep_after_seconds = sleep_after;
  if (*o_cert) config.tls_cert_file = tls_cert;
  if (*o_key) config.tls_key_file = tls_key;
  if (*o_token) config.admin_token = admin_token;
  if (*o_token_file) config.admin_token_file = admin_token_file;
  if (*o_ctx) config.default_n_ctx = ctx;
  if (*o_parallel) config.default_parallel = parallel;
  if (*o_queue) config.default_queue_size = queue_size;
  if (*o_mpt) config.limits.max_prompt_tokens = max_prompt_tokens;
  if (*o_mt) config.limits.max_tokens = max_tokens;
  if (*o_dmt) config.limits.default_max_tokens = default_max_tokens;
  if (*o_log) config.log_level = log_level;
  for (const std::string& m : models) {
    absl::StatusOr<minfer::daemon::SlotConfig> c = minfer::daemon::ParseModelFlag(m);
    if (!c.ok()) return Fail(std::string(c.status().message()));
    std::erase_if(config.models, [&](const auto& x) { return x.name == c->name; });
    config.models.push_back(*std::move(c));
  }
  for (const std::string& t : tenant_flags) {
    absl::StatusOr<minfer::daemon::TenantConfig> tc = minfer::daemon::ParseTenantFlag(t);
    if (!tc.ok()) return Fail(std::string(tc.status().message()));
    std::erase_if(config.tenants, [&](const auto& c) { return c.name == tc->name; });
    config.tenants.push_back(*std::move(tc));
  }
  for (const std::string& a : aliases) {
    std::pair<std::string, std::string> kv;
    if (!SplitPair(a, &kv)) return Fail(absl::StrCat("--alias wants ALIAS=MODEL, got '", a, "'"));
    config.aliases.push_back(kv);
  }
  if (!config.log_level.empty()) {
    if (absl::Status s = minfer::SetLogLevel(config.log_level); !s.ok()) {
      return Fail(std::string(s.message()));
    }
  }
  if (absl::Status s = minfer::KnobRegistry::Global().LoadFromEnvironment(); !s.ok()) {
    minfer::Logger("daemon")->warn("environment knobs: {}", s);
  }

  absl::StatusOr<std::unique_ptr<minfer::daemon::Daemon>> daemon =
      minfer::daemon::Daemon::Start(config);
  if (!daemon.ok()) return Fail(std::string(daemon.status().message()));

  if (!ready_file.empty()) {
    nlohmann::json j = {{"address", (*daemon)->address()},
                        {"metrics_address", (*daemon)->metrics_address()},
                        {"http_address", (*daemon)->http_address()},
                        {"pid", static_cast<int64_t>(getpid())}};
    // Written whole under a temporary name, then renamed: a watcher never
    // sees half a file.
    const std::string tmp = ready_file + ".tmp";
    {
      std::ofstream out(tmp);
      out << j.dump() << "\n";
    }
    if (std::rename(tmp.c_str(), ready_file.c_str()) != 0) {
      return Fail(absl::StrCat("cannot write --ready-file '", ready_file, "'"));
    }
  }

  int sig = 0;
  sigwait(&signals, &sig);
  minfer::Logger("daemon")->info("received {}: draining for up to {:.1f} s", SignalName(sig),
                                 config.drain_timeout_seconds);
  minfer::daemon::Daemon& d = **daemon;
  std::atomic<bool> drained{false};
  std::thread drain([&] {
    d.Drain(std::chrono::duration<double>(config.drain_timeout_seconds));
    drained = true;
  });
  // Meanwhile a second signal cuts the drain short.
  const timespec poll = {0, 50 * 1000 * 1000};
  while (!drained.load()) {
    const int again = sigtimedwait(&signals, nullptr, &poll);
    if (again == SIGTERM || again == SIGINT) {
      d.CutDrainShort(absl::StrCat("received ", SignalName(again), " again"));
      break;
    }
  }
  drain.join();
  const bool stopped = d.Shutdown(kSlotsStopTimeout);
  if (!ready_file.empty()) std::remove(ready_file.c_str());
  if (!stopped) {
    // A slot thread is stuck in a load; destroying the daemon would wait
    // for it. Nothing is left to flush but the log.
    minfer::Logger("daemon")->flush();
    std::_Exit(0);
  }
  return 0;
}
