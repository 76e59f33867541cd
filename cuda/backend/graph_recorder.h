// GraphRecorder: when a split of a graph is launched directly, captured into
// a CUDA graph, or replayed from one (the CUDA backend's graph state machine).
//
// A split is (graph uid, first node, end node). Its life:
//   - runs 1 and 2 launch directly: they warm per-kernel state (shared-memory
//     opt-ins, scratch allocations) that must not happen inside a capture;
//   - run 3 begins a capture (when capture is allowed for it and no other
//     capture is open); the window's end closes it, instantiates the
//     recording and launches it once, so that step still has its outputs;
//   - later runs replay the recording, as long as the pool generation it
//     was recorded at is still current. A changed generation means buffer
//     addresses baked into the recording may be stale: the recording is
//     dropped (counted as a recapture) and the split re-warms from run 1.
//   - a node error inside the capture window aborts the capture: nothing is
//     launched, the split's run count restarts, graphs stay enabled.
//   - a failed capture start, capture end/instantiation or replay launch
//     disables graphs for the owner from then on, with an error log: a
//     device that cannot capture would otherwise fail every step.
//
// The recorder is host logic only; the device work goes through GraphDevice
// (the CUDA backend implements it on its stream), so the state machine is
// testable without a GPU. The caller serializes all calls (the backend's
// execution window).
#ifndef MINFER_CUDA_BACKEND_GRAPH_RECORDER_H_
#define MINFER_CUDA_BACKEND_GRAPH_RECORDER_H_

#include <compare>
#include <cstdint>
#include <map>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace minfer::cuda {

// The device side of recording: opaque executable-graph handles and the
// stream operations on them. Errors carry the device's description of what
// failed (the recorder adds what it means); each call leaves no pending
// device error behind.
class GraphDevice {
 public:
  using Exec = void*;  // an instantiated recording (cudaGraphExec_t)

  virtual ~GraphDevice() = default;
  // Starts recording the stream's launches instead of running them.
  virtual absl::Status BeginCapture() = 0;
  // Ends the capture, instantiates the recording and launches it once. On
  // error nothing is left to destroy.
  virtual absl::StatusOr<Exec> EndCaptureAndLaunch() = 0;
  // Ends the capture and throws the recording away, launching nothing.
  virtual void DiscardCapture() = 0;
  // Launches a recording on the stream.
  virtual absl::Status Launch(Exec exec) = 0;
  virtual void Destroy(Exec exec) = 0;
};

// What the recorder did with splits (the backend's Stats extend this).
struct GraphCounters {
  int64_t captures = 0;       // recordings made (EndWindow succeeded)
  int64_t replays = 0;        // splits launched from a recording
  int64_t direct_splits = 0;  // splits whose nodes the caller launched
  int64_t recaptures = 0;     // recordings dropped for a pool_gen change
};

struct SplitKey {
  uint64_t uid = 0;
  int begin = 0;
  int end = 0;
  auto operator<=>(const SplitKey&) const = default;
};

class GraphRecorder {
 public:
  // Counts into `counters`; neither pointer is owned, both must outlive the
  // recorder.
  GraphRecorder(GraphDevice* device, GraphCounters* counters)
      : device_(device), counters_(counters) {}
  // Destroys the recordings left (the owner normally Drop()s first, after
  // its stream is idle).
  ~GraphRecorder();
  GraphRecorder(const GraphRecorder&) = delete;
  GraphRecorder& operator=(const GraphRecorder&) = delete;

  enum class Outcome {
    kReplayed,   // the split ran from its recording: launch nothing
    kDirect,     // the caller launches the split's nodes
    kCapturing,  // the same, and those launches are being recorded
  };

  // One execution of split `key`. `pool_gen` is the owner's current buffer
  // generation; `graphs` false (graphs forced off, per-op timing) runs it
  // directly without counting a run; `may_capture` false keeps this split
  // from being recorded (prefill capture off) while still counting runs.
  Outcome Run(const SplitKey& key, uint64_t pool_gen, bool graphs, bool may_capture);

  // Closes the window: an open capture is ended, instantiated and launched
  // once, and kept as the split's recording at `pool_gen`. A failure there
  // disables graphs, drops every recording and returns an error saying this
  // step's outputs are undefined (the recorded launches never ran).
  absl::Status EndWindow(uint64_t pool_gen);

  // A node of the capture window failed with `why`: ends the capture
  // launching nothing and restarts the split's run count. Graphs stay
  // enabled (a bad step is not a bad device). No-op without a capture.
  void AbortCapture(const absl::Status& why);

  // Ends an open capture, discarding it, without touching run counts or
  // logging (teardown).
  void DiscardOpenCapture();

  // Destroys every recording and forgets every run count (knob changes,
  // teardown): each split re-warms.
  void Drop();

  bool enabled() const { return enabled_; }
  bool capturing() const { return capturing_.has_value(); }
  // Introspection (tests).
  int runs(const SplitKey& key) const;
  bool recorded(const SplitKey& key) const { return execs_.count(key) != 0; }
  size_t recordings() const { return execs_.size(); }

 private:
  struct Recorded {
    GraphDevice::Exec exec = nullptr;
    uint64_t pool_gen = 0;
  };

  GraphDevice* device_;
  GraphCounters* counters_;
  std::map<SplitKey, Recorded> execs_;
  std::map<SplitKey, int> runs_;
  std::optional<SplitKey> capturing_;
  bool enabled_ = true;
};

}  // namespace minfer::cuda

#endif  // MINFER_CUDA_BACKEND_GRAPH_RECORDER_H_
