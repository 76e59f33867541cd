#include "tests/support/structured.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/support/subprocess.h"

namespace minfer::testing {
namespace {

// ordered_json: member order is part of what the grammar checks (properties
// are generated in schema order), so texts keep the file's order.
using Json = nlohmann::ordered_json;

constexpr char kModules[] = "third_party/npm/node_modules";
constexpr char kScript[] = "tests/support/ajv_check.mjs";

std::string TmpPath(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
}

absl::StatusOr<Json> RunAjv(const std::string& mode, const std::string& file) {
  if (!std::ifstream(RunfilePath(absl::StrCat(kModules, "/ajv/package.json"))).good()) {
    return absl::FailedPreconditionError("npm packages missing: run scripts/install_deps.sh");
  }
  absl::StatusOr<CommandResult> r =
      RunCommand({"/usr/bin/env", "node", RunfilePath(kScript), RunfilePath(kModules), mode, file},
                 std::chrono::seconds(120));
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    return absl::InternalError(absl::StrCat("ajv_check.mjs exited ", r->exit_code, ": ", r->err));
  }
  Json out = Json::parse(r->out, nullptr, /*allow_exceptions=*/false);
  if (out.is_discarded()) return absl::InternalError(absl::StrCat("ajv_check.mjs printed: ", r->out));
  return out;
}

}  // namespace

absl::StatusOr<std::vector<SchemaCase>> LoadSchemaSet(const std::string& path) {
  std::ifstream in(RunfilePath(path));
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::vector<SchemaCase> out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("schema")) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", n, ": not a schema line"));
    }
    SchemaCase c;
    c.name = j.value("name", absl::StrCat("line ", n));
    c.schema = j["schema"].dump();
    c.expect = j.value("expect", "compile");
    if (c.expect != "compile" && c.expect != "refuse" && c.expect != "either") {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", n, ": bad expect ", c.expect));
    }
    if (j.contains("tests")) {
      for (const Json& t : j["tests"]) {
        c.tests.push_back({t.at("data").dump(), t.at("valid").get<bool>(),
                           t.value("restricted", std::string())});
      }
    }
    out.push_back(std::move(c));
  }
  return out;
}

absl::StatusOr<AjvLabels> AjvCheckLabels(const std::string& jsonl_path) {
  absl::StatusOr<Json> j = RunAjv("labels", RunfilePath(jsonl_path));
  if (!j.ok()) return j.status();
  AjvLabels out;
  out.schemas = (*j)["schemas"].get<int>();
  out.checked = (*j)["checked"].get<int>();
  for (const Json& m : (*j)["mislabeled"]) out.mislabeled.push_back(m.dump());
  for (const Json& m : (*j)["uncompilable"]) out.uncompilable.push_back(m.dump());
  return out;
}

absl::StatusOr<std::vector<AjvVerdict>> AjvValidate(
    const std::vector<std::string>& schemas,
    const std::vector<std::pair<int, std::string>>& outputs) {
  Json cases;
  cases["schemas"] = Json::array();
  for (const std::string& s : schemas) {
    Json parsed = Json::parse(s, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) return absl::InvalidArgumentError(absl::StrCat("bad schema: ", s));
    cases["schemas"].push_back(std::move(parsed));
  }
  cases["outputs"] = Json::array();
  for (const auto& [schema, text] : outputs) {
    // Invalid UTF-8 is replaced below rather than thrown on: callers check
    // their outputs' UTF-8 themselves (ajv can only see JSON strings).
    Json o;
    o["schema"] = schema;
    o["text"] = text;
    cases["outputs"].push_back(std::move(o));
  }
  static int counter = 0;
  const std::string file = TmpPath(absl::StrCat("ajv_cases_", counter++, ".json"));
  {
    std::ofstream f(file);
    f << cases.dump(-1, ' ', false, nlohmann::detail::error_handler_t::replace);
    if (!f) return absl::InternalError(absl::StrCat("cannot write ", file));
  }
  absl::StatusOr<Json> j = RunAjv("outputs", file);
  if (!j.ok()) return j.status();
  if (!j->is_array() || j->size() != outputs.size()) {
    return absl::InternalError("ajv_check.mjs answered a different number of verdicts");
  }
  std::vector<AjvVerdict> out;
  for (const Json& v : *j) {
    out.push_back({v["json"].get<bool>(), v["valid"].get<bool>(), v["error"].get<std::string>()});
  }
  return out;
}

}  // namespace minfer::testing
