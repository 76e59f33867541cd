// minferd_soak: runs the soak (tests/daemon/soak.h) against a minferd on
// loopback and prints its report; scripts/soak.sh starts the daemon and
// runs this. Exit status: 0 when the run passed (Violations is empty), 1
// when it did not, 2 on a usage error.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_join.h"
#include "tests/daemon/soak.h"

int main(int argc, char** argv) {
  CLI::App app{"minferd_soak: concurrent streams through an alias while a second model is "
               "loaded, aliased and unloaded in a loop; reports failures, RSS and fds",
               "minferd_soak"};
  minfer::soak::SoakOptions o;
  std::string json_file;
  minfer::soak::SoakLimits limits;
  int pid = 0;
  app.add_option("--addr", o.address, "minferd's gRPC address (loopback)")->required();
  app.add_option("--pid", pid, "minferd's process id (RSS and fds from /proc)")->required();
  app.add_option("--cycled-path", o.cycled_path, "GGUF file of the model loaded and unloaded")
      ->required();
  app.add_option("--steady", o.steady_model, "model minferd serves throughout")
      ->capture_default_str();
  app.add_option("--cycled", o.cycled_model, "name to load the cycled model under")
      ->capture_default_str();
  app.add_option("--alias", o.alias, "alias the streams use")->capture_default_str();
  app.add_option("--streams,-c", o.streams, "concurrent streams")->capture_default_str();
  app.add_option("--seconds,-t", o.seconds, "how long to run")->capture_default_str();
  app.add_option("--warmup", o.warmup_seconds, "RSS and fds are compared from this on")
      ->capture_default_str();
  app.add_option("--max-tokens,-n", o.max_tokens, "tokens per stream")->capture_default_str();
  app.add_option("--ctx", o.n_ctx, "context of the cycled model")->capture_default_str();
  app.add_option("--parallel", o.parallel, "concurrent sequences of the cycled model")
      ->capture_default_str();
  app.add_option("--alias-seconds", o.alias_seconds, "time the alias points at the cycled model")
      ->capture_default_str();
  app.add_option("--http-addr", o.http_address, "minferd's HTTP API address (loopback)");
  app.add_option("--http-streams", o.http_streams, "of the streams, how many go through HTTP")
      ->capture_default_str();
  app.add_option("--idle-http", o.idle_http, "idle keep-alive HTTP connections held open")
      ->capture_default_str();
  app.add_option("--slow-http", o.slow_http, "HTTP connections dripping a byte of head every 2 s")
      ->capture_default_str();
  app.add_option("--token", o.token, "admin bearer token")->envname("MINFER_ADMIN_TOKEN");
  app.add_option("--json", json_file, "also write the report as JSON here");
  app.add_option("--max-rss-drift", limits.max_rss_drift_percent,
                 "percent of anonymous RSS growth allowed after the warm-up")
      ->capture_default_str();
  app.add_option("--max-fd-growth", limits.max_fd_growth,
                 "fds more at the end than after the warm-up")
      ->capture_default_str();
  app.add_flag("--verbose,-v", o.verbose, "a line per cycle and per failure on stderr");
  // CLI11 reports usage errors by throwing; only its own exception type is
  // caught, here.
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  o.pid = pid;
  absl::StatusOr<minfer::soak::SoakReport> report = minfer::soak::RunSoak(o);
  if (!report.ok()) {
    std::cerr << "minferd_soak: " << report.status() << "\n";
    return 2;
  }
  std::cout << minfer::soak::FormatReport(*report);
  if (!json_file.empty()) std::ofstream(json_file) << minfer::soak::ReportJson(*report) << "\n";
  const std::vector<std::string> violations =
      minfer::soak::Violations(*report, limits);
  if (violations.empty()) {
    std::cout << "PASS\n";
    return 0;
  }
  std::cout << "FAIL: " << absl::StrJoin(violations, "; ") << "\n";
  return 1;
}
