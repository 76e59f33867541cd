// A request's output constraint (daemon/api/constraint.h): the proto's
// oneof to the grammar engine's spec, the caps checked before compiling,
// and the compiler's errors named by the proto field (on a real model's
// vocabulary: the tiny test model, Qwen2's tokenizer).
#include "daemon/api/constraint.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_models.h"

namespace minfer::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

grammar::GrammarSpec MustSpec(const v1::GenerateRequest& r) {
  absl::StatusOr<std::optional<grammar::GrammarSpec>> s = ConstraintSpec(r);
  EXPECT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s.ok() && s->has_value());
  return s.ok() && s->has_value() ? **s : grammar::GrammarSpec();
}

absl::Status SpecError(const v1::GenerateRequest& r) {
  absl::StatusOr<std::optional<grammar::GrammarSpec>> s = ConstraintSpec(r);
  return s.ok() ? absl::OkStatus() : s.status();
}

TEST(ConstraintSpecTest, EachKindMapsOntoItsSpec) {
  v1::GenerateRequest r;
  r.set_json_schema(R"({"type": "object"})");
  grammar::GrammarSpec s = MustSpec(r);
  EXPECT_EQ(s.kind, grammar::GrammarKind::kJsonSchema);
  EXPECT_EQ(s.text, R"({"type": "object"})");
  EXPECT_EQ(s.json.max_whitespace, grammar::JsonOptions().max_whitespace);
  EXPECT_STREQ(ConstraintField(r), "json_schema");

  r.set_json_object(true);
  EXPECT_EQ(MustSpec(r).kind, grammar::GrammarKind::kJsonObject);
  EXPECT_STREQ(ConstraintField(r), "json_object");

  r.set_gbnf("root ::= \"a\"");
  s = MustSpec(r);
  EXPECT_EQ(s.kind, grammar::GrammarKind::kGbnf);
  EXPECT_EQ(s.text, "root ::= \"a\"");

  r.set_regex("[0-9]+");
  s = MustSpec(r);
  EXPECT_EQ(s.kind, grammar::GrammarKind::kRegex);
  EXPECT_EQ(s.text, "[0-9]+");

  r.mutable_choice()->add_choices("yes");
  r.mutable_choice()->add_choices("");
  s = MustSpec(r);
  EXPECT_EQ(s.kind, grammar::GrammarKind::kChoice);
  EXPECT_THAT(s.choices, ElementsAre("yes", ""));
  EXPECT_STREQ(ConstraintField(r), "choice");
}

TEST(ConstraintSpecTest, NoConstraintIsNoSpec) {
  v1::GenerateRequest r;
  absl::StatusOr<std::optional<grammar::GrammarSpec>> s = ConstraintSpec(r);
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->has_value());
  EXPECT_STREQ(ConstraintField(r), "");
  // A oneof bool set to false asks for nothing.
  r.set_json_object(false);
  s = ConstraintSpec(r);
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->has_value());
}

TEST(ConstraintSpecTest, ClosedObjectsOnlyWithJsonSchema) {
  v1::GenerateRequest r;
  r.set_json_schema(R"({"type": "object", "properties": {"a": {"type": "integer"}}})");
  EXPECT_TRUE(MustSpec(r).json.closed_objects);  // the default
  r.set_json_closed_objects(false);
  EXPECT_FALSE(MustSpec(r).json.closed_objects);
  r.set_json_closed_objects(true);
  EXPECT_TRUE(MustSpec(r).json.closed_objects);
  // Open and closed are different grammars: different cache keys.
  v1::GenerateRequest open = r;
  open.set_json_closed_objects(false);
  EXPECT_NE(MustSpec(r).Key(), MustSpec(open).Key());
  r.set_json_object(true);
  EXPECT_EQ(SpecError(r).message(), "json_closed_objects: only with a json_schema constraint");
}

TEST(ConstraintSpecTest, JsonWhitespaceOnlyWithJsonAndInRange) {
  v1::GenerateRequest r;
  r.set_json_object(true);
  r.set_json_max_whitespace(0);
  EXPECT_EQ(MustSpec(r).json.max_whitespace, 0);
  r.set_json_max_whitespace(kMaxJsonWhitespace);
  EXPECT_EQ(MustSpec(r).json.max_whitespace, kMaxJsonWhitespace);
  r.set_json_max_whitespace(kMaxJsonWhitespace + 1);
  absl::Status s = SpecError(r);
  EXPECT_EQ(s.message(), "json_max_whitespace must be in [0, 64], got 65");
  EXPECT_TRUE(IsConstraintError(s));
  r.set_json_max_whitespace(-1);
  EXPECT_EQ(SpecError(r).message(), "json_max_whitespace must be in [0, 64], got -1");
  r.set_regex("a");
  r.set_json_max_whitespace(2);
  EXPECT_EQ(SpecError(r).message(),
            "json_max_whitespace: only with a json_schema or json_object constraint");
  v1::GenerateRequest none;
  none.set_json_max_whitespace(2);
  EXPECT_TRUE(IsConstraintError(SpecError(none)));
}

TEST(ConstraintSpecTest, CapsAreCheckedBeforeCompiling) {
  v1::GenerateRequest r;
  r.set_json_schema("");
  EXPECT_EQ(SpecError(r).message(), "json_schema: empty");
  r.set_gbnf("");
  EXPECT_EQ(SpecError(r).message(), "gbnf: empty");
  r.set_regex(std::string(kMaxConstraintBytes + 1, 'a'));
  EXPECT_EQ(SpecError(r).message(), "regex: 1048577 bytes, at most 1048576");
  r.mutable_choice();
  absl::Status none = SpecError(r);
  EXPECT_EQ(none.message(), "choice.choices: no choices");
  EXPECT_EQ(none.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(IsConstraintError(none));
  for (int i = 0; i <= kMaxChoices; ++i) r.mutable_choice()->add_choices("c");
  EXPECT_EQ(SpecError(r).message(), "choice.choices: 4097 choices, at most 4096");
  r.mutable_choice()->Clear();
  r.mutable_choice()->add_choices(std::string(kMaxConstraintBytes, 'x'));
  r.mutable_choice()->add_choices("y");
  EXPECT_EQ(SpecError(r).message(), "choice.choices: 1048577 bytes, at most 1048576");
  EXPECT_FALSE(IsConstraintError(absl::InvalidArgumentError("x")));
}

class CompileConstraintTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto path = minfer::testing::TestModelPath("tiny", "q8_0", 1);
    ASSERT_TRUE(path.ok()) << path.status();
    runtime::ModelOptions o;
    o.backend = "cpu";
    auto m = runtime::Model::Load(*path, o);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = new std::shared_ptr<runtime::Model>(*std::move(m));
  }
  static void TearDownTestSuite() { delete model_; }
  static const runtime::Model& model() { return **model_; }
  static std::shared_ptr<runtime::Model>* model_;
};
std::shared_ptr<runtime::Model>* CompileConstraintTest::model_ = nullptr;

TEST_F(CompileConstraintTest, CompilesAgainstTheModelsVocabularyAndCaches) {
  v1::GenerateRequest r;
  r.set_json_schema(R"({"type": "object", "properties": {"a": {"type": "integer"}}})");
  auto g = CompileConstraint(r, model());
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_NE(*g, nullptr);
  EXPECT_EQ((*g)->kind(), grammar::GrammarKind::kJsonSchema);
  EXPECT_EQ(&(*g)->vocab(), &model().grammars().vocab());
  const int64_t hits = model().grammars().stats().cache_hits;
  auto again = CompileConstraint(r, model());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), g->get());
  EXPECT_EQ(model().grammars().stats().cache_hits, hits + 1);
  v1::GenerateRequest none;
  auto n = CompileConstraint(none, model());
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, nullptr);
}

TEST_F(CompileConstraintTest, FrontEndErrorsNameTheFieldAndTheProblem) {
  struct Bad {
    void (*set)(v1::GenerateRequest*);
    const char* prefix;
    const char* needle;  // what the front end must name
  };
  const Bad cases[] = {
      {[](v1::GenerateRequest* r) {
         r->set_json_schema(R"({"type": "object", "propertyNames": {"maxLength": 3}})");
       },
       "json_schema: ", "propertyNames"},
      {[](v1::GenerateRequest* r) { r->set_json_schema(R"({"type": "object",)"); }, "json_schema: ",
       ""},
      {[](v1::GenerateRequest* r) { r->set_gbnf("root ::= item\n"); }, "gbnf: ", "item"},
      {[](v1::GenerateRequest* r) { r->set_regex("(a)\\1"); }, "regex: ", ""},
  };
  for (const Bad& c : cases) {
    v1::GenerateRequest r;
    c.set(&r);
    auto g = CompileConstraint(r, model());
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
    EXPECT_TRUE(IsConstraintError(g.status())) << g.status();
    EXPECT_THAT(std::string(g.status().message()), StartsWith(c.prefix));
    EXPECT_THAT(std::string(g.status().message()), HasSubstr(c.needle));
    // The field once, even where the front end names its kind itself.
    EXPECT_THAT(std::string(g.status().message()),
                Not(HasSubstr(absl::StrCat(c.prefix, c.prefix))));
  }
}

TEST_F(CompileConstraintTest, ForcedToolCallsAreCachedByTheirTools) {
  v1::Chat chat;
  v1::Tool* t = chat.add_tools();
  t->set_name("get_weather");
  t->set_parameters(R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})");
  chat.mutable_tool_choice()->set_mode(v1::ToolChoice::TOOL_CHOICE_REQUIRED);
  auto g = CompileForcedToolCall(chat, "hermes", model());
  ASSERT_TRUE(g.ok()) << g.status();
  const int64_t hits = model().grammars().stats().cache_hits;
  // The same tools in another request (other messages): the cached grammar.
  v1::Chat same = chat;
  same.add_messages()->set_role("user");
  auto again = CompileForcedToolCall(same, "hermes", model());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), g->get());
  EXPECT_EQ(model().grammars().stats().cache_hits, hits + 1);
  // Another family, another choice, another schema, the parallel flag:
  // each its own grammar.
  auto other_family = CompileForcedToolCall(chat, "llama3_json", model());
  ASSERT_TRUE(other_family.ok());
  EXPECT_NE(other_family->get(), g->get());
  v1::Chat named = chat;
  named.mutable_tool_choice()->set_mode(v1::ToolChoice::TOOL_CHOICE_FUNCTION);
  named.mutable_tool_choice()->set_function("get_weather");
  auto n = CompileForcedToolCall(named, "hermes", model());
  ASSERT_TRUE(n.ok());
  EXPECT_NE(n->get(), g->get());
  v1::Chat other_schema = chat;
  other_schema.mutable_tools(0)->set_parameters(R"({"type": "object", "properties": {"city": {"type": "integer"}}})");
  auto s = CompileForcedToolCall(other_schema, "hermes", model());
  ASSERT_TRUE(s.ok());
  EXPECT_NE(s->get(), g->get());
  v1::Chat single = chat;
  single.set_parallel_tool_calls(false);
  auto p = CompileForcedToolCall(single, "hermes", model());
  ASSERT_TRUE(p.ok());
  EXPECT_NE(p->get(), g->get());
  // Errors are not cached: a bad schema fails each time, naming the tool.
  v1::Chat bad = chat;
  bad.mutable_tools(0)->set_parameters(R"({"type": "object", "propertyNames": {"maxLength": 3}})");
  for (int i = 0; i < 2; ++i) {
    auto b = CompileForcedToolCall(bad, "hermes", model());
    ASSERT_FALSE(b.ok());
    EXPECT_THAT(std::string(b.status().message()), HasSubstr("chat.tools"));
  }
}

}  // namespace
}  // namespace minfer::daemon
