// Grammar: the one form every structured-output input compiles to — a
// context-free grammar over bytes, written as named rules whose bodies are
// expressions (sequence, alternation, bounded or unbounded repetition, byte
// sets, literals, references to rules). JSON Schema, GBNF, regular
// expressions and choices all build one through GrammarBuilder; the matcher
// (matcher.h) compiles its rules into byte automata and runs them against a
// tokenizer's vocabulary.
//
// Bytes, not characters: a Unicode character class becomes the alternation of
// its UTF-8 byte sequences (GrammarBuilder::CodepointSet), so the grammar, the
// vocabulary (byte-level BPE tokens are byte strings, often fragments of a
// character) and the matcher all speak bytes.
//
// Limits: Build() refuses a grammar that the matcher could not run — a
// reference to a rule never defined, left recursion (a rule reaching itself
// before consuming a byte: the matcher's stack would grow without input), or
// more expression nodes than GrammarLimits allow (a hostile schema must not
// exhaust memory or time). Errors are INVALID_ARGUMENT naming the rule.
//
// Thread safety: a built Grammar is immutable; share it freely. A builder
// belongs to one thread.
#ifndef MINFER_ENGINE_GRAMMAR_GRAMMAR_H_
#define MINFER_ENGINE_GRAMMAR_GRAMMAR_H_

#include <bitset>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace minfer::grammar {

using ExprId = int32_t;
using RuleId = int32_t;
using ByteSet = std::bitset<256>;

// Upper bound for Repeat's max meaning "unbounded".
inline constexpr int32_t kUnbounded = -1;

enum class ExprKind : uint8_t {
  kEmpty,    // matches the empty string
  kBytes,    // one byte from `bytes` (a set)
  kLiteral,  // the byte string `literal`
  kRef,      // the rule `rule`
  kSeq,      // children in order
  kAlt,      // one of the children
  kRepeat,   // children[0] between min and max times (max kUnbounded: no bound)
  kNothing,  // matches nothing (an empty alternation; e.g. an empty enum)
};

struct Expr {
  ExprKind kind = ExprKind::kEmpty;
  ByteSet bytes;                // kBytes
  std::string literal;          // kLiteral (non-empty)
  RuleId rule = -1;             // kRef
  std::vector<ExprId> children; // kSeq, kAlt, kRepeat (one child)
  int32_t min = 0;              // kRepeat
  int32_t max = 0;              // kRepeat: >= min, or kUnbounded
};

struct Rule {
  std::string name;
  ExprId body = -1;
  // A hint to the matcher: keep this rule a rule of its own, never expanded
  // in place at its references (matcher.cc inlines small rules). For a rule
  // referenced from very many places — an object member that any-order
  // objects call from a rule per set of members written — where copies
  // would multiply automaton states. Not part of the language (ToString
  // leaves it out).
  bool no_inline = false;
};

struct GrammarLimits {
  // Expression nodes in all (after expansion by the front end).
  int64_t max_exprs = 1 << 20;
  // Rules in all.
  int64_t max_rules = 1 << 16;
  // A bounded repetition's max (x{0,N}): the matcher expands it into N
  // copies, so it is capped.
  int32_t max_repeat = 10000;
  // Automaton states over all rules (matcher.h expands repetitions).
  int64_t max_states = 1 << 21;
};

class Grammar {
 public:
  const std::vector<Expr>& exprs() const { return exprs_; }
  const std::vector<Rule>& rules() const { return rules_; }
  const Expr& expr(ExprId id) const { return exprs_[id]; }
  const Rule& rule(RuleId id) const { return rules_[id]; }
  RuleId root() const { return root_; }
  const GrammarLimits& limits() const { return limits_; }

  // A canonical text of the grammar (GBNF-like; rules in definition order),
  // the key of compiled-grammar caches and what tests print. Two grammars
  // with equal text are the same language by construction.
  std::string ToString() const;

 private:
  friend class GrammarBuilder;
  std::vector<Expr> exprs_;
  std::vector<Rule> rules_;
  RuleId root_ = -1;
  GrammarLimits limits_;
};

// Builds a Grammar bottom-up. Expression constructors return ids into the
// builder; rules may be referenced before they are defined (recursion,
// $ref), so a front end declares a rule (Declare), refers to it (Ref), and
// defines it later (Define).
class GrammarBuilder {
 public:
  explicit GrammarBuilder(GrammarLimits limits = {});

  // A new rule named `name` (made unique with a numeric suffix if taken;
  // the returned id is what matters), not yet defined.
  RuleId Declare(absl::string_view name);
  // Gives a declared rule its body. Defining twice is an error at Build.
  void Define(RuleId rule, ExprId body);
  // Declare + Define.
  RuleId AddRule(absl::string_view name, ExprId body);
  // The id of the rule named exactly `name`, or -1.
  RuleId FindRule(absl::string_view name) const;
  const std::string& RuleName(RuleId rule) const { return g_.rules_[rule].name; }
  // Sets Rule::no_inline.
  void NoInline(RuleId rule) { g_.rules_[rule].no_inline = true; }

  ExprId Empty();
  ExprId Nothing();
  ExprId Byte(uint8_t b);
  ExprId ByteRange(uint8_t lo, uint8_t hi);
  ExprId Bytes(const ByteSet& set);  // an empty set is Nothing()
  // `text` (any bytes); empty text is Empty().
  ExprId Literal(absl::string_view text);
  ExprId Ref(RuleId rule);
  ExprId Seq(std::vector<ExprId> items);  // 0 items: Empty(); 1: the item
  ExprId Alt(std::vector<ExprId> items);  // 0 items: Nothing(); 1: the item
  ExprId Repeat(ExprId item, int32_t min, int32_t max);  // max kUnbounded: no bound
  ExprId Optional(ExprId item) { return Repeat(item, 0, 1); }
  ExprId Star(ExprId item) { return Repeat(item, 0, kUnbounded); }
  ExprId Plus(ExprId item) { return Repeat(item, 1, kUnbounded); }

  // One Unicode scalar value from `ranges` (inclusive [lo, hi] code point
  // pairs, any order, may overlap), or with `negated` one NOT in them; as
  // the alternation of its UTF-8 encodings. Surrogates (D800-DFFF) and
  // values past 10FFFF are never matched. An empty set is Nothing().
  ExprId CodepointSet(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated = false);
  // Any one Unicode scalar value, UTF-8 encoded (a regex's `.` without the
  // newline exclusion, a GBNF `.`... callers exclude what they need with
  // CodepointSet(..., negated)).
  ExprId AnyCodepoint() { return CodepointSet({}, /*negated=*/true); }

  // Sticky error: a front end may record the first problem it finds (with
  // its location) and keep building; Build returns it.
  void SetError(absl::Status status);
  bool has_error() const { return !error_.ok(); }

  int64_t expr_count() const { return static_cast<int64_t>(g_.exprs_.size()); }
  // An expression built so far (front ends that analyse what they built,
  // e.g. a regex's possible lengths).
  const Expr& expr(ExprId id) const { return g_.exprs_[id]; }
  const GrammarLimits& limits() const { return g_.limits_; }

  // Checks and returns the grammar rooted at `root`: every referenced rule
  // defined, no left recursion, within the limits. Rules not reachable from
  // the root are dropped. INVALID_ARGUMENT naming the rule otherwise.
  absl::StatusOr<Grammar> Build(RuleId root) &&;

 private:
  ExprId Add(Expr e);
  Grammar g_;
  std::vector<bool> defined_;
  // Rule names to ids (Declare keeps names unique), and per name the next
  // numeric suffix worth trying.
  absl::flat_hash_map<std::string, RuleId> by_name_;
  absl::flat_hash_map<std::string, int> next_suffix_;
  absl::Status error_;
  bool over_limit_ = false;
};

}  // namespace minfer::grammar

#endif  // MINFER_ENGINE_GRAMMAR_GRAMMAR_H_
