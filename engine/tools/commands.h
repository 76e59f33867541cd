// Entry points of the `minfer` CLI's subcommands. Each takes the arguments
// after `minfer` (argv[0] is the subcommand name) and returns the exit code.
#ifndef MINFER_ENGINE_TOOLS_COMMANDS_H_
#define MINFER_ENGINE_TOOLS_COMMANDS_H_

namespace minfer::tools {

int GgufMain(int argc, char** argv);     // minfer gguf info FILE
int MkModelMain(int argc, char** argv);  // minfer mkmodel ...
int RunMain(int argc, char** argv);      // minfer run -m FILE -p PROMPT ...
int BenchMain(int argc, char** argv);    // minfer bench -m FILE ...
// minfer grammar bench -m FILE --schemas FILE.jsonl ... (grammar_bench.h)
int GrammarMain(int argc, char** argv);

}  // namespace minfer::tools

#endif  // MINFER_ENGINE_TOOLS_COMMANDS_H_
