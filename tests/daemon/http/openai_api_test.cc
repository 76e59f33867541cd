// The OpenAI API's JSON <-> minfer's generation request and stream
// (daemon/http/openai_api.h): each field's translation, the refusals, the error
// shapes, and the chunks and responses a generation turns into. Expected
// values follow OpenAI's API reference; token strings are checked against
// the tokenizer's own bytes.
#include "daemon/http/openai_api.h"

#include <functional>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/api/constraint.h"
#include "daemon/http/anthropic_api.h"
#include "daemon/http/responses_api.h"
#include "daemon/serving/tenants.h"
#include "engine/base/field_error.h"
#include "engine/runtime/model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_models.h"

namespace minfer::daemon::openai {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

ParsedRequest MustParse(Endpoint e, const char* body) {
  absl::StatusOr<ParsedRequest> r = ParseRequest(e, json::parse(body));
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : ParsedRequest();
}

absl::Status ParseError(Endpoint e, const char* body) {
  absl::StatusOr<ParsedRequest> r = ParseRequest(e, json::parse(body));
  return r.ok() ? absl::OkStatus() : r.status();
}

TEST(OpenAiParseTest, ChatFieldsMapOntoTheGenerateRequest) {
  ParsedRequest r = MustParse(Endpoint::kChatCompletions, R"({
    "model": "prod",
    "messages": [{"role": "developer", "content": "Be brief."},
                 {"role": "user", "content": [{"type": "text", "text": "Hello, "},
                                              {"type": "text", "text": "world"}]},
                 {"role": "assistant", "content": null},
                 {"role": "user", "content": "again", "name": "bob"}],
    "max_completion_tokens": 17, "temperature": 0.5, "top_p": 0.9, "seed": -3,
    "stop": ["\n\n", "", "END"], "presence_penalty": 0.25, "frequency_penalty": -0.5,
    "logprobs": true, "top_logprobs": 3, "user": "u1", "n": 1,
    "top_k": 40, "min_p": 0.05, "repeat_penalty": 1.1, "repeat_last_n": 32, "ignore_eos": true,
    "stream": true, "stream_options": {"include_usage": true}, "return_token_ids": true,
    "some_future_field": {"ignored": true}
  })");
  const v1::GenerateRequest& g = r.generate;
  EXPECT_EQ(g.model(), "prod");
  ASSERT_EQ(g.chat().messages_size(), 4);
  EXPECT_EQ(g.chat().messages(0).role(), "system");
  EXPECT_EQ(g.chat().messages(0).content(), "Be brief.");
  EXPECT_EQ(g.chat().messages(1).role(), "user");
  EXPECT_EQ(g.chat().messages(1).content(), "Hello, world");
  EXPECT_EQ(g.chat().messages(2).role(), "assistant");
  EXPECT_EQ(g.chat().messages(2).content(), "");
  EXPECT_EQ(g.stopping().max_tokens(), 17);
  ASSERT_EQ(g.stopping().stop_size(), 2);  // the empty one dropped
  EXPECT_EQ(g.stopping().stop(0), "\n\n");
  EXPECT_EQ(g.stopping().stop(1), "END");
  EXPECT_TRUE(g.stopping().ignore_eos());
  EXPECT_FLOAT_EQ(g.sampling().temperature(), 0.5f);
  EXPECT_FLOAT_EQ(g.sampling().top_p(), 0.9f);
  EXPECT_EQ(g.sampling().seed(), static_cast<uint64_t>(int64_t{-3}));
  EXPECT_FLOAT_EQ(g.sampling().presence_penalty(), 0.25f);
  EXPECT_FLOAT_EQ(g.sampling().frequency_penalty(), -0.5f);
  EXPECT_EQ(g.sampling().top_k(), 40);
  EXPECT_FLOAT_EQ(g.sampling().min_p(), 0.05f);
  EXPECT_FLOAT_EQ(g.sampling().repetition_penalty(), 1.1f);
  EXPECT_EQ(g.sampling().penalty_last_n(), 32);
  EXPECT_EQ(g.options().top_logprobs(), 3);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 3);
  EXPECT_TRUE(r.return_token_ids);
}

TEST(OpenAiParseTest, ChatTemplateKwargsTravelAsJsonText) {
  ParsedRequest r = MustParse(Endpoint::kChatCompletions, R"({
    "model": "m", "messages": [{"role": "user", "content": "hi"}],
    "chat_template_kwargs": {"enable_thinking": false, "who": "Bob", "n": 3, "l": [1, 2]}
  })");
  const auto& kw = r.generate.chat().template_kwargs();
  ASSERT_EQ(kw.size(), 4u);
  EXPECT_EQ(kw.at("enable_thinking"), "false");
  EXPECT_EQ(kw.at("who"), "\"Bob\"");
  EXPECT_EQ(kw.at("n"), "3");
  EXPECT_EQ(kw.at("l"), "[1,2]");
  auto bad = ParseRequest(Endpoint::kChatCompletions, json::parse(R"({
    "model": "m", "messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": [1]
  })"));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "chat_template_kwargs")) << bad.status();
}

// vLLM's cache_salt, on both endpoints: a string of 1 to 256 bytes, carried
// into the generation request (which keys the prefix cache by it).
TEST(OpenAiParseTest, CacheSaltIsCarriedAndChecked) {
  EXPECT_EQ(MustParse(Endpoint::kChatCompletions,
                      R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
                          "cache_salt": "user-17"})")
                .generate.cache_salt(),
            "user-17");
  EXPECT_EQ(MustParse(Endpoint::kCompletions,
                      R"({"model": "m", "prompt": "x", "cache_salt": "team/a b"})")
                .generate.cache_salt(),
            "team/a b");
  EXPECT_EQ(MustParse(Endpoint::kCompletions, R"({"model": "m", "prompt": "x"})")
                .generate.cache_salt(),
            "");
  const std::string longest(256, 's');
  EXPECT_EQ(MustParse(Endpoint::kCompletions,
                      (R"({"model": "m", "prompt": "x", "cache_salt": ")" + longest + R"("})")
                          .c_str())
                .generate.cache_salt(),
            longest);
  struct Case {
    Endpoint endpoint;
    std::string body, message;
  };
  const Case cases[] = {
      {Endpoint::kCompletions, R"({"model": "m", "prompt": "x", "cache_salt": 5})",
       "cache_salt must be a string, got an integer"},
      {Endpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "cache_salt": ["a"]})",
       "cache_salt must be a string, got an array"},
      {Endpoint::kCompletions, R"({"model": "m", "prompt": "x", "cache_salt": ""})",
       "cache_salt must be 1 to 256 bytes, got 0"},
      {Endpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "cache_salt": ")" +
           std::string(257, 's') + R"("})",
       "cache_salt must be 1 to 256 bytes, got 257"},
  };
  for (const Case& c : cases) {
    absl::Status st = ParseError(c.endpoint, c.body.c_str());
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.body;
    EXPECT_EQ(Param(st), "cache_salt") << c.body;
    EXPECT_EQ(st.message(), c.message) << c.body;
    EXPECT_EQ(ApiErrorFor(st).http_status, 400);
  }
  // The generation path's own check (gRPC's) renames to the same field.
  absl::Status grpc = ToApiFieldError(
      Endpoint::kCompletions, InvalidField("cache_salt", "300 bytes, at most 256"));
  EXPECT_EQ(Param(grpc), "cache_salt");
}

// Fields that would change what the response means are refused, naming
// them; their harmless values (no tool selected, text output) are taken.
TEST(OpenAiParseTest, MeaningChangingFieldsAreRefused) {
  const std::string chat = R"("model": "m", "messages": [{"role": "user", "content": "x"}])";
  struct Case {
    std::string extra, param, message;
  };
  const Case refused[] = {
      {R"("chat_template_kwargs": {"enable_thinking": false,
                                   "tools": [{"type": "function", "function": {"name": "f"}}]})",
       "chat_template_kwargs.tools",
       "chat_template_kwargs.tools is not supported: give tools in the request's tools field"},
      {R"("chat_template_kwargs": {"functions": []})", "chat_template_kwargs.functions",
       "chat_template_kwargs.functions is not supported"},
      {R"("tool_choice": "required")", "tool_choice",
       "tool_choice names a tool call but no tools are given"},
      {R"("tool_choice": {"type": "function", "function": {"name": "f"}})", "tool_choice",
       "tool_choice names a tool call but no tools are given"},
      {R"("function_call": {"name": "f"})", "function_call", "function_call is not supported"},
      {R"("functions": [{"name": "f"}])", "functions", "functions is not supported: use tools"},
      {R"("audio": {"voice": "alloy", "format": "wav"})", "audio", "audio is not supported"},
      {R"("modalities": ["text", "audio"])", "modalities",
       "modalities: only [\"text\"] is supported (no audio output)"},
      {R"("modalities": "text")", "modalities", "modalities must be an array, got a string"},
      {R"("prediction": {"type": "content", "content": "x"})", "prediction",
       "prediction is not supported"},
      {R"("web_search_options": {})", "web_search_options", "web_search_options is not supported"},
      {R"("parallel_tool_calls": "yes")", "parallel_tool_calls",
       "parallel_tool_calls must be a boolean, got a string"},
  };
  for (const Case& c : refused) {
    const std::string body = "{" + chat + ", " + c.extra + "}";
    absl::Status st = ParseError(Endpoint::kChatCompletions, body.c_str());
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << body;
    EXPECT_EQ(Param(st), c.param) << body;
    EXPECT_THAT(std::string(st.message()), HasSubstr(c.message)) << body;
    const ApiError e = ApiErrorFor(st);
    EXPECT_EQ(e.http_status, 400) << body;
    EXPECT_EQ(e.param, c.param) << body;
  }
  // The completions endpoint refuses them too.
  EXPECT_EQ(Param(ParseError(Endpoint::kCompletions,
                             R"({"model": "m", "prompt": "x", "audio": {"voice": "alloy"}})")),
            "audio");
  for (const char* extra : {R"("tool_choice": "none")", R"("tool_choice": "auto")",
                            R"("function_call": "none")", R"("parallel_tool_calls": false)",
                            R"("parallel_tool_calls": true)", R"("modalities": ["text"])",
                            R"("audio": null, "prediction": null, "tool_choice": null)",
                            R"("tools": [], "functions": [])"}) {
    const std::string body = "{" + chat + ", " + extra + "}";
    EXPECT_TRUE(ParseError(Endpoint::kChatCompletions, body.c_str()).ok()) << body;
  }
}

TEST(OpenAiParseTest, UnsetFieldsStayUnset) {
  ParsedRequest r = MustParse(Endpoint::kChatCompletions,
                              R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
                                  "temperature": null, "stop": null, "seed": null})");
  EXPECT_FALSE(r.generate.sampling().has_temperature());
  EXPECT_FALSE(r.generate.sampling().has_seed());
  EXPECT_FALSE(r.generate.stopping().has_max_tokens());
  EXPECT_EQ(r.generate.stopping().stop_size(), 0);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.logprobs);
  // No logprobs asked: the sampler skips them.
  EXPECT_EQ(r.generate.options().top_logprobs(), 0);
}

// minfer's extension "speculative": false opts the request out of the
// model's speculative decoding; absent (or null) leaves the proto field
// unset, which means true.
TEST(OpenAiParseTest, SpeculativeOptOutReachesTheGenerateRequest) {
  for (Endpoint e : {Endpoint::kChatCompletions, Endpoint::kCompletions}) {
    const std::string input = e == Endpoint::kChatCompletions
                                  ? R"("messages": [{"role": "user", "content": "x"}])"
                                  : R"("prompt": "x")";
    auto parse = [&](const std::string& extra) {
      return MustParse(e, ("{\"model\": \"m\", " + input + extra + "}").c_str()).generate;
    };
    const v1::GenerateRequest off = parse(R"(, "speculative": false)");
    EXPECT_TRUE(off.has_speculative());
    EXPECT_FALSE(off.speculative());
    const v1::GenerateRequest on = parse(R"(, "speculative": true)");
    EXPECT_TRUE(on.has_speculative());
    EXPECT_TRUE(on.speculative());
    EXPECT_FALSE(parse("").has_speculative());
    EXPECT_FALSE(parse(R"(, "speculative": null)").has_speculative());
  }
}

// The same extension on the Anthropic and Responses routes, which read
// their bodies apart; a non-boolean is refused naming the field.
TEST(OpenAiParseTest, SpeculativeOptOutOnTheAnthropicAndResponsesRoutes) {
  const auto messages = [](const std::string& extra) {
    return anthropic::ParseMessagesRequest(nlohmann::ordered_json::parse(
        R"({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}])" +
        extra + "}"));
  };
  const auto responses = [](const std::string& extra) {
    return responses::ParseResponsesRequest(
        nlohmann::ordered_json::parse(R"({"model": "m", "input": "x")" + extra + "}"));
  };
  for (const auto& parse : {std::function<absl::StatusOr<http_api::ApiRequest>(
                                const std::string&)>(messages),
                            std::function<absl::StatusOr<http_api::ApiRequest>(
                                const std::string&)>(responses)}) {
    auto off = parse(R"(, "speculative": false)");
    ASSERT_TRUE(off.ok()) << off.status();
    EXPECT_TRUE(off->generate.has_speculative());
    EXPECT_FALSE(off->generate.speculative());
    auto unset = parse("");
    ASSERT_TRUE(unset.ok()) << unset.status();
    EXPECT_FALSE(unset->generate.has_speculative());
    auto bad = parse(R"(, "speculative": "no")");
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(bad.status().message()), HasSubstr("speculative"));
  }
}

TEST(OpenAiParseTest, LogprobsWithoutAlternativesStillAskTheSamplerForOne) {
  ParsedRequest r = MustParse(Endpoint::kChatCompletions,
                              R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
                                  "logprobs": true})");
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 0);
  EXPECT_EQ(r.generate.options().top_logprobs(), 1);
  ParsedRequest c = MustParse(Endpoint::kCompletions,
                              R"({"model": "m", "prompt": "x", "logprobs": 2})");
  EXPECT_TRUE(c.logprobs);
  EXPECT_EQ(c.top_logprobs, 2);
  EXPECT_EQ(c.generate.options().top_logprobs(), 2);
}

TEST(OpenAiParseTest, CompletionPromptForms) {
  EXPECT_EQ(MustParse(Endpoint::kCompletions, R"({"model": "m", "prompt": "abc"})").generate.text(),
            "abc");
  EXPECT_EQ(
      MustParse(Endpoint::kCompletions, R"({"model": "m", "prompt": ["abc"]})").generate.text(),
      "abc");
  const v1::GenerateRequest ids =
      MustParse(Endpoint::kCompletions, R"({"model": "m", "prompt": [5, 6, 7]})").generate;
  ASSERT_EQ(ids.tokens().ids_size(), 3);
  EXPECT_EQ(ids.tokens().ids(2), 7);
  const v1::GenerateRequest nested =
      MustParse(Endpoint::kCompletions, R"({"model": "m", "prompt": [[9, 8]]})").generate;
  ASSERT_EQ(nested.tokens().ids_size(), 2);
  EXPECT_EQ(nested.tokens().ids(0), 9);
  // 5.0 is an integer (JavaScript writes no other kind).
  EXPECT_EQ(MustParse(Endpoint::kCompletions, R"({"model": "m", "prompt": "x", "max_tokens": 5.0})")
                .generate.stopping()
                .max_tokens(),
            5);
}

struct BadCase {
  Endpoint endpoint;
  const char* body;
  const char* param;
  const char* message;
};

TEST(OpenAiParseTest, BadFieldsAreRefusedNamingTheField) {
  const BadCase cases[] = {
      {Endpoint::kChatCompletions, R"({"messages": []})", "model", "model is required"},
      {Endpoint::kChatCompletions, R"({"model": 5, "messages": []})", "model",
       "model must be a string, got an integer"},
      {Endpoint::kChatCompletions, R"({"model": "m"})", "messages", "messages is required"},
      {Endpoint::kChatCompletions, R"({"model": "m", "messages": []})", "messages",
       "messages must not be empty"},
      {Endpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "function", "content": "x"}]})",
       "messages[0].role", "messages[0].role 'function' is not supported"},
      {Endpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content[0].type", "'image_url' is not supported"},
      {Endpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"})",
       "temperature", "temperature must be a number, got a string"},
      {Endpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 2.5})",
       "temperature", "temperature must be in [0, 2], got 2.5"},
      {Endpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "top_p": 0})", "top_p",
       "top_p must be in (0, 1]"},
      {Endpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0})",
       "max_tokens", "max_tokens must be >= 1, got 0"},
      {Endpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1.5})",
       "max_tokens", "max_tokens must be an integer, got a number"},
      {Endpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 2})", "n",
       "n = 2 is not supported"},
      {Endpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{}]})",
       "tools[0].type", "tools[0].type must be a string, got null"},
      {Endpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logit_bias": {"5": 1}})",
       "logit_bias", "logit_bias is not supported"},
      {Endpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
           "response_format": {"type": "xml"}})",
       "response_format.type",
       "response_format.type 'xml' is not supported: text, json_object or json_schema"},
      {Endpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})",
       "top_logprobs", "top_logprobs needs logprobs: true"},
      {Endpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": true,
           "top_logprobs": 21})",
       "top_logprobs", "top_logprobs must be in [0, 20], got 21"},
      {Endpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
           "stream_options": {"include_usage": true}})",
       "stream_options", "only allowed with stream: true"},
      {Endpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "stop": [1]})", "stop[0]",
       "stop[0] must be a string, got an integer"},
      {Endpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": "yes"})",
       "stream", "stream must be a boolean, got a string"},
      {Endpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "speculative": "no"})",
       "speculative", "speculative must be a boolean, got a string"},
      {Endpoint::kCompletions, R"({"model": "m", "prompt": "x", "speculative": 0})",
       "speculative", "speculative must be a boolean, got an integer"},
      {Endpoint::kCompletions, R"({"model": "m", "prompt": ["a", "b"]})", "prompt",
       "prompt holds 2 prompts"},
      {Endpoint::kCompletions, R"({"model": "m", "prompt": {}})", "prompt",
       "prompt must be a string, an array of one string or an array of token ids"},
      {Endpoint::kCompletions, R"({"model": "m", "prompt": [1, "x"]})", "prompt[1]",
       "must be an integer token id"},
      {Endpoint::kCompletions, R"({"model": "m", "prompt": "x", "echo": true})", "echo",
       "echo is not supported"},
      {Endpoint::kCompletions, R"({"model": "m", "prompt": "x", "logprobs": true})", "logprobs",
       "logprobs must be an integer, got a boolean"},
  };
  for (const BadCase& c : cases) {
    absl::Status s = ParseError(c.endpoint, c.body);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.body;
    EXPECT_EQ(Param(s), c.param) << c.body;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message)) << c.body;
    const ApiError e = ApiErrorFor(s);
    EXPECT_EQ(e.http_status, 400);
    EXPECT_EQ(e.type, "invalid_request_error");
  }
  EXPECT_FALSE(ParseRequest(Endpoint::kCompletions, json::array()).ok());
}

TEST(OpenAiParseTest, GenerationPathErrorsAreRenamedToTheApiFields) {
  absl::Status top_p = ToApiFieldError(Endpoint::kChatCompletions,
                                       InvalidFieldThat("sampling.top_p", "must be in (0, 1], got 2"));
  EXPECT_EQ(Param(top_p), "top_p");
  EXPECT_EQ(top_p.message(), "top_p must be in (0, 1], got 2");
  absl::Status max_tokens =
      ToApiFieldError(Endpoint::kCompletions,
                      InvalidFieldThat("stopping.max_tokens", "9999 exceeds the server's limit of 4096"));
  EXPECT_EQ(Param(max_tokens), "max_tokens");
  EXPECT_EQ(max_tokens.message(), "max_tokens 9999 exceeds the server's limit of 4096");
  absl::Status ctx = ToApiFieldError(
      Endpoint::kChatCompletions,
      WithReason(InvalidField("prompt", "300 tokens do not fit the model's context of 256 (one "
                                        "position must remain for the completion)"),
                 kContextLengthExceeded));
  EXPECT_EQ(Param(ctx), "messages");
  EXPECT_THAT(std::string(ctx.message()), HasSubstr("messages: 300 tokens do not fit"));
  EXPECT_EQ(ApiErrorFor(ctx).code, "context_length_exceeded");
  absl::Status empty = ToApiFieldError(Endpoint::kCompletions, InvalidField("text", "the prompt is empty"));
  EXPECT_EQ(Param(empty), "prompt");
  EXPECT_EQ(empty.message(), "prompt: the prompt is empty");
  // A client's token id: its index in the API's prompt.
  absl::Status id = ToApiFieldError(Endpoint::kCompletions,
                                    InvalidField("tokens.ids[3]", "token id 9 is outside"));
  EXPECT_EQ(Param(id), "prompt[3]");
  EXPECT_EQ(id.message(), "prompt[3]: token id 9 is outside");
  EXPECT_EQ(Param(ToApiFieldError(Endpoint::kChatCompletions,
                                  InvalidFieldThat("sampling.penalty_last_n", "must be >= -1"))),
            "repeat_last_n");
  // Not a field error: unchanged, whatever its message says.
  absl::Status nf = ToApiFieldError(Endpoint::kCompletions, absl::NotFoundError("no model 'x'"));
  EXPECT_EQ(nf, absl::NotFoundError("no model 'x'"));
  const absl::Status words = absl::InvalidArgumentError("sampling.top_p must be in (0, 1]");
  EXPECT_EQ(ToApiFieldError(Endpoint::kChatCompletions, words), words);
}

// The error code comes from the status's reason, never from its words.
TEST(OpenAiErrorTest, ContextLengthExceededComesFromTheReasonNotTheMessage) {
  EXPECT_EQ(ApiErrorFor(WithReason(absl::InvalidArgumentError("too long"), kContextLengthExceeded))
                .code,
            "context_length_exceeded");
  EXPECT_EQ(ApiErrorFor(absl::InvalidArgumentError(
                            "prompt: 300 tokens do not fit the model's context of 256"))
                .code,
            "");
  const ApiError e = ApiErrorFor(ToApiFieldError(
      Endpoint::kCompletions,
      WithReason(InvalidField("prompt", "long"), kContextLengthExceeded)));
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_EQ(e.param, "prompt");
  EXPECT_EQ(e.http_status, 400);
}

// Structured outputs: every API's constraint field lands in the proto's
// oneof, with the API field remembered for the constraint's errors.
struct ConstraintCase {
  Endpoint endpoint;
  const char* body;  // the request's constraint fields (model and input added)
  v1::GenerateRequest::ConstraintCase kind;
  const char* param;
};

ParsedRequest ParseWith(Endpoint e, const std::string& fields) {
  const std::string body =
      e == Endpoint::kChatCompletions
          ? absl::StrCat(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], )",
                         fields, "}")
          : absl::StrCat(R"({"model": "m", "prompt": "x", )", fields, "}");
  absl::StatusOr<ParsedRequest> r = ParseRequest(e, nlohmann::ordered_json::parse(body));
  EXPECT_TRUE(r.ok()) << fields << ": " << r.status();
  return r.ok() ? *r : ParsedRequest();
}

absl::Status ParseErrorWith(Endpoint e, const std::string& fields) {
  const std::string body = absl::StrCat(
      R"({"model": "m", "messages": [{"role": "user", "content": "x"}], )", fields, "}");
  absl::StatusOr<ParsedRequest> r = ParseRequest(e, nlohmann::ordered_json::parse(body));
  return r.ok() ? absl::OkStatus() : r.status();
}

TEST(OpenAiConstraintTest, EachApiFieldMapsOntoTheOneof) {
  using G = v1::GenerateRequest;
  const ConstraintCase cases[] = {
      {Endpoint::kChatCompletions,
       R"("response_format": {"type": "json_schema", "json_schema": {"name": "person",
           "strict": true, "description": "d", "schema": {"type": "object"}}})",
       G::kJsonSchema, "response_format.json_schema.schema"},
      {Endpoint::kCompletions, R"("response_format": {"type": "json_object"})", G::kJsonObject,
       "response_format"},
      {Endpoint::kChatCompletions,
       R"("response_format": {"type": "json_object", "schema": {"type": "array"}})",
       G::kJsonSchema, "response_format.schema"},
      {Endpoint::kCompletions, R"("grammar": "root ::= \"yes\" | \"no\"")", G::kGbnf, "grammar"},
      {Endpoint::kChatCompletions, R"("json_schema": {"type": "integer"})", G::kJsonSchema,
       "json_schema"},
      {Endpoint::kChatCompletions, R"("structured_outputs": {"json": {"type": "string"}})",
       G::kJsonSchema, "structured_outputs.json"},
      {Endpoint::kChatCompletions, R"("structured_outputs": {"json": "{\"type\": \"null\"}"})",
       G::kJsonSchema, "structured_outputs.json"},
      {Endpoint::kCompletions, R"("structured_outputs": {"regex": "[a-z]+"})", G::kRegex,
       "structured_outputs.regex"},
      {Endpoint::kCompletions, R"("structured_outputs": {"choice": ["a", "b"]})", G::kChoice,
       "structured_outputs.choice"},
      {Endpoint::kCompletions, R"("structured_outputs": {"grammar": "root ::= \"x\""})", G::kGbnf,
       "structured_outputs.grammar"},
      {Endpoint::kChatCompletions, R"("structured_outputs": {"json_object": true})",
       G::kJsonObject, "structured_outputs.json_object"},
      {Endpoint::kChatCompletions, R"("guided_json": {"type": "boolean"})", G::kJsonSchema,
       "guided_json"},
      {Endpoint::kChatCompletions, R"("guided_regex": "\\d+")", G::kRegex, "guided_regex"},
      {Endpoint::kChatCompletions, R"("guided_choice": ["x"])", G::kChoice, "guided_choice"},
      {Endpoint::kChatCompletions, R"("guided_grammar": "root ::= \"x\"")", G::kGbnf,
       "guided_grammar"},
      {Endpoint::kChatCompletions, R"("guided_json_object": true)", G::kJsonObject,
       "guided_json_object"},
  };
  for (const ConstraintCase& c : cases) {
    SCOPED_TRACE(c.body);
    ParsedRequest r = ParseWith(c.endpoint, c.body);
    EXPECT_EQ(r.generate.constraint_case(), c.kind);
    EXPECT_EQ(r.constraint_param, c.param);
    EXPECT_FALSE(r.generate.has_json_max_whitespace());
  }
  ParsedRequest schema = ParseWith(Endpoint::kChatCompletions, R"("json_schema": {"type": "integer"})");
  EXPECT_EQ(schema.generate.json_schema(), R"({"type":"integer"})");
  ParsedRequest regex = ParseWith(Endpoint::kCompletions, R"("structured_outputs": {"regex": "[a-z]+"})");
  EXPECT_EQ(regex.generate.regex(), "[a-z]+");
  ParsedRequest choice = ParseWith(Endpoint::kCompletions, R"("guided_choice": ["x", "", "y z"])");
  EXPECT_THAT(choice.generate.choice().choices(), ::testing::ElementsAre("x", "", "y z"));
  ParsedRequest gbnf = ParseWith(Endpoint::kCompletions, R"("grammar": "root ::= [0-9]+")");
  EXPECT_EQ(gbnf.generate.gbnf(), "root ::= [0-9]+");
  ParsedRequest text_schema =
      ParseWith(Endpoint::kChatCompletions, R"("structured_outputs": {"json": "{\"type\": \"null\"}"})");
  EXPECT_EQ(text_schema.generate.json_schema(), R"({"type": "null"})");
}

TEST(OpenAiConstraintTest, NoConstraintForTextFormatsAndEmptyGrammars) {
  for (const char* fields :
       {R"("response_format": {"type": "text"})", R"("grammar": "")", R"("response_format": null)",
        R"("structured_outputs": {"json_object": false, "regex": null})",
        R"("guided_json_object": false)"}) {
    ParsedRequest r = ParseWith(Endpoint::kChatCompletions, fields);
    EXPECT_EQ(r.generate.constraint_case(), v1::GenerateRequest::CONSTRAINT_NOT_SET) << fields;
    EXPECT_EQ(r.constraint_param, "") << fields;
  }
}

TEST(OpenAiConstraintTest, SchemasKeepTheirPropertyOrder) {
  // The order properties are generated in is the order they are written:
  // the body is read in key order, not sorted.
  ParsedRequest r = ParseWith(Endpoint::kChatCompletions, R"("response_format": {
      "type": "json_schema", "json_schema": {"name": "p", "schema": {
        "type": "object", "properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer"},
        "mid": {"type": "boolean"}}, "required": ["zeta", "alpha", "mid"]}}})");
  EXPECT_EQ(r.generate.json_schema(),
            R"({"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"integer"},)"
            R"("mid":{"type":"boolean"}},"required":["zeta","alpha","mid"]})");
  // OpenAI's schema is optional: any JSON value then.
  ParsedRequest any = ParseWith(Endpoint::kChatCompletions,
                                R"("response_format": {"type": "json_schema", "json_schema": {"name": "n"}})");
  EXPECT_EQ(any.generate.json_schema(), "{}");
}

TEST(OpenAiConstraintTest, DisableAnyWhitespaceMakesJsonCompact) {
  ParsedRequest r = ParseWith(Endpoint::kChatCompletions,
                              R"("structured_outputs": {"json": {"type": "object"},
                                 "disable_any_whitespace": true})");
  ASSERT_TRUE(r.generate.has_json_max_whitespace());
  EXPECT_EQ(r.generate.json_max_whitespace(), 0);
  // Not JSON: whitespace is the regex's business (vLLM ignores it too).
  ParsedRequest regex = ParseWith(Endpoint::kChatCompletions,
                                  R"("structured_outputs": {"regex": "a b",
                                     "disable_any_whitespace": true})");
  EXPECT_FALSE(regex.generate.has_json_max_whitespace());
}

// vLLM's disable_additional_properties: true closes objects whose schema
// leaves additionalProperties out (the server's default too), false opens
// them; it means nothing without a schema.
TEST(OpenAiConstraintTest, DisableAdditionalPropertiesClosesObjects) {
  ParsedRequest r = ParseWith(Endpoint::kChatCompletions,
                              R"("structured_outputs": {"json": {"type": "object"},
                                 "disable_additional_properties": true})");
  ASSERT_TRUE(r.generate.has_json_closed_objects());
  EXPECT_TRUE(r.generate.json_closed_objects());
  ParsedRequest off = ParseWith(Endpoint::kChatCompletions,
                                R"("structured_outputs": {"json": {"type": "object"},
                                   "disable_additional_properties": false})");
  ASSERT_TRUE(off.generate.has_json_closed_objects());
  EXPECT_FALSE(off.generate.json_closed_objects());
  ParsedRequest unset = ParseWith(Endpoint::kChatCompletions,
                                  R"("structured_outputs": {"json": {"type": "object"}})");
  EXPECT_FALSE(unset.generate.has_json_closed_objects());
  ParsedRequest regex = ParseWith(Endpoint::kChatCompletions,
                                  R"("structured_outputs": {"regex": "a",
                                     "disable_additional_properties": true})");
  EXPECT_FALSE(regex.generate.has_json_closed_objects());
}

TEST(OpenAiConstraintTest, MoreThanOneConstraintIsRefusedNamingThem) {
  struct Conflict {
    const char* fields;
    const char* param;
    const char* message;
  };
  const Conflict cases[] = {
      {R"("response_format": {"type": "json_object"}, "grammar": "root ::= \"x\"")", "grammar",
       "only one output constraint per request, got response_format and grammar"},
      {R"("json_schema": {}, "structured_outputs": {"regex": "x"})", "structured_outputs.regex",
       "only one output constraint per request, got json_schema and structured_outputs.regex"},
      {R"("structured_outputs": {"json": {}, "choice": ["a"]})", "structured_outputs.choice",
       "only one output constraint per request, got structured_outputs.json and "
       "structured_outputs.choice"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {}}},
          "guided_choice": ["a"])",
       "guided_choice",
       "only one output constraint per request, got response_format.json_schema.schema and "
       "guided_choice"},
  };
  for (const Conflict& c : cases) {
    absl::Status s = ParseErrorWith(Endpoint::kChatCompletions, c.fields);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.fields;
    EXPECT_EQ(Param(s), c.param) << c.fields;
    EXPECT_EQ(s.message(), c.message) << c.fields;
  }
}

TEST(OpenAiConstraintTest, MalformedConstraintFieldsAreRefusedNamingTheField) {
  struct Bad {
    const char* fields;
    const char* param;
    const char* message;
  };
  const Bad cases[] = {
      {R"("response_format": "json")", "response_format",
       "response_format must be an object, got a string"},
      {R"("response_format": {})", "response_format.type",
       "response_format.type is required: text, json_object or json_schema"},
      {R"("response_format": {"type": "json_schema"})", "response_format.json_schema",
       "response_format.json_schema is required with type json_schema"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"schema": {}}})",
       "response_format.json_schema.name", "response_format.json_schema.name is required"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "a b"}})",
       "response_format.json_schema.name",
       "response_format.json_schema.name must be 1 to 64 characters of a-z, A-Z, 0-9, '_' and "
       "'-'"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "a",
          "schema": "{}"}})",
       "response_format.json_schema.schema",
       "response_format.json_schema.schema must be a JSON Schema (an object), got a string"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "a",
          "strict": "yes"}})",
       "response_format.json_schema.strict",
       "response_format.json_schema.strict must be a boolean, got a string"},
      {R"("grammar": 5)", "grammar", "grammar must be a string, got an integer"},
      {R"("structured_outputs": {"choice": ["a", 1]})", "structured_outputs.choice[1]",
       "structured_outputs.choice[1] must be a string, got an integer"},
      {R"("structured_outputs": {"whitespace_pattern": " ?"})",
       "structured_outputs.whitespace_pattern",
       "structured_outputs.whitespace_pattern is not supported (disable_any_whitespace is)"},
      {R"("structured_outputs": {"structural_tag": "{}"})", "structured_outputs.structural_tag",
       "structured_outputs.structural_tag is not supported"},
      {R"("structured_outputs": {"disable_additional_properties": "yes"})",
       "structured_outputs.disable_additional_properties",
       "structured_outputs.disable_additional_properties must be a boolean, got a string"},
      {R"("structured_outputs": [])", "structured_outputs",
       "structured_outputs must be an object, got an array"},
      {R"("guided_whitespace_pattern": " ")", "guided_whitespace_pattern",
       "guided_whitespace_pattern is not supported (structured_outputs.disable_any_whitespace "
       "is)"},
  };
  for (const Bad& c : cases) {
    absl::Status s = ParseErrorWith(Endpoint::kChatCompletions, c.fields);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.fields;
    EXPECT_EQ(Param(s), c.param) << c.fields;
    EXPECT_EQ(s.message(), c.message) << c.fields;
  }
}

TEST(OpenAiConstraintTest, CompileErrorsNameTheApiFieldTheConstraintCameIn) {
  ParsedRequest r = ParseWith(Endpoint::kChatCompletions, R"("response_format": {
      "type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}})");
  absl::Status s = ToApiFieldError(
      r, ConstraintError("json_schema", "unsupported keyword 'patternProperties' at /properties/a"));
  EXPECT_EQ(Param(s), "response_format.json_schema.schema");
  EXPECT_EQ(s.message(),
            "response_format.json_schema.schema: unsupported keyword 'patternProperties' at "
            "/properties/a");
  EXPECT_EQ(ApiErrorFor(s).http_status, 400);
  ParsedRequest c = ParseWith(Endpoint::kCompletions, R"("guided_choice": [])");
  absl::Status none = ToApiFieldError(c, ConstraintError("choice.choices", "no choices"));
  EXPECT_EQ(Param(none), "guided_choice");
  EXPECT_EQ(none.message(), "guided_choice: no choices");
  // Other errors of the generation path keep their renaming.
  absl::Status top_p =
      ToApiFieldError(r, InvalidFieldThat("sampling.top_p", "must be in (0, 1], got 2"));
  EXPECT_EQ(Param(top_p), "top_p");
}

TEST(OpenAiErrorTest, StatusCodesMapToHttpStatusesAndOpenAiShapes) {
  struct Case {
    absl::Status status;
    int http;
    const char* type;
    const char* code;  // "" = null
  };
  const Case cases[] = {
      {absl::UnauthenticatedError("x"), 401, "invalid_request_error", "invalid_api_key"},
      {absl::PermissionDeniedError("x"), 403, "permission_error", ""},
      {absl::NotFoundError("x"), 404, "invalid_request_error", "model_not_found"},
      {absl::ResourceExhaustedError("x"), 429, "rate_limit_error", "queue_full"},
      // A tenant's quota (marked by tenants.h, whatever the message says).
      {QuotaExceededError("tenant 'a' used 95 of 100"), 429, "rate_limit_error",
       "quota_exceeded"},
      {absl::FailedPreconditionError("x"), 503, "service_unavailable", "model_not_ready"},
      {absl::UnavailableError("x"), 503, "service_unavailable", "unavailable"},
      {absl::DeadlineExceededError("x"), 504, "timeout", ""},
      {absl::InternalError("x"), 500, "server_error", ""},
  };
  for (const Case& c : cases) {
    const ApiError e = ApiErrorFor(c.status);
    EXPECT_EQ(e.http_status, c.http) << c.status;
    EXPECT_EQ(e.type, c.type) << c.status;
    EXPECT_EQ(e.code, c.code) << c.status;
  }
  const json body = ErrorBody(ApiErrorFor(FieldError("temperature", "temperature must be ...")));
  EXPECT_EQ(body, json::parse(R"({"error": {"message": "temperature must be ...",
                                            "type": "invalid_request_error",
                                            "param": "temperature", "code": null}})"));
  // A not-found model names the field.
  EXPECT_EQ(ErrorBody(ApiErrorFor(absl::NotFoundError("no model")))["error"]["param"], "model");
}

class OpenAiResponseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto path = minfer::testing::TestModelPath("tiny", "q8_0", 1);
    ASSERT_TRUE(path.ok()) << path.status();
    runtime::ModelOptions o;
    o.backend = "cpu";
    auto m = runtime::Model::Load(*path, o);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = *std::move(m);
  }
  const tokenizer::Tokenizer& tok() const { return model_->tokenizer(); }
  std::string Bytes(int32_t id) const { return std::string(*tok().TokenBytes(id)); }

  std::shared_ptr<runtime::Model> model_;
};

SequenceResult Result(FinishReason reason, int32_t prompt, int32_t completion) {
  SequenceResult r;
  r.finish_reason = reason;
  r.stats.prompt_tokens = prompt;
  r.stats.completion_tokens = completion;
  return r;
}

TEST_F(OpenAiResponseTest, ChatStreamIsRoleThenContentThenFinishThenUsage) {
  ParsedRequest req = MustParse(Endpoint::kChatCompletions, R"({
      "model": "m", "messages": [{"role": "user", "content": "x"}], "stream": true,
      "stream_options": {"include_usage": true}, "return_token_ids": true})");
  ResponseWriter w(req, "chatcmpl-1", 1700000000, "tiny", &tok());
  SequenceChunk first;
  first.first = true;
  first.tokens = {11, 12};
  first.text = "ab";
  std::vector<json> c1 = w.StreamChunks(first);
  ASSERT_EQ(c1.size(), 2u);
  EXPECT_EQ(c1[0], json::parse(R"({"id": "chatcmpl-1", "object": "chat.completion.chunk",
      "created": 1700000000, "model": "tiny", "system_fingerprint": "minfer", "usage": null,
      "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null,
                   "finish_reason": null, "token_ids": []}]})"));
  EXPECT_EQ(c1[1]["choices"][0]["delta"], json::parse(R"({"content": "ab"})"));
  EXPECT_EQ(c1[1]["choices"][0]["token_ids"], json::parse("[11, 12]"));
  EXPECT_TRUE(c1[1]["choices"][0]["finish_reason"].is_null());

  SequenceChunk last;
  last.tokens = {13};
  last.text = "c";
  last.result = Result(FinishReason::kLength, 5, 3);
  last.result->stats.cached_prompt_tokens = 2;
  std::vector<json> c2 = w.StreamChunks(last);
  ASSERT_EQ(c2.size(), 3u);  // content, finish, usage
  EXPECT_EQ(c2[0]["choices"][0]["delta"]["content"], "c");
  EXPECT_EQ(c2[1]["choices"][0]["delta"], json::object());
  EXPECT_EQ(c2[1]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(c2[2]["choices"], json::array());
  EXPECT_EQ(c2[2]["usage"],
            json::parse(R"({"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8,
                            "prompt_tokens_details": {"cached_tokens": 2}})"));
}

// A drafted-for sequence's usage carries OpenAI's Predicted Outputs counts:
// accepted drafts, and rejected ones (drafted - accepted); in the streamed
// usage chunk and the whole response alike. Without drafts, no details.
TEST_F(OpenAiResponseTest, UsageReportsAcceptedAndRejectedPredictionTokens) {
  SequenceResult drafted = Result(FinishReason::kLength, 5, 12);
  drafted.stats.spec_drafted = 10;
  drafted.stats.spec_accepted = 7;
  const json details =
      json::parse(R"({"accepted_prediction_tokens": 7, "rejected_prediction_tokens": 3})");
  ParsedRequest stream = MustParse(Endpoint::kChatCompletions, R"({
      "model": "m", "messages": [{"role": "user", "content": "x"}], "stream": true,
      "stream_options": {"include_usage": true}})");
  ResponseWriter ws(stream, "chatcmpl-3", 7, "tiny", &tok());
  SequenceChunk last;
  last.result = drafted;
  std::vector<json> chunks = ws.StreamChunks(last);
  ASSERT_FALSE(chunks.empty());
  EXPECT_EQ(chunks.back()["choices"], json::array());
  EXPECT_EQ(chunks.back()["usage"]["completion_tokens_details"], details);
  EXPECT_EQ(chunks.back()["usage"]["completion_tokens"], 12);
  for (Endpoint e : {Endpoint::kChatCompletions, Endpoint::kCompletions}) {
    ParsedRequest req = MustParse(e, e == Endpoint::kChatCompletions
                                         ? R"({"model": "m", "messages": [{"role": "user",
                                                                            "content": "x"}]})"
                                         : R"({"model": "m", "prompt": "x"})");
    ResponseWriter w(req, "id-1", 7, "tiny", &tok());
    EXPECT_EQ(w.Response(drafted)["usage"]["completion_tokens_details"], details);
    const json plain = w.Response(Result(FinishReason::kLength, 5, 12))["usage"];
    EXPECT_FALSE(plain.contains("completion_tokens_details")) << plain;
  }
}

TEST_F(OpenAiResponseTest, EosAndStopBothFinishAsStopAndEmptyDeltasSendNothing) {
  ParsedRequest req = MustParse(Endpoint::kCompletions,
                                R"({"model": "m", "prompt": "x", "stream": true})");
  ResponseWriter w(req, "cmpl-1", 1, "tiny", &tok());
  SequenceChunk empty;
  EXPECT_TRUE(w.StreamChunks(empty).empty());
  SequenceChunk end;
  end.result = Result(FinishReason::kEos, 1, 1);
  std::vector<json> c = w.StreamChunks(end);
  ASSERT_EQ(c.size(), 1u);  // no usage chunk without include_usage
  EXPECT_EQ(c[0]["object"], "text_completion");
  EXPECT_EQ(c[0]["choices"][0]["text"], "");
  EXPECT_EQ(c[0]["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(c[0].contains("usage"));
  EXPECT_STREQ(OpenAiFinishReason(FinishReason::kStop), "stop");
  // A failed generation makes no finish chunk (the server sends an error
  // event instead).
  SequenceChunk failed;
  failed.result = Result(FinishReason::kCancelled, 1, 0);
  failed.result->status = absl::UnavailableError("draining");
  EXPECT_TRUE(w.StreamChunks(failed).empty());
}

TEST_F(OpenAiResponseTest, CompletionLogprobsUseTheTokensBytesAndTrimAlternatives) {
  ParsedRequest req =
      MustParse(Endpoint::kCompletions, R"({"model": "m", "prompt": "x", "logprobs": 1})");
  ResponseWriter w(req, "cmpl-2", 7, "tiny", &tok());
  SequenceChunk a;
  a.tokens = {40, 41};
  a.text = Bytes(40) + Bytes(41);
  SampledToken s40{40, -0.5f, {{40, -0.5f}, {7, -1.5f}}};
  SampledToken s41{41, -0.25f, {{41, -0.25f}}};
  a.logprobs = {s40, s41};
  w.Accumulate(a);
  json r = w.Response(Result(FinishReason::kStop, 2, 2));
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["choices"][0]["text"], a.text);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  const json& lp = r["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json::array({Bytes(40), Bytes(41)}));
  EXPECT_EQ(lp["token_logprobs"], json::parse("[-0.5, -0.25]"));
  // logprobs: 1 -> one alternative each (the sampler was asked for as many).
  ASSERT_EQ(lp["top_logprobs"].size(), 2u);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 1u);
  EXPECT_EQ(lp["top_logprobs"][0][Bytes(40)], -0.5);
  EXPECT_EQ(lp["text_offset"], json::array({0, Bytes(40).size()}));
  EXPECT_EQ(r["usage"]["total_tokens"], 4);
  EXPECT_FALSE(r["choices"][0].contains("token_ids"));
}

TEST_F(OpenAiResponseTest, ChatResponseCarriesTheMessageAndChatLogprobs) {
  ParsedRequest req = MustParse(Endpoint::kChatCompletions, R"({
      "model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": true})");
  ResponseWriter w(req, "chatcmpl-2", 7, "tiny", &tok());
  SequenceChunk a;
  a.tokens = {40};
  a.text = Bytes(40);
  a.logprobs = {SampledToken{40, -0.5f, {{40, -0.5f}}}};
  w.Accumulate(a);
  json r = w.Response(Result(FinishReason::kLength, 3, 1));
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["choices"][0]["message"],
            json({{"role", "assistant"}, {"content", Bytes(40)}, {"refusal", nullptr}}));
  const json& content = r["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 1u);
  EXPECT_EQ(content[0]["token"], Bytes(40));
  EXPECT_EQ(content[0]["logprob"], -0.5);
  json bytes = json::array();
  for (unsigned char c : Bytes(40)) bytes.push_back(static_cast<int>(c));
  EXPECT_EQ(content[0]["bytes"], bytes);
  // logprobs without top_logprobs: no alternatives.
  EXPECT_EQ(content[0]["top_logprobs"], json::array());
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
}

constexpr char kToolsBody[] = R"({"model": "m", "tools": [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
     "strict": true}},
    {"type": "function", "function": {"name": "ping", "parameters": {"type": "object"}}}], )";

// Tools, tool choice and tool history into the chat request model.
TEST(OpenAiToolsTest, ToolsChoiceAndHistoryReachTheChat) {
  ParsedRequest r = MustParse(Endpoint::kChatCompletions, (std::string(kToolsBody) + R"(
      "tool_choice": {"type": "function", "function": {"name": "ping"}},
      "parallel_tool_calls": false,
      "messages": [{"role": "user", "content": "Weather?"},
                   {"role": "assistant", "content": null, "reasoning_content": "hmm",
                    "tool_calls": [{"id": "call_1", "type": "function", "function":
                                    {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}},
                                   {"id": "call_2", "type": "function", "function":
                                    {"name": "ping", "arguments": {"n": 1}}}]},
                   {"role": "tool", "tool_call_id": "call_1", "content": "cold"},
                   {"role": "tool", "tool_call_id": "call_2", "name": "ping",
                    "content": [{"type": "text", "text": "pong"}]}]})").c_str());
  const v1::Chat& c = r.generate.chat();
  ASSERT_EQ(c.tools_size(), 2);
  EXPECT_EQ(c.tools(0).name(), "get_weather");
  EXPECT_EQ(c.tools(0).description(), "Weather");
  EXPECT_EQ(json::parse(c.tools(0).parameters()),
            json::parse(R"({"type":"object","properties":{"city":{"type":"string"}}})"));
  EXPECT_TRUE(c.tools(0).strict());
  EXPECT_EQ(json::parse(c.tools(1).parameters()), json::parse(R"({"type":"object"})"));
  EXPECT_EQ(c.tool_choice().mode(), v1::ToolChoice::TOOL_CHOICE_FUNCTION);
  EXPECT_EQ(c.tool_choice().function(), "ping");
  EXPECT_FALSE(c.parallel_tool_calls());
  ASSERT_EQ(c.messages_size(), 4);
  const v1::ChatMessage& a = c.messages(1);
  EXPECT_EQ(a.content(), "");
  EXPECT_EQ(a.reasoning_content(), "hmm");
  ASSERT_EQ(a.tool_calls_size(), 2);
  EXPECT_EQ(a.tool_calls(0).id(), "call_1");
  EXPECT_EQ(a.tool_calls(0).arguments(), R"({"city": "Oslo"})");
  EXPECT_EQ(a.tool_calls(1).arguments(), R"({"n":1})");
  EXPECT_EQ(c.messages(2).role(), "tool");
  EXPECT_EQ(c.messages(2).tool_call_id(), "call_1");
  EXPECT_EQ(c.messages(3).name(), "ping");
  EXPECT_EQ(c.messages(3).content(), "pong");

  for (const char* choice : {R"("none")", R"("auto")", R"("required")"}) {
    ParsedRequest p = MustParse(
        Endpoint::kChatCompletions,
        absl::StrCat(kToolsBody, R"("messages": [{"role": "user", "content": "x"}],
                     "tool_choice": )", choice, "}").c_str());
    EXPECT_EQ(p.generate.chat().tool_choice().mode(),
              std::string(choice) == R"("none")"   ? v1::ToolChoice::TOOL_CHOICE_NONE
              : std::string(choice) == R"("auto")" ? v1::ToolChoice::TOOL_CHOICE_AUTO
                                                   : v1::ToolChoice::TOOL_CHOICE_REQUIRED);
    EXPECT_FALSE(p.generate.chat().has_parallel_tool_calls());
  }
}

TEST(OpenAiToolsTest, BadToolInputIsA400NamingTheField) {
  const std::string user = R"("messages": [{"role": "user", "content": "x"}])";
  struct Case {
    std::string body, param, message;
  };
  const std::vector<Case> cases = {
      {absl::StrCat(kToolsBody, user, R"(, "tool_choice": {"type": "function",
                    "function": {"name": "nope"}}})"),
       "tool_choice", "tool_choice names function 'nope', which is not one of the tools"},
      {absl::StrCat(R"({"model": "m", )", user, R"(, "tool_choice": "required"})"),
       "tool_choice", "no tools are given"},
      {absl::StrCat(kToolsBody, user, R"(, "tool_choice": "sometimes"})"), "tool_choice",
       "tool_choice 'sometimes' is not supported"},
      {absl::StrCat(R"({"model": "m", )", user,
                    R"(, "tools": [{"type": "function", "function": {"description": "d"}}]})"),
       "tools[0].function.name", "tools[0].function.name is required"},
      {absl::StrCat(R"({"model": "m", )", user,
                    R"(, "tools": [{"type": "function", "function": {"name": "a b", "parameters": {}}}]})"),
       "tools[0].function.name", "tools[0].function.name: 'a b' is not"},
      {absl::StrCat(R"({"model": "m", )", user,
                    R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}},
                                   {"type": "function", "function": {"name": "f", "parameters": {}}}]})"),
       "tools[1].function.name", "a second tool named 'f'"},
      {absl::StrCat(R"({"model": "m", )", user,
                    R"(, "tools": [{"type": "function", "function": {"name": "f"}}]})"),
       "tools[0].function.parameters", "tools[0].function.parameters is required"},
      {absl::StrCat(R"({"model": "m", )", user,
                    R"(, "tools": [{"type": "code_interpreter"}]})"),
       "tools[0].type", "only function tools"},
      {absl::StrCat(R"({"model": "m", )", user,
                    R"(, "tools": [{"type": "function", "function": {"name": "f",
                        "parameters": {"type": "array"}}}]})"),
       "tools[0].function.parameters", "\"type\" must be \"object\""},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"},
          {"role": "assistant", "tool_calls": [{"id": "1", "type": "function",
           "function": {"name": "f", "arguments": "{\"a\": "}}]}]})",
       "messages[1].tool_calls[0].function.arguments",
       "messages[1].tool_calls[0].function.arguments is not JSON"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"},
          {"role": "assistant", "tool_calls": [{"type": "function",
           "function": {"arguments": "{}"}}]}]})",
       "messages[1].tool_calls[0].function.name", "is required"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x", "tool_calls": [
           {"type": "function", "function": {"name": "f", "arguments": "{}"}}]}]})",
       "messages[0].tool_calls", "only assistant messages make tool calls"},
  };
  for (const Case& c : cases) {
    absl::Status st = ParseError(Endpoint::kChatCompletions, c.body.c_str());
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.body;
    EXPECT_EQ(Param(st), c.param) << c.body << " -> " << st;
    EXPECT_THAT(std::string(st.message()), HasSubstr(c.message)) << c.body;
    EXPECT_EQ(ApiErrorFor(st).http_status, 400);
  }
  EXPECT_EQ(Param(ParseError(Endpoint::kCompletions,
                             R"({"model": "m", "prompt": "x", "tool_choice": "required"})")),
            "tool_choice");
  // The generation path's errors (a schema the grammar engine refuses, a
  // forced call with a response_format) name the API's fields.
  absl::Status compile = ToApiFieldError(
      Endpoint::kChatCompletions,
      InvalidField("chat.tools[1].parameters", "unsupported keyword 'not' at /"));
  EXPECT_EQ(Param(compile), "tools[1].function.parameters");
  EXPECT_EQ(compile.message(), "tools[1].function.parameters: unsupported keyword 'not' at /");
  EXPECT_EQ(Param(ToApiFieldError(Endpoint::kChatCompletions,
                                  InvalidField("chat.tool_choice", "combined"))),
            "tool_choice");
  EXPECT_EQ(Param(ToApiFieldError(Endpoint::kChatCompletions,
                                  InvalidField("chat.tools", "model 'm' ..."))),
            "tools");
  EXPECT_EQ(Param(ToApiFieldError(Endpoint::kChatCompletions,
                                  InvalidField("chat.messages[2].tool_calls[0].arguments", "x"))),
            "messages[2].tool_calls[0].function.arguments");
  EXPECT_EQ(Param(ToApiFieldError(Endpoint::kChatCompletions,
                                  InvalidField("chat.template_kwargs.tools", "x"))),
            "chat_template_kwargs.tools");
}

// Replies read for tool calls (the tiny model's ChatML template reads as
// Hermes) and reasoning (Qwen3's template writes <think>): the path a
// model's auto-mode reply takes, fed as the engine would publish it.
class OpenAiToolReplyTest : public OpenAiResponseTest {
 protected:
  static SequenceChunk Text(const std::string& text, std::optional<SequenceResult> result = {}) {
    SequenceChunk c;
    c.text = text;
    c.tokens = {1};
    c.result = std::move(result);
    return c;
  }
};

constexpr char kCallReply[] =
    "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
    "\"Oslo\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>";

TEST_F(OpenAiToolReplyTest, WholeReplyCarriesToolCalls) {
  ParsedRequest req = MustParse(Endpoint::kChatCompletions,
                                (std::string(kToolsBody) +
                                 R"("messages": [{"role": "user", "content": "x"}]})").c_str());
  ResponseWriter w(req, "chatcmpl-3", 7, "tiny", &tok());
  w.Accumulate(Text(std::string(kCallReply).substr(0, 30)));
  w.Accumulate(Text(std::string(kCallReply).substr(30)));
  json r = w.Response(Result(FinishReason::kEos, 3, 2));
  const json& choice = r["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  const json& m = choice["message"];
  EXPECT_EQ(m["content"], "Checking.");
  ASSERT_EQ(m["tool_calls"].size(), 2u);
  EXPECT_EQ(m["tool_calls"][0]["type"], "function");
  EXPECT_TRUE(absl::StartsWith(m["tool_calls"][0]["id"].get<std::string>(), "call_"));
  EXPECT_NE(m["tool_calls"][0]["id"], m["tool_calls"][1]["id"]);
  EXPECT_EQ(m["tool_calls"][0]["function"],
            json::parse(R"({"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"})"));
  EXPECT_EQ(m["tool_calls"][1]["function"]["arguments"], "{}");
  EXPECT_FALSE(m.contains("reasoning_content"));

  // Cut at max_tokens: the finish reason says so.
  EXPECT_EQ(w.Response(Result(FinishReason::kLength, 3, 2))["choices"][0]["finish_reason"],
            "length");
  // tool_choice none: the same text is content.
  ParsedRequest none = MustParse(
      Endpoint::kChatCompletions,
      (std::string(kToolsBody) +
       R"("tool_choice": "none", "messages": [{"role": "user", "content": "x"}]})").c_str());
  ResponseWriter wn(none, "chatcmpl-4", 7, "tiny", &tok());
  wn.Accumulate(Text(kCallReply));
  json rn = wn.Response(Result(FinishReason::kEos, 3, 2));
  EXPECT_EQ(rn["choices"][0]["message"]["content"], kCallReply);
  EXPECT_FALSE(rn["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(rn["choices"][0]["finish_reason"], "stop");
}

// A model loaded with a tool parser (LoadModelRequest.tool_parser) reads its
// replies in that family, not the template's (the tiny model's ChatML
// template reads as hermes); "none" reads no calls.
TEST_F(OpenAiToolReplyTest, TheLoadedToolParserOverridesTheTemplates) {
  ParsedRequest req = MustParse(Endpoint::kChatCompletions,
                                (std::string(kToolsBody) +
                                 R"("messages": [{"role": "user", "content": "x"}]})").c_str());
  EXPECT_EQ(ToolCallFamilyOf(tok()), "hermes");
  EXPECT_EQ(ToolCallFamilyOf(tok(), ChatParsers{"llama3_json", ""}), "llama3_json");
  EXPECT_EQ(ToolCallFamilyOf(tok(), ChatParsers{"none", ""}), "");
  const std::string llama = R"({"name": "ping", "parameters": {}})";
  // By the template (hermes): a Llama 3 call is content.
  ResponseWriter by_template(req, "chatcmpl-9", 7, "tiny", &tok());
  by_template.Accumulate(Text(llama));
  json r = by_template.Response(Result(FinishReason::kEos, 3, 2));
  EXPECT_EQ(r["choices"][0]["message"]["content"], llama);
  // Loaded with tool_parser llama3_json: the same reply is a call.
  ResponseWriter llama3(req, "chatcmpl-10", 7, "tiny", &tok(), ChatParsers{"llama3_json", ""});
  llama3.Accumulate(Text(llama));
  r = llama3.Response(Result(FinishReason::kEos, 3, 2));
  ASSERT_EQ(r["choices"][0]["message"]["tool_calls"].size(), 1u) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "ping");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
  // Loaded with tool_parser none: a hermes block is content.
  ResponseWriter none(req, "chatcmpl-11", 7, "tiny", &tok(), ChatParsers{"none", ""});
  none.Accumulate(Text(kCallReply));
  r = none.Response(Result(FinishReason::kEos, 3, 2));
  EXPECT_EQ(r["choices"][0]["message"]["content"], kCallReply);
  EXPECT_FALSE(r["choices"][0]["message"].contains("tool_calls"));
  // reasoning_parser qwen3 splits <think> although ChatML has no such tags.
  ParsedRequest plain = MustParse(Endpoint::kChatCompletions,
                                  R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})");
  ResponseWriter think(plain, "chatcmpl-12", 7, "tiny", &tok(), ChatParsers{"", "qwen3"});
  think.Accumulate(Text("<think>hm</think>yes"));
  r = think.Response(Result(FinishReason::kEos, 3, 2));
  EXPECT_EQ(r["choices"][0]["message"]["reasoning_content"], "hm");
  EXPECT_EQ(r["choices"][0]["message"]["content"], "yes");
  ResponseWriter no_split(plain, "chatcmpl-13", 7, "tiny", &tok());
  no_split.Accumulate(Text("<think>hm</think>yes"));
  r = no_split.Response(Result(FinishReason::kEos, 3, 2));
  EXPECT_EQ(r["choices"][0]["message"]["content"], "<think>hm</think>yes");
}

TEST_F(OpenAiToolReplyTest, StreamedReplySendsToolCallDeltas) {
  ParsedRequest req = MustParse(
      Endpoint::kChatCompletions,
      (std::string(kToolsBody) +
       R"("messages": [{"role": "user", "content": "x"}], "stream": true})").c_str());
  ResponseWriter w(req, "chatcmpl-5", 7, "tiny", &tok());
  std::vector<json> chunks;
  const std::string reply = kCallReply;
  for (size_t i = 0; i < reply.size(); i += 5) {
    const bool last = i + 5 >= reply.size();
    for (json& c : w.StreamChunks(Text(reply.substr(i, 5),
                                       last ? std::optional<SequenceResult>(
                                                  Result(FinishReason::kEos, 3, 40))
                                            : std::nullopt))) {
      chunks.push_back(std::move(c));
    }
  }
  std::string content;
  std::vector<json> calls;
  std::string finish;
  for (const json& c : chunks) {
    const json& choice = c["choices"][0];
    if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
    const json& d = choice["delta"];
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (!d.contains("tool_calls")) continue;
    for (const json& tc : d["tool_calls"]) {
      const size_t index = tc["index"].get<size_t>();
      if (tc.contains("id")) {
        // The first delta of a call: index, id, type and name.
        ASSERT_EQ(index, calls.size());
        EXPECT_EQ(tc["type"], "function");
        calls.push_back({{"id", tc["id"]},
                         {"name", tc["function"]["name"]},
                         {"arguments", tc["function"]["arguments"]}});
      } else {
        ASSERT_LT(index, calls.size());
        calls[index]["arguments"] =
            calls[index]["arguments"].get<std::string>() +
            tc["function"]["arguments"].get<std::string>();
      }
    }
  }
  EXPECT_EQ(content, "Checking.");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0]["name"], "get_weather");
  EXPECT_EQ(calls[0]["arguments"], R"({"city":"Oslo"})");
  EXPECT_EQ(calls[1]["name"], "ping");
  EXPECT_EQ(calls[1]["arguments"], "{}");
  EXPECT_EQ(finish, "tool_calls");
}

class OpenAiReasoningTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto path = minfer::testing::TestModelPath("qwen3-tiny", "q8_0", 1);
    ASSERT_TRUE(path.ok()) << path.status();
    runtime::ModelOptions o;
    o.backend = "cpu";
    auto m = runtime::Model::Load(*path, o);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = *std::move(m);
  }
  std::shared_ptr<runtime::Model> model_;
};

TEST_F(OpenAiReasoningTest, ThinkBlocksBecomeReasoningContent) {
  const std::string reply = "<think>\nAdd them.\n</think>\n\nIt is 4.";
  ParsedRequest req = MustParse(Endpoint::kChatCompletions,
                                R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})");
  ResponseWriter w(req, "chatcmpl-6", 7, "q3", &model_->tokenizer());
  SequenceChunk c;
  c.text = reply;
  w.Accumulate(c);
  const json m = w.Response(Result(FinishReason::kEos, 3, 9))["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "Add them.");
  EXPECT_EQ(m["content"], "It is 4.");

  ParsedRequest sreq = MustParse(Endpoint::kChatCompletions, R"({"model": "m", "stream": true,
      "messages": [{"role": "user", "content": "x"}]})");
  ResponseWriter s(sreq, "chatcmpl-7", 7, "q3", &model_->tokenizer());
  std::string reasoning, content;
  for (size_t i = 0; i < reply.size(); i += 3) {
    SequenceChunk part;
    part.text = reply.substr(i, 3);
    part.tokens = {1};
    if (i + 3 >= reply.size()) part.result = Result(FinishReason::kEos, 3, 12);
    for (const json& chunk : s.StreamChunks(part)) {
      const json& d = chunk["choices"][0]["delta"];
      if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
      if (d.contains("content")) content += d["content"].get<std::string>();
      if (!chunk["choices"][0]["finish_reason"].is_null()) {
        EXPECT_EQ(chunk["choices"][0]["finish_reason"], "stop");
      }
    }
  }
  EXPECT_EQ(reasoning, "Add them.");
  EXPECT_EQ(content, "It is 4.");

  // With thinking off, Qwen3's template closes the think block in the
  // prompt; a reply without one is content as written.
  ParsedRequest off = MustParse(Endpoint::kChatCompletions, R"({"model": "m",
      "chat_template_kwargs": {"enable_thinking": false},
      "messages": [{"role": "user", "content": "x"}]})");
  ResponseWriter wo(off, "chatcmpl-8", 7, "q3", &model_->tokenizer());
  SequenceChunk plain;
  plain.text = "Just 4.";
  wo.Accumulate(plain);
  const json mo = wo.Response(Result(FinishReason::kEos, 3, 2))["choices"][0]["message"];
  EXPECT_EQ(mo["content"], "Just 4.");
  EXPECT_FALSE(mo.contains("reasoning_content"));
}

TEST(OpenAiModelsTest, ListShape) {
  EXPECT_EQ(ModelList({"a", "prod"}, 5), json::parse(R"({"object": "list", "data": [
      {"id": "a", "object": "model", "created": 5, "owned_by": "minfer"},
      {"id": "prod", "object": "model", "created": 5, "owned_by": "minfer"}]})"));
}

}  // namespace
}  // namespace minfer::daemon::openai
