// What `minferctl bench` reports of its streams: whether greedy streams
// agreed, the aggregate numbers, and the two output formats. Pure functions
// of the measured streams (bench_cmd.cc measures them), so they are tested
// without a server.
#ifndef MINFER_CLIENT_BENCH_REPORT_H_
#define MINFER_CLIENT_BENCH_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/minfer_client.h"

namespace minfer::ctl {

// One stream of `minferctl bench`.
struct BenchStream {
  std::string model;
  absl::Status status;
  client::GenerateResult result;  // token_ids, text and usage (HTTP: prompt tokens only)
  double ttft = 0;        // client-side: request sent -> first token, seconds
  double decode_tps = 0;  // client-side: tokens after the first / their span
};

struct BenchSummary {
  int failed = 0;      // streams whose status is an error
  int64_t tokens = 0;  // token ids of the streams that succeeded
  // Successful streams whose ids differ from those of their model's first
  // successful stream: greedy streams of one model must agree token for
  // token, however the server batches them.
  int mismatched = 0;
};

BenchSummary SummarizeBench(const std::vector<BenchStream>& streams);

// The element of `sorted` (ascending) at index floor(p * n), or the last
// when that is past the end; 0 when empty. p = 0.5 of an even count is the
// upper of the two middle values.
double Percentile(const std::vector<double>& sorted, double p);

// --json: one line, {"streams": [{"model", "ok", "ttft_s", "decode_tps",
// "server_decode_tps", "step_tps", "ids"}...], "wall_s", "tokens",
// "aggregate_tps" (tokens / wall_seconds), "failed", "mismatched"}.
std::string BenchJson(const std::vector<BenchStream>& streams, const BenchSummary& summary,
                      double wall_seconds);

// The table of streams (model, status code name, tokens, TTFT, decode
// tokens/s as the client saw them and as the server measured them, the
// server's step rate), then one summary line: counts, aggregate tokens/s,
// median and minimum of the successful streams' decode tokens/s and their
// TTFT p50/p90/p99 (Percentile).
std::string BenchText(const std::vector<BenchStream>& streams, const BenchSummary& summary,
                      double wall_seconds);

}  // namespace minfer::ctl

#endif  // MINFER_CLIENT_BENCH_REPORT_H_
