// Values of the Jinja interpreter: construction, Python's str/repr/==/<,
// json.dumps, strings with marks and the Unicode helpers the string
// methods need (case mapping through ICU, Python's notion of whitespace).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/base/status.h"
#include "engine/tokenizer/jinja.h"
#include "engine/tokenizer/jinja_internal.h"
#include "engine/tokenizer/unicode.h"
#include "nlohmann/json.hpp"
#include "unicode/locid.h"
#include "unicode/uchar.h"
#include "unicode/unistr.h"

namespace minfer::tokenizer::jinja {
namespace internal {

// ---------------------------------------------------------------------------
// Storage

const Value* DictData::Find(absl::string_view key) const {
  if (!index.empty()) {
    auto it = index.find(key);
    return it == index.end() ? nullptr : &items[it->second].second;
  }
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void DictData::Set(std::string key, Value value) {
  if (!index.empty()) {
    auto it = index.find(key);
    if (it != index.end()) {
      items[it->second].second = std::move(value);
      return;
    }
    index.emplace(key, items.size());
    items.emplace_back(std::move(key), std::move(value));
    return;
  }
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
  if (items.size() >= kIndexFrom) {
    for (size_t i = 0; i < items.size(); ++i) index.emplace(items[i].first, i);
  }
}

Value ValueAccess::Undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.p_ = std::make_shared<StrData>(StrData{std::move(hint), {}});
  return v;
}

std::string ValueAccess::UndefinedHint(const Value& v) {
  if (v.p_ == nullptr) return "value is undefined";
  return static_cast<const StrData*>(v.p_.get())->text;
}

Value MakeStr(StrData data) {
  return ValueAccess::Make(Value::Kind::kString, std::make_shared<StrData>(std::move(data)));
}

Value MakeStr(std::string text, bool marked) {
  StrData d;
  d.text = std::move(text);
  if (marked && !d.text.empty()) d.marks.push_back({0, d.text.size()});
  return MakeStr(std::move(d));
}

Value MakeList(std::vector<Value> items, bool tuple) {
  auto d = std::make_shared<ListData>();
  d->items = std::move(items);
  d->tuple = tuple;
  return ValueAccess::Make(Value::Kind::kList, std::move(d));
}

Value MakeDict(DictData data) {
  return ValueAccess::Make(Value::Kind::kDict, std::make_shared<DictData>(std::move(data)));
}

// ---------------------------------------------------------------------------
// Strings with marks

void StrBuilder::AddMark(size_t begin, size_t end) {
  if (begin >= end) return;
  if (!marks_.empty() && marks_.back().end >= begin) {
    marks_.back().end = std::max(marks_.back().end, end);
    return;
  }
  marks_.push_back({begin, end});
}

void StrBuilder::Append(const StrData& s) {
  const size_t base = text_.size();
  text_ += s.text;
  for (const Mark& m : s.marks) AddMark(base + m.begin, base + m.end);
}

void StrBuilder::AppendMarked(absl::string_view text, bool marked) {
  const size_t base = text_.size();
  text_.append(text.data(), text.size());
  if (marked) AddMark(base, text_.size());
}

StrData Substr(const StrData& s, size_t begin, size_t end) {
  StrData out;
  out.text = s.text.substr(begin, end - begin);
  for (const Mark& m : s.marks) {
    const size_t b = std::max(m.begin, begin);
    const size_t e = std::min(m.end, end);
    if (b < e) out.marks.push_back({b - begin, e - begin});
  }
  return out;
}

// ---------------------------------------------------------------------------
// Unicode

bool IsPySpace(char32_t cp) {
  // Python's str.isspace(): bidirectional class WS, B or S, or category Zs.
  // The set is small and fixed by the Unicode standard, so it is spelled
  // out rather than derived (ICU's u_isspace is a different set).
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x1C:
    case 0x1D:
    case 0x1E:
    case 0x1F:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

char32_t CodePointAt(absl::string_view s, size_t pos, size_t* len) {
  const unsigned char c = static_cast<unsigned char>(s[pos]);
  if (c < 0x80) {
    *len = 1;
    return c;
  }
  const Utf8Step step = DecodeUtf8(s.data() + pos, s.data() + s.size());
  *len = step.length;
  return step.kind == Utf8Step::kValid ? step.cp : kReplacementChar;
}

std::vector<size_t> CodePointOffsets(absl::string_view s) {
  std::vector<size_t> out;
  out.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size();) {
    out.push_back(i);
    size_t len;
    CodePointAt(s, i, &len);
    i += len;
  }
  out.push_back(s.size());
  return out;
}

size_t CodePointCount(absl::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) {
    size_t len;
    CodePointAt(s, i, &len);
    i += len;
  }
  return n;
}

namespace {

bool IsAscii(absl::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

std::string ToUtf8(const icu::UnicodeString& u) {
  std::string out;
  u.toUTF8String(out);
  return out;
}

icu::UnicodeString FromUtf8(absl::string_view s) {
  return icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
}

// Full case mapping of one code point (Python's str.title() maps each
// character with its full titlecase/lowercase mapping).
void AppendMapped(char32_t cp, bool title, std::string* out) {
  icu::UnicodeString u(static_cast<UChar32>(cp));
  if (title) {
    // ICU's full titlecase mapping of a single character: the string as
    // one word, no break iterator needed.
    u.toTitle(nullptr, icu::Locale::getRoot(),
              U_TITLECASE_WHOLE_STRING | U_TITLECASE_NO_BREAK_ADJUSTMENT);
  } else {
    u.toLower(icu::Locale::getRoot());
  }
  u.toUTF8String(*out);
}

}  // namespace

std::string PyUpper(absl::string_view s) {
  if (IsAscii(s)) {
    std::string out(s);
    for (char& c : out) {
      if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    }
    return out;
  }
  return ToUtf8(FromUtf8(s).toUpper(icu::Locale::getRoot()));
}

std::string PyLower(absl::string_view s) {
  if (IsAscii(s)) {
    std::string out(s);
    for (char& c : out) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    return out;
  }
  return ToUtf8(FromUtf8(s).toLower(icu::Locale::getRoot()));
}

std::string PyTitle(absl::string_view s) {
  // Python: a character is title-cased after an uncased one and lower-cased
  // after a cased one.
  std::string out;
  bool prev_cased = false;
  for (size_t i = 0; i < s.size();) {
    size_t len;
    const char32_t cp = CodePointAt(s, i, &len);
    if (cp < 0x80) {
      char c = static_cast<char>(cp);
      if (prev_cased && c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      if (!prev_cased && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
      out.push_back(c);
    } else {
      AppendMapped(cp, !prev_cased, &out);
    }
    prev_cased = u_hasBinaryProperty(static_cast<UChar32>(cp), UCHAR_CASED);
    i += len;
  }
  return out;
}

std::string PyCapitalize(absl::string_view s) {
  // Python 3.8+: the first character title-cased, the rest lower-cased.
  if (s.empty()) return "";
  size_t len;
  const char32_t cp = CodePointAt(s, 0, &len);
  std::string out;
  if (cp < 0x80) {
    char c = static_cast<char>(cp);
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    out.push_back(c);
  } else {
    AppendMapped(cp, /*title=*/true, &out);
  }
  out += PyLower(s.substr(len));
  return out;
}

// ---------------------------------------------------------------------------
// Printing

const char* TypeName(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return ValueAccess::List(v).tuple ? "tuple" : "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kNamespace:
      return "Namespace";
    case Value::Kind::kCallable:
      return "function";
  }
  return "?";
}

bool Truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.bool_value();
    case Value::Kind::kInt:
      return v.int_value() != 0;
    case Value::Kind::kFloat:
      return v.float_value() != 0.0;
    case Value::Kind::kString:
      return !ValueAccess::Str(v).text.empty();
    case Value::Kind::kList:
      return !ValueAccess::List(v).items.empty();
    case Value::Kind::kDict:
      return !ValueAccess::Dict(v).items.empty();
    case Value::Kind::kNamespace:
    case Value::Kind::kCallable:
      return true;
  }
  return false;
}

bool HasMarks(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kString:
      return !ValueAccess::Str(v).marks.empty();
    case Value::Kind::kList:
      for (const Value& x : ValueAccess::List(v).items) {
        if (HasMarks(x)) return true;
      }
      return false;
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      const DictData& d = ValueAccess::Dict(v);
      if (d.keys_marked && !d.items.empty()) return true;
      for (const auto& [k, x] : d.items) {
        if (HasMarks(x)) return true;
      }
      return false;
    }
    default:
      return false;
  }
}

void AppendPyFloat(double d, std::string* out) {
  // Python's repr(float): the shortest digits that round-trip, in fixed
  // notation when the decimal exponent is in [-4, 16), else scientific with
  // a two-digit (at least) exponent; a fixed number always has a fraction.
  if (std::isnan(d)) {
    out->append("nan");
    return;
  }
  if (std::isinf(d)) {
    out->append(d < 0 ? "-inf" : "inf");
    return;
  }
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // [-]d[.ddd]e[+-]XX
  bool negative = false;
  if (!sci.empty() && sci[0] == '-') {
    negative = true;
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp = std::atoi(sci.c_str() + e + 1);
  if (negative) out->push_back('-');
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out->append("0.");
      out->append(static_cast<size_t>(-exp - 1), '0');
      out->append(digits);
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out->append(digits);
      out->append(static_cast<size_t>(exp) + 1 - digits.size(), '0');
      out->append(".0");
    } else {
      out->append(digits, 0, static_cast<size_t>(exp) + 1);
      out->push_back('.');
      out->append(digits, static_cast<size_t>(exp) + 1, std::string::npos);
    }
    return;
  }
  out->push_back(digits[0]);
  if (digits.size() > 1) {
    out->push_back('.');
    out->append(digits, 1, std::string::npos);
  }
  absl::StrAppendFormat(out, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
}

namespace {

bool IsPrintable(char32_t cp) {
  // Python's str.isprintable(): not Cc, Cf, Cs, Co, Cn, Zl, Zp, or Zs other
  // than the space.
  if (cp == ' ') return true;
  if (cp < 0x20 || cp == 0x7F) return false;
  if (cp < 0x7F) return true;
  switch (u_charType(static_cast<UChar32>(cp))) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
    case U_SPACE_SEPARATOR:
      return false;
    default:
      return true;
  }
}

void AppendStrRepr(absl::string_view s, std::string* out) {
  const bool has_single = s.find('\'') != absl::string_view::npos;
  const bool has_double = s.find('"') != absl::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  out->push_back(quote);
  for (size_t i = 0; i < s.size();) {
    size_t len;
    const char32_t cp = CodePointAt(s, i, &len);
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(cp));
    } else if (cp == '\t') {
      out->append("\\t");
    } else if (cp == '\n') {
      out->append("\\n");
    } else if (cp == '\r') {
      out->append("\\r");
    } else if (IsPrintable(cp)) {
      out->append(s.data() + i, len);
    } else if (cp < 0x100) {
      absl::StrAppendFormat(out, "\\x%02x", static_cast<uint32_t>(cp));
    } else if (cp < 0x10000) {
      absl::StrAppendFormat(out, "\\u%04x", static_cast<uint32_t>(cp));
    } else {
      absl::StrAppendFormat(out, "\\U%08x", static_cast<uint32_t>(cp));
    }
    i += len;
  }
  out->push_back(quote);
}

}  // namespace

void AppendRepr(const Value& v, std::string* out) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      out->append("Undefined");
      return;
    case Value::Kind::kNone:
      out->append("None");
      return;
    case Value::Kind::kBool:
      out->append(v.bool_value() ? "True" : "False");
      return;
    case Value::Kind::kInt:
      absl::StrAppend(out, v.int_value());
      return;
    case Value::Kind::kFloat:
      AppendPyFloat(v.float_value(), out);
      return;
    case Value::Kind::kString:
      AppendStrRepr(ValueAccess::Str(v).text, out);
      return;
    case Value::Kind::kList: {
      const ListData& l = ValueAccess::List(v);
      out->push_back(l.tuple ? '(' : '[');
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i > 0) out->append(", ");
        AppendRepr(l.items[i], out);
      }
      if (l.tuple && l.items.size() == 1) out->push_back(',');
      out->push_back(l.tuple ? ')' : ']');
      return;
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      const DictData& d = ValueAccess::Dict(v);
      if (v.kind() == Value::Kind::kNamespace) out->append("<Namespace ");
      out->push_back('{');
      for (size_t i = 0; i < d.items.size(); ++i) {
        if (i > 0) out->append(", ");
        AppendStrRepr(d.items[i].first, out);
        out->append(": ");
        AppendRepr(d.items[i].second, out);
      }
      out->push_back('}');
      if (v.kind() == Value::Kind::kNamespace) out->push_back('>');
      return;
    }
    case Value::Kind::kCallable:
      absl::StrAppend(out, "<function ", ValueAccess::Callable(v).name, ">");
      return;
  }
}

StrData Display(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kString:
      return ValueAccess::Str(v);
    case Value::Kind::kUndefined:
      return {};
    default: {
      StrData d;
      AppendRepr(v, &d.text);
      if (HasMarks(v) && !d.text.empty()) d.marks.push_back({0, d.text.size()});
      return d;
    }
  }
}

// ---------------------------------------------------------------------------
// Comparison

namespace {

bool IsNumber(const Value& v) {
  return v.kind() == Value::Kind::kInt || v.kind() == Value::Kind::kFloat ||
         v.kind() == Value::Kind::kBool;
}

// -1, 0, 1 for numbers (Python compares int and float exactly).
int CompareNumbers(const Value& a, const Value& b) {
  auto as_int = [](const Value& v) -> std::optional<int64_t> {
    if (v.kind() == Value::Kind::kInt) return v.int_value();
    if (v.kind() == Value::Kind::kBool) return v.bool_value() ? 1 : 0;
    return std::nullopt;
  };
  const auto ia = as_int(a), ib = as_int(b);
  if (ia && ib) return *ia < *ib ? -1 : (*ia > *ib ? 1 : 0);
  const long double fa = ia ? static_cast<long double>(*ia) : a.float_value();
  const long double fb = ib ? static_cast<long double>(*ib) : b.float_value();
  if (fa < fb) return -1;
  if (fa > fb) return 1;
  return 0;  // equal, or a NaN (which is neither smaller nor larger)
}

}  // namespace

bool Equals(const Value& a, const Value& b) {
  if (IsNumber(a) && IsNumber(b)) {
    const bool nan = (a.kind() == Value::Kind::kFloat && std::isnan(a.float_value())) ||
                     (b.kind() == Value::Kind::kFloat && std::isnan(b.float_value()));
    return !nan && CompareNumbers(a, b) == 0;
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return ValueAccess::Str(a).text == ValueAccess::Str(b).text;
    case Value::Kind::kList: {
      const ListData& x = ValueAccess::List(a);
      const ListData& y = ValueAccess::List(b);
      if (x.tuple != y.tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!Equals(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const DictData& x = ValueAccess::Dict(a);
      const DictData& y = ValueAccess::Dict(b);
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* w = y.Find(k);
        if (w == nullptr || !Equals(v, *w)) return false;
      }
      return true;
    }
    default:
      return ValueAccess::Identity(a) == ValueAccess::Identity(b);
  }
}

absl::StatusOr<int> Compare(const Value& a, const Value& b) {
  if (IsNumber(a) && IsNumber(b)) return CompareNumbers(a, b);
  if (a.kind() == Value::Kind::kString && b.kind() == Value::Kind::kString) {
    // Byte order of UTF-8 is code point order.
    const int c = ValueAccess::Str(a).text.compare(ValueAccess::Str(b).text);
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.kind() == Value::Kind::kList && b.kind() == Value::Kind::kList &&
      ValueAccess::List(a).tuple == ValueAccess::List(b).tuple) {
    const auto& x = ValueAccess::List(a).items;
    const auto& y = ValueAccess::List(b).items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equals(x[i], y[i])) continue;
      return Compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  return Error(absl::StrCat("'<' not supported between instances of '", TypeName(a), "' and '",
                            TypeName(b), "'"));
}

// ---------------------------------------------------------------------------
// JSON

namespace {

void AppendJsonString(absl::string_view s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"':
          out->append("\\\"");
          break;
        case '\\':
          out->append("\\\\");
          break;
        case '\n':
          out->append("\\n");
          break;
        case '\r':
          out->append("\\r");
          break;
        case '\t':
          out->append("\\t");
          break;
        case '\b':
          out->append("\\b");
          break;
        case '\f':
          out->append("\\f");
          break;
        default:
          if (c < 0x20 || (ensure_ascii && c == 0x7F)) {
            absl::StrAppendFormat(out, "\\u%04x", c);
          } else {
            out->push_back(static_cast<char>(c));
          }
      }
      ++i;
      continue;
    }
    size_t len;
    const char32_t cp = CodePointAt(s, i, &len);
    if (!ensure_ascii) {
      out->append(s.data() + i, len);
    } else if (cp < 0x10000) {
      absl::StrAppendFormat(out, "\\u%04x", static_cast<uint32_t>(cp));
    } else {
      const uint32_t v = static_cast<uint32_t>(cp) - 0x10000;
      absl::StrAppendFormat(out, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
    }
    i += len;
  }
  out->push_back('"');
}

void AppendNewline(const JsonOptions& o, int depth, std::string* out) {
  out->push_back('\n');
  for (int i = 0; i < depth; ++i) out->append(*o.indent);
}

}  // namespace

absl::Status AppendJson(const Value& v, const JsonOptions& o, int depth, std::string* out) {
  if (depth > 512) return Error("tojson: value nests too deeply");
  switch (v.kind()) {
    case Value::Kind::kNone:
      out->append("null");
      return absl::OkStatus();
    case Value::Kind::kBool:
      out->append(v.bool_value() ? "true" : "false");
      return absl::OkStatus();
    case Value::Kind::kInt:
      absl::StrAppend(out, v.int_value());
      return absl::OkStatus();
    case Value::Kind::kFloat: {
      const double d = v.float_value();
      if (std::isnan(d)) {
        out->append("NaN");
      } else if (std::isinf(d)) {
        out->append(d < 0 ? "-Infinity" : "Infinity");
      } else {
        AppendPyFloat(d, out);
      }
      return absl::OkStatus();
    }
    case Value::Kind::kString:
      AppendJsonString(ValueAccess::Str(v).text, o.ensure_ascii, out);
      return absl::OkStatus();
    case Value::Kind::kList: {
      const auto& items = ValueAccess::List(v).items;
      if (items.empty()) {
        out->append("[]");
        return absl::OkStatus();
      }
      out->push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out->append(o.item_separator);
        if (o.indent) AppendNewline(o, depth + 1, out);
        RETURN_IF_ERROR(AppendJson(items[i], o, depth + 1, out));
      }
      if (o.indent) AppendNewline(o, depth, out);
      out->push_back(']');
      return absl::OkStatus();
    }
    case Value::Kind::kDict: {
      const DictData& d = ValueAccess::Dict(v);
      if (d.items.empty()) {
        out->append("{}");
        return absl::OkStatus();
      }
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& e : d.items) entries.push_back(&e);
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      out->push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) out->append(o.item_separator);
        if (o.indent) AppendNewline(o, depth + 1, out);
        AppendJsonString(entries[i]->first, o.ensure_ascii, out);
        out->append(o.key_separator);
        RETURN_IF_ERROR(AppendJson(entries[i]->second, o, depth + 1, out));
      }
      if (o.indent) AppendNewline(o, depth, out);
      out->push_back('}');
      return absl::OkStatus();
    }
    default:
      return Error(absl::StrCat("Object of type ", TypeName(v), " is not JSON serializable"));
  }
}

namespace {

absl::StatusOr<Value> FromJsonValue(const nlohmann::ordered_json& j, bool marked, int depth) {
  if (depth > 512) return absl::InvalidArgumentError("JSON nests too deeply");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::None();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Value::Int(static_cast<int64_t>(u));
      }
      return Value::Float(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return MakeStr(j.get<std::string>(), marked);
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& x : j) {
        ASSIGN_OR_RETURN(Value v, FromJsonValue(x, marked, depth + 1));
        items.push_back(std::move(v));
      }
      return MakeList(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      DictData d;
      d.keys_marked = marked;
      for (auto it = j.begin(); it != j.end(); ++it) {
        ASSIGN_OR_RETURN(Value v, FromJsonValue(it.value(), marked, depth + 1));
        d.Set(it.key(), std::move(v));
      }
      return MakeDict(std::move(d));
    }
    default:
      return absl::InvalidArgumentError("unsupported JSON value");
  }
}

}  // namespace

}  // namespace internal

using internal::ValueAccess;

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.u_.b = b;
  return v;
}

Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.u_.i = i;
  return v;
}

Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.u_.f = f;
  return v;
}

Value Value::String(std::string text) { return internal::MakeStr(std::move(text), false); }

Value Value::MarkedString(std::string text) { return internal::MakeStr(std::move(text), true); }

Value Value::List(std::vector<Value> items) { return internal::MakeList(std::move(items)); }

Value Value::Dict(std::vector<std::pair<std::string, Value>> items) {
  internal::DictData d;
  for (auto& [k, v] : items) d.Set(std::move(k), std::move(v));
  return internal::MakeDict(std::move(d));
}

absl::StatusOr<Value> Value::FromJson(absl::string_view json, bool marked) {
  nlohmann::ordered_json j =
      nlohmann::ordered_json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("the text is not valid JSON");
  return internal::FromJsonValue(j, marked, 0);
}

absl::string_view Value::string_value() const { return ValueAccess::Str(*this).text; }

const std::vector<Value>& Value::list_items() const { return ValueAccess::List(*this).items; }

const std::vector<std::pair<std::string, Value>>& Value::dict_items() const {
  return ValueAccess::Dict(*this).items;
}

const Value* Value::Find(absl::string_view key) const { return ValueAccess::Dict(*this).Find(key); }

}  // namespace minfer::tokenizer::jinja
