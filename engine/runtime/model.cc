#include "engine/runtime/model.h"

#include <algorithm>
#include <atomic>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/base/logging.h"
#include "engine/base/status.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/runtime/device_backend.h"
#include "engine/tokenizer/gguf_tokenizer.h"

namespace minfer::runtime {
namespace {

// Reads every weight page once, in parallel, reporting progress.
void Prefetch(const gguf::GgufFile& f, ThreadPool& pool, const LoadProgressFn& progress) {
  const uint64_t begin = f.data_offset(), end = f.file_size();
  const uint64_t total = end - begin;
  constexpr uint64_t kChunk = 64 << 20;
  const int64_t chunks = static_cast<int64_t>((total + kChunk - 1) / kChunk);
  std::atomic<uint64_t> done{0};
  pool.ParallelFor(chunks, [&](int64_t c, int thread) {
    uint64_t lo = begin + c * kChunk, hi = std::min(end, lo + kChunk);
    f.mapping().WillNeed(lo, hi - lo);
    volatile uint8_t sink = 0;
    for (uint64_t p = lo; p < hi; p += 4096) sink = sink + f.mapping().data()[p];
    uint64_t d = done.fetch_add(hi - lo) + (hi - lo);
    if (progress && thread == 0 && d < total) progress(d, total);
  });
  if (progress) progress(total, total);
}

}  // namespace

Model::~Model() = default;

absl::StatusOr<std::shared_ptr<Model>> Model::Load(const std::string& path,
                                                   const ModelOptions& options) {
  auto t0 = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(KnobRegistry::Global().ValidateOverrides(options.knobs));
  std::shared_ptr<Model> m(new Model);
  m->knobs_ = options.knobs;
  ASSIGN_OR_RETURN(m->file_, gguf::GgufFile::Open(path));
  ASSIGN_OR_RETURN(m->arch_, models::DecoderModel::FromGguf(*m->file_));
  if (options.tensor_parallel_size > 1) {
    // The whole split: this model is rank 0; the other ranks load with the
    // same options and share one collective.
    if (options.tensor_parallel.size != 1) {
      return absl::InvalidArgumentError("tensor_parallel_size and tensor_parallel are exclusive");
    }
    const int32_t n = options.tensor_parallel_size;
    if (options.backend != "cpu") {
      // On devices: rank r on devices[r], over the provider's collective.
      absl::StatusOr<std::shared_ptr<Model>> split = LoadDeviceSplit(path, options);
      if (split.ok() || options.backend == "cuda") return split;
      Logger("runtime")->info("{}: tensor parallelism on the CPU: {}", path,
                              split.status().message());
    } else if (!options.tensor_parallel_devices.empty()) {
      return absl::InvalidArgumentError("tensor_parallel_devices name devices, but backend is cpu");
    }
    auto collective = std::make_shared<graph::InProcessCollective>(n);
    ModelOptions rank = options;
    rank.backend = "cpu";
    rank.tensor_parallel_size = 1;
    rank.tensor_parallel_devices.clear();
    rank.tensor_parallel = {0, n, collective.get()};
    ASSIGN_OR_RETURN(std::shared_ptr<Model> root, Load(path, rank));
    for (int32_t r = 1; r < n; ++r) {
      rank.tensor_parallel = {r, n, collective.get()};
      rank.progress = nullptr;
      ASSIGN_OR_RETURN(std::shared_ptr<Model> peer, Load(path, rank));
      peer->tp_collective_ = collective;
      root->tp_peers_.push_back(std::move(peer));
    }
    root->tp_collective_ = collective;
    return root;
  }
  const TensorParallelRank& tp = options.tensor_parallel;
  if (tp.size > 1) {
    if (tp.device_collective != nullptr &&
        (tp.device_collective->size() != tp.size || options.device < 0 ||
         options.backend == "cpu")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor-parallel rank ", tp.rank, " of ", tp.size,
          ": a device collective needs a rank of its size on a named device"));
    }
    if (tp.collective == nullptr || tp.collective->size() != tp.size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor-parallel rank ", tp.rank, " of ", tp.size, " needs a collective of that size"));
    }
    absl::StatusOr<std::unique_ptr<models::DecoderModel>> shard = m->arch_->Shard(tp.rank, tp.size);
    if (!shard.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("model '", path, "': ", shard.status().message()));
    }
    m->arch_ = std::move(*shard);
  }
  // Once the file is open, whatever is wrong with its tokenizer (a missing
  // key, the reader's NOT_FOUND; a tokenizer kind minfer does not implement,
  // UNIMPLEMENTED; a chat template that does not parse) is a model that can
  // not be loaded: INVALID_ARGUMENT, as this function's contract and the
  // admin API's LoadModel say.
  auto model_file_error = [](const absl::Status& s) {
    return absl::InvalidArgumentError(s.message());
  };
  absl::StatusOr<tokenizer::TokenizerData> td = tokenizer::TokenizerDataFromGguf(*m->file_);
  if (!td.ok()) return model_file_error(td.status());
  absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> tok =
      tokenizer::Tokenizer::Create(std::move(*td));
  if (!tok.ok()) return model_file_error(tok.status());
  m->tokenizer_ = std::move(*tok);
  if (m->tokenizer_->vocab_size() > m->hparams().n_vocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", path, "': tokenizer has ", m->tokenizer_->vocab_size(),
        " tokens but the embedding only ", m->hparams().n_vocab, " rows"));
  }
  m->name_ = m->file_->GetString("general.name").value_or(path);

  const std::string& want = options.backend;
  if (want != "auto" && want != "cpu" && want != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("backend '", want, "' is not one of cpu|cuda|auto"));
  }
  ThreadPool* pool = options.pool ? options.pool : &DefaultThreadPool();
  m->pool_ = pool;
  m->want_ = want;
  m->device_ = options.device;
  m->tp_device_collective_ = tp.device_collective;
  m->tp_rank_ = tp.rank;
  if (tp.device_collective != nullptr) m->want_ = "cuda";  // a rank never falls back alone
  RETURN_IF_ERROR(m->CreateDeviceBackend(options.progress));
  cpu::CpuBackendOptions cpu_options;
  cpu_options.fp8_prefill_min_tokens =
      KnobRegistry::Global().GetInt("MINFER_FP8_PREFILL", &m->knobs_);
  auto cpu = std::make_unique<cpu::CpuBackend>(pool, cpu_options);
  if (tp.size > 1) cpu->SetCollective(tp.collective, tp.rank);
  m->backends_.push_back(std::move(cpu));
  // Device backends uploaded the weights (reporting progress); the CPU path
  // touches the mapping instead.
  if (options.prefetch && !m->gpu_) Prefetch(*m->file_, *pool, options.progress);
  m->load_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Logger("runtime")->debug("loaded {}: {}", path, m->Summary());
  return m;
}

absl::Status Model::CreateDeviceBackend(const LoadProgressFn& progress) {
  if (want_ != "cpu") {
    std::vector<DeviceBackendProvider> providers = DeviceBackendProviders();
    if (providers.empty() && want_ == "cuda") {
      return absl::UnavailableError(
          "backend 'cuda' requested, but this build has no CUDA backend (build with --config=cuda)");
    }
    for (const DeviceBackendProvider& p : providers) {
      DeviceBackendRequest req;
      req.model = arch_.get();
      req.knobs = &knobs_;
      req.knob_generation = &knob_gen_;
      req.model_name = name_;
      req.progress = progress;
      req.device = device_;
      req.collective = tp_device_collective_;
      req.tp_rank = tp_rank_;
      auto backend = p.create(req);
      if (backend.ok()) {
        // Device backends come first (the graph planner's order).
        backends_.insert(backends_.begin(), std::move(*backend));
        gpu_ = true;
        break;
      }
      if (want_ == "cuda") {
        return absl::UnavailableError(absl::StrCat("model '", file_->path(), "' cannot run on ", p.name,
                                                   ": ", backend.status().message()));
      }
      Logger("runtime")->info("{}: staying on the CPU: {}", file_->path(), backend.status().message());
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Model>> Model::LoadDeviceSplit(const std::string& path,
                                                               const ModelOptions& options) {
  const int32_t n = options.tensor_parallel_size;
  std::vector<DeviceBackendProvider> providers = DeviceBackendProviders();
  if (providers.empty()) {
    return absl::UnavailableError(
        "this build has no device backend (build with --config=cuda) to split a model across");
  }
  const DeviceBackendProvider& p = providers.front();
  if (!p.make_collective) {
    return absl::UnimplementedError(absl::StrCat(p.name, " cannot split a model across devices"));
  }
  std::vector<int32_t> devices = options.tensor_parallel_devices;
  if (devices.empty()) {
    ASSIGN_OR_RETURN(std::vector<DeviceInfo> all, p.devices());
    if (static_cast<int32_t>(all.size()) < n) {
      return absl::FailedPreconditionError(absl::StrCat(
          "tensor parallelism over ", n, " devices, but ", p.name, " has ", all.size()));
    }
    for (int32_t r = 0; r < n; ++r) devices.push_back(all[r].index);
  } else if (static_cast<int32_t>(devices.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat("tensor parallelism over ", n, " ranks names ",
                                                   devices.size(), " devices"));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<DeviceCollective> dc, p.make_collective(devices));
  // The CPU fallback of ops without a device kernel still needs a host
  // collective of the same ranks.
  auto collective = std::make_shared<graph::InProcessCollective>(n);
  ModelOptions rank = options;
  rank.backend = p.name;
  rank.tensor_parallel_size = 1;
  rank.tensor_parallel_devices.clear();
  std::shared_ptr<Model> root;
  for (int32_t r = 0; r < n; ++r) {
    rank.device = devices[r];
    rank.tensor_parallel = {r, n, collective.get(), dc};
    if (r > 0) rank.progress = nullptr;
    absl::StatusOr<std::shared_ptr<Model>> m = Load(path, rank);
    if (!m.ok()) {
      return absl::Status(m.status().code(), absl::StrCat("tensor-parallel rank ", r, " on device ",
                                                          devices[r], ": ", m.status().message()));
    }
    (*m)->tp_collective_ = collective;
    if (r == 0) {
      root = std::move(*m);
    } else {
      root->tp_peers_.push_back(std::move(*m));
    }
  }
  return root;
}

absl::Status Model::ReleaseWeights(bool keep_in_host_memory) {
  if (released_) return absl::OkStatus();
  // A split sleeps and wakes whole.
  for (const auto& peer : tp_peers_) RETURN_IF_ERROR(peer->ReleaseWeights(keep_in_host_memory));
  const uint64_t begin = file_->data_offset(), end = file_->file_size();
  if (keep_in_host_memory) {
    // A device model: every page resident, so that restoring copies from
    // memory. A CPU model's pages are its weights, left as they are.
    if (gpu_) Prefetch(*file_, *pool_, nullptr);
  } else {
    file_->mapping().DontNeed(begin, end - begin);
  }
  if (gpu_) backends_.erase(backends_.begin());  // the device copy and its buffers
  released_ = true;
  return absl::OkStatus();
}

absl::Status Model::RestoreWeights(const LoadProgressFn& progress) {
  if (!released_) return absl::OkStatus();
  for (const auto& peer : tp_peers_) RETURN_IF_ERROR(peer->RestoreWeights(nullptr));
  if (gpu_) {
    gpu_ = false;
    const std::string want = want_;
    want_ = "cuda";  // back where it was, or an error: never silently on the CPU
    absl::Status s = CreateDeviceBackend(progress);
    want_ = want;
    RETURN_IF_ERROR(s);
    if (!gpu_) {
      return absl::UnavailableError(
          absl::StrCat("model '", file_->path(), "' could not return to its device"));
    }
  } else {
    Prefetch(*file_, *pool_, progress);
  }
  released_ = false;
  return absl::OkStatus();
}

std::vector<graph::Backend*> Model::backends() const {
  std::vector<graph::Backend*> out;
  for (const auto& b : backends_) out.push_back(b.get());
  return out;
}

absl::Status Model::SetKnobOverride(const std::string& name, std::optional<std::string> value) {
  if (value.has_value()) {
    RETURN_IF_ERROR(KnobRegistry::Global().ValidateOverrides({{name, *value}}));
    ASSIGN_OR_RETURN(KnobInfo info, KnobRegistry::Global().Get(name));
    ASSIGN_OR_RETURN(std::string normalized, KnobRegistry::Normalize(info.spec, *value));
    auto it = knobs_.find(name);
    if (it != knobs_.end() && it->second == normalized) return absl::OkStatus();
    knobs_[name] = normalized;
  } else if (knobs_.erase(name) == 0) {
    return absl::OkStatus();
  }
  ++knob_gen_;
  return absl::OkStatus();
}

graph::DType Model::DefaultKvType() const {
  std::string knob = KnobRegistry::Global().GetString("MINFER_CACHE_TYPE", &knobs_);
  if (knob == "f32") return graph::DType::kF32;
  if (knob == "f16") return graph::DType::kF16;
  if (knob == "q8_0") return graph::DType::kQ8_0;
  if (knob == "fp8") return graph::DType::kFp8;
  if (gpu_ && hparams().n_layer * hparams().n_embd_kv() >= 8192) return graph::DType::kF16;
  return graph::DType::kF32;
}

std::string Model::Summary(std::optional<graph::DType> kv) const {
  const auto& hp = hparams();
  std::string types;
  std::map<std::string, int> by_type;
  for (const auto& w : arch_->weights()) {
    if (w->dims.size() >= 2) by_type[GgmlTypeName(w->type)]++;
  }
  std::string experts;
  if (hp.moe()) {
    int64_t params = 0;
    for (const auto& w : arch_->weights()) {
      int64_t n = 1;
      for (int64_t d : w->dims) n *= d;
      params += n;
    }
    experts = absl::StrFormat(
        ", %d of %d experts per token in each layer (%.2fM of %.2fM parameters active per token)",
        hp.n_expert_used, hp.n_expert, arch_->active_params_per_token() / 1e6, params / 1e6);
  }
  for (const auto& [t, n] : by_type) absl::StrAppend(&types, types.empty() ? "" : " ", t, "x", n);
  return absl::StrFormat(
      "%s %d layers, n_embd %d, %d/%d heads%s, vocab %d%s%s; weights %.1f MiB (%s); "
      "placement: %s; KV %s",
      hp.arch, hp.n_layer, hp.n_embd, hp.n_head, hp.n_head_kv,
      hp.n_embd_q() != hp.n_embd ? absl::StrCat(" x ", hp.head_dim) : std::string(), hp.n_vocab,
      hp.tied_embeddings ? " (tied)" : "", experts, weight_bytes() / 1048576.0, types,
      backends_.front()->name(), graph::DTypeName(kv.value_or(DefaultKvType())));
}

std::shared_ptr<const grammar::Vocabulary> MakeGrammarVocabulary(const tokenizer::Tokenizer& tok,
                                                                int32_t n_rows) {
  std::vector<std::string> tokens(tok.vocab_size());
  tokenizer::DecodeOptions skip;
  skip.skip_special = true;
  skip.keep_framing = false;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    // Control tokens decode to "" with skip_special: a grammar never allows
    // them (only the stop ids, when the grammar is complete).
    absl::StatusOr<absl::string_view> bytes = tok.TokenBytes(id, skip);
    if (bytes.ok()) tokens[id] = std::string(*bytes);
  }
  return grammar::Vocabulary::Create(std::move(tokens), tok.stop_ids(),
                                     std::max(n_rows, tok.vocab_size()));
}

grammar::GrammarCompiler& Model::grammars() const {
  std::call_once(grammars_once_, [this] {
    grammars_ = std::make_unique<grammar::GrammarCompiler>(
        MakeGrammarVocabulary(*tokenizer_, static_cast<int32_t>(hparams().n_vocab)));
  });
  return *grammars_;
}

}  // namespace minfer::runtime
