// minferctl alias set | list | delete.
#include <iostream>
#include <memory>
#include <string>

#include "client/commands.h"

namespace minfer::ctl {
namespace {

struct AliasArgs {
  std::string alias, model;
  CLI::App* set = nullptr;
  CLI::App* del = nullptr;  // list is the remaining one
};

int Alias(const AliasArgs& a, const Globals& g, client::MinferClient& client) {
  if (*a.set) {
    absl::StatusOr<v1::SetAliasResponse> r = client.SetAlias(a.alias, a.model);
    if (!r.ok()) return Fail(r.status());
    if (g.json) {
      PrintJson(*r);
    } else {
      std::cout << a.alias << " -> " << a.model
                << (r->previous_model().empty() ? "" : " (was " + r->previous_model() + ")")
                << "\n";
    }
    return 0;
  }
  if (*a.del) {
    absl::Status s = client.DeleteAlias(a.alias);
    if (!s.ok()) return Fail(s);
    if (!g.json) std::cout << "deleted alias " << a.alias << "\n";
    return 0;
  }
  absl::StatusOr<v1::ListAliasesResponse> r = client.ListAliases();
  if (!r.ok()) return Fail(r.status());
  if (g.json) {
    PrintJson(*r);
    return 0;
  }
  Table rows = {{"ALIAS", "MODEL"}};
  for (const v1::Alias& alias : r->aliases()) rows.push_back({alias.name(), alias.model()});
  PrintTable(rows);
  return 0;
}

}  // namespace

void AddAliasCommand(CLI::App& app, const Globals& g, CommandTable& table) {
  auto a = std::make_shared<AliasArgs>();
  CLI::App* c = app.add_subcommand("alias", "serving aliases");
  c->require_subcommand(1);
  a->set = c->add_subcommand("set", "point ALIAS at MODEL");
  a->set->add_option("alias", a->alias)->required();
  a->set->add_option("model", a->model)->required();
  c->add_subcommand("list", "every alias");  // the action's default
  a->del = c->add_subcommand("delete", "remove an alias");
  a->del->add_option("alias", a->alias)->required();
  table.Add(c, [a, &g](client::MinferClient& client) { return Alias(*a, g, client); });
}

}  // namespace minfer::ctl
