// MMQ: the int8 tensor-core prefill GEMM (docs/design.md, prefill matmuls). Quantized
// weight bytes feed `mma.sync.m16n8k32.s8` directly: the raw GGUF blocks are
// staged into shared memory and decoded to int8 in registers, the f32
// activations are quantized once per matmul into the padded int8 layout
// below, products accumulate exactly in int32 per 32-element block (Q6_K:
// per 16 elements), and the float scales are folded in outside the integer
// work. Host-side launchers, same conventions as matmul.h: each returns the
// launch error (cudaGetLastError) and never synchronizes; a violated
// precondition returns cudaErrorInvalidValue before anything is launched;
// launchers allocate nothing, are thread-safe, and are legal inside a stream
// capture once each kernel has been launched outside one (the first launch
// of each kernel sets its shared-memory attribute).
//
// Shapes: W has `rows` output rows of `k` inputs (WeightView), x holds nt
// activation rows of k floats, y[t * rows + r] receives row r of token t.
// Types: Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K (raw 210-byte or padded
// 224-byte Q6_K blocks); k a positive multiple of the block size (32, K-quants
// 256); any rows >= 0 and nt >= 0 (the dispatcher uses it for nt >= 9) with
// the activation codes under 2 GiB (round_up(nt, kMmqTokenPad) * k < 2^31).
//
// Activation layout (what LaunchQuantizeMmq writes and the GEMM stages with
// 16-byte cp.async; one buffer of MmqActivationBytes(k, nt) bytes, 16-byte
// aligned). ntp = nt rounded up to kMmqTokenPad, nb = k / 32:
//   codes  int8  [ntp][k]   at byte 0           (block b of token t: bytes
//                                                t*k + 32b .. +31, as qs)
//   d      float [nb][ntp]  at byte ntp*k       (block scale, "transposed":
//   s      float [nb][ntp]  after d              consecutive tokens adjacent)
// Tokens nt..ntp-1 are written as zeros (codes 0, d = s = 0), so the GEMM
// stages whole token tiles without bounds checks. Per block this is the
// CPU's BlockQ8A (d, s, qs[32]) — 40 bytes per 32 values — just
// de-interleaved.
//
// Numerics (tests/cuda/kernels/mmq_test.cc checks each bound):
//  * LaunchQuantizeMmq is bit-exact with the CPU's QuantizeRowQ8A (and so
//    with LaunchQuantizeQ8A): d = absmax/127 (0 below FLT_MIN), qs =
//    round-half-to-even(x * (1/d)), s = d * float(sum qs).
//  * The GEMM computes the CPU's VecDotQ8A terms (engine/quant/vec_dot.h):
//    per activation block b an exact int32 dot I_b (int8 mma, no overflow:
//    |I_b| <= 32 * 128 * 127), folded as fma(float(I_b), (d * sc) * d_a,
//    acc) (Q6_K: per 16 elements), mins as fma(m, s_a, acc). Contract: the
//    same bound as MMVQ, |y - exact| <= 2^-24 (k/16 + 8) * sum|terms|, so
//    |y - VecDotQ8A| <= twice that (terms as in matmul.h). Implementation
//    note, not a promise: today every output folds its terms in the CPU's
//    order (blocks ascending, the min after the block's term), which makes
//    it bit-identical to VecDotQ8A and makes the fast and generic variants
//    bit-identical to each other; the test reports (but does not require)
//    the bit-exact count against the CPU.
//
// Scale planes (W_dsc for Q4_K, W_exp for Q6_K). A K-quant
// block's per-32-element float scales (Q4_K: d * sc and -(dmin * m); Q6_K:
// d * scales[2j], d * scales[2j + 1]) can be precomputed once at load time
// into a plane of float2 [rows][k / 32] (8 bytes per 32 weights: +44% of
// Q4_K's bytes, +29% of padded Q6_K's). A WeightView whose scale_plane
// points at one makes the fast variant stage the plane entries with the
// codes instead of decoding the packed scales per chunk; the entries are
// the same floats, so results are bit-identical with and without it.
//
// Stream-k (MmqTuning::stream_k). A grid of whole-tile CTAs wastes the
// empty part of its last wave: 7B's fused QKV at 512 tokens is 288 tiles for
// 264 resident CTA slots (1.09 waves, the second nearly empty). Given a
// workspace, the fast variant with 64-token tiles can instead run exactly
// the resident CTAs, each doing whole tiles for all waves but the last two
// and then an equal run of k-chunks of the remaining tiles (at least one
// tile's worth); a tile cut between two CTAs is finished by the second,
// which continues from the accumulators the first handed over (global
// memory, a flag with release/acquire). The fold of every output stays
// sequential in k, so stream-k changes no result bit; its cost is one
// hand-off per CTA and a kernel form with more register pressure, so kAuto
// uses it only below two waves. It relies on the CTAs of a launch being
// dispatched in index order (each waits only for the one before it) and
// traps after 10 s without its hand-off rather than hang.
//
// Variants (the "ladder"; LaunchMmq walks it). Both compute the same
// 128-row x {32,64,128}-token CTA tiles with the same numerics:
//  * kFast: weight chunks copied raw with 16-byte cp.async, double-buffered
//    behind the tensor-core work. Needs sm_80+, weight base and row_bytes
//    16-byte aligned (the registry's layout, DeviceRowBytes; a legacy
//    type's k need not be a multiple of 256), Q6_K padded, and the device's
//    opt-in shared memory (~60..130 KB). Returns cudaErrorNotSupported,
//    launching nothing, when a precondition fails.
//  * kGeneric: weights copied with 2-byte loads (any 2-byte aligned base and
//    stride, raw Q6_K); activations still by cp.async; ignores scale_plane. Needs sm_80+ only (MMQ needs mma.m16n8k32: on older GPUs
//    every launcher here returns cudaErrorNotSupported and the caller uses
//    LaunchGemmF16).
#ifndef MINFER_CUDA_KERNELS_MMQ_H_
#define MINFER_CUDA_KERNELS_MMQ_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/kernels/types.h"

namespace minfer::cuda {

// kMmqTokenPad (types.h): token padding of the activation layout. Besides
// LaunchQuantizeMmq, two producers write this layout directly (the mode-2
// fusions): LaunchRmsNormMmq (ops.h) and LaunchSwiGluMmq below.

// Whether the MMQ kernels handle `type` (the eight quantized types above):
// MmqSupports in types.h.

// Whether `type` has a scale plane (Q4_K, Q6_K), and its size for a weight
// of rows x k (0 when it has none or k % 256 != 0).
bool MmqScalePlaneType(GgmlType type);
int64_t MmqScalePlaneBytes(GgmlType type, int64_t k, int64_t rows);

// Writes w's scale plane (MmqScalePlaneBytes bytes at `plane`, 16-byte
// aligned). w: Q4_K (4-byte aligned blocks) or Q6_K (raw or padded).
cudaError_t LaunchMmqScalePlane(const WeightView& w, void* plane, cudaStream_t stream);

// Bytes of the activation buffer for nt tokens of k (k % 32 == 0):
// round_up(nt, kMmqTokenPad) * k / 32 * 40. 0 when nt == 0.
int64_t MmqActivationBytes(int64_t k, int64_t nt);

// x [nt][k] f32 (4-byte aligned; 16-byte aligned is faster) -> the
// activation layout above at `act` (16-byte aligned, MmqActivationBytes(k,
// nt) bytes; padding tokens included). k % 32 == 0.
cudaError_t LaunchQuantizeMmq(const float* x, void* act, int64_t k, int64_t nt,
                              cudaStream_t stream);

// The activation layout of y = silu(g) * u (g, u [nt][k] f32, the CPU's and
// LaunchSwiGlu's float operations) without writing y: bit-identical to
// LaunchSwiGlu then LaunchQuantizeMmq. Same requirements as
// LaunchQuantizeMmq.
cudaError_t LaunchSwiGluMmq(const float* g, const float* u, void* act, int64_t k, int64_t nt,
                            cudaStream_t stream);

enum class MmqVariant : int32_t {
  kNone = 0,     // nothing launched (empty shape or error)
  kFast = 1,     // raw cp.async weight staging
  kGeneric = 2,  // 2-byte-load weight staging
};
const char* MmqVariantName(MmqVariant v);

// What LaunchMmq / LaunchMmqQuantized did (for a MINFER_MMQ_RAW_NB_DEBUG
// print by the caller).
struct MmqReport {
  MmqVariant variant = MmqVariant::kNone;
  int tokens_per_cta = 0;
  bool scale_plane = false;  // kFast read the weight's scale plane
  int grid = 0;              // kFast: CTAs launched
  bool stream_k = false;     // kFast: the last waves ran as stream-k
  // Why kFast was skipped (a static string), or null when it ran.
  const char* fast_skipped = nullptr;
};

// When the fast variant uses stream-k (given a workspace).
enum class MmqStreamK : int32_t {
  kOff = 0,
  kAuto = 1,   // when the tiles make more than one wave and less than two
  kForce = 2,  // whenever they are more than one wave and not a whole number
};

// Bytes of the stream-k workspace for the current device (~8.5 MB on 132
// SMs): hand-off flags and accumulators. The caller allocates it (16-byte
// aligned) and zeroes it once; it is then reusable by any number of
// launches, one at a time (stream-ordered: each launch leaves its flags
// zero). 0 on a device error.
int64_t MmqStreamKBytes();

// Launch options. tokens_per_cta: explicit geometry for benchmarks and tests
// (LaunchMmqFast only); 0 = automatic: 64, or 32 when 64-token tiles would
// leave SMs idle (few weight rows). Stream-k runs with 64-token tiles only.
struct MmqTuning {
  int tokens_per_cta = 0;  // kFast: 32, 64 or 128 (128 halves the weight
                           // re-reads but allows one CTA per SM)
  MmqStreamK stream_k = MmqStreamK::kAuto;
  void* stream_k_workspace = nullptr;  // null: no stream-k (and no split-k)
  int64_t stream_k_bytes = 0;          // at least MmqStreamKBytes()
  // Split-k (fast variant): a grid of whole tiles too small to fill the
  // GPU — the few-token GEMMs of a decode batch — cuts each tile's chunks
  // into runs on several CTAs, which write partial sums to the workspace,
  // and a second kernel adds them in split order into y. Deterministic, but
  // associated otherwise than one CTA's fold: results move by float
  // rounding, within the contract above. 0 = off; kMmqSplitAuto = as the
  // shape calls for it (mmq.cu PlanSplitK); >= 2 = that many splits
  // (benchmarks, tests), fewer when the chunks or the workspace are short.
  int split_k = 0;
  void* split_workspace = nullptr;  // 16-byte aligned; null: no split-k
  int64_t split_bytes = 0;
  // The few-token kernel's form (LaunchMmqSmall): kMmqSmallAuto = staged
  // where its alignment holds, else direct; kMmqSmallDirect / Staged force
  // one (the staged form falls back to direct when it cannot run).
  int small_form = 0;
  // Staged form: 16-row m-tiles per warp (1 or 2); 0 = 1.
  int small_mtiles = 0;
  // Staged form, automatic split-k: at least this many k-chunks per split
  // (a CTA's pipeline needs a few to reach its stride); 0 = 2.
  int small_min_chunks = 0;
  // Staged form, one m-tile: cp.async stages, 3 or 4; 0 = 3. The 3-stage
  // build fits 4 CTAs per SM (shared memory, at most 128 registers) instead
  // of 3, for more warps to hide the fold's latencies.
  int small_stages = 0;
};
inline constexpr int kMmqSmallAuto = 0, kMmqSmallDirect = 1, kMmqSmallStaged = 2;
inline constexpr int kMmqSplitAuto = -1;

// Bytes of workspace automatic split-k uses at most (the backend allocates
// it once per model).
int64_t MmqSplitKBytes();

// One rung: y = W act with the fast variant. cudaErrorNotSupported (and
// *why_not set to a static string, when non-null) if a kFast precondition
// fails; cudaErrorInvalidValue for an invalid call (as matmul.h).
cudaError_t LaunchMmqFast(const WeightView& w, const void* act, float* y, int64_t nt,
                          const MmqTuning& tuning, cudaStream_t stream,
                          const char** why_not = nullptr);

// The generic rung: any valid call on sm_80+.
cudaError_t LaunchMmqGeneric(const WeightView& w, const void* act, float* y, int64_t nt,
                             cudaStream_t stream);

// The ladder on already-quantized activations: kFast, else kGeneric.
// `tuning`: its stream-k fields (null: none).
cudaError_t LaunchMmqQuantized(const WeightView& w, const void* act, float* y, int64_t nt,
                               cudaStream_t stream, MmqReport* report = nullptr,
                               const MmqTuning* tuning = nullptr);

// Up to kMmqMaxSegments weights of one type and k applied to the same
// activations, weight i's product to its own y[i] ([nt][w[i].rows]): one
// launch whose grid spans every weight's row tiles (FusedQKV at prefill:
// 7B's 512-row k and v alone fill a third of the SMs). Outputs are
// bit-identical to one LaunchMmqQuantized per weight. Scale planes are read
// only when every weight has one. The ladder as LaunchMmqQuantized; the
// generic rung launches once per weight.
inline constexpr int kMmqMaxSegments = 3;
struct MmqSegments {
  int n = 0;
  WeightView w[kMmqMaxSegments];
  float* y[kMmqMaxSegments] = {};
};
cudaError_t LaunchMmqSegments(const MmqSegments& segments, const void* act, int64_t nt,
                              cudaStream_t stream, MmqReport* report = nullptr,
                              const MmqTuning* tuning = nullptr);

// The few-token GEMM (mmq_small.cu): 1..kMmqSmallMaxTokens tokens on the
// same activation layout, every warp owning 16 (or 32) weight rows across
// all tokens, so each weight byte is read once and decoded once (the tiled
// kernel's fixed cost per weight byte is what limits a decode batch). Two
// forms: staged (weights warp-private and activations per CTA copied into
// shared memory by 16-byte cp.async, a few chunks ahead; weight bases and
// row strides 16-byte aligned) and direct (4-byte loads from global memory
// straight into mma fragments; 4-byte alignment). Segments as
// LaunchMmqSegments, in one launch; split-k from `tuning` (split_k /
// split_workspace; kMmqSplitAuto: enough CTAs to fill the GPU's resident
// slots in whole waves). Numerics as above: bit-identical to VecDotQ8A
// without a split, both forms. cudaErrorNotSupported (nothing launched,
// *why_not says why) for more tokens, raw Q6_K blocks, weights or rows not
// 4-byte aligned, or a GPU before sm_80.
inline constexpr int64_t kMmqSmallMaxTokens = 64;
cudaError_t LaunchMmqSmall(const MmqSegments& segments, const void* act, int64_t nt,
                           cudaStream_t stream, const MmqTuning* tuning = nullptr,
                           const char** why_not = nullptr);

// The whole prefill matmul: LaunchQuantizeMmq(x -> act_scratch) then the
// ladder. act_scratch: MmqActivationBytes(w.k, nt) bytes, 16-byte aligned,
// owned by the caller (it is overwritten; nothing else may use it until the
// GEMM has run on `stream`).
cudaError_t LaunchMmq(const WeightView& w, const float* x, void* act_scratch, float* y,
                      int64_t nt, cudaStream_t stream, MmqReport* report = nullptr,
                      const MmqTuning* tuning = nullptr);

}  // namespace minfer::cuda

#endif  // MINFER_CUDA_KERNELS_MMQ_H_
