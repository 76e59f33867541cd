// A minferd child process for real-process tests: loopback ports, a ready
// file, a client.
#ifndef MINFER_TESTS_DAEMON_MINFERD_PROCESS_H_
#define MINFER_TESTS_DAEMON_MINFERD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/minfer_client.h"
#include "tests/support/subprocess.h"

namespace minfer::daemon::testing {

struct MinferdProcess {
  std::unique_ptr<minfer::testing::Subprocess> proc;
  std::string ready_file;  // in TEST_TMPDIR
  std::string address;     // gRPC, "127.0.0.1:port"
  std::string metrics_address;
  std::string http_address;  // "" unless args have --http-listen
  std::unique_ptr<client::MinferClient> client;
};

// Starts daemon/minferd (a data dependency) with `args` plus
// --listen 127.0.0.1:0, --metrics-listen (127.0.0.1:0 with `metrics`, else
// off: stopping the exposer costs up to 2 s) and a ready file, and connects
// once the ready file appears (at most 20 s). Errors carry minferd's stderr.
absl::StatusOr<MinferdProcess> StartMinferd(const std::vector<std::string>& args,
                                            bool metrics = false);

}  // namespace minfer::daemon::testing

#endif  // MINFER_TESTS_DAEMON_MINFERD_PROCESS_H_
