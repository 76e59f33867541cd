// `minfer`: run, benchmark, inspect and create models without the daemon.
#include <cstdio>
#include <cstring>
#include <string>

#include "engine/tools/commands.h"
#include "engine/tools/tokenize_cmd.h"

namespace {

void Usage() {
  std::fprintf(stderr,
               "usage: minfer <command> [options]\n\n"
               "commands:\n"
               "  run                generate text (-m FILE -p PROMPT [--chat] [sampling flags])\n"
               "  bench              prefill/decode throughput (-m FILE -p 512 -n 128 -r 3)\n"
               "  gguf info FILE     print a GGUF file's metadata and tensor table\n"
               "  mkmodel            write a synthetic Qwen2 model (--shape, --type, -o)\n"
               "  grammar bench      check and time structured outputs on JSON Schemas\n"
               "  tokenize           encode text with a model's tokenizer\n"
               "  detokenize         decode token ids with a model's tokenizer\n\n"
               "`minfer <command> --help` describes each command's options.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    Usage();
    return argc < 2 ? 2 : 0;
  }
  std::string cmd = argv[1];
  int sub_argc = argc - 1;
  char** sub_argv = argv + 1;
  if (cmd == "gguf") return minfer::tools::GgufMain(sub_argc, sub_argv);
  if (cmd == "mkmodel") return minfer::tools::MkModelMain(sub_argc, sub_argv);
  if (cmd == "run") return minfer::tools::RunMain(sub_argc, sub_argv);
  if (cmd == "bench") return minfer::tools::BenchMain(sub_argc, sub_argv);
  if (cmd == "grammar") return minfer::tools::GrammarMain(sub_argc, sub_argv);
  if (cmd == "tokenize") return minfer::tools::TokenizeMain(sub_argc, sub_argv);
  if (cmd == "detokenize") return minfer::tools::DetokenizeMain(sub_argc, sub_argv);
  std::fprintf(stderr, "minfer: unknown command '%s'\n\n", cmd.c_str());
  Usage();
  return 2;
}
