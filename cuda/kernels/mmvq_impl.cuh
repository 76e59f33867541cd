// The MMVQ kernel template (quantized weights x BlockQ8A activations, dp4a),
// shared by mmvq.cu (single token, the fused decode variants, launchers) and
// mmvq_multi.cu (2..8 tokens). nvcc only; internal to cuda/kernels.
//
// Work decomposition. A CTA is 8 warps. Warps are grouped `ks` at a time
// (ks = 1, 2, 4 or 8): each group owns R consecutive weight rows (a "row
// group") and its ks warps split the row's units (whole 32-element
// activation blocks of one weight row: the legacy block, or 64 weights of a
// K-quant super-block; quant_dev.cuh UnitDec) between them, lane by lane:
// warp kp of the group takes units kp*32 + lane, + ks*32, ... So a warp
// instruction covers 32 consecutive units of a row (contiguous weight bytes,
// coalesced loads), every lane loads the unit of all R rows before using any
// of them (R independent loads in flight), and the activation codes a lane
// loads for a unit serve all R rows. Because the step is a multiple of 32,
// a lane's unit-in-block never changes, so its field offsets, activation
// offsets and pointer strides are loop invariants (this, and templating the
// 16-byte alignment, took Q4_K from 174 to ~90 issued instructions per 32
// weights; the kernel is instruction- rather than bandwidth-limited for the
// 4-bit types, so every instruction counts). The launchers pick R and ks
// from the shape (mmvq.cu: one row per group below 8K rows, 2 or 4 above; k
// split only to reach ~2K warps).
//
// Activations. With kSmem the CTA first copies the nt tokens' BlockQ8A rows
// into shared memory de-interleaved (codes contiguous, then (d, s) pairs):
// a block's 32 codes are two 16-byte shared loads instead of four 8-byte
// global loads spread over the interleaved 40-byte blocks. The grid is then
// persistent (about as many CTAs as fit on the device, each looping over row
// blocks) so the copy is paid once per CTA, and the first weight loads are
// issued before it. Without kSmem (one row per group, or activations beyond
// 48 KB) the codes are read through L1 (__ldg); weights bypass L1
// (L1::no_allocate) so the activations stay resident.
//
// Measured on the H200 (matmul_bench, 7B shapes, HBM-resident weights):
// Q4_K 1.4 (3584x3584) to 3.7 TB/s (152064x3584), Q8_0 2.4 to 4.3, Q6_K 1.6
// to 3.5; ncu showed Q8_0 at 72% of DRAM peak and Q4_K issue-bound.
//
// Numerics: per activation block (Q6_K: per 16 elements) an exact int32 dot
// of the codes, folded as acc = fma(float(I), f * d_a, acc), mins as
// fma(m, s_a, acc) — term for term the CPU's (engine/quant/vec_dot.h) —
// then a shuffle tree over lanes and a fixed-order sum over the ks warps:
// the CPU's terms, summed in a different order.
#ifndef MINFER_CUDA_KERNELS_MMVQ_IMPL_CUH_
#define MINFER_CUDA_KERNELS_MMVQ_IMPL_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/matmul.h"
#include "cuda/kernels/per_device.cuh"
#include "cuda/kernels/quant_dev.cuh"
#include "cuda/kernels/types.h"

namespace minfer::cuda::mmvq {

inline constexpr int kThreads = 256;
inline constexpr int kWarps = kThreads / 32;
// Dynamic shared memory a CTA may use without an opt-in attribute.
inline constexpr int64_t kMaxSmem = 48 * 1024;

enum Mode : int {
  kPlain = 0,        // y[row] = W_row . q (rows of up to 3 segments)
  kSwiGlu = 1,       // y[r] = silu(G_r . q) * (U_r . q); a row group is (G_r, U_r) pairs
  kSiluMulPrev = 2,  // y[r] = silu(y[r]) * (W_r . q): second half of a mixed-type SwiGLU
};

struct Seg {
  const uint8_t* data;
  int64_t row_bytes;
  int64_t row_begin;  // first row of this segment in the launch's row numbering
  int64_t y_offset;   // where its outputs start in y
};

struct Params {
  Seg seg[3];
  int nseg;
  const uint8_t* up;  // kSwiGlu: the up matrix (seg[0] is the gate)
  int64_t up_row_bytes;
  int64_t rows;  // output rows
  int64_t nb;    // 32-element blocks (= slices) per row
  const BlockQ8A* q;
  float* y;
  int64_t y_stride;
  const float* res;  // kPlain: y = res + W q, res laid out as y (null: none)
  int ks;                // warps per row group: 1, 2, 4, 8
  int ks_log2;
  int64_t n_cta_blocks;  // row blocks (kWarps / ks row groups each)
  int block_bytes;       // device bytes of one weight block
  bool aligned;          // weights 16-byte aligned (K-quant vector loads)
};

__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

// Resident CTAs per SM the register allocation must allow (the cap on
// registers per thread is 64K / (256 * this)): one row per warp group fits
// in 64 registers; two rows get 80; four rows or several tokens get 128.
// MINFER_MMVQ_R2_MIN_BLOCKS overrides the two-row value (an occupancy
// experiment: 4, i.e. 64 registers, measured ~3% slower on the H200).
#ifndef MINFER_MMVQ_R2_MIN_BLOCKS
#define MINFER_MMVQ_R2_MIN_BLOCKS 3
#endif
constexpr int MinBlocks(int nt, int r) {
  return nt > 1 ? 2 : r == 1 ? 4 : r == 2 ? MINFER_MMVQ_R2_MIN_BLOCKS : 2;
}

template <GgmlType T, int NT, int R, bool kSmem, int kMode, bool kAligned>
__global__ void __launch_bounds__(kThreads, MinBlocks(NT, R)) mmvq_kernel(const Params p) {
  pdl_enter();
  using D = qdev::UnitDec<T>;
  static_assert(kMode != kSwiGlu || (R % 2 == 0 && NT == 1), "SwiGLU pairs rows, one token");
  static_assert(kMode != kSiluMulPrev || NT == 1, "one token");
  static_assert(32 % D::kUnits == 0, "a warp step must keep each lane's unit-in-block");
  constexpr int kNA = D::kNA;                          // activation blocks per unit
  constexpr int kAbPerBlock = D::kBlockElems / 32;     // activation blocks per weight block
  constexpr int kOutPerGroup = kMode == kSwiGlu ? R / 2 : R;

  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int grp = warp >> p.ks_log2, kp = warp & (p.ks - 1);
  const int groups_per_cta = kWarps >> p.ks_log2;
  // Indices fit in 32 bits (nb < 2^26 for any real matrix); 32-bit loop
  // arithmetic saves registers and instructions.
  const int nb = static_cast<int>(p.nb);  // activation blocks per row
  const int nu = nb / kNA;                 // units per row
  const int block_bytes = T == GgmlType::kQ6_K ? p.block_bytes : D::kBytes;

  int8_t* s_qs = reinterpret_cast<int8_t*>(smem);
  const float2* s_ds = reinterpret_cast<const float2*>(smem + (kSmem ? NT * nb * 32 : 0));
  float* s_red = reinterpret_cast<float*>(smem + (kSmem ? NT * nb * 40 : 0));

  // A lane's units are s_begin, s_begin + s_step, ...; s_step is a multiple
  // of 32, so the unit's place in its weight block (j) never changes:
  // everything that depends on j (the fields it reads, its activation
  // blocks) is fixed for the whole loop, and each step advances the weight
  // pointers and the activation index by constants.
  const int s_begin = kp * 32 + lane;
  const int s_step = p.ks * 32;
  const int j = s_begin % D::kUnits;
  const int64_t w_step = static_cast<int64_t>(s_step / D::kUnits) * block_bytes;
  const int a_step = s_step / D::kUnits * kAbPerBlock;
  const int ab_begin = s_begin / D::kUnits * kAbPerBlock;
  int abo[kNA];  // the unit's activation blocks, relative to its weight block
#pragma unroll
  for (int a = 0; a < kNA; ++a) abo[a] = D::ablock(j, a);

  // Per row group: the lane's first weight block of each row, output
  // offsets, validity.
  const uint8_t* wp[R];
  int64_t yo[kOutPerGroup];
  bool ok[kOutPerGroup];
  auto setup_group = [&](int64_t cb) {
    const int64_t g = cb * groups_per_cta + grp;
    const int64_t first = static_cast<int64_t>(s_begin / D::kUnits) * block_bytes;
#pragma unroll
    for (int i = 0; i < kOutPerGroup; ++i) {
      const int64_t o = g * kOutPerGroup + i;
      ok[i] = o < p.rows;
      const int64_t r = ok[i] ? o : p.rows - 1;  // clamp: load a real row, skip the store
      if constexpr (kMode == kSwiGlu) {
        wp[2 * i] = p.seg[0].data + r * p.seg[0].row_bytes + first;
        wp[2 * i + 1] = p.up + r * p.up_row_bytes + first;
        yo[i] = r;
      } else {
        // Explicit selects: a run-time index into the parameter struct
        // would copy it to local memory.
        const int sg = (p.nseg > 1 && r >= p.seg[1].row_begin)
                           ? ((p.nseg > 2 && r >= p.seg[2].row_begin) ? 2 : 1)
                           : 0;
        const uint8_t* data =
            sg == 0 ? p.seg[0].data : (sg == 1 ? p.seg[1].data : p.seg[2].data);
        const int64_t rb =
            sg == 0 ? p.seg[0].row_bytes : (sg == 1 ? p.seg[1].row_bytes : p.seg[2].row_bytes);
        const int64_t r0 =
            sg == 0 ? p.seg[0].row_begin : (sg == 1 ? p.seg[1].row_begin : p.seg[2].row_begin);
        const int64_t y0 =
            sg == 0 ? p.seg[0].y_offset : (sg == 1 ? p.seg[1].y_offset : p.seg[2].y_offset);
        wp[i] = data + (r - r0) * rb + first;
        yo[i] = y0 + (r - r0);
      }
    }
  };

  // One unit of raw weight bytes per row. A unit is decoded as soon as it
  // arrives and the same registers then receive the next unit's loads,
  // which stay in flight while the current unit's dot products run.
  typename D::Raw raw[R];
  auto start_group = [&]() {
    if (s_begin < nu) {
#pragma unroll
      for (int r = 0; r < R; ++r) D::load(&raw[r], wp[r], j, kAligned);
    }
  };

  // The 32 codes of one activation block and its (d, s).
  struct Act {
    int32_t q[8];
    float2 ds;
  };
  auto load_act = [&](int t, int ab, Act* a) {
    if constexpr (kSmem) {
      const int4* src = reinterpret_cast<const int4*>(s_qs + (t * nb + ab) * 32);
      const int4 v0 = src[0], v1 = src[1];
      a->q[0] = v0.x, a->q[1] = v0.y, a->q[2] = v0.z, a->q[3] = v0.w;
      a->q[4] = v1.x, a->q[5] = v1.y, a->q[6] = v1.z, a->q[7] = v1.w;
      a->ds = s_ds[t * nb + ab];
    } else {
      const BlockQ8A* qt = p.q + static_cast<int64_t>(t) * nb;
      qdev::q8a_load_block(qt, ab, a->q);
      a->ds = qdev::q8a_load_ds(qt, ab);
    }
  };
  // The CPU's terms for one activation block: fma(float(I), f * d_a, acc)
  // (Q6_K: per 16 elements), the min as fma(m, s_a, acc).
  auto dot_block = [](const int32_t w[8], const qdev::UnitScales& sc, int a, const Act& x,
                      float acc) {
    if constexpr (D::kSplitScale) {
      const int i0 = qdev::dot16(w, x.q, 0);
      const int i1 = qdev::dot16(w + 4, x.q + 4, 0);
      acc = fmaf(static_cast<float>(i0), sc.f[a][0] * x.ds.x, acc);
      acc = fmaf(static_cast<float>(i1), sc.f[a][1] * x.ds.x, acc);
    } else {
      const int isum = qdev::dot16(w + 4, x.q + 4, qdev::dot16(w, x.q, 0));
      acc = fmaf(static_cast<float>(isum), sc.f[a][0] * x.ds.x, acc);
    }
    if constexpr (D::kHasMin) acc = fmaf(sc.m[a], x.ds.y, acc);
    return acc;
  };

  int64_t cb = blockIdx.x;
  if (cb < p.n_cta_blocks) {
    setup_group(cb);
    start_group();  // in flight while the activations stage
  }

  if constexpr (kSmem) {
    // BlockQ8A rows -> codes [NT][nb*32] and (d, s) [NT][nb], in 8-byte units
    // (5 per block), coalesced.
    const int units = NT * nb * 5;
    const int2* src = reinterpret_cast<const int2*>(p.q);
    float2* ds = reinterpret_cast<float2*>(smem + NT * nb * 32);
    for (int u = threadIdx.x; u < units; u += kThreads) {
      const int b = u / 5;
      const int part = u - b * 5;
      const int2 v = __ldg(src + u);
      if (part == 0) {
        ds[b] = make_float2(__int_as_float(v.x), __int_as_float(v.y));
      } else {
        *reinterpret_cast<int2*>(s_qs + b * 32 + (part - 1) * 8) = v;
      }
    }
    __syncthreads();
  }

  for (; cb < p.n_cta_blocks; cb += gridDim.x) {
    float acc[R][NT];
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int t = 0; t < NT; ++t) acc[r][t] = 0.0f;
    }

    int ab = ab_begin;
    for (int s = s_begin; s < nu; s += s_step, ab += a_step) {
      const bool more = s + s_step < nu;
      // Per unit: the rows' scales; then per activation block the codes
      // (ALU work on registers that have arrived) and the dot products, one
      // block's codes live at a time (several tokens: the block's codes of
      // all R rows, each activation load serving all of them); then the
      // rows' registers are refilled with the next unit, whose loads stay
      // in flight across the loop turn while other warps run.
      qdev::UnitScales sc[R];
#pragma unroll
      for (int r = 0; r < R; ++r) D::scales(raw[r], j, &sc[r]);
#pragma unroll
      for (int a = 0; a < kNA; ++a) {
        if constexpr (NT == 1) {
          Act act;
          load_act(0, ab + abo[a], &act);
#pragma unroll
          for (int r = 0; r < R; ++r) {
            int32_t w[8];
            D::codes(raw[r], j, a, w);
            acc[r][0] = dot_block(w, sc[r], a, act, acc[r][0]);
          }
        } else {
          int32_t w[R][8];
#pragma unroll
          for (int r = 0; r < R; ++r) D::codes(raw[r], j, a, w[r]);
#pragma unroll
          for (int t = 0; t < NT; ++t) {
            Act act;
            load_act(t, ab + abo[a], &act);
#pragma unroll
            for (int r = 0; r < R; ++r) acc[r][t] = dot_block(w[r], sc[r], a, act, acc[r][t]);
          }
        }
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        wp[r] += w_step;
        if (more) D::load(&raw[r], wp[r], j, kAligned);
      }
    }

    // This row group is done; start the next one's first loads before the
    // reduction so they overlap it.
    const int64_t cb_next = cb + gridDim.x;
    bool ok_cur[kOutPerGroup];
    int64_t yo_cur[kOutPerGroup];
#pragma unroll
    for (int i = 0; i < kOutPerGroup; ++i) ok_cur[i] = ok[i], yo_cur[i] = yo[i];
    if (cb_next < p.n_cta_blocks) {
      setup_group(cb_next);
      start_group();
    }

#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int t = 0; t < NT; ++t) acc[r][t] = warp_sum(acc[r][t]);
    }
    if (p.ks > 1) {
      // Partial sums of the ks warps of each group, added in warp order.
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          if (lane == r * NT + t) s_red[(warp * R + r) * NT + t] = acc[r][t];
        }
      }
      __syncthreads();
      if (kp == 0) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
#pragma unroll
          for (int t = 0; t < NT; ++t) {
            float v = s_red[(warp * R + r) * NT + t];
            for (int w = 1; w < p.ks; ++w) v += s_red[((warp + w) * R + r) * NT + t];
            acc[r][t] = v;
          }
        }
      }
      __syncthreads();  // s_red is rewritten by the next row block
    }
    if (kp == 0) {
#pragma unroll
      for (int i = 0; i < kOutPerGroup; ++i) {
        if (!ok_cur[i]) continue;
        if constexpr (kMode == kSwiGlu) {
          if (lane == i) p.y[yo_cur[i]] = silu(acc[2 * i][0]) * acc[2 * i + 1][0];
        } else if constexpr (kMode == kSiluMulPrev) {
          if (lane == i) p.y[yo_cur[i]] = silu(p.y[yo_cur[i]]) * acc[i][0];
        } else {
#pragma unroll
          for (int t = 0; t < NT; ++t) {
            if (lane == (i * NT + t) % 32) {
              const int64_t o = t * p.y_stride + yo_cur[i];
              // The residual as Add(r, y) adds it: one float add, last.
              p.y[o] = p.res != nullptr ? p.res[o] + acc[i][t] : acc[i][t];
            }
          }
        }
      }
    }
  }
}

// ------------------------------------------------------------------ host side

// A launch, fully resolved (what the tuned launcher and the heuristics fill).
struct Plan {
  Params params;
  int nt;
  int rows_per_warp;  // R
  bool smem_act;
  int mode;
  size_t smem_bytes;
  int grid;
};

// Launches `plan` for weight type `type` (instantiated in mmvq.cu for nt == 1
// and in mmvq_multi.cu for nt 2..8). Returns cudaErrorInvalidValue for a
// combination that has no instantiation.
cudaError_t LaunchPlanSingle(GgmlType type, const Plan& plan, cudaStream_t stream);
cudaError_t LaunchPlanMulti(GgmlType type, const Plan& plan, cudaStream_t stream);

// Multiprocessors of the current device (cached).
int DeviceSmCount();

// Resident CTAs of `threads` threads using `regs` registers and `smem` bytes
// of dynamic shared memory, over the whole device.
int ResidentCtas(int regs_per_thread, size_t smem_bytes);

// K-quant blocks are read with 16-byte loads when the rows allow it
// (kAligned) and with 2-byte loads otherwise (the raw 210-byte Q6_K, a
// misaligned base); legacy blocks always use the window loads.
constexpr bool NeedsUnaligned(GgmlType t) {
  return t == GgmlType::kQ4_K || t == GgmlType::kQ5_K || t == GgmlType::kQ6_K;
}

template <GgmlType T, int NT, int R, bool kSmem, int kMode, bool kAligned>
cudaError_t LaunchKernel(const Plan& plan, cudaStream_t stream) {
  auto* kernel = &mmvq_kernel<T, NT, R, kSmem, kMode, kAligned>;
  int grid = plan.grid;
  if (kSmem) {
    // Persistent: about as many CTAs as can be resident at once.
    static PerDevice<int> regs_cache;
    const int regs = regs_cache.Get([kernel](int) {
      cudaFuncAttributes attr{};
      return cudaFuncGetAttributes(&attr, kernel) == cudaSuccess ? attr.numRegs : 64;
    });
    const int64_t resident = ResidentCtas(regs, plan.smem_bytes);
    if (resident > 0 && grid > resident) grid = static_cast<int>(resident);
  }
  LaunchGrid(kernel, grid, kThreads, plan.smem_bytes, stream, plan.params);
  return cudaGetLastError();
}

// Unaligned K-quant weights run with R = 2 only (a correctness path: the
// backend registers Q6_K padded and every weight 16-byte aligned; the
// launchers pick R = 2 for them).
template <GgmlType T, int NT, int R, bool kSmem, int kMode>
cudaError_t LaunchInstance(const Plan& plan, cudaStream_t stream) {
  if constexpr (NeedsUnaligned(T)) {
    if (!plan.params.aligned) {
      if constexpr (R == 2) {
        return LaunchKernel<T, NT, 2, kSmem, kMode, false>(plan, stream);
      } else {
        return cudaErrorInvalidValue;
      }
    }
  }
  return LaunchKernel<T, NT, R, kSmem, kMode, true>(plan, stream);
}

}  // namespace minfer::cuda::mmvq

#endif  // MINFER_CUDA_KERNELS_MMVQ_IMPL_CUH_
