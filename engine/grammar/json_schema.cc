#include "engine/grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "engine/base/status.h"
#include "engine/grammar/json_validate.h"
#include "engine/grammar/regex.h"
#include "nlohmann/json.hpp"

namespace minfer::grammar {
namespace {

// ordered_json keeps an object's keys in document order: where `properties`
// are generated in the schema's order (large objects, PropertyOrder::
// kSchema), that order is the schema author's.
using Json = nlohmann::ordered_json;
using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;
using Int = __int128;

absl::Status Invalid(absl::string_view what, absl::string_view ptr) {
  // The root's JSON pointer is the empty string; say so in words.
  return absl::InvalidArgumentError(
      absl::StrCat(what, " at ", ptr.empty() ? "the root" : ptr));
}

std::string PointerToken(absl::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Child(absl::string_view ptr, absl::string_view key) {
  return absl::StrCat(ptr, "/", PointerToken(key));
}

// Nesting depth of the text, counting brackets outside strings, before any
// parser sees it: nlohmann's parser and destructor, and this compiler,
// recurse per level, so a hostile "[[[[..." must be stopped here.
absl::Status CheckNesting(absl::string_view text, int32_t max_depth) {
  int32_t depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return absl::InvalidArgumentError(absl::StrCat(
            "schema nested deeper than ", max_depth, " levels at offset ", i));
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return absl::OkStatus();
}

// Records where parsing failed; every other event is accepted. Used only to
// word the error of a text that json::parse discarded.
class ErrorSax : public nlohmann::json_sax<Json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    // `position` counts the bytes read, through the byte where the parser
    // gave up: that byte's 0-based offset.
    position_ = position > 0 ? position - 1 : 0;
    message_ = ex.what();
    return false;
  }
  size_t position_ = 0;
  std::string message_ = "unknown error";
};

absl::StatusOr<Json> ParseJson(absl::string_view text) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_discarded()) return j;
  ErrorSax sax;
  Json::sax_parse(text.begin(), text.end(), &sax);
  return absl::InvalidArgumentError(absl::StrCat("schema is not valid JSON at offset ",
                                                 sax.position_, ": ",
                                                 sax.message_));
}

// Keywords that do not change which instances are valid.
const absl::flat_hash_set<std::string>& Annotations() {
  static const auto* s = new absl::flat_hash_set<std::string>{
      "title",      "description", "examples",   "default",         "$schema",
      "$id",        "id",          "$comment",   "deprecated",      "readOnly",
      "writeOnly",  "$anchor",     "$vocabulary", "contentEncoding", "contentMediaType",
      "contentSchema", "$defs",    "definitions", "$dynamicAnchor"};
  return *s;
}

// Keywords this compiler enforces.
const absl::flat_hash_set<std::string>& Supported() {
  static const auto* s = new absl::flat_hash_set<std::string>{
      "type",          "enum",          "const",         "anyOf",
      "oneOf",         "allOf",         "$ref",          "properties",
      "required",      "additionalProperties", "items",  "prefixItems",
      "additionalItems", "minItems",    "maxItems",      "uniqueItems",
      "minLength",     "maxLength",     "pattern",       "format",
      "minimum",       "maximum",       "exclusiveMinimum", "exclusiveMaximum",
      "multipleOf",    "patternProperties", "minProperties", "maxProperties"};
  return *s;
}

// JSON Schema keywords (any draft) that change which instances are valid
// and that this compiler does not enforce: refused by name.
const absl::flat_hash_set<std::string>& KnownUnsupported() {
  static const auto* s = new absl::flat_hash_set<std::string>{
      "not",           "if",               "then",          "else",
      "unevaluatedProperties",
      "unevaluatedItems", "contains",      "minContains",   "maxContains",
      "propertyNames", "dependentRequired", "dependentSchemas", "dependencies",
      "$dynamicRef",   "$recursiveRef"};
  return *s;
}

// A keyword that does not change validity: a listed annotation, an x-
// extension, or a keyword JSON Schema does not define at all (validators
// ignore unknown keywords; real schemas carry many: "example", "_format",
// "javaType", ...).
bool IsAnnotation(const std::string& key) {
  return Annotations().contains(key) || absl::StartsWith(key, "x-") ||
         (!Supported().contains(key) && !KnownUnsupported().contains(key));
}

// Type bits. "number" is kNumber|kInteger so that intersecting it with
// "integer" gives integer and a union with integer stays number.
enum : uint32_t {
  kNull = 1,
  kBoolean = 2,
  kInteger = 4,
  kNumber = 8 | 4,
  kString = 16,
  kArray = 32,
  kObject = 64,
  kAllTypes = 127,
};

absl::StatusOr<uint32_t> TypeBits(const Json& t, const std::string& ptr) {
  auto one = [&](const Json& n) -> absl::StatusOr<uint32_t> {
    if (!n.is_string()) return Invalid("'type' must be a string or an array of strings", ptr);
    const std::string& s = n.get_ref<const std::string&>();
    if (s == "null") return kNull;
    if (s == "boolean") return kBoolean;
    if (s == "integer") return kInteger;
    if (s == "number") return kNumber;
    if (s == "string") return kString;
    if (s == "array") return kArray;
    if (s == "object") return kObject;
    return Invalid(absl::StrCat("unknown type '", s, "'"), Child(ptr, "type"));
  };
  if (!t.is_array()) return one(t);
  uint32_t bits = 0;
  for (const Json& n : t) {
    ASSIGN_OR_RETURN(uint32_t b, one(n));
    bits |= b;
  }
  return bits;
}

Json TypeJson(uint32_t bits) {
  Json out = Json::array();
  if (bits & kNull) out.push_back("null");
  if (bits & kBoolean) out.push_back("boolean");
  if ((bits & kNumber) == kNumber) {
    out.push_back("number");
  } else if (bits & kInteger) {
    out.push_back("integer");
  }
  if (bits & kString) out.push_back("string");
  if (bits & kArray) out.push_back("array");
  if (bits & kObject) out.push_back("object");
  return out;
}

uint32_t ValueType(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return kNull;
    case Json::value_t::boolean: return kBoolean;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return kInteger;
    case Json::value_t::number_float: {
      const double d = v.get<double>();
      return std::floor(d) == d ? static_cast<uint32_t>(kInteger) : 8u;
    }
    case Json::value_t::string: return kString;
    case Json::value_t::array: return kArray;
    default: return kObject;
  }
}

// JSON Schema equality (1 == 1.0; objects regardless of key order).
// Decimal digits of a non-negative 128-bit integer.
std::string Digits(Int v) {
  if (v == 0) return "0";
  std::string s;
  while (v > 0) {
    s.push_back(static_cast<char>('0' + static_cast<int>(v % 10)));
    v /= 10;
  }
  std::reverse(s.begin(), s.end());
  return s;
}

// Bounds beyond this magnitude are refused: exact integer arithmetic stays
// in 128 bits (1e38 is far past any real schema's bound).
constexpr double kMaxBound = 1e37;

struct Bound {
  bool present = false;
  bool open = false;  // exclusive
  bool integral = true;
  Int value = 0;      // the bound (floor for a non-integral one)
  double d = 0;
};

// Number of code points of a UTF-8 string (nlohmann validated the UTF-8).
int64_t CodePoints(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::vector<uint32_t> DecodeUtf8(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < n && i + k < s.size(); ++k) {
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    }
    out.push_back(cp);
    i += n;
  }
  return out;
}

class Compiler {
 public:
  Compiler(const Json& root, const JsonOptions& options)
      : root_(root), options_(options), b_(options.limits) {}

  absl::StatusOr<Grammar> CompileSchema() {
    RuleId root = RuleForPointer("", &root_);
    // $ref targets become rules compiled here, off the recursion of the
    // schema that referred to them: a chain of refs costs no stack.
    while (!pending_.empty()) {
      auto [rule, ptr, node] = pending_.front();
      pending_.pop_front();
      ASSIGN_OR_RETURN(ExprId body, Compile(*node, ptr, 0));
      b_.Define(rule, body);
      if (b_.has_error()) break;
    }
    return std::move(b_).Build(root);
  }

  absl::StatusOr<Grammar> AnyObject() {
    RuleId root = b_.AddRule("root", Ref(ObjectRule()));
    return std::move(b_).Build(root);
  }

 private:
  struct Pending {
    RuleId rule;
    std::string ptr;
    const Json* node;
  };

  // ---- Shared rules: one each, so identical sub-grammars are one rule.

  ExprId Ref(RuleId r) {
    ExprId e = b_.Ref(r);
    refs_.insert(e);
    return e;
  }

  // An expression used in more than one place: a rule, referred to, unless
  // it is already a reference. Sharing an expression id itself
  // would make the grammar a DAG, which Build and the matcher expand as a
  // tree — exponential when such sharing nests (arrays of arrays ...).
  ExprId Shared(ExprId e, absl::string_view name) {
    if (refs_.contains(e)) return e;
    return Ref(b_.AddRule(name, e));
  }

  ExprId Ws() {
    if (options_.max_whitespace <= 0) return b_.Empty();
    if (ws_ < 0) {
      ByteSet s;
      for (char c : {' ', '\t', '\n', '\r'}) s.set(static_cast<unsigned char>(c));
      ws_ = b_.AddRule("ws", b_.Repeat(b_.Bytes(s), 0, options_.max_whitespace));
    }
    return Ref(ws_);
  }
  ExprId Lit(absl::string_view s) { return b_.Literal(s); }
  ExprId Comma() { return b_.Seq({Ws(), Lit(","), Ws()}); }
  ExprId Digit() { return b_.ByteRange('0', '9'); }

  RuleId CharRule() {
    if (char_ < 0) char_ = b_.AddRule("json-char", CharSet({{0, 0x10FFFF}}));
    return char_;
  }
  RuleId StringRule() {
    if (string_ < 0) {
      string_ = b_.AddRule("json-string",
                           b_.Seq({Lit("\""), b_.Star(Ref(CharRule())), Lit("\"")}));
    }
    return string_;
  }
  // `min` or more digits of an unbounded number's part, the part at most
  // max_number_digits long (`after_lead`: its first digit, [1-9], is
  // already written).
  ExprId NumberDigits(int32_t min, bool after_lead) {
    const int32_t cap = options_.max_number_digits;
    if (cap <= 0) return b_.Repeat(Digit(), min, kUnbounded);
    return b_.Repeat(Digit(), min, std::max(min, after_lead ? cap - 1 : cap));
  }
  RuleId IntegerRule() {
    if (integer_ < 0) {
      integer_ = b_.AddRule(
          "json-integer",
          b_.Seq({b_.Optional(Lit("-")),
                  b_.Alt({Lit("0"), b_.Seq({b_.ByteRange('1', '9'),
                                            NumberDigits(0, /*after_lead=*/true)})})}));
    }
    return integer_;
  }
  RuleId NumberRule() {
    if (number_ < 0) {
      ByteSet e, sign;
      e.set('e');
      e.set('E');
      sign.set('+');
      sign.set('-');
      number_ = b_.AddRule(
          "json-number",
          b_.Seq({Ref(IntegerRule()),
                  b_.Optional(b_.Seq({Lit("."), NumberDigits(1, /*after_lead=*/false)})),
                  b_.Optional(b_.Seq({b_.Bytes(e), b_.Optional(b_.Bytes(sign)),
                                      options_.max_number_digits > 0
                                          ? b_.Repeat(Digit(), 1, 4)
                                          : b_.Plus(Digit())}))}));
    }
    return number_;
  }
  // json-value, json-object and json-array refer to each other: declared
  // together, defined once.
  void ValueRules() {
    if (value_ >= 0) return;
    value_ = b_.Declare("json-value");
    object_ = b_.Declare("json-object");
    array_ = b_.Declare("json-array");
    b_.Define(value_, b_.Alt({Ref(object_), Ref(array_), Ref(StringRule()), Ref(NumberRule()),
                              Lit("true"), Lit("false"), Lit("null")}));
    ExprId member = b_.Seq({Ref(StringRule()), Ws(), Lit(":"), Ws(), Ref(value_)});
    b_.Define(object_, b_.Alt({b_.Seq({Lit("{"), Ws(), Lit("}")}),
                               b_.Seq({Lit("{"), Ws(), member, b_.Star(b_.Seq({Comma(), member})),
                                       Ws(), Lit("}")})}));
    ExprId v = Ref(value_);
    b_.Define(array_, b_.Alt({b_.Seq({Lit("["), Ws(), Lit("]")}),
                              b_.Seq({Lit("["), Ws(), v, b_.Star(b_.Seq({Comma(), v})), Ws(),
                                      Lit("]")})}));
  }
  RuleId ValueRule() { ValueRules(); return value_; }
  RuleId ObjectRule() { ValueRules(); return object_; }
  RuleId ArrayRule() { ValueRules(); return array_; }

  // ---- Characters of JSON strings.

  // One character from `ranges` as it may be written inside a JSON string:
  // raw UTF-8 (except '"', '\\' and control characters, which JSON forbids
  // raw), a short escape (\" \\ \/ \b \f \n \r \t), or \uXXXX (hex in either
  // case; a character past FFFF as its surrogate pair). Each form is one
  // character, so minLength/maxLength count right whatever the writer
  // escapes. Lone surrogate escapes are never produced (not characters).
  ExprId CharSet(const Ranges& ranges) {
    auto it = char_sets_.find(ranges);
    if (it != char_sets_.end()) return it->second;
    auto contains = [&](uint32_t c) {
      for (auto [lo, hi] : ranges) {
        if (lo <= c && c <= hi) return true;
      }
      return false;
    };
    std::vector<ExprId> alts;
    Ranges raw;
    for (auto [lo, hi] : ranges) {
      // Cut out 0-1F, '"' (22) and '\\' (5C).
      const std::pair<uint32_t, uint32_t> keep[] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}};
      for (auto [klo, khi] : keep) {
        const uint32_t a = std::max(lo, klo), z = std::min(hi, khi);
        if (a <= z) raw.emplace_back(a, z);
      }
    }
    if (!raw.empty()) alts.push_back(b_.CodepointSet(raw));
    const std::pair<uint32_t, char> shorts[] = {{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {8, 'b'},
                                                {12, 'f'},  {10, 'n'},    {13, 'r'},  {9, 't'}};
    for (auto [c, e] : shorts) {
      if (contains(c)) alts.push_back(Lit(std::string{'\\', e}));
    }
    std::vector<ExprId> bmp;
    for (auto [lo, hi] : ranges) {
      const std::pair<uint32_t, uint32_t> parts[] = {{0, 0xD7FF}, {0xE000, 0xFFFF}};
      for (auto [plo, phi] : parts) {
        const uint32_t a = std::max(lo, plo), z = std::min(hi, phi);
        if (a <= z) bmp.push_back(Hex4(a, z));
      }
    }
    if (!bmp.empty()) alts.push_back(b_.Seq({Lit("\\u"), b_.Alt(std::move(bmp))}));
    for (auto [lo, hi] : ranges) {
      const uint32_t a = std::max<uint32_t>(lo, 0x10000), z = std::min<uint32_t>(hi, 0x10FFFF);
      if (a > z) continue;
      auto high = [](uint32_t c) { return 0xD800 + ((c - 0x10000) >> 10); };
      auto low = [](uint32_t c) { return 0xDC00 + ((c - 0x10000) & 0x3FF); };
      auto pair = [&](uint32_t hlo, uint32_t hhi, uint32_t llo, uint32_t lhi) {
        alts.push_back(b_.Seq({Lit("\\u"), Hex4(hlo, hhi), Lit("\\u"), Hex4(llo, lhi)}));
      };
      const uint32_t ha = high(a), hz = high(z);
      if (ha == hz) {
        pair(ha, ha, low(a), low(z));
        continue;
      }
      uint32_t mid_lo = ha, mid_hi = hz;
      if (low(a) != 0xDC00) {
        pair(ha, ha, low(a), 0xDFFF);
        ++mid_lo;
      }
      if (low(z) != 0xDFFF) {
        pair(hz, hz, 0xDC00, low(z));
        --mid_hi;
      }
      if (mid_lo <= mid_hi) pair(mid_lo, mid_hi, 0xDC00, 0xDFFF);
    }
    ExprId e = b_.Alt(std::move(alts));
    char_sets_[ranges] = e;
    return e;
  }

  static ByteSet DigitBytes(int base, int lo, int hi) {
    ByteSet s;
    for (int d = lo; d <= hi; ++d) {
      if (d < 10) {
        s.set('0' + d);
      } else {
        s.set('a' + d - 10);
        s.set('A' + d - 10);
      }
    }
    (void)base;
    return s;
  }

  // Fixed-width digit strings (base 10 or 16) whose value lies in
  // [lo, hi] (digit vectors of equal length, most significant first): the
  // classic split into a common prefix, a partial lower run, full middle
  // runs and a partial upper run.
  ExprId FixedRange(const std::vector<int>& lo, const std::vector<int>& hi, size_t pos, int base) {
    const size_t w = lo.size() - pos;
    if (w == 0) return b_.Empty();
    auto full = [&](size_t width) {
      return b_.Repeat(b_.Bytes(DigitBytes(base, 0, base - 1)), static_cast<int32_t>(width),
                       static_cast<int32_t>(width));
    };
    if (lo[pos] == hi[pos]) {
      return b_.Seq({b_.Bytes(DigitBytes(base, lo[pos], lo[pos])), FixedRange(lo, hi, pos + 1, base)});
    }
    bool lo_zero = true, hi_max = true;
    for (size_t i = pos + 1; i < lo.size(); ++i) {
      lo_zero = lo_zero && lo[i] == 0;
      hi_max = hi_max && hi[i] == base - 1;
    }
    std::vector<ExprId> alts;
    int first = lo[pos], last = hi[pos];
    if (!lo_zero) {
      std::vector<int> top(lo.size(), base - 1);
      alts.push_back(b_.Seq({b_.Bytes(DigitBytes(base, first, first)), FixedRange(lo, top, pos + 1, base)}));
      ++first;
    }
    if (!hi_max) {
      std::vector<int> bottom(lo.size(), 0);
      alts.push_back(b_.Seq({b_.Bytes(DigitBytes(base, last, last)), FixedRange(bottom, hi, pos + 1, base)}));
      --last;
    }
    if (first <= last) alts.push_back(b_.Seq({b_.Bytes(DigitBytes(base, first, last)), full(w - 1)}));
    return b_.Alt(std::move(alts));
  }

  ExprId Hex4(uint32_t lo, uint32_t hi) {
    std::vector<int> a(4), z(4);
    for (int i = 0; i < 4; ++i) {
      a[i] = static_cast<int>((lo >> (12 - 4 * i)) & 0xF);
      z[i] = static_cast<int>((hi >> (12 - 4 * i)) & 0xF);
    }
    return FixedRange(a, z, 0, 16);
  }

  // A JSON string literal whose value is exactly `s`. Printable ASCII other
  // than '"', '\\' and '/' is written as itself (an ASCII letter written as
  // \u0061 is not accepted: no writer does that); every other character
  // in any of its JSON spellings (CharSet).
  ExprId StringLiteral(const std::string& s) {
    std::vector<ExprId> items = {Lit("\"")};
    std::string run;
    for (uint32_t cp : DecodeUtf8(s)) {
      if (cp >= 0x20 && cp < 0x7F && cp != '"' && cp != '\\' && cp != '/') {
        run.push_back(static_cast<char>(cp));
        continue;
      }
      if (!run.empty()) items.push_back(Lit(run));
      run.clear();
      items.push_back(CharSet({{cp, cp}}));
    }
    if (!run.empty()) items.push_back(Lit(run));
    items.push_back(Lit("\""));
    return b_.Seq(std::move(items));
  }

  // A JSON string whose value is none of `names`: an additional property's
  // key must differ from every named property (else a named property could
  // be written again as an "additional" one with any value, and an invalid
  // instance would pass). A trie over the names' code points: at each node
  // the key either continues with a child's code point (in any spelling),
  // diverges with any other character and then anything, or ends where no
  // name ends.
  ExprId KeyExcluding(const std::vector<std::string>& names) {
    struct TrieNode {
      std::map<uint32_t, int> next;
      bool terminal = false;
    };
    std::vector<TrieNode> trie(1);
    for (const std::string& name : names) {
      int at = 0;
      for (uint32_t cp : DecodeUtf8(name)) {
        auto it = trie[at].next.find(cp);
        if (it == trie[at].next.end()) {
          trie.emplace_back();
          it = trie[at].next.emplace(cp, static_cast<int>(trie.size() - 1)).first;
        }
        at = it->second;
      }
      trie[at].terminal = true;
    }
    // The rest after diverging from every name is one shared rule (any
    // characters): its positions are classified once for every object
    // (and grammar), and the exclusion itself stays small — one node per
    // character of the names, not a copy of a string body per node.
    if (key_tail_ < 0) key_tail_ = b_.AddRule("key-tail", b_.Star(Ref(CharRule())));
    const ExprId any_rest = Ref(key_tail_);
    std::function<ExprId(int)> other = [&](int at) -> ExprId {
      std::vector<ExprId> alts;
      if (!trie[at].terminal) alts.push_back(b_.Empty());
      Ranges diverge;
      uint32_t from = 0;
      for (const auto& [cp, child] : trie[at].next) {
        alts.push_back(b_.Seq({CharSet({{cp, cp}}), other(child)}));
        if (cp > from) diverge.emplace_back(from, cp - 1);
        from = cp + 1;
      }
      if (from <= 0x10FFFF) diverge.emplace_back(from, 0x10FFFF);
      if (!diverge.empty()) alts.push_back(b_.Seq({CharSet(diverge), any_rest}));
      return b_.Alt(std::move(alts));
    };
    return b_.Seq({Lit("\""), other(0), Lit("\"")});
  }

  // ---- Numbers.

  // Canonical decimal integers (no leading zeros) in [a, b], a >= 0; b < 0
  // means unbounded.
  ExprId MagnitudeRange(Int a, Int b) {
    const std::string sa = Digits(a);
    std::vector<ExprId> alts;
    auto digits = [](const std::string& s) {
      std::vector<int> v;
      for (char c : s) v.push_back(c - '0');
      return v;
    };
    const size_t max_len = b < 0 ? sa.size() : Digits(b).size();
    for (size_t len = sa.size(); len <= max_len; ++len) {
      std::string lo = len == sa.size() ? sa : "1" + std::string(len - 1, '0');
      std::string hi = (b >= 0 && len == max_len) ? Digits(b) : std::string(len, '9');
      alts.push_back(FixedRange(digits(lo), digits(hi), 0, 10));
    }
    if (b < 0) {
      // Above every bound: as long as an unbounded number may be.
      alts.push_back(b_.Seq({b_.ByteRange('1', '9'),
                             NumberDigits(static_cast<int32_t>(sa.size()), /*after_lead=*/true)}));
    }
    return b_.Alt(std::move(alts));
  }

  // Integers in [lo, hi] (either side absent: unbounded), as JSON writes
  // them; "-0" is accepted where 0 is.
  ExprId IntegerRange(bool has_lo, Int lo, bool has_hi, Int hi) {
    if (!has_lo && !has_hi) return Ref(IntegerRule());
    if (has_lo && has_hi && lo > hi) return b_.Nothing();
    std::vector<ExprId> alts;
    if (!has_hi || hi >= 0) alts.push_back(MagnitudeRange(has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1));
    if (!has_lo || lo < 0) {
      const Int mlo = has_hi && hi < -1 ? -hi : 1;
      alts.push_back(b_.Seq({Lit("-"), MagnitudeRange(mlo, has_lo ? -lo : -1)}));
    }
    if ((!has_lo || lo <= 0) && (!has_hi || hi >= 0)) alts.push_back(Lit("-0"));
    return b_.Alt(std::move(alts));
  }

  // Non-negative decimals n(.f)? without exponent whose value x satisfies
  // a (<|<=) x (<|<=) b, for integers 0 <= a <= b (b < 0: unbounded).
  ExprId DecimalMagnitude(Int a, bool a_open, Int b, bool b_open) {
    // Fractions at most max_number_digits long, as an unbounded number's.
    const int32_t cap = options_.max_number_digits;
    const int32_t fmax = cap > 0 ? cap : kUnbounded;
    ExprId any_frac = b_.Optional(b_.Seq({Lit("."), b_.Repeat(Digit(), 1, fmax)}));
    ExprId zero_frac = b_.Optional(b_.Seq({Lit("."), b_.Repeat(Lit("0"), 1, fmax)}));
    // Some digit is nonzero: zeros, a nonzero digit, then any digits (each
    // run within the cap).
    const int32_t run = cap > 0 ? cap - 1 : kUnbounded;
    ExprId nonzero_frac = b_.Seq({Lit("."), b_.Repeat(Lit("0"), 0, run), b_.ByteRange('1', '9'),
                                  b_.Repeat(Digit(), 0, run)});
    std::vector<ExprId> alts;
    const bool bounded = b >= 0;
    if (bounded && a == b) {
      if (!a_open && !b_open) alts.push_back(b_.Seq({Lit(Digits(a)), zero_frac}));
      return b_.Alt(std::move(alts));
    }
    alts.push_back(b_.Seq({Lit(Digits(a)), a_open ? nonzero_frac : any_frac}));
    if (!bounded || a + 1 <= b - 1) {
      alts.push_back(b_.Seq({MagnitudeRange(a + 1, bounded ? b - 1 : -1), any_frac}));
    }
    if (bounded && !b_open) alts.push_back(b_.Seq({Lit(Digits(b)), zero_frac}));
    return b_.Alt(std::move(alts));
  }

  // Numbers between integral bounds, written without an exponent.
  ExprId NumberRange(const Bound& lo, const Bound& hi) {
    if (lo.present && hi.present &&
        (lo.value > hi.value || (lo.value == hi.value && (lo.open || hi.open)))) {
      return b_.Nothing();
    }
    std::vector<ExprId> alts;
    // x >= 0 side.
    if (!hi.present || hi.value > 0 || (hi.value == 0 && !hi.open)) {
      const bool from_lo = lo.present && lo.value >= 0;
      alts.push_back(DecimalMagnitude(from_lo ? lo.value : 0, from_lo && lo.open,
                                      hi.present ? hi.value : -1, hi.present && hi.open));
    }
    // x < 0 side, as "-" and the magnitude -x > 0.
    if (!lo.present || lo.value < 0) {
      const bool from_hi = hi.present && hi.value <= 0;
      const Int m_lo = from_hi ? -hi.value : 0;
      const bool m_lo_open = from_hi ? (hi.open || hi.value == 0) : true;
      alts.push_back(b_.Seq({Lit("-"), DecimalMagnitude(m_lo, m_lo_open,
                                                        lo.present ? -lo.value : -1,
                                                        lo.present && lo.open)}));
    }
    return b_.Alt(std::move(alts));
  }

  absl::StatusOr<Bound> ReadBound(const Json& s, const std::string& ptr, bool lower) {
    const char* incl = lower ? "minimum" : "maximum";
    const char* excl = lower ? "exclusiveMinimum" : "exclusiveMaximum";
    Bound out;
    auto consider = [&](const char* key, bool open) -> absl::Status {
      auto it = s.find(key);
      if (it == s.end() || it->is_boolean()) return absl::OkStatus();
      if (!it->is_number()) return Invalid(absl::StrCat("'", key, "' must be a number"), Child(ptr, key));
      Bound b;
      b.present = true;
      b.open = open;
      if (it->is_number_integer()) {
        b.value = it->is_number_unsigned() ? static_cast<Int>(it->get<uint64_t>())
                                           : static_cast<Int>(it->get<int64_t>());
        b.d = it->get<double>();
      } else {
        b.d = it->get<double>();
        if (!std::isfinite(b.d) || std::fabs(b.d) > kMaxBound) {
          return Invalid(absl::StrCat("'", key, "' beyond the supported magnitude (1e37)"),
                         Child(ptr, key));
        }
        const double f = std::floor(b.d);
        b.integral = f == b.d;
        b.value = static_cast<Int>(f);
      }
      // Keep the tighter bound; at equal values the exclusive one.
      const bool tighter =
          !out.present || (lower ? b.d > out.d : b.d < out.d) ||
          (b.d == out.d && (lower ? b.value > out.value : b.value < out.value)) ||
          (b.d == out.d && b.value == out.value && b.open && !out.open);
      if (tighter) out = b;
      return absl::OkStatus();
    };
    RETURN_IF_ERROR(consider(incl, false));
    RETURN_IF_ERROR(consider(excl, true));
    // Draft 4's boolean exclusiveMinimum/exclusiveMaximum modify minimum/maximum.
    auto ex = s.find(excl);
    if (ex != s.end() && ex->is_boolean() && ex->get<bool>() && out.present) out.open = true;
    return out;
  }

  absl::StatusOr<ExprId> NumberExpr(const Json& s, const std::string& ptr, bool integer) {
    if (auto it = s.find("multipleOf"); it != s.end()) {
      if (!it->is_number() || it->get<double>() != 1.0) {
        return Invalid("unsupported keyword 'multipleOf' (only 1 is enforced)", ptr);
      }
      integer = true;
    }
    ASSIGN_OR_RETURN(Bound lo, ReadBound(s, ptr, true));
    ASSIGN_OR_RETURN(Bound hi, ReadBound(s, ptr, false));
    if (integer) {
      // Integer bounds: round inward, exclusive ones step past the bound.
      Int l = lo.value, h = hi.value;
      if (lo.present && (!lo.integral || lo.open)) l += 1;
      if (hi.present && hi.open && hi.integral) h -= 1;
      return IntegerRange(lo.present, l, hi.present, h);
    }
    if (!lo.present && !hi.present) return Ref(NumberRule());
    for (const auto& [b, name] : {std::pair{&lo, "minimum"}, std::pair{&hi, "maximum"}}) {
      if (b->present && !b->integral) {
        return Invalid(absl::StrCat("non-integral bound ('", name,
                                    "' or its exclusive form) on a number is not supported"),
                       ptr);
      }
    }
    return NumberRange(lo, hi);
  }

  // ---- Strings.

  absl::StatusOr<int32_t> Count(const Json& s, const char* key, const std::string& ptr) {
    auto it = s.find(key);
    if (!it->is_number() || it->get<double>() < 0 || std::floor(it->get<double>()) != it->get<double>()) {
      return Invalid(absl::StrCat("'", key, "' must be a non-negative integer"), Child(ptr, key));
    }
    const double v = it->get<double>();
    if (v > options_.limits.max_repeat) {
      return Invalid(absl::StrCat("'", key, "' ", it->dump(), " exceeds the limit of ",
                                  options_.limits.max_repeat),
                     Child(ptr, key));
    }
    return static_cast<int32_t>(v);
  }

  // Characters a regex expression spans, [min, max] (max -1: unbounded),
  // counting each of `units` (the expressions made for one character) as
  // one; empty for what it cannot measure (a rule reference).
  std::optional<std::pair<int64_t, int64_t>> CharSpan(ExprId id,
                                                      const absl::flat_hash_set<ExprId>& units) {
    if (units.contains(id)) return std::make_pair(int64_t{1}, int64_t{1});
    const Expr& e = b_.expr(id);
    auto add = [](int64_t a, int64_t b) { return a < 0 || b < 0 ? -1 : a + b; };
    switch (e.kind) {
      case ExprKind::kEmpty: return std::make_pair(int64_t{0}, int64_t{0});
      case ExprKind::kSeq: {
        std::pair<int64_t, int64_t> t{0, 0};
        for (ExprId c : e.children) {
          auto x = CharSpan(c, units);
          if (!x) return std::nullopt;
          t = {t.first + x->first, add(t.second, x->second)};
        }
        return t;
      }
      case ExprKind::kAlt: {
        std::optional<std::pair<int64_t, int64_t>> t;
        for (ExprId c : e.children) {
          auto x = CharSpan(c, units);
          if (!x) return std::nullopt;
          if (!t) {
            t = x;
          } else {
            t->first = std::min(t->first, x->first);
            t->second = (t->second < 0 || x->second < 0) ? -1 : std::max(t->second, x->second);
          }
        }
        return t;
      }
      case ExprKind::kRepeat: {
        auto x = CharSpan(e.children[0], units);
        if (!x) return std::nullopt;
        const int64_t hi = e.max == kUnbounded || x->second < 0
                               ? (x->second == 0 ? 0 : -1)
                               : x->second * e.max;
        return std::make_pair(x->first * e.min, hi);
      }
      default: return std::nullopt;
    }
  }

  // pattern with minLength/maxLength, where exact without intersecting two
  // grammars: the bounds hold for every string the pattern matches (drop
  // them) or for none (nothing), or the pattern is one character class
  // repeated (^[a-z0-9-]+$, ^\w{2,8}$), whose repetition takes the bounds.
  // Empty otherwise (the caller refuses the combination).
  absl::StatusOr<std::optional<ExprId>> PatternWithLength(const Json& s, const std::string& ptr) {
    const Json& p = s["pattern"];
    if (!p.is_string()) return Invalid("'pattern' must be a string", Child(ptr, "pattern"));
    int32_t lo = 0, hi = kUnbounded;
    if (s.contains("minLength")) { ASSIGN_OR_RETURN(lo, Count(s, "minLength", ptr)); }
    if (s.contains("maxLength")) {
      const Json& m = s["maxLength"];
      if (options_.max_string_length > 0 && m.is_number() &&
          m.get<double>() > options_.max_string_length) {
        return std::optional<ExprId>();  // lowering would change the pattern's language
      }
      ASSIGN_OR_RETURN(hi, Count(s, "maxLength", ptr));
    }
    absl::flat_hash_set<ExprId> units;
    RegexOptions ro;
    ro.search = true;
    ro.char_set = [this, &units](GrammarBuilder&, const Ranges& r) {
      const ExprId e = CharSet(r);
      units.insert(e);
      return e;
    };
    absl::StatusOr<ExprId> body = RegexToExpr(p.get_ref<const std::string&>(), b_, ro);
    if (!body.ok()) {
      return Invalid(absl::StrCat("unsupported keyword 'pattern' (", body.status().message(), ")"),
                     ptr);
    }
    auto span = CharSpan(*body, units);
    if (!span) return std::optional<ExprId>();
    const bool max_in = hi == kUnbounded || (span->second >= 0 && span->second <= hi);
    if (span->first >= lo && max_in) {
      return std::optional<ExprId>(b_.Seq({Lit("\""), *body, Lit("\"")}));
    }
    if ((span->second >= 0 && span->second < lo) || (hi != kUnbounded && span->first > hi)) {
      return std::optional<ExprId>(b_.Nothing());
    }
    const Expr& e = b_.expr(*body);
    if (e.kind == ExprKind::kRepeat && units.contains(e.children[0])) {
      const int32_t rmin = std::max<int32_t>(lo, e.min);
      const int32_t rmax = hi == kUnbounded ? e.max : (e.max == kUnbounded ? hi : std::min(hi, e.max));
      if (rmax != kUnbounded && rmax < rmin) return std::optional<ExprId>(b_.Nothing());
      const ExprId unit = e.children[0];
      return std::optional<ExprId>(b_.Seq({Lit("\""), b_.Repeat(unit, rmin, rmax), Lit("\"")}));
    }
    return std::optional<ExprId>();
  }

  absl::StatusOr<ExprId> StringExpr(const Json& s, const std::string& ptr) {
    // Length, pattern and format each make a grammar of their own; their
    // intersection is not a context-free construction the builder has, so
    // a string schema may use one of the three.
    const bool has_len = s.contains("minLength") || s.contains("maxLength");
    const bool has_pattern = s.contains("pattern");
    // A format JSON Schema does not define ("url", "int64", "textarea"...)
    // is an annotation: no validator asserts it, so the string is any
    // string. A defined one is enforced, or refused when minfer lacks it.
    const bool has_format = s.contains("format") && (!s["format"].is_string() ||
                                                     IsDefinedFormat(s["format"].get_ref<const std::string&>()));
    if (has_len && has_pattern && !has_format) {
      ASSIGN_OR_RETURN(std::optional<ExprId> both, PatternWithLength(s, ptr));
      if (both) return *both;
    }
    if (has_len + has_pattern + has_format > 1) {
      std::vector<std::string> keys;
      for (const char* k : {"minLength", "maxLength", "pattern", "format"}) {
        if (s.contains(k) && (has_format || std::string(k) != "format")) {
          keys.push_back(absl::StrCat("'", k, "'"));
        }
      }
      return Invalid(absl::StrCat("unsupported combination of keywords ", absl::StrJoin(keys, " and "),
                                  " (exact only where the pattern decides the bounds; a format takes neither)"),
                     ptr);
    }
    if (has_format) return FormatExpr(s["format"], ptr);
    if (has_pattern) {
      const Json& p = s["pattern"];
      if (!p.is_string()) return Invalid("'pattern' must be a string", Child(ptr, "pattern"));
      RegexOptions ro;
      ro.search = true;
      ro.char_set = [this](GrammarBuilder&, const Ranges& r) { return CharSet(r); };
      absl::StatusOr<ExprId> body = RegexToExpr(p.get_ref<const std::string&>(), b_, ro);
      if (!body.ok()) {
        return Invalid(absl::StrCat("unsupported keyword 'pattern' (", body.status().message(), ")"),
                       ptr);
      }
      // One rule per distinct pattern (and per length bound below): a
      // string body stays a rule of its own wherever it is used, so the
      // matcher classifies its positions once instead of once per copy.
      auto [it, inserted] = pattern_rules_.try_emplace(p.get_ref<const std::string&>(), -1);
      if (inserted) {
        it->second = b_.AddRule("string-pattern", b_.Seq({Lit("\""), *body, Lit("\"")}));
      }
      return Ref(it->second);
    }
    if (has_len) {
      int32_t lo = 0, hi = kUnbounded;
      if (s.contains("minLength")) { ASSIGN_OR_RETURN(lo, Count(s, "minLength", ptr)); }
      if (s.contains("maxLength")) {
        // A bound past max_string_length is lowered to it (see
        // json_schema.h): the strings generated are all still valid.
        const Json& m = s["maxLength"];
        const int32_t cap = options_.max_string_length;
        if (cap > 0 && m.is_number() && m.get<double>() > cap &&
            std::floor(m.get<double>()) == m.get<double>()) {
          hi = std::max(cap, lo);
        } else {
          ASSIGN_OR_RETURN(hi, Count(s, "maxLength", ptr));
        }
      }
      if (hi != kUnbounded && hi < lo) return b_.Nothing();
      auto [it, inserted] = length_rules_.try_emplace({lo, hi}, -1);
      if (inserted) {
        it->second = b_.AddRule(
            "string-length", b_.Seq({Lit("\""), b_.Repeat(Ref(CharRule()), lo, hi), Lit("\"")}));
      }
      return Ref(it->second);
    }
    return Ref(StringRule());
  }

  ExprId Bytes(absl::string_view chars) {
    ByteSet s;
    for (char c : chars) s.set(static_cast<unsigned char>(c));
    return b_.Bytes(s);
  }
  ExprId Alpha() { return b_.Alt({b_.ByteRange('a', 'z'), b_.ByteRange('A', 'Z')}); }
  ExprId HexDigit() { return b_.Bytes(DigitBytes(16, 0, 15)); }
  ExprId Exactly(ExprId e, int n) { return b_.Repeat(e, n, n); }
  // Two digits in [lo, hi].
  ExprId TwoDigits(int lo, int hi) {
    return FixedRange({lo / 10, lo % 10}, {hi / 10, hi % 10}, 0, 10);
  }

  ExprId Ipv4() {
    // 25[0-5] | 2[0-4]d | 1dd | [1-9]d | d
    ExprId octet = b_.Alt({b_.Seq({Lit("25"), b_.ByteRange('0', '5')}),
                           b_.Seq({Lit("2"), b_.ByteRange('0', '4'), Digit()}),
                           b_.Seq({Lit("1"), Digit(), Digit()}),
                           b_.Seq({b_.ByteRange('1', '9'), Digit()}), Digit()});
    return b_.Seq({octet, Exactly(b_.Seq({Lit("."), octet}), 3)});
  }

  // RFC 3986's IPv6address.
  ExprId Ipv6() {
    ExprId h16 = b_.Repeat(HexDigit(), 1, 4);
    ExprId h16c = b_.Seq({h16, Lit(":")});
    ExprId ls32 = b_.Alt({b_.Seq({h16, Lit(":"), h16}), Ipv4()});
    // [ *k( h16 ":" ) h16 ] — up to k+1 groups before "::".
    auto head = [&](int k) {
      return b_.Optional(b_.Seq({b_.Repeat(h16c, 0, k), h16}));
    };
    return b_.Alt({
        b_.Seq({Exactly(h16c, 6), ls32}),
        b_.Seq({Lit("::"), Exactly(h16c, 5), ls32}),
        b_.Seq({b_.Optional(h16), Lit("::"), Exactly(h16c, 4), ls32}),
        b_.Seq({head(1), Lit("::"), Exactly(h16c, 3), ls32}),
        b_.Seq({head(2), Lit("::"), Exactly(h16c, 2), ls32}),
        b_.Seq({head(3), Lit("::"), h16c, ls32}),
        b_.Seq({head(4), Lit("::"), ls32}),
        b_.Seq({head(5), Lit("::"), h16}),
        b_.Seq({head(6), Lit("::")}),
    });
  }

  ExprId Date() {
    ExprId year = Exactly(Digit(), 4);
    ExprId to28 = TwoDigits(1, 28);
    ExprId to30 = TwoDigits(1, 30);
    ExprId to31 = TwoDigits(1, 31);
    ExprId m31 = b_.Alt({Lit("01"), Lit("03"), Lit("05"), Lit("07"), Lit("08"), Lit("10"), Lit("12")});
    ExprId m30 = b_.Alt({Lit("04"), Lit("06"), Lit("09"), Lit("11")});
    // Leap years: the last two digits a non-zero multiple of 4, or 00 after
    // a multiple of 4 (the Gregorian rule: 2000 yes, 1900 no).
    ExprId mult4 = b_.Alt({b_.Seq({Lit("0"), Bytes("48")}), b_.Seq({Bytes("2468"), Bytes("048")}),
                           b_.Seq({Bytes("13579"), Bytes("26")})});
    ExprId leap = b_.Alt({b_.Seq({Exactly(Digit(), 2), mult4}),
                          b_.Seq({b_.Alt({b_.Seq({Bytes("02468"), Bytes("048")}),
                                          b_.Seq({Bytes("13579"), Bytes("26")})}),
                                  Lit("00")})});
    return b_.Alt({b_.Seq({year, Lit("-"), m31, Lit("-"), to31}),
                   b_.Seq({year, Lit("-"), m30, Lit("-"), to30}),
                   b_.Seq({year, Lit("-02-"), to28}),
                   b_.Seq({leap, Lit("-02-29")})});
  }

  // RFC 3339 full-time: hh:mm:ss(.frac)? then Z or ±hh:mm. Leap seconds
  // (ss = 60) are not generated.
  ExprId Time() {
    // Fractional seconds: at most max_number_digits digits, like numbers.
    const int32_t cap = options_.max_number_digits;
    ExprId hms = b_.Seq({TwoDigits(0, 23), Lit(":"), TwoDigits(0, 59), Lit(":"), TwoDigits(0, 59),
                         b_.Optional(b_.Seq({Lit("."), b_.Repeat(Digit(), 1, cap > 0 ? cap : kUnbounded)}))});
    ExprId offset = b_.Alt({Bytes("Zz"), b_.Seq({Bytes("+-"), TwoDigits(0, 23), Lit(":"),
                                                  TwoDigits(0, 59)})});
    return b_.Seq({hms, offset});
  }

  ExprId Uri() {
    ExprId pct = b_.Seq({Lit("%"), HexDigit(), HexDigit()});
    ExprId unreserved = b_.Alt({Alpha(), Digit(), Bytes("-._~")});
    ExprId sub_delims = Bytes("!$&'()*+,;=");
    ExprId pchar = b_.Alt({unreserved, pct, sub_delims, Bytes(":@")});
    ExprId segment = b_.Star(pchar);
    ExprId segment_nz = b_.Plus(pchar);
    ExprId scheme = b_.Seq({Alpha(), b_.Star(b_.Alt({Alpha(), Digit(), Bytes("+-.")}))});
    ExprId userinfo = b_.Star(b_.Alt({unreserved, pct, sub_delims, Lit(":")}));
    ExprId reg_name = b_.Star(b_.Alt({unreserved, pct, sub_delims}));
    ExprId host = b_.Alt({b_.Seq({Lit("["), Ipv6(), Lit("]")}), Ipv4(), reg_name});
    ExprId authority = b_.Seq({b_.Optional(b_.Seq({userinfo, Lit("@")})), host,
                               b_.Optional(b_.Seq({Lit(":"), b_.Star(Digit())}))});
    ExprId slash_segments = b_.Star(b_.Seq({Lit("/"), segment}));
    ExprId hier = b_.Alt({
        b_.Seq({Lit("//"), authority, slash_segments}),                      // authority
        b_.Seq({Lit("/"), b_.Optional(b_.Seq({segment_nz, slash_segments}))}),  // absolute
        b_.Seq({segment_nz, slash_segments}),                                // rootless
        b_.Empty(),
    });
    ExprId qf = b_.Star(b_.Alt({pchar, Bytes("/?")}));
    return b_.Seq({scheme, Lit(":"), hier, b_.Optional(b_.Seq({Lit("?"), qf})),
                   b_.Optional(b_.Seq({Lit("#"), qf}))});
  }

  // A conservative email: a dot-atom local part (no quoted local parts, no
  // comments) and a domain of dot-separated LDH labels with at least one
  // dot (no IP literals). Every address accepted is valid; some valid ones
  // (quoted, IP-literal, dotless domains) are not accepted.
  ExprId Email() {
    ExprId atext = b_.Alt({Alpha(), Digit(), Bytes("!#$%&'*+/=?^_`{|}~-")});
    ExprId atom = b_.Plus(atext);
    ExprId alnum = b_.Alt({Alpha(), Digit()});
    ExprId label = b_.Seq({alnum, b_.Optional(b_.Seq({b_.Star(b_.Alt({alnum, Lit("-")})), alnum}))});
    return b_.Seq({atom, b_.Star(b_.Seq({Lit("."), atom})), Lit("@"), label,
                   b_.Plus(b_.Seq({Lit("."), label}))});
  }

  absl::StatusOr<ExprId> FormatExpr(const Json& f, const std::string& ptr) {
    if (!f.is_string()) return Invalid("'format' must be a string", Child(ptr, "format"));
    const std::string& name = f.get_ref<const std::string&>();
    auto it = formats_.find(name);
    if (it != formats_.end()) return Ref(it->second);
    ExprId body;
    if (name == "date") {
      body = Date();
    } else if (name == "time") {
      body = Time();
    } else if (name == "date-time") {
      body = b_.Seq({Date(), Bytes("Tt"), Time()});
    } else if (name == "uuid") {
      ExprId h = HexDigit();
      body = b_.Seq({Exactly(h, 8), Lit("-"), Exactly(h, 4), Lit("-"), Exactly(h, 4), Lit("-"),
                     Exactly(h, 4), Lit("-"), Exactly(h, 12)});
    } else if (name == "email") {
      body = Email();
    } else if (name == "ipv4") {
      body = Ipv4();
    } else if (name == "ipv6") {
      body = Ipv6();
    } else if (name == "uri") {
      body = Uri();
    } else {
      return Invalid(absl::StrCat("unsupported format '", name, "'"), ptr);
    }
    RuleId r = b_.AddRule(absl::StrCat("format-", name), b_.Seq({Lit("\""), body, Lit("\"")}));
    formats_[name] = r;
    return Ref(r);
  }

  // ---- Constants.

  ExprId ConstValue(const Json& v) {
    switch (v.type()) {
      case Json::value_t::string: return StringLiteral(v.get_ref<const std::string&>());
      case Json::value_t::array: {
        if (v.empty()) return b_.Seq({Lit("["), Ws(), Lit("]")});
        std::vector<ExprId> items = {Lit("["), Ws()};
        for (size_t i = 0; i < v.size(); ++i) {
          if (i > 0) items.push_back(Comma());
          items.push_back(ConstValue(v[i]));
        }
        items.push_back(Ws());
        items.push_back(Lit("]"));
        return b_.Seq(std::move(items));
      }
      case Json::value_t::object: {
        if (v.empty()) return b_.Seq({Lit("{"), Ws(), Lit("}")});
        std::vector<ExprId> items = {Lit("{"), Ws()};
        bool first = true;
        for (const auto& [k, val] : v.items()) {
          if (!first) items.push_back(Comma());
          first = false;
          items.insert(items.end(), {StringLiteral(k), Ws(), Lit(":"), Ws(), ConstValue(val)});
        }
        items.push_back(Ws());
        items.push_back(Lit("}"));
        return b_.Seq(std::move(items));
      }
      case Json::value_t::number_float: {
        // 2.0 is also the integer 2: accept both spellings.
        const double d = v.get<double>();
        if (std::floor(d) == d && std::fabs(d) < 1e15) {
          std::string text = Digits(static_cast<Int>(std::fabs(d)));
          if (d < 0) text.insert(0, "-");
          return b_.Alt({Lit(v.dump()), Lit(text)});
        }
        return Lit(v.dump());
      }
      default: return Lit(v.dump());
    }
  }

  // ---- oneOf: exclusive branches.

  // What a schema says about the values it accepts, as far as telling two
  // schemas apart needs: the types, a finite value set, and for objects the
  // required names, the property schemas and which names are forbidden.
  struct Facts {
    uint32_t types = kAllTypes | kNumber;
    std::optional<std::vector<const Json*>> values;
    absl::flat_hash_set<std::string> required;
    std::map<std::string, std::vector<const Json*>> props;
    // additionalProperties: false in some part: the names that part allows.
    std::vector<absl::flat_hash_set<std::string>> closed;
  };

  // Facts of `s` (a branch and its siblings are collected into one).
  // Returns false for what it cannot read (allOf, a $ref with siblings):
  // such a schema is never provably disjoint from another.
  bool Collect(const Json& s, Facts* f, int depth = 0) {
    if (depth > 8) return false;
    if (s.is_boolean()) {
      if (!s.get<bool>()) f->types = 0;
      return true;
    }
    if (!s.is_object()) return false;
    if (auto it = s.find("$ref"); it != s.end()) {
      if (s.size() != 1) return false;
      absl::StatusOr<std::pair<const Json*, std::string>> t = Resolve(*it, "");
      if (!t.ok()) return false;
      return Collect(*t->first, f, depth + 1);
    }
    if (s.contains("allOf")) return false;
    if (auto it = s.find("type"); it != s.end()) {
      absl::StatusOr<uint32_t> bits = TypeBits(*it, "");
      if (!bits.ok()) return false;
      f->types &= *bits;
    }
    auto set_values = [&](std::vector<const Json*> v) {
      if (!f->values) {
        f->values = std::move(v);
        return;
      }
      std::vector<const Json*> kept;
      for (const Json* x : *f->values) {
        if (std::any_of(v.begin(), v.end(), [&](const Json* y) { return JsonEqual(*x, *y); })) {
          kept.push_back(x);
        }
      }
      f->values = std::move(kept);
    };
    if (auto it = s.find("enum"); it != s.end() && it->is_array()) {
      std::vector<const Json*> v;
      for (const Json& x : *it) v.push_back(&x);
      set_values(std::move(v));
    }
    if (auto it = s.find("const"); it != s.end()) set_values({&*it});
    if (auto it = s.find("required"); it != s.end() && it->is_array()) {
      for (const Json& n : *it) {
        if (n.is_string()) f->required.insert(n.get<std::string>());
      }
    }
    absl::flat_hash_set<std::string> named;
    if (auto it = s.find("properties"); it != s.end() && it->is_object()) {
      for (const auto& [k, v] : it->items()) {
        f->props[k].push_back(&v);
        named.insert(k);
      }
    }
    if (auto it = s.find("additionalProperties"); it != s.end() && it->is_boolean() &&
        !it->get<bool>() && !s.contains("patternProperties")) {
      f->closed.push_back(std::move(named));
    }
    return true;
  }

  static uint32_t EffectiveTypes(const Facts& f) {
    if (!f.values) return f.types;
    uint32_t t = 0;
    for (const Json* v : *f.values) t |= ValueType(*v);
    // An integer-valued float is also a number; "number" covers both.
    return t & (f.types | ((f.types & kInteger) ? 8u : 0u) | ((f.types & 8u) ? kInteger : 0u));
  }

  bool Forbids(const Facts& f, const std::string& name) {
    if (auto it = f.props.find(name); it != f.props.end()) {
      for (const Json* p : it->second) {
        if (p->is_boolean() && !p->get<bool>()) return true;
      }
    }
    return std::any_of(f.closed.begin(), f.closed.end(),
                       [&](const auto& allowed) { return !allowed.contains(name); });
  }

  // True only when no JSON value satisfies both (JSON Schema's reading:
  // objects open unless closed by additionalProperties: false).
  bool ProvablyDisjoint(const Facts& a, const Facts& b, int depth = 0) {
    const uint32_t ta = EffectiveTypes(a), tb = EffectiveTypes(b);
    if ((ta & tb) == 0) return true;
    if (a.values && b.values) {
      bool shared = false;
      for (const Json* x : *a.values) {
        for (const Json* y : *b.values) shared = shared || JsonEqual(*x, *y);
      }
      if (!shared) return true;
    }
    // Only objects left in common: a required name that the other forbids,
    // or whose two schemas are disjoint.
    if ((ta & tb) != kObject || depth > 8) return false;
    for (const std::string& r : a.required) {
      if (Forbids(b, r)) return true;
    }
    for (const std::string& r : b.required) {
      if (Forbids(a, r)) return true;
    }
    for (const std::string& r : a.required) {
      if (!b.required.contains(r)) continue;
      auto pa = a.props.find(r);
      auto pb = b.props.find(r);
      if (pa == a.props.end() || pb == b.props.end()) continue;
      Facts fa, fb;
      bool ok = true;
      for (const Json* x : pa->second) ok = ok && Collect(*x, &fa);
      for (const Json* x : pb->second) ok = ok && Collect(*x, &fb);
      if (ok && ProvablyDisjoint(fa, fb, depth + 1)) return true;
    }
    return false;
  }

  // The oneOf branches to compile as alternatives. As written when every
  // pair of branches (each with the siblings) is provably disjoint. The
  // common "exactly one of these properties" form, every branch only
  // `required` with one name, becomes exclusive by forbidding the other
  // names in each branch. Anything else is refused: anyOf would accept a
  // value matching two branches, which oneOf rejects.
  absl::StatusOr<const Json*> ExclusiveOneOf(const Json& branches, const Json& siblings,
                                             const std::string& ptr) {
    std::vector<Facts> facts(branches.size());
    bool readable = true;
    for (size_t i = 0; i < branches.size(); ++i) {
      readable = readable && Collect(siblings, &facts[i]) && Collect(branches[i], &facts[i]);
    }
    bool disjoint = readable;
    for (size_t i = 0; disjoint && i < branches.size(); ++i) {
      for (size_t j = i + 1; disjoint && j < branches.size(); ++j) {
        disjoint = ProvablyDisjoint(facts[i], facts[j]);
      }
    }
    if (disjoint) return &branches;
    std::vector<std::string> names;
    for (const Json& b : branches) {
      const bool required_only =
          b.is_object() && std::all_of(b.items().begin(), b.items().end(), [](const auto& kv) {
            return kv.key() == "required" || IsAnnotation(kv.key());
          });
      auto r = b.is_object() ? b.find("required") : b.end();
      if (!required_only || r == b.end() || !r->is_array() || r->size() != 1 ||
          !(*r)[0].is_string()) {
        names.clear();
        break;
      }
      const std::string n = (*r)[0].get<std::string>();
      if (std::find(names.begin(), names.end(), n) != names.end()) {
        names.clear();
        break;
      }
      names.push_back(n);
    }
    if (names.empty()) {
      return Invalid("oneOf with branches that may overlap is not supported (a value matching "
                     "two of them would be accepted)",
                     ptr);
    }
    Json out = Json::array();
    for (size_t i = 0; i < names.size(); ++i) {
      Json b = {{"required", Json::array({names[i]})}, {"properties", Json::object()}};
      for (size_t j = 0; j < names.size(); ++j) {
        if (j != i) b["properties"][names[j]] = false;
      }
      out.push_back(std::move(b));
    }
    owned_.push_back(std::make_unique<Json>(std::move(out)));
    return owned_.back().get();
  }

  // A schema whose values are a finite set — an enum or const of its own
  // or of one of its allOf entries — is those values that are valid
  // against the whole schema, decided by validating each (json_validate.h)
  // rather than compiling the rest: `not`, `if`, `uniqueItems`,
  // `patternProperties` and the like then cost nothing. Empty when there is
  // no such set or when validation cannot decide a value (the compiler then
  // goes its usual way, refusing what it cannot enforce).
  std::optional<ExprId> FiniteValues(const Json& s) {
    if (!s.is_object()) return std::nullopt;
    const Json* values = nullptr;
    Json one = Json::array();
    auto take = [&](const Json& x) {
      if (values != nullptr || !x.is_object()) return;
      if (auto it = x.find("enum"); it != x.end() && it->is_array()) {
        values = &*it;
      } else if (auto c = x.find("const"); c != x.end()) {
        one.push_back(*c);
        values = &one;
      }
    };
    take(s);
    if (auto it = s.find("allOf"); it != s.end() && it->is_array()) {
      for (const Json& x : *it) take(x);
    }
    if (values == nullptr || values->size() > 4096) return std::nullopt;
    std::vector<ExprId> alts;
    for (const Json& v : *values) {
      absl::StatusOr<bool> ok = ValidateInstance(root_, s, v);
      if (!ok.ok()) return std::nullopt;
      if (*ok) alts.push_back(ConstValue(v));
    }
    return b_.Alt(std::move(alts));
  }

  // Whether `v` satisfies the keywords that may sit beside enum/const (an
  // enum value failing them is dropped). Others beside enum are refused.
  absl::StatusOr<bool> EnumValueOk(const Json& v, const Json& s, const std::string& ptr) {
    for (const auto& [k, kv] : s.items()) {
      if (IsAnnotation(k) || k == "enum" || k == "const") continue;
      const uint32_t t = ValueType(v);
      if (k == "type") {
        ASSIGN_OR_RETURN(uint32_t bits, TypeBits(kv, ptr));
        if ((t & bits) != t && !(t == kInteger && (bits & kInteger))) return false;
        continue;
      }
      if (k == "minLength" || k == "maxLength") {
        if (!v.is_string() || !kv.is_number()) continue;
        const int64_t n = CodePoints(v.get_ref<const std::string&>());
        if (k == "minLength" ? n < kv.get<double>() : n > kv.get<double>()) return false;
        continue;
      }
      if (k == "minimum" || k == "maximum" || k == "exclusiveMinimum" || k == "exclusiveMaximum") {
        if (!v.is_number() || !kv.is_number()) continue;
        const double x = v.get<double>(), y = kv.get<double>();
        if (k == "minimum" ? x < y : k == "maximum" ? x > y : k == "exclusiveMinimum" ? x <= y : x >= y) {
          return false;
        }
        continue;
      }
      if (k == "minItems" || k == "maxItems") {
        if (!v.is_array() || !kv.is_number()) continue;
        const double n = static_cast<double>(v.size());
        if (k == "minItems" ? n < kv.get<double>() : n > kv.get<double>()) return false;
        continue;
      }
      return Invalid(absl::StrCat("unsupported keyword '", k, "' beside enum/const"), ptr);
    }
    return true;
  }

  // ---- allOf and $ref with siblings: merged into one schema.

  absl::StatusOr<std::pair<const Json*, std::string>> Resolve(const Json& ref, const std::string& ptr) {
    if (!ref.is_string()) return Invalid("'$ref' must be a string", ptr);
    const std::string& r = ref.get_ref<const std::string&>();
    if (r.empty() || r[0] != '#') {
      return Invalid(absl::StrCat("unresolved $ref '", r, "' (only references within the schema, '#...', are supported)"), ptr);
    }
    // Percent-decode the fragment, then walk the JSON pointer.
    std::string frag;
    for (size_t i = 1; i < r.size(); ++i) {
      if (r[i] == '%' && i + 2 < r.size() &&
          std::isxdigit(static_cast<unsigned char>(r[i + 1])) &&
          std::isxdigit(static_cast<unsigned char>(r[i + 2]))) {
        frag.push_back(static_cast<char>(std::stoi(r.substr(i + 1, 2), nullptr, 16)));
        i += 2;
      } else {
        frag.push_back(r[i]);
      }
    }
    if (!frag.empty() && frag[0] != '/') {
      return Invalid(absl::StrCat("unresolved $ref '", r, "' (anchors are not supported)"), ptr);
    }
    const Json* node = &root_;
    std::string canon;
    size_t pos = 0;
    while (pos < frag.size()) {
      size_t next = frag.find('/', pos + 1);
      if (next == std::string::npos) next = frag.size();
      std::string tok;
      for (size_t i = pos + 1; i < next; ++i) {
        if (frag[i] == '~' && i + 1 < next && (frag[i + 1] == '0' || frag[i + 1] == '1')) {
          tok.push_back(frag[i + 1] == '0' ? '~' : '/');
          ++i;
        } else {
          tok.push_back(frag[i]);
        }
      }
      pos = next;
      if (node->is_object()) {
        auto it = node->find(tok);
        if (it == node->end()) return Invalid(absl::StrCat("unresolved $ref '", r, "'"), ptr);
        node = &*it;
      } else if (node->is_array() && !tok.empty() &&
                 tok.find_first_not_of("0123456789") == std::string::npos && tok.size() < 10 &&
                 std::stoul(tok) < node->size()) {
        node = &(*node)[std::stoul(tok)];
      } else {
        return Invalid(absl::StrCat("unresolved $ref '", r, "'"), ptr);
      }
      canon = Child(canon, tok);
    }
    return std::make_pair(node, canon);
  }

  RuleId RuleForPointer(const std::string& ptr, const Json* node) {
    auto it = ref_rules_.find(ptr);
    if (it != ref_rules_.end()) return it->second;
    std::string name = "root";
    if (!ptr.empty()) {
      name.clear();
      for (char c : ptr.substr(ptr.rfind('/') + 1)) {
        name.push_back(std::isalnum(static_cast<unsigned char>(c)) ? c : '-');
      }
      if (name.empty() || !std::isalpha(static_cast<unsigned char>(name[0]))) name.insert(0, "def-");
    }
    RuleId r = b_.Declare(name);
    ref_rules_[ptr] = r;
    pending_.push_back({r, ptr, node});
    return r;
  }

  static bool HasValidation(const Json& s, std::initializer_list<const char*> except = {}) {
    for (const auto& [k, v] : s.items()) {
      if (IsAnnotation(k)) continue;
      bool skip = false;
      for (const char* e : except) skip = skip || k == e;
      if (!skip) return true;
    }
    return false;
  }

  // `s` with its allOf and $ref folded in (the result has neither, except
  // $refs nested inside sub-schemas, which stay references).
  static constexpr size_t kMaxAllOfBranches = 16;

  absl::StatusOr<Json> Flatten(const Json& s, const std::string& ptr, int depth) {
    if (depth > options_.max_depth) {
      return Invalid(absl::StrCat("allOf/$ref expansion deeper than ", options_.max_depth), ptr);
    }
    if (!s.is_object()) return s;
    if (!s.contains("allOf") && !s.contains("$ref")) return s;
    // Depth alone does not bound the work: allOf [a, a] with a = allOf
    // [b, b] ... doubles per level without nesting deeper.
    if (++flatten_steps_ > kMaxFlattenSteps) {
      return Invalid(absl::StrCat("allOf/$ref expansion larger than ", kMaxFlattenSteps, " steps"), ptr);
    }
    // Order matters only for the order of properties: the $ref target (the
    // base being extended) first, then the schema's own keywords, then the
    // allOf entries in order.
    Json own = Json::object();
    for (const auto& [k, v] : s.items()) {
      if (k != "allOf" && k != "$ref") own[k] = v;
    }
    Json out = Json::object();
    if (auto it = s.find("$ref"); it != s.end()) {
      ASSIGN_OR_RETURN(auto target, Resolve(*it, Child(ptr, "$ref")));
      RETURN_IF_ERROR(CheckKeywords(*target.first, target.second));
      ASSIGN_OR_RETURN(out, Flatten(*target.first, target.second, depth + 1));
    }
    ASSIGN_OR_RETURN(out, Merge(std::move(out), own, ptr));
    if (auto it = s.find("allOf"); it != s.end()) {
      if (!it->is_array() || it->empty()) return Invalid("'allOf' must be a non-empty array", Child(ptr, "allOf"));
      // An entry that is an anyOf is distributed here, over what the
      // entries before it built (allOf [A, anyOf [B1, B2], C] is anyOf
      // [A+B1+C, A+B2+C], the same set of instances), so that each branch's
      // properties come where the entry stands: A's, then B1's, then C's —
      // the order llguidance and MaskBench's instances use. Deferring the
      // anyOf to Compile put every branch's properties after C's. Past
      // kMaxAllOfBranches alternatives the anyOf is merged as a keyword.
      std::vector<Json> alts = {std::move(out)};
      auto has_union = [](const Json& j) {
        return j.is_object() && (j.contains("anyOf") || j.contains("oneOf"));
      };
      for (size_t i = 0; i < it->size(); ++i) {
        const std::string sub = Child(Child(ptr, "allOf"), std::to_string(i));
        RETURN_IF_ERROR(CheckKeywords((*it)[i], sub));
        ASSIGN_OR_RETURN(Json flat, Flatten((*it)[i], sub, depth + 1));
        const bool distribute =
            flat.is_object() && flat.contains("anyOf") && !flat.contains("oneOf") && flat["anyOf"].is_array() &&
            !flat["anyOf"].empty() && alts.size() * flat["anyOf"].size() <= kMaxAllOfBranches &&
            std::none_of(alts.begin(), alts.end(), has_union);
        if (!distribute) {
          for (Json& alt : alts) {
            ASSIGN_OR_RETURN(alt, Merge(std::move(alt), flat, Child(ptr, "allOf")));
          }
          continue;
        }
        Json siblings = flat;
        siblings.erase("anyOf");
        std::vector<Json> next;
        for (const Json& alt : alts) {
          ASSIGN_OR_RETURN(Json base, Merge(alt, siblings, Child(ptr, "allOf")));
          for (size_t k = 0; k < flat["anyOf"].size(); ++k) {
            const std::string bp = Child(Child(sub, "anyOf"), std::to_string(k));
            RETURN_IF_ERROR(CheckKeywords(flat["anyOf"][k], bp));
            ASSIGN_OR_RETURN(Json branch, Flatten(flat["anyOf"][k], bp, depth + 2));
            ASSIGN_OR_RETURN(Json merged, Merge(base, branch, bp));
            next.push_back(std::move(merged));
          }
        }
        alts = std::move(next);
      }
      if (alts.size() == 1) return std::move(alts[0]);
      Json any = Json::array();
      for (Json& alt : alts) any.push_back(std::move(alt));
      return Json{{"anyOf", std::move(any)}};
    }
    return out;
  }

  static Json AllOf(const Json& a, const Json& b) {
    if (a == b) return a;
    if (a.is_boolean()) return a.get<bool>() ? b : a;
    if (b.is_boolean()) return b.get<bool>() ? a : b;
    return Json{{"allOf", Json::array({a, b})}};
  }

  // The conjunction of two flattened schemas, as one schema. Keywords are
  // combined where the combination is exact (types intersect, bounds take
  // the tighter, required and enums combine, properties' schemas conjoin);
  // anything else present on both sides with different values is refused.
  absl::StatusOr<Json> Merge(Json a, const Json& b, const std::string& ptr) {
    if (a.is_boolean()) return a.get<bool>() ? b : a;
    if (b.is_boolean()) return b.get<bool>() ? a : b;
    if (!b.is_object()) return Invalid("a schema must be an object or a boolean", ptr);
    // Properties against the other side's additionalProperties: a name only
    // one side lists must also satisfy the other side's additionalProperties
    // (absent = any, as JSON Schema reads a sub-schema).
    const Json none;
    const Json& pa = a.contains("properties") ? a["properties"] : none;
    const Json& pb = b.contains("properties") ? b["properties"] : none;
    const Json* apa = a.contains("additionalProperties") ? &a["additionalProperties"] : nullptr;
    const Json* apb = b.contains("additionalProperties") ? &b["additionalProperties"] : nullptr;
    if (pa.is_object() || pb.is_object() || apa || apb) {
      Json props = Json::object();
      if (pa.is_object()) {
        for (const auto& [k, v] : pa.items()) {
          if (pb.is_object() && pb.contains(k)) {
            props[k] = AllOf(v, pb[k]);
          } else {
            props[k] = apb ? AllOf(v, *apb) : v;
          }
        }
      }
      if (pb.is_object()) {
        for (const auto& [k, v] : pb.items()) {
          if (!props.contains(k)) props[k] = apa ? AllOf(v, *apa) : v;
        }
      }
      Json ap;
      if (apa && apb) {
        ap = AllOf(*apa, *apb);
      } else if (apa || apb) {
        ap = apa ? *apa : *apb;
      }
      if (!props.empty()) a["properties"] = std::move(props);
      if (!ap.is_null()) a["additionalProperties"] = std::move(ap);
    }
    for (const auto& [k, v] : b.items()) {
      if (k == "properties" || k == "additionalProperties") continue;
      auto it = a.find(k);
      if (it == a.end()) {
        a[k] = v;
        continue;
      }
      Json& cur = *it;
      if (IsAnnotation(k) || JsonEqual(cur, v)) continue;
      if (k == "type") {
        ASSIGN_OR_RETURN(uint32_t x, TypeBits(cur, ptr));
        ASSIGN_OR_RETURN(uint32_t y, TypeBits(v, ptr));
        cur = TypeJson(x & y);
      } else if (k == "required" && cur.is_array() && v.is_array()) {
        for (const Json& n : v) {
          if (std::find(cur.begin(), cur.end(), n) == cur.end()) cur.push_back(n);
        }
      } else if ((k == "enum" || k == "const") && (cur.is_array() || k == "const")) {
        Json list = Json::array();
        const Json ca = k == "const" ? Json::array({cur}) : cur;
        const Json cb = k == "const" ? Json::array({v}) : v;
        if (!ca.is_array() || !cb.is_array()) return Invalid(absl::StrCat("'", k, "' must be an array"), ptr);
        for (const Json& x : ca) {
          for (const Json& y : cb) {
            if (JsonEqual(x, y)) list.push_back(x);
          }
        }
        a.erase(k);
        if (k == "const" && list.size() == 1) {
          a["const"] = list[0];
        } else {
          a["enum"] = std::move(list);
        }
      } else if ((k == "minLength" || k == "minItems" || k == "minimum" || k == "exclusiveMinimum") &&
                 cur.is_number() && v.is_number()) {
        if (v.get<double>() > cur.get<double>()) cur = v;
      } else if ((k == "maxLength" || k == "maxItems" || k == "maximum" || k == "exclusiveMaximum") &&
                 cur.is_number() && v.is_number()) {
        if (v.get<double>() < cur.get<double>()) cur = v;
      } else if (k == "items" || k == "additionalItems") {
        cur = AllOf(cur, v);
      } else if (k == "uniqueItems" && cur.is_boolean() && v.is_boolean()) {
        cur = cur.get<bool>() || v.get<bool>();
      } else {
        return Invalid(absl::StrCat("cannot merge '", k, "' of allOf (both sides set it differently)"), ptr);
      }
    }
    return a;
  }

  absl::Status CheckKeywords(const Json& s, const std::string& ptr) {
    if (s.is_boolean()) return absl::OkStatus();
    if (!s.is_object()) return Invalid("a schema must be an object or a boolean", ptr);
    for (const auto& [k, v] : s.items()) {
      if (IsAnnotation(k) || Supported().contains(k)) continue;
      return Invalid(absl::StrCat("unsupported keyword '", k, "'"), ptr);
    }
    return absl::OkStatus();
  }

  // ---- The schema compiler.

  absl::StatusOr<ExprId> Compile(const Json& s_in, const std::string& ptr, int depth) {
    if (depth > options_.max_depth) {
      return Invalid(absl::StrCat("schema nested deeper than ", options_.max_depth), ptr);
    }
    if (b_.has_error()) return b_.Nothing();  // Build reports it
    if (s_in.is_boolean()) return s_in.get<bool>() ? Ref(ValueRule()) : b_.Nothing();
    if (std::optional<ExprId> finite = FiniteValues(s_in)) return *finite;
    RETURN_IF_ERROR(CheckKeywords(s_in, ptr));
    // A lone $ref is a reference to the target's rule (recursion works);
    // $ref with other keywords, and allOf, are merged into one schema.
    if (auto it = s_in.find("$ref"); it != s_in.end() && !HasValidation(s_in, {"$ref"})) {
      ASSIGN_OR_RETURN(auto target, Resolve(*it, Child(ptr, "$ref")));
      return Ref(RuleForPointer(target.second, target.first));
    }
    if (s_in.contains("allOf") || s_in.contains("$ref")) {
      ASSIGN_OR_RETURN(Json flat, Flatten(s_in, ptr, depth));
      owned_.push_back(std::make_unique<Json>(std::move(flat)));
      const Json& f = *owned_.back();
      if (f.is_object() && (f.contains("allOf") || f.contains("$ref"))) {
        return Invalid("allOf could not be merged", ptr);
      }
      return Compile(f, ptr, depth + 1);
    }
    const Json& s = s_in;
    if (s.contains("anyOf") && s.contains("oneOf")) {
      return Invalid("unsupported keyword 'oneOf' beside 'anyOf'", Child(ptr, "oneOf"));
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      auto it = s.find(key);
      if (it == s.end()) continue;
      if (!it->is_array() || it->empty()) {
        return Invalid(absl::StrCat("'", key, "' must be a non-empty array"), Child(ptr, key));
      }
      // Keywords beside anyOf apply to every branch: distribute them.
      Json siblings = Json::object();
      for (const auto& [k, v] : s.items()) {
        if (k != key) siblings[k] = v;
      }
      // oneOf is compiled as anyOf, which is exact only when no value
      // satisfies two branches; otherwise it is made exact or refused.
      const Json* branches = &*it;
      if (std::string(key) == "oneOf") {
        ASSIGN_OR_RETURN(branches, ExclusiveOneOf(*it, siblings, Child(ptr, key)));
      }
      const bool distribute = HasValidation(siblings);
      std::vector<ExprId> alts;
      for (size_t i = 0; i < branches->size(); ++i) {
        const std::string sub = Child(Child(ptr, key), std::to_string(i));
        const Json& branch = (*branches)[i];
        if (!distribute) {
          ASSIGN_OR_RETURN(ExprId e, Compile(branch, sub, depth + 1));
          alts.push_back(e);
          continue;
        }
        Json both = Json::object();
        both["allOf"] = Json::array({siblings, branch});
        owned_.push_back(std::make_unique<Json>(std::move(both)));
        ASSIGN_OR_RETURN(ExprId e, Compile(*owned_.back(), sub, depth + 1));
        alts.push_back(e);
      }
      return b_.Alt(std::move(alts));
    }
    if (s.contains("enum") || s.contains("const")) {
      Json values = Json::array();
      if (auto it = s.find("enum"); it != s.end()) {
        if (!it->is_array()) return Invalid("'enum' must be an array", Child(ptr, "enum"));
        values = *it;
      }
      if (auto it = s.find("const"); it != s.end()) {
        Json kept = Json::array();
        if (!s.contains("enum")) {
          kept.push_back(*it);
        } else {
          for (const Json& v : values) {
            if (JsonEqual(v, *it)) kept.push_back(v);
          }
        }
        values = std::move(kept);
      }
      std::vector<ExprId> alts;
      for (const Json& v : values) {
        ASSIGN_OR_RETURN(bool ok, EnumValueOk(v, s, ptr));
        if (ok) alts.push_back(ConstValue(v));
      }
      return b_.Alt(std::move(alts));
    }
    uint32_t types = kAllTypes | kNumber;
    if (auto it = s.find("type"); it != s.end()) {
      ASSIGN_OR_RETURN(types, TypeBits(*it, ptr));
    }
    std::vector<ExprId> alts;
    if (types & kNull) alts.push_back(Lit("null"));
    if (types & kBoolean) alts.push_back(b_.Alt({Lit("true"), Lit("false")}));
    if (types & kInteger) {
      ASSIGN_OR_RETURN(ExprId e, NumberExpr(s, ptr, (types & kNumber) != kNumber));
      alts.push_back(e);
    }
    if (types & kString) {
      ASSIGN_OR_RETURN(ExprId e, StringExpr(s, ptr));
      alts.push_back(e);
    }
    if (types & kArray) {
      ASSIGN_OR_RETURN(ExprId e, ArrayExpr(s, ptr, depth));
      alts.push_back(e);
    }
    if (types & kObject) {
      ASSIGN_OR_RETURN(ExprId e, ObjectExpr(s, ptr, depth));
      alts.push_back(e);
    }
    return b_.Alt(std::move(alts));
  }

  absl::StatusOr<ExprId> ArrayExpr(const Json& s, const std::string& ptr, int depth) {
    const Json* prefix = nullptr;
    std::string prefix_ptr;
    const Json* items = nullptr;
    std::string items_ptr;
    if (auto it = s.find("prefixItems"); it != s.end()) {
      if (!it->is_array()) return Invalid("'prefixItems' must be an array", Child(ptr, "prefixItems"));
      prefix = &*it;
      prefix_ptr = Child(ptr, "prefixItems");
    }
    if (auto it = s.find("items"); it != s.end()) {
      if (it->is_array()) {  // draft 7: items as a list, then additionalItems
        if (prefix) return Invalid("unsupported keyword 'items' (an array) beside 'prefixItems'", Child(ptr, "items"));
        prefix = &*it;
        prefix_ptr = Child(ptr, "items");
        if (auto ai = s.find("additionalItems"); ai != s.end()) {
          items = &*ai;
          items_ptr = Child(ptr, "additionalItems");
        }
      } else {
        items = &*it;
        items_ptr = Child(ptr, "items");
      }
    }
    int32_t min = 0, max = kUnbounded;
    if (s.contains("minItems")) { ASSIGN_OR_RETURN(min, Count(s, "minItems", ptr)); }
    if (s.contains("maxItems")) { ASSIGN_OR_RETURN(max, Count(s, "maxItems", ptr)); }
    if (auto it = s.find("uniqueItems"); it != s.end() && it->is_boolean() && it->get<bool>() &&
                                         (max == kUnbounded || max > 1)) {
      return Invalid("unsupported keyword 'uniqueItems' (enforced only with maxItems <= 1)", ptr);
    }
    if (!prefix && !items && min == 0 && max == kUnbounded) return Ref(ArrayRule());
    if (max != kUnbounded && max < min) return b_.Nothing();
    std::vector<ExprId> elems;
    if (prefix) {
      for (size_t i = 0; i < prefix->size(); ++i) {
        ASSIGN_OR_RETURN(ExprId e, Compile((*prefix)[i], Child(prefix_ptr, std::to_string(i)), depth + 1));
        elems.push_back(e);
      }
    }
    ExprId rest = Ref(ValueRule());
    if (items) {
      ASSIGN_OR_RETURN(rest, Compile(*items, items_ptr, depth + 1));
      rest = Shared(rest, "item");
    }
    const int32_t k = static_cast<int32_t>(elems.size());
    // Element j (0-based) is elems[j] for j < k, else `rest`. Tail(j): the
    // elements from j on, each after a comma; optional once j >= min.
    const int32_t tail_min = std::max(min - k, 0);
    const int32_t tail_max = max == kUnbounded ? kUnbounded : std::max(max - k, 0);
    ExprId after_prefix = b_.Repeat(b_.Seq({Comma(), rest}), tail_min, tail_max);
    if (k == 0) {
      // [ e (, e){min-1,max-1} ] or empty.
      std::vector<ExprId> alts;
      if (min == 0) alts.push_back(b_.Seq({Lit("["), Ws(), Lit("]")}));
      if (max == kUnbounded || max >= 1) {
        ExprId more = b_.Repeat(b_.Seq({Comma(), rest}), std::max(min, 1) - 1,
                                max == kUnbounded ? kUnbounded : max - 1);
        alts.push_back(b_.Seq({Lit("["), Ws(), rest, more, Ws(), Lit("]")}));
      }
      return b_.Alt(std::move(alts));
    }
    ExprId tail = after_prefix;
    for (int32_t j = k - 1; j >= 1; --j) {
      if (max != kUnbounded && j >= max) {
        tail = b_.Empty();
        continue;
      }
      ExprId step = b_.Seq({Comma(), elems[j], tail});
      tail = j >= min ? b_.Optional(step) : step;
    }
    std::vector<ExprId> alts;
    if (min == 0) alts.push_back(b_.Seq({Lit("["), Ws(), Lit("]")}));
    if (max == kUnbounded || max >= 1) {
      alts.push_back(b_.Seq({Lit("["), Ws(), elems[0], tail, Ws(), Lit("]")}));
    }
    return b_.Alt(std::move(alts));
  }

  // An object with patternProperties: the named properties as usual, and
  // any number of keys matching a pattern, each with the pattern's schema.
  // Exact when no named key matches a pattern (checked, so a key is never
  // both) and the patterns share one schema (a key matching two then needs
  // nothing more); keys matching no pattern are not generated — exact under
  // additionalProperties: false, and under closed objects as minfer reads
  // them by default; with additionalProperties true or open objects, a
  // valid subset. Refused otherwise, naming why.
  absl::StatusOr<ExprId> PatternObject(const Json& s, const Json& patterns, const Json* props,
                                       const std::vector<std::string>& required,
                                       const std::string& ptr, int depth) {
    const std::string pptr = Child(ptr, "patternProperties");
    if (auto ap = s.find("additionalProperties");
        ap != s.end() && !ap->is_boolean() && !(ap->is_object() && ap->empty())) {
      return Invalid("unsupported keyword 'patternProperties' beside an additionalProperties "
                     "schema",
                     pptr);
    }
    for (const std::string& r : required) {
      if (props == nullptr || !props->contains(r)) {
        return Invalid(absl::StrCat("unsupported keyword 'patternProperties' beside required '", r,
                                    "' outside properties"),
                       pptr);
      }
    }
    const Json& first_schema = patterns.begin().value();
    std::vector<ExprId> keys;
    for (const auto& [pat, sub] : patterns.items()) {
      if (!JsonEqual(sub, first_schema)) {
        return Invalid("unsupported keyword 'patternProperties' with patterns of different "
                       "schemas",
                       pptr);
      }
      const Json pattern_schema = {{"pattern", pat}};
      std::vector<std::string> names;
      if (props) {
        for (const auto& [k, v] : props->items()) names.push_back(k);
      }
      names.insert(names.end(), required.begin(), required.end());
      for (const std::string& k : names) {
        absl::StatusOr<bool> m = ValidateInstance(pattern_schema, pattern_schema, Json(k));
        if (!m.ok() || *m) {
          return Invalid(absl::StrCat("unsupported keyword 'patternProperties' (property '", k,
                                      "' ", m.ok() ? "matches" : "may match", " pattern '", pat,
                                      "')"),
                         pptr);
        }
      }
      ASSIGN_OR_RETURN(ExprId key, StringExpr(pattern_schema, Child(pptr, pat)));
      keys.push_back(key);
    }
    // The same object with the pattern keys as its additional ones.
    Json rest = Json::object();
    for (const auto& [k, v] : s.items()) {
      if (k != "patternProperties" && k != "additionalProperties") rest[k] = v;
    }
    rest["additionalProperties"] = false;
    if (!rest.contains("properties")) rest["properties"] = Json::object();
    ASSIGN_OR_RETURN(ExprId value, Compile(first_schema, Child(pptr, patterns.begin().key()),
                                           depth + 1));
    owned_.push_back(std::make_unique<Json>(std::move(rest)));
    // Read by ObjectExpr before it compiles anything nested.
    pattern_key_ = b_.Alt(std::move(keys));
    pattern_value_ = value;
    absl::StatusOr<ExprId> out = ObjectExpr(*owned_.back(), ptr, depth);
    pattern_key_ = pattern_value_ = -1;
    return out;
  }

  absl::StatusOr<ExprId> ObjectExpr(const Json& s, const std::string& ptr, int depth) {
    const Json* props = nullptr;
    if (auto it = s.find("properties"); it != s.end()) {
      if (!it->is_object()) return Invalid("'properties' must be an object", Child(ptr, "properties"));
      props = &*it;
    }
    std::vector<std::string> required;
    if (auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) return Invalid("'required' must be an array", Child(ptr, "required"));
      for (const Json& n : *it) {
        if (!n.is_string()) return Invalid("'required' must list strings", Child(ptr, "required"));
        required.push_back(n.get<std::string>());
      }
    }
    const auto ap_it = s.find("additionalProperties");
    // "properties": {} names nothing; with closed objects it still closes
    // the object ({} only: the "no arguments" of a tool's parameters).
    const bool declared = props != nullptr;
    if (props && props->empty()) props = nullptr;
    const Json* patterns = nullptr;
    if (auto it = s.find("patternProperties"); it != s.end()) {
      if (!it->is_object()) {
        return Invalid("'patternProperties' must be an object", Child(ptr, "patternProperties"));
      }
      if (!it->empty()) patterns = &*it;
    }
    const bool counted = s.contains("minProperties") || s.contains("maxProperties");
    if (!props && required.empty() && ap_it == s.end() && !patterns && !counted &&
        !(declared && options_.closed_objects)) {
      return Ref(ObjectRule());
    }
    if (patterns) return PatternObject(s, *patterns, props, required, ptr, depth);
    // Additional properties: a schema or true allows them (among the named
    // ones); false forbids them; absent allows any, unless the schema names
    // properties and closed_objects is on (see json_schema.h).
    bool extra = false;
    ExprId extra_value = -1;
    // From PatternObject: its pattern keys are the additional ones (set for
    // this call only, before anything nested compiles).
    const ExprId pattern_key = pattern_key_;
    const ExprId pattern_value = pattern_value_;
    pattern_key_ = pattern_value_ = -1;
    if (pattern_key >= 0) {
      extra = true;
      extra_value = Shared(pattern_value, "pattern-value");
    } else if (ap_it != s.end()) {
      if (!(ap_it->is_boolean() && !ap_it->get<bool>())) {
        extra = true;
        ASSIGN_OR_RETURN(extra_value, Compile(*ap_it, Child(ptr, "additionalProperties"), depth + 1));
        extra_value = Shared(extra_value, "additional-value");
      }
    } else if (!declared || !options_.closed_objects) {
      extra = true;
      extra_value = Ref(ValueRule());
    }
    std::vector<Prop> list;
    absl::flat_hash_set<std::string> req(required.begin(), required.end());
    if (props) {
      for (const auto& [k, v] : props->items()) {
        ASSIGN_OR_RETURN(ExprId value, Compile(v, Child(Child(ptr, "properties"), k), depth + 1));
        list.push_back({k, b_.Seq({StringLiteral(k), Ws(), Lit(":"), Ws(), value}), req.contains(k)});
      }
    }
    // Required names without a `properties` entry are additional
    // properties that must be present: named members with the
    // additionalProperties schema, or an impossible object.
    for (const std::string& r : required) {
      if (props && props->contains(r)) continue;
      if (std::any_of(list.begin(), list.end(), [&](const Prop& p) { return p.name == r; })) continue;
      if (!extra) return b_.Nothing();
      list.push_back({r, b_.Seq({StringLiteral(r), Ws(), Lit(":"), Ws(), extra_value}), true});
    }
    const size_t n = list.size();
    ExprId extra_member = -1;
    if (extra) {
      std::vector<std::string> named;
      for (const Prop& p : list) named.push_back(p.name);
      const ExprId key = pattern_key >= 0   ? pattern_key
                         : named.empty() ? Ref(StringRule())
                                         : KeyExcluding(named);
      extra_member = Shared(b_.Seq({key, Ws(), Lit(":"), Ws(), extra_value}), "additional-member");
    }
    // minProperties / maxProperties where the member structure already
    // decides them: a bound the required members (or the named ones, with
    // nothing additional) always meet is dropped; minProperties 1 is "not
    // empty"; maxProperties 0 is "empty". Other counts would need counting
    // across optional members: refused.
    const int64_t n_required = std::count_if(list.begin(), list.end(),
                                             [](const Prop& p) { return p.required; });
    bool may_be_empty = n_required == 0;
    if (s.contains("minProperties")) {
      ASSIGN_OR_RETURN(int32_t m, Count(s, "minProperties", ptr));
      if (m == 1) {
        may_be_empty = false;
      } else if (m > n_required) {
        return Invalid("unsupported keyword 'minProperties' (enforced when 1, or when the "
                       "required properties meet it)",
                       ptr);
      }
    }
    if (s.contains("maxProperties")) {
      ASSIGN_OR_RETURN(int32_t m, Count(s, "maxProperties", ptr));
      if (m == 0) {
        return n_required == 0 && may_be_empty ? b_.Seq({Lit("{"), Ws(), Lit("}")}) : b_.Nothing();
      } else if (extra || static_cast<int64_t>(n) > m) {
        return Invalid("unsupported keyword 'maxProperties' (enforced when 0, or when the named "
                       "properties, with none additional, cannot exceed it)",
                       ptr);
      }
    }
    std::vector<ExprId> first;
    // One named member and no additional ones has a single order.
    if ((n >= 2 || (n == 1 && extra)) &&
        options_.property_order == JsonOptions::PropertyOrder::kAny &&
        static_cast<int64_t>(n) <= options_.max_any_order_properties && n < 31 &&
        any_order_rules_ + (int64_t{1} << n) <= options_.max_any_order_rules) {
      any_order_rules_ += int64_t{1} << n;
      first = AnyOrderMembers(list, extra_member);
    } else {
      first = SchemaOrderMembers(list, extra_member);
    }
    std::vector<ExprId> alts;
    if (may_be_empty) alts.push_back(b_.Seq({Lit("{"), Ws(), Lit("}")}));
    if (!first.empty()) alts.push_back(b_.Seq({Lit("{"), Ws(), b_.Alt(std::move(first)), Ws(), Lit("}")}));
    return b_.Alt(std::move(alts));
  }

  struct Prop {
    std::string name;
    ExprId member;  // key, colon, value (no comma)
    bool required;
  };

  // The members of a non-empty object in the schema's order: the
  // alternatives for "first member on", each written once. rest(i): the
  // members from i on when one was already written, each with its leading
  // comma; optional ones may be skipped; then any additional ones
  // (`extra_member` >= 0). Linear in the number of properties: "no member
  // yet" (first) is an alternation over which optional member comes first,
  // each continuing with rest(j+1).
  std::vector<ExprId> SchemaOrderMembers(const std::vector<Prop>& list, ExprId extra_member) {
    const size_t n = list.size();
    const bool extra = extra_member >= 0;
    size_t first_required = n;
    for (size_t i = 0; i < n; ++i) {
      if (list[i].required) {
        first_required = i;
        break;
      }
    }
    std::vector<ExprId> rest(n + 1);
    rest[n] = extra ? Shared(b_.Star(b_.Seq({Comma(), extra_member})), "additional-rest") : b_.Empty();
    for (size_t i = n; i-- > 0;) {
      ExprId step = b_.Seq({Comma(), list[i].member});
      ExprId body = b_.Seq({list[i].required ? step : b_.Optional(step), rest[i + 1]});
      // Referenced from `first` too: a rule, so it is not copied.
      rest[i] = (i >= 1 && i <= first_required + 1) ? Ref(b_.AddRule("obj-rest", body)) : body;
    }
    std::vector<ExprId> first;
    for (size_t j = 0; j < n; ++j) {
      first.push_back(b_.Seq({list[j].member, rest[j + 1]}));
      if (list[j].required) break;
    }
    // With no required member, additional members may come first.
    if (first_required == n && extra) first.push_back(b_.Seq({extra_member, rest[n]}));
    return first;
  }

  // The members of a non-empty object in any order (JsonOptions::
  // PropertyOrder::kAny): a rule per set S of named members already
  // written, after(S) ::= additional* ( next(i) after(S + i) for each i not
  // in S | "" when S holds every required one ), where next(i) is member i
  // with its leading comma. The state is the set, so no named key is
  // written twice and none required is left out; additional keys (never a
  // named key, see KeyExcluding) may come between any two. 2^n rules of
  // n - |S| alternatives, which hold only references: every byte lives in
  // the n next(i) rules (and the additional ones), marked no_inline, so the
  // automaton has one copy of each member and its positions are classified
  // once whatever the set.
  std::vector<ExprId> AnyOrderMembers(const std::vector<Prop>& list, ExprId extra_member) {
    const int n = static_cast<int>(list.size());
    const bool extra = extra_member >= 0;
    uint32_t required = 0;
    std::vector<ExprId> member(n), next(n);
    for (int i = 0; i < n; ++i) {
      if (list[i].required) required |= 1u << i;
      // Used twice (first, next): a rule, so its value is not copied (a
      // reference is a leaf; sharing it is harmless).
      member[i] = Shared(list[i].member, "member");
      const RuleId r = b_.AddRule("member-next", b_.Seq({Comma(), member[i]}));
      b_.NoInline(r);
      next[i] = Ref(r);
    }
    ExprId extra_rest = -1;
    if (extra) {
      const RuleId r = b_.AddRule("additional-rest", b_.Star(b_.Seq({Comma(), extra_member})));
      b_.NoInline(r);
      extra_rest = Ref(r);
    }
    const uint32_t sets = 1u << n;
    // Unique names up front (a numeric suffix search per rule would cost
    // a lookup per rule already so named).
    const int object = any_order_objects_++;
    std::vector<RuleId> after(sets);
    for (uint32_t set = 0; set < sets; ++set) {
      after[set] = b_.Declare(absl::StrCat("obj", object, "-after-", set));
    }
    for (uint32_t set = 0; set < sets; ++set) {
      std::vector<ExprId> alts;
      for (int i = 0; i < n; ++i) {
        if (set & (1u << i)) continue;
        alts.push_back(b_.Seq({next[i], Ref(after[set | (1u << i)])}));
      }
      if ((set & required) == required) alts.push_back(b_.Empty());
      ExprId body = b_.Alt(std::move(alts));
      if (extra) body = b_.Seq({extra_rest, body});
      b_.Define(after[set], body);
    }
    // The first member: each appears here once, so it may be inlined.
    std::vector<ExprId> first;
    for (int i = 0; i < n; ++i) first.push_back(b_.Seq({member[i], Ref(after[1u << i])}));
    if (extra) first.push_back(b_.Seq({extra_member, Ref(after[0])}));
    return first;
  }

  const Json& root_;
  JsonOptions options_;
  GrammarBuilder b_;
  std::deque<Pending> pending_;
  std::map<std::string, RuleId> ref_rules_;
  std::map<Ranges, ExprId> char_sets_;
  std::map<std::string, RuleId> formats_;
  std::map<std::string, RuleId> pattern_rules_;
  ExprId pattern_key_ = -1, pattern_value_ = -1;  // PatternObject -> ObjectExpr
  std::map<std::pair<int32_t, int32_t>, RuleId> length_rules_;
  static constexpr int64_t kMaxFlattenSteps = 20000;
  int64_t flatten_steps_ = 0;
  // Rules spent on any-order objects (JsonOptions::max_any_order_rules),
  // and such objects built (their rules' names).
  int64_t any_order_rules_ = 0;
  int any_order_objects_ = 0;
  absl::flat_hash_set<ExprId> refs_;  // expressions that are rule references
  std::vector<std::unique_ptr<Json>> owned_;  // merged schemas compiled from
  RuleId ws_ = -1, char_ = -1, string_ = -1, integer_ = -1, number_ = -1, key_tail_ = -1;
  RuleId value_ = -1, object_ = -1, array_ = -1;
};

}  // namespace

absl::StatusOr<Grammar> JsonSchemaToGrammar(absl::string_view schema_json, const JsonOptions& options) {
  if (static_cast<int64_t>(schema_json.size()) > options.max_schema_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("schema of ", schema_json.size(),
                                                   " bytes exceeds the limit of ",
                                                   options.max_schema_bytes));
  }
  RETURN_IF_ERROR(CheckNesting(schema_json, options.max_depth));
  ASSIGN_OR_RETURN(Json schema, ParseJson(schema_json));
  Compiler c(schema, options);
  return c.CompileSchema();
}

absl::StatusOr<Grammar> JsonObjectGrammar(const JsonOptions& options) {
  const Json empty = Json::object();
  Compiler c(empty, options);
  return c.AnyObject();
}

}  // namespace minfer::grammar
