// Non-matmul kernels of the decoder graph: norms, RoPE, elementwise ops, the
// KV cache store, attention (split-KV decode and prefill) and the decode
// QKV epilogue. Semantics are the CPU backend's (engine/cpu/kernels.h; the
// graph ops are documented in engine/graph/graph.h). Launchers return the
// launch error and never synchronize. Positions and ids are int32 device
// arrays; kernels never read them on the host (replay-safe: docs/design.md,
// CUDA graphs).
//
// Errors: a shape or parameter a kernel does not handle returns
// cudaErrorInvalidValue before anything is launched; a pointer without the
// alignment a kernel needs returns cudaErrorMisalignedAddress (attention;
// the elementwise and norm kernels fall back to scalar accesses instead).
// Empty work (n, rows or nt == 0) launches nothing and returns cudaSuccess.
//
// Numerics against the CPU backend (each kernel file says why):
//   add, mul, scale, permute, get rows, KV store   bit-identical
//   silu, swiglu, softmax   exp evaluated in double and rounded: equal to the
//                           CPU's except where glibc's expf (<= 0.502 ulp)
//                           rounds the other way; then within 1-3 ulp
//   RmsNorm                 bit-identical except ~1e-8 of rows (double sum
//                           order); the q8 plane is QuantizeRowQ8A of y, bit
//                           for bit
//   RoPE, QkvBiasRopeStore  bit-identical except ~1e-8 of angles, where
//                           cos/sin are 1 float ulp off
//   attention               float accumulation in a different order than the
//                           CPU: ~1e-6 relative; the tensor-core prefill
//                           (f16 cache) rounds Q and P to f16: see
//                           LaunchAttnPrefillTc for its bound
#ifndef MINFER_CUDA_KERNELS_OPS_H_
#define MINFER_CUDA_KERNELS_OPS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/kernels/types.h"

namespace minfer::cuda {

// --- elementwise (n elements; b repeats with period nb when nb < n) ---------
// y may equal a (or g) for in-place use. Bad GetRows ids give a zero row and
// set *error_flag to kDeviceBadTokenId.
cudaError_t LaunchAdd(const float* a, const float* b, int64_t nb, float* y, int64_t n,
                      cudaStream_t stream);
// y = (a + b) + r (graph.h's bias Add with a residual): LaunchAdd's sum,
// then r added in the same launch (the bits of a second LaunchAdd of it);
// y may equal a or r.
cudaError_t LaunchAddResidual(const float* a, const float* b, int64_t nb, const float* r,
                              float* y, int64_t n, cudaStream_t stream);
cudaError_t LaunchMul(const float* a, const float* b, int64_t nb, float* y, int64_t n,
                      cudaStream_t stream);
cudaError_t LaunchScale(const float* a, float s, float* y, int64_t n, cudaStream_t stream);
cudaError_t LaunchSilu(const float* a, float* y, int64_t n, cudaStream_t stream);
cudaError_t LaunchSwiGlu(const float* g, const float* u, float* y, int64_t n, cudaStream_t stream);
cudaError_t LaunchSoftmaxRows(const float* a, float* y, int64_t ne0, int64_t rows,
                              cudaStream_t stream);
// y = x with axes permuted: y.ne[perm[i]] = x.ne[i] (x.ne given).
cudaError_t LaunchPermute(const float* x, const int64_t x_ne[4], const int8_t perm[4], float* y,
                          cudaStream_t stream);
// GetRows from an f32 [ne0, rows] tensor.
cudaError_t LaunchGetRowsF32(const float* src, int64_t ne0, int64_t rows, const int32_t* ids,
                             int64_t n_ids, float* y, int32_t* error_flag, cudaStream_t stream);

// --- norms --------------------------------------------------------------------
// y = x / sqrt(mean(x^2) + eps) * w per row of ne0 (w may be null). When
// q8 is non-null the normalized rows are also quantized to BlockQ8A (the
// decode epilogue: the next MMVQ skips its quantize launch); y may then be
// null (only the int8 plane is written). ne0 % 4 == 0; with q8, ne0 % 32 == 0.
cudaError_t LaunchRmsNorm(const float* x, const float* w, float eps, float* y, BlockQ8A* q8,
                          int64_t ne0, int64_t rows, cudaStream_t stream);
// RmsNorm of nt rows of ne0 written only as MMQ's int8 activation layout
// (mmq.h; `act` 16-byte aligned, padding tokens zeroed), for the GEMMs
// that read it (the mode-2 fusion): bit-identical to LaunchRmsNorm into an
// f32 buffer then LaunchQuantizeMmq of it. ne0 % 32 == 0.
cudaError_t LaunchRmsNormMmq(const float* x, const float* w, float eps, void* act, int64_t ne0,
                             int64_t nt, cudaStream_t stream);
// The same written only as the DQ GEMM's f16 activation layout (dq_gemm.h;
// `act` 16-byte aligned, nt rows of 2 ne0 bytes): bit-identical to
// LaunchRmsNorm then LaunchQuantizeDq. ne0 % 32 == 0.
cudaError_t LaunchRmsNormDq(const float* x, const float* w, float eps, void* act, int64_t ne0,
                            int64_t nt, cudaStream_t stream);
// The same in the Hopper DQ GEMM's layout (dq_wgmma.h: each 16-group's even
// elements, then its odd ones): bit-identical to LaunchRmsNorm then
// LaunchQuantizeDqw.
cudaError_t LaunchRmsNormDqw(const float* x, const float* w, float eps, void* act, int64_t ne0,
                             int64_t nt, cudaStream_t stream);
// The same of x = r + (the sum of a split-k GEMM's partials): x [nt][ne0]
// is the sum over z < splits of part[z * stride + i], added in z order
// (then r + x where r is not null), written to x_out (may alias r) and
// normalized into `act`: bit-identical to the GEMM's reduce with the
// residual, then LaunchRmsNormDqw. splits 1..16 (1: part is the sum;
// stride unused).
cudaError_t LaunchRmsNormDqwParts(const float* part, int splits, int64_t stride, const float* r,
                                  float* x_out, const float* w, float eps, void* act, int64_t ne0,
                                  int64_t nt, cudaStream_t stream);

// --- RoPE ---------------------------------------------------------------------
// x [head_dim, n_heads, nt] -> y (may equal x). style 0 = NeoX (pairs i,
// i + n_rot/2), 1 = interleaved (pairs 2i, 2i+1). Angles are computed as the
// CPU does: theta = float(pos) * powf(base, -2i/n_rot) rounded to float, then
// cos/sin of that float (in double, rounded). n_rot == 0 means head_dim;
// n_rot must be even, <= head_dim and <= 256. Dims past n_rot pass through.
// host_factors (a HOST pointer, read during the call; may be null): n_rot/2
// frequency factors, freq[i] = powf(base, -2i/n_rot) / host_factors[i].
// yarn (may be null; graph.h RopeYarn, active when freq_scale != 1): the
// CPU's YaRN — per pair the ramp mix of interpolated (freq_scale * theta)
// and extrapolated angles, the table computed on the host with the CPU's
// expressions, and cos/sin scaled by the magnitude factor; the float
// operations are the CPU's, unfused.
struct RopeYarnArgs {
  float freq_scale = 1.0f;
  float ext_factor = 0.0f;
  float attn_factor = 1.0f;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  int32_t n_ctx_orig = 0;
};
cudaError_t LaunchRope(const float* x, const int32_t* pos, float* y, int64_t head_dim,
                       int64_t n_heads, int64_t nt, int n_rot, int style, float base,
                       cudaStream_t stream, const float* host_factors = nullptr,
                       const RopeYarnArgs* yarn = nullptr);

// --- KV cache -----------------------------------------------------------------
// Writes k/v rows (n_kv_embd floats per token) of nt tokens to cache row
// pos[t] (f32, f16, or q8_0 / fp8 blocks). Out-of-range positions are skipped and
// set *error_flag to kDeviceBadPosition. n_kv_embd % 4 == 0 (f32, f16) or
// % 32 == 0 (q8_0); caches 8-byte aligned. f16 rounds to nearest-even; q8_0
// blocks are byte-identical to engine/quant QuantizeRow(kQ8_0).
cudaError_t LaunchKvStore(const float* k, const float* v, const int32_t* pos, int64_t nt,
                          void* k_cache, void* v_cache, KvType type, int64_t n_kv_embd,
                          int64_t n_ctx, int32_t* error_flag, cudaStream_t stream);

// FusedQKV's epilogue (QkvBiasRopeStore) for nt tokens (decode: 1): adds
// the biases (each may be null), ropes q and k (NeoX/interleaved; all
// head_dim dims, the graph op's n_rot), writes roped q to q_out [head_dim,
// n_head, nt] and stores k, v of token t at cache row pos[t] (a bad
// position is skipped and flagged as in LaunchKvStore). q is [n_head *
// head_dim, nt], k and v [n_head_kv * head_dim, nt]; they may point into one
// buffer (the FusedQKV output, planar). Bit-identical to LaunchAdd +
// LaunchRope + LaunchKvStore. head_dim even and <= 256; q8_0 caches need
// head_dim % 32 == 0; nt <= 65535.
// `rows` (may be null: the positions) are the cache rows of the store, for
// a paged cache (graph.h), where a token's row is not its position.
// host_rope_factors: as LaunchRope's host_factors (head_dim/2 values).
// q_norm, k_norm (device, [head_dim]; both null or both set): Qwen3's
// per-head RmsNorm (eps norm_eps) of the biased q and k before RoPE, the
// values of LaunchRmsNorm over head rows (bit-identical except ~1e-8 of
// heads: the double sum's order).
// yarn (host, may be null): YaRN's angles, as LaunchRope's yarn_args.
// partials (host, may be null): q, k and v are slab 0 of a split-k GEMM's
// partials (the launch kept them: dq_wgmma.h, SplitOutputs): part i's
// value is the sum over z < splits[i] (1..16) of its slabs at + z *
// stride[i] floats, added in z order, the bits of the GEMM's own reduce.
struct QkvPartials {
  int splits[3] = {1, 1, 1};
  int64_t stride[3] = {0, 0, 0};
};
cudaError_t LaunchQkvBiasRopeStore(const float* q, const float* k, const float* v,
                                   const float* bq, const float* bk, const float* bv,
                                   const int32_t* pos, int64_t nt, float* q_out, void* k_cache,
                                   void* v_cache,
                                   const AttnParams& p, int rope_style, float rope_base,
                                   int32_t* error_flag, cudaStream_t stream,
                                   const int32_t* rows = nullptr,
                                   const float* host_rope_factors = nullptr,
                                   const float* q_norm = nullptr, const float* k_norm = nullptr,
                                   float norm_eps = 0.0f, const RopeYarnArgs* yarn = nullptr,
                                   const QkvPartials* partials = nullptr);

// --- attention ----------------------------------------------------------------
// Decode (one query token at position pos[0]): split-KV over kAttnSplits
// stripes x n_head warps into `partial` (AttnDecodePartialFloats(p) floats),
// then the combine kernel writes out [head_dim * n_head]. Static grids: the
// causal bound pos[0] + 1 is read on the device, so a captured launch is
// valid at any context length. head_dim <= 128 and % 4 == 0; n_head a
// multiple of n_head_kv; q, partial, out 16-byte aligned. A position outside
// [0, n_ctx) is clamped into the cache (the store flagged it).
//
// Two bodies share the partials (attention_decode.cu): contexts shorter than
// kAttnLongMinRows run the one-warp-per-(stripe, head) body, longer
// ones a GQA body (8 warps per (stripe, group of heads sharing a KV head)).
// Both are launched; each checks the device-side length and the other exits.
inline constexpr int32_t kAttnLongMinRows = 512;
int64_t AttnDecodePartialFloats(const AttnParams& p);
cudaError_t LaunchAttnDecode(const float* q, const int32_t* pos, const void* k_cache,
                             const void* v_cache, float* partial, float* out,
                             const AttnParams& p, cudaStream_t stream);

// Tests and benchmarks: LaunchAttnDecode with an explicit stripe count
// (1..kAttnSplits; 1 with long_min_rows = INT32_MAX is the serial one-warp
// reference) and switch-over length (0: always the GQA body, INT32_MAX:
// always the one-warp body; a body that cannot run is not launched).
// counters: the combine in the bodies instead of a launch of its own —
// the block that finishes a (token, head)'s last stripe merges them (one
// launch fewer per attention). AttnDecodeCounters ints, zero before the
// first launch; the kernels leave them zero. Null: the combine kernel.
// q8: also write each token's output row [n_head * head_dim] as BlockQ8A
// blocks (bit for bit QuantizeRowQ8A of the floats written; head_dim % 32
// == 0), token t's at q8 + t * n_head * head_dim / 32, so the output
// projection's MMVQ skips its quantize launch. Null: floats only.
struct AttnDecodeConfig {
  int n_splits = kAttnSplits;
  int32_t long_min_rows = kAttnLongMinRows;
  int32_t* counters = nullptr;
  BlockQ8A* q8 = nullptr;
};
// The counters a decode over n_tokens tokens (the paged form: its tiles;
// contiguous: 1) needs.
inline int64_t AttnDecodeCounters(const AttnParams& p, int64_t n_tokens) {
  return (n_tokens < 1 ? 1 : n_tokens) * p.n_head;
}
cudaError_t LaunchAttnDecodeConfigured(const float* q, const int32_t* pos, const void* k_cache,
                                       const void* v_cache, float* partial, float* out,
                                       const AttnParams& p, const AttnDecodeConfig& cfg,
                                       cudaStream_t stream);

// Prefill (nt tokens, token t attends to cache rows 0..pos[t]): q
// [head_dim, n_head, nt] -> out [head_dim * n_head, nt]. Causal, GQA; any nt
// and any positions (read on the device). Same limits as decode.
//
// Two kernels. The tensor-core one (LaunchAttnPrefillTc below) runs when it
// can — f16 cache, head_dim 64 or 128, an sm_80+ device, 16-byte aligned
// caches — and nt >= kAttnPrefillTcMinTokens (below that its 64-query tiles
// are mostly empty); otherwise the tiled CUDA-core kernel
// (attention_prefill.cu), which takes every cache type and head_dim. The
// choice depends only on the shapes, pointers and device, never on the
// positions, so a captured launch stays valid. The two differ in numerics
// (the tensor-core bound below vs ~1e-6): the f16-cache prefill path is the
// tensor-core one from this threshold on.
inline constexpr int64_t kAttnPrefillTcMinTokens = 16;
cudaError_t LaunchAttnPrefill(const float* q, const int32_t* pos, int64_t nt, const void* k_cache,
                              const void* v_cache, float* out, const AttnParams& p,
                              cudaStream_t stream);

// Tests and benchmarks: LaunchAttnPrefill with an explicit switch-over
// (tc_min_tokens 0: the tensor-core kernel whenever it can run; INT64_MAX:
// always the CUDA-core kernel).
struct AttnPrefillConfig {
  int64_t tc_min_tokens = kAttnPrefillTcMinTokens;
};
cudaError_t LaunchAttnPrefillConfigured(const float* q, const int32_t* pos, int64_t nt,
                                        const void* k_cache, const void* v_cache, float* out,
                                        const AttnParams& p, const AttnPrefillConfig& cfg,
                                        cudaStream_t stream);

// The tensor-core prefill kernel alone (attention_prefill_tc.cu; flash-
// attention-2 style: 64 queries of one head per block, K/V tiles of 64 rows
// through shared memory, mma.m16n8k16 f16 -> f32). Same semantics (sliding
// windows and sinks included), limits and errors as LaunchAttnPrefill, plus
// cudaErrorNotSupported (nothing
// launched) unless kv_type is kF16, head_dim is 64 or 128, k_cache and
// v_cache are 16-byte aligned, nt <= 65535 * 64 and the device is sm_80+.
//
// Numerics: Q is multiplied by scale * log2(e) in float and rounded to f16;
// the softmax weights P (each <= 1, relative to the running row max) are
// rounded to f16 for the P V product; K/V are f16 already; every product is
// exact and every sum (scores, row sums, output) is accumulated in f32. With
// u = 2^-11 (f16 unit roundoff) and, per (token, head),
// A = scale * max over visible rows j of sum_i |q_i k_ji|, the result y
// satisfies, against attention computed exactly (float64) from the same q
// and cache:
//   |y_d - exact_d| <= max|V| * ((2 A + 2) u + 1e-5)   (contexts <= 16384 rows)
// Why: rounding q moves each score by at most u A (natural-log units), so
// after normalization every weight w_j is off by a factor within
// exp(+-2 u A); rounding P_j changes the numerator's weight by <= u
// relative (the sum l uses the unrounded f32 P: the weights then sum to
// 1 +- u); a subnormal P (< 2^-14) is off by <= 2^-25 absolute, <= u in
// total over 16384 rows since l >= 1; the f32 sums add ~1e-6 as in the
// CUDA-core kernel. The bound is a worst case (all rounding errors of a
// score in one direction); typical errors are far smaller, since the
// roundings are independent and average out. Against a reference that
// rounds q the same way only the P term remains: <= max|V| * (u + 1e-4).
// q * scale * log2(e) must stay below 65504 in magnitude (else the f16
// overflows to inf and the row to NaN).
cudaError_t LaunchAttnPrefillTc(const float* q, const int32_t* pos, int64_t nt,
                                const void* k_cache, const void* v_cache, float* out,
                                const AttnParams& p, cudaStream_t stream);

// --- paged attention (graph.h's paged Attn) -----------------------------------
// Many sequences in one KV pool of blocks: token t of tile i (tiles [n_tiles]
// of (table row, first token, count, 0), int4-aligned) attends to logical
// rows 0..pos[t] of its sequence, whose block table is row tiles[i].x of
// `tables` [n_rows][max_blocks]; logical row j lives in cache row
// table[j / kv_block] * kv_block + j % kv_block. AttnParams::n_ctx is the
// pool's rows. Every launch has a static grid over n_tiles (the graph's
// bound) and reads the tiles on the device, so it replays at any batch.
struct AttnPaged {
  const int32_t* tiles = nullptr;
  int64_t n_tiles = 0;
  const int32_t* tables = nullptr;
  int32_t max_blocks = 0;
  int32_t kv_block = 0;  // a power of two
  // Decode: AttnDecodeConfig::counters (AttnDecodeCounters(p, n_tiles)
  // ints), or null.
  int32_t* counters = nullptr;
  // Decode: AttnDecodeConfig::q8 (token t = a tile's token index), or null.
  BlockQ8A* q8 = nullptr;
  // Decode: AttnDecodeConfig::long_min_rows — a token with at least this many
  // visible rows takes the GQA body (one block reads each KV row once for
  // all the query heads that share it), a shorter one the one-warp body
  // (one warp per query head, each reading the rows itself). The default is
  // the single-token choice; a batch has parallelism enough for the GQA body
  // sooner, and a quantized cache pays its loads and conversions once per
  // query head in the one-warp body (the nineteenth session's
  // attention_bench --batch). 0: always GQA; INT32_MAX: always one-warp.
  int32_t long_min_rows = kAttnLongMinRows;
};

// The switch-over length a paged decode step runs with, from the knob
// MINFER_ATTN_PAGED_LONG_MIN (>= 0: that length; -1, the default: the rule
// below) and the step's tile count. A step of kAttnPagedGqaMinTiles tiles or
// more takes the GQA body at every length: with many tokens there are
// blocks enough to fill the GPU without the one-warp body's per-head
// stripes, and that body reads each KV row once per query head (on an H100,
// the 7B at B = 64 and 256 rows: 37.6 us of attention per layer against 66.3
// with f16 KV, 62.2 against 155.1 with fp8; end to end +10.7% and +25%
// tok/s, B = 256 +12%, B = 16 +2.7%). Smaller steps keep the single-token
// rule (kAttnLongMinRows): at B = 4 the GQA body measured -2.9%.
inline constexpr int64_t kAttnPagedGqaMinTiles = 8;
inline int32_t PagedLongMinRows(int32_t knob, int64_t n_tiles) {
  if (knob >= 0) return knob;
  return n_tiles >= kAttnPagedGqaMinTiles ? 0 : kAttnLongMinRows;
}

// Decode: the tiles of one token (count 1), split-KV as LaunchAttnDecode with
// AttnPagedSplits stripes per token (32 for a single tile, the contiguous
// kernel's; fewer as tiles grow, so ~4,096 one-warp blocks fill the GPU).
// partial holds AttnPagedPartialFloats floats. Other tiles are left alone.
int AttnPagedSplits(const AttnParams& p, int64_t n_tiles);
int64_t AttnPagedPartialFloats(const AttnParams& p, int64_t n_tiles);
cudaError_t LaunchAttnDecodePaged(const float* q, const int32_t* pos, const void* k_cache,
                                  const void* v_cache, float* partial, float* out,
                                  const AttnParams& p, const AttnPaged& pg, cudaStream_t stream);

// Prefill: the tiles of two or more tokens (at most 64), by the tensor-core
// kernel where LaunchAttnPrefillTc can run (f16 cache, head_dim 64/128,
// sm_80+, 16-byte aligned caches) and tc is true, else the CUDA-core kernel;
// per query the same computation as LaunchAttnPrefill over a contiguous
// cache holding the sequence (bit-identical given the same rows). Other
// tiles are left alone.
cudaError_t LaunchAttnPrefillPaged(const float* q, const int32_t* pos, const void* k_cache,
                                   const void* v_cache, float* out, const AttnParams& p,
                                   const AttnPaged& pg, bool tc, cudaStream_t stream);

}  // namespace minfer::cuda

#endif  // MINFER_CUDA_KERNELS_OPS_H_
