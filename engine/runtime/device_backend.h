// The registry through which device backends (CUDA) join the engine without
// the engine including their headers: a device library registers a provider
// at static-initialization time when it is linked in (binaries link it under
// --config=cuda), and Model::Load asks the providers, in registration order,
// for a backend for the model being loaded.
#ifndef MINFER_ENGINE_RUNTIME_DEVICE_BACKEND_H_
#define MINFER_ENGINE_RUNTIME_DEVICE_BACKEND_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/base/knobs.h"
#include "engine/graph/backend.h"
#include "engine/models/decoder.h"

namespace minfer::runtime {

using DeviceProgressFn = std::function<void(uint64_t, uint64_t)>;

// The collective of a model split over several of one provider's devices
// (tensor parallelism: CUDA's is an NCCL communicator per device), made by
// DeviceBackendProvider::make_collective and shared by the split's ranks'
// backends, which keep it alive. Opaque to the engine.
class DeviceCollective {
 public:
  virtual ~DeviceCollective() = default;
  virtual int size() const = 0;
  // After a rank's step failed: wakes the other ranks out of the
  // collectives they wait in (a GPU rank would otherwise wait inside its
  // all-reduce kernel for ever). The collective, and the split with it,
  // fails from then on: the model must be loaded again. Thread-safe.
  virtual void Abort() = 0;
  virtual bool aborted() const = 0;
};

struct DeviceBackendRequest {
  const models::DecoderModel* model = nullptr;  // outlives the backend
  const KnobOverrides* knobs = nullptr;
  // Moves whenever `knobs` changes (Model::knob_generation); the backend
  // re-reads its switches between steps when it or the global registry's
  // generation moved. Both pointers outlive the backend.
  const uint64_t* knob_generation = nullptr;
  std::string model_name;
  DeviceProgressFn progress;  // upload progress (bytes done, bytes total)
  // Which of the provider's devices (DeviceInfo::index) the backend runs
  // on; -1: the provider's default device (the first `devices` lists).
  int32_t device = -1;
  // Tensor parallelism on devices: this backend is rank `tp_rank` of
  // `collective` (whose rank tp_rank is on `device`), and runs the graph's
  // AllReduce nodes on it. Null: the model is not split across devices.
  std::shared_ptr<DeviceCollective> collective;
  int32_t tp_rank = 0;
};

// What a device offers, for placement, admission and status reports.
struct DeviceInfo {
  int32_t index = 0;             // the provider's device index (CUDA's ordinal)
  std::string name;              // "NVIDIA H200"
  int32_t multiprocessors = 0;
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;       // now (other processes' use included)
  // Empty while the device is healthy; else the error that left it
  // unusable (a poisoned CUDA context): every model on it fails.
  std::string fault;
};

struct DeviceBackendProvider {
  std::string name;  // "cuda"
  // The devices this provider can use, by index (at least one), or why
  // there are none (no device, MINFER_DISABLE_CUDA=1, ...). May initialize
  // them. The first is the default device (what a load without a device
  // index used before placement existed: MINFER_GPU, else the newest GPU).
  std::function<absl::StatusOr<std::vector<DeviceInfo>>()> devices;
  // Device bytes a weight of `ggml_type` with `rows` rows of `ne0` elements
  // (`file_bytes` in the GGUF) occupies once uploaded to device `device`
  // (layouts may pad blocks and rows, e.g. Q6_K's 224-byte blocks), with
  // what the model's knobs (its overrides, or null) add at load (MMQ's
  // scale planes, on GPUs that run MMQ).
  std::function<uint64_t(int32_t device, int ggml_type, int64_t ne0, int64_t rows,
                         uint64_t file_bytes, const KnobOverrides* knobs)>
      weight_bytes;
  // A backend with every weight of the model resident, or an error saying
  // why the model cannot run on this device (no device, a weight type
  // without a kernel — naming the first such tensor —, out of memory...).
  std::function<absl::StatusOr<std::unique_ptr<graph::Backend>>(const DeviceBackendRequest&)>
      create;
  // A collective whose rank i is on devices[i] (distinct indices of
  // `devices`), or why there can be none (its library is missing, a device
  // is repeated, ...). Null: the provider cannot split a model.
  std::function<absl::StatusOr<std::shared_ptr<DeviceCollective>>(
      const std::vector<int32_t>& devices)>
      make_collective;
};

// Thread-safe.
void RegisterDeviceBackendProvider(DeviceBackendProvider provider);
std::vector<DeviceBackendProvider> DeviceBackendProviders();

}  // namespace minfer::runtime

#endif  // MINFER_ENGINE_RUNTIME_DEVICE_BACKEND_H_
