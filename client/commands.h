// minferctl's subcommands, one file each (client/*_cmd.cc). Every Add*
// function adds its subcommand(s) to `app`, with their options and help,
// and registers the action in `table`. The actions read the global flags
// from `g` when they run, so `g` and `table` must outlive them; they print
// to stdout (tables, text, or JSON with --json) and return the exit code:
// 0, 1 on an error (Fail: "minferctl: CODE: message"), 2 on a usage error
// that CLI11 cannot see.
//
// main adds them in the order of minferctl's --help: the help lists
// subcommands in the order they were added.
#ifndef MINFER_CLIENT_COMMANDS_H_
#define MINFER_CLIENT_COMMANDS_H_

#include "CLI/CLI.hpp"
#include "client/cli_util.h"

namespace minfer::ctl {

// load NAME PATH [--ctx N --parallel N --queue-size N --kv-tokens N
//   --kv-type T --backend B --knob K=V... -q], with a progress bar on stderr;
// unload NAME [--drain-timeout S | --cancel]; list; status [NAME] (the
// server's, or one model's).
void AddModelCommands(CLI::App& app, const Globals& g, CommandTable& table);

// generate MODEL PROMPT [--chat --system S --template-kwarg K=V...]
//   [sampling and stopping flags]: streams the text to stdout and a summary
// line to stderr (--json: the whole stream as one GenerateResponse).
void AddGenerateCommand(CLI::App& app, const Globals& g, CommandTable& table);

// tokenize MODEL TEXT [--parse-special]; detokenize MODEL ID...
void AddTokenizeCommands(CLI::App& app, const Globals& g, CommandTable& table);

// knobs list | get K | set K V | reset K, each [--model NAME].
void AddKnobsCommand(CLI::App& app, const Globals& g, CommandTable& table);

// alias set ALIAS MODEL | list | delete ALIAS.
void AddAliasCommand(CLI::App& app, const Globals& g, CommandTable& table);

// tenants: shares, caps, quotas and usage of every configured tenant.
void AddTenantsCommand(CLI::App& app, const Globals& g, CommandTable& table);

// bench MODEL... [-c STREAMS -n TOKENS -p PROMPT --chat --http URL]: a load
// test (bench_report.h says what it reports). Exits 1 when a stream failed
// or greedy streams of one model disagree.
void AddBenchCommand(CLI::App& app, const Globals& g, CommandTable& table);

// health [NAME]: grpc.health.v1; exits 1 unless the answer is SERVING.
void AddHealthCommand(CLI::App& app, const Globals& g, CommandTable& table);

}  // namespace minfer::ctl

#endif  // MINFER_CLIENT_COMMANDS_H_
