#include "cuda/state/cuda_state.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/base/knobs.h"
#include "engine/base/logging.h"
#include "engine/base/status.h"

namespace minfer::cuda {

const char* DeviceTierName(DeviceTier t) {
  switch (t) {
    case DeviceTier::kVolta: return "volta";
    case DeviceTier::kTuring: return "turing";
    case DeviceTier::kAmpere: return "ampere";
    case DeviceTier::kHopper: return "hopper";
    case DeviceTier::kBlackwell: return "blackwell";
  }
  return "?";
}

DeviceTier TierOf(int cc) {
  if (cc >= 1000) return DeviceTier::kBlackwell;
  if (cc >= 900) return DeviceTier::kHopper;
  if (cc >= 800) return DeviceTier::kAmpere;
  if (cc >= 750) return DeviceTier::kTuring;
  return DeviceTier::kVolta;
}

absl::Status CudaStatus(cudaError_t err, const char* what, const char* file, int line) {
  std::string msg = absl::StrCat("CUDA error ", cudaGetErrorName(err), " (", cudaGetErrorString(err),
                                 ") in ", what, " at ", file, ":", line);
  if (err == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

namespace {

// The devices the process has opened, by index (never freed: kernels and
// captured graphs may refer to a state until exit).
struct Registry {
  std::mutex mu;
  bool counted = false;
  absl::StatusOr<int> count = absl::UnavailableError("uninitialized");
  std::map<int, absl::StatusOr<CudaState*>> states;  // guarded by mu
};
Registry& TheRegistry() {
  static Registry* r = new Registry;
  return *r;
}

absl::StatusOr<int> CountLocked(Registry& r) {
  if (r.counted) return r.count;
  r.counted = true;
  if (KnobRegistry::Global().GetBool("MINFER_DISABLE_CUDA")) {
    r.count = absl::UnavailableError("CUDA disabled (MINFER_DISABLE_CUDA=1)");
  } else {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      r.count = absl::UnavailableError(
          absl::StrCat("no usable CUDA device: ", cudaGetErrorString(err)));
    } else if (count == 0) {
      r.count = absl::UnavailableError("no CUDA device");
    } else {
      r.count = std::min(count, kMaxCudaDevices);
    }
  }
  if (!r.count.ok()) {
    Logger("cuda")->info("CUDA: not available, using CPU fallback ({})", r.count.status().message());
  }
  return r.count;
}

}  // namespace

absl::StatusOr<int> CudaState::DeviceCount() {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  return CountLocked(r);
}

absl::StatusOr<int> CudaState::DefaultDevice() {
  ASSIGN_OR_RETURN(const int count, DeviceCount());
  const int64_t want = KnobRegistry::Global().GetInt("MINFER_GPU");
  if (want >= 0) {
    if (want >= count) {
      return absl::UnavailableError(
          absl::StrCat("MINFER_GPU=", want, " is not a device (", count, " present)"));
    }
    return static_cast<int>(want);
  }
  int best = -1, best_cc = -1;
  for (int d = 0; d < count; ++d) {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    const int cc = major * 100 + minor * 10;
    if (cc > best_cc) best = d, best_cc = cc;
  }
  if (best < 0) return absl::UnavailableError("no CUDA device answered");
  return best;
}

absl::StatusOr<CudaState*> CudaState::Get() {
  // The default device, decided once (MINFER_GPU is read at the first use).
  static const absl::StatusOr<int>* def = new absl::StatusOr<int>(DefaultDevice());
  if (!def->ok()) return def->status();
  return Get(**def);
}

absl::StatusOr<CudaState*> CudaState::Get(int index) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  ASSIGN_OR_RETURN(const int count, CountLocked(r));
  if (index < 0 || index >= count) {
    return absl::UnavailableError(absl::StrCat("CUDA device ", index, " does not exist (", count,
                                               count == 1 ? " device" : " devices", " present)"));
  }
  auto it = r.states.find(index);
  if (it != r.states.end()) return it->second;
  auto* st = new CudaState;
  absl::StatusOr<CudaState*> made = st;
  if (absl::Status init = st->Init(index); !init.ok()) {
    made = init;
    Logger("cuda")->info("CUDA: device {} not usable ({})", index, init.message());
    // (st is leaked: a half-made stream or flag may be referenced.)
  }
  r.states.emplace(index, made);
  return made;
}

absl::Status CudaState::Activate() const {
  MINFER_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  return absl::OkStatus();
}

std::unique_lock<std::recursive_mutex> CudaState::Lock() {
  std::unique_lock<std::recursive_mutex> lock(stream_lock_);
  // Setting the current device cannot fail for a device that was opened
  // (Init set it once); a failure would surface at the launch.
  if (cudaSetDevice(device_) != cudaSuccess) (void)cudaGetLastError();
  return lock;
}

absl::Status CudaState::Init(int index) {
  cudaDeviceProp p;
  MINFER_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&p, index));
  const int cc = p.major * 100 + p.minor * 10;
  if (cc < 700) {
    return absl::UnavailableError(absl::StrCat("device ", index, " (", p.name,
                                               ") has compute capability ", p.major, ".", p.minor,
                                               "; minfer needs sm_70 or newer"));
  }
  device_ = index;
  MINFER_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  cc_ = cc;
  sm_count_ = p.multiProcessorCount;
  name_ = p.name;
  tier_ = TierOf(cc_);
  total_bytes_ = p.totalGlobalMem;
  MINFER_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  // The error flag lives in mapped pinned host memory: kernels write it
  // through its device alias (only when something is wrong), and the host
  // reads it after a synchronize without an extra copy.
  MINFER_CUDA_RETURN_IF_ERROR(
      cudaHostAlloc(reinterpret_cast<void**>(&error_host_), sizeof(int32_t), cudaHostAllocMapped));
  *error_host_ = 0;
  MINFER_CUDA_RETURN_IF_ERROR(
      cudaHostGetDevicePointer(reinterpret_cast<void**>(&error_flag_), error_host_, 0));
  std::fprintf(stderr, "CUDA: using %s (SM %d.%d, %zu MB, %d SMs)%s\n", name_.c_str(), p.major,
               p.minor, total_bytes_ >> 20, sm_count_,
               device_ == 0 ? "" : absl::StrCat(" as device ", device_).c_str());
  Logger("cuda")->info("CUDA: using {} (SM {}.{}, {} MB, {} SMs), tier {}, device {}", name_,
                       p.major, p.minor, total_bytes_ >> 20, sm_count_, DeviceTierName(tier_),
                       device_);
  return absl::OkStatus();
}

size_t CudaState::FreeBytes() const {
  size_t free_b = 0, total_b = 0;
  if (!Activate().ok()) return 0;
  cudaMemGetInfo(&free_b, &total_b);
  return free_b;
}

absl::StatusOr<void*> CudaState::Malloc(size_t bytes, const std::string& what) {
  void* p = nullptr;
  RETURN_IF_ERROR(Activate());
  cudaError_t err = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
  if (err != cudaSuccess || p == nullptr) {
    cudaGetLastError();  // allocation failures are not sticky; clear them
    return absl::ResourceExhaustedError(absl::StrFormat(
        "CUDA: cannot allocate %d bytes for %s (%d bytes free of %d): %s", bytes, what,
        FreeBytes(), total_bytes_, cudaGetErrorString(err)));
  }
  return p;
}

void CudaState::Free(void* p) {
  if (p == nullptr) return;
  // cudaFree frees on whichever device owns p, but needs a current context.
  if (cudaSetDevice(device_) != cudaSuccess) (void)cudaGetLastError();
  cudaFree(p);
}

uint64_t CudaState::NewOwnerId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

namespace {

// Lays a weight out as the device holds it: each row's blocks (Q6_K
// super-blocks repacked from 210 into 224-byte slots), the row
// zero-padded to dst_row bytes (DeviceRowBytes: 16-byte aligned rows).
std::vector<uint8_t> DeviceLayout(const graph::Weight& w, int64_t dst_row) {
  const int64_t rows = w.rows();
  const int64_t src_row = w.row_bytes();
  std::vector<uint8_t> out(static_cast<size_t>(dst_row * rows), 0);
  if (w.type == GgmlType::kMXFP4) {
    // Split (types.h): the blocks' 16 code bytes, then their exponents.
    const int64_t blocks = src_row / 17;
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* src = w.data + r * src_row;
      uint8_t* dst = out.data() + r * dst_row;
      for (int64_t b = 0; b < blocks; ++b) {
        dst[blocks * 16 + b] = src[b * 17];
        std::memcpy(dst + b * 16, src + b * 17 + 1, 16);
      }
    }
  } else if (w.type == GgmlType::kQ6_K) {
    const int64_t blocks = src_row / 210;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < blocks; ++b) {
        std::memcpy(out.data() + r * dst_row + b * kQ6KPaddedBytes, w.data + r * src_row + b * 210,
                    210);
      }
    }
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(out.data() + r * dst_row, w.data + r * src_row, src_row);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<WeightView> CudaState::RegisterWeight(uint64_t owner, const graph::Weight& w) {
  const bool padded = w.type == GgmlType::kQ6_K;
  const int64_t row_bytes = DeviceRowBytes(w.type, w.ne0());
  const uint64_t device_bytes = static_cast<uint64_t>(DeviceWeightBytes(w.type, w.ne0(), w.rows()));
  // The GGUF bytes go up as they are when the device layout is the file's.
  const bool repack = padded || w.type == GgmlType::kMXFP4 || row_bytes != w.row_bytes();
  {
    std::lock_guard<std::mutex> lock(registry_mu_);
    auto it = weights_.find({owner, w.name});
    if (it != weights_.end()) {
      if (it->second.raw_bytes == w.nbytes) return it->second.view;
      // A different size under the same name: a new upload replaces it. The
      // old buffer is freed only by ReleaseWeights (a captured graph of the
      // owner's backend may still reference it until then).
    }
  }
  void* ptr = nullptr;
  {
    auto p = Malloc(device_bytes, absl::StrCat("weight '", w.name, "'"));
    if (!p.ok()) return p.status();
    ptr = *p;
  }
  std::vector<uint8_t> laid_out;
  const void* src = w.data;
  if (repack) {
    laid_out = DeviceLayout(w, row_bytes);
    src = laid_out.data();
  }
  {
    // Stream-ordered copy + a synchronize of that stream (never the legacy
    // blocking cudaMemcpy, which would break another thread's capture).
    std::unique_lock<std::recursive_mutex> lock = Lock();
    cudaError_t err = cudaMemcpyAsync(ptr, src, device_bytes, cudaMemcpyHostToDevice, stream_);
    if (err == cudaSuccess) err = cudaStreamSynchronize(stream_);
    if (err != cudaSuccess) {
      Free(ptr);
      return CudaStatus(err, absl::StrCat("upload of '", w.name, "'").c_str(), __FILE__, __LINE__);
    }
  }
  WeightView v;
  v.type = w.type;
  v.data = ptr;
  v.k = w.ne0();
  v.rows = w.rows();
  v.row_bytes = row_bytes;
  v.q6k_padded = padded;
  std::lock_guard<std::mutex> lock(registry_mu_);
  Entry& e = weights_[{owner, w.name}];
  e.view = v;
  e.ptr = ptr;  // (a replaced entry's old buffer is leaked until release; see above)
  e.raw_bytes = w.nbytes;
  e.device_bytes = device_bytes;
  e.plane = nullptr;  // (a replaced entry's plane is leaked with its buffer)
  e.plane_bytes = 0;
  return v;
}

const WeightView* CudaState::FindWeight(uint64_t owner, const std::string& name) const {
  std::lock_guard<std::mutex> lock(registry_mu_);
  auto it = weights_.find({owner, name});
  return it == weights_.end() ? nullptr : &it->second.view;
}

void CudaState::ReleaseWeights(uint64_t owner) {
  std::unique_lock<std::recursive_mutex> slock = Lock();
  cudaStreamSynchronize(stream_);  // no kernel may still read them
  std::lock_guard<std::mutex> lock(registry_mu_);
  for (auto it = weights_.begin(); it != weights_.end();) {
    if (it->first.first == owner) {
      Free(it->second.ptr);
      Free(it->second.plane);
      it = weights_.erase(it);
    } else {
      ++it;
    }
  }
}

uint64_t CudaState::WeightBytes(uint64_t owner) const {
  std::lock_guard<std::mutex> lock(registry_mu_);
  uint64_t total = 0;
  for (const auto& [key, e] : weights_) {
    if (key.first == owner) total += e.device_bytes;
  }
  return total;
}

absl::Status CudaState::AttachScalePlane(uint64_t owner, const std::string& name, void* plane,
                                         uint64_t bytes) {
  std::lock_guard<std::mutex> lock(registry_mu_);
  auto it = weights_.find({owner, name});
  if (it == weights_.end()) {
    return absl::NotFoundError(absl::StrCat("scale plane for '", name, "': no such weight"));
  }
  if (it->second.plane != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("weight '", name, "' already has a scale plane"));
  }
  it->second.plane = plane;
  it->second.plane_bytes = bytes;
  it->second.view.scale_plane = plane;
  return absl::OkStatus();
}

std::map<GgmlType, uint64_t> CudaState::ScalePlaneBytes(uint64_t owner) const {
  std::lock_guard<std::mutex> lock(registry_mu_);
  std::map<GgmlType, uint64_t> out;
  for (const auto& [key, e] : weights_) {
    if (key.first == owner && e.plane != nullptr) out[e.view.type] += e.plane_bytes;
  }
  return out;
}

void CudaState::RecordFault(const std::string& why) {
  std::lock_guard<std::mutex> lock(fault_mu_);
  if (fault_.empty()) fault_ = why.empty() ? std::string("unknown device error") : why;
}

std::string CudaState::fault() const {
  std::lock_guard<std::mutex> lock(fault_mu_);
  return fault_;
}

int32_t CudaState::TakeDeviceError() {
  volatile int32_t* flag = error_host_;
  int32_t v = *flag;
  if (v != 0) *flag = 0;
  return v;
}

}  // namespace minfer::cuda
