// A loaded model: the GGUF file (weights mmap'ed, zero-copy), the resolved
// architecture, the tokenizer, and the backends that run it, in priority
// order (device backends first, the CPU backend last). Shared read-only by
// every session of the model; the backends are driven by one thread at a
// time (the owner's worker).
#ifndef MINFER_ENGINE_RUNTIME_MODEL_H_
#define MINFER_ENGINE_RUNTIME_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/base/knobs.h"
#include "engine/base/thread_pool.h"
#include "engine/gguf/gguf.h"
#include "engine/grammar/matcher.h"
#include "engine/graph/backend.h"
#include "engine/graph/collective.h"
#include "engine/models/decoder.h"
#include "engine/runtime/device_backend.h"
#include "engine/tokenizer/tokenizer.h"

namespace minfer::runtime {

// The grammar vocabulary of `tok` over `n_rows` output rows: each token's
// decoded bytes, "" for control and unused tokens; the stop ids.
std::shared_ptr<const grammar::Vocabulary> MakeGrammarVocabulary(const tokenizer::Tokenizer& tok,
                                                                int32_t n_rows);

// Called while loading with (bytes done, bytes total).
using LoadProgressFn = std::function<void(uint64_t, uint64_t)>;

// One rank of a tensor-parallel model (models::DecoderModel::Shard): the
// model loads that rank's share of the weights, and its graphs' AllReduce
// nodes sum through `collective` (graph/collective.h; must outlive the
// model). The ranks run in lock-step, each on its own thread.
struct TensorParallelRank {
  int32_t rank = 0;
  int32_t size = 1;  // 1: no split
  graph::Collective* collective = nullptr;
  // A split across devices: the device collective (rank `rank` on
  // ModelOptions::device), which the rank's device backend runs the
  // AllReduce nodes on. The rank must then load on that device.
  std::shared_ptr<DeviceCollective> device_collective;
};

struct ModelOptions {
  std::string backend = "auto";  // "cpu", "cuda" or "auto"
  KnobOverrides knobs;           // per-model knob overrides
  LoadProgressFn progress;
  // Touch every weight page at load so the first request does not pay the
  // page faults (and load progress is meaningful).
  bool prefetch = true;
  ThreadPool* pool = nullptr;  // null: DefaultThreadPool()
  // The device a device backend runs on (DeviceInfo::index); -1: the
  // provider's default device (the first it lists).
  int32_t device = -1;
  // The whole model split over this many ranks (1: not split): the Model
  // returned is rank 0 and owns the other ranks (tp_peers()) and their
  // collective; BatchRunner runs every rank's step in lock-step.
  // Where: backend "cpu", the CPU (ranks are threads summing host buffers);
  // otherwise rank r on device tensor_parallel_devices[r] (default: the
  // provider's first tensor_parallel_size devices) over the provider's
  // collective (CUDA: NCCL). "auto" falls back to the CPU when the devices
  // or the collective are missing; "cuda" refuses, saying why.
  int32_t tensor_parallel_size = 1;
  std::vector<int32_t> tensor_parallel_devices;
  // One rank alone (what tensor_parallel_size loads for each rank; tests
  // drive ranks themselves with it). Not with tensor_parallel_size > 1.
  TensorParallelRank tensor_parallel;
};

class Model {
 public:
  // Opens, validates and prepares `path`. Errors name the file and the
  // problem: NOT_FOUND (missing file), INVALID_ARGUMENT (corrupt or
  // unsupported model), UNAVAILABLE (backend "cuda" asked but not usable).
  static absl::StatusOr<std::shared_ptr<Model>> Load(const std::string& path,
                                                     const ModelOptions& options = {});
  ~Model();

  const std::string& path() const { return file_->path(); }
  const gguf::GgufFile& file() const { return *file_; }
  const models::DecoderModel& arch() const { return *arch_; }
  const models::DecoderHparams& hparams() const { return arch_->hparams(); }
  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }
  const std::string& name() const { return name_; }

  // Backends in priority order (the graph planner's order).
  std::vector<graph::Backend*> backends() const;
  // The backend holding KV caches (the one running attention).
  graph::Backend* kv_backend() const { return backends_.front().get(); }
  bool gpu() const { return gpu_; }
  // The device index asked for at load (ModelOptions::device; -1: the
  // provider's default).
  int32_t device() const { return device_; }
  // Ranks 1.. of a model loaded with tensor_parallel_size > 1 (this Model
  // is rank 0); empty otherwise.
  const std::vector<std::shared_ptr<Model>>& tp_peers() const { return tp_peers_; }
  // The ranks' collective of such a model (null otherwise).
  graph::InProcessCollective* tp_collective() const { return tp_collective_.get(); }
  // A split across devices: the ranks' device collective (null otherwise).
  DeviceCollective* tp_device_collective() const { return tp_device_collective_.get(); }
  // KV element type for new sessions: MINFER_CACHE_TYPE, or by default f32
  // on the CPU and f16 on a GPU when n_layers x n_kv_embd >= 8192.
  graph::DType DefaultKvType() const;
  const KnobOverrides& knobs() const { return knobs_; }
  // Sets (`value`) or removes (nullopt) one per-model override at run time,
  // validated like ModelOptions::knobs (INVALID_ARGUMENT names the knob).
  // Not thread-safe: sessions and backends read the overrides during their
  // steps without locking, so call it only from the thread that drives this
  // model's sessions, between steps (the daemon's slot worker does). Sessions
  // see knob_generation() move at their next Eval and rebuild their graphs.
  absl::Status SetKnobOverride(const std::string& name, std::optional<std::string> value);
  // Increments on every change made by SetKnobOverride.
  uint64_t knob_generation() const { return knob_gen_; }

  // The model's grammar compiler (structured outputs): its vocabulary is the
  // tokenizer's token bytes (control tokens excluded) over the model's
  // n_vocab output rows, its stop ids the tokenizer's. Created on first use;
  // thread-safe (the daemon compiles on request threads, off the worker).
  grammar::GrammarCompiler& grammars() const;

  // Every rank's, for a split model.
  uint64_t weight_bytes() const {
    uint64_t bytes = arch_->weight_bytes();
    for (const auto& p : tp_peers_) bytes += p->weight_bytes();
    return bytes;
  }

  // Sleep and wake (the daemon's sleep levels, daemon/serving/model_loader.h):
  // ReleaseWeights frees a device model's device backend (its weights and
  // buffers; kv_backend() is the CPU backend until restored) and either
  // keeps the weights in host memory (keep_in_host_memory: a device model's
  // file pages are all read in, so the upload back copies from memory; a
  // CPU model's are its weights and stay as they are) or drops them
  // (MappedFile::DontNeed: the next read goes to the file). RestoreWeights uploads the weights to the device again (UNAVAILABLE
  // if it cannot: never silently on the CPU) or reads the pages back. The
  // tokenizer, template and knobs stay usable throughout. Not thread-safe
  // like SetKnobOverride, and only with no session or engine alive.
  absl::Status ReleaseWeights(bool keep_in_host_memory);
  absl::Status RestoreWeights(const LoadProgressFn& progress);
  bool weights_released() const { return released_; }
  double load_seconds() const { return load_seconds_; }
  // One line: placement, memory, KV type — `kv` when a load chose one
  // (minferctl load --kv-type), else DefaultKvType().
  std::string Summary(std::optional<graph::DType> kv = std::nullopt) const;

 private:
  Model() = default;
  // Appends the device backend ModelOptions::backend asks for, if any
  // (want_ "auto": logs and stays on the CPU when none can be made).
  absl::Status CreateDeviceBackend(const LoadProgressFn& progress);
  // ModelOptions::tensor_parallel_size on devices: every rank on its
  // device, over the first provider's collective; an error if any rank
  // cannot be (the caller decides whether the CPU takes the split).
  static absl::StatusOr<std::shared_ptr<Model>> LoadDeviceSplit(const std::string& path,
                                                                const ModelOptions& options);

  std::unique_ptr<gguf::GgufFile> file_;
  std::unique_ptr<models::DecoderModel> arch_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::vector<std::unique_ptr<graph::Backend>> backends_;
  std::string name_;
  bool gpu_ = false;
  bool released_ = false;
  std::string want_;  // ModelOptions::backend
  int32_t device_ = -1;  // ModelOptions::device
  std::vector<std::shared_ptr<Model>> tp_peers_;
  std::shared_ptr<graph::InProcessCollective> tp_collective_;  // shared by the ranks
  std::shared_ptr<DeviceCollective> tp_device_collective_;  // a split across devices
  int32_t tp_rank_ = 0;
  ThreadPool* pool_ = nullptr;
  KnobOverrides knobs_;
  uint64_t knob_gen_ = 0;
  double load_seconds_ = 0;
  mutable std::once_flag grammars_once_;
  mutable std::unique_ptr<grammar::GrammarCompiler> grammars_;
};

}  // namespace minfer::runtime

#endif  // MINFER_ENGINE_RUNTIME_MODEL_H_
