// The device flags `minfer run` and `minfer bench` share: --gpu (one
// device) and --tensor-parallel / --devices (a split over several).
#ifndef MINFER_ENGINE_TOOLS_DEVICE_FLAGS_H_
#define MINFER_ENGINE_TOOLS_DEVICE_FLAGS_H_

#include <cstdint>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "engine/runtime/model.h"

namespace minfer::tools {

struct DeviceFlags {
  int gpu = -1;  // --gpu; -1: the default device
  int32_t tensor_parallel = 1;
  std::vector<int32_t> devices;
};

// Registers --gpu, --tensor-parallel and --devices on `app`, writing `f`.
void AddDeviceFlags(CLI::App& app, DeviceFlags* f);

// After parsing: pins MINFER_GPU for --gpu and sets the split of `opt`;
// INVALID_ARGUMENT when --gpu (one device) comes with a split.
absl::Status ApplyDeviceFlags(const DeviceFlags& f, runtime::ModelOptions* opt);

}  // namespace minfer::tools

#endif  // MINFER_ENGINE_TOOLS_DEVICE_FLAGS_H_
