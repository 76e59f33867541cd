// Mixture-of-experts kernels (graph.h MoeRoute, MoeFFN) for the CUDA
// backend: the router's top-k, the grouping of a batch's (token, expert)
// assignments by expert, the grouped expert matmuls, the gpt-oss
// activation with biases, and the weighted sum. Host-side launchers; each
// returns the launch error and never synchronizes, allocates nothing, and is
// legal inside a stream capture: every data-dependent quantity (which
// experts, how many tokens each) stays on the device, and a launch's grid
// depends only on the token count, so a captured step replays for any
// routing.
//
// The shape of one MoeFFN on the device (ops_moe.cc drives it):
//   1. LaunchMoeGroup: the A = nt * k assignments (token t's j-th choice is
//      assignment t * k + j) sorted by expert — `order` (grouped column ->
//      assignment), `slot` (assignment -> grouped column), ascending
//      assignment within an expert, as the CPU groups them — and a list of
//      tiles (expert, first column, columns), each of at most
//      MoeTileTokens(nt) columns of one expert, with their count on the
//      device.
//   2. LaunchMoeMatmul over the tiles, gate and up together: each CTA takes
//      one tile and a range of the expert's rows and reads those rows once
//      for the tile's tokens (MMVQ's integer dot, quant_dev.cuh's unit
//      decoders), the activations gathered through `order` from the tokens'
//      quantized rows. Experts whose gate and up share a type write
//      act(g + bg, u + bu) directly (kMoeSwiGlu's epilogue); otherwise g
//      and u go out and LaunchMoeBiasAct finishes.
//   3. The grouped activations quantized (LaunchQuantizeQ8A), then
//      LaunchMoeMatmul for down, one output row per grouped column.
//   4. LaunchMoeCombine: y_t = sum_j w_j (d_slot(t,j) + bd_e), j in route
//      order.
// Weights read per step: each chosen expert's rows once per tile, so a
// decode batch whose tokens share experts reads them about once (the
// tile holds up to 8 tokens), not once per token.
//
// Numerics: each assignment's dot products are MMVQ's terms (matmul.h:
// the CPU's VecDotQ8A terms per activation block, summed in another order),
// so a MoeFFN differs from the CPU's (engine/cpu/moe.cc) by that summation
// order, plus any code of the intermediate activation that the differing
// h rounds into another Q8A bin (one step of absmax/127 in that element).
// The router: the CPU ranks by score and the GPU by logit (the same order,
// softmax being monotone, except where exp rounds two different logits to
// one score; ties between equal logits go to the lower id on both).
#ifndef MINFER_CUDA_KERNELS_MOE_H_
#define MINFER_CUDA_KERNELS_MOE_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/kernels/types.h"

namespace minfer::cuda {

// Limits of the route kernel (one warp per token holds its logits in
// registers) and of the group kernel's shared counters.
inline constexpr int kMoeMaxExperts = 256;
inline constexpr int kMoeMaxUsed = 32;

// MoeRoute: logits [nt][n_expert] -> out [nt][2k] (k weights, then the k
// ids as int32 bits), graph.h's contract. gating 0: softmax over all
// logits, weights the chosen scores; 1: weights softmax over the chosen
// logits. norm: weights / max(sum, 6.103515625e-5). scale != 0: times it.
// A NaN logit ranks below every number (never chosen before one).
struct MoeRouteArgs {
  int32_t n_expert = 0;  // 1..kMoeMaxExperts
  int32_t k = 0;         // 1..min(n_expert, kMoeMaxUsed)
  int32_t gating = 0;
  bool norm = false;
  float scale = 0.0f;
  // Device [n_expert] or null: added to every token's logits first (the
  // float sums LaunchAdd would write).
  const float* bias = nullptr;
};
cudaError_t LaunchMoeRoute(const float* logits, int64_t nt, const MoeRouteArgs& a, float* out,
                           cudaStream_t stream);

// Columns of one tile of the CUDA-core grouped matmul: 1, 2, 4 or 8 (the
// fewest that hold nt tokens, at most 8; an expert holds at most nt of a
// batch's columns). The tensor-core one takes tiles of kMoeMmaTileTokens.
int MoeTileTokens(int64_t nt);
inline constexpr int kMoeMmaTileTokens = 32;
// Tiles a batch can need at `tile_tokens` columns per tile: every expert's
// count rounded up to whole tiles, at most A / tile + min(n_expert, A).
int64_t MoeMaxTiles(int64_t nt, int k, int n_expert, int tile_tokens);

// The grouping's device arrays (caller-owned): order[A], slot[A],
// tiles[MoeMaxTiles] as int4 (expert, first column, columns, 0), n_tiles[1].
struct MoeGroups {
  int32_t* order = nullptr;
  int32_t* slot = nullptr;
  int4* tiles = nullptr;
  int32_t* n_tiles = nullptr;
};
// Groups the assignments of `route` ([nt][2k], a MoeRoute output). An id
// outside [0, n_expert) sets *error_flag (may be null) to
// kDeviceBadExpertId and its assignment joins no tile (slot -1; its
// contribution to the output is 0). One CTA.
cudaError_t LaunchMoeGroup(const float* route, int64_t nt, int k, int n_expert, int tile_tokens,
                           const MoeGroups& g, int32_t* error_flag, cudaStream_t stream);

// LaunchMoeRoute and then LaunchMoeGroup of its output, in one launch (one
// CTA; decode batches: one launch less per MoE layer): `out` and the groups
// are what the two write. nt <= kMoeRouteGroupMaxTokens (a warp per token).
inline constexpr int kMoeRouteGroupMaxTokens = 8;
cudaError_t LaunchMoeRouteGroup(const float* logits, int64_t nt, const MoeRouteArgs& a,
                                float* out, int tile_tokens, const MoeGroups& g,
                                int32_t* error_flag, cudaStream_t stream);

// One grouped matmul over the tiles. w: an expert weight as the registry
// holds a 3-D tensor (k = its row length, rows = expert_rows * n_expert,
// expert e's rows from e * expert_rows), an integer-dot type (MmvqSupports)
// or MXFP4 in the registry's split layout (types.h).
// Grouped column c's activation row is q[act_map ? act_map[c] / act_div : c]
// (BlockQ8A rows of w.k). Output row r of column c goes to
// y[c * y_stride + r].
//   kMoePlain:  y = W x.
//   kMoeSwiGlu: y = act(W x + bg_e, U x + bu_e), U = up (same type and
//               shape), e the tile's expert, the biases optional (act_bg /
//               act_bu below); act silu(g) * u, or gpt-oss's clamped form:
//               LaunchMoeBiasAct's arithmetic, so the same bits as kMoePair
//               followed by it.
//   kMoePair:   y = W x, y2 = U x.
enum MoeMatmulMode : int { kMoePlain = 0, kMoeSwiGlu = 1, kMoePair = 2 };
struct MoeMatmulArgs {
  WeightView w;
  WeightView up;  // kMoeSwiGlu / kMoePair
  int64_t expert_rows = 0;
  int32_t n_expert = 0;
  const BlockQ8A* q = nullptr;
  const int32_t* act_map = nullptr;
  int32_t act_div = 1;
  const int4* tiles = nullptr;
  const int32_t* n_tiles = nullptr;
  int64_t max_tiles = 0;  // the grid's tile dimension (MoeMaxTiles)
  int tile_tokens = 1;    // MoeTileTokens(nt) of the grouping
  float* y = nullptr;
  float* y2 = nullptr;  // kMoePair
  int64_t y_stride = 0;
  int mode = kMoePlain;
  // kMoeSwiGlu on the CUDA-core kernel only (LaunchMoeMatmulMma refuses
  // it): also y's columns quantized, q_out[c * expert_rows / 32 ...] =
  // LaunchQuantizeQ8A(y, q_out, expert_rows, columns) bit for bit, by the
  // last CTA to finish each tile (one launch less per MoE layer at decode;
  // MINFER_MOE_GATE_QUANT). Needs y_stride == expert_rows, a multiple of 32,
  // y 16-byte aligned, and tile_done: max_tiles int32 counters, zero
  // before the first launch; each launch leaves them zero.
  BlockQ8A* q_out = nullptr;
  int32_t* tile_done = nullptr;
  // kMoeSwiGlu's epilogue (both kernels): f32 biases, expert e's
  // expert_rows values at b + e * b_stride (b_stride >= expert_rows), null
  // when absent; act 0 silu(g) * u, 1 gpt-oss's (alpha, limit), as
  // LaunchMoeBiasAct takes them.
  const float* act_bg = nullptr;
  const float* act_bu = nullptr;
  int64_t b_stride = 0;
  int act = 0;
  float alpha = 0.0f;
  float limit = 0.0f;
};
cudaError_t LaunchMoeMatmul(const MoeMatmulArgs& a, cudaStream_t stream);

// Single-stream decode (one token): LaunchMoeMatmul of down (kMoePlain,
// act_map null, one column per assignment, tiles of one token) and then
// LaunchMoeCombine with nt = 1 and n = a.expert_rows, in one launch and
// with the same bits: each row's dot is the grouped matmul's (the same
// lanes, the same order) and the sum the combine's, into y (E floats) with
// the residual. Reads `a`'s w, expert_rows, n_expert and q; its tiles and y
// are not used (no d goes through memory). route, slot: the token's route
// ([2k]) and the grouping's slot[k].
cudaError_t LaunchMoeDownCombine(const MoeMatmulArgs& a, const float* route, const int32_t* slot,
                                 const float* bd, int64_t bd_stride, int k,
                                 const float* residual, float* y, cudaStream_t stream);

// The same on the int8 tensor cores (sm_80+; cudaErrorNotSupported, nothing
// launched, below): the eight integer-dot types and MXFP4 (its doubled
// E2M1 values are int8, MoeMmaSupports), tiles of kMoeMmaTileTokens
// columns (a.tile_tokens). A CTA takes
// 64 rows of one expert and one tile; per 256-element chunk the rows' block
// bytes and the columns' int8 codes go through shared memory, and
// mma.m16n8k32 (Q6_K: two m16n8k16, its scales change every 16 elements)
// gives each block's exact integer dot, folded as MMVQ folds it (the CPU's
// terms, summed in another order). Worth it from about 16 tokens: below,
// the tiles are mostly empty columns.
bool MoeMmaSupports(GgmlType t);
cudaError_t LaunchMoeMatmulMma(const MoeMatmulArgs& a, cudaStream_t stream);

// The expert activation with optional biases, over the A grouped columns of
// g and u ([A][f]): g_c = act(g_c + bg_e, u_c + bu_e), e the column's
// expert (route/order give it). act 0: silu(g) * u; 1: gpt-oss's
// (graph.h kSwigluOai, alpha, limit). Biases f32, expert e's f values at
// b + e * b_stride (b_stride >= f), null when absent.
cudaError_t LaunchMoeBiasAct(float* g, const float* u, const float* bg, const float* bu,
                             const float* route, const int32_t* order, int k, int64_t a_count,
                             int64_t f, int64_t b_stride, int act, float alpha, float limit,
                             cudaStream_t stream);

// y[t][i] = sum_j w_tj (d[slot[t k + j]][i] + bd[e_tj][i]) for j = 0..k-1
// in order, as fma(w, d + b, acc) from 0 (bd: expert e's n values at bd +
// e * bd_stride, or null); a slot of -1 adds nothing. residual (may be
// null; y's layout, not overlapping it): y = residual + that sum, one
// float add last (graph.h MoeFFN's residual).
cudaError_t LaunchMoeCombine(const float* d, const float* route, const int32_t* slot,
                             const float* bd, int64_t bd_stride, int64_t nt, int k, int64_t n,
                             const float* residual, float* y, cudaStream_t stream);

}  // namespace minfer::cuda

#endif  // MINFER_CUDA_KERNELS_MOE_H_
