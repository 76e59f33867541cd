// Registers the CUDA backend with the engine when this library is linked
// (binaries built with --config=cuda): Model::Load then offers each model to
// the GPU first.
#include "cuda/backend/cuda_backend.h"
#include "engine/runtime/device_backend.h"

namespace minfer::cuda {
namespace {

const bool kRegistered = [] {
  runtime::RegisterDeviceBackendProvider(
      {"cuda", [](const runtime::DeviceBackendRequest& req)
                   -> absl::StatusOr<std::unique_ptr<graph::Backend>> {
         auto state = CudaState::Get();
         if (!state.ok()) return state.status();
         auto b = CudaBackend::Create(*state, *req.model, req.knobs, req.progress,
                                      req.knob_generation);
         if (!b.ok()) return b.status();
         return std::unique_ptr<graph::Backend>(std::move(*b));
       }});
  return true;
}();

}  // namespace
}  // namespace minfer::cuda
