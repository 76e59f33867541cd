// The chat template options of a request (v1::Chat.template_kwargs): each
// value read as JSON into a template variable.
//
// Thread-safe (no state).
#ifndef MINFER_DAEMON_API_CHAT_OPTIONS_H_
#define MINFER_DAEMON_API_CHAT_OPTIONS_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/tokenizer/chat_template.h"
#include "minfer/v1/generation.pb.h"

namespace minfer::daemon {

inline constexpr size_t kMaxTemplateKwargs = 64;
inline constexpr size_t kMaxTemplateKwargsBytes = 64 * 1024;

// The options `chat` asks for: every template_kwargs value parsed as JSON
// (bool, integer, float, null, string, list, object, nested as sent; a
// value that is not JSON is taken as the string itself). Strings are marked
// as client text (jinja::Value::MarkedString), so control tokens in them
// are never parsed. INVALID_ARGUMENT naming the key for a name the template
// already receives (messages, add_generation_prompt, bos_token, eos_token)
// or that is not an identifier, for a variable that changes what the
// request means (IsRefusedTemplateKwarg), and for more than
// kMaxTemplateKwargs entries or kMaxTemplateKwargsBytes of keys and values.
absl::StatusOr<tokenizer::ChatTemplateOptions> ChatTemplateOptionsOf(const v1::Chat& chat);

// Template variables that would change what a request means rather than how
// its prompt is rendered: "tools" and "functions" make a template describe
// tools to the model, whose calls minfer parses only for the tools of
// chat.tools (the request's own field for them).
bool IsRefusedTemplateKwarg(absl::string_view key);

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_API_CHAT_OPTIONS_H_
