// Internals of the Jinja interpreter (jinja.h): the value storage, the
// syntax tree, the lexer/parser entry points, the renderer that evaluates a
// tree and the table of filters, tests, methods and globals it calls.
// Private to engine/tokenizer:jinja; nothing here is a stable interface.
//
// Files: jinja_value.cc (values: printing, repr, JSON, comparison, strings
// with marks, Unicode helpers), jinja_lexer.cc, jinja_parser.cc,
// jinja_render.cc (the evaluator and Template), jinja_builtins.cc.
#ifndef MINFER_ENGINE_TOKENIZER_JINJA_INTERNAL_H_
#define MINFER_ENGINE_TOKENIZER_JINJA_INTERNAL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/tokenizer/jinja.h"

namespace minfer::tokenizer::jinja::internal {

// ---------------------------------------------------------------------------
// Values

// A byte range [begin, end) of a string that holds marked text.
struct Mark {
  size_t begin;
  size_t end;
};

struct StrData {
  std::string text;
  std::vector<Mark> marks;  // sorted, disjoint, non-empty, touching merged
};

struct ListData {
  std::vector<Value> items;
  bool tuple = false;
};

// Insertion-ordered string-keyed map. Small maps are searched linearly; an
// index is kept once they grow (tools schemas, JSON documents).
struct DictData {
  std::vector<std::pair<std::string, Value>> items;
  bool keys_marked = false;                        // keys came from marked JSON
  absl::flat_hash_map<std::string, size_t> index;  // filled past kIndexFrom items

  static constexpr size_t kIndexFrom = 16;
  const Value* Find(absl::string_view key) const;
  void Set(std::string key, Value value);
};

struct Scope;
class Renderer;
struct Stmt;

struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// A builtin: a global function, or a method bound to `self`.
using BuiltinFn = absl::StatusOr<Value> (*)(Renderer& r, const Value& self, Args& args);

struct CallableData {
  std::string name;
  BuiltinFn fn = nullptr;  // builtins and bound methods
  Value self;
  const Stmt* macro = nullptr;  // or a macro, with the scope it was defined in
  // Weak: the scope holds the macro, so a strong pointer would be a cycle.
  std::weak_ptr<Scope> closure;
};

// Typed access to a Value's storage, for the interpreter's files.
class ValueAccess {
 public:
  static Value Make(Value::Kind kind, std::shared_ptr<void> p) {
    Value v;
    v.kind_ = kind;
    v.p_ = std::move(p);
    return v;
  }
  static const StrData& Str(const Value& v) { return *static_cast<const StrData*>(v.p_.get()); }
  static const ListData& List(const Value& v) { return *static_cast<const ListData*>(v.p_.get()); }
  static DictData& Dict(const Value& v) { return *static_cast<DictData*>(v.p_.get()); }
  static const CallableData& Callable(const Value& v) {
    return *static_cast<const CallableData*>(v.p_.get());
  }
  static const void* Identity(const Value& v) { return v.p_.get(); }
  // An undefined value may carry a hint saying what was missing.
  static Value Undefined(std::string hint);
  static std::string UndefinedHint(const Value& v);
};

Value MakeStr(StrData data);
Value MakeStr(std::string text, bool marked);
Value MakeList(std::vector<Value> items, bool tuple = false);
Value MakeDict(DictData data);

// Python's name of the value's type ("str", "list", "NoneType", ...).
const char* TypeName(const Value& v);
bool Truthy(const Value& v);
// Whether the value holds marked text anywhere (containers recursively).
bool HasMarks(const Value& v);

// Python's str(v) (with marks: a string keeps its own; anything else is
// marked as a whole when it holds marked text) and repr(v).
StrData Display(const Value& v);
void AppendRepr(const Value& v, std::string* out);
void AppendPyFloat(double d, std::string* out);

// Python's == and the ordering of < <= > >= (TypeError as INVALID_ARGUMENT
// when the types do not order).
bool Equals(const Value& a, const Value& b);
absl::StatusOr<int> Compare(const Value& a, const Value& b);

// json.dumps(v, ensure_ascii, indent, separators, sort_keys).
struct JsonOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // per level; none = single line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
absl::Status AppendJson(const Value& v, const JsonOptions& options, int depth, std::string* out);

// Builds a string with marks.
class StrBuilder {
 public:
  void Append(absl::string_view plain) { text_.append(plain.data(), plain.size()); }
  void Append(const StrData& s);
  // Appends `text` marked as a whole when `marked`.
  void AppendMarked(absl::string_view text, bool marked);
  size_t size() const { return text_.size(); }
  StrData Take() { return StrData{std::move(text_), std::move(marks_)}; }
  std::string& text() { return text_; }
  const std::vector<Mark>& marks() const { return marks_; }

 private:
  void AddMark(size_t begin, size_t end);
  std::string text_;
  std::vector<Mark> marks_;
};

// s.text[begin, end) with the marks inside it.
StrData Substr(const StrData& s, size_t begin, size_t end);

// Unicode helpers (code points as Python counts them; an ill-formed UTF-8
// subpart is one code point).
bool IsPySpace(char32_t cp);  // str.isspace()
// Byte offsets of each code point of `s`, then s.size().
std::vector<size_t> CodePointOffsets(absl::string_view s);
size_t CodePointCount(absl::string_view s);
// Decodes the code point at s[pos] (U+FFFD for an ill-formed subpart);
// sets *len to its byte length.
char32_t CodePointAt(absl::string_view s, size_t pos, size_t* len);
std::string PyUpper(absl::string_view s);
std::string PyLower(absl::string_view s);
std::string PyTitle(absl::string_view s);
std::string PyCapitalize(absl::string_view s);

// ---------------------------------------------------------------------------
// Syntax tree

enum class ExprKind : uint8_t {
  kLiteral,  // literal
  kName,     // name
  kList,     // args
  kTuple,    // args
  kDict,     // args: key, value, key, value, ...
  kGetAttr,  // a.name
  kGetItem,  // a[b]
  kSlice,    // args: start, stop, step (each may be null); only as kGetItem's b
  kCall,     // a(args, kwargs)
  kFilter,   // a | name(args, kwargs); a is null inside filter blocks
  kTest,     // a is [not] name(args, kwargs)
  kNot,      // not a
  kNeg,      // -a
  kPos,      // +a
  kBinary,   // a op b
  kConcat,   // args joined with ~
  kAnd,      // a and b
  kOr,       // a or b
  kCompare,  // args[0] ops[0] args[1] ops[1] args[2] ...
  kCond,     // a if b else c (c may be null)
};

enum class BinOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };
enum class CmpOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

using FilterFn = absl::StatusOr<Value> (*)(Renderer& r, const Value& operand, Args& args);
using TestFn = absl::StatusOr<bool> (*)(Renderer& r, const Value& operand, Args& args);

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind;
  uint32_t offset = 0;  // in Program::source
  int depth = 1;        // nesting depth of this subtree
  Value literal;
  std::string name;
  BinOp op = BinOp::kAdd;
  bool negate = false;
  ExprPtr a, b, c;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<CmpOp> cmp_ops;
  FilterFn filter = nullptr;
  TestFn test = nullptr;
};

enum class StmtKind : uint8_t {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // branches, else_body
  kFor,          // target in expr [if cond]: body, else_body
  kSet,          // target = expr
  kSetBlock,     // target [| filters] = body
  kMacro,        // name(params = defaults): body
  kFilterBlock,  // filters applied to body
  kWith,         // assigns: body
  kBreak,
  kContinue,
  kBlock,  // body (transformers' {% generation %})
};

// An assignment target: a name, a tuple of names, or a namespace
// attribute (names[0].attr).
struct Target {
  std::vector<std::string> names;
  bool tuple = false;
  std::string attr;
};

using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  StmtKind kind;
  uint32_t offset = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  Target target;
  std::vector<ExprPtr> filters;  // kFilter nodes with a null operand
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // per parameter, null when none
  std::vector<std::pair<Target, ExprPtr>> assigns;
};

struct Program {
  std::string source;  // newlines normalized; offsets point into it
  Body body;
  Limits limits;
  // "line L, column C" of a byte offset.
  std::string Where(uint32_t offset) const;
};

// ---------------------------------------------------------------------------
// Lexer and parser

enum class Tok : uint8_t {
  kText,
  kVarBegin,
  kVarEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInt,
  kFloat,
  kOp,
  kEof,
};

struct Token {
  Tok type;
  uint32_t offset;
  std::string value;  // text, name, string value or operator
  int64_t int_value = 0;
  double float_value = 0;
};

// Normalizes newlines and drops one trailing newline, as Jinja2 does before
// lexing; offsets of tokens and nodes refer to the result.
std::string NormalizeSource(absl::string_view source);
absl::StatusOr<std::vector<Token>> Lex(const Program& program);
absl::Status ParseInto(std::vector<Token> tokens, Program* program);

// ---------------------------------------------------------------------------
// Errors

// An error not yet attributed to a position: the renderer prefixes the
// position of the innermost node that returns it.
absl::Status Error(absl::string_view message);
absl::Status Exhausted(absl::string_view message);
// `status` with "line L, column C: " prefixed, unless it already names a
// position (or is raise_exception's); marks it as positioned.
absl::Status AtPosition(absl::Status status, const Program& program, uint32_t offset);
// A status that is reported as is (raise_exception).
absl::Status Final(absl::Status status);
// The status without the internal marker, for callers of Template.
absl::Status Public(absl::Status status);

// ---------------------------------------------------------------------------
// Rendering

struct Scope {
  std::shared_ptr<Scope> parent;
  absl::flat_hash_map<std::string, Value> vars;
};
using ScopePtr = std::shared_ptr<Scope>;

// Evaluates a Program. One per Render call; not thread-safe.
class Renderer {
 public:
  Renderer(const Program& program, const RenderOptions& options);
  ~Renderer();

  absl::StatusOr<RenderResult> Run(const Variables& variables);

  // For builtins. New strings and lists are charged against the limits.
  absl::StatusOr<Value> NewString(StrData data);
  absl::StatusOr<Value> NewString(std::string text, bool marked);
  absl::StatusOr<Value> NewList(std::vector<Value> items, bool tuple = false);
  absl::Status Charge(size_t bytes);
  absl::Status CheckListSize(size_t items) const;
  // Charges `n` evaluation steps (for builtins whose work grows faster than
  // their input, such as sort). Step() is ChargeSteps(1).
  absl::Status ChargeSteps(int64_t n);
  // What a loop iteration and building a string are charged, in steps
  // (their CPU time measured against an expression node's by
  // tests/engine/tokenizer/jinja_step_bench.cc).
  static constexpr int64_t kLoopIterationSteps = 10;
  static constexpr size_t kBytesPerStep = 64;
  // Appending to the output (a growing buffer, reallocated and faulted in)
  // measured several times dearer per byte than building a string.
  static constexpr size_t kOutputBytesPerStep = 16;
  // Charges a scan of `bytes` of a string (code point offsets).
  absl::Status ChargeScan(size_t bytes);
  Value NewNamespace(DictData data);
  absl::StatusOr<Value> Call(const Value& callee, Args args);
  absl::StatusOr<Value> ApplyFilter(absl::string_view name, const Value& operand, Args args);
  absl::StatusOr<bool> ApplyTest(absl::string_view name, const Value& operand, Args args);
  absl::StatusOr<Value> GetAttr(const Value& object, absl::string_view attr);
  absl::StatusOr<Value> GetItem(const Value& object, const Value& key);
  // Python's binary operators and comparisons (== != < <= > >= in, not in).
  absl::StatusOr<Value> BinaryOp(BinOp op, const Value& a, const Value& b);
  absl::StatusOr<bool> CompareValues(CmpOp op, const Value& a, const Value& b);
  // The items a for loop (or list()) walks: list items, dict keys, the
  // characters of a string; none for undefined.
  absl::StatusOr<std::vector<Value>> Iterate(const Value& v);
  // Python's str(v) as a string value.
  absl::StatusOr<Value> ToStr(const Value& v);
  const RenderOptions& options() const { return options_; }

 private:
  enum class Flow : uint8_t { kNormal, kBreak, kContinue };

  absl::StatusOr<Value> Eval(const Expr& e, const ScopePtr& scope);
  absl::StatusOr<Value> EvalInner(const Expr& e, const ScopePtr& scope);
  absl::Status Exec(const Body& body, const ScopePtr& scope, StrBuilder* out);
  absl::Status ExecStmt(const Stmt& s, const ScopePtr& scope, StrBuilder* out);
  absl::Status ExecFor(const Stmt& s, const ScopePtr& scope, StrBuilder* out);
  absl::Status Assign(const Target& t, const Value& v, const ScopePtr& scope);
  absl::Status Emit(const Value& v, StrBuilder* out);
  absl::Status Step();
  absl::StatusOr<Value> Slice(const Value& object, const Expr& slice, const ScopePtr& scope);
  absl::StatusOr<Args> EvalArgs(const Expr& e, const ScopePtr& scope);
  absl::StatusOr<Value> CallMacro(const CallableData& macro, Args args);
  absl::StatusOr<Value> FilterValue(const Expr& f, const Value& operand, const ScopePtr& scope);
  static Value Lookup(const ScopePtr& scope, absl::string_view name);

  const Program& program_;
  const RenderOptions& options_;
  int64_t steps_ = 0;
  size_t total_bytes_ = 0;
  int depth_ = 0;
  Flow flow_ = Flow::kNormal;
  // Namespaces made while rendering; emptied at the end, which breaks any
  // reference cycle a template built through them.
  std::vector<std::shared_ptr<DictData>> namespaces_;
};

// ---------------------------------------------------------------------------
// Builtins (jinja_builtins.cc)

FilterFn FindFilter(absl::string_view name);
TestFn FindTest(absl::string_view name);
// A method of strings or dicts, for attribute access; null when none.
BuiltinFn FindMethod(Value::Kind kind, absl::string_view name);
// Whether `name` is a mutating method of lists or dicts (refused, as
// Jinja2's immutable sandbox does).
bool IsUnsafeMethod(Value::Kind kind, absl::string_view name);
// The predefined globals: namespace, range, dict, raise_exception,
// strftime_now.
void AddGlobals(Scope* scope);
// loop.cycle bound to the iteration `index0`.
Value MakeCycle(int64_t index0);

// Binds Python-style arguments to parameter names: out[i] is the value for
// names[i] or null when not given. INVALID_ARGUMENT naming `function` for
// too many arguments, an unknown keyword or a repeated one.
absl::Status BindArgs(const Args& args, absl::string_view function,
                      std::initializer_list<absl::string_view> names,
                      std::vector<const Value*>* out);

}  // namespace minfer::tokenizer::jinja::internal

#endif  // MINFER_ENGINE_TOKENIZER_JINJA_INTERNAL_H_
