// The JSON Schema front end (engine/grammar/json_schema.h).
//
// The main test runs the cases of json_schema_cases.json: for each schema,
// instances labelled valid or invalid. Two independent judges must agree
// with the labels: ajv (json_schema_ajv.mjs, run once for all cases) and the
// compiled grammar through the reference recognizer (recognizer.h). A third
// label, valid_rejected, marks instances that JSON Schema accepts but the
// grammar deliberately does not (json_schema.h lists the restrictions): ajv
// must accept them and the grammar must reject them, so every documented
// restriction is pinned by a case.
//
// Other tests: refusals name their keyword and location; arithmetic
// references for integer and number bounds and for optional properties;
// whitespace limits; JSON mode.
#include "engine/grammar/json_schema.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/grammar/recognizer.h"
#include "tests/support/subprocess.h"

namespace minfer::grammar {
namespace {

using Json = nlohmann::ordered_json;
using ::testing::HasSubstr;
using testing::Recognize;

constexpr char kModules[] = "third_party/npm/node_modules";
constexpr char kCases[] = "tests/engine/grammar/json_schema_cases.json";

std::string TmpPath(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
}

Grammar MustCompile(const std::string& schema, const JsonOptions& options = {}) {
  absl::StatusOr<Grammar> g = JsonSchemaToGrammar(schema, options);
  EXPECT_TRUE(g.ok()) << schema << ": " << g.status();
  if (!g.ok()) return *JsonSchemaToGrammar("false");
  return *std::move(g);
}

std::string Refusal(const std::string& schema, const JsonOptions& options = {}) {
  absl::StatusOr<Grammar> g = JsonSchemaToGrammar(schema, options);
  if (g.ok()) return "(compiled)";
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
  return std::string(g.status().message());
}

struct Instance {
  std::string text;  // compact, as ajv sees it
  bool ajv_valid;
  bool grammar_accepts;
  std::vector<std::string> spellings;  // other texts of the same value
};

TEST(JsonSchemaCases, GrammarAndAjvAgreeWithTheLabels) {
  ASSERT_TRUE(std::ifstream(absl::StrCat(kModules, "/ajv/package.json")).good())
      << "npm packages missing: run scripts/install_deps.sh";
  std::ifstream in(kCases);
  ASSERT_TRUE(in.good()) << kCases;
  std::stringstream buf;
  buf << in.rdbuf();
  const Json cases = Json::parse(buf.str(), nullptr, false);
  ASSERT_TRUE(cases.is_array());
  ASSERT_GE(cases.size(), 60u);

  std::vector<std::vector<Instance>> all;
  Json ajv_input = Json::array();
  int64_t checked = 0;
  for (const Json& c : cases) {
    std::vector<Instance> insts;
    auto values = [&](const char* key, bool ajv_valid, bool accepts) {
      if (!c.contains(key)) return;
      for (const Json& v : c[key]) {
        // Compact with raw UTF-8, compact with \u escapes for non-ASCII,
        // and indented (the default whitespace allowance covers one
        // newline plus indentation per gap at these depths).
        insts.push_back({v.dump(), ajv_valid, accepts,
                         {v.dump(-1, ' ', /*ensure_ascii=*/true), v.dump(1)}});
      }
    };
    auto texts = [&](const char* key, bool ajv_valid, bool accepts) {
      if (!c.contains(key)) return;
      for (const Json& t : c[key]) insts.push_back({t.get<std::string>(), ajv_valid, accepts, {}});
    };
    values("valid", true, true);
    values("invalid", false, false);
    values("valid_rejected", true, false);
    texts("valid_text", true, true);
    texts("invalid_text", false, false);
    texts("valid_rejected_text", true, false);

    const std::string name = c["name"].get<std::string>();
    // "options": JsonOptions a case compiles with (ajv reads the schema as
    // JSON Schema does, whatever they are).
    JsonOptions options;
    if (c.contains("options")) {
      const Json& o = c["options"];
      options.closed_objects = o.value("closed_objects", options.closed_objects);
      if (o.value("property_order", "any") == "schema") {
        options.property_order = JsonOptions::PropertyOrder::kSchema;
      }
      options.max_any_order_properties =
          o.value("max_any_order_properties", options.max_any_order_properties);
    }
    const Grammar g = MustCompile(c["schema"].dump(), options);
    Json t = Json::array();
    for (const Instance& i : insts) {
      EXPECT_EQ(Recognize(g, i.text), i.grammar_accepts) << name << ": " << i.text;
      // Other spellings of an accepted value are accepted too; of a
      // rejected (invalid) value, rejected.
      for (const std::string& s : i.spellings) {
        if (!i.grammar_accepts && i.ajv_valid) continue;
        EXPECT_EQ(Recognize(g, s), i.grammar_accepts) << name << ": " << s;
      }
      t.push_back(i.text);
      ++checked;
    }
    ajv_input.push_back(Json{{"schema", c["schema"]}, {"texts", t}});
    all.push_back(std::move(insts));
  }
  EXPECT_GE(checked, 400);

  const std::string input = TmpPath("ajv_input.json");
  std::ofstream(input) << ajv_input.dump();
  auto r = minfer::testing::RunCommand(
      {"/usr/bin/env", "node", "tests/engine/grammar/json_schema_ajv.mjs", kModules, input},
      std::chrono::seconds(60));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->exit_code, 0) << r->err;
  const Json verdicts = Json::parse(r->out, nullptr, false);
  ASSERT_TRUE(verdicts.is_array()) << r->out;
  ASSERT_EQ(verdicts.size(), all.size());
  for (size_t c = 0; c < all.size(); ++c) {
    ASSERT_EQ(verdicts[c].size(), all[c].size());
    for (size_t i = 0; i < all[c].size(); ++i) {
      EXPECT_EQ(verdicts[c][i].get<bool>(), all[c][i].ajv_valid)
          << "ajv disagrees with the label: " << cases[c]["name"] << ": " << all[c][i].text;
    }
  }
}

// Keywords JSON Schema does not define are annotations: validators ignore
// them, so the grammar is the one without them (MaskBench's real schemas
// carry "_format", "javaType", "example", OpenAPI's "nullable", ...).
TEST(JsonSchemaKeywords, UnknownKeywordsAreIgnoredAsValidatorsDo) {
  for (const char* kw : {"nullable", "someMadeUpKeyword", "_format", "example", "javaType"}) {
    auto with = JsonSchemaToGrammar(
        absl::StrCat(R"({"type": "array", "items": {"type": "integer", ")", kw, R"(": true}})"));
    auto without = JsonSchemaToGrammar(R"({"type": "array", "items": {"type": "integer"}})");
    ASSERT_TRUE(with.ok()) << kw << ": " << with.status();
    ASSERT_TRUE(without.ok());
    EXPECT_EQ(with->ToString(), without->ToString()) << kw;
  }
}

TEST(JsonSchemaRefusals, UnsupportedKeywordsNameThemselvesAndTheirLocation) {
  EXPECT_EQ(Refusal(R"({"properties": {"a": {"type": "object", "propertyNames": {"x": {}}}}})"),
            "unsupported keyword 'propertyNames' at /properties/a");
  for (const char* kw : {"not", "if", "contains",
                         "dependentRequired", "dependentSchemas", "unevaluatedProperties",
                         "unevaluatedItems", "propertyNames", "minContains", "$dynamicRef",
                         "dependencies"}) {
    EXPECT_EQ(Refusal(absl::StrCat(R"({"type": "array", "items": {")", kw, R"(": {}}})")),
              absl::StrCat("unsupported keyword '", kw, "' at /items"));
  }
  EXPECT_EQ(Refusal(R"({"type": "number", "multipleOf": 3})"),
            "unsupported keyword 'multipleOf' (only 1 is enforced) at the root");
  EXPECT_EQ(Refusal(R"({"properties": {"l": {"type": "array", "uniqueItems": true}}})"),
            "unsupported keyword 'uniqueItems' (enforced only with maxItems <= 1) at /properties/l");
  EXPECT_EQ(Refusal(R"({"anyOf": [{"type": "string", "format": "hostname"}]})"),
            "unsupported format 'hostname' at /anyOf/0");
  // A pattern and length bounds that would need the two grammars'
  // intersection (here: "starts with a", any length) are refused.
  EXPECT_THAT(Refusal(R"({"type": "string", "pattern": "^a", "maxLength": 3})"),
              HasSubstr("unsupported combination of keywords 'maxLength' and 'pattern'"));
  EXPECT_THAT(Refusal(R"({"$defs": {"d": {"type": "number", "minimum": 0.5}}, "$ref": "#/$defs/d"})"),
              HasSubstr("non-integral bound ('minimum' or its exclusive form) on a number is not "
                        "supported at /$defs/d"));
  EXPECT_EQ(Refusal(R"({"type": "string", "minLength": 20000})"),
            "'minLength' 20000 exceeds the limit of 10000 at /minLength");
  EXPECT_EQ(Refusal(R"({"type": "float"})"), "unknown type 'float' at /type");
  EXPECT_EQ(Refusal(R"({"type": "object", "properties": {"a": {}, "b": {}}, "minProperties": 2})"),
            "unsupported keyword 'minProperties' (enforced when 1, or when the required "
            "properties meet it) at the root");
  // patternProperties: exact only where no named key matches a pattern.
  EXPECT_EQ(Refusal(R"({"properties": {"xa": {}}, "patternProperties": {"^x": {}}})"),
            "unsupported keyword 'patternProperties' (property 'xa' matches pattern '^x') at "
            "/patternProperties");
  EXPECT_EQ(Refusal(R"({"patternProperties": {"^a": {"type": "string"}, "^b": {}}})"),
            "unsupported keyword 'patternProperties' with patterns of different schemas at "
            "/patternProperties");
  // oneOf is anyOf only where no value can match two branches.
  EXPECT_EQ(Refusal(R"({"oneOf": [{"type": "string"}, {"minLength": 2}]})"),
            "oneOf with branches that may overlap is not supported (a value matching two of them "
            "would be accepted) at /oneOf");
  // Beside enum/const, keywords are checked on each value (json_validate.h)
  // unless validation cannot decide, as with a format it does not check.
  EXPECT_EQ(Refusal(R"({"enum": ["a"], "format": "date"})"),
            "unsupported keyword 'format' beside enum/const at the root");
  EXPECT_THAT(Refusal(R"({"allOf": [{"pattern": "a"}, {"pattern": "b"}]})"),
              HasSubstr("cannot merge 'pattern' of allOf"));
  EXPECT_EQ(Refusal(R"({"type": "object", "properties": {"a": 5}})"),
            "a schema must be an object or a boolean at /properties/a");
}

TEST(JsonSchemaRefusals, BadInput) {
  EXPECT_THAT(Refusal(R"({"type": })"), HasSubstr("schema is not valid JSON at offset 9"));
  EXPECT_THAT(Refusal("{\"type\": \"string\"} x"), HasSubstr("schema is not valid JSON at offset 19"));
  EXPECT_THAT(Refusal(""), HasSubstr("schema is not valid JSON at offset 0"));
  // Too deep: stopped by the bracket scan, before any parser recursion.
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "[";
  EXPECT_THAT(Refusal(deep), HasSubstr("schema nested deeper than 64 levels at offset 64"));
  // Brackets inside strings do not count.
  EXPECT_TRUE(JsonSchemaToGrammar(R"({"description": "[[[[[[[[[[", "type": "null"})",
                                  JsonOptions{.max_depth = 3})
                  .ok());
  // A nesting of schemas deeper than the limit; within a raised limit it
  // compiles, in time linear in the depth (arrays of arrays of ... share
  // their element grammar through rules, not by copying).
  std::string nested = R"({"type": "null"})";
  for (int i = 0; i < 70; ++i) {
    nested = absl::StrCat(R"({"type": "array", "minItems": 1, "items": )", nested, "}");
  }
  EXPECT_THAT(Refusal(nested), HasSubstr("nested deeper than 64"));
  absl::StatusOr<Grammar> deep_ok = JsonSchemaToGrammar(nested, JsonOptions{.max_depth = 100});
  ASSERT_TRUE(deep_ok.ok()) << deep_ok.status();
  EXPECT_TRUE(Recognize(*deep_ok, std::string(70, '[') + "null" + std::string(70, ']')));
  EXPECT_FALSE(Recognize(*deep_ok, std::string(69, '[') + "null" + std::string(69, ']')));
  EXPECT_EQ(Refusal(R"({"type": "string"})", JsonOptions{.max_schema_bytes = 10}),
            "schema of 18 bytes exceeds the limit of 10");
}

TEST(JsonSchemaRefusals, References) {
  EXPECT_EQ(Refusal(R"({"properties": {"a": {"$ref": "#/$defs/missing"}}})"),
            "unresolved $ref '#/$defs/missing' at /properties/a/$ref");
  EXPECT_THAT(Refusal(R"({"$ref": "https://example.com/s.json"})"),
              HasSubstr("unresolved $ref 'https://example.com/s.json'"));
  EXPECT_THAT(Refusal(R"({"$ref": "#node"})"), HasSubstr("anchors are not supported"));
  // A schema that is itself, and nothing else, has no finite instance.
  EXPECT_THAT(Refusal(R"({"$ref": "#"})"), HasSubstr("left recursion"));
  // allOf that doubles per level stops at the work limit.
  std::string defs;
  for (int i = 0; i < 30; ++i) {
    absl::StrAppend(&defs, i ? "," : "", "\"d", i, "\": {\"allOf\": [{\"$ref\": \"#/$defs/d", i + 1,
                    "\"}, {\"$ref\": \"#/$defs/d", i + 1, "\"}]}");
  }
  EXPECT_THAT(Refusal(absl::StrCat("{\"$defs\": {", defs, ", \"d30\": {\"type\": \"null\"}}, \"$ref\": \"#/$defs/d0\", \"type\": \"null\"}")),
              HasSubstr("allOf/$ref expansion larger than 20000 steps"));
  // allOf folding through a cycle stops at the depth limit.
  EXPECT_THAT(Refusal(R"({"$defs": {"a": {"type": "object", "allOf": [{"$ref": "#/$defs/a"}]}},
                          "$ref": "#/$defs/a"})"),
              HasSubstr("allOf/$ref expansion deeper than 64"));
}

TEST(JsonSchemaRefusals, GrammarLimits) {
  JsonOptions o;
  o.limits.max_exprs = 50;
  EXPECT_THAT(Refusal(R"({"type": "string", "format": "ipv6"})", o), HasSubstr("grammar too large"));
}

// Integer ranges against arithmetic: every value in [-1100, 1100] (and a
// few spellings) for bounds of every shape.
TEST(JsonSchemaNumbers, IntegerRangesMatchArithmetic) {
  struct Case {
    const char* bounds;
    int64_t lo, hi;  // inclusive; INT64_MIN/MAX: none
  };
  constexpr int64_t kMin = INT64_MIN, kMax = INT64_MAX;
  const Case cases[] = {
      {R"("minimum": 0, "maximum": 0)", 0, 0},
      {R"("minimum": -1, "maximum": 1)", -1, 1},
      {R"("minimum": 7, "maximum": 1034)", 7, 1034},
      {R"("minimum": -1034, "maximum": -7)", -1034, -7},
      {R"("minimum": -999, "maximum": 100)", -999, 100},
      {R"("exclusiveMinimum": 9, "exclusiveMaximum": 101)", 10, 100},
      {R"("minimum": 19)", 19, kMax},
      {R"("maximum": 19)", kMin, 19},
      {R"("minimum": -19)", -19, kMax},
      {R"("exclusiveMaximum": -19)", kMin, -20},
      {R"("minimum": 0.5, "maximum": 99.5)", 1, 99},
      {R"("minimum": 5, "exclusiveMinimum": 5, "maximum": 8, "exclusiveMaximum": 100)", 6, 8},
      {R"("minimum": 10, "maximum": 9)", 1, 0},
  };
  for (const Case& c : cases) {
    const Grammar g = MustCompile(absl::StrCat(R"({"type": "integer", )", c.bounds, "}"));
    for (int64_t v = -1100; v <= 1100; ++v) {
      const bool in = v >= c.lo && v <= c.hi;
      ASSERT_EQ(Recognize(g, std::to_string(v)), in) << c.bounds << ": " << v;
    }
    const bool zero = 0 >= c.lo && 0 <= c.hi;
    EXPECT_EQ(Recognize(g, "-0"), zero) << c.bounds;
    EXPECT_FALSE(Recognize(g, "007")) << c.bounds;
    EXPECT_FALSE(Recognize(g, "+5")) << c.bounds;
  }
  // Magnitudes past 64 bits.
  const Grammar big = MustCompile(R"({"type": "integer", "minimum": 1e20, "maximum": 1e21})");
  EXPECT_TRUE(Recognize(big, "100000000000000000000"));
  EXPECT_TRUE(Recognize(big, "1000000000000000000000"));
  EXPECT_TRUE(Recognize(big, "543210987654321098765"));
  EXPECT_FALSE(Recognize(big, "99999999999999999999"));
  EXPECT_FALSE(Recognize(big, "1000000000000000000001"));
  EXPECT_THAT(Refusal(R"({"type": "integer", "maximum": 1e300})"), HasSubstr("'maximum' beyond"));
}

// Numbers with integral bounds against arithmetic: quarters in [-30, 30]
// written as decimals ("-2.25", "3.5", "4"), plus trailing-zero spellings.
TEST(JsonSchemaNumbers, DecimalRangesMatchArithmetic) {
  struct Case {
    const char* bounds;
    double lo, hi;
    bool lo_open, hi_open;
  };
  const double inf = 1e300;
  const Case cases[] = {
      {R"("minimum": 0, "maximum": 10)", 0, 10, false, false},
      {R"("exclusiveMinimum": 0, "exclusiveMaximum": 10)", 0, 10, true, true},
      {R"("minimum": -3, "exclusiveMaximum": 2)", -3, 2, false, true},
      {R"("exclusiveMinimum": -5, "maximum": -2)", -5, -2, true, false},
      {R"("minimum": 3)", 3, inf, false, false},
      {R"("exclusiveMaximum": -1)", -inf, -1, false, true},
      {R"("minimum": -1, "maximum": 0)", -1, 0, false, false},
      {R"("exclusiveMinimum": 0)", 0, inf, true, false},
      {R"("minimum": 2, "maximum": 2)", 2, 2, false, false},
  };
  for (const Case& c : cases) {
    const Grammar g = MustCompile(absl::StrCat(R"({"type": "number", )", c.bounds, "}"));
    for (int q = -120; q <= 120; ++q) {
      const double v = q / 4.0;
      const bool in = (c.lo_open ? v > c.lo : v >= c.lo) && (c.hi_open ? v < c.hi : v <= c.hi);
      std::string text = absl::StrFormat("%.2f", v);
      while (text.back() == '0') text.pop_back();
      if (text.back() == '.') text.pop_back();
      if (text == "-0") continue;  // the negative-zero spelling is not generated
      ASSERT_EQ(Recognize(g, text), in) << c.bounds << ": " << text;
      ASSERT_EQ(Recognize(g, absl::StrFormat("%.4f", v)), in) << c.bounds << ": " << v;
    }
  }
}

// Optional and required properties: every subset of five properties, in
// every order, is accepted exactly when it holds every required one; with
// open objects, also with an additional key between any two.
TEST(JsonSchemaObjects, EverySubsetOfPropertiesInEveryOrderAgainstRequired) {
  for (int required = 0; required < 32; required += 5) {
    for (bool open : {false, true}) {
      Json schema = {{"type", "object"}};
      if (!open) schema["additionalProperties"] = false;
      Json props = Json::object(), req = Json::array();
      for (int i = 0; i < 5; ++i) {
        props[std::string(1, static_cast<char>('a' + i))] = {{"type", "integer"}};
        if (required & (1 << i)) req.push_back(std::string(1, static_cast<char>('a' + i)));
      }
      schema["properties"] = props;
      schema["required"] = req;
      const Grammar g = MustCompile(schema.dump(), JsonOptions{.closed_objects = !open});
      for (int subset = 0; subset < 32; ++subset) {
        std::vector<int> order;
        for (int i = 0; i < 5; ++i) {
          if (subset & (1 << i)) order.push_back(i);
        }
        const bool ok = (subset & required) == required;
        int perm = 0;
        do {
          // Written by hand: nlohmann's ordered_json keeps insertion order.
          std::string text = "{";
          for (size_t k = 0; k < order.size(); ++k) {
            if (k > 0) text += ",";
            if (open && k == (perm % 3)) text += "\"zz\":[1],";
            absl::StrAppend(&text, "\"", std::string(1, static_cast<char>('a' + order[k])), "\":",
                            order[k]);
          }
          text += "}";
          EXPECT_EQ(Recognize(g, text), ok) << schema.dump() << " " << text;
          ++perm;
        } while (std::next_permutation(order.begin(), order.end()));
      }
      // A named key twice is never accepted, in any order.
      EXPECT_FALSE(Recognize(g, R"({"a":0,"b":1,"c":2,"d":3,"e":4,"a":0})"));
      EXPECT_FALSE(Recognize(g, R"({"b":1,"b":1,"a":0,"c":2,"d":3,"e":4})"));
    }
  }
}

// Any order costs a rule per set of named properties: objects up to
// max_any_order_properties take it, larger ones the schema's order; the
// schema's objects together stay within max_any_order_rules.
TEST(JsonSchemaObjects, AnyOrderIsBoundedPerObjectAndPerSchema) {
  auto object = [](int n) {
    Json props = Json::object();
    for (int i = 0; i < n; ++i) props[absl::StrCat("p", i)] = {{"type", "integer"}};
    return Json{{"type", "object"}, {"properties", props}};
  };
  const Grammar twelve = MustCompile(object(12).dump());
  EXPECT_GE(twelve.rules().size(), 4096u);
  EXPECT_TRUE(Recognize(twelve, R"({"p11":1,"p0":0,"p5":5})"));
  const Grammar thirteen = MustCompile(object(13).dump());
  EXPECT_LT(thirteen.rules().size(), 100u);
  EXPECT_TRUE(Recognize(thirteen, R"({"p0":0,"p5":5,"p12":1})"));
  EXPECT_FALSE(Recognize(thirteen, R"({"p12":1,"p0":0})"));
  // Five objects of 12 properties: the first four fit the 2^14 rules.
  Json five = {{"type", "object"}, {"properties", Json::object()}};
  for (int i = 0; i < 5; ++i) five["properties"][absl::StrCat("o", i)] = object(12);
  const Grammar g = MustCompile(five.dump());
  EXPECT_LE(g.rules().size(), (1u << 14) + 200u);
  EXPECT_TRUE(Recognize(g, R"({"o0":{"p3":3,"p1":1},"o3":{"p11":1,"p0":0}})"));
  EXPECT_TRUE(Recognize(g, R"({"o4":{"p0":0,"p11":1}})"));
  EXPECT_FALSE(Recognize(g, R"({"o4":{"p11":1,"p0":0}})"));
  // kSchema: the schema's order whatever the size.
  const Grammar fixed = MustCompile(object(3).dump(),
                                    JsonOptions{.property_order = JsonOptions::PropertyOrder::kSchema});
  EXPECT_TRUE(Recognize(fixed, R"({"p0":0,"p2":2})"));
  EXPECT_FALSE(Recognize(fixed, R"({"p2":2,"p0":0})"));
}

// Many optional properties stay small: the grammar is linear in their
// number (no enumeration of subsets).
TEST(JsonSchemaObjects, ManyOptionalPropertiesStayLinear) {
  Json props = Json::object();
  for (int i = 0; i < 200; ++i) props[absl::StrCat("p", i)] = {{"type", "boolean"}};
  const Json schema = {{"type", "object"}, {"properties", props}, {"additionalProperties", false}};
  absl::StatusOr<Grammar> g = JsonSchemaToGrammar(schema.dump());
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_LT(g->exprs().size(), 200u * 30);
  EXPECT_TRUE(Recognize(*g, R"({"p3":true,"p150":false,"p199":true})"));
  EXPECT_FALSE(Recognize(*g, R"({"p150":false,"p3":true})"));
}

// additionalProperties left out: with closed_objects off, other keys among
// the named ones (JSON Schema's reading), never a named key again; on (the
// default), none when the schema names properties.
TEST(JsonSchemaObjects, AbsentAdditionalPropertiesOpenUnlessClosed) {
  const std::string schema =
      R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}})";
  const Grammar open = MustCompile(schema, JsonOptions{.closed_objects = false});
  EXPECT_TRUE(Recognize(open, R"({"a":1,"zz":[true,{"q":null}],"c":"x"})"));
  EXPECT_TRUE(Recognize(open, R"({"zz":1})"));
  EXPECT_TRUE(Recognize(open, R"({"a":1,"zz":1,"b":"x"})"));   // named after extra
  EXPECT_FALSE(Recognize(open, R"({"a":1,"a":2})"));           // a named key again
  EXPECT_FALSE(Recognize(open, R"({"b":1})"));
  const Grammar closed = MustCompile(schema);
  EXPECT_TRUE(Recognize(closed, R"({"a":1,"b":"x"})"));
  EXPECT_FALSE(Recognize(closed, R"({"a":1,"zz":1})"));
  EXPECT_FALSE(Recognize(closed, R"({"zz":1})"));
  // No properties keyword: any object either way.
  const Grammar any = MustCompile(R"({"type": "object"})", JsonOptions{.closed_objects = true});
  EXPECT_TRUE(Recognize(any, R"({"zz":1,"y":[]})"));
  // "properties": {} declares none: {} only when closed (a tool's "no
  // arguments"), any object when open.
  const std::string none = R"({"type": "object", "properties": {}})";
  const Grammar none_closed = MustCompile(none);
  EXPECT_TRUE(Recognize(none_closed, "{}"));
  EXPECT_FALSE(Recognize(none_closed, R"({"zz":1})"));
  const Grammar none_open = MustCompile(none, JsonOptions{.closed_objects = false});
  EXPECT_TRUE(Recognize(none_open, R"({"zz":1})"));
}

// A format JSON Schema does not define is an annotation (any string, with
// the schema's other string keywords); a defined one minfer lacks is
// refused (above). maxLength past the repetition cap is lowered to it.
TEST(JsonSchemaStrings, UndefinedFormatIsAnAnnotationAndLongMaxLengthIsCapped) {
  const Grammar url = MustCompile(R"({"type": "string", "format": "url", "maxLength": 3})");
  EXPECT_TRUE(Recognize(url, R"("abc")"));
  EXPECT_TRUE(Recognize(url, R"("")"));
  EXPECT_FALSE(Recognize(url, R"("abcd")"));
  const Grammar path = MustCompile(R"({"type": "string", "format": "path", "pattern": "^/"})");
  EXPECT_TRUE(Recognize(path, R"("/x")"));
  EXPECT_FALSE(Recognize(path, R"("x")"));
  JsonOptions small;
  small.max_string_length = 5;
  const Grammar capped = MustCompile(R"({"type": "string", "maxLength": 20000})", small);
  EXPECT_TRUE(Recognize(capped, R"("12345")"));
  EXPECT_FALSE(Recognize(capped, R"("123456")"));  // valid, but past the cap
}

TEST(JsonSchemaWhitespace, BoundedPerGap) {
  const std::string schema = R"({"type": "array", "items": {"type": "integer"}})";
  const Grammar compact = MustCompile(schema, JsonOptions{.max_whitespace = 0});
  EXPECT_TRUE(Recognize(compact, "[1,2]"));
  EXPECT_FALSE(Recognize(compact, "[1, 2]"));
  EXPECT_FALSE(Recognize(compact, "[ ]"));
  const Grammar two = MustCompile(schema, JsonOptions{.max_whitespace = 2});
  EXPECT_TRUE(Recognize(two, "[\n 1 ,\t2\r\n]"));
  EXPECT_TRUE(Recognize(two, "[  ]"));
  EXPECT_FALSE(Recognize(two, "[1,   2]"));
  EXPECT_FALSE(Recognize(two, "[1,\f2]"));
  // No whitespace before or after the value.
  EXPECT_FALSE(Recognize(two, " [1]"));
  EXPECT_FALSE(Recognize(two, "[1] "));
}

TEST(JsonSchemaGrammar, SharedRulesAreDefinedOnce) {
  const Grammar g = MustCompile(
      R"({"type": "object", "properties": {"a": {}, "b": {"type": "string"}, "c": {"type": "array"},
          "d": {"type": "object", "additionalProperties": {"type": "string"}}}})");
  const std::string text = g.ToString();
  for (const char* rule : {"json-value ::=", "json-string ::=", "json-char ::=", "ws ::="}) {
    size_t n = 0;
    for (size_t p = text.find(rule); p != std::string::npos; p = text.find(rule, p + 1)) ++n;
    EXPECT_EQ(n, 1u) << rule << "\n" << text;
  }
}

TEST(JsonSchemaGrammar, DraftSevenItemsArrayAndBooleanExclusiveBounds) {
  const Grammar items = MustCompile(
      R"({"type": "array", "items": [{"type": "string"}, {"type": "null"}], "additionalItems": {"type": "integer"}})");
  EXPECT_TRUE(Recognize(items, R"(["a",null,1,2])"));
  EXPECT_TRUE(Recognize(items, R"(["a"])"));
  EXPECT_FALSE(Recognize(items, R"(["a",null,"b"])"));
  const Grammar draft4 = MustCompile(
      R"({"type": "integer", "minimum": 1, "exclusiveMinimum": true, "maximum": 3, "exclusiveMaximum": false})");
  EXPECT_FALSE(Recognize(draft4, "1"));
  EXPECT_TRUE(Recognize(draft4, "2"));
  EXPECT_TRUE(Recognize(draft4, "3"));
  const Grammar none = MustCompile(R"({"enum": []})");
  EXPECT_FALSE(Recognize(none, "1"));
  EXPECT_FALSE(Recognize(none, "null"));
}

TEST(JsonObjectGrammar, AnyObjectOnly) {
  absl::StatusOr<Grammar> g = JsonObjectGrammar();
  ASSERT_TRUE(g.ok()) << g.status();
  for (const char* ok : {"{}", R"({"a":[1,{"b":null}],"c":"\u00e9\n"})", "{ \"k\" : -1.5e3 }",
                         "{\n  \"x\": [true, false]\n}"}) {
    EXPECT_TRUE(Recognize(*g, ok)) << ok;
  }
  for (const char* bad : {"[]", "\"x\"", "1", "null", "{\"a\"}", "{\"a\":1,}", "{'a':1}"}) {
    EXPECT_FALSE(Recognize(*g, bad)) << bad;
  }
}

}  // namespace
}  // namespace minfer::grammar

namespace minfer::grammar {
namespace {

// An additional property may not reuse a named property's key, in any
// spelling: else {"a": 9} would pass as an "additional" member although "a"
// allows at most 3 (MaskBench found such instances accepted).
TEST(JsonSchemaAdditional, KeysOfNamedPropertiesAreNotAdditional) {
  auto g = JsonSchemaToGrammar(
      R"({"properties": {"a": {"type": "integer", "maximum": 3}, "ab": {"type": "string"}},
          "additionalProperties": true})");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(testing::Recognize(*g, R"({"a":1})"));
  EXPECT_TRUE(testing::Recognize(*g, R"({"a":1,"b":9})"));
  EXPECT_TRUE(testing::Recognize(*g, R"({"a":1,"abc":9,"":0,"\u00e9":1})"));
  EXPECT_FALSE(testing::Recognize(*g, R"({"a":9})"));
  EXPECT_FALSE(testing::Recognize(*g, R"({"a":1,"a":9})"));
  EXPECT_FALSE(testing::Recognize(*g, R"({"ab":7})"));
  EXPECT_FALSE(testing::Recognize(*g, R"({"\u0061":9})"));
  EXPECT_FALSE(testing::Recognize(*g, R"({"a\u0062":7})"));
}

}  // namespace
}  // namespace minfer::grammar

namespace minfer::grammar {
namespace {

// Unbounded numbers have at most max_number_digits digits per part (32 by
// default; 0 lifts the cap); bounded ones are exact regardless.
TEST(JsonSchemaNumbers, UnboundedNumbersAreCappedInLength) {
  const std::string d32(32, '7'), d33(33, '7');
  auto g = JsonSchemaToGrammar(R"({"type": "array", "items": {"type": "number"}})");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(testing::Recognize(*g, "[" + d32 + "]"));
  EXPECT_FALSE(testing::Recognize(*g, "[" + d33 + "]"));
  EXPECT_TRUE(testing::Recognize(*g, "[-1." + d32 + "e-1234]"));
  EXPECT_FALSE(testing::Recognize(*g, "[1." + d33 + "]"));
  EXPECT_FALSE(testing::Recognize(*g, "[1e12345]"));
  JsonOptions uncapped;
  uncapped.max_number_digits = 0;
  auto u = JsonSchemaToGrammar(R"({"type": "array", "items": {"type": "integer"}})", uncapped);
  ASSERT_TRUE(u.ok());
  EXPECT_TRUE(testing::Recognize(*u, "[" + d33 + d33 + "]"));
  auto bounded = JsonSchemaToGrammar(R"({"type": "integer", "minimum": 0, "maximum": 5})");
  ASSERT_TRUE(bounded.ok());
  EXPECT_TRUE(testing::Recognize(*bounded, "5"));
  EXPECT_FALSE(testing::Recognize(*bounded, "6"));
}

}  // namespace
}  // namespace minfer::grammar
