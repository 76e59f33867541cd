#include "engine/tokenizer/gguf_tokenizer.h"

#include <chrono>
#include <string>
#include <vector>

#include "engine/base/mapped_file.h"
#include "engine/gguf/gguf.h"
#include "engine/gguf/writer.h"
#include "engine/tokenizer/gguf_tokenizer_writer.h"
#include "engine/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/tokenizer/test_util.h"

namespace minfer::tokenizer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace ::minfer::tokenizer::testing;

absl::StatusOr<std::unique_ptr<gguf::GgufFile>> RoundTrip(const gguf::GgufWriter& w) {
  absl::StatusOr<std::string> bytes = w.WriteString();
  if (!bytes.ok()) return bytes.status();
  return gguf::GgufFile::Parse(MappedFile::FromBytes(*bytes, "test.gguf"));
}

TEST(GgufTokenizerTest, SmallTokenizerRoundTrips) {
  gguf::GgufWriter w;
  w.SetString("general.architecture", "qwen2");
  w.SetString("general.name", "Toy-Qwen");
  TokenizerData toy = ToyData();
  toy.chat_template = "{{ '<|im_start|>' }}{{ '<|im_end|>' }}";
  AddTokenizerToGguf(toy, &w);
  auto file = RoundTrip(w);
  ASSERT_TRUE(file.ok()) << file.status();
  auto data = TokenizerDataFromGguf(**file);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->model_name, "Toy-Qwen");
  EXPECT_EQ(data->model, "gpt2");
  EXPECT_EQ(data->pre, "qwen2");
  EXPECT_EQ(data->tokens, toy.tokens);
  EXPECT_EQ(data->token_types, toy.token_types);
  EXPECT_EQ(data->merges, toy.merges);
  EXPECT_EQ(data->bos_id, toy.bos_id);
  EXPECT_EQ(data->eos_id, toy.eos_id);
  EXPECT_EQ(data->pad_id, toy.pad_id);
  EXPECT_FALSE(data->eot_id.has_value());
  EXPECT_FALSE(data->add_bos);
  EXPECT_EQ(data->chat_template, toy.chat_template);

  auto tok = Tokenizer::Create(std::move(*data));
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_THAT((*tok)->Encode("<|im_start|>hello world<tool>"),
              ElementsAre(kToyImStart, kToyHello, kToyGworld, kToyTool));
  EXPECT_EQ(*(*tok)->Decode({kToyImStart, kToyHello}), "<|im_start|>hello");
  EXPECT_TRUE((*tok)->chat_template().ok());
}

TEST(GgufTokenizerTest, MissingOrMistypedKeys) {
  {
    gguf::GgufWriter w;
    w.SetString("tokenizer.ggml.model", "gpt2");
    auto file = RoundTrip(w);
    ASSERT_TRUE(file.ok());
    auto data = TokenizerDataFromGguf(**file);
    ASSERT_FALSE(data.ok());
    EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(data.status().message(), HasSubstr("tokenizer.ggml.tokens"));
  }
  {
    gguf::GgufWriter w;
    AddTokenizerToGguf(ToyData(), &w);
    w.Set("tokenizer.ggml.token_type", gguf::Value::StringArray({"a"}));
    auto file = RoundTrip(w);
    ASSERT_TRUE(file.ok());
    auto data = TokenizerDataFromGguf(**file);
    ASSERT_FALSE(data.ok());
    EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(data.status().message(), HasSubstr("tokenizer.ggml.token_type"));
  }
}

// Content errors surface from Tokenizer::Create with the model's name.
TEST(GgufTokenizerTest, BadContentFailsClearly) {
  struct Case {
    std::string what, message;
    std::function<void(gguf::GgufWriter*)> mutate;
  };
  const Case cases[] = {
      {"empty token list", "vocabulary (tokenizer.ggml.tokens) is empty",
       [](gguf::GgufWriter* w) {
         w->Set("tokenizer.ggml.tokens", gguf::Value::StringArray({}));
         w->Set("tokenizer.ggml.token_type", gguf::Value::I32Array({}));
       }},
      {"merge with an unknown token", "merge #0 ('h nosuch') references 'nosuch'",
       [](gguf::GgufWriter* w) {
         w->Set("tokenizer.ggml.merges", gguf::Value::StringArray({"h nosuch"}));
       }},
      {"unknown pre-tokenizer", "pre-tokenizer 'default'",
       [](gguf::GgufWriter* w) { w->SetString("tokenizer.ggml.pre", "default"); }},
      {"eos out of range", "eos_token_id 4000000 is out of range",
       [](gguf::GgufWriter* w) { w->SetU32("tokenizer.ggml.eos_token_id", 4000000); }},
  };
  for (const Case& c : cases) {
    gguf::GgufWriter w;
    w.SetString("general.name", "Broken");
    AddTokenizerToGguf(ToyData(), &w);
    c.mutate(&w);
    auto file = RoundTrip(w);
    ASSERT_TRUE(file.ok()) << c.what;
    auto data = TokenizerDataFromGguf(**file);
    ASSERT_TRUE(data.ok()) << c.what << ": " << data.status();
    auto tok = Tokenizer::Create(std::move(*data));
    ASSERT_FALSE(tok.ok()) << c.what;
    EXPECT_THAT(tok.status().message(), HasSubstr(c.message)) << c.what;
    EXPECT_THAT(tok.status().message(), HasSubstr("model 'Broken'")) << c.what;
  }
}

TEST(GgufTokenizerTest, MissingPreKeyDefaultsForQwen2Only) {
  for (const std::string arch : {"qwen2", "llama"}) {
    const TokenizerData toy = ToyData();
    gguf::GgufWriter w2;  // a GGUF converted before tokenizer.ggml.pre existed
    w2.SetString("general.architecture", arch);
    w2.SetString("tokenizer.ggml.model", "gpt2");
    w2.Set("tokenizer.ggml.tokens", gguf::Value::StringArray(toy.tokens));
    w2.Set("tokenizer.ggml.token_type", gguf::Value::I32Array(toy.token_types));
    w2.Set("tokenizer.ggml.merges", gguf::Value::StringArray(toy.merges));
    auto file = RoundTrip(w2);
    ASSERT_TRUE(file.ok());
    auto data = TokenizerDataFromGguf(**file);
    ASSERT_TRUE(data.ok());
    EXPECT_EQ(data->pre, arch == "qwen2" ? "qwen2" : "default");
    EXPECT_EQ(Tokenizer::Create(std::move(*data)).ok(), arch == "qwen2");
  }
}

// The full Qwen2.5 vocabulary through a GGUF file on disk: what loading a
// real model costs, and the same ids as the tokenizer built directly.
TEST(GgufTokenizerTest, QwenVocabularyThroughAFile) {
  const TokenizerData* qwen = QwenData();
  const Tokenizer* direct = QwenTokenizer();
  ASSERT_NE(direct, nullptr);
  TokenizerData with_ids = *qwen;
  with_ids.eos_id = 151645;
  with_ids.pad_id = 151643;
  with_ids.bos_id = 151643;
  with_ids.chat_template = std::string(Qwen25ChatTemplate());
  gguf::GgufWriter w;
  w.SetString("general.architecture", "qwen2");
  w.SetString("general.name", "Qwen2.5-test");
  AddTokenizerToGguf(with_ids, &w);
  const std::string path = std::string(::testing::TempDir()) + "/qwen_tokenizer.gguf";
  ASSERT_TRUE(w.WriteFile(path).ok());

  const auto start = std::chrono::steady_clock::now();
  auto file = gguf::GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const auto parsed = std::chrono::steady_clock::now();
  auto data = TokenizerDataFromGguf(**file);
  ASSERT_TRUE(data.ok()) << data.status();
  const auto extracted = std::chrono::steady_clock::now();
  auto tok = Tokenizer::Create(std::move(*data));
  ASSERT_TRUE(tok.ok()) << tok.status();
  const auto created = std::chrono::steady_clock::now();
  auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  const double total = secs(start, created);
  std::printf("Qwen2.5 tokenizer from GGUF: parse %.3f s + extract %.3f s + Create %.3f s = %.3f s\n",
              secs(start, parsed), secs(parsed, extracted), secs(extracted, created), total);
  EXPECT_LT(total, 3.0);  // well under 0.5 s on a quiet machine

  for (const std::string s : {"Hello world", "<|im_start|>user\n你好！<|im_end|>\n",
                              "  def f(x):\n\treturn x**2  # 😀\r\n", "I'LL DON'T 's"}) {
    EXPECT_EQ((*tok)->Encode(s), direct->Encode(s)) << Escape(s);
  }
  EXPECT_EQ((*tok)->model_name(), "Qwen2.5-test");
  ASSERT_TRUE((*tok)->chat_template().ok());
  EXPECT_EQ((*tok)->chat_template()->default_system_prompt(),
            "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
}

}  // namespace
}  // namespace minfer::tokenizer
