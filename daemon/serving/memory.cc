#include "daemon/serving/memory.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace minfer::daemon {
namespace {

std::string Bytes(uint64_t b) {
  return absl::StrFormat("%.1f MiB (%d B)", b / 1048576.0, b);
}

}  // namespace

std::string MemoryEstimate::ToString() const {
  return absl::StrCat("weights ", Bytes(weights), " + KV ", Bytes(kv), " + scratch ",
                      Bytes(scratch), " = ", Bytes(total()));
}

namespace {
int64_t ClampCtx(const models::DecoderHparams& hp, int64_t n_ctx) {
  return std::clamp<int64_t>(n_ctx, 2, std::max<int64_t>(hp.context_length, 2));
}
int64_t Blocks(int64_t rows, int64_t bs) { return (rows + bs - 1) / bs; }
}  // namespace

int64_t PoolBlocks(const models::DecoderHparams& hp, const EstimateParams& params) {
  const int64_t bs = std::max<int32_t>(params.kv_block, 1);
  const int64_t n_ctx = ClampCtx(hp, params.n_ctx);
  if (params.kv_tokens > 0) return Blocks(params.kv_tokens, bs) + 1;
  const int64_t seqs = std::clamp<int64_t>(params.parallel, 1, std::max<int64_t>(params.token_budget, 1));
  return seqs * Blocks(n_ctx, bs) + 1;
}

MemoryEstimate EstimateMemory(const gguf::GgufFile& file, const models::DecoderHparams& hp,
                              const EstimateParams& params) {
  MemoryEstimate e;
  for (const gguf::TensorInfo& t : file.tensors()) e.weights += t.nbytes;
  const graph::DType kv_type = params.kv_type.value_or(graph::DType::kF32);
  const uint64_t bs = static_cast<uint64_t>(std::max<int32_t>(params.kv_block, 1));
  e.kv = static_cast<uint64_t>(PoolBlocks(hp, params)) * 2 * static_cast<uint64_t>(hp.n_layer) *
         static_cast<uint64_t>(graph::DTypeBytes(kv_type, hp.n_embd_kv())) * bs;
  const int64_t budget = std::max<int64_t>(params.token_budget, 1);
  const int64_t rows =
      std::min<int64_t>(budget, std::max(params.parallel, 1) + std::max(params.spec_rows, 0));
  e.scratch = models::BatchScratchBound(hp, budget, rows, Blocks(ClampCtx(hp, params.n_ctx), bs));
  return e;
}

absl::StatusOr<HostMemory> ReadHostMemory() {
  std::ifstream in("/proc/meminfo");
  if (!in) return absl::UnavailableError("cannot read /proc/meminfo");
  HostMemory m;
  std::string line;
  bool have_total = false, have_available = false;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string key;
    uint64_t kib = 0;
    ls >> key >> kib;
    if (key == "MemTotal:") {
      m.total = kib * 1024;
      have_total = true;
    } else if (key == "MemAvailable:") {
      m.available = kib * 1024;
      have_available = true;
    }
  }
  if (!have_total || !have_available) {
    return absl::UnavailableError("/proc/meminfo lacks MemTotal or MemAvailable");
  }
  return m;
}

MemoryBudget::MemoryBudget(uint64_t limit) : limit_(limit) {}

absl::Status MemoryBudget::Reserve(const std::string& name, const MemoryEstimate& estimate) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t others = 0;
  for (const auto& [n, bytes] : reserved_) {
    if (n != name) others += bytes;
  }
  uint64_t free_bytes = 0;
  std::string budget;
  if (limit_ > 0) {
    free_bytes = limit_ > others ? limit_ - others : 0;
    budget = absl::StrCat("the memory limit is ", Bytes(limit_), " with ", Bytes(others),
                          " reserved by other models, leaving ", Bytes(free_bytes));
  } else {
    absl::StatusOr<HostMemory> host = ReadHostMemory();
    if (!host.ok()) return host.status();
    free_bytes = host->available;
    budget = absl::StrCat("the host has ", Bytes(host->available), " available of ",
                          Bytes(host->total), " (no --memory-limit set)");
  }
  if (estimate.total() > free_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("model '", name, "' does not fit in memory: it needs ", estimate.ToString(),
                     ", but ", budget));
  }
  reserved_[name] = estimate.total();
  return absl::OkStatus();
}

void MemoryBudget::Shrink(const std::string& name, const MemoryEstimate& estimate) {
  std::lock_guard<std::mutex> lock(mu_);
  if (estimate.total() == 0) {
    reserved_.erase(name);
  } else {
    reserved_[name] = estimate.total();
  }
}

uint64_t MemoryBudget::reserved(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = reserved_.find(name);
  return it == reserved_.end() ? 0 : it->second;
}

void MemoryBudget::Release(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  reserved_.erase(name);
}

uint64_t MemoryBudget::reserved() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t total = 0;
  for (const auto& [n, bytes] : reserved_) total += bytes;
  return total;
}

uint64_t DeviceBudget::UsableLocked(const std::string& name, int32_t device,
                                    uint64_t free_bytes, uint64_t* others) const {
  uint64_t o = 0;
  for (const auto& [n, parts] : pending_) {
    if (n == name) continue;
    for (const Pending& p : parts) o += p.device == device ? p.bytes : 0;
  }
  if (others != nullptr) *others = o;
  const uint64_t taken = o + kHeadroom;
  return free_bytes > taken ? free_bytes - taken : 0;
}

std::string DeviceBudget::Refusal(const std::string& name, const Part& part, uint64_t others,
                                  uint64_t usable) const {
  return absl::StrCat("model '", name, "' does not fit in the memory of ", part.label,
                      ": it needs ", part.estimate.ToString(), ", but the device has ",
                      Bytes(part.free_bytes), " free of ", Bytes(part.total_bytes), ", less ",
                      Bytes(others), " reserved by loads in progress and ", Bytes(kHeadroom),
                      " kept for the CUDA context and graphs, leaving ", Bytes(usable));
}

absl::Status DeviceBudget::Reserve(const std::string& name, int32_t device,
                                   const std::string& label, const MemoryEstimate& estimate,
                                   uint64_t free_bytes, uint64_t total_bytes) {
  return ReserveSplit(name, {Part{device, label, estimate, free_bytes, total_bytes}});
}

absl::Status DeviceBudget::ReserveSplit(const std::string& name, const std::vector<Part>& parts) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string refused;
  for (const Part& part : parts) {
    uint64_t others = 0;
    const uint64_t usable = UsableLocked(name, part.device, part.free_bytes, &others);
    if (part.estimate.total() > usable) {
      absl::StrAppend(&refused, refused.empty() ? "" : "; ", Refusal(name, part, others, usable));
    }
  }
  if (!refused.empty()) return absl::ResourceExhaustedError(refused);
  std::vector<Pending>& mine = pending_[name];
  mine.clear();
  for (const Part& part : parts) mine.push_back(Pending{part.device, part.estimate.total()});
  return absl::OkStatus();
}

void DeviceBudget::Release(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.erase(name);
}

uint64_t DeviceBudget::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t total = 0;
  for (const auto& [n, parts] : pending_) {
    for (const Pending& p : parts) total += p.bytes;
  }
  return total;
}

uint64_t DeviceBudget::pending(int32_t device) const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t total = 0;
  for (const auto& [n, parts] : pending_) {
    for (const Pending& p : parts) total += p.device == device ? p.bytes : 0;
  }
  return total;
}

uint64_t DeviceBudget::Usable(int32_t device, uint64_t free_bytes) const {
  const uint64_t taken = pending(device) + kHeadroom;
  return free_bytes > taken ? free_bytes - taken : 0;
}

}  // namespace minfer::daemon
