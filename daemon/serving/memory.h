// Memory admission: what a model will need before it is loaded, and the
// budget that loads reserve against, so a load that cannot fit is refused
// up front (RESOURCE_EXHAUSTED with the figures) instead of failing halfway
// or pushing the host into swap.
//
// The estimate, per slot (every figure in bytes), for the batched engine
// (engine/runtime/engine.h): one KV pool and one set of graphs per model.
//   weights = sum of the GGUF file's tensor bytes (the mmap'ed or uploaded
//             weights)
//   kv      = the KV pool: PoolBlocks() blocks (the reserved one included)
//             x 2 (K and V) x n_layer x block x row(n_embd_kv), row() in the
//             KV element type; "auto" counts as f32 (the largest), so the
//             figure is an upper bound; n_ctx is clamped to the model's
//             context length like the engine does
//   scratch = models::BatchScratchBound(token_budget), the architecture's
//             activation estimate: every graph's activations share one
//             arena, which the largest graph (token_budget tokens, an output
//             row per sequence) sizes
// For CPU models the budget is the --memory-limit, or else the host's
// available memory (MemAvailable) at the time of the load. Models offered to
// a GPU are also admitted against its free memory (DeviceBudget), with the
// weights in their device layout.
#ifndef MINFER_DAEMON_SERVING_MEMORY_H_
#define MINFER_DAEMON_SERVING_MEMORY_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/gguf/gguf.h"
#include "engine/graph/tensor.h"
#include "engine/models/decoder.h"

namespace minfer::daemon {

struct MemoryEstimate {
  uint64_t weights = 0;
  uint64_t kv = 0;
  uint64_t scratch = 0;
  uint64_t total() const { return weights + kv + scratch; }
  // "weights 1.5 MiB (1572864 B) + KV ... = total ..."
  std::string ToString() const;
};

struct EstimateParams {
  int64_t n_ctx = 4096;
  int32_t parallel = 1;  // sequences running at once
  // Unset: the model's default (counted as f32).
  std::optional<graph::DType> kv_type;
  // KV pool size in tokens (rounded up to blocks); 0: parallel x n_ctx.
  int64_t kv_tokens = 0;
  int32_t kv_block = 16;
  int64_t token_budget = 512;  // tokens per batched step
  // Output rows for speculative drafts beyond one per sequence
  // (runtime::EngineOptions::spec_rows).
  int32_t spec_rows = 0;
};

// Blocks of the KV pool the engine allocates for `params` (the reserved
// block included): EngineOptions::kv_blocks.
int64_t PoolBlocks(const models::DecoderHparams& hp, const EstimateParams& params);

// Estimates from the file's tensor table and hyperparameters (no weights are
// read).
MemoryEstimate EstimateMemory(const gguf::GgufFile& file, const models::DecoderHparams& hp,
                              const EstimateParams& params);

struct HostMemory {
  uint64_t total = 0;
  uint64_t available = 0;
};
// /proc/meminfo's MemTotal and MemAvailable.
absl::StatusOr<HostMemory> ReadHostMemory();

// Reservations of the loaded slots against the admission limit.
// Thread-safe.
class MemoryBudget {
 public:
  // `limit` 0: admit each load against the host's available memory at that
  // moment (memory already taken by loaded slots is no longer available).
  explicit MemoryBudget(uint64_t limit = 0);

  // Reserves `estimate` for `name`, or RESOURCE_EXHAUSTED with the estimate
  // by kind, what is free and the limit (in bytes).
  absl::Status Reserve(const std::string& name, const MemoryEstimate& estimate);
  // Sets `name`'s reservation to `estimate` without checking the limit:
  // for a reservation that shrinks (a model going to sleep).
  void Shrink(const std::string& name, const MemoryEstimate& estimate);
  void Release(const std::string& name);
  uint64_t reserved() const;
  // `name`'s reservation (0 without one).
  uint64_t reserved(const std::string& name) const;
  uint64_t limit() const { return limit_; }

 private:
  const uint64_t limit_;
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> reserved_;  // guarded by mu_
};

// Admission against GPUs' memory, per device (by index). The free memory a
// device reports already excludes what loaded models hold, but not what
// loads still in progress are about to upload: those are reserved here from
// admission until the load ends (Release), so two concurrent loads cannot
// both count the same free bytes of one device. Loads on different devices
// do not see each other's reservations. kHeadroom stays free on each device
// for the CUDA context, captured graphs and allocator slack. Thread-safe.
class DeviceBudget {
 public:
  static constexpr uint64_t kHeadroom = uint64_t{512} << 20;

  // Reserves `estimate` (device bytes by kind) for `name` on device
  // `device` (called `label` in messages) with `free_bytes` free of
  // `total_bytes`, or RESOURCE_EXHAUSTED naming the model, the device and
  // every figure. A model reserves on one device at a time: a new
  // reservation replaces its others.
  absl::Status Reserve(const std::string& name, int32_t device, const std::string& label,
                       const MemoryEstimate& estimate, uint64_t free_bytes,
                       uint64_t total_bytes);
  // One rank of a split (tensor parallelism): what Reserve takes, per device.
  struct Part {
    int32_t device = 0;
    std::string label;
    MemoryEstimate estimate;
    uint64_t free_bytes = 0;
    uint64_t total_bytes = 0;
  };
  // Reserves every part (distinct devices) or none: RESOURCE_EXHAUSTED
  // naming each device that lacks room and its figures. Replaces the
  // model's other reservations, as Reserve does.
  absl::Status ReserveSplit(const std::string& name, const std::vector<Part>& parts);
  void Release(const std::string& name);
  // Bytes reserved by loads in progress, on all devices or on `device`.
  uint64_t pending() const;
  uint64_t pending(int32_t device) const;
  // What a device can still give a load: `free_bytes` less loads in
  // progress there and the headroom (0 when those exceed it).
  uint64_t Usable(int32_t device, uint64_t free_bytes) const;

 private:
  struct Pending {
    int32_t device = 0;
    uint64_t bytes = 0;
  };
  mutable std::mutex mu_;
  // What `name` would leave usable on `device` (others' loads in progress
  // and the headroom off `free_bytes`), and the others' bytes. mu_ held.
  uint64_t UsableLocked(const std::string& name, int32_t device, uint64_t free_bytes,
                        uint64_t* others) const;
  std::string Refusal(const std::string& name, const Part& part, uint64_t others,
                      uint64_t usable) const;
  std::map<std::string, std::vector<Pending>> pending_;  // guarded by mu_
};

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_SERVING_MEMORY_H_
