// minferctl: the command-line client of minferd.
//
//   minferctl [--addr A] [--token T] [--json] [--tls --ca-cert F] COMMAND ...
//     load NAME PATH [--ctx N --parallel N --kv-type T --backend B --knob K=V ...]
//     unload NAME [--drain-timeout S | --cancel]
//     list | status [NAME]
//     generate NAME PROMPT [--chat] [--system S] [--template-kwarg K=V] [sampling and stopping flags]
//     tokenize NAME TEXT | detokenize NAME ID...
//     knobs list | knobs get K | knobs set K V | knobs reset K   [--model NAME]
//     alias set ALIAS MODEL | alias list | alias delete ALIAS
//     health [NAME]
//     bench MODEL... [-c STREAMS] [-n TOKENS] [-p PROMPT] [--chat]   (a load test)
//           [--http URL]   (through the OpenAI-compatible HTTP API)
//   --api-key K (MINFER_API_KEY): a tenant's key for generate, bench,
//   tokenize and detokenize; --token stays the admin token
//
// Tables by default, JSON (the API messages, proto field names) with --json.
// Errors print one line, "minferctl: CODE: message", and exit 1 (usage
// errors exit 2). `health` exits 1 unless the answer is SERVING.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/http_stream.h"
#include "client/minfer_client.h"
#include "daemon/version.h"
#include "google/protobuf/util/json_util.h"

namespace {

namespace v1 = minfer::v1;
using minfer::client::MinferClient;

struct Globals {
  minfer::client::ClientOptions client;
  bool json = false;
};

int Fail(const absl::Status& s) {
  std::cerr << "minferctl: " << absl::StatusCodeToString(s.code()) << ": " << s.message() << "\n";
  return 1;
}

void PrintJson(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = true;
  o.always_print_primitive_fields = true;
  o.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  std::cout << out;
  if (out.empty() || out.back() != '\n') std::cout << "\n";
}

std::string Mib(uint64_t bytes) { return absl::StrFormat("%.1f MiB", bytes / 1048576.0); }

std::string StateName(v1::ModelState s) {
  switch (s) {
    case v1::MODEL_STATE_LOADING: return "loading";
    case v1::MODEL_STATE_READY: return "ready";
    case v1::MODEL_STATE_UNLOADING: return "unloading";
    case v1::MODEL_STATE_FAILED: return "failed";
    default: return "unknown";
  }
}

std::string FinishName(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_LENGTH: return "length";
    case v1::FINISH_REASON_STOP: return "stop";
    case v1::FINISH_REASON_EOS: return "eos";
    case v1::FINISH_REASON_CANCELLED: return "cancelled";
    default: return "unspecified";
  }
}

// Left-aligned columns, two spaces apart.
void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& r : rows) {
    width.resize(std::max(width.size(), r.size()), 0);
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line += std::string(width[i] - r[i].size() + 2, ' ');
    }
    std::cout << line << "\n";
  }
}

void PrintModel(const v1::ModelStatus& m) {
  std::vector<std::vector<std::string>> rows = {
      {"name:", m.name()},
      {"state:", StateName(m.state()) + (m.reason().empty() ? "" : " (" + m.reason() + ")")},
      {"path:", m.path()},
      {"backend:", m.backend()},
      {"context:", absl::StrCat(m.n_ctx(), " tokens x ", m.parallel(), " sequences, KV ",
                                m.kv_type())},
      {"sequences:", absl::StrCat(m.active_sequences(), " active, ", m.queued_sequences(),
                                  " queued (queue size ", m.queue_size(), ")")},
      {"memory:", absl::StrCat(Mib(m.memory().total_bytes()), " (weights ",
                               Mib(m.memory().weights_bytes()), ", KV ",
                               Mib(m.memory().kv_bytes()), ", scratch ",
                               Mib(m.memory().scratch_bytes()), "; reserved ",
                               Mib(m.memory().reserved_bytes()), "; held by the backend ",
                               Mib(m.memory().backend_bytes()), ")")},
      {"requests:", absl::StrCat(m.counters().requests(), " (", m.counters().completed(),
                                 " completed, ", m.counters().cancelled(), " cancelled, ",
                                 m.counters().failed(), " failed, ",
                                 m.counters().rejected_queue_full(), " rejected: queue full)")},
      {"tokens:", absl::StrCat(m.counters().prompt_tokens(), " in, ",
                               m.counters().completion_tokens(), " out")},
  };
  if (m.has_kv_pool()) {
    const v1::KvPoolStatus& kv = m.kv_pool();
    rows.push_back({"kv pool:", absl::StrCat(kv.blocks_used(), " of ", kv.blocks_total(),
                                             " blocks used (", kv.block_tokens(), " tokens, ",
                                             Mib(kv.block_bytes()), " each); per sequence: ",
                                             kv.sequence_blocks_size() == 0
                                                 ? std::string("-")
                                                 : absl::StrJoin(kv.sequence_blocks(), " "))});
    rows.push_back({"batching:", absl::StrCat(kv.steps(), " steps of up to ", kv.token_budget(),
                                              " tokens, ", kv.preemptions(), " preemptions")});
    rows.push_back(
        {"prefixes:",
         kv.prefix_cache()
             ? absl::StrCat(kv.blocks_cached(), " free blocks cached; ", kv.prefix_hit_tokens(),
                            " prompt tokens reused, ", kv.prefix_evictions(), " evictions")
             : std::string("off")});
  }
  if (m.state() == v1::MODEL_STATE_LOADING) {
    rows.push_back({"loaded:", absl::StrCat(Mib(m.load_bytes_done()), " of ",
                                            Mib(m.load_bytes_total()))});
  } else {
    rows.push_back({"load time:", absl::StrFormat("%.2f s", m.load_seconds())});
  }
  if (!m.knobs().empty()) {
    std::vector<std::string> kv;
    for (const auto& [k, v] : m.knobs()) kv.push_back(k + "=" + v);
    std::sort(kv.begin(), kv.end());
    rows.push_back({"knobs:", absl::StrJoin(kv, " ")});
  }
  if (!m.aliases().empty()) rows.push_back({"aliases:", absl::StrJoin(m.aliases(), ", ")});
  if (!m.summary().empty()) rows.push_back({"model:", m.summary()});
  PrintTable(rows);
}

// "loading NAME [##########----------]  50% 12.3/24.6 MiB" on stderr.
void ProgressBar(const std::string& name, const v1::LoadModelResponse& p) {
  if (p.bytes_total() == 0 && p.state() != v1::MODEL_STATE_READY) {
    std::fprintf(stderr, "\rloading %s ...", name.c_str());
    std::fflush(stderr);
    return;
  }
  const double frac = p.bytes_total() > 0 ? static_cast<double>(p.bytes_done()) / p.bytes_total()
                                          : (p.state() == v1::MODEL_STATE_READY ? 1.0 : 0.0);
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(frac * kWidth + 0.5);
  std::fprintf(stderr, "\rloading %s [%s%s] %3d%% %s/%s", name.c_str(),
               std::string(filled, '#').c_str(), std::string(kWidth - filled, '-').c_str(),
               static_cast<int>(frac * 100 + 0.5), Mib(p.bytes_done()).c_str(),
               Mib(p.bytes_total()).c_str());
  if (p.state() == v1::MODEL_STATE_READY) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}


// One stream of `minferctl bench`.
struct BenchStream {
  std::string model;
  absl::Status status;
  minfer::client::GenerateResult result;
  double ttft = 0;        // client-side: request sent -> first token
  double decode_tps = 0;  // client-side: tokens after the first / their span
};

// Runs every stream at once (one thread each), greedy with ignore_eos so
// each produces exactly `max_tokens`; returns the streams and the wall time.
// With `http`, through the HTTP API (chat completions with `chat`, else
// completions), else over gRPC (the prompt as a user message with `chat`).
std::vector<BenchStream> RunBench(MinferClient& client, const std::vector<std::string>& models,
                                  int streams_per_model, int max_tokens, const std::string& prompt,
                                  bool chat, const minfer::client::HttpTarget* http,
                                  double* wall_seconds) {
  std::vector<BenchStream> out;
  for (const std::string& m : models) {
    for (int i = 0; i < streams_per_model; ++i) out.push_back({m});
  }
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = Clock::now();
  std::vector<std::thread> threads;
  for (BenchStream& bs : out) {
    threads.emplace_back([&client, &bs, max_tokens, &prompt, chat, http] {
      const Clock::time_point start = Clock::now();
      Clock::time_point first, last;
      int64_t tokens = 0, first_tokens = 0;
      auto count = [&](size_t n) {
        last = Clock::now();
        if (tokens == 0) {
          first = last;
          first_tokens = static_cast<int64_t>(n);
        }
        tokens += static_cast<int64_t>(n);
      };
      if (http != nullptr) {
        minfer::client::HttpStreamRequest hr;
        hr.model = bs.model;
        hr.prompt = prompt;
        hr.chat = chat;
        hr.max_tokens = max_tokens;
        auto r = minfer::client::HttpStream(*http, hr, count);
        if (!r.ok()) {
          bs.status = r.status();
          return;
        }
        bs.result.token_ids = std::move(r->token_ids);
        bs.result.text = std::move(r->text);
        bs.result.usage.set_prompt_tokens(r->prompt_tokens);
      } else {
        v1::GenerateRequest req;
        req.set_model(bs.model);
        if (chat) {
          v1::ChatMessage* m = req.mutable_chat()->add_messages();
          m->set_role("user");
          m->set_content(prompt);
        } else {
          req.set_text(prompt);
        }
        req.mutable_sampling()->set_temperature(0);
        req.mutable_stopping()->set_max_tokens(max_tokens);
        req.mutable_stopping()->set_ignore_eos(true);
        auto r = client.Generate(req, [&](const v1::GenerateResponse& chunk) {
          if (chunk.token_ids_size() > 0) count(chunk.token_ids_size());
          return true;
        });
        if (!r.ok()) {
          bs.status = r.status();
          return;
        }
        bs.result = std::move(*r);
      }
      bs.ttft = std::chrono::duration<double>(first - start).count();
      const double span = std::chrono::duration<double>(last - first).count();
      if (span > 0) bs.decode_tps = static_cast<double>(tokens - first_tokens) / span;
    });
  }
  for (std::thread& t : threads) t.join();
  *wall_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Globals g;
  CLI::App app{"minferctl: control and query minferd", "minferctl"};
  app.require_subcommand(1);
  const char* env_addr = std::getenv("MINFER_ADDR");
  if (env_addr != nullptr && *env_addr != '\0') g.client.address = env_addr;
  app.add_option("--addr", g.client.address, "server address (env MINFER_ADDR)")
      ->capture_default_str();
  app.add_option("--token", g.client.token, "admin bearer token")->envname("MINFER_ADMIN_TOKEN");
  app.add_option("--api-key", g.client.api_key,
                 "a tenant's API key: the bearer of generate, bench, tokenize, detokenize "
                 "(default: --token)")
      ->envname("MINFER_API_KEY");
  app.add_flag("--json", g.json, "print JSON (the API's messages)");
  app.add_flag("--tls", g.client.tls, "connect with TLS");
  app.add_option("--ca-cert", g.client.ca_cert_file, "PEM roots to trust (with --tls)");
  app.add_option("--tls-server-name", g.client.tls_server_name,
                 "name to verify in the server certificate (with --tls)");
  app.add_option("--timeout", g.client.timeout_seconds, "deadline of unary calls, seconds");
  app.set_version_flag("--version", std::string("minferctl ") + minfer::kMinferVersion);

  // load
  v1::LoadModelRequest load;
  std::vector<std::string> load_knobs;
  bool quiet = false;
  CLI::App* c_load = app.add_subcommand("load", "load a GGUF model into a new slot");
  c_load->add_option("name", *load.mutable_name(), "serving name")->required();
  c_load->add_option("path", *load.mutable_path(), "GGUF file, as the daemon sees it")->required();
  int64_t load_ctx = 0;
  int32_t load_parallel = 0, load_queue = 0;
  int64_t load_kv_tokens = 0;
  std::string load_kv, load_backend;
  c_load->add_option("--ctx", load_ctx, "context per sequence (0 = server default)");
  c_load->add_option("--parallel", load_parallel, "concurrent sequences (0 = server default)");
  c_load->add_option("--queue-size", load_queue, "queued requests beyond parallel");
  c_load->add_option("--kv-tokens", load_kv_tokens,
                     "KV pool size in tokens (0 = parallel x ctx; smaller pools preempt)");
  c_load->add_option("--kv-type", load_kv, "f32, f16 or q8_0");
  c_load->add_option("--backend", load_backend, "cpu, cuda or auto");
  c_load->add_option("--knob", load_knobs, "K=V per-model knob override (repeatable)");
  c_load->add_flag("-q,--quiet", quiet, "no progress bar");

  // unload
  std::string unload_name;
  double unload_timeout = -1;
  bool unload_cancel = false;
  CLI::App* c_unload = app.add_subcommand("unload", "drain and unload a model");
  c_unload->add_option("name", unload_name)->required();
  auto* o_drain = c_unload->add_option("--drain-timeout", unload_timeout,
                                       "seconds in-flight streams may run (default: server's)");
  c_unload->add_flag("--cancel", unload_cancel, "cancel in-flight streams at once")
      ->excludes(o_drain);

  CLI::App* c_list = app.add_subcommand("list", "list the models");
  std::string status_name;
  CLI::App* c_status = app.add_subcommand("status", "server status, or one model's");
  c_status->add_option("name", status_name, "model or alias");

  // generate
  std::string gen_model, gen_prompt, gen_system;
  bool gen_chat = false, gen_ignore_eos = false, gen_parse_special = false;
  int32_t gen_max_tokens = 0, gen_top_k = -1, gen_logprobs = 0, gen_last_n = -2;
  float gen_temp = -1, gen_top_p = -1, gen_min_p = -1, gen_rep = -1, gen_freq = 0, gen_pres = 0;
  int64_t gen_seed = -1;
  std::vector<std::string> gen_stop;
  CLI::App* c_gen = app.add_subcommand("generate", "stream a completion to stdout");
  c_gen->add_option("model", gen_model, "model or alias")->required();
  c_gen->add_option("prompt", gen_prompt)->required();
  c_gen->add_flag("--chat", gen_chat, "send the prompt as a user message (chat template)");
  c_gen->add_option("--system", gen_system, "system message (with --chat)");
  std::vector<std::string> gen_kwargs;
  c_gen->add_option("--template-kwarg", gen_kwargs,
                    "K=V: a chat template variable, V read as JSON (e.g. enable_thinking=false; "
                    "repeatable, with --chat)");
  // Sent as given, 0 included, so the server's own check answers (a
  // silent default for 0 would hide that the API refuses it).
  auto* o_max_tokens = c_gen->add_option("-n,--max-tokens", gen_max_tokens,
                                         "completion tokens at most (default: the server's)");
  c_gen->add_option("--stop", gen_stop, "stop string (repeatable)");
  c_gen->add_flag("--ignore-eos", gen_ignore_eos, "keep generating past end-of-turn");
  c_gen->add_flag("--parse-special", gen_parse_special, "recognize control tokens in the prompt");
  c_gen->add_option("--temp", gen_temp, "temperature (0 = greedy; server default 1)");
  c_gen->add_option("--top-k", gen_top_k, "top-k (0 = off)");
  c_gen->add_option("--top-p", gen_top_p, "top-p (1 = off)");
  c_gen->add_option("--min-p", gen_min_p, "min-p (0 = off)");
  c_gen->add_option("--repeat-penalty", gen_rep, "repetition penalty (1 = off)");
  auto* o_freq = c_gen->add_option("--frequency-penalty", gen_freq, "frequency penalty");
  auto* o_pres = c_gen->add_option("--presence-penalty", gen_pres, "presence penalty");
  c_gen->add_option("--repeat-last-n", gen_last_n, "penalty window (-1 = all, 0 = off)");
  c_gen->add_option("--seed", gen_seed, "sampling seed (default: random)");
  c_gen->add_option("--logprobs", gen_logprobs, "top-n logprobs per token (with --json)");

  // tokenize / detokenize
  std::string tok_model, tok_text;
  bool tok_parse_special = false;
  CLI::App* c_tok = app.add_subcommand("tokenize", "token ids of a text");
  c_tok->add_option("model", tok_model)->required();
  c_tok->add_option("text", tok_text)->required();
  c_tok->add_flag("--parse-special", tok_parse_special, "recognize control tokens");
  std::string detok_model;
  std::vector<int32_t> detok_ids;
  CLI::App* c_detok = app.add_subcommand("detokenize", "text of token ids");
  c_detok->add_option("model", detok_model)->required();
  c_detok->add_option("ids", detok_ids)->required();

  // knobs
  std::string knob_model, knob_name, knob_value;
  CLI::App* c_knobs = app.add_subcommand("knobs", "list, read and set tuning knobs");
  c_knobs->require_subcommand(1);
  c_knobs->add_option("--model", knob_model, "per-model values of this model");
  CLI::App* c_knobs_list = c_knobs->add_subcommand("list", "every knob");
  CLI::App* c_knobs_get = c_knobs->add_subcommand("get", "one knob");
  c_knobs_get->add_option("name", knob_name)->required();
  CLI::App* c_knobs_set = c_knobs->add_subcommand("set", "set a knob (globally or --model)");
  c_knobs_set->add_option("name", knob_name)->required();
  c_knobs_set->add_option("value", knob_value)->required();
  CLI::App* c_knobs_reset = c_knobs->add_subcommand("reset", "restore the default / drop override");
  c_knobs_reset->add_option("name", knob_name)->required();
  for (CLI::App* sub : {c_knobs_list, c_knobs_get, c_knobs_set, c_knobs_reset}) {
    sub->add_option("--model", knob_model, "per-model value of this model");
  }

  // alias
  std::string alias_name, alias_model;
  CLI::App* c_alias = app.add_subcommand("alias", "serving aliases");
  c_alias->require_subcommand(1);
  CLI::App* c_alias_set = c_alias->add_subcommand("set", "point ALIAS at MODEL");
  c_alias_set->add_option("alias", alias_name)->required();
  c_alias_set->add_option("model", alias_model)->required();
  c_alias->add_subcommand("list", "every alias");  // handled as the default below
  CLI::App* c_alias_delete = c_alias->add_subcommand("delete", "remove an alias");
  c_alias_delete->add_option("alias", alias_name)->required();

  CLI::App* c_tenants =
      app.add_subcommand("tenants", "the configured tenants: shares, caps, quotas and usage");

  std::vector<std::string> bench_models;
  int bench_streams = 1, bench_tokens = 128;
  std::string bench_prompt = "The quick brown fox jumps over the lazy dog. Once upon a time";
  CLI::App* c_bench = app.add_subcommand(
      "bench", "load test: concurrent greedy streams; per-stream and aggregate tokens/s");
  c_bench->add_option("models", bench_models, "models (or aliases) to stream from")->required();
  c_bench->add_option("-c,--streams", bench_streams, "concurrent streams per model")
      ->capture_default_str();
  c_bench->add_option("-n,--max-tokens", bench_tokens, "tokens per stream (ignore_eos)")
      ->capture_default_str();
  c_bench->add_option("-p,--prompt", bench_prompt, "prompt text")->capture_default_str();
  bool bench_chat = false;
  minfer::client::HttpTarget bench_http;
  c_bench->add_flag("--chat", bench_chat, "send the prompt as a user message (chat template)");
  c_bench->add_option("--http", bench_http.url,
                      "stream through the OpenAI-compatible HTTP API at this URL "
                      "(http://host:port) instead of gRPC");

  std::string health_name;
  CLI::App* c_health = app.add_subcommand("health", "grpc.health.v1 check (server or model)");
  c_health->add_option("name", health_name, "model or alias (default: the server)");

  // CLI11 reports usage errors by throwing; this is the one place minferctl
  // catches, and only CLI11's own exception type.
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }

  absl::StatusOr<std::unique_ptr<MinferClient>> made = MinferClient::Create(g.client);
  if (!made.ok()) return Fail(made.status());
  MinferClient& client = **made;

  if (*c_load) {
    load.set_n_ctx(load_ctx);
    load.set_parallel(load_parallel);
    load.set_queue_size(load_queue);
    load.set_kv_tokens(load_kv_tokens);
    load.set_kv_type(load_kv);
    load.set_backend(load_backend);
    for (const std::string& kv : load_knobs) {
      size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) {
        return Fail(absl::InvalidArgumentError(absl::StrCat("--knob wants K=V, got '", kv, "'")));
      }
      (*load.mutable_knobs())[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    const bool bar = !quiet && !g.json;
    absl::StatusOr<v1::ModelStatus> st = client.LoadModel(load, [&](const v1::LoadModelResponse& p) {
      if (bar) ProgressBar(load.name(), p);
    });
    if (!st.ok()) {
      if (bar) std::fprintf(stderr, "\n");
      return Fail(st.status());
    }
    if (g.json) {
      PrintJson(*st);
    } else {
      std::cout << "loaded " << st->name() << ": " << st->summary() << "\n";
    }
    return 0;
  }

  if (*c_unload) {
    v1::UnloadModelRequest req;
    req.set_name(unload_name);
    if (*o_drain) req.set_drain_timeout_seconds(unload_timeout);
    req.set_cancel(unload_cancel);
    absl::StatusOr<v1::UnloadModelResponse> r = client.UnloadModel(req);
    if (!r.ok()) return Fail(r.status());
    if (g.json) {
      PrintJson(*r);
    } else {
      std::cout << absl::StrFormat("unloaded %s in %.2f s (%d streams finished, %d cancelled)\n",
                                   unload_name, r->seconds(), r->completed_sequences(),
                                   r->cancelled_sequences());
    }
    return 0;
  }

  if (*c_list) {
    absl::StatusOr<v1::ListModelsResponse> r = client.ListModels();
    if (!r.ok()) return Fail(r.status());
    if (g.json) {
      PrintJson(*r);
      return 0;
    }
    std::vector<std::vector<std::string>> rows = {
        {"NAME", "STATE", "BACKEND", "CTX", "PARALLEL", "ACTIVE", "QUEUED", "MEMORY", "ALIASES"}};
    for (const v1::ModelStatus& m : r->models()) {
      rows.push_back({m.name(), StateName(m.state()), m.backend(), absl::StrCat(m.n_ctx()),
                      absl::StrCat(m.parallel()), absl::StrCat(m.active_sequences()),
                      absl::StrCat(m.queued_sequences()), Mib(m.memory().total_bytes()),
                      absl::StrJoin(m.aliases(), ",")});
    }
    PrintTable(rows);
    return 0;
  }

  if (*c_status) {
    if (!status_name.empty()) {
      absl::StatusOr<v1::ModelStatus> r = client.GetModelStatus(status_name);
      if (!r.ok()) return Fail(r.status());
      if (g.json) {
        PrintJson(*r);
      } else {
        PrintModel(*r);
      }
      return 0;
    }
    absl::StatusOr<v1::ServerStatus> r = client.GetServerStatus();
    if (!r.ok()) return Fail(r.status());
    if (g.json) {
      PrintJson(*r);
      return 0;
    }
    std::vector<std::vector<std::string>> rows = {
        {"version:", r->version()},
        {"uptime:", absl::StrFormat("%.1f s", r->uptime_seconds())},
        {"draining:", r->draining() ? "yes" : "no"},
        {"models:", absl::StrCat(r->models())},
        {"sequences:", absl::StrCat(r->active_sequences(), " active, ", r->queued_sequences(),
                                    " queued")},
        {"memory:", absl::StrCat(Mib(r->memory_reserved_bytes()), " reserved of ",
                                 r->memory_limit_bytes() > 0 ? Mib(r->memory_limit_bytes())
                                                             : std::string("available memory"))},
    };
    for (const v1::Device& d : r->devices()) {
      rows.push_back({"device:", absl::StrCat(d.kind(), " ", d.name(), ", ", d.cores(),
                                              " cores, ", Mib(d.memory_free_bytes()), " free of ",
                                              Mib(d.memory_total_bytes()))});
    }
    PrintTable(rows);
    return 0;
  }

  if (*c_gen) {
    v1::GenerateRequest req;
    req.set_model(gen_model);
    if (gen_chat) {
      if (!gen_system.empty()) {
        v1::ChatMessage* s = req.mutable_chat()->add_messages();
        s->set_role("system");
        s->set_content(gen_system);
      }
      v1::ChatMessage* u = req.mutable_chat()->add_messages();
      u->set_role("user");
      u->set_content(gen_prompt);
      for (const std::string& kv : gen_kwargs) {
        const size_t eq = kv.find('=');
        if (eq == std::string::npos || eq == 0) {
          std::fprintf(stderr, "minferctl: --template-kwarg wants K=V, got '%s'\n", kv.c_str());
          return 2;
        }
        (*req.mutable_chat()->mutable_template_kwargs())[kv.substr(0, eq)] = kv.substr(eq + 1);
      }
    } else if (!gen_kwargs.empty()) {
      std::fprintf(stderr, "minferctl: --template-kwarg needs --chat\n");
      return 2;
    } else {
      req.set_text(gen_prompt);
    }
    v1::SamplingParams* sp = req.mutable_sampling();
    if (gen_temp >= 0) sp->set_temperature(gen_temp);
    if (gen_top_k >= 0) sp->set_top_k(gen_top_k);
    if (gen_top_p >= 0) sp->set_top_p(gen_top_p);
    if (gen_min_p >= 0) sp->set_min_p(gen_min_p);
    if (gen_rep >= 0) sp->set_repetition_penalty(gen_rep);
    if (*o_freq) sp->set_frequency_penalty(gen_freq);
    if (*o_pres) sp->set_presence_penalty(gen_pres);
    if (gen_last_n >= -1) sp->set_penalty_last_n(gen_last_n);
    if (gen_seed >= 0) sp->set_seed(static_cast<uint64_t>(gen_seed));
    if (*o_max_tokens) req.mutable_stopping()->set_max_tokens(gen_max_tokens);
    for (const std::string& s : gen_stop) req.mutable_stopping()->add_stop(s);
    req.mutable_stopping()->set_ignore_eos(gen_ignore_eos);
    req.mutable_options()->set_top_logprobs(gen_logprobs);
    req.mutable_options()->set_parse_special(gen_parse_special);
    std::vector<v1::SampledTokenLogprobs> logprobs;
    minfer::client::GenerateResult partial;
    absl::StatusOr<minfer::client::GenerateResult> r = client.Generate(
        req,
        [&](const v1::GenerateResponse& chunk) {
          if (g.json) {
            logprobs.insert(logprobs.end(), chunk.logprobs().begin(), chunk.logprobs().end());
          } else {
            std::fwrite(chunk.text().data(), 1, chunk.text().size(), stdout);
            std::fflush(stdout);
          }
          return true;
        },
        0, &partial);
    if (!g.json && !partial.text.empty()) {
      std::printf("\n");
      std::fflush(stdout);  // before the summary on (unbuffered) stderr
    }
    if (!r.ok()) return Fail(r.status());
    if (g.json) {
      v1::GenerateResponse all;  // the whole stream as one message
      all.mutable_token_ids()->Add(r->token_ids.begin(), r->token_ids.end());
      all.set_text(r->text);
      for (auto& lp : logprobs) *all.add_logprobs() = lp;
      all.set_finish_reason(r->finish_reason);
      *all.mutable_usage() = r->usage;
      all.set_model(r->model);
      PrintJson(all);
    } else {
      const v1::Usage& u = r->usage;
      std::fprintf(stderr,
                   "[%s] %s: %d prompt + %d completion tokens; ttft %.3f s, %.1f tok/s, "
                   "seed %llu\n",
                   FinishName(r->finish_reason).c_str(), r->model.c_str(), u.prompt_tokens(),
                   u.completion_tokens(), u.time_to_first_token_seconds(),
                   u.decode_tokens_per_second(), static_cast<unsigned long long>(u.seed()));
    }
    return 0;
  }

  if (*c_tok) {
    v1::TokenizeRequest req;
    req.set_model(tok_model);
    req.set_text(tok_text);
    req.set_parse_special(tok_parse_special);
    absl::StatusOr<v1::TokenizeResponse> r = client.Tokenize(req);
    if (!r.ok()) return Fail(r.status());
    if (g.json) {
      PrintJson(*r);
    } else {
      std::vector<std::vector<std::string>> rows = {{"ID", "TOKEN"}};
      for (int i = 0; i < r->ids_size(); ++i) rows.push_back({absl::StrCat(r->ids(i)), r->tokens(i)});
      PrintTable(rows);
    }
    return 0;
  }

  if (*c_detok) {
    absl::StatusOr<std::string> r = client.Detokenize(detok_model, detok_ids);
    if (!r.ok()) return Fail(r.status());
    std::cout << *r << "\n";
    return 0;
  }

  if (*c_knobs) {
    if (*c_knobs_list) {
      absl::StatusOr<v1::ListKnobsResponse> r = client.ListKnobs(knob_model);
      if (!r.ok()) return Fail(r.status());
      if (g.json) {
        PrintJson(*r);
        return 0;
      }
      std::vector<std::vector<std::string>> rows = {
          {"NAME", "VALUE", "DEFAULT", "SCOPE", "EFFECT", "TYPE"}};
      for (const v1::Knob& k : r->knobs()) {
        rows.push_back({k.name(), k.value() + (k.overridden() ? " (model)" : ""),
                        k.default_value(), k.scope(), k.effect(), k.type()});
      }
      PrintTable(rows);
      return 0;
    }
    absl::StatusOr<v1::Knob> r;
    if (*c_knobs_get) {
      r = client.GetKnob(knob_name, knob_model);
    } else {
      v1::SetKnobRequest req;
      req.set_name(knob_name);
      req.set_value(knob_value);
      req.set_model(knob_model);
      req.set_reset(static_cast<bool>(*c_knobs_reset));
      r = client.SetKnob(req);
    }
    if (!r.ok()) return Fail(r.status());
    if (g.json) {
      PrintJson(*r);
      return 0;
    }
    std::vector<std::vector<std::string>> rows = {
        {"name:", r->name()},
        {"value:", r->value() + (r->overridden() ? " (override of model " + r->model() + ")" : "")},
        {"default:", r->default_value()},
        {"type:", r->type() + (r->allowed().empty() ? "" : " {" + absl::StrJoin(r->allowed(), ", ") + "}")},
        {"scope:", r->scope()},
        {"effect:", r->effect()},
        {"help:", r->help()}};
    PrintTable(rows);
    return 0;
  }

  if (*c_alias) {
    if (*c_alias_set) {
      absl::StatusOr<v1::SetAliasResponse> r = client.SetAlias(alias_name, alias_model);
      if (!r.ok()) return Fail(r.status());
      if (g.json) {
        PrintJson(*r);
      } else {
        std::cout << alias_name << " -> " << alias_model
                  << (r->previous_model().empty() ? "" : " (was " + r->previous_model() + ")")
                  << "\n";
      }
      return 0;
    }
    if (*c_alias_delete) {
      absl::Status s = client.DeleteAlias(alias_name);
      if (!s.ok()) return Fail(s);
      if (!g.json) std::cout << "deleted alias " << alias_name << "\n";
      return 0;
    }
    absl::StatusOr<v1::ListAliasesResponse> r = client.ListAliases();
    if (!r.ok()) return Fail(r.status());
    if (g.json) {
      PrintJson(*r);
      return 0;
    }
    std::vector<std::vector<std::string>> rows = {{"ALIAS", "MODEL"}};
    for (const v1::Alias& a : r->aliases()) rows.push_back({a.name(), a.model()});
    PrintTable(rows);
    return 0;
  }

  if (*c_tenants) {
    absl::StatusOr<v1::ListTenantsResponse> r = client.ListTenants();
    if (!r.ok()) return Fail(r.status());
    if (g.json) {
      PrintJson(*r);
      return 0;
    }
    if (r->tenants().empty()) {
      std::cout << "no tenants configured: generation is open to every client\n";
      return 0;
    }
    std::vector<std::vector<std::string>> rows = {
        {"TENANT", "WEIGHT", "STREAMS", "QUOTA (WINDOW)", "ADMITTED", "REJECTED cap/quota/model",
         "TOKENS in/out", "CACHED"}};
    for (const v1::TenantStatus& t : r->tenants()) {
      rows.push_back(
          {t.name(), absl::StrCat(t.weight()),
           t.max_streams() > 0 ? absl::StrCat(t.streams(), " of ", t.max_streams())
                               : absl::StrCat(t.streams()),
           t.quota_tokens() > 0 ? absl::StrCat(t.window_tokens(), " of ", t.quota_tokens(),
                                               " (", t.quota_window_seconds(), " s)")
                                : std::string("-"),
           absl::StrCat(t.admitted()),
           absl::StrCat(t.rejected_cap(), "/", t.rejected_quota(), "/", t.rejected_model()),
           absl::StrCat(t.prompt_tokens(), "/", t.completion_tokens()),
           absl::StrCat(t.cached_tokens())});
    }
    PrintTable(rows);
    return 0;
  }

  if (*c_bench) {
    if (bench_streams < 1 || bench_tokens < 2) {
      return Fail(absl::InvalidArgumentError("bench wants --streams >= 1 and --max-tokens >= 2"));
    }
    double wall = 0;
    bench_http.api_key = g.client.api_key;  // the global --api-key
    std::vector<BenchStream> runs =
        RunBench(client, bench_models, bench_streams, bench_tokens, bench_prompt, bench_chat,
                 bench_http.url.empty() ? nullptr : &bench_http, &wall);
    int failed = 0;
    int64_t total_tokens = 0;
    // Greedy streams of one model must agree token for token.
    std::map<std::string, std::vector<int32_t>> first_ids;
    int mismatched = 0;
    for (const BenchStream& b : runs) {
      if (!b.status.ok()) {
        ++failed;
        continue;
      }
      total_tokens += static_cast<int64_t>(b.result.token_ids.size());
      auto [it, inserted] = first_ids.emplace(b.model, b.result.token_ids);
      if (!inserted && it->second != b.result.token_ids) ++mismatched;
    }
    if (g.json) {
      std::cout << "{\"streams\": [";
      for (size_t i = 0; i < runs.size(); ++i) {
        const BenchStream& b = runs[i];
        std::cout << (i ? ", " : "") << "{\"model\": \"" << b.model << "\", \"ok\": "
                  << (b.status.ok() ? "true" : "false")
                  << absl::StrFormat(", \"ttft_s\": %.4f, \"decode_tps\": %.2f, "
                                     "\"server_decode_tps\": %.2f, \"step_tps\": %.2f, \"ids\": [",
                                     b.ttft, b.decode_tps, b.result.usage.decode_tokens_per_second(),
                                     b.result.usage.decode_step_tokens_per_second())
                  << absl::StrJoin(b.result.token_ids, ", ") << "]}";
      }
      std::cout << absl::StrFormat("], \"wall_s\": %.3f, \"tokens\": %d, \"aggregate_tps\": %.2f, "
                                   "\"failed\": %d, \"mismatched\": %d}\n",
                                   wall, total_tokens, total_tokens / wall, failed, mismatched);
    } else {
      std::vector<std::vector<std::string>> rows = {
          {"MODEL", "STATUS", "TOKENS", "TTFT", "DECODE TOK/S", "SERVER TOK/S", "STEP TOK/S"}};
      for (const BenchStream& b : runs) {
        rows.push_back({b.model,
                        b.status.ok() ? "ok" : absl::StatusCodeToString(b.status.code()),
                        absl::StrCat(b.result.token_ids.size()),
                        absl::StrFormat("%.3f s", b.ttft), absl::StrFormat("%.1f", b.decode_tps),
                        absl::StrFormat("%.1f", b.result.usage.decode_tokens_per_second()),
                        absl::StrFormat("%.1f", b.result.usage.decode_step_tokens_per_second())});
      }
      PrintTable(rows);
      std::vector<double> tps, ttft;
      for (const BenchStream& b : runs) {
        if (!b.status.ok()) continue;
        tps.push_back(b.decode_tps);
        ttft.push_back(b.ttft);
      }
      std::sort(tps.begin(), tps.end());
      std::sort(ttft.begin(), ttft.end());
      auto pct = [](const std::vector<double>& v, double p) {
        return v.empty() ? 0.0 : v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
      };
      std::cout << absl::StrFormat(
          "%d streams, %d failed, %d greedy mismatches; %d tokens in %.2f s = %.1f tok/s "
          "aggregate; per stream %.1f median, %.1f min tok/s; TTFT p50 %.3f p90 %.3f p99 %.3f s\n",
          runs.size(), failed, mismatched, total_tokens, wall, total_tokens / wall, pct(tps, 0.5),
          tps.empty() ? 0.0 : tps.front(), pct(ttft, 0.5), pct(ttft, 0.9), pct(ttft, 0.99));
    }
    for (const BenchStream& b : runs) {
      if (!b.status.ok()) return Fail(b.status);
    }
    return mismatched == 0 ? 0 : 1;
  }

  if (*c_health) {
    auto r = client.Health(health_name);
    if (!r.ok()) return Fail(r.status());
    const std::string name = grpc::health::v1::HealthCheckResponse::ServingStatus_Name(*r);
    if (g.json) {
      std::cout << "{\"service\": \"" << health_name << "\", \"status\": \"" << name << "\"}\n";
    } else {
      std::cout << name << "\n";
    }
    return *r == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
  }
  return 2;
}
