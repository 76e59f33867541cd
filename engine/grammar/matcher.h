// Constrained decoding against a tokenizer's vocabulary: compiled grammars
// and the per-sequence matcher (XGrammar's GrammarMatcher is the model).
//
//   Vocabulary       the token byte strings of one tokenizer, sorted into
//                    trie order (with common-prefix lengths), plus the ids that
//                    end generation. Shared by every grammar of the model.
//   CompiledGrammar  a Grammar's rules as byte automata, plus a cache of token
//                    classes per automaton position: for the position alone
//                    (whatever stack lies below it) each token is accepted,
//                    rejected, or context-dependent (its bytes run past the end
//                    of the rule). Positions are classified lazily, once, and
//                    classes are shared between grammars whose sub-grammar at
//                    the position is the same (the JSON string body of every
//                    schema, say). Immutable apart from that cache; share it.
//   GrammarCompiler  builds CompiledGrammars for one Vocabulary, cached by the
//                    spec's key (LRU), with a time cap.
//   GrammarMatcher   one sequence's parse state: a set of rule stacks after the
//                    bytes accepted so far.
//
// A step: FillNextTokenBitmask writes which tokens may come next (bit i of
// word i/32 set = token i allowed): the union over the parse's stacks of the
// accepted class of the stack's top, plus the context-dependent tokens that
// survive a walk from the real stack (kept per stack frame by the matcher,
// so later masks at the same frame, e.g. each character of a string, skip
// the walk). End-of-generation tokens are allowed
// exactly when the grammar is complete. Then AcceptToken(sampled id).
// Rollback(n) undoes the last n accepted tokens (speculative decoding);
// JumpForward gives the bytes the grammar forces next.
//
// Tokens that are not text (control tokens, empty strings) are never allowed
// by the grammar, except the end-of-generation ids when complete. Rows of
// the bitmask past the vocabulary (padding) are zero.
#ifndef MINFER_ENGINE_GRAMMAR_MATCHER_H_
#define MINFER_ENGINE_GRAMMAR_MATCHER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/spec.h"

namespace minfer::grammar {

class Vocabulary {
 public:
  // `tokens[i]`: the bytes token i decodes to ("" for control and unused
  // tokens: never allowed by a grammar). `stop_ids`: ids that end generation
  // (allowed when the grammar is complete). `n_rows`: the bitmask covers ids
  // [0, n_rows) (>= tokens.size(); the model's output rows).
  static std::shared_ptr<const Vocabulary> Create(std::vector<std::string> tokens,
                                                  std::vector<int32_t> stop_ids,
                                                  int32_t n_rows);

  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t n_rows() const { return n_rows_; }
  int32_t mask_words() const { return (n_rows_ + 31) / 32; }
  absl::string_view token(int32_t id) const { return tokens_[id]; }
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  bool is_stop(int32_t id) const;
  // Non-empty tokens by increasing bytes, and lcp[i] = common prefix length
  // of sorted[i] with sorted[i - 1] (0 for i = 0).
  const std::vector<int32_t>& sorted() const { return sorted_; }
  const std::vector<int32_t>& lcp() const { return lcp_; }
  // Position of token id in sorted() (-1 for empty tokens).
  int32_t rank(int32_t id) const { return rank_[id]; }
  // The vocabulary trie in preorder (children by increasing byte): node k
  // has trie_byte()[k] at depth trie_depth()[k] (1 for a root child), its
  // subtree is [k, trie_end()[k]), and the tokens whose bytes end at it are
  // sorted()[trie_first()[k] .. trie_first()[k] + trie_count()[k]). Lets a
  // walk skip a dead prefix's whole subtree in one step.
  // A node created for sorted()[i] has first = i even when no token ends
  // at it, so a subtree's tokens are the ranks [first[k], first[end[k]])
  // (to sorted().size() at the end).
  // plain_height[k]: when every path of k's subtree, read from k's own
  // byte on, is plain text — characters that most string-body states treat
  // alike: printable ASCII other than '"' and '\\' (IsPlainByte), or any
  // well-formed multi-byte UTF-8 character, the last one possibly cut
  // short — the subtree's height in bytes (1 for a leaf), else 0 (also
  // past 255). Lets a walk accept such a subtree in one step from a state
  // that every plain character takes to one same state.
  struct Trie {
    std::vector<uint8_t> byte;
    std::vector<int32_t> depth, end, first, count;
    std::vector<uint8_t> plain_height;
    // The same fields packed per node (16 bytes, one cache line per four
    // nodes): a classification jumps from subtree to subtree, and reading
    // six arrays cost six cache misses per trie node it visits.
    struct Packed {
      int32_t end, first, count;
      uint16_t depth;
      uint8_t byte, plain_height;
    };
    std::vector<Packed> packed;
  };
  // The ASCII bytes of plain text.
  static bool IsPlainByte(uint8_t b) { return b >= 0x20 && b <= 0x7E && b != '"' && b != '\\'; }
  // Plain text as a byte automaton: Utf8Step(state, b) is the state after
  // byte b (0: between characters; 1..kUtf8States-1: inside a multi-byte
  // character), or -1 when b cannot come next (not plain, or ill-formed
  // UTF-8: overlong forms, surrogates and code points past U+10FFFF are not
  // characters).
  static constexpr int kUtf8States = 8;
  static int Utf8Step(int state, uint8_t b);
  const Trie& trie() const { return trie_; }
  // The bitmask (mask_words() words) of every non-empty token.
  const std::vector<uint32_t>& text_mask() const { return text_mask_; }
  int32_t max_token_bytes() const { return max_len_; }

 private:
  std::vector<std::string> tokens_;
  std::vector<int32_t> stop_ids_;
  int32_t n_rows_ = 0;
  int32_t max_len_ = 0;
  std::vector<int32_t> sorted_, lcp_, rank_;
  std::vector<uint32_t> text_mask_;
  Trie trie_;
};

struct CompileOptions {
  // Wall time a compilation (parse, automata, first position classes) may
  // take before it is refused with DEADLINE_EXCEEDED... reported as
  // INVALID_ARGUMENT "grammar too complex".
  std::chrono::milliseconds time_limit{2000};
  // Of which classifying string-body positions ahead of the first masks
  // may take at most this much; positions left over are classified when a
  // mask first reaches them (each a walk of the vocabulary, ~1-20 ms).
  std::chrono::milliseconds eager_budget{500};
  // Compiled grammars kept (LRU).
  int32_t cache_entries = 256;
};

namespace internal {
struct Automata;    // matcher.cc
struct ClassCache;  // matcher.cc
}  // namespace internal

class CompiledGrammar {
 public:
  ~CompiledGrammar();
  const Grammar& grammar() const { return grammar_; }
  const Vocabulary& vocab() const { return *vocab_; }
  std::shared_ptr<const Vocabulary> vocab_ptr() const { return vocab_; }
  GrammarKind kind() const { return kind_; }
  // Automaton states over all rules.
  int64_t states() const;
  double compile_ms() const { return compile_ms_; }
  // Subtrees of the vocabulary trie whose walk a classification replayed
  // from an earlier one of this grammar instead of walking (statistics).
  int64_t subtree_walks_replayed() const;

 private:
  friend class GrammarCompiler;
  friend class GrammarMatcher;
  CompiledGrammar() = default;
  Grammar grammar_;
  GrammarKind kind_ = GrammarKind::kGbnf;
  std::shared_ptr<const Vocabulary> vocab_;
  std::unique_ptr<internal::Automata> automata_;
  std::shared_ptr<internal::ClassCache> classes_;
  double compile_ms_ = 0;
};

struct CompilerStats {
  int64_t compiles = 0;    // grammars compiled
  int64_t cache_hits = 0;  // requests answered from the cache
  int64_t refused = 0;     // specs refused (bad input, too complex)
  // Positions classified (shared between grammars), and classifications
  // answered by another grammar's identical position.
  int64_t position_classes = 0;
  int64_t position_hits = 0;
};

class GrammarCompiler {
 public:
  explicit GrammarCompiler(std::shared_ptr<const Vocabulary> vocab, CompileOptions options = {});
  ~GrammarCompiler();

  // Builds (or returns the cached) compiled grammar for `spec`; the
  // front end's INVALID_ARGUMENT errors, or INVALID_ARGUMENT "grammar too
  // complex: ..." past the time or state caps. Thread-safe.
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> Compile(const GrammarSpec& spec);
  // Compiles an already built grammar (no caching).
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompileGrammar(Grammar grammar,
                                                                        GrammarKind kind);
  // The cached compilation of the grammar `build` returns, for callers
  // that build grammars of their own (e.g. a chat request's forced tool
  // call, built from its tools): `key` must identify that grammar and
  // start with a tag of the caller's (GrammarSpec keys start with a kind
  // name followed by '|', e.g. "json_schema|"). `build` runs only on a
  // miss; its errors, like the compiler's, are not cached. Thread-safe.
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompileKeyed(
      const std::string& key, absl::FunctionRef<absl::StatusOr<Grammar>()> build, GrammarKind kind);

  CompilerStats stats() const;
  const Vocabulary& vocab() const { return *vocab_; }

 private:
  std::shared_ptr<const Vocabulary> vocab_;
  CompileOptions options_;
  mutable std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<const CompiledGrammar>>> lru_;
  absl::flat_hash_map<std::string, decltype(lru_)::iterator> index_;
  CompilerStats stats_;
  std::shared_ptr<internal::ClassCache> classes_;
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);
  ~GrammarMatcher();
  GrammarMatcher(const GrammarMatcher&) = delete;
  GrammarMatcher& operator=(const GrammarMatcher&) = delete;

  // Writes vocab().mask_words() words to `mask`. Once terminated, allows
  // nothing but the stop ids.
  void FillNextTokenBitmask(uint32_t* mask);
  // Whether `id` may come next (the bitmask's bit, computed for one token).
  bool IsTokenAllowed(int32_t id);
  // Advances by token `id`: INVALID_ARGUMENT if the grammar does not allow
  // it (nothing changes then). An end-of-generation id, allowed only when
  // complete, terminates the matcher.
  absl::Status AcceptToken(int32_t id);
  // Advances by raw bytes (tests, jump-forward): false and no change if the
  // grammar does not allow them. Counts as one step for Rollback.
  bool AcceptBytes(absl::string_view bytes);
  // Undoes the last n AcceptToken / AcceptBytes calls (n <= steps taken).
  void Rollback(int32_t n);
  // The root rule can end here (end-of-generation tokens are allowed).
  bool IsComplete() const;
  // An end-of-generation token was accepted, or nothing can follow the
  // bytes so far but the end.
  bool IsTerminated() const;
  // The bytes every continuation starts with (up to max_bytes); empty when
  // the next byte is not forced or the grammar may end here. Does not
  // advance.
  std::string JumpForward(int32_t max_bytes = 256);
  // Steps taken (AcceptToken / AcceptBytes calls not rolled back).
  int32_t steps() const;
  const CompiledGrammar& compiled() const { return *grammar_; }

 private:
  struct Impl;
  std::shared_ptr<const CompiledGrammar> grammar_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace minfer::grammar

#endif  // MINFER_ENGINE_GRAMMAR_MATCHER_H_
