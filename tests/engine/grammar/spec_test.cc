// GrammarSpec::Key (distinct specs never share a key; options that do not
// apply to a kind do not split its cache entries) and BuildGrammar's
// dispatch to each front end, compared with calling the front end directly.
#include "engine/grammar/spec.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "engine/grammar/gbnf.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/regex.h"
#include "tests/engine/grammar/recognizer.h"

namespace minfer::grammar {
namespace {

using ::minfer::grammar::testing::Recognize;

GrammarSpec Spec(GrammarKind kind, std::string text, std::vector<std::string> choices = {}) {
  GrammarSpec s;
  s.kind = kind;
  s.text = std::move(text);
  s.choices = std::move(choices);
  return s;
}

TEST(GrammarSpec, KindNames) {
  EXPECT_STREQ(GrammarKindName(GrammarKind::kJsonSchema), "json_schema");
  EXPECT_STREQ(GrammarKindName(GrammarKind::kJsonObject), "json_object");
  EXPECT_STREQ(GrammarKindName(GrammarKind::kGbnf), "gbnf");
  EXPECT_STREQ(GrammarKindName(GrammarKind::kRegex), "regex");
  EXPECT_STREQ(GrammarKindName(GrammarKind::kChoice), "choice");
}

TEST(GrammarSpec, KeysAreUnambiguous) {
  std::vector<GrammarSpec> specs = {
      Spec(GrammarKind::kRegex, "a"),
      Spec(GrammarKind::kGbnf, "a"),
      Spec(GrammarKind::kJsonSchema, "a"),
      Spec(GrammarKind::kRegex, "a|b"),
      Spec(GrammarKind::kRegex, "1:a"),
      Spec(GrammarKind::kRegex, ""),
      Spec(GrammarKind::kChoice, "", {"a", "b"}),
      Spec(GrammarKind::kChoice, "", {"a|b"}),
      Spec(GrammarKind::kChoice, "", {"ab"}),
      Spec(GrammarKind::kChoice, "", {"a", "", "b"}),
      Spec(GrammarKind::kChoice, "", {"1:a1:b"}),
      Spec(GrammarKind::kChoice, "", {""}),
      Spec(GrammarKind::kChoice, "", {}),
      Spec(GrammarKind::kChoice, "", {"b", "a"}),
      Spec(GrammarKind::kJsonObject, ""),
  };
  GrammarSpec ws = Spec(GrammarKind::kJsonSchema, "a");
  ws.json.max_whitespace = 0;
  specs.push_back(ws);
  GrammarSpec depth = Spec(GrammarKind::kJsonSchema, "a");
  depth.json.max_depth = 3;
  specs.push_back(depth);
  GrammarSpec limit = Spec(GrammarKind::kRegex, "a");
  limit.json.limits.max_repeat = 7;
  specs.push_back(limit);
  GrammarSpec obj_ws = Spec(GrammarKind::kJsonObject, "");
  obj_ws.json.max_whitespace = 2;
  specs.push_back(obj_ws);
  for (size_t i = 0; i < specs.size(); ++i) {
    for (size_t j = i + 1; j < specs.size(); ++j) {
      EXPECT_NE(specs[i].Key(), specs[j].Key()) << i << " vs " << j << ": " << specs[i].Key();
    }
  }
  // Options a kind does not use, and json_object's unused text, leave the key alone.
  GrammarSpec regex_ws = Spec(GrammarKind::kRegex, "a");
  regex_ws.json.max_whitespace = 0;
  EXPECT_EQ(regex_ws.Key(), Spec(GrammarKind::kRegex, "a").Key());
  EXPECT_EQ(Spec(GrammarKind::kJsonObject, "ignored").Key(),
            Spec(GrammarKind::kJsonObject, "").Key());
}

TEST(GrammarSpec, BuildGrammarDispatches) {
  absl::StatusOr<Grammar> g = BuildGrammar(Spec(GrammarKind::kRegex, "[a-c]+x"));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(Recognize(*g, "abcx"));
  EXPECT_FALSE(Recognize(*g, "abc"));

  g = BuildGrammar(Spec(GrammarKind::kGbnf, "root ::= \"n\" [0-9]+\n"));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(Recognize(*g, "n42"));
  EXPECT_FALSE(Recognize(*g, "42"));

  g = BuildGrammar(Spec(GrammarKind::kChoice, "", {"red", "green"}));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(Recognize(*g, "green"));
  EXPECT_FALSE(Recognize(*g, "blue"));

  // The JSON kinds build what their front end builds, with the spec's options.
  GrammarSpec js = Spec(GrammarKind::kJsonSchema, R"({"type": "integer"})");
  js.json.max_whitespace = 0;
  g = BuildGrammar(js);
  absl::StatusOr<Grammar> direct = JsonSchemaToGrammar(js.text, js.json);
  ASSERT_EQ(g.ok(), direct.ok());
  if (g.ok()) {
    EXPECT_EQ(g->ToString(), direct->ToString());
  }
  g = BuildGrammar(Spec(GrammarKind::kJsonObject, ""));
  direct = JsonObjectGrammar(JsonOptions{});
  ASSERT_EQ(g.ok(), direct.ok());
  if (g.ok()) {
    EXPECT_EQ(g->ToString(), direct->ToString());
  }

  // Refusals pass through, and the spec's limits reach every front end.
  g = BuildGrammar(Spec(GrammarKind::kRegex, "a(?=b)"));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  g = BuildGrammar(Spec(GrammarKind::kGbnf, "x ::= \"a\"\n"));
  EXPECT_FALSE(g.ok());
  g = BuildGrammar(Spec(GrammarKind::kChoice, "", {}));
  EXPECT_FALSE(g.ok());
  GrammarSpec capped = Spec(GrammarKind::kRegex, "a{8}");
  capped.json.limits.max_repeat = 7;
  EXPECT_FALSE(BuildGrammar(capped).ok());
  capped.kind = GrammarKind::kGbnf;
  capped.text = "root ::= \"a\"{8}\n";
  EXPECT_FALSE(BuildGrammar(capped).ok());
}

}  // namespace
}  // namespace minfer::grammar
