#include "engine/grammar/matcher.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"

namespace minfer::grammar {

// ---------------------------------------------------------------------------
// Vocabulary

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
  bool store_accepted = true;   // `list` holds the accepted ids, else the rejected ones
  std::vector<int32_t> list;    // token ids, increasing
  std::vector<int32_t> uncertain;  // vocabulary ranks (trie order), increasing
  int64_t accepted = 0;
};

struct Automata {
  std::vector<Node> nodes;
  std::vector<int32_t> rule_start;
  int32_t root_rule = 0;
  // Lazily computed classes per node (null until needed).
  std::unique_ptr<std::atomic<const Classes*>[]> classes;
  std::mutex mu;
  std::vector<std::shared_ptr<const Classes>> owned;
};

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
  RuleBuilder(const Grammar& g, int64_t max_states) : g_(g), max_states_(max_states) {}

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

}  // namespace

absl::Status BuildAutomata(const Grammar& g, Automata* a,
                           std::chrono::steady_clock::time_point deadline) {
  const int64_t max_states = g.limits().max_states;
  a->rule_start.assign(g.rules().size(), -1);
  a->root_rule = g.root();
  RuleBuilder rb(g, max_states);
  std::vector<RuleBuilder::ENode> en;
  std::vector<int32_t> closure_mark;
  std::vector<int32_t> stack, closure;
  for (RuleId r = 0; r < static_cast<RuleId>(g.rules().size()); ++r) {
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
    // Renumber targets to global ids.
    const int32_t base = static_cast<int32_t>(a->nodes.size());
    for (Node& node : out) {
      for (ByteEdge& e : node.bytes) e.to = base + keep[e.to];
      std::sort(node.bytes.begin(), node.bytes.end(), [](const ByteEdge& x, const ByteEdge& y) {
        return x.lo != y.lo ? x.lo < y.lo : x.to < y.to;
      });
      for (RefEdge& e : node.refs) e.to = base + keep[e.to];
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
  }
  a->classes.reset(new std::atomic<const Classes*>[a->nodes.size()]);
  for (size_t i = 0; i < a->nodes.size(); ++i) a->classes[i].store(nullptr);
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
std::pair<uint64_t, uint64_t> PositionKey(const Automata& a, int32_t node) {
  absl::flat_hash_map<int32_t, int32_t> local;
  std::vector<int32_t> order = {node};
  local[node] = 0;
  auto id = [&](int32_t n) {
    auto [it, ins] = local.try_emplace(n, static_cast<int32_t>(order.size()));
    if (ins) order.push_back(n);
    return it->second;
  };
  std::string canon;
  for (size_t i = 0; i < order.size(); ++i) {
    const Node& nd = a.nodes[order[i]];
    canon.push_back(nd.accept ? 'A' : 'N');
    for (const ByteEdge& e : nd.bytes) {
      int32_t t = id(e.to);
      canon.push_back(static_cast<char>(e.lo));
      canon.push_back(static_cast<char>(e.hi));
      canon.append(reinterpret_cast<const char*>(&t), sizeof(t));
    }
    canon.push_back('|');
    for (const RefEdge& e : nd.refs) {
      int32_t s = id(a.rule_start[e.rule]);
      int32_t t = id(e.to);
      canon.append(reinterpret_cast<const char*>(&s), sizeof(s));
      canon.append(reinterpret_cast<const char*>(&t), sizeof(t));
    }
    canon.push_back(';');
  }
  const uint64_t h1 = absl::HashOf(canon);
  const uint64_t h2 = std::hash<std::string>()(canon) ^ (static_cast<uint64_t>(canon.size()) << 1);
  return {h1, h2};
}

}  // namespace

// Classifies every token of `vocab` at `node` alone (see Classes). A walk
// over the vocabulary in trie order: states per depth are shared by tokens
// with a common prefix, and a dead prefix skips its whole subtree.
std::shared_ptr<const Classes> Classify(const Automata& a, const Vocabulary& vocab, int32_t node) {
  Arena arena;
  Stepper st(a, &arena);
  const int32_t maxlen = vocab.max_token_bytes();
  std::vector<State> states(maxlen + 1);
  std::vector<uint8_t> ctx(maxlen + 1, 0);
  // Depth 0 is the frame alone, not its closure: in a real state the
  // closure's other frames (callees, the return to the caller) are frames
  // of their own, classified at their own nodes; the runtime walk of
  // uncertain tokens likewise starts from this frame alone.
  states[0].Clear();
  states[0].frames.push_back(arena.Intern(node, kUnknown));
  ctx[0] = 0;
  auto out = std::make_shared<Classes>();
  std::vector<int32_t> accepted, rejected;
  const std::vector<int32_t>& sorted = vocab.sorted();
  const std::vector<int32_t>& lcp = vocab.lcp();
  int32_t valid = 0;  // states[0..valid] hold the previous token's prefixes
  for (size_t i = 0; i < sorted.size(); ++i) {
    const int32_t id = sorted[i];
    absl::string_view t = vocab.token(id);
    const int32_t len = static_cast<int32_t>(t.size());
    int32_t d = std::min(lcp[i], valid);
    while (d < len && !states[d].frames.empty()) {
      st.Advance(states[d], static_cast<uint8_t>(t[d]), &states[d + 1]);
      ctx[d + 1] = ctx[d] || states[d + 1].needs_parent;
      ++d;
    }
    valid = d;
    if (d == len && (!states[d].frames.empty() || states[d].needs_parent)) {
      accepted.push_back(id);
    } else if (ctx[d]) {
      // Some path returned into the unknown caller with bytes left.
      out->uncertain.push_back(static_cast<int32_t>(i));
    } else {
      rejected.push_back(id);
    }
  }
  std::sort(accepted.begin(), accepted.end());
  std::sort(rejected.begin(), rejected.end());
  out->accepted = static_cast<int64_t>(accepted.size());
  out->store_accepted = accepted.size() <= rejected.size();
  out->list = out->store_accepted ? std::move(accepted) : std::move(rejected);
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
  const auto key = internal::PositionKey(a, node);
  std::shared_ptr<const Classes> cls;
  {
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
    auto [it, inserted] = cache->map.try_emplace(key, cls);
    cls = it->second;
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
    if (c.store_accepted) {
      for (int32_t id : c.list) mask[id / 32] |= 1u << (id % 32);
    } else {
      impl_->tmp = v.text_mask();
      for (int32_t id : c.list) impl_->tmp[id / 32] &= ~(1u << (id % 32));
      for (int32_t w = 0; w < words; ++w) mask[w] |= impl_->tmp[w];
    }
  }
  // Uncertain tokens, per frame, walked from the real stack in trie order.
  const size_t mark = impl_->arena.size();
  const int32_t maxlen = v.max_token_bytes();
  if (static_cast<int32_t>(impl_->walk.size()) < maxlen + 1) impl_->walk.resize(maxlen + 1);
  std::vector<State>& walk = impl_->walk;
  for (size_t fi = 0; fi < cur.frames.size(); ++fi) {
    const Classes& c = GetClasses(*grammar_, a, cache, nodes[fi]);
    if (c.uncertain.empty()) continue;
    walk[0].Clear();
    walk[0].frames.push_back(cur.frames[fi]);
    int32_t valid = 0;
    absl::string_view prev;
    for (int32_t rank : c.uncertain) {
      const int32_t id = v.sorted()[rank];
      absl::string_view t = v.token(id);
      int32_t k = 0;
      const int32_t lim = static_cast<int32_t>(std::min(prev.size(), t.size()));
      while (k < lim && prev[k] == t[k]) ++k;
      prev = t;
      if (mask[id / 32] & (1u << (id % 32))) continue;
      int32_t d = std::min(k, valid);
      const int32_t len = static_cast<int32_t>(t.size());
      while (d < len && !walk[d].frames.empty()) {
        impl_->stepper.Advance(walk[d], static_cast<uint8_t>(t[d]), &walk[d + 1]);
        ++d;
      }
      valid = d;
      if (d == len && (!walk[d].frames.empty() || walk[d].can_end)) {
        mask[id / 32] |= 1u << (id % 32);
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
