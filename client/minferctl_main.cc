// minferctl: the command-line client of minferd.
//
//   minferctl [--addr A] [--token T] [--json] [--tls --ca-cert F] COMMAND ...
//     load NAME PATH [--ctx N --parallel N --kv-type T --backend B --device N --knob K=V ...]
//     unload NAME [--drain-timeout S | --cancel]
//     sleep NAME [--level 1|2] | wake NAME
//     list | status [NAME]
//     generate NAME PROMPT [--chat] [--system S] [--template-kwarg K=V] [sampling and stopping flags]
//     tokenize NAME TEXT | detokenize NAME ID...
//     knobs list | knobs get K | knobs set K V | knobs reset K   [--model NAME]
//     alias set ALIAS MODEL | alias list | alias delete ALIAS
//     health [NAME]
//     bench MODEL... [-c STREAMS] [-n TOKENS] [-p PROMPT] [--chat]   (a load test)
//           [--http URL]   (through the OpenAI-compatible HTTP API)
//   --api-key K (MINFER_API_KEY): a tenant's key for generate, bench,
//   tokenize and detokenize; --token stays the admin token
//
// Tables by default, JSON (the API messages, proto field names) with --json.
// Errors print one line, "minferctl: CODE: message", and exit 1 (usage
// errors exit 2). `health` exits 1 unless the answer is SERVING.
//
// This file holds the global flags; each subcommand lives in its own
// client/*_cmd.cc (commands.h).
#include <cstdlib>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "client/cli_util.h"
#include "client/commands.h"
#include "client/minfer_client.h"
#include "daemon/version.h"

int main(int argc, char** argv) {
  using namespace minfer::ctl;
  Globals g;
  CLI::App app{"minferctl: control and query minferd", "minferctl"};
  app.require_subcommand(1);
  const char* env_addr = std::getenv("MINFER_ADDR");
  if (env_addr != nullptr && *env_addr != '\0') g.client.address = env_addr;
  app.add_option("--addr", g.client.address, "server address (env MINFER_ADDR)")
      ->capture_default_str();
  app.add_option("--token", g.client.token, "admin bearer token")->envname("MINFER_ADMIN_TOKEN");
  app.add_option("--api-key", g.client.api_key,
                 "a tenant's API key: the bearer of generate, bench, tokenize, detokenize "
                 "(default: --token)")
      ->envname("MINFER_API_KEY");
  app.add_flag("--json", g.json, "print JSON (the API's messages)");
  app.add_flag("--tls", g.client.tls, "connect with TLS");
  app.add_option("--ca-cert", g.client.ca_cert_file, "PEM roots to trust (with --tls)");
  app.add_option("--tls-server-name", g.client.tls_server_name,
                 "name to verify in the server certificate (with --tls)");
  app.add_option("--timeout", g.client.timeout_seconds, "deadline of unary calls, seconds");
  app.set_version_flag("--version", std::string("minferctl ") + minfer::kMinferVersion);

  // In the order --help lists them.
  CommandTable commands;
  AddModelCommands(app, g, commands);
  AddGenerateCommand(app, g, commands);
  AddTokenizeCommands(app, g, commands);
  AddKnobsCommand(app, g, commands);
  AddAliasCommand(app, g, commands);
  AddTenantsCommand(app, g, commands);
  AddBenchCommand(app, g, commands);
  AddHealthCommand(app, g, commands);

  // CLI11 reports usage errors by throwing; this is the one place minferctl
  // catches, and only CLI11's own exception type.
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }

  absl::StatusOr<std::unique_ptr<minfer::client::MinferClient>> made =
      minfer::client::MinferClient::Create(g.client);
  if (!made.ok()) return Fail(made.status());
  const Action* run = commands.Chosen();
  return run != nullptr ? (*run)(**made) : 2;
}
