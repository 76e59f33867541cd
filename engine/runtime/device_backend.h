// The registry through which device backends (CUDA) join the engine without
// the engine including their headers: a device library registers a provider
// at static-initialization time when it is linked in (binaries link it under
// --config=cuda), and Model::Load asks the providers, in registration order,
// for a backend for the model being loaded.
#ifndef MINFER_ENGINE_RUNTIME_DEVICE_BACKEND_H_
#define MINFER_ENGINE_RUNTIME_DEVICE_BACKEND_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/base/knobs.h"
#include "engine/graph/backend.h"
#include "engine/models/qwen2/qwen2.h"

namespace minfer::runtime {

using DeviceProgressFn = std::function<void(uint64_t, uint64_t)>;

struct DeviceBackendRequest {
  const models::Qwen2Model* model = nullptr;  // outlives the backend
  const KnobOverrides* knobs = nullptr;
  // Moves whenever `knobs` changes (Model::knob_generation); the backend
  // re-reads its switches between steps when it or the global registry's
  // generation moved. Both pointers outlive the backend.
  const uint64_t* knob_generation = nullptr;
  std::string model_name;
  DeviceProgressFn progress;  // upload progress (bytes done, bytes total)
};

struct DeviceBackendProvider {
  std::string name;  // "cuda"
  // A backend with every weight of the model resident, or an error saying
  // why the model cannot run on this device (no device, a weight type
  // without a kernel — naming the first such tensor —, out of memory...).
  std::function<absl::StatusOr<std::unique_ptr<graph::Backend>>(const DeviceBackendRequest&)>
      create;
};

// Thread-safe.
void RegisterDeviceBackendProvider(DeviceBackendProvider provider);
std::vector<DeviceBackendProvider> DeviceBackendProviders();

}  // namespace minfer::runtime

#endif  // MINFER_ENGINE_RUNTIME_DEVICE_BACKEND_H_
