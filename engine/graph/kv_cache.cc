#include "engine/graph/kv_cache.h"

#include "engine/base/status.h"

namespace minfer::graph {

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(Backend* backend, int n_layers,
                                                         KvLayout layout) {
  std::unique_ptr<KvCache> kv(new KvCache);
  kv->backend_ = backend;
  kv->layout_ = layout;
  const int64_t bytes = layout.row_bytes() * layout.n_ctx;
  for (int l = 0; l < n_layers; ++l) {
    KvLayer layer;
    for (BufferRef* r : {&layer.k, &layer.v}) {
      ASSIGN_OR_RETURN(int32_t id, backend->AllocBuffer(bytes));
      *r = BufferRef{backend, id, 0, bytes};
      // Zeroed so stale values can never look like valid history.
      RETURN_IF_ERROR(backend->Fill(*r, 0));
    }
    kv->layers_.push_back(layer);
  }
  return kv;
}

KvCache::~KvCache() {
  for (const KvLayer& l : layers_) {
    if (l.k.valid()) backend_->FreeBuffer(l.k.buffer);
    if (l.v.valid()) backend_->FreeBuffer(l.v.buffer);
  }
}

}  // namespace minfer::graph
