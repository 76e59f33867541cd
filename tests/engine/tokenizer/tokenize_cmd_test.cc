#include "engine/tools/tokenize_cmd.h"

#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/gguf/writer.h"
#include "engine/tokenizer/gguf_tokenizer_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/tokenizer/test_util.h"

namespace minfer::tools {
namespace {

using ::testing::HasSubstr;
using namespace ::minfer::tokenizer::testing;

struct Result {
  int code;
  std::string out, err;
};

Result RunCommand(int (*main_fn)(int, char**), std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  std::ostringstream out, err;
  std::streambuf* old_out = std::cout.rdbuf(out.rdbuf());
  std::streambuf* old_err = std::cerr.rdbuf(err.rdbuf());
  const int code = main_fn(static_cast<int>(argv.size()), argv.data());
  std::cout.rdbuf(old_out);
  std::cerr.rdbuf(old_err);
  return {code, out.str(), err.str()};
}

std::string WriteFile(const std::string& name, const std::string& contents) {
  const std::string path = std::string(::testing::TempDir()) + "/" + name;
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

class TokenizeCmdTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    gguf::GgufWriter w;
    w.SetString("general.architecture", "qwen2");
    w.SetString("general.name", "toy");
    tokenizer::AddTokenizerToGguf(ToyData(), &w);
    model_ = new std::string(std::string(::testing::TempDir()) + "/toy_tokenizer.gguf");
    ASSERT_TRUE(w.WriteFile(*model_).ok());
  }
  static std::string* model_;
};
std::string* TokenizeCmdTest::model_ = nullptr;

TEST_F(TokenizeCmdTest, TokenizeText) {
  Result r = RunCommand(TokenizeMain, {"tokenize", "-m", *model_, "hello world"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "[259,264]\n");
  r = RunCommand(TokenizeMain, {"tokenize", "-m", *model_, "<|im_start|>hello"});
  EXPECT_EQ(r.out, "[269,259]\n");
  r = RunCommand(TokenizeMain, {"tokenize", "-m", *model_, "--no-special", "<|im_start|>hello"});
  EXPECT_EQ(r.out, "[273,95,115,116,97,114,116,124,62,259]\n");  // <|im _ s t a r t | > hello
  r = RunCommand(TokenizeMain, {"tokenize", "-m", *model_, ""});
  EXPECT_EQ(r.out, "[]\n");
}

TEST_F(TokenizeCmdTest, TokenizeFileAndJsonl) {
  const std::string file = WriteFile("input.txt", "hello\xFF");
  Result r = RunCommand(TokenizeMain, {"tokenize", "-m", *model_, "--file", file});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "[259,239,191,189]\n");  // hello U+FFFD (EF BF BD as byte tokens)

  const std::string jsonl = WriteFile("input.jsonl", "\"hello\"\n\" world\"\n\"\"\n");
  r = RunCommand(TokenizeMain, {"tokenize", "-m", *model_, "--jsonl", jsonl});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "[259]\n[264]\n[]\n");

  const std::string bad = WriteFile("bad.jsonl", "\"ok\"\nnot json\n");
  r = RunCommand(TokenizeMain, {"tokenize", "-m", *model_, "--jsonl", bad});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("bad.jsonl:2: not a JSON string"));
}

TEST_F(TokenizeCmdTest, UsageErrors) {
  EXPECT_NE(RunCommand(TokenizeMain, {"tokenize", "hello"}).code, 0);  // no -m
  EXPECT_NE(RunCommand(TokenizeMain, {"tokenize", "-m", *model_}).code, 0);  // no input
  EXPECT_NE(RunCommand(TokenizeMain, {"tokenize", "-m", *model_, "x", "--file", "f"}).code, 0);
  Result r = RunCommand(TokenizeMain, {"tokenize", "-m", "/nonexistent/model.gguf", "x"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("/nonexistent/model.gguf"));
}

TEST_F(TokenizeCmdTest, Detokenize) {
  Result r = RunCommand(DetokenizeMain, {"detokenize", "-m", *model_, "259", "264"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "hello world\n");
  EXPECT_EQ(RunCommand(DetokenizeMain, {"detokenize", "-m", *model_, "[269,259, 264]"}).out,
            "<|im_start|>hello world\n");
  EXPECT_EQ(RunCommand(DetokenizeMain, {"detokenize", "-m", *model_, "--skip-special", "269,259"}).out,
            "hello\n");
  EXPECT_EQ(RunCommand(DetokenizeMain, {"detokenize", "-m", *model_, "--json", "259", "10"}).out,
            "\"hello\\n\"\n");
  r = RunCommand(DetokenizeMain, {"detokenize", "-m", *model_, "259", "999999"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("token id 999999 at position 1 is out of range"));
  r = RunCommand(DetokenizeMain, {"detokenize", "-m", *model_, "12x"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("not a token id: '12x'"));
}

TEST_F(TokenizeCmdTest, HuggingFaceTokenizerJson) {
  if (!RequireInstalled(kQwenTokenizerJson)) return;
  Result r = RunCommand(TokenizeMain, {"tokenize", "-m", kQwenTokenizerJson, "Hello world"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "[9707,1879]\n");
}

}  // namespace
}  // namespace minfer::tools
