// The Hopper dequantizing prefill GEMM (dq_wgmma.h, LaunchDqpWgmma): Q4_K /
// Q6_K weights decoded to f16 in shared memory by a producer warpgroup, both
// wgmma operands read by the tensor cores from shared memory, f32
// accumulators; any number of tokens. Compiled for sm_90a only (the build's
// --sm90a flag); other targets get an empty kernel the launcher never starts.
//
// Why a second kernel beside dq_wgmma.cu's. That one decodes each warp's
// weight rows into wgmma's A registers between its own wgmmas: right for a
// decode batch (the weights are the bytes that matter, and a tile of 8..256
// tokens is all there is), but at a prompt of hundreds of tokens the same
// warps must both decode and keep the tensor cores fed, 233 TFLOPS at 256
// tokens on the H100, and the 7B's pp512 ran on the int8 MMQ at ~133 TOPS.
// Here the roles are split (warp specialization): a CTA is a producer
// warpgroup and kWG consumer warpgroups. The producer decodes each 64-k step
// of the tile's weights into an f16 A tile in shared memory, laid out
// exactly like the activations (wgmma's K-major 128-byte swizzle), and
// brings the activations' box by TMA; the consumers only issue wgmmas, A
// and B both by descriptor. Each weight is decoded once per CTA, i.e. once
// per N (128) tokens.
//
// Work. CTA (x, y, z) = (row tile of 64 kWG rows, k split, token tile of N).
// Rows are numbered in the row groups of split_k.cuh (16 rows of one
// segment), 4 kWG groups per tile, so a FusedQKV's q/k/v share a launch.
// Producer thread r owns tile rows r, r + 128, ...: per 128-k chunk it
// copies its rows' bytes (dq_wgmma_impl.cuh's piece layout) into a ring of
// kRaw chunks (cp.async; only the thread that copied a row decodes it, so
// the ring needs no barrier), and per 64-k step it decodes them into stage
// s's A tile: row r's 16-byte piece c (8 k positions) at atom r / 8, row r %
// 8, slot c ^ (r % 8) — the layout the TMA writes for the activations. Each
// piece is one 16-group's evens or odds (the activations' order,
// dq_wgmma.h), so a Q4_K word of 4 codes gives 2 f16 pairs per nibble half
// with the same instructions (and bits) as the register kernel.
//
// Synchronization, per stage s of kStages (each one 64-k step: A tile and
// activation box): full[s] completes when all 128 producer threads have
// written their rows (each fences its generic-proxy stores for the async
// proxy, then arrives) and the TMA's bytes have landed (thread 0's arrival
// announces them); empty[s] completes when every consumer warp has retired
// the wgmmas that read the stage (wgmma.wait_group 1 one step later).
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/dq_wgmma.h"
#include "cuda/kernels/dq_wgmma_impl.cuh"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/ptx_sm80.cuh"
#include "cuda/kernels/ptx_sm90.cuh"
#include "cuda/kernels/split_k.cuh"

namespace minfer::cuda {
namespace dqp {
namespace {

using dqw::Ty;
constexpr int kMaxSmem = 227 * 1024;
constexpr int kProducers = 128;  // one warpgroup

using splitk::Seg;

struct Params {
  Seg seg[kMmqMaxSegments];
  int group_begin[kMmqMaxSegments];
  int n_seg;
  int groups;
  int64_t k;
  int n_chunks;  // k / 128
  int nt;
  int splits;
  int64_t split_stride;
  int tiles;  // row tiles (grid x)
};

template <int kWG>
__host__ __device__ constexpr int ABytes() {
  return kWG * 64 * 128;
}
// A stage: the A tile, then one 64-k box of N tokens' activations.
template <int kWG, int N>
__host__ __device__ constexpr int StageBytes() {
  return ABytes<kWG>() + N * 128;
}
template <GgmlType T, int kWG>
__host__ __device__ constexpr int RawBytes() {
  return kWG * 64 * Ty<T>::kRowBytes;
}
// CTAs per SM the tile is built for: two for the 64-token tile of a decode
// batch (the producer's decode then has two warpgroups per SM to hide its
// latencies, and the CTA's registers are capped to fit), one otherwise.
template <int kWG, int N>
__host__ __device__ constexpr int CtasOf() {
  return N <= 64 && kWG == 2 ? 2 : 1;
}
// Stages and raw chunks that fit the CTAs' share of shared memory: 4 and 3
// where they do, fewer otherwise (at least 3 and 2).
template <GgmlType T, int kWG, int N>
__host__ __device__ constexpr int StagesOf() {
  return 4 * StageBytes<kWG, N>() + 3 * RawBytes<T, kWG>() + 1024 <= kMaxSmem / CtasOf<kWG, N>() ? 4
                                                                                                 : 3;
}
template <GgmlType T, int kWG, int N>
__host__ __device__ constexpr int RawOf() {
  return StagesOf<T, kWG, N>() * StageBytes<kWG, N>() + 3 * RawBytes<T, kWG>() + 1024 <=
                 kMaxSmem / CtasOf<kWG, N>()
             ? 3
             : 2;
}
template <GgmlType T, int kWG, int N>
__host__ __device__ constexpr int SmemOf() {
  return StagesOf<T, kWG, N>() * StageBytes<kWG, N>() + RawOf<T, kWG, N>() * RawBytes<T, kWG>() + 1024;
}

#if defined(MINFER_SM90A_DEVICE)

using dqw::AndOr;
using dqw::AsH2;
using dqw::kMagic;
using dqw::kMagic64;

__device__ __forceinline__ void Sts128(uint8_t* p, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  *reinterpret_cast<uint4*>(p) = make_uint4(a, b, c, d);
}

// Row r's piece c (8 k positions) of an A tile: the 128-byte swizzle.
__device__ __forceinline__ uint8_t* APiece(uint8_t* a, int r, int c) {
  return a + (r >> 3) * 1024 + (r & 7) * 128 + ((c ^ (r & 7)) << 4);
}

// Decodes 64-k step u (0, 1) of chunk half h from one row's raw bytes `rr`
// into row r of the A tile `a`.
template <GgmlType T>
__device__ __forceinline__ void DecodeRow(const uint8_t* rr, int h, int u, uint8_t* a, int r);

template <>
__device__ __forceinline__ void DecodeRow<GgmlType::kQ4_K>(const uint8_t* rr, int h, int u,
                                                           uint8_t* a, int r) {
  // Step u is super-block chunk 2h + u: code bytes 32u .. 32u + 31 of the
  // half, low nibbles its first 32 elements (sub-block 4h + 2u), high
  // nibbles the next 32 (4h + 2u + 1).
  const uint4 hd = *reinterpret_cast<const uint4*>(rr);
  half2 s, m;
  dqw::Q4kScaleMin(hd, h, u, &s, &m);
  const half2 slo = __low2half2(s), mlo = __low2half2(m);
  const half2 shi = __high2half2(s), mhi = __high2half2(m);
#pragma unroll
  for (int b = 0; b < 2; ++b) {
    const uint4 w = *reinterpret_cast<const uint4*>(rr + 16 + 32 * u + 16 * b);
    const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
    uint32_t ev[4], od[4];
    // 16-group b (low nibbles): pieces 2b (evens), 2b + 1 (odds).
#pragma unroll
    for (int i = 0; i < 4; ++i) dqw::Q4kPairs<0x000F000Fu, kMagic>(ws[i], slo, mlo, ev[i], od[i]);
    Sts128(APiece(a, r, 2 * b), ev[0], ev[1], ev[2], ev[3]);
    Sts128(APiece(a, r, 2 * b + 1), od[0], od[1], od[2], od[3]);
    // 16-group b + 2 (high nibbles): pieces 2b + 4, 2b + 5.
#pragma unroll
    for (int i = 0; i < 4; ++i) dqw::Q4kPairs<0x00F000F0u, kMagic64>(ws[i], shi, mhi, ev[i], od[i]);
    Sts128(APiece(a, r, 2 * b + 4), ev[0], ev[1], ev[2], ev[3]);
    Sts128(APiece(a, r, 2 * b + 5), od[0], od[1], od[2], od[3]);
  }
}

template <>
__device__ __forceinline__ void DecodeRow<GgmlType::kQ6_K>(const uint8_t* rr, int h, int u,
                                                           uint8_t* a, int r) {
  // Element e of the half (0..127): l = e % 32, quarter e / 32 takes ql[l]
  // (quarters 0, 2) or ql[l + 32] (1, 3), low nibbles in quarters 0-1 and
  // high in 2-3, and qh[l]'s bits 2 (e / 32). Step u's 16-group G is
  // elements 64u + 16G .. + 15: ql bytes 16G .., qh bytes 16 (G % 2) ..,
  // the high bits at 4u + 2 (G / 2), the nibble high when u = 1; its scale
  // is int8 scale 8h + 4u + G.
  const half2 d = __low2half2(AsH2(*reinterpret_cast<const uint32_t*>(rr + 112)));
  const uint4 sc4 = *reinterpret_cast<const uint4*>(rr + 96);
  const uint32_t scw = (h == 0 ? (u == 0 ? sc4.x : sc4.y) : (u == 0 ? sc4.z : sc4.w));
  half2 sp[2];
  dqw::Q6kScales4(scw, d, &sp[0], &sp[1]);
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    const uint4 x = *reinterpret_cast<const uint4*>(rr + 16 * g);
    const uint4 y = *reinterpret_cast<const uint4*>(rr + 64 + 16 * (g & 1));
    const uint32_t xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
    const int sh = 4 * u + 2 * (g >> 1);
    const half2 sv = (g & 1) ? __high2half2(sp[g >> 1]) : __low2half2(sp[g >> 1]);
    uint32_t ev[4], od[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // Bits sh, sh + 1 of each qh byte to bits 4, 5 (within the byte).
      const uint32_t hi = (sh <= 4 ? ys[i] << (4 - sh) : ys[i] >> (sh - 4)) & 0x30303030u;
      const uint32_t lo = u == 0 ? (xs[i] & 0x0F0F0F0Fu) : ((xs[i] >> 4) & 0x0F0F0F0Fu);
      dqw::BiasedPairs<32>(lo | hi, sv, ev[i], od[i]);
    }
    Sts128(APiece(a, r, 2 * g), ev[0], ev[1], ev[2], ev[3]);
    Sts128(APiece(a, r, 2 * g + 1), od[0], od[1], od[2], od[3]);
  }
}

template <>
__device__ __forceinline__ void DecodeRow<GgmlType::kQ5_K>(const uint8_t* rr, int h, int u,
                                                           uint8_t* a, int r) {
  // As Q4_K (chunk j = 2h + u of the super-block: code bytes 32u .. of the
  // half, low nibbles sub-block 2j, high nibbles 2j + 1, the same packed
  // scales and mins), plus each code's fifth bit: bit 2j (low nibbles) or
  // 2j + 1 (high) of qh byte l for the code byte l of the chunk. Codes
  // 0..31 under 1024's exponent, then the same fma as Q4_K's.
  const uint4 hd = *reinterpret_cast<const uint4*>(rr);
  half2 s, m;
  dqw::Q4kScaleMin(hd, h, u, &s, &m);
  const half2 sv[2] = {__low2half2(s), __high2half2(s)};
  const half2 mv[2] = {__low2half2(m), __high2half2(m)};
  const int bit = 2 * (2 * h + u);
#pragma unroll
  for (int b = 0; b < 2; ++b) {
    const uint4 xq = *reinterpret_cast<const uint4*>(rr + 48 + 32 * u + 16 * b);
    const uint4 yq = *reinterpret_cast<const uint4*>(rr + 16 + 16 * b);
    const uint32_t xs[4] = {xq.x, xq.y, xq.z, xq.w}, ys[4] = {yq.x, yq.y, yq.z, yq.w};
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      uint32_t ev[4], od[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t nib = hi ? (xs[i] >> 4) & 0x0F0F0F0Fu : xs[i] & 0x0F0F0F0Fu;
        const uint32_t v = nib | (((ys[i] >> (bit + hi)) << 4) & 0x10101010u);
        dqw::Q4kPairs<0x00FF00FFu, kMagic>(v, sv[hi], mv[hi], ev[i], od[i]);
      }
      // 16-group b (low) or b + 2 (high): pieces 2G, 2G + 1.
      const int g = b + 2 * hi;
      Sts128(APiece(a, r, 2 * g), ev[0], ev[1], ev[2], ev[3]);
      Sts128(APiece(a, r, 2 * g + 1), od[0], od[1], od[2], od[3]);
    }
  }
}

template <>
__device__ __forceinline__ void DecodeRow<GgmlType::kQ8_0>(const uint8_t* rr, int h, int u,
                                                           uint8_t* a, int r) {
  // Step u is blocks 2u, 2u + 1 of the chunk, which starts at byte 8h of
  // the raw row; 16-group G is codes 16 (G % 2) .. + 15 of block 2u + G / 2.
  // Blocks are 34 bytes, so a group's 16 codes are 2-byte aligned: five
  // aligned words, realigned by a byte permute where they start at 2 mod 4
  // (even blocks: 34b + 2 = 2 mod 4). Each code: (1024 + (q + 128)) - 1152
  // = q exactly, times d once rounded: f16(d q), the weight the CPU's
  // dequantizer gives rounded once.
  const uint8_t* const base = rr + 8 * h;
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    const int b = 2 * u + (g >> 1);
    const uint8_t* const blk = base + 34 * b;
    const half2 d = __half2half2(__ushort_as_half(*reinterpret_cast<const uint16_t*>(blk)));
    const int off = 34 * b + 2 + 16 * (g & 1);  // of the group's codes from `base`
    const uint32_t* const wp = reinterpret_cast<const uint32_t*>(base + (off & ~3));
    uint32_t w[4];
    if ((off & 3) == 0) {
#pragma unroll
      for (int i = 0; i < 4; ++i) w[i] = wp[i];
    } else {
      uint32_t x[5];
#pragma unroll
      for (int i = 0; i < 5; ++i) x[i] = wp[i];
#pragma unroll
      for (int i = 0; i < 4; ++i) w[i] = __byte_perm(x[i], x[i + 1], 0x5432);
    }
    uint32_t ev[4], od[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) dqw::BiasedPairs<128>(w[i] ^ 0x80808080u, d, ev[i], od[i]);
    Sts128(APiece(a, r, 2 * g), ev[0], ev[1], ev[2], ev[3]);
    Sts128(APiece(a, r, 2 * g + 1), od[0], od[1], od[2], od[3]);
  }
}

#endif  // MINFER_SM90A_DEVICE

template <GgmlType T, int kWG, int N>
__global__ void __launch_bounds__(128 * (kWG + 1), (CtasOf<kWG, N>()))
    dqp_kernel(const Params p, const __grid_constant__ CUtensorMap tmap) {
  pdl_enter();
#if defined(MINFER_SM90A_DEVICE)
  using X = Ty<T>;
  constexpr int kStages = StagesOf<T, kWG, N>(), kRaw = RawOf<T, kWG, N>();
  constexpr int kRows = 64 * kWG, kStage = StageBytes<kWG, N>();
  constexpr int kRowsPerProducer = kRows / kProducers;
  extern __shared__ __align__(128) uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t full_bar[kStages];
  __shared__ __align__(8) uint64_t empty_bar[kStages];
  uint8_t* const smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  uint8_t* const raw = smem + kStages * kStage;
  const int z = blockIdx.y, tok0 = blockIdx.z * N;
  const int c_begin = static_cast<int>(static_cast<int64_t>(z) * p.n_chunks / p.splits);
  const int c_end = static_cast<int>(static_cast<int64_t>(z + 1) * p.n_chunks / p.splits);
  const int nc = c_end - c_begin, steps = 2 * nc;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      mbar_init(smem_addr(&full_bar[s]), kProducers);
      mbar_init(smem_addr(&empty_bar[s]), 4 * kWG);  // every consumer warp
    }
    fence_mbar_init();
  }
  __syncthreads();
  const int wg = threadIdx.x >> 7;
  if (wg == 0) {
    // ---- Producer.
    const int r0 = threadIdx.x;
    const uint8_t* src[kRowsPerProducer];
#pragma unroll
    for (int j = 0; j < kRowsPerProducer; ++j) {
      const int r = r0 + kProducers * j;
      const splitk::WarpRows wr = splitk::RowsOf<1>(p, blockIdx.x * (kRows / 16) + (r >> 4));
      src[j] = wr.w + min(wr.rbase + (r & 15), wr.rows - 1) * wr.row_bytes;
    }
    auto raw_row = [&](int i, int j) {
      return raw + (i % kRaw) * RawBytes<T, kWG>() + (r0 + kProducers * j) * X::kRowBytes;
    };
    auto load_raw = [&](int i) {
      const int c = c_begin + i;
#pragma unroll
      for (int j = 0; j < kRowsPerProducer; ++j) {
        const uint8_t* blk = src[j] + static_cast<int64_t>(c >> 1) * X::kBlockBytes;
#pragma unroll
        for (int q = 0; q < X::kPieces; ++q) {
          cp_async16(smem_addr(raw_row(i, j) + 16 * q), blk + X::Src(c & 1, q), 16);
        }
      }
    };
#pragma unroll
    for (int i = 0; i < kRaw; ++i) {
      if (i < nc) load_raw(i);
      cp_async_commit();
    }
    for (int i = 0; i < nc; ++i) {
      cp_async_wait<kRaw - 1>();  // chunk i's rows (this thread's copies)
      const int h = (c_begin + i) & 1;
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int j = 2 * i + u, s = j % kStages;
        if (j >= kStages) mbar_wait(smem_addr(&empty_bar[s]), ((j / kStages) - 1) & 1);
        uint8_t* const a = smem + s * kStage;
#pragma unroll
        for (int q = 0; q < kRowsPerProducer; ++q) {
          DecodeRow<T>(raw_row(i, q), h, u, a, r0 + kProducers * q);
        }
        fence_proxy_async_smem();
        const uint32_t bar = smem_addr(&full_bar[s]);
        if (r0 == 0) {
          mbar_arrive_expect_tx(bar, N * 128);
          tma_load_2d(smem_addr(a + ABytes<kWG>()), &tmap, bar, (c_begin + i) * 128 + 64 * u, tok0);
        } else {
          mbar_arrive(bar);
        }
      }
      if (i + kRaw < nc) load_raw(i + kRaw);
      cp_async_commit();
    }
    cp_async_wait<0>();
    return;
  }
  // ---- Consumers: warpgroup cw owns tile rows 64 cw .. 64 cw + 63.
  const int cw = wg - 1, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  float acc[N / 2];
#pragma unroll
  for (int j = 0; j < N / 2; ++j) acc[j] = 0.0f;
  for (int j = 0; j < steps; ++j) {
    const int s = j % kStages;
    mbar_wait(smem_addr(&full_bar[s]), (j / kStages) & 1);
    const uint32_t a = smem_addr(smem + s * kStage) + cw * 8192;
    const uint64_t da = WgmmaDescSw128(a, 1024);
    const uint64_t db = WgmmaDescSw128(smem_addr(smem + s * kStage + ABytes<kWG>()), 1024);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      // k16 step kk: 32 bytes into each 128-byte row (the descriptor's
      // start address is its low field, in 16-byte units).
      WgmmaSS<N>::Run(acc, da + 2 * kk, db + 2 * kk);
    }
    wgmma_commit();
    wgmma_wait<1>();  // step j - 1's wgmmas have read their stage
    if (j >= 1 && lane == 0) mbar_arrive(smem_addr(&empty_bar[(j - 1) % kStages]));
  }
  wgmma_wait<0>();
#pragma unroll
  for (int j = 0; j < N / 2; ++j) wgmma_pin(acc[j]);
  const splitk::WarpRows wr = splitk::RowsOf<1>(p, blockIdx.x * (kRows / 16) + cw * 4 + warp);
  if (!wr.active) return;
  float* const y =
      p.splits > 1 ? (wr.sg == 0 ? p.seg[0].part : wr.sg == 1 ? p.seg[1].part : p.seg[2].part) +
                         static_cast<int64_t>(z) * p.split_stride
                   : (wr.sg == 0 ? p.seg[0].y : wr.sg == 1 ? p.seg[1].y : p.seg[2].y);
  // The residual here where nothing splits (else the reduce adds it).
  const float* const r = p.splits > 1 ? nullptr
                                      : (wr.sg == 0 ? p.seg[0].r : wr.sg == 1 ? p.seg[1].r : p.seg[2].r);
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t row = wr.rbase + g + ((e >> 1) ? 8 : 0);
      const int tok = tok0 + 8 * j + 2 * t + (e & 1);
      if (row < wr.rows && tok < p.nt) {
        const int64_t at = static_cast<int64_t>(tok) * wr.rows + row;
        y[at] = r != nullptr ? r[at] + acc[4 * j + e] : acc[4 * j + e];
      }
    }
  }
#endif  // MINFER_SM90A_DEVICE
}

using Info = splitk::KernelFacts;

template <GgmlType T, int kWG, int N>
const Info& InfoOf() {
  static PerDevice<Info> info;
  return splitk::FactsOnce(info, &dqp_kernel<T, kWG, N>, 128 * (kWG + 1), SmemOf<T, kWG, N>());
}

template <GgmlType T, int kWG, int N>
bool Go(const Params& p, const CUtensorMap& tmap, cudaStream_t stream, bool launch, Info* out) {
  const Info& info = InfoOf<T, kWG, N>();
  *out = info;
  if (info.ctas_per_sm <= 0) return false;
  if (launch) {
    const dim3 grid(static_cast<unsigned>(p.tiles), static_cast<unsigned>(p.splits),
                    static_cast<unsigned>((p.nt + N - 1) / N));
    LaunchGrid(dqp_kernel<T, kWG, N>, grid, 128 * (kWG + 1), info.smem, stream, p, tmap);
  }
  return true;
}

template <GgmlType T>
bool DispatchT(int wg, int n, const Params& p, const CUtensorMap& tmap, cudaStream_t stream,
               bool launch, Info* info) {
  if (n == 64) return Go<T, 2, 64>(p, tmap, stream, launch, info);
  return wg == 4 ? Go<T, 4, 128>(p, tmap, stream, launch, info)
                 : Go<T, 2, 128>(p, tmap, stream, launch, info);
}

bool Dispatch(GgmlType type, int wg, int n, const Params& p, const CUtensorMap& tmap,
              cudaStream_t stream, bool launch, Info* info) {
  switch (type) {
    case GgmlType::kQ4_K: return DispatchT<GgmlType::kQ4_K>(wg, n, p, tmap, stream, launch, info);
    case GgmlType::kQ6_K: return DispatchT<GgmlType::kQ6_K>(wg, n, p, tmap, stream, launch, info);
    case GgmlType::kQ5_K: return DispatchT<GgmlType::kQ5_K>(wg, n, p, tmap, stream, launch, info);
    default: return DispatchT<GgmlType::kQ8_0>(wg, n, p, tmap, stream, launch, info);
  }
}

}  // namespace
}  // namespace dqp

cudaError_t LaunchDqpWgmma(const MmqSegments& s, const void* act, int64_t nt, cudaStream_t stream,
                           const DqpTuning* tuning, const char** why_not) {
  using dqp::Params;
  const char* unused;
  if (why_not == nullptr) why_not = &unused;
  *why_not = nullptr;
  if (s.n < 1 || s.n > kMmqMaxSegments || nt < 0 || nt > kDqpMaxTokens || act == nullptr ||
      reinterpret_cast<uintptr_t>(act) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  const GgmlType type = s.w[0].type;
  const int64_t k = s.w[0].k;
  if (k <= 0 || k % 256 != 0 || k > (int64_t{1} << 30)) return cudaErrorInvalidValue;
  const int wg = tuning != nullptr ? tuning->warpgroups : 2;
  const int tile = tuning != nullptr ? tuning->tile_tokens : 0;
  if ((wg != 2 && wg != 4) || (tile != 0 && tile != 64 && tile != 128)) {
    return cudaErrorInvalidValue;
  }
  const float* const residual = tuning != nullptr ? tuning->residual : nullptr;
  SplitOutputs* const kept = tuning != nullptr ? tuning->kept : nullptr;
  if (residual != nullptr && s.n != 1) return cudaErrorInvalidValue;
  if (kept != nullptr) {
    *kept = SplitOutputs{};
    for (int i = 0; i < s.n; ++i) kept->part[i] = s.y[i];
  }
  if (nt == 0) return cudaSuccess;
  if (!DqpSupports(type, s.w[0].q6k_padded)) {
    *why_not = type == GgmlType::kQ6_K ? "raw 210-byte Q6_K blocks"
                                       : "not a Q4_K, Q5_K, Q6_K or Q8_0 weight";
    return cudaErrorNotSupported;
  }
  if (!DqwAvailable()) {
    *why_not = "no sm_90a code in this build or not a compute capability 9.0 GPU";
    return cudaErrorNotSupported;
  }
  Params p{};
  p.k = k;
  p.n_chunks = static_cast<int>(k / 128);
  p.nt = static_cast<int>(nt);
  // Bytes per 256 elements (a Q8_0 "super-block" is 8 blocks).
  const int64_t block_bytes = type == GgmlType::kQ8_0 ? dqw::Ty<GgmlType::kQ8_0>::kBlockBytes
                                                      : DeviceBlockBytes(type, s.w[0].q6k_padded);
  int64_t weight_bytes = 0, stride = 0;
  if (const cudaError_t e =
          splitk::CopySegments(s, nt, block_bytes, &p, &weight_bytes, &stride, why_not);
      e != cudaSuccess) {
    return e;
  }
  if (p.n_seg == 0) return cudaSuccess;
  p.seg[0].r = residual;
  // The token tile: 64 (two warpgroups) for a batch of at most 64 tokens,
  // else 128 (DqpTuning::tile_tokens).
  const int n = tile != 0 ? tile : nt <= 64 ? 64 : 128;
  const int wg_run = n == 64 ? 2 : wg;
  CUtensorMap tmap;
  std::memset(&tmap, 0, sizeof(tmap));
  if (!dqw::EncodeActivations(&tmap, act, k, nt, n)) {
    *why_not = "no TMA tensor map for the activations";
    return cudaErrorNotSupported;
  }
  dqp::Info info;
  if (!dqp::Dispatch(type, wg_run, n, p, tmap, stream, false, &info)) {
    *why_not = "the kernel's shared memory does not fit this GPU";
    return cudaErrorNotSupported;
  }
  splitk::AssignGroups(&p, 1, 4 * wg_run);
  p.splits = 1;
  // Split-k only below one wave of CTAs (a q/k/v or an attention output at
  // a short prompt): above it the partials' traffic costs more than the
  // idle SMs of a partial last wave.
  if (tuning != nullptr && tuning->split_k != 0 && tuning->split_workspace != nullptr) {
    const splitk::DeviceFacts& dev = splitk::CurrentDevice();
    const int64_t slots = int64_t{dev.sms} * info.ctas_per_sm;
    const int64_t ctas = int64_t{p.tiles} * ((nt + n - 1) / n);
    const int64_t splits = splitk::DecodeSplits(
        ctas < slots || tuning->split_k > 0 ? tuning->split_k : 1, ctas, slots, p.n_chunks, 4,
        std::max<int64_t>(2, weight_bytes / std::max<int64_t>(4 * stride, 1)), tuning->split_bytes,
        stride);
    if (splits >= 2 && !splitk::SetSplits(&p, tuning->split_workspace, nt, splits, stride)) {
      return cudaErrorInvalidValue;
    }
  }
  dqp::Dispatch(type, wg_run, n, p, tmap, stream, true, &info);
  if (kept != nullptr) {
    splitk::DescribeOutputs(s, p, kept);
  } else if (p.splits > 1) {
    splitk::Reduce(p, stride, stream);
  }
  return cudaGetLastError();
}

}  // namespace minfer::cuda
