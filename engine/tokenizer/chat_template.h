// Chat prompts: turns a list of messages into the model's prompt text.
//
// minfer renders ChatML, the format of the Qwen2 family:
//
//   <|im_start|>system\nSYSTEM<|im_end|>\n
//   <|im_start|>user\nUSER<|im_end|>\n
//   <|im_start|>assistant\n            (the generation prompt, optional)
//
// It does not run Jinja. A model's tokenizer.chat_template is *recognized*:
//  - ChatML-shaped (it frames turns with both <|im_start|> and <|im_end|>):
//    rendered as above. When the template hard-codes a default system prompt
//    (a literal '<|im_start|>system\n...<|im_end|>' in its source, as
//    Qwen2's "You are a helpful assistant." and Qwen2.5's "You are Qwen,
//    created by Alibaba Cloud. You are a helpful assistant." do), that prompt
//    is inserted when the conversation does not start with a system message —
//    mirroring what the template itself renders. Qwen3-style templates have
//    no such literal, so nothing is inserted for them.
//  - absent (empty): plain ChatML without a default system prompt for
//    pre-tokenizer "qwen2" models; an error for anything else.
//  - anything else: an error naming the model (minfer does not guess).
// Tool calls, tool messages and "thinking" sections are not rendered.
//
// Immutable after Create; thread-safe.
#ifndef MINFER_ENGINE_TOKENIZER_CHAT_TEMPLATE_H_
#define MINFER_ENGINE_TOKENIZER_CHAT_TEMPLATE_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace minfer::tokenizer {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

// Byte range [begin, end) of a rendered prompt that holds message content.
struct ContentRange {
  size_t begin;
  size_t end;
};

inline constexpr absl::string_view kImStart = "<|im_start|>";
inline constexpr absl::string_view kImEnd = "<|im_end|>";

class ChatTemplate {
 public:
  // Recognizes `template_text` (empty = the model has none) for a model with
  // pre-tokenizer `pre`. FAILED_PRECONDITION naming `model_name` when the
  // template is not ChatML-shaped, or absent for a non-qwen2 model.
  static absl::StatusOr<ChatTemplate> Create(absl::string_view template_text,
                                             absl::string_view pre,
                                             absl::string_view model_name);

  // Renders `messages` (roles system/user/assistant; INVALID_ARGUMENT
  // otherwise) and, with `add_generation_prompt`, the opening of the
  // assistant's turn. When `content` is given, the byte ranges of the
  // message contents (the inserted default system prompt included) are
  // appended to it, so an encoder can refuse special tokens inside them.
  absl::StatusOr<std::string> Render(absl::Span<const ChatMessage> messages,
                                     bool add_generation_prompt,
                                     std::vector<ContentRange>* content = nullptr) const;

  // The default system prompt taken from the template; empty when none.
  const std::string& default_system_prompt() const { return default_system_prompt_; }

 private:
  ChatTemplate() = default;

  std::string model_name_;
  std::string default_system_prompt_;
};

// A ChatML template in the shape of Qwen2.5 (Instruct) models' (explicit or
// default system prompt, framed turns), written for minfer's tests and model
// writers; it is not Qwen's published template text.
absl::string_view Qwen25ChatTemplate();

}  // namespace minfer::tokenizer

#endif  // MINFER_ENGINE_TOKENIZER_CHAT_TEMPLATE_H_
