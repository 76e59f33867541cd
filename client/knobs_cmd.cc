// minferctl knobs list | get | set | reset.
#include <memory>
#include <string>

#include "absl/strings/str_join.h"
#include "client/commands.h"

namespace minfer::ctl {
namespace {

struct KnobsArgs {
  std::string model, name, value;  // --model, and the subcommands' arguments
  CLI::App* list = nullptr;
  CLI::App* get = nullptr;
  CLI::App* reset = nullptr;  // set is the remaining one
};

int ListKnobs(const KnobsArgs& a, const Globals& g, client::MinferClient& client) {
  absl::StatusOr<v1::ListKnobsResponse> r = client.ListKnobs(a.model);
  if (!r.ok()) return Fail(r.status());
  if (g.json) {
    PrintJson(*r);
    return 0;
  }
  Table rows = {{"NAME", "VALUE", "DEFAULT", "SCOPE", "EFFECT", "TYPE"}};
  for (const v1::Knob& k : r->knobs()) {
    rows.push_back({k.name(), k.value() + (k.overridden() ? " (model)" : ""), k.default_value(),
                    k.scope(), k.effect(), k.type()});
  }
  PrintTable(rows);
  return 0;
}

// list (the table of every knob), or get, set and reset (each answers with
// the one knob).
int Knobs(const KnobsArgs& a, const Globals& g, client::MinferClient& client) {
  if (*a.list) return ListKnobs(a, g, client);
  absl::StatusOr<v1::Knob> r;
  if (*a.get) {
    r = client.GetKnob(a.name, a.model);
  } else {
    v1::SetKnobRequest req;
    req.set_name(a.name);
    req.set_value(a.value);
    req.set_model(a.model);
    req.set_reset(static_cast<bool>(*a.reset));
    r = client.SetKnob(req);
  }
  if (!r.ok()) return Fail(r.status());
  if (g.json) {
    PrintJson(*r);
    return 0;
  }
  Table rows = {
      {"name:", r->name()},
      {"value:", r->value() + (r->overridden() ? " (override of model " + r->model() + ")" : "")},
      {"default:", r->default_value()},
      {"type:", r->type() + (r->allowed().empty() ? "" : " {" + absl::StrJoin(r->allowed(), ", ") + "}")},
      {"scope:", r->scope()},
      {"effect:", r->effect()},
      {"help:", r->help()}};
  PrintTable(rows);
  return 0;
}

}  // namespace

void AddKnobsCommand(CLI::App& app, const Globals& g, CommandTable& table) {
  auto a = std::make_shared<KnobsArgs>();
  CLI::App* c = app.add_subcommand("knobs", "list, read and set tuning knobs");
  c->require_subcommand(1);
  c->add_option("--model", a->model, "per-model values of this model");
  a->list = c->add_subcommand("list", "every knob");
  a->get = c->add_subcommand("get", "one knob");
  a->get->add_option("name", a->name)->required();
  CLI::App* set = c->add_subcommand("set", "set a knob (globally or --model)");
  set->add_option("name", a->name)->required();
  set->add_option("value", a->value)->required();
  a->reset = c->add_subcommand("reset", "restore the default / drop override");
  a->reset->add_option("name", a->name)->required();
  // --model also after the subcommand ("knobs get K --model M").
  for (CLI::App* sub : {a->list, a->get, set, a->reset}) {
    sub->add_option("--model", a->model, "per-model value of this model");
  }
  table.Add(c, [a, &g](client::MinferClient& client) { return Knobs(*a, g, client); });
}

}  // namespace minfer::ctl
