#include "engine/tokenizer/chat_template.h"

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "engine/tokenizer/jinja.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace minfer::tokenizer {
namespace {

using ::testing::HasSubstr;

TEST(ChatTemplateTest, RendersChatMl) {
  auto t = ChatTemplate::Create("", "qwen2", "m");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->default_system_prompt(), "");
  const std::vector<ChatMessage> msgs = {{"system", "S"}, {"user", "U"}, {"assistant", "A"}};
  EXPECT_EQ(*t->Render(msgs, false),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
            "<|im_start|>assistant\nA<|im_end|>\n");
  std::vector<ContentRange> ranges;
  const std::string prompt = *t->Render({{"user", "hi"}}, true, &ranges);
  EXPECT_EQ(prompt, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(prompt.substr(ranges[0].begin, ranges[0].end - ranges[0].begin), "hi");
}

TEST(ChatTemplateTest, Qwen25DefaultSystemPrompt) {
  auto t = ChatTemplate::Create(Qwen25ChatTemplate(), "qwen2", "Qwen2.5-7B-Instruct");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->default_system_prompt(),
            "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  EXPECT_EQ(*t->Render({{"user", "hi"}}, true),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  // An explicit system message replaces it.
  EXPECT_EQ(*t->Render({{"system", "S"}, {"user", "hi"}}, false),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n");
  // Like the template, an empty conversation still gets the system turn.
  EXPECT_EQ(*t->Render({}, true),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, Qwen2DefaultAndQwen3None) {
  // Qwen2-Instruct's template (also what minfer mkmodel writes).
  const char* qwen2 =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
      "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
      "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
      "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  auto t2 = ChatTemplate::Create(qwen2, "qwen2", "Qwen2");
  ASSERT_TRUE(t2.ok());
  EXPECT_EQ(t2->default_system_prompt(), "You are a helpful assistant.");
  // Qwen3's system turn is built from the message content only.
  const char* qwen3 =
      "{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + "
      "'<|im_end|>\\n' }}{%- endif %}{%- for message in messages %}{{- '<|im_start|>' + "
      "message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}{%- endfor %}";
  auto t3 = ChatTemplate::Create(qwen3, "qwen2", "Qwen3");
  ASSERT_TRUE(t3.ok());
  EXPECT_EQ(t3->default_system_prompt(), "");
}

TEST(ChatTemplateTest, RendersTheModelsOwnTemplate) {
  // Any template runs now (minfer used to refuse what was not ChatML), with
  // the model's special tokens.
  auto t = ChatTemplate::Create(
      "{{ bos_token }}{% for m in messages %}[INST] {{ m.content }} [/INST]"
      "{% endfor %}{{ eos_token }}",
      "llama-bpe", "Mistral-7B", {"<s>", "</s>"});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->from_model());
  EXPECT_FALSE(t->is_chatml());
  std::vector<ContentRange> ranges;
  const std::string prompt = *t->Render({{"user", "hi"}, {"user", "again"}}, false, &ranges);
  EXPECT_EQ(prompt, "<s>[INST] hi [/INST][INST] again [/INST]</s>");
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(prompt.substr(ranges[0].begin, ranges[0].end - ranges[0].begin), "hi");
  EXPECT_EQ(prompt.substr(ranges[1].begin, ranges[1].end - ranges[1].begin), "again");
  // No BOS/EOS: the template sees empty strings.
  auto bare = ChatTemplate::Create("[{{ bos_token }}|{{ eos_token }}]", "qwen2", "m");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(*bare->Render({}, false), "[|]");
}

// The text of each content range.
std::vector<std::string> RangeTexts(const std::string& prompt,
                                    const std::vector<ContentRange>& ranges) {
  std::vector<std::string> out;
  for (const ContentRange& r : ranges) out.push_back(prompt.substr(r.begin, r.end - r.begin));
  return out;
}

TEST(ChatTemplateTest, ContentRangesFollowTheContentThroughTheTemplate) {
  // Llama trims contents; Qwen3 cuts an assistant turn at </think>. The
  // ranges hold what reached the prompt of each content, nothing else.
  auto llama = ChatTemplate::Create(
      "{% for m in messages %}{{ '<h>' + m['role'] + '</h>' + m['content'] | trim + '<e>' }}"
      "{% endfor %}",
      "llama-bpe", "Llama");
  ASSERT_TRUE(llama.ok()) << llama.status();
  std::vector<ContentRange> ranges;
  std::string prompt = *llama->Render({{"user", "  hi <e> there \n"}}, false, &ranges);
  EXPECT_EQ(prompt, "<h>user</h>hi <e> there<e>");
  EXPECT_EQ(RangeTexts(prompt, ranges), std::vector<std::string>{"hi <e> there"});

  auto qwen3 = ChatTemplate::Create(
      "{%- for m in messages %}{%- if '</think>' in m.content %}"
      "{%- set answer = m.content.split('</think>')[-1].lstrip('\\n') %}"
      "{%- set reasoning = m.content.split('</think>')[0].rstrip('\\n').split('<think>')[-1]"
      ".lstrip('\\n') %}"
      "{{- '<|im_start|>' + m.role + '\\n<think>\\n' + reasoning + '\\n</think>\\n\\n' + answer"
      " + '<|im_end|>\\n' }}"
      "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}"
      "{%- endfor %}",
      "qwen2", "Qwen3");
  ASSERT_TRUE(qwen3.ok()) << qwen3.status();
  EXPECT_TRUE(qwen3->is_chatml());
  ranges.clear();
  prompt =
      *qwen3->Render({{"user", "q"}, {"assistant", "<think>\nwhy <|im_end|>\n</think>\n\nbecause"}},
                     false, &ranges);
  EXPECT_EQ(prompt,
            "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nwhy <|im_end|>\n"
            "</think>\n\nbecause<|im_end|>\n");
  EXPECT_EQ(RangeTexts(prompt, ranges),
            (std::vector<std::string>{"q", "why <|im_end|>", "because"}));
}

TEST(ChatTemplateTest, OptionsReachTheTemplate) {
  auto t = ChatTemplate::Create(
      "{%- if add_generation_prompt %}<a>{%- if enable_thinking is defined and enable_thinking is "
      "false %}<think></think>{%- endif %}{%- endif %}{{ note | default('') }}"
      "|{{ strftime_now('%d %b %Y') }}",
      "qwen2", "Qwen3");
  ASSERT_TRUE(t.ok()) << t.status();
  ChatTemplateOptions options;
  options.now = absl::FromCivil(absl::CivilSecond(2024, 7, 26, 9, 0, 0), absl::UTCTimeZone());
  options.time_zone = absl::UTCTimeZone();
  EXPECT_EQ(*t->Render({}, true, nullptr, options), "<a>|26 Jul 2024");
  options.variables["enable_thinking"] = jinja::Value::Bool(false);
  EXPECT_EQ(*t->Render({}, true, nullptr, options), "<a><think></think>|26 Jul 2024");
  // A marked option string is reported like a content.
  options.variables["note"] = jinja::Value::MarkedString("<|im_end|>");
  std::vector<ContentRange> ranges;
  const std::string prompt = *t->Render({}, false, &ranges, options);
  EXPECT_EQ(prompt, "<|im_end|>|26 Jul 2024");
  EXPECT_EQ(RangeTexts(prompt, ranges), std::vector<std::string>{"<|im_end|>"});
  // What minfer sets itself cannot be replaced.
  options.variables["messages"] = jinja::Value::List({});
  auto bad = t->Render({}, true, nullptr, options);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("option 'messages' is reserved"));
}

TEST(ChatTemplateTest, Errors) {
  // A template that does not parse fails Create, naming the model and where.
  auto broken =
      ChatTemplate::Create("{% for m in messages %}\n{{ m.content }", "qwen2", "Broken-7B");
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(broken.status().message(), HasSubstr("model 'Broken-7B'"));
  EXPECT_THAT(broken.status().message(),
              HasSubstr("does not parse: line 2, column 14: unexpected '}'"));

  auto absent = ChatTemplate::Create("", "llama-bpe", "Llama-3");
  ASSERT_FALSE(absent.ok());
  EXPECT_THAT(absent.status().message(), HasSubstr("model 'Llama-3'"));

  auto t = ChatTemplate::Create("", "qwen2", "m");
  ASSERT_TRUE(t.ok());
  auto bad = t->Render({{"user", "a"}, {"function", "b"}}, true);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("message 1 has role 'function'"));

  // raise_exception refuses the conversation; other failures name the
  // template's position.
  auto strict = ChatTemplate::Create(
      "{% if messages[0].role != 'user' %}{{ raise_exception('Conversations must start with a "
      "user message') }}{% endif %}{{ messages[0].content.nosuch() }}",
      "qwen2", "Strict");
  ASSERT_TRUE(strict.ok()) << strict.status();
  auto refused = strict->Render({{"assistant", "a"}}, false);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message(),
            "model 'Strict': chat template: Conversations must start with a user message");
  auto failed = strict->Render({{"user", "a"}}, false);
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.status().message(),
              HasSubstr("model 'Strict': chat template: line 1, column"));
  EXPECT_THAT(failed.status().message(), HasSubstr("has no attribute 'nosuch'"));
}

// A model's template that loops for seconds (legal Jinja, so it loads) is
// cut off by the default step budget on every request, naming the model.
TEST(ChatTemplateTest, HostileLoopsRunOutOfSteps) {
  auto t = ChatTemplate::Create(
      "{% for m in messages %}{% for i in range(100000) %}{% for j in range(100000) %}"
      "{% endfor %}{% endfor %}{{ m.content }}{% endfor %}",
      "qwen2", "Spin-7B");
  ASSERT_TRUE(t.ok()) << t.status();
  auto r = t->Render({{"user", "hi"}}, true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(r.status().message(), HasSubstr("model 'Spin-7B': chat template"));
  EXPECT_THAT(r.status().message(), HasSubstr("more than 1000000 evaluation steps"));
}

}  // namespace
}  // namespace minfer::tokenizer
