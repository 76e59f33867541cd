#include "tests/daemon/http/raw_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"

namespace minfer::testing {

int ConnectTo(const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port)) return -1;
  std::string host = address.substr(0, colon);
  if (host == "localhost" || host.empty()) host = "127.0.0.1";
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1 ||
      connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += n;
  }
  return true;
}

namespace {

// Reads until `needle` has arrived (never, when empty), the peer closes
// (*closed) or `timeout` passes.
std::string ReadLoop(int fd, std::chrono::milliseconds timeout, const std::string& needle,
                     bool* closed) {
  using Clock = std::chrono::steady_clock;
  std::string out;
  const auto end = Clock::now() + timeout;
  if (closed != nullptr) *closed = false;
  while (needle.empty() || !absl::StrContains(out, needle)) {
    const int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count());
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, left) <= 0) break;
    char buf[65536];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      if (closed != nullptr) *closed = true;
      break;
    }
    out.append(buf, n);
  }
  return out;
}

}  // namespace

std::string ReadFor(int fd, std::chrono::milliseconds timeout, bool* closed) {
  return ReadLoop(fd, timeout, "", closed);
}

std::string ReadUntil(int fd, const std::string& needle, std::chrono::milliseconds timeout) {
  return ReadLoop(fd, timeout, needle, nullptr);
}

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace minfer::testing
