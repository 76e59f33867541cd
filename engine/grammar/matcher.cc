#include "engine/grammar/matcher.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <functional>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"

namespace minfer::grammar {

// ---------------------------------------------------------------------------
// Vocabulary

int Vocabulary::Utf8Step(int state, uint8_t b) {
  // States: 0 between characters; 1 one continuation byte left; 2 two
  // left; 3 two left, the next in A0-BF (after E0: no overlong forms); 4
  // two left, the next in 80-9F (after ED: no surrogates); 5 three left; 6
  // three left, the next in 90-BF (after F0); 7 three left, the next in
  // 80-8F (after F4: nothing past U+10FFFF).
  switch (state) {
    case 0:
      if (b < 0x80) return IsPlainByte(b) ? 0 : -1;
      if (b >= 0xC2 && b <= 0xDF) return 1;
      if (b == 0xE0) return 3;
      if (b == 0xED) return 4;
      if (b >= 0xE1 && b <= 0xEF) return 2;
      if (b == 0xF0) return 6;
      if (b >= 0xF1 && b <= 0xF3) return 5;
      if (b == 0xF4) return 7;
      return -1;
    case 1: return b >= 0x80 && b <= 0xBF ? 0 : -1;
    case 2: return b >= 0x80 && b <= 0xBF ? 1 : -1;
    case 3: return b >= 0xA0 && b <= 0xBF ? 1 : -1;
    case 4: return b >= 0x80 && b <= 0x9F ? 1 : -1;
    case 5: return b >= 0x80 && b <= 0xBF ? 2 : -1;
    case 6: return b >= 0x90 && b <= 0xBF ? 2 : -1;
    case 7: return b >= 0x80 && b <= 0x8F ? 2 : -1;
  }
  return -1;
}

std::shared_ptr<const Vocabulary> Vocabulary::Create(std::vector<std::string> tokens,
                                                     std::vector<int32_t> stop_ids,
                                                     int32_t n_rows) {
  auto v = std::shared_ptr<Vocabulary>(new Vocabulary());
  v->n_rows_ = std::max<int32_t>(n_rows, static_cast<int32_t>(tokens.size()));
  v->tokens_ = std::move(tokens);
  std::sort(stop_ids.begin(), stop_ids.end());
  stop_ids.erase(std::unique(stop_ids.begin(), stop_ids.end()), stop_ids.end());
  v->stop_ids_ = std::move(stop_ids);
  const int32_t n = v->size();
  v->rank_.assign(n, -1);
  v->text_mask_.assign(v->mask_words(), 0);
  for (int32_t id = 0; id < n; ++id) {
    // Stop ids never match grammar text even if they render some.
    if (v->tokens_[id].empty() || v->is_stop(id)) continue;
    v->sorted_.push_back(id);
    v->text_mask_[id / 32] |= 1u << (id % 32);
    v->max_len_ = std::max<int32_t>(v->max_len_, static_cast<int32_t>(v->tokens_[id].size()));
  }
  std::sort(v->sorted_.begin(), v->sorted_.end(), [&](int32_t a, int32_t b) {
    return v->tokens_[a] != v->tokens_[b] ? v->tokens_[a] < v->tokens_[b] : a < b;
  });
  v->lcp_.assign(v->sorted_.size(), 0);
  for (size_t i = 0; i < v->sorted_.size(); ++i) {
    v->rank_[v->sorted_[i]] = static_cast<int32_t>(i);
    if (i == 0) continue;
    const std::string& a = v->tokens_[v->sorted_[i - 1]];
    const std::string& b = v->tokens_[v->sorted_[i]];
    size_t k = 0;
    while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
    v->lcp_[i] = static_cast<int32_t>(k);
  }
  // The trie: for each token (in sorted order), close the open nodes deeper
  // than its common prefix with the previous one, open a node per new byte.
  Trie& tr = v->trie_;
  std::vector<int32_t> open;  // open[d - 1]: the node at depth d on the current path
  for (size_t i = 0; i < v->sorted_.size(); ++i) {
    const std::string& t = v->tokens_[v->sorted_[i]];
    const int32_t keep = v->lcp_[i];
    while (static_cast<int32_t>(open.size()) > keep) {
      tr.end[open.back()] = static_cast<int32_t>(tr.byte.size());
      open.pop_back();
    }
    for (size_t d = open.size(); d < t.size(); ++d) {
      open.push_back(static_cast<int32_t>(tr.byte.size()));
      tr.byte.push_back(static_cast<uint8_t>(t[d]));
      tr.depth.push_back(static_cast<int32_t>(d + 1));
      tr.end.push_back(0);
      tr.first.push_back(static_cast<int32_t>(i));
      tr.count.push_back(0);
    }
    const int32_t leaf = open.back();
    if (tr.count[leaf] == 0) tr.first[leaf] = static_cast<int32_t>(i);
    tr.count[leaf]++;
  }
  while (!open.empty()) {
    tr.end[open.back()] = static_cast<int32_t>(tr.byte.size());
    open.pop_back();
  }
  // Heights of plain-text subtrees, children before parents (reverse
  // preorder). ok[k]: the UTF-8 states (Utf8Step) from which every path of
  // k's subtree, read from k's own byte on, stays valid plain text.
  const int32_t nodes = static_cast<int32_t>(tr.byte.size());
  tr.plain_height.assign(nodes, 0);
  std::vector<uint8_t> ok(nodes, 0), height(nodes, 1);
  for (int32_t k = nodes - 1; k >= 0; --k) {
    uint8_t children_ok = 0xFF;  // states every child accepts
    int32_t h = 1;
    for (int32_t c = k + 1; c < tr.end[k]; c = tr.end[c]) {
      children_ok &= ok[c];
      h = std::max<int32_t>(h, 1 + height[c]);
    }
    height[k] = static_cast<uint8_t>(std::min<int32_t>(h, 255));
    uint8_t from = 0;
    for (int u = 0; u < kUtf8States; ++u) {
      const int next = Utf8Step(u, tr.byte[k]);
      if (next >= 0 && (children_ok >> next) & 1) from |= static_cast<uint8_t>(1u << u);
    }
    ok[k] = from;
    if ((from & 1) && h <= 255) tr.plain_height[k] = static_cast<uint8_t>(h);
  }
  tr.packed.resize(nodes);
  for (int32_t k = 0; k < nodes; ++k) {
    tr.packed[k] = {tr.end[k], tr.first[k], tr.count[k], static_cast<uint16_t>(tr.depth[k]),
                    tr.byte[k], tr.plain_height[k]};
  }
  return v;
}

bool Vocabulary::is_stop(int32_t id) const {
  return std::binary_search(stop_ids_.begin(), stop_ids_.end(), id);
}

namespace internal {

// ---------------------------------------------------------------------------
// Automata: every rule's body as an epsilon-free byte automaton. Nodes are
// numbered globally; a node belongs to one rule. Byte edges consume a byte;
// a ref edge calls a rule (push a return to `to`, continue at the callee's
// start); an accepting node may return to the caller.

struct ByteEdge {
  uint8_t lo, hi;
  int32_t to;
};
struct RefEdge {
  int32_t rule;
  int32_t to;
};
struct Node {
  std::vector<ByteEdge> bytes;
  std::vector<RefEdge> refs;
  bool accept = false;
};

// Token classes of one position (node), for the position alone: accepted
// whatever lies below it on the stack, rejected whatever lies below, or
// uncertain (the token runs past the end of the position's rule).
struct Classes {
  // The accepted tokens: as ids when few, else as a bitmask.
  std::vector<int32_t> list;       // token ids, increasing
  std::vector<uint32_t> bitmask;   // mask_words() words, or empty
  std::vector<int32_t> uncertain;  // vocabulary ranks (trie order), increasing
  int64_t accepted = 0;
};

struct Automata {
  std::vector<Node> nodes;
  std::vector<int32_t> node_rule;   // the rule each node belongs to
  std::vector<int32_t> rule_start;
  // Bytes that can follow a completion of each rule, in any context of this
  // grammar (FOLLOW sets): a token returning from the classified position's
  // rule with a next byte outside it dies in every context.
  std::vector<ByteSet> follow;
  std::vector<bool> wide_rule;  // InlineRules' "wide": classified context-free
  // byte_rep[b]: the least byte that every byte edge treats as it treats b
  // (lies in the same edges): a state steps alike on both, so a walk
  // computes one step per class of bytes, not per byte.
  std::array<uint8_t, 256> byte_rep{};
  int32_t root_rule = 0;
  // Unique per automata ever built (never reused, unlike an address): the
  // key of positions too large to share between grammars (PositionKey).
  uint64_t uid = 0;
  // Lazily computed classes per node (null until needed).
  std::unique_ptr<std::atomic<const Classes*>[]> classes;
  // CharTarget's answers per (node, UTF-8 state), kCharTargetUnknown until
  // asked: a property of the automata, shared by every classification (the
  // positions of a bounded string each walk the rest of its chain).
  std::unique_ptr<std::atomic<int32_t>[]> char_target;
  // Classify's walks of whole subtrees of the vocabulary trie's root (a
  // token's first byte), by the state that byte leads to: the positions of
  // one object key (an additional key's exclusion trie: "a", "as", "as_"
  // ...) differ in a few first bytes, and every other first byte leads to
  // one same state (the rest of a key that is none of the names), whose
  // walk over most of the vocabulary is then done once per grammar instead
  // of once per position. Bounded (kMaxSubtreeMemoBytes).
  struct SubtreeWalk {
    std::vector<std::pair<int32_t, int32_t>> runs;  // accepted ranks, [begin, end)
    std::vector<int32_t> uncertain;                 // ranks
    int64_t accepted = 0;
  };
  std::mutex memo_mu;
  absl::flat_hash_map<std::string, std::shared_ptr<const SubtreeWalk>> subtree_memo;
  size_t subtree_memo_bytes = 0;
  std::atomic<int64_t> subtree_replays{0};
  std::mutex mu;
  std::vector<std::shared_ptr<const Classes>> owned;
};

// Automata::char_target before it is computed.
constexpr int32_t kCharTargetUnknown = INT32_MIN;
// Automata::subtree_memo: its memory per grammar at most, and the least
// subtree (trie nodes) worth recording.
constexpr size_t kMaxSubtreeMemoBytes = size_t{16} << 20;
constexpr int32_t kMinMemoSubtree = 64;

struct ClassCache {
  std::mutex mu;
  absl::flat_hash_map<std::pair<uint64_t, uint64_t>, std::shared_ptr<const Classes>> map;
  int64_t hits = 0, misses = 0;
};

namespace {

// Thompson construction of one rule into an epsilon NFA, then epsilon
// removal into `out` nodes.
class RuleBuilder {
 public:
  RuleBuilder(const Grammar& g, int64_t max_states, const std::vector<bool>* inline_rule)
      : g_(g), max_states_(max_states), inline_(inline_rule) {}

  struct ENode {
    std::vector<std::pair<ByteSet, int32_t>> bytes;
    std::vector<RefEdge> refs;
    std::vector<int32_t> eps;
  };

  // Returns false when the state cap is hit.
  bool BuildRule(RuleId rule, std::vector<ENode>* nodes, int32_t* start, int32_t* end) {
    nodes_ = nodes;
    nodes_->clear();
    *start = New();
    *end = Build(g_.rule(rule).body, *start);
    return !over_;
  }

 private:
  int32_t New() {
    if (static_cast<int64_t>(nodes_->size()) >= max_states_) {
      over_ = true;
      return 0;
    }
    nodes_->emplace_back();
    return static_cast<int32_t>(nodes_->size() - 1);
  }
  void Eps(int32_t a, int32_t b) { (*nodes_)[a].eps.push_back(b); }

  int32_t Build(ExprId id, int32_t from) {
    if (over_) return 0;
    const Expr& e = g_.expr(id);
    switch (e.kind) {
      case ExprKind::kEmpty: return from;
      case ExprKind::kNothing: return New();  // unreachable end
      case ExprKind::kBytes: {
        int32_t t = New();
        (*nodes_)[from].bytes.emplace_back(e.bytes, t);
        return t;
      }
      case ExprKind::kLiteral: {
        int32_t cur = from;
        for (unsigned char c : e.literal) {
          int32_t t = New();
          if (over_) return 0;
          ByteSet s;
          s.set(c);
          (*nodes_)[cur].bytes.emplace_back(s, t);
          cur = t;
        }
        return cur;
      }
      case ExprKind::kRef: {
        // Small non-recursive rules are expanded in place: fewer returns
        // into callers means fewer context-dependent tokens (a token that
        // crosses the end of a rule must be checked against the real stack).
        if ((*inline_)[e.rule]) return Build(g_.rule(e.rule).body, from);
        int32_t t = New();
        if (over_) return 0;
        (*nodes_)[from].refs.push_back(RefEdge{e.rule, t});
        return t;
      }
      case ExprKind::kSeq: {
        int32_t cur = from;
        for (ExprId c : e.children) cur = Build(c, cur);
        return cur;
      }
      case ExprKind::kAlt: {
        int32_t end = New();
        for (ExprId c : e.children) {
          int32_t s = New();
          if (over_) return 0;
          Eps(from, s);
          int32_t ce = Build(c, s);
          if (over_) return 0;
          Eps(ce, end);
        }
        return end;
      }
      case ExprKind::kRepeat: {
        int32_t cur = from;
        for (int32_t i = 0; i < e.min; ++i) {
          // A fresh entry node per copy keeps copies from sharing loops.
          int32_t s = New();
          if (over_) return 0;
          Eps(cur, s);
          cur = Build(e.children[0], s);
          if (over_) return 0;
        }
        if (e.max == kUnbounded) {
          int32_t loop = New();
          if (over_) return 0;
          Eps(cur, loop);
          int32_t s = New();
          if (over_) return 0;
          Eps(loop, s);
          int32_t be = Build(e.children[0], s);
          if (over_) return 0;
          Eps(be, loop);
          return loop;
        }
        int32_t end = New();
        if (over_) return 0;
        for (int32_t i = e.min; i < e.max; ++i) {
          Eps(cur, end);
          int32_t s = New();
          if (over_) return 0;
          Eps(cur, s);
          cur = Build(e.children[0], s);
          if (over_) return 0;
        }
        Eps(cur, end);
        return end;
      }
    }
    return from;
  }

  const Grammar& g_;
  int64_t max_states_;
  const std::vector<bool>* inline_;
  std::vector<ENode>* nodes_ = nullptr;
  bool over_ = false;
};

void AddRanges(const ByteSet& set, int32_t to, std::vector<ByteEdge>* out) {
  for (int b = 0; b < 256;) {
    if (!set[b]) {
      ++b;
      continue;
    }
    int e = b;
    while (e + 1 < 256 && set[e + 1]) ++e;
    out->push_back(ByteEdge{static_cast<uint8_t>(b), static_cast<uint8_t>(e), to});
    b = e + 1;
  }
}

// Which rules to expand in place: not recursive (not on a cycle of the call
// graph), not the root, small (<= kInlineExprs expression nodes once their
// own inlined callees are counted), and not "wide" — holding an unbounded
// repetition over a large byte set (a string body): such a rule stays a
// rule of its own, so its positions are the same sub-automaton wherever it
// is used and are classified once for all of them (and for every grammar
// that has the same rule).
constexpr int64_t kInlineExprs = 64;
constexpr int64_t kInlineStarredExprs = 4096;

std::vector<bool> InlineRules(const Grammar& g, std::vector<bool>* wide_out) {
  const int32_t nr = static_cast<int32_t>(g.rules().size());
  std::vector<std::vector<int32_t>> calls(nr);
  std::vector<int64_t> own(nr, 0);
  std::vector<bool> wide(nr, false), big_bytes(nr, false);
  std::vector<std::vector<int32_t>> star_calls(nr);
  for (int32_t r = 0; r < nr; ++r) {
    // Walk the body: refs, size, wide repetitions.
    std::vector<std::pair<ExprId, bool>> stack = {{g.rule(r).body, false}};
    while (!stack.empty()) {
      auto [id, under_star] = stack.back();
      stack.pop_back();
      const Expr& e = g.expr(id);
      own[r]++;
      if (e.kind == ExprKind::kRef) {
        calls[r].push_back(e.rule);
        if (under_star) star_calls[r].push_back(e.rule);
      }
      if (e.kind == ExprKind::kBytes && e.bytes.count() >= 32) {
        big_bytes[r] = true;
        if (under_star) wide[r] = true;
      }
      // Repeated: unbounded, or bounded above 1 (a string's {m,n} characters
      // repeat the character rule just the same).
      const bool star = under_star || (e.kind == ExprKind::kRepeat &&
                                       (e.max == kUnbounded || e.max > 1));
      for (ExprId c : e.children) stack.push_back({c, star});
    }
  }
  // Tarjan's SCCs (iterative) to find recursive rules.
  std::vector<int32_t> index(nr, -1), low(nr, 0), comp(nr, -1);
  std::vector<bool> on(nr, false);
  std::vector<int32_t> st;
  int32_t counter = 0, ncomp = 0;
  std::vector<int32_t> comp_size;
  for (int32_t s0 = 0; s0 < nr; ++s0) {
    if (index[s0] >= 0) continue;
    std::vector<std::pair<int32_t, size_t>> dfs = {{s0, 0}};
    index[s0] = low[s0] = counter++;
    st.push_back(s0);
    on[s0] = true;
    while (!dfs.empty()) {
      auto& [v, i] = dfs.back();
      if (i < calls[v].size()) {
        const int32_t w = calls[v][i++];
        if (index[w] < 0) {
          index[w] = low[w] = counter++;
          st.push_back(w);
          on[w] = true;
          dfs.emplace_back(w, 0);
        } else if (on[w]) {
          low[v] = std::min(low[v], index[w]);
        }
        continue;
      }
      if (low[v] == index[v]) {
        int32_t size = 0;
        while (true) {
          const int32_t w = st.back();
          st.pop_back();
          on[w] = false;
          comp[w] = ncomp;
          ++size;
          if (w == v) break;
        }
        comp_size.push_back(size);
        ++ncomp;
      }
      const int32_t done = v;
      dfs.pop_back();
      if (!dfs.empty()) low[dfs.back().first] = std::min(low[dfs.back().first], low[done]);
    }
  }
  std::vector<bool> recursive(nr, false);
  for (int32_t r = 0; r < nr; ++r) {
    recursive[r] = comp_size[comp[r]] > 1 ||
                   std::find(calls[r].begin(), calls[r].end(), r) != calls[r].end();
  }
  // A rule repeating (unboundedly) a callee that holds a large byte set,
  // directly or through its own callees, is wide too: `string ::= "\""
  // char* "\""` with `char ::= [^"\\] | ...`. The search stops at rules
  // that are wide themselves: an array of strings repeats the string rule,
  // but its own positions are structural (a quote, a comma, a bracket),
  // and classifying every one of them, and of every object holding such an
  // array, up front would walk the vocabulary for nothing. Callees are
  // decided first (memoized; a cycle's provisional answer is its direct one).
  std::vector<int8_t> wide_memo(nr, -1), holds(nr, -1);
  std::function<bool(int32_t)> is_wide;
  std::function<bool(int32_t)> holds_big = [&](int32_t r) -> bool {
    if (holds[r] >= 0) return holds[r] == 1;
    // Only a rule of bytes counts (a character: `char ::= [^"\\] | escape`,
    // calling at most small leaves such as a hex digit); a member of an
    // object holds a key's byte sets too, but repeating members makes an
    // object body, whose positions are structural.
    const bool char_like =
        big_bytes[r] && std::all_of(calls[r].begin(), calls[r].end(), [&](int32_t c) {
          return calls[c].empty() && own[c] <= kInlineExprs;
        });
    holds[r] = char_like ? 1 : 0;  // provisional for cycles
    bool h = char_like;
    for (int32_t c : calls[r]) h = h || (!is_wide(c) && holds_big(c));
    holds[r] = h ? 1 : 0;
    return h;
  };
  is_wide = [&](int32_t r) -> bool {
    if (wide_memo[r] >= 0) return wide_memo[r] == 1;
    wide_memo[r] = wide[r] ? 1 : 0;  // provisional for cycles
    bool w = wide[r];
    for (int32_t c : star_calls[r]) w = w || (!recursive[c] && !is_wide(c) && holds_big(c));
    wide_memo[r] = w ? 1 : 0;
    return w;
  };
  for (int32_t r = 0; r < nr; ++r) is_wide(r);
  for (int32_t r = 0; r < nr; ++r) wide[r] = wide_memo[r] == 1;
  // Inlined size, callees first (non-recursive rules form a DAG).
  std::vector<int64_t> size(nr, -1);
  std::vector<bool> out(nr, false);
  std::function<int64_t(int32_t)> sized = [&](int32_t r) -> int64_t {
    if (size[r] >= 0) return size[r];
    size[r] = own[r];  // provisional (cycles are recursive: not inlined)
    int64_t total = own[r];
    for (int32_t c : calls[r]) {
      if (!recursive[c] && !wide[c] && c != r) {
        const int64_t cs = sized(c);
        if (cs <= kInlineStarredExprs) total += cs;
      }
    }
    size[r] = total;
    return total;
  };
  // A rule repeated without bound (a string's character) is inlined even
  // when larger: left a rule, every token longer than one repetition would
  // cross its end, i.e. be context-dependent at every position inside.
  std::vector<bool> starred(nr, false);
  for (int32_t r = 0; r < nr; ++r) {
    for (int32_t c : star_calls[r]) starred[c] = true;
  }
  for (int32_t r = 0; r < nr; ++r) {
    const int64_t limit = starred[r] ? kInlineStarredExprs : kInlineExprs;
    out[r] = !recursive[r] && !wide[r] && r != g.root() && !g.rule(r).no_inline &&
             sized(r) <= limit;
  }
  *wide_out = wide;
  return out;
}

// Merges nodes that behave the same (same acceptance, same edges to the same
// targets), repeatedly, as merges make more nodes equal: identical positions
// (e.g. "after any character of a string body", reached through each UTF-8
// length) become one node, classified once. Node 0 (the start) stays 0.
void MergeEquivalent(std::vector<Node>* nodes) {
  const int32_t n = static_cast<int32_t>(nodes->size());
  std::vector<int32_t> rep(n);
  for (int32_t i = 0; i < n; ++i) rep[i] = i;
  auto find = [&](int32_t x) {
    while (rep[x] != x) x = rep[x];
    return x;
  };
  auto normalize = [&](Node& nd) {
    std::vector<std::pair<int32_t, ByteSet>> by_target;
    for (const ByteEdge& e : nd.bytes) {
      const int32_t t = find(e.to);
      auto it = std::find_if(by_target.begin(), by_target.end(),
                             [&](const auto& p) { return p.first == t; });
      if (it == by_target.end()) it = by_target.insert(by_target.end(), {t, ByteSet()});
      for (int b = e.lo; b <= e.hi; ++b) it->second.set(b);
    }
    nd.bytes.clear();
    for (const auto& [t, set] : by_target) AddRanges(set, t, &nd.bytes);
    std::sort(nd.bytes.begin(), nd.bytes.end(), [](const ByteEdge& x, const ByteEdge& y) {
      return x.lo != y.lo ? x.lo < y.lo : x.to < y.to;
    });
    for (RefEdge& e : nd.refs) e.to = find(e.to);
    std::sort(nd.refs.begin(), nd.refs.end(), [](const RefEdge& x, const RefEdge& y) {
      return x.rule != y.rule ? x.rule < y.rule : x.to < y.to;
    });
    nd.refs.erase(std::unique(nd.refs.begin(), nd.refs.end(),
                              [](const RefEdge& x, const RefEdge& y) {
                                return x.rule == y.rule && x.to == y.to;
                              }),
                  nd.refs.end());
  };
  // Successors before predecessors (a post-order of the edges' targets):
  // one pass then merges a whole acyclic tail — a chain of N string
  // positions bounded by maxLength merges in one pass, where index order
  // would take N passes over every node. Further passes only pick up what
  // back edges (cycles) hid.
  std::vector<int32_t> order;
  order.reserve(n);
  {
    std::vector<uint8_t> state(n, 0);  // 0 new, 1 open, 2 done
    std::vector<std::pair<int32_t, size_t>> dfs;
    for (int32_t s0 = 0; s0 < n; ++s0) {
      if (state[s0] != 0) continue;
      state[s0] = 1;
      dfs.emplace_back(s0, 0);
      while (!dfs.empty()) {
        auto& [v, k] = dfs.back();
        const Node& nd = (*nodes)[v];
        const size_t nb = nd.bytes.size();
        if (k < nb + nd.refs.size()) {
          const int32_t w = k < nb ? nd.bytes[k].to : nd.refs[k - nb].to;
          ++k;
          if (state[w] == 0) {
            state[w] = 1;
            dfs.emplace_back(w, 0);
          }
          continue;
        }
        state[v] = 2;
        order.push_back(v);
        dfs.pop_back();
      }
    }
  }
  for (bool changed = true; changed;) {
    changed = false;
    absl::flat_hash_map<std::string, int32_t> seen;
    for (const int32_t i : order) {
      if (rep[i] != i) continue;
      Node& nd = (*nodes)[i];
      normalize(nd);
      std::string sig(1, nd.accept ? 'A' : 'N');
      for (const ByteEdge& e : nd.bytes) {
        sig.push_back(static_cast<char>(e.lo));
        sig.push_back(static_cast<char>(e.hi));
        sig.append(reinterpret_cast<const char*>(&e.to), sizeof(e.to));
      }
      sig.push_back('|');
      for (const RefEdge& e : nd.refs) {
        sig.append(reinterpret_cast<const char*>(&e.rule), sizeof(e.rule));
        sig.append(reinterpret_cast<const char*>(&e.to), sizeof(e.to));
      }
      auto [it, inserted] = seen.try_emplace(sig, i);
      if (!inserted) {
        if (i == 0) {  // the start keeps its index
          rep[it->second] = 0;
          it->second = 0;
        } else {
          rep[i] = it->second;
        }
        changed = true;
      }
    }
    // Path compression: representatives of representatives.
    for (int32_t i = 0; i < n; ++i) {
      int32_t r = rep[i];
      while (rep[r] != r) r = rep[r];
      rep[i] = r;
    }
  }
  std::vector<int32_t> id(n, -1);
  std::vector<Node> out;
  for (int32_t i = 0; i < n; ++i) {
    if (rep[i] == i) {
      id[i] = static_cast<int32_t>(out.size());
      out.push_back(std::move((*nodes)[i]));
    }
  }
  for (Node& nd : out) {
    for (ByteEdge& e : nd.bytes) e.to = id[rep[e.to]];
    for (RefEdge& e : nd.refs) e.to = id[rep[e.to]];
  }
  *nodes = std::move(out);
}

// FIRST / nullable per node and FOLLOW per rule, by fixpoint over the
// epsilon-free automata.
void ComputeFollow(Automata* a) {
  const size_t nn = a->nodes.size(), nr = a->rule_start.size();
  std::vector<ByteSet> first(nn);
  std::vector<bool> nullable(nn, false);
  auto rule_nullable = [&](int32_t r) { return a->rule_start[r] >= 0 && nullable[a->rule_start[r]]; };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t x = 0; x < nn; ++x) {
      const Node& nd = a->nodes[x];
      ByteSet f = first[x];
      bool nl = nullable[x] || nd.accept;
      for (const ByteEdge& e : nd.bytes) {
        for (int b = e.lo; b <= e.hi; ++b) f.set(b);
      }
      for (const RefEdge& re : nd.refs) {
        if (a->rule_start[re.rule] < 0) continue;
        f |= first[a->rule_start[re.rule]];
        if (rule_nullable(re.rule)) {
          f |= first[re.to];
          nl = nl || nullable[re.to];
        }
      }
      if (f != first[x] || nl != nullable[x]) {
        first[x] = f;
        nullable[x] = nl;
        changed = true;
      }
    }
  }
  a->follow.assign(nr, ByteSet());
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t x = 0; x < nn; ++x) {
      const int32_t p = a->node_rule[x];
      for (const RefEdge& re : a->nodes[x].refs) {
        ByteSet f = a->follow[re.rule] | first[re.to];
        if (nullable[re.to]) f |= a->follow[p];
        if (f != a->follow[re.rule]) {
          a->follow[re.rule] = f;
          changed = true;
        }
      }
    }
  }
}

}  // namespace

absl::Status BuildAutomata(const Grammar& g, Automata* a,
                           std::chrono::steady_clock::time_point deadline) {
  const int64_t max_states = g.limits().max_states;
  static std::atomic<uint64_t> next_uid{1};
  a->uid = next_uid.fetch_add(1, std::memory_order_relaxed);
  a->rule_start.assign(g.rules().size(), -1);
  a->root_rule = g.root();
  std::vector<bool> wide;
  const std::vector<bool> inline_rule = InlineRules(g, &wide);
  RuleBuilder rb(g, max_states, &inline_rule);
  std::vector<RuleBuilder::ENode> en;
  std::vector<int32_t> closure_mark;
  std::vector<int32_t> stack, closure;
  for (RuleId r = 0; r < static_cast<RuleId>(g.rules().size()); ++r) {
    if (inline_rule[r]) continue;  // expanded wherever it is used
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::InvalidArgumentError("grammar too complex: compilation exceeded its time limit");
    }
    int32_t start = 0, end = 0;
    if (!rb.BuildRule(r, &en, &start, &end) ||
        static_cast<int64_t>(a->nodes.size() + en.size()) > max_states) {
      return absl::InvalidArgumentError(absl::StrCat(
          "grammar too complex: more than ", max_states, " automaton states (rule '",
          g.rule(r).name, "')"));
    }
    // Epsilon removal. Kept nodes: the start and every target of a byte or
    // ref edge. Each kept node gets the edges of its epsilon closure.
    const int32_t n = static_cast<int32_t>(en.size());
    std::vector<int32_t> keep(n, -1);
    std::vector<int32_t> order = {start};
    keep[start] = 0;
    closure_mark.assign(n, -1);
    std::vector<Node> out;
    for (size_t qi = 0; qi < order.size(); ++qi) {
      const int32_t s = order[qi];
      // Closure of s.
      closure.clear();
      stack = {s};
      closure_mark[s] = s;
      while (!stack.empty()) {
        int32_t x = stack.back();
        stack.pop_back();
        closure.push_back(x);
        for (int32_t y : en[x].eps) {
          if (closure_mark[y] != s) {
            closure_mark[y] = s;
            stack.push_back(y);
          }
        }
      }
      std::sort(closure.begin(), closure.end());
      Node node;
      // Merge byte sets per target first, for fewer edges.
      std::vector<std::pair<int32_t, ByteSet>> by_target;
      for (int32_t x : closure) {
        if (x == end) node.accept = true;
        for (const auto& [set, to] : en[x].bytes) {
          auto it = std::find_if(by_target.begin(), by_target.end(),
                                 [&](const auto& p) { return p.first == to; });
          if (it == by_target.end()) {
            by_target.emplace_back(to, set);
          } else {
            it->second |= set;
          }
        }
        for (const RefEdge& re : en[x].refs) node.refs.push_back(re);
      }
      for (auto& [to, set] : by_target) {
        if (keep[to] < 0) {
          keep[to] = static_cast<int32_t>(order.size());
          order.push_back(to);
        }
        AddRanges(set, to, &node.bytes);
      }
      for (RefEdge& re : node.refs) {
        if (keep[re.to] < 0) {
          keep[re.to] = static_cast<int32_t>(order.size());
          order.push_back(re.to);
        }
      }
      out.push_back(std::move(node));
    }
    for (Node& node : out) {
      for (ByteEdge& e : node.bytes) e.to = keep[e.to];
      for (RefEdge& e : node.refs) e.to = keep[e.to];
    }
    MergeEquivalent(&out);
    // Renumber targets to global ids.
    const int32_t base = static_cast<int32_t>(a->nodes.size());
    for (Node& node : out) {
      for (ByteEdge& e : node.bytes) e.to = base + e.to;
      std::sort(node.bytes.begin(), node.bytes.end(), [](const ByteEdge& x, const ByteEdge& y) {
        return x.lo != y.lo ? x.lo < y.lo : x.to < y.to;
      });
      for (RefEdge& e : node.refs) e.to = base + e.to;
      // Duplicate ref edges (same rule, same target) add nothing.
      std::sort(node.refs.begin(), node.refs.end(), [](const RefEdge& x, const RefEdge& y) {
        return x.rule != y.rule ? x.rule < y.rule : x.to < y.to;
      });
      node.refs.erase(std::unique(node.refs.begin(), node.refs.end(),
                                  [](const RefEdge& x, const RefEdge& y) {
                                    return x.rule == y.rule && x.to == y.to;
                                  }),
                      node.refs.end());
      a->nodes.push_back(std::move(node));
    }
    a->rule_start[r] = base;
    a->node_rule.resize(a->nodes.size(), r);
  }
  // Drop what can never complete (a branch into an impossible value, say
  // `"items": false` after prefix items): otherwise a path could enter it
  // and the matcher would allow no token there (a dead end).
  {
    const size_t nn = a->nodes.size();
    std::vector<bool> live(nn, false);
    auto productive = [&](int32_t r) { return a->rule_start[r] >= 0 && live[a->rule_start[r]]; };
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t x = 0; x < nn; ++x) {
        if (live[x]) continue;
        const Node& nd = a->nodes[x];
        bool l = nd.accept;
        for (const ByteEdge& e : nd.bytes) l = l || live[e.to];
        for (const RefEdge& re : nd.refs) l = l || (productive(re.rule) && live[re.to]);
        if (l) {
          live[x] = true;
          changed = true;
        }
      }
    }
    if (!productive(a->root_rule)) {
      return absl::InvalidArgumentError(
          "the grammar matches nothing (no value satisfies it)");
    }
    for (Node& nd : a->nodes) {
      nd.bytes.erase(std::remove_if(nd.bytes.begin(), nd.bytes.end(),
                                    [&](const ByteEdge& e) { return !live[e.to]; }),
                     nd.bytes.end());
      nd.refs.erase(std::remove_if(nd.refs.begin(), nd.refs.end(),
                                   [&](const RefEdge& e) {
                                     return !productive(e.rule) || !live[e.to];
                                   }),
                    nd.refs.end());
    }
  }
  ComputeFollow(a);
  // A wide rule's positions are classified without its FOLLOW set (any
  // byte may follow): they cost a walk of most of the vocabulary, and this
  // way they are the same classes in every grammar that has the rule.
  a->wide_rule = wide;
  for (size_t r = 0; r < a->follow.size(); ++r) {
    if (a->wide_rule[r]) a->follow[r].set();
  }
  {
    std::array<bool, 257> cut{};
    cut[0] = true;
    for (const Node& nd : a->nodes) {
      for (const ByteEdge& e : nd.bytes) {
        cut[e.lo] = true;
        cut[e.hi + 1] = true;
      }
    }
    for (int b = 0; b < 256; ++b) a->byte_rep[b] = cut[b] ? b : a->byte_rep[b - 1];
  }
  a->classes.reset(new std::atomic<const Classes*>[a->nodes.size()]);
  for (size_t i = 0; i < a->nodes.size(); ++i) a->classes[i].store(nullptr);
  const size_t n_targets = a->nodes.size() * Vocabulary::kUtf8States;
  a->char_target.reset(new std::atomic<int32_t>[n_targets]);
  for (size_t i = 0; i < n_targets; ++i) a->char_target[i].store(kCharTargetUnknown);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Stacks: frames (node, parent frame) interned in an arena, so a stack is one
// id and equal stacks are equal ids. Parent -1: the bottom (the root rule's
// caller: returning there completes the grammar); -2: unknown (a position
// classified alone: returning there needs the context).

constexpr int32_t kRoot = -1;
constexpr int32_t kUnknown = -2;

struct Frame {
  int32_t node;
  int32_t parent;
};

class Arena {
 public:
  int32_t Intern(int32_t node, int32_t parent) {
    const uint64_t key = Key(node, parent);
    auto [it, inserted] = index_.try_emplace(key, static_cast<int32_t>(frames_.size()));
    if (inserted) frames_.push_back(Frame{node, parent});
    return it->second;
  }
  const Frame& frame(int32_t id) const { return frames_[id]; }
  size_t size() const { return frames_.size(); }
  // Frames interned after `mark` are dropped (scratch work of a mask).
  void Release(size_t mark) {
    for (size_t i = mark; i < frames_.size(); ++i) index_.erase(Key(frames_[i].node, frames_[i].parent));
    frames_.resize(mark);
  }

 private:
  static uint64_t Key(int32_t node, int32_t parent) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(node)) << 32) |
           static_cast<uint32_t>(parent);
  }
  std::vector<Frame> frames_;
  absl::flat_hash_map<uint64_t, int32_t> index_;
};

struct State {
  std::vector<int32_t> frames;  // ready frames (their node has byte edges), sorted
  bool can_end = false;         // the root rule may end here
  bool needs_parent = false;    // a path returned into the unknown parent
  bool terminated = false;      // an end token was accepted
  void Clear() {
    frames.clear();
    can_end = needs_parent = terminated = false;
  }
};

// Steps states over bytes. Not thread-safe (scratch members).
class Stepper {
 public:
  Stepper(const Automata& a, Arena* arena) : a_(a), arena_(arena) {}

  // Adds the closure of "at `node`, returning to `parent`" to `out`.
  void Close(int32_t node, int32_t parent, State* out) {
    {
      // Fast path: a node that neither calls nor returns only becomes a
      // frame (duplicates are removed by Normalize).
      const Node& nd = a_.nodes[node];
      if (nd.refs.empty() && !nd.accept) {
        if (!nd.bytes.empty()) out->frames.push_back(arena_->Intern(node, parent));
        return;
      }
    }
    work_.clear();
    work_.push_back({node, parent});
    while (!work_.empty()) {
      auto [n, p] = work_.back();
      work_.pop_back();
      if (!visited_.insert((static_cast<uint64_t>(static_cast<uint32_t>(n)) << 32) |
                           static_cast<uint32_t>(p))
               .second) {
        continue;
      }
      const Node& nd = a_.nodes[n];
      if (!nd.bytes.empty()) out->frames.push_back(arena_->Intern(n, p));
      for (const RefEdge& re : nd.refs) {
        const int32_t ret = arena_->Intern(re.to, p);
        work_.push_back({a_.rule_start[re.rule], ret});
      }
      if (nd.accept) {
        if (p == kRoot) {
          out->can_end = true;
        } else if (p == kUnknown) {
          out->needs_parent = true;
        } else {
          const Frame f = arena_->frame(p);
          work_.push_back({f.node, f.parent});
        }
      }
    }
  }

  void Start(int32_t node, int32_t parent, State* out) {
    out->Clear();
    visited_.clear();
    Close(node, parent, out);
    Normalize(out);
  }

  // out = in advanced by byte b.
  void Advance(const State& in, uint8_t b, State* out) {
    out->Clear();
    visited_.clear();
    for (int32_t fid : in.frames) {
      const Frame f = arena_->frame(fid);
      for (const ByteEdge& e : a_.nodes[f.node].bytes) {
        if (e.lo > b) break;  // sorted by lo
        if (b <= e.hi) Close(e.to, f.parent, out);
      }
    }
    Normalize(out);
  }

  // Advances over `bytes`; false as soon as nothing is alive.
  bool AdvanceAll(State* s, absl::string_view bytes) {
    for (unsigned char c : bytes) {
      if (s->frames.empty()) return false;
      Advance(*s, c, &tmp_);
      std::swap(*s, tmp_);
      if (s->frames.empty() && !s->can_end) return false;
    }
    return true;
  }

  Arena& arena() { return *arena_; }

 private:
  static void Normalize(State* s) {
    std::sort(s->frames.begin(), s->frames.end());
    s->frames.erase(std::unique(s->frames.begin(), s->frames.end()), s->frames.end());
  }
  const Automata& a_;
  Arena* arena_;
  std::vector<std::pair<int32_t, int32_t>> work_;
  absl::flat_hash_set<uint64_t> visited_;
  State tmp_;
};

namespace {

// A canonical key of the sub-automaton reachable from `node` (byte edges,
// ref targets and callees), numbered in BFS order: two positions with equal
// keys have equal classes, whatever grammar they come from.
// A position reaching more than kMaxKeyNodes nodes (a structural position
// of a large schema, reaching most of it through its callees) is keyed by
// its automata and node alone: hashing its reach would make every new
// position cost the size of the grammar, and such positions are only ever
// equal in the same grammar anyway.
constexpr size_t kMaxKeyNodes = 2048;

std::pair<uint64_t, uint64_t> PositionKey(const Automata& a, int32_t node, int32_t max_depth) {
  // Nodes are numbered in discovery order; dist is the fewest bytes from
  // `node` (0-1 BFS: a ref edge enters its callee, or skips past it, at the
  // same depth, a byte edge costs one). Only nodes closer than max_depth
  // (the longest token) are expanded: no token reads further, so positions
  // that agree up to that depth have the same classes — e.g. every position
  // of a string bounded by maxLength 1024 that is still 128 bytes or more
  // from its bound shares one entry instead of classifying each.
  // local[n]: node n's number here (-1: not reached). A scratch array per
  // thread, sized to the largest automata seen and reset through `order`,
  // so a key costs its reach, not a hash map's (this runs once per position
  // a grammar reaches, many of them on the engine's mask thread).
  thread_local std::vector<int32_t> local;
  if (local.size() < a.nodes.size()) local.resize(a.nodes.size(), -1);
  std::vector<int32_t> order = {node};
  std::vector<int32_t> dist = {0};
  order.reserve(256);
  dist.reserve(256);
  local[node] = 0;
  struct Reset {
    const std::vector<int32_t>& order;
    ~Reset() {
      for (int32_t n : order) local[n] = -1;
    }
  } reset{order};
  std::deque<int32_t> queue = {0};
  auto reach = [&](int32_t n, int32_t d, bool front) {
    int32_t id = local[n];
    if (id < 0) {
      id = static_cast<int32_t>(order.size());
      local[n] = id;
      order.push_back(n);
      dist.push_back(d);
    } else if (d < dist[id]) {
      dist[id] = d;
    } else {
      return id;
    }
    if (front) {
      queue.push_front(id);
    } else {
      queue.push_back(id);
    }
    return id;
  };
  while (!queue.empty()) {
    if (order.size() > kMaxKeyNodes) {
      // Tagged (top bit of both words) for GetClasses, which keeps such
      // classes with the automata instead of the shared cache.
      return {a.uid | (uint64_t{1} << 63), static_cast<uint64_t>(node) | (uint64_t{1} << 63)};
    }
    const int32_t i = queue.front();
    queue.pop_front();
    const int32_t d = dist[i];
    if (d >= max_depth) continue;
    const Node& nd = a.nodes[order[i]];
    for (const ByteEdge& e : nd.bytes) reach(e.to, d + 1, false);
    for (const RefEdge& e : nd.refs) {
      reach(a.rule_start[e.rule], d, true);
      reach(e.to, d, true);
    }
  }
  // The canonical form, in discovery order (which depends on the structure
  // alone): acceptance, and the edges of every node expanded.
  std::string canon;
  canon.reserve(order.size() * 16);
  for (size_t i = 0; i < order.size(); ++i) {
    const Node& nd = a.nodes[order[i]];
    canon.push_back(nd.accept ? 'A' : 'N');
    if (dist[i] >= max_depth) {
      canon.push_back(';');
      continue;
    }
    for (const ByteEdge& e : nd.bytes) {
      const int32_t t = local[e.to];
      canon.push_back(static_cast<char>(e.lo));
      canon.push_back(static_cast<char>(e.hi));
      canon.append(reinterpret_cast<const char*>(&t), sizeof(t));
    }
    canon.push_back('|');
    for (const RefEdge& e : nd.refs) {
      const int32_t s = local[a.rule_start[e.rule]];
      const int32_t t = local[e.to];
      canon.append(reinterpret_cast<const char*>(&s), sizeof(s));
      canon.append(reinterpret_cast<const char*>(&t), sizeof(t));
    }
    canon.push_back(';');
  }
  // The classes also depend on what may follow the position's rule.
  const ByteSet& f = a.follow[a.node_rule[node]];
  for (int w = 0; w < 256; w += 8) {
    uint8_t byte = 0;
    for (int b = 0; b < 8; ++b) byte |= static_cast<uint8_t>(f[w + b]) << b;
    canon.push_back(static_cast<char>(byte));
  }
  const uint64_t h1 = absl::HashOf(canon);
  const uint64_t h2 = std::hash<std::string>()(canon) ^ (static_cast<uint64_t>(canon.size()) << 1);
  return {h1, h2};
}

}  // namespace

// The node every plain character (Vocabulary::Utf8Step: printable ASCII but
// '"' and '\\', or a well-formed multi-byte UTF-8 character) leads to from
// node `n` in UTF-8 state `u`, from its edges alone (no stepper call): -1
// when none leads anywhere; -2 when characters differ, or a multi-byte one
// passes a node that calls, returns or splits. A state whose frames are all
// such nodes steps alike on every plain character — one step, where
// Classify's general check steps each class of bytes (a bounded string's
// chain near its bound is a new state per character). Memoized in the
// automata (races only compute the same answer twice).
int32_t CharTarget(const Automata& a, int32_t n, int u) {
  std::atomic<int32_t>& memo = a.char_target[static_cast<size_t>(n) * Vocabulary::kUtf8States + u];
  if (const int32_t m = memo.load(std::memory_order_relaxed); m != kCharTargetUnknown) return m;
  const Node& nd = a.nodes[n];
  int32_t target = -3;
  bool any = false, none = false;
  if (u != 0 && (!nd.refs.empty() || nd.accept)) target = -2;
  for (int b = 0x20; b < 0x100 && target != -2; ++b) {
    const int u2 = Vocabulary::Utf8Step(u, static_cast<uint8_t>(b));
    if (u2 < 0) continue;
    int32_t only = -1;
    for (const ByteEdge& e : nd.bytes) {
      if (e.lo > b) break;
      if (b > e.hi || e.to == only) continue;
      only = only == -1 ? e.to : -2;
    }
    if (only == -2 || (only == -1 && u != 0)) {
      target = -2;
      break;
    }
    if (only == -1) {
      none = true;
      continue;
    }
    any = true;
    const int32_t end = u2 == 0 ? only : CharTarget(a, only, u2);
    if (end < 0 || (target >= 0 && end != target)) {
      target = -2;
      break;
    }
    target = end;
  }
  if (target != -2) target = any && none ? -2 : any ? target : -1;
  memo.store(target, std::memory_order_relaxed);
  return target;
}

// Classifies every token of `vocab` at `node` alone (see Classes): a
// depth-first walk of the vocabulary trie, one Advance per trie node whose
// prefix is alive; a dead prefix's subtree is skipped in one step (or, when
// some path of the prefix returned into the unknown caller, its tokens are
// all uncertain).
std::shared_ptr<const Classes> Classify(const Automata& a, const Vocabulary& vocab, int32_t node) {
  Arena arena;
  Stepper st(a, &arena);
  const Vocabulary::Trie& tr = vocab.trie();
  const int32_t maxlen = vocab.max_token_bytes();
  // The walk runs over a lazily built DFA: the states met are interned
  // (sorted frames + flags), and each (state, byte) step is computed once.
  // Most trie nodes of a position lead to a handful of states (inside a
  // string body every character leads back to the same one), so the walk
  // costs a table lookup per trie node instead of a stepper call — the
  // first mask at a position (its p99) is this walk over ~330k trie nodes.
  // The loop reads only the compact per-state flags and the table, and
  // records accepted tokens as runs of ranks, turned into ids at the end.
  constexpr uint8_t kHasFrames = 1, kNeedsParent = 2;
  std::vector<State> dstates;
  std::vector<uint8_t> dflags;
  std::vector<int32_t> table;  // 256 per state below kMaxTableStates; -1: not computed
  absl::flat_hash_map<std::string, int32_t> dindex;
  std::string keybuf;
  // Bounds the table's memory (1 KiB per state): steps from states past
  // it are computed each time (still correct, only slower).
  constexpr int32_t kMaxTableStates = 8192;
  auto intern = [&](State&& s) {
    keybuf.assign(reinterpret_cast<const char*>(s.frames.data()), s.frames.size() * sizeof(int32_t));
    keybuf.push_back(static_cast<char>(s.can_end | (s.needs_parent << 1)));
    auto [it, inserted] = dindex.try_emplace(keybuf, static_cast<int32_t>(dstates.size()));
    if (inserted) {
      dflags.push_back(static_cast<uint8_t>((s.frames.empty() ? 0 : kHasFrames) |
                                            (s.needs_parent ? kNeedsParent : 0)));
      dstates.push_back(std::move(s));
      if (static_cast<int32_t>(dstates.size()) <= kMaxTableStates) table.resize(dstates.size() * 256, -1);
    }
    return it->second;
  };
  State scratch;
  auto step = [&](int32_t sid, uint8_t b) {
    const bool tabled = sid < kMaxTableStates;
    const size_t row = static_cast<size_t>(sid) * 256;
    if (tabled) {
      const int32_t t = table[row + b];
      if (t >= 0) return t;
    }
    // Bytes of one class (Automata::byte_rep) step alike: one Advance per
    // class (a multi-byte character's bytes fall in a handful of them).
    const uint8_t r = a.byte_rep[b];
    int32_t next = tabled && r != b ? table[row + r] : -1;
    if (next < 0) {
      st.Advance(dstates[sid], r, &scratch);
      next = intern(std::move(scratch));
      scratch = State();
      if (tabled) table[row + r] = next;
    }
    if (tabled) table[row + b] = next;
    return next;
  };
  // Plain subtrees (Trie::plain_height). A state is "uniform" when every
  // plain character (Vocabulary::Utf8Step: printable ASCII but '"' and '\\',
  // or a well-formed multi-byte UTF-8 character) steps it to one same
  // state, through states that keep frames inside a multi-byte character.
  // From a state whose uniform chain keeps frames for h steps, every token
  // of a plain subtree of height <= h bytes (so of at most h characters) is
  // alive at its end, even cut inside a character: accepted, without
  // walking it. Inside a string body (and a bounded one far enough from its
  // bound) most of the vocabulary, CJK and other scripts included, goes in
  // a few such steps.
  std::vector<int32_t> unext;  // per state: -1 unknown, -2 not uniform, else the next state
  std::vector<std::pair<int32_t, int>> todo, seen;  // (state, UTF-8 state) inside a character
  // A state whose frames all have a CharTarget steps alike on every plain
  // character: one step instead of the general check below.
  auto uniform_next = [&](int32_t sid) {
    if (static_cast<size_t>(sid) >= unext.size()) unext.resize(dstates.size(), -1);
    if (unext[sid] != -1) return unext[sid];
    {
      bool simple = true, alive = false;
      for (int32_t fid : dstates[sid].frames) {
        const int32_t t = CharTarget(a, arena.frame(fid).node, 0);
        simple = simple && t != -2;
        alive = alive || t >= 0;
      }
      if (simple) {
        const int32_t nx = alive ? step(sid, 'a') : -2;
        if (static_cast<size_t>(sid) >= unext.size()) unext.resize(dstates.size(), -1);
        unext[sid] = nx;
        return nx;
      }
    }
    int32_t nx = -1;
    bool uniform = true;
    todo.assign(1, {sid, 0});
    seen = todo;
    while (uniform && !todo.empty()) {
      const auto [s, u] = todo.back();
      todo.pop_back();
      for (int b = 0x20; b < 0x100 && uniform; ++b) {
        const int u2 = Vocabulary::Utf8Step(u, static_cast<uint8_t>(b));
        if (u2 < 0) continue;
        const int32_t t = step(s, static_cast<uint8_t>(b));
        if (u2 == 0) {
          if (nx == -1) nx = t;
          uniform = t == nx;
        } else if (!(dflags[t] & kHasFrames)) {
          uniform = false;
        } else if (std::find(seen.begin(), seen.end(), std::make_pair(t, u2)) == seen.end()) {
          seen.emplace_back(t, u2);
          todo.emplace_back(t, u2);
        }
      }
    }
    if (static_cast<size_t>(sid) >= unext.size()) unext.resize(dstates.size(), -1);
    unext[sid] = uniform && nx >= 0 ? nx : -2;
    return unext[sid];
  };
  // True when next^1 .. next^h of sid all exist and have frames. Asked at
  // every plain trie node the walk meets, so each state remembers how far
  // its chain is known to stay alive (255: forever, a loop), and a bounded
  // string's chain is followed once per state, not once per trie node.
  std::vector<uint8_t> chain_alive;  // per state: steps known alive (255: any)
  auto plain_chain_alive = [&](int32_t sid, int32_t h) {
    if (static_cast<size_t>(sid) < chain_alive.size() && chain_alive[sid] >= h) return true;
    int32_t cur = sid, i = 0;
    bool forever = false;
    for (; i < h; ++i) {
      const int32_t nx = uniform_next(cur);
      if (nx < 0 || !(dflags[nx] & kHasFrames)) break;
      if (nx == cur) {  // a loop: alive forever
        forever = true;
        break;
      }
      cur = nx;
    }
    if (chain_alive.size() < dstates.size()) chain_alive.resize(dstates.size(), 0);
    const int32_t known = forever ? 255 : i;
    chain_alive[sid] = static_cast<uint8_t>(std::max<int32_t>(chain_alive[sid], std::min(known, 255)));
    return forever || i >= h;
  };
  const int32_t n_ranks = static_cast<int32_t>(vocab.sorted().size());
  std::vector<int32_t> states(maxlen + 1, -1);
  std::vector<uint8_t> ctx(maxlen + 1, 0);
  // Depth 0 is the frame alone, not its closure: in a real state the
  // closure's other frames (callees, the return to the caller) are frames
  // of their own, classified at their own nodes; the runtime walk of
  // uncertain tokens likewise starts from this frame alone.
  {
    State s0;
    s0.frames.push_back(arena.Intern(node, kUnknown));
    states[0] = intern(std::move(s0));
  }
  auto out = std::make_shared<Classes>();
  // Accepted tokens as [begin, end) runs of vocabulary ranks (trie order).
  // A run extends the last one when adjacent, except across merge_floor
  // (the start of a subtree walk being recorded for the memo).
  std::vector<std::pair<int32_t, int32_t>> runs;
  size_t merge_floor = 0;
  int64_t n_accepted = 0;
  auto add_run = [&](int32_t r0, int32_t r1) {
    if (runs.size() > merge_floor && runs.back().second == r0) {
      runs.back().second = r1;
    } else {
      runs.emplace_back(r0, r1);
    }
    n_accepted += r1 - r0;
  };
  const int32_t n = static_cast<int32_t>(tr.byte.size());
  const Vocabulary::Trie::Packed* tn = tr.packed.data();
  // ctx[d]: some path of the first d bytes returned into the unknown caller
  // and continued with a byte the caller's rule may be followed by (FOLLOW);
  // such tokens, if they die here, are decided per stack (uncertain).
  const int32_t rule = a.node_rule[node];
  const ByteSet& follow = a.follow[rule];
  // The subtree walk being recorded (Automata::subtree_memo): its key, the
  // trie node where it ends, and where its runs and uncertain ranks start.
  std::string memo_key;
  int32_t memo_end = -1;
  size_t memo_runs = 0, memo_unc = 0;
  int64_t memo_accepted = 0;
  Automata& ma = const_cast<Automata&>(a);
  auto finish_memo = [&]() {
    auto w = std::make_shared<Automata::SubtreeWalk>();
    w->runs.assign(runs.begin() + memo_runs, runs.end());
    w->uncertain.assign(out->uncertain.begin() + memo_unc, out->uncertain.end());
    w->accepted = n_accepted - memo_accepted;
    const size_t bytes = memo_key.size() + w->runs.size() * 8 + w->uncertain.size() * 4 + 64;
    std::lock_guard<std::mutex> lock(ma.memo_mu);
    if (ma.subtree_memo_bytes + bytes <= kMaxSubtreeMemoBytes &&
        ma.subtree_memo.try_emplace(memo_key, std::move(w)).second) {
      ma.subtree_memo_bytes += bytes;
    }
    memo_end = -1;
  };
  // A state's stacks as node sequences (frame ids are this walk's own).
  std::vector<std::string> sigs;
  auto signature = [&](int32_t sid) -> const std::string& {
    if (sigs.size() < dstates.size()) sigs.resize(dstates.size());
    std::string& sg = sigs[sid];
    if (!sg.empty()) return sg;
    const State& ds = dstates[sid];
    sg.push_back(static_cast<char>(ds.can_end | (ds.needs_parent << 1)));
    for (int32_t f0 : ds.frames) {
      for (int32_t fid = f0; fid >= 0; fid = arena.frame(fid).parent) {
        const int32_t nd = arena.frame(fid).node;
        sg.append(reinterpret_cast<const char*>(&nd), sizeof(nd));
      }
      sg.push_back('|');
    }
    return sg;
  };
  for (int32_t k = 0; k < n;) {
    if (memo_end >= 0 && k >= memo_end) finish_memo();
    const Vocabulary::Trie::Packed& node_k = tn[k];
    const int32_t d = node_k.depth;
    const int32_t pid = states[d - 1];
    const uint8_t pf = dflags[pid];
    if (!(pf & kHasFrames)) {
      // Only reached through a node whose state died: handled there.
      k = node_k.end;
      continue;
    }
    if (const int32_t h = node_k.plain_height;
        h > 0 && node_k.end - k >= 4 && plain_chain_alive(pid, h)) {
      const int32_t r0 = node_k.first;
      const int32_t r1 = node_k.end < n ? tn[node_k.end].first : n_ranks;
      add_run(r0, r1);
      k = node_k.end;
      continue;
    }
    const uint8_t byte = node_k.byte;
    const bool cd = ctx[d - 1] || ((pf & kNeedsParent) && follow[byte]);
    ctx[d] = cd;
    const int32_t sid = step(pid, byte);
    states[d] = sid;
    const uint8_t f = dflags[sid];
    if (d == 1 && (f & kHasFrames) && node_k.end - k >= kMinMemoSubtree) {
      // A first byte's subtree: walked before from the same state?
      memo_key.clear();
      memo_key.append(reinterpret_cast<const char*>(&rule), sizeof(rule));
      memo_key.append(reinterpret_cast<const char*>(&k), sizeof(k));
      memo_key.push_back(static_cast<char>(cd));
      memo_key.append(signature(sid));
      std::shared_ptr<const Automata::SubtreeWalk> hit;
      {
        std::lock_guard<std::mutex> lock(ma.memo_mu);
        if (auto it = ma.subtree_memo.find(memo_key); it != ma.subtree_memo.end()) hit = it->second;
      }
      if (hit != nullptr) {
        ma.subtree_replays.fetch_add(1, std::memory_order_relaxed);
        for (const auto& [r0, r1] : hit->runs) add_run(r0, r1);
        out->uncertain.insert(out->uncertain.end(), hit->uncertain.begin(), hit->uncertain.end());
        k = node_k.end;
        continue;
      }
      memo_end = node_k.end;
      memo_runs = runs.size();
      merge_floor = memo_runs;
      memo_unc = out->uncertain.size();
      memo_accepted = n_accepted;
    }
    // Tokens ending here: alive (or returning exactly at their end) is
    // accepted; dead is uncertain under ctx, else rejected.
    if (const int32_t cnt = node_k.count; cnt > 0) {
      const int32_t r0 = node_k.first;
      if (f != 0) {
        add_run(r0, r0 + cnt);
      } else if (cd) {
        for (int32_t j = 0; j < cnt; ++j) out->uncertain.push_back(r0 + j);
      }
    }
    if (f & kHasFrames) {
      ++k;  // descend
      continue;
    }
    // Dead below here: a child's subtree is uncertain under ctx, or when
    // this prefix returned into the caller and the child's byte may follow.
    // (Neither: the whole subtree is rejected, without looking at it.)
    if (cd || (f & kNeedsParent)) {
      for (int32_t c = k + 1; c < node_k.end; c = tn[c].end) {
        if (!cd && !follow[tn[c].byte]) continue;
        for (int32_t x = c; x < tn[c].end; ++x) {
          for (int32_t j = 0; j < tn[x].count; ++j) out->uncertain.push_back(tn[x].first + j);
        }
      }
    }
    k = node_k.end;
  }
  if (memo_end >= 0) finish_memo();
  const std::vector<int32_t>& sorted = vocab.sorted();
  out->accepted = n_accepted;
  if (n_accepted > vocab.mask_words()) {
    // A bitmask needs no order (sorting 150k ids cost as much as the walk).
    out->bitmask.assign(vocab.mask_words(), 0);
    uint32_t* bits = out->bitmask.data();
    for (const auto& [r0, r1] : runs) {
      for (int32_t r = r0; r < r1; ++r) {
        const int32_t id = sorted[r];
        bits[id >> 5] |= 1u << (id & 31);
      }
    }
  } else {
    out->list.reserve(n_accepted);
    for (const auto& [r0, r1] : runs) {
      for (int32_t r = r0; r < r1; ++r) out->list.push_back(sorted[r]);
    }
    std::sort(out->list.begin(), out->list.end());
  }
  return out;
}

}  // namespace internal

using internal::Arena;
using internal::Automata;
using internal::Classes;
using internal::State;
using internal::Stepper;

namespace {

const Classes& GetClasses(const CompiledGrammar& g, const Automata& a, internal::ClassCache* cache,
                          int32_t node) {
  if (const Classes* c = a.classes[node].load(std::memory_order_acquire)) return *c;
  const auto key = internal::PositionKey(a, node, g.vocab().max_token_bytes());
  // Positions keyed by their automata (too large to hash) are never shared:
  // the grammar owns their classes, and the shared cache does not grow with
  // every grammar compiled.
  const bool shared = (key.first >> 63) == 0 || (key.second >> 63) == 0;
  std::shared_ptr<const Classes> cls;
  if (shared) {
    std::lock_guard<std::mutex> lock(cache->mu);
    auto it = cache->map.find(key);
    if (it != cache->map.end()) {
      cls = it->second;
      cache->hits++;
    }
  }
  if (cls == nullptr) {
    cls = internal::Classify(a, g.vocab(), node);
    std::lock_guard<std::mutex> lock(cache->mu);
    cache->misses++;
    if (shared) {
      auto [it, inserted] = cache->map.try_emplace(key, cls);
      cls = it->second;
    }
  }
  Automata& ma = const_cast<Automata&>(a);
  std::lock_guard<std::mutex> lock(ma.mu);
  if (const Classes* c = a.classes[node].load(std::memory_order_acquire)) return *c;
  ma.owned.push_back(cls);
  a.classes[node].store(cls.get(), std::memory_order_release);
  return *cls;
}

}  // namespace

// ---------------------------------------------------------------------------
// CompiledGrammar

CompiledGrammar::~CompiledGrammar() = default;

int64_t CompiledGrammar::subtree_walks_replayed() const {
  return automata_->subtree_replays.load(std::memory_order_relaxed);
}

int64_t CompiledGrammar::states() const {
  return automata_ ? static_cast<int64_t>(automata_->nodes.size()) : 0;
}

// ---------------------------------------------------------------------------
// GrammarMatcher

struct GrammarMatcher::Impl {
  explicit Impl(const Automata& a) : stepper(a, &arena) {}
  Arena arena;
  Stepper stepper;
  std::vector<State> history;  // history[0]: the start
  State scratch;
  std::vector<State> walk;     // per-depth states of a mask's uncertain walk
  std::vector<uint32_t> tmp;   // a position's accepted set as a bitmask
  // Per frame id: its uncertain tokens that survive the walk from it.
  static constexpr size_t kMaxSurvivorFrames = 128;
  absl::flat_hash_map<int32_t, std::vector<int32_t>> survivors;
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), impl_(std::make_unique<Impl>(*grammar_->automata_)) {
  const Automata& a = *grammar_->automata_;
  impl_->history.emplace_back();
  impl_->stepper.Start(a.rule_start[a.root_rule], internal::kRoot, &impl_->history[0]);
}

GrammarMatcher::~GrammarMatcher() = default;

int32_t GrammarMatcher::steps() const { return static_cast<int32_t>(impl_->history.size()) - 1; }

bool GrammarMatcher::IsComplete() const {
  const State& s = impl_->history.back();
  return !s.terminated && s.can_end;
}

bool GrammarMatcher::IsTerminated() const {
  const State& s = impl_->history.back();
  return s.terminated || (s.frames.empty() && s.can_end);
}

void GrammarMatcher::FillNextTokenBitmask(uint32_t* mask) {
  const Vocabulary& v = grammar_->vocab();
  const int32_t words = v.mask_words();
  std::memset(mask, 0, sizeof(uint32_t) * words);
  const State& cur = impl_->history.back();
  auto set_stops = [&] {
    for (int32_t id : v.stop_ids()) {
      if (id >= 0 && id < v.n_rows()) mask[id / 32] |= 1u << (id % 32);
    }
  };
  if (cur.terminated) {
    set_stops();
    return;
  }
  const Automata& a = *grammar_->automata_;
  internal::ClassCache* cache = grammar_->classes_.get();
  // Accepted sets, once per distinct node.
  int32_t last_node = -1;
  std::vector<int32_t> nodes;
  nodes.reserve(cur.frames.size());
  for (int32_t fid : cur.frames) nodes.push_back(impl_->arena.frame(fid).node);
  std::vector<int32_t> uniq = nodes;
  std::sort(uniq.begin(), uniq.end());
  uniq.erase(std::unique(uniq.begin(), uniq.end()), uniq.end());
  for (int32_t node : uniq) {
    if (node == last_node) continue;
    last_node = node;
    const Classes& c = GetClasses(*grammar_, a, cache, node);
    if (!c.bitmask.empty()) {
      for (int32_t w = 0; w < words; ++w) mask[w] |= c.bitmask[w];
    }
    for (int32_t id : c.list) mask[id / 32] |= 1u << (id % 32);
  }
  // Uncertain tokens, per frame, walked from the real stack in trie order.
  const size_t mark = impl_->arena.size();
  const int32_t maxlen = v.max_token_bytes();
  if (static_cast<int32_t>(impl_->walk.size()) < maxlen + 1) impl_->walk.resize(maxlen + 1);
  std::vector<State>& walk = impl_->walk;
  // A frame's survivors depend on the frame alone (its node and the stack
  // below, which its id names for the matcher's life), so they are kept per
  // frame id: the next masks at the same frame — every character of a string
  // body, of a key — set them without a walk.
  auto& memo = impl_->survivors;
  for (size_t fi = 0; fi < cur.frames.size(); ++fi) {
    const Classes& c = GetClasses(*grammar_, a, cache, nodes[fi]);
    if (c.uncertain.empty()) continue;
    if (auto it = memo.find(cur.frames[fi]); it != memo.end()) {
      for (int32_t id : it->second) mask[id / 32] |= 1u << (id % 32);
      continue;
    }
    if (memo.size() >= Impl::kMaxSurvivorFrames) memo.clear();
    std::vector<int32_t>& alive = memo[cur.frames[fi]];
    walk[0].Clear();
    walk[0].frames.push_back(cur.frames[fi]);
    int32_t valid = 0;
    absl::string_view prev;
    for (int32_t rank : c.uncertain) {
      const int32_t id = v.sorted()[rank];
      absl::string_view t = v.token(id);
      // walk[0..valid] hold the states of `prev`'s prefixes.
      int32_t k = 0;
      const int32_t lim = static_cast<int32_t>(std::min(prev.size(), t.size()));
      while (k < lim && prev[k] == t[k]) ++k;
      prev = t;
      int32_t d = std::min(k, valid);
      const int32_t len = static_cast<int32_t>(t.size());
      while (d < len && !walk[d].frames.empty()) {
        impl_->stepper.Advance(walk[d], static_cast<uint8_t>(t[d]), &walk[d + 1]);
        ++d;
      }
      valid = d;
      if (d == len && (!walk[d].frames.empty() || walk[d].can_end)) {
        mask[id / 32] |= 1u << (id % 32);
        alive.push_back(id);
      }
    }
  }
  impl_->arena.Release(mark);
  if (cur.can_end) set_stops();
}

bool GrammarMatcher::IsTokenAllowed(int32_t id) {
  const Vocabulary& v = grammar_->vocab();
  const State& cur = impl_->history.back();
  if (id < 0 || id >= v.size()) return false;
  if (v.is_stop(id)) return cur.terminated || cur.can_end;
  if (cur.terminated || v.token(id).empty()) return false;
  const size_t mark = impl_->arena.size();
  State s = cur;
  const bool ok = impl_->stepper.AdvanceAll(&s, v.token(id));
  impl_->arena.Release(mark);
  return ok;
}

bool GrammarMatcher::AcceptBytes(absl::string_view bytes) {
  const State& cur = impl_->history.back();
  if (cur.terminated) return false;
  State s = cur;
  const size_t mark = impl_->arena.size();
  if (!impl_->stepper.AdvanceAll(&s, bytes)) {
    impl_->arena.Release(mark);
    return false;
  }
  impl_->history.push_back(std::move(s));
  return true;
}

absl::Status GrammarMatcher::AcceptToken(int32_t id) {
  const Vocabulary& v = grammar_->vocab();
  const State& cur = impl_->history.back();
  if (id < 0 || id >= v.size()) {
    return absl::InvalidArgumentError(absl::StrCat("token ", id, " is not in the vocabulary"));
  }
  if (cur.terminated) {
    return absl::InvalidArgumentError(
        absl::StrCat("token ", id, " after the grammar's end token was accepted"));
  }
  if (v.is_stop(id)) {
    if (!cur.can_end) {
      return absl::InvalidArgumentError(
          absl::StrCat("end token ", id, " before the grammar is complete"));
    }
    State s;
    s.terminated = true;
    s.can_end = true;
    impl_->history.push_back(std::move(s));
    return absl::OkStatus();
  }
  if (v.token(id).empty() || !AcceptBytes(v.token(id))) {
    return absl::InvalidArgumentError(absl::StrCat("token ", id, " is not allowed by the grammar"));
  }
  return absl::OkStatus();
}

void GrammarMatcher::Rollback(int32_t n) {
  n = std::max(0, std::min(n, steps()));
  impl_->history.resize(impl_->history.size() - n);
}

std::string GrammarMatcher::JumpForward(int32_t max_bytes) {
  std::string out;
  const Automata& a = *grammar_->automata_;
  State s = impl_->history.back();
  if (s.terminated) return out;
  const size_t mark = impl_->arena.size();
  while (static_cast<int32_t>(out.size()) < max_bytes && !s.can_end && !s.frames.empty()) {
    int lo = 256, hi = -1;
    bool single = true;
    for (int32_t fid : s.frames) {
      for (const internal::ByteEdge& e : a.nodes[impl_->arena.frame(fid).node].bytes) {
        if (lo == 256) {
          lo = e.lo;
          hi = e.hi;
        } else if (e.lo != lo || e.hi != hi) {
          single = false;
        }
      }
    }
    if (!single || lo != hi) break;
    out.push_back(static_cast<char>(lo));
    impl_->stepper.Advance(s, static_cast<uint8_t>(lo), &impl_->scratch);
    std::swap(s, impl_->scratch);
  }
  impl_->arena.Release(mark);
  return out;
}

// ---------------------------------------------------------------------------
// GrammarCompiler

GrammarCompiler::GrammarCompiler(std::shared_ptr<const Vocabulary> vocab, CompileOptions options)
    : vocab_(std::move(vocab)), options_(options), classes_(std::make_shared<internal::ClassCache>()) {}

GrammarCompiler::~GrammarCompiler() = default;

CompilerStats GrammarCompiler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  CompilerStats s = stats_;
  std::lock_guard<std::mutex> l2(classes_->mu);
  s.position_classes = static_cast<int64_t>(classes_->map.size());
  s.position_hits = classes_->hits;
  return s;
}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> GrammarCompiler::CompileGrammar(
    Grammar grammar, GrammarKind kind) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto deadline = t0 + options_.time_limit;
  auto cg = std::shared_ptr<CompiledGrammar>(new CompiledGrammar());
  cg->grammar_ = std::move(grammar);
  cg->kind_ = kind;
  cg->vocab_ = vocab_;
  cg->classes_ = classes_;
  cg->automata_ = std::make_unique<Automata>();
  absl::Status st = internal::BuildAutomata(cg->grammar_, cg->automata_.get(), deadline);
  if (!st.ok()) return st;
  // The first mask's classes now (time to first mask counts them), on the
  // compiling thread rather than the engine's.
  {
    GrammarMatcher m(cg);
    std::vector<uint32_t> mask(vocab_->mask_words());
    m.FillNextTokenBitmask(mask.data());
  }
  // And every position of a wide rule (a string body): each costs a walk of
  // most of the vocabulary, which would otherwise land on some later mask
  // of the engine's step; they are shared by every grammar with the rule,
  // so after the first such grammar this is lookups.
  // Within a budget, though: a string bounded by maxLength N has some N
  // positions near its bound that share nothing (each costs a full walk),
  // and a grammar with several such strings would spend seconds here on
  // positions few outputs reach. In node order, the positions far from the
  // bound (one shared entry) come first; what the budget leaves is
  // classified when a mask first reaches it.
  {
    const internal::Automata& a = *cg->automata_;
    const auto eager_end = std::min(deadline, t0 + options_.eager_budget);
    for (size_t node = 0; node < a.nodes.size(); ++node) {
      if (!a.wide_rule[a.node_rule[node]] || a.nodes[node].bytes.empty()) continue;
      if (std::chrono::steady_clock::now() > eager_end) break;
      GetClasses(*cg, a, classes_.get(), static_cast<int32_t>(node));
    }
  }
  cg->compile_ms_ =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (std::chrono::steady_clock::now() > deadline) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grammar too complex: compilation took ", static_cast<int64_t>(cg->compile_ms_),
        " ms, over the limit of ", options_.time_limit.count(), " ms"));
  }
  return std::shared_ptr<const CompiledGrammar>(std::move(cg));
}

}  // namespace minfer::grammar
