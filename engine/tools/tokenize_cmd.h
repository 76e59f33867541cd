// `minfer tokenize` and `minfer detokenize`: the tokenizer from the command
// line. Each takes the arguments after `minfer` (argv[0] is the subcommand
// name) and returns the exit code: 0 on success, 1 on an error (message on
// stderr), CLI11's code for a usage error.
//
//   minfer tokenize -m FILE [--no-special] (TEXT | --file F | --jsonl F)
//     Prints the token ids as a JSON array. --file encodes a whole file's
//     bytes; --jsonl reads one JSON string per line and prints one array per
//     line. --no-special treats control tokens written in the text as
//     plain text.
//   minfer detokenize -m FILE [--skip-special] [--json] IDS...
//     Prints the decoded text and a newline (--json: as a JSON string). IDS
//     may be separate arguments, comma-separated, or a JSON array as
//     printed by tokenize.
// FILE is a GGUF model, or a Hugging Face tokenizer.json (by its .json
// extension).
#ifndef MINFER_ENGINE_TOOLS_TOKENIZE_CMD_H_
#define MINFER_ENGINE_TOOLS_TOKENIZE_CMD_H_

namespace minfer::tools {

int TokenizeMain(int argc, char** argv);
int DetokenizeMain(int argc, char** argv);

}  // namespace minfer::tools

#endif  // MINFER_ENGINE_TOOLS_TOKENIZE_CMD_H_
