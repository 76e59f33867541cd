#include "engine/graph/graph.h"

#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace minfer::graph {

const char* OpName(OpKind op) {
  switch (op) {
    case OpKind::kInput: return "Input";
    case OpKind::kAdd: return "Add";
    case OpKind::kMul: return "Mul";
    case OpKind::kScale: return "Scale";
    case OpKind::kSilu: return "Silu";
    case OpKind::kSwiGLU: return "SwiGLU";
    case OpKind::kSoftmax: return "Softmax";
    case OpKind::kRmsNorm: return "RmsNorm";
    case OpKind::kQkNorm: return "QkNorm";
    case OpKind::kMatMul: return "MatMul";
    case OpKind::kRoPE: return "RoPE";
    case OpKind::kKvcacheStore: return "KvcacheStore";
    case OpKind::kKvcacheLoad: return "KvcacheLoad";
    case OpKind::kAttn: return "Attn";
    case OpKind::kView: return "View";
    case OpKind::kReshape: return "Reshape";
    case OpKind::kPermute: return "Permute";
    case OpKind::kGetRows: return "GetRows";
    case OpKind::kFusedQKV: return "FusedQKV";
    case OpKind::kQkvBiasRopeStore: return "QkvBiasRopeStore";
    case OpKind::kFusedFFN: return "FusedFFN";
    case OpKind::kTopK: return "TopK";
    case OpKind::kMoeRoute: return "MoeRoute";
    case OpKind::kMoeFFN: return "MoeFFN";
    case OpKind::kAllReduce: return "AllReduce";
  }
  return "?";
}

int64_t Graph::NtHint() const {
  for (const Node& n : nodes_) {
    if (n.op == OpKind::kMatMul || n.op == OpKind::kFusedQKV || n.op == OpKind::kFusedFFN) {
      return n.shape.ne[1];
    }
  }
  return 0;
}

std::string Graph::DebugString() const {
  std::ostringstream os;
  for (const Node& n : nodes_) {
    os << n.id << ": " << OpName(n.op) << " " << n.name << " " << DTypeName(n.dtype)
       << n.shape.ToString() << " <- (" << absl::StrJoin(n.inputs, ",") << ")";
    for (const Weight* w : n.weights) {
      if (w) os << " w:" << w->name;
    }
    os << "\n";
  }
  return os.str();
}

bool GraphBuilder::Check(bool cond, const std::string& op_name, const std::string& what) {
  if (!cond && status_.ok()) {
    status_ = absl::InvalidArgumentError(absl::StrCat("graph: ", op_name, ": ", what));
  }
  return cond && status_.ok();
}

bool GraphBuilder::Valid(NodeId id) {
  return Check(id >= 0 && id < static_cast<NodeId>(g_.nodes_.size()), "builder",
               absl::StrCat("invalid node id ", id));
}

NodeId GraphBuilder::Push(Node n) {
  if (!status_.ok()) return kNoNode;
  n.id = static_cast<NodeId>(g_.nodes_.size());
  if (n.name.empty()) n.name = absl::StrCat(OpName(n.op), "#", n.id);
  g_.nodes_.push_back(std::move(n));
  return g_.nodes_.back().id;
}

NodeId GraphBuilder::Input(DType dtype, Shape shape, std::string name) {
  Node n;
  n.op = OpKind::kInput;
  n.dtype = dtype;
  n.shape = shape;
  n.name = std::move(name);
  return Push(std::move(n));
}

NodeId GraphBuilder::Binary(OpKind op, NodeId a, NodeId b, const Weight* w, std::string name) {
  if (!Valid(a)) return kNoNode;
  const Node& na = node(a);
  std::string label = absl::StrCat(OpName(op), " ", name);
  Shape bs;
  if (w != nullptr) {
    if (!Check(w->type == GgmlType::kF32, label, absl::StrCat("weight ", w->name, " must be f32")))
      return kNoNode;
    bs = Shape(w->ne0(), w->rows());
  } else {
    if (!Valid(b)) return kNoNode;
    bs = node(b).shape;
  }
  bool same = bs == na.shape;
  bool row_broadcast = bs.ne[0] == na.shape.ne[0] && bs.rows() == 1;
  if (!Check(na.dtype == DType::kF32 && (same || row_broadcast), label,
             absl::StrCat("shapes ", na.shape.ToString(), " and ", bs.ToString(),
                          " do not broadcast")))
    return kNoNode;
  Node n;
  n.op = op;
  n.shape = na.shape;
  n.inputs = {a};
  if (w != nullptr) {
    n.weights = {w};
  } else {
    n.inputs.push_back(b);
  }
  n.name = std::move(name);
  return Push(std::move(n));
}

NodeId GraphBuilder::Add(NodeId a, NodeId b, std::string name) {
  return Binary(OpKind::kAdd, a, b, nullptr, std::move(name));
}
NodeId GraphBuilder::Add(NodeId a, const Weight* b, std::string name) {
  return Binary(OpKind::kAdd, a, kNoNode, b, std::move(name));
}
NodeId GraphBuilder::Mul(NodeId a, NodeId b, std::string name) {
  return Binary(OpKind::kMul, a, b, nullptr, std::move(name));
}
NodeId GraphBuilder::Mul(NodeId a, const Weight* b, std::string name) {
  return Binary(OpKind::kMul, a, kNoNode, b, std::move(name));
}

namespace {
Node Unary(OpKind op, const Node& in, std::string name) {
  Node n;
  n.op = op;
  n.shape = in.shape;
  n.inputs = {in.id};
  n.name = std::move(name);
  return n;
}
}  // namespace

NodeId GraphBuilder::Scale(NodeId a, float s, std::string name) {
  if (!Valid(a)) return kNoNode;
  Node n = Unary(OpKind::kScale, node(a), std::move(name));
  n.p.scale = s;
  return Push(std::move(n));
}

NodeId GraphBuilder::AllReduce(NodeId x, std::string name) {
  if (!Valid(x)) return kNoNode;
  if (!Check(node(x).dtype == DType::kF32, "AllReduce " + name, "input must be f32")) return kNoNode;
  return Push(Unary(OpKind::kAllReduce, node(x), std::move(name)));
}

NodeId GraphBuilder::Silu(NodeId a, std::string name) {
  if (!Valid(a)) return kNoNode;
  return Push(Unary(OpKind::kSilu, node(a), std::move(name)));
}

NodeId GraphBuilder::SwiGLU(NodeId g, NodeId u, std::string name) {
  if (!Valid(g) || !Valid(u)) return kNoNode;
  if (!Check(node(g).shape == node(u).shape, "SwiGLU " + name,
             absl::StrCat("gate ", node(g).shape.ToString(), " vs up ", node(u).shape.ToString())))
    return kNoNode;
  Node n = Unary(OpKind::kSwiGLU, node(g), std::move(name));
  n.inputs.push_back(u);
  return Push(std::move(n));
}

NodeId GraphBuilder::Softmax(NodeId a, std::string name) {
  if (!Valid(a)) return kNoNode;
  return Push(Unary(OpKind::kSoftmax, node(a), std::move(name)));
}

NodeId GraphBuilder::RmsNorm(NodeId x, const Weight* w, float eps, std::string name) {
  if (!Valid(x)) return kNoNode;
  const Node& nx = node(x);
  if (w != nullptr &&
      !Check(w->type == GgmlType::kF32 && w->ne0() == nx.shape.ne[0] && w->rows() == 1,
             "RmsNorm " + name,
             absl::StrCat("weight ", w->name, " must be f32 [", nx.shape.ne[0], "]")))
    return kNoNode;
  Node n = Unary(OpKind::kRmsNorm, nx, std::move(name));
  if (w) n.weights = {w};
  n.p.eps = eps;
  return Push(std::move(n));
}

NodeId GraphBuilder::QkNorm(NodeId x, const Weight* w, float eps, std::string name) {
  if (!Valid(x)) return kNoNode;
  const Node& nx = node(x);
  if (!Check(w != nullptr && w->type == GgmlType::kF32 && w->ne0() == nx.shape.ne[0],
             "QkNorm " + name, absl::StrCat("needs an f32 [", nx.shape.ne[0], "] weight")))
    return kNoNode;
  Node n = Unary(OpKind::kQkNorm, nx, std::move(name));
  n.weights = {w};
  n.p.eps = eps;
  return Push(std::move(n));
}

NodeId GraphBuilder::MatMul(NodeId x, const Weight* w, std::string name) {
  if (!Valid(x)) return kNoNode;
  const Node& nx = node(x);
  std::string label = "MatMul " + name;
  if (!Check(w != nullptr && w->dims.size() == 2, label, "needs a 2-D weight")) return kNoNode;
  if (!Check(nx.dtype == DType::kF32 && nx.shape.ne[0] == w->ne0() && nx.shape.ne[2] == 1 &&
                 nx.shape.ne[3] == 1,
             label,
             absl::StrCat("input ", nx.shape.ToString(), " does not match weight ", w->name, " [",
                          w->dims[0], ",", w->dims[1], "]")))
    return kNoNode;
  Node n;
  n.op = OpKind::kMatMul;
  n.shape = Shape(w->dims[1], nx.shape.ne[1]);
  n.inputs = {x};
  n.weights = {w};
  n.name = std::move(name);
  return Push(std::move(n));
}

NodeId GraphBuilder::RoPE(NodeId x, NodeId pos, RopeStyle style, float base, int n_rot,
                          std::string name, const Weight* factors, const RopeYarn& yarn) {
  if (!Valid(x) || !Valid(pos)) return kNoNode;
  const Node& nx = node(x);
  const Node& np = node(pos);
  int64_t hd = nx.shape.ne[0];
  if (n_rot == 0) n_rot = static_cast<int>(hd);
  if (!Check(np.dtype == DType::kI32 && np.shape.elements() == nx.shape.ne[2] &&
                 n_rot % 2 == 0 && n_rot <= hd,
             "RoPE " + name,
             absl::StrCat("x ", nx.shape.ToString(), " needs i32 positions [", nx.shape.ne[2],
                          "] and an even n_rot <= head_dim (n_rot ", n_rot, ")")))
    return kNoNode;
  if (!Check(factors == nullptr || (factors->type == GgmlType::kF32 && factors->dims.size() == 1 &&
                                    factors->ne0() == n_rot / 2),
             "RoPE " + name, absl::StrCat("frequency factors must be f32 [", n_rot / 2, "]")))
    return kNoNode;
  Node n = Unary(OpKind::kRoPE, nx, std::move(name));
  if (factors != nullptr) n.weights = {factors};
  n.inputs.push_back(pos);
  n.p.rope_style = style;
  n.p.rope_base = base;
  n.p.n_rot = n_rot;
  n.p.yarn = yarn;
  return Push(std::move(n));
}

NodeId GraphBuilder::KvcacheStore(NodeId k, NodeId v, NodeId pos, int layer, std::string name) {
  if (!Valid(k) || !Valid(v) || !Valid(pos)) return kNoNode;
  const Node& nk = node(k);
  if (!Check(nk.shape.elements() == node(v).shape.elements() &&
                 nk.shape.elements() % node(pos).shape.elements() == 0 &&
                 node(pos).dtype == DType::kI32 && layer >= 0,
             "KvcacheStore " + name,
             absl::StrCat("k ", nk.shape.ToString(), ", v ", node(v).shape.ToString(), ", pos ",
                          node(pos).shape.ToString(), ", layer ", layer)))
    return kNoNode;
  Node n;
  n.op = OpKind::kKvcacheStore;
  n.shape = Shape(1);
  n.inputs = {k, v, pos};
  n.p.layer = layer;
  n.name = std::move(name);
  return Push(std::move(n));
}

NodeId GraphBuilder::KvcacheLoad(NodeId store, int layer, KvKind kv, Shape shape, DType dtype,
                                 std::string name) {
  if (!Valid(store)) return kNoNode;
  OpKind so = node(store).op;
  if (!Check((so == OpKind::kKvcacheStore || so == OpKind::kQkvBiasRopeStore) &&
                 node(store).p.layer == layer,
             "KvcacheLoad " + name, "must follow the same layer's KV store"))
    return kNoNode;
  Node n;
  n.op = OpKind::kKvcacheLoad;
  n.dtype = dtype;
  n.shape = shape;
  n.inputs = {store};
  n.p.layer = layer;
  n.p.kv = kv;
  n.name = std::move(name);
  return Push(std::move(n));
}

NodeId GraphBuilder::Attn(NodeId q, NodeId k_cache, NodeId v_cache, NodeId pos, int n_head,
                          int n_head_kv, int head_dim, float scale, int layer, std::string name) {
  if (!Valid(q) || !Valid(k_cache) || !Valid(v_cache) || !Valid(pos)) return kNoNode;
  const Node& nq = node(q);
  std::string label = "Attn " + name;
  if (!Check(n_head > 0 && n_head_kv > 0 && n_head % n_head_kv == 0, label,
             absl::StrCat("n_head ", n_head, " is not a multiple of n_head_kv ", n_head_kv)))
    return kNoNode;
  if (!Check(nq.shape.ne[0] == head_dim && nq.shape.ne[1] == n_head, label,
             absl::StrCat("q ", nq.shape.ToString(), " is not [", head_dim, ",", n_head, ",nt]")))
    return kNoNode;
  const Node& nk = node(k_cache);
  if (!Check(nk.shape.ne[0] == static_cast<int64_t>(n_head_kv) * head_dim &&
                 node(v_cache).shape == nk.shape,
             label,
             absl::StrCat("K cache ", nk.shape.ToString(), " is not [n_head_kv*head_dim = ",
                          n_head_kv * head_dim, ", n_ctx]")))
    return kNoNode;
  if (!Check(node(pos).shape.elements() == nq.shape.ne[2], label, "positions do not match q"))
    return kNoNode;
  Node n;
  n.op = OpKind::kAttn;
  n.shape = Shape(static_cast<int64_t>(head_dim) * n_head, nq.shape.ne[2]);
  n.inputs = {q, k_cache, v_cache, pos};
  n.p.n_head = n_head;
  n.p.n_head_kv = n_head_kv;
  n.p.head_dim = head_dim;
  n.p.scale = scale;
  n.p.layer = layer;
  n.name = std::move(name);
  return Push(std::move(n));
}

NodeId GraphBuilder::PagedAttn(NodeId q, NodeId k_cache, NodeId v_cache, NodeId pos,
                               NodeId tiles, NodeId tables, int kv_block, int n_head,
                               int n_head_kv, int head_dim, float scale, int layer,
                               std::string name, bool single_token_tiles, int window,
                               const Weight* sinks) {
  if (!Valid(tiles) || !Valid(tables)) return kNoNode;
  const std::string label = "Attn " + name;
  const Node& nt = node(tiles);
  const Node& nb = node(tables);
  if (!Check(nt.dtype == DType::kI32 && nt.shape.ne[0] == 4 && nt.shape.ne[2] == 1 &&
                 nb.dtype == DType::kI32 && nb.shape.ne[2] == 1 && nb.shape.ne[0] >= 1,
             label, "tiles must be i32 [4, n_tiles] and tables i32 [max_blocks, n_rows]"))
    return kNoNode;
  if (!Check(kv_block > 0 && (kv_block & (kv_block - 1)) == 0, label,
             absl::StrCat("kv_block ", kv_block, " is not a power of two")))
    return kNoNode;
  if (!Check(window >= 0, label, absl::StrCat("window ", window, " is negative"))) return kNoNode;
  if (!Check(sinks == nullptr || (sinks->type == GgmlType::kF32 && sinks->dims.size() == 1 &&
                                  sinks->ne0() == n_head),
             label, absl::StrCat("sinks must be f32 [", n_head, "]")))
    return kNoNode;
  NodeId id = Attn(q, k_cache, v_cache, pos, n_head, n_head_kv, head_dim, scale, layer,
                   std::move(name));
  if (id == kNoNode) return kNoNode;
  Node& n = g_.nodes_[id];
  n.inputs.push_back(tiles);
  n.inputs.push_back(tables);
  n.p.kv_block = kv_block;
  n.p.max_blocks = static_cast<int32_t>(nb.shape.ne[0]);
  n.p.single_token_tiles = single_token_tiles;
  n.p.attn_window = window;
  if (sinks != nullptr) n.weights = {sinks};
  return id;
}

NodeId GraphBuilder::View(NodeId x, Shape shape, int64_t byte_offset, std::string name) {
  if (!Valid(x)) return kNoNode;
  const Node& nx = node(x);
  int64_t bytes = DTypeBytes(nx.dtype, shape.elements());
  if (!Check(byte_offset >= 0 && byte_offset + bytes <= nx.bytes() && byte_offset % 4 == 0,
             "View " + name,
             absl::StrCat("range [", byte_offset, ", +", bytes, ") outside ", nx.bytes(),
                          " bytes of ", nx.name)))
    return kNoNode;
  Node n = Unary(OpKind::kView, nx, std::move(name));
  n.dtype = nx.dtype;
  n.shape = shape;
  n.p.view_offset = byte_offset;
  return Push(std::move(n));
}

NodeId GraphBuilder::Reshape(NodeId x, Shape shape, std::string name) {
  if (!Valid(x)) return kNoNode;
  const Node& nx = node(x);
  if (!Check(shape.elements() == nx.shape.elements(), "Reshape " + name,
             absl::StrCat(nx.shape.ToString(), " -> ", shape.ToString(), " changes the size")))
    return kNoNode;
  Node n = Unary(OpKind::kReshape, nx, std::move(name));
  n.dtype = nx.dtype;
  n.shape = shape;
  return Push(std::move(n));
}

NodeId GraphBuilder::Permute(NodeId x, std::array<int8_t, 4> perm, std::string name) {
  if (!Valid(x)) return kNoNode;
  const Node& nx = node(x);
  bool seen[4] = {false, false, false, false};
  bool ok = true;
  for (int8_t a : perm) {
    if (a < 0 || a > 3 || seen[a]) ok = false;
    if (a >= 0 && a <= 3) seen[a] = true;
  }
  if (!Check(ok && nx.dtype == DType::kF32, "Permute " + name, "axes must permute 0..3"))
    return kNoNode;
  Node n = Unary(OpKind::kPermute, nx, std::move(name));
  for (int i = 0; i < 4; ++i) n.shape.ne[perm[i]] = nx.shape.ne[i];
  n.p.perm = perm;
  return Push(std::move(n));
}

NodeId GraphBuilder::GetRows(NodeId src, NodeId ids, std::string name) {
  if (!Valid(src) || !Valid(ids)) return kNoNode;
  const Node& ns = node(src);
  const Node& ni = node(ids);
  if (!Check(ni.dtype == DType::kI32 && ns.dtype == DType::kF32 && ns.shape.ne[2] == 1,
             "GetRows " + name, "needs an f32 [ne0, rows] source and i32 ids"))
    return kNoNode;
  Node n;
  n.op = OpKind::kGetRows;
  n.shape = Shape(ns.shape.ne[0], ni.shape.elements());
  n.inputs = {src, ids};
  n.name = std::move(name);
  return Push(std::move(n));
}

NodeId GraphBuilder::GetRows(const Weight* src, NodeId ids, std::string name) {
  if (!Valid(ids)) return kNoNode;
  const Node& ni = node(ids);
  if (!Check(src != nullptr && src->dims.size() == 2 && ni.dtype == DType::kI32,
             "GetRows " + name, "needs a 2-D weight and i32 ids"))
    return kNoNode;
  Node n;
  n.op = OpKind::kGetRows;
  n.shape = Shape(src->ne0(), ni.shape.elements());
  n.inputs = {ids};
  n.weights = {src};
  n.name = std::move(name);
  return Push(std::move(n));
}

NodeId GraphBuilder::FusedQKV(NodeId x, const Weight* wq, const Weight* wk, const Weight* wv,
                              std::string name) {
  if (!Valid(x)) return kNoNode;
  const Node& nx = node(x);
  std::string label = "FusedQKV " + name;
  for (const Weight* w : {wq, wk, wv}) {
    if (!Check(w != nullptr && w->dims.size() == 2 && w->ne0() == nx.shape.ne[0], label,
               "weights must be [n_in, n_out] matching the input"))
      return kNoNode;
  }
  if (!Check(nx.shape.ne[2] == 1 && nx.shape.ne[3] == 1 && nx.shape.ne[1] >= 1, label,
             "input must be [n_in, nt]"))
    return kNoNode;
  Node n;
  n.op = OpKind::kFusedQKV;
  n.shape = Shape(wq->dims[1] + wk->dims[1] + wv->dims[1], nx.shape.ne[1]);
  n.inputs = {x};
  n.weights = {wq, wk, wv};
  n.name = std::move(name);
  return Push(std::move(n));
}

NodeId GraphBuilder::QkvBiasRopeStore(std::vector<NodeId> qkv, const Weight* bq,
                                      const Weight* bk, const Weight* bv, NodeId pos, int n_head,
                                      int n_head_kv, int head_dim, RopeStyle style, float base,
                                      int layer, std::string name, NodeId rows,
                                      const Weight* rope_factors, const Weight* q_norm,
                                      const Weight* k_norm, float norm_eps,
                                      const RopeYarn& yarn) {
  std::string label = "QkvBiasRopeStore " + name;
  if (!Check(qkv.size() == 1 || qkv.size() == 3, label, "needs qkv or q, k, v")) return kNoNode;
  for (NodeId id : qkv) {
    if (!Valid(id)) return kNoNode;
  }
  if (!Valid(pos)) return kNoNode;
  int64_t nq = static_cast<int64_t>(n_head) * head_dim;
  int64_t nkv = static_cast<int64_t>(n_head_kv) * head_dim;
  int64_t total = 0;
  for (NodeId id : qkv) total += node(id).shape.elements();
  const int64_t nt = node(pos).shape.elements();
  if (!Check(nt >= 1 && total == (nq + 2 * nkv) * nt, label,
             absl::StrCat("expects ", nq + 2 * nkv, " q/k/v values for each of ", nt,
                          " tokens, got ", total)))
    return kNoNode;
  auto bias_ok = [&](const Weight* b, int64_t n) {
    return b == nullptr || (b->type == GgmlType::kF32 && b->ne0() == n);
  };
  if (!Check(bias_ok(bq, nq) && bias_ok(bk, nkv) && bias_ok(bv, nkv), label,
             "biases must be f32 and match q/k/v"))
    return kNoNode;
  if (!Check(rope_factors == nullptr ||
                 (rope_factors->type == GgmlType::kF32 && rope_factors->dims.size() == 1 &&
                  rope_factors->ne0() == head_dim / 2),
             label, absl::StrCat("RoPE frequency factors must be f32 [", head_dim / 2, "]")))
    return kNoNode;
  auto norm_ok = [&](const Weight* w) {
    return w != nullptr && w->type == GgmlType::kF32 && w->ne0() == head_dim;
  };
  if (!Check((q_norm == nullptr && k_norm == nullptr) || (norm_ok(q_norm) && norm_ok(k_norm)),
             label, absl::StrCat("q/k norm weights must both be f32 [", head_dim, "] or both absent")))
    return kNoNode;
  Node n;
  n.op = OpKind::kQkvBiasRopeStore;
  n.shape = Shape(head_dim, n_head, nt);
  if (rows != kNoNode) {
    if (!Valid(rows)) return kNoNode;
    if (!Check(node(rows).dtype == DType::kI32 && node(rows).shape.elements() == nt, label,
               "rows must be i32 [nt]"))
      return kNoNode;
  }
  n.inputs = qkv;
  n.inputs.push_back(pos);
  if (rows != kNoNode) n.inputs.push_back(rows);
  n.weights = {bq, bk, bv};
  if (rope_factors != nullptr || q_norm != nullptr) n.weights.push_back(rope_factors);
  if (q_norm != nullptr) {
    n.weights.push_back(q_norm);
    n.weights.push_back(k_norm);
    n.p.eps = norm_eps;
  }
  n.p.n_head = n_head;
  n.p.n_head_kv = n_head_kv;
  n.p.head_dim = head_dim;
  n.p.rope_style = style;
  n.p.rope_base = base;
  n.p.n_rot = head_dim;
  n.p.yarn = yarn;
  n.p.layer = layer;
  n.name = std::move(name);
  return Push(std::move(n));
}

NodeId GraphBuilder::FusedFFN(NodeId x, const Weight* wgate, const Weight* wup, std::string name) {
  if (!Valid(x)) return kNoNode;
  const Node& nx = node(x);
  std::string label = "FusedFFN " + name;
  if (!Check(wgate && wup && wgate->dims.size() == 2 && wup->dims.size() == 2 &&
                 wgate->ne0() == nx.shape.ne[0] && wup->ne0() == nx.shape.ne[0] &&
                 wgate->dims[1] == wup->dims[1],
             label, "gate/up weights must match each other and the input"))
    return kNoNode;
  if (!Check(nx.shape.ne[1] >= 1 && nx.shape.ne[2] == 1, label, "input must be [n_embd, nt]"))
    return kNoNode;
  Node n;
  n.op = OpKind::kFusedFFN;
  n.shape = Shape(wgate->dims[1], nx.shape.ne[1]);
  n.inputs = {x};
  n.weights = {wgate, wup};
  n.name = std::move(name);
  return Push(std::move(n));
}

NodeId GraphBuilder::MoeRoute(NodeId logits, int n_expert_used, MoeGating gating, bool norm,
                              float scale, std::string name, const Weight* bias) {
  if (!Valid(logits)) return kNoNode;
  const Node& nl = node(logits);
  const std::string label = "MoeRoute " + name;
  if (!Check(nl.dtype == DType::kF32 && nl.shape.ne[2] == 1 && nl.shape.ne[3] == 1, label,
             "logits must be f32 [n_expert, nt]"))
    return kNoNode;
  if (!Check(n_expert_used >= 1 && n_expert_used <= nl.shape.ne[0], label,
             absl::StrCat("experts per token ", n_expert_used, " must be in [1, n_expert ",
                          nl.shape.ne[0], "]")))
    return kNoNode;
  if (!Check(bias == nullptr || (bias->type == GgmlType::kF32 && bias->dims.size() == 1 &&
                                 bias->ne0() == nl.shape.ne[0]),
             label, absl::StrCat("router bias must be f32 [", nl.shape.ne[0], "]")))
    return kNoNode;
  Node n;
  n.op = OpKind::kMoeRoute;
  n.shape = Shape(2 * n_expert_used, nl.shape.ne[1]);
  n.inputs = {logits};
  if (bias != nullptr) n.weights = {bias};
  n.p.n_expert = static_cast<int32_t>(nl.shape.ne[0]);
  n.p.n_expert_used = n_expert_used;
  n.p.moe_gating = gating;
  n.p.moe_norm = norm;
  n.p.moe_scale = scale;
  n.name = std::move(name);
  return Push(std::move(n));
}

NodeId GraphBuilder::MoeFFN(NodeId x, NodeId route, const Weight* gate, const Weight* up,
                            const Weight* down, const Weight* gate_b, const Weight* up_b,
                            const Weight* down_b, MoeAct act, std::string name) {
  if (!Valid(x) || !Valid(route)) return kNoNode;
  const Node& nx = node(x);
  const Node& nr = node(route);
  const std::string label = "MoeFFN " + name;
  if (!Check(nr.op == OpKind::kMoeRoute && nr.shape.ne[1] == nx.shape.ne[1], label,
             "route must be a MoeRoute over the input's tokens"))
    return kNoNode;
  if (!Check(gate && up && down && gate->dims.size() == 3 && up->dims == gate->dims &&
                 down->dims.size() == 3,
             label, "gate/up/down experts must be 3-D, gate and up alike"))
    return kNoNode;
  const int64_t n_embd = nx.shape.ne[0], n_ff = gate->dims[1], n_exp = gate->dims[2];
  if (!Check(gate->dims[0] == n_embd && down->dims[0] == n_ff && down->dims[1] == n_embd &&
                 down->dims[2] == n_exp && n_exp == nr.p.n_expert,
             label,
             absl::StrCat("expert shapes [", absl::StrJoin(gate->dims, ", "), "] / [",
                          absl::StrJoin(down->dims, ", "), "] do not fit n_embd ", n_embd,
                          " and the router's ", nr.p.n_expert, " experts")))
    return kNoNode;
  const std::vector<int64_t> ff_bias = {n_ff, n_exp}, embd_bias = {n_embd, n_exp};
  if (!Check((!gate_b || (gate_b->dims == ff_bias && gate_b->type == GgmlType::kF32)) &&
                 (!up_b || (up_b->dims == ff_bias && up_b->type == GgmlType::kF32)) &&
                 (!down_b || (down_b->dims == embd_bias && down_b->type == GgmlType::kF32)),
             label, "expert biases must be f32 [n_ff_exp | n_embd, n_expert]"))
    return kNoNode;
  if (!Check(nx.shape.ne[2] == 1 && nx.shape.ne[3] == 1, label, "input must be [n_embd, nt]"))
    return kNoNode;
  Node n;
  n.op = OpKind::kMoeFFN;
  n.shape = Shape(n_embd, nx.shape.ne[1]);
  n.inputs = {x, route};
  n.weights = {gate, up, down, gate_b, up_b, down_b};
  n.p.n_expert = static_cast<int32_t>(n_exp);
  n.p.n_expert_used = nr.p.n_expert_used;
  n.p.moe_act = act;
  n.name = std::move(name);
  return Push(std::move(n));
}

NodeId GraphBuilder::TopK(NodeId logits, NodeId mode, int top_k, int vocab_limit,
                          std::string name, NodeId mask) {
  if (!Valid(logits) || !Valid(mode)) return kNoNode;
  if (mask != kNoNode && !Valid(mask)) return kNoNode;
  const Node& nl = node(logits);
  const std::string label = "TopK " + name;
  if (!Check(nl.dtype == DType::kF32 && nl.shape.ne[2] == 1 && node(mode).dtype == DType::kI32 &&
                 node(mode).shape.elements() == nl.shape.ne[1],
             label, "needs f32 logits [n_vocab, n_out] and i32 modes [n_out]"))
    return kNoNode;
  if (!Check(top_k >= 1 && top_k <= 1024 && vocab_limit >= 1 && vocab_limit <= nl.shape.ne[0],
             label,
             absl::StrCat("top_k ", top_k, " must be in [1, 1024], vocab_limit ", vocab_limit,
                          " in [1, ", nl.shape.ne[0], "]")))
    return kNoNode;
  if (mask != kNoNode) {
    const Node& nm = node(mask);
    if (!Check(nm.dtype == DType::kI32 && nm.shape.ne[0] == TopKMaskWords(nl.shape.ne[0]) &&
                   nm.shape.elements() == nm.shape.ne[0] * nl.shape.ne[1],
               label,
               absl::StrCat("needs an i32 mask [", TopKMaskWords(nl.shape.ne[0]), ", ",
                            nl.shape.ne[1], "], got ", nm.shape.ToString())))
      return kNoNode;
  }
  Node n;
  n.op = OpKind::kTopK;
  n.shape = Shape(2 + 2 * static_cast<int64_t>(top_k), nl.shape.ne[1]);
  n.inputs = {logits, mode};
  if (mask != kNoNode) n.inputs.push_back(mask);
  n.p.top_k = top_k;
  n.p.vocab_limit = vocab_limit;
  n.name = std::move(name);
  return Push(std::move(n));
}

NodeId GraphBuilder::Clone(const Node& n, std::vector<NodeId> inputs) {
  for (NodeId in : inputs) {
    if (!Valid(in)) return kNoNode;
  }
  Node c = n;
  c.inputs = std::move(inputs);
  return Push(std::move(c));
}

NodeId GraphBuilder::AddInto(NodeId r, NodeId y, std::string name) {
  if (!Valid(r) || !Valid(y)) return kNoNode;
  const Node& nr = node(r);
  const Node& ny = node(y);
  bool fuse = ((ny.op == OpKind::kMatMul && ny.inputs.size() == 1) ||
               (ny.op == OpKind::kMoeFFN && ny.inputs.size() == 2) ||
               (ny.op == OpKind::kAdd && ny.weights.size() == 1 && ny.inputs.size() == 1)) &&
              r < y && nr.dtype == DType::kF32 && ny.dtype == DType::kF32 &&
              nr.shape == ny.shape;
  // y's value is read only through the result: no reader so far.
  for (NodeId i = y + 1; fuse && i < static_cast<NodeId>(g_.nodes_.size()); ++i) {
    for (NodeId in : g_.nodes_[i].inputs) fuse = fuse && in != y;
  }
  if (!fuse) return Add(r, y, std::move(name));
  g_.nodes_[y].inputs.push_back(r);
  return y;
}

absl::StatusOr<Graph> GraphBuilder::Finish(GraphIO io, int n_layers) {
  if (!status_.ok()) return status_;
  g_.io = io;
  g_.n_layers = n_layers;
  MarkInt8Consumers();
  return std::move(g_);
}

void GraphBuilder::MarkInt8Consumers() {
  std::vector<int> readers(g_.nodes_.size(), 0), int8_readers(g_.nodes_.size(), 0);
  for (const Node& n : g_.nodes_) {
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      readers[n.inputs[i]]++;
      // A MatMul's or a FusedQKV's activations, every weight int8-dot.
      bool int8 = (n.op == OpKind::kMatMul || n.op == OpKind::kFusedQKV ||
                   n.op == OpKind::kFusedFFN) &&
                  i == 0 && !n.weights.empty();
      for (const Weight* w : n.weights) int8 = int8 && w != nullptr && IsInt8DotType(w->type);
      if (int8) int8_readers[n.inputs[i]]++;
    }
  }
  for (Node& n : g_.nodes_) {
    if (n.op != OpKind::kRmsNorm && n.op != OpKind::kSwiGLU && n.op != OpKind::kFusedFFN) continue;
    // The graph's output is read by the runtime, as f32.
    n.p.int8_consumers =
        n.id != g_.io.logits && readers[n.id] > 0 && readers[n.id] == int8_readers[n.id];
  }
}

}  // namespace minfer::graph
