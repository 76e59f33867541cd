// ModelLoader: what it takes to hold a model in memory — TF Serving's
// Loader contract (estimate, load, unload) plus sleep and wake — so that
// the slot (slot.h) only sequences requests and the lifecycle
// (lifecycle.h) only checks states, and tests drive both with a fake.
//
// EngineLoader, the real one:
//   Load   admission from the file's header alone (memory.h: the host
//          budget, then the device's), Model::Load (and a draft model's),
//          the batched Engine with its KV pool and its largest graph
//          prepared. On error nothing stays reserved or allocated.
//   Sleep  (no sequence may be running) frees the engine: the KV pool, the
//          graphs' activations and arenas, a draft model's engine.
//          Model::ReleaseWeights then frees a GPU model's device copy. Level
//          1 keeps the weights in host memory: the file's pages stay mapped
//          and resident (on the CPU they are the weights), so waking is a
//          copy from memory, not a read from disk (pageable, not pinned:
//          the upload is a plain host-to-device copy). Level 2 drops the
//          pages too, and the wake re-reads the file. The Model object stays
//          (tokenizer, chat template, knob overrides: requests are built
//          while the model sleeps, and its aliases resolve). The host
//          reservation shrinks to what stays: level 1 the weights, level 2
//          nothing.
//   Wake   re-admits the full estimate (RESOURCE_EXHAUSTED if the memory
//          went to another model meanwhile: the model stays asleep),
//          restores the weights (the device's admission again for a GPU
//          model) and rebuilds the engine.
//   Unload frees everything and releases the reservations.
//
// Not thread-safe: the slot's thread drives it (a wake may run on a thread
// of the slot's while the slot's thread waits for it; never two calls at
// once).
#ifndef MINFER_DAEMON_SERVING_MODEL_LOADER_H_
#define MINFER_DAEMON_SERVING_MODEL_LOADER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/serving/memory.h"
#include "daemon/serving/slot_config.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/model.h"
#include "engine/runtime/model_drafter.h"

namespace minfer::daemon {

// What a loader holds now, for status and metrics (bytes).
struct LoaderMemory {
  MemoryEstimate estimate;  // what admission reserved at the load (host)
  uint64_t reserved = 0;    // what is reserved now (less while asleep)
  uint64_t weights = 0;     // the target's weights while loaded
  uint64_t host_weights = 0;  // weights kept in host memory while asleep
  uint64_t draft = 0;       // a draft model's weights, KV and activations
  int sleep_level = 0;      // 0 awake, 1 or 2 asleep
};

// Where a loaded model runs: a device backend's device, or the CPU.
struct DevicePlacement {
  int32_t device = -1;  // the provider's device index; -1 on the CPU
  std::string label;    // "cuda:1 (NVIDIA H200)"; empty on the CPU
  // A split model's devices, rank by rank (devices[0] == device); one
  // device otherwise, empty on the CPU.
  std::vector<int32_t> devices;
};

class ModelLoader {
 public:
  virtual ~ModelLoader() = default;
  virtual absl::Status Load() = 0;
  // Level 1 or 2 (INVALID_ARGUMENT otherwise). The engine must have no
  // sequences.
  virtual absl::Status Sleep(int level) = 0;
  virtual absl::Status Wake() = 0;
  virtual void Unload() = 0;
  // While loaded and awake, else null.
  virtual runtime::StepEngine* engine() = 0;
  // From the load on (asleep too: its weights are released, not the
  // object), else null.
  virtual std::shared_ptr<runtime::Model> model() = 0;
  virtual LoaderMemory Memory() const = 0;
  // The model's one-line summary (and its draft's) as of the last load or
  // wake.
  virtual std::string Summary() const = 0;
  // The device the last load placed the model on.
  virtual DevicePlacement Placement() const { return {}; }
};

class EngineLoader : public ModelLoader {
 public:
  struct Hooks {
    MemoryBudget* budget = nullptr;        // required; must outlive the loader
    DeviceBudget* device_budget = nullptr;  // optional
    // Load progress: (bytes done, bytes total) over the target's weights,
    // then the draft's.
    std::function<void(uint64_t, uint64_t)> progress;
    // Tests: after admission, before the model is read.
    std::function<void(const std::string& name)> before_load;
    // Tests: makes the engine (default: runtime::Engine, largest graph
    // prepared).
    std::function<absl::StatusOr<std::unique_ptr<runtime::StepEngine>>(
        std::shared_ptr<runtime::Model>, const runtime::EngineOptions&)>
        make_engine;
    // KV-cache events (EngineOptions::kv_events).
    bool kv_events = false;
  };

  EngineLoader(SlotConfig config, Hooks hooks);
  ~EngineLoader() override { Unload(); }

  absl::Status Load() override;
  absl::Status Sleep(int level) override;
  absl::Status Wake() override;
  void Unload() override;
  runtime::StepEngine* engine() override { return engine_.get(); }
  std::shared_ptr<runtime::Model> model() override { return model_; }
  LoaderMemory Memory() const override;
  std::string Summary() const override { return summary_; }
  DevicePlacement Placement() const override { return placement_; }

 private:
  // The backend to load with, after admission on a device: the one the
  // config names (SlotConfig::device), else MINFER_GPU's when it is set,
  // else the device with the most usable memory that fits (placement.h).
  // Sets placement_ (the CPU when "auto" fits no device). Wake re-admits
  // on the device the model was placed on.
  absl::StatusOr<std::string> AdmitOnDevice(const gguf::GgufFile& file,
                                            const gguf::GgufFile* draft,
                                            const MemoryEstimate& device_estimate);
  // AdmitOnDevice for a split (SlotConfig::tensor_parallel > 1): a rank's
  // share on each of the split's devices (the named ones, a wake's, else
  // those with the most room), all reserved or none.
  absl::StatusOr<std::string> AdmitSplit(const gguf::GgufFile& file,
                                         const MemoryEstimate& device_estimate);
  // The drafter (spec "draft") and the engine over the loaded model(s).
  absl::Status BuildEngine();
  uint64_t DraftBytes() const;

  const SlotConfig config_;
  const Hooks hooks_;
  std::string where_;
  std::optional<graph::DType> kv_type_;
  int64_t pool_blocks_ = 0;
  int32_t kv_block_ = 16;
  uint64_t target_bytes_ = 0;  // the target's weight bytes in its file
  uint64_t load_total_ = 0;    // ... and the draft's
  MemoryEstimate estimate_;
  MemoryEstimate device_estimate_;
  bool reserved_ = false;
  uint64_t reserved_bytes_ = 0;
  int sleep_level_ = 0;

  std::shared_ptr<runtime::Model> model_;
  std::shared_ptr<runtime::Model> draft_model_;
  std::shared_ptr<runtime::ModelDrafter> drafter_;
  std::unique_ptr<runtime::StepEngine> engine_;
  std::string summary_;
  DevicePlacement placement_;
};

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_SERVING_MODEL_LOADER_H_
