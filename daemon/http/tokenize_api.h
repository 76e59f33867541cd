// The tokenizer utility routes of the HTTP API, under vLLM's, llama-server's
// and Anthropic's names; no HTTP here (the server resolves the model and the
// tenant, then calls these with the model's tokenizer):
//
//   POST /tokenize      vLLM: {model, prompt, add_special_tokens?} or
//                       {model, messages, tools?, tool_choice?,
//                        add_generation_prompt?, chat_template_kwargs?}
//                       -> {count, max_model_len, tokens[, token_strs]}
//   POST /detokenize    vLLM: {model, tokens} -> {prompt}
//   POST /apply-template  llama-server: {model?, messages, tools?, ...}
//                       -> {prompt}, the rendered chat prompt
//   POST /v1/messages/count_tokens  Anthropic: the body of /v1/messages
//                       (max_tokens not needed) -> {input_tokens}
//
// Chats are read by the chat API's own parsers (openai::ParseRequest,
// anthropic::ParseMessagesRequest) into v1::Chat and rendered by
// ChatTemplateInputOf and the tokenizer's EncodeChat / RenderChat, exactly
// as a generation renders them: tools, tool history and template kwargs
// come out as in the prompt of the same chat sent to /v1/chat/completions
// (/v1/messages for count_tokens), and the count equals that request's
// prompt_tokens.
//
// A prompt is encoded as vLLM's (Hugging Face) tokenizers encode it:
// control tokens written in it are recognized, and add_special_tokens
// (default true) adds the BOS the model asks for (none for Qwen2).
// add_special_tokens does not apply to messages: their ids are the
// generation's, whose BOS rule is the chat template's (tokenizer.h).
//
// Errors: openai::FieldErrors naming the API's field ("prompt",
// "messages[1].content", "tools[0].function.name", "tokens[3]").
//
// Thread-safe (no state).
#ifndef MINFER_DAEMON_HTTP_TOKENIZE_API_H_
#define MINFER_DAEMON_HTTP_TOKENIZE_API_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/http/api_reply.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace minfer::daemon::tokenize_api {

// The body's "model": a string, or nullopt when absent (FieldError for
// another type).
absl::StatusOr<std::optional<std::string>> ModelOf(const nlohmann::ordered_json& body);

// POST /tokenize. `max_model_len`: the model's context as served (n_ctx);
// `max_ids`: the most tokens an answer may carry (the server's
// max_prompt_tokens).
absl::StatusOr<nlohmann::json> Tokenize(const nlohmann::ordered_json& body,
                                        const tokenizer::Tokenizer& tok, int64_t max_model_len,
                                        int64_t max_ids);

// POST /detokenize. At most `max_ids` tokens; each an integer id of the
// vocabulary (else a FieldError naming "tokens[i]").
absl::StatusOr<nlohmann::json> Detokenize(const nlohmann::ordered_json& body,
                                          const tokenizer::Tokenizer& tok, int64_t max_ids);

// POST /apply-template: the prompt a chat generation would encode
// (add_generation_prompt true unless the body says false).
absl::StatusOr<nlohmann::json> ApplyTemplate(const nlohmann::ordered_json& body,
                                             const tokenizer::Tokenizer& tok);

// POST /v1/messages/count_tokens: the answer, 200 and {input_tokens}, or
// the refusal in Anthropic's shape (anthropic::ErrorFor, fields named as
// /v1/messages names them).
http_api::ErrorReply CountTokens(const nlohmann::ordered_json& body,
                                 const tokenizer::Tokenizer& tok);

}  // namespace minfer::daemon::tokenize_api

#endif  // MINFER_DAEMON_HTTP_TOKENIZE_API_H_
