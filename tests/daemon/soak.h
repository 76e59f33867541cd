// The minferd soak: N concurrent greedy streams for a while, through an
// alias that flips between a steady model and a second one that another
// loop keeps loading and unloading (requests and health checks are sent at
// the second model while it loads and unloads), with the daemon's resident
// memory and open file descriptors sampled throughout. Loopback only: the daemon must listen
// on 127.0.0.1, localhost or [::1].
//
// A stream fails when it ends with anything but OK, or when its greedy
// output differs from the first output that model gave for the same
// request. Requests at the second model while it is not ready are expected
// to be refused (FAILED_PRECONDITION, NOT_FOUND); any other refusal counts
// as a failure too.
//
// With an HTTP address, some streams go through the OpenAI API (SSE, as
// HTTP/1.0 so that the events come unframed) beside the gRPC ones, and the
// soak holds idle keep-alive and slowly dripping HTTP connections open
// throughout (reopening any the daemon closes): none of them may cost a
// stream.
//
// Used by the minferd_soak command (scripts/soak.sh) and by the CI soak
// test (soak_process_test).
#ifndef MINFER_TESTS_DAEMON_SOAK_H_
#define MINFER_TESTS_DAEMON_SOAK_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace minfer::soak {

struct SoakOptions {
  std::string address;  // minferd's gRPC address (loopback)
  pid_t pid = 0;        // minferd's pid, for /proc (RSS, fds)
  std::string token;    // admin bearer token, if the daemon wants one
  // A model minferd has loaded (it serves throughout), and the file of the
  // one the soak loads and unloads (under `cycled_model`).
  std::string steady_model = "a";
  std::string cycled_model = "b";
  std::string cycled_path;
  std::string alias = "prod";
  int streams = 8;
  double seconds = 600;
  // Memory and fds are compared from the first cycle that ends after this.
  double warmup_seconds = 60;
  int max_tokens = 48;   // per stream (ignore_eos, greedy)
  int64_t n_ctx = 512;   // of the cycled model
  int32_t parallel = 4;  // of the cycled model
  // How long the alias points at the cycled model in each cycle.
  double alias_seconds = 1.0;
  bool verbose = false;  // a line per cycle on stderr
  // The OpenAI API ("" = none, and the rest of this block is unused).
  std::string http_address;
  int http_streams = 0;  // of `streams`, how many go through HTTP
  int idle_http = 0;     // keep-alive connections that asked once, then idle
  int slow_http = 0;     // connections that send a byte of head every 2 s
};

struct Sample {
  double t = 0;  // seconds since the start
  uint64_t rss_bytes = 0;   // VmRSS
  // RssAnon: the heap and stacks. The rest of RSS is mostly the models'
  // mapped weights, which grows as more of the embedding table's rows are
  // read and is page cache the kernel can take back, not a leak.
  uint64_t anon_bytes = 0;
  int fds = 0;
};

struct SoakReport {
  double seconds = 0;
  int streams = 0;
  int cycles = 0;
  int64_t generations_ok = 0;
  int64_t tokens = 0;
  std::map<std::string, int64_t> failed_by_code;  // streams that failed
  int64_t mismatched = 0;  // OK, but not the model's output for the request
  std::map<std::string, int64_t> probes_by_code;  // requests at the cycled model
  int64_t unexpected_probes = 0;  // probe codes other than the expected ones
  int64_t drain_cancelled = 0;    // sequences the cycled model's unloads cancelled
  int64_t http_ok = 0;            // of generations_ok, through HTTP
  int side_connections = 0;       // idle + slow HTTP connections held
  int64_t side_reopened = 0;      // of those, reopened after the daemon closed one
  std::vector<std::string> errors;  // admin calls that failed (load, alias, unload)
  // Every second, and at the end of every cycle (the cycled model unloaded).
  std::vector<Sample> samples;
  std::vector<Sample> cycle_ends;
  // warm: the greatest anonymous RSS of the first three cycle ends after the
  // warm-up (the heap trim's sawtooth, soak.cc); end: the least of the
  // last three (a creep shows in all three, a spike in one). max: of each figure separately, over all samples.
  Sample start, warm, end, max;

  int64_t failed() const;
  // (end - warm) / warm of the anonymous RSS, in percent: the drift after
  // the warm-up, between two cycle ends (so the cycled model is unloaded in
  // both).
  double rss_drift_percent() const;
};

// Runs the soak against the daemon at options.address.
absl::StatusOr<SoakReport> RunSoak(const SoakOptions& options);

// How much the daemon may grow after the warm-up.
struct SoakLimits {
  double max_rss_drift_percent = 1.0;  // anonymous RSS, relative
  uint64_t max_rss_growth_bytes = UINT64_MAX;  // anonymous RSS, absolute
  int max_fd_growth = 2;
};

// What makes the run a failure, one line each (empty: it passed): any
// failed or mismatched stream, an unexpected refusal of a probe, a sequence
// cancelled by a drain, a failed admin call, or growth after the warm-up
// beyond `limits`.
std::vector<std::string> Violations(const SoakReport& report, const SoakLimits& limits);

// A few lines for people (streams, failures by code, probes, RSS start /
// after warm-up / end / max, fds).
std::string FormatReport(const SoakReport& report);
// The same as one JSON object.
std::string ReportJson(const SoakReport& report);

// VmRSS (or RssAnon) of `pid` in bytes (0 when unreadable); open fds (-1
// when unreadable).
uint64_t ProcessRss(pid_t pid, const char* field = "VmRSS");
int ProcessFds(pid_t pid);

// Whether `address` is a loopback host:port.
bool IsLoopback(const std::string& address);

}  // namespace minfer::soak

#endif  // MINFER_TESTS_DAEMON_SOAK_H_
