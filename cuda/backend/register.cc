// Registers the CUDA backend with the engine when this library is linked
// (binaries built with --config=cuda): Model::Load then offers each model to
// the GPU first.
#include "cuda/backend/cuda_backend.h"
#include "cuda/comm/nccl.h"
#include "cuda/kernels/mmq.h"
#include "engine/base/knobs.h"
#include "engine/base/status.h"
#include "engine/runtime/device_backend.h"

namespace minfer::cuda {
namespace {

// The device a request names (-1: the default device).
absl::StatusOr<CudaState*> StateFor(int32_t device) {
  return device < 0 ? CudaState::Get() : CudaState::Get(device);
}

// A split's communicators (one NCCL rank per device), shared by the ranks'
// backends.
class NcclCollective : public runtime::DeviceCollective {
 public:
  explicit NcclCollective(std::shared_ptr<NcclGroup> group) : group_(std::move(group)) {}
  int size() const override { return group_->size(); }
  void Abort() override { group_->Abort(); }
  bool aborted() const override { return group_->aborted(); }
  const std::shared_ptr<NcclGroup>& group() const { return group_; }

 private:
  std::shared_ptr<NcclGroup> group_;
};

runtime::DeviceInfo InfoOf(CudaState& s) {
  runtime::DeviceInfo info;
  info.index = s.device();
  info.name = s.name();
  info.multiprocessors = s.sm_count();
  info.total_bytes = s.total_bytes();
  info.free_bytes = s.FreeBytes();
  info.fault = s.fault();
  return info;
}

const bool kRegistered = [] {
  runtime::DeviceBackendProvider p;
  p.name = "cuda";
  p.devices = []() -> absl::StatusOr<std::vector<runtime::DeviceInfo>> {
    // The default device first, then the others by index; a device that
    // cannot be used (too old) is left out. Listing a device opens it (a
    // CUDA context: its free memory needs one), so MINFER_GPU set pins the
    // process to that device alone, as CUDA_VISIBLE_DEVICES would.
    ASSIGN_OR_RETURN(CudaState* def, CudaState::Get());
    std::vector<runtime::DeviceInfo> out{InfoOf(*def)};
    if (KnobRegistry::Global().GetInt("MINFER_GPU") >= 0) return out;
    ASSIGN_OR_RETURN(const int count, CudaState::DeviceCount());
    for (int d = 0; d < count; ++d) {
      if (d == def->device()) continue;
      absl::StatusOr<CudaState*> s = CudaState::Get(d);
      if (s.ok()) out.push_back(InfoOf(**s));
    }
    return out;
  };
  p.weight_bytes = [](int32_t device, int ggml_type, int64_t ne0, int64_t rows,
                      uint64_t file_bytes, const KnobOverrides* knobs) -> uint64_t {
    // RegisterWeight's layout: Q6_K in 224-byte blocks, rows 16-byte aligned.
    const GgmlType type = static_cast<GgmlType>(ggml_type);
    if (ne0 <= 0 || rows <= 0 || ne0 % TraitsOf(type).block_size != 0) return file_bytes;
    uint64_t bytes = static_cast<uint64_t>(DeviceWeightBytes(type, ne0, rows));
    // CudaBackend::BuildScalePlanes' planes (on GPUs with MMQ).
    auto state = StateFor(device);
    const char* knob = type == GgmlType::kQ4_K   ? "MINFER_MMQ_Q4K_DSC"
                       : type == GgmlType::kQ6_K ? "MINFER_MMQ_Q6K_EXP"
                                                 : nullptr;
    if (knob != nullptr && state.ok() && (*state)->cc() >= 800 &&
        KnobRegistry::Global().GetBool(knob, knobs)) {
      bytes += static_cast<uint64_t>(MmqScalePlaneBytes(type, ne0, rows));
    }
    return bytes;
  };
  p.create = [](const runtime::DeviceBackendRequest& req)
      -> absl::StatusOr<std::unique_ptr<graph::Backend>> {
    ASSIGN_OR_RETURN(CudaState* state, StateFor(req.device));
    CudaBackend::TensorParallel tp;
    if (req.collective != nullptr) {
      // Only this provider's make_collective makes the collectives its
      // requests carry.
      tp.group = static_cast<const NcclCollective&>(*req.collective).group();
      tp.rank = req.tp_rank;
    }
    auto b = CudaBackend::Create(state, *req.model, req.knobs, req.progress, req.knob_generation,
                                 std::move(tp));
    if (!b.ok()) return b.status();
    return std::unique_ptr<graph::Backend>(std::move(*b));
  };
  p.make_collective = [](const std::vector<int32_t>& devices)
      -> absl::StatusOr<std::shared_ptr<runtime::DeviceCollective>> {
    std::vector<int> ids;
    for (int32_t d : devices) {
      ASSIGN_OR_RETURN(CudaState * s, CudaState::Get(d));  // exists and is usable
      ids.push_back(s->device());
    }
    ASSIGN_OR_RETURN(std::unique_ptr<NcclGroup> group, NcclGroup::Create(ids));
    return std::make_shared<NcclCollective>(std::shared_ptr<NcclGroup>(std::move(group)));
  };
  runtime::RegisterDeviceBackendProvider(std::move(p));
  return true;
}();

}  // namespace
}  // namespace minfer::cuda
