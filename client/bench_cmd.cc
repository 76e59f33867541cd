// minferctl bench: a load test. Every stream runs at once, one thread each,
// over gRPC or through the OpenAI-compatible HTTP API (--http), so the two
// front doors can be compared under the same load.
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/bench_report.h"
#include "client/commands.h"
#include "client/http_stream.h"

namespace minfer::ctl {
namespace {

// Runs every stream at once (one thread each), greedy with ignore_eos so
// each produces exactly `max_tokens`; returns the streams and the wall time.
// With `http`, through the HTTP API (chat completions with `chat`, else
// completions), else over gRPC (the prompt as a user message with `chat`).
std::vector<BenchStream> RunBench(client::MinferClient& client,
                                  const std::vector<std::string>& models, int streams_per_model,
                                  int max_tokens, const std::string& prompt, bool chat,
                                  const client::HttpTarget* http,
                                  const v1::GenerateRequest& constraint, double* wall_seconds) {
  std::vector<BenchStream> out;
  for (const std::string& m : models) {
    for (int i = 0; i < streams_per_model; ++i) out.push_back({m});
  }
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = Clock::now();
  std::vector<std::thread> threads;
  for (BenchStream& bs : out) {
    threads.emplace_back([&client, &bs, max_tokens, &prompt, chat, http, &constraint] {
      const Clock::time_point start = Clock::now();
      Clock::time_point first, last;
      int64_t tokens = 0, first_tokens = 0;
      auto count = [&](size_t n) {
        last = Clock::now();
        if (tokens == 0) {
          first = last;
          first_tokens = static_cast<int64_t>(n);
        }
        tokens += static_cast<int64_t>(n);
      };
      if (http != nullptr) {
        client::HttpStreamRequest hr;
        hr.model = bs.model;
        hr.prompt = prompt;
        hr.chat = chat;
        hr.max_tokens = max_tokens;
        auto r = client::HttpStream(*http, hr, count);
        if (!r.ok()) {
          bs.status = r.status();
          return;
        }
        bs.result.token_ids = std::move(r->token_ids);
        bs.result.text = std::move(r->text);
        bs.result.usage.set_prompt_tokens(r->prompt_tokens);
      } else {
        v1::GenerateRequest req = constraint;  // the output constraint, if any
        req.set_model(bs.model);
        if (chat) {
          v1::ChatMessage* m = req.mutable_chat()->add_messages();
          m->set_role("user");
          m->set_content(prompt);
        } else {
          req.set_text(prompt);
        }
        req.mutable_sampling()->set_temperature(0);
        req.mutable_stopping()->set_max_tokens(max_tokens);
        req.mutable_stopping()->set_ignore_eos(true);
        auto r = client.Generate(req, [&](const v1::GenerateResponse& chunk) {
          if (chunk.token_ids_size() > 0) count(chunk.token_ids_size());
          return true;
        });
        if (!r.ok()) {
          bs.status = r.status();
          return;
        }
        bs.result = std::move(*r);
      }
      bs.ttft = std::chrono::duration<double>(first - start).count();
      const double span = std::chrono::duration<double>(last - first).count();
      if (span > 0) bs.decode_tps = static_cast<double>(tokens - first_tokens) / span;
    });
  }
  for (std::thread& t : threads) t.join();
  *wall_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return out;
}

struct BenchArgs {
  std::vector<std::string> models;
  int streams = 1, tokens = 128;
  std::string prompt = "The quick brown fox jumps over the lazy dog. Once upon a time";
  bool chat = false;
  client::HttpTarget http;  // url from --http (empty: gRPC); the key from --api-key
  // An output constraint for every stream (gRPC only): a JSON Schema file,
  // a GBNF file, or a regex. A stream ends early if its grammar completes.
  std::string json_schema_file, grammar_file, regex;
};

absl::StatusOr<std::string> ReadBenchFile(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, ": cannot read '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int Bench(BenchArgs& a, const Globals& g, client::MinferClient& client) {
  if (a.streams < 1 || a.tokens < 2) {
    return Fail(absl::InvalidArgumentError("bench wants --streams >= 1 and --max-tokens >= 2"));
  }
  double wall = 0;
  a.http.api_key = g.client.api_key;  // the global --api-key
  v1::GenerateRequest constraint;
  if (!a.json_schema_file.empty()) {
    absl::StatusOr<std::string> text = ReadBenchFile(a.json_schema_file, "--json-schema");
    if (!text.ok()) return Fail(text.status());
    constraint.set_json_schema(*std::move(text));
  } else if (!a.grammar_file.empty()) {
    absl::StatusOr<std::string> text = ReadBenchFile(a.grammar_file, "--grammar");
    if (!text.ok()) return Fail(text.status());
    constraint.set_gbnf(*std::move(text));
  } else if (!a.regex.empty()) {
    constraint.set_regex(a.regex);
  }
  if (constraint.constraint_case() != v1::GenerateRequest::CONSTRAINT_NOT_SET &&
      !a.http.url.empty()) {
    return Fail(absl::InvalidArgumentError("bench: output constraints go over gRPC, not --http"));
  }
  std::vector<BenchStream> runs =
      RunBench(client, a.models, a.streams, a.tokens, a.prompt, a.chat,
               a.http.url.empty() ? nullptr : &a.http, constraint, &wall);
  const BenchSummary summary = SummarizeBench(runs);
  std::cout << (g.json ? BenchJson(runs, summary, wall) : BenchText(runs, summary, wall));
  for (const BenchStream& b : runs) {
    if (!b.status.ok()) return Fail(b.status);
  }
  return summary.mismatched == 0 ? 0 : 1;
}

}  // namespace

void AddBenchCommand(CLI::App& app, const Globals& g, CommandTable& table) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* c = app.add_subcommand(
      "bench", "load test: concurrent greedy streams; per-stream and aggregate tokens/s");
  c->add_option("models", a->models, "models (or aliases) to stream from")->required();
  c->add_option("-c,--streams", a->streams, "concurrent streams per model")->capture_default_str();
  c->add_option("-n,--max-tokens", a->tokens, "tokens per stream (ignore_eos)")
      ->capture_default_str();
  c->add_option("-p,--prompt", a->prompt, "prompt text")->capture_default_str();
  c->add_flag("--chat", a->chat, "send the prompt as a user message (chat template)");
  c->add_option("--http", a->http.url,
                "stream through the OpenAI-compatible HTTP API at this URL "
                "(http://host:port) instead of gRPC");
  CLI::Option* schema =
      c->add_option("--json-schema", a->json_schema_file, "constrain every stream: a JSON Schema file");
  CLI::Option* grammar =
      c->add_option("--grammar", a->grammar_file, "constrain every stream: a GBNF file");
  CLI::Option* regex = c->add_option("--regex", a->regex, "constrain every stream: a regex");
  schema->excludes(grammar)->excludes(regex);
  grammar->excludes(regex);
  table.Add(c, [a, &g](client::MinferClient& client) { return Bench(*a, g, client); });
}

}  // namespace minfer::ctl
