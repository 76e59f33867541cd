// The grammar benchmark behind `minfer grammar bench`: a correctness check
// and a timing of the structured-output engine (engine/grammar) on a set of
// JSON Schemas, in MaskBench's shape (JSONSchemaBench's mask benchmark):
// one JSON object per line,
//   {"schema": {...}, "tests": [{"data": <JSON>, "valid": true|false}, ...]}
// with `tests` optional and other keys ignored ("name" or "description"
// names the schema in failure reports).
//
// For each schema: compile it (GrammarSpec kJsonSchema, the schema's text in
// its document order: properties are generated in that order) and time the
// call, or record the refusal. For each test instance: serialize it as
// compact JSON in its document order, tokenize it (no BOS, control tokens as
// text) and feed the tokens to a GrammarMatcher. A valid instance must be
// accepted token by token and leave the matcher complete; an invalid one
// must be refused (a token refused, or incomplete at the end). Every step
// of a valid instance also times FillNextTokenBitmask and checks that the
// mask agrees with AcceptToken. Then `paths` random walks per schema sample
// uniformly among the tokens each mask allows (seeded), up to `path_tokens`
// tokens or an end token, timing each mask.
//
// A schema passes when it compiled and every instance was judged right
// (MaskBench's definition; a schema without tests passes by compiling).
// Single-threaded by design: MaskBench runs engines on one thread, and mask
// times are per sequence.
#ifndef MINFER_ENGINE_TOOLS_GRAMMAR_BENCH_H_
#define MINFER_ENGINE_TOOLS_GRAMMAR_BENCH_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <istream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/grammar/matcher.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace minfer::tools {

struct GrammarBenchReport;

struct GrammarBenchOptions {
  int64_t limit = 0;         // schemas read at most (0: all)
  int32_t paths = 2;         // random walks per compiled schema
  int32_t path_tokens = 200; // tokens per walk at most
  uint64_t seed = 1;
  // Compilation cap: a schema past it counts as refused.
  std::chrono::milliseconds compile_time_limit{2000};
  grammar::JsonOptions json;
  // Wall time one schema's instances and walks may take (0: no limit); past
  // it the schema's remaining instances and walks are skipped and it does
  // not pass (MaskBench gives each engine a per-schema timeout too).
  std::chrono::milliseconds schema_time_limit{0};
  // Masks of valid instances slower than this (microseconds; 0: off) are
  // recorded as failures of kind "slow_mask" with the text before them, to
  // find which positions make the p99 (they do not fail the schema).
  double slow_mask_us = 0;
  // Called after every schema (progress reports on long runs).
  std::function<void(const GrammarBenchReport&)> progress;
};

// One instance judged wrongly, or a walk that hit a dead end.
struct GrammarBenchFailure {
  int64_t schema = 0;  // 0-based index among the schemas read
  int32_t test = -1;   // index in the schema's tests (-1: a random walk)
  std::string name;
  std::string kind;    // "valid_rejected", "invalid_accepted", "mask_mismatch", "dead_end",
                       // "slow_mask" (only with slow_mask_us)
  std::string detail;  // where and why
  std::string text;    // the instance (or walk) text, cut to 2 KB
};

struct GrammarSchemaOutcome {
  std::string name;
  bool compiled = false;
  std::string refusal;  // the compiler's message when not compiled
  double compile_ms = 0;
  bool compile_cache_hit = false;  // a repeated schema: answered by the cache
  int32_t valid_tested = 0, valid_rejected = 0;
  int32_t invalid_tested = 0, invalid_accepted = 0;
  bool timed_out = false;  // schema_time_limit cut its instances short
  bool passing() const {
    return compiled && !timed_out && valid_rejected == 0 && invalid_accepted == 0;
  }
};

struct GrammarBenchReport {
  int64_t schemas = 0, compiled = 0, refused = 0, passing = 0;
  int64_t valid_tested = 0, valid_rejected = 0;
  int64_t invalid_tested = 0, invalid_accepted = 0;
  // Instances of refused schemas (not fed to any matcher).
  int64_t instances_skipped = 0;
  // Schemas cut short by schema_time_limit (their untested instances are
  // counted in instances_skipped).
  int64_t timed_out = 0;
  // Masks that disagreed with AcceptToken (a matcher bug), and walks that
  // reached a state allowing no token at all (a grammar bug).
  int64_t mask_mismatches = 0, dead_ends = 0;
  int64_t masks = 0, walks = 0, walk_tokens = 0, walks_finished = 0;
  double mask_us_p50 = 0, mask_us_p99 = 0, mask_us_max = 0;
  // Over the schemas compiled (cache hits, i.e. repeated schemas, excluded).
  double compile_ms_p50 = 0, compile_ms_p99 = 0, compile_ms_max = 0;
  int64_t compile_cache_hits = 0;
  double seconds = 0;  // the whole run
  // Refusals by category ("unsupported keyword 'patternProperties'",
  // "grammar too complex", ...): the message without its location.
  std::map<std::string, int64_t> refusal_reasons;
  std::vector<GrammarSchemaOutcome> outcomes;  // per schema, in input order
  std::vector<GrammarBenchFailure> failures;

  // One object: the counts and figures above (not outcomes or failures).
  nlohmann::ordered_json ToJson() const;
  // A small human-readable table.
  std::string ToTable() const;
};

// Runs the benchmark over the JSONL in `in` with `tok` (to tokenize the
// instances) and `vocab` (its grammar vocabulary: MakeGrammarVocabulary).
// A line that is not a JSON object with a "schema" is INVALID_ARGUMENT
// naming the line; empty lines are skipped.
absl::StatusOr<GrammarBenchReport> RunGrammarBench(
    const tokenizer::Tokenizer& tok, std::shared_ptr<const grammar::Vocabulary> vocab,
    std::istream& in, const GrammarBenchOptions& options);

// A refusal message's category: the message without its JSON pointer,
// offsets and counts.
std::string RefusalCategory(const std::string& message);

// One random walk: from the matcher's state, repeatedly fill the mask and
// accept a token drawn uniformly among those allowed, until an end token
// is drawn (then `finished`), `max_tokens` tokens, or a mask allowing
// nothing (`dead_end`). `text` collects the accepted tokens' bytes (end
// tokens excluded). `mask_us`, when given, receives each mask's time.
struct GrammarWalk {
  std::string text;
  int32_t tokens = 0;
  bool finished = false;
  bool dead_end = false;
  // A token the mask allowed that AcceptToken refused (a matcher bug).
  bool mismatch = false;
};
GrammarWalk RandomGrammarWalk(grammar::GrammarMatcher& matcher, std::mt19937_64& rng,
                              int32_t max_tokens, std::vector<float>* mask_us = nullptr);

}  // namespace minfer::tools

#endif  // MINFER_ENGINE_TOOLS_GRAMMAR_BENCH_H_
