#include "engine/tools/grammar_bench.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/base/status.h"
#include "engine/grammar/spec.h"

namespace minfer::tools {
namespace {

// ordered_json: an instance is serialized with its members in the order the
// data file has them, and a schema's `properties` keep theirs — the JSON
// Schema front end generates properties in that order, and MaskBench's
// instances follow it (its authors reordered them to a stable order).
using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

constexpr size_t kMaxFailureText = 2048;

double Micros(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// Nearest-rank percentile of sorted values (0 for none).
template <typename T>
double Percentile(const std::vector<T>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return static_cast<double>(sorted[rank - 1]);
}

bool Bit(const std::vector<uint32_t>& mask, int32_t id) {
  return (mask[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u;
}

std::string Cut(absl::string_view text) {
  if (text.size() <= kMaxFailureText) return std::string(text);
  return absl::StrCat(text.substr(0, kMaxFailureText), "...");
}

// Compact JSON; invalid UTF-8 cannot come from a parsed file, but replace
// rather than throw should it ever.
std::string Dump(const Json& j) {
  return j.dump(-1, ' ', false, nlohmann::detail::error_handler_t::replace);
}

std::string SchemaName(const Json& line, int64_t index) {
  for (const char* key : {"name", "description"}) {
    auto it = line.find(key);
    if (it != line.end() && it->is_string()) return it->get<std::string>();
  }
  return absl::StrCat("schema ", index + 1);
}

// The state one schema's run shares with the report.
struct Context {
  const tokenizer::Tokenizer& tok;
  const grammar::Vocabulary& vocab;
  const GrammarBenchOptions& options;
  GrammarBenchReport& report;
  std::vector<float>& mask_us;
  std::vector<uint32_t> mask;
};

void AddFailure(Context& cx, int64_t schema, int32_t test, const std::string& name,
                std::string kind, std::string detail, absl::string_view text) {
  cx.report.failures.push_back(
      {schema, test, name, std::move(kind), std::move(detail), Cut(text)});
}

// Feeds a valid instance, timing a mask before every token (and at the end,
// where the decoder computes one too). Returns false (and records why) if
// it is refused or incomplete.
bool FeedValid(Context& cx, const std::shared_ptr<const grammar::CompiledGrammar>& cg,
               const std::string& text, const std::vector<int32_t>& ids, int64_t schema,
               int32_t test, const std::string& name) {
  grammar::GrammarMatcher m(cg);
  size_t offset = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto t0 = Clock::now();
    m.FillNextTokenBitmask(cx.mask.data());
    const double us = Micros(t0, Clock::now());
    cx.mask_us.push_back(static_cast<float>(us));
    if (cx.options.slow_mask_us > 0 && us > cx.options.slow_mask_us) {
      AddFailure(cx, schema, test, name, "slow_mask",
                 absl::StrFormat("%.0f us before token %d (byte %d)", us, i, offset),
                 absl::string_view(text).substr(0, offset));
    }
    const bool allowed = Bit(cx.mask, ids[i]);
    const absl::Status accepted = m.AcceptToken(ids[i]);
    if (allowed != accepted.ok()) {
      cx.report.mask_mismatches++;
      AddFailure(cx, schema, test, name, "mask_mismatch",
                 absl::StrCat("token ", i, " (id ", ids[i], ", byte ", offset, "): mask says ",
                              allowed ? "allowed" : "refused", ", AcceptToken says ",
                              accepted.ok() ? "accepted" : "refused"),
                 text);
    }
    if (!accepted.ok()) {
      AddFailure(cx, schema, test, name, "valid_rejected",
                 absl::StrCat("token ", i, " of ", ids.size(), " refused at byte ", offset,
                              ": ", absl::CEscape(cx.vocab.token(ids[i]))),
                 text);
      return false;
    }
    offset += cx.vocab.token(ids[i]).size();
  }
  const auto t0 = Clock::now();
  m.FillNextTokenBitmask(cx.mask.data());
  cx.mask_us.push_back(static_cast<float>(Micros(t0, Clock::now())));
  if (!m.IsComplete()) {
    AddFailure(cx, schema, test, name, "valid_rejected",
               absl::StrCat("all ", ids.size(), " tokens accepted but the grammar is not complete"),
               text);
    return false;
  }
  // Complete: the end tokens must be allowed, or a decoder could never stop.
  const std::vector<int32_t>& stops = cx.vocab.stop_ids();
  if (!stops.empty() &&
      std::none_of(stops.begin(), stops.end(), [&](int32_t id) { return Bit(cx.mask, id); })) {
    cx.report.mask_mismatches++;
    AddFailure(cx, schema, test, name, "mask_mismatch", "complete, but the mask allows no end token",
               text);
  }
  return true;
}

// Feeds an invalid instance; true when the matcher wrongly accepts it.
bool FeedInvalid(const std::shared_ptr<const grammar::CompiledGrammar>& cg,
                 const std::vector<int32_t>& ids) {
  grammar::GrammarMatcher m(cg);
  for (int32_t id : ids) {
    if (!m.AcceptToken(id).ok()) return false;
  }
  return m.IsComplete();
}

absl::Status RunSchema(Context& cx, grammar::GrammarCompiler& compiler, const Json& line,
                       int64_t index) {
  GrammarBenchReport& r = cx.report;
  GrammarSchemaOutcome out;
  out.name = SchemaName(line, index);
  const Json& schema = line.at("schema");
  const Json* tests = nullptr;
  if (auto it = line.find("tests"); it != line.end() && it->is_array()) tests = &*it;

  grammar::GrammarSpec spec;
  spec.kind = grammar::GrammarKind::kJsonSchema;
  spec.text = Dump(schema);
  spec.json = cx.options.json;
  const int64_t hits_before = compiler.stats().cache_hits;
  const auto t0 = Clock::now();
  absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> cg = compiler.Compile(spec);
  out.compile_ms = Micros(t0, Clock::now()) / 1000.0;
  const bool cache_hit = compiler.stats().cache_hits != hits_before;
  r.schemas++;
  if (!cg.ok()) {
    out.refusal = std::string(cg.status().message());
    r.refused++;
    r.refusal_reasons[RefusalCategory(out.refusal)]++;
    if (tests != nullptr) r.instances_skipped += static_cast<int64_t>(tests->size());
    r.outcomes.push_back(std::move(out));
    return absl::OkStatus();
  }
  out.compiled = true;
  r.compiled++;
  if (cache_hit) {
    out.compile_cache_hit = true;
    r.compile_cache_hits++;
  }

  tokenizer::EncodeOptions encode;
  encode.parse_special = false;
  encode.add_bos = false;
  const auto limit = cx.options.schema_time_limit;
  auto out_of_time = [&] { return limit.count() > 0 && Clock::now() - t0 > limit; };
  if (tests != nullptr) {
    for (size_t t = 0; t < tests->size(); ++t) {
      if (out_of_time()) {
        out.timed_out = true;
        r.instances_skipped += static_cast<int64_t>(tests->size() - t);
        break;
      }
      const Json& test = (*tests)[t];
      auto data = test.find("data");
      auto valid = test.find("valid");
      if (!test.is_object() || data == test.end() || valid == test.end() ||
          !valid->is_boolean()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "schema ", index + 1, " (", out.name, "): tests[", t,
            "] is not an object with \"data\" and a boolean \"valid\""));
      }
      const std::string text = Dump(*data);
      const std::vector<int32_t> ids = cx.tok.Encode(text, encode);
      if (valid->get<bool>()) {
        out.valid_tested++;
        if (!FeedValid(cx, *cg, text, ids, index, static_cast<int32_t>(t), out.name)) out.valid_rejected++;
      } else {
        out.invalid_tested++;
        if (FeedInvalid(*cg, ids)) {
          out.invalid_accepted++;
          AddFailure(cx, index, static_cast<int32_t>(t), out.name, "invalid_accepted",
                     absl::StrCat("tests[", t, "]: accepted and complete"), text);
        }
      }
    }
  }

  // Random walks: masks at states real decoding reaches, not only those of
  // the test instances. Seeded per schema so a run of a subset reproduces.
  std::mt19937_64 rng(cx.options.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(index));
  for (int32_t p = 0; p < cx.options.paths && !out_of_time(); ++p) {
    grammar::GrammarMatcher m(*cg);
    GrammarWalk w = RandomGrammarWalk(m, rng, cx.options.path_tokens, &cx.mask_us);
    r.walks++;
    r.walk_tokens += w.tokens;
    if (w.finished) r.walks_finished++;
    if (w.dead_end) {
      r.dead_ends++;
      AddFailure(cx, index, -1, out.name, "dead_end",
                 absl::StrCat("walk ", p, ": no token allowed after ", w.tokens, " tokens"),
                 w.text);
    }
    if (w.mismatch) {
      r.mask_mismatches++;
      AddFailure(cx, index, -1, out.name, "mask_mismatch",
                 absl::StrCat("walk ", p, ": a token the mask allowed was refused after ",
                              w.tokens, " tokens"),
                 w.text);
    }
  }

  r.valid_tested += out.valid_tested;
  r.valid_rejected += out.valid_rejected;
  r.invalid_tested += out.invalid_tested;
  r.invalid_accepted += out.invalid_accepted;
  if (out.timed_out) r.timed_out++;
  if (out.passing()) r.passing++;
  r.outcomes.push_back(std::move(out));
  return absl::OkStatus();
}

}  // namespace

GrammarWalk RandomGrammarWalk(grammar::GrammarMatcher& matcher, std::mt19937_64& rng,
                              int32_t max_tokens, std::vector<float>* mask_us) {
  const grammar::Vocabulary& vocab = matcher.compiled().vocab();
  std::vector<uint32_t> mask(vocab.mask_words());
  std::vector<int32_t> allowed;
  GrammarWalk w;
  while (w.tokens < max_tokens) {
    const auto t0 = Clock::now();
    matcher.FillNextTokenBitmask(mask.data());
    if (mask_us != nullptr) mask_us->push_back(static_cast<float>(Micros(t0, Clock::now())));
    allowed.clear();
    for (size_t i = 0; i < mask.size(); ++i) {
      for (uint32_t word = mask[i]; word != 0; word &= word - 1) {
        allowed.push_back(static_cast<int32_t>(i * 32 + std::countr_zero(word)));
      }
    }
    if (allowed.empty()) {
      w.dead_end = true;
      return w;
    }
    const int32_t id = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
    if (!matcher.AcceptToken(id).ok()) {
      w.mismatch = true;
      return w;
    }
    if (vocab.is_stop(id)) {
      w.finished = true;
      return w;
    }
    absl::StrAppend(&w.text, vocab.token(id));
    w.tokens++;
  }
  return w;
}

std::string RefusalCategory(const std::string& message) {
  absl::string_view m = message;
  // Quoted names after these openings are the category's point.
  for (absl::string_view opening : {"unsupported keyword '", "unsupported format '"}) {
    if (absl::StartsWith(m, opening)) {
      const size_t close = m.find('\'', opening.size());
      if (close != absl::string_view::npos) return std::string(m.substr(0, close + 1));
    }
  }
  if (absl::StartsWith(m, "grammar too complex")) {
    if (absl::StrContains(m, "states")) return "grammar too complex: states";
    return "grammar too complex: time";
  }
  // The rest: drop the location and parenthesized details, and numbers.
  for (absl::string_view cut : {" at /", " at the root", " at offset", " (", ": "}) {
    const size_t pos = m.find(cut);
    if (pos != absl::string_view::npos) m = m.substr(0, pos);
  }
  std::string out;
  for (size_t i = 0; i < m.size(); ++i) {
    if (absl::ascii_isdigit(m[i])) {
      if (out.empty() || out.back() != 'N') out += 'N';
      continue;
    }
    out += m[i];
  }
  if (out.size() > 80) out.resize(80);
  return out;
}

absl::StatusOr<GrammarBenchReport> RunGrammarBench(
    const tokenizer::Tokenizer& tok, std::shared_ptr<const grammar::Vocabulary> vocab,
    std::istream& in, const GrammarBenchOptions& options) {
  const auto start = Clock::now();
  grammar::CompileOptions copt;
  copt.time_limit = options.compile_time_limit;
  grammar::GrammarCompiler compiler(vocab, copt);
  GrammarBenchReport report;
  std::vector<float> mask_us;
  Context cx{tok, *vocab, options, report, mask_us, std::vector<uint32_t>(vocab->mask_words())};
  std::string text;
  int64_t line_no = 0;
  while ((options.limit <= 0 || report.schemas < options.limit) && std::getline(in, text)) {
    line_no++;
    if (absl::StripAsciiWhitespace(text).empty()) continue;
    Json line = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (line.is_discarded() || !line.is_object() || !line.contains("schema")) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_no, ": not a JSON object with a \"schema\""));
    }
    RETURN_IF_ERROR(RunSchema(cx, compiler, line, report.schemas));
    if (options.progress) options.progress(report);
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat("read error after line ", line_no));

  std::vector<double> compile_ms;
  for (size_t i = 0; i < report.outcomes.size(); ++i) {
    // Cache hits answer in microseconds; they would flatter the figure.
    const GrammarSchemaOutcome& o = report.outcomes[i];
    if (o.compiled && !o.compile_cache_hit) compile_ms.push_back(o.compile_ms);
  }
  std::sort(compile_ms.begin(), compile_ms.end());
  report.compile_ms_p50 = Percentile(compile_ms, 0.50);
  report.compile_ms_p99 = Percentile(compile_ms, 0.99);
  report.compile_ms_max = compile_ms.empty() ? 0 : compile_ms.back();
  std::sort(mask_us.begin(), mask_us.end());
  report.masks = static_cast<int64_t>(mask_us.size());
  report.mask_us_p50 = Percentile(mask_us, 0.50);
  report.mask_us_p99 = Percentile(mask_us, 0.99);
  report.mask_us_max = mask_us.empty() ? 0 : mask_us.back();
  report.seconds = Micros(start, Clock::now()) / 1e6;
  return report;
}

nlohmann::ordered_json GrammarBenchReport::ToJson() const {
  Json j;
  j["schemas"] = schemas;
  j["compiled"] = compiled;
  j["refused"] = refused;
  j["passing"] = passing;
  j["valid_tested"] = valid_tested;
  j["valid_rejected"] = valid_rejected;
  j["invalid_tested"] = invalid_tested;
  j["invalid_accepted"] = invalid_accepted;
  j["instances_skipped"] = instances_skipped;
  j["timed_out"] = timed_out;
  j["mask_mismatches"] = mask_mismatches;
  j["dead_ends"] = dead_ends;
  j["masks"] = masks;
  j["mask_us_p50"] = mask_us_p50;
  j["mask_us_p99"] = mask_us_p99;
  j["mask_us_max"] = mask_us_max;
  j["compile_ms_p50"] = compile_ms_p50;
  j["compile_ms_p99"] = compile_ms_p99;
  j["compile_ms_max"] = compile_ms_max;
  j["compile_cache_hits"] = compile_cache_hits;
  j["walks"] = walks;
  j["walks_finished"] = walks_finished;
  j["walk_tokens"] = walk_tokens;
  j["seconds"] = seconds;
  Json reasons = Json::object();
  // Most frequent first: the order a reader wants.
  std::vector<std::pair<std::string, int64_t>> sorted(refusal_reasons.begin(),
                                                      refusal_reasons.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  for (const auto& [reason, n] : sorted) reasons[reason] = n;
  j["refusal_reasons"] = std::move(reasons);
  return j;
}

std::string GrammarBenchReport::ToTable() const {
  auto pct = [](int64_t n, int64_t of) { return of > 0 ? 100.0 * n / of : 0.0; };
  std::string s;
  absl::StrAppendFormat(&s, "%-22s %10s %8s\n", "", "count", "share");
  absl::StrAppendFormat(&s, "%-22s %10d\n", "schemas", schemas);
  absl::StrAppendFormat(&s, "%-22s %10d %7.2f%%\n", "compiled", compiled, pct(compiled, schemas));
  absl::StrAppendFormat(&s, "%-22s %10d %7.2f%%\n", "refused", refused, pct(refused, schemas));
  absl::StrAppendFormat(&s, "%-22s %10d %7.2f%%\n", "passing", passing, pct(passing, schemas));
  absl::StrAppendFormat(&s, "%-22s %10d\n", "valid tested", valid_tested);
  absl::StrAppendFormat(&s, "%-22s %10d %7.2f%%\n", "valid rejected", valid_rejected,
                        pct(valid_rejected, valid_tested));
  absl::StrAppendFormat(&s, "%-22s %10d\n", "invalid tested", invalid_tested);
  absl::StrAppendFormat(&s, "%-22s %10d %7.2f%%\n", "invalid accepted", invalid_accepted,
                        pct(invalid_accepted, invalid_tested));
  absl::StrAppendFormat(&s, "%-22s %10d\n", "mask mismatches", mask_mismatches);
  absl::StrAppendFormat(&s, "%-22s %10d\n", "dead ends", dead_ends);
  if (timed_out > 0) absl::StrAppendFormat(&s, "%-22s %10d\n", "schemas timed out", timed_out);
  absl::StrAppendFormat(&s, "\n%-22s %10s %10s %10s\n", "", "p50", "p99", "max");
  absl::StrAppendFormat(&s, "%-22s %10.1f %10.1f %10.1f   (%d masks)\n", "mask (us)", mask_us_p50,
                        mask_us_p99, mask_us_max, masks);
  absl::StrAppendFormat(&s, "%-22s %10.2f %10.2f %10.2f\n", "compile (ms)", compile_ms_p50,
                        compile_ms_p99, compile_ms_max);
  if (!refusal_reasons.empty()) {
    s += "\nrefusals:\n";
    std::vector<std::pair<std::string, int64_t>> sorted(refusal_reasons.begin(),
                                                        refusal_reasons.end());
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
    for (const auto& [reason, n] : sorted) absl::StrAppendFormat(&s, "  %6d  %s\n", n, reason);
  }
  absl::StrAppendFormat(&s, "\n%.1f s; %d walks (%d finished, %d tokens)\n", seconds, walks,
                        walks_finished, walk_tokens);
  return s;
}

}  // namespace minfer::tools
