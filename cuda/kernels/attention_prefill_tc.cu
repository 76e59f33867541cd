// Prefill attention on tensor cores (flash-attention-2 style) for the f16 KV
// cache: LaunchAttnPrefillTc in ops.h. Same semantics as the CUDA-core
// kernel of attention_prefill.cu (causal GQA, token t sees cache rows
// 0..pos[t], positions read on the device, any nt and positions), with Q and
// the softmax weights P rounded to f16 for the mma (the numerics contract is
// in ops.h).
//
// Tiling. One CTA = 64 queries (tokens) of one head, 4 warps of 16 query
// rows each. The cache is walked in tiles of 64 rows; K and V tiles are
// copied into shared memory with cp.async, double-buffered (the next tile's
// K is in flight while this tile's scores are formed, its V while this
// tile's P V runs). Per warp and tile:
//   S (16 x 64)  = Q (16 x hd, f16 A fragments held in registers for the
//                  whole kernel, pre-scaled by scale * log2 e) x K^T, with
//                  mma.m16n8k16 (f16 in, f32 accumulate); K fragments by
//                  ldmatrix (a K row is a B column: the .col operand as is);
//   online softmax on the S accumulators in registers (base 2: ex2; the
//                  running max and sum of each query row live in the 4 lanes
//                  that hold the row, combined with two xor shuffles);
//   O (16 x hd) += P (the S accumulators rounded to f16: an accumulator
//                  fragment of two n-tiles is exactly an A fragment, so P
//                  never leaves registers) x V, V fragments by ldmatrix.trans
//                  (a V row is a B row, so it is transposed on the way in).
// O is f32 in registers (hd / 2 floats per lane), normalized once at the end.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 with .f16 A/B and .f32 C; lane =
// 4 g + q): A a0 = (row g, k 2q..2q+1), a1 = (g + 8, 2q..), a2 = (g, 2q + 8..),
// a3 = (g + 8, 2q + 8..); B b0 = (k 2q..2q+1, col g), b1 = (k 2q + 8.., col
// g); C c0, c1 = (g, 2q), (g, 2q + 1), c2, c3 = (g + 8, 2q), (g + 8, 2q + 1).
// So a lane holds query rows g and g + 8 of its warp's 16.
//
// Causality. A CTA walks cache rows [0, max over its queries of pos + 1)
// only (with a sliding window, gpt-oss's, from the lowest row any of its
// queries sees: tiles wholly below every window are never loaded either;
// sinks join each row's normalizer at the end, as in the CUDA-core
// kernel): K tiles past that are never loaded (longest-range CTAs are launched
// first, as in the CUDA-core kernel). Rows of the last tile past that bound
// are zero-filled (cp.async with src-size 0), so no byte outside the causal
// range is read. Inside the range the mask (row j visible to token t iff
// j <= pos[t]) is applied per element only on tiles that reach past the
// warp's smallest position; a warp whose 16 positions all lie below the
// tile skips its math for that tile (it still helps load it).
//
// Shared memory rows are hd + 8 halves (an odd multiple of 16 bytes), so the
// 8 row addresses of each ldmatrix matrix fall in 8 different 16-byte bank
// groups: conflict-free without a swizzle. 4 tiles (K, V double-buffered):
// 36 KB at hd 64, 68 KB at hd 128 (dynamic shared memory above 48 KB is
// opted into once per instantiation).
//
// The kernel body needs sm_80 (cp.async, ldmatrix, m16n8k16 f16 mma); the
// launcher checks the device and answers cudaErrorNotSupported below that.
#include <cuda_fp16.h>

#include <climits>
#include <cstdint>

#include "cuda/kernels/attention_prefill_args.cuh"
#include "cuda/kernels/common.cuh"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/ops.h"
#include "cuda/kernels/per_device.cuh"
#include "cuda/kernels/ptx_sm80.cuh"

namespace minfer::cuda {
namespace {

constexpr int kTcThreads = 128;  // 4 warps
constexpr int kTcWarps = kTcThreads / 32;
constexpr int kBQ = 16 * kTcWarps;  // 64 queries per CTA
constexpr int kBKV = 64;            // cache rows per tile
constexpr int kMaxTiles = 65535;    // grid.y limit
constexpr float kLog2e = 1.44269504088896340736f;

template <int HD>
struct TcLayout {
  static constexpr int kLd = HD + 8;                      // halves per shared row
  static constexpr int kTileHalves = kBKV * kLd;          // one K or V tile
  static constexpr int kSmemBytes = 4 * kTileHalves * 2;  // K0 K1 V0 V1
  static constexpr int kChunksPerRow = HD / 8;            // 16-byte chunks
  static constexpr int kRowsPerPass = kTcThreads / kChunksPerRow;
  static_assert((kLd * 2 / 16) % 2 == 1, "row stride must be an odd multiple of 16 bytes");
  static_assert(kBKV % kRowsPerPass == 0, "tile rows split evenly over passes");
};

// ------------------------------------------------------------------ PTX
// (only in passes that can use them: an sm_75 pass of a release build
// compiles an empty kernel body and would warn about unused helpers)
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800

// 2^x, one MUFU.EX2 (max relative error ~2^-22; exp2f adds the scaling
// that keeps subnormal results, which here are weights below 2^-126 of the
// row max: flushing them to 0 is far inside the f16 rounding of P).
// -inf gives +0.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Two floats to an f16x2 word (round to nearest even; lo in the low half,
// the lower k index of an mma operand).
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Copies cache rows [row0, row0 + 64) of KV head hk into a shared tile
// (16-byte chunks; rows >= row_end zero-filled, not read).
template <int HD>
__device__ __forceinline__ void load_tile(const uint8_t* __restrict__ src_head, int64_t row_bytes,
                                          uint32_t dst_tile, int row0, int row_end, int tid,
                                          const int32_t* table, int block_shift) {
  using L = TcLayout<HD>;
  const int col = tid % L::kChunksPerRow;
  const int r0 = tid / L::kChunksPerRow;
#pragma unroll
  for (int i = 0; i < kBKV / L::kRowsPerPass; ++i) {
    const int r = r0 + i * L::kRowsPerPass;
    const int row = row0 + r;
    const bool ok = row < row_end;
    const uint8_t* src =
        ok ? src_head + kv_cache_row(table, block_shift, row) * row_bytes + col * 16 : src_head;
    cp_async16(dst_tile + (r * L::kLd + col * 8) * 2, src, ok ? 16 : 0);
  }
}

#endif  // !__CUDA_ARCH__ || __CUDA_ARCH__ >= 800

template <int HD>
__global__ void __launch_bounds__(kTcThreads) attn_prefill_tc_kernel(AttnPrefillArgs a) {
  pdl_enter();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using L = TcLayout<HD>;
  constexpr int kKSteps = HD / 16;    // mma k-steps of Q K^T; also n-tile pairs of P V
  constexpr int kNT = HD / 8;         // n-tiles of O
  extern __shared__ uint4 tc_smem[];  // uint4: 16-byte aligned for cp.async
  __shared__ int s_end[kTcWarps];
  __shared__ int s_begin[kTcWarps];
  __half* const sk = reinterpret_cast<__half*>(tc_smem);  // [2][kBKV][kLd]
  __half* const sv = sk + 2 * L::kTileHalves;             // [2][kBKV][kLd]

  const int h = blockIdx.x, hk = h / a.group;
  // Contiguous: tiles with the longest causal range first (grid.y walks
  // tiles, heads vary fastest so all heads of the longest tile start
  // together). Paged: grid.y walks the graph's tiles.
  const bool paged = a.tiles != nullptr;
  const int64_t index = paged ? blockIdx.y : static_cast<int64_t>(gridDim.y) - 1 - blockIdx.y;
  int64_t t_begin, t_end;
  const int32_t* table;
  if (!prefill_tokens(a, index, 0, kBQ, &t_begin, &t_end, &table)) return;  // block-uniform
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, qd = lane & 3;
  const int64_t t0 = t_begin + warp * 16 + g, t1 = t0 + 8;  // this lane's two rows
  const bool ok0 = t0 < t_end, ok1 = t1 < t_end;
  // Clamp as the CUDA-core kernel does: a position past the cache was
  // flagged by the store and is read as the last row; a negative one (or a
  // token past nt) sees nothing.
  const int64_t limit = paged ? static_cast<int64_t>(a.max_blocks) << a.block_shift : a.n_ctx;
  int p0 = ok0 ? __ldg(a.pos + t0) : -1;
  int p1 = ok1 ? __ldg(a.pos + t1) : -1;
  p0 = min(max(p0, -1), static_cast<int>(limit - 1));
  p1 = min(max(p1, -1), static_cast<int>(limit - 1));
  // The first row each sees: a sliding window starts at p - window + 1.
  const int lo0 = a.window > 0 ? max(p0 - a.window + 1, 0) : 0;
  const int lo1 = a.window > 0 ? max(p1 - a.window + 1, 0) : 0;
  int wmax = max(p0, p1), wmin = min(p0, p1);
  int wlo = min(lo0, lo1), wlo_max = max(lo0, lo1);
#pragma unroll
  for (int off = 4; off < 32; off <<= 1) {  // over g: the 4 lanes of a row agree
    wmax = max(wmax, __shfl_xor_sync(kFullWarpMask, wmax, off));
    wmin = min(wmin, __shfl_xor_sync(kFullWarpMask, wmin, off));
    wlo = min(wlo, __shfl_xor_sync(kFullWarpMask, wlo, off));
    wlo_max = max(wlo_max, __shfl_xor_sync(kFullWarpMask, wlo_max, off));
  }
  if (lane == 0) {
    s_end[warp] = wmax + 1;
    s_begin[warp] = wlo;
  }

  __syncthreads();
  int kv_end = s_end[0], kv_begin = s_begin[0];
#pragma unroll
  for (int w = 1; w < kTcWarps; ++w) {
    kv_end = max(kv_end, s_end[w]);
    kv_begin = min(kv_begin, s_begin[w]);
  }
  // Block-uniform: tiles [first_tile, n_tiles) hold every visible row (none
  // if nothing is visible); with a window, the tiles below every row's
  // window are never loaded.
  const int n_tiles = (kv_end + kBKV - 1) / kBKV;
  const int first_tile = min(kv_begin / kBKV, n_tiles);

  const uint8_t* const kh = a.k + static_cast<int64_t>(hk) * HD * 2;
  const uint8_t* const vh = a.v + static_cast<int64_t>(hk) * HD * 2;
  const uint32_t sk0 = smem_addr(sk), sv0 = smem_addr(sv);
  constexpr uint32_t kTileBytes = L::kTileHalves * 2;
  // ldmatrix row addresses of this lane within a tile.
  // K (non-transposed), n-tile pair jp, k-step kk: matrices (rows 16 jp + 0..7,
  // cols 16 kk + 0..7), (rows +0, cols +8), (rows +8, cols +0), (rows +8,
  // cols +8) = b0, b1 of n-tile 2 jp, then b0, b1 of n-tile 2 jp + 1.
  const uint32_t k_lane = (((lane >> 4) * 8 + (lane & 7)) * L::kLd + ((lane >> 3) & 1) * 8) * 2;
  // V (transposed), k-step kk (rows 16 kk..), n-tile pair dp (dims 16 dp..):
  // matrices (rows +0, dims +0), (rows +8, dims +0), (rows +0, dims +8),
  // (rows +8, dims +8) = b0, b1 of n-tile 2 dp, then of n-tile 2 dp + 1.
  const uint32_t v_lane = ((((lane >> 3) & 1) * 8 + (lane & 7)) * L::kLd + (lane >> 4) * 8) * 2;

  float o[kNT][4];
#pragma unroll
  for (int d = 0; d < kNT; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY;  // running max (exp2 domain) of rows g, g + 8
  float l0 = 0.0f, l1 = 0.0f;            // this lane's share of the row sums

  // Commit groups, in order: K0, V0, then K(i+1), V(i+1) during tile i
  // (empty groups past the last tile keep the counting uniform). Waiting
  // for "all but the newest one" therefore always means the group needed.
  if (first_tile < n_tiles) {
    const uint32_t off = (first_tile & 1) * kTileBytes;  // tile it's buffer is it & 1
    load_tile<HD>(kh, a.row_bytes, sk0 + off, first_tile * kBKV, kv_end, tid, table, a.block_shift);
    cp_async_commit();
    load_tile<HD>(vh, a.row_bytes, sv0 + off, first_tile * kBKV, kv_end, tid, table, a.block_shift);
    cp_async_commit();
  }

  // Q fragments, pre-scaled into the exp2 domain and rounded to f16 once
  // (while the first tile is in flight).
  uint32_t qa[kKSteps][4];
  {
    const float* q0 = a.q + (t0 * a.n_head + h) * HD + 2 * qd;
    const float* q1 = a.q + (t1 * a.n_head + h) * HD + 2 * qd;
    const float2 z = make_float2(0.f, 0.f);
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      const float2 x00 = ok0 ? *reinterpret_cast<const float2*>(q0 + 16 * kk) : z;
      const float2 x10 = ok1 ? *reinterpret_cast<const float2*>(q1 + 16 * kk) : z;
      const float2 x01 = ok0 ? *reinterpret_cast<const float2*>(q0 + 16 * kk + 8) : z;
      const float2 x11 = ok1 ? *reinterpret_cast<const float2*>(q1 + 16 * kk + 8) : z;
      qa[kk][0] = pack_half2(x00.x * a.qscale, x00.y * a.qscale);
      qa[kk][1] = pack_half2(x10.x * a.qscale, x10.y * a.qscale);
      qa[kk][2] = pack_half2(x01.x * a.qscale, x01.y * a.qscale);
      qa[kk][3] = pack_half2(x11.x * a.qscale, x11.y * a.qscale);
    }
  }
  for (int it = first_tile; it < n_tiles; ++it) {
    const int buf = it & 1, base = it * kBKV;
    const bool more = it + 1 < n_tiles;
    cp_async_wait<1>();  // K(it) has landed (V(it) may be in flight)
    __syncthreads();    // ... for every thread; and everyone is done with K(it - 1)
    if (more)
      load_tile<HD>(kh, a.row_bytes, sk0 + (buf ^ 1) * kTileBytes, base + kBKV, kv_end, tid,
                    table, a.block_shift);
    cp_async_commit();

    // Warp-uniform: does any of this warp's rows see a row of this tile?
    const bool active = base <= wmax && base + kBKV - 1 >= wlo;
    uint32_t pa[kBKV / 16][4];  // P as A fragments of the P V k-steps
    if (active) {
      float s[kBKV / 8][4];
#pragma unroll
      for (int j = 0; j < kBKV / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
      const uint32_t kt = sk0 + buf * kTileBytes + k_lane;
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
#pragma unroll
        for (int jp = 0; jp < kBKV / 16; ++jp) {
          uint32_t b[4];
          ldmatrix_x4(b, kt + (16 * jp * L::kLd + 16 * kk) * 2);
          mma_f16(s[2 * jp], qa[kk], b[0], b[1]);
          mma_f16(s[2 * jp + 1], qa[kk], b[2], b[3]);
        }
      }
      // Causal (and window) mask, only where some row of the tile is past
      // some position of the warp (the diagonal tile, or unsorted
      // positions) or before some row's window.
      if (base + kBKV - 1 > wmin || base < wlo_max) {
#pragma unroll
        for (int j = 0; j < kBKV / 8; ++j) {
          const int c = base + 8 * j + 2 * qd;
          s[j][0] = c <= p0 && c >= lo0 ? s[j][0] : -INFINITY;
          s[j][1] = c + 1 <= p0 && c + 1 >= lo0 ? s[j][1] : -INFINITY;
          s[j][2] = c <= p1 && c >= lo1 ? s[j][2] : -INFINITY;
          s[j][3] = c + 1 <= p1 && c + 1 >= lo1 ? s[j][3] : -INFINITY;
        }
      }
      // Online softmax in base 2. The max used for the
      // exponents is 0 while a row has seen nothing (all -inf), so no
      // inf - inf appears: its weights and correction are then 2^-inf = 0.
      float mx0 = m0, mx1 = m1;
#pragma unroll
      for (int j = 0; j < kBKV / 8; ++j) {
        mx0 = fmaxf(mx0, fmaxf(s[j][0], s[j][1]));
        mx1 = fmaxf(mx1, fmaxf(s[j][2], s[j][3]));
      }
      mx0 = fmaxf(mx0, __shfl_xor_sync(kFullWarpMask, mx0, 1));
      mx0 = fmaxf(mx0, __shfl_xor_sync(kFullWarpMask, mx0, 2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(kFullWarpMask, mx1, 1));
      mx1 = fmaxf(mx1, __shfl_xor_sync(kFullWarpMask, mx1, 2));
      const float mu0 = mx0 == -INFINITY ? 0.0f : mx0;
      const float mu1 = mx1 == -INFINITY ? 0.0f : mx1;
      const float corr0 = exp2_ftz(m0 - mu0), corr1 = exp2_ftz(m1 - mu1);
      m0 = mx0;
      m1 = mx1;
      float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
      for (int j = 0; j < kBKV / 8; ++j) {
        s[j][0] = exp2_ftz(s[j][0] - mu0);
        s[j][1] = exp2_ftz(s[j][1] - mu0);
        s[j][2] = exp2_ftz(s[j][2] - mu1);
        s[j][3] = exp2_ftz(s[j][3] - mu1);
        rs0 += s[j][0] + s[j][1];
        rs1 += s[j][2] + s[j][3];
      }
      // The sums use the f32 weights; the numerator the f16-rounded ones
      // (ops.h: this costs at most 2^-11 of max|V|).
      l0 = l0 * corr0 + rs0;
      l1 = l1 * corr1 + rs1;
#pragma unroll
      for (int d = 0; d < kNT; ++d) {
        o[d][0] *= corr0;
        o[d][1] *= corr0;
        o[d][2] *= corr1;
        o[d][3] *= corr1;
      }
      // C fragments of n-tiles 2kk and 2kk + 1 are the A fragment of P V
      // k-step kk (cache rows 16 kk..16 kk + 15 of the tile).
#pragma unroll
      for (int kk = 0; kk < kBKV / 16; ++kk) {
        pa[kk][0] = pack_half2(s[2 * kk][0], s[2 * kk][1]);
        pa[kk][1] = pack_half2(s[2 * kk][2], s[2 * kk][3]);
        pa[kk][2] = pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pa[kk][3] = pack_half2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      }
    }

    cp_async_wait<1>();  // V(it) has landed (K(it + 1) may be in flight)
    __syncthreads();    // ... for every thread; and everyone is done with V(it - 1)
    if (more)
      load_tile<HD>(vh, a.row_bytes, sv0 + (buf ^ 1) * kTileBytes, base + kBKV, kv_end, tid,
                    table, a.block_shift);
    cp_async_commit();

    if (active) {
      const uint32_t vt = sv0 + buf * kTileBytes + v_lane;
#pragma unroll
      for (int kk = 0; kk < kBKV / 16; ++kk) {
#pragma unroll
        for (int dp = 0; dp < kKSteps; ++dp) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, vt + (16 * kk * L::kLd + 16 * dp) * 2);
          mma_f16(o[2 * dp], pa[kk], b[0], b[1]);
          mma_f16(o[2 * dp + 1], pa[kk], b[2], b[3]);
        }
      }
    }
  }

  // Row sums over the row's 4 lanes; a row that saw nothing writes zeros.
  l0 += __shfl_xor_sync(kFullWarpMask, l0, 1);
  l0 += __shfl_xor_sync(kFullWarpMask, l0, 2);
  l1 += __shfl_xor_sync(kFullWarpMask, l1, 1);
  l1 += __shfl_xor_sync(kFullWarpMask, l1, 2);
  if (a.sinks != nullptr) {
    // A sink s (log2 units: s_h log2 e) joins the normalizer: the weights
    // are relative to the row's max m, so it adds 2^(s - m) (infinite, and
    // the row zero, where the row saw nothing: m = -inf).
    const float s2 = __ldg(a.sinks + h) * kLog2e;
    l0 += exp2f(s2 - m0);
    l1 += exp2f(s2 - m1);
  }
  const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f;
  const float inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
  // Each quad writes 32 contiguous bytes per n-tile: whole sectors.
  if (ok0) {
    float* o0 = a.out + (t0 * a.n_head + h) * HD + 2 * qd;
#pragma unroll
    for (int d = 0; d < kNT; ++d) {
      *reinterpret_cast<float2*>(o0 + 8 * d) = make_float2(o[d][0] * inv0, o[d][1] * inv0);
    }
  }
  if (ok1) {
    float* o1 = a.out + (t1 * a.n_head + h) * HD + 2 * qd;
#pragma unroll
    for (int d = 0; d < kNT; ++d) {
      *reinterpret_cast<float2*>(o1 + 8 * d) = make_float2(o[d][2] * inv1, o[d][3] * inv1);
    }
  }
#endif  // __CUDA_ARCH__ >= 800
}

// Raises the instantiation's dynamic shared-memory limit once (first call;
// not a stream operation). Returns cudaErrorNotSupported when refused.
template <int HD>
cudaError_t LaunchTc(const AttnPrefillArgs& a, int64_t tiles, cudaStream_t stream) {
  constexpr int kBytes = TcLayout<HD>::kSmemBytes;
  // Per device: the opt-in is the current device's only.
  static PerDevice<cudaError_t> attr;
  const cudaError_t raised = attr.Get([](int) {
    if (kBytes <= 48 * 1024) return cudaSuccess;
    const cudaError_t e = cudaFuncSetAttribute(attn_prefill_tc_kernel<HD>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
    if (e != cudaSuccess) (void)cudaGetLastError();  // not sticky: clear it
    return e;
  });
  if (raised != cudaSuccess) return cudaErrorNotSupported;
  const dim3 grid(static_cast<unsigned>(a.n_head), static_cast<unsigned>(tiles));
  LaunchGrid(attn_prefill_tc_kernel<HD>, grid, kTcThreads, kBytes, stream, a);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchAttnPrefillTcArgs(const AttnPrefillArgs& a, int64_t tiles, const AttnParams& p,
                                    cudaStream_t stream) {
  // What only this kernel needs: f16 cache, head_dim 64 / 128, 16-byte
  // aligned caches (cp.async; rows and head offsets are then 128-byte
  // multiples), a grid.y that fits, and an sm_80+ device.
  if (p.kv_type != KvType::kF16 || (p.head_dim != 64 && p.head_dim != 128) ||
      !AlignedTo(a.k, 16) || !AlignedTo(a.v, 16) || tiles > kMaxTiles) {
    return cudaErrorNotSupported;
  }
  int dev = 0, major = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err == cudaSuccess)
    err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  if (err != cudaSuccess) return err;
  if (major < 8) return cudaErrorNotSupported;
  return p.head_dim == 64 ? LaunchTc<64>(a, tiles, stream) : LaunchTc<128>(a, tiles, stream);
}

cudaError_t LaunchAttnPrefillTc(const float* q, const int32_t* pos, int64_t nt, const void* k_cache,
                                const void* v_cache, float* out, const AttnParams& p,
                                cudaStream_t stream) {
  if (nt <= 0) return cudaSuccess;
  if (p.n_head <= 0 || p.n_head_kv <= 0 || p.n_head % p.n_head_kv != 0 || p.head_dim <= 0 ||
      p.head_dim > 128 || p.head_dim % 4 != 0 || p.n_ctx <= 0 || p.n_ctx >= INT_MAX ||
      p.n_head > 65535) {
    return cudaErrorInvalidValue;
  }
  if (!AlignedTo(q, 16) || !AlignedTo(out, 16)) return cudaErrorMisalignedAddress;
  const int64_t tiles = (nt + kBQ - 1) / kBQ;
  const AttnPrefillArgs a = MakeAttnPrefillArgs(q, pos, nt, k_cache, v_cache, out, p);
  return LaunchAttnPrefillTcArgs(a, tiles, p, stream);
}

}  // namespace minfer::cuda
