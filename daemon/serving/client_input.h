// Bounds on what the services take from a client and echo back to it.
//
// Every error message that quotes client input quotes it through
// QuoteInput: a short, escaped prefix. Status messages travel in gRPC
// metadata, where an over-long one fails the client's whole connection
// (grpc_status.h), and they are logged, where a megabyte of name would be
// a megabyte of log line. The checks below run at the service boundary,
// before a request reaches the slot manager, so nothing inside sees (or
// echoes) an unbounded name.
#ifndef MINFER_DAEMON_SERVING_CLIENT_INPUT_H_
#define MINFER_DAEMON_SERVING_CLIENT_INPUT_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace minfer::daemon {

// Model, alias and knob names: what SlotManager accepts for a load
// (ValidateServingName), so a longer name can name nothing.
inline constexpr size_t kMaxNameBytes = 64;
// Model file paths (Linux's PATH_MAX).
inline constexpr size_t kMaxPathBytes = 4096;
// How much of a client's string an error message quotes.
inline constexpr size_t kMaxQuotedBytes = 48;

// 'text' quoted, C-escaped (so control bytes and invalid UTF-8 stay
// printable ASCII), and cut to `max_bytes` of the input; a cut string reads
// 'abc...' (20480 bytes).
std::string QuoteInput(absl::string_view text, size_t max_bytes = kMaxQuotedBytes);

// A model, alias or knob name that a request gives in `field`: at most
// kMaxNameBytes of [A-Za-z0-9._-]. An empty name passes (each method says
// what an empty name means). INVALID_ARGUMENT names the field and quotes
// the name through QuoteInput.
absl::Status CheckName(absl::string_view name, absl::string_view field);

// A file path that a request gives in `field`: 1 to kMaxPathBytes bytes,
// no NUL byte. INVALID_ARGUMENT as for CheckName.
absl::Status CheckPath(absl::string_view path, absl::string_view field);

// A secret a client gives (admin token, API key) against one the server
// holds, without an early exit: the time taken does not tell how much of a
// guess was right.
bool ConstantTimeEquals(absl::string_view given, absl::string_view expected);

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_SERVING_CLIENT_INPUT_H_
