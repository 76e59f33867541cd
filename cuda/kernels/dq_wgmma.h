// The Hopper dequantizing GEMM (dq_wgmma.cu): the matmuls of a decode batch
// and of short prefills, 1..256 tokens, for Q4_K and Q6_K weights, on
// wgmma (sm_90a) with f32 accumulators.
//
// Why beside the sm_80 DQ GEMM (dq_gemm.h). That kernel decodes each weight
// once to f16 and feeds mma.sync; at 64 tokens it runs the 7B's FFN matmuls
// at 0.6-1.7 TB/s, bound by registers (its B fragments and accumulators), by
// the instruction stream (every activation fragment is loaded by every warp)
// and by mma.sync's half rate on Hopper. Here the four warps of a warpgroup
// decode their weight rows into wgmma's A registers (the same per-warp
// fragment as mma.m16n8k16), while B, the activations, is read by the
// tensor cores straight from shared memory: no activation loads by threads,
// one instruction per 64 rows x N tokens x 16 k, issued asynchronously so
// the next step's decode overlaps the current step's math.
//
// Activations (LaunchQuantizeDqw): the values and rounding of the DQ GEMM's
// layout (the CPU's QuantizeRowQ8A codes times their scale, as f16), f16
// [nt][k], token t's row at byte 2 k t; only the order inside each group of
// 16 elements differs: the 8 even elements first, then the 8 odd ones. Why:
// a lane decodes a 32-bit word of 4 codes into the f16 pairs (e0, e2) and
// (e1, e3) with one mask-and-or each; a wgmma k-step's "slots" 2t, 2t+1 and
// 2t+8, 2t+9 of lane t then hold elements 4t, 4t+2 and 4t+1, 4t+3 of the
// step's 16, so B's k order must be evens then odds. Each lane decodes the
// words at bytes 4t + 16i (i = 0..3) of a 128-element chunk's codes: for both
// Q4_K and Q6_K those words carry exactly the chunk's 4-groups t + 4s (s =
// 0..7), so one activation order serves both types (a FusedQKV of q/k in
// Q4_K and v in Q6_K reads one buffer).
//
// Numerics: dq_gemm.h's contract, unchanged (same operands, same f16
// roundings of weights and activations, f32 accumulation in another order):
// |y - sum w_i a_i| <= 2^-9 sum (|w_i| + |m_i|) |a_i|.
//
// Conventions as dq_gemm.h: launchers return the launch error and never
// synchronize, return cudaErrorInvalidValue for an invalid call before
// launching anything and cudaErrorNotSupported (with *why_not) when the
// kernel cannot take a valid call (no sm_90a code in this build, another
// GPU), allocate nothing, are thread-safe, and are legal inside a stream
// capture once each kernel has been launched outside one.
#ifndef MINFER_CUDA_KERNELS_DQ_WGMMA_H_
#define MINFER_CUDA_KERNELS_DQ_WGMMA_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/kernels/dq_gemm.h"
#include "cuda/kernels/mmq.h"

namespace minfer::cuda {

inline constexpr int64_t kDqwMaxTokens = 256;

// Whether this build carries the sm_90a kernel and the current device (a
// compute capability 9.0 GPU) runs it.
bool DqwAvailable();

// Bytes of the activation layout for nt tokens of k: 2 k nt.
int64_t DqwActivationBytes(int64_t k, int64_t nt);

// x [nt][k] f32 (4-byte aligned; 16 is faster) -> the layout above at `act`
// (16-byte aligned). k % 32 == 0. Same values as LaunchQuantizeDq, other
// order.
cudaError_t LaunchQuantizeDqw(const float* x, void* act, int64_t k, int64_t nt,
                              cudaStream_t stream);
// silu(g) * u into the layout without writing the product (the mode-2
// fusion; bit-identical to LaunchSwiGlu then LaunchQuantizeDqw). g and u
// may be split-k partials (SplitOutputs): g = the sum over z < g_splits of
// g[z * g_stride + j], added in z order, u likewise; the bits of the GEMM's
// reduce, then the SwiGLU. Splits 1..16 (1, the default: the pointer is the
// value itself, stride unused).
cudaError_t LaunchSwiGluDqw(const float* g, const float* u, void* act, int64_t k, int64_t nt,
                            cudaStream_t stream, int g_splits = 1, int64_t g_stride = 0,
                            int u_splits = 1, int64_t u_stride = 0);

// Where a launch left its outputs when asked to keep its split-k partials
// (DqwTuning::kept, DqpTuning::kept): segment i's output j is the sum
// over z < splits of part[i][z * stride + j], added in z order (the bits
// the launch's own reduce would have written); splits 1: part[i] is the
// output itself (the launch did not split). The partials live in the
// split workspace until the next launch that uses it: the consumer
// (LaunchSwiGluDqw) must come first in stream order.
struct SplitOutputs {
  const float* part[kMmqMaxSegments] = {};
  int splits = 1;
  int64_t stride = 0;
};

// y[i] = r[i] + the sum over z < splits of part[z * stride + i] (z order;
// no r: the sum alone), i < n: a split-k GEMM's reduce, for partials its
// launch kept (a consumer that cannot sum them gets them written). y may
// alias r. splits 1..16.
cudaError_t LaunchSplitSum(const float* part, int splits, int64_t stride, const float* r, float* y,
                           int64_t n, cudaStream_t stream);

struct DqwTuning {
  // Split-k as DqTuning (kMmqSplitAuto fills the resident CTA slots; >= 2
  // forces; 0 off), partials in the workspace, added in split order.
  int split_k = kMmqSplitAuto;
  void* split_workspace = nullptr;  // 16-byte aligned; null: no split-k
  int64_t split_bytes = 0;
  int min_chunks = 0;  // automatic split-k keeps this many 128-k chunks per split (0 = 4)
  // Warpgroups per CTA, 1 or 2 (64 or 128 weight rows sharing one copy of
  // the activations). On the H100 one kernel alone (matmul_bench --dqw) is
  // as fast or faster with 1, but in the 7B's batched decode 2 gives +4% at
  // 128 tokens and +13% at 256 (the activation traffic from L2 is shared
  // with everything else the step does); the backend takes 2 above 64.
  int warpgroups = 1;
  // How a CTA brings the activations into shared memory (MINFER_DQW_TMA):
  // 0, cp.async by every thread; 1, TMA (one box per 64 k values, thread 0,
  // an mbarrier per stage); 2, TMA multicast over a cluster of two CTAs of
  // adjacent row tiles, each bringing half of every chunk into both (half
  // the activations' L2 traffic). The same bytes in the same places: the
  // same results bit for bit. 1 and 2 apply from 17 tokens (tiles of 32 and
  // more) and where a tensor map can be made; otherwise 0 runs.
  int act_load = 0;
  // Set to the form that ran (tests and counters), when not null.
  int* act_load_used = nullptr;
  // Tests only: a wrong atom stride in the activations' descriptor (the
  // reference check must then fail, so it can fail at all).
  bool debug_wrong_stride = false;
  // y = residual + W act (one segment only; [nt][rows], may alias y): the
  // bits of the product followed by LaunchAdd(residual, y, ...), added in
  // the store (no split) or in the split-k reduce, so no Add launch.
  const float* residual = nullptr;
  // When not null: a launch that splits k leaves its partials unreduced
  // and describes them here (a consumer sums them: one launch and one
  // round trip of the outputs fewer), without the residual, which the
  // consumer then adds (r + the sum); one that does not split writes y
  // (with the residual) and says so (splits 1).
  SplitOutputs* kept = nullptr;
};

// y_i = W_i act, as LaunchDqGemm (segments, [nt][rows_i] outputs), for
// 1 <= nt <= kDqwMaxTokens tokens on the layout above. Weights: Q4_K, or
// Q6_K in the padded 224-byte layout; 16-byte aligned base and row stride;
// k a multiple of 256.
cudaError_t LaunchDqWgmma(const MmqSegments& segments, const void* act, int64_t nt,
                          cudaStream_t stream, const DqwTuning* tuning = nullptr,
                          const char** why_not = nullptr);

// ---- The prefill form (dqp_wgmma.cu): the same weights, activations and
// numerics (the same f16 weights bit for bit, f32 accumulation), for prompts
// of any length: a producer warpgroup decodes each 64-k step of a tile's
// weights into an f16 tile in shared memory (the activations' swizzled
// layout) and brings the activations by TMA; 2 or 4 consumer warpgroups
// (128 or 256 weight rows) issue wgmma with both operands from shared
// memory over tiles of 128 tokens (64 for a batch of at most 64). Each weight is decoded once per 128
// tokens, and no consumer thread spends an instruction on decoding, so at
// hundreds of tokens the tensor cores, not the decode, set the pace (the
// register form's decode sits between its wgmmas). Below ~128 tokens the
// register form is the one to run: a tile of 128 tokens computes zeros.

// (Token tiles are the grid's z, at most 65,535 of the smallest tile.)
inline constexpr int64_t kDqpMaxTokens = int64_t{65535} * 64;

struct DqpTuning {
  // Split-k as DqwTuning, taken only while the CTAs (row tiles x token
  // tiles) are fewer than the resident slots, or when forced (>= 2).
  int split_k = kMmqSplitAuto;
  void* split_workspace = nullptr;  // 16-byte aligned; null: no split-k
  int64_t split_bytes = 0;
  // Consumer warpgroups per CTA: 2 (128 rows) or 4 (256 rows: the
  // activations are copied once per 256 rows instead of 128). The 64-token
  // tile always has 2.
  int warpgroups = 2;
  // Tokens per tile: 64 (a decode batch: two CTAs per SM), 128, or 0 = 64
  // for at most 64 tokens, else 128.
  int tile_tokens = 0;
  // As DqwTuning's.
  const float* residual = nullptr;
  SplitOutputs* kept = nullptr;
};

// y_i = W_i act for 1 <= nt <= kDqpMaxTokens tokens, as LaunchDqWgmma
// (segments, the activation layout above, Q4_K or padded Q6_K, and here
// also Q8_0 and Q5_K (types.h DqpSupports: each weight decoded to f16 with
// one rounding, so the same contract); 16-byte alignment, k a multiple of
// 256). cudaErrorNotSupported (with *why_not)
// also where no TMA tensor map of the activations can be made.
cudaError_t LaunchDqpWgmma(const MmqSegments& segments, const void* act, int64_t nt,
                           cudaStream_t stream, const DqpTuning* tuning = nullptr,
                           const char** why_not = nullptr);

}  // namespace minfer::cuda

#endif  // MINFER_CUDA_KERNELS_DQ_WGMMA_H_
