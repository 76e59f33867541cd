#include "engine/tools/tokenize_cmd.h"

#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/base/status.h"
#include "engine/gguf/gguf.h"
#include "engine/tokenizer/gguf_tokenizer.h"
#include "engine/tokenizer/hf_tokenizer_json.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace minfer::tools {
namespace {

using tokenizer::TokenId;
using tokenizer::Tokenizer;

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path) {
  if (absl::EndsWith(path, ".json")) {
    ASSIGN_OR_RETURN(tokenizer::TokenizerData data, tokenizer::TokenizerDataFromHfJson(path));
    return Tokenizer::Create(std::move(data));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file, gguf::GgufFile::Open(path));
  ASSIGN_OR_RETURN(tokenizer::TokenizerData data, tokenizer::TokenizerDataFromGguf(*file));
  return Tokenizer::Create(std::move(data));
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading '", path, "'"));
  return ss.str();
}

std::string IdsJson(const std::vector<TokenId>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ",";
    absl::StrAppend(&out, ids[i]);
  }
  out += "]";
  return out;
}

int Fail(absl::string_view command, const absl::Status& status) {
  std::cerr << "minfer " << command << ": " << status.message() << "\n";
  return 1;
}

// CLI11 reports usage errors by throwing; this is the only place minfer code
// catches, and only CLI11's own exception type.
bool ParseArgs(CLI::App& app, int argc, char** argv, int* exit_code) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    *exit_code = app.exit(e);
    return false;
  }
  return true;
}

absl::Status RunTokenize(const std::string& model, bool no_special,
                         const std::vector<std::string>& text, const std::string& file,
                         const std::string& jsonl) {
  ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, LoadTokenizer(model));
  tokenizer::EncodeOptions options;
  options.parse_special = !no_special;
  if (!jsonl.empty()) {
    ASSIGN_OR_RETURN(const std::string contents, ReadFile(jsonl));
    std::vector<absl::string_view> lines = absl::StrSplit(contents, '\n');
    if (!lines.empty() && lines.back().empty()) lines.pop_back();  // final newline
    std::string out;
    for (size_t i = 0; i < lines.size(); ++i) {
      nlohmann::json j = nlohmann::json::parse(lines[i].begin(), lines[i].end(), nullptr,
                                               /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(jsonl, ":", i + 1, ": not a JSON string (each line must be one)"));
      }
      absl::StrAppend(&out, IdsJson(tok->Encode(j.get_ref<const std::string&>(), options)), "\n");
    }
    std::cout << out;
    return absl::OkStatus();
  }
  std::string input;
  if (!file.empty()) {
    ASSIGN_OR_RETURN(input, ReadFile(file));
  } else {
    input = text.empty() ? std::string() : text[0];
  }
  std::cout << IdsJson(tok->Encode(input, options)) << "\n";
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TokenId>> ParseIds(const std::vector<std::string>& args) {
  std::vector<TokenId> ids;
  for (const std::string& arg : args) {
    for (absl::string_view part :
         absl::StrSplit(arg, absl::ByAnyChar(" \t\r\n,[]"), absl::SkipEmpty())) {
      int64_t v;
      if (!absl::SimpleAtoi(part, &v) || v < INT32_MIN || v > INT32_MAX) {
        return absl::InvalidArgumentError(absl::StrCat("not a token id: '", part, "'"));
      }
      ids.push_back(static_cast<TokenId>(v));
    }
  }
  return ids;
}

absl::Status RunDetokenize(const std::string& model, bool skip_special, bool as_json,
                           const std::vector<std::string>& id_args) {
  ASSIGN_OR_RETURN(const std::vector<TokenId> ids, ParseIds(id_args));
  ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, LoadTokenizer(model));
  tokenizer::DecodeOptions options;
  options.skip_special = skip_special;
  ASSIGN_OR_RETURN(const std::string text, tok->Decode(ids, options));
  if (as_json) {
    std::cout << nlohmann::json(text).dump() << "\n";
  } else {
    std::cout << text << "\n";
  }
  return absl::OkStatus();
}

}  // namespace

int TokenizeMain(int argc, char** argv) {
  CLI::App app("Encode text with a model's tokenizer; prints the token ids as a JSON array.",
               "minfer tokenize");
  std::string model, file, jsonl;
  bool no_special = false;
  std::vector<std::string> text;
  app.add_option("-m,--model", model, "GGUF model file (or a Hugging Face tokenizer.json)")
      ->required();
  app.add_flag("--no-special", no_special,
               "Treat control tokens written in the text (<|im_start|>...) as plain text");
  CLI::Option* text_opt = app.add_option("text", text, "Text to encode")->expected(1);
  CLI::Option* file_opt = app.add_option("--file", file, "Encode the bytes of this file");
  CLI::Option* jsonl_opt = app.add_option(
      "--jsonl", jsonl, "Encode each line of this file (a JSON string); one array per line");
  text_opt->excludes(file_opt)->excludes(jsonl_opt);
  file_opt->excludes(jsonl_opt);
  int code = 0;
  if (!ParseArgs(app, argc, argv, &code)) return code;
  if (text.empty() && file.empty() && jsonl.empty()) {
    std::cerr << "minfer tokenize: give TEXT, --file F or --jsonl F\n" << app.help();
    return 2;
  }
  const absl::Status status = RunTokenize(model, no_special, text, file, jsonl);
  return status.ok() ? 0 : Fail("tokenize", status);
}

int DetokenizeMain(int argc, char** argv) {
  CLI::App app("Decode token ids with a model's tokenizer; prints the text.",
               "minfer detokenize");
  std::string model;
  bool skip_special = false;
  bool as_json = false;
  std::vector<std::string> ids;
  app.add_option("-m,--model", model, "GGUF model file (or a Hugging Face tokenizer.json)")
      ->required();
  app.add_flag("--skip-special", skip_special, "Leave control tokens out of the text");
  app.add_flag("--json", as_json, "Print the text as a JSON string");
  app.add_option("ids", ids, "Token ids: separate, comma-separated or a JSON array")
      ->required();
  int code = 0;
  if (!ParseArgs(app, argc, argv, &code)) return code;
  const absl::Status status = RunDetokenize(model, skip_special, as_json, ids);
  return status.ok() ? 0 : Fail("detokenize", status);
}

}  // namespace minfer::tools
