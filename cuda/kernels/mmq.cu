// MMQ (mmq.h): the activation quantize prepass, the int8 tensor-core GEMM in
// its two variants (fast: raw cp.async weight staging; generic: 2-byte
// loads), and the ladder that picks one.
//
// Tiling. A CTA computes 128 weight rows x BN tokens of y (BN = 64 by
// default; 128 as a tuning for the fast variant, 32 for the generic one on
// GPUs with less than ~110 KB of opt-in shared memory). Its 8 warps are 4
// along rows x 2 along tokens: a warp owns 32 rows (two 16-row m-tiles) x
// BN/2 tokens (BN/16 8-token n-tiles) and keeps their f32 sums in
// registers. k advances in chunks of 256 (one K-quant super-block, eight
// legacy blocks), double-buffered in shared memory:
//
//   top of chunk c: wait for chunk c's copies; __syncthreads (chunk c is
//     visible, and every warp has finished chunk c-1, so its buffers are
//     free); start the copies of chunk c+1 into them.
//   scale table: the two warps sharing 32 rows decode the per-block float
//     weight scales of chunk c (d, d * sc, mins; the K-quant 6-bit scale
//     unpacking happens here, once per row and block, not once per mma)
//     into shared memory and meet at a 64-thread named barrier.
//   integer work: per 32-element block, each warp decodes its A fragments
//     (2 m-tiles) from the raw bytes once and reuses them for all its
//     n-tiles; B fragments come from the int8 activation codes with
//     ldmatrix.x4 (two n-tiles per instruction). One m16n8k32 (Q6_K: two
//     m16n8k16) per (m-tile, n-tile) gives the exact int32 dots of one
//     block for 16 rows x 8 tokens, which are folded into the f32 sums right
//     away: acc = fma(float(I), f_w * d_a, acc) [+ fma(m_w, s_a, acc)].
//
// The grid runs token tiles fastest, so the CTAs that share a weight tile
// are adjacent and read it from L2. With stream-k (mmq.h) a CTA runs
// several tiles or parts of tiles in turn (mmq_impl.cuh ItemOf). Edges:
// rows past the end are zero-filled (fast: cp.async with src-size 0) and
// never stored; tokens past nt are the zero padding of the activation
// layout and never stored; k past the end (a legacy type's last chunk when
// k % 256 != 0) is skipped block by block.
//
// Cost model (why the fold is written as it is). Per (row, token, block)
// the fold needs float(I), one product and one fma (a second fma for the
// mins): ~4 issue slots per C element, 16 per mma, so the kernel is bound
// by the FP32/issue rate rather than the tensor cores, as llama.cpp's is.
// float(I) uses the exact 1.5 * 2^23 trick (mmq_impl.cuh exact_i2f).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <mutex>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/mmq.h"
#include "cuda/kernels/mmq_impl.cuh"
#include "cuda/kernels/per_device.cuh"

namespace minfer::cuda {
namespace mmq {
namespace {

// ------------------------------------------------------ quantize prepass

constexpr int kQThreads = 256;

// Eight threads per 32-value block, four values each, exactly the float
// operations of quantize.cu (the CPU's QuantizeRowQ8A): d = absmax / 127
// (0 below FLT_MIN), id = 1 / d, q = round-half-even(x * id), s = d *
// float(sum q), each rounded and never fused. Blocks of padding tokens (t >=
// nt) read nothing and come out as zeros.
// kSwiGlu: the values are silu(x) * u (x the gate), computed as
// LaunchSwiGlu computes them, instead of x itself.
template <bool kVec, bool kSwiGlu>
__global__ void __launch_bounds__(kQThreads) quantize_mmq_kernel(const float* __restrict__ x,
                                                                 const float* __restrict__ u,
                                                                 int8_t* __restrict__ aq,
                                                                 float* __restrict__ ad,
                                                                 float* __restrict__ as,
                                                                 int64_t k, int64_t nt,
                                                                 int64_t ntp) {
  pdl_enter();
  const int64_t nb = k / 32;
  const int64_t gid = static_cast<int64_t>(blockIdx.x) * kQThreads + threadIdx.x;
  const int64_t blk = gid >> 3;
  const int sub = static_cast<int>(gid & 7);
  const bool active = blk < nb * ntp;  // whole 8-lane groups are active or not
  const int64_t t = active ? blk / nb : 0;
  const int64_t b = active ? blk - t * nb : 0;
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
  auto load = [&](const float* p) {
    if constexpr (kVec) {
      return __ldg(reinterpret_cast<const float4*>(p));
    } else {
      return make_float4(__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3));
    }
  };
  if (active && t < nt) {
    const int64_t off = t * k + b * 32 + sub * 4;
    v = load(x + off);
    if constexpr (kSwiGlu) {
      const float4 w = load(u + off);
      v = make_float4(silu_f(v.x) * w.x, silu_f(v.y) * w.y, silu_f(v.z) * w.z, silu_f(v.w) * w.w);
    }
  }
  const Q8Group g = QuantizeQ8Group(v);
  if (!active) return;
  *reinterpret_cast<uint32_t*>(aq + t * k + b * 32 + sub * 4) = g.packed;
  if (sub == 0) {
    ad[b * ntp + t] = g.d;
    as[b * ntp + t] = g.s;
  }
}

// ---------------------------------------------------------------- GEMM

// Two CTAs per SM (<= 128 registers) where the shared memory allows it
// (BN <= 64: 78..110 KB); a 128-token tile needs 130+ KB, so one CTA and
// the registers for its 64 accumulators.
constexpr int MinBlocks(int bn) { return bn >= 128 ? 1 : 2; }

// kPlane: the chunk's scale entries come from the W_dsc/W_exp plane
// (p.plane, staged with the weights) instead of the scale-table phase.
// kSK: the stream-k form (1-D grid, a loop over ItemOf's items); without it
// a CTA computes the one tile (blockIdx.y, blockIdx.x) of a 2-D grid. Two
// instantiations because the item loop costs the chunk loop registers it
// does not have (launches lost 3-11% when every one of them ran it).
template <GgmlType T, int BN, bool kFast, bool kPlane, bool kSK>
__global__ void __launch_bounds__(kThreads, MinBlocks(BN)) mmq_kernel(const Params p) {
  pdl_enter();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  static_assert(kFast || !kPlane, "the generic variant decodes its scales");
  static_assert(kFast || !kSK, "stream-k runs the fast variant only");
  // Activation sources as 32-bit element offsets from the parameter
  // pointers (fewer live registers) or as 64-bit pointers: measured per
  // form on the H200 (7B pp512, alternating runs in one call), offsets
  // everywhere cost Q4_K_M 1.0% and gained Q8_0 0.8% over pointers.
  constexpr bool kOff32 = kSK || T == GgmlType::kQ8_0;
  using X = Tr<T>;
  using SM = Smem<T, BN, kPlane>;
  constexpr int kWS = SM::kWS;  // weight row stride in shared memory
  constexpr int kNT = BN / 16;  // 8-token n-tiles per warp
  static_assert(kNT % 2 == 0, "ldmatrix.x4 loads n-tiles in pairs");
  constexpr int kTW = SM::kTW;

  extern __shared__ __align__(16) uint8_t smem[];
  // Stage buffer `buf` (0/1) by arithmetic: an array of pointers indexed by
  // a run-time buf would live in local memory.
  auto s_w = [&](int buf) { return smem + buf * SM::kStage; };
  auto s_a = [&](int buf) { return smem + buf * SM::kStage + SM::kW; };
  auto s_d = [&](int buf) {
    return reinterpret_cast<float*>(smem + buf * SM::kStage + SM::kW + SM::kA);
  };
  auto s_s = [&](int buf) {
    return reinterpret_cast<float*>(smem + buf * SM::kStage + SM::kW + SM::kA + SM::kD);
  };
  auto s_p = [&](int buf) { return smem + buf * SM::kStage + SM::kW + SM::kA + SM::kD + SM::kS; };
  float* const s_tbl = reinterpret_cast<float*>(smem + 2 * SM::kStage);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wr = warp & 3, wc = warp >> 2;  // 32-row group, token half
  const int g = lane >> 2, t = lane & 3;
  constexpr int kTpt = kThreads / BN;  // threads per token row of codes
  // ldmatrix row address of this lane: matrix q = lane / 8 is (n-tile
  // q / 2 of the pair, k bytes 16 (q % 2)..+15), row lane % 8 = its token.
  const int lm_tok = wc * (BN / 2) + 8 * (lane >> 4) + (lane & 7);
  const uint32_t lm_off = lm_tok * kAS + 16 * ((lane >> 3) & 1);
  // This lane's tokens within the CTA tile (n-tile nt adds 8 nt): 2t, 2t+1.
  const int tk_base = wc * (BN / 2) + 2 * t;
  const int wrow = 32 * wr + g;  // m-tile mt adds 16 mt, the second row 8
  const int cta = blockIdx.x;
  // kSK: the current item, in shared memory rather than registers (the
  // chunk loop already uses all 128): thread 0 fills s_item[it % 2] (two,
  // so the next item never overwrites one a lagging warp still reads) and,
  // for a head, waits for the hand-off of CTA cta - 1 (dispatched before
  // this one; it hands its tail on first thing). A lost hand-off would hang
  // the stream: trap loudly after 10 s instead.
  __shared__ Item s_item[kSK ? 2 : 1];
  // A tile's weight (its segment: a field-by-field select, as indexing the
  // parameter array with a run-time index would copy it to local memory),
  // first row and first token, from its row tile `by` and token tile `bx`.
  // The store derives it again instead of keeping it live through the
  // chunk loop.
  struct TileAt {
    Segment S;
    int64_t row0, tok0;
  };
  // kSK: the current item's tile, in shared memory for the same reason.
  __shared__ TileAt s_at[kSK ? 2 : 1];
  auto tile_at = [&](int by, int bx) {
    const int sg = p.n_seg > 1 && by >= p.tile_begin[1] ? (p.n_seg > 2 && by >= p.tile_begin[2] ? 2 : 1) : 0;
    auto pick = [&](auto field) { return sg == 0 ? p.seg[0].*field : sg == 1 ? p.seg[1].*field : p.seg[2].*field; };
    return TileAt{Segment{pick(&Segment::w), pick(&Segment::row_bytes), pick(&Segment::rows),
                          pick(&Segment::plane), pick(&Segment::y), pick(&Segment::part)},
                  static_cast<int64_t>(by - (sg == 0 ? 0 : sg == 1 ? p.tile_begin[1] : p.tile_begin[2])) * kBM,
                  static_cast<int64_t>(bx) * BN};
  };

  for (int it = 0; kSK || it == 0; ++it) {
    // The item's fields, read from s_item at each use (kSK), or the whole
    // k range of the grid's tile.
    auto item_tile = [&] { return kSK ? s_item[it & 1].tile : 0; };
    // Whole-tile kernels with split-k: split blockIdx.z's run of chunks.
    auto item_c0 = [&] {
      return kSK ? s_item[it & 1].c0
                 : p.k_splits == 1 ? 0 : static_cast<int>(blockIdx.z * p.n_chunks / p.k_splits);
    };
    auto item_c1 = [&] {
      return kSK ? s_item[it & 1].c1
                 : p.k_splits == 1 ? p.n_chunks
                                   : static_cast<int>((blockIdx.z + 1) * p.n_chunks / p.k_splits);
    };
    auto item_kind = [&] { return kSK ? s_item[it & 1].kind : static_cast<int>(kWhole); };
    auto this_tile = [&] {
      if constexpr (kSK) {
        const int tile = item_tile(), by = tile / p.ntt;
        return tile_at(by, tile - by * p.ntt);
      } else {
        return tile_at(blockIdx.y, blockIdx.x);
      }
    };
    if constexpr (kSK) {
      if (tid == 0) {
        const Item item = ItemOf(p, cta, it);
        s_item[it & 1] = item;
        if (item.tile >= 0) {
          const int by = item.tile / p.ntt;
          s_at[it & 1] = tile_at(by, item.tile - by * p.ntt);
        }
        if (item.kind == kHead) {
          const unsigned* flag = p.sk_flag + cta - 1;
          const uint64_t t_start = global_timer_ns();
          while (ld_acquire_gpu(flag) == 0) {
            __nanosleep(64);
            if (global_timer_ns() - t_start > 10000000000ull) __trap();
          }
          *const_cast<volatile unsigned*>(flag) = 0;  // ready for the next launch
        }
      }
      // s_item is visible; both stage buffers are free (every warp
      // finished the previous item); a head's hand-off is visible to the
      // whole CTA.
      __syncthreads();
      if (item_tile() < 0) break;
    }
    // kSK reads the tile from shared memory at each use (LDS per chunk
    // instead of registers held across it).
    const TileAt at_local = kSK ? TileAt{} : this_tile();
    const TileAt& at = kSK ? s_at[it & 1] : at_local;
    const Segment& S = at.S;
    const int64_t& row0 = at.row0;
    const int64_t& tok0 = at.tok0;

    // Copies chunk c into stage buffer `buf` (commit is the caller's). Each
    // thread owns fixed rows / tokens / scale pieces, so what stays live
    // across the chunk loop is one base pointer per role (a flat "piece i of
    // the tile" loop let the compiler hoist a 64-bit address per iteration and
    // spill).
    //  * weights, fast: thread -> row tid / 2, 16-byte pieces tid % 2, +2, ...
    //  * weights, generic: warp w -> rows 16w..16w+15, lanes over 2-byte words
    //  * codes: thread -> token tid / kTpt, pieces tid % kTpt, + kTpt, ...
    //  * d, s: thread tid < 2 BN -> block row tid / (BN / 4), piece tid % (BN / 4)
    // Fast: byte offset of this thread's row within the row tile, 32-bit (the
    // launcher guarantees kBM * row_bytes < 2^31): it stays live across the
    // whole loop, and a 64-bit pointer cost Q6_K a spill.
    const bool my_row_ok = row0 + (tid >> 1) < S.rows;
    const uint32_t w_row_off = my_row_ok ? static_cast<uint32_t>(tid >> 1) * static_cast<uint32_t>(S.row_bytes) : 0u;
    // The same for this thread's row of plane entries (8 bytes per block; the
    // launcher guarantees kBM * nb * 8 < 2^31).
    const uint32_t p_row_off = kPlane && my_row_ok ? static_cast<uint32_t>(tid >> 1) * static_cast<uint32_t>(p.nb) * 8u : 0u;
    // Activation sources (kOff32 above; the launcher guarantees the layout
    // is under 2^31 bytes). The unused form is dead code.
    const uint32_t a_off = static_cast<uint32_t>((tok0 + tid / kTpt) * p.k + 16 * (tid % kTpt));
    const int8_t* const a_src = p.aq + (tok0 + tid / kTpt) * p.k + 16 * (tid % kTpt);
    const int ds_kb = tid / (BN / 4), ds_q = tid % (BN / 4);
    const uint32_t ds_off = static_cast<uint32_t>(ds_kb * p.ntp + tok0 + 4 * ds_q);
    const float* const d_src = p.ad + static_cast<int64_t>(ds_kb) * p.ntp + tok0 + 4 * ds_q;
    const float* const s_src = p.as + static_cast<int64_t>(ds_kb) * p.ntp + tok0 + 4 * ds_q;
    auto stage = [&](int c, int buf) {
      // Blocks in this chunk: kKB, fewer in a legacy type's last chunk when
      // k % 256 != 0 (K-quant chunks are always whole).
      const int nkb = min(kKB, p.nb - c * kKB);
      if constexpr (kFast) {
        // With a plane only a K-quant block's code bytes are copied.
        constexpr int kPieces = kPlane ? Plane<T>::kPieces : X::kCB / 16;
        constexpr int kSkip = kPlane ? Plane<T>::kSkip : 0;
        // A partial chunk copies only the 16-byte pieces that hold its blocks:
        // they end inside the row, whose stride is a multiple of 16.
        const int pieces = X::kBPC == 1 ? kPieces : (nkb * X::kBS + 15) / 16;
        const uint32_t dst = smem_addr(s_w(buf) + (tid >> 1) * kWS);
        const uint8_t* src =
            S.w + row0 * S.row_bytes + w_row_off + static_cast<int64_t>(c) * p.src_cb + kSkip;
        if constexpr (kPlane) {
          // This row's 8 entries of the chunk: 64 bytes, pieces 2 (tid % 2), +1.
          const uint8_t* psrc = reinterpret_cast<const uint8_t*>(S.plane + row0 * p.nb) +
                                p_row_off + static_cast<uint32_t>(c) * (kKB * 8);
          const uint32_t pdst = smem_addr(s_p(buf) + (tid >> 1) * kPS);
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int q = 2 * (tid & 1) + j;
            cp_async16(pdst + 16 * q, psrc + 16 * q, my_row_ok ? 16 : 0);
          }
        }
#pragma unroll
        for (int q = tid & 1; q < kPieces; q += 2) {
          if (X::kBPC == 1 || q < pieces) {
            cp_async16(dst + 16 * q, my_row_ok ? src + 16 * q : S.w, my_row_ok ? 16 : 0);
          }
        }
      } else {
        // Any 2-byte aligned base and stride; the last legacy chunk may be
        // partial.
        const int hw = (X::kBPC == 1 ? X::kCopyCB : nkb * X::kBS) / 2;
#pragma unroll 2
        for (int r = 0; r < 16; ++r) {
          const int row = 16 * warp + r;
          const int64_t grow = row0 + row;
          uint16_t* dst = reinterpret_cast<uint16_t*>(s_w(buf) + row * kWS);
          if (grow < S.rows) {
            const uint16_t* src = reinterpret_cast<const uint16_t*>(
                S.w + grow * S.row_bytes + static_cast<int64_t>(c) * p.src_cb);
            for (int h = lane; h < hw; h += 32) dst[h] = __ldg(src + h);
          } else {
            for (int h = lane; h < hw; h += 32) dst[h] = 0;
          }
        }
      }
      {
        const uint32_t dst = smem_addr(s_a(buf) + (tid / kTpt) * kAS + 16 * (tid % kTpt));
        const int8_t* src = kOff32 ? p.aq + (a_off + static_cast<uint32_t>(c) * kKC)
                                   : a_src + static_cast<int64_t>(c) * kKC;
#pragma unroll
        for (int j = 0; j < 16 / kTpt; ++j) {
          const int q = tid % kTpt + kTpt * j;  // 16-byte piece: block q / 2
          if (q < 2 * nkb) cp_async16(dst + 16 * kTpt * j, src + 16 * kTpt * j, 16);
        }
      }
      if (tid < 2 * BN && ds_kb < nkb) {
        if constexpr (kOff32) {
          const uint32_t off = ds_off + static_cast<uint32_t>(c * kKB) * static_cast<uint32_t>(p.ntp);
          cp_async16(smem_addr(s_d(buf) + ds_kb * BN + 4 * ds_q), p.ad + off, 16);
          if constexpr (X::kMin) cp_async16(smem_addr(s_s(buf) + ds_kb * BN + 4 * ds_q), p.as + off, 16);
        } else {
          const int64_t off = static_cast<int64_t>(c) * kKB * p.ntp;
          cp_async16(smem_addr(s_d(buf) + ds_kb * BN + 4 * ds_q), d_src + off, 16);
          if constexpr (X::kMin) cp_async16(smem_addr(s_s(buf) + ds_kb * BN + 4 * ds_q), s_src + off, 16);
        }
      }
    };

    // The accumulators: zero, or for a head item what the previous CTA
    // handed on (its tail of this tile). Per thread, float4 (mt, nt) of the
    // hand-off buffer at index (mt * kNT + nt) * kThreads + tid (coalesced).
    float acc[2][kNT][4];
    const float4* const part_in =
        reinterpret_cast<const float4*>(p.sk_part) + static_cast<int64_t>(cta - 1) * (kBM * BN / 4) + tid;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        if (kSK && item_kind() == kHead) {
          const float4 v = __ldcg(part_in + (mt * kNT + nt) * kThreads);
          acc[mt][nt][0] = v.x, acc[mt][nt][1] = v.y, acc[mt][nt][2] = v.z, acc[mt][nt][3] = v.w;
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
        }
      }
    }
    // (Staged after the hand-off is loaded: with the loads interleaved with
    // the staging's address arithmetic the stream-k form spilled.)
    stage(item_c0(), item_c0() & 1);
    cp_async_commit();

    for (int c = item_c0(); c < item_c1(); ++c) {
      const int buf = c & 1;
      cp_async_wait<0>();
      __syncthreads();
      if (c + 1 < item_c1()) stage(c + 1, buf ^ 1);
      cp_async_commit();
      const int nkb = min(kKB, p.nb - c * kKB);  // block-uniform

      // Scale table of this warp pair's 32 rows: 64 threads x 4 blocks.
      if constexpr (!kPlane) {
        const int idx = wc * 32 + lane;
        const int row = 32 * wr + (idx >> 1);
        const uint8_t* wrow_p = s_w(buf) + row * X::kWS;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int kb = 4 * (idx & 1) + q;
          if (kb < nkb) {
            const float2 e = X::table(wrow_p, kb);
            if constexpr (kTW == 2) {
              reinterpret_cast<float2*>(s_tbl)[kb * kBM + row] = e;
            } else {
              s_tbl[kb * kBM + row] = e.x;
            }
          }
        }
        // Constant ids (a run-time id makes ptxas reserve all 16 barriers).
        switch (wr) {
          case 0: named_barrier<1>(64); break;
          case 1: named_barrier<2>(64); break;
          case 2: named_barrier<3>(64); break;
          default: named_barrier<4>(64); break;
        }
      }

      // Row g of m-tile 0, at the address its block would have had with the
      // skipped header bytes (the frag offsets count from the block start).
      const uint8_t* const w_lo = s_w(buf) + wrow * kWS - (kPlane ? Plane<T>::kSkip : 0);
      const uint8_t* const p_lo = s_p(buf) + wrow * kPS;
      const uint32_t a_base = smem_addr(s_a(buf)) + lm_off;
      const float* const dk = s_d(buf);
      const float* const sk = s_s(buf);
#pragma unroll
      for (int kb = 0; kb < kKB; ++kb) {
        if (kb >= nkb) break;  // block-uniform (a legacy type's last chunk)
        // m-tiles per pass: both (A decoded once, B fragments loaded once),
        // or for Q6_K (a heavier decode, two mma per tile) one at a time with
        // the B fragments reloaded, which keeps it within 128 registers.
        constexpr int kMG = X::kSplit ? 1 : 2;
#pragma unroll
        for (int m0 = 0; m0 < 2; m0 += kMG) {
          uint32_t a[kMG][4];
          float2 fw[kMG][2];  // [m-tile][row g / g+8]
#pragma unroll
          for (int i = 0; i < kMG; ++i) {
            const int mt = m0 + i;
            X::frag(w_lo + (16 * mt) * kWS, kb, t, &a[i][0], &a[i][2]);
            X::frag(w_lo + (16 * mt + 8) * kWS, kb, t, &a[i][1], &a[i][3]);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int r = wrow + 16 * mt + 8 * h;
              if constexpr (kPlane) {
                fw[i][h] = *reinterpret_cast<const float2*>(p_lo + (16 * mt + 8 * h) * kPS + 8 * kb);
              } else if constexpr (kTW == 2) {
                fw[i][h] = reinterpret_cast<const float2*>(s_tbl)[kb * kBM + r];
              } else {
                fw[i][h] = make_float2(s_tbl[kb * kBM + r], 0.0f);
              }
            }
          }
#pragma unroll
          for (int np = 0; np < kNT / 2; ++np) {
            uint32_t b[4];
            ldmatrix_x4(b, a_base + np * 16 * kAS + kb * 32);
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              const int nt = 2 * np + j;
              const int tk = tk_base + 8 * nt;
              const float2 da = *reinterpret_cast<const float2*>(dk + kb * BN + tk);
              float2 sa = make_float2(0.0f, 0.0f);
              if constexpr (X::kMin) sa = *reinterpret_cast<const float2*>(sk + kb * BN + tk);
#pragma unroll
              for (int i = 0; i < kMG; ++i) {
                float* const ac = acc[m0 + i][nt];
                if constexpr (X::kSplit) {
                  // Elements 0-15 then 16-31 of the block: every output still
                  // gets its lo term before its hi term (the CPU's order).
                  int c16[4];
                  mma_k16(c16, a[i][0], a[i][1], b[2 * j]);
#pragma unroll
                  for (int e = 0; e < 4; ++e) {
                    ac[e] = fmaf(exact_i2f(c16[e]), __fmul_rn(fw[i][e >> 1].x, (e & 1) ? da.y : da.x),
                                 ac[e]);
                  }
                  mma_k16(c16, a[i][2], a[i][3], b[2 * j + 1]);
#pragma unroll
                  for (int e = 0; e < 4; ++e) {
                    ac[e] = fmaf(exact_i2f(c16[e]), __fmul_rn(fw[i][e >> 1].y, (e & 1) ? da.y : da.x),
                                 ac[e]);
                  }
                } else {
                  int cc[4];
                  mma_k32(cc, a[i], b[2 * j], b[2 * j + 1]);
#pragma unroll
                  for (int e = 0; e < 4; ++e) {
                    const float2 f = fw[i][e >> 1];
                    float v = fmaf(exact_i2f(cc[e]), __fmul_rn(f.x, (e & 1) ? da.y : da.x), ac[e]);
                    if constexpr (X::kMin) v = fmaf(f.y, (e & 1) ? sa.y : sa.x, v);
                    ac[e] = v;
                  }
                }
              }
            }
          }
        }
      }
    }

    if (kSK && item_kind() == kTail) {
      // Hand the accumulators to CTA cta + 1 (L2: it reads them soon).
      float4* const part_out =
          reinterpret_cast<float4*>(p.sk_part) + static_cast<int64_t>(cta) * (kBM * BN / 4) + tid;
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          __stcg(part_out + (mt * kNT + nt) * kThreads,
                 make_float4(acc[mt][nt][0], acc[mt][nt][1], acc[mt][nt][2], acc[mt][nt][3]));
        }
      }
      __syncthreads();  // every thread's part is written
      if (tid == 0) {
        __threadfence();
        st_release_gpu(p.sk_flag + cta, 1u);
      }
      continue;
    }
    // y[tok * rows + row]: per store instruction 8 consecutive rows of 4
    // tokens (full 32-byte sectors). Split-k: this split's partials.
    const TileAt out = this_tile();
    float* const y_out = !kSK && p.k_splits > 1
                             ? out.S.part + static_cast<int64_t>(blockIdx.z) * p.split_stride
                             : out.S.y;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = out.row0 + wrow + 16 * mt + 8 * h;
        if (row >= out.S.rows) continue;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int64_t tok = out.tok0 + tk_base + 8 * nt + e;
            if (tok < p.nt) y_out[tok * out.S.rows + row] = acc[mt][nt][2 * h + e];
          }
        }
      }
    }
  }  // items
#endif  // __CUDA_ARCH__ >= 800
}

// Split-k's second pass: y = sum over splits z = 0, 1, ... (in that order)
// of the partials, per segment (float4: nt * rows is a multiple of 4 when
// rows is; else scalar).
__global__ void split_reduce_kernel(const Params p) {
  pdl_enter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t base = 0;
  for (int sg = 0; sg < p.n_seg; ++sg) {
    const Segment& S = p.seg[sg];
    const int64_t n = p.nt * S.rows;
    if (i < base + n) {
      const int64_t j = i - base;
      float acc = __ldcg(S.part + j);
      for (int z = 1; z < p.k_splits; ++z) acc += __ldcg(S.part + z * p.split_stride + j);
      S.y[j] = acc;
      return;
    }
    base += n;
  }
}

// ------------------------------------------------------------ launching

struct DeviceInfo {
  int major = 0;
  int smem_optin = 0;
  int sms = 0;
};

// The current device's attributes, queried once per device (launchers run
// per matmul; attributes never change).
cudaError_t QueryDevice(const DeviceInfo** out) {
  struct Answer {
    DeviceInfo info;
    cudaError_t err = cudaSuccess;
  };
  static PerDevice<Answer> answers;
  const Answer& a = answers.Get([](int dev) {
    Answer r;
    DeviceInfo& info = r.info;
    cudaError_t e = cudaDeviceGetAttribute(&info.major, cudaDevAttrComputeCapabilityMajor, dev);
    if (e == cudaSuccess) {
      e = cudaDeviceGetAttribute(&info.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    }
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&info.sms, cudaDevAttrMultiProcessorCount, dev);
    r.err = e;
    return r;
  });
  *out = &a.info;
  return a.err;
}

// Stream-k as the caller asked for it (MmqTuning).
struct StreamKRequest {
  MmqStreamK mode = MmqStreamK::kOff;
  void* workspace = nullptr;
  int64_t bytes = 0;
  int sms = 0;  // the device's SMs (the launcher already queried it)
  // Split-k (MmqTuning::split_k and its workspace).
  int split_k = 0;
  void* split_ws = nullptr;
  int64_t split_bytes = 0;
};

// Flags at the start of the workspace (a fixed place: they must stay zero
// between launches whatever their tile size), the hand-off buffers after.
constexpr int64_t kSkFlagBytes = 16 << 10;
constexpr int kSkMaxGrid = kSkFlagBytes / 4;

// The workspace for `sms` SMs: resident CTAs x tile floats is at most
// sms x 128 x 128 x 4 bytes (two CTAs per SM up to 64-token tiles, 128
// registers per thread; one at 128).
int64_t StreamKBytes(int sms) { return kSkFlagBytes + int64_t{sms} * kBM * 128 * 4; }

// The stream-k plan of Params (see ItemOf) for a launch of BN-token tiles:
// `slots` CTAs (the CTAs resident at once, so the hand-offs never wait on a
// CTA that is not running) doing dp = waves - 1 whole tiles each and then
// splitting the rest, between one and two waves of tiles, into equal runs
// of chunks (each at least a tile, so a tile has at most one hand-off).
// kAuto plans it only when the tiles make less than two waves: measured on
// the H200 (docs/benchmarks.md v5), 1.09 waves gain 25-35%, while at 3.4
// waves the gain is 1-2% and at 4.5 waves the hand-offs cost 1-3%. False
// (p untouched) when stream-k does not apply.
bool PlanStreamK(Params* p, int bn, int slots, const StreamKRequest& sk) {
  const int64_t tiles = int64_t{p->row_tiles} * p->ntt;
  if (sk.mode == MmqStreamK::kOff || sk.workspace == nullptr || p->n_chunks < 2) return false;
  const int64_t part_bytes = int64_t{kBM} * bn * 4;
  const int64_t g = std::min<int64_t>({slots, kSkMaxGrid, (sk.bytes - kSkFlagBytes) / part_bytes});
  if (g < 2 || tiles <= g || tiles % g == 0) return false;
  if (sk.mode == MmqStreamK::kAuto && tiles >= 2 * g) return false;
  const int64_t waves = tiles / g;
  p->grid = static_cast<int>(g);
  p->dp = static_cast<int>(waves - 1);
  p->sk_tile0 = static_cast<int>((waves - 1) * g);
  p->sk_iters = (tiles - (waves - 1) * g) * p->n_chunks;
  p->sk_flag = static_cast<unsigned*>(sk.workspace);
  p->sk_part = reinterpret_cast<float*>(static_cast<uint8_t*>(sk.workspace) + kSkFlagBytes);
  return true;
}

// Split-k for grids of whole tiles that cannot fill the resident CTA slots
// (a decode batch: 7B's 3584-row outputs are 28 tiles of 128 rows for 264
// slots, its 18944-row ones 148): the chunks of every tile are cut into S
// runs, one CTA each, whose partial sums a second kernel adds in split
// order. The sums are then associated differently than the whole-tile
// kernel's sequential fold (a float rounding difference, deterministic from
// run to run). Automatic S: about two waves of CTAs, at most 16 and the
// chunks, and no more partial traffic (S x nt x rows x 8 bytes written and
// read) than the weight bytes. False (p untouched) when it does not apply.
constexpr int64_t kSplitWorkspaceBytes = int64_t{48} << 20;

bool PlanSplitK(Params* p, int bn, int slots, const StreamKRequest& sk) {
  if (sk.split_ws == nullptr || sk.split_k == 0 || p->n_chunks < 2) return false;
  const int64_t tiles = int64_t{p->row_tiles} * p->ntt;
  int64_t stride = 0, weight_bytes = 0;
  for (int sg = 0; sg < p->n_seg; ++sg) {
    stride += p->nt * p->seg[sg].rows;
    weight_bytes += p->seg[sg].rows * p->seg[sg].row_bytes;
  }
  int64_t splits;
  if (sk.split_k >= 2) {
    splits = sk.split_k;
  } else {
    if (2 * tiles > slots) return false;
    splits = std::min<int64_t>({2 * slots / std::max<int64_t>(tiles, 1), 16,
                                weight_bytes / std::max<int64_t>(8 * stride, 1)});
  }
  splits = std::min<int64_t>({splits, p->n_chunks, sk.split_bytes / 4 / std::max<int64_t>(stride, 1)});
  if (splits < 2) return false;
  float* part = static_cast<float*>(sk.split_ws);
  int64_t off = 0;
  for (int sg = 0; sg < p->n_seg; ++sg) {
    p->seg[sg].part = part + off;
    off += p->nt * p->seg[sg].rows;
  }
  p->k_splits = static_cast<int>(splits);
  p->split_stride = stride;
  (void)bn;
  return true;
}

// One instantiation's launch attributes: the dynamic shared-memory limit
// raised once per kernel (first call; not a stream operation) and its
// occupancy read then.
struct KernelAttr {
  cudaError_t err;
  int per_sm;  // resident CTAs per SM
};
template <GgmlType T, int BN, bool kFast, bool kPlane, bool kSK>
const KernelAttr& AttrOf() {
  // Per device: the shared-memory opt-in is the current device's only.
  static PerDevice<KernelAttr> attr;
  return attr.Get([](int) {
    constexpr int kBytes = Smem<T, BN, kPlane>::kBytes;
    KernelAttr a{cudaFuncSetAttribute(mmq_kernel<T, BN, kFast, kPlane, kSK>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes),
                 0};
    if (a.err == cudaSuccess) {
      a.err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &a.per_sm, mmq_kernel<T, BN, kFast, kPlane, kSK>, kThreads, kBytes);
    }
    if (a.err != cudaSuccess) (void)cudaGetLastError();  // not sticky: clear it
    return a;
  });
}

// Launches one instantiation: the stream-k form when it is asked for and
// applies (the fast variant with 64-token tiles), else a 2-D grid of
// whole-tile CTAs. Returns cudaErrorNotSupported when the device refuses
// the shared memory. *grid_out: the CTAs launched; *sk_out: stream-k ran.
template <GgmlType T, int BN, bool kFast, bool kPlane>
cudaError_t LaunchKernel(Params p, const StreamKRequest& sk, cudaStream_t stream, int* grid_out,
                         bool* sk_out) {
  constexpr int kBytes = Smem<T, BN, kPlane>::kBytes;
  p.ntt = static_cast<int>((p.nt + BN - 1) / BN);
  *sk_out = false;
  if constexpr (kFast && BN == 64) {
    if (sk.mode != MmqStreamK::kOff && sk.workspace != nullptr) {
      const KernelAttr& a = AttrOf<T, BN, kFast, kPlane, true>();
      if (a.err == cudaSuccess && PlanStreamK(&p, BN, a.per_sm * sk.sms, sk)) {
        LaunchGrid(mmq_kernel<T, BN, kFast, kPlane, true>, static_cast<unsigned>(p.grid), kThreads,
                   kBytes, stream, p);
        *grid_out = p.grid;
        *sk_out = true;
        return cudaGetLastError();
      }
    }
  }
  const KernelAttr& whole = AttrOf<T, BN, kFast, kPlane, false>();
  if (whole.err != cudaSuccess) return cudaErrorNotSupported;
  p.k_splits = 1;
  if constexpr (kFast) PlanSplitK(&p, BN, whole.per_sm * sk.sms, sk);
  const dim3 grid(static_cast<unsigned>(p.ntt), static_cast<unsigned>(p.row_tiles),
                  static_cast<unsigned>(p.k_splits));
  LaunchGrid(mmq_kernel<T, BN, kFast, kPlane, false>, grid, kThreads, kBytes, stream, p);
  *grid_out = p.ntt * p.row_tiles * p.k_splits;
  if (p.k_splits > 1) {
    const int64_t n = p.split_stride;
    LaunchGrid(split_reduce_kernel, static_cast<unsigned>((n + 255) / 256), 256, 0, stream, p);
  }
  return cudaGetLastError();
}

template <GgmlType T, bool kPlane = false>
int SmemBytes(int bn) {
  if constexpr (kPlane && !Plane<T>::kHas) {
    return 1 << 30;
  } else {
    return bn == 32   ? Smem<T, 32, kPlane>::kBytes
           : bn == 64 ? Smem<T, 64, kPlane>::kBytes
                      : Smem<T, 128, kPlane>::kBytes;
  }
}

int SmemBytesOf(GgmlType type, int bn, bool plane = false) {
  switch (type) {
    case GgmlType::kQ4_0: return SmemBytes<GgmlType::kQ4_0>(bn);
    case GgmlType::kQ4_1: return SmemBytes<GgmlType::kQ4_1>(bn);
    case GgmlType::kQ5_0: return SmemBytes<GgmlType::kQ5_0>(bn);
    case GgmlType::kQ5_1: return SmemBytes<GgmlType::kQ5_1>(bn);
    case GgmlType::kQ8_0: return SmemBytes<GgmlType::kQ8_0>(bn);
    case GgmlType::kQ4_K:
      return plane ? SmemBytes<GgmlType::kQ4_K, true>(bn) : SmemBytes<GgmlType::kQ4_K>(bn);
    case GgmlType::kQ5_K: return SmemBytes<GgmlType::kQ5_K>(bn);
    case GgmlType::kQ6_K:
      return plane ? SmemBytes<GgmlType::kQ6_K, true>(bn) : SmemBytes<GgmlType::kQ6_K>(bn);
    default: return 1 << 30;
  }
}

// p.plane != null selects the plane instantiations (fast variant, the
// plane types only: the caller checked both).
template <GgmlType T>
cudaError_t LaunchTyped(const Params& p, int bn, bool fast, const StreamKRequest& sk,
                        cudaStream_t stream, int* grid, bool* used_sk) {
  if (fast) {
    if constexpr (Plane<T>::kHas) {
      if (p.seg[0].plane != nullptr) {
        if (bn == 32) return LaunchKernel<T, 32, true, true>(p, sk, stream, grid, used_sk);
        return bn == 128 ? LaunchKernel<T, 128, true, true>(p, sk, stream, grid, used_sk)
                         : LaunchKernel<T, 64, true, true>(p, sk, stream, grid, used_sk);
      }
    }
    if (bn == 32) return LaunchKernel<T, 32, true, false>(p, sk, stream, grid, used_sk);
    return bn == 128 ? LaunchKernel<T, 128, true, false>(p, sk, stream, grid, used_sk)
                     : LaunchKernel<T, 64, true, false>(p, sk, stream, grid, used_sk);
  }
  if (p.seg[0].plane != nullptr) return cudaErrorInvalidValue;
  return bn == 32 ? LaunchKernel<T, 32, false, false>(p, sk, stream, grid, used_sk)
                  : LaunchKernel<T, 64, false, false>(p, sk, stream, grid, used_sk);
}

cudaError_t Dispatch(GgmlType type, const Params& p, int bn, bool fast, const StreamKRequest& sk,
                     cudaStream_t stream, int* grid, bool* used_sk) {
  switch (type) {
    case GgmlType::kQ4_0: return LaunchTyped<GgmlType::kQ4_0>(p, bn, fast, sk, stream, grid, used_sk);
    case GgmlType::kQ4_1: return LaunchTyped<GgmlType::kQ4_1>(p, bn, fast, sk, stream, grid, used_sk);
    case GgmlType::kQ5_0: return LaunchTyped<GgmlType::kQ5_0>(p, bn, fast, sk, stream, grid, used_sk);
    case GgmlType::kQ5_1: return LaunchTyped<GgmlType::kQ5_1>(p, bn, fast, sk, stream, grid, used_sk);
    case GgmlType::kQ8_0: return LaunchTyped<GgmlType::kQ8_0>(p, bn, fast, sk, stream, grid, used_sk);
    case GgmlType::kQ4_K: return LaunchTyped<GgmlType::kQ4_K>(p, bn, fast, sk, stream, grid, used_sk);
    case GgmlType::kQ5_K: return LaunchTyped<GgmlType::kQ5_K>(p, bn, fast, sk, stream, grid, used_sk);
    case GgmlType::kQ6_K: return LaunchTyped<GgmlType::kQ6_K>(p, bn, fast, sk, stream, grid, used_sk);
    default: return cudaErrorInvalidValue;
  }
}

// The fast variant's token tile when the caller does not pick one: 64, or
// 32 when 64-token tiles would leave SMs without a CTA (few weight rows:
// Qwen2.5-0.5B's 896-row projections at 512 tokens make 56 tiles of 64 for
// 132 SMs; 7B's 512-row k/v, 32). Halving the tile doubles the CTAs; the
// cost, twice the weight-tile reads, is small next to idle SMs.
int AutoTokensPerCta(const Params& p, const DeviceInfo& dev) {
  const int64_t ctas64 = int64_t{p.row_tiles} * ((p.nt + 63) / 64);
  return ctas64 < dev.sms ? 32 : 64;
}

int64_t TokensPadded(int64_t nt) { return (nt + kMmqTokenPad - 1) / kMmqTokenPad * kMmqTokenPad; }

// Checks a GEMM call (cudaErrorInvalidValue on a violated precondition) and
// fills the parameters. *empty: nothing to do.
cudaError_t Prepare(const WeightView& w, const void* act, float* y, int64_t nt, Params* p,
                    bool* empty) {
  *empty = false;
  if (!MmqSupports(w.type) || nt < 0 || w.rows < 0 || w.k <= 0) return cudaErrorInvalidValue;
  if (w.q6k_padded && w.type != GgmlType::kQ6_K) return cudaErrorInvalidValue;
  const int64_t bs = TraitsOf(w.type).block_size;
  if (w.k % bs != 0) return cudaErrorInvalidValue;
  if (nt == 0 || w.rows == 0) {
    *empty = true;
    return cudaSuccess;
  }
  if (w.data == nullptr || act == nullptr || y == nullptr) return cudaErrorInvalidValue;
  const int64_t block_bytes = DeviceBlockBytes(w.type, w.q6k_padded);
  if (w.row_bytes < w.k / bs * block_bytes || w.row_bytes % 2 != 0 ||
      reinterpret_cast<uintptr_t>(w.data) % 2 != 0 || reinterpret_cast<uintptr_t>(act) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(y) % 4 != 0) {
    return cudaErrorInvalidValue;
  }
  // Grid and 32-bit index limits: y grid dimension, int block counts.
  // The kernel addresses the activation codes with 32-bit offsets.
  const int64_t ntp = TokensPadded(nt);
  if ((w.rows + kBM - 1) / kBM > 65535 || w.k > (int64_t{1} << 30) ||
      ntp * w.k >= (int64_t{1} << 31)) {
    return cudaErrorInvalidValue;
  }
  p->seg[0] = Segment{static_cast<const uint8_t*>(w.data), w.row_bytes, w.rows, nullptr, y, nullptr};
  p->k_splits = 1;
  p->split_stride = 0;
  p->tile_begin[0] = 0;
  p->n_seg = 1;
  p->row_tiles = static_cast<int>((w.rows + kBM - 1) / kBM);
  p->k = w.k;
  p->nb = static_cast<int>(w.k / 32);
  p->n_chunks = (p->nb + kKB - 1) / kKB;
  // Bytes between chunks of a global row: 8 legacy blocks or 1 super-block.
  p->src_cb = static_cast<int>(bs == 32 ? 8 * block_bytes : block_bytes);
  p->aq = static_cast<const int8_t*>(act);
  p->ad = reinterpret_cast<const float*>(static_cast<const uint8_t*>(act) + ntp * w.k);
  p->as = p->ad + ntp * (w.k / 32);
  p->ntp = ntp;
  p->nt = nt;
  return cudaSuccess;
}

// ------------------------------------------------------------ scale planes

// One thread per (row, 32-element block): the entry the kernel's
// scale-table phase would decode from the same bytes (Tr<T>::table, the
// same code on a global pointer), so plane and no-plane runs fold identical
// floats.
template <GgmlType T>
__global__ void scale_plane_kernel(const uint8_t* __restrict__ w, int64_t row_bytes,
                                   int64_t block_bytes, int64_t rows, int64_t nb,
                                   float2* __restrict__ plane) {
  pdl_enter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * nb) return;
  const int64_t row = i / nb, b = i - row * nb;
  plane[i] = Tr<T>::table(w + row * row_bytes + (b / kKB) * block_bytes, static_cast<int>(b % kKB));
}

}  // namespace
}  // namespace mmq

bool MmqScalePlaneType(GgmlType type) {
  return type == GgmlType::kQ4_K || type == GgmlType::kQ6_K;
}

int64_t MmqScalePlaneBytes(GgmlType type, int64_t k, int64_t rows) {
  if (!MmqScalePlaneType(type) || k <= 0 || rows <= 0 || k % 256 != 0) return 0;
  return rows * (k / 32) * static_cast<int64_t>(sizeof(float2));
}

cudaError_t LaunchMmqScalePlane(const WeightView& w, void* plane, cudaStream_t stream) {
  if (!MmqScalePlaneType(w.type) || w.k <= 0 || w.k % 256 != 0 || w.rows < 0 ||
      (w.q6k_padded && w.type != GgmlType::kQ6_K)) {
    return cudaErrorInvalidValue;
  }
  if (w.rows == 0) return cudaSuccess;
  const int64_t block_bytes = DeviceBlockBytes(w.type, w.q6k_padded);
  // Q4_K's scales are read as 32-bit words: 4-byte aligned blocks.
  if (w.data == nullptr || plane == nullptr || w.row_bytes < w.k / 256 * block_bytes ||
      w.row_bytes % 4 != 0 || reinterpret_cast<uintptr_t>(w.data) % 4 != 0 ||
      reinterpret_cast<uintptr_t>(plane) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  const int64_t n = w.rows * (w.k / 32);
  const int64_t grid = (n + 255) / 256;
  if (grid > 0x7FFFFFFF) return cudaErrorInvalidValue;
  const auto* src = static_cast<const uint8_t*>(w.data);
  auto* dst = static_cast<float2*>(plane);
  if (w.type == GgmlType::kQ4_K) {
    LaunchGrid(mmq::scale_plane_kernel<GgmlType::kQ4_K>, static_cast<unsigned>(grid), 256, 0,
               stream, src, w.row_bytes, block_bytes, w.rows, w.k / 32, dst);
  } else {
    LaunchGrid(mmq::scale_plane_kernel<GgmlType::kQ6_K>, static_cast<unsigned>(grid), 256, 0,
               stream, src, w.row_bytes, block_bytes, w.rows, w.k / 32, dst);
  }
  return cudaGetLastError();
}

int64_t MmqSplitKBytes() { return mmq::kSplitWorkspaceBytes; }

int64_t MmqStreamKBytes() {
  const mmq::DeviceInfo* dev = nullptr;
  if (mmq::QueryDevice(&dev) != cudaSuccess || dev->sms <= 0) return 0;
  return mmq::StreamKBytes(dev->sms);
}

int64_t MmqActivationBytes(int64_t k, int64_t nt) {
  if (k <= 0 || nt <= 0 || k % 32 != 0) return 0;
  return mmq::TokensPadded(nt) * (k / 32) * 40;
}

const char* MmqVariantName(MmqVariant v) {
  switch (v) {
    case MmqVariant::kFast: return "fast";
    case MmqVariant::kGeneric: return "generic";
    default: return "none";
  }
}

namespace {
// x (and u for kSwiGlu) -> the activation layout.
template <bool kSwiGlu>
cudaError_t LaunchQuantizeMmqImpl(const float* x, const float* u, void* act, int64_t k, int64_t nt,
                                  cudaStream_t stream) {
  if (k < 0 || nt < 0 || k % 32 != 0) return cudaErrorInvalidValue;
  if (k == 0 || nt == 0) return cudaSuccess;
  if (x == nullptr || act == nullptr || reinterpret_cast<uintptr_t>(act) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(x) % 4 != 0 ||
      (kSwiGlu && (u == nullptr || reinterpret_cast<uintptr_t>(u) % 4 != 0))) {
    return cudaErrorInvalidValue;
  }
  const int64_t ntp = mmq::TokensPadded(nt);
  const int64_t threads = ntp * (k / 32) * 8;
  const int64_t grid = (threads + mmq::kQThreads - 1) / mmq::kQThreads;
  if (grid > 0x7FFFFFFF) return cudaErrorInvalidValue;
  int8_t* aq = static_cast<int8_t*>(act);
  float* ad = reinterpret_cast<float*>(aq + ntp * k);
  float* as = ad + ntp * (k / 32);
  if (reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
      (!kSwiGlu || reinterpret_cast<uintptr_t>(u) % 16 == 0)) {
    LaunchGrid(mmq::quantize_mmq_kernel<true, kSwiGlu>, static_cast<unsigned>(grid), mmq::kQThreads,
               0, stream, x, u, aq, ad, as, k, nt, ntp);
  } else {
    LaunchGrid(mmq::quantize_mmq_kernel<false, kSwiGlu>, static_cast<unsigned>(grid),
               mmq::kQThreads, 0, stream, x, u, aq, ad, as, k, nt, ntp);
  }
  return cudaGetLastError();
}
}  // namespace

cudaError_t LaunchQuantizeMmq(const float* x, void* act, int64_t k, int64_t nt,
                              cudaStream_t stream) {
  return LaunchQuantizeMmqImpl<false>(x, nullptr, act, k, nt, stream);
}

cudaError_t LaunchSwiGluMmq(const float* g, const float* u, void* act, int64_t k, int64_t nt,
                            cudaStream_t stream) {
  return LaunchQuantizeMmqImpl<true>(g, u, act, k, nt, stream);
}

namespace {
// The fast variant over n segments (one weight each; the same type and k,
// one activation buffer), also saying which token tile it launched (*bn).
// Planes are used only when every segment has one (they change no result).
cudaError_t LaunchFastImpl(const WeightView* ws, float* const* ys, int n, const void* act,
                           int64_t nt, const MmqTuning& tuning, cudaStream_t stream,
                           const char** why_not, MmqReport* report) {
  const char* unused;
  if (why_not == nullptr) why_not = &unused;
  *why_not = nullptr;
  if (n < 1 || n > mmq::kMaxSegments) return cudaErrorInvalidValue;
  mmq::Params p{};
  bool all_empty = true;
  bool all_planes = true;
  for (int i = 0; i < n; ++i) {
    const WeightView& w = ws[i];
    if (w.type != ws[0].type || w.k != ws[0].k) return cudaErrorInvalidValue;
    mmq::Params pi{};
    bool empty = false;
    const cudaError_t err = mmq::Prepare(w, act, ys[i], nt, &pi, &empty);
    if (err != cudaSuccess) return err;
    if (w.scale_plane != nullptr &&
        (!MmqScalePlaneType(w.type) || reinterpret_cast<uintptr_t>(w.scale_plane) % 16 != 0)) {
      return cudaErrorInvalidValue;
    }
    if (empty) continue;  // nt == 0 or no rows: no tiles
    all_planes = all_planes && w.scale_plane != nullptr;
    if (all_empty) {
      p = pi;
      p.n_seg = 0;
      p.row_tiles = 0;
      all_empty = false;
    }
    p.seg[p.n_seg] = pi.seg[0];
    p.tile_begin[p.n_seg] = p.row_tiles;
    p.row_tiles += pi.row_tiles;
    ++p.n_seg;
  }
  if (all_empty) return cudaSuccess;
  if (p.row_tiles > 65535) return cudaErrorInvalidValue;
  if (tuning.tokens_per_cta != 0 && tuning.tokens_per_cta != 32 && tuning.tokens_per_cta != 64 &&
      tuning.tokens_per_cta != 128) {
    return cudaErrorInvalidValue;
  }
  const bool plane = all_planes && int64_t{mmq::kBM} * p.nb * 8 < (int64_t{1} << 31);
  // Segment j of p is the j-th weight with rows (empty ones were skipped).
  for (int i = 0, j = 0; i < n; ++i) {
    if (ws[i].rows > 0) p.seg[j++].plane = plane ? static_cast<const float2*>(ws[i].scale_plane) : nullptr;
  }
  const mmq::DeviceInfo* dev = nullptr;
  cudaError_t err = mmq::QueryDevice(&dev);
  if (err != cudaSuccess) return err;
  if (tuning.stream_k_workspace != nullptr &&
      (reinterpret_cast<uintptr_t>(tuning.stream_k_workspace) % 16 != 0 ||
       tuning.stream_k_bytes < mmq::StreamKBytes(dev->sms))) {
    return cudaErrorInvalidValue;
  }
  if (tuning.split_workspace != nullptr &&
      reinterpret_cast<uintptr_t>(tuning.split_workspace) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  const mmq::StreamKRequest sk{tuning.stream_k,   tuning.stream_k_workspace, tuning.stream_k_bytes,
                               dev->sms,          tuning.split_k,            tuning.split_workspace,
                               tuning.split_bytes};
  const int bn = tuning.tokens_per_cta != 0 ? tuning.tokens_per_cta : mmq::AutoTokensPerCta(p, *dev);
  const GgmlType type = ws[0].type;
  if (dev->major < 8) *why_not = "GPU older than sm_80 (no int8 mma.m16n8k32)";
  for (int i = 0; i < n && *why_not == nullptr; ++i) {
    const WeightView& w = ws[i];
    if (reinterpret_cast<uintptr_t>(w.data) % 16 != 0 || w.row_bytes % 16 != 0) {
      *why_not = "weight base or row stride not 16-byte aligned";
    } else if (w.row_bytes * mmq::kBM >= (int64_t{1} << 31)) {
      *why_not = "weight rows too long for 32-bit tile offsets";
    } else if (w.type == GgmlType::kQ6_K && !w.q6k_padded) {
      *why_not = "raw 210-byte Q6_K blocks";
    }
  }
  if (*why_not == nullptr && mmq::SmemBytesOf(type, bn, plane) > dev->smem_optin) {
    *why_not = "tile needs more shared memory than the device allows";
  }
  if (*why_not != nullptr) return cudaErrorNotSupported;
  int grid = 0;
  bool used_sk = false;
  err = mmq::Dispatch(type, p, bn, /*fast=*/true, sk, stream, &grid, &used_sk);
  if (err == cudaErrorNotSupported) *why_not = "cudaFuncSetAttribute refused the shared memory";
  if (err == cudaSuccess && report != nullptr) {
    report->variant = MmqVariant::kFast;
    report->tokens_per_cta = bn;
    report->scale_plane = plane;
    report->grid = grid;
    report->stream_k = used_sk;
  }
  return err;
}
}  // namespace

cudaError_t LaunchMmqFast(const WeightView& w, const void* act, float* y, int64_t nt,
                          const MmqTuning& tuning, cudaStream_t stream, const char** why_not) {
  return LaunchFastImpl(&w, &y, 1, act, nt, tuning, stream, why_not, nullptr);
}

cudaError_t LaunchMmqGeneric(const WeightView& w, const void* act, float* y, int64_t nt,
                             cudaStream_t stream) {
  mmq::Params p{};
  bool empty = false;
  cudaError_t err = mmq::Prepare(w, act, y, nt, &p, &empty);
  if (err != cudaSuccess || empty) return err;
  const mmq::DeviceInfo* dev = nullptr;
  if ((err = mmq::QueryDevice(&dev)) != cudaSuccess) return err;
  if (dev->major < 8) return cudaErrorNotSupported;
  const int bn = mmq::SmemBytesOf(w.type, 64) <= dev->smem_optin ? 64 : 32;
  int grid = 0;
  bool used_sk = false;
  return mmq::Dispatch(w.type, p, bn, /*fast=*/false, mmq::StreamKRequest{}, stream, &grid, &used_sk);
}

namespace {
int GenericTokensPerCta(GgmlType type) {
  const mmq::DeviceInfo* dev = nullptr;
  if (mmq::QueryDevice(&dev) != cudaSuccess) return 0;
  return mmq::SmemBytesOf(type, 64) <= dev->smem_optin ? 64 : 32;
}
}  // namespace

cudaError_t LaunchMmqQuantized(const WeightView& w, const void* act, float* y, int64_t nt,
                               cudaStream_t stream, MmqReport* report, const MmqTuning* tuning) {
  MmqReport local;
  if (report == nullptr) report = &local;
  *report = MmqReport{};
  MmqSegments one;
  one.n = 1;
  one.w[0] = w;
  one.y[0] = y;
  return LaunchMmqSegments(one, act, nt, stream, report, tuning);
}

static_assert(kMmqMaxSegments == mmq::kMaxSegments, "one segment limit");

cudaError_t LaunchMmqSegments(const MmqSegments& s, const void* act, int64_t nt,
                              cudaStream_t stream, MmqReport* report, const MmqTuning* tuning) {
  MmqReport local;
  if (report == nullptr) report = &local;
  *report = MmqReport{};
  if (s.n < 1 || s.n > kMmqMaxSegments) return cudaErrorInvalidValue;
  const char* why_not = nullptr;
  // Only stream-k is taken from `tuning` here (the token tile stays
  // automatic: LaunchMmqFast is the explicit-geometry entry).
  MmqTuning tu;
  if (tuning != nullptr) {
    tu.stream_k = tuning->stream_k;
    tu.stream_k_workspace = tuning->stream_k_workspace;
    tu.stream_k_bytes = tuning->stream_k_bytes;
    tu.split_k = tuning->split_k;
    tu.split_workspace = tuning->split_workspace;
    tu.split_bytes = tuning->split_bytes;
  }
  cudaError_t err = LaunchFastImpl(s.w, s.y, s.n, act, nt, tu, stream, &why_not, report);
  bool any_rows = false;
  for (int i = 0; i < s.n; ++i) any_rows = any_rows || s.w[i].rows > 0;
  if (err == cudaSuccess) return err;
  if (err != cudaErrorNotSupported) return err;
  // The generic rung, one launch per weight (validated by the fast attempt).
  report->fast_skipped = why_not;
  for (int i = 0; i < s.n; ++i) {
    if ((err = LaunchMmqGeneric(s.w[i], act, s.y[i], nt, stream)) != cudaSuccess) return err;
  }
  if (nt > 0 && any_rows) {
    report->variant = MmqVariant::kGeneric;
    report->tokens_per_cta = GenericTokensPerCta(s.w[0].type);
  }
  return cudaSuccess;
}

cudaError_t LaunchMmq(const WeightView& w, const float* x, void* act_scratch, float* y,
                      int64_t nt, cudaStream_t stream, MmqReport* report, const MmqTuning* tuning) {
  if (report != nullptr) *report = MmqReport{};
  // Validate the whole call before launching anything (the prepass alone
  // would accept shapes the GEMM rejects).
  mmq::Params p{};
  bool empty = false;
  cudaError_t err = mmq::Prepare(w, act_scratch, y, nt, &p, &empty);
  if (err != cudaSuccess || empty) return err;
  if (x == nullptr) return cudaErrorInvalidValue;
  const mmq::DeviceInfo* dev = nullptr;
  if ((err = mmq::QueryDevice(&dev)) != cudaSuccess) return err;
  if (dev->major < 8) return cudaErrorNotSupported;  // before the prepass writes anything
  if ((err = LaunchQuantizeMmq(x, act_scratch, w.k, nt, stream)) != cudaSuccess) return err;
  return LaunchMmqQuantized(w, act_scratch, y, nt, stream, report, tuning);
}

}  // namespace minfer::cuda
