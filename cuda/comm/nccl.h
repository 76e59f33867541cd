// Collectives between this process's GPUs over NCCL: the all-reduce that
// tensor parallelism puts after each row-parallel matmul (docs/design.md,
// "Two GPUs"). One communicator per device, made together in one process
// (ncclCommInitAll); each rank's collectives go on that device's stream.
//
// NCCL is loaded at run time (dlopen of libnccl.so.2, or the path in the
// environment variable MINFER_NCCL_LIBRARY): minfer's binaries need it only
// when a model is split across GPUs, so a host without it still serves
// models on one GPU each, and the error of a split that asks for it names
// the library and why it did not load.
//
// NVLink multicast (NVLS) stays off: NCCL_NVLS_ENABLE=0 is set before the
// first communicator unless the environment already sets it.
//
// Thread safety: Create and the destructor from one thread. AllReduceSum of
// different ranks from their own threads at once (the usual way: one
// thread per GPU in lock-step), or from one thread between GroupStart and
// GroupEnd. A collective may be captured into a CUDA graph of its stream.
#ifndef MINFER_CUDA_COMM_NCCL_H_
#define MINFER_CUDA_COMM_NCCL_H_

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace minfer::cuda {

// OK when NCCL loads here, else why not (FAILED_PRECONDITION naming the
// library and dlopen's message). Loads it at the first call.
absl::Status NcclAvailable();
// The loaded library's version, "2.28.9".
absl::StatusOr<std::string> NcclVersion();

enum class NcclType { kF32, kF16, kBF16 };

class NcclGroup {
 public:
  // Rank i on device devices[i] (distinct, each a CUDA device index).
  // INVALID_ARGUMENT for an empty list or a repeated device;
  // FAILED_PRECONDITION when NCCL does not load; INTERNAL with NCCL's
  // message when it refuses.
  static absl::StatusOr<std::unique_ptr<NcclGroup>> Create(const std::vector<int>& devices);
  ~NcclGroup();

  int size() const { return static_cast<int>(devices_.size()); }
  int device(int rank) const { return devices_[rank]; }

  // Sums `count` elements of `type` at `buf` (on rank's device) over all
  // ranks, in place, enqueued on `stream` (a stream of rank's device).
  // Every rank must call it with the same count and type.
  absl::Status AllReduceSum(int rank, void* buf, size_t count, NcclType type,
                            cudaStream_t stream);
  // The same, out of place: `recv` gets the sum of every rank's `send`.
  absl::Status AllReduceSum(int rank, const void* send, void* recv, size_t count, NcclType type,
                            cudaStream_t stream);

  // Aborts every rank's communicator (ncclCommAbort): collectives in
  // flight, on the GPU too, return instead of waiting for a rank that will
  // not come. Every later AllReduceSum is FAILED_PRECONDITION; a graph
  // that captured one must not be replayed (CudaBackend checks aborted()).
  // Thread-safe, idempotent.
  void Abort();
  bool aborted() const { return aborted_.load(); }

  // Brackets collectives that one thread issues for several ranks.
  static absl::Status GroupStart();
  static absl::Status GroupEnd();

  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

 private:
  NcclGroup() = default;
  std::vector<int> devices_;
  std::vector<void*> comms_;  // ncclComm_t per rank
  std::mutex abort_mu_;       // Abort against the destructor
  std::atomic<bool> aborted_{false};
};

}  // namespace minfer::cuda

#endif  // MINFER_CUDA_COMM_NCCL_H_
