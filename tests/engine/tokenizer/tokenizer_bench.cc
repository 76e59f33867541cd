// Encode throughput of minfer's tokenizer on ~1 MB of mixed-language text
// generated deterministically from the test corpus. Run through
// tokenizer_bench.sh, which also runs @huggingface/tokenizers on the same
// text (bench_hf.js) and prints both figures.
//
// usage: tokenizer_bench TOKENIZER_JSON CORPUS_JSONL TEXT_OUT [BYTES] [RUNS] [MAX_STRING]
// Writes the generated text to TEXT_OUT and prints one JSON line. Only
// corpus strings of at most MAX_STRING bytes (default 256) are used: the
// corpus's few long-run stress strings (1,000 'a's, 300 spaces, ...) hold
// half its bytes and would otherwise dominate the "mixed-language" text.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "engine/tokenizer/hf_tokenizer_json.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace {

using minfer::tokenizer::TokenId;

// Corpus strings picked by a 64-bit LCG, joined by a space or a newline,
// until `bytes` bytes; cut back to a UTF-8 character boundary.
std::string MakeText(const std::vector<std::string>& corpus, size_t bytes) {
  uint64_t x = 0x9E3779B97F4A7C15ULL;
  std::string text;
  while (text.size() < bytes) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    text += corpus[(x >> 33) % corpus.size()];
    text += ((x >> 20) & 1) ? "\n" : " ";
  }
  size_t end = bytes;
  while (end > 0 && (static_cast<uint8_t>(text[end]) & 0xC0) == 0x80) --end;
  text.resize(end);
  return text;
}

// FNV-1a over the ids, to check both tokenizers produced the same tokens.
uint32_t HashIds(const std::vector<TokenId>& ids) {
  uint32_t h = 2166136261u;
  for (TokenId id : ids) {
    h ^= static_cast<uint32_t>(id);
    h *= 16777619u;
  }
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s TOKENIZER_JSON CORPUS_JSONL TEXT_OUT [BYTES] [RUNS]\n",
                 argv[0]);
    return 2;
  }
  size_t bytes = 1 << 20;
  int runs = 5;
  if (argc > 4 && !absl::SimpleAtoi(argv[4], &bytes)) return 2;
  if (argc > 5 && !absl::SimpleAtoi(argv[5], &runs)) return 2;
  size_t max_string = 256;
  if (argc > 6 && !absl::SimpleAtoi(argv[6], &max_string)) return 2;

  std::vector<std::string> corpus;
  std::ifstream in(argv[2]);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_string()) continue;
    const std::string& s = j.get_ref<const std::string&>();
    if (!s.empty() && s.size() <= max_string) corpus.push_back(s);
  }
  if (corpus.empty()) {
    std::fprintf(stderr, "no corpus strings in %s\n", argv[2]);
    return 1;
  }
  const std::string text = MakeText(corpus, bytes);
  std::ofstream(argv[3], std::ios::binary) << text;

  minfer::tokenizer::HfTokenizerJsonOptions options;
  options.vocab_limit = 151665;
  options.read_tokenizer_config = false;
  const auto load_start = std::chrono::steady_clock::now();
  auto data = minfer::tokenizer::TokenizerDataFromHfJson(argv[1], options);
  if (!data.ok()) {
    std::fprintf(stderr, "%s\n", std::string(data.status().message()).c_str());
    return 1;
  }
  const auto create_start = std::chrono::steady_clock::now();
  auto tok = minfer::tokenizer::Tokenizer::Create(std::move(*data));
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tok.status().message()).c_str());
    return 1;
  }
  const auto create_end = std::chrono::steady_clock::now();

  double first = 0, best = 1e30;
  std::vector<TokenId> ids;
  for (int r = 0; r < runs; ++r) {
    const auto start = std::chrono::steady_clock::now();
    ids = (*tok)->Encode(text);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (r == 0) first = secs;
    best = std::min(best, secs);
  }
  auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  std::printf(
      "{\"impl\": \"minfer\", \"corpus_strings\": %zu, \"bytes\": %zu, \"tokens\": %zu, \"hash\": %u, "
      "\"json_load_s\": %.3f, \"create_s\": %.3f, \"first_mb_s\": %.2f, \"best_mb_s\": %.2f}\n",
      corpus.size(), text.size(), ids.size(), HashIds(ids), secs(load_start, create_start),
      secs(create_start, create_end), text.size() / first / 1e6, text.size() / best / 1e6);
  return 0;
}
