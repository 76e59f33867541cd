#include "client/bench_report.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli_util.h"

namespace minfer::ctl {

BenchSummary SummarizeBench(const std::vector<BenchStream>& streams) {
  BenchSummary s;
  std::map<std::string, std::vector<int32_t>> first_ids;  // per model
  for (const BenchStream& b : streams) {
    if (!b.status.ok()) {
      ++s.failed;
      continue;
    }
    s.tokens += static_cast<int64_t>(b.result.token_ids.size());
    auto [it, inserted] = first_ids.emplace(b.model, b.result.token_ids);
    if (!inserted && it->second != b.result.token_ids) ++s.mismatched;
  }
  return s;
}

double Percentile(const std::vector<double>& sorted, double p) {
  return sorted.empty()
             ? 0.0
             : sorted[std::min(sorted.size() - 1, static_cast<size_t>(p * sorted.size()))];
}

std::string BenchJson(const std::vector<BenchStream>& streams, const BenchSummary& summary,
                      double wall_seconds) {
  std::string out = "{\"streams\": [";
  for (size_t i = 0; i < streams.size(); ++i) {
    const BenchStream& b = streams[i];
    absl::StrAppend(&out, i ? ", " : "", "{\"model\": \"", b.model, "\", \"ok\": ",
                    b.status.ok() ? "true" : "false",
                    absl::StrFormat(", \"ttft_s\": %.4f, \"decode_tps\": %.2f, "
                                    "\"server_decode_tps\": %.2f, \"step_tps\": %.2f, \"ids\": [",
                                    b.ttft, b.decode_tps, b.result.usage.decode_tokens_per_second(),
                                    b.result.usage.decode_step_tokens_per_second()),
                    absl::StrJoin(b.result.token_ids, ", "), "]}");
  }
  absl::StrAppend(&out, absl::StrFormat("], \"wall_s\": %.3f, \"tokens\": %d, "
                                        "\"aggregate_tps\": %.2f, \"failed\": %d, "
                                        "\"mismatched\": %d}\n",
                                        wall_seconds, summary.tokens, summary.tokens / wall_seconds,
                                        summary.failed, summary.mismatched));
  return out;
}

std::string BenchText(const std::vector<BenchStream>& streams, const BenchSummary& summary,
                      double wall_seconds) {
  Table rows = {
      {"MODEL", "STATUS", "TOKENS", "TTFT", "DECODE TOK/S", "SERVER TOK/S", "STEP TOK/S"}};
  for (const BenchStream& b : streams) {
    rows.push_back({b.model, b.status.ok() ? "ok" : absl::StatusCodeToString(b.status.code()),
                    absl::StrCat(b.result.token_ids.size()), absl::StrFormat("%.3f s", b.ttft),
                    absl::StrFormat("%.1f", b.decode_tps),
                    absl::StrFormat("%.1f", b.result.usage.decode_tokens_per_second()),
                    absl::StrFormat("%.1f", b.result.usage.decode_step_tokens_per_second())});
  }
  std::vector<double> tps, ttft;
  for (const BenchStream& b : streams) {
    if (!b.status.ok()) continue;
    tps.push_back(b.decode_tps);
    ttft.push_back(b.ttft);
  }
  std::sort(tps.begin(), tps.end());
  std::sort(ttft.begin(), ttft.end());
  return FormatTable(rows) +
         absl::StrFormat(
             "%d streams, %d failed, %d greedy mismatches; %d tokens in %.2f s = %.1f tok/s "
             "aggregate; per stream %.1f median, %.1f min tok/s; TTFT p50 %.3f p90 %.3f p99 "
             "%.3f s\n",
             streams.size(), summary.failed, summary.mismatched, summary.tokens, wall_seconds,
             summary.tokens / wall_seconds, Percentile(tps, 0.5), tps.empty() ? 0.0 : tps.front(),
             Percentile(ttft, 0.5), Percentile(ttft, 0.9), Percentile(ttft, 0.99));
}

}  // namespace minfer::ctl
