// Child processes for real-process tests (minferd, minferctl): start with
// argv, stdout/stderr captured to files, signal, wait with a timeout.
#ifndef MINFER_TESTS_SUPPORT_SUBPROCESS_H_
#define MINFER_TESTS_SUPPORT_SUBPROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace minfer::testing {

// Path of a data dependency (e.g. "daemon/minferd") in the test's runfiles.
std::string RunfilePath(const std::string& workspace_relative);

class Subprocess {
 public:
  // Starts argv[0] with `argv`; stdout and stderr go to files in the test's
  // temp dir.
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(const std::vector<std::string>& argv);
  // Kills (SIGKILL) and reaps the child if it still runs.
  ~Subprocess();

  pid_t pid() const { return pid_; }
  void Signal(int sig);
  // The exit code (or 128 + signal); DEADLINE_EXCEEDED if it runs on.
  absl::StatusOr<int> Wait(std::chrono::milliseconds timeout);
  bool running();
  std::string ReadStdout() const;
  std::string ReadStderr() const;

 private:
  Subprocess() = default;
  pid_t pid_ = -1;
  bool reaped_ = false;
  int exit_code_ = -1;
  std::string out_path_, err_path_;
};

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
// Runs a command to completion (at most `timeout`).
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         std::chrono::milliseconds timeout =
                                             std::chrono::milliseconds(60000));

}  // namespace minfer::testing

#endif  // MINFER_TESTS_SUPPORT_SUBPROCESS_H_
