// `minfer run`: generate text from a model, streaming it to stdout.
#include <chrono>
#include <cstdio>
#include <iostream>

#include "CLI/CLI.hpp"
#include "engine/base/knobs.h"
#include "absl/strings/str_format.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/model_drafter.h"
#include "engine/runtime/generation.h"
#include "engine/runtime/model.h"
#include "engine/runtime/session.h"
#include "engine/tools/commands.h"
#include "engine/tools/device_flags.h"
#include "nlohmann/json.hpp"

namespace minfer::tools {

void AddSamplingFlags(CLI::App& app, SamplingParams* s) {
  app.add_option("--temp", s->temperature, "temperature (0 = greedy)")->capture_default_str();
  app.add_option("--top-k", s->top_k, "top-k (0 = off)");
  app.add_option("--top-p", s->top_p, "top-p (1 = off)");
  app.add_option("--min-p", s->min_p, "min-p (0 = off)");
  app.add_option("--repeat-penalty", s->repetition_penalty, "repetition penalty (1 = off)");
  app.add_option("--frequency-penalty", s->frequency_penalty, "frequency penalty");
  app.add_option("--presence-penalty", s->presence_penalty, "presence penalty");
  app.add_option("--repeat-last-n", s->penalty_last_n, "penalty window (-1 = all, 0 = off)");
  app.add_option("--seed", s->seed, "sampling seed");
  app.add_option("--logprobs", s->n_logprobs, "top-n logprobs per token (--json output)");
}

// Prints "loading 123.4/456.7 MiB (890 MiB/s)" progress on stderr.
runtime::LoadProgressFn StderrProgress() {
  auto t0 = std::chrono::steady_clock::now();
  return [t0](uint64_t done, uint64_t total) {
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "\rloading %.1f/%.1f MiB (%.0f MiB/s)   ", done / 1048576.0,
                 total / 1048576.0, s > 0 ? done / 1048576.0 / s : 0.0);
    if (done >= total) std::fprintf(stderr, "\n");
  };
}

int RunMain(int argc, char** argv) {
  CLI::App app{"Generate text from a GGUF model", "minfer run"};
  std::string model_path, prompt, system, backend = "auto";
  bool chat = false, json = false, no_special = false, ignore_eos = false, quiet = false;
  int64_t n_ctx = 4096;
  runtime::GenerateRequest req;
  req.sampling.temperature = 0.0f;
  app.add_option("-m,--model", model_path, "GGUF model")->required();
  app.add_option("-p,--prompt", prompt, "prompt text")->required();
  app.add_flag("--chat", chat, "wrap the prompt as a user message in the model's chat format");
  app.add_option("--system", system, "system message (with --chat)");
  app.add_option("-n,--max-tokens", req.max_tokens, "tokens to generate")->capture_default_str();
  app.add_option("--stop", req.stop, "stop string (repeatable)");
  app.add_flag("--ignore-eos", ignore_eos, "keep generating past end-of-sequence tokens");
  app.add_flag("--no-special", no_special, "treat control tokens in the prompt as plain text");
  app.add_option("-c,--ctx", n_ctx, "context size")->capture_default_str();
  app.add_option("--backend", backend, "cpu, cuda or auto")->capture_default_str();
  DeviceFlags device_flags;
  AddDeviceFlags(app, &device_flags);
  std::string kv_type;
  app.add_option("--kv-type", kv_type,
                 "KV cache element type: auto, f32, f16, q8_0 or fp8 (MINFER_CACHE_TYPE)");
  app.add_flag("--json", json, "print one JSON object with ids, text, finish reason, timings");
  app.add_flag("-q,--quiet", quiet, "no load progress or summary on stderr");
  std::string spec, draft_path;
  int32_t spec_k = 4;
  app.add_option("--spec", spec,
                 "speculative decoding: ngram (drafts by prompt lookup) or draft (a draft model, "
                 "--draft); runs on the batched engine, one sequence")
      ->check(CLI::IsMember({"ngram", "draft"}));
  app.add_option("--draft", draft_path,
                 "draft model (GGUF with the model's tokenizer) for --spec draft; implies it");
  app.add_option("--spec-k", spec_k,
                 "drafted tokens per step (with --spec; 0 = the batched engine without drafts, "
                 "the baseline)")
      ->capture_default_str()
      ->check(CLI::Range(0, 63));
  AddSamplingFlags(app, &req.sampling);
  CLI11_PARSE(app, argc, argv);
  if (!draft_path.empty() && spec.empty()) spec = "draft";
  if (spec == "draft" && draft_path.empty()) {
    std::cerr << "minfer run: --spec draft needs --draft PATH\n";
    return 2;
  }
  if (!kv_type.empty()) {
    if (absl::Status s = KnobRegistry::Global().Set("MINFER_CACHE_TYPE", kv_type); !s.ok()) {
      std::fprintf(stderr, "minfer: --kv-type: %s\n", s.ToString().c_str());
      return 2;
    }
  }
  req.ignore_eos = ignore_eos;

  runtime::ModelOptions mopt;
  mopt.backend = backend;
  if (absl::Status s = ApplyDeviceFlags(device_flags, &mopt); !s.ok()) {
    std::fprintf(stderr, "minfer run: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (!quiet) mopt.progress = StderrProgress();
  auto model = runtime::Model::Load(model_path, mopt);
  if (!model.ok()) {
    std::cerr << "minfer run: " << model.status().message() << "\n";
    return 1;
  }
  if (!quiet) std::cerr << (*model)->Summary() << "\n";
  const auto& tok = (*model)->tokenizer();
  if (chat) {
    std::vector<tokenizer::ChatMessage> msgs;
    if (!system.empty()) msgs.push_back({"system", system});
    msgs.push_back({"user", prompt});
    auto ids = tok.EncodeChat(msgs, /*add_generation_prompt=*/true);
    if (!ids.ok()) {
      std::cerr << "minfer run: " << ids.status().message() << "\n";
      return 1;
    }
    req.prompt = *ids;
  } else {
    tokenizer::EncodeOptions eo;
    eo.parse_special = !no_special;
    req.prompt = tok.Encode(prompt, eo);
  }
  std::vector<int32_t> prompt_ids = req.prompt;
  nlohmann::json logprobs = nlohmann::json::array();
  auto emit = [&](const runtime::StepOutput& s) {
    if (!json) {
      std::fwrite(s.text.data(), 1, s.text.size(), stdout);
      std::fflush(stdout);
    }
    for (const SampledToken& lp : s.logprobs) {
      nlohmann::json top = nlohmann::json::array();
      for (const auto& t : lp.top_logprobs) top.push_back({{"id", t.token}, {"logprob", t.logprob}});
      logprobs.push_back({{"id", lp.token}, {"logprob", lp.logprob}, {"top", top}});
    }
    return true;
  };
  // What either path produced.
  std::vector<int32_t> out_ids;
  std::string out_text;
  FinishReason reason = FinishReason::kLength;
  runtime::GenerationStats st;
  nlohmann::json spec_json;
  if (!spec.empty()) {
    // One sequence on the batched engine, drafts riding its decode steps.
    runtime::EngineOptions eo;
    eo.n_ctx = n_ctx;
    eo.max_seqs = spec_k + 1;  // output rows: the token and its drafts
    eo.kv_block = 16;
    eo.kv_blocks = 2 + (n_ctx + 15) / 16;
    eo.spec_k = spec_k;
    std::shared_ptr<runtime::ModelDrafter> drafter;
    if (spec == "draft") {
      auto draft = runtime::Model::Load(draft_path, mopt);
      if (!draft.ok()) {
        std::cerr << "minfer run: draft: " << draft.status().message() << "\n";
        return 1;
      }
      auto d = runtime::ModelDrafter::Create(*draft, **model, eo);
      if (!d.ok()) {
        std::cerr << "minfer run: " << d.status().message() << "\n";
        return 1;
      }
      drafter = *d;
      eo.drafter = drafter;
    }
    auto engine = runtime::Engine::Create(*model, eo);
    if (!engine.ok()) {
      std::cerr << "minfer run: " << engine.status().message() << "\n";
      return 1;
    }
    auto id = (*engine)->Add(std::move(req));
    if (!id.ok()) {
      std::cerr << "minfer run: " << id.status().message() << "\n";
      return 1;
    }
    std::vector<runtime::EngineEvent> events;
    while ((*engine)->HasWork()) {
      events.clear();
      if (absl::Status s = (*engine)->Step(&events); !s.ok()) {
        std::cerr << "\nminfer run: " << s.message() << "\n";
        return 1;
      }
      for (const runtime::EngineEvent& ev : events) {
        if (!ev.status.ok()) {
          std::cerr << "\nminfer run: " << ev.status.message() << "\n";
          return 1;
        }
        emit(ev.out);
        out_ids.insert(out_ids.end(), ev.out.tokens.begin(), ev.out.tokens.end());
        out_text += ev.out.text;
        if (ev.finished) {
          reason = ev.reason;
          st = ev.stats;
        }
      }
    }
    const runtime::EngineSnapshot snap = (*engine)->Snapshot();
    spec_json = {{"mode", spec}, {"k", spec_k}, {"drafted", snap.spec_drafted},
                 {"accepted", snap.spec_accepted}};
    if (drafter != nullptr) {
      spec_json["draft"] = draft_path;
      spec_json["draft_steps"] = drafter->steps();
      spec_json["draft_seconds"] = drafter->seconds();
    }
  } else {
    runtime::SessionOptions sopt;
    sopt.n_ctx = n_ctx;
    auto session = runtime::Session::Create(*model, sopt);
    if (!session.ok()) {
      std::cerr << "minfer run: " << session.status().message() << "\n";
      return 1;
    }
    auto gen = runtime::Generate(session->get(), std::move(req), emit);
    if (!gen.ok()) {
      std::cerr << "\nminfer run: " << gen.status().message() << "\n";
      return 1;
    }
    out_ids = (*gen)->output_tokens();
    out_text = (*gen)->text();
    reason = (*gen)->finish_reason();
    st = (*gen)->stats();
  }
  if (json) {
    nlohmann::json j;
    j["prompt_ids"] = prompt_ids;
    j["generated_ids"] = out_ids;
    j["text"] = out_text;
    j["finish_reason"] = std::string(FinishReasonName(reason));
    j["timings"] = {{"prompt_tokens", st.prompt_tokens},
                    {"completion_tokens", st.completion_tokens},
                    {"prefill_seconds", st.prefill_seconds},
                    {"ttft_seconds", st.ttft_seconds},
                    {"decode_seconds", st.decode_seconds},
                    {"prefill_tokens_per_second",
                     st.prefill_seconds > 0 ? st.prompt_tokens / st.prefill_seconds : 0},
                    {"decode_tokens_per_second", st.DecodeTokensPerSecond()},
                    {"load_seconds", (*model)->load_seconds()}};
    if (!logprobs.empty()) j["logprobs"] = logprobs;
    if (!spec_json.is_null()) j["spec"] = spec_json;
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::printf("\n");
    if (!quiet) {
      std::fprintf(stderr,
                   "[%s] prompt %d tokens in %.3f s (%.1f t/s); generated %d tokens, "
                   "%.1f t/s decode; ttft %.3f s\n",
                   std::string(FinishReasonName(reason)).c_str(), st.prompt_tokens,
                   st.prefill_seconds,
                   st.prefill_seconds > 0 ? st.prompt_tokens / st.prefill_seconds : 0.0,
                   st.completion_tokens, st.DecodeTokensPerSecond(), st.ttft_seconds);
    }
  }
  return 0;
}

}  // namespace minfer::tools
