// minferctl health.
#include <iostream>
#include <memory>
#include <string>

#include "client/commands.h"

namespace minfer::ctl {
namespace {

// `service` empty: the server as a whole.
int Health(const std::string& service, const Globals& g, client::MinferClient& client) {
  auto r = client.Health(service);
  if (!r.ok()) return Fail(r.status());
  const std::string name = grpc::health::v1::HealthCheckResponse::ServingStatus_Name(*r);
  if (g.json) {
    std::cout << "{\"service\": \"" << service << "\", \"status\": \"" << name << "\"}\n";
  } else {
    std::cout << name << "\n";
  }
  return *r == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}

}  // namespace

void AddHealthCommand(CLI::App& app, const Globals& g, CommandTable& table) {
  auto service = std::make_shared<std::string>();
  CLI::App* c = app.add_subcommand("health", "grpc.health.v1 check (server or model)");
  c->add_option("name", *service, "model or alias (default: the server)");
  table.Add(c, [service, &g](client::MinferClient& client) { return Health(*service, g, client); });
}

}  // namespace minfer::ctl
