// The decode fusion pass (docs/design.md, decode matmuls): pattern-matches each
// layer's projections in a single-token graph and rebuilds the graph with
// fused ops. Matching is structural, so any graph with these shapes —
// not only Qwen2's — is fused the same way.
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/models/decoder/decoder.h"

namespace minfer::models {

using graph::Graph;
using graph::GraphBuilder;
using graph::Node;
using graph::NodeId;
using graph::OpKind;
using graph::kNoNode;

namespace {

// A matched q/k/v chain: MatMul -> [Add bias] -> Reshape -> [RoPE].
struct Chain {
  NodeId matmul = kNoNode;
  NodeId bias_add = kNoNode;
  NodeId reshape = kNoNode;
  NodeId rope = kNoNode;
  const graph::Weight* bias = nullptr;
};

struct QkvGroup {
  Chain q, k, v;
  NodeId store = kNoNode;
  NodeId x = kNoNode;
  bool fuse_matmul = false;
};

class Matcher {
 public:
  explicit Matcher(const Graph& g) : g_(g), consumers_(g.size()) {
    for (const Node& n : g.nodes()) {
      for (NodeId in : n.inputs) consumers_[in].push_back(n.id);
    }
  }

  bool Single(NodeId id) const { return consumers_[id].size() == 1; }
  const Node& N(NodeId id) const { return g_.node(id); }
  const std::vector<NodeId>& Consumers(NodeId id) const { return consumers_[id]; }

  // Walks back from `end` (a RoPE output, a bias Add or a MatMul) to the
  // MatMul that starts the chain; `need_rope` selects the q/k form.
  bool MatchChain(NodeId end, bool need_rope, NodeId pos, Chain* c) const {
    NodeId cur = end;
    if (need_rope) {
      if (N(cur).op != OpKind::kRoPE || N(cur).inputs[1] != pos) return false;
      c->rope = cur;
      cur = N(cur).inputs[0];
      if (N(cur).op != OpKind::kReshape || !Single(cur)) return false;
      c->reshape = cur;
      cur = N(cur).inputs[0];
    }
    if (N(cur).op == OpKind::kAdd && N(cur).weights.size() == 1 && Single(cur)) {
      c->bias_add = cur;
      c->bias = N(cur).weights[0];
      cur = N(cur).inputs[0];
    }
    if (N(cur).op != OpKind::kMatMul || !Single(cur)) return false;
    c->matmul = cur;
    return true;
  }

  // Finds the q/k/v group feeding KvcacheStore `store`.
  bool MatchQkv(NodeId store, QkvGroup* grp) const {
    const Node& st = N(store);
    NodeId pos = st.inputs[2];
    if (!Single(st.inputs[0]) || !Single(st.inputs[1])) return false;
    if (!MatchChain(st.inputs[0], true, pos, &grp->k)) return false;
    if (!MatchChain(st.inputs[1], false, pos, &grp->v)) return false;
    // q: the RoPE feeding the Attn that reads this store's cache.
    NodeId attn = kNoNode;
    for (NodeId load : Consumers(store)) {
      for (NodeId c : Consumers(load)) {
        if (N(c).op == OpKind::kAttn) attn = c;
      }
    }
    if (attn == kNoNode) return false;
    NodeId q_end = N(attn).inputs[0];
    if (!Single(q_end) || !MatchChain(q_end, true, pos, &grp->q)) return false;
    NodeId x = N(grp->q.matmul).inputs[0];
    if (N(grp->k.matmul).inputs[0] != x || N(grp->v.matmul).inputs[0] != x) return false;
    if (N(pos).shape.elements() != 1) return false;
    // The fused epilogue ropes q and k alike over whole heads.
    const Node& qr = N(grp->q.rope);
    const Node& kr = N(grp->k.rope);
    if (qr.p.rope_style != kr.p.rope_style || qr.p.rope_base != kr.p.rope_base ||
        graph::RopeFactors(qr) != graph::RopeFactors(kr) || qr.p.n_rot != qr.shape.ne[0] ||
        kr.p.n_rot != kr.shape.ne[0]) {
      return false;
    }
    grp->store = store;
    grp->x = x;
    const auto& wq = *N(grp->q.matmul).weights[0];
    grp->fuse_matmul = wq.type == N(grp->k.matmul).weights[0]->type &&
                       wq.type == N(grp->v.matmul).weights[0]->type;
    return true;
  }

 private:
  const Graph& g_;
  std::vector<std::vector<NodeId>> consumers_;
};

}  // namespace

absl::StatusOr<Graph> FuseDecode(const Graph& g, bool fuse_qkv, bool fuse_ffn) {
  if (g.io.tokens == kNoNode || g.node(g.io.tokens).shape.elements() != 1) return g;
  Matcher m(g);
  // Old node -> what to do with it.
  std::set<NodeId> skip;
  std::map<NodeId, const QkvGroup*> emit_fused_qkv;   // at the q MatMul
  std::map<NodeId, const QkvGroup*> emit_bias_rope;   // at the KV store
  std::map<NodeId, std::pair<NodeId, NodeId>> emit_ffn;  // at the SwiGLU: gate, up
  std::vector<QkvGroup> groups;
  groups.reserve(g.size());

  for (const Node& n : g.nodes()) {
    if (fuse_qkv && n.op == OpKind::kKvcacheStore) {
      QkvGroup grp;
      if (!m.MatchQkv(n.id, &grp)) continue;
      groups.push_back(grp);
      const QkvGroup* gp = &groups.back();
      for (const Chain* c : {&gp->q, &gp->k, &gp->v}) {
        for (NodeId id : {c->bias_add, c->reshape, c->rope}) {
          if (id != kNoNode) skip.insert(id);
        }
        if (gp->fuse_matmul) skip.insert(c->matmul);
      }
      skip.insert(gp->store);
      emit_bias_rope[gp->store] = gp;
      if (gp->fuse_matmul) {
        emit_fused_qkv[std::min({gp->q.matmul, gp->k.matmul, gp->v.matmul})] = gp;
      }
    }
    if (fuse_ffn && n.op == OpKind::kSwiGLU) {
      NodeId gate = n.inputs[0], up = n.inputs[1];
      const Node& gn = g.node(gate);
      const Node& un = g.node(up);
      if (gn.op == OpKind::kMatMul && un.op == OpKind::kMatMul && m.Single(gate) &&
          m.Single(up) && gn.inputs[0] == un.inputs[0]) {
        skip.insert(gate);
        skip.insert(up);
        skip.insert(n.id);
        emit_ffn[n.id] = {gate, up};
      }
    }
  }

  GraphBuilder b;
  std::vector<NodeId> map(g.size(), kNoNode);
  std::map<const QkvGroup*, NodeId> fused_qkv_node;
  for (const Node& n : g.nodes()) {
    if (auto it = emit_fused_qkv.find(n.id); it != emit_fused_qkv.end()) {
      const QkvGroup* gp = it->second;
      const Node& qm = g.node(gp->q.matmul);
      std::string layer = qm.name.substr(0, qm.name.rfind('.') + 1);
      fused_qkv_node[gp] = b.FusedQKV(map[gp->x], qm.weights[0], g.node(gp->k.matmul).weights[0],
                                      g.node(gp->v.matmul).weights[0], layer + "qkv");
    }
    if (auto it = emit_bias_rope.find(n.id); it != emit_bias_rope.end()) {
      const QkvGroup* gp = it->second;
      const Node& st = g.node(gp->store);
      const Node& qrope = g.node(gp->q.rope);
      std::vector<NodeId> qkv;
      if (gp->fuse_matmul) {
        qkv = {fused_qkv_node[gp]};
      } else {
        qkv = {map[gp->q.matmul], map[gp->k.matmul], map[gp->v.matmul]};
      }
      const Node& attn_q = g.node(gp->q.rope);
      NodeId fused = b.QkvBiasRopeStore(
          qkv, gp->q.bias, gp->k.bias, gp->v.bias, map[st.inputs[2]],
          static_cast<int>(attn_q.shape.ne[1]), static_cast<int>(g.node(gp->k.rope).shape.ne[1]),
          static_cast<int>(attn_q.shape.ne[0]), qrope.p.rope_style, qrope.p.rope_base,
          st.p.layer, st.name, kNoNode, graph::RopeFactors(qrope));
      map[gp->store] = fused;
      map[gp->q.rope] = fused;
    }
    if (auto it = emit_ffn.find(n.id); it != emit_ffn.end()) {
      const Node& gn = g.node(it->second.first);
      map[n.id] = b.FusedFFN(map[gn.inputs[0]], gn.weights[0], g.node(it->second.second).weights[0],
                             n.name);
    }
    if (skip.count(n.id)) continue;
    std::vector<NodeId> inputs;
    for (NodeId in : n.inputs) inputs.push_back(map[in]);
    map[n.id] = b.Clone(n, std::move(inputs));
  }
  graph::GraphIO io = g.io;
  io.tokens = map[io.tokens];
  io.positions = map[io.positions];
  io.out_rows = map[io.out_rows];
  io.logits = map[io.logits];
  return b.Finish(io, g.n_layers);
}

}  // namespace minfer::models
