// What minferctl's subcommands share: the global flags, the table of
// subcommands and their actions, and the output conventions. Errors print
// one line, "minferctl: CODE: message", and exit 1; --json prints the API's
// messages (proto field names); tables are left-aligned columns.
#ifndef MINFER_CLIENT_CLI_UTIL_H_
#define MINFER_CLIENT_CLI_UTIL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "client/minfer_client.h"
#include "google/protobuf/message.h"
#include "minfer/v1/admin.pb.h"
#include "minfer/v1/generation.pb.h"

namespace minfer::ctl {

// The global flags (before the subcommand). Set by parsing; the actions read
// them only when they run, after the whole command line parsed.
struct Globals {
  client::ClientOptions client;
  bool json = false;  // --json: JSON instead of tables and text
};

// What a subcommand does once the command line parsed and the client
// exists (it has not connected yet: gRPC connects on the first call).
// Returns the process's exit code.
using Action = std::function<int(client::MinferClient& client)>;

// minferctl's subcommands and their actions. Each command file registers
// its top-level subcommands here; main parses, then runs the action of the
// one the command line chose. A subcommand with subcommands of its own
// (knobs, alias) has one action that tells them apart. The options of a
// subcommand bind to state its action owns, so they live as long as the
// table.
class CommandTable {
 public:
  // `sub` is a top-level subcommand of the app, registered once.
  void Add(CLI::App* sub, Action action);

  // The action of the subcommand that the parsed command line names; null
  // when none (main requires one, so only before parsing).
  const Action* Chosen() const;

 private:
  std::vector<std::pair<CLI::App*, Action>> actions_;
};

// Prints "minferctl: CODE: message" on stderr and returns 1, the exit code
// of every error the server or the client reports.
int Fail(const absl::Status& status);

// `message` as indented JSON (proto field names, defaults included) and a
// newline, on stdout.
void PrintJson(const google::protobuf::Message& message);

// "12.3 MiB" (binary mebibytes, one decimal).
std::string Mib(uint64_t bytes);

// Lower-case names of the API's enums, as the tables print them.
std::string StateName(v1::ModelState state);
std::string FinishName(v1::FinishReason reason);

// Rows of cells. Rows may differ in length.
using Table = std::vector<std::vector<std::string>>;

// Left-aligned columns two spaces apart, one line ("\n"-terminated) per row;
// a column is as wide as its widest cell, and the last cell of a row is not
// padded.
std::string FormatTable(const Table& rows);

// FormatTable on stdout.
void PrintTable(const Table& rows);

}  // namespace minfer::ctl

#endif  // MINFER_CLIENT_CLI_UTIL_H_
