#include "daemon/serving/model_loader.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/serving/placement.h"
#include "engine/base/logging.h"
#include "engine/base/status.h"
#include "engine/gguf/gguf.h"
#include "engine/models/decoder.h"
#include "engine/runtime/device_backend.h"

namespace minfer::daemon {

EngineLoader::EngineLoader(SlotConfig config, Hooks hooks)
    : config_(std::move(config)),
      hooks_(std::move(hooks)),
      where_(absl::StrCat("model '", config_.name, "' (", config_.path, ")")) {}

absl::StatusOr<std::string> EngineLoader::AdmitOnDevice(const gguf::GgufFile& file,
                                                         const gguf::GgufFile* draft,
                                                         const MemoryEstimate& device_estimate) {
  if (config_.backend == "cpu" && config_.device >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("device ", config_.device, " was asked for with backend 'cpu'"));
  }
  if (config_.backend == "cpu" || hooks_.device_budget == nullptr) {
    placement_ = DevicePlacement();
    return config_.backend;
  }
  if (config_.tensor_parallel > 1) return AdmitSplit(file, device_estimate);
  // A wake goes back to the device the model was placed on.
  int32_t requested = sleep_level_ > 0 ? placement_.device : config_.device;
  if (requested < 0) {
    const int64_t pinned = KnobRegistry::Global().GetInt("MINFER_GPU", &config_.knobs);
    if (pinned >= 0) requested = static_cast<int32_t>(pinned);
  }
  for (const runtime::DeviceBackendProvider& p : runtime::DeviceBackendProviders()) {
    if (!p.devices) continue;
    absl::StatusOr<std::vector<runtime::DeviceInfo>> devices = p.devices();
    if (!devices.ok() || devices->empty()) continue;  // Model::Load reports (cuda) or logs (auto) why
    ASSIGN_OR_RETURN(std::vector<runtime::DeviceInfo> order,
                     PlacementOrder(*devices, requested, *hooks_.device_budget));
    absl::Status first;
    for (const runtime::DeviceInfo& d : order) {
      MemoryEstimate dev = device_estimate;
      if (p.weight_bytes) {
        dev.weights = 0;
        for (const gguf::GgufFile* f : {&file, draft}) {
          if (f == nullptr) continue;
          for (const gguf::TensorInfo& t : f->tensors()) {
            dev.weights += p.weight_bytes(d.index, static_cast<int>(t.type),
                                          t.dims.empty() ? 1 : t.dims[0], t.rows(), t.nbytes,
                                          &config_.knobs);
          }
        }
      }
      const std::string label = DeviceLabel(p.name, d);
      absl::Status st = hooks_.device_budget->Reserve(config_.name, d.index, label, dev,
                                                      d.free_bytes, d.total_bytes);
      if (st.ok()) {
        placement_ = DevicePlacement{d.index, label, {d.index}};
        return config_.backend;
      }
      if (draft != nullptr) {
        st = absl::Status(st.code(), absl::StrCat(st.message(), " (with draft '", config_.draft,
                                                  "', which the figures include)"));
      }
      // The device with the most room refused: the message names it (the
      // others have less).
      if (first.ok()) first = st;
    }
    if (order.size() > 1) {
      first = absl::Status(first.code(), absl::StrCat(first.message(), "; none of the ",
                                                      order.size(), " devices has more room"));
    }
    if (config_.backend == "cuda") return first;
    // "auto": the model still runs, on the CPU.
    Logger("daemon")->warn("model '{}': placed on the CPU: {}", config_.name, first.message());
    placement_ = DevicePlacement();
    return std::string("cpu");
  }
  // No device backend lists a device: a load that names one is refused,
  // not quietly run on the CPU.
  if (config_.device >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("device ", config_.device, " does not exist; this server has no GPUs"));
  }
  return config_.backend;
}

namespace {

// Whether a tensor is split across tensor-parallel ranks (DecoderModel::
// Shard: attention q/k/v/output and the dense FFN's matrices); the rest
// (norms, embedding, head) every rank holds whole.
bool SplitAcrossRanks(const std::string& name) {
  for (const char* part : {".attn_q.", ".attn_k.", ".attn_v.", ".attn_output.", ".ffn_gate.",
                           ".ffn_up.", ".ffn_down."}) {
    if (name.find(part) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::string> EngineLoader::AdmitSplit(const gguf::GgufFile& file,
                                                      const MemoryEstimate& device_estimate) {
  const int32_t n = config_.tensor_parallel;
  for (const runtime::DeviceBackendProvider& p : runtime::DeviceBackendProviders()) {
    if (!p.devices) continue;
    absl::StatusOr<std::vector<runtime::DeviceInfo>> devices = p.devices();
    if (!devices.ok() || devices->empty()) continue;
    // The split's devices, rank by rank.
    std::vector<runtime::DeviceInfo> chosen;
    const std::vector<int32_t>& want = sleep_level_ > 0 ? placement_.devices : config_.devices;
    if (!want.empty()) {
      for (int32_t index : want) {
        auto it = std::find_if(devices->begin(), devices->end(),
                               [&](const runtime::DeviceInfo& d) { return d.index == index; });
        if (it == devices->end()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "device ", index, " does not exist; this server has ", devices->size(),
              " device(s)"));
        }
        chosen.push_back(*it);
      }
    } else {
      ASSIGN_OR_RETURN(std::vector<runtime::DeviceInfo> order,
                       PlacementOrder(*devices, -1, *hooks_.device_budget));
      if (static_cast<int32_t>(order.size()) < n) {
        const absl::Status st = absl::FailedPreconditionError(absl::StrCat(
            "tensor parallelism over ", n, " devices, but this server has ", order.size()));
        if (config_.backend == "cuda") return st;
        Logger("daemon")->warn("model '{}': split on the CPU: {}", config_.name, st.message());
        placement_ = DevicePlacement();
        return std::string("cpu");
      }
      chosen.assign(order.begin(), order.begin() + n);
    }
    // Each rank: its share of the split tensors, every replicated one, its
    // KV heads' share of the pool, the whole step's activations.
    std::vector<DeviceBudget::Part> parts;
    std::string labels;
    for (const runtime::DeviceInfo& d : chosen) {
      MemoryEstimate dev = device_estimate;
      dev.kv = (device_estimate.kv + n - 1) / n;
      if (p.weight_bytes) {
        dev.weights = 0;
        for (const gguf::TensorInfo& t : file.tensors()) {
          const uint64_t b = p.weight_bytes(d.index, static_cast<int>(t.type),
                                            t.dims.empty() ? 1 : t.dims[0], t.rows(), t.nbytes,
                                            &config_.knobs);
          dev.weights += SplitAcrossRanks(t.name) ? (b + n - 1) / n : b;
        }
      }
      const std::string label = DeviceLabel(p.name, d);
      absl::StrAppend(&labels, labels.empty() ? "" : " + ", label);
      parts.push_back({d.index, label, dev, d.free_bytes, d.total_bytes});
    }
    absl::Status st = hooks_.device_budget->ReserveSplit(config_.name, parts);
    if (st.ok()) {
      placement_.device = chosen[0].index;
      placement_.label = absl::StrCat(labels, " (tensor parallel ", n, ")");
      placement_.devices.clear();
      for (const runtime::DeviceInfo& d : chosen) placement_.devices.push_back(d.index);
      return config_.backend;
    }
    st = absl::Status(st.code(), absl::StrCat("tensor parallel ", n, ": ", st.message()));
    if (config_.backend == "cuda") return st;
    Logger("daemon")->warn("model '{}': split on the CPU: {}", config_.name, st.message());
    placement_ = DevicePlacement();
    return std::string("cpu");
  }
  if (!config_.devices.empty()) {
    return absl::InvalidArgumentError("devices were named, but this server has no GPUs");
  }
  return config_.backend;
}

absl::Status EngineLoader::Load() {
  const std::string& where = where_;
  const bool with_draft = config_.spec == "draft";
  const std::string draft_where = absl::StrCat("draft '", config_.draft, "'");
  std::string backend = config_.backend;
  ASSIGN_OR_RETURN(kv_type_, ParseKvType(config_.kv_type));
  const std::optional<graph::DType> kv_type = kv_type_;
  // Whatever fails below leaves nothing reserved or allocated.
  struct Cleanup {
    EngineLoader* l;
    bool armed = true;
    ~Cleanup() {
      if (armed) l->Unload();
    }
  } cleanup{this};
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
    pool_blocks_ = PoolBlocks(hp, ep);
    kv_block_ = ep.kv_block;
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
    estimate_ = estimate;
    device_estimate_ = device_estimate;
    if (absl::Status st = hooks_.budget->Reserve(config_.name, estimate); !st.ok()) {
      if (!with_draft) return st;
      return absl::Status(st.code(), absl::StrCat(st.message(), "; the figures include ",
                                                  draft_where, ": ", draft_estimate.ToString()));
    }
    reserved_ = true;
    reserved_bytes_ = estimate.total();
    target_bytes_ = file.value()->file_size() - file.value()->data_offset();
    load_total_ = target_bytes_;
    if (draft_file != nullptr) load_total_ += draft_file->file_size() - draft_file->data_offset();
    if (hooks_.progress) hooks_.progress(0, load_total_);
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
  const uint64_t load_total = load_total_;
  runtime::ModelOptions mo;
  mo.backend = backend;
  mo.device = placement_.device;
  mo.tensor_parallel_size = config_.tensor_parallel;
  if (placement_.devices.size() > 1) mo.tensor_parallel_devices = placement_.devices;
  mo.knobs = config_.knobs;
  mo.progress = [this, load_total](uint64_t done, uint64_t total) {
    if (hooks_.progress) hooks_.progress(done, std::max(total, load_total));
  };
  absl::StatusOr<std::shared_ptr<runtime::Model>> model = runtime::Model::Load(config_.path, mo);
  if (!model.ok()) return Annotate(model.status(), where);
  model_ = *model;
  // "auto" whose device backend could not be made runs on the CPU.
  if (!model_->gpu()) placement_ = DevicePlacement();
  if (with_draft) {
    // The same options as the target (backend, knobs); progress goes on
    // from the target's bytes.
    runtime::ModelOptions dmo = mo;
    const uint64_t base = target_bytes_;
    dmo.progress = [this, base, load_total](uint64_t done, uint64_t total) {
      if (hooks_.progress) hooks_.progress(base + done, std::max(base + total, load_total));
    };
    absl::StatusOr<std::shared_ptr<runtime::Model>> draft =
        runtime::Model::Load(config_.draft, dmo);
    if (!draft.ok()) return Annotate(draft.status(), absl::StrCat(where, ": ", draft_where));
    draft_model_ = *draft;
  }
  RETURN_IF_ERROR(BuildEngine());
  cleanup.armed = false;
  return absl::OkStatus();
}

absl::Status EngineLoader::BuildEngine() {
  const bool with_draft = config_.spec == "draft";
  runtime::EngineOptions eo;
  eo.max_seqs = config_.parallel;
  eo.n_ctx = config_.n_ctx;
  eo.kv_block = kv_block_;
  eo.kv_blocks = pool_blocks_;
  eo.kv_type = kv_type_;
  eo.kv_events = hooks_.kv_events;
  if (config_.spec == "off") eo.spec_k = 0;
  if (config_.spec == "ngram" || with_draft) eo.spec_k = config_.spec_k;
  if (with_draft) {
    absl::StatusOr<std::shared_ptr<runtime::ModelDrafter>> drafter =
        runtime::ModelDrafter::Create(draft_model_, *model_, eo);
    if (!drafter.ok()) {
      return Annotate(drafter.status(), absl::StrCat(where_, ": draft '", config_.draft, "'"));
    }
    drafter_ = *std::move(drafter);
    eo.drafter = drafter_;
  }
  absl::StatusOr<std::unique_ptr<runtime::StepEngine>> engine;
  if (hooks_.make_engine) {
    engine = hooks_.make_engine(model_, eo);
  } else {
    absl::StatusOr<std::unique_ptr<runtime::Engine>> e = runtime::Engine::Create(model_, eo);
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
  if (!engine.ok()) return Annotate(engine.status(), where_);
  engine_ = std::move(*engine);
  // Summary() reads the model's knob overrides, which only the slot's
  // thread may touch once the engine runs.
  summary_ = model_->Summary(kv_type_);  // the slot's cache type, not the model's default
  if (drafter_ != nullptr) absl::StrAppend(&summary_, "; draft ", drafter_->model().Summary());
  return absl::OkStatus();
}

absl::Status EngineLoader::Sleep(int level) {
  if (level != 1 && level != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("sleep level must be 1 or 2, got ", level));
  }
  if (model_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(where_, " is not loaded"));
  }
  if (sleep_level_ != 0) return absl::OkStatus();
  engine_.reset();
  drafter_.reset();
  // The engine's KV pool and graph buffers went back to the backends' free
  // lists; from there to the system.
  for (const auto& m : {model_, draft_model_}) {
    if (m == nullptr) continue;
    for (graph::Backend* b : m->backends()) b->ReleaseUnused();
  }
  const bool keep = level == 1;
  RETURN_IF_ERROR(model_->ReleaseWeights(keep));
  if (draft_model_ != nullptr) RETURN_IF_ERROR(draft_model_->ReleaseWeights(keep));
  // What stays in host memory: the weights at level 1, nothing at level 2.
  MemoryEstimate kept;
  if (keep) kept.weights = estimate_.weights;
  hooks_.budget->Shrink(config_.name, kept);
  reserved_bytes_ = kept.total();
  sleep_level_ = level;
  return absl::OkStatus();
}

absl::Status EngineLoader::Wake() {
  if (sleep_level_ == 0) return absl::OkStatus();
  const uint64_t asleep_bytes = reserved_bytes_;
  if (absl::Status st = hooks_.budget->Reserve(config_.name, estimate_); !st.ok()) {
    MemoryEstimate kept;
    kept.weights = asleep_bytes;
    hooks_.budget->Shrink(config_.name, kept);
    return Annotate(st, "waking it");
  }
  reserved_bytes_ = estimate_.total();
  struct ReleaseDevice {
    DeviceBudget* budget;
    const std::string& name;
    ~ReleaseDevice() {
      if (budget != nullptr) budget->Release(name);
    }
  } release_device{model_->gpu() ? hooks_.device_budget : nullptr, config_.name};
  if (model_->gpu()) {
    ASSIGN_OR_RETURN(std::string backend,
                     AdmitOnDevice(model_->file(),
                                   draft_model_ != nullptr ? &draft_model_->file() : nullptr,
                                   device_estimate_));
    if (backend == "cpu") {
      return absl::ResourceExhaustedError(
          absl::StrCat(where_, " no longer fits its device; it stays asleep"));
    }
  }
  const uint64_t load_total = load_total_;
  auto progress = [this, load_total](uint64_t done, uint64_t total) {
    if (hooks_.progress) hooks_.progress(done, std::max(total, load_total));
  };
  RETURN_IF_ERROR(model_->RestoreWeights(progress));
  if (draft_model_ != nullptr) RETURN_IF_ERROR(draft_model_->RestoreWeights(nullptr));
  RETURN_IF_ERROR(BuildEngine());
  sleep_level_ = 0;
  return absl::OkStatus();
}

void EngineLoader::Unload() {
  engine_.reset();
  drafter_.reset();
  draft_model_.reset();
  model_.reset();
  sleep_level_ = 0;
  if (reserved_) hooks_.budget->Release(config_.name);
  reserved_ = false;
  reserved_bytes_ = 0;
}

uint64_t EngineLoader::DraftBytes() const {
  if (drafter_ == nullptr) return 0;
  const runtime::EngineSnapshot d = drafter_->engine().Snapshot();
  return drafter_->model().weight_bytes() + static_cast<uint64_t>(std::max<int64_t>(d.kv_bytes, 0)) +
         static_cast<uint64_t>(std::max<int64_t>(d.activation_bytes, 0));
}

LoaderMemory EngineLoader::Memory() const {
  LoaderMemory m;
  m.estimate = estimate_;
  m.reserved = reserved_bytes_;
  m.sleep_level = sleep_level_;
  if (model_ != nullptr && sleep_level_ == 0) m.weights = model_->weight_bytes();
  if (model_ != nullptr && sleep_level_ == 1) m.host_weights = estimate_.weights;
  m.draft = DraftBytes();
  return m;
}

}  // namespace minfer::daemon
