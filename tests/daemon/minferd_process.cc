#include "tests/daemon/minferd_process.h"

#include <cstdlib>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace minfer::daemon::testing {

using minfer::testing::RunfilePath;
using minfer::testing::Subprocess;

absl::StatusOr<MinferdProcess> StartMinferd(const std::vector<std::string>& args, bool metrics) {
  static int n = 0;
  MinferdProcess m;
  const char* tmp = std::getenv("TEST_TMPDIR");
  m.ready_file = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/minferd-ready-", getpid(), "-",
                              n++, ".json");
  std::vector<std::string> argv = {RunfilePath("daemon/minferd"), "--listen", "127.0.0.1:0",
                                   "--metrics-listen", metrics ? "127.0.0.1:0" : "",
                                   "--ready-file", m.ready_file};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(argv);
  if (!p.ok()) return p.status();
  m.proc = std::move(*p);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!std::ifstream(m.ready_file).good()) {
    if (!m.proc->running() || std::chrono::steady_clock::now() > deadline) {
      return absl::UnavailableError(
          absl::StrCat("minferd did not become ready: ", m.proc->ReadStderr()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::ifstream in(m.ready_file);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("address")) {
    return absl::InternalError(absl::StrCat("unreadable ready file ", m.ready_file));
  }
  m.address = j["address"].get<std::string>();
  m.metrics_address = j["metrics_address"].get<std::string>();
  if (j.contains("http_address") && j["http_address"].is_string()) {
    m.http_address = j["http_address"].get<std::string>();
  }
  client::ClientOptions o;
  o.address = m.address;
  absl::StatusOr<std::unique_ptr<client::MinferClient>> c = client::MinferClient::Create(o);
  if (!c.ok()) return c.status();
  m.client = std::move(*c);
  return m;
}

}  // namespace minfer::daemon::testing
