// The Jinja evaluator: statements and expressions over scopes, with
// Python's semantics for operators, attribute and item access (Jinja2's
// environment.getattr/getitem: an attribute falls back to an item and back,
// a missing one is undefined), and the resource bounds of Limits.
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/tokenizer/jinja.h"
#include "engine/tokenizer/jinja_internal.h"
#include "engine/tokenizer/unicode.h"

namespace minfer::tokenizer::jinja {
namespace internal {
namespace {

// Payload marking a status whose message already says where it happened.
constexpr absl::string_view kPositioned = "minfer.jinja/positioned";

bool IsIntLike(const Value& v) {
  return v.kind() == Value::Kind::kInt || v.kind() == Value::Kind::kBool;
}
int64_t AsInt(const Value& v) {
  return v.kind() == Value::Kind::kBool ? (v.bool_value() ? 1 : 0) : v.int_value();
}
bool IsNumeric(const Value& v) { return IsIntLike(v) || v.kind() == Value::Kind::kFloat; }
double AsDouble(const Value& v) {
  return v.kind() == Value::Kind::kFloat ? v.float_value() : static_cast<double>(AsInt(v));
}

absl::Status OperandError(absl::string_view op, const Value& a, const Value& b) {
  return Error(absl::StrCat("unsupported operand type(s) for ", op, ": '", TypeName(a), "' and '",
                            TypeName(b), "'"));
}

absl::Status Overflow() { return Error("integer overflow (minfer's integers are 64-bit)"); }

}  // namespace

absl::Status Error(absl::string_view message) { return absl::InvalidArgumentError(message); }
absl::Status Exhausted(absl::string_view message) { return absl::ResourceExhaustedError(message); }

absl::Status AtPosition(absl::Status status, const Program& program, uint32_t offset) {
  if (status.ok() || status.GetPayload(kPositioned).has_value()) return status;
  absl::Status out(status.code(), absl::StrCat(program.Where(offset), ": ", status.message()));
  out.SetPayload(kPositioned, absl::Cord("1"));
  return out;
}

absl::Status Final(absl::Status status) {
  status.SetPayload(kPositioned, absl::Cord("1"));
  return status;
}

absl::Status Public(absl::Status status) {
  status.ErasePayload(kPositioned);
  return status;
}

// ---------------------------------------------------------------------------

Renderer::Renderer(const Program& program, const RenderOptions& options)
    : program_(program), options_(options) {}

Renderer::~Renderer() {
  for (const auto& ns : namespaces_) {
    ns->items.clear();
    ns->index.clear();
  }
}

absl::Status Renderer::Step() { return ChargeSteps(1); }

absl::Status Renderer::Charge(size_t bytes) {
  const Limits& l = options_.limits;
  if (bytes > l.max_string_bytes) {
    return Exhausted(absl::StrCat("a string of ", bytes, " bytes exceeds the limit of ",
                                  l.max_string_bytes, " bytes"));
  }
  total_bytes_ += bytes;
  if (total_bytes_ > l.max_total_bytes) {
    return Exhausted(
        absl::StrCat("the template built more than ", l.max_total_bytes, " bytes of strings"));
  }
  // Copying bytes costs time too: a step per kBytesPerStep bytes built, so
  // that building strings runs out of steps as fast as anything else.
  return ChargeSteps(static_cast<int64_t>(bytes / kBytesPerStep));
}

absl::Status Renderer::ChargeSteps(int64_t n) {
  steps_ += n;
  if (steps_ > options_.limits.max_steps) {
    return Exhausted(absl::StrCat("the template ran more than ", options_.limits.max_steps,
                                  " evaluation steps (the limit on one rendering's work)"));
  }
  return absl::OkStatus();
}

absl::Status Renderer::ChargeScan(size_t bytes) {
  // A step per 64 bytes: indexing a long string in a loop is quadratic, and
  // must run out of steps rather than time.
  return ChargeSteps(static_cast<int64_t>(bytes / 64));
}

absl::Status Renderer::CheckListSize(size_t items) const {
  if (items > options_.limits.max_list_items) {
    return Exhausted(absl::StrCat("a list of ", items, " items exceeds the limit of ",
                                  options_.limits.max_list_items));
  }
  return absl::OkStatus();
}

absl::StatusOr<Value> Renderer::NewString(StrData data) {
  RETURN_IF_ERROR(Charge(data.text.size()));
  return MakeStr(std::move(data));
}

absl::StatusOr<Value> Renderer::NewString(std::string text, bool marked) {
  RETURN_IF_ERROR(Charge(text.size()));
  return MakeStr(std::move(text), marked);
}

absl::StatusOr<Value> Renderer::NewList(std::vector<Value> items, bool tuple) {
  RETURN_IF_ERROR(CheckListSize(items.size()));
  total_bytes_ += items.size() * sizeof(Value);
  if (total_bytes_ > options_.limits.max_total_bytes) {
    return Exhausted(absl::StrCat("the template built more than ", options_.limits.max_total_bytes,
                                  " bytes of strings and lists"));
  }
  return MakeList(std::move(items), tuple);
}

Value Renderer::NewNamespace(DictData data) {
  auto d = std::make_shared<DictData>(std::move(data));
  namespaces_.push_back(d);
  return ValueAccess::Make(Value::Kind::kNamespace, std::move(d));
}

absl::StatusOr<Value> Renderer::ToStr(const Value& v) {
  if (v.kind() == Value::Kind::kString) return v;
  return NewString(Display(v));
}

Value Renderer::Lookup(const ScopePtr& scope, absl::string_view name) {
  for (const Scope* s = scope.get(); s != nullptr; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return it->second;
  }
  return ValueAccess::Undefined(absl::StrCat("'", name, "' is undefined"));
}

// --- Attribute and item access -----------------------------------------------

absl::StatusOr<Value> Renderer::GetAttr(const Value& object, absl::string_view attr) {
  switch (object.kind()) {
    case Value::Kind::kUndefined:
      return Error(ValueAccess::UndefinedHint(object));
    case Value::Kind::kDict:
    case Value::Kind::kString:
    case Value::Kind::kList: {
      if (IsUnsafeMethod(object.kind(), attr)) {
        return Error(absl::StrCat("access to attribute '", attr, "' of '", TypeName(object),
                                  "' object is unsafe (chat templates cannot modify values)"));
      }
      if (BuiltinFn fn = FindMethod(object.kind(), attr)) {
        auto c = std::make_shared<CallableData>();
        c->name = std::string(attr);
        c->fn = fn;
        c->self = object;
        return ValueAccess::Make(Value::Kind::kCallable, std::move(c));
      }
      if (object.kind() == Value::Kind::kDict) {
        if (const Value* v = ValueAccess::Dict(object).Find(attr)) return *v;
      }
      break;
    }
    case Value::Kind::kNamespace:
      if (const Value* v = ValueAccess::Dict(object).Find(attr)) return *v;
      break;
    default:
      break;
  }
  return ValueAccess::Undefined(
      absl::StrCat("'", TypeName(object), "' object has no attribute '", attr, "'"));
}

absl::StatusOr<Value> Renderer::GetItem(const Value& object, const Value& key) {
  switch (object.kind()) {
    case Value::Kind::kUndefined:
      return Error(ValueAccess::UndefinedHint(object));
    case Value::Kind::kDict:
    case Value::Kind::kNamespace:
      if (key.kind() == Value::Kind::kString) {
        if (const Value* v = ValueAccess::Dict(object).Find(ValueAccess::Str(key).text)) return *v;
      }
      break;
    case Value::Kind::kList:
      if (IsIntLike(key)) {
        const auto& items = ValueAccess::List(object).items;
        int64_t i = AsInt(key);
        if (i < 0) i += static_cast<int64_t>(items.size());
        if (i >= 0 && i < static_cast<int64_t>(items.size())) return items[static_cast<size_t>(i)];
        return ValueAccess::Undefined(
            absl::StrCat("'", TypeName(object), "' object has no element ", AsInt(key)));
      }
      break;
    case Value::Kind::kString:
      if (IsIntLike(key)) {
        const StrData& s = ValueAccess::Str(object);
        RETURN_IF_ERROR(ChargeScan(s.text.size()));
        const std::vector<size_t> offsets = CodePointOffsets(s.text);
        const int64_t n = static_cast<int64_t>(offsets.size()) - 1;
        int64_t i = AsInt(key);
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
          return NewString(
              Substr(s, offsets[static_cast<size_t>(i)], offsets[static_cast<size_t>(i) + 1]));
        }
        return ValueAccess::Undefined(absl::StrCat("'str' object has no element ", AsInt(key)));
      }
      break;
    default:
      break;
  }
  // Jinja2: an item that is not there is looked up as an attribute.
  if (key.kind() == Value::Kind::kString) return GetAttr(object, ValueAccess::Str(key).text);
  std::string shown;
  AppendRepr(key, &shown);
  return ValueAccess::Undefined(
      absl::StrCat("'", TypeName(object), "' object has no element ", shown));
}

absl::StatusOr<Value> Renderer::Slice(const Value& object, const Expr& slice,
                                      const ScopePtr& scope) {
  std::optional<int64_t> parts[3];
  for (int i = 0; i < 3; ++i) {
    if (slice.args[i] == nullptr) continue;
    ASSIGN_OR_RETURN(Value v, Eval(*slice.args[i], scope));
    if (v.kind() == Value::Kind::kNone) continue;
    if (!IsIntLike(v)) {
      return Error(absl::StrCat("slice indices must be integers or None, not '", TypeName(v), "'"));
    }
    parts[i] = AsInt(v);
  }
  if (object.kind() == Value::Kind::kUndefined) return Error(ValueAccess::UndefinedHint(object));
  if (object.kind() != Value::Kind::kList && object.kind() != Value::Kind::kString) {
    return Error(absl::StrCat("'", TypeName(object), "' object is not subscriptable"));
  }
  const int64_t step = parts[2].value_or(1);
  if (step == 0) return Error("slice step cannot be zero");
  std::vector<size_t> offsets;
  int64_t n;
  if (object.kind() == Value::Kind::kList) {
    n = static_cast<int64_t>(ValueAccess::List(object).items.size());
  } else {
    RETURN_IF_ERROR(ChargeScan(ValueAccess::Str(object).text.size()));
    offsets = CodePointOffsets(ValueAccess::Str(object).text);
    n = static_cast<int64_t>(offsets.size()) - 1;
  }
  // Python's slice.indices().
  auto clamp = [&](std::optional<int64_t> v, int64_t def, bool is_start) -> int64_t {
    if (!v) return def;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= n) {
      x = step < 0 ? n - 1 : n;
    }
    (void)is_start;
    return x;
  };
  const int64_t start = clamp(parts[0], step < 0 ? n - 1 : 0, true);
  const int64_t stop = clamp(parts[1], step < 0 ? -1 : n, false);
  std::vector<int64_t> picked;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) picked.push_back(i);
  if (object.kind() == Value::Kind::kList) {
    const ListData& l = ValueAccess::List(object);
    std::vector<Value> items;
    items.reserve(picked.size());
    for (int64_t i : picked) items.push_back(l.items[static_cast<size_t>(i)]);
    return NewList(std::move(items), l.tuple);
  }
  const StrData& s = ValueAccess::Str(object);
  if (step == 1) {
    if (picked.empty()) return NewString(StrData{});
    return NewString(Substr(s, offsets[static_cast<size_t>(picked.front())],
                            offsets[static_cast<size_t>(picked.back()) + 1]));
  }
  StrBuilder b;
  for (int64_t i : picked) {
    b.Append(Substr(s, offsets[static_cast<size_t>(i)], offsets[static_cast<size_t>(i) + 1]));
  }
  return NewString(b.Take());
}

absl::StatusOr<std::vector<Value>> Renderer::Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return std::vector<Value>{};
    case Value::Kind::kList:
      return ValueAccess::List(v).items;
    case Value::Kind::kDict: {
      const DictData& d = ValueAccess::Dict(v);
      std::vector<Value> keys;
      keys.reserve(d.items.size());
      for (const auto& [k, x] : d.items) {
        ASSIGN_OR_RETURN(Value key, NewString(k, d.keys_marked));
        keys.push_back(std::move(key));
      }
      return keys;
    }
    case Value::Kind::kString: {
      const StrData& s = ValueAccess::Str(v);
      RETURN_IF_ERROR(ChargeScan(s.text.size()));
      const std::vector<size_t> offsets = CodePointOffsets(s.text);
      RETURN_IF_ERROR(CheckListSize(offsets.size() - 1));
      std::vector<Value> chars;
      chars.reserve(offsets.size() - 1);
      for (size_t i = 0; i + 1 < offsets.size(); ++i) {
        ASSIGN_OR_RETURN(Value c, NewString(Substr(s, offsets[i], offsets[i + 1])));
        chars.push_back(std::move(c));
      }
      return chars;
    }
    default:
      return Error(absl::StrCat("'", TypeName(v), "' object is not iterable"));
  }
}

// --- Calls -----------------------------------------------------------------

absl::StatusOr<Args> Renderer::EvalArgs(const Expr& e, const ScopePtr& scope) {
  Args args;
  args.positional.reserve(e.args.size());
  for (const ExprPtr& a : e.args) {
    ASSIGN_OR_RETURN(Value v, Eval(*a, scope));
    args.positional.push_back(std::move(v));
  }
  for (const auto& [k, x] : e.kwargs) {
    ASSIGN_OR_RETURN(Value v, Eval(*x, scope));
    args.keyword.emplace_back(k, std::move(v));
  }
  return args;
}

absl::StatusOr<Value> Renderer::Call(const Value& callee, Args args) {
  if (callee.kind() == Value::Kind::kUndefined) return Error(ValueAccess::UndefinedHint(callee));
  if (callee.kind() != Value::Kind::kCallable) {
    return Error(absl::StrCat("'", TypeName(callee), "' object is not callable"));
  }
  const CallableData& c = ValueAccess::Callable(callee);
  if (c.macro != nullptr) return CallMacro(c, std::move(args));
  return c.fn(*this, c.self, args);
}

absl::StatusOr<Value> Renderer::CallMacro(const CallableData& macro, Args args) {
  ScopePtr closure = macro.closure.lock();
  if (closure == nullptr) {
    return Error(absl::StrCat("macro '", macro.name, "' is called after its scope ended"));
  }
  const Stmt& m = *macro.macro;
  const size_t n = m.params.size();
  if (args.positional.size() > n) {
    return Error(absl::StrCat("macro '", macro.name, "' takes not more than ", n,
                              " argument(s), got ", args.positional.size()));
  }
  auto scope = std::make_shared<Scope>();
  scope->parent = closure;
  std::vector<bool> bound(n, false);
  for (size_t i = 0; i < args.positional.size(); ++i) {
    scope->vars[m.params[i]] = std::move(args.positional[i]);
    bound[i] = true;
  }
  for (auto& [k, v] : args.keyword) {
    size_t i = 0;
    while (i < n && m.params[i] != k) ++i;
    if (i == n) {
      return Error(absl::StrCat("macro '", macro.name, "' takes no keyword argument '", k, "'"));
    }
    if (bound[i]) {
      return Error(
          absl::StrCat("macro '", macro.name, "' got multiple values for argument '", k, "'"));
    }
    scope->vars[k] = std::move(v);
    bound[i] = true;
  }
  for (size_t i = 0; i < n; ++i) {
    if (bound[i]) continue;
    if (m.defaults[i] != nullptr) {
      ASSIGN_OR_RETURN(Value v, Eval(*m.defaults[i], scope));
      scope->vars[m.params[i]] = std::move(v);
    } else {
      scope->vars[m.params[i]] =
          ValueAccess::Undefined(absl::StrCat("parameter '", m.params[i], "' was not provided"));
    }
  }
  StrBuilder out;
  RETURN_IF_ERROR(Exec(m.body, scope, &out));
  flow_ = Flow::kNormal;
  return NewString(out.Take());
}

absl::StatusOr<Value> Renderer::ApplyFilter(absl::string_view name, const Value& operand,
                                            Args args) {
  FilterFn f = FindFilter(name);
  if (f == nullptr) return Error(absl::StrCat("no filter named '", name, "'"));
  return f(*this, operand, args);
}

absl::StatusOr<bool> Renderer::ApplyTest(absl::string_view name, const Value& operand, Args args) {
  TestFn t = FindTest(name);
  if (t == nullptr) return Error(absl::StrCat("no test named '", name, "'"));
  return t(*this, operand, args);
}

absl::StatusOr<Value> Renderer::FilterValue(const Expr& f, const Value& operand,
                                            const ScopePtr& scope) {
  ASSIGN_OR_RETURN(Args args, EvalArgs(f, scope));
  absl::StatusOr<Value> r = f.filter(*this, operand, args);
  if (!r.ok()) return AtPosition(r.status(), program_, f.offset);
  return r;
}

// --- Operators ---------------------------------------------------------------

absl::StatusOr<Value> Renderer::BinaryOp(BinOp op, const Value& a, const Value& b) {
  if (a.is_undefined()) return Error(ValueAccess::UndefinedHint(a));
  if (b.is_undefined()) return Error(ValueAccess::UndefinedHint(b));
  static constexpr const char* kNames[] = {"+", "-", "*", "/", "//", "%", "**"};
  const char* name = kNames[static_cast<int>(op)];
  if (IsNumeric(a) && IsNumeric(b)) {
    const bool ints = IsIntLike(a) && IsIntLike(b);
    const int64_t x = ints ? AsInt(a) : 0, y = ints ? AsInt(b) : 0;
    const double fx = AsDouble(a), fy = AsDouble(b);
    int64_t r;
    switch (op) {
      case BinOp::kAdd:
        if (!ints) return Value::Float(fx + fy);
        if (__builtin_add_overflow(x, y, &r)) return Overflow();
        return Value::Int(r);
      case BinOp::kSub:
        if (!ints) return Value::Float(fx - fy);
        if (__builtin_sub_overflow(x, y, &r)) return Overflow();
        return Value::Int(r);
      case BinOp::kMul:
        if (!ints) return Value::Float(fx * fy);
        if (__builtin_mul_overflow(x, y, &r)) return Overflow();
        return Value::Int(r);
      case BinOp::kDiv:
        if (fy == 0) return Error("division by zero");
        return Value::Float(fx / fy);
      case BinOp::kFloorDiv:
        if (ints) {
          if (y == 0) return Error("integer division or modulo by zero");
          if (x == std::numeric_limits<int64_t>::min() && y == -1) return Overflow();
          int64_t q = x / y;
          if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
          return Value::Int(q);
        }
        if (fy == 0) return Error("float floor division by zero");
        return Value::Float(std::floor(fx / fy));
      case BinOp::kMod:
        if (ints) {
          if (y == 0) return Error("integer division or modulo by zero");
          if (y == -1) return Value::Int(0);
          int64_t m = x % y;
          if (m != 0 && ((m < 0) != (y < 0))) m += y;
          return Value::Int(m);
        } else {
          if (fy == 0) return Error("float modulo by zero");
          double m = std::fmod(fx, fy);
          if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
          return Value::Float(m);
        }
      case BinOp::kPow:
        if (ints && y >= 0) {
          int64_t result = 1, base = x, e = y;
          while (e > 0) {
            if (e & 1) {
              if (__builtin_mul_overflow(result, base, &result)) return Overflow();
            }
            e >>= 1;
            if (e > 0 && __builtin_mul_overflow(base, base, &base)) return Overflow();
          }
          return Value::Int(result);
        }
        if (fx == 0 && fy < 0) return Error("0.0 cannot be raised to a negative power");
        if (fx < 0 && fy != std::floor(fy)) return Error("the power has a complex result");
        return Value::Float(std::pow(fx, fy));
    }
  }
  const Value::Kind ka = a.kind(), kb = b.kind();
  if (op == BinOp::kAdd) {
    if (ka == Value::Kind::kString && kb == Value::Kind::kString) {
      const StrData& x = ValueAccess::Str(a);
      const StrData& y = ValueAccess::Str(b);
      RETURN_IF_ERROR(Charge(x.text.size() + y.text.size()));
      StrBuilder sb;
      sb.Append(x);
      sb.Append(y);
      return MakeStr(sb.Take());
    }
    if (ka == Value::Kind::kList && kb == Value::Kind::kList &&
        ValueAccess::List(a).tuple == ValueAccess::List(b).tuple) {
      std::vector<Value> items = ValueAccess::List(a).items;
      const auto& more = ValueAccess::List(b).items;
      RETURN_IF_ERROR(CheckListSize(items.size() + more.size()));
      items.insert(items.end(), more.begin(), more.end());
      return NewList(std::move(items), ValueAccess::List(a).tuple);
    }
  }
  if (op == BinOp::kMul && (IsIntLike(a) || IsIntLike(b))) {
    const Value& seq = IsIntLike(a) ? b : a;
    const int64_t count = std::max<int64_t>(0, AsInt(IsIntLike(a) ? a : b));
    if (seq.kind() == Value::Kind::kString) {
      const StrData& s = ValueAccess::Str(seq);
      if (count > 0 &&
          s.text.size() > options_.limits.max_string_bytes / static_cast<size_t>(count)) {
        return Exhausted("the repeated string exceeds the string size limit");
      }
      RETURN_IF_ERROR(Charge(s.text.size() * static_cast<size_t>(count)));
      // One append per repetition, whatever the string's length.
      RETURN_IF_ERROR(ChargeSteps(count));
      StrBuilder sb;
      for (int64_t i = 0; i < count; ++i) sb.Append(s);
      return MakeStr(sb.Take());
    }
    if (seq.kind() == Value::Kind::kList) {
      const ListData& l = ValueAccess::List(seq);
      if (count > 0 &&
          l.items.size() > options_.limits.max_list_items / static_cast<size_t>(count)) {
        return Exhausted("the repeated list exceeds the list size limit");
      }
      std::vector<Value> items;
      for (int64_t i = 0; i < count; ++i) items.insert(items.end(), l.items.begin(), l.items.end());
      return NewList(std::move(items), l.tuple);
    }
  }
  if (op == BinOp::kMod && ka == Value::Kind::kString) {
    return Error("the '%' string formatting operator is not supported");
  }
  return OperandError(name, a, b);
}

absl::StatusOr<bool> Renderer::CompareValues(CmpOp op, const Value& a, const Value& b) {
  switch (op) {
    case CmpOp::kEq:
      return Equals(a, b);
    case CmpOp::kNe:
      return !Equals(a, b);
    case CmpOp::kIn:
    case CmpOp::kNotIn: {
      bool found = false;
      switch (b.kind()) {
        case Value::Kind::kUndefined:
          break;
        case Value::Kind::kString:
          if (a.kind() != Value::Kind::kString) {
            return Error(absl::StrCat("'in <string>' requires a string as left operand, not '",
                                      TypeName(a), "'"));
          }
          found = ValueAccess::Str(b).text.find(ValueAccess::Str(a).text) != std::string::npos;
          break;
        case Value::Kind::kList:
          for (const Value& x : ValueAccess::List(b).items) {
            if (Equals(a, x)) {
              found = true;
              break;
            }
          }
          break;
        case Value::Kind::kDict:
        case Value::Kind::kNamespace:
          found = a.kind() == Value::Kind::kString &&
                  ValueAccess::Dict(b).Find(ValueAccess::Str(a).text) != nullptr;
          break;
        default:
          return Error(absl::StrCat("argument of type '", TypeName(b), "' is not iterable"));
      }
      return op == CmpOp::kIn ? found : !found;
    }
    default: {
      if (a.is_undefined()) return Error(ValueAccess::UndefinedHint(a));
      if (b.is_undefined()) return Error(ValueAccess::UndefinedHint(b));
      absl::StatusOr<int> c = Compare(a, b);
      if (!c.ok()) {
        static constexpr const char* kNames[] = {"", "", "<", "<=", ">", ">="};
        return Error(absl::StrCat("'", kNames[static_cast<int>(op)],
                                  "' not supported between instances of '", TypeName(a), "' and '",
                                  TypeName(b), "'"));
      }
      switch (op) {
        case CmpOp::kLt:
          return *c < 0;
        case CmpOp::kLe:
          return *c <= 0;
        case CmpOp::kGt:
          return *c > 0;
        default:
          return *c >= 0;
      }
    }
  }
}

// --- Expressions -------------------------------------------------------------

absl::StatusOr<Value> Renderer::Eval(const Expr& e, const ScopePtr& scope) {
  RETURN_IF_ERROR(AtPosition(Step(), program_, e.offset));
  if (++depth_ > 4 * options_.limits.max_depth) {
    --depth_;
    return AtPosition(Exhausted("the template nests (or its macros recurse) too deeply"), program_,
                      e.offset);
  }
  absl::StatusOr<Value> r = EvalInner(e, scope);
  --depth_;
  if (!r.ok()) return AtPosition(r.status(), program_, e.offset);
  return r;
}

absl::StatusOr<Value> Renderer::EvalInner(const Expr& e, const ScopePtr& scope) {
  switch (e.kind) {
    case ExprKind::kLiteral:
      return e.literal;
    case ExprKind::kName:
      return Lookup(scope, e.name);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.args.size());
      for (const ExprPtr& x : e.args) {
        ASSIGN_OR_RETURN(Value v, Eval(*x, scope));
        items.push_back(std::move(v));
      }
      return NewList(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      DictData d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        ASSIGN_OR_RETURN(Value k, Eval(*e.args[i], scope));
        if (k.kind() != Value::Kind::kString) {
          return Error(absl::StrCat("dict keys must be strings, not '", TypeName(k), "'"));
        }
        ASSIGN_OR_RETURN(Value v, Eval(*e.args[i + 1], scope));
        d.Set(ValueAccess::Str(k).text, std::move(v));
      }
      return MakeDict(std::move(d));
    }
    case ExprKind::kGetAttr: {
      ASSIGN_OR_RETURN(Value obj, Eval(*e.a, scope));
      return GetAttr(obj, e.name);
    }
    case ExprKind::kGetItem: {
      ASSIGN_OR_RETURN(Value obj, Eval(*e.a, scope));
      if (e.b->kind == ExprKind::kSlice) return Slice(obj, *e.b, scope);
      ASSIGN_OR_RETURN(Value key, Eval(*e.b, scope));
      return GetItem(obj, key);
    }
    case ExprKind::kSlice:
      return Error("a slice is only valid inside []");
    case ExprKind::kCall: {
      ASSIGN_OR_RETURN(Value callee, Eval(*e.a, scope));
      ASSIGN_OR_RETURN(Args args, EvalArgs(e, scope));
      return Call(callee, std::move(args));
    }
    case ExprKind::kFilter: {
      if (e.a == nullptr) return Error("a filter without a value");
      ASSIGN_OR_RETURN(Value operand, Eval(*e.a, scope));
      return FilterValue(e, operand, scope);
    }
    case ExprKind::kTest: {
      ASSIGN_OR_RETURN(Value operand, Eval(*e.a, scope));
      ASSIGN_OR_RETURN(Args args, EvalArgs(e, scope));
      ASSIGN_OR_RETURN(bool r, e.test(*this, operand, args));
      return Value::Bool(r != e.negate);
    }
    case ExprKind::kNot: {
      ASSIGN_OR_RETURN(Value v, Eval(*e.a, scope));
      return Value::Bool(!Truthy(v));
    }
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      ASSIGN_OR_RETURN(Value v, Eval(*e.a, scope));
      if (v.is_undefined()) return Error(ValueAccess::UndefinedHint(v));
      const bool neg = e.kind == ExprKind::kNeg;
      if (IsIntLike(v)) {
        const int64_t x = AsInt(v);
        if (neg && x == std::numeric_limits<int64_t>::min()) return Overflow();
        return Value::Int(neg ? -x : x);
      }
      if (v.kind() == Value::Kind::kFloat)
        return Value::Float(neg ? -v.float_value() : v.float_value());
      return Error(
          absl::StrCat("bad operand type for unary ", neg ? "-" : "+", ": '", TypeName(v), "'"));
    }
    case ExprKind::kBinary: {
      ASSIGN_OR_RETURN(Value a, Eval(*e.a, scope));
      ASSIGN_OR_RETURN(Value b, Eval(*e.b, scope));
      return BinaryOp(e.op, a, b);
    }
    case ExprKind::kConcat: {
      StrBuilder sb;
      for (const ExprPtr& x : e.args) {
        ASSIGN_OR_RETURN(Value v, Eval(*x, scope));
        const StrData s = Display(v);
        if (sb.size() + s.text.size() > options_.limits.max_string_bytes) {
          return Exhausted("a '~' concatenation exceeds the string size limit");
        }
        RETURN_IF_ERROR(Charge(s.text.size()));
        sb.Append(s);
      }
      return MakeStr(sb.Take());
    }
    case ExprKind::kAnd: {
      ASSIGN_OR_RETURN(Value a, Eval(*e.a, scope));
      if (!Truthy(a)) return a;
      return Eval(*e.b, scope);
    }
    case ExprKind::kOr: {
      ASSIGN_OR_RETURN(Value a, Eval(*e.a, scope));
      if (Truthy(a)) return a;
      return Eval(*e.b, scope);
    }
    case ExprKind::kCompare: {
      ASSIGN_OR_RETURN(Value left, Eval(*e.args[0], scope));
      for (size_t i = 0; i < e.cmp_ops.size(); ++i) {
        ASSIGN_OR_RETURN(Value right, Eval(*e.args[i + 1], scope));
        ASSIGN_OR_RETURN(bool ok, CompareValues(e.cmp_ops[i], left, right));
        if (!ok) return Value::Bool(false);
        left = std::move(right);
      }
      return Value::Bool(true);
    }
    case ExprKind::kCond: {
      ASSIGN_OR_RETURN(Value cond, Eval(*e.b, scope));
      if (Truthy(cond)) return Eval(*e.a, scope);
      if (e.c != nullptr) return Eval(*e.c, scope);
      return ValueAccess::Undefined("the conditional expression has no else branch");
    }
  }
  return Error("unknown expression");
}

// --- Statements ----------------------------------------------------------------

absl::Status Renderer::Emit(const Value& v, StrBuilder* out) {
  if (v.kind() == Value::Kind::kString) {
    const StrData& s = ValueAccess::Str(v);
    // Not a new string (no Charge), but growing the output costs time.
    RETURN_IF_ERROR(ChargeSteps(static_cast<int64_t>(s.text.size() / kOutputBytesPerStep)));
    out->Append(s);
  } else {
    const StrData s = Display(v);
    RETURN_IF_ERROR(Charge(s.text.size()));
    out->Append(s);
  }
  if (out->size() > options_.limits.max_string_bytes) {
    return Exhausted(absl::StrCat("the output exceeds the limit of ",
                                  options_.limits.max_string_bytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status Renderer::Assign(const Target& t, const Value& v, const ScopePtr& scope) {
  if (!t.attr.empty()) {
    const Value ns = Lookup(scope, t.names[0]);
    if (ns.kind() != Value::Kind::kNamespace) {
      return Error(absl::StrCat("cannot assign attribute '", t.attr, "' of '", t.names[0],
                                "', which is not a namespace (a '", TypeName(ns), "')"));
    }
    ValueAccess::Dict(ns).Set(t.attr, v);
    return absl::OkStatus();
  }
  if (!t.tuple) {
    scope->vars[t.names[0]] = v;
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
  if (items.size() != t.names.size()) {
    return Error(items.size() < t.names.size()
                     ? absl::StrCat("not enough values to unpack (expected ", t.names.size(),
                                    ", got ", items.size(), ")")
                     : absl::StrCat("too many values to unpack (expected ", t.names.size(), ")"));
  }
  for (size_t i = 0; i < items.size(); ++i) scope->vars[t.names[i]] = std::move(items[i]);
  return absl::OkStatus();
}

absl::Status Renderer::Exec(const Body& body, const ScopePtr& scope, StrBuilder* out) {
  for (const StmtPtr& s : body) {
    RETURN_IF_ERROR(ExecStmt(*s, scope, out));
    if (flow_ != Flow::kNormal) return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::Status Renderer::ExecStmt(const Stmt& s, const ScopePtr& scope, StrBuilder* out) {
  RETURN_IF_ERROR(AtPosition(Step(), program_, s.offset));
  if (++depth_ > 4 * options_.limits.max_depth) {
    --depth_;
    return AtPosition(Exhausted("the template nests (or its macros recurse) too deeply"), program_,
                      s.offset);
  }
  struct Leave {
    int* depth;
    ~Leave() { --*depth; }
  } leave{&depth_};
  absl::Status st;
  switch (s.kind) {
    case StmtKind::kText:
      st = Charge(s.text.size());
      if (st.ok()) st = ChargeSteps(static_cast<int64_t>(s.text.size() / kOutputBytesPerStep));
      if (st.ok()) {
        out->Append(s.text);
        if (out->size() > options_.limits.max_string_bytes) {
          st = Exhausted(absl::StrCat("the output exceeds the limit of ",
                                      options_.limits.max_string_bytes, " bytes"));
        }
      }
      break;
    case StmtKind::kOutput: {
      absl::StatusOr<Value> v = Eval(*s.expr, scope);
      st = v.ok() ? Emit(*v, out) : v.status();
      break;
    }
    case StmtKind::kIf: {
      bool done = false;
      for (const auto& [cond, body] : s.branches) {
        absl::StatusOr<Value> c = Eval(*cond, scope);
        if (!c.ok()) {
          st = c.status();
          done = true;
          break;
        }
        if (Truthy(*c)) {
          st = Exec(body, scope, out);
          done = true;
          break;
        }
      }
      if (!done) st = Exec(s.else_body, scope, out);
      break;
    }
    case StmtKind::kFor:
      st = ExecFor(s, scope, out);
      break;
    case StmtKind::kSet: {
      absl::StatusOr<Value> v = Eval(*s.expr, scope);
      st = v.ok() ? Assign(s.target, *v, scope) : v.status();
      break;
    }
    case StmtKind::kSetBlock:
    case StmtKind::kFilterBlock: {
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      StrBuilder b;
      st = Exec(s.body, inner, &b);
      if (!st.ok()) break;
      absl::StatusOr<Value> v = NewString(b.Take());
      for (const ExprPtr& f : s.filters) {
        if (!v.ok()) break;
        v = FilterValue(*f, *v, scope);
      }
      if (!v.ok()) {
        st = v.status();
      } else if (s.kind == StmtKind::kSetBlock) {
        st = Assign(s.target, *v, scope);
      } else {
        st = Emit(*v, out);
      }
      break;
    }
    case StmtKind::kMacro: {
      auto c = std::make_shared<CallableData>();
      c->name = s.name;
      c->macro = &s;
      c->closure = scope;
      scope->vars[s.name] = ValueAccess::Make(Value::Kind::kCallable, std::move(c));
      break;
    }
    case StmtKind::kWith: {
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      for (const auto& [target, expr] : s.assigns) {
        absl::StatusOr<Value> v = Eval(*expr, scope);
        st = v.ok() ? Assign(target, *v, inner) : v.status();
        if (!st.ok()) break;
      }
      if (st.ok()) st = Exec(s.body, inner, out);
      break;
    }
    case StmtKind::kBreak:
      flow_ = Flow::kBreak;
      break;
    case StmtKind::kContinue:
      flow_ = Flow::kContinue;
      break;
    case StmtKind::kBlock:
      st = Exec(s.body, scope, out);
      break;
  }
  return AtPosition(std::move(st), program_, s.offset);
}

absl::Status Renderer::ExecFor(const Stmt& s, const ScopePtr& scope, StrBuilder* out) {
  ASSIGN_OR_RETURN(Value iterable, Eval(*s.expr, scope));
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(iterable));
  if (s.cond != nullptr) {
    std::vector<Value> kept;
    for (Value& item : items) {
      RETURN_IF_ERROR(Step());
      auto probe = std::make_shared<Scope>();
      probe->parent = scope;
      RETURN_IF_ERROR(Assign(s.target, item, probe));
      ASSIGN_OR_RETURN(Value ok, Eval(*s.cond, probe));
      if (Truthy(ok)) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    return Exec(s.else_body, inner, out);
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    // An iteration builds a scope and the 13 entries of `loop`: as much
    // work as kLoopIterationSteps expression nodes (jinja_step_bench).
    RETURN_IF_ERROR(ChargeSteps(kLoopIterationSteps));
    auto iteration = std::make_shared<Scope>();
    iteration->parent = scope;
    DictData loop;
    loop.Set("index", Value::Int(i + 1));
    loop.Set("index0", Value::Int(i));
    loop.Set("revindex", Value::Int(n - i));
    loop.Set("revindex0", Value::Int(n - i - 1));
    loop.Set("first", Value::Bool(i == 0));
    loop.Set("last", Value::Bool(i == n - 1));
    loop.Set("length", Value::Int(n));
    loop.Set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)]
                               : ValueAccess::Undefined("there is no previous item"));
    loop.Set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)]
                                   : ValueAccess::Undefined("there is no next item"));
    loop.Set("depth", Value::Int(1));
    loop.Set("depth0", Value::Int(0));
    loop.Set("cycle", MakeCycle(i));
    iteration->vars["loop"] = MakeDict(std::move(loop));
    RETURN_IF_ERROR(Assign(s.target, items[static_cast<size_t>(i)], iteration));
    RETURN_IF_ERROR(Exec(s.body, iteration, out));
    if (flow_ == Flow::kBreak) {
      flow_ = Flow::kNormal;
      break;
    }
    flow_ = Flow::kNormal;
  }
  return absl::OkStatus();
}

absl::StatusOr<RenderResult> Renderer::Run(const Variables& variables) {
  auto builtins = std::make_shared<Scope>();
  AddGlobals(builtins.get());
  auto globals = std::make_shared<Scope>();
  globals->parent = builtins;
  for (const auto& [name, value] : variables) globals->vars[name] = value;
  StrBuilder out;
  absl::Status st = Exec(program_.body, globals, &out);
  if (!st.ok()) return Public(std::move(st));
  RenderResult result;
  result.steps = steps_;
  StrData data = out.Take();
  result.text = std::move(data.text);
  result.marked.reserve(data.marks.size());
  for (const Mark& m : data.marks) result.marked.emplace_back(m.begin, m.end);
  return result;
}

}  // namespace internal

absl::StatusOr<Template> Template::Parse(absl::string_view source, const Limits& limits) {
  for (size_t i = 0; i < source.size();) {
    const Utf8Step step = DecodeUtf8(source.data() + i, source.data() + source.size());
    if (step.kind != Utf8Step::kValid) {
      return absl::InvalidArgumentError(
          absl::StrCat("the template is not valid UTF-8 (at byte ", i, ")"));
    }
    i += step.length;
  }
  auto program = std::make_shared<internal::Program>();
  program->source = internal::NormalizeSource(source);
  program->limits = limits;
  ASSIGN_OR_RETURN(std::vector<internal::Token> tokens, internal::Lex(*program));
  RETURN_IF_ERROR(internal::ParseInto(std::move(tokens), program.get()));
  Template t;
  t.program_ = std::move(program);
  return t;
}

absl::StatusOr<RenderResult> Template::Render(const Variables& variables,
                                              const RenderOptions& options) const {
  if (program_ == nullptr) return absl::FailedPreconditionError("the template was never parsed");
  RenderOptions resolved = options;
  if (resolved.now == absl::InfinitePast()) resolved.now = absl::Now();
  internal::Renderer renderer(*program_, resolved);
  return renderer.Run(variables);
}

}  // namespace minfer::tokenizer::jinja
