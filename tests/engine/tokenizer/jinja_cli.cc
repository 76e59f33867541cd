// Renders a Jinja template with JSON variables, for debugging templates and
// comparing by hand with other implementations:
//   jinja_cli TEMPLATE_FILE [VARIABLES_JSON_FILE]
// Prints the output (or the error on stderr, exit 1). With MINFER_JINJA_MARKS
// set, every string of the variables is marked and the marked ranges are
// printed after the output as "[begin, end)" lines.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "absl/time/time.h"
#include "engine/tokenizer/jinja.h"

namespace {

std::string ReadFile(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

int main(int argc, char** argv) {
  using minfer::tokenizer::jinja::Template;
  using minfer::tokenizer::jinja::Value;
  if (argc < 2) {
    std::fprintf(stderr, "usage: jinja_cli TEMPLATE_FILE [VARIABLES_JSON_FILE]\n");
    return 2;
  }
  const bool marks = std::getenv("MINFER_JINJA_MARKS") != nullptr;
  auto t = Template::Parse(ReadFile(argv[1]));
  if (!t.ok()) {
    std::cerr << t.status() << "\n";
    return 1;
  }
  minfer::tokenizer::jinja::Variables vars;
  if (argc > 2) {
    auto v = Value::FromJson(ReadFile(argv[2]), marks);
    if (!v.ok() || v->kind() != Value::Kind::kDict) {
      std::cerr << "the variables must be a JSON object\n";
      return 1;
    }
    for (const auto& [k, x] : v->dict_items()) vars[k] = x;
  }
  minfer::tokenizer::jinja::RenderOptions options;
  options.now = absl::FromUnixSeconds(1721952000);  // 26 Jul 2024 00:00 UTC
  options.time_zone = absl::UTCTimeZone();
  auto r = t->Render(vars, options);
  if (!r.ok()) {
    std::cerr << r.status() << "\n";
    return 1;
  }
  std::cout << r->text;
  if (marks) {
    for (const auto& [b, e] : r->marked) std::cout << "\n[" << b << ", " << e << ")";
  }
  return 0;
}
