#include "cuda/backend/graph_recorder.h"

#include "absl/strings/str_cat.h"
#include "engine/base/logging.h"

namespace minfer::cuda {

GraphRecorder::~GraphRecorder() { Drop(); }

GraphRecorder::Outcome GraphRecorder::Run(const SplitKey& key, uint64_t pool_gen, bool graphs,
                                          bool may_capture) {
  if (!graphs || !enabled_) {
    counters_->direct_splits++;
    return Outcome::kDirect;
  }
  auto it = execs_.find(key);
  if (it != execs_.end()) {
    if (it->second.pool_gen != pool_gen) {
      // Pointers may have moved since the recording: drop it, re-warm and
      // re-capture.
      device_->Destroy(it->second.exec);
      execs_.erase(it);
      runs_.erase(key);
      counters_->recaptures++;
    } else {
      const absl::Status st = device_->Launch(it->second.exec);
      if (st.ok()) {
        counters_->replays++;
        return Outcome::kReplayed;
      }
      Logger("cuda")->error("CUDA: graph replay launch failed ({}); graphs disabled for this backend",
                            st.message());
      enabled_ = false;
      Drop();
      counters_->direct_splits++;
      return Outcome::kDirect;
    }
  }
  const int runs = ++runs_[key];
  counters_->direct_splits++;
  // Runs 1-2 launch directly (warming per-kernel state such as shared-memory
  // opt-ins and scratch), the third records.
  if (runs >= 3 && !capturing_ && may_capture) {
    const absl::Status st = device_->BeginCapture();
    if (!st.ok()) {
      Logger("cuda")->error("CUDA: stream capture unavailable ({}); graphs disabled for this backend",
                            st.message());
      enabled_ = false;
      return Outcome::kDirect;
    }
    capturing_ = key;
    return Outcome::kCapturing;
  }
  return Outcome::kDirect;
}

absl::Status GraphRecorder::EndWindow(uint64_t pool_gen) {
  if (!capturing_) return absl::OkStatus();
  const SplitKey key = *capturing_;
  capturing_.reset();
  absl::StatusOr<GraphDevice::Exec> exec = device_->EndCaptureAndLaunch();
  if (exec.ok()) {
    execs_[key] = {*exec, pool_gen};
    counters_->captures++;
    return absl::OkStatus();
  }
  enabled_ = false;
  Drop();
  // The recorded launches never ran: this step's outputs are undefined.
  absl::Status result = absl::InternalError(absl::StrCat(
      "CUDA: graph capture failed (", exec.status().message(),
      "); graphs disabled for this backend; this step's outputs are undefined "
      "(rerun with MINFER_NO_CUDA_GRAPH=1)"));
  Logger("cuda")->error("{}", result.message());
  return result;
}

void GraphRecorder::AbortCapture(const absl::Status& why) {
  if (!capturing_) return;
  // A node error dooms the window: close it without launching anything, and
  // say so (the step fails; later steps re-warm and may record again).
  device_->DiscardCapture();
  Logger("cuda")->error("CUDA: capture of split {}..{} aborted by a node error: {}",
                        capturing_->begin, capturing_->end, why.message());
  runs_.erase(*capturing_);
  capturing_.reset();
}

void GraphRecorder::DiscardOpenCapture() {
  if (!capturing_) return;
  device_->DiscardCapture();
  capturing_.reset();
}

void GraphRecorder::Drop() {
  for (auto& [key, r] : execs_) device_->Destroy(r.exec);
  execs_.clear();
  runs_.clear();
}

int GraphRecorder::runs(const SplitKey& key) const {
  auto it = runs_.find(key);
  return it == runs_.end() ? 0 : it->second;
}

}  // namespace minfer::cuda
