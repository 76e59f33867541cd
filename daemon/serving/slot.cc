#include "daemon/serving/slot.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/field_error.h"
#include "engine/base/logging.h"
#include "engine/chat/tool_calls.h"
#include "engine/base/status.h"
#include "engine/gguf/gguf.h"
#include "engine/grammar/matcher.h"
#include "engine/models/decoder.h"
#include "engine/runtime/device_backend.h"

namespace minfer::daemon {

namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

// A sequence handed to the engine (worker-owned).
struct Slot::Active {
  std::shared_ptr<Sequence> seq;
  uint64_t id = 0;  // the engine's
  uint64_t seed = 0;
  Clock::time_point added;
  Clock::time_point last_token;
  double ttft_seconds = 0;
  bool got_token = false;
  runtime::GenerationStats stats;  // what the engine reported so far
};

std::vector<std::string> ReasoningParsers() { return {"qwen3"}; }

absl::Status CheckChatParsers(const SlotConfig& config) {
  // The lists come from the registries, so a family added there is
  // accepted here without a second list to keep.
  auto check = [](const char* field, const std::string& name,
                  const std::vector<std::string>& known) -> absl::Status {
    if (name.empty() || name == "none") return absl::OkStatus();
    for (const std::string& k : known) {
      if (name == k) return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat(
        field, " '", name.substr(0, 64), "' is not known: ", absl::StrJoin(known, ", "),
        " or none (empty: the chat template's)"));
  };
  RETURN_IF_ERROR(check("tool_parser", config.tool_parser, chat::ToolCallFamilies()));
  return check("reasoning_parser", config.reasoning_parser, ReasoningParsers());
}

absl::Status CheckSpeculative(SlotConfig* config) {
  std::string& spec = config->spec;
  if (spec.empty() && !config->draft.empty()) spec = "draft";
  if (!spec.empty() && spec != "off" && spec != "ngram" && spec != "draft") {
    return InvalidField("spec", absl::StrCat("'", spec.substr(0, 64),
                                             "' is not known: off, ngram or draft (empty: the "
                                             "MINFER_SPEC_K knob)"));
  }
  if (config->spec_k < 0 || config->spec_k > kMaxSpecK) {
    return InvalidFieldThat("spec_k", absl::StrCat("must be in [0, ", kMaxSpecK, "] (0: ",
                                                   kDefaultSpecK, "), got ", config->spec_k));
  }
  if (spec == "draft" && config->draft.empty()) {
    return InvalidField("draft", "spec 'draft' needs a draft model: the path of its GGUF file");
  }
  if (spec != "draft" && !config->draft.empty()) {
    return InvalidField("draft", absl::StrCat("a draft model drafts with spec 'draft' (or empty), "
                                              "not with spec '", spec, "'"));
  }
  const bool speculates = spec == "ngram" || spec == "draft";
  if (!speculates && config->spec_k != 0) {
    return InvalidField("spec_k", absl::StrCat("set with spec '", spec,
                                               "': spec_k applies to spec ngram or draft (the "
                                               "knob MINFER_SPEC_K sets it otherwise)"));
  }
  if (speculates && config->spec_k == 0) config->spec_k = kDefaultSpecK;
  return absl::OkStatus();
}

absl::StatusOr<std::optional<graph::DType>> ParseKvType(const std::string& kv_type) {
  if (kv_type.empty() || kv_type == "auto") return std::optional<graph::DType>();
  if (kv_type == "f32") return std::optional<graph::DType>(graph::DType::kF32);
  if (kv_type == "f16") return std::optional<graph::DType>(graph::DType::kF16);
  if (kv_type == "q8_0") return std::optional<graph::DType>(graph::DType::kQ8_0);
  return absl::InvalidArgumentError(absl::StrCat(
      "kv_type must be f32, f16 or q8_0 (empty for the model's default), got '", kv_type, "'"));
}

const char* SlotStateName(SlotState state) {
  switch (state) {
    case SlotState::kLoading:
      return "loading";
    case SlotState::kReady:
      return "ready";
    case SlotState::kUnloading:
      return "unloading";
    case SlotState::kFailed:
      return "failed";
    case SlotState::kStopped:
      return "stopped";
  }
  return "unknown";
}

Slot::Slot(SlotConfig config, Hooks hooks) : config_(std::move(config)), hooks_(std::move(hooks)) {
  knobs_ = config_.knobs;
  if (hooks_.metrics != nullptr) {
    metrics_ = hooks_.metrics->ForModel(config_.name);
    hooks_.metrics->SetSlotState(config_.name, "loading");
  }
}

std::shared_ptr<Slot> Slot::Start(SlotConfig config, Hooks hooks) {
  std::shared_ptr<Slot> slot(new Slot(std::move(config), std::move(hooks)));
  slot->thread_ = std::thread([s = slot.get()] { s->ThreadMain(); });
  return slot;
}

Slot::~Slot() { Stop(); }

void Slot::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_requested_ = true;
    if (!unloading_) {
      unloading_ = true;
      cancel_reason_ = absl::UnavailableError(absl::StrCat("model '", config_.name, "' was stopped"));
      unload_started_ = Clock::now();
      counters_at_unload_ = counters_;
    }
    // A drain in progress ends now.
    drain_deadline_ = Clock::now();
  }
  cv_.notify_all();
  Join();
}

void Slot::Join() {
  if (thread_.joinable()) thread_.join();
}

SlotState Slot::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

std::shared_ptr<const runtime::Model> Slot::model() const {
  std::lock_guard<std::mutex> lock(mu_);
  return model_;
}

int64_t Slot::n_ctx() const {
  std::lock_guard<std::mutex> lock(mu_);
  return n_ctx_;
}

int32_t Slot::InFlight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int32_t>(live_.size());
}

SlotStatus Slot::Status() const {
  SlotStatus s;
  s.config = config_;
  s.load_bytes_done = load_done_.load(std::memory_order_relaxed);
  s.load_bytes_total = load_total_.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  s.state = state_;
  s.error = error_;
  s.n_ctx = n_ctx_;
  s.kv_type = kv_type_;
  s.knobs = knobs_;
  s.estimate = estimate_;
  if (model_ != nullptr) {
    s.backend = model_->kv_backend()->name();
    s.summary = summary_;
    s.weights_bytes = model_->weight_bytes();
  }
  s.kv_bytes = kv_bytes_;
  s.scratch_bytes = scratch_bytes_;
  s.backend_bytes = backend_bytes_;
  s.active = running_;
  s.queued = waiting_ + static_cast<int32_t>(queue_.size());
  s.kv_block = kv_block_;
  s.kv_blocks_total = kv_blocks_total_;
  s.kv_blocks_used = kv_blocks_used_;
  s.kv_blocks_cached = kv_blocks_cached_;
  s.kv_block_bytes = kv_block_bytes_;
  s.sequence_blocks = sequence_blocks_;
  s.token_budget = token_budget_;
  s.preemptions = preemptions_;
  s.prefix_cache = prefix_cache_;
  s.prefix_hit_tokens = prefix_hit_tokens_;
  s.prefix_evictions = prefix_evictions_;
  s.steps = steps_;
  s.spec_k = config_.spec_k;
  if (config_.spec.empty()) {
    s.spec_k = static_cast<int32_t>(KnobRegistry::Global().GetInt("MINFER_SPEC_K", &knobs_));
  }
  s.spec_drafted = spec_drafted_;
  s.spec_accepted = spec_accepted_;
  s.draft_bytes = draft_bytes_;
  s.counters = counters_;
  s.grammar = grammar_;
  s.load_seconds = load_seconds_;
  return s;
}

std::string Slot::StateError() const {
  if (unloading_ && state_ != SlotState::kFailed) {
    return absl::StrCat("model '", config_.name, "' is being unloaded");
  }
  switch (state_) {
    case SlotState::kLoading:
      return absl::StrCat("model '", config_.name, "' is still loading");
    case SlotState::kUnloading:
    case SlotState::kStopped:
      return absl::StrCat("model '", config_.name, "' is being unloaded");
    case SlotState::kFailed:
      return absl::StrCat("model '", config_.name, "' failed to load: ", error_.message());
    case SlotState::kReady:
      break;
  }
  return absl::StrCat("model '", config_.name, "' is ready");
}

absl::Status Slot::Submit(std::shared_ptr<Sequence> seq) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != SlotState::kReady || unloading_) {
      return absl::FailedPreconditionError(StateError());
    }
    const size_t capacity = static_cast<size_t>(config_.parallel) + config_.queue_size;
    if (live_.size() >= capacity) {
      counters_.rejected_queue_full++;
      return absl::ResourceExhaustedError(absl::StrCat(
          "model '", config_.name, "' is at capacity: ", running_, " sequences running and ",
          live_.size() - running_, " queued (parallel ", config_.parallel, ", queue_size ",
          config_.queue_size, ")"));
    }
    counters_.requests++;
    if (const auto& g = seq->request().grammar; g != nullptr) {
      grammar_.constrained_requests++;
      if (metrics_ != nullptr) {
        metrics_->constrained_requests[static_cast<int>(g->kind())]->Increment();
      }
    }
    live_.insert(seq);
    queue_.push_back(std::move(seq));
    if (metrics_ != nullptr) metrics_->queue_depth->Set(static_cast<double>(queue_.size()));
  }
  cv_.notify_all();
  return absl::OkStatus();
}

void Slot::RecordGrammarCompile(const absl::Status& status, double seconds) {
  grammar_used_.store(true, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!status.ok()) grammar_.refused++;
  }
  if (metrics_ == nullptr) return;
  if (status.ok()) {
    metrics_->grammar_compile_seconds->Observe(seconds);
  } else {
    metrics_->grammar_refused->Increment();
  }
}

void Slot::CancelAll(const absl::Status& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& seq : live_) seq->Cancel(reason);
  }
  cv_.notify_all();
}

absl::Status Slot::BeginUnload(Clock::time_point drain_deadline, absl::Status cancel_reason,
                               std::function<void(const UnloadResult&)> done) {
  bool failed_slot = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == SlotState::kLoading) {
      return absl::FailedPreconditionError(absl::StrCat(
          "model '", config_.name, "' is still loading; unload it once it is ready or failed"));
    }
    if (unloading_ || state_ == SlotState::kUnloading || state_ == SlotState::kStopped) {
      return absl::FailedPreconditionError(
          absl::StrCat("model '", config_.name, "' is already being unloaded"));
    }
    unloading_ = true;
    unload_started_ = Clock::now();
    counters_at_unload_ = counters_;
    if (state_ == SlotState::kFailed) {
      // Nothing runs and the thread has ended: there is nothing to free.
      state_ = SlotState::kStopped;
      failed_slot = true;
    } else {
      state_ = SlotState::kUnloading;
      drain_deadline_ = drain_deadline;
      cancel_reason_ = std::move(cancel_reason);
      unload_done_ = std::move(done);
    }
  }
  cv_.notify_all();
  if (hooks_.metrics != nullptr) {
    if (failed_slot) {
      hooks_.metrics->RemoveModel(config_.name);
    } else {
      hooks_.metrics->SetSlotState(config_.name, "unloading");
    }
  }
  Logger("daemon")->info("model '{}': {}", config_.name,
                         failed_slot ? "removed (it had failed to load)" : "unloading");
  if (hooks_.on_state_change) hooks_.on_state_change(*this);
  state_notifier_.Notify();
  if (failed_slot && done) done(UnloadResult{});
  return absl::OkStatus();
}

absl::Status Slot::PostKnobChange(const std::string& name, std::optional<std::string> value,
                                  std::function<void(absl::Status)> done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != SlotState::kReady || unloading_) {
      return absl::FailedPreconditionError(StateError());
    }
    tasks_.push_back([this, name, value = std::move(value), done = std::move(done)]() mutable {
      absl::Status s = model_mut_->SetKnobOverride(name, value);
      if (s.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        knobs_ = model_mut_->knobs();
      }
      done(std::move(s));
    });
  }
  cv_.notify_all();
  return absl::OkStatus();
}

void Slot::SetState(SlotState state, absl::Status error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_ = state;
    error_ = std::move(error);
  }
  if (hooks_.metrics != nullptr && state != SlotState::kStopped) {
    hooks_.metrics->SetSlotState(config_.name, std::string(SlotStateName(state)));
  }
  if (hooks_.on_state_change) hooks_.on_state_change(*this);
  state_notifier_.Notify();
}

void Slot::ThreadMain() {
  auto t0 = Clock::now();
  absl::Status loaded = Load();
  if (!loaded.ok()) {
    hooks_.budget->Release(config_.name);
    engine_.reset();
    drafter_.reset();
    model_mut_.reset();
    Logger("daemon")->error("model '{}': load failed: {}", config_.name, loaded);
    SetState(SlotState::kFailed, loaded);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    load_seconds_ = Seconds(Clock::now() - t0);
  }
  const SlotStatus st = Status();
  Logger("daemon")->info(
      "model '{}': ready in {:.2f} s ({} sequences, n_ctx {}, KV {} pool of {} blocks x {} rows = "
      "{:.1f} MiB, {:.1f} MiB of activations for {} tokens per step): {}",
      config_.name, st.load_seconds, config_.parallel, st.n_ctx, st.kv_type, st.kv_blocks_total,
      st.kv_block, st.kv_bytes / 1048576.0, st.scratch_bytes / 1048576.0, st.token_budget,
      st.summary);
  bool stop;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop = stop_requested_;
  }
  if (!stop) {
    SetState(SlotState::kReady);
    Serve();
  }
  Teardown();
}

absl::StatusOr<std::string> Slot::AdmitOnDevice(const gguf::GgufFile& file,
                                                 const gguf::GgufFile* draft,
                                                 const MemoryEstimate& device_estimate) {
  if (config_.backend == "cpu" || hooks_.device_budget == nullptr) return config_.backend;
  for (const runtime::DeviceBackendProvider& p : runtime::DeviceBackendProviders()) {
    if (!p.info) continue;
    absl::StatusOr<runtime::DeviceInfo> info = p.info();
    if (!info.ok()) continue;  // Model::Load reports (cuda) or logs (auto) why
    MemoryEstimate dev = device_estimate;
    if (p.weight_bytes) {
      dev.weights = 0;
      for (const gguf::GgufFile* f : {&file, draft}) {
        if (f == nullptr) continue;
        for (const gguf::TensorInfo& t : f->tensors()) {
          dev.weights += p.weight_bytes(static_cast<int>(t.type), t.dims.empty() ? 1 : t.dims[0],
                                        t.rows(), t.nbytes, &config_.knobs);
        }
      }
    }
    absl::Status st = hooks_.device_budget->Reserve(
        config_.name, absl::StrCat(p.name, " device ", info->name), dev, info->free_bytes,
        info->total_bytes);
    if (!st.ok() && draft != nullptr) {
      st = absl::Status(st.code(), absl::StrCat(st.message(), " (with draft '", config_.draft,
                                                "', which the figures include)"));
    }
    if (st.ok()) return config_.backend;
    if (config_.backend == "cuda") return st;
    // "auto": the model still runs, on the CPU.
    Logger("daemon")->warn("model '{}': placed on the CPU: {}", config_.name, st.message());
    return std::string("cpu");
  }
  return config_.backend;
}

absl::Status Slot::Load() {
  const std::string where = absl::StrCat("model '", config_.name, "' (", config_.path, ")");
  const bool with_draft = config_.spec == "draft";
  const std::string draft_where = absl::StrCat("draft '", config_.draft, "'");
  std::string backend = config_.backend;
  ASSIGN_OR_RETURN(std::optional<graph::DType> kv_type, ParseKvType(config_.kv_type));
  int64_t pool_blocks = 0;
  int32_t kv_block = 16;
  uint64_t target_bytes = 0;  // the weights Model::Load reads (progress)
  // Admission first: the tensor table and hyperparameters are enough to
  // estimate, and reading them touches no weight pages.
  {
    absl::StatusOr<std::unique_ptr<gguf::GgufFile>> file = gguf::GgufFile::Open(config_.path);
    if (!file.ok()) return Annotate(file.status(), where);
    auto arch = models::DecoderModel::FromGguf(**file);
    if (!arch.ok()) return Annotate(arch.status(), where);
    const models::DecoderHparams& hp = (*arch)->hparams();
    EstimateParams ep;
    ep.n_ctx = config_.n_ctx;
    ep.parallel = config_.parallel;
    ep.kv_type = kv_type;
    ep.kv_tokens = config_.kv_tokens;
    ep.kv_block = static_cast<int32_t>(KnobRegistry::Global().GetInt("MINFER_KV_BLOCK", &config_.knobs));
    const int64_t budget_knob = KnobRegistry::Global().GetInt("MINFER_BATCH_TOKENS", &config_.knobs);
    ep.token_budget = budget_knob > 0 ? budget_knob : 512;
    // The engine's draft rows (runtime::EngineOptions::spec_rows) when it
    // starts speculating.
    const bool speculates =
        config_.spec == "ngram" || with_draft ||
        (config_.spec.empty() &&
         KnobRegistry::Global().GetInt("MINFER_SPEC_K", &config_.knobs) > 0);
    ep.spec_rows = speculates ? runtime::SpecRows(config_.parallel) : 0;
    MemoryEstimate estimate = EstimateMemory(**file, hp, ep);
    // On a device the steps are those of the device's token budget.
    EstimateParams device_ep = ep;
    device_ep.token_budget = budget_knob > 0 ? budget_knob : 2048;
    MemoryEstimate device_estimate = EstimateMemory(**file, hp, device_ep);
    pool_blocks = PoolBlocks(hp, ep);
    kv_block = ep.kv_block;
    // A draft model runs an engine of its own beside the target's: its
    // weights, a KV pool of parallel x n_ctx in the model's default KV type
    // (counted as f32) and its graphs' activations, admitted together with
    // the target so a draft that does not fit is refused like a target.
    std::unique_ptr<gguf::GgufFile> draft_file;
    MemoryEstimate draft_estimate;
    if (with_draft) {
      absl::StatusOr<std::unique_ptr<gguf::GgufFile>> d = gguf::GgufFile::Open(config_.draft);
      if (!d.ok()) return Annotate(d.status(), absl::StrCat(where, ": ", draft_where));
      auto draft_arch = models::DecoderModel::FromGguf(**d);
      if (!draft_arch.ok()) {
        return Annotate(draft_arch.status(), absl::StrCat(where, ": ", draft_where));
      }
      const models::DecoderHparams& dhp = (*draft_arch)->hparams();
      EstimateParams dp = ep;
      dp.kv_type.reset();
      dp.kv_tokens = 0;
      dp.spec_rows = 0;  // the draft engine does not speculate
      draft_estimate = EstimateMemory(**d, dhp, dp);
      EstimateParams ddp = device_ep;
      ddp.kv_type.reset();
      ddp.kv_tokens = 0;
      ddp.spec_rows = 0;
      const MemoryEstimate draft_device = EstimateMemory(**d, dhp, ddp);
      estimate.weights += draft_estimate.weights;
      estimate.kv += draft_estimate.kv;
      estimate.scratch += draft_estimate.scratch;
      device_estimate.weights += draft_device.weights;
      device_estimate.kv += draft_device.kv;
      device_estimate.scratch += draft_device.scratch;
      draft_file = std::move(*d);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      estimate_ = estimate;
      scratch_bytes_ = estimate.scratch - draft_estimate.scratch;
    }
    if (absl::Status st = hooks_.budget->Reserve(config_.name, estimate); !st.ok()) {
      if (!with_draft) return st;
      return absl::Status(st.code(), absl::StrCat(st.message(), "; the figures include ",
                                                  draft_where, ": ", draft_estimate.ToString()));
    }
    target_bytes = file.value()->file_size() - file.value()->data_offset();
    uint64_t total = target_bytes;
    if (draft_file != nullptr) total += draft_file->file_size() - draft_file->data_offset();
    load_total_.store(total);
    ASSIGN_OR_RETURN(backend, AdmitOnDevice(**file, draft_file.get(), device_estimate));
  }
  // The device reservation covers the upload; once the load ends (either
  // way) the device's own free figure accounts for what was allocated.
  struct ReleaseDevice {
    DeviceBudget* budget;
    const std::string& name;
    ~ReleaseDevice() {
      if (budget != nullptr) budget->Release(name);
    }
  } release_device{hooks_.device_budget, config_.name};
  if (hooks_.before_load) hooks_.before_load(config_.name);
  // Progress over the target's weights, then the draft's.
  const uint64_t load_total = load_total_.load();
  runtime::ModelOptions mo;
  mo.backend = backend;
  mo.knobs = config_.knobs;
  mo.progress = [this, load_total](uint64_t done, uint64_t total) {
    load_done_.store(done, std::memory_order_relaxed);
    load_total_.store(std::max(total, load_total), std::memory_order_relaxed);
    state_notifier_.Notify();
  };
  absl::StatusOr<std::shared_ptr<runtime::Model>> model = runtime::Model::Load(config_.path, mo);
  if (!model.ok()) return Annotate(model.status(), where);
  model_mut_ = *model;
  runtime::EngineOptions eo;
  eo.max_seqs = config_.parallel;
  eo.n_ctx = config_.n_ctx;
  eo.kv_block = kv_block;
  eo.kv_blocks = pool_blocks;
  eo.kv_type = kv_type;
  if (config_.spec == "off") eo.spec_k = 0;
  if (config_.spec == "ngram" || with_draft) eo.spec_k = config_.spec_k;
  if (with_draft) {
    // The same options as the target (backend, knobs); progress goes on
    // from the target's bytes.
    runtime::ModelOptions dmo = mo;
    const uint64_t base = target_bytes;
    dmo.progress = [this, base, load_total](uint64_t done, uint64_t total) {
      load_done_.store(base + done, std::memory_order_relaxed);
      load_total_.store(std::max(base + total, load_total), std::memory_order_relaxed);
      state_notifier_.Notify();
    };
    absl::StatusOr<std::shared_ptr<runtime::Model>> draft =
        runtime::Model::Load(config_.draft, dmo);
    if (!draft.ok()) return Annotate(draft.status(), absl::StrCat(where, ": ", draft_where));
    absl::StatusOr<std::shared_ptr<runtime::ModelDrafter>> drafter =
        runtime::ModelDrafter::Create(*draft, *model_mut_, eo);
    if (!drafter.ok()) {
      return Annotate(drafter.status(), absl::StrCat(where, ": ", draft_where));
    }
    drafter_ = *std::move(drafter);
    eo.drafter = drafter_;
  }
  absl::StatusOr<std::unique_ptr<runtime::StepEngine>> engine;
  if (hooks_.make_engine) {
    engine = hooks_.make_engine(model_mut_, eo);
  } else {
    absl::StatusOr<std::unique_ptr<runtime::Engine>> e = runtime::Engine::Create(model_mut_, eo);
    // The largest graph now: its activations are allocated (and reported)
    // before the first request, and an allocation failure fails the load.
    if (e.ok()) {
      absl::Status prepared = (*e)->runner().Prepare();
      if (prepared.ok()) {
        engine = std::unique_ptr<runtime::StepEngine>(std::move(*e));
      } else {
        engine = prepared;
      }
    } else {
      engine = e.status();
    }
  }
  if (!engine.ok()) return Annotate(engine.status(), where);
  engine_ = std::move(*engine);
  const runtime::EngineSnapshot snap = engine_->Snapshot();
  // Computed here, on the slot's thread: Summary() reads the model's knob
  // overrides, which only this thread may touch once the engine runs.
  std::string summary = model_mut_->Summary();
  if (drafter_ != nullptr) {
    absl::StrAppend(&summary, "; draft ", drafter_->model().Summary());
  }
  const uint64_t draft_bytes = DraftBytes();
  const int64_t backend_bytes = model_mut_->kv_backend()->MemoryBytes();
  const uint64_t backend_gen = model_mut_->kv_backend()->pool_gen();
  std::lock_guard<std::mutex> lock(mu_);
  backend_bytes_ = static_cast<uint64_t>(std::max<int64_t>(backend_bytes, 0));
  backend_gen_ = backend_gen;
  model_ = model_mut_;
  summary_ = std::move(summary);
  n_ctx_ = snap.n_ctx;
  kv_type_ = graph::DTypeName(snap.kv_type);
  kv_bytes_ = static_cast<uint64_t>(snap.kv_bytes);
  scratch_bytes_ = static_cast<uint64_t>(snap.activation_bytes);
  kv_block_ = snap.kv_block;
  kv_blocks_total_ = snap.kv_blocks_total;
  kv_block_bytes_ = static_cast<uint64_t>(snap.kv_block_bytes);
  token_budget_ = snap.token_budget;
  draft_bytes_ = draft_bytes;
  if (metrics_ != nullptr) {
    metrics_->weights_bytes->Set(static_cast<double>(model_->weight_bytes()));
    metrics_->kv_bytes->Set(static_cast<double>(kv_bytes_));
    metrics_->kv_blocks_free->Set(static_cast<double>(kv_blocks_total_));
    metrics_->kv_blocks_used->Set(0);
    metrics_->kv_usage->Set(0);
    metrics_->scratch_bytes->Set(static_cast<double>(scratch_bytes_));
    metrics_->backend_bytes->Set(static_cast<double>(backend_bytes_));
  }
  return absl::OkStatus();
}

uint64_t Slot::DraftBytes() const {
  if (drafter_ == nullptr) return 0;
  const runtime::EngineSnapshot d = drafter_->engine().Snapshot();
  return drafter_->model().weight_bytes() + static_cast<uint64_t>(std::max<int64_t>(d.kv_bytes, 0)) +
         static_cast<uint64_t>(std::max<int64_t>(d.activation_bytes, 0));
}

void Slot::Serve() {
  std::map<uint64_t, Active> active;  // by engine id
  std::vector<runtime::EngineEvent> events;
  for (;;) {
    std::vector<std::shared_ptr<Sequence>> admit;
    std::vector<std::shared_ptr<Sequence>> dropped;
    std::vector<Task> tasks;
    {
      std::unique_lock<std::mutex> lock(mu_);
      for (;;) {
        const Clock::time_point now = Clock::now();
        if (unloading_ && !drain_cancelled_ && now >= drain_deadline_) {
          for (const auto& seq : live_) seq->Cancel(cancel_reason_);
          drain_cancelled_ = true;
        }
        // Submitted sequences that were cancelled or expired leave at once.
        for (auto it = queue_.begin(); it != queue_.end();) {
          if ((*it)->cancel_requested() || now >= (*it)->deadline()) {
            dropped.push_back(std::move(*it));
            it = queue_.erase(it);
          } else {
            ++it;
          }
        }
        if (!active.empty() || !queue_.empty() || !tasks_.empty() || !dropped.empty()) break;
        if (unloading_) return;
        cv_.wait(lock);
      }
      tasks.swap(tasks_);
      admit.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
      queue_.clear();
    }
    for (auto& seq : dropped) {
      FinishUnstarted(seq, seq->cancel_requested()
                               ? seq->cancel_reason()
                               : absl::DeadlineExceededError("deadline exceeded while queued"));
    }
    // Knob changes run here, between two steps.
    for (Task& t : tasks) t();

    // New sequences join the engine's queue (its scheduler admits them).
    for (auto& seq : admit) {
      const int32_t prompt = seq->prompt_tokens();
      absl::StatusOr<uint64_t> id = engine_->Add(seq->TakeRequest());
      if (!id.ok()) {
        FinishUnstarted(seq, id.status());
        continue;
      }
      Active a;
      a.seq = seq;
      a.id = *id;
      a.seed = seq->seed();
      a.added = Clock::now();
      Logger("daemon")->debug("model '{}': sequence of {} prompt tokens added {:.4f} s after arrival",
                              config_.name, prompt, Seconds(a.added - seq->arrival()));
      a.stats.prompt_tokens = prompt;
      if (metrics_ != nullptr) metrics_->prompt_tokens->Increment(prompt);
      {
        std::lock_guard<std::mutex> lock(mu_);
        counters_.prompt_tokens += prompt;
      }
      active.emplace(*id, std::move(a));
    }

    // Cancelled, disconnected or expired sequences leave before the step.
    const Clock::time_point now = Clock::now();
    for (auto it = active.begin(); it != active.end();) {
      Active& a = it->second;
      absl::Status stop;
      if (a.seq->cancel_requested()) {
        stop = a.seq->cancel_reason();
      } else if (now >= a.seq->deadline()) {
        stop = absl::DeadlineExceededError("deadline exceeded");
      }
      if (stop.ok()) {
        ++it;
        continue;
      }
      engine_->Cancel(a.id);
      FinishSequence(a, stop, FinishReason::kCancelled, a.stats);
      it = active.erase(it);
    }
    if (active.empty()) {
      UpdateGauges();
      continue;
    }

    // schedule -> run -> update.
    events.clear();
    absl::Status st = engine_->Step(&events);
    if (!st.ok()) {
      Logger("daemon")->error("model '{}': step failed: {}", config_.name, st);
    }
    RecordStep(engine_->Snapshot().last_step);
    const Clock::time_point t_done = Clock::now();
    for (runtime::EngineEvent& ev : events) {
      auto it = active.find(ev.id);
      if (it == active.end()) continue;
      Active& a = it->second;
      if (!ev.out.tokens.empty()) {
        if (!a.got_token) {
          a.got_token = true;
          a.ttft_seconds = Seconds(t_done - a.seq->arrival());
          if (metrics_ != nullptr) metrics_->ttft->Observe(a.ttft_seconds);
        } else if (metrics_ != nullptr) {
          metrics_->itl->Observe(Seconds(t_done - a.last_token));
        }
        a.last_token = t_done;
        a.stats.completion_tokens += static_cast<int32_t>(ev.out.tokens.size());
        if (metrics_ != nullptr) {
          metrics_->completion_tokens->Increment(static_cast<double>(ev.out.tokens.size()));
        }
        a.seq->Publish(ev.out);
      }
      if (ev.finished) {
        FinishSequence(a, ev.status, ev.reason, ev.stats);
        active.erase(it);
      }
    }
    UpdateGauges();
  }
}

void Slot::RecordStep(const runtime::EngineStepStats& step) {
  if (step.sequences == 0) return;
  // One line per step at debug level: where a request's time goes (with the
  // admission line below), e.g. to tell a slow step from a wait before it.
  Logger("daemon")->debug(
      "model '{}': step of {} sequences, {} tokens ({} prefill, {} from the prefix cache), "
      "{:.4f} s",
      config_.name, step.sequences, step.tokens, step.prefill_tokens, step.cached_tokens,
      step.seconds);
  if (metrics_ == nullptr) return;
  metrics_->step_sequences->Observe(static_cast<double>(step.sequences));
  metrics_->step_tokens->Observe(static_cast<double>(step.tokens));
  metrics_->step_seconds->Observe(step.seconds);
  if (step.preempted > 0) metrics_->preemptions->Increment(static_cast<double>(step.preempted));
  if (step.cached_tokens > 0) {
    metrics_->prefix_hit_tokens->Increment(static_cast<double>(step.cached_tokens));
  }
  if (step.evictions > 0) metrics_->prefix_evictions->Increment(static_cast<double>(step.evictions));
}

void Slot::FinishSequence(Active& a, absl::Status status, FinishReason reason,
                          const runtime::GenerationStats& stats) {
  const Clock::time_point now = Clock::now();
  SequenceResult r;
  r.status = status;
  r.finish_reason = status.ok() ? reason : FinishReason::kCancelled;
  r.stats = stats;
  r.stats.prompt_tokens = a.stats.prompt_tokens;
  r.stats.completion_tokens = a.stats.completion_tokens;
  r.queue_seconds = Seconds(a.added - a.seq->arrival()) + stats.queue_seconds;
  r.ttft_seconds = a.ttft_seconds;
  r.total_seconds = Seconds(now - a.seq->arrival());
  r.seed = a.seed;
  if (metrics_ != nullptr) {
    metrics_->queue_time->Observe(r.queue_seconds);
    const double tpot = r.DecodeTokensPerSecond();
    if (tpot > 0) metrics_->tpot->Observe(1.0 / tpot);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    live_.erase(a.seq);
    counters_.completion_tokens += r.stats.completion_tokens;
    if (status.ok()) {
      counters_.completed++;
    } else if (absl::IsCancelled(status) || absl::IsDeadlineExceeded(status) ||
               absl::IsUnavailable(status)) {
      counters_.cancelled++;
    } else {
      counters_.failed++;
    }
  }
  Logger("daemon")->info(
      "generate api={} model={} prompt={} completion={} ttft={:.4f}s decode={:.1f}tok/s "
      "queue={:.4f}s total={:.3f}s finish={}{}{}{}",
      a.seq->api(), config_.name, r.stats.prompt_tokens, r.stats.completion_tokens, r.ttft_seconds,
      r.DecodeTokensPerSecond(), r.queue_seconds, r.total_seconds,
      FinishReasonName(r.finish_reason),
      r.stats.spec_drafted > 0 ? absl::StrCat(" drafted=", r.stats.spec_drafted,
                                              " accepted=", r.stats.spec_accepted)
                               : std::string(),
      status.ok() ? "" : " status=",
      status.ok() ? std::string() : status.ToString());
  a.seq->Finish(std::move(r));
}

void Slot::FinishUnstarted(const std::shared_ptr<Sequence>& seq, absl::Status status) {
  const Clock::time_point now = Clock::now();
  SequenceResult r;
  r.status = status;
  r.finish_reason = FinishReason::kCancelled;
  r.stats.prompt_tokens = seq->prompt_tokens();
  r.queue_seconds = Seconds(now - seq->arrival());
  r.total_seconds = r.queue_seconds;
  r.seed = seq->seed();
  {
    std::lock_guard<std::mutex> lock(mu_);
    live_.erase(seq);
    if (absl::IsCancelled(status) || absl::IsDeadlineExceeded(status) ||
        absl::IsUnavailable(status)) {
      counters_.cancelled++;
    } else {
      counters_.failed++;
    }
  }
  Logger("daemon")->info("generate api={} model={} not started: {}", seq->api(), config_.name,
                         status);
  seq->Finish(std::move(r));
}

void Slot::UpdateGauges() {
  // The backend's bookkeeping belongs to this thread (forwards change it).
  // MemoryBytes walks the device's weight registry: re-read it only when
  // the backend's buffers changed (pool_gen), not at every step.
  int64_t backend_bytes = -1;
  uint64_t backend_gen = 0;
  if (model_mut_ != nullptr) {
    backend_gen = model_mut_->kv_backend()->pool_gen();
    if (backend_gen != backend_gen_) backend_bytes = model_mut_->kv_backend()->MemoryBytes();
  }
  std::vector<int64_t> per_seq;
  int64_t used = 0, cached = 0, running = 0, waiting = 0, scratch = 0, budget = 0;
  uint64_t preemptions = 0, steps = 0, hits = 0, evictions = 0;
  bool prefix_cache = false;
  int64_t constrained = 0, masks = 0;
  double mask_seconds = 0;
  uint64_t spec_drafted = spec_drafted_seen_, spec_accepted = spec_accepted_seen_;
  const uint64_t draft_bytes = DraftBytes();
  if (engine_ != nullptr) {
    runtime::EngineSnapshot snap = engine_->Snapshot();
    spec_drafted = static_cast<uint64_t>(std::max<int64_t>(snap.spec_drafted, 0));
    spec_accepted = static_cast<uint64_t>(std::max<int64_t>(snap.spec_accepted, 0));
    constrained = snap.constrained_running;
    masks = snap.grammar_masks;
    mask_seconds = snap.grammar_mask_seconds;
    budget = snap.token_budget;
    used = snap.kv_blocks_used;
    cached = snap.kv_blocks_cached;
    prefix_cache = snap.prefix_cache;
    hits = static_cast<uint64_t>(snap.prefix_hit_tokens);
    evictions = static_cast<uint64_t>(snap.prefix_evictions);
    running = snap.running;
    waiting = snap.waiting;
    scratch = snap.activation_bytes;
    preemptions = static_cast<uint64_t>(snap.preemptions);
    steps = static_cast<uint64_t>(snap.steps);
    per_seq = std::move(snap.sequence_blocks);
  }
  // The compiler's own counts (cache hits happen in the request path, where
  // a hit cannot be told from a compile without racing other requests).
  grammar::CompilerStats compiler;
  const bool grammar_used = grammar_used_.load(std::memory_order_relaxed);
  if (grammar_used && model_mut_ != nullptr) compiler = model_mut_->grammars().stats();
  if (metrics_ != nullptr && masks > static_cast<int64_t>(masks_seen_)) {
    metrics_->grammar_masks->Increment(static_cast<double>(masks - masks_seen_));
    metrics_->grammar_mask_seconds->Increment(std::max(0.0, mask_seconds - mask_seconds_seen_));
  }
  masks_seen_ = static_cast<uint64_t>(std::max<int64_t>(masks, 0));
  mask_seconds_seen_ = mask_seconds;
  if (metrics_ != nullptr && spec_drafted > spec_drafted_seen_) {
    metrics_->spec_drafted_tokens->Increment(static_cast<double>(spec_drafted - spec_drafted_seen_));
  }
  if (metrics_ != nullptr && spec_accepted > spec_accepted_seen_) {
    metrics_->spec_accepted_tokens->Increment(
        static_cast<double>(spec_accepted - spec_accepted_seen_));
  }
  spec_drafted_seen_ = spec_drafted;
  spec_accepted_seen_ = spec_accepted;
  std::lock_guard<std::mutex> lock(mu_);
  if (grammar_used && model_mut_ != nullptr) {
    if (metrics_ != nullptr && compiler.cache_hits > static_cast<int64_t>(grammar_.cache_hits)) {
      metrics_->grammar_cache_hits->Increment(
          static_cast<double>(compiler.cache_hits - static_cast<int64_t>(grammar_.cache_hits)));
    }
    grammar_.compiles = static_cast<uint64_t>(compiler.compiles);
    grammar_.cache_hits = static_cast<uint64_t>(compiler.cache_hits);
  }
  grammar_.constrained_running = constrained;
  grammar_.masks = masks_seen_;
  grammar_.mask_seconds = mask_seconds;
  if (scratch > 0) scratch_bytes_ = static_cast<uint64_t>(scratch);
  if (backend_bytes >= 0) {
    backend_bytes_ = static_cast<uint64_t>(backend_bytes);
    backend_gen_ = backend_gen;
  }
  running_ = static_cast<int32_t>(running);
  waiting_ = static_cast<int32_t>(waiting);
  kv_blocks_used_ = used;
  kv_blocks_cached_ = cached;
  prefix_cache_ = prefix_cache;
  prefix_hit_tokens_ = hits;
  prefix_evictions_ = evictions;
  sequence_blocks_ = std::move(per_seq);
  preemptions_ = preemptions;
  steps_ = steps;
  spec_drafted_ = spec_drafted;
  spec_accepted_ = spec_accepted;
  draft_bytes_ = draft_bytes;
  if (budget > 0) token_budget_ = budget;
  if (metrics_ != nullptr) {
    metrics_->queue_depth->Set(static_cast<double>(waiting_ + queue_.size()));
    metrics_->active->Set(running_);
    metrics_->scratch_bytes->Set(static_cast<double>(scratch_bytes_));
    metrics_->backend_bytes->Set(static_cast<double>(backend_bytes_));
    metrics_->kv_blocks_used->Set(static_cast<double>(used));
    metrics_->kv_blocks_free->Set(static_cast<double>(kv_blocks_total_ - used));
    metrics_->kv_blocks_cached->Set(static_cast<double>(cached));
    metrics_->kv_usage->Set(kv_blocks_total_ > 0 ? static_cast<double>(used) / kv_blocks_total_
                                                 : 0.0);
    metrics_->constrained_sequences->Set(static_cast<double>(constrained));
  }
}

void Slot::Teardown() {
  engine_.reset();
  drafter_.reset();
  model_mut_.reset();
  UnloadResult result;
  std::function<void(const UnloadResult&)> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    model_.reset();
    result.completed = static_cast<int32_t>(counters_.completed - counters_at_unload_.completed);
    result.cancelled = static_cast<int32_t>((counters_.cancelled + counters_.failed) -
                                            (counters_at_unload_.cancelled + counters_at_unload_.failed));
    result.seconds = Seconds(Clock::now() - unload_started_);
    done = std::move(unload_done_);
  }
  hooks_.budget->Release(config_.name);
  if (hooks_.metrics != nullptr) hooks_.metrics->RemoveModel(config_.name);
  Logger("daemon")->info("model '{}': unloaded in {:.3f} s ({} finished, {} cancelled while draining)",
                         config_.name, result.seconds, result.completed, result.cancelled);
  SetState(SlotState::kStopped);
  if (done) done(result);
}

}  // namespace minfer::daemon
