// `minferctl bench`'s report from made-up streams: the agreement check, the
// aggregate numbers and percentiles (worked out by hand below), and both
// output formats.
#include "client/bench_report.h"

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace minfer::ctl {
namespace {

BenchStream Ok(const std::string& model, std::vector<int32_t> ids, double ttft, double tps) {
  BenchStream b;
  b.model = model;
  b.result.token_ids = std::move(ids);
  b.ttft = ttft;
  b.decode_tps = tps;
  return b;
}

// Five streams over 2 s: model a agrees twice with its first stream and
// differs once; model b's first stream failed, so its second is b's
// reference.
std::vector<BenchStream> Streams() {
  std::vector<BenchStream> s = {
      Ok("a", {1, 2, 3}, 0.1, 50),
      Ok("a", {1, 2, 4}, 0.3, 30),  // differs from a's first
      Ok("b", {}, 0, 0),
      Ok("b", {7, 8}, 0.2, 40),
      Ok("a", {1, 2, 3}, 0.4, 20),
  };
  s[2].status = absl::UnavailableError("gone");
  s[0].result.usage.set_decode_tokens_per_second(55);
  s[0].result.usage.set_decode_step_tokens_per_second(60);
  return s;
}

TEST(BenchReportTest, Summary) {
  const BenchSummary s = SummarizeBench(Streams());
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.tokens, 3 + 3 + 2 + 3);  // the failed stream's count is not
  EXPECT_EQ(s.mismatched, 1);
}

TEST(BenchReportTest, FailedStreamsAreNoModelsReference) {
  std::vector<BenchStream> s = {Ok("m", {9}, 0, 0), Ok("m", {1}, 0, 0), Ok("m", {1}, 0, 0)};
  s[0].status = absl::InternalError("x");
  EXPECT_EQ(SummarizeBench(s).mismatched, 0);
  EXPECT_EQ(SummarizeBench({}).tokens, 0);
}

TEST(BenchReportTest, PercentileIsTheElementAtFloorOfPTimesN) {
  std::vector<double> ten, hundred;
  for (int i = 1; i <= 10; ++i) ten.push_back(i);
  for (int i = 1; i <= 100; ++i) hundred.push_back(i);
  EXPECT_EQ(Percentile(ten, 0), 1);
  EXPECT_EQ(Percentile(ten, 0.5), 6);    // index 5
  EXPECT_EQ(Percentile(ten, 0.9), 10);   // index 9
  EXPECT_EQ(Percentile(ten, 0.99), 10);  // index 9 (9.9 rounded down)
  EXPECT_EQ(Percentile(ten, 1.0), 10);   // index 10, clamped to the last
  EXPECT_EQ(Percentile(hundred, 0.5), 51);
  EXPECT_EQ(Percentile(hundred, 0.9), 91);
  EXPECT_EQ(Percentile(hundred, 0.99), 100);
  EXPECT_EQ(Percentile({7}, 0.5), 7);
  EXPECT_EQ(Percentile({}, 0.5), 0);
}

TEST(BenchReportTest, Text) {
  const std::vector<BenchStream> s = Streams();
  const std::string text = BenchText(s, SummarizeBench(s), 2.0);
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  ASSERT_EQ(lines.size(), 1 + 5 + 1 + 1u);  // header, streams, summary, "" after the last \n
  EXPECT_EQ(lines.back(), "");
  // Columns: MODEL 5 wide, STATUS 11 ("UNAVAILABLE"), TOKENS 6, TTFT 7
  // ("0.100 s"), the two tok/s columns 12 (their headers).
  EXPECT_EQ(lines[3], "b" + std::string(6, ' ') + "UNAVAILABLE" + std::string(2, ' ') + "0" +
                          std::string(7, ' ') + "0.000 s" + std::string(2, ' ') + "0.0" +
                          std::string(11, ' ') + "0.0" + std::string(11, ' ') + "0.0");
  EXPECT_EQ(lines[1], "a" + std::string(6, ' ') + "ok" + std::string(11, ' ') + "3" +
                          std::string(7, ' ') + "0.100 s" + std::string(2, ' ') + "50.0" +
                          std::string(10, ' ') + "55.0" + std::string(10, ' ') + "60.0");
  // 11 tokens / 2 s; the four successful streams' decode rates sorted are
  // 20 30 40 50 (median: index 2) and their TTFTs 0.1 0.2 0.3 0.4 (p50:
  // index 2, p90 and p99: index 3).
  EXPECT_EQ(lines[6],
            "5 streams, 1 failed, 1 greedy mismatches; 11 tokens in 2.00 s = 5.5 tok/s "
            "aggregate; per stream 40.0 median, 20.0 min tok/s; TTFT p50 0.300 p90 0.400 p99 "
            "0.400 s");
}

TEST(BenchReportTest, TextWithEveryStreamFailed) {
  std::vector<BenchStream> s = {Ok("a", {}, 0, 0)};
  s[0].status = absl::UnavailableError("down");
  const std::string text = BenchText(s, SummarizeBench(s), 0.5);
  EXPECT_NE(text.find("\n1 streams, 1 failed, 0 greedy mismatches; 0 tokens in 0.50 s = 0.0 "
                      "tok/s aggregate; per stream 0.0 median, 0.0 min tok/s; TTFT p50 0.000 "
                      "p90 0.000 p99 0.000 s\n"),
            std::string::npos)
      << text;
}

TEST(BenchReportTest, Json) {
  const std::vector<BenchStream> s = Streams();
  const std::string out = BenchJson(s, SummarizeBench(s), 2.0);
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.find('\n'), out.size() - 1);  // one line
  const nlohmann::json j = nlohmann::json::parse(out);
  ASSERT_EQ(j["streams"].size(), 5u);
  EXPECT_EQ(j["streams"][0]["model"], "a");
  EXPECT_EQ(j["streams"][0]["ok"], true);
  EXPECT_EQ(j["streams"][0]["ids"], nlohmann::json({1, 2, 3}));
  EXPECT_DOUBLE_EQ(j["streams"][0]["ttft_s"].get<double>(), 0.1);
  EXPECT_DOUBLE_EQ(j["streams"][0]["decode_tps"].get<double>(), 50);
  EXPECT_DOUBLE_EQ(j["streams"][0]["server_decode_tps"].get<double>(), 55);
  EXPECT_DOUBLE_EQ(j["streams"][0]["step_tps"].get<double>(), 60);
  EXPECT_EQ(j["streams"][2]["ok"], false);
  EXPECT_EQ(j["streams"][2]["ids"], nlohmann::json::array());
  EXPECT_DOUBLE_EQ(j["wall_s"].get<double>(), 2.0);
  EXPECT_EQ(j["tokens"], 11);
  EXPECT_DOUBLE_EQ(j["aggregate_tps"].get<double>(), 5.5);
  EXPECT_EQ(j["failed"], 1);
  EXPECT_EQ(j["mismatched"], 1);
}

}  // namespace
}  // namespace minfer::ctl
