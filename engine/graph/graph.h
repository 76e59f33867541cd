// The compute graph: a topologically ordered list of nodes, each one op.
//
// Op semantics (the CPU backend is the reference implementation):
//   Input            host-filled tensor (token ids, positions, row selectors)
//   Add/Mul a, b     elementwise; b (a node, or the node's weight) broadcasts
//                    when its shape is [ne0] or [ne0, 1]
//   Add a, w [r]     a bias add (w the node's weight) with the optional
//                    residual r (f32, a's shape): y = (a + w) + r, the float
//                    adds Add(r, Add(a, w)) would do (GraphBuilder::AddInto)
//   Scale a          a * scale
//   Silu a           a * sigmoid(a)
//   SwiGLU g, u      silu(g) * u
//   Softmax a        softmax over ne0
//   RmsNorm x        x / sqrt(mean(x^2) + eps) * weight (weight optional)
//   QkNorm x         RmsNorm over each head (ne0 = head_dim) with a [head_dim] weight
//   MatMul x, W [r]  y[n, t] = sum_k W[k, n] * x[k, t]; W is [K, N] (GGUF
//                    order), x is [K, nt], y is [N, nt]. With the optional
//                    residual r (f32, y's shape): y = r + W x, the float add
//                    Add(r, W x) would do, last (GraphBuilder::AddInto)
//   RoPE x, pos      rotary embedding of x [head_dim, n_heads, nt] at positions
//                    pos [nt] (i32), NeoX (pairs i, i + n_rot/2) or
//                    interleaved (pairs 2i, 2i+1; llama.cpp's "normal" mode,
//                    Llama's) style. Pair i turns by pos * base^(-2i/n_rot)
//                    / f[i]; f is the optional weight [n_rot/2] f32 of
//                    frequency factors (Llama 3.1's rope_freqs), else 1.
//                    p.yarn (YaRN, when yarn.freq_scale != 1): pair i turns
//                    by theta = ti (1 - r_i e) + tx r_i e, tx = pos *
//                    base^(-2i/n_rot), ti = tx * freq_scale, e =
//                    ext_factor, r_i = 1 - clamp((i - lo) / max(0.001, hi -
//                    lo), 0, 1) with lo = max(0, floor(c(beta_fast))), hi =
//                    min(n_rot - 1, ceil(c(beta_slow))), c(b) = n_rot
//                    ln(n_ctx_orig / (2 pi b)) / (2 ln base); cos and sin
//                    are scaled by attn_factor (1 + 0.1 ln(1 / freq_scale)
//                    when e != 0): ggml's rope with YaRN, as llama.cpp runs
//                    gpt-oss
//   KvcacheStore k, v, pos   writes rows k[:, t], v[:, t] into the layer's KV
//                    cache at rows pos[t] (a paged cache: the token's
//                    physical row); output is a 1-element token that orders
//                    later KV reads after the store
//   KvcacheLoad s    the layer's K or V cache region [n_kv_embd, n_ctx]
//                    (a view: no copy); input s is the store it must follow
//   Attn q, K, V, pos   causal GQA attention: token t (position pos[t]) attends
//                    to cache positions 0..pos[t]; q [head_dim, n_head, nt],
//                    output [head_dim * n_head, nt]
//   Attn q, K, V, pos, tiles, tables   the same over a paged cache (a KV
//                    pool of fixed-size blocks, p.kv_block rows each) holding
//                    several sequences: tables [p.max_blocks, n_rows] i32
//                    holds each sequence's block table (logical row j of
//                    table row r lives at cache row tables[r][j / kv_block] *
//                    kv_block + j % kv_block); tiles [4, n_tiles] i32 lists
//                    (table row, first token, token count, 0) runs of
//                    consecutive tokens of one sequence (count 0: unused
//                    entry). Every token belongs to exactly one tile and
//                    attends to logical rows 0..pos[t] of its sequence
//                    (p.attn_window > 0: only the rows j with pos[t] - j <
//                    window, a sliding window). A tile has at most
//                    kAttnTileTokens tokens. weights[0], when present, are
//                    attention sinks: f32 [n_head] logits s_h, one per query
//                    head, that join each softmax's normalizer (and its max)
//                    without a value row: out = sum_j e^(w_j - M) v_j /
//                    (sum_j e^(w_j - M) + e^(s_h - M)), M = max(max_j w_j,
//                    s_h) (gpt-oss)
//   View x           alias of a contiguous byte range of x (offset, shape)
//   Reshape x        alias of x with another shape of the same element count
//   Permute x        copy of x with axes permuted (out.ne[perm[i]] = x.ne[i])
//   GetRows src, ids gathers rows ids[i] of src (a node, or the node's weight,
//                    dequantized) into [ne0, n_ids]
//   FusedQKV x       (Wq, Wk, Wv) x into one output [n_q + 2 n_kv, nt],
//                    planar: the [n_q, nt] product Wq x, then Wk x [n_kv,
//                    nt], then Wv x (for nt == 1 simply [q; k; v]); the
//                    prefill graph reads q, k, v back through Views
//   QkvBiasRopeStore qkv, pos [, rows]   adds the q/k/v biases, ropes q and k
//                    at positions pos[t], stores k and v of token t at cache
//                    row rows[t] (pos[t] without rows); output is the roped q
//                    [head_dim, n_head, nt]; qkv is one FusedQKV output
//                    (planar) or q, k, v given separately; weights[3], when
//                    present and non-null, are RoPE's frequency factors;
//                    weights[4] and [5], when present, are Qwen3's per-head
//                    q and k norm weights: RmsNorm (eps p.eps) of each
//                    biased q/k head before RoPE, as QkNorm computes it
//   FusedFFN x       silu(Wgate x) * (Wup x)  [n_ff, nt]
//   TopK logits, mode [, mask]   per column r of logits [n_vocab, n_out]
//                    (ids >= p.vocab_limit excluded): TopKBaseMode(mode[r])
//                    0 = nothing (the row is read in full), 1 = the argmax,
//                    2 = the p.top_k largest and the softmax normalizer.
//                    Output [2 + 2 top_k, n_out] f32: [max, sum_i exp(l_i -
//                    max) (mode 2 only), then (logit, id as int32 bits) pairs
//                    by decreasing logit, ties by increasing id]; fewer
//                    finite logits than top_k leave (-inf, -1) pairs. A NaN
//                    anywhere in the row makes max NaN (the caller then
//                    reads the row). mask (optional): i32 allowed-token
//                    bitmasks [TopKMaskWords(n_vocab), n_out]; a row whose
//                    TopKMaskSlot(mode[r]) is s >= 0 sees only the ids whose
//                    bit (id % 32) of word id / 32 of mask column s is set:
//                    the others count as -inf everywhere (candidates, max,
//                    normalizer, NaN check). A row with no allowed finite
//                    logit gets max -inf and no candidates. Columns no row
//                    names are never read (a step uploads only the columns
//                    of its masked rows).
//   MoeRoute logits  mixture-of-experts routing of each token (column) of the
//                    router's logits [n_expert, nt] -> [2 k, nt] f32, k =
//                    p.n_expert_used: k weights, then the k chosen experts'
//                    ids (int32 bits), by decreasing score (ties: lower
//                    id first). p.moe_gating kSoftmax: score = softmax over
//                    all n_expert logits, weight = the chosen scores;
//                    kSoftmaxWeight: score = the logit, weights = softmax
//                    over the k chosen logits. p.moe_norm: weights divided
//                    by their sum (at least 6.103515625e-5, the smallest
//                    normal f16, as llama.cpp clamps it). p.moe_scale != 0:
//                    weights multiplied by it. weights[0] (optional, f32
//                    [n_expert]): a router bias added to every token's
//                    logits first, as Add(logits, bias) would (gpt-oss)
//   MoeFFN x, route  y[:, t] = sum_j w_j (D_e (act(G_e x_t + bg_e, U_e x_t +
//                    bu_e)) + bd_e) over the k (weight w_j, expert e) pairs
//                    of route[:, t] (a MoeRoute output), j in route order;
//                    G, U [n_embd, n_ff_exp, n_expert], D [n_ff_exp, n_embd,
//                    n_expert] are 3-D weights (weights[0..2]: gate, up,
//                    down; expert e is slice e of the last axis), the biases
//                    bg, bu [n_ff_exp, n_expert], bd [n_embd, n_expert] are
//                    optional (weights[3..5], null when absent); act
//                    (p.moe_act): kSilu silu(g) * u; kSwigluOai
//                    (gpt-oss): with g' = min(g, L), u' = clamp(u, -L, L),
//                    g' * sigmoid(a g') * (u' + 1), a = p.moe_alpha, L =
//                    p.moe_limit. x [n_embd, nt], y [n_embd, nt]. A third
//                    input r (f32, y's shape) is a residual added last, as
//                    MatMul's is
//   AllReduce x      y = the sum of x over the ranks of a tensor-parallel
//                    model (collective.h): every rank's graph has the same
//                    AllReduce nodes in the same order, and each rank's
//                    backend adds its collective's other ranks' x. f32, y
//                    the shape of x
//
// Graphs are immutable once built; executing one never changes it.
#ifndef MINFER_ENGINE_GRAPH_GRAPH_H_
#define MINFER_ENGINE_GRAPH_GRAPH_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/graph/tensor.h"
#include "engine/graph/weight.h"

namespace minfer::graph {

enum class OpKind : uint8_t {
  kInput,
  kAdd,
  kMul,
  kScale,
  kSilu,
  kSwiGLU,
  kSoftmax,
  kRmsNorm,
  kQkNorm,
  kMatMul,
  kRoPE,
  kKvcacheStore,
  kKvcacheLoad,
  kAttn,
  kView,
  kReshape,
  kPermute,
  kGetRows,
  kFusedQKV,
  kQkvBiasRopeStore,
  kFusedFFN,
  kTopK,
  kMoeRoute,
  kMoeFFN,
  kAllReduce,
};

// Most tokens one attention tile (graph.h, paged Attn) may hold.
inline constexpr int32_t kAttnTileTokens = 64;

// TopK's per-row mode value (op table): the base mode in the low 8 bits,
// the row's mask column + 1 above them (0: the row has no mask), so one i32
// per row carries both and a step without masked rows writes the same
// values as before masks existed.
inline constexpr int32_t kTopKMaskShift = 8;
inline constexpr int32_t TopKModeValue(int32_t base_mode, int32_t mask_slot = -1) {
  return base_mode | ((mask_slot + 1) << kTopKMaskShift);
}
inline constexpr int32_t TopKBaseMode(int32_t mode) { return mode & ((1 << kTopKMaskShift) - 1); }
inline constexpr int32_t TopKMaskSlot(int32_t mode) { return (mode >> kTopKMaskShift) - 1; }
// 32-bit words of one allowed-token bitmask over n_vocab ids.
inline constexpr int64_t TopKMaskWords(int64_t n_vocab) { return (n_vocab + 31) / 32; }

const char* OpName(OpKind op);

// Ops whose output aliases their input's storage (no kernel runs).
inline bool IsAliasOp(OpKind op) {
  return op == OpKind::kView || op == OpKind::kReshape || op == OpKind::kKvcacheLoad;
}

enum class RopeStyle : uint8_t { kNeoX, kInterleaved };
// YaRN context extension of a RoPE node (op table); freq_scale 1: none.
struct RopeYarn {
  float freq_scale = 1.0f;  // 1 / the scaling factor
  float ext_factor = 0.0f;
  float attn_factor = 1.0f;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  int32_t n_ctx_orig = 0;
  bool active() const { return freq_scale != 1.0f; }
  bool operator==(const RopeYarn&) const = default;
};
// How a mixture-of-experts router turns logits into weights (MoeRoute).
enum class MoeGating : uint8_t { kSoftmax, kSoftmaxWeight };
// The expert FFN's activation (MoeFFN).
enum class MoeAct : uint8_t { kSilu, kSwigluOai };
enum class KvKind : uint8_t { kK, kV };

using NodeId = int32_t;
inline constexpr NodeId kNoNode = -1;

// Parameters of all ops in one flat struct: each op reads the fields its
// comment above names.
struct OpParams {
  float eps = 0.0f;          // RmsNorm, QkNorm
  float scale = 1.0f;        // Scale; Attn (softmax scale)
  RopeStyle rope_style = RopeStyle::kNeoX;
  float rope_base = 10000.0f;
  int32_t n_rot = 0;         // RoPE: rotated dims per head (0 = head_dim)
  RopeYarn yarn;             // RoPE
  int32_t layer = -1;        // KV ops, Attn, QkvBiasRopeStore
  KvKind kv = KvKind::kK;    // KvcacheLoad
  int32_t n_head = 0;        // Attn, QkvBiasRopeStore
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  int64_t view_offset = 0;   // View: byte offset into the input
  std::array<int8_t, 4> perm = {0, 1, 2, 3};  // Permute
  int32_t kv_block = 0;      // Attn: rows per block of a paged cache (0: contiguous)
  int32_t max_blocks = 0;    // Attn: block-table entries per sequence
  // Attn (paged): every tile holds one token (a step of decode tokens only),
  // so a backend may skip its multi-token attention path.
  bool single_token_tiles = false;
  int32_t attn_window = 0;   // Attn (paged): sliding window (0: none)
  int32_t top_k = 0;         // TopK: candidates per row
  int32_t vocab_limit = 0;   // TopK: ids at or above are never candidates
  // RmsNorm, SwiGLU, FusedFFN: every consumer of the output is a MatMul,
  // FusedQKV or FusedFFN that takes it as its activations and whose weights
  // have an int8 dot (IsInt8DotType).
  // Set by GraphBuilder::Finish. A backend may then write only the int8
  // activation plane those MatMuls read and skip the f32 output (the CUDA
  // backend's mode 2 at prefill); a model whose quant mix gives any
  // consumer an f32/f16 weight keeps the f32 write (the safe mode).
  bool int8_consumers = false;
  // MoeRoute, MoeFFN (op table).
  int32_t n_expert = 0;
  int32_t n_expert_used = 0;
  MoeGating moe_gating = MoeGating::kSoftmax;
  bool moe_norm = false;
  float moe_scale = 0.0f;
  MoeAct moe_act = MoeAct::kSilu;
  float moe_alpha = 1.702f;
  float moe_limit = 7.0f;
};

struct Node {
  NodeId id = kNoNode;
  OpKind op = OpKind::kInput;
  DType dtype = DType::kF32;
  Shape shape;
  std::vector<NodeId> inputs;
  // Weights the op reads: MatMul/GetRows/RmsNorm/Add/Mul: [0]; Attn: the
  // sinks [0] (optional);
  // MoeFFN: gate, up, down experts, then their biases (null when absent);
  // FusedQKV: Wq, Wk, Wv; QkvBiasRopeStore: bq, bk, bv [, rope factors
  // [, q norm, k norm]] (QkvNorms);
  // RoPE: [rope factors] (empty: none); FusedFFN: Wgate, Wup.
  std::vector<const Weight*> weights;
  OpParams p;
  std::string name;  // for logs and errors, e.g. "blk.3.q"

  int64_t bytes() const { return DTypeBytes(dtype, shape.elements()); }
};

// QkvBiasRopeStore's inputs: qkv parts (1 planar or 3 separate), the
// positions, then optionally the cache rows of the store.
inline int QkvParts(const Node& n) { return n.inputs.size() >= 4 ? 3 : 1; }
inline bool QkvHasRows(const Node& n) { return n.inputs.size() == 3 || n.inputs.size() == 5; }

// The RoPE frequency factors of a RoPE or QkvBiasRopeStore node (f32
// [n_rot / 2]), or null when the node has none.
inline const Weight* RopeFactors(const Node& n) {
  const size_t i = n.op == OpKind::kRoPE ? 0 : 3;
  return n.weights.size() > i ? n.weights[i] : nullptr;
}

// The per-head q and k norm weights of a QkvBiasRopeStore node (both
// null, or both f32 [head_dim]).
inline const Weight* QkvQNorm(const Node& n) { return n.weights.size() > 5 ? n.weights[4] : nullptr; }
inline const Weight* QkvKNorm(const Node& n) { return n.weights.size() > 5 ? n.weights[5] : nullptr; }

// Which tensors of the graph the runtime fills and reads.
struct GraphIO {
  NodeId tokens = kNoNode;     // Input i32 [nt]
  NodeId positions = kNoNode;  // Input i32 [nt]
  NodeId out_rows = kNoNode;   // Input i32 [n_out]: token rows to produce logits for
  NodeId logits = kNoNode;     // [n_vocab, n_out]
  // Paged (batched) graphs only:
  NodeId kv_rows = kNoNode;       // Input i32 [nt]: the cache row each token's K/V goes to
  NodeId attn_tiles = kNoNode;    // Input i32 [4, n_tiles] (Attn)
  NodeId block_tables = kNoNode;  // Input i32 [max_blocks, n_rows] (Attn)
  NodeId top_mode = kNoNode;      // Input i32 [n_out] (TopK)
  // Input i32 [TopKMaskWords(n_vocab), n_out] (TopK's masks); written only
  // in part: the columns of the step's masked rows (RunInputs::top_mask).
  NodeId top_mask = kNoNode;
  NodeId top = kNoNode;           // TopK output [2 + 2 k, n_out]
};

class Graph {
 public:
  const std::vector<Node>& nodes() const { return nodes_; }
  const Node& node(NodeId id) const { return nodes_[id]; }
  int size() const { return static_cast<int>(nodes_.size()); }
  GraphIO io;
  int n_layers = 0;  // KV cache layers the graph addresses

  // Token count of the graph's first MatMul (the scheduler's nt hint;
  // 0 when there is none).
  int64_t NtHint() const;

  // One line per node, for debugging.
  std::string DebugString() const;

 private:
  friend class GraphBuilder;
  std::vector<Node> nodes_;
};

// Builds a Graph while checking every op's shape rules. The first violated
// rule is recorded; later calls are no-ops returning kNoNode, and Finish()
// returns the error (naming the node).
class GraphBuilder {
 public:
  GraphBuilder() = default;

  NodeId Input(DType dtype, Shape shape, std::string name);
  NodeId Add(NodeId a, NodeId b, std::string name = "");
  NodeId Add(NodeId a, const Weight* b, std::string name = "");
  NodeId Mul(NodeId a, NodeId b, std::string name = "");
  NodeId Mul(NodeId a, const Weight* b, std::string name = "");
  NodeId Scale(NodeId a, float s, std::string name = "");
  NodeId Silu(NodeId a, std::string name = "");
  NodeId SwiGLU(NodeId g, NodeId u, std::string name = "");
  NodeId Softmax(NodeId a, std::string name = "");
  NodeId RmsNorm(NodeId x, const Weight* w, float eps, std::string name = "");
  NodeId QkNorm(NodeId x, const Weight* w, float eps, std::string name = "");
  NodeId MatMul(NodeId x, const Weight* w, std::string name = "");
  // factors: RoPE frequency factors, f32 [n_rot / 2], or null.
  NodeId RoPE(NodeId x, NodeId pos, RopeStyle style, float base, int n_rot, std::string name = "",
              const Weight* factors = nullptr, const RopeYarn& yarn = {});
  NodeId KvcacheStore(NodeId k, NodeId v, NodeId pos, int layer, std::string name = "");
  // shape: [n_kv_embd, n_ctx]; dtype: the cache element type.
  NodeId KvcacheLoad(NodeId store, int layer, KvKind kv, Shape shape, DType dtype,
                     std::string name = "");
  NodeId Attn(NodeId q, NodeId k_cache, NodeId v_cache, NodeId pos, int n_head, int n_head_kv,
              int head_dim, float scale, int layer, std::string name = "");
  // The paged form (see the op table): tiles [4, n_tiles] and tables
  // [max_blocks, n_rows] i32 inputs, kv_block rows per block.
  // single_token_tiles: the caller promises tiles of one token each
  // (OpParams::single_token_tiles).
  // window: sliding window (0: none); sinks: f32 [n_head] or null.
  NodeId PagedAttn(NodeId q, NodeId k_cache, NodeId v_cache, NodeId pos, NodeId tiles,
                   NodeId tables, int kv_block, int n_head, int n_head_kv, int head_dim,
                   float scale, int layer, std::string name = "",
                   bool single_token_tiles = false, int window = 0,
                   const Weight* sinks = nullptr);
  NodeId View(NodeId x, Shape shape, int64_t byte_offset, std::string name = "");
  NodeId Reshape(NodeId x, Shape shape, std::string name = "");
  NodeId Permute(NodeId x, std::array<int8_t, 4> perm, std::string name = "");
  NodeId GetRows(NodeId src, NodeId ids, std::string name = "");
  NodeId GetRows(const Weight* src, NodeId ids, std::string name = "");
  NodeId FusedQKV(NodeId x, const Weight* wq, const Weight* wk, const Weight* wv,
                  std::string name = "");
  // qkv: a FusedQKV output, or three inputs q, k, v given separately.
  // rows: the cache rows of the store (kNoNode: the positions).
  // rope_factors: as RoPE's factors (f32 [head_dim / 2]), or null.
  // q_norm, k_norm: both null, or both f32 [head_dim]: each biased head
  // of q and k RmsNorm'ed (norm_eps) before RoPE, as QkNorm would.
  NodeId QkvBiasRopeStore(std::vector<NodeId> qkv, const Weight* bq, const Weight* bk,
                          const Weight* bv, NodeId pos, int n_head, int n_head_kv,
                          int head_dim, RopeStyle style, float base, int layer,
                          std::string name = "", NodeId rows = kNoNode,
                          const Weight* rope_factors = nullptr, const Weight* q_norm = nullptr,
                          const Weight* k_norm = nullptr, float norm_eps = 0.0f,
                          const RopeYarn& yarn = {});
  NodeId FusedFFN(NodeId x, const Weight* wgate, const Weight* wup, std::string name = "");
  // mask: kNoNode, or an i32 input [TopKMaskWords(n_vocab), n_out].
  NodeId TopK(NodeId logits, NodeId mode, int top_k, int vocab_limit, std::string name = "",
              NodeId mask = kNoNode);

  // bias: the router's bias (f32 [n_expert]) or null.
  NodeId MoeRoute(NodeId logits, int n_expert_used, MoeGating gating, bool norm, float scale,
                  std::string name = "", const Weight* bias = nullptr);
  // gate_b, up_b, down_b: optional expert biases (null: none).
  NodeId MoeFFN(NodeId x, NodeId route, const Weight* gate, const Weight* up, const Weight* down,
                const Weight* gate_b, const Weight* up_b, const Weight* down_b, MoeAct act,
                std::string name = "");

  // The sum of x over the tensor-parallel ranks (op table).
  NodeId AllReduce(NodeId x, std::string name = "");

  // r + y, the residual add of a decoder layer. When y is a MatMul, a
  // MoeFFN or a bias Add (an Add of a weight: gpt-oss's attention output)
  // that no node reads yet and that has no residual, r becomes its
  // residual input (op table) and y is returned: the same values (float
  // addition is commutative) without a node of its own, so a GPU adds r in
  // the matmul's epilogue (or the bias add's launch) instead of in a launch
  // after it. Otherwise an Add(r, y) node.
  NodeId AddInto(NodeId r, NodeId y, std::string name = "");

  // Re-pushes `n` (from another graph) with its inputs replaced by
  // `inputs`; used by graph rewrite passes. Shapes are taken as given.
  NodeId Clone(const Node& n, std::vector<NodeId> inputs);

  const Node& node(NodeId id) const { return g_.nodes_[id]; }
  bool ok() const { return status_.ok(); }

  // Returns the graph, or the first shape error.
  absl::StatusOr<Graph> Finish(GraphIO io, int n_layers);

 private:
  NodeId Push(Node n);
  // Sets OpParams::int8_consumers on every RmsNorm / SwiGLU / FusedFFN node.
  void MarkInt8Consumers();
  bool Check(bool cond, const std::string& op_name, const std::string& what);
  bool Valid(NodeId id);
  NodeId Binary(OpKind op, NodeId a, NodeId b, const Weight* w, std::string name);

  Graph g_;
  absl::Status status_;
};

}  // namespace minfer::graph

#endif  // MINFER_ENGINE_GRAPH_GRAPH_H_
