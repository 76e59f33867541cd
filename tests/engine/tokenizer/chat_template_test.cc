#include "engine/tokenizer/chat_template.h"

#include <string>
#include <vector>

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

TEST(ChatTemplateTest, Errors) {
  auto llama = ChatTemplate::Create("{{ bos_token }}{% for m in messages %}[INST] {{ m.content }}"
                                    " [/INST]{% endfor %}",
                                    "qwen2", "Mistral-7B");
  ASSERT_FALSE(llama.ok());
  EXPECT_EQ(llama.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(llama.status().message(), HasSubstr("model 'Mistral-7B'"));
  EXPECT_THAT(llama.status().message(), HasSubstr("[INST]"));  // shows the template's start

  auto absent = ChatTemplate::Create("", "llama-bpe", "Llama-3");
  ASSERT_FALSE(absent.ok());
  EXPECT_THAT(absent.status().message(), HasSubstr("model 'Llama-3'"));

  auto t = ChatTemplate::Create("", "qwen2", "m");
  ASSERT_TRUE(t.ok());
  auto bad = t->Render({{"user", "a"}, {"tool", "b"}}, true);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("message 1 has role 'tool'"));
}

}  // namespace
}  // namespace minfer::tokenizer
