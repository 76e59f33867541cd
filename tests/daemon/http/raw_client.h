// A plain TCP client for tests of the HTTP front door that need what curl
// will not do: drip bytes, half-close, stop reading, send broken HTTP.
#ifndef MINFER_TESTS_DAEMON_HTTP_RAW_CLIENT_H_
#define MINFER_TESTS_DAEMON_HTTP_RAW_CLIENT_H_

#include <chrono>
#include <string>

namespace minfer::testing {

// A connected socket to "127.0.0.1:PORT" (or "host:port" with a numeric
// IPv4 host); -1 on failure.
int ConnectTo(const std::string& address);
// Sends all of `s`; false if the peer is gone.
bool SendAll(int fd, const std::string& s);
// Reads until the peer closes or `timeout` passes; *closed says which.
std::string ReadFor(int fd, std::chrono::milliseconds timeout, bool* closed = nullptr);
// Reads until `needle` has arrived (or the close, or the timeout).
std::string ReadUntil(int fd, const std::string& needle, std::chrono::milliseconds timeout);
// Seconds since `t0`.
double SecondsSince(std::chrono::steady_clock::time_point t0);

}  // namespace minfer::testing

#endif  // MINFER_TESTS_DAEMON_HTTP_RAW_CLIENT_H_
