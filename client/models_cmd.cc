// minferctl load, unload, list and status.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/commands.h"

namespace minfer::ctl {
namespace {

// "draft model /m/small.gguf, k 4: 1200 drafted, 900 accepted (75.0%)".
std::string SpecLine(const v1::ModelStatus& m) {
  std::string mode;
  if (m.spec().empty()) {
    mode = m.spec_k() > 0 ? absl::StrCat("n-gram, k ", m.spec_k(), " (MINFER_SPEC_K)")
                          : std::string("off (MINFER_SPEC_K=0)");
  } else if (m.spec() == "off") {
    mode = "off";
  } else if (m.spec() == "ngram") {
    mode = absl::StrCat("n-gram, k ", m.spec_k());
  } else {
    mode = absl::StrCat(m.spec() == "draft" ? "draft model " : m.spec() + " ", m.draft(), ", k ",
                        m.spec_k());
  }
  if (m.spec_drafted_tokens() == 0 && m.spec_gate_held_steps() == 0) return mode;
  std::string line = absl::StrFormat("%s: %d drafted, %d accepted (%.1f%%)", mode,
                                     m.spec_drafted_tokens(), m.spec_accepted_tokens(),
                                     100.0 * m.spec_acceptance_rate());
  if (m.spec_gate_held_steps() > 0) {
    absl::StrAppend(&line, "; held back on ", m.spec_gate_held_steps(),
                    " steps (drafts did not pay at that load)");
  }
  return line;
}

std::string SleepLine(const v1::ModelStatus& m) {
  const v1::SleepStatus& s = m.sleep();
  std::string line =
      s.level() > 0
          ? absl::StrFormat("asleep at level %d for %.0f s (%s in host memory)", s.level(),
                            s.asleep_seconds(), Mib(m.memory().host_bytes()))
          : std::string("awake");
  absl::StrAppend(&line, s.sleep_after_seconds() > 0
                             ? absl::StrFormat(", sleeps after %.0f s idle", s.sleep_after_seconds())
                             : std::string(", never sleeps by itself"));
  absl::StrAppend(&line, "; ", s.sleeps(), " sleeps, ", s.wakes(), " wakes");
  if (s.last_wake_unix_ms() > 0) {
    absl::StrAppend(&line, absl::StrFormat(" (last took %.3f s, at %s)", s.last_wake_seconds(),
                                           absl::FormatTime("%Y-%m-%d %H:%M:%S UTC",
                                                            absl::FromUnixMillis(s.last_wake_unix_ms()),
                                                            absl::UTCTimeZone())));
  }
  return line;
}

void PrintModel(const v1::ModelStatus& m) {
  Table rows = {
      {"name:", m.name()},
      {"state:", StateName(m.state()) + (m.reason().empty() ? "" : " (" + m.reason() + ")")},
      {"path:", m.path()},
      {"backend:", m.device_label().empty() ? m.backend()
                                            : absl::StrCat(m.backend(), " on ", m.device_label())},
      {"context:", absl::StrCat(m.n_ctx(), " tokens x ", m.parallel(), " sequences, KV ",
                                m.kv_type())},
      {"parsers:", absl::StrCat("tool calls ",
                                m.tool_parser().empty() ? "from the template" : m.tool_parser(),
                                ", reasoning ",
                                m.reasoning_parser().empty() ? "from the template"
                                                             : m.reasoning_parser())},
      {"spec:", SpecLine(m)},
      {"sequences:", absl::StrCat(m.active_sequences(), " active, ", m.queued_sequences(),
                                  " queued (queue size ", m.queue_size(), ")")},
      {"memory:", absl::StrCat(Mib(m.memory().total_bytes()), " (weights ",
                               Mib(m.memory().weights_bytes()), ", KV ",
                               Mib(m.memory().kv_bytes()), ", scratch ",
                               Mib(m.memory().scratch_bytes()),
                               m.memory().draft_bytes() > 0
                                   ? absl::StrCat(", draft model ", Mib(m.memory().draft_bytes()))
                                   : std::string(),
                               "; reserved ",
                               Mib(m.memory().reserved_bytes()), "; held by the backend ",
                               Mib(m.memory().backend_bytes()), ")")},
      {"requests:", absl::StrCat(m.counters().requests(), " (", m.counters().completed(),
                                 " completed, ", m.counters().cancelled(), " cancelled, ",
                                 m.counters().failed(), " failed, ",
                                 m.counters().rejected_queue_full(), " rejected: queue full)")},
      {"tokens:", absl::StrCat(m.counters().prompt_tokens(), " in, ",
                               m.counters().completion_tokens(), " out")},
      {"sleep:", SleepLine(m)},
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
  if (m.has_structured_output()) {
    const v1::StructuredOutputStatus& so = m.structured_output();
    rows.push_back(
        {"grammars:",
         absl::StrFormat("%d constrained sequences running, %d requests; %d compiled, "
                         "%d cache hits, %d refused; %d masks in %.3f s",
                         so.constrained_sequences(), so.constrained_requests(),
                         so.grammar_compiles(), so.grammar_cache_hits(), so.grammar_refused(),
                         so.grammar_masks(), so.grammar_mask_seconds())});
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

void PrintServer(const v1::ServerStatus& r) {
  Table rows = {
      {"version:", r.version()},
      {"uptime:", absl::StrFormat("%.1f s", r.uptime_seconds())},
      {"draining:", r.draining() ? "yes" : "no"},
      {"models:", absl::StrCat(r.models())},
      {"sequences:", absl::StrCat(r.active_sequences(), " active, ", r.queued_sequences(),
                                  " queued")},
      {"memory:", absl::StrCat(Mib(r.memory_reserved_bytes()), " reserved of ",
                               r.memory_limit_bytes() > 0 ? Mib(r.memory_limit_bytes())
                                                          : std::string("available memory"))},
  };
  for (const v1::Device& d : r.devices()) {
    if (d.kind() == "cpu") {
      rows.push_back({"device:", absl::StrCat(d.kind(), " ", d.name(), ", ", d.cores(), " cores, ",
                                              Mib(d.memory_free_bytes()), " free of ",
                                              Mib(d.memory_total_bytes()))});
      continue;
    }
    // "cuda:1 NVIDIA H200, 132 SMs, 120000.0 MiB free of 143000.0 MiB; models a, b"
    std::string line = absl::StrCat(d.kind(), ":", d.index(), " ", d.name(), ", ", d.cores(),
                                    " SMs, ", Mib(d.memory_free_bytes()), " free of ",
                                    Mib(d.memory_total_bytes()));
    if (d.memory_pending_bytes() > 0) {
      absl::StrAppend(&line, ", ", Mib(d.memory_pending_bytes()), " reserved by loads in progress");
    }
    absl::StrAppend(&line, d.models().empty() ? "; no models"
                                              : absl::StrCat("; models ", absl::StrJoin(d.models(), ", ")));
    if (!d.healthy()) absl::StrAppend(&line, "; UNHEALTHY: ", d.fault());
    rows.push_back({"device:", line});
  }
  PrintTable(rows);
}

// "loading NAME [##########----------]  50% 12.3/24.6 MiB" on stderr, redrawn
// in place (\r) on every progress message; a newline once READY.
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

struct LoadArgs {
  v1::LoadModelRequest request;  // name and path; the rest is set from the flags below
  int64_t ctx = 0;
  int32_t parallel = 0, queue = 0;
  int64_t kv_tokens = 0;
  std::string kv_type, backend;
  int32_t device = -1;  // --device; -1: the server places the model
  int32_t tensor_parallel = 0;    // --tensor-parallel
  std::vector<int32_t> devices;   // --devices
  std::string tool_parser, reasoning_parser;
  std::string spec, draft;
  int32_t spec_k = 0;
  std::vector<std::string> knobs;  // K=V
  std::string kv_events;
  double sleep_after = 0;
  int32_t sleep_level = 0;
  bool quiet = false;
};

int Load(LoadArgs& a, const Globals& g, client::MinferClient& client) {
  v1::LoadModelRequest& load = a.request;
  load.set_n_ctx(a.ctx);
  load.set_parallel(a.parallel);
  load.set_queue_size(a.queue);
  load.set_kv_tokens(a.kv_tokens);
  load.set_kv_type(a.kv_type);
  load.set_backend(a.backend);
  if (a.device >= 0) load.set_device(a.device);
  load.set_tensor_parallel(a.tensor_parallel);
  for (int32_t d : a.devices) load.add_devices(d);
  load.set_tool_parser(a.tool_parser);
  load.set_reasoning_parser(a.reasoning_parser);
  load.set_spec(a.spec);
  load.set_draft(a.draft);  // with spec "" the server reads it as spec "draft"
  load.set_spec_k(a.spec_k);
  load.set_kv_events(a.kv_events);
  load.set_sleep_after_seconds(a.sleep_after);
  load.set_sleep_level(a.sleep_level);
  for (const std::string& kv : a.knobs) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Fail(absl::InvalidArgumentError(absl::StrCat("--knob wants K=V, got '", kv, "'")));
    }
    (*load.mutable_knobs())[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  const bool bar = !a.quiet && !g.json;
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

struct UnloadArgs {
  std::string name;
  double drain_timeout = -1;
  CLI::Option* drain_given = nullptr;  // --drain-timeout: sent only when given
  bool cancel = false;
};

int Unload(const UnloadArgs& a, const Globals& g, client::MinferClient& client) {
  v1::UnloadModelRequest req;
  req.set_name(a.name);
  if (*a.drain_given) req.set_drain_timeout_seconds(a.drain_timeout);
  req.set_cancel(a.cancel);
  absl::StatusOr<v1::UnloadModelResponse> r = client.UnloadModel(req);
  if (!r.ok()) return Fail(r.status());
  if (g.json) {
    PrintJson(*r);
  } else {
    std::cout << absl::StrFormat("unloaded %s in %.2f s (%d streams finished, %d cancelled)\n",
                                 a.name, r->seconds(), r->completed_sequences(),
                                 r->cancelled_sequences());
  }
  return 0;
}

struct SleepArgs {
  std::string name;
  int32_t level = 1;
};

int Sleep(const SleepArgs& a, const Globals& g, client::MinferClient& client) {
  v1::SleepModelRequest req;
  req.set_name(a.name);
  req.set_level(a.level);
  absl::StatusOr<v1::SleepModelResponse> r = client.SleepModel(req);
  if (!r.ok()) return Fail(r.status());
  if (g.json) {
    PrintJson(*r);
  } else {
    std::cout << absl::StrFormat("%s asleep at level %d (%s reserved, %s kept in host memory)\n",
                                 a.name, a.level, Mib(r->status().memory().reserved_bytes()),
                                 Mib(r->status().memory().host_bytes()));
  }
  return 0;
}

int Wake(const std::string& name, const Globals& g, client::MinferClient& client) {
  v1::WakeModelRequest req;
  req.set_name(name);
  absl::StatusOr<v1::WakeModelResponse> r = client.WakeModel(req);
  if (!r.ok()) return Fail(r.status());
  if (g.json) {
    PrintJson(*r);
  } else if (r->seconds() > 0) {
    std::cout << absl::StrFormat("%s awake in %.3f s\n", name, r->seconds());
  } else {
    std::cout << name << " was awake\n";
  }
  return 0;
}

int List(const Globals& g, client::MinferClient& client) {
  absl::StatusOr<v1::ListModelsResponse> r = client.ListModels();
  if (!r.ok()) return Fail(r.status());
  if (g.json) {
    PrintJson(*r);
    return 0;
  }
  Table rows = {
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

// `name` empty: the server's status, else the model's (or alias's).
int Status(const std::string& name, const Globals& g, client::MinferClient& client) {
  if (!name.empty()) {
    absl::StatusOr<v1::ModelStatus> r = client.GetModelStatus(name);
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
  } else {
    PrintServer(*r);
  }
  return 0;
}

}  // namespace

void AddModelCommands(CLI::App& app, const Globals& g, CommandTable& table) {
  auto load = std::make_shared<LoadArgs>();
  CLI::App* c_load = app.add_subcommand("load", "load a GGUF model into a new slot");
  c_load->add_option("name", *load->request.mutable_name(), "serving name")->required();
  c_load->add_option("path", *load->request.mutable_path(), "GGUF file, as the daemon sees it")
      ->required();
  c_load->add_option("--ctx", load->ctx, "context per sequence (0 = server default)");
  c_load->add_option("--parallel", load->parallel, "concurrent sequences (0 = server default)");
  c_load->add_option("--queue-size", load->queue, "queued requests beyond parallel");
  c_load->add_option("--kv-tokens", load->kv_tokens,
                     "KV pool size in tokens (0 = parallel x ctx; smaller pools preempt)");
  c_load->add_option("--kv-type", load->kv_type, "f32, f16, q8_0 or fp8");
  c_load->add_option("--backend", load->backend, "cpu, cuda or auto");
  c_load->add_option("--device", load->device,
                     "GPU index to load on (minferctl status lists them); default: the server "
                     "places the model on the GPU with the most free memory")
      ->check(CLI::NonNegativeNumber);
  c_load->add_option("--tensor-parallel", load->tensor_parallel,
                     "split the model over this many GPUs (attention heads and FFN columns per "
                     "GPU, NCCL all-reduces); with --devices, those GPUs rank by rank")
      ->check(CLI::NonNegativeNumber);
  c_load->add_option("--devices", load->devices,
                     "the GPUs of a --tensor-parallel split, e.g. 0,1 (default: those with the "
                     "most free memory)")
      ->delimiter(',');
  c_load->add_option("--tool-parser", load->tool_parser,
                     "tool-call family of the replies: hermes, llama3_json or none "
                     "(default: the chat template's)");
  c_load->add_option("--reasoning-parser", load->reasoning_parser,
                     "reasoning split: qwen3 (<think>...</think>) or none "
                     "(default: the chat template's tags)");
  c_load->add_option("--spec", load->spec,
                     "speculative decoding: off, ngram (drafts from the text so far) or draft "
                     "(a draft model's, --draft); default: the MINFER_SPEC_K knob");
  c_load->add_option("--draft", load->draft,
                     "draft model GGUF (as the daemon sees it) with the same tokenizer, e.g. a "
                     "smaller model of the family; implies --spec draft");
  c_load->add_option("--spec-k", load->spec_k,
                     "tokens drafted per step, 1 to 16 (default 4 with --spec ngram or draft)");
  c_load->add_option("--knob", load->knobs, "K=V per-model knob override (repeatable)");
  c_load->add_option("--kv-events", load->kv_events,
                     "on or off: this model's KV-cache events (default on when minferd "
                     "publishes them, --kv-events)");
  c_load->add_option("--sleep-after", load->sleep_after,
                     "sleep after this many idle seconds (default: minferd's --sleep-after)");
  c_load->add_option("--sleep-level", load->sleep_level,
                     "1 (weights kept in host memory, default) or 2 (dropped) for idle sleep");
  c_load->add_flag("-q,--quiet", load->quiet, "no progress bar");
  table.Add(c_load, [load, &g](client::MinferClient& client) { return Load(*load, g, client); });

  auto unload = std::make_shared<UnloadArgs>();
  CLI::App* c_unload = app.add_subcommand("unload", "drain and unload a model");
  c_unload->add_option("name", unload->name)->required();
  unload->drain_given = c_unload->add_option(
      "--drain-timeout", unload->drain_timeout,
      "seconds in-flight streams may run (default: server's)");
  c_unload->add_flag("--cancel", unload->cancel, "cancel in-flight streams at once")
      ->excludes(unload->drain_given);
  table.Add(c_unload,
            [unload, &g](client::MinferClient& client) { return Unload(*unload, g, client); });

  auto sleep = std::make_shared<SleepArgs>();
  CLI::App* c_sleep = app.add_subcommand(
      "sleep", "free an idle model's memory; its next request (or wake) loads it back");
  c_sleep->add_option("name", sleep->name, "model or alias")->required();
  c_sleep->add_option("--level", sleep->level,
                      "1: free the KV pool and activations, keep the weights in host memory "
                      "(default); 2: drop the weights too (re-read at the wake)")
      ->check(CLI::Range(1, 2));
  table.Add(c_sleep, [sleep, &g](client::MinferClient& client) { return Sleep(*sleep, g, client); });

  auto wake_name = std::make_shared<std::string>();
  CLI::App* c_wake = app.add_subcommand("wake", "wake a sleeping model");
  c_wake->add_option("name", *wake_name, "model or alias")->required();
  table.Add(c_wake,
            [wake_name, &g](client::MinferClient& client) { return Wake(*wake_name, g, client); });

  CLI::App* c_list = app.add_subcommand("list", "list the models");
  table.Add(c_list, [&g](client::MinferClient& client) { return List(g, client); });

  auto status_name = std::make_shared<std::string>();
  CLI::App* c_status = app.add_subcommand("status", "server status, or one model's");
  c_status->add_option("name", *status_name, "model or alias");
  table.Add(c_status, [status_name, &g](client::MinferClient& client) {
    return Status(*status_name, g, client);
  });
}

}  // namespace minfer::ctl
