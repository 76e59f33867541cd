#include "engine/tools/device_flags.h"

#include <string>

#include "engine/base/knobs.h"

namespace minfer::tools {

void AddDeviceFlags(CLI::App& app, DeviceFlags* f) {
  app.add_option("--gpu", f->gpu, "CUDA device index (default: highest compute capability)");
  app.add_option("--tensor-parallel", f->tensor_parallel,
                 "split the model over this many ranks: GPUs (NCCL) with --backend cuda/auto, "
                 "threads with --backend cpu")
      ->check(CLI::Range(1, 64));
  app.add_option("--devices", f->devices, "the GPUs of a --tensor-parallel split, rank by rank")
      ->delimiter(',');
}

absl::Status ApplyDeviceFlags(const DeviceFlags& f, runtime::ModelOptions* opt) {
  if (f.gpu >= 0 && f.tensor_parallel > 1) {
    return absl::InvalidArgumentError(
        "--gpu pins one device; a --tensor-parallel split names its GPUs with --devices");
  }
  if (f.gpu >= 0) (void)KnobRegistry::Global().Set("MINFER_GPU", std::to_string(f.gpu));
  opt->tensor_parallel_size = f.tensor_parallel;
  opt->tensor_parallel_devices = f.devices;
  return absl::OkStatus();
}

}  // namespace minfer::tools
