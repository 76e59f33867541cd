#include <iostream>

#include "CLI/CLI.hpp"
#include "engine/tools/commands.h"
#include "engine/tools/gguf_info.h"

namespace minfer::tools {

int GgufMain(int argc, char** argv) {
  CLI::App app{"Inspect GGUF files", "minfer gguf"};
  app.require_subcommand(1);
  auto* info = app.add_subcommand("info", "Print metadata and the tensor table");
  std::string path;
  size_t max_items = 8;
  info->add_option("file", path, "GGUF file")->required();
  info->add_option("--max-items", max_items, "array elements shown per key (0 = all)");
  CLI11_PARSE(app, argc, argv);
  absl::Status s = PrintGgufInfo(path, max_items, std::cout);
  if (!s.ok()) {
    std::cerr << "minfer gguf info: " << s.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace minfer::tools
