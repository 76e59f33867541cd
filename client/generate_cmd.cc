// minferctl generate.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/commands.h"
#include "client/tool_file.h"

namespace minfer::ctl {
namespace {

// The flags; the sampling values below 0 (and --repeat-last-n below -1)
// mean "not given": the request leaves those fields unset, so the server's
// defaults apply.
struct GenerateArgs {
  std::string model, prompt, system, cache_salt;
  std::vector<std::string> template_kwargs;  // K=V
  // Tools (with --chat): a tools file and the choice, sent when given.
  std::string tools_file, tool_choice;
  bool no_parallel_tool_calls = false;
  int reasoning_budget = -1;  // -1: not given
  bool chat = false, ignore_eos = false, parse_special = false, no_speculative = false;
  int32_t max_tokens = 0, top_k = -1, logprobs = 0, last_n = -2;
  float temp = -1, top_p = -1, min_p = -1, rep = -1, freq = 0, pres = 0;
  int64_t seed = -1;
  std::vector<std::string> stop;
  // Output constraints (at most one; CLI11 enforces it): files are read here.
  std::string json_schema_file, grammar_file, regex, choice;
  bool json_object = false;
  int32_t json_whitespace = -1;
  bool open_objects = false;
  // Options whose every value is valid: sent only when given.
  CLI::Option* max_tokens_given = nullptr;
  CLI::Option* freq_given = nullptr;
  CLI::Option* pres_given = nullptr;
};

// The whole of `path`, or the reason it cannot be read.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, ": cannot read '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The constraint flags into the request's oneof; 2 (usage) on a bad value.
int SetConstraint(const GenerateArgs& a, v1::GenerateRequest* req) {
  if (!a.json_schema_file.empty()) {
    absl::StatusOr<std::string> text = ReadWholeFile(a.json_schema_file, "--json-schema");
    if (!text.ok()) return Fail(text.status());
    req->set_json_schema(*std::move(text));
  } else if (!a.grammar_file.empty()) {
    absl::StatusOr<std::string> text = ReadWholeFile(a.grammar_file, "--grammar");
    if (!text.ok()) return Fail(text.status());
    req->set_gbnf(*std::move(text));
  } else if (!a.regex.empty()) {
    req->set_regex(a.regex);
  } else if (!a.choice.empty()) {
    for (absl::string_view c : absl::StrSplit(a.choice, ',')) {
      req->mutable_choice()->add_choices(std::string(c));
    }
  } else if (a.json_object) {
    req->set_json_object(true);
  }
  if (a.json_whitespace >= 0) {
    if (req->constraint_case() != v1::GenerateRequest::kJsonSchema &&
        req->constraint_case() != v1::GenerateRequest::kJsonObject) {
      std::fprintf(stderr, "minferctl: --json-whitespace needs --json-schema or --json-object\n");
      return 2;
    }
    req->set_json_max_whitespace(a.json_whitespace);
  }
  if (a.open_objects) {
    if (req->constraint_case() != v1::GenerateRequest::kJsonSchema) {
      std::fprintf(stderr, "minferctl: --open-objects needs --json-schema\n");
      return 2;
    }
    req->set_json_closed_objects(false);
  }
  return 0;
}

// The tool flags into the request's chat; 2 (usage) or 1 on a bad value.
int SetTools(const GenerateArgs& a, v1::GenerateRequest* req) {
  const bool any = !a.tools_file.empty() || !a.tool_choice.empty() ||
                   a.no_parallel_tool_calls || a.reasoning_budget >= 0;
  if (!any) return 0;
  if (!req->has_chat()) {
    std::fprintf(stderr,
                 "minferctl: --tools, --tool-choice, --no-parallel-tool-calls and "
                 "--reasoning-budget need --chat\n");
    return 2;
  }
  v1::Chat* chat = req->mutable_chat();
  if (a.reasoning_budget >= 0) chat->set_reasoning_budget(a.reasoning_budget);
  if (!a.tools_file.empty()) {
    absl::StatusOr<std::string> text = ReadWholeFile(a.tools_file, "--tools");
    if (!text.ok()) return Fail(text.status());
    absl::StatusOr<std::vector<v1::Tool>> tools = ParseToolsJson(*text);
    if (!tools.ok()) {
      std::fprintf(stderr, "minferctl: --tools %s: %s\n", a.tools_file.c_str(),
                   std::string(tools.status().message()).c_str());
      return 2;
    }
    for (v1::Tool& t : *tools) *chat->add_tools() = std::move(t);
  }
  if (!a.tool_choice.empty()) {
    absl::StatusOr<v1::ToolChoice> choice = ParseToolChoice(a.tool_choice);
    if (!choice.ok()) {
      std::fprintf(stderr, "minferctl: --tool-choice: %s\n",
                   std::string(choice.status().message()).c_str());
      return 2;
    }
    *chat->mutable_tool_choice() = *std::move(choice);
  }
  if (a.no_parallel_tool_calls) chat->set_parallel_tool_calls(false);
  return 0;
}

// Prints a chat reply's typed pieces as they stream: content as is, the
// reasoning between "[reasoning]" and "[/reasoning]" lines, each call on a
// line of its own, "[tool call N] NAME (ID) ARGUMENTS".
class ChatPrinter {
 public:
  void Add(const v1::GenerateResponse& chunk) {
    if (!chunk.reasoning_text().empty()) {
      if (section_ != kReasoning) {
        Close();
        Line();
        Put("[reasoning]\n");
        section_ = kReasoning;
      }
      Put(chunk.reasoning_text());
    }
    if (!chunk.content_text().empty()) {
      if (section_ != kContent) {
        Close();
        Line();
        section_ = kContent;
      }
      Put(chunk.content_text());
    }
    for (const v1::ToolCallDelta& d : chunk.tool_calls()) {
      if (section_ != kCall || d.index() != call_) {
        Close();
        Line();
        section_ = kCall;
        call_ = d.index();
        Put(absl::StrCat("[tool call ", d.index(), "] ", d.name(), " (", d.id(), ") "));
      }
      Put(d.arguments());
    }
    std::fflush(stdout);
  }
  // Ends the output (a newline if anything was printed).
  void End() {
    Close();
    if (printed_) Put("\n");
    std::fflush(stdout);
  }
  bool printed() const { return printed_; }

 private:
  enum Section { kNone, kReasoning, kContent, kCall };
  void Put(absl::string_view s) {
    if (s.empty()) return;
    std::fwrite(s.data(), 1, s.size(), stdout);
    printed_ = true;
    at_line_start_ = s.back() == '\n';
  }
  void Line() {
    if (printed_ && !at_line_start_) Put("\n");
  }
  void Close() {
    if (section_ == kReasoning) {
      Line();
      Put("[/reasoning]\n");
    }
    section_ = kNone;
  }
  Section section_ = kNone;
  int call_ = -1;
  bool printed_ = false;
  bool at_line_start_ = true;
};

int Generate(const GenerateArgs& a, const Globals& g, client::MinferClient& client) {
  v1::GenerateRequest req;
  if (int rc = SetConstraint(a, &req); rc != 0) return rc;
  req.set_model(a.model);
  if (a.chat) {
    if (!a.system.empty()) {
      v1::ChatMessage* s = req.mutable_chat()->add_messages();
      s->set_role("system");
      s->set_content(a.system);
    }
    v1::ChatMessage* u = req.mutable_chat()->add_messages();
    u->set_role("user");
    u->set_content(a.prompt);
    for (const std::string& kv : a.template_kwargs) {
      const size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) {
        std::fprintf(stderr, "minferctl: --template-kwarg wants K=V, got '%s'\n", kv.c_str());
        return 2;
      }
      (*req.mutable_chat()->mutable_template_kwargs())[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  } else if (!a.template_kwargs.empty()) {
    std::fprintf(stderr, "minferctl: --template-kwarg needs --chat\n");
    return 2;
  } else {
    req.set_text(a.prompt);
  }
  if (int rc = SetTools(a, &req); rc != 0) return rc;
  v1::SamplingParams* sp = req.mutable_sampling();
  if (a.temp >= 0) sp->set_temperature(a.temp);
  if (a.top_k >= 0) sp->set_top_k(a.top_k);
  if (a.top_p >= 0) sp->set_top_p(a.top_p);
  if (a.min_p >= 0) sp->set_min_p(a.min_p);
  if (a.rep >= 0) sp->set_repetition_penalty(a.rep);
  if (*a.freq_given) sp->set_frequency_penalty(a.freq);
  if (*a.pres_given) sp->set_presence_penalty(a.pres);
  if (a.last_n >= -1) sp->set_penalty_last_n(a.last_n);
  if (a.seed >= 0) sp->set_seed(static_cast<uint64_t>(a.seed));
  if (*a.max_tokens_given) req.mutable_stopping()->set_max_tokens(a.max_tokens);
  for (const std::string& s : a.stop) req.mutable_stopping()->add_stop(s);
  req.mutable_stopping()->set_ignore_eos(a.ignore_eos);
  req.mutable_options()->set_top_logprobs(a.logprobs);
  req.mutable_options()->set_parse_special(a.parse_special);
  req.set_cache_salt(a.cache_salt);
  if (a.no_speculative) req.set_speculative(false);
  std::vector<v1::SampledTokenLogprobs> logprobs;
  client::GenerateResult partial;
  // A chat's reply prints from the typed fields (reasoning, content, calls
  // apart); other prompts print the raw text.
  const bool chat = req.has_chat();
  ChatPrinter printer;
  absl::StatusOr<client::GenerateResult> r = client.Generate(
      req,
      [&](const v1::GenerateResponse& chunk) {
        if (g.json) {
          logprobs.insert(logprobs.end(), chunk.logprobs().begin(), chunk.logprobs().end());
        } else if (chat) {
          printer.Add(chunk);
        } else {
          std::fwrite(chunk.text().data(), 1, chunk.text().size(), stdout);
          std::fflush(stdout);
        }
        return true;
      },
      0, &partial);
  if (!g.json && chat) {
    // A server without the typed fields: the raw text.
    if (!printer.printed() && !partial.text.empty()) {
      std::fwrite(partial.text.data(), 1, partial.text.size(), stdout);
      std::printf("\n");
    }
    printer.End();  // before the summary on (unbuffered) stderr
  } else if (!g.json && !partial.text.empty()) {
    std::printf("\n");
    std::fflush(stdout);  // before the summary on (unbuffered) stderr
  }
  if (!r.ok()) return Fail(r.status());
  if (g.json) {
    v1::GenerateResponse all;  // the whole stream as one message
    all.mutable_token_ids()->Add(r->token_ids.begin(), r->token_ids.end());
    all.set_text(r->text);
    all.set_reasoning_text(r->reasoning);
    all.set_content_text(r->content);
    for (size_t i = 0; i < r->tool_calls.size(); ++i) {
      v1::ToolCallDelta* call = all.add_tool_calls();  // each call whole
      call->set_index(static_cast<int32_t>(i));
      call->set_id(r->tool_calls[i].id());
      call->set_name(r->tool_calls[i].name());
      call->set_arguments(r->tool_calls[i].arguments());
    }
    for (auto& lp : logprobs) *all.add_logprobs() = lp;
    all.set_finish_reason(r->finish_reason);
    *all.mutable_usage() = r->usage;
    all.set_model(r->model);
    PrintJson(all);
  } else {
    const v1::Usage& u = r->usage;
    const std::string drafts =
        u.spec_drafted_tokens() > 0
            ? absl::StrFormat("; %d of %d drafted tokens accepted", u.spec_accepted_tokens(),
                              u.spec_drafted_tokens())
            : std::string();
    std::fprintf(stderr,
                 "[%s] %s: %d prompt + %d completion tokens; ttft %.3f s, %.1f tok/s, "
                 "seed %llu%s\n",
                 FinishName(r->finish_reason).c_str(), r->model.c_str(), u.prompt_tokens(),
                 u.completion_tokens(), u.time_to_first_token_seconds(),
                 u.decode_tokens_per_second(), static_cast<unsigned long long>(u.seed()),
                 drafts.c_str());
  }
  return 0;
}

}  // namespace

void AddGenerateCommand(CLI::App& app, const Globals& g, CommandTable& table) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* c = app.add_subcommand("generate", "stream a completion to stdout");
  c->add_option("model", a->model, "model or alias")->required();
  c->add_option("prompt", a->prompt)->required();
  c->add_flag("--chat", a->chat, "send the prompt as a user message (chat template)");
  c->add_option("--system", a->system, "system message (with --chat)");
  c->add_option("--template-kwarg", a->template_kwargs,
                "K=V: a chat template variable, V read as JSON (e.g. enable_thinking=false; "
                "repeatable, with --chat)");
  c->add_option("--tools", a->tools_file,
                "FILE: functions the model may call (with --chat): a JSON array of OpenAI "
                "tools ({\"type\": \"function\", \"function\": {...}}) or of {name, "
                "description, parameters}");
  c->add_option("--tool-choice", a->tool_choice,
                "auto|none|required|NAME (with --chat): required or a function's NAME forces "
                "a call whose arguments follow its schema");
  c->add_flag("--no-parallel-tool-calls", a->no_parallel_tool_calls,
              "a forced reply holds one call (with --chat)");
  c->add_option("--reasoning-budget", a->reasoning_budget,
                "N: tokens the think block may take; then it is closed (with --chat; "
                "models whose template writes <think>)")
      ->check(CLI::NonNegativeNumber);
  // Sent as given, 0 included, so the server's own check answers (a
  // silent default for 0 would hide that the API refuses it).
  a->max_tokens_given = c->add_option("-n,--max-tokens", a->max_tokens,
                                      "completion tokens at most (default: the server's)");
  c->add_option("--stop", a->stop, "stop string (repeatable)");
  c->add_flag("--ignore-eos", a->ignore_eos, "keep generating past end-of-turn");
  c->add_flag("--no-speculative", a->no_speculative,
              "opt out of the model's speculative decoding (same tokens, no drafts)");
  c->add_flag("--parse-special", a->parse_special, "recognize control tokens in the prompt");
  c->add_option("--temp", a->temp, "temperature (0 = greedy; server default 1)");
  c->add_option("--top-k", a->top_k, "top-k (0 = off)");
  c->add_option("--top-p", a->top_p, "top-p (1 = off)");
  c->add_option("--min-p", a->min_p, "min-p (0 = off)");
  c->add_option("--repeat-penalty", a->rep, "repetition penalty (1 = off)");
  a->freq_given = c->add_option("--frequency-penalty", a->freq, "frequency penalty");
  a->pres_given = c->add_option("--presence-penalty", a->pres, "presence penalty");
  c->add_option("--repeat-last-n", a->last_n, "penalty window (-1 = all, 0 = off)");
  c->add_option("--seed", a->seed, "sampling seed (default: random)");
  c->add_option("--logprobs", a->logprobs, "top-n logprobs per token (with --json)");
  c->add_option("--cache-salt", a->cache_salt,
                "prefix-cache salt: requests with other salts never share cached prompt blocks");
  // Structured output: one constraint at most.
  CLI::Option* schema = c->add_option("--json-schema", a->json_schema_file,
                                      "FILE: a JSON Schema the output must validate against");
  CLI::Option* grammar =
      c->add_option("--grammar", a->grammar_file, "FILE: a GBNF grammar (llama.cpp's) for the output");
  CLI::Option* regex =
      c->add_option("--regex", a->regex, "R: a regular expression the whole output matches");
  CLI::Option* choice =
      c->add_option("--choice", a->choice, "A,B,C: the output is exactly one of these strings");
  CLI::Option* json_object =
      c->add_flag("--json-object", a->json_object, "the output is a JSON object (JSON mode)");
  const std::vector<CLI::Option*> constraints = {schema, grammar, regex, choice, json_object};
  for (CLI::Option* x : constraints) {
    for (CLI::Option* y : constraints) {
      if (x != y) x->excludes(y);
    }
  }
  c->add_option("--json-whitespace", a->json_whitespace,
                "whitespace bytes allowed between JSON tokens (0-64; server default 16)");
  c->add_flag("--open-objects", a->open_objects,
              "with --json-schema: objects without additionalProperties take other keys after "
              "the named ones (JSON Schema's reading; default: none)");
  table.Add(c, [a, &g](client::MinferClient& client) { return Generate(*a, g, client); });
}

}  // namespace minfer::ctl
