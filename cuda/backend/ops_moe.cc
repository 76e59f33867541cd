// The CUDA backend's mixture-of-experts handlers: MoeRoute (the router's
// top-k) and MoeFFN (grouped expert matmuls; cuda/kernels/moe.h has the
// plan of one step and why it is capture-safe).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "cuda/backend/cuda_backend.h"
#include "cuda/kernels/matmul.h"
#include "cuda/kernels/moe.h"
#include "engine/base/status.h"
#include "engine/graph/graph.h"

namespace minfer::cuda {

using graph::ExecArgs;
using graph::Node;

namespace {

// Scratch is sized for at least this many tokens, so decode batches up to
// it never grow it (a growing scratch moves under recorded graphs).
constexpr int64_t kMoeScratchTokens = 256;

int64_t Align256(int64_t b) { return (b + 255) / 256 * 256; }

}  // namespace

bool CudaBackend::MoeFfnSupported(const Node& n) {
  if (n.weights.size() < 3 || n.p.n_expert < 1 || n.p.n_expert > kMoeMaxExperts ||
      n.p.n_expert_used < 1 || n.p.n_expert_used > kMoeMaxUsed) {
    return false;
  }
  for (int i = 0; i < 3; ++i) {
    const graph::Weight* w = n.weights[i];
    if (w == nullptr || w->dims.size() != 3 ||
        !(MmvqSupports(w->type) || w->type == GgmlType::kMXFP4) ||
        w->dims[0] % TraitsOf(w->type).block_size != 0) {
      return false;
    }
  }
  // The intermediate activation is quantized in blocks of 32.
  if (n.weights[2]->dims[0] % 32 != 0) return false;
  for (size_t i = 3; i < n.weights.size(); ++i) {
    if (n.weights[i] != nullptr && n.weights[i]->type != GgmlType::kF32) return false;
  }
  return true;
}

absl::StatusOr<MoeGroups> CudaBackend::MoeGroupArrays(int64_t nt, int k, int n_expert) {
  const int64_t cap_nt = std::max(nt, kMoeScratchTokens);
  const int64_t cap_a = cap_nt * k;
  const int64_t cap_tiles = MoeMaxTiles(cap_nt, k, n_expert, 1);  // the most at any width
  const int64_t off_slot = Align256(cap_a * 4);
  const int64_t off_tiles = off_slot + Align256(cap_a * 4);
  const int64_t off_ntiles = off_tiles + Align256(cap_tiles * 16);
  ASSIGN_OR_RETURN(void* scratch, Scratch("moe_group", off_ntiles + 256));
  uint8_t* base = static_cast<uint8_t*>(scratch);
  MoeGroups g;
  g.order = reinterpret_cast<int32_t*>(base);
  g.slot = reinterpret_cast<int32_t*>(base + off_slot);
  g.tiles = reinterpret_cast<int4*>(base + off_tiles);
  g.n_tiles = reinterpret_cast<int32_t*>(base + off_ntiles);
  return g;
}

absl::Status CudaBackend::RunMoeRoute(const OpArgs& o) {
  const Node& n = o.n;
  MoeRouteArgs a;
  a.n_expert = n.p.n_expert;
  a.k = n.p.n_expert_used;
  a.gating = n.p.moe_gating == graph::MoeGating::kSoftmax ? 0 : 1;
  a.norm = n.p.moe_norm;
  a.scale = n.p.moe_scale;
  if (!n.weights.empty() && n.weights[0] != nullptr) {
    ASSIGN_OR_RETURN(const WeightView* bias, Weight(n.weights[0]));
    a.bias = static_cast<const float*>(bias->data);
  }
  const int64_t nt = n.shape.ne[1];
  // Decode sizes: group for the MoeFFN in the same launch. Below
  // moe_mma_min_tokens the FFN takes the CUDA-core matmul whatever its
  // expert types, so its tile width is known here; the FFN checks it.
  if (knobs_.moe_route_group && nt >= 1 && nt <= kMoeRouteGroupMaxTokens &&
      nt < knobs_.moe_mma_min_tokens) {
    ASSIGN_OR_RETURN(MoeGroups g, MoeGroupArrays(nt, a.k, a.n_expert));
    const int tt = MoeTileTokens(nt);
    RETURN_IF_ERROR(Check(LaunchMoeRouteGroup(o.f(0), nt, a, o.out, tt, g, o.err_flag, o.st),
                          "MoeRoute (and group)"));
    moe_grouped_ = {o.out, nt, a.k, a.n_expert, tt};
    stats_.moe_route_group++;
    return absl::OkStatus();
  }
  return Check(LaunchMoeRoute(o.f(0), nt, a, o.out, o.st), "MoeRoute");
}

absl::Status CudaBackend::RunMoeFfn(const OpArgs& o) {
  const Node& n = o.n;
  const ExecArgs& a = o.a;
  cudaStream_t st = o.st;
  ASSIGN_OR_RETURN(const WeightView* G, Weight(n.weights[0]));
  ASSIGN_OR_RETURN(const WeightView* U, Weight(n.weights[1]));
  ASSIGN_OR_RETURN(const WeightView* D, Weight(n.weights[2]));
  auto bias = [&](size_t i) -> absl::StatusOr<const WeightView*> {
    if (n.weights.size() <= i || n.weights[i] == nullptr) return nullptr;
    return Weight(n.weights[i]);
  };
  ASSIGN_OR_RETURN(const WeightView* bg, bias(3));
  ASSIGN_OR_RETURN(const WeightView* bu, bias(4));
  ASSIGN_OR_RETURN(const WeightView* bd, bias(5));
  const int64_t nt = n.shape.ne[1];
  const int k = n.p.n_expert_used, n_exp = n.p.n_expert;
  const int64_t E = G->k, F = G->rows / n_exp;
  if (G->rows != F * n_exp || U->k != E || U->rows != G->rows || D->k != F ||
      D->rows != E * n_exp || o.n_el != E * nt) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda MoeFFN ", n.name, ": gate ", G->k, "x", G->rows, ", up ", U->k, "x", U->rows,
        ", down ", D->k, "x", D->rows, " do not fit ", n_exp, " experts and output ", o.n_el,
        " for ", nt, " tokens"));
  }
  const int64_t A = nt * k;
  // The tensor-core grouped matmul from moe_mma_min_tokens on, when all
  // three expert types have its decode; tiles of 32 columns there, of the
  // fewest of 1/2/4/8 that hold nt on the CUDA-core one.
  // MXFP4 from 4x the threshold: its CUDA-core decode (one 16-byte load
  // and byte permutes per block) is cheap, so mostly-empty 32-column tiles
  // lose longer (gpt-oss-20b, H100: B=16 1,356 -> 1,101 tok/s on the tensor
  // cores, B=64 2,975 -> 3,169, pp512 5,081 -> 9,344).
  const bool mxfp4 = G->type == GgmlType::kMXFP4 || U->type == GgmlType::kMXFP4 ||
                     D->type == GgmlType::kMXFP4;
  const int64_t mma_min = knobs_.moe_mma_min_tokens * (mxfp4 ? 4 : 1);
  const bool mma = knobs_.moe_mma && device_.MmqRuns() && nt >= mma_min &&
                   MoeMmaSupports(G->type) && MoeMmaSupports(U->type) &&
                   MoeMmaSupports(D->type);
  const int tt = mma ? kMoeMmaTileTokens : MoeTileTokens(nt);
  const int64_t max_tiles = MoeMaxTiles(nt, k, n_exp, tt);
  (mma ? stats_.moe_mma : stats_.moe_vector)++;
  auto matmul = [&](const MoeMatmulArgs& args) {
    return mma ? LaunchMoeMatmulMma(args, st) : LaunchMoeMatmul(args, st);
  };

  // One scratch for the step: g and u [A][F], the quantized h [A][F / 32],
  // d [A][E], sized for max(nt, kMoeScratchTokens) tokens; the grouping in
  // its own (MoeGroupArrays, which a decode MoeRoute fills).
  const int64_t cap_nt = std::max(nt, kMoeScratchTokens);
  const int64_t cap_a = cap_nt * k;
  const int64_t off_u = Align256(cap_a * F * 4);
  const int64_t off_qh = off_u + Align256(cap_a * F * 4);
  const int64_t off_d = off_qh + Align256(cap_a * (F / 32) * static_cast<int64_t>(sizeof(BlockQ8A)));
  const int64_t total = off_d + Align256(cap_a * E * 4);
  ASSIGN_OR_RETURN(void* scratch, Scratch("moe", total));
  uint8_t* base = static_cast<uint8_t*>(scratch);
  ASSIGN_OR_RETURN(const MoeGroups grp, MoeGroupArrays(nt, k, n_exp));
  float* g = reinterpret_cast<float*>(base);
  float* u = reinterpret_cast<float*>(base + off_u);
  BlockQ8A* qh = reinterpret_cast<BlockQ8A*>(base + off_qh);
  float* d = reinterpret_cast<float*>(base + off_d);
  const float* route = o.f(1);

  // The route's own launch grouped for this FFN (RunMoeRoute), at this
  // width: the arrays hold it. Either way the grouping is used up here.
  const bool grouped = moe_grouped_.route == route && moe_grouped_.nt == nt &&
                       moe_grouped_.k == k && moe_grouped_.n_expert == n_exp &&
                       moe_grouped_.tile_tokens == tt;
  moe_grouped_ = {};
  if (!grouped) {
    RETURN_IF_ERROR(
        Check(LaunchMoeGroup(route, nt, k, n_exp, tt, grp, o.err_flag, st), "MoeFFN group"));
  }
  ASSIGN_OR_RETURN(const BlockQ8A* qx, Quantized(a.inputs[0], E, nt));

  // Gate and up: silu(g) * u straight from the matmul when the experts are
  // SiLU without biases and share a type (also gpt-oss's biases and
  // clamped SwiGLU with MINFER_MOE_FUSED_ACT, off: measured slower);
  // otherwise g and u, then the activation's launch (the same bits: moe.h
  // kMoeSwiGlu).
  MoeMatmulArgs m;
  m.expert_rows = F;
  m.n_expert = n_exp;
  m.q = qx;
  m.act_map = grp.order;
  m.act_div = k;
  m.tiles = grp.tiles;
  m.n_tiles = grp.n_tiles;
  m.max_tiles = max_tiles;
  m.tile_tokens = tt;
  m.y_stride = F;
  const bool silu = n.p.moe_act == graph::MoeAct::kSilu;
  const float* bg_data = bg ? static_cast<const float*>(bg->data) : nullptr;
  const float* bu_data = bu ? static_cast<const float*>(bu->data) : nullptr;
  const int64_t b_stride = bg ? bg->row_bytes / 4 : bu ? bu->row_bytes / 4 : F;
  // The CUDA-core SwiGLU form can also quantize h for down (its tiles'
  // last CTAs; moe.h MoeMatmulArgs::q_out): one launch less.
  bool quantized = false;
  if (G->type == U->type && ((silu && !bg && !bu) || knobs_.moe_fused_act)) {
    m.w = *G, m.up = *U, m.y = g, m.mode = kMoeSwiGlu;
    m.act_bg = bg_data;
    m.act_bu = bu_data;
    m.b_stride = b_stride;
    m.act = silu ? 0 : 1;
    m.alpha = n.p.moe_alpha;
    m.limit = n.p.moe_limit;
    if (!silu || bg || bu) stats_.moe_fused_act++;
    if (knobs_.moe_gate_quant && !mma) {
      ASSIGN_OR_RETURN(void* done, ZeroedScratch("moe_tile_done",
                                                 MoeMaxTiles(cap_nt, k, n_exp, 1) * 4));
      m.q_out = qh;
      m.tile_done = static_cast<int32_t*>(done);
      quantized = true;
      stats_.moe_gate_quant++;
    }
    RETURN_IF_ERROR(Check(matmul(m), "MoeFFN gate/up"));
    m.q_out = nullptr;
    m.tile_done = nullptr;
    m.act_bg = m.act_bu = nullptr;
    m.act = 0;
  } else {
    if (G->type == U->type) {
      m.w = *G, m.up = *U, m.y = g, m.y2 = u, m.mode = kMoePair;
      RETURN_IF_ERROR(Check(matmul(m), "MoeFFN gate/up"));
    } else {
      m.w = *G, m.y = g, m.mode = kMoePlain;
      RETURN_IF_ERROR(Check(matmul(m), "MoeFFN gate"));
      m.w = *U, m.y = u;
      RETURN_IF_ERROR(Check(matmul(m), "MoeFFN up"));
    }
    RETURN_IF_ERROR(Check(
        LaunchMoeBiasAct(g, u, bg_data, bu_data, route, grp.order, k, A, F, b_stride,
                         silu ? 0 : 1, n.p.moe_alpha, n.p.moe_limit, st),
        "MoeFFN activation"));
  }

  // Down, one row of d per grouped column, then the weighted sum.
  if (!quantized) {
    RETURN_IF_ERROR(Check(LaunchQuantizeQ8A(g, qh, F, A, st), "MoeFFN quantize"));
    stats_.quantize_launches++;
  }
  ASSIGN_OR_RETURN(const float* residual, ResidualInput(o, 2));
  if (residual != nullptr) stats_.residual_epilogue++;
  const float* bd_data = bd ? static_cast<const float*>(bd->data) : nullptr;
  const int64_t bd_stride = bd ? bd->row_bytes / 4 : 0;
  MoeMatmulArgs md = m;
  md.w = *D;
  md.up = WeightView{};
  md.expert_rows = E;
  md.q = qh;
  md.act_map = nullptr;
  md.act_div = 1;
  md.y = d;
  md.y2 = nullptr;
  md.y_stride = E;
  md.mode = kMoePlain;
  // One token on the CUDA-core matmul: down and the weighted sum in one
  // launch (the same bits; moe.h LaunchMoeDownCombine).
  if (knobs_.moe_down_combine && nt == 1 && !mma) {
    stats_.moe_down_combine++;
    return Check(LaunchMoeDownCombine(md, route, grp.slot, bd_data, bd_stride, k, residual,
                                      o.out, st),
                 "MoeFFN down + combine");
  }
  RETURN_IF_ERROR(Check(matmul(md), "MoeFFN down"));
  // The residual (graph.h; GraphBuilder::AddInto) in the combine's store.
  return Check(LaunchMoeCombine(d, route, grp.slot, bd_data, bd_stride, nt, k, E, residual, o.out,
                                st),
               "MoeFFN combine");
}

}  // namespace minfer::cuda
