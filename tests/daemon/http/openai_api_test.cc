// The OpenAI API's JSON <-> minfer's generation request and stream
// (daemon/http/openai_api.h): each field's translation, the refusals, the error
// shapes, and the chunks and responses a generation turns into. Expected
// values follow OpenAI's API reference; token strings are checked against
// the tokenizer's own bytes.
#include "daemon/http/openai_api.h"

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "daemon/serving/tenants.h"
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
      Endpoint::kCompletions, absl::InvalidArgumentError("cache_salt: 300 bytes, at most 256"));
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
       "chat_template_kwargs.tools is not supported: minfer serves no tool calls"},
      {R"("chat_template_kwargs": {"functions": []})", "chat_template_kwargs.functions",
       "chat_template_kwargs.functions is not supported: minfer serves no tool calls"},
      {R"("tool_choice": "required")", "tool_choice",
       "tool_choice is not supported (only \"none\" or \"auto\": minfer serves no tool calls)"},
      {R"("tool_choice": {"type": "function", "function": {"name": "f"}})", "tool_choice",
       "tool_choice is not supported"},
      {R"("function_call": {"name": "f"})", "function_call", "function_call is not supported"},
      {R"("functions": [{"name": "f"}])", "functions", "functions are not supported"},
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
      {Endpoint::kChatCompletions, R"({"model": "m", "messages": [{"role": "tool", "content": "x"}]})",
       "messages[0].role", "messages[0].role 'tool' is not supported"},
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
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{}]})", "tools",
       "tools are not supported"},
      {Endpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logit_bias": {"5": 1}})",
       "logit_bias", "logit_bias is not supported"},
      {Endpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
           "response_format": {"type": "json_object"}})",
       "response_format.type", "only {\"type\": \"text\"}"},
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
  absl::Status top_p =
      ToApiFieldError(Endpoint::kChatCompletions,
                      absl::InvalidArgumentError("sampling.top_p must be in (0, 1], got 2"));
  EXPECT_EQ(Param(top_p), "top_p");
  EXPECT_EQ(top_p.message(), "top_p must be in (0, 1], got 2");
  absl::Status max_tokens = ToApiFieldError(
      Endpoint::kCompletions,
      absl::InvalidArgumentError("stopping.max_tokens 9999 exceeds the server's limit of 4096"));
  EXPECT_EQ(Param(max_tokens), "max_tokens");
  EXPECT_EQ(max_tokens.message(), "max_tokens 9999 exceeds the server's limit of 4096");
  absl::Status ctx = ToApiFieldError(
      Endpoint::kChatCompletions,
      absl::InvalidArgumentError("prompt: 300 tokens do not fit the model's context of 256 (one "
                                 "position must remain for the completion)"));
  EXPECT_EQ(Param(ctx), "messages");
  EXPECT_THAT(std::string(ctx.message()), HasSubstr("messages: 300 tokens do not fit"));
  EXPECT_EQ(ApiErrorFor(ctx).code, "context_length_exceeded");
  absl::Status empty =
      ToApiFieldError(Endpoint::kCompletions, absl::InvalidArgumentError("text: the prompt is empty"));
  EXPECT_EQ(Param(empty), "prompt");
  EXPECT_EQ(empty.message(), "prompt: the prompt is empty");
  // Not a field error: unchanged.
  absl::Status nf = ToApiFieldError(Endpoint::kCompletions, absl::NotFoundError("no model 'x'"));
  EXPECT_EQ(nf, absl::NotFoundError("no model 'x'"));
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

TEST(OpenAiModelsTest, ListShape) {
  EXPECT_EQ(ModelList({"a", "prod"}, 5), json::parse(R"({"object": "list", "data": [
      {"id": "a", "object": "model", "created": 5, "owned_by": "minfer"},
      {"id": "prod", "object": "model", "created": 5, "owned_by": "minfer"}]})"));
}

}  // namespace
}  // namespace minfer::daemon::openai
