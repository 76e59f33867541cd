// minferctl tokenize and detokenize.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/commands.h"

namespace minfer::ctl {
namespace {

struct TokenizeArgs {
  std::string model, text;
  bool parse_special = false;
};

int Tokenize(const TokenizeArgs& a, const Globals& g, client::MinferClient& client) {
  v1::TokenizeRequest req;
  req.set_model(a.model);
  req.set_text(a.text);
  req.set_parse_special(a.parse_special);
  absl::StatusOr<v1::TokenizeResponse> r = client.Tokenize(req);
  if (!r.ok()) return Fail(r.status());
  if (g.json) {
    PrintJson(*r);
  } else {
    Table rows = {{"ID", "TOKEN"}};
    for (int i = 0; i < r->ids_size(); ++i) rows.push_back({absl::StrCat(r->ids(i)), r->tokens(i)});
    PrintTable(rows);
  }
  return 0;
}

struct DetokenizeArgs {
  std::string model;
  std::vector<int32_t> ids;
};

// The text and a newline, --json or not.
int Detokenize(const DetokenizeArgs& a, client::MinferClient& client) {
  absl::StatusOr<std::string> r = client.Detokenize(a.model, a.ids);
  if (!r.ok()) return Fail(r.status());
  std::cout << *r << "\n";
  return 0;
}

}  // namespace

void AddTokenizeCommands(CLI::App& app, const Globals& g, CommandTable& table) {
  auto tok = std::make_shared<TokenizeArgs>();
  CLI::App* c_tok = app.add_subcommand("tokenize", "token ids of a text");
  c_tok->add_option("model", tok->model)->required();
  c_tok->add_option("text", tok->text)->required();
  c_tok->add_flag("--parse-special", tok->parse_special, "recognize control tokens");
  table.Add(c_tok, [tok, &g](client::MinferClient& client) { return Tokenize(*tok, g, client); });

  auto detok = std::make_shared<DetokenizeArgs>();
  CLI::App* c_detok = app.add_subcommand("detokenize", "text of token ids");
  c_detok->add_option("model", detok->model)->required();
  c_detok->add_option("ids", detok->ids)->required();
  table.Add(c_detok, [detok](client::MinferClient& client) { return Detokenize(*detok, client); });
}

}  // namespace minfer::ctl
