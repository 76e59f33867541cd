// minferctl tenants.
#include <iostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/commands.h"

namespace minfer::ctl {
namespace {

int Tenants(const Globals& g, client::MinferClient& client) {
  absl::StatusOr<v1::ListTenantsResponse> r = client.ListTenants();
  if (!r.ok()) return Fail(r.status());
  if (g.json) {
    PrintJson(*r);
    return 0;
  }
  if (r->tenants().empty()) {
    std::cout << "no tenants configured: generation is open to every client\n";
    return 0;
  }
  Table rows = {{"TENANT", "WEIGHT", "STREAMS", "QUOTA used+reserved (WINDOW)", "ADMITTED",
                 "REJECTED cap/quota/model", "TOKENS in/out", "CACHED"}};
  for (const v1::TenantStatus& t : r->tenants()) {
    rows.push_back(
        {t.name(), absl::StrCat(t.weight()),
         t.max_streams() > 0 ? absl::StrCat(t.streams(), " of ", t.max_streams())
                             : absl::StrCat(t.streams()),
         t.quota_tokens() > 0 ? absl::StrCat(t.window_tokens(), "+", t.reserved_tokens(), " of ",
                                             t.quota_tokens(), " (", t.quota_window_seconds(),
                                             " s)")
                              : std::string("-"),
         absl::StrCat(t.admitted()),
         absl::StrCat(t.rejected_cap(), "/", t.rejected_quota(), "/", t.rejected_model()),
         absl::StrCat(t.prompt_tokens(), "/", t.completion_tokens()),
         absl::StrCat(t.cached_tokens())});
  }
  PrintTable(rows);
  return 0;
}

}  // namespace

void AddTenantsCommand(CLI::App& app, const Globals& g, CommandTable& table) {
  CLI::App* c =
      app.add_subcommand("tenants", "the configured tenants: shares, caps, quotas and usage");
  table.Add(c, [&g](client::MinferClient& client) { return Tenants(g, client); });
}

}  // namespace minfer::ctl
