#include "daemon/api/chat_options.h"

#include <string>

#include "absl/strings/match.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/jinja.h"
#include "gtest/gtest.h"

namespace minfer::daemon {
namespace {

using tokenizer::jinja::Value;

// Renders `expr` over the options' variables with the real interpreter, so
// the test checks what a template sees, not the Value representation.
std::string Show(const tokenizer::ChatTemplateOptions& o, const std::string& expr) {
  auto t = tokenizer::jinja::Template::Parse("{{ " + expr + " }}");
  EXPECT_TRUE(t.ok()) << t.status();
  auto r = t->Render(o.variables);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->text : "";
}

TEST(ChatOptionsTest, ValuesAreReadAsJson) {
  v1::Chat chat;
  auto& kw = *chat.mutable_template_kwargs();
  kw["enable_thinking"] = "false";
  kw["n"] = "3";
  kw["ratio"] = "0.5";
  kw["name"] = "\"Bob\"";
  kw["word"] = "plain text";  // not JSON: the string itself
  kw["items"] = R"([1, "two", null, {"k": true}])";
  kw["nothing"] = "null";
  auto o = ChatTemplateOptionsOf(chat);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->variables.size(), 7u);
  EXPECT_EQ(Show(*o, "enable_thinking is false"), "True");
  EXPECT_EQ(Show(*o, "n + 1"), "4");
  EXPECT_EQ(Show(*o, "ratio * 2"), "1.0");
  EXPECT_EQ(Show(*o, "name ~ '!'"), "Bob!");
  EXPECT_EQ(Show(*o, "word | upper"), "PLAIN TEXT");
  EXPECT_EQ(Show(*o, "items | length"), "4");
  EXPECT_EQ(Show(*o, "items[1]"), "two");
  EXPECT_EQ(Show(*o, "items[3].k"), "True");
  EXPECT_EQ(Show(*o, "nothing is none"), "True");
}

TEST(ChatOptionsTest, NoKwargsIsNoVariables) {
  auto o = ChatTemplateOptionsOf(v1::Chat());
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(o->variables.empty());
}

TEST(ChatOptionsTest, RefusesReservedAndBadNamesAndTooMuch) {
  for (const char* key : {"messages", "add_generation_prompt", "bos_token", "eos_token"}) {
    v1::Chat chat;
    (*chat.mutable_template_kwargs())[key] = "1";
    auto o = ChatTemplateOptionsOf(chat);
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << key;
    EXPECT_TRUE(absl::StrContains(o.status().message(), key)) << o.status();
  }
  for (const char* key : {"", "1abc", "a-b", "a b"}) {
    v1::Chat chat;
    (*chat.mutable_template_kwargs())[key] = "1";
    EXPECT_EQ(ChatTemplateOptionsOf(chat).status().code(), absl::StatusCode::kInvalidArgument)
        << "'" << key << "'";
  }
  v1::Chat many;
  for (size_t i = 0; i <= kMaxTemplateKwargs; ++i) {
    (*many.mutable_template_kwargs())["k" + std::to_string(i)] = "1";
  }
  EXPECT_TRUE(absl::StrContains(ChatTemplateOptionsOf(many).status().message(), "entries"));
  v1::Chat big;
  (*big.mutable_template_kwargs())["k"] = std::string(kMaxTemplateKwargsBytes, 'x');
  EXPECT_TRUE(absl::StrContains(ChatTemplateOptionsOf(big).status().message(), "bytes"));
}

// "tools" in the template's variables would describe tools to the model
// (Qwen's and Llama's templates render them), which then answers with tool
// calls minfer does not parse: refused, naming the key, as the top-level
// "tools" field is.
TEST(ChatOptionsTest, RefusesToolsAsATemplateVariable) {
  for (const char* key : {"tools", "functions"}) {
    v1::Chat chat;
    (*chat.mutable_template_kwargs())[key] =
        R"([{"type": "function", "function": {"name": "get_weather"}}])";
    (*chat.mutable_template_kwargs())["enable_thinking"] = "false";
    auto o = ChatTemplateOptionsOf(chat);
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << key;
    EXPECT_TRUE(absl::StartsWith(o.status().message(),
                                 std::string("chat.template_kwargs.") + key + ": "))
        << o.status();
  }
  v1::Chat fine;  // a variable that only shapes the rendering is taken
  (*fine.mutable_template_kwargs())["tools_enabled_note"] = "1";
  EXPECT_TRUE(ChatTemplateOptionsOf(fine).ok());
}

}  // namespace
}  // namespace minfer::daemon
