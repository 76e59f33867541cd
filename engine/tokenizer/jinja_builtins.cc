// Filters, tests, methods and globals of the Jinja interpreter, with the
// behaviour of Jinja2 3.1's builtins (jinja2/filters.py, jinja2/tests.py),
// Python's str and dict methods, and transformers' chat-template globals
// (raise_exception, strftime_now, and tojson as json.dumps).
//
// Marks: results that are pieces of the input (trim, strip, split, join,
// slicing, first, ...) keep the marks of those pieces; results computed in
// other ways (upper, replace, tojson, indent, ...) are marked as a whole
// when their input holds marked text.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "engine/base/status.h"
#include "engine/tokenizer/jinja_internal.h"
#include "engine/tokenizer/unicode.h"
#include "unicode/uchar.h"

namespace minfer::tokenizer::jinja::internal {

absl::Status BindArgs(const Args& args, absl::string_view function,
                      std::initializer_list<absl::string_view> names,
                      std::vector<const Value*>* out) {
  out->assign(names.size(), nullptr);
  if (args.positional.size() > names.size()) {
    return Error(absl::StrCat(function, "() takes at most ", names.size(), " argument(s) (",
                              args.positional.size(), " given)"));
  }
  for (size_t i = 0; i < args.positional.size(); ++i) (*out)[i] = &args.positional[i];
  for (const auto& [k, v] : args.keyword) {
    size_t i = 0;
    for (absl::string_view n : names) {
      if (n == k) break;
      ++i;
    }
    if (i == names.size()) {
      return Error(absl::StrCat(function, "() got an unexpected keyword argument '", k, "'"));
    }
    if ((*out)[i] != nullptr) {
      return Error(absl::StrCat(function, "() got multiple values for argument '", k, "'"));
    }
    (*out)[i] = &v;
  }
  return absl::OkStatus();
}

namespace {

using Kind = Value::Kind;

// An argument that was given and is not None.
bool Given(const Value* v) {
  return v != nullptr && v->kind() != Kind::kNone && v->kind() != Kind::kUndefined;
}

absl::StatusOr<std::string> StrArg(const Value* v, absl::string_view what) {
  if (v->kind() != Kind::kString) {
    return Error(absl::StrCat(what, " must be a string, not '", TypeName(*v), "'"));
  }
  return ValueAccess::Str(*v).text;
}

absl::StatusOr<int64_t> IntArg(const Value* v, absl::string_view what) {
  if (v->kind() == Kind::kInt) return v->int_value();
  if (v->kind() == Kind::kBool) return v->bool_value() ? 1 : 0;
  return Error(absl::StrCat(what, " must be an integer, not '", TypeName(*v), "'"));
}

// A derived string: marked as a whole when `marked`.
absl::StatusOr<Value> Derived(Renderer& r, std::string text, bool marked) {
  return r.NewString(std::move(text), marked);
}

// Jinja2's attribute paths ("a.b.0") for sort, map, selectattr, ...
absl::StatusOr<Value> AttrPath(Renderer& r, const Value& item, absl::string_view path) {
  Value v = item;
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    Value key;
    if (!part.empty() && std::all_of(part.begin(), part.end(), absl::ascii_isdigit)) {
      key = Value::Int(std::atoll(std::string(part).c_str()));
    } else {
      key = Value::String(std::string(part));
    }
    ASSIGN_OR_RETURN(v, r.GetItem(v, key));
  }
  return v;
}

// ---------------------------------------------------------------------------
// String helpers

// A set of code points, or Python whitespace when `chars` is null.
struct CharSet {
  std::vector<char32_t> cps;
  bool whitespace = true;
  bool Has(char32_t cp) const {
    if (whitespace) return IsPySpace(cp);
    return std::find(cps.begin(), cps.end(), cp) != cps.end();
  }
};

absl::StatusOr<CharSet> MakeCharSet(const Value* chars) {
  CharSet set;
  if (!Given(chars)) return set;
  ASSIGN_OR_RETURN(std::string s, StrArg(chars, "the characters to strip"));
  set.whitespace = false;
  for (size_t i = 0; i < s.size();) {
    size_t len;
    set.cps.push_back(CodePointAt(s, i, &len));
    i += len;
  }
  return set;
}

StrData Strip(const StrData& s, const CharSet& set, bool left, bool right) {
  const std::vector<size_t> off = CodePointOffsets(s.text);
  size_t b = 0, e = off.size() - 1;  // code point indices
  auto cp_at = [&](size_t i) {
    size_t len;
    return CodePointAt(s.text, off[i], &len);
  };
  if (left) {
    while (b < e && set.Has(cp_at(b))) ++b;
  }
  if (right) {
    while (e > b && set.Has(cp_at(e - 1))) --e;
  }
  return Substr(s, off[b], off[e]);
}

absl::StatusOr<Value> StripValue(Renderer& r, const Value& v, const Value* chars, bool left,
                                 bool right) {
  ASSIGN_OR_RETURN(CharSet set, MakeCharSet(chars));
  StrData s = Display(v);
  RETURN_IF_ERROR(r.ChargeScan(s.text.size() * (set.whitespace ? 1 : set.cps.size() + 1)));
  return r.NewString(Strip(s, set, left, right));
}

// Python's str.replace.
std::string ReplaceText(absl::string_view s, absl::string_view old, absl::string_view repl,
                        int64_t count) {
  std::string out;
  if (count < 0) count = std::numeric_limits<int64_t>::max();
  if (old.empty()) {
    const std::vector<size_t> off = CodePointOffsets(s);
    for (size_t i = 0; i + 1 < off.size(); ++i) {
      if (count > 0) {
        absl::StrAppend(&out, repl);
        --count;
      }
      absl::StrAppend(&out, s.substr(off[i], off[i + 1] - off[i]));
    }
    if (count > 0) absl::StrAppend(&out, repl);
    return out;
  }
  size_t pos = 0;
  while (count > 0) {
    const size_t at = s.find(old, pos);
    if (at == absl::string_view::npos) break;
    absl::StrAppend(&out, s.substr(pos, at - pos));
    absl::StrAppend(&out, repl);
    pos = at + old.size();
    --count;
  }
  absl::StrAppend(&out, s.substr(pos));
  return out;
}

// Python's str.splitlines() line boundaries.
bool IsLineBreak(char32_t cp) {
  switch (cp) {
    case '\n':
    case '\r':
    case 0x0B:
    case 0x0C:
    case 0x1C:
    case 0x1D:
    case 0x1E:
    case 0x85:
    case 0x2028:
    case 0x2029:
      return true;
    default:
      return false;
  }
}

// [begin, end) byte ranges of the lines of `s` (without their breaks, or
// with them when `keepends`).
std::vector<std::pair<size_t, size_t>> SplitLines(absl::string_view s, bool keepends) {
  std::vector<std::pair<size_t, size_t>> lines;
  size_t start = 0;
  for (size_t i = 0; i < s.size();) {
    size_t len;
    const char32_t cp = CodePointAt(s, i, &len);
    if (!IsLineBreak(cp)) {
      i += len;
      continue;
    }
    size_t brk = len;
    if (cp == '\r' && i + 1 < s.size() && s[i + 1] == '\n') brk = 2;
    lines.emplace_back(start, keepends ? i + brk : i);
    i += brk;
    start = i;
  }
  if (start < s.size()) lines.emplace_back(start, s.size());
  return lines;
}

absl::StatusOr<Value> SplitValue(Renderer& r, const Value& self, Args& args, bool from_right) {
  std::vector<const Value*> a;
  RETURN_IF_ERROR(BindArgs(args, from_right ? "rsplit" : "split", {"sep", "maxsplit"}, &a));
  const StrData& s = ValueAccess::Str(self);
  int64_t maxsplit = -1;
  if (a[1] != nullptr) {
    ASSIGN_OR_RETURN(maxsplit, IntArg(a[1], "maxsplit"));
  }
  if (maxsplit < 0) maxsplit = std::numeric_limits<int64_t>::max();
  std::vector<std::pair<size_t, size_t>> parts;  // byte ranges
  if (!Given(a[0])) {
    // Runs of whitespace separate; no empty strings.
    const std::vector<size_t> off = CodePointOffsets(s.text);
    const size_t n = off.size() - 1;
    auto space = [&](size_t i) {
      size_t len;
      return IsPySpace(CodePointAt(s.text, off[i], &len));
    };
    if (!from_right) {
      size_t i = 0;
      while (true) {
        while (i < n && space(i)) ++i;
        if (i == n) break;
        if (static_cast<int64_t>(parts.size()) == maxsplit) {
          size_t e = n;
          while (e > i && space(e - 1)) --e;
          parts.emplace_back(off[i], off[e]);
          break;
        }
        size_t j = i;
        while (j < n && !space(j)) ++j;
        parts.emplace_back(off[i], off[j]);
        i = j;
      }
    } else {
      size_t i = n;
      while (true) {
        while (i > 0 && space(i - 1)) --i;
        if (i == 0) break;
        if (static_cast<int64_t>(parts.size()) == maxsplit) {
          size_t b = 0;
          while (b < i && space(b)) ++b;
          parts.emplace_back(off[b], off[i]);
          break;
        }
        size_t j = i;
        while (j > 0 && !space(j - 1)) --j;
        parts.emplace_back(off[j], off[i]);
        i = j;
      }
      std::reverse(parts.begin(), parts.end());
    }
  } else {
    ASSIGN_OR_RETURN(std::string sep, StrArg(a[0], "sep"));
    if (sep.empty()) return Error("empty separator");
    if (!from_right) {
      size_t pos = 0;
      while (static_cast<int64_t>(parts.size()) < maxsplit) {
        const size_t at = s.text.find(sep, pos);
        if (at == std::string::npos) break;
        parts.emplace_back(pos, at);
        pos = at + sep.size();
      }
      parts.emplace_back(pos, s.text.size());
    } else {
      size_t end = s.text.size();
      while (static_cast<int64_t>(parts.size()) < maxsplit && end >= sep.size()) {
        const size_t at = s.text.rfind(sep, end - sep.size());
        if (at == std::string::npos) break;
        parts.emplace_back(at + sep.size(), end);
        end = at;
      }
      parts.emplace_back(0, end);
      std::reverse(parts.begin(), parts.end());
    }
  }
  RETURN_IF_ERROR(r.CheckListSize(parts.size()));
  std::vector<Value> items;
  items.reserve(parts.size());
  for (const auto& [b, e] : parts) {
    ASSIGN_OR_RETURN(Value v, r.NewString(Substr(s, b, e)));
    items.push_back(std::move(v));
  }
  return r.NewList(std::move(items));
}

size_t CodePointIndex(absl::string_view s, size_t byte) {
  return CodePointCount(s.substr(0, byte));
}

// ---------------------------------------------------------------------------
// String methods

absl::StatusOr<Value> MStrip(Renderer& r, const Value& self, Args& args) {
  std::vector<const Value*> a;
  RETURN_IF_ERROR(BindArgs(args, "strip", {"chars"}, &a));
  return StripValue(r, self, a[0], true, true);
}
absl::StatusOr<Value> MLstrip(Renderer& r, const Value& self, Args& args) {
  std::vector<const Value*> a;
  RETURN_IF_ERROR(BindArgs(args, "lstrip", {"chars"}, &a));
  return StripValue(r, self, a[0], true, false);
}
absl::StatusOr<Value> MRstrip(Renderer& r, const Value& self, Args& args) {
  std::vector<const Value*> a;
  RETURN_IF_ERROR(BindArgs(args, "rstrip", {"chars"}, &a));
  return StripValue(r, self, a[0], false, true);
}
absl::StatusOr<Value> MSplit(Renderer& r, const Value& self, Args& args) {
  return SplitValue(r, self, args, false);
}
absl::StatusOr<Value> MRsplit(Renderer& r, const Value& self, Args& args) {
  return SplitValue(r, self, args, true);
}

absl::StatusOr<Value> MSplitlines(Renderer& r, const Value& self, Args& args) {
  std::vector<const Value*> a;
  RETURN_IF_ERROR(BindArgs(args, "splitlines", {"keepends"}, &a));
  const StrData& s = ValueAccess::Str(self);
  std::vector<Value> items;
  for (const auto& [b, e] : SplitLines(s.text, a[0] != nullptr && Truthy(*a[0]))) {
    ASSIGN_OR_RETURN(Value v, r.NewString(Substr(s, b, e)));
    items.push_back(std::move(v));
  }
  return r.NewList(std::move(items));
}

absl::StatusOr<Value> AffixTest(const Value& self, Args& args, bool prefix) {
  const char* name = prefix ? "startswith" : "endswith";
  std::vector<const Value*> a;
  RETURN_IF_ERROR(BindArgs(args, name, {"affix", "start", "end"}, &a));
  if (a[0] == nullptr) return Error(absl::StrCat(name, "() takes at least 1 argument"));
  if (a[1] != nullptr || a[2] != nullptr) {
    return Error(absl::StrCat(name, "() with start/end positions is not supported"));
  }
  const std::string& s = ValueAccess::Str(self).text;
  std::vector<const Value*> options;
  if (a[0]->kind() == Kind::kList) {
    for (const Value& v : ValueAccess::List(*a[0]).items) options.push_back(&v);
  } else {
    options.push_back(a[0]);
  }
  for (const Value* o : options) {
    if (o->kind() != Kind::kString) {
      return Error(absl::StrCat(name, "() arguments must be str or a tuple of str, not '",
                                TypeName(*o), "'"));
    }
    const std::string& x = ValueAccess::Str(*o).text;
    if (prefix ? absl::StartsWith(s, x) : absl::EndsWith(s, x)) return Value::Bool(true);
  }
  return Value::Bool(false);
}
absl::StatusOr<Value> MStartswith(Renderer&, const Value& self, Args& args) {
  return AffixTest(self, args, true);
}
absl::StatusOr<Value> MEndswith(Renderer&, const Value& self, Args& args) {
  return AffixTest(self, args, false);
}

absl::StatusOr<Value> NoArgs(Args& args, absl::string_view name) {
  if (!args.positional.empty() || !args.keyword.empty()) {
    return Error(absl::StrCat(name, "() takes no arguments"));
  }
  return Value();
}

absl::StatusOr<Value> MUpper(Renderer& r, const Value& self, Args& args) {
  RETURN_IF_ERROR(NoArgs(args, "upper").status());
  const StrData& s = ValueAccess::Str(self);
  return Derived(r, PyUpper(s.text), !s.marks.empty());
}
absl::StatusOr<Value> MLower(Renderer& r, const Value& self, Args& args) {
  RETURN_IF_ERROR(NoArgs(args, "lower").status());
  const StrData& s = ValueAccess::Str(self);
  return Derived(r, PyLower(s.text), !s.marks.empty());
}
absl::StatusOr<Value> MTitle(Renderer& r, const Value& self, Args& args) {
  RETURN_IF_ERROR(NoArgs(args, "title").status());
  const StrData& s = ValueAccess::Str(self);
  return Derived(r, PyTitle(s.text), !s.marks.empty());
}
absl::StatusOr<Value> MCapitalize(Renderer& r, const Value& self, Args& args) {
  RETURN_IF_ERROR(NoArgs(args, "capitalize").status());
  const StrData& s = ValueAccess::Str(self);
  return Derived(r, PyCapitalize(s.text), !s.marks.empty());
}

absl::StatusOr<Value> MReplace(Renderer& r, const Value& self, Args& args) {
  std::vector<const Value*> a;
  RETURN_IF_ERROR(BindArgs(args, "replace", {"old", "new", "count"}, &a));
  if (a[0] == nullptr || a[1] == nullptr) return Error("replace() takes at least 2 arguments");
  ASSIGN_OR_RETURN(std::string old, StrArg(a[0], "replace() argument 1"));
  ASSIGN_OR_RETURN(std::string repl, StrArg(a[1], "replace() argument 2"));
  int64_t count = -1;
  if (Given(a[2])) {
    ASSIGN_OR_RETURN(count, IntArg(a[2], "count"));
  }
  const StrData& s = ValueAccess::Str(self);
  std::string out = ReplaceText(s.text, old, repl, count);
  if (out.size() > r.options().limits.max_string_bytes)
    return Exhausted("replace() result too large");
  return Derived(r, std::move(out), !s.marks.empty() || HasMarks(*a[1]));
}

absl::StatusOr<Value> FindImpl(const Value& self, Args& args, bool reverse) {
  std::vector<const Value*> a;
  RETURN_IF_ERROR(BindArgs(args, reverse ? "rfind" : "find", {"sub"}, &a));
  if (a[0] == nullptr) return Error("find() takes exactly 1 argument");
  ASSIGN_OR_RETURN(std::string sub, StrArg(a[0], "find() argument"));
  const std::string& s = ValueAccess::Str(self).text;
  const size_t at = reverse ? s.rfind(sub) : s.find(sub);
  if (at == std::string::npos) return Value::Int(-1);
  return Value::Int(static_cast<int64_t>(CodePointIndex(s, at)));
}
absl::StatusOr<Value> MFind(Renderer&, const Value& self, Args& args) {
  return FindImpl(self, args, false);
}
absl::StatusOr<Value> MRfind(Renderer&, const Value& self, Args& args) {
  return FindImpl(self, args, true);
}

absl::StatusOr<Value> MCount(Renderer&, const Value& self, Args& args) {
  std::vector<const Value*> a;
  RETURN_IF_ERROR(BindArgs(args, "count", {"sub"}, &a));
  if (a[0] == nullptr) return Error("count() takes exactly 1 argument");
  ASSIGN_OR_RETURN(std::string sub, StrArg(a[0], "count() argument"));
  const std::string& s = ValueAccess::Str(self).text;
  if (sub.empty()) return Value::Int(static_cast<int64_t>(CodePointCount(s) + 1));
  int64_t n = 0;
  for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
  return Value::Int(n);
}

absl::StatusOr<Value> MJoin(Renderer& r, const Value& self, Args& args) {
  std::vector<const Value*> a;
  RETURN_IF_ERROR(BindArgs(args, "join", {"iterable"}, &a));
  if (a[0] == nullptr) return Error("join() takes exactly 1 argument");
  ASSIGN_OR_RETURN(std::vector<Value> items, r.Iterate(*a[0]));
  const StrData& sep = ValueAccess::Str(self);
  StrBuilder b;
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].kind() != Kind::kString) {
      return Error(absl::StrCat("sequence item ", i, ": expected str instance, ",
                                TypeName(items[i]), " found"));
    }
    if (i > 0) b.Append(sep);
    b.Append(ValueAccess::Str(items[i]));
    if (b.size() > r.options().limits.max_string_bytes) return Exhausted("join() result too large");
  }
  return r.NewString(b.Take());
}

// --- dict methods --------------------------------------------------------------

absl::StatusOr<Value> MGet(Renderer&, const Value& self, Args& args) {
  std::vector<const Value*> a;
  RETURN_IF_ERROR(BindArgs(args, "get", {"key", "default"}, &a));
  if (a[0] == nullptr) return Error("get() takes at least 1 argument");
  if (a[0]->kind() == Kind::kString) {
    if (const Value* v = ValueAccess::Dict(self).Find(ValueAccess::Str(*a[0]).text)) return *v;
  }
  return a[1] != nullptr ? *a[1] : Value::None();
}

absl::StatusOr<Value> DictItems(Renderer& r, const Value& d) {
  const DictData& data = ValueAccess::Dict(d);
  std::vector<Value> items;
  items.reserve(data.items.size());
  for (const auto& [k, v] : data.items) {
    ASSIGN_OR_RETURN(Value key, r.NewString(k, data.keys_marked));
    ASSIGN_OR_RETURN(Value pair, r.NewList({std::move(key), v}, /*tuple=*/true));
    items.push_back(std::move(pair));
  }
  return r.NewList(std::move(items));
}

absl::StatusOr<Value> MItems(Renderer& r, const Value& self, Args& args) {
  RETURN_IF_ERROR(NoArgs(args, "items").status());
  return DictItems(r, self);
}
absl::StatusOr<Value> MKeys(Renderer& r, const Value& self, Args& args) {
  RETURN_IF_ERROR(NoArgs(args, "keys").status());
  ASSIGN_OR_RETURN(std::vector<Value> keys, r.Iterate(self));
  return r.NewList(std::move(keys));
}
absl::StatusOr<Value> MValues(Renderer& r, const Value& self, Args& args) {
  RETURN_IF_ERROR(NoArgs(args, "values").status());
  std::vector<Value> values;
  for (const auto& [k, v] : ValueAccess::Dict(self).items) values.push_back(v);
  return r.NewList(std::move(values));
}

// ---------------------------------------------------------------------------
// Filters

absl::StatusOr<Value> FAbs(Renderer&, const Value& v, Args& args) {
  RETURN_IF_ERROR(NoArgs(args, "abs").status());
  if (v.kind() == Kind::kInt || v.kind() == Kind::kBool) {
    const int64_t x = v.kind() == Kind::kBool ? v.bool_value() : v.int_value();
    if (x == std::numeric_limits<int64_t>::min()) return Error("integer overflow");
    return Value::Int(x < 0 ? -x : x);
  }
  if (v.kind() == Kind::kFloat) return Value::Float(std::fabs(v.float_value()));
  return Error(absl::StrCat("bad operand type for abs(): '", TypeName(v), "'"));
}

absl::StatusOr<Value> FCapitalize(Renderer& r, const Value& v, Args& args) {
  RETURN_IF_ERROR(NoArgs(args, "capitalize").status());
  const StrData s = Display(v);
  return Derived(r, PyCapitalize(s.text), !s.marks.empty());
}
absl::StatusOr<Value> FLower(Renderer& r, const Value& v, Args& args) {
  RETURN_IF_ERROR(NoArgs(args, "lower").status());
  const StrData s = Display(v);
  return Derived(r, PyLower(s.text), !s.marks.empty());
}
absl::StatusOr<Value> FUpper(Renderer& r, const Value& v, Args& args) {
  RETURN_IF_ERROR(NoArgs(args, "upper").status());
  const StrData s = Display(v);
  return Derived(r, PyUpper(s.text), !s.marks.empty());
}
absl::StatusOr<Value> FTitle(Renderer& r, const Value& v, Args& args) {
  RETURN_IF_ERROR(NoArgs(args, "title").status());
  const StrData s = Display(v);
  return Derived(r, PyTitle(s.text), !s.marks.empty());
}

absl::StatusOr<Value> FLength(Renderer&, const Value& v, Args& args) {
  RETURN_IF_ERROR(NoArgs(args, "length").status());
  switch (v.kind()) {
    case Kind::kUndefined:
      return Value::Int(0);
    case Kind::kString:
      return Value::Int(static_cast<int64_t>(CodePointCount(ValueAccess::Str(v).text)));
    case Kind::kList:
      return Value::Int(static_cast<int64_t>(ValueAccess::List(v).items.size()));
    case Kind::kDict:
      return Value::Int(static_cast<int64_t>(ValueAccess::Dict(v).items.size()));
    default:
      return Error(absl::StrCat("object of type '", TypeName(v), "' has no len()"));
  }
}

absl::StatusOr<Value> FDefault(Renderer&, const Value& v, Args& args) {
  std::vector<const Value*> a;
  RETURN_IF_ERROR(BindArgs(args, "default", {"default_value", "boolean"}, &a));
  const bool boolean = a[1] != nullptr && Truthy(*a[1]);
  if (v.is_undefined() || (boolean && !Truthy(v))) {
    return a[0] != nullptr ? *a[0] : Value::String("");
  }
  return v;
}

absl::StatusOr<Value> FFirst(Renderer& r, const Value& v, Args& args) {
  RETURN_IF_ERROR(NoArgs(args, "first").status());
  if (v.kind() == Kind::kList) {
    const auto& items = ValueAccess::List(v).items;
    if (items.empty()) return ValueAccess::Undefined("no first item, sequence was empty");
    return items.front();
  }
  ASSIGN_OR_RETURN(std::vector<Value> items, r.Iterate(v));
  if (items.empty()) return ValueAccess::Undefined("no first item, sequence was empty");
  return items.front();
}

absl::StatusOr<Value> FLast(Renderer& r, const Value& v, Args& args) {
  RETURN_IF_ERROR(NoArgs(args, "last").status());
  if (v.kind() == Kind::kList) {
    const auto& items = ValueAccess::List(v).items;
    if (items.empty()) return ValueAccess::Undefined("no last item, sequence was empty");
    return items.back();
  }
  ASSIGN_OR_RETURN(std::vector<Value> items, r.Iterate(v));
  if (items.empty()) return ValueAccess::Undefined("no last item, sequence was empty");
  return items.back();
}

absl::StatusOr<Value> FList(Renderer& r, const Value& v, Args& args) {
  RETURN_IF_ERROR(NoArgs(args, "list").status());
  ASSIGN_OR_RETURN(std::vector<Value> items, r.Iterate(v));
  return r.NewList(std::move(items));
}

absl::StatusOr<Value> FItems(Renderer& r, const Value& v, Args& args) {
  RETURN_IF_ERROR(NoArgs(args, "items").status());
  if (v.is_undefined()) return r.NewList({});
  if (v.kind() != Kind::kDict) return Error("can only get item pairs from a mapping");
  return DictItems(r, v);
}

absl::StatusOr<Value> FString(Renderer& r, const Value& v, Args& args) {
  RETURN_IF_ERROR(NoArgs(args, "string").status());
  return r.ToStr(v);
}

absl::StatusOr<Value> FSafe(Renderer&, const Value& v, Args& args) {
  RETURN_IF_ERROR(NoArgs(args, "safe").status());
  return v;
}

absl::StatusOr<Value> FTrim(Renderer& r, const Value& v, Args& args) {
  std::vector<const Value*> a;
  RETURN_IF_ERROR(BindArgs(args, "trim", {"chars"}, &a));
  return StripValue(r, v, a[0], true, true);
}

absl::StatusOr<Value> FReplace(Renderer& r, const Value& v, Args& args) {
  std::vector<const Value*> a;
  RETURN_IF_ERROR(BindArgs(args, "replace", {"old", "new", "count"}, &a));
  if (a[0] == nullptr || a[1] == nullptr) return Error("replace() takes at least 2 arguments");
  const StrData s = Display(v);
  const StrData repl = Display(*a[1]);
  int64_t count = -1;
  if (Given(a[2])) {
    ASSIGN_OR_RETURN(count, IntArg(a[2], "count"));
  }
  std::string out = ReplaceText(s.text, Display(*a[0]).text, repl.text, count);
  if (out.size() > r.options().limits.max_string_bytes)
    return Exhausted("replace() result too large");
  return Derived(r, std::move(out), !s.marks.empty() || !repl.marks.empty());
}

absl::StatusOr<Value> FJoin(Renderer& r, const Value& v, Args& args) {
  std::vector<const Value*> a;
  RETURN_IF_ERROR(BindArgs(args, "join", {"d", "attribute"}, &a));
  ASSIGN_OR_RETURN(std::vector<Value> items, r.Iterate(v));
  const StrData sep = a[0] != nullptr ? Display(*a[0]) : StrData{};
  StrBuilder b;
  for (size_t i = 0; i < items.size(); ++i) {
    Value item = items[i];
    if (Given(a[1])) {
      ASSIGN_OR_RETURN(std::string path, StrArg(a[1], "attribute"));
      ASSIGN_OR_RETURN(item, AttrPath(r, item, path));
    }
    if (i > 0) b.Append(sep);
    b.Append(Display(item));
    if (b.size() > r.options().limits.max_string_bytes) return Exhausted("join() result too large");
  }
  return r.NewString(b.Take());
}

absl::StatusOr<Value> FReverse(Renderer& r, const Value& v, Args& args) {
  RETURN_IF_ERROR(NoArgs(args, "reverse").status());
  if (v.kind() == Kind::kString) {
    const StrData& s = ValueAccess::Str(v);
    const std::vector<size_t> off = CodePointOffsets(s.text);
    StrBuilder b;
    for (size_t i = off.size() - 1; i > 0; --i) b.Append(Substr(s, off[i - 1], off[i]));
    return r.NewString(b.Take());
  }
  ASSIGN_OR_RETURN(std::vector<Value> items, r.Iterate(v));
  std::reverse(items.begin(), items.end());
  return r.NewList(std::move(items));
}

// Sort keys: an attribute path, and strings lower-cased unless
// case-sensitive (Jinja2's ignore_case).
absl::StatusOr<std::vector<Value>> SortKeys(Renderer& r, const std::vector<Value>& items,
                                            const Value* attribute, bool case_sensitive) {
  std::vector<Value> keys;
  keys.reserve(items.size());
  std::string path;
  if (Given(attribute)) {
    if (attribute->kind() == Kind::kInt) {
      path = absl::StrCat(attribute->int_value());
    } else {
      ASSIGN_OR_RETURN(path, StrArg(attribute, "attribute"));
    }
  }
  for (const Value& item : items) {
    Value k = item;
    if (!path.empty()) {
      ASSIGN_OR_RETURN(k, AttrPath(r, item, path));
    }
    if (!case_sensitive && k.kind() == Kind::kString) {
      k = Value::String(PyLower(ValueAccess::Str(k).text));
    }
    keys.push_back(std::move(k));
  }
  return keys;
}

// Indices of `keys` in sorted order (stable), or the comparison's error.
absl::StatusOr<std::vector<size_t>> SortOrder(Renderer& r, const std::vector<Value>& keys,
                                              bool reverse) {
  const size_t n = keys.size();
  RETURN_IF_ERROR(r.ChargeSteps(static_cast<int64_t>(n) * (64 - __builtin_clzll(n | 1))));
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  absl::Status error;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (!error.ok()) return false;
    absl::StatusOr<int> c = Compare(keys[a], keys[b]);
    if (!c.ok()) {
      error = c.status();
      return false;
    }
    return reverse ? *c > 0 : *c < 0;
  });
  RETURN_IF_ERROR(error);
  return order;
}

absl::StatusOr<Value> FSort(Renderer& r, const Value& v, Args& args) {
  std::vector<const Value*> a;
  RETURN_IF_ERROR(BindArgs(args, "sort", {"reverse", "case_sensitive", "attribute"}, &a));
  ASSIGN_OR_RETURN(std::vector<Value> items, r.Iterate(v));
  ASSIGN_OR_RETURN(std::vector<Value> keys,
                   SortKeys(r, items, a[2], a[1] != nullptr && Truthy(*a[1])));
  ASSIGN_OR_RETURN(std::vector<size_t> order, SortOrder(r, keys, a[0] != nullptr && Truthy(*a[0])));
  std::vector<Value> sorted;
  sorted.reserve(items.size());
  for (size_t i : order) sorted.push_back(items[i]);
  return r.NewList(std::move(sorted));
}

absl::StatusOr<Value> FDictsort(Renderer& r, const Value& v, Args& args) {
  std::vector<const Value*> a;
  RETURN_IF_ERROR(BindArgs(args, "dictsort", {"case_sensitive", "by", "reverse"}, &a));
  if (v.kind() != Kind::kDict) return Error("dictsort() needs a mapping");
  int pos = 0;
  if (Given(a[1])) {
    ASSIGN_OR_RETURN(std::string by, StrArg(a[1], "by"));
    if (by == "value") {
      pos = 1;
    } else if (by != "key") {
      return Error("you can only sort by either 'key' or 'value'");
    }
  }
  ASSIGN_OR_RETURN(Value pairs, DictItems(r, v));
  const std::vector<Value>& items = ValueAccess::List(pairs).items;
  std::vector<Value> ks;
  for (const Value& p : items) ks.push_back(ValueAccess::List(p).items[static_cast<size_t>(pos)]);
  ASSIGN_OR_RETURN(std::vector<Value> keys,
                   SortKeys(r, ks, nullptr, a[0] != nullptr && Truthy(*a[0])));
  ASSIGN_OR_RETURN(std::vector<size_t> order, SortOrder(r, keys, a[2] != nullptr && Truthy(*a[2])));
  std::vector<Value> sorted;
  for (size_t i : order) sorted.push_back(items[i]);
  return r.NewList(std::move(sorted));
}

absl::StatusOr<Value> FUnique(Renderer& r, const Value& v, Args& args) {
  std::vector<const Value*> a;
  RETURN_IF_ERROR(BindArgs(args, "unique", {"case_sensitive", "attribute"}, &a));
  ASSIGN_OR_RETURN(std::vector<Value> items, r.Iterate(v));
  ASSIGN_OR_RETURN(std::vector<Value> keys,
                   SortKeys(r, items, a[1], a[0] != nullptr && Truthy(*a[0])));
  std::vector<Value> out;
  std::vector<size_t> seen;
  for (size_t i = 0; i < items.size(); ++i) {
    RETURN_IF_ERROR(r.ChargeSteps(static_cast<int64_t>(seen.size()) + 1));
    bool dup = false;
    for (size_t j : seen) {
      if (Equals(keys[i], keys[j])) {
        dup = true;
        break;
      }
    }
    if (!dup) {
      seen.push_back(i);
      out.push_back(items[i]);
    }
  }
  return r.NewList(std::move(out));
}

absl::StatusOr<Value> MinMax(Renderer& r, const Value& v, Args& args, bool max) {
  std::vector<const Value*> a;
  RETURN_IF_ERROR(BindArgs(args, max ? "max" : "min", {"case_sensitive", "attribute"}, &a));
  ASSIGN_OR_RETURN(std::vector<Value> items, r.Iterate(v));
  if (items.empty()) return ValueAccess::Undefined("no items in an empty sequence");
  ASSIGN_OR_RETURN(std::vector<Value> keys,
                   SortKeys(r, items, a[1], a[0] != nullptr && Truthy(*a[0])));
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    ASSIGN_OR_RETURN(int c, Compare(keys[i], keys[best]));
    if (max ? c > 0 : c < 0) best = i;
  }
  return items[best];
}
absl::StatusOr<Value> FMin(Renderer& r, const Value& v, Args& args) {
  return MinMax(r, v, args, false);
}
absl::StatusOr<Value> FMax(Renderer& r, const Value& v, Args& args) {
  return MinMax(r, v, args, true);
}

absl::StatusOr<Value> FSum(Renderer& r, const Value& v, Args& args) {
  std::vector<const Value*> a;
  RETURN_IF_ERROR(BindArgs(args, "sum", {"attribute", "start"}, &a));
  ASSIGN_OR_RETURN(std::vector<Value> items, r.Iterate(v));
  Value total = a[1] != nullptr ? *a[1] : Value::Int(0);
  for (Value item : items) {
    if (Given(a[0])) {
      ASSIGN_OR_RETURN(std::string path, StrArg(a[0], "attribute"));
      ASSIGN_OR_RETURN(item, AttrPath(r, item, path));
    }
    ASSIGN_OR_RETURN(total, r.BinaryOp(BinOp::kAdd, total, item));
  }
  return total;
}

absl::StatusOr<Value> FMap(Renderer& r, const Value& v, Args& args) {
  ASSIGN_OR_RETURN(std::vector<Value> items, r.Iterate(v));
  std::vector<Value> out;
  out.reserve(items.size());
  const Value* attribute = nullptr;
  const Value* def = nullptr;
  for (const auto& [k, x] : args.keyword) {
    if (k == "attribute") attribute = &x;
    if (k == "default") def = &x;
  }
  if (attribute != nullptr) {
    ASSIGN_OR_RETURN(std::string path, StrArg(attribute, "attribute"));
    for (const Value& item : items) {
      ASSIGN_OR_RETURN(Value x, AttrPath(r, item, path));
      if (x.is_undefined() && def != nullptr) x = *def;
      out.push_back(std::move(x));
    }
    return r.NewList(std::move(out));
  }
  if (args.positional.empty() || args.positional[0].kind() != Kind::kString) {
    return Error("map() needs a filter name or attribute=");
  }
  const std::string name(ValueAccess::Str(args.positional[0]).text);
  Args rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : items) {
    ASSIGN_OR_RETURN(Value x, r.ApplyFilter(name, item, rest));
    out.push_back(std::move(x));
  }
  return r.NewList(std::move(out));
}

// select / reject / selectattr / rejectattr.
absl::StatusOr<Value> SelectImpl(Renderer& r, const Value& v, Args& args, bool select,
                                 bool by_attr) {
  ASSIGN_OR_RETURN(std::vector<Value> items, r.Iterate(v));
  size_t next = 0;
  std::string path;
  if (by_attr) {
    if (args.positional.empty()) return Error("selectattr()/rejectattr() need an attribute");
    ASSIGN_OR_RETURN(path, StrArg(&args.positional[0], "attribute"));
    next = 1;
  }
  std::string test;
  if (args.positional.size() > next) {
    ASSIGN_OR_RETURN(test, StrArg(&args.positional[next], "the test name"));
    ++next;
  }
  Args rest;
  rest.positional.assign(
      args.positional.begin() + static_cast<ptrdiff_t>(std::min(next, args.positional.size())),
      args.positional.end());
  rest.keyword = args.keyword;
  std::vector<Value> out;
  for (const Value& item : items) {
    Value x = item;
    if (by_attr) {
      ASSIGN_OR_RETURN(x, AttrPath(r, item, path));
    }
    bool ok;
    if (test.empty()) {
      ok = Truthy(x);
    } else {
      ASSIGN_OR_RETURN(ok, r.ApplyTest(test, x, rest));
    }
    if (ok == select) out.push_back(item);
  }
  return r.NewList(std::move(out));
}
absl::StatusOr<Value> FSelect(Renderer& r, const Value& v, Args& args) {
  return SelectImpl(r, v, args, true, false);
}
absl::StatusOr<Value> FReject(Renderer& r, const Value& v, Args& args) {
  return SelectImpl(r, v, args, false, false);
}
absl::StatusOr<Value> FSelectattr(Renderer& r, const Value& v, Args& args) {
  return SelectImpl(r, v, args, true, true);
}
absl::StatusOr<Value> FRejectattr(Renderer& r, const Value& v, Args& args) {
  return SelectImpl(r, v, args, false, true);
}

absl::StatusOr<Value> FTojson(Renderer& r, const Value& v, Args& args) {
  // transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None,
  // separators=None, sort_keys=False), in that order.
  std::vector<const Value*> a;
  RETURN_IF_ERROR(
      BindArgs(args, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"}, &a));
  JsonOptions o;
  o.ensure_ascii = a[0] != nullptr && Truthy(*a[0]);
  o.sort_keys = a[3] != nullptr && Truthy(*a[3]);
  if (Given(a[1])) {
    if (a[1]->kind() == Kind::kString) {
      o.indent = std::string(ValueAccess::Str(*a[1]).text);
    } else {
      ASSIGN_OR_RETURN(int64_t n, IntArg(a[1], "indent"));
      o.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(n, 0, 64)), ' ');
    }
    // Assigned from a temporary: GCC 12 misreports operator=(const char*)
    // here (-Wrestrict).
    o.item_separator = std::string(",");
  }
  if (Given(a[2])) {
    if (a[2]->kind() != Kind::kList || ValueAccess::List(*a[2]).items.size() != 2) {
      return Error("separators must be a pair of strings");
    }
    const auto& seps = ValueAccess::List(*a[2]).items;
    ASSIGN_OR_RETURN(o.item_separator, StrArg(&seps[0], "the item separator"));
    ASSIGN_OR_RETURN(o.key_separator, StrArg(&seps[1], "the key separator"));
  }
  std::string out;
  RETURN_IF_ERROR(AppendJson(v, o, 0, &out));
  return Derived(r, std::move(out), HasMarks(v));
}

absl::StatusOr<Value> FIndent(Renderer& r, const Value& v, Args& args) {
  std::vector<const Value*> a;
  RETURN_IF_ERROR(BindArgs(args, "indent", {"width", "first", "blank"}, &a));
  std::string indention = "    ";
  if (a[0] != nullptr) {
    if (a[0]->kind() == Kind::kString) {
      indention = std::string(ValueAccess::Str(*a[0]).text);
    } else {
      ASSIGN_OR_RETURN(int64_t n, IntArg(a[0], "width"));
      indention.assign(static_cast<size_t>(std::clamp<int64_t>(n, 0, 1024)), ' ');
    }
  }
  const bool first = a[1] != nullptr && Truthy(*a[1]);
  const bool blank = a[2] != nullptr && Truthy(*a[2]);
  const StrData s = Display(v);
  // Jinja2 3.1: s += "\n" and then splitlines(), so that a trailing
  // newline survives.
  const std::string text = s.text + "\n";
  std::vector<std::string> lines;
  for (const auto& [b, e] : SplitLines(text, false)) lines.push_back(text.substr(b, e - b));
  std::string out;
  if (blank) {
    out = absl::StrJoin(lines, "\n" + indention);
  } else if (!lines.empty()) {
    out = lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      out += "\n";
      if (!lines[i].empty()) out += indention;
      out += lines[i];
    }
  }
  if (first) out = indention + out;
  return Derived(r, std::move(out), !s.marks.empty());
}

// Python's int(s) for a decimal string (whitespace, sign, underscores).
std::optional<int64_t> ParsePyInt(absl::string_view s, int base) {
  s = absl::StripAsciiWhitespace(s);
  bool neg = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    neg = s[0] == '-';
    s.remove_prefix(1);
  }
  if (base == 16 && (absl::StartsWith(s, "0x") || absl::StartsWith(s, "0X"))) s.remove_prefix(2);
  if (base == 8 && (absl::StartsWith(s, "0o") || absl::StartsWith(s, "0O"))) s.remove_prefix(2);
  if (base == 2 && (absl::StartsWith(s, "0b") || absl::StartsWith(s, "0B"))) s.remove_prefix(2);
  if (s.empty() || s.front() == '_' || s.back() == '_') return std::nullopt;
  __int128 v = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '_') {
      if (s[i - 1] == '_') return std::nullopt;
      continue;
    }
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'a' && c <= 'z') d = c - 'a' + 10;
    if (c >= 'A' && c <= 'Z') d = c - 'A' + 10;
    if (d < 0 || d >= base) return std::nullopt;
    v = v * base + d;
    if (v > static_cast<__int128>(std::numeric_limits<int64_t>::max()) + 1) return std::nullopt;
  }
  if (neg) v = -v;
  if (v > std::numeric_limits<int64_t>::max() || v < std::numeric_limits<int64_t>::min()) {
    return std::nullopt;
  }
  return static_cast<int64_t>(v);
}

// Python's float(s).
std::optional<double> ParsePyFloat(absl::string_view s) {
  s = absl::StripAsciiWhitespace(s);
  std::string t;
  for (char c : s) {
    if (c != '_') t.push_back(c);
  }
  if (t.empty()) return std::nullopt;
  const std::string lower = absl::AsciiStrToLower(t);
  for (absl::string_view sign : {"", "+", "-"}) {
    for (absl::string_view word : {"inf", "infinity"}) {
      if (lower == absl::StrCat(sign, word)) {
        return sign == "-" ? -HUGE_VAL : HUGE_VAL;
      }
    }
    if (lower == absl::StrCat(sign, "nan")) return std::nan("");
  }
  for (char c : lower) {
    if (!(absl::ascii_isdigit(c) || c == '.' || c == 'e' || c == '+' || c == '-'))
      return std::nullopt;
  }
  char* end = nullptr;
  const double d = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return d;
}

absl::StatusOr<Value> FInt(Renderer&, const Value& v, Args& args) {
  std::vector<const Value*> a;
  RETURN_IF_ERROR(BindArgs(args, "int", {"default", "base"}, &a));
  const Value def = a[0] != nullptr ? *a[0] : Value::Int(0);
  int64_t base = 10;
  if (a[1] != nullptr) {
    ASSIGN_OR_RETURN(base, IntArg(a[1], "base"));
  }
  switch (v.kind()) {
    case Kind::kInt:
      return v;
    case Kind::kBool:
      return Value::Int(v.bool_value() ? 1 : 0);
    case Kind::kFloat: {
      const double d = v.float_value();
      if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return def;
      return Value::Int(static_cast<int64_t>(d));
    }
    case Kind::kString: {
      const std::string& s = ValueAccess::Str(v).text;
      if (base >= 2 && base <= 36) {
        if (auto i = ParsePyInt(s, static_cast<int>(base))) return Value::Int(*i);
      }
      if (auto d = ParsePyFloat(s); d && std::isfinite(*d) && std::fabs(*d) < 9.2e18) {
        return Value::Int(static_cast<int64_t>(*d));
      }
      return def;
    }
    default:
      return def;
  }
}

absl::StatusOr<Value> FFloat(Renderer&, const Value& v, Args& args) {
  std::vector<const Value*> a;
  RETURN_IF_ERROR(BindArgs(args, "float", {"default"}, &a));
  const Value def = a[0] != nullptr ? *a[0] : Value::Float(0.0);
  switch (v.kind()) {
    case Kind::kFloat:
      return v;
    case Kind::kInt:
      return Value::Float(static_cast<double>(v.int_value()));
    case Kind::kBool:
      return Value::Float(v.bool_value() ? 1.0 : 0.0);
    case Kind::kString:
      if (auto d = ParsePyFloat(ValueAccess::Str(v).text)) return Value::Float(*d);
      return def;
    default:
      return def;
  }
}

absl::StatusOr<Value> FRound(Renderer&, const Value& v, Args& args) {
  std::vector<const Value*> a;
  RETURN_IF_ERROR(BindArgs(args, "round", {"precision", "method"}, &a));
  int64_t precision = 0;
  if (a[0] != nullptr) {
    ASSIGN_OR_RETURN(precision, IntArg(a[0], "precision"));
  }
  std::string method = "common";
  if (a[1] != nullptr) {
    ASSIGN_OR_RETURN(method, StrArg(a[1], "method"));
  }
  if (method != "common" && method != "ceil" && method != "floor") {
    return Error("method must be 'common', 'ceil' or 'floor'");
  }
  if (v.kind() == Kind::kInt && method == "common") return v;  // Python's round(int, n)
  if (v.kind() != Kind::kInt && v.kind() != Kind::kFloat && v.kind() != Kind::kBool) {
    return Error(absl::StrCat("round() needs a number, not '", TypeName(v), "'"));
  }
  const double x =
      v.kind() == Kind::kFloat
          ? v.float_value()
          : static_cast<double>(v.kind() == Kind::kBool ? v.bool_value() : v.int_value());
  const double scale =
      std::pow(10.0, static_cast<double>(std::clamp<int64_t>(precision, -308, 308)));
  double y;
  if (method == "ceil") {
    y = std::ceil(x * scale) / scale;
  } else if (method == "floor") {
    y = std::floor(x * scale) / scale;
  } else {
    y = std::nearbyint(x * scale) / scale;  // half to even, as Python's round
  }
  return Value::Float(y);
}

absl::StatusOr<Value> FWordcount(Renderer&, const Value& v, Args& args) {
  RETURN_IF_ERROR(NoArgs(args, "wordcount").status());
  const std::string s = Display(v).text;
  int64_t n = 0;
  bool in_word = false;
  for (size_t i = 0; i < s.size();) {
    size_t len;
    const char32_t cp = CodePointAt(s, i, &len);
    const bool w = cp == '_' || u_isalnum(static_cast<UChar32>(cp));
    if (w && !in_word) ++n;
    in_word = w;
    i += len;
  }
  return Value::Int(n);
}

// ---------------------------------------------------------------------------
// Tests

absl::StatusOr<bool> NoTestArgs(Args& args, absl::string_view name) {
  if (!args.positional.empty() || !args.keyword.empty()) {
    return Error(absl::StrCat("the test '", name, "' takes no arguments"));
  }
  return true;
}

#define MINFER_JINJA_SIMPLE_TEST(fn, name, expr)                   \
  absl::StatusOr<bool> fn(Renderer&, const Value& v, Args& args) { \
    RETURN_IF_ERROR(NoTestArgs(args, name).status());              \
    return (expr);                                                 \
  }

MINFER_JINJA_SIMPLE_TEST(TDefined, "defined", !v.is_undefined())
MINFER_JINJA_SIMPLE_TEST(TUndefined, "undefined", v.is_undefined())
MINFER_JINJA_SIMPLE_TEST(TNone, "none", v.kind() == Kind::kNone)
MINFER_JINJA_SIMPLE_TEST(TBoolean, "boolean", v.kind() == Kind::kBool)
MINFER_JINJA_SIMPLE_TEST(TFalse, "false", v.kind() == Kind::kBool && !v.bool_value())
MINFER_JINJA_SIMPLE_TEST(TTrue, "true", v.kind() == Kind::kBool && v.bool_value())
MINFER_JINJA_SIMPLE_TEST(TInteger, "integer", v.kind() == Kind::kInt)
MINFER_JINJA_SIMPLE_TEST(TFloat, "float", v.kind() == Kind::kFloat)
MINFER_JINJA_SIMPLE_TEST(TNumber, "number",
                         v.kind() == Kind::kInt || v.kind() == Kind::kFloat ||
                             v.kind() == Kind::kBool)
MINFER_JINJA_SIMPLE_TEST(TString, "string", v.kind() == Kind::kString)
MINFER_JINJA_SIMPLE_TEST(TMapping, "mapping", v.kind() == Kind::kDict)
// Python: iter() works on str, list, tuple, dict and (empty) undefined.
MINFER_JINJA_SIMPLE_TEST(TIterable, "iterable",
                         v.kind() == Kind::kString || v.kind() == Kind::kList ||
                             v.kind() == Kind::kDict || v.kind() == Kind::kUndefined)
MINFER_JINJA_SIMPLE_TEST(TSequence, "sequence",
                         v.kind() == Kind::kString || v.kind() == Kind::kList ||
                             v.kind() == Kind::kDict || v.kind() == Kind::kUndefined)
MINFER_JINJA_SIMPLE_TEST(TCallable, "callable", v.kind() == Kind::kCallable)

#undef MINFER_JINJA_SIMPLE_TEST

absl::StatusOr<bool> TLower(Renderer&, const Value& v, Args& args) {
  RETURN_IF_ERROR(NoTestArgs(args, "lower").status());
  const std::string s = Display(v).text;
  return PyLower(s) == s && PyUpper(s) != s;
}
absl::StatusOr<bool> TUpper(Renderer&, const Value& v, Args& args) {
  RETURN_IF_ERROR(NoTestArgs(args, "upper").status());
  const std::string s = Display(v).text;
  return PyUpper(s) == s && PyLower(s) != s;
}

absl::StatusOr<int64_t> TestInt(const Value& v, absl::string_view name) {
  if (v.kind() == Kind::kInt) return v.int_value();
  if (v.kind() == Kind::kBool) return v.bool_value() ? 1 : 0;
  return Error(absl::StrCat("the test '", name, "' needs an integer, not '", TypeName(v), "'"));
}
absl::StatusOr<bool> TOdd(Renderer&, const Value& v, Args& args) {
  RETURN_IF_ERROR(NoTestArgs(args, "odd").status());
  ASSIGN_OR_RETURN(int64_t i, TestInt(v, "odd"));
  return i % 2 != 0;
}
absl::StatusOr<bool> TEven(Renderer&, const Value& v, Args& args) {
  RETURN_IF_ERROR(NoTestArgs(args, "even").status());
  ASSIGN_OR_RETURN(int64_t i, TestInt(v, "even"));
  return i % 2 == 0;
}
absl::StatusOr<bool> TDivisibleby(Renderer& r, const Value& v, Args& args) {
  std::vector<const Value*> a;
  RETURN_IF_ERROR(BindArgs(args, "divisibleby", {"num"}, &a));
  if (a[0] == nullptr) return Error("the test 'divisibleby' needs a number");
  ASSIGN_OR_RETURN(Value m, r.BinaryOp(BinOp::kMod, v, *a[0]));
  return !Truthy(m);
}

absl::StatusOr<bool> CompareTest(Renderer& r, const Value& v, Args& args, CmpOp op,
                                 absl::string_view name) {
  std::vector<const Value*> a;
  RETURN_IF_ERROR(BindArgs(args, name, {"other"}, &a));
  if (a[0] == nullptr) return Error(absl::StrCat("the test '", name, "' needs a value"));
  return r.CompareValues(op, v, *a[0]);
}
absl::StatusOr<bool> TEq(Renderer& r, const Value& v, Args& args) {
  return CompareTest(r, v, args, CmpOp::kEq, "eq");
}
absl::StatusOr<bool> TNe(Renderer& r, const Value& v, Args& args) {
  return CompareTest(r, v, args, CmpOp::kNe, "ne");
}
absl::StatusOr<bool> TLt(Renderer& r, const Value& v, Args& args) {
  return CompareTest(r, v, args, CmpOp::kLt, "lt");
}
absl::StatusOr<bool> TLe(Renderer& r, const Value& v, Args& args) {
  return CompareTest(r, v, args, CmpOp::kLe, "le");
}
absl::StatusOr<bool> TGt(Renderer& r, const Value& v, Args& args) {
  return CompareTest(r, v, args, CmpOp::kGt, "gt");
}
absl::StatusOr<bool> TGe(Renderer& r, const Value& v, Args& args) {
  return CompareTest(r, v, args, CmpOp::kGe, "ge");
}
absl::StatusOr<bool> TIn(Renderer& r, const Value& v, Args& args) {
  return CompareTest(r, v, args, CmpOp::kIn, "in");
}
absl::StatusOr<bool> TSameas(Renderer&, const Value& v, Args& args) {
  std::vector<const Value*> a;
  RETURN_IF_ERROR(BindArgs(args, "sameas", {"other"}, &a));
  if (a[0] == nullptr) return Error("the test 'sameas' needs a value");
  const Value& o = *a[0];
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Kind::kNone:
    case Kind::kUndefined:
      return true;
    case Kind::kBool:
      return v.bool_value() == o.bool_value();
    case Kind::kInt:
      return v.int_value() == o.int_value();
    case Kind::kFloat:
      return v.float_value() == o.float_value();
    default:
      return ValueAccess::Identity(v) == ValueAccess::Identity(o);
  }
}

// ---------------------------------------------------------------------------
// Globals

absl::StatusOr<Value> GNamespace(Renderer& r, const Value&, Args& args) {
  if (args.positional.size() > 1) return Error("namespace() takes at most 1 positional argument");
  DictData d;
  if (args.positional.size() == 1) {
    const Value& init = args.positional[0];
    if (init.kind() == Kind::kDict || init.kind() == Kind::kNamespace) {
      for (const auto& [k, v] : ValueAccess::Dict(init).items) d.Set(k, v);
    } else if (init.kind() == Kind::kList) {
      for (const Value& pair : ValueAccess::List(init).items) {
        if (pair.kind() != Kind::kList || ValueAccess::List(pair).items.size() != 2 ||
            ValueAccess::List(pair).items[0].kind() != Kind::kString) {
          return Error("namespace() needs a mapping or (key, value) pairs");
        }
        d.Set(std::string(ValueAccess::Str(ValueAccess::List(pair).items[0]).text),
              ValueAccess::List(pair).items[1]);
      }
    } else {
      return Error(absl::StrCat("'", TypeName(init), "' object is not iterable"));
    }
  }
  for (const auto& [k, v] : args.keyword) d.Set(k, v);
  return r.NewNamespace(std::move(d));
}

absl::StatusOr<Value> GDict(Renderer& r, const Value&, Args& args) {
  if (args.positional.size() > 1) return Error("dict() takes at most 1 positional argument");
  DictData d;
  if (args.positional.size() == 1) {
    const Value& init = args.positional[0];
    if (init.kind() != Kind::kDict) return Error("dict() needs a mapping");
    d = ValueAccess::Dict(init);
  }
  for (const auto& [k, v] : args.keyword) d.Set(k, v);
  return MakeDict(std::move(d));
}

absl::StatusOr<Value> GRange(Renderer& r, const Value&, Args& args) {
  if (!args.keyword.empty()) return Error("range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3) return Error("range() takes 1 to 3 arguments");
  int64_t v[3];
  for (size_t i = 0; i < p.size(); ++i) {
    ASSIGN_OR_RETURN(v[i], IntArg(&p[i], "range() argument"));
  }
  int64_t start = 0, stop, step = 1;
  if (p.size() == 1) {
    stop = v[0];
  } else {
    start = v[0];
    stop = v[1];
    if (p.size() == 3) step = v[2];
  }
  if (step == 0) return Error("range() arg 3 must not be zero");
  // Jinja2's sandbox refuses ranges over MAX_RANGE items.
  constexpr int64_t kMaxRange = 100000;
  const __int128 span =
      step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
  const __int128 n =
      span <= 0 ? 0 : (span + (step > 0 ? step : -step) - 1) / (step > 0 ? step : -step);
  if (n > kMaxRange) {
    return Error(absl::StrCat("range() of more than ", kMaxRange, " items (the sandbox's limit)"));
  }
  std::vector<Value> items;
  items.reserve(static_cast<size_t>(n));
  for (__int128 i = 0; i < n; ++i)
    items.push_back(Value::Int(static_cast<int64_t>(start + i * step)));
  return r.NewList(std::move(items));
}

absl::StatusOr<Value> GRaiseException(Renderer&, const Value&, Args& args) {
  std::string message;
  if (!args.positional.empty()) message = Display(args.positional[0]).text;
  return Final(absl::InvalidArgumentError(message));
}

absl::StatusOr<Value> GStrftimeNow(Renderer& r, const Value&, Args& args) {
  std::vector<const Value*> a;
  RETURN_IF_ERROR(BindArgs(args, "strftime_now", {"format"}, &a));
  if (a[0] == nullptr) return Error("strftime_now() takes exactly 1 argument");
  ASSIGN_OR_RETURN(std::string format, StrArg(a[0], "the format"));
  return r.NewString(absl::FormatTime(format, r.options().now, r.options().time_zone), false);
}

absl::StatusOr<Value> GCycle(Renderer&, const Value& self, Args& args) {
  if (args.positional.empty()) return Error("no items for cycling given");
  return args.positional[static_cast<size_t>(self.int_value()) % args.positional.size()];
}

Value MakeBuiltin(absl::string_view name, BuiltinFn fn, Value self = Value()) {
  auto c = std::make_shared<CallableData>();
  c->name = std::string(name);
  c->fn = fn;
  c->self = std::move(self);
  return ValueAccess::Make(Kind::kCallable, std::move(c));
}

template <typename Fn>
struct Entry {
  absl::string_view name;
  Fn fn;
};

constexpr Entry<FilterFn> kFilters[] = {
    {"abs", FAbs},
    {"capitalize", FCapitalize},
    {"count", FLength},
    {"d", FDefault},
    {"default", FDefault},
    {"dictsort", FDictsort},
    {"first", FFirst},
    {"float", FFloat},
    {"indent", FIndent},
    {"int", FInt},
    {"items", FItems},
    {"join", FJoin},
    {"last", FLast},
    {"length", FLength},
    {"list", FList},
    {"lower", FLower},
    {"map", FMap},
    {"max", FMax},
    {"min", FMin},
    {"reject", FReject},
    {"rejectattr", FRejectattr},
    {"replace", FReplace},
    {"reverse", FReverse},
    {"round", FRound},
    {"safe", FSafe},
    {"select", FSelect},
    {"selectattr", FSelectattr},
    {"sort", FSort},
    {"string", FString},
    {"sum", FSum},
    {"title", FTitle},
    {"tojson", FTojson},
    {"trim", FTrim},
    {"unique", FUnique},
    {"upper", FUpper},
    {"wordcount", FWordcount},
};

constexpr Entry<TestFn> kTests[] = {
    {"!=", TNe},
    {"<", TLt},
    {"<=", TLe},
    {"==", TEq},
    {">", TGt},
    {">=", TGe},
    {"boolean", TBoolean},
    {"callable", TCallable},
    {"defined", TDefined},
    {"divisibleby", TDivisibleby},
    {"eq", TEq},
    {"equalto", TEq},
    {"even", TEven},
    {"false", TFalse},
    {"float", TFloat},
    {"ge", TGe},
    {"greaterthan", TGt},
    {"gt", TGt},
    {"in", TIn},
    {"integer", TInteger},
    {"iterable", TIterable},
    {"le", TLe},
    {"lessthan", TLt},
    {"lower", TLower},
    {"lt", TLt},
    {"mapping", TMapping},
    {"ne", TNe},
    {"none", TNone},
    {"number", TNumber},
    {"odd", TOdd},
    {"sameas", TSameas},
    {"sequence", TSequence},
    {"string", TString},
    {"true", TTrue},
    {"undefined", TUndefined},
    {"upper", TUpper},
};

constexpr Entry<BuiltinFn> kStrMethods[] = {
    {"capitalize", MCapitalize},
    {"count", MCount},
    {"endswith", MEndswith},
    {"find", MFind},
    {"join", MJoin},
    {"lower", MLower},
    {"lstrip", MLstrip},
    {"replace", MReplace},
    {"rfind", MRfind},
    {"rsplit", MRsplit},
    {"rstrip", MRstrip},
    {"split", MSplit},
    {"splitlines", MSplitlines},
    {"startswith", MStartswith},
    {"strip", MStrip},
    {"title", MTitle},
    {"upper", MUpper},
};

constexpr Entry<BuiltinFn> kDictMethods[] = {
    {"get", MGet}, {"items", MItems}, {"keys", MKeys}, {"values", MValues}};

template <typename Fn, size_t N>
Fn Find(const Entry<Fn> (&table)[N], absl::string_view name) {
  for (const auto& e : table) {
    if (e.name == name) return e.fn;
  }
  return nullptr;
}

}  // namespace

FilterFn FindFilter(absl::string_view name) { return Find(kFilters, name); }
TestFn FindTest(absl::string_view name) { return Find(kTests, name); }

BuiltinFn FindMethod(Value::Kind kind, absl::string_view name) {
  if (kind == Kind::kString) return Find(kStrMethods, name);
  if (kind == Kind::kDict) return Find(kDictMethods, name);
  return nullptr;
}

bool IsUnsafeMethod(Value::Kind kind, absl::string_view name) {
  static constexpr absl::string_view kList[] = {"append", "extend", "insert", "pop",
                                                "remove", "clear",  "sort",   "reverse"};
  static constexpr absl::string_view kDict[] = {"pop", "popitem", "setdefault", "update", "clear"};
  if (kind == Kind::kList)
    return std::find(std::begin(kList), std::end(kList), name) != std::end(kList);
  if (kind == Kind::kDict)
    return std::find(std::begin(kDict), std::end(kDict), name) != std::end(kDict);
  return false;
}

void AddGlobals(Scope* scope) {
  scope->vars["namespace"] = MakeBuiltin("namespace", GNamespace);
  scope->vars["dict"] = MakeBuiltin("dict", GDict);
  scope->vars["range"] = MakeBuiltin("range", GRange);
  scope->vars["raise_exception"] = MakeBuiltin("raise_exception", GRaiseException);
  scope->vars["strftime_now"] = MakeBuiltin("strftime_now", GStrftimeNow);
}

Value MakeCycle(int64_t index0) { return MakeBuiltin("cycle", GCycle, Value::Int(index0)); }

}  // namespace minfer::tokenizer::jinja::internal
