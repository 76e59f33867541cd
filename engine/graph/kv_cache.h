// A sequence's KV cache: per layer, two persistent regions on the backend
// that runs that layer's attention. Allocated once per session, never
// returned to the free list while the session lives (so captured graphs can
// keep their addresses), released on destruction.
#ifndef MINFER_ENGINE_GRAPH_KV_CACHE_H_
#define MINFER_ENGINE_GRAPH_KV_CACHE_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/graph/backend.h"

namespace minfer::graph {

class KvCache {
 public:
  // Allocates n_layers x {K, V} regions of `layout` on `backend` (zeroed).
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(Backend* backend, int n_layers,
                                                         KvLayout layout);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  Backend* backend() const { return backend_; }
  const KvLayout& layout() const { return layout_; }
  int n_layers() const { return static_cast<int>(layers_.size()); }
  const KvLayer& layer(int l) const { return layers_[l]; }
  int64_t bytes() const { return 2 * static_cast<int64_t>(layers_.size()) * layout_.row_bytes() * layout_.n_ctx; }

 private:
  KvCache() = default;
  Backend* backend_ = nullptr;
  KvLayout layout_;
  std::vector<KvLayer> layers_;
};

}  // namespace minfer::graph

#endif  // MINFER_ENGINE_GRAPH_KV_CACHE_H_
