#include "daemon/api/generate_request.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <random>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/api/chat_options.h"
#include "daemon/api/chat_phases.h"
#include "daemon/api/constraint.h"
#include "daemon/serving/client_input.h"
#include "engine/base/field_error.h"
#include "engine/base/status.h"
#include "engine/sampling/sampling_params.h"

namespace minfer::daemon {
namespace {

constexpr size_t kMaxStopStrings = 16;

uint64_t RandomSeed() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  return rng();
}

// runtime::ValidateGenerateRequest names the engine request's fields
// (FieldPath); the request model's are: sampling.x stays (but n_logprobs is
// options.top_logprobs, checked before), max_tokens -> stopping.max_tokens,
// stop[i] -> stopping.stop[i], and prompt[i] -> tokens.ids[i] when the
// client sent ids (a text or chat prompt keeps "prompt": its ids are the
// tokenizer's). The message follows the path (RenameField); a reason
// (context_length_exceeded) is kept.
absl::Status ToApiFields(const absl::Status& s, bool ids_input) {
  std::vector<FieldPathStep> path = ParseFieldPath(FieldPath(s));
  if (path.empty()) return s;
  const std::string& head = path[0].name;
  if (head == "max_tokens" || head == "stop") {
    path.insert(path.begin(), FieldPathStep{"stopping"});
  } else if (head == "sampling" && path.size() > 1 && path[1].name == "n_logprobs") {
    path = {FieldPathStep{"options"}, FieldPathStep{"top_logprobs"}};
  } else if (head == "prompt" && ids_input && path.size() > 1 && path[1].is_index()) {
    path[0].name = "ids";
    path.insert(path.begin(), FieldPathStep{"tokens"});
  }
  return RenameField(s, FormatFieldPath(path));
}

}  // namespace

std::string PrefixCacheNamespace(absl::string_view tenant_ns, absl::string_view cache_salt) {
  if (tenant_ns.empty() && cache_salt.empty()) return std::string();
  // Length-prefixed: ("ab", "c") and ("a", "bc") differ.
  return absl::StrCat(tenant_ns.size(), ":", tenant_ns, cache_salt.size(), ":", cache_salt);
}

absl::StatusOr<runtime::GenerateRequest> BuildGenerateRequest(const v1::GenerateRequest& request,
                                                              const runtime::Model& model,
                                                              int64_t n_ctx,
                                                              const GenerationLimits& limits,
                                                              BuildReport* report,
                                                              const ChatParsers& parsers) {
  runtime::GenerateRequest out;
  const tokenizer::Tokenizer& tok = model.tokenizer();
  if (request.cache_salt().size() > kMaxCacheSaltBytes) {
    return InvalidField("cache_salt", absl::StrCat(request.cache_salt().size(), " bytes, at most ",
                                                   kMaxCacheSaltBytes));
  }
  out.cache_ns = PrefixCacheNamespace("", request.cache_salt());
  switch (request.input_case()) {
    case v1::GenerateRequest::kText: {
      if (request.text().empty()) return InvalidField("text", "the prompt is empty");
      tokenizer::EncodeOptions eo;
      eo.parse_special = request.options().parse_special();
      out.prompt = tok.Encode(request.text(), eo);
      break;
    }
    case v1::GenerateRequest::kChat: {
      if (request.chat().messages().empty()) {
        return InvalidField("chat.messages", "no messages");
      }
      ASSIGN_OR_RETURN(const ChatTemplateInput input, ChatTemplateInputOf(request.chat()));
      const bool harmony = IsHarmonyChat(tok, parsers);
      if (harmony && (IsForcedToolChoice(request.chat()) || HasStrictAutoTools(request.chat()))) {
        // Harmony's calls are read from the reply (engine/chat/harmony.h)
        // but not yet constrained by a grammar.
        return InvalidField("chat.tool_choice",
                            absl::StrCat("model '", request.model(),
                                         "' replies in gpt-oss's Harmony format, whose tool calls "
                                         "minfer parses but does not constrain yet: forced "
                                         "tool_choice and strict tools are not supported"));
      }
      if (ParsesToolCalls(request.chat()) && !harmony && ToolCallFamilyOf(tok, parsers).empty()) {
        return InvalidField("chat.tools",
                            absl::StrCat("model '", request.model(),
                                         "' has a chat template with no tool-call syntax minfer "
                                         "can parse (Hermes <tool_call> or Llama 3 JSON)"));
      }
      if (IsForcedToolChoice(request.chat()) &&
          request.constraint_case() != v1::GenerateRequest::CONSTRAINT_NOT_SET) {
        return InvalidField("chat.tool_choice",
                            absl::StrCat("a forced tool call is its own constraint; it can not be "
                                         "combined with ", ConstraintField(request)));
      }
      absl::StatusOr<std::vector<int32_t>> ids =
          tok.EncodeChat(input.messages, /*add_generation_prompt=*/true, input.options);
      if (!ids.ok()) {
        return InvalidField("chat", ids.status().message());
      }
      out.prompt = std::move(*ids);
      break;
    }
    case v1::GenerateRequest::kTokens: {
      const auto& ids = request.tokens().ids();
      if (ids.empty()) return InvalidField("tokens.ids", "no tokens");
      out.prompt.assign(ids.begin(), ids.end());
      break;
    }
    case v1::GenerateRequest::INPUT_NOT_SET:
      return InvalidField("input", "set one of text, chat or tokens");
  }
  const int64_t n_prompt = static_cast<int64_t>(out.prompt.size());
  if (n_prompt == 0) return InvalidField("prompt", "it encodes to no tokens");
  if (n_prompt > limits.max_prompt_tokens) {
    return InvalidField("prompt", absl::StrCat(n_prompt, " tokens exceed the server's limit of ",
                                               limits.max_prompt_tokens, " (max_prompt_tokens)"));
  }

  const v1::SamplingParams& sp = request.sampling();
  SamplingParams& s = out.sampling;
  if (sp.has_temperature()) s.temperature = sp.temperature();
  if (sp.has_top_k()) s.top_k = sp.top_k();
  if (sp.has_top_p()) s.top_p = sp.top_p();
  if (sp.has_min_p()) s.min_p = sp.min_p();
  if (sp.has_repetition_penalty()) s.repetition_penalty = sp.repetition_penalty();
  if (sp.has_frequency_penalty()) s.frequency_penalty = sp.frequency_penalty();
  if (sp.has_presence_penalty()) s.presence_penalty = sp.presence_penalty();
  if (sp.has_penalty_last_n()) s.penalty_last_n = sp.penalty_last_n();
  s.seed = sp.has_seed() ? sp.seed() : RandomSeed();
  const int32_t top_logprobs = request.options().top_logprobs();
  if (top_logprobs < 0 || top_logprobs > kMaxLogprobs) {
    return InvalidFieldThat("options.top_logprobs",
                            absl::StrCat("must be in [0, ", kMaxLogprobs, "], got ", top_logprobs));
  }
  s.n_logprobs = top_logprobs;

  const v1::StoppingCriteria& st = request.stopping();
  if (st.has_max_tokens()) {
    if (st.max_tokens() > limits.max_tokens) {
      return InvalidFieldThat("stopping.max_tokens",
                              absl::StrCat(st.max_tokens(), " exceeds the server's limit of ",
                                           limits.max_tokens));
    }
    out.max_tokens = st.max_tokens();
  } else {
    out.max_tokens = std::min(limits.default_max_tokens, limits.max_tokens);
  }
  if (static_cast<size_t>(st.stop_size()) > kMaxStopStrings) {
    return InvalidField("stopping.stop", absl::StrCat("at most ", kMaxStopStrings,
                                                      " stop strings, got ", st.stop_size()));
  }
  out.stop.assign(st.stop().begin(), st.stop().end());
  out.ignore_eos = st.ignore_eos();
  out.speculative = !request.has_speculative() || request.speculative();
  // The engine's own rules (vocabulary, context, max_tokens, sampling, stop
  // strings), checked here once; the layers below take them as given.
  if (absl::Status v = runtime::ValidateGenerateRequest(out, model, n_ctx); !v.ok()) {
    return ToApiFields(v, request.input_case() == v1::GenerateRequest::kTokens);
  }
  // The constraint last: compiling is the one check that can take long.
  if (request.input_case() == v1::GenerateRequest::kChat && IsForcedToolChoice(request.chat())) {
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> g = CompileForcedToolCall(
        request.chat(), ToolCallFamilyOf(tok, parsers), model);
    if (report != nullptr) {
      report->compiled_constraint = true;
      report->grammar_status = g.status();
      report->grammar_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    if (!g.ok()) return g.status();
    out.grammar = *std::move(g);
  } else if (request.constraint_case() != v1::GenerateRequest::CONSTRAINT_NOT_SET ||
             request.has_json_max_whitespace()) {
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> g =
        CompileConstraint(request, model);
    if (report != nullptr) {
      report->compiled_constraint = true;
      report->grammar_status = g.status();
      report->grammar_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    if (!g.ok()) return g.status();
    out.grammar = *std::move(g);
  }
  // When the grammar starts, the think block and its budget, strict tools
  // in auto mode (chat_phases.h).
  if (request.input_case() == v1::GenerateRequest::kChat) {
    const auto t0 = std::chrono::steady_clock::now();
    const bool had_grammar = out.grammar != nullptr;
    absl::Status planned = PlanChatReply(request.chat(), model, &out, parsers);
    if (report != nullptr && !had_grammar && (out.grammar != nullptr || !planned.ok())) {
      report->compiled_constraint = true;
      report->grammar_status = planned;
      report->grammar_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    RETURN_IF_ERROR(planned);
  }
  return out;
}

absl::StatusOr<std::shared_ptr<Sequence>> SubmitGenerate(
    SlotManager* slots, const ServingState& state, const v1::GenerateRequest& request,
    const GenerationLimits& limits, Clock::time_point arrival, Clock::time_point deadline,
    const char* api, std::shared_ptr<const runtime::Model>* model_out, const TenantRef& tenant,
    ChatParsers* parsers_out) {
  if (state.draining()) {
    return absl::UnavailableError("the server is draining; it accepts no new generations");
  }
  if (request.model().empty()) {
    return InvalidField("model", "name a loaded model or alias");
  }
  RETURN_IF_ERROR(CheckName(request.model(), "model"));
  return slots->Submit(
      request.model(),
      [&](Slot& slot, const std::string& model) -> absl::StatusOr<std::shared_ptr<Sequence>> {
        std::shared_ptr<const runtime::Model> m = slot.model();
        if (m == nullptr) {
          return absl::FailedPreconditionError(
              absl::StrCat("model '", model, "' is ", SlotStateName(slot.state()), ", not ready"));
        }
        BuildReport report;
        const ChatParsers parsers{slot.config().tool_parser, slot.config().reasoning_parser};
        absl::StatusOr<runtime::GenerateRequest> built =
            BuildGenerateRequest(request, *m, slot.n_ctx(), limits, &report, parsers);
        if (report.compiled_constraint) {
          slot.RecordGrammarCompile(report.grammar_status, report.grammar_seconds);
        }
        if (!built.ok()) return built.status();
        runtime::GenerateRequest r = *std::move(built);
        r.priority = request.options().priority();
        std::shared_ptr<TenantLease> lease;
        if (tenant.tenants != nullptr) {
          // The most the stream can use: its prompt and max_tokens, or what
          // the context leaves after the prompt if that is less.
          const int64_t prompt = static_cast<int64_t>(r.prompt.size());
          const int64_t completion =
              std::min<int64_t>(r.max_tokens, std::max<int64_t>(slot.n_ctx() - prompt, 0));
          ASSIGN_OR_RETURN(lease, tenant.tenants->Admit(tenant.index, request.model(), model,
                                                        prompt, completion));
          r.group = Tenants::Group(tenant.index);
          r.weight = tenant.tenants->weight(tenant.index);
          r.cache_ns = PrefixCacheNamespace(tenant.tenants->CacheNamespace(tenant.index),
                                            request.cache_salt());
        }
        auto seq = std::make_shared<Sequence>(std::move(r), model, arrival, deadline);
        seq->set_api(api);
        seq->set_tenant(std::move(lease));
        if (model_out != nullptr) *model_out = m;
        if (parsers_out != nullptr) *parsers_out = parsers;
        return seq;
      });
}

}  // namespace minfer::daemon
