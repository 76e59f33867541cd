// CudaState: one CUDA device's layer (docs/design.md, the device layer),
// shared by every model slot placed on that device — the device, its
// stream, its stream lock, its weight registry, device allocation and the
// device error flag. There is one state per device the process uses,
// created at its first Get(index) and kept for the process's life; models
// on different devices share nothing here and run at the same time.
//
// Thread safety: all methods may be called from any thread. CUDA's current
// device is a per-thread setting, so every method that calls the runtime
// makes its device current first, and stream work must be enqueued inside
// Lock() (the stream lock, a recursive mutex, with the device made
// current): a backend takes it for a whole execution window — input
// fills, a split's launches or capture, and the closing synchronize — so
// another slot's launches on this device can never interleave with, or be
// recorded into, its window, and its kernels' per-device caches
// (kernels/per_device.cuh) read this device's facts.
#ifndef MINFER_CUDA_STATE_CUDA_STATE_H_
#define MINFER_CUDA_STATE_CUDA_STATE_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cuda/kernels/types.h"
#include "engine/graph/weight.h"

namespace minfer::cuda {

// Device tiers by compute capability: what the kernels may use.
enum class DeviceTier {
  kVolta,   // sm_70: f16 tensor cores (wmma)
  kTuring,  // sm_75
  kAmpere,  // sm_80+: int8 mma.m16n8k32, cp.async (MMQ available)
  kHopper,  // sm_90
  kBlackwell,
};
const char* DeviceTierName(DeviceTier t);
DeviceTier TierOf(int cc);  // cc = major * 100 + minor * 10

// Converts a CUDA error to a Status naming the call site.
absl::Status CudaStatus(cudaError_t err, const char* what, const char* file, int line);
#define MINFER_CUDA_RETURN_IF_ERROR(expr)                                          \
  do {                                                                             \
    cudaError_t minfer_cuda_err_ = (expr);                                         \
    if (minfer_cuda_err_ != cudaSuccess)                                           \
      return ::minfer::cuda::CudaStatus(minfer_cuda_err_, #expr, __FILE__, __LINE__); \
  } while (0)

class CudaState {
 public:
  // The default device's state: MINFER_GPU when it is set (>= 0), else the
  // device with the highest compute capability (the lowest index among
  // equals). Returns the reason when CUDA is unusable (MINFER_DISABLE_CUDA=1,
  // no device, driver too old); the answer is cached.
  static absl::StatusOr<CudaState*> Get();
  // Device `index`'s state, created on the first call: its stream and error
  // flag, and the banner "CUDA: using <name> (SM x.y, N MB, M SMs)" on
  // stderr. Unavailable naming the index and the device count when there is
  // no such device, or naming the device when it is older than sm_70.
  static absl::StatusOr<CudaState*> Get(int index);
  // How many devices the process sees (1 or more), or why none.
  static absl::StatusOr<int> DeviceCount();
  // The index Get() uses.
  static absl::StatusOr<int> DefaultDevice();

  // Makes this device current on the calling thread.
  absl::Status Activate() const;
  // The stream lock, taken, with this device made current on the calling
  // thread: a backend's execution window.
  std::unique_lock<std::recursive_mutex> Lock();

  int device() const { return device_; }
  int cc() const { return cc_; }  // major * 100 + minor * 10
  int sm_count() const { return sm_count_; }
  const std::string& name() const { return name_; }
  DeviceTier tier() const { return tier_; }
  size_t total_bytes() const { return total_bytes_; }
  size_t FreeBytes() const;
  cudaStream_t stream() const { return stream_; }
  // Prefer Lock(), which also makes the device current.
  std::recursive_mutex& stream_lock() { return stream_lock_; }

  // Device memory; errors say how much was asked for and what is free.
  absl::StatusOr<void*> Malloc(size_t bytes, const std::string& what);
  void Free(void* p);

  // --- weight registry (owner = a model instance) ---------------------------
  // Uploads `w` (stream-ordered copy on the shared stream, then a
  // synchronize of that stream) and returns its device view. Q6_K is
  // repacked to the padded 224-byte layout. Re-registering the same owner +
  // name + size reuses the copy (weights are immutable).
  absl::StatusOr<WeightView> RegisterWeight(uint64_t owner, const graph::Weight& w);
  // Null when the owner has no such weight.
  const WeightView* FindWeight(uint64_t owner, const std::string& name) const;
  // Frees an owner's weights (the model was unloaded; its backend and its
  // captured graphs are already gone).
  void ReleaseWeights(uint64_t owner);
  uint64_t WeightBytes(uint64_t owner) const;
  // Gives a registered weight its MMQ scale plane (cuda/kernels/mmq.h; the
  // caller built it in memory from Malloc): the weight's view then points at
  // it, and ReleaseWeights frees it. NotFound (the caller still owns
  // `plane`) when the owner has no such weight; FailedPrecondition when the
  // weight already has a plane.
  absl::Status AttachScalePlane(uint64_t owner, const std::string& name, void* plane,
                                uint64_t bytes);
  // Bytes of the owner's scale planes, per weight type (the VRAM they cost).
  std::map<GgmlType, uint64_t> ScalePlaneBytes(uint64_t owner) const;
  static uint64_t NewOwnerId();

  // The device error flag kernels set (types.h DeviceError). Call
  // TakeDeviceError only after the stream was synchronized: it returns the
  // flag and resets it.
  int32_t* device_error_flag() const { return error_flag_; }
  int32_t TakeDeviceError();

  // A device fault: an error that poisons the CUDA context (an illegal
  // address, a launch failure, an uncorrectable ECC error), after which
  // every backend on this device fails. The first is kept; fault() is ""
  // while the device is healthy. Health reports read it (per-device
  // health, ServerStatus.devices). Thread-safe.
  void RecordFault(const std::string& why);
  std::string fault() const;

  CudaState(const CudaState&) = delete;
  CudaState& operator=(const CudaState&) = delete;

 private:
  CudaState() = default;
  absl::Status Init(int index);

  int device_ = -1;
  int cc_ = 0;
  int sm_count_ = 0;
  std::string name_;
  DeviceTier tier_ = DeviceTier::kVolta;
  size_t total_bytes_ = 0;
  cudaStream_t stream_ = nullptr;
  std::recursive_mutex stream_lock_;
  int32_t* error_flag_ = nullptr;  // device alias of error_host_
  int32_t* error_host_ = nullptr;  // mapped pinned host memory
  mutable std::mutex fault_mu_;
  std::string fault_;  // guarded by fault_mu_

  struct Entry {
    WeightView view;
    void* ptr = nullptr;
    uint64_t raw_bytes = 0;
    uint64_t device_bytes = 0;
    void* plane = nullptr;  // view.scale_plane, owned
    uint64_t plane_bytes = 0;
  };
  mutable std::mutex registry_mu_;
  std::map<std::pair<uint64_t, std::string>, Entry> weights_;
};

}  // namespace minfer::cuda

#endif  // MINFER_CUDA_STATE_CUDA_STATE_H_
