// `minfer grammar bench`: the structured-output benchmark and correctness
// check (grammar_bench.h) from the command line. Only the tokenizer is
// loaded, never the weights: the bench needs the vocabulary and the number
// of output rows (the bitmask's width), both in the GGUF's metadata and
// tensor table.
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/gguf/gguf.h"
#include "engine/runtime/model.h"
#include "engine/tokenizer/gguf_tokenizer.h"
#include "engine/tokenizer/hf_tokenizer_json.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tools/commands.h"
#include "engine/tools/grammar_bench.h"
#include "nlohmann/json.hpp"

namespace minfer::tools {
namespace {

struct BenchArgs {
  std::string model;
  std::string schemas;
  std::string failures;
  bool json = false;
  int32_t rows = 0;
  int32_t time_limit_ms = 2000;
  double schema_time_limit_s = 0;
  bool progress = false;
  GrammarBenchOptions options;
};

struct LoadedVocab {
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::shared_ptr<const grammar::Vocabulary> vocab;
};

// The model's output rows: the output matrix's rows (the token embedding's
// when tied). Models pad them past the tokenizer's vocabulary (Qwen2:
// 151,936 rows for 151,665 tokens); the padding rows are never allowed.
int32_t OutputRows(const gguf::GgufFile& file) {
  for (const char* name : {"output.weight", "token_embd.weight"}) {
    if (const gguf::TensorInfo* t = file.FindTensor(name); t != nullptr && t->dims.size() >= 2) {
      return static_cast<int32_t>(t->dims[1]);
    }
  }
  return 0;
}

absl::StatusOr<LoadedVocab> LoadVocab(const std::string& path, int32_t rows) {
  tokenizer::TokenizerData data;
  if (absl::EndsWith(path, ".json")) {
    ASSIGN_OR_RETURN(data, tokenizer::TokenizerDataFromHfJson(path));
  } else {
    ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file, gguf::GgufFile::Open(path));
    ASSIGN_OR_RETURN(data, tokenizer::TokenizerDataFromGguf(*file));
    if (rows == 0) rows = OutputRows(*file);
  }
  LoadedVocab out;
  ASSIGN_OR_RETURN(out.tok, tokenizer::Tokenizer::Create(std::move(data)));
  out.vocab = runtime::MakeGrammarVocabulary(*out.tok, rows);
  return out;
}

absl::Status RunBench(const BenchArgs& args) {
  ASSIGN_OR_RETURN(LoadedVocab v, LoadVocab(args.model, args.rows));
  std::ifstream in(args.schemas);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open '", args.schemas, "'"));
  GrammarBenchOptions options = args.options;
  options.compile_time_limit = std::chrono::milliseconds(args.time_limit_ms);
  options.schema_time_limit =
      std::chrono::milliseconds(static_cast<int64_t>(args.schema_time_limit_s * 1000));
  if (args.progress) {
    options.progress = [](const GrammarBenchReport& r) {
      if (r.schemas % 100 != 0) return;
      std::cerr << r.schemas << " schemas: " << r.compiled << " compiled, " << r.passing
                << " passing, " << r.valid_rejected << " valid rejected, " << r.invalid_accepted
                << " invalid accepted\n";
    };
  }
  absl::StatusOr<GrammarBenchReport> report = RunGrammarBench(*v.tok, v.vocab, in, options);
  if (!report.ok()) {
    return absl::Status(report.status().code(),
                        absl::StrCat(args.schemas, ": ", report.status().message()));
  }
  if (!args.failures.empty()) {
    std::ofstream f(args.failures);
    if (!f) return absl::NotFoundError(absl::StrCat("cannot write '", args.failures, "'"));
    for (const GrammarBenchFailure& x : report->failures) {
      nlohmann::ordered_json j;
      j["schema"] = x.schema;
      if (x.test >= 0) j["test"] = x.test;
      j["name"] = x.name;
      j["kind"] = x.kind;
      j["detail"] = x.detail;
      j["text"] = x.text;
      f << j.dump(-1, ' ', false, nlohmann::detail::error_handler_t::replace) << "\n";
    }
    for (size_t i = 0; i < report->outcomes.size(); ++i) {
      const GrammarSchemaOutcome& o = report->outcomes[i];
      if (o.compiled) continue;
      nlohmann::ordered_json j;
      j["schema"] = i;
      j["name"] = o.name;
      j["kind"] = "refused";
      j["detail"] = o.refusal;
      f << j.dump(-1, ' ', false, nlohmann::detail::error_handler_t::replace) << "\n";
    }
  }
  if (args.json) {
    nlohmann::ordered_json j = report->ToJson();
    j["vocab"] = v.vocab->size();
    j["rows"] = v.vocab->n_rows();
    std::cout << j.dump() << "\n";
  } else {
    std::cout << "vocabulary: " << v.vocab->size() << " tokens, " << v.vocab->n_rows()
              << " rows\n\n"
              << report->ToTable();
  }
  return absl::OkStatus();
}

int BenchCommand(int argc, char** argv) {
  CLI::App app(
      "Compile JSON Schemas against a model's vocabulary, check their test instances token by "
      "token, and time masks and compilation (MaskBench's shape: one "
      "{\"schema\": ..., \"tests\": [{\"data\": ..., \"valid\": ...}]} per line).",
      "minfer grammar bench");
  BenchArgs a;
  app.add_option("-m,--model", a.model, "GGUF model (only its tokenizer is read), or a tokenizer.json")
      ->required();
  app.add_option("--schemas", a.schemas, "JSONL file of schemas and test instances")->required();
  app.add_flag("--json", a.json, "Print one JSON object instead of the table");
  app.add_option("--limit", a.options.limit, "Read at most N schemas (0: all)");
  app.add_option("--paths", a.options.paths, "Random valid paths walked per schema (timing)");
  app.add_option("--path-tokens", a.options.path_tokens, "Tokens per random path at most");
  app.add_option("--seed", a.options.seed, "Seed of the random paths");
  app.add_option("--time-limit-ms", a.time_limit_ms,
                 "Compilation cap per schema; a schema past it counts as refused");
  app.add_option("--schema-time-limit-s", a.schema_time_limit_s,
                 "Time one schema's instances and walks may take (0: no limit); past it the "
                 "schema does not pass");
  app.add_option("--slow-mask-us", a.options.slow_mask_us,
                 "Record each mask of a valid instance slower than this many microseconds in the "
                 "--failures file (kind slow_mask, with the text before it)");
  app.add_flag("--progress", a.progress, "Report progress on stderr every 100 schemas");
  app.add_option("--max-whitespace", a.options.json.max_whitespace,
                 "Whitespace bytes allowed between JSON tokens");
  bool open_objects = false;
  app.add_flag("--open-objects", open_objects,
               "Objects whose schema names properties but leaves additionalProperties out take "
               "other keys after the named ones, as JSON Schema reads it (default: none)");
  std::string property_order = "any";
  app.add_option("--property-order", property_order,
                 "Order of an object's properties: any (JSON Schema's reading, exact up to "
                 "--max-any-order-properties named ones) or schema (the schema's order)")
      ->check(CLI::IsMember({"any", "schema"}));
  app.add_option("--max-any-order-properties", a.options.json.max_any_order_properties,
                 "Objects with more named properties take them in the schema's order");
  app.add_option("--rows", a.rows,
                 "Bitmask rows (default: the GGUF's output rows; the vocabulary for a .json)");
  app.add_option("--failures", a.failures,
                 "Write each wrongly judged instance, dead end and refusal to this JSONL file");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 reports usage errors by throwing; only its own type is caught.
    return app.exit(e);
  }
  a.options.json.closed_objects = !open_objects;
  a.options.json.property_order = property_order == "schema"
                                      ? grammar::JsonOptions::PropertyOrder::kSchema
                                      : grammar::JsonOptions::PropertyOrder::kAny;
  const absl::Status status = RunBench(a);
  if (!status.ok()) {
    std::cerr << "minfer grammar bench: " << status.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

int GrammarMain(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "bench") return BenchCommand(argc - 1, argv + 1);
  std::cerr << "usage: minfer grammar bench -m MODEL --schemas FILE.jsonl [--json] [--limit N] "
               "[--paths K]\n       (minfer grammar bench --help for every option)\n";
  return argc >= 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") ? 0 : 2;
}

}  // namespace minfer::tools
