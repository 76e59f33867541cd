#include "cuda/comm/nccl.h"

#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace minfer::cuda {
namespace {

// NCCL's entry points, resolved from the library at the first use. Their
// types come from nccl.h (declarations only: nothing links against NCCL).
struct Nccl {
  absl::Status loaded = absl::FailedPreconditionError("NCCL not loaded");
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclCommInitAll) comm_init_all = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
};

const Nccl& Library() {
  static const Nccl* lib = [] {
    auto* n = new Nccl;
    const char* env = std::getenv("MINFER_NCCL_LIBRARY");
    const std::string path = env != nullptr && *env != '\0' ? env : "libnccl.so.2";
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* why = dlerror();
      n->loaded = absl::FailedPreconditionError(
          absl::StrCat("NCCL (", path, ") did not load: ", why != nullptr ? why : "unknown error",
                       "; install NCCL 2 or set MINFER_NCCL_LIBRARY to its libnccl.so.2"));
      return n;
    }
    bool ok = true;
    auto sym = [&](auto* fn, const char* name) {
      void* p = dlsym(h, name);
      if (p == nullptr) ok = false;
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(p);
    };
    sym(&n->get_version, "ncclGetVersion");
    sym(&n->comm_init_all, "ncclCommInitAll");
    sym(&n->comm_destroy, "ncclCommDestroy");
    sym(&n->comm_abort, "ncclCommAbort");
    sym(&n->all_reduce, "ncclAllReduce");
    sym(&n->group_start, "ncclGroupStart");
    sym(&n->group_end, "ncclGroupEnd");
    sym(&n->error_string, "ncclGetErrorString");
    n->loaded = ok ? absl::OkStatus()
                   : absl::FailedPreconditionError(
                         absl::StrCat(path, " lacks an NCCL 2 entry point (not NCCL?)"));
    return n;
  }();
  return *lib;
}

absl::Status Check(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return absl::OkStatus();
  const Nccl& n = Library();
  return absl::InternalError(absl::StrCat("NCCL ", what, " failed: ",
                                          n.error_string != nullptr ? n.error_string(r) : "",
                                          " (", static_cast<int>(r), ")"));
}

ncclDataType_t ToNccl(NcclType t) {
  switch (t) {
    case NcclType::kF32: return ncclFloat32;
    case NcclType::kF16: return ncclFloat16;
    case NcclType::kBF16: return ncclBfloat16;
  }
  return ncclFloat32;
}

}  // namespace

absl::Status NcclAvailable() { return Library().loaded; }

absl::StatusOr<std::string> NcclVersion() {
  const Nccl& n = Library();
  if (!n.loaded.ok()) return n.loaded;
  int v = 0;
  if (absl::Status s = Check(n.get_version(&v), "ncclGetVersion"); !s.ok()) return s;
  // NCCL_VERSION(X, Y, Z) = X * 10000 + Y * 100 + Z since 2.9.
  return absl::StrCat(v / 10000, ".", v / 100 % 100, ".", v % 100);
}

absl::StatusOr<std::unique_ptr<NcclGroup>> NcclGroup::Create(const std::vector<int>& devices) {
  if (devices.empty()) return absl::InvalidArgumentError("an NCCL group needs at least one device");
  std::vector<int> sorted = devices;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    return absl::InvalidArgumentError("an NCCL group's devices must be distinct");
  }
  const Nccl& n = Library();
  if (!n.loaded.ok()) return n.loaded;
  // Multicast objects are not used (and must stay off on the lent machines).
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  std::unique_ptr<NcclGroup> g(new NcclGroup);
  g->devices_ = devices;
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  if (absl::Status s = Check(n.comm_init_all(comms.data(), static_cast<int>(devices.size()),
                                             devices.data()),
                             "ncclCommInitAll");
      !s.ok()) {
    return s;
  }
  g->comms_.assign(comms.begin(), comms.end());
  return g;
}

NcclGroup::~NcclGroup() {
  const Nccl& n = Library();
  if (!n.loaded.ok()) return;
  std::lock_guard<std::mutex> lock(abort_mu_);
  if (aborted_.load()) return;  // ncclCommAbort freed them
  for (void* c : comms_) {
    if (c != nullptr) n.comm_destroy(static_cast<ncclComm_t>(c));
  }
}

void NcclGroup::Abort() {
  std::lock_guard<std::mutex> lock(abort_mu_);
  if (aborted_.exchange(true)) return;
  const Nccl& n = Library();
  if (!n.loaded.ok()) return;
  for (void* c : comms_) {
    if (c != nullptr) n.comm_abort(static_cast<ncclComm_t>(c));
  }
}

absl::Status NcclGroup::AllReduceSum(int rank, void* buf, size_t count, NcclType type,
                                     cudaStream_t stream) {
  return AllReduceSum(rank, buf, buf, count, type, stream);
}

absl::Status NcclGroup::AllReduceSum(int rank, const void* send, void* recv, size_t count,
                                     NcclType type, cudaStream_t stream) {
  if (rank < 0 || rank >= size()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " of a group of ", size()));
  }
  if (aborted_.load()) {
    return absl::FailedPreconditionError("the NCCL communicators were aborted after a rank failed");
  }
  const Nccl& n = Library();
  return Check(n.all_reduce(send, recv, count, ToNccl(type), ncclSum,
                            static_cast<ncclComm_t>(comms_[rank]), stream),
               "ncclAllReduce");
}

absl::Status NcclGroup::GroupStart() {
  const Nccl& n = Library();
  if (!n.loaded.ok()) return n.loaded;
  return Check(n.group_start(), "ncclGroupStart");
}

absl::Status NcclGroup::GroupEnd() {
  const Nccl& n = Library();
  if (!n.loaded.ok()) return n.loaded;
  return Check(n.group_end(), "ncclGroupEnd");
}

}  // namespace minfer::cuda
