// The Jinja parser: tokens to a syntax tree, with Jinja2's grammar and
// operator precedence (jinja2/parser.py), lowest first:
//   a if b else c | or | and | not | comparisons, in, not in (chained) |
//   + - | ~ | * / // % | ** | unary - + | primary with postfix . [] () and
//   then filters (|), tests (is) and calls.
// Filters and tests are resolved here, so an unknown one is a parse error
// (as Jinja2 reports it when compiling).
#include <algorithm>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/tokenizer/jinja_internal.h"

namespace minfer::tokenizer::jinja::internal {
namespace {

class Parser {
 public:
  Parser(std::vector<Token> tokens, Program* program)
      : tokens_(std::move(tokens)), program_(program), limits_(program->limits) {}

  absl::Status Run() {
    ASSIGN_OR_RETURN(program_->body, ParseBody({}, 0));
    if (cur().type != Tok::kEof) return Fail(cur(), "unexpected " + Describe(cur()));
    return absl::OkStatus();
  }

 private:
  // --- Token helpers -------------------------------------------------------

  const Token& cur() const { return tokens_[pos_]; }
  const Token& peek(size_t n = 1) const { return tokens_[std::min(pos_ + n, tokens_.size() - 1)]; }
  void Next() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool IsName(absl::string_view name) const {
    return cur().type == Tok::kName && cur().value == name;
  }
  bool IsOp(absl::string_view op) const { return cur().type == Tok::kOp && cur().value == op; }
  bool SkipOp(absl::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(absl::string_view name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }

  static std::string Describe(const Token& t) {
    switch (t.type) {
      case Tok::kText:
        return "template text";
      case Tok::kVarBegin:
        return "'{{'";
      case Tok::kVarEnd:
        return "'}}'";
      case Tok::kBlockBegin:
        return "'{%'";
      case Tok::kBlockEnd:
        return "'%}'";
      case Tok::kName:
        return absl::StrCat("'", t.value, "'");
      case Tok::kString:
        return "a string";
      case Tok::kInt:
        return "an integer";
      case Tok::kFloat:
        return "a float";
      case Tok::kOp:
        return absl::StrCat("'", t.value, "'");
      case Tok::kEof:
        return "the end of the template";
    }
    return "?";
  }

  absl::Status Fail(const Token& t, absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(program_->Where(t.offset), ": ", message));
  }
  absl::Status Expected(absl::string_view what) const {
    return Fail(cur(), absl::StrCat("expected ", what, ", got ", Describe(cur())));
  }
  absl::Status ExpectOp(absl::string_view op) {
    if (!SkipOp(op)) return Expected(absl::StrCat("'", op, "'"));
    return absl::OkStatus();
  }
  absl::Status ExpectBlockEnd() {
    if (cur().type != Tok::kBlockEnd) return Expected("'%}'");
    Next();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (cur().type != Tok::kName) return Expected("a name");
    std::string name = cur().value;
    Next();
    return name;
  }

  // --- Nesting bounds --------------------------------------------------------

  // Recursion of the parser itself (nested brackets, "not not ...").
  class Nest {
   public:
    explicit Nest(Parser* p) : p_(p) { ++p_->nesting_; }
    ~Nest() { --p_->nesting_; }
    absl::Status Check() const {
      if (p_->nesting_ > p_->limits_.max_depth) {
        return absl::ResourceExhaustedError(absl::StrCat(p_->program_->Where(p_->cur().offset),
                                                         ": the template nests deeper than ",
                                                         p_->limits_.max_depth, " levels"));
      }
      return absl::OkStatus();
    }

   private:
    Parser* p_;
  };

  ExprPtr New(ExprKind kind, uint32_t offset) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->offset = offset;
    return e;
  }

  // Sets the depth of a finished node and bounds it (a long chain such as
  // a + b + c + ... nests without recursing in the parser; the renderer and
  // the destructor recurse over the tree).
  absl::StatusOr<ExprPtr> Done(ExprPtr e) {
    int d = 0;
    for (const ExprPtr* x : {&e->a, &e->b, &e->c}) {
      if (*x) d = std::max(d, (*x)->depth);
    }
    for (const ExprPtr& x : e->args) {
      if (x) d = std::max(d, x->depth);
    }
    for (const auto& [k, x] : e->kwargs) d = std::max(d, x->depth);
    e->depth = d + 1;
    if (e->depth > limits_.max_depth) {
      return absl::ResourceExhaustedError(absl::StrCat(program_->Where(e->offset),
                                                       ": the expression nests deeper than ",
                                                       limits_.max_depth, " levels"));
    }
    return e;
  }

  // --- Expressions -----------------------------------------------------------

  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr = true) {
    Nest nest(this);
    RETURN_IF_ERROR(nest.Check());
    if (with_condexpr) return ParseCondExpr();
    return ParseOr();
  }

  absl::StatusOr<ExprPtr> ParseCondExpr() {
    const uint32_t offset = cur().offset;
    ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
    while (SkipName("if")) {
      auto e = New(ExprKind::kCond, offset);
      e->a = std::move(expr);
      ASSIGN_OR_RETURN(e->b, ParseOr());
      if (SkipName("else")) {
        Nest nest(this);
        RETURN_IF_ERROR(nest.Check());
        ASSIGN_OR_RETURN(e->c, ParseCondExpr());
      }
      ASSIGN_OR_RETURN(expr, Done(std::move(e)));
    }
    return expr;
  }

  absl::StatusOr<ExprPtr> ParseOr() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (IsName("or")) {
      auto e = New(ExprKind::kOr, cur().offset);
      Next();
      e->a = std::move(left);
      ASSIGN_OR_RETURN(e->b, ParseAnd());
      ASSIGN_OR_RETURN(left, Done(std::move(e)));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseAnd() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (IsName("and")) {
      auto e = New(ExprKind::kAnd, cur().offset);
      Next();
      e->a = std::move(left);
      ASSIGN_OR_RETURN(e->b, ParseNot());
      ASSIGN_OR_RETURN(left, Done(std::move(e)));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      Nest nest(this);
      RETURN_IF_ERROR(nest.Check());
      auto e = New(ExprKind::kNot, cur().offset);
      Next();
      ASSIGN_OR_RETURN(e->a, ParseNot());
      return Done(std::move(e));
    }
    return ParseCompare();
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    const uint32_t offset = cur().offset;
    ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    ExprPtr e;
    while (true) {
      CmpOp op;
      if (IsOp("==")) {
        op = CmpOp::kEq;
      } else if (IsOp("!=")) {
        op = CmpOp::kNe;
      } else if (IsOp("<")) {
        op = CmpOp::kLt;
      } else if (IsOp("<=")) {
        op = CmpOp::kLe;
      } else if (IsOp(">")) {
        op = CmpOp::kGt;
      } else if (IsOp(">=")) {
        op = CmpOp::kGe;
      } else if (IsName("in")) {
        op = CmpOp::kIn;
      } else if (IsName("not") && peek().type == Tok::kName && peek().value == "in") {
        op = CmpOp::kNotIn;
        Next();
      } else {
        break;
      }
      Next();
      if (!e) {
        e = New(ExprKind::kCompare, offset);
        e->args.push_back(std::move(first));
      }
      e->cmp_ops.push_back(op);
      ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
      e->args.push_back(std::move(operand));
    }
    if (!e) return first;
    return Done(std::move(e));
  }

  absl::StatusOr<ExprPtr> ParseMath1() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
    while (IsOp("+") || IsOp("-")) {
      auto e = New(ExprKind::kBinary, cur().offset);
      e->op = IsOp("+") ? BinOp::kAdd : BinOp::kSub;
      Next();
      e->a = std::move(left);
      ASSIGN_OR_RETURN(e->b, ParseConcat());
      ASSIGN_OR_RETURN(left, Done(std::move(e)));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseConcat() {
    const uint32_t offset = cur().offset;
    ASSIGN_OR_RETURN(ExprPtr first, ParseMath2());
    if (!IsOp("~")) return first;
    auto e = New(ExprKind::kConcat, offset);
    e->args.push_back(std::move(first));
    while (SkipOp("~")) {
      ASSIGN_OR_RETURN(ExprPtr next, ParseMath2());
      e->args.push_back(std::move(next));
    }
    return Done(std::move(e));
  }

  absl::StatusOr<ExprPtr> ParseMath2() {
    ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      auto e = New(ExprKind::kBinary, cur().offset);
      e->op = IsOp("*")    ? BinOp::kMul
              : IsOp("/")  ? BinOp::kDiv
              : IsOp("//") ? BinOp::kFloorDiv
                           : BinOp::kMod;
      Next();
      e->a = std::move(left);
      ASSIGN_OR_RETURN(e->b, ParsePow());
      ASSIGN_OR_RETURN(left, Done(std::move(e)));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParsePow() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
    while (IsOp("**")) {
      auto e = New(ExprKind::kBinary, cur().offset);
      e->op = BinOp::kPow;
      Next();
      e->a = std::move(left);
      ASSIGN_OR_RETURN(e->b, ParseUnary(true));
      ASSIGN_OR_RETURN(left, Done(std::move(e)));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    Nest nest(this);
    RETURN_IF_ERROR(nest.Check());
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      auto e = New(IsOp("-") ? ExprKind::kNeg : ExprKind::kPos, cur().offset);
      Next();
      ASSIGN_OR_RETURN(e->a, ParseUnary(false));
      ASSIGN_OR_RETURN(node, Done(std::move(e)));
    } else {
      ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) {
      ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
    }
    return node;
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& t = cur();
    switch (t.type) {
      case Tok::kName: {
        auto e = New(ExprKind::kLiteral, t.offset);
        if (t.value == "true" || t.value == "True") {
          e->literal = Value::Bool(true);
        } else if (t.value == "false" || t.value == "False") {
          e->literal = Value::Bool(false);
        } else if (t.value == "none" || t.value == "None") {
          e->literal = Value::None();
        } else {
          e->kind = ExprKind::kName;
          e->name = t.value;
        }
        Next();
        return Done(std::move(e));
      }
      case Tok::kString: {
        auto e = New(ExprKind::kLiteral, t.offset);
        std::string s;
        while (cur().type == Tok::kString) {  // adjacent literals concatenate
          s += cur().value;
          Next();
        }
        e->literal = Value::String(std::move(s));
        return Done(std::move(e));
      }
      case Tok::kInt:
      case Tok::kFloat: {
        auto e = New(ExprKind::kLiteral, t.offset);
        e->literal = t.type == Tok::kInt ? Value::Int(t.int_value) : Value::Float(t.float_value);
        Next();
        return Done(std::move(e));
      }
      case Tok::kOp:
        if (t.value == "(") {
          Next();
          ASSIGN_OR_RETURN(ExprPtr e, ParseTuple(false, true, {}, /*explicit_parentheses=*/true));
          RETURN_IF_ERROR(ExpectOp(")"));
          return e;
        }
        if (t.value == "[") return ParseList();
        if (t.value == "{") return ParseDict();
        break;
      default:
        break;
    }
    return Fail(t, absl::StrCat("unexpected ", Describe(t)));
  }

  bool IsTupleEnd(std::initializer_list<absl::string_view> extra_end) const {
    if (cur().type == Tok::kVarEnd || cur().type == Tok::kBlockEnd || IsOp(")")) return true;
    for (absl::string_view n : extra_end) {
      if (IsName(n)) return true;
    }
    return false;
  }

  // Expressions separated by commas: a tuple when there is a comma.
  absl::StatusOr<ExprPtr> ParseTuple(bool simplified, bool with_condexpr,
                                     std::initializer_list<absl::string_view> extra_end,
                                     bool explicit_parentheses = false) {
    const uint32_t offset = cur().offset;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) RETURN_IF_ERROR(ExpectOp(","));
      if (IsTupleEnd(extra_end)) break;
      ExprPtr item;
      if (simplified) {
        ASSIGN_OR_RETURN(item, ParsePrimary());
      } else {
        ASSIGN_OR_RETURN(item, ParseExpression(with_condexpr));
      }
      items.push_back(std::move(item));
      if (IsOp(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parentheses) return Expected("an expression");
    }
    auto e = New(ExprKind::kTuple, offset);
    e->args = std::move(items);
    return Done(std::move(e));
  }

  absl::StatusOr<ExprPtr> ParseList() {
    auto e = New(ExprKind::kList, cur().offset);
    RETURN_IF_ERROR(ExpectOp("["));
    while (!IsOp("]")) {
      if (!e->args.empty()) RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp("]")) break;
      ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
      e->args.push_back(std::move(item));
    }
    RETURN_IF_ERROR(ExpectOp("]"));
    return Done(std::move(e));
  }

  absl::StatusOr<ExprPtr> ParseDict() {
    auto e = New(ExprKind::kDict, cur().offset);
    RETURN_IF_ERROR(ExpectOp("{"));
    while (!IsOp("}")) {
      if (!e->args.empty()) RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp("}")) break;
      ASSIGN_OR_RETURN(ExprPtr key, ParseExpression());
      RETURN_IF_ERROR(ExpectOp(":"));
      ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      e->args.push_back(std::move(key));
      e->args.push_back(std::move(value));
    }
    RETURN_IF_ERROR(ExpectOp("}"));
    return Done(std::move(e));
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      if (IsOp(".") || IsOp("[")) {
        ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
      } else if (IsOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        ASSIGN_OR_RETURN(node, ParseFilter(std::move(node), false));
      } else if (IsName("is")) {
        ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
      } else if (IsOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node) {
    if (SkipOp(".")) {
      const Token& t = cur();
      if (t.type == Tok::kName) {
        auto e = New(ExprKind::kGetAttr, t.offset);
        e->a = std::move(node);
        e->name = t.value;
        Next();
        return Done(std::move(e));
      }
      if (t.type == Tok::kInt) {
        auto e = New(ExprKind::kGetItem, t.offset);
        e->a = std::move(node);
        auto key = New(ExprKind::kLiteral, t.offset);
        key->literal = Value::Int(t.int_value);
        Next();
        ASSIGN_OR_RETURN(e->b, Done(std::move(key)));
        return Done(std::move(e));
      }
      return Expected("an attribute name after '.'");
    }
    auto e = New(ExprKind::kGetItem, cur().offset);
    RETURN_IF_ERROR(ExpectOp("["));
    std::vector<ExprPtr> keys;
    while (!IsOp("]")) {
      if (!keys.empty()) {
        RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp("]")) break;
      }
      ASSIGN_OR_RETURN(ExprPtr key, ParseSubscribed());
      keys.push_back(std::move(key));
    }
    RETURN_IF_ERROR(ExpectOp("]"));
    if (keys.empty()) return Fail(cur(), "expected a subscript");
    e->a = std::move(node);
    if (keys.size() == 1) {
      e->b = std::move(keys[0]);
    } else {
      auto t = New(ExprKind::kTuple, e->offset);
      t->args = std::move(keys);
      ASSIGN_OR_RETURN(e->b, Done(std::move(t)));
    }
    return Done(std::move(e));
  }

  bool AtSliceEnd() const { return IsOp("]") || IsOp(","); }

  // An index, or a slice start:stop:step with any part omitted.
  absl::StatusOr<ExprPtr> ParseSubscribed() {
    const uint32_t offset = cur().offset;
    auto slice = New(ExprKind::kSlice, offset);
    if (SkipOp(":")) {
      slice->args.push_back(nullptr);
    } else {
      ASSIGN_OR_RETURN(ExprPtr node, ParseExpression());
      if (!SkipOp(":")) return node;
      slice->args.push_back(std::move(node));
    }
    if (IsOp(":") || AtSliceEnd()) {
      slice->args.push_back(nullptr);
    } else {
      ASSIGN_OR_RETURN(ExprPtr stop, ParseExpression());
      slice->args.push_back(std::move(stop));
    }
    if (SkipOp(":") && !AtSliceEnd()) {
      ASSIGN_OR_RETURN(ExprPtr step, ParseExpression());
      slice->args.push_back(std::move(step));
    } else {
      slice->args.push_back(nullptr);
    }
    return Done(std::move(slice));
  }

  // "(" arguments ")" into e->args / e->kwargs.
  absl::Status ParseCallArgs(Expr* e) {
    RETURN_IF_ERROR(ExpectOp("("));
    bool need_comma = false;
    while (!IsOp(")")) {
      if (need_comma) {
        RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp(")")) break;
      }
      if (IsOp("*") || IsOp("**")) {
        return Fail(cur(), "argument unpacking (*args, **kwargs) is not supported");
      }
      if (cur().type == Tok::kName && peek().type == Tok::kOp && peek().value == "=") {
        std::string key = cur().value;
        Next();
        Next();
        for (const auto& [k, v] : e->kwargs) {
          if (k == key) return Fail(cur(), absl::StrCat("keyword argument '", key, "' repeated"));
        }
        ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
        e->kwargs.emplace_back(std::move(key), std::move(value));
      } else {
        if (!e->kwargs.empty()) return Fail(cur(), "positional argument follows keyword argument");
        ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
        e->args.push_back(std::move(value));
      }
      need_comma = true;
    }
    return ExpectOp(")");
  }

  absl::StatusOr<ExprPtr> ParseCall(ExprPtr node) {
    auto e = New(ExprKind::kCall, cur().offset);
    e->a = std::move(node);
    RETURN_IF_ERROR(ParseCallArgs(e.get()));
    return Done(std::move(e));
  }

  absl::StatusOr<std::string> ParseDottedName() {
    ASSIGN_OR_RETURN(std::string name, ExpectName());
    while (IsOp(".")) {
      Next();
      ASSIGN_OR_RETURN(std::string part, ExpectName());
      absl::StrAppend(&name, ".", part);
    }
    return name;
  }

  // One filter "| name(args)"; `node` may be null (filter blocks).
  absl::StatusOr<ExprPtr> ParseFilter(ExprPtr node, bool start_inline) {
    if (!start_inline) RETURN_IF_ERROR(ExpectOp("|"));
    const Token& t = cur();
    auto e = New(ExprKind::kFilter, t.offset);
    ASSIGN_OR_RETURN(e->name, ParseDottedName());
    e->filter = FindFilter(e->name);
    if (e->filter == nullptr) return Fail(t, absl::StrCat("no filter named '", e->name, "'"));
    e->a = std::move(node);
    if (IsOp("(")) RETURN_IF_ERROR(ParseCallArgs(e.get()));
    return Done(std::move(e));
  }

  absl::StatusOr<ExprPtr> ParseTest(ExprPtr node) {
    auto e = New(ExprKind::kTest, cur().offset);
    Next();  // is
    e->negate = SkipName("not");
    const Token& t = cur();
    ASSIGN_OR_RETURN(e->name, ParseDottedName());
    e->test = FindTest(e->name);
    if (e->test == nullptr) return Fail(t, absl::StrCat("no test named '", e->name, "'"));
    e->a = std::move(node);
    if (IsOp("(")) {
      RETURN_IF_ERROR(ParseCallArgs(e.get()));
    } else if ((cur().type == Tok::kName || cur().type == Tok::kString || cur().type == Tok::kInt ||
                cur().type == Tok::kFloat || IsOp("(") || IsOp("[") || IsOp("{")) &&
               !IsName("else") && !IsName("or") && !IsName("and") && !IsName("if")) {
      // One argument without parentheses: "x is divisibleby 3".
      if (IsName("is")) return Fail(cur(), "tests cannot be chained with 'is'");
      ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
      ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
      e->args.push_back(std::move(arg));
    }
    return Done(std::move(e));
  }

  // --- Statements --------------------------------------------------------------

  // Statements up to a {% NAME %} with NAME in `end` (left current, just
  // after its "{%"), or the end of the template when `end` is empty.
  absl::StatusOr<Body> ParseBody(std::initializer_list<absl::string_view> end, uint32_t opened_at) {
    Body body;
    while (true) {
      const Token& t = cur();
      switch (t.type) {
        case Tok::kText: {
          auto s = std::make_unique<Stmt>();
          s->kind = StmtKind::kText;
          s->offset = t.offset;
          s->text = t.value;
          body.push_back(std::move(s));
          Next();
          break;
        }
        case Tok::kVarBegin: {
          auto s = std::make_unique<Stmt>();
          s->kind = StmtKind::kOutput;
          s->offset = t.offset;
          Next();
          ASSIGN_OR_RETURN(s->expr, ParseTuple(false, true, {}));
          if (cur().type != Tok::kVarEnd) return Expected("'}}'");
          Next();
          body.push_back(std::move(s));
          break;
        }
        case Tok::kBlockBegin: {
          Next();
          if (cur().type == Tok::kName) {
            for (absl::string_view n : end) {
              if (cur().value == n) return body;
            }
          }
          ASSIGN_OR_RETURN(StmtPtr s, ParseStatement(t.offset));
          body.push_back(std::move(s));
          break;
        }
        case Tok::kEof: {
          if (end.size() == 0) return body;
          std::string names;
          for (absl::string_view n : end) {
            absl::StrAppend(&names, names.empty() ? "" : " or ", "'{% ", n, " %}'");
          }
          return absl::InvalidArgumentError(absl::StrCat(program_->Where(opened_at),
                                                         ": this block is never closed: expected ",
                                                         names, " before the end of the template"));
        }
        default:
          return Fail(t, absl::StrCat("unexpected ", Describe(t)));
      }
    }
  }

  StmtPtr NewStmt(StmtKind kind, uint32_t offset) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->offset = offset;
    return s;
  }

  // At the name after "{%" of the closing tag `name`: consumes it and "%}".
  absl::Status CloseTag(absl::string_view name) {
    if (!SkipName(name)) return Expected(absl::StrCat("'", name, "'"));
    return ExpectBlockEnd();
  }

  absl::StatusOr<StmtPtr> ParseStatement(uint32_t offset) {
    Nest nest(this);
    RETURN_IF_ERROR(nest.Check());
    if (cur().type != Tok::kName) return Expected("a statement name after '{%'");
    const std::string name = cur().value;
    if (name == "for") return ParseFor(offset);
    if (name == "if") return ParseIf(offset);
    if (name == "set") return ParseSet(offset);
    if (name == "macro") return ParseMacro(offset);
    if (name == "filter") return ParseFilterBlock(offset);
    if (name == "with") return ParseWith(offset);
    if (name == "generation") {
      // transformers' marker of assistant text (for training masks).
      auto s = NewStmt(StmtKind::kBlock, offset);
      Next();
      RETURN_IF_ERROR(ExpectBlockEnd());
      ASSIGN_OR_RETURN(s->body, ParseBody({"endgeneration"}, offset));
      RETURN_IF_ERROR(CloseTag("endgeneration"));
      return s;
    }
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) return Fail(cur(), absl::StrCat("'", name, "' outside of a loop"));
      auto s = NewStmt(name == "break" ? StmtKind::kBreak : StmtKind::kContinue, offset);
      Next();
      RETURN_IF_ERROR(ExpectBlockEnd());
      return s;
    }
    static constexpr absl::string_view kUnsupported[] = {
        "call", "extends", "block", "include", "import", "from", "autoescape", "do", "print"};
    for (absl::string_view u : kUnsupported) {
      if (name == u) {
        return Fail(cur(), absl::StrCat("the '{% ", name, " %}' statement is not supported"));
      }
    }
    static constexpr absl::string_view kClosers[] = {
        "endfor",   "endif",     "elif",    "else",          "endset",
        "endmacro", "endfilter", "endwith", "endgeneration", "endraw"};
    for (absl::string_view c : kClosers) {
      if (name == c) return Fail(cur(), absl::StrCat("unexpected '{% ", name, " %}'"));
    }
    return Fail(cur(), absl::StrCat("unknown statement '{% ", name, " %}'"));
  }

  // A name, a tuple of names ("a, b" or "(a, b)"), or with `namespace_ok`
  // a namespace attribute "ns.attr".
  absl::StatusOr<Target> ParseTarget(bool namespace_ok) {
    Target t;
    if (namespace_ok && cur().type == Tok::kName && peek().type == Tok::kOp &&
        peek().value == ".") {
      t.names.push_back(cur().value);
      Next();
      Next();
      ASSIGN_OR_RETURN(t.attr, ExpectName());
      return t;
    }
    const bool paren = SkipOp("(");
    while (true) {
      ASSIGN_OR_RETURN(std::string n, ExpectName());
      t.names.push_back(std::move(n));
      if (!SkipOp(",")) break;
      t.tuple = true;
      if (cur().type != Tok::kName) break;  // trailing comma
    }
    if (paren) RETURN_IF_ERROR(ExpectOp(")"));
    return t;
  }

  absl::StatusOr<StmtPtr> ParseFor(uint32_t offset) {
    auto s = NewStmt(StmtKind::kFor, offset);
    Next();
    ASSIGN_OR_RETURN(s->target, ParseTarget(false));
    if (!SkipName("in")) return Expected("'in'");
    ASSIGN_OR_RETURN(s->expr, ParseTuple(false, /*with_condexpr=*/false, {"recursive"}));
    if (SkipName("if")) {
      ASSIGN_OR_RETURN(s->cond, ParseExpression());
    }
    if (IsName("recursive")) return Fail(cur(), "recursive loops are not supported");
    RETURN_IF_ERROR(ExpectBlockEnd());
    ++loop_depth_;
    absl::StatusOr<Body> body = ParseBody({"endfor", "else"}, offset);
    --loop_depth_;
    if (!body.ok()) return body.status();
    s->body = std::move(*body);
    if (SkipName("else")) {
      RETURN_IF_ERROR(ExpectBlockEnd());
      ASSIGN_OR_RETURN(s->else_body, ParseBody({"endfor"}, offset));
    }
    RETURN_IF_ERROR(CloseTag("endfor"));
    return s;
  }

  absl::StatusOr<StmtPtr> ParseIf(uint32_t offset) {
    auto s = NewStmt(StmtKind::kIf, offset);
    Next();
    while (true) {
      ASSIGN_OR_RETURN(ExprPtr cond, ParseTuple(false, /*with_condexpr=*/false, {}));
      RETURN_IF_ERROR(ExpectBlockEnd());
      ASSIGN_OR_RETURN(Body body, ParseBody({"elif", "else", "endif"}, offset));
      s->branches.emplace_back(std::move(cond), std::move(body));
      if (SkipName("elif")) continue;
      if (SkipName("else")) {
        RETURN_IF_ERROR(ExpectBlockEnd());
        ASSIGN_OR_RETURN(s->else_body, ParseBody({"endif"}, offset));
      }
      break;
    }
    RETURN_IF_ERROR(CloseTag("endif"));
    return s;
  }

  absl::StatusOr<StmtPtr> ParseSet(uint32_t offset) {
    auto s = NewStmt(StmtKind::kSet, offset);
    Next();
    ASSIGN_OR_RETURN(s->target, ParseTarget(true));
    if (SkipOp("=")) {
      ASSIGN_OR_RETURN(s->expr, ParseTuple(false, true, {}));
      RETURN_IF_ERROR(ExpectBlockEnd());
      return s;
    }
    s->kind = StmtKind::kSetBlock;
    while (IsOp("|")) {
      ASSIGN_OR_RETURN(ExprPtr f, ParseFilter(nullptr, false));
      s->filters.push_back(std::move(f));
    }
    RETURN_IF_ERROR(ExpectBlockEnd());
    ASSIGN_OR_RETURN(s->body, ParseBody({"endset"}, offset));
    RETURN_IF_ERROR(CloseTag("endset"));
    return s;
  }

  absl::StatusOr<StmtPtr> ParseMacro(uint32_t offset) {
    auto s = NewStmt(StmtKind::kMacro, offset);
    Next();
    ASSIGN_OR_RETURN(s->name, ExpectName());
    RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      if (!s->params.empty()) {
        RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp(")")) break;
      }
      const Token& t = cur();
      ASSIGN_OR_RETURN(std::string param, ExpectName());
      for (const std::string& p : s->params) {
        if (p == param) return Fail(t, absl::StrCat("parameter '", param, "' repeated"));
      }
      ExprPtr def;
      if (SkipOp("=")) {
        ASSIGN_OR_RETURN(def, ParseExpression());
      } else if (!s->defaults.empty() && s->defaults.back() != nullptr) {
        return Fail(t, "non-default parameter follows default parameter");
      }
      s->params.push_back(std::move(param));
      s->defaults.push_back(std::move(def));
    }
    RETURN_IF_ERROR(ExpectOp(")"));
    RETURN_IF_ERROR(ExpectBlockEnd());
    const int saved = loop_depth_;
    loop_depth_ = 0;  // break/continue do not cross a macro
    absl::StatusOr<Body> body = ParseBody({"endmacro"}, offset);
    loop_depth_ = saved;
    if (!body.ok()) return body.status();
    s->body = std::move(*body);
    RETURN_IF_ERROR(CloseTag("endmacro"));
    return s;
  }

  absl::StatusOr<StmtPtr> ParseFilterBlock(uint32_t offset) {
    auto s = NewStmt(StmtKind::kFilterBlock, offset);
    Next();
    ASSIGN_OR_RETURN(ExprPtr first, ParseFilter(nullptr, /*start_inline=*/true));
    s->filters.push_back(std::move(first));
    while (IsOp("|")) {
      ASSIGN_OR_RETURN(ExprPtr f, ParseFilter(nullptr, false));
      s->filters.push_back(std::move(f));
    }
    RETURN_IF_ERROR(ExpectBlockEnd());
    ASSIGN_OR_RETURN(s->body, ParseBody({"endfilter"}, offset));
    RETURN_IF_ERROR(CloseTag("endfilter"));
    return s;
  }

  absl::StatusOr<StmtPtr> ParseWith(uint32_t offset) {
    auto s = NewStmt(StmtKind::kWith, offset);
    Next();
    while (cur().type != Tok::kBlockEnd) {
      if (!s->assigns.empty()) RETURN_IF_ERROR(ExpectOp(","));
      ASSIGN_OR_RETURN(Target t, ParseTarget(false));
      RETURN_IF_ERROR(ExpectOp("="));
      ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      s->assigns.emplace_back(std::move(t), std::move(value));
    }
    RETURN_IF_ERROR(ExpectBlockEnd());
    ASSIGN_OR_RETURN(s->body, ParseBody({"endwith"}, offset));
    RETURN_IF_ERROR(CloseTag("endwith"));
    return s;
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  Program* program_;
  const Limits& limits_;
  int nesting_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

absl::Status ParseInto(std::vector<Token> tokens, Program* program) {
  return Parser(std::move(tokens), program).Run();
}

}  // namespace minfer::tokenizer::jinja::internal
