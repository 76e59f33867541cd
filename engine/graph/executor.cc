#include "engine/graph/executor.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <map>

#include "absl/strings/str_cat.h"
#include "engine/base/status.h"

namespace minfer::graph {
namespace {

constexpr int64_t kAlign = 256;  // keeps every tensor aligned for SIMD / device loads

int64_t AlignUp(int64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

bool TouchesKv(OpKind op) {
  return op == OpKind::kKvcacheStore || op == OpKind::kAttn ||
         op == OpKind::kQkvBiasRopeStore || op == OpKind::kKvcacheLoad;
}

std::atomic<uint64_t> g_next_uid{1};

}  // namespace

ActivationArena::~ActivationArena() {
  if (buffer_ >= 0) backend_->FreeBuffer(buffer_);
}

absl::StatusOr<int32_t> ActivationArena::Acquire(int64_t bytes) {
  if (bytes > bytes_ || buffer_ < 0) {
    if (users_ > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("activation arena on ", backend_->name(), " holds ", bytes_,
                       " bytes and is in use by ", users_, " graphs; ", bytes, " needed"));
    }
    // Recycled by the backend's pool, never released: a recording may still
    // hold the old address (the backend's pool_gen moves).
    if (buffer_ >= 0) backend_->FreeBuffer(buffer_);
    buffer_ = -1;
    const int64_t want = std::max<int64_t>(AlignUp(bytes), kAlign);
    ASSIGN_OR_RETURN(buffer_, backend_->AllocBuffer(want));
    bytes_ = want;
  }
  ++users_;
  return buffer_;
}

void ActivationArena::Release() { --users_; }

absl::StatusOr<std::unique_ptr<GraphExec>> GraphExec::Create(
    std::shared_ptr<const Graph> graph, std::vector<Backend*> backends, KvCache* kv,
    const std::vector<ActivationArena*>& arenas) {
  if (backends.empty()) return absl::InvalidArgumentError("graph: no backends given");
  std::unique_ptr<GraphExec> e(new GraphExec);
  e->graph_ = std::move(graph);
  e->kv_ = kv;
  e->uid_ = g_next_uid.fetch_add(1);
  e->arena_candidates_ = arenas;  // Plan acquires the ones it uses
  RETURN_IF_ERROR(e->Plan(std::move(backends)));
  return e;
}

GraphExec::~GraphExec() {
  for (const Owned& o : owned_) {
    if (o.buffer >= 0) o.backend->FreeBuffer(o.buffer);
  }
  for (ActivationArena* a : arenas_in_use_) a->Release();
}

absl::Status GraphExec::Plan(std::vector<Backend*> backends) {
  const Graph& g = *graph_;
  const int n = g.size();
  placement_.assign(n, nullptr);
  storage_.assign(n, BufferRef{});
  lifetime_.assign(n, {INT_MAX, -1});

  // --- placement ---------------------------------------------------------
  std::vector<NodeId> root(n, kNoNode);  // storage owner (kNoNode: KV region)
  std::vector<int64_t> root_offset(n, 0);
  for (const Node& node : g.nodes()) {
    const NodeId id = node.id;
    if (TouchesKv(node.op)) {
      if (kv_ == nullptr) {
        return absl::FailedPreconditionError(
            absl::StrCat("graph: node ", node.name, " uses the KV cache but none is bound"));
      }
      if (node.p.layer < 0 || node.p.layer >= kv_->n_layers()) {
        return absl::InvalidArgumentError(absl::StrCat("graph: node ", node.name, " addresses layer ",
                                                       node.p.layer, " of a ", kv_->n_layers(),
                                                       "-layer KV cache"));
      }
    }
    if (node.op == OpKind::kKvcacheLoad) {
      if (node.dtype != kv_->layout().dtype || node.shape.ne[1] != kv_->layout().n_ctx ||
          node.shape.ne[0] != kv_->layout().n_kv_embd) {
        return absl::InvalidArgumentError(absl::StrCat(
            "graph: ", node.name, " expects a ", DTypeName(node.dtype), " cache ",
            node.shape.ToString(), ", bound cache is ", DTypeName(kv_->layout().dtype), " [",
            kv_->layout().n_kv_embd, ",", kv_->layout().n_ctx, "]"));
      }
      placement_[id] = kv_->backend();
      continue;
    }
    if (node.op == OpKind::kView || node.op == OpKind::kReshape) {
      NodeId in = node.inputs[0];
      placement_[id] = placement_[in];
      root[id] = root[in];
      root_offset[id] = root_offset[in] + node.p.view_offset;
      continue;
    }
    root[id] = id;
    if (node.op == OpKind::kInput) continue;  // placed with its first consumer below
    Backend* chosen = nullptr;
    if (TouchesKv(node.op)) {
      if (kv_->backend()->SupportsOp(node)) chosen = kv_->backend();
    } else {
      for (Backend* b : backends) {
        if (b->SupportsOp(node)) {
          chosen = b;
          break;
        }
      }
    }
    if (chosen == nullptr) {
      return absl::UnimplementedError(absl::StrCat(
          "graph: no backend supports node ", node.name, " (", OpName(node.op), ", ",
          DTypeName(node.dtype), node.shape.ToString(), ")",
          TouchesKv(node.op) ? absl::StrCat(" on the KV cache's backend ", kv_->backend()->name())
                             : ""));
    }
    placement_[id] = chosen;
  }
  // Inputs live where they are first consumed (host data is written there).
  for (const Node& node : g.nodes()) {
    for (NodeId in : node.inputs) {
      if (g.node(in).op == OpKind::kInput && placement_[in] == nullptr) {
        placement_[in] = placement_[node.id];
      }
    }
  }
  for (const Node& node : g.nodes()) {
    if (placement_[node.id] == nullptr) {
      // An unused input: keep it on the first backend.
      placement_[node.id] = backends[0];
    }
    // Aliases of inputs inherit the (now known) placement.
    if ((node.op == OpKind::kView || node.op == OpKind::kReshape)) {
      placement_[node.id] = placement_[node.inputs[0]];
    }
  }

  // --- splits ------------------------------------------------------------
  for (int i = 0; i < n; ++i) {
    const Node& node = g.node(i);
    if (node.op == OpKind::kInput) continue;
    if (splits_.empty() || splits_.back().backend != placement_[i]) {
      if (!splits_.empty()) splits_.back().end = i;
      Split s;
      s.backend = placement_[i];
      s.begin = i;
      splits_.push_back(s);
    }
  }
  if (!splits_.empty()) splits_.back().end = n;
  // The first node that reads the mask input's storage (through aliases
  // too): late masks are written right before it.
  mask_reader_ = -1;
  if (g.io.top_mask != kNoNode) {
    for (int i = 0; i < n && mask_reader_ < 0; ++i) {
      const Node& node = g.node(i);
      if (node.op == OpKind::kInput || IsAliasOp(node.op)) continue;
      for (NodeId in : node.inputs) {
        if (in == g.io.top_mask || root[in] == g.io.top_mask) {
          mask_reader_ = i;
          break;
        }
      }
    }
  }

  // --- lifetimes (on roots) -------------------------------------------------
  // Cross-backend consumers read a mirror; key (producer root view, backend).
  struct MirrorKey {
    NodeId node;
    Backend* backend;
    bool operator<(const MirrorKey& o) const {
      return node != o.node ? node < o.node : backend < o.backend;
    }
  };
  struct Mirror {
    int split;
    int first_use;
    int last_use;
    BufferRef ref;
  };
  std::map<MirrorKey, Mirror> mirrors;
  for (size_t s = 0; s < splits_.size(); ++s) {
    for (int i = splits_[s].begin; i < splits_[s].end; ++i) {
      const Node& node = g.node(i);
      if (IsAliasOp(node.op)) continue;
      for (NodeId in : node.inputs) {
        NodeId r = root[in];
        if (r == kNoNode) continue;  // KV region: same backend by construction
        if (placement_[in] != placement_[i]) {
          auto [it, inserted] = mirrors.try_emplace(MirrorKey{in, placement_[i]},
                                                    Mirror{static_cast<int>(s), i, i, {}});
          it->second.last_use = std::max(it->second.last_use, i);
          // The producer must survive until its copy is made.
          lifetime_[r].second = std::max(lifetime_[r].second, splits_[it->second.split].begin);
        } else {
          lifetime_[r].second = std::max(lifetime_[r].second, i);
        }
      }
    }
  }
  for (const Node& node : g.nodes()) {
    if (root[node.id] != node.id) continue;
    lifetime_[node.id].first = node.op == OpKind::kInput ? -1 : node.id;
    if (lifetime_[node.id].second < lifetime_[node.id].first) {
      lifetime_[node.id].second = std::max(node.id, 0);
    }
  }
  // The outputs are read after the run.
  for (NodeId out : {g.io.logits, g.io.top}) {
    if (out == kNoNode) continue;
    NodeId r = root[out];
    if (r == kNoNode) return absl::InvalidArgumentError("graph: an output aliases the KV cache");
    lifetime_[r].second = INT_MAX;
  }

  // --- allocation: greedy best fit per backend over lifetime intervals ----
  struct Tenant {
    int first, last;
    int64_t bytes;
    BufferRef* out;
  };
  std::map<Backend*, std::vector<Tenant>> tenants;
  for (const Node& node : g.nodes()) {
    if (root[node.id] != node.id) continue;
    tenants[placement_[node.id]].push_back({lifetime_[node.id].first, lifetime_[node.id].second,
                                            AlignUp(node.bytes()), &storage_[node.id]});
  }
  for (auto& [key, m] : mirrors) {
    tenants[key.backend].push_back({splits_[m.split].begin, m.last_use,
                                    AlignUp(g.node(key.node).bytes()), &m.ref});
  }
  for (auto& [backend, list] : tenants) {
    std::sort(list.begin(), list.end(),
              [](const Tenant& a, const Tenant& b) { return a.first < b.first; });
    struct VBuf {
      int64_t bytes = 0;
      int busy_until = INT_MIN;
      std::vector<Tenant*> users;
    };
    std::vector<VBuf> vbufs;
    for (Tenant& t : list) {
      int best = -1;
      for (int v = 0; v < static_cast<int>(vbufs.size()); ++v) {
        if (vbufs[v].busy_until >= t.first) continue;  // still occupied
        if (best < 0) {
          best = v;
          continue;
        }
        // Prefer the smallest buffer that fits; else the largest (to grow).
        bool fits = vbufs[v].bytes >= t.bytes, best_fits = vbufs[best].bytes >= t.bytes;
        if ((fits && (!best_fits || vbufs[v].bytes < vbufs[best].bytes)) ||
            (!fits && !best_fits && vbufs[v].bytes > vbufs[best].bytes)) {
          best = v;
        }
      }
      if (best < 0) {
        vbufs.emplace_back();
        best = static_cast<int>(vbufs.size()) - 1;
      }
      VBuf& vb = vbufs[best];
      vb.bytes = std::max(vb.bytes, t.bytes);
      vb.busy_until = t.last;
      vb.users.push_back(&t);
    }
    ActivationArena* arena = nullptr;
    for (ActivationArena* a : arena_candidates_) {
      if (a->backend() == backend) arena = a;
    }
    if (arena != nullptr) {
      // One buffer: the virtual buffers side by side.
      int64_t total = 0;
      for (VBuf& vb : vbufs) total += AlignUp(vb.bytes);
      ASSIGN_OR_RETURN(int32_t id, arena->Acquire(total));
      arenas_in_use_.push_back(arena);  // released by the destructor
      owned_.push_back({backend, -1, total});  // accounted, not owned
      int64_t offset = 0;
      for (VBuf& vb : vbufs) {
        for (Tenant* t : vb.users) *t->out = BufferRef{backend, id, offset, t->bytes};
        offset += AlignUp(vb.bytes);
      }
      continue;
    }
    for (VBuf& vb : vbufs) {
      ASSIGN_OR_RETURN(int32_t id, backend->AllocBuffer(vb.bytes));
      owned_.push_back({backend, id, vb.bytes});
      for (Tenant* t : vb.users) *t->out = BufferRef{backend, id, 0, t->bytes};
    }
  }
  // Exact sizes and alias ranges.
  for (const Node& node : g.nodes()) {
    const NodeId id = node.id;
    if (node.op == OpKind::kKvcacheLoad) {
      const KvLayer& l = kv_->layer(node.p.layer);
      storage_[id] = node.p.kv == KvKind::kK ? l.k : l.v;
      continue;
    }
    if (root[id] == kNoNode) {
      // An alias of a KV region view.
      return absl::InvalidArgumentError(absl::StrCat("graph: ", node.name, " aliases the KV cache"));
    }
    BufferRef ref = storage_[root[id]];
    ref.offset += root_offset[id];
    ref.bytes = node.bytes();
    storage_[id] = ref;
    if (root[id] != id) lifetime_[id] = lifetime_[root[id]];
  }

  // A mirror's range was allocated rounded up (AlignUp); its readers see
  // the producer's exact size, as they would reading the producer itself
  // (kernels derive row lengths from it: TopK on a backend of its own read
  // rows at the rounded stride).
  for (auto& [key, m] : mirrors) m.ref.bytes = g.node(key.node).bytes();

  // --- per-node input references --------------------------------------------
  input_refs_.assign(n, {});
  for (size_t s = 0; s < splits_.size(); ++s) {
    for (int i = splits_[s].begin; i < splits_[s].end; ++i) {
      const Node& node = g.node(i);
      for (NodeId in : node.inputs) {
        auto it = mirrors.find(MirrorKey{in, placement_[i]});
        if (placement_[in] != placement_[i] && it != mirrors.end()) {
          input_refs_[i].push_back(it->second.ref);
        } else {
          input_refs_[i].push_back(storage_[in]);
        }
      }
    }
  }
  for (auto& [key, m] : mirrors) {
    splits_[m.split].copies.push_back({key.node, storage_[key.node], m.ref});
  }
  return absl::OkStatus();
}

int64_t GraphExec::activation_bytes(const Backend* b) const {
  int64_t total = 0;
  for (const Owned& o : owned_) {
    if (o.backend == b) total += o.bytes;
  }
  return total;
}

absl::Status GraphExec::ReadNode(NodeId id, void* dst, int64_t bytes) const {
  const BufferRef& r = storage_[id];
  if (bytes > r.bytes) return absl::InvalidArgumentError("ReadNode: too many bytes");
  return r.backend->ReadHost(r, dst, bytes);
}

absl::Status GraphExec::ReadNodeRange(NodeId id, int64_t offset, void* dst, int64_t bytes) const {
  BufferRef r = storage_[id];
  if (offset < 0 || bytes < 0 || offset + bytes > r.bytes) {
    return absl::InvalidArgumentError(absl::StrCat("ReadNodeRange: [", offset, ", +", bytes,
                                                   ") outside the ", r.bytes, " bytes of node ",
                                                   graph_->node(id).name));
  }
  r.offset += offset;
  r.bytes = bytes;
  return r.backend->ReadHost(r, dst, bytes);
}

absl::Status GraphExec::ExecuteSplit(const Split& s, int cut,
                                     const std::function<absl::Status()>* late) {
  std::vector<uint8_t> staging;
  for (const Split::Copy& c : s.copies) {
    if (uint8_t* src = c.src.backend->HostPtr(c.src)) {
      RETURN_IF_ERROR(c.dst.backend->WriteHost(c.dst, src, c.dst.bytes));
    } else {
      staging.resize(c.dst.bytes);
      RETURN_IF_ERROR(c.src.backend->ReadHost(c.src, staging.data(), c.dst.bytes));
      RETURN_IF_ERROR(c.dst.backend->WriteHost(c.dst, staging.data(), c.dst.bytes));
    }
  }
  absl::Status st;
  if (late == nullptr || cut <= s.begin || cut >= s.end) {
    // Without a late input, or with its reader opening the split (nothing
    // of it to overlap with): the late input first, then the whole split.
    if (late != nullptr) st = (*late)();
    if (st.ok()) st = ExecuteRange(s, s.begin, s.end);
  } else {
    // Issue the nodes before the reader and let the device run them while
    // the host builds the late input; the reader and the rest follow in the
    // same execution window (each part is its own replayable range).
    st = ExecuteRange(s, s.begin, cut);
    if (st.ok()) st = s.backend->Flush();
    if (st.ok()) st = (*late)();
    if (st.ok()) st = ExecuteRange(s, cut, s.end);
  }
  if (!st.ok()) {
    (void)s.backend->Synchronize();  // close any window the split opened
    return st;
  }
  return s.backend->Synchronize();
}

absl::Status GraphExec::ExecuteRange(const Split& s, int begin, int end) {
  const Graph& g = *graph_;
  absl::StatusOr<bool> replay = s.backend->GraphReplay(uid_, begin, end, g.NtHint());
  if (!replay.ok()) return replay.status();
  if (*replay) return absl::OkStatus();
  ExecArgs args;
  if (kv_ != nullptr) args.kv_layout = kv_->layout();
  for (int i = begin; i < end; ++i) {
    const Node& node = g.node(i);
    if (node.op == OpKind::kInput || IsAliasOp(node.op)) continue;
    args.inputs = input_refs_[i];
    args.output = storage_[i];
    args.kv = (kv_ != nullptr && node.p.layer >= 0 && TouchesKv(node.op))
                  ? &kv_->layer(node.p.layer)
                  : nullptr;
    absl::Status st = s.backend->ExecuteNode(node, args);
    if (!st.ok()) return Annotate(st, absl::StrCat(s.backend->name(), " node ", node.name));
  }
  return absl::OkStatus();
}

absl::Status GraphExec::Run(const RunInputs& in, std::vector<float>* logits) {
  const Graph& g = *graph_;
  auto fill = [&](NodeId id, absl::Span<const int32_t> data, const char* what) -> absl::Status {
    if (id == kNoNode) return absl::OkStatus();
    const Node& node = g.node(id);
    if (static_cast<int64_t>(data.size()) != node.shape.elements()) {
      return absl::InvalidArgumentError(absl::StrCat("graph input ", what, ": got ", data.size(),
                                                     " values, graph expects ",
                                                     node.shape.elements()));
    }
    return storage_[id].backend->WriteHost(storage_[id], data.data(), node.bytes());
  };
  RETURN_IF_ERROR(fill(g.io.tokens, in.tokens, "tokens"));
  RETURN_IF_ERROR(fill(g.io.positions, in.positions, "positions"));
  RETURN_IF_ERROR(fill(g.io.out_rows, in.out_rows, "out_rows"));
  RETURN_IF_ERROR(fill(g.io.kv_rows, in.kv_rows, "kv_rows"));
  RETURN_IF_ERROR(fill(g.io.attn_tiles, in.attn_tiles, "attn_tiles"));
  RETURN_IF_ERROR(fill(g.io.block_tables, in.block_tables, "block_tables"));
  RETURN_IF_ERROR(fill(g.io.top_mode, in.top_mode, "top_mode"));
  auto write_mask = [&](absl::Span<const uint32_t> mask) -> absl::Status {
    if (mask.empty()) return absl::OkStatus();
    const int64_t words = static_cast<int64_t>(mask.size());
    if (g.io.top_mask == kNoNode || words > g.node(g.io.top_mask).shape.elements()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "graph input top_mask: got ", words, " words, graph holds ",
          g.io.top_mask == kNoNode ? 0 : g.node(g.io.top_mask).shape.elements()));
    }
    const BufferRef& r = storage_[g.io.top_mask];
    return r.backend->WriteHost(r, mask.data(), words * 4);
  };
  if (in.late_top_mask && !in.top_mask.empty()) {
    return absl::InvalidArgumentError("graph inputs: both top_mask and late_top_mask are set");
  }
  RETURN_IF_ERROR(write_mask(in.top_mask));
  if (!in.late_top_mask) {
    for (const Split& s : splits_) RETURN_IF_ERROR(ExecuteSplit(s));
  } else {
    const std::function<absl::Status()> late = [&]() -> absl::Status {
      absl::StatusOr<absl::Span<const uint32_t>> mask = in.late_top_mask();
      if (!mask.ok()) return mask.status();
      return write_mask(*mask);
    };
    // No reader: the callback still runs once, first (its caller may read
    // what it fills after the step).
    if (mask_reader_ < 0) RETURN_IF_ERROR(late());
    for (const Split& s : splits_) {
      const bool holds = mask_reader_ >= s.begin && mask_reader_ < s.end;
      RETURN_IF_ERROR(ExecuteSplit(s, holds ? mask_reader_ : -1, holds ? &late : nullptr));
    }
  }
  if (logits != nullptr && g.io.logits != kNoNode) {
    const Node& ln = g.node(g.io.logits);
    logits->resize(ln.shape.elements());
    RETURN_IF_ERROR(storage_[ln.id].backend->ReadHost(storage_[ln.id], logits->data(), ln.bytes()));
  }
  return absl::OkStatus();
}

}  // namespace minfer::graph
