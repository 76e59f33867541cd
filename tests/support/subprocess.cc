#include "tests/support/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"

namespace minfer::testing {
namespace {

std::string TempDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t != nullptr ? t : "/tmp";
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::string RunfilePath(const std::string& workspace_relative) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  if (srcdir != nullptr) {
    std::string p = absl::StrCat(srcdir, "/minfer/", workspace_relative);
    if (access(p.c_str(), F_OK) == 0) return p;
  }
  return workspace_relative;
}

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(
    const std::vector<std::string>& argv) {
  static std::atomic<int> counter{0};
  std::unique_ptr<Subprocess> p(new Subprocess);
  const int n = counter.fetch_add(1);
  p->out_path_ = absl::StrCat(TempDir(), "/proc", getpid(), "_", n, ".out");
  p->err_path_ = absl::StrCat(TempDir(), "/proc", getpid(), "_", n, ".err");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    int out = open(p->out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(p->err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, 1);
    dup2(err, 2);
    // The test runner may block signals; the child starts clean.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  p->pid_ = pid;
  return p;
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !reaped_) {
    kill(pid_, SIGKILL);
    int st = 0;
    waitpid(pid_, &st, 0);
  }
}

void Subprocess::Signal(int sig) {
  if (pid_ > 0 && !reaped_) kill(pid_, sig);
}

bool Subprocess::running() {
  if (reaped_) return false;
  int st = 0;
  pid_t r = waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    reaped_ = true;
    exit_code_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return false;
  }
  return true;
}

absl::StatusOr<int> Subprocess::Wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (running()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("process ", pid_, " still runs"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return exit_code_;
}

std::string Subprocess::ReadStdout() const { return Slurp(out_path_); }
std::string Subprocess::ReadStderr() const { return Slurp(err_path_); }

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         std::chrono::milliseconds timeout) {
  absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(argv);
  if (!p.ok()) return p.status();
  absl::StatusOr<int> code = (*p)->Wait(timeout);
  if (!code.ok()) return code.status();
  CommandResult r;
  r.exit_code = *code;
  r.out = (*p)->ReadStdout();
  r.err = (*p)->ReadStderr();
  return r;
}

}  // namespace minfer::testing
