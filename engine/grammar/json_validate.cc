#include "engine/grammar/json_validate.h"

#include <cmath>
#include <cstdint>
#include <regex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status.h"

namespace minfer::grammar {
namespace {

using Json = nlohmann::ordered_json;

constexpr int kMaxDepth = 64;

int64_t CodePoints(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool IsAscii(const std::string& s) {
  for (unsigned char c : s) {
    if (c >= 0x80) return false;
  }
  return true;
}

bool IsInteger(const Json& v) {
  if (v.is_number_integer()) return true;
  if (!v.is_number_float()) return false;
  const double d = v.get<double>();
  return std::isfinite(d) && std::floor(d) == d;
}

absl::Status Unimplemented(absl::string_view what) {
  return absl::UnimplementedError(absl::StrCat("validation cannot decide ", what));
}

class Validator {
 public:
  explicit Validator(const Json& root) : root_(root) {}

  absl::StatusOr<bool> Valid(const Json& s, const Json& v, int depth) {
    if (depth > kMaxDepth) return Unimplemented("schemas nested this deep");
    if (s.is_boolean()) return s.get<bool>();
    if (!s.is_object()) return absl::InvalidArgumentError("a schema must be an object or a boolean");
    for (const auto& [k, kv] : s.items()) {
      ASSIGN_OR_RETURN(bool ok, Keyword(s, k, kv, v, depth));
      if (!ok) return false;
    }
    return true;
  }

 private:
  absl::StatusOr<bool> Keyword(const Json& s, const std::string& k, const Json& kv, const Json& v,
                               int depth) {
    if (k == "$ref") {
      ASSIGN_OR_RETURN(const Json* target, Resolve(kv));
      return Valid(*target, v, depth + 1);
    }
    if (k == "type") return TypeOk(kv, v);
    if (k == "enum") {
      if (!kv.is_array()) return absl::InvalidArgumentError("'enum' must be an array");
      for (const Json& e : kv) {
        if (JsonEqual(e, v)) return true;
      }
      return false;
    }
    if (k == "const") return JsonEqual(kv, v);
    if (k == "not") {
      ASSIGN_OR_RETURN(bool ok, Valid(kv, v, depth + 1));
      return !ok;
    }
    if (k == "allOf" || k == "anyOf" || k == "oneOf") {
      if (!kv.is_array()) return absl::InvalidArgumentError(absl::StrCat("'", k, "' must be an array"));
      int64_t n = 0;
      for (const Json& sub : kv) {
        ASSIGN_OR_RETURN(bool ok, Valid(sub, v, depth + 1));
        n += ok;
        if (k == "allOf" && !ok) return false;
      }
      return k == "allOf" ? true : k == "anyOf" ? n >= 1 : n == 1;
    }
    if (k == "if") {
      ASSIGN_OR_RETURN(bool cond, Valid(kv, v, depth + 1));
      const char* branch = cond ? "then" : "else";
      auto it = s.find(branch);
      if (it == s.end()) return true;
      return Valid(*it, v, depth + 1);
    }
    if (v.is_number()) return NumberKeyword(s, k, kv, v);
    if (v.is_string()) return StringKeyword(k, kv, v);
    if (v.is_array()) return ArrayKeyword(s, k, kv, v, depth);
    if (v.is_object()) return ObjectKeyword(s, k, kv, v, depth);
    return Unknown(k);
  }

  // Keywords that do not apply to the instance's type pass; unknown ones
  // are annotations; the few that change validity in ways not handled
  // here make the answer unknown.
  absl::StatusOr<bool> Unknown(const std::string& k) {
    if (k == "$dynamicRef" || k == "$recursiveRef" || k == "unevaluatedProperties" ||
        k == "unevaluatedItems") {
      return Unimplemented(absl::StrCat("'", k, "'"));
    }
    return true;
  }

  absl::StatusOr<bool> TypeOk(const Json& t, const Json& v) {
    auto one = [&](const Json& name) -> absl::StatusOr<bool> {
      if (!name.is_string()) return absl::InvalidArgumentError("'type' must name types");
      const std::string& n = name.get_ref<const std::string&>();
      if (n == "null") return v.is_null();
      if (n == "boolean") return v.is_boolean();
      if (n == "object") return v.is_object();
      if (n == "array") return v.is_array();
      if (n == "string") return v.is_string();
      if (n == "number") return v.is_number();
      if (n == "integer") return IsInteger(v);
      return absl::InvalidArgumentError(absl::StrCat("unknown type '", n, "'"));
    };
    if (!t.is_array()) return one(t);
    for (const Json& n : t) {
      ASSIGN_OR_RETURN(bool ok, one(n));
      if (ok) return true;
    }
    return false;
  }

  absl::StatusOr<bool> NumberKeyword(const Json& s, const std::string& k, const Json& kv,
                                     const Json& v) {
    const double x = v.get<double>();
    if (k == "minimum" || k == "maximum") {
      if (!kv.is_number()) return absl::InvalidArgumentError(absl::StrCat("'", k, "' must be a number"));
      // Draft 4: a boolean exclusiveMinimum/Maximum makes the bound strict.
      const char* ex = k == "minimum" ? "exclusiveMinimum" : "exclusiveMaximum";
      auto it = s.find(ex);
      const bool strict = it != s.end() && it->is_boolean() && it->get<bool>();
      const double y = kv.get<double>();
      if (k == "minimum") return strict ? x > y : x >= y;
      return strict ? x < y : x <= y;
    }
    if (k == "exclusiveMinimum" || k == "exclusiveMaximum") {
      if (kv.is_boolean()) return true;  // draft 4: read with minimum/maximum
      if (!kv.is_number()) return absl::InvalidArgumentError(absl::StrCat("'", k, "' must be a number"));
      const double y = kv.get<double>();
      return k == "exclusiveMinimum" ? x > y : x < y;
    }
    if (k == "multipleOf") {
      if (!kv.is_number() || kv.get<double>() <= 0) {
        return absl::InvalidArgumentError("'multipleOf' must be a positive number");
      }
      if (v.is_number_integer() && kv.is_number_integer()) {
        // Exact for integers (a double would round past 2^53).
        const int64_t m = kv.get<int64_t>();
        if (v.is_number_unsigned()) return v.get<uint64_t>() % static_cast<uint64_t>(m) == 0;
        return v.get<int64_t>() % m == 0;
      }
      // As Python's jsonschema decides it for floats: the quotient is whole.
      const double q = x / kv.get<double>();
      return std::isfinite(q) && std::floor(q) == q;
    }
    if (k == "format") return FormatOk(kv);
    return Unknown(k);
  }

  absl::StatusOr<bool> FormatOk(const Json& f) {
    if (f.is_string() && IsDefinedFormat(f.get_ref<const std::string&>())) {
      return Unimplemented(absl::StrCat("format '", f.get_ref<const std::string&>(), "'"));
    }
    return true;
  }

  absl::StatusOr<bool> StringKeyword(const std::string& k, const Json& kv, const Json& v) {
    const std::string& str = v.get_ref<const std::string&>();
    if (k == "minLength" || k == "maxLength") {
      if (!kv.is_number()) return absl::InvalidArgumentError(absl::StrCat("'", k, "' must be a number"));
      const double n = static_cast<double>(CodePoints(str));
      return k == "minLength" ? n >= kv.get<double>() : n <= kv.get<double>();
    }
    if (k == "pattern") return PatternOk(kv, str);
    if (k == "format") return FormatOk(kv);
    return Unknown(k);
  }

  absl::StatusOr<bool> PatternOk(const Json& p, const std::string& str) {
    if (!p.is_string()) return absl::InvalidArgumentError("'pattern' must be a string");
    const std::string& pat = p.get_ref<const std::string&>();
    if (!IsAscii(pat) || !IsAscii(str)) return Unimplemented("'pattern' on non-ASCII text");
    // std::regex reports a pattern it cannot read (lookbehind, \p{...}) by
    // throwing; caught here, at the library's edge, and answered as
    // "unknown" (the schema is then refused as before).
    try {
      const std::regex re(pat, std::regex::ECMAScript);
      return std::regex_search(str, re);
    } catch (const std::regex_error&) {
      return Unimplemented(absl::StrCat("pattern '", pat, "'"));
    }
  }

  absl::StatusOr<bool> ArrayKeyword(const Json& s, const std::string& k, const Json& kv,
                                    const Json& v, int depth) {
    const size_t n = v.size();
    if (k == "minItems" || k == "maxItems") {
      if (!kv.is_number()) return absl::InvalidArgumentError(absl::StrCat("'", k, "' must be a number"));
      return k == "minItems" ? static_cast<double>(n) >= kv.get<double>()
                             : static_cast<double>(n) <= kv.get<double>();
    }
    if (k == "uniqueItems") {
      if (!kv.is_boolean() || !kv.get<bool>()) return true;
      for (size_t i = 0; i < n; ++i) {
        for (size_t j = i + 1; j < n; ++j) {
          if (JsonEqual(v[i], v[j])) return false;
        }
      }
      return true;
    }
    // Items past the tuple (prefixItems, or draft 4-7's array-form items).
    size_t tuple = 0;
    if (auto it = s.find("prefixItems"); it != s.end() && it->is_array()) tuple = it->size();
    if (auto it = s.find("items"); it != s.end() && it->is_array()) tuple = it->size();
    if (k == "prefixItems" || (k == "items" && kv.is_array())) {
      for (size_t i = 0; i < n && i < kv.size(); ++i) {
        ASSIGN_OR_RETURN(bool ok, Valid(kv[i], v[i], depth + 1));
        if (!ok) return false;
      }
      return true;
    }
    if (k == "items" || (k == "additionalItems" && s.contains("items") && s["items"].is_array())) {
      for (size_t i = tuple; i < n; ++i) {
        ASSIGN_OR_RETURN(bool ok, Valid(kv, v[i], depth + 1));
        if (!ok) return false;
      }
      return true;
    }
    if (k == "contains") {
      int64_t matches = 0;
      for (size_t i = 0; i < n; ++i) {
        ASSIGN_OR_RETURN(bool ok, Valid(kv, v[i], depth + 1));
        matches += ok;
      }
      auto lo = s.find("minContains");
      auto hi = s.find("maxContains");
      const double min = lo != s.end() && lo->is_number() ? lo->get<double>() : 1;
      if (static_cast<double>(matches) < min) return false;
      return hi == s.end() || !hi->is_number() || static_cast<double>(matches) <= hi->get<double>();
    }
    return Unknown(k);
  }

  absl::StatusOr<bool> ObjectKeyword(const Json& s, const std::string& k, const Json& kv,
                                     const Json& v, int depth) {
    const bool object_valued = k == "properties" || k == "patternProperties" ||
                               k == "dependentRequired" || k == "dependentSchemas" ||
                               k == "dependencies";
    if (object_valued && !kv.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat("'", k, "' must be an object"));
    }
    if (k == "required") {
      if (!kv.is_array()) return absl::InvalidArgumentError("'required' must be an array");
      for (const Json& name : kv) {
        if (!name.is_string() || !v.contains(name.get_ref<const std::string&>())) return false;
      }
      return true;
    }
    if (k == "minProperties" || k == "maxProperties") {
      if (!kv.is_number()) return absl::InvalidArgumentError(absl::StrCat("'", k, "' must be a number"));
      return k == "minProperties" ? static_cast<double>(v.size()) >= kv.get<double>()
                                  : static_cast<double>(v.size()) <= kv.get<double>();
    }
    if (k == "properties") {
      for (const auto& [name, sub] : kv.items()) {
        auto it = v.find(name);
        if (it == v.end()) continue;
        ASSIGN_OR_RETURN(bool ok, Valid(sub, *it, depth + 1));
        if (!ok) return false;
      }
      return true;
    }
    if (k == "patternProperties") {
      for (const auto& [pat, sub] : kv.items()) {
        for (const auto& [name, val] : v.items()) {
          ASSIGN_OR_RETURN(bool match, PatternOk(Json(pat), name));
          if (!match) continue;
          ASSIGN_OR_RETURN(bool ok, Valid(sub, val, depth + 1));
          if (!ok) return false;
        }
      }
      return true;
    }
    if (k == "additionalProperties") {
      const Json* props = s.contains("properties") ? &s["properties"] : nullptr;
      const Json* pats = s.contains("patternProperties") ? &s["patternProperties"] : nullptr;
      for (const auto& [name, val] : v.items()) {
        if (props && props->is_object() && props->contains(name)) continue;
        bool matched = false;
        if (pats && pats->is_object()) {
          for (const auto& [pat, sub] : pats->items()) {
            ASSIGN_OR_RETURN(bool m, PatternOk(Json(pat), name));
            matched = matched || m;
          }
        }
        if (matched) continue;
        ASSIGN_OR_RETURN(bool ok, Valid(kv, val, depth + 1));
        if (!ok) return false;
      }
      return true;
    }
    if (k == "propertyNames") {
      for (const auto& [name, val] : v.items()) {
        ASSIGN_OR_RETURN(bool ok, Valid(kv, Json(name), depth + 1));
        if (!ok) return false;
      }
      return true;
    }
    if (k == "dependentRequired" || k == "dependentSchemas" || k == "dependencies") {
      for (const auto& [name, dep] : kv.items()) {
        if (!v.contains(name)) continue;
        if (dep.is_array()) {
          for (const Json& r : dep) {
            if (!r.is_string() || !v.contains(r.get_ref<const std::string&>())) return false;
          }
        } else {
          ASSIGN_OR_RETURN(bool ok, Valid(dep, v, depth + 1));
          if (!ok) return false;
        }
      }
      return true;
    }
    return Unknown(k);
  }

  absl::StatusOr<const Json*> Resolve(const Json& ref) {
    if (!ref.is_string()) return absl::InvalidArgumentError("'$ref' must be a string");
    const std::string& r = ref.get_ref<const std::string&>();
    if (r.empty() || r[0] != '#' || (r.size() > 1 && r[1] != '/')) {
      return Unimplemented(absl::StrCat("$ref '", r, "'"));
    }
    const Json* node = &root_;
    size_t pos = 1;
    while (pos < r.size()) {
      size_t next = r.find('/', pos + 1);
      if (next == std::string::npos) next = r.size();
      std::string tok = r.substr(pos + 1, next - pos - 1);
      for (size_t i = 0; (i = tok.find('~', i)) != std::string::npos; ++i) {
        if (i + 1 < tok.size()) tok.replace(i, 2, tok[i + 1] == '1' ? "/" : "~");
      }
      if (tok.find('%') != std::string::npos) return Unimplemented(absl::StrCat("$ref '", r, "'"));
      if (node->is_object() && node->contains(tok)) {
        node = &(*node)[tok];
      } else if (node->is_array() && !tok.empty() && tok.size() <= 9 &&
                 tok.find_first_not_of("0123456789") == std::string::npos &&
                 std::stoul(tok) < node->size()) {
        node = &(*node)[std::stoul(tok)];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("unresolved $ref '", r, "'"));
      }
      pos = next;
    }
    return node;
  }

  const Json& root_;
};

}  // namespace

bool IsDefinedFormat(const std::string& name) {
  static const absl::flat_hash_set<std::string> kDefined = {
      "date-time", "date", "time", "duration", "email", "idn-email", "hostname",
      "idn-hostname", "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid",
      "uri-template", "json-pointer", "relative-json-pointer", "regex"};
  return kDefined.contains(name);
}

bool JsonEqual(const Json& a, const Json& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_number_integer() && b.is_number_integer()) {
      if (a.is_number_unsigned() != b.is_number_unsigned()) {
        // One is past int64 or negative-typed: compare signs first.
        const Json& u = a.is_number_unsigned() ? a : b;
        const Json& s = a.is_number_unsigned() ? b : a;
        return s.get<int64_t>() >= 0 && static_cast<uint64_t>(s.get<int64_t>()) == u.get<uint64_t>();
      }
      return a == b;
    }
    return a.get<double>() == b.get<double>();
  }
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!JsonEqual(a[i], b[i])) return false;
    }
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (const auto& [k, va] : a.items()) {
      auto it = b.find(k);
      if (it == b.end() || !JsonEqual(va, *it)) return false;
    }
    return true;
  }
  return a == b;
}

absl::StatusOr<bool> ValidateInstance(const Json& root, const Json& schema, const Json& instance) {
  return Validator(root).Valid(schema, instance, 0);
}

}  // namespace minfer::grammar
