// `minfer bench`: prefill (pp) and decode (tg) throughput in the shape of
// llama-bench's table: mean +- stddev over repetitions, after one warm-up.
// With --batch B1,B2,..., the batched engine's throughput in the shape of
// llama-batched-bench: B sequences of -p prompt tokens prefilled, then -n
// steps that decode one token of every sequence together (greedy, argmax on
// the device); prompt and generated tokens/s over all sequences, median of
// the repetitions after one warm-up. With --spec ngram|draft|oracle,
// speculative decoding against plain decoding on the engine (SpecBench).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <random>

#include "CLI/CLI.hpp"
#include "engine/base/knobs.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/runtime/batch_runner.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/model_drafter.h"
#include "engine/runtime/model.h"
#include "engine/runtime/session.h"
#include "engine/tools/bench_ops.h"
#include "engine/tools/commands.h"
#include "engine/tools/device_flags.h"
#include "nlohmann/json.hpp"

namespace minfer::tools {
namespace {

struct Result {
  std::string test;
  std::vector<double> tps;
  double gbps = 0;  // decode only: bytes streamed per token / time
  double tops = 0;  // prefill only: operations per token (bench_ops.h) x t/s / 1e12
  double mean() const {
    double s = 0;
    for (double v : tps) s += v;
    return tps.empty() ? 0 : s / tps.size();
  }
  double stddev() const {
    if (tps.size() < 2) return 0;
    double m = mean(), s = 0;
    for (double v : tps) s += (v - m) * (v - m);
    return std::sqrt(s / (tps.size() - 1));
  }
};

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The share of a layer's experts a step of `tokens` tokens is expected to
// read, routing uniform at random: 1 - (1 - k / n_expert)^tokens (k / n at
// one token). 1 for dense models.
double ExpertShare(const models::DecoderHparams& hp, int64_t tokens) {
  if (!hp.moe()) return 1.0;
  const double p = static_cast<double>(hp.n_expert_used) / static_cast<double>(hp.n_expert);
  return 1.0 - std::pow(1.0 - p, static_cast<double>(tokens));
}

// Bytes of weights a forward step of `tokens` tokens reads: each matmul
// weight once, the expert tensors (3-D) at ExpertShare, the embedding not
// at all (one row per token is noise).
double WeightBytesPerStep(const runtime::Model& m, int64_t tokens) {
  const auto& arch = m.arch();
  const double share = ExpertShare(m.hparams(), tokens);
  double b = 0;
  for (const auto& w : arch.weights()) b += w->nbytes * (w->dims.size() == 3 ? share : 1.0);
  if (!m.hparams().tied_embeddings) b -= arch.token_embd()->nbytes;
  return b;
}

int BatchedBench(std::shared_ptr<runtime::Model> model, const std::vector<int64_t>& batches,
                 int64_t n_prompt, int64_t n_gen, int64_t reps, int64_t budget, int32_t kv_block,
                 const std::string& output) {
  const auto& hp = model->hparams();
  std::mt19937 rng(42);
  const int32_t vocab = std::min<int32_t>(model->tokenizer().vocab_size(), hp.n_vocab) - 32;
  struct Row {
    int64_t b;
    double pp, tg, step_ms;
  };
  std::vector<Row> rows;
  for (int64_t B : batches) {
    runtime::BatchRunnerOptions ro;
    ro.max_seqs = static_cast<int32_t>(B);
    ro.max_tokens = std::max<int64_t>(budget, B);
    ro.n_ctx = n_prompt + n_gen + 1;
    ro.kv_block = kv_block;
    auto runner = runtime::BatchRunner::Create(model, ro);
    if (!runner.ok()) {
      std::cerr << "minfer bench: " << runner.status().message() << "\n";
      return 1;
    }
    runtime::BatchRunner& r = **runner;
    std::vector<double> pp, tg;
    for (int64_t rep = 0; rep <= reps; ++rep) {  // rep 0 warms up (and records graphs)
      std::vector<std::vector<int32_t>> toks(B), blocks(B);
      for (int64_t i = 0; i < B; ++i) {
        toks[i].resize(n_prompt);
        for (auto& t : toks[i]) t = static_cast<int32_t>(rng() % vocab);
        if (!r.pool().blocks().Allocate(runtime::BlocksFor(n_prompt + n_gen, kv_block), &blocks[i])) {
          std::cerr << "minfer bench: the KV pool is too small\n";
          return 1;
        }
      }
      std::vector<runtime::RowResult> res;
      // Prefill: every prompt, in steps of at most the budget.
      double t0 = Now();
      int64_t seq = 0, off = 0;
      while (seq < B) {
        std::vector<runtime::BatchItem> items;
        int64_t room = ro.max_tokens;
        while (seq < B && room > 0) {
          const int64_t n = std::min(room, n_prompt - off);
          runtime::BatchItem it;
          it.tokens = absl::MakeConstSpan(toks[seq]).subspan(off, n);
          it.pos0 = off;
          it.blocks = blocks[seq];
          it.logits = off + n == n_prompt;
          items.push_back(it);
          room -= n;
          off += n;
          if (off == n_prompt) {
            ++seq;
            off = 0;
          }
          if (static_cast<int64_t>(items.size()) == B) break;
        }
        if (auto st = r.Run(items, &res); !st.ok()) {
          std::cerr << "minfer bench: " << st.message() << "\n";
          return 1;
        }
      }
      const double t_pp = Now() - t0;
      // Decode: n_gen steps of one token per sequence.
      t0 = Now();
      std::vector<runtime::BatchItem> items(B);
      std::vector<int32_t> next(B);
      for (int64_t g = 0; g < n_gen; ++g) {
        for (int64_t i = 0; i < B; ++i) {
          next[i] = static_cast<int32_t>(rng() % vocab);
          items[i].tokens = absl::MakeConstSpan(&next[i], 1);
          items[i].pos0 = n_prompt + g;
          items[i].blocks = blocks[i];
          items[i].mode = runtime::RowMode::kArgmax;
        }
        if (auto st = r.Run(items, &res); !st.ok()) {
          std::cerr << "minfer bench: " << st.message() << "\n";
          return 1;
        }
      }
      const double t_tg = Now() - t0;
      for (auto& b : blocks) r.pool().blocks().Free(b);
      if (rep > 0) {
        pp.push_back(B * n_prompt / t_pp);
        tg.push_back(B * n_gen / t_tg);
      }
    }
    const double tg_med = Median(tg);
    rows.push_back({B, Median(pp), tg_med, 1e3 * B / tg_med});
    std::fprintf(stderr, "B=%ld: activations %.1f MiB, KV pool %.1f MiB, %ld graphs built\n", B,
                 r.activation_bytes() / 1048576.0, r.pool().bytes() / 1048576.0,
                 r.stats().graph_builds);
  }
  // Per row: a decode step of B tokens (experts: the share B tokens touch).
  auto wbytes_of = [&](int64_t b) { return WeightBytesPerStep(*model, b); };
  if (output == "json") {
    nlohmann::json j = nlohmann::json::array();
    for (const Row& x : rows) {
      j.push_back({{"model", model->name()},
                   {"backend", model->backends().front()->name()},
                   {"batch", x.b},
                   {"n_prompt", n_prompt},
                   {"n_gen", n_gen},
                   {"prompt_tokens_per_second", x.pp},
                   {"gen_tokens_per_second", x.tg},
                   {"step_ms", x.step_ms},
                   {"weight_gb_per_second", wbytes_of(x.b) / (x.step_ms / 1e3) / 1e9}});
    }
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf("| model | backend | B | pp t/s (all) | tg t/s (all) | tg t/s per seq | step ms | weights GB/s |\n");
  std::printf("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const Row& x : rows) {
    std::printf("| %s | %s | %ld | %.1f | %.1f | %.1f | %.2f | %.0f |\n", model->name().c_str(),
                model->backends().front()->name().c_str(), x.b, x.pp, x.tg, x.tg / x.b,
                x.step_ms, wbytes_of(x.b) / (x.step_ms / 1e3) / 1e9);
  }
  return 0;
}

// Speculative decoding (--spec): B streams of -n greedy tokens each on the
// engine, without drafts and then with them, same prompts. A prompt is a
// random phrase said three times and cut inside a fourth (what prompt lookup
// feeds on); -p sets its length at least. Reports decode tokens/s over all
// streams (from the step where every stream has its first token to the
// last), the speed-up and the share of drafts accepted; median of the
// repetitions after one warm-up.
int SpecBench(std::shared_ptr<runtime::Model> model, std::shared_ptr<runtime::Model> draft,
              const std::string& spec, int32_t spec_k, double spec_accept,
              const std::vector<int64_t>& batches, int64_t n_prompt, int64_t n_gen, int64_t reps,
              int64_t budget, int32_t kv_block, const std::string& output) {
  const auto& hp = model->hparams();
  const int32_t vocab = std::min<int32_t>(model->tokenizer().vocab_size(), hp.n_vocab) - 32;
  struct Row {
    int64_t b;
    double plain, spec, accepted_share;
    int64_t drafted, accepted;
    // The counted repetitions' steps with drafts: all, held back by the
    // gate, and (--spec oracle) asked for drafts by a sequence that had left
    // its reference, which then drafts no more.
    int64_t steps = 0, held = 0, departed = 0;
    // The counted repetitions' decode steps by tokens fed (a verify step
    // of d drafts feeds d + 1 per sequence): how many, and their seconds
    // and forward seconds (runtime::EngineStepStats), with drafts and
    // without.
    struct StepTimes {
      int64_t n = 0;
      double wall = 0, forward = 0;
    };
    std::map<int64_t, StepTimes> by_tokens[2];
  };
  std::vector<Row> rows;
  for (int64_t B : batches) {
    std::mt19937 rng(7);
    std::vector<runtime::GenerateRequest> reqs(B);
    for (auto& r : reqs) {
      std::vector<int32_t> phrase(std::max<int64_t>(8, n_prompt / 4));
      for (auto& t : phrase) t = static_cast<int32_t>(rng() % vocab);
      for (int rep = 0; rep < 3; ++rep) r.prompt.insert(r.prompt.end(), phrase.begin(), phrase.end());
      r.prompt.insert(r.prompt.end(), phrase.begin(), phrase.begin() + phrase.size() / 2);
      r.max_tokens = static_cast<int32_t>(n_gen);
      r.ignore_eos = true;
      r.sampling.temperature = 0;
    }
    const int64_t prompt_len = static_cast<int64_t>(reqs[0].prompt.size());
    Row row{B, 0, 0, 0, 0, 0};
    std::shared_ptr<runtime::ReplayDrafter> oracle;
    // --spec oracle: each stream's greedy ids of the run without drafts.
    std::vector<std::vector<int32_t>> reference(B);
    for (int with = 0; with < 2; ++with) {
      runtime::EngineOptions eo;
      // As minferd --parallel B: the engine adds the rows for drafts
      // (runtime::SpecRows) when it speculates.
      eo.max_seqs = static_cast<int32_t>(B);
      eo.token_budget = std::max<int64_t>(budget, B * (spec_k + 1));
      eo.n_ctx = prompt_len + n_gen + spec_k + 1;
      eo.kv_block = kv_block;
      eo.spec_k = with ? spec_k : 0;
      std::shared_ptr<runtime::ModelDrafter> drafter;
      if (with && spec == "draft") {
        auto d = runtime::ModelDrafter::Create(draft, *model, eo);
        if (!d.ok()) {
          std::cerr << "minfer bench: " << d.status().message() << "\n";
          return 1;
        }
        drafter = *d;
        eo.drafter = drafter;
      }
      if (with && spec == "oracle") {
        oracle = std::make_shared<runtime::ReplayDrafter>(spec_accept);
        for (int64_t i = 0; i < B; ++i) oracle->Add(reqs[i].prompt, reference[i]);
        eo.drafter = oracle;
      }
      auto engine = runtime::Engine::Create(model, eo);
      if (!engine.ok()) {
        std::cerr << "minfer bench: " << engine.status().message() << "\n";
        return 1;
      }
      std::vector<double> tps;
      int64_t drafted0 = 0, accepted0 = 0, steps0 = 0, held0 = 0, departed0 = 0;
      for (int64_t rep = 0; rep <= reps; ++rep) {
        // The same prompts every repetition: the target's prefix cache is
        // off unless MINFER_PREFIX_CACHE turns it on, so each repetition
        // prefills them again; only the draft's own cache is meant to hit.
        std::map<uint64_t, int64_t> got;
        std::map<uint64_t, int64_t> index;  // engine id -> stream
        for (const auto& r : reqs) {
          auto id = (*engine)->Add(r);
          if (!id.ok()) {
            std::cerr << "minfer bench: " << id.status().message() << "\n";
            return 1;
          }
          got[*id] = 0;
          index[*id] = static_cast<int64_t>(index.size());
        }
        if (!with) {
          for (auto& ref : reference) ref.clear();
        }
        const runtime::EngineSnapshot before = (*engine)->Snapshot();
        const int64_t departed_before = oracle != nullptr ? oracle->departed() : 0;
        std::vector<runtime::EngineEvent> events;
        double t_start = 0;
        int64_t counted = 0, started = 0;
        while ((*engine)->HasWork()) {
          events.clear();
          if (auto st = (*engine)->Step(&events); !st.ok()) {
            std::cerr << "minfer bench: " << st.message() << "\n";
            return 1;
          }
          const runtime::EngineStepStats& ls = (*engine)->last_step();
          if (rep > 0 && t_start > 0 && ls.prefill_tokens == 0) {
            Row::StepTimes& t = row.by_tokens[with][ls.tokens];
            t.n++;
            t.wall += ls.seconds;
            t.forward += ls.forward_seconds;
          }
          for (const auto& ev : events) {
            if (!with) {
              auto& ref = reference[index.at(ev.id)];
              ref.insert(ref.end(), ev.out.tokens.begin(), ev.out.tokens.end());
            }
            int64_t& n = got[ev.id];
            if (n == 0 && !ev.out.tokens.empty()) ++started;
            n += static_cast<int64_t>(ev.out.tokens.size());
            if (t_start > 0) counted += static_cast<int64_t>(ev.out.tokens.size());
          }
          if (t_start == 0 && started == B) t_start = Now();
        }
        const double dt = Now() - t_start;
        const runtime::EngineSnapshot after = (*engine)->Snapshot();
        if (rep > 0) {
          tps.push_back(counted / dt);
          drafted0 += after.spec_drafted - before.spec_drafted;
          accepted0 += after.spec_accepted - before.spec_accepted;
          steps0 += after.steps - before.steps;
          held0 += after.spec_gate_held - before.spec_gate_held;
          if (oracle != nullptr) departed0 += oracle->departed() - departed_before;
        }
      }
      (with ? row.spec : row.plain) = Median(tps);
      if (with) {
        row.drafted = drafted0;
        row.accepted = accepted0;
        row.accepted_share = drafted0 > 0 ? static_cast<double>(accepted0) / drafted0 : 0;
        row.steps = steps0;
        row.held = held0;
        row.departed = departed0;
      }
    }
    rows.push_back(row);
  }
  if (output == "json") {
    nlohmann::json j = nlohmann::json::array();
    for (const Row& x : rows) {
      j.push_back({{"model", model->name()},
                   {"backend", model->backends().front()->name()},
                   {"spec", spec},
                   {"draft", draft != nullptr ? draft->name() : ""},
                   {"spec_k", spec_k},
                   {"spec_accept", spec == "oracle" ? spec_accept : 0},
                   {"streams", x.b},
                   {"n_gen", n_gen},
                   {"plain_tokens_per_second", x.plain},
                   {"spec_tokens_per_second", x.spec},
                   {"speedup", x.plain > 0 ? x.spec / x.plain : 0},
                   {"drafted", x.drafted},
                   {"accepted", x.accepted},
                   {"acceptance", x.accepted_share},
                   {"steps", x.steps},
                   {"gate_held_steps", x.held},
                   {"departed_proposals", x.departed}});
    }
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  const std::string label =
      spec == "oracle" ? absl::StrFormat("oracle (accept %.2f)", spec_accept) : spec;
  std::printf(
      "| model | backend | spec | k | streams | plain t/s | spec t/s | speed-up | drafts accepted "
      "| steps (held by the gate) | left the reference |\n");
  std::printf("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const Row& x : rows) {
    std::printf("| %s | %s | %s%s | %d | %ld | %.1f | %.1f | %.2fx | %.0f%% of %ld | %ld (%ld) | %s |\n",
                model->name().c_str(), model->backends().front()->name().c_str(), label.c_str(),
                draft != nullptr ? (" (" + draft->name() + ")").c_str() : "", spec_k, x.b,
                x.plain, x.spec, x.plain > 0 ? x.spec / x.plain : 0, 100 * x.accepted_share,
                x.drafted, x.steps, x.held,
                spec == "oracle" ? absl::StrCat(x.departed, " steps").c_str() : "-");
  }
  // Where a step's time goes, by its size: the verify steps' cost against a
  // plain step's, and the host's share (wall - forward).
  std::printf("\n| streams | drafts | step tokens | steps | ms per step | forward ms | host ms |\n");
  std::printf("| ---: | --- | ---: | ---: | ---: | ---: | ---: |\n");
  for (const Row& x : rows) {
    for (int with = 0; with < 2; ++with) {
      for (const auto& [tokens, t] : x.by_tokens[with]) {
        std::printf("| %ld | %s | %ld | %ld | %.3f | %.3f | %.3f |\n", x.b, with ? "yes" : "no",
                    tokens, t.n, 1e3 * t.wall / t.n, 1e3 * t.forward / t.n,
                    1e3 * (t.wall - t.forward) / t.n);
      }
    }
  }
  return 0;
}

}  // namespace

int BenchMain(int argc, char** argv) {
  CLI::App app{"Benchmark prefill and decode throughput", "minfer bench"};
  std::string model_path, backend = "auto", output = "md";
  int64_t n_prompt = 512, n_gen = 128, reps = 3, depth = 0;
  app.add_option("-m,--model", model_path, "GGUF model")->required();
  app.add_option("-p,--n-prompt", n_prompt, "prompt tokens (0 = skip pp)")->capture_default_str();
  app.add_option("-n,--n-gen", n_gen, "generated tokens (0 = skip tg)")->capture_default_str();
  app.add_option("-r,--repetitions", reps, "repetitions")->capture_default_str();
  app.add_option("-d,--depth", depth, "tokens already in the context")->capture_default_str();
  app.add_option("-o,--output", output, "md or json")->capture_default_str();
  app.add_option("--backend", backend, "cpu, cuda or auto")->capture_default_str();
  DeviceFlags device_flags;
  AddDeviceFlags(app, &device_flags);
  std::string kv_type;
  app.add_option("--kv-type", kv_type,
                 "KV cache element type: auto, f32, f16, q8_0 or fp8 (MINFER_CACHE_TYPE)");
  std::vector<int64_t> batches;
  int64_t budget = 0;
  int32_t kv_block = 16;
  app.add_option("-b,--batch", batches,
                 "batched mode: sequences decoded together, e.g. -b 1,4,16,64")
      ->delimiter(',');
  app.add_option("--batch-tokens", budget,
                 "batched mode: tokens per step (0: 2048 on a GPU, 512 on the CPU)");
  app.add_option("--kv-block", kv_block, "batched mode: KV rows per block")->capture_default_str();
  std::string spec, draft_path;
  int32_t spec_k = 4;
  app.add_option("--spec", spec,
                 "speculative decoding: ngram, draft (--draft) or oracle (--spec-accept): -n "
                 "greedy tokens on each of -b streams (default 1), without and with drafts")
      ->check(CLI::IsMember({"ngram", "draft", "oracle"}));
  double spec_accept = 0.7;
  app.add_option("--spec-accept", spec_accept,
                 "--spec oracle: drafts are the run without drafts' ids, each right with this "
                 "probability (the acceptance per token; 1: the verify step's cost)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--draft", draft_path, "draft model for --spec draft (implies it)");
  app.add_option("--spec-k", spec_k, "drafted tokens per step")
      ->capture_default_str()
      ->check(CLI::Range(1, 63));
  CLI11_PARSE(app, argc, argv);
  if (!draft_path.empty() && spec.empty()) spec = "draft";
  if (spec == "draft" && draft_path.empty()) {
    std::cerr << "minfer bench: --spec draft needs --draft PATH\n";
    return 2;
  }
  if (!kv_type.empty()) {
    if (absl::Status s = KnobRegistry::Global().Set("MINFER_CACHE_TYPE", kv_type); !s.ok()) {
      std::fprintf(stderr, "minfer: --kv-type: %s\n", s.ToString().c_str());
      return 2;
    }
  }

  runtime::ModelOptions mopt;
  mopt.backend = backend;
  if (absl::Status s = ApplyDeviceFlags(device_flags, &mopt); !s.ok()) {
    std::fprintf(stderr, "minfer bench: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  auto model = runtime::Model::Load(model_path, mopt);
  if (!model.ok()) {
    std::cerr << "minfer bench: " << model.status().message() << "\n";
    return 1;
  }
  const auto& hp = (*model)->hparams();
  std::cerr << (*model)->Summary() << "\n";
  if (!spec.empty()) {
    std::shared_ptr<runtime::Model> draft;
    if (spec == "draft") {
      auto d = runtime::Model::Load(draft_path, mopt);
      if (!d.ok()) {
        std::cerr << "minfer bench: draft: " << d.status().message() << "\n";
        return 1;
      }
      draft = *d;
      std::cerr << "draft: " << draft->Summary() << "\n";
    }
    if (budget <= 0) budget = (*model)->gpu() ? 2048 : 512;
    return SpecBench(*model, draft, spec, spec_k, spec_accept, batches.empty() ? std::vector<int64_t>{1} : batches,
                     n_prompt, std::max<int64_t>(n_gen, 1), reps, budget, kv_block, output);
  }
  if (!batches.empty()) {
    if (budget <= 0) budget = (*model)->gpu() ? 2048 : 512;
    return BatchedBench(*model, batches, std::max<int64_t>(n_prompt, 1), std::max<int64_t>(n_gen, 1),
                        reps, budget, kv_block, output);
  }
  runtime::SessionOptions sopt;
  sopt.n_ctx = depth + std::max(n_prompt, n_gen) + 1;
  auto session = runtime::Session::Create(*model, sopt);
  if (!session.ok()) {
    std::cerr << "minfer bench: " << session.status().message() << "\n";
    return 1;
  }
  runtime::Session& s = **session;
  // Random ordinary tokens (speed does not depend on values, but zeros or a
  // repeated id would make caches look better than real text).
  std::mt19937 rng(42);
  const int32_t vocab = std::min<int32_t>((*model)->tokenizer().vocab_size(), hp.n_vocab) - 32;
  auto random_tokens = [&](int64_t n) {
    std::vector<int32_t> t(n);
    for (auto& v : t) v = static_cast<int32_t>(rng() % vocab);
    return t;
  };
  auto fill_depth = [&]() -> absl::Status {
    s.Reset();
    if (depth > 0) {
      auto r = s.Eval(random_tokens(depth));
      if (!r.ok()) return r.status();
    }
    return absl::OkStatus();
  };
  std::vector<Result> results;
  auto fail = [](const absl::Status& st) {
    std::cerr << "minfer bench: " << st.message() << "\n";
    return 1;
  };
  if (n_prompt > 0) {
    Result r{absl::StrFormat("pp%d%s", n_prompt, depth ? absl::StrFormat(" @ d%d", depth) : "")};
    for (int64_t i = 0; i <= reps; ++i) {  // i == 0 is the warm-up
      if (auto st = fill_depth(); !st.ok()) return fail(st);
      auto toks = random_tokens(n_prompt);
      double t0 = Now();
      auto out = s.Eval(toks);
      double dt = Now() - t0;
      if (!out.ok()) return fail(out.status());
      if (i > 0) r.tps.push_back(n_prompt / dt);
    }
    r.tops = PrefillOps((*model)->arch(), n_prompt, depth) / n_prompt * r.mean() / 1e12;
    results.push_back(r);
  }
  if (n_gen > 0) {
    Result r{absl::StrFormat("tg%d%s", n_gen, depth ? absl::StrFormat(" @ d%d", depth) : "")};
    double bytes_per_token = 0;
    for (int64_t i = 0; i <= reps; ++i) {
      if (auto st = fill_depth(); !st.ok()) return fail(st);
      auto toks = random_tokens(n_gen);
      double t0 = Now();
      for (int64_t k = 0; k < n_gen; ++k) {
        auto out = s.Eval({toks[k]});
        if (!out.ok()) return fail(out.status());
      }
      double dt = Now() - t0;
      if (i > 0) r.tps.push_back(n_gen / dt);
    }
    // Bytes read per decoded token: every matmul weight once (the embedding
    // contributes one row) plus the KV cache rows attended over (average
    // context over the run).
    // (Experts: only the k of n_expert a token routes to.)
    const auto& arch = (*model)->arch();
    bytes_per_token += WeightBytesPerStep(**model, 1);
    if (!hp.tied_embeddings) bytes_per_token += arch.token_embd()->row_bytes();
    const double avg_ctx = depth + n_gen / 2.0;
    bytes_per_token += 2.0 * hp.n_layer * avg_ctx *
                       graph::DTypeBytes(s.kv_type(), hp.n_embd_kv());
    r.gbps = bytes_per_token * r.mean() / 1e9;
    results.push_back(r);
  }

  const double size_gib = (*model)->weight_bytes() / double(1ull << 30);
  int64_t n_params = 0;
  for (const auto& w : (*model)->arch().weights()) {
    int64_t n = 1;
    for (int64_t d : w->dims) n *= d;
    n_params += n;
  }
  const std::string backend_name = (*model)->backends().front()->name();
  std::fprintf(stderr, "memory held by the %s backend: %.1f MiB (KV cache %.1f MiB, graphs %.1f MiB)\n",
               backend_name.c_str(), (*model)->backends().front()->MemoryBytes() / 1048576.0,
               s.kv_bytes() / 1048576.0, s.graph_bytes() / 1048576.0);
  if (output == "json") {
    nlohmann::json j = nlohmann::json::array();
    for (const Result& r : results) {
      j.push_back({{"model", (*model)->name()},
                   {"size_bytes", (*model)->weight_bytes()},
                   {"params", n_params},
                   {"backend", backend_name},
                   {"test", r.test},
                   {"tokens_per_second", r.mean()},
                   {"stddev", r.stddev()},
                   {"samples", r.tps},
                   {"gb_per_second", r.gbps},
                   {"tera_ops_per_second", r.tops}});
    }
    std::cout << j.dump(2) << "\n";
  } else {
    // GB/s (decode: weights + KV read per token) and TOPS (prefill: matmul
    // and attention operations, bench_ops.h) set the speed against the
    // hardware's bandwidth and compute peaks.
    std::printf("| model | size | params | backend | test | t/s | GB/s | TOPS |\n");
    std::printf("| --- | ---: | ---: | --- | --- | ---: | ---: | ---: |\n");
    for (const Result& r : results) {
      std::printf("| %s | %.2f GiB | %.2f B | %s | %s | %.2f ± %.2f | %s | %s |\n",
                  (*model)->name().c_str(), size_gib, n_params / 1e9, backend_name.c_str(),
                  r.test.c_str(), r.mean(), r.stddev(),
                  r.gbps > 0 ? absl::StrFormat("%.1f", r.gbps).c_str() : "",
                  r.tops > 0 ? absl::StrFormat("%.3f", r.tops).c_str() : "");
    }
  }
  return 0;
}

}  // namespace minfer::tools
