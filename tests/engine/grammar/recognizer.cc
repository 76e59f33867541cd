#include "tests/engine/grammar/recognizer.h"

#include <map>
#include <set>
#include <utility>

namespace minfer::grammar::testing {
namespace {

// Offsets are into `s`; `prefix_mode` treats running off the end of the
// input as success (a match could continue past it): then the sentinel end
// offset kPastEnd is reported.
class Rec {
 public:
  Rec(const Grammar& g, absl::string_view s, bool prefix_mode)
      : g_(g), s_(s), prefix_(prefix_mode) {}

  static constexpr size_t kPastEnd = static_cast<size_t>(-1);

  std::set<size_t> Ends(ExprId id, size_t pos) {
    if (pos == kPastEnd) return {kPastEnd};
    const Expr& e = g_.expr(id);
    std::set<size_t> out;
    switch (e.kind) {
      case ExprKind::kEmpty: out.insert(pos); break;
      case ExprKind::kNothing: break;
      case ExprKind::kBytes:
        if (pos < s_.size()) {
          if (e.bytes[static_cast<unsigned char>(s_[pos])]) out.insert(pos + 1);
        } else if (prefix_) {
          out.insert(kPastEnd);
        }
        break;
      case ExprKind::kLiteral: {
        size_t i = 0;
        while (i < e.literal.size() && pos + i < s_.size() && s_[pos + i] == e.literal[i]) ++i;
        if (i == e.literal.size()) {
          out.insert(pos + i);
        } else if (prefix_ && pos + i == s_.size()) {
          out.insert(kPastEnd);
        }
        break;
      }
      case ExprKind::kRef: {
        auto key = std::make_pair(e.rule, pos);
        auto it = memo_.find(key);
        if (it != memo_.end()) return it->second;
        // Left recursion is refused by Build, so no cycle reaches here
        // without consuming input.
        std::set<size_t> r = Ends(g_.rule(e.rule).body, pos);
        memo_[key] = r;
        return r;
      }
      case ExprKind::kSeq: {
        std::set<size_t> cur = {pos};
        for (ExprId c : e.children) {
          std::set<size_t> next;
          for (size_t p : cur) {
            std::set<size_t> r = Ends(c, p);
            next.insert(r.begin(), r.end());
          }
          cur = std::move(next);
          if (cur.empty()) break;
        }
        out = std::move(cur);
        break;
      }
      case ExprKind::kAlt:
        for (ExprId c : e.children) {
          std::set<size_t> r = Ends(c, pos);
          out.insert(r.begin(), r.end());
        }
        break;
      case ExprKind::kRepeat: {
        // Breadth by count; positions seen at a count >= min are results.
        std::set<size_t> cur = {pos};
        std::set<size_t> seen_after_min;
        if (e.min == 0) out.insert(pos);
        for (int64_t n = 1; e.max == kUnbounded || n <= e.max; ++n) {
          std::set<size_t> next;
          for (size_t p : cur) {
            std::set<size_t> r = Ends(e.children[0], p);
            next.insert(r.begin(), r.end());
          }
          if (next.empty()) break;
          if (n >= e.min) {
            // Past min, a position seen before adds nothing new.
            std::set<size_t> fresh;
            for (size_t p : next) {
              if (seen_after_min.insert(p).second) fresh.insert(p);
            }
            out.insert(fresh.begin(), fresh.end());
            if (fresh.empty()) break;
            next = std::move(fresh);
          }
          cur = std::move(next);
        }
        break;
      }
    }
    return out;
  }

 private:
  const Grammar& g_;
  absl::string_view s_;
  bool prefix_;
  std::map<std::pair<RuleId, size_t>, std::set<size_t>> memo_;
};

}  // namespace

bool Recognize(const Grammar& grammar, absl::string_view bytes) {
  Rec r(grammar, bytes, false);
  return r.Ends(grammar.rule(grammar.root()).body, 0).count(bytes.size()) > 0;
}

bool IsViablePrefix(const Grammar& grammar, absl::string_view bytes) {
  Rec r(grammar, bytes, true);
  std::set<size_t> ends = r.Ends(grammar.rule(grammar.root()).body, 0);
  return ends.count(Rec::kPastEnd) > 0 || ends.count(bytes.size()) > 0;
}

}  // namespace minfer::grammar::testing
