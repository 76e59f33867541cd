// Collectives between the ranks of a tensor-parallel model (graph.h's
// AllReduce). Each rank runs its own graph on its own backend, in lock-step
// with the others (one thread per rank): every rank's graph has the same
// AllReduce nodes in the same order, so the i-th call of each rank belongs
// to the same reduction.
//
// InProcessCollective sums host buffers of ranks that are threads of this
// process: what the CPU backend uses (and the CPU reference of a GPU split,
// whose GPUs use NCCL: cuda/comm/nccl.h).
#ifndef MINFER_ENGINE_GRAPH_COLLECTIVE_H_
#define MINFER_ENGINE_GRAPH_COLLECTIVE_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "absl/status/status.h"

namespace minfer::graph {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int size() const = 0;
  // Replaces data[0, n) of rank `rank` by the sum over all ranks of theirs
  // (every rank passes the same n). Blocks until every rank has called.
  // An error (a rank that did not come, a different n, Abort) leaves the
  // data unspecified.
  virtual absl::Status AllReduceSum(int rank, float* data, int64_t n) = 0;
};

class InProcessCollective : public Collective {
 public:
  // `timeout`: how long a rank waits for the others before DEADLINE_EXCEEDED
  // (a rank that failed its step never comes); the collective is then
  // aborted.
  explicit InProcessCollective(int size,
                               std::chrono::milliseconds timeout = std::chrono::seconds(60));

  int size() const override { return size_; }
  // The sum adds the ranks in rank order, so every rank gets the same
  // bits.
  absl::Status AllReduceSum(int rank, float* data, int64_t n) override;
  // Wakes every waiting rank with ABORTED, and fails every later call: a
  // rank whose step failed calls it so the others do not wait out the
  // timeout.
  void Abort();
  // Makes an aborted (or timed-out) collective usable again. Only when no
  // rank is inside a call (the driver joined every rank's step).
  void Reset();

 private:
  // Waits until `arrived_` reaches size_ in round `round`; false on timeout
  // or abort.
  absl::Status Barrier(std::unique_lock<std::mutex>& lock);

  const int size_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<float*> data_;  // guarded by mu_: each rank's buffer this round
  int64_t n_ = -1;            // guarded by mu_: this round's length
  bool mismatch_ = false;     // guarded by mu_
  int arrived_ = 0;           // guarded by mu_
  uint64_t generation_ = 0;   // guarded by mu_: barriers passed
  bool aborted_ = false;      // guarded by mu_
  std::vector<float> sum_;    // guarded by the barriers: this round's sum
};

}  // namespace minfer::graph

#endif  // MINFER_ENGINE_GRAPH_COLLECTIVE_H_
