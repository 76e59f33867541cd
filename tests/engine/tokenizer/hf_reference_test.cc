// Token ids against the independent reference: Hugging Face's JavaScript
// tokenizer (@huggingface/tokenizers) loading the same tokenizer.json,
// trimmed to Qwen2.5's added tokens on both sides. Node runs at test time
// (hf_reference.js); every id of every corpus string must match, with
// special-token parsing on and off, and decode(encode(s)) must give NFC(s).

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/tokenizer/test_util.h"

namespace minfer::tokenizer {
namespace {

using namespace ::minfer::tokenizer::testing;

constexpr char kScript[] = "tests/engine/tokenizer/hf_reference.js";
constexpr char kCorpus[] = "tests/engine/tokenizer/testdata/corpus.jsonl";
constexpr char kInvalid[] = "tests/engine/tokenizer/testdata/invalid_utf8.jsonl";

struct Reference {
  std::vector<TokenId> special;
  std::vector<TokenId> nospecial;
  std::string nfc;
  std::string decoded;
};

struct Case {
  std::string input;  // raw bytes
  Reference ref;
};

// Runs the reference over `path`; empty (with a failure) on any problem.
std::vector<Case> RunReference(const std::string& path) {
  if (!RequireInstalled(kHfTokenizersCjs) || !RequireInstalled(kQwenTokenizerJson)) return {};
  const std::vector<std::string> inputs = ReadJsonlInputs(path);
  const std::string cmd = absl::StrCat(NodeBinary(), " '", kScript, "' '", kHfTokenizersCjs,
                                       "' '", kQwenTokenizerJson, "' ", kQwen25VocabLimit, " '",
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
    if (!j.is_object()) {
      ADD_FAILURE() << "bad reference line";
      return {};
    }
    Case c;
    c.input = input;
    c.ref.special = j["special"].get<std::vector<TokenId>>();
    c.ref.nospecial = j["nospecial"].get<std::vector<TokenId>>();
    c.ref.nfc = j["nfc"].get<std::string>();
    c.ref.decoded = j["decoded"].get<std::string>();
    cases.push_back(std::move(c));
  }
  return cases;
}

const std::vector<Case>& CorpusCases() {
  static const auto* cases = new std::vector<Case>(RunReference(kCorpus));
  return *cases;
}

const std::vector<Case>& InvalidCases() {
  static const auto* cases = new std::vector<Case>(RunReference(kInvalid));
  return *cases;
}

std::string Describe(const Tokenizer& tok, const std::vector<TokenId>& ids) {
  std::vector<std::string> parts;
  for (TokenId id : ids) {
    parts.push_back(absl::StrCat(id, tok.IsValidId(id) ? Escape(std::string(tok.TokenText(id)))
                                                      : "(?)"));
  }
  return absl::StrJoin(parts, " ");
}

// Compares every case; returns the number that matched.
int CompareIds(const std::vector<Case>& cases, bool parse_special) {
  const Tokenizer* tok = QwenTokenizer();
  if (tok == nullptr) return 0;
  EncodeOptions options;
  options.parse_special = parse_special;
  int matched = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const std::vector<TokenId>& expected = parse_special ? c.ref.special : c.ref.nospecial;
    const std::vector<TokenId> actual = tok->Encode(c.input, options);
    if (actual == expected) {
      ++matched;
      continue;
    }
    ADD_FAILURE() << "input #" << i << " " << Escape(c.input)
                  << (parse_special ? " (special on)" : " (special off)")
                  << "\n  reference: " << Describe(*tok, expected)
                  << "\n  minfer:    " << Describe(*tok, actual);
  }
  return matched;
}

TEST(HfReferenceTest, CorpusIsLargeAndDiverse) {
  const std::vector<std::string> inputs = ReadJsonlInputs(kCorpus);
  EXPECT_GE(inputs.size(), 200u);
  size_t longest = 0;
  bool has_empty = false;
  for (const std::string& s : inputs) {
    longest = std::max(longest, s.size());
    has_empty |= s.empty();
  }
  EXPECT_GE(longest, 1000u);
  EXPECT_TRUE(has_empty);
}

TEST(HfReferenceTest, CorpusIdsWithSpecialTokens) {
  const std::vector<Case>& cases = CorpusCases();
  ASSERT_GE(cases.size(), 200u);
  const int matched = CompareIds(cases, /*parse_special=*/true);
  std::printf("corpus, special parsing on: %d/%zu strings match the reference\n", matched,
              cases.size());
}

TEST(HfReferenceTest, CorpusIdsWithoutSpecialTokens) {
  const std::vector<Case>& cases = CorpusCases();
  ASSERT_GE(cases.size(), 200u);
  const int matched = CompareIds(cases, /*parse_special=*/false);
  std::printf("corpus, special parsing off: %d/%zu strings match the reference\n", matched,
              cases.size());
  // The flag must make a difference where control tokens occur.
  int differing = 0;
  for (const Case& c : cases) differing += c.ref.special != c.ref.nospecial;
  EXPECT_GT(differing, 20);
}

TEST(HfReferenceTest, InvalidUtf8MatchesTheReferenceDecoder) {
  const std::vector<Case>& cases = InvalidCases();
  ASSERT_GE(cases.size(), 30u);
  const int on = CompareIds(cases, true);
  const int off = CompareIds(cases, false);
  std::printf("invalid UTF-8: %d/%zu (special on), %d/%zu (special off) match\n", on,
              cases.size(), off, cases.size());
}

TEST(HfReferenceTest, RoundTripGivesNfc) {
  const Tokenizer* tok = QwenTokenizer();
  ASSERT_NE(tok, nullptr);
  for (const std::vector<Case>* cases : {&CorpusCases(), &InvalidCases()}) {
    ASSERT_FALSE(cases->empty());
    for (const Case& c : *cases) {
      for (bool special : {true, false}) {
        EncodeOptions options;
        options.parse_special = special;
        auto text = tok->Decode(tok->Encode(c.input, options));
        ASSERT_TRUE(text.ok()) << text.status();
        EXPECT_EQ(*text, c.ref.nfc) << Escape(c.input);
      }
      // And the reference's own decode of the same ids.
      EXPECT_EQ(*tok->Decode(c.ref.special), c.ref.decoded) << Escape(c.input);
    }
  }
}

}  // namespace
}  // namespace minfer::tokenizer
