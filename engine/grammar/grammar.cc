#include "engine/grammar/grammar.h"

#include <algorithm>
#include <functional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace minfer::grammar {
namespace {

void AppendEscapedByte(std::string* out, unsigned char c, bool in_class) {
  if (c == '\\' || c == '"' || (in_class && (c == ']' || c == '-' || c == '^'))) {
    out->push_back('\\');
    out->push_back(static_cast<char>(c));
  } else if (c >= 0x20 && c < 0x7f) {
    out->push_back(static_cast<char>(c));
  } else {
    absl::StrAppendFormat(out, "\\x%02X", c);
  }
}

// UTF-8 encoding ranges: code points [lo, hi] with the same encoded length
// become sequences of byte ranges (the classic split into ranges whose
// continuation bytes span full 0x80-0xBF blocks).
constexpr uint32_t kMaxCp = 0x10FFFF;

int Utf8Len(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

void Encode(uint32_t cp, uint8_t* b) {
  switch (Utf8Len(cp)) {
    case 1: b[0] = static_cast<uint8_t>(cp); break;
    case 2:
      b[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
      b[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      break;
    case 3:
      b[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
      b[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
      b[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      break;
    default:
      b[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
      b[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
      b[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
      b[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  }
}

}  // namespace

std::string Grammar::ToString() const {
  std::string out;
  // Expressions print recursively; rules by name.
  std::function<void(ExprId, bool)> print = [&](ExprId id, bool paren) {
    const Expr& e = exprs_[id];
    switch (e.kind) {
      case ExprKind::kEmpty: out += "\"\""; break;
      case ExprKind::kNothing: out += "[]"; break;
      case ExprKind::kLiteral:
        out += '"';
        for (unsigned char c : e.literal) AppendEscapedByte(&out, c, false);
        out += '"';
        break;
      case ExprKind::kBytes: {
        out += '[';
        for (int b = 0; b < 256;) {
          if (!e.bytes[b]) { ++b; continue; }
          int end = b;
          while (end + 1 < 256 && e.bytes[end + 1]) ++end;
          AppendEscapedByte(&out, static_cast<unsigned char>(b), true);
          if (end > b) {
            out += '-';
            AppendEscapedByte(&out, static_cast<unsigned char>(end), true);
          }
          b = end + 1;
        }
        out += ']';
        break;
      }
      case ExprKind::kRef: out += rules_[e.rule].name; break;
      case ExprKind::kSeq:
      case ExprKind::kAlt: {
        if (paren) out += '(';
        for (size_t i = 0; i < e.children.size(); ++i) {
          if (i > 0) out += e.kind == ExprKind::kAlt ? " | " : " ";
          print(e.children[i], true);
        }
        if (paren) out += ')';
        break;
      }
      case ExprKind::kRepeat:
        print(e.children[0], true);
        if (e.max == kUnbounded) {
          absl::StrAppend(&out, "{", e.min, ",}");
        } else {
          absl::StrAppend(&out, "{", e.min, ",", e.max, "}");
        }
        break;
    }
  };
  for (const Rule& r : rules_) {
    absl::StrAppend(&out, r.name, " ::= ");
    print(r.body, false);
    out += '\n';
  }
  absl::StrAppend(&out, "# root: ", rules_[root_].name, "\n");
  return out;
}

GrammarBuilder::GrammarBuilder(GrammarLimits limits) { g_.limits_ = limits; }

ExprId GrammarBuilder::Add(Expr e) {
  if (static_cast<int64_t>(g_.exprs_.size()) >= g_.limits_.max_exprs) {
    if (!over_limit_) {
      over_limit_ = true;
      SetError(absl::InvalidArgumentError(absl::StrCat(
          "grammar too large: more than ", g_.limits_.max_exprs, " expression nodes")));
    }
    // Keep returning a valid id so callers need not check every call.
    return 0;
  }
  g_.exprs_.push_back(std::move(e));
  return static_cast<ExprId>(g_.exprs_.size() - 1);
}

void GrammarBuilder::SetError(absl::Status status) {
  if (error_.ok()) error_ = std::move(status);
}

RuleId GrammarBuilder::Declare(absl::string_view name) {
  std::string n(name.empty() ? "rule" : name);
  if (FindRule(n) >= 0) {
    // The first free "n-i"; suffixes below next_suffix_[n] were all taken
    // when last looked at (names are never freed), so a front end that
    // declares thousands of rules under one name pays O(1) each.
    int& next = next_suffix_[n];
    for (int i = std::max(next, 1);; ++i) {
      std::string c = absl::StrCat(n, "-", i);
      if (FindRule(c) < 0) {
        next = i + 1;
        n = std::move(c);
        break;
      }
    }
  }
  if (static_cast<int64_t>(g_.rules_.size()) >= g_.limits_.max_rules && !over_limit_) {
    over_limit_ = true;
    SetError(absl::InvalidArgumentError(
        absl::StrCat("grammar too large: more than ", g_.limits_.max_rules, " rules")));
  }
  by_name_.emplace(n, static_cast<RuleId>(g_.rules_.size()));
  g_.rules_.push_back(Rule{n, -1});
  defined_.push_back(false);
  return static_cast<RuleId>(g_.rules_.size() - 1);
}

RuleId GrammarBuilder::FindRule(absl::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

void GrammarBuilder::Define(RuleId rule, ExprId body) {
  if (defined_[rule]) {
    SetError(absl::InvalidArgumentError(
        absl::StrCat("rule '", g_.rules_[rule].name, "' is defined twice")));
    return;
  }
  defined_[rule] = true;
  g_.rules_[rule].body = body;
}

RuleId GrammarBuilder::AddRule(absl::string_view name, ExprId body) {
  RuleId r = Declare(name);
  Define(r, body);
  return r;
}

ExprId GrammarBuilder::Empty() { return Add(Expr{ExprKind::kEmpty}); }
ExprId GrammarBuilder::Nothing() { return Add(Expr{ExprKind::kNothing}); }

ExprId GrammarBuilder::Byte(uint8_t b) { return ByteRange(b, b); }

ExprId GrammarBuilder::ByteRange(uint8_t lo, uint8_t hi) {
  ByteSet s;
  for (int b = lo; b <= hi; ++b) s.set(b);
  return Bytes(s);
}

ExprId GrammarBuilder::Bytes(const ByteSet& set) {
  if (set.none()) return Nothing();
  Expr e{ExprKind::kBytes};
  e.bytes = set;
  return Add(std::move(e));
}

ExprId GrammarBuilder::Literal(absl::string_view text) {
  if (text.empty()) return Empty();
  Expr e{ExprKind::kLiteral};
  e.literal = std::string(text);
  return Add(std::move(e));
}

ExprId GrammarBuilder::Ref(RuleId rule) {
  Expr e{ExprKind::kRef};
  e.rule = rule;
  return Add(std::move(e));
}

ExprId GrammarBuilder::Seq(std::vector<ExprId> items) {
  // Flatten nested sequences and drop empties: smaller automata.
  std::vector<ExprId> flat;
  for (ExprId id : items) {
    const Expr& e = g_.exprs_[id];
    if (e.kind == ExprKind::kEmpty) continue;
    if (e.kind == ExprKind::kNothing) return Nothing();
    if (e.kind == ExprKind::kSeq) {
      flat.insert(flat.end(), e.children.begin(), e.children.end());
    } else {
      flat.push_back(id);
    }
  }
  if (flat.empty()) return Empty();
  if (flat.size() == 1) return flat[0];
  Expr e{ExprKind::kSeq};
  e.children = std::move(flat);
  return Add(std::move(e));
}

ExprId GrammarBuilder::Alt(std::vector<ExprId> items) {
  std::vector<ExprId> flat;
  for (ExprId id : items) {
    const Expr& e = g_.exprs_[id];
    if (e.kind == ExprKind::kNothing) continue;
    if (e.kind == ExprKind::kAlt) {
      flat.insert(flat.end(), e.children.begin(), e.children.end());
    } else {
      flat.push_back(id);
    }
  }
  if (flat.empty()) return Nothing();
  if (flat.size() == 1) return flat[0];
  Expr e{ExprKind::kAlt};
  e.children = std::move(flat);
  return Add(std::move(e));
}

ExprId GrammarBuilder::Repeat(ExprId item, int32_t min, int32_t max) {
  if (min < 0 || (max != kUnbounded && max < min)) {
    SetError(absl::InvalidArgumentError(
        absl::StrCat("bad repetition bounds {", min, ",", max, "}")));
    return Nothing();
  }
  if (min > g_.limits_.max_repeat || (max != kUnbounded && max > g_.limits_.max_repeat)) {
    SetError(absl::InvalidArgumentError(absl::StrCat(
        "repetition bound ", std::max(min, max), " exceeds the limit of ",
        g_.limits_.max_repeat)));
    return Nothing();
  }
  if (max == 0) return Empty();
  if (min == 1 && max == 1) return item;
  const Expr& it = g_.exprs_[item];
  if (it.kind == ExprKind::kEmpty) return Empty();
  if (it.kind == ExprKind::kNothing) return min == 0 ? Empty() : Nothing();
  Expr e{ExprKind::kRepeat};
  e.children = {item};
  e.min = min;
  e.max = max;
  return Add(std::move(e));
}

ExprId GrammarBuilder::CodepointSet(std::vector<std::pair<uint32_t, uint32_t>> ranges,
                                    bool negated) {
  // Normalize: clip, sort, merge, remove surrogates; complement if asked.
  std::vector<std::pair<uint32_t, uint32_t>> r;
  for (auto [lo, hi] : ranges) {
    if (lo > hi) std::swap(lo, hi);
    if (lo > kMaxCp) continue;
    hi = std::min(hi, kMaxCp);
    r.emplace_back(lo, hi);
  }
  std::sort(r.begin(), r.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (auto [lo, hi] : r) {
    if (!merged.empty() && lo <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, hi);
    } else {
      merged.emplace_back(lo, hi);
    }
  }
  if (negated) {
    std::vector<std::pair<uint32_t, uint32_t>> comp;
    uint32_t next = 0;
    for (auto [lo, hi] : merged) {
      if (lo > next) comp.emplace_back(next, lo - 1);
      next = hi + 1;
    }
    if (next <= kMaxCp) comp.emplace_back(next, kMaxCp);
    merged = std::move(comp);
  }
  // Cut out the surrogates D800-DFFF.
  std::vector<std::pair<uint32_t, uint32_t>> valid;
  for (auto [lo, hi] : merged) {
    if (hi < 0xD800 || lo > 0xDFFF) {
      valid.emplace_back(lo, hi);
      continue;
    }
    if (lo < 0xD800) valid.emplace_back(lo, 0xD7FF);
    if (hi > 0xDFFF) valid.emplace_back(0xE000, hi);
  }
  // Split by encoded length, then recursively into byte-range sequences.
  std::vector<ExprId> alts;
  ByteSet single;  // one-byte code points merge into one byte set
  std::function<void(uint32_t, uint32_t)> split = [&](uint32_t lo, uint32_t hi) {
    const int n = Utf8Len(lo);
    if (Utf8Len(hi) != n) {
      const uint32_t edge = n == 1 ? 0x7F : n == 2 ? 0x7FF : 0xFFFF;
      split(lo, edge);
      split(edge + 1, hi);
      return;
    }
    if (n == 1) {
      for (uint32_t c = lo; c <= hi; ++c) single.set(c);
      return;
    }
    // Find the longest suffix of continuation bytes that spans full blocks.
    for (int i = 1; i < n; ++i) {
      const uint32_t m = (1u << (6 * i)) - 1;  // low 6*i bits
      if ((lo & ~m) != (hi & ~m)) {
        if ((lo & m) != 0) {
          split(lo, lo | m);
          split((lo | m) + 1, hi);
          return;
        }
        if ((hi & m) != m) {
          split(lo, (hi & ~m) - 1);
          split(hi & ~m, hi);
          return;
        }
      }
    }
    uint8_t a[4], b[4];
    Encode(lo, a);
    Encode(hi, b);
    std::vector<ExprId> seq;
    for (int i = 0; i < n; ++i) seq.push_back(ByteRange(a[i], b[i]));
    alts.push_back(Seq(std::move(seq)));
  };
  for (auto [lo, hi] : valid) split(lo, hi);
  if (single.any()) alts.insert(alts.begin(), Bytes(single));
  return Alt(std::move(alts));
}

absl::StatusOr<Grammar> GrammarBuilder::Build(RuleId root) && {
  if (!error_.ok()) return error_;
  if (root < 0 || root >= static_cast<RuleId>(g_.rules_.size())) {
    return absl::InvalidArgumentError("grammar has no root rule");
  }
  // Reachable rules; undefined references.
  std::vector<bool> reach(g_.rules_.size(), false);
  std::vector<RuleId> work = {root};
  reach[root] = true;
  std::vector<ExprId> stack;
  while (!work.empty()) {
    RuleId r = work.back();
    work.pop_back();
    if (!defined_[r]) {
      return absl::InvalidArgumentError(
          absl::StrCat("undefined rule '", g_.rules_[r].name, "'"));
    }
    stack.push_back(g_.rules_[r].body);
    while (!stack.empty()) {
      const Expr& e = g_.exprs_[stack.back()];
      stack.pop_back();
      if (e.kind == ExprKind::kRef && !reach[e.rule]) {
        reach[e.rule] = true;
        work.push_back(e.rule);
      }
      for (ExprId c : e.children) stack.push_back(c);
    }
  }
  // Nullability by fixpoint, then left recursion: rule A "left-calls" B when
  // B can be reached from the start of A's body without consuming a byte.
  const size_t nr = g_.rules_.size();
  std::vector<bool> nullable_rule(nr, false);
  std::function<bool(ExprId)> nullable = [&](ExprId id) -> bool {
    const Expr& e = g_.exprs_[id];
    switch (e.kind) {
      case ExprKind::kEmpty: return true;
      case ExprKind::kNothing:
      case ExprKind::kBytes:
      case ExprKind::kLiteral: return false;
      case ExprKind::kRef: return nullable_rule[e.rule];
      case ExprKind::kSeq:
        for (ExprId c : e.children) {
          if (!nullable(c)) return false;
        }
        return true;
      case ExprKind::kAlt:
        for (ExprId c : e.children) {
          if (nullable(c)) return true;
        }
        return false;
      case ExprKind::kRepeat: return e.min == 0 || nullable(e.children[0]);
    }
    return false;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < nr; ++r) {
      if (reach[r] && !nullable_rule[r] && nullable(g_.rules_[r].body)) {
        nullable_rule[r] = true;
        changed = true;
      }
    }
  }
  std::vector<std::vector<RuleId>> left(nr);
  std::function<void(ExprId, std::vector<RuleId>*)> firsts = [&](ExprId id,
                                                                  std::vector<RuleId>* out) {
    const Expr& e = g_.exprs_[id];
    switch (e.kind) {
      case ExprKind::kRef: out->push_back(e.rule); break;
      case ExprKind::kSeq:
        for (ExprId c : e.children) {
          firsts(c, out);
          if (!nullable(c)) break;
        }
        break;
      case ExprKind::kAlt:
        for (ExprId c : e.children) firsts(c, out);
        break;
      case ExprKind::kRepeat: firsts(e.children[0], out); break;
      default: break;
    }
  };
  for (size_t r = 0; r < nr; ++r) {
    if (reach[r]) firsts(g_.rules_[r].body, &left[r]);
  }
  // Cycle search (iterative DFS, colors).
  std::vector<int> color(nr, 0);
  for (size_t s = 0; s < nr; ++s) {
    if (!reach[s] || color[s] != 0) continue;
    std::vector<std::pair<RuleId, size_t>> dfs = {{static_cast<RuleId>(s), 0}};
    color[s] = 1;
    while (!dfs.empty()) {
      auto& [r, i] = dfs.back();
      if (i < left[r].size()) {
        RuleId nx = left[r][i++];
        if (color[nx] == 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              "left recursion: rule '", g_.rules_[nx].name,
              "' can reach itself without consuming input (through '", g_.rules_[r].name, "')"));
        }
        if (color[nx] == 0) {
          color[nx] = 1;
          dfs.emplace_back(nx, 0);
        }
      } else {
        color[r] = 2;
        dfs.pop_back();
      }
    }
  }
  // A nullable body under an unbounded repetition would let the matcher
  // loop without input; the automaton construction handles it (epsilon
  // closure), so nothing to refuse here.
  // Drop unreachable rules: renumber.
  std::vector<RuleId> remap(nr, -1);
  Grammar out;
  out.limits_ = g_.limits_;
  for (size_t r = 0; r < nr; ++r) {
    if (reach[r]) {
      remap[r] = static_cast<RuleId>(out.rules_.size());
      out.rules_.push_back(g_.rules_[r]);
    }
  }
  out.exprs_ = std::move(g_.exprs_);
  for (Expr& e : out.exprs_) {
    if (e.kind == ExprKind::kRef) e.rule = e.rule >= 0 && e.rule < static_cast<RuleId>(nr) ? remap[e.rule] : -1;
  }
  out.root_ = remap[root];
  return out;
}

}  // namespace minfer::grammar
