// The few-token int8 GEMM (mmq.h LaunchMmqSmall): the matmuls of a decode
// batch, 1..64 tokens, on tensor cores without the tiled GEMM's shared-
// memory staging.
//
// Why a second kernel. The tiled MMQ stages 128 weight rows per chunk in
// shared memory and decodes them for a tile of 32-128 tokens; its cost per
// weight byte is fixed by that staging and decode, so at a few tokens it
// streams weights at 0.2-0.8 TB/s (7B shapes on the H200, matmul_bench
// --decode-batch), a fifth of HBM's bandwidth. Here every warp owns 16
// weight rows and walks k alone: it loads its rows' block bytes straight
// from global memory into registers, decodes them into mma A fragments in
// registers (mmq_impl.cuh's Tr<T>::frag, the same bit operations), reads
// the activation codes of up to 64 tokens (B fragments, from L1/L2: every
// warp of an SM reads the same few KB), and issues one mma.m16n8k32 per 32
// weights and 8 tokens. No shared memory, no barriers: many warps per SM
// keep enough weight loads in flight to stream near bandwidth.
//
// Work: warp w of the grid's x dimension is row group w (16 rows) across
// all segments; grid.y = the k splits (split z takes chunks [z n_chunks /
// S, (z + 1) n_chunks / S)). A lane (g = lane / 4, t = lane % 4) holds
// rows g and g + 8 of the group and, per 8-token n-tile, tokens 2t and
// 2t + 1 of the C fragment. Scales: lane t decodes the table entries
// (Tr<T>::table) of blocks 2t and 2t + 1 of its two rows, and the warp
// shuffles them to the lanes that fold with them.
//
// Numerics: per 32-element block an exact int32 dot (int8 mma), folded as
// fma(float(I), f * d_a, acc) (Q6_K: per 16 elements) and the min as
// fma(m, s_a, acc), blocks in ascending k in one lane per output: without
// a split, the CPU's VecDotQ8A bit for bit (and the tiled MMQ's). With S
// splits the partials of S runs of blocks are added in split order (a
// float rounding difference, deterministic).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/kernels/mmq.h"
#include "cuda/kernels/mmq_impl.cuh"

namespace minfer::cuda {
namespace mmq_small {
namespace {

using mmq::exact_i2f;
using mmq::mma_k16;
using mmq::mma_k32;
using mmq::Tr;

constexpr int kWarpsPerCta = 4;
constexpr int kMaxTokens = 64;

struct Seg {
  const uint8_t* w;
  int64_t row_bytes;
  int64_t rows;
  float* y;
  float* part;   // split-k: this segment's partials in split 0's slab
  int groups;    // 16-row groups
};

struct Params {
  Seg seg[kMmqMaxSegments];
  int group_begin[kMmqMaxSegments];
  int n_seg;
  int groups;  // all segments' row groups
  int64_t k;
  int nb;        // k / 32
  int n_chunks;  // ceil(nb / 8)
  int src_cb;    // bytes between consecutive chunks of a weight row
  const int8_t* aq;
  const float* ad;
  const float* as;
  int64_t ntp;
  int nt;
  int splits;
  int64_t split_stride;  // floats per split slab
};

__device__ __forceinline__ uint32_t ldg_u32(const int8_t* p) {
  return __ldg(reinterpret_cast<const uint32_t*>(p));
}

template <GgmlType T, int NT8>
__global__ void __launch_bounds__(32 * kWarpsPerCta) mmq_small_kernel(const Params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using X = Tr<T>;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int group = blockIdx.x * kWarpsPerCta + (threadIdx.x >> 5);
  if (group >= p.groups) return;  // warp-uniform
  const int sg = p.n_seg > 1 && group >= p.group_begin[1]
                     ? (p.n_seg > 2 && group >= p.group_begin[2] ? 2 : 1)
                     : 0;
  // Field-by-field selects: indexing the parameter array with a run-time
  // index would copy it to local memory.
  auto pick = [&](auto field) {
    return sg == 0 ? p.seg[0].*field : sg == 1 ? p.seg[1].*field : p.seg[2].*field;
  };
  const int64_t rows = pick(&Seg::rows);
  const int64_t row_bytes = pick(&Seg::row_bytes);
  const int gb = sg == 0 ? 0 : sg == 1 ? p.group_begin[1] : p.group_begin[2];
  const int64_t r0 = static_cast<int64_t>(group - gb) * 16 + g, r1 = r0 + 8;
  const uint8_t* const w0 = pick(&Seg::w) + min(r0, rows - 1) * row_bytes;
  const uint8_t* const w1 = pick(&Seg::w) + min(r1, rows - 1) * row_bytes;
  const int z = blockIdx.y;
  const int c_begin = static_cast<int>(static_cast<int64_t>(z) * p.n_chunks / p.splits);
  const int c_end = static_cast<int>(static_cast<int64_t>(z + 1) * p.n_chunks / p.splits);

  float acc[NT8][4];
#pragma unroll
  for (int n = 0; n < NT8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

  for (int c = c_begin; c < c_end; ++c) {
    const uint8_t* const b0 = w0 + static_cast<int64_t>(c) * p.src_cb;
    const uint8_t* const b1 = w1 + static_cast<int64_t>(c) * p.src_cb;
    const int nkb = min(8, p.nb - c * 8);  // a legacy type's last chunk may be short
    // This lane's table entries: blocks 2t and 2t + 1 of rows g and g + 8.
    float2 tab0[2], tab1[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int kb = 2 * t + j;
      tab0[j] = kb < nkb ? X::table(b0, kb) : make_float2(0.0f, 0.0f);
      tab1[j] = kb < nkb ? X::table(b1, kb) : make_float2(0.0f, 0.0f);
    }
    const int8_t* const a_chunk = p.aq + static_cast<int64_t>(c) * 256 + 4 * t;
#pragma unroll
    for (int kb = 0; kb < 8; ++kb) {
      if (kb >= nkb) break;  // warp-uniform
      uint32_t a[4];
      X::frag(b0, kb, t, &a[0], &a[2]);
      X::frag(b1, kb, t, &a[1], &a[3]);
      // The table entries of block kb come from lane (g, kb / 2).
      const int src = (lane & ~3) | (kb >> 1);
      const float2 e0 = tab0[kb & 1], e1 = tab1[kb & 1];
      const float2 f0 = make_float2(__shfl_sync(kFullWarpMask, e0.x, src),
                                    __shfl_sync(kFullWarpMask, e0.y, src));
      const float2 f1 = make_float2(__shfl_sync(kFullWarpMask, e1.x, src),
                                    __shfl_sync(kFullWarpMask, e1.y, src));
      const int64_t kbg = static_cast<int64_t>(c) * 8 + kb;
#pragma unroll
      for (int n = 0; n < NT8; ++n) {
        // B: codes of token 8n + g at elements 4t.. and 16 + 4t.. of block kbg.
        const int8_t* ap = a_chunk + static_cast<int64_t>(8 * n + g) * p.k + 32 * kb;
        const uint32_t bq0 = ldg_u32(ap), bq1 = ldg_u32(ap + 16);
        // C columns: tokens 8n + 2t, 8n + 2t + 1.
        const float2 da = __ldg(reinterpret_cast<const float2*>(p.ad + kbg * p.ntp + 8 * n + 2 * t));
        float2 sa = make_float2(0.0f, 0.0f);
        if constexpr (X::kMin) {
          sa = __ldg(reinterpret_cast<const float2*>(p.as + kbg * p.ntp + 8 * n + 2 * t));
        }
        float* const ac = acc[n];
        if constexpr (X::kSplit) {
          // Elements 0-15, then 16-31: each output gets its lo term first.
          int c16[4];
          mma_k16(c16, a[0], a[1], bq0);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float f = (e >> 1) ? f1.x : f0.x;
            ac[e] = fmaf(exact_i2f(c16[e]), __fmul_rn(f, (e & 1) ? da.y : da.x), ac[e]);
          }
          mma_k16(c16, a[2], a[3], bq1);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float f = (e >> 1) ? f1.y : f0.y;
            ac[e] = fmaf(exact_i2f(c16[e]), __fmul_rn(f, (e & 1) ? da.y : da.x), ac[e]);
          }
        } else {
          int cc[4];
          mma_k32(cc, a, bq0, bq1);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float2 f = (e >> 1) ? f1 : f0;
            float v = fmaf(exact_i2f(cc[e]), __fmul_rn(f.x, (e & 1) ? da.y : da.x), ac[e]);
            if constexpr (X::kMin) v = fmaf(f.y, (e & 1) ? sa.y : sa.x, v);
            ac[e] = v;
          }
        }
      }
    }
  }
  float* const y =
      p.splits > 1 ? pick(&Seg::part) + static_cast<int64_t>(z) * p.split_stride : pick(&Seg::y);
#pragma unroll
  for (int n = 0; n < NT8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t row = (e >> 1) ? r1 : r0;
      const int tok = 8 * n + 2 * t + (e & 1);
      if (row < rows && tok < p.nt) y[static_cast<int64_t>(tok) * rows + row] = acc[n][e];
    }
  }
#endif  // __CUDA_ARCH__ >= 800
}

// y = sum over splits, in order (per segment).
__global__ void reduce_kernel(const Params p) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t base = 0;
  for (int sg = 0; sg < p.n_seg; ++sg) {
    const Seg& S = p.seg[sg];
    const int64_t n = static_cast<int64_t>(p.nt) * S.rows;
    if (i < base + n) {
      const int64_t j = i - base;
      float v = __ldcg(S.part + j);
      for (int z = 1; z < p.splits; ++z) v += __ldcg(S.part + z * p.split_stride + j);
      S.y[j] = v;
      return;
    }
    base += n;
  }
}

template <GgmlType T, int NT8>
void LaunchTyped(const Params& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.groups + kWarpsPerCta - 1) / kWarpsPerCta),
                  static_cast<unsigned>(p.splits));
  mmq_small_kernel<T, NT8><<<grid, 32 * kWarpsPerCta, 0, stream>>>(p);
}

template <GgmlType T>
void LaunchNt(const Params& p, cudaStream_t stream) {
  const int nt8 = (p.nt + 7) / 8;
  if (nt8 <= 1) return LaunchTyped<T, 1>(p, stream);
  if (nt8 <= 2) return LaunchTyped<T, 2>(p, stream);
  if (nt8 <= 4) return LaunchTyped<T, 4>(p, stream);
  return LaunchTyped<T, 8>(p, stream);
}

void Dispatch(GgmlType type, const Params& p, cudaStream_t stream) {
  switch (type) {
    case GgmlType::kQ4_0: return LaunchNt<GgmlType::kQ4_0>(p, stream);
    case GgmlType::kQ4_1: return LaunchNt<GgmlType::kQ4_1>(p, stream);
    case GgmlType::kQ5_0: return LaunchNt<GgmlType::kQ5_0>(p, stream);
    case GgmlType::kQ5_1: return LaunchNt<GgmlType::kQ5_1>(p, stream);
    case GgmlType::kQ8_0: return LaunchNt<GgmlType::kQ8_0>(p, stream);
    case GgmlType::kQ4_K: return LaunchNt<GgmlType::kQ4_K>(p, stream);
    case GgmlType::kQ5_K: return LaunchNt<GgmlType::kQ5_K>(p, stream);
    case GgmlType::kQ6_K: return LaunchNt<GgmlType::kQ6_K>(p, stream);
    default: return;
  }
}

int Sms() {
  static const int sms = [] {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return sms;
}

int Major() {
  static const int major = [] {
    int dev = 0, m = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return m;
  }();
  return major;
}

}  // namespace
}  // namespace mmq_small

cudaError_t LaunchMmqSmall(const MmqSegments& s, const void* act, int64_t nt, cudaStream_t stream,
                           const MmqTuning* tuning, const char** why_not) {
  using mmq_small::Params;
  const char* unused;
  if (why_not == nullptr) why_not = &unused;
  *why_not = nullptr;
  if (s.n < 1 || s.n > kMmqMaxSegments || nt < 0 || act == nullptr ||
      reinterpret_cast<uintptr_t>(act) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  if (nt == 0) return cudaSuccess;
  if (nt > kMmqSmallMaxTokens) {
    *why_not = "more than 64 tokens";
    return cudaErrorNotSupported;
  }
  const GgmlType type = s.w[0].type;
  if (!MmqSupports(type)) return cudaErrorInvalidValue;
  const int64_t k = s.w[0].k;
  const int64_t bs = type == GgmlType::kQ4_K || type == GgmlType::kQ5_K || type == GgmlType::kQ6_K
                         ? 256
                         : 32;
  if (k <= 0 || k % bs != 0 || k > (int64_t{1} << 30)) return cudaErrorInvalidValue;
  Params p{};
  p.k = k;
  p.nb = static_cast<int>(k / 32);
  p.n_chunks = (p.nb + 7) / 8;
  const int64_t block_bytes = DeviceBlockBytes(type, s.w[0].q6k_padded);
  p.src_cb = static_cast<int>(bs == 32 ? 8 * block_bytes : block_bytes);
  const int64_t ntp = (nt + kMmqTokenPad - 1) / kMmqTokenPad * kMmqTokenPad;
  p.aq = static_cast<const int8_t*>(act);
  p.ad = reinterpret_cast<const float*>(static_cast<const uint8_t*>(act) + ntp * k);
  p.as = p.ad + ntp * (k / 32);
  p.ntp = ntp;
  p.nt = static_cast<int>(nt);
  int64_t weight_bytes = 0, stride = 0;
  for (int i = 0; i < s.n; ++i) {
    const WeightView& w = s.w[i];
    if (w.type != type || w.k != k || w.rows < 0 || w.q6k_padded != s.w[0].q6k_padded ||
        (w.rows > 0 && (w.data == nullptr || s.y[i] == nullptr))) {
      return cudaErrorInvalidValue;
    }
    if (w.row_bytes < k / bs * block_bytes) return cudaErrorInvalidValue;
    if (type == GgmlType::kQ6_K && !w.q6k_padded) {
      *why_not = "raw 210-byte Q6_K blocks";
      return cudaErrorNotSupported;
    }
    if (reinterpret_cast<uintptr_t>(w.data) % 4 != 0 || w.row_bytes % 4 != 0) {
      *why_not = "weight base or row stride not 4-byte aligned";
      return cudaErrorNotSupported;
    }
    mmq_small::Seg& g = p.seg[p.n_seg];
    if (w.rows == 0) continue;
    g.w = static_cast<const uint8_t*>(w.data);
    g.row_bytes = w.row_bytes;
    g.rows = w.rows;
    g.y = s.y[i];
    g.groups = static_cast<int>((w.rows + 15) / 16);
    p.group_begin[p.n_seg] = p.groups;
    p.groups += g.groups;
    weight_bytes += w.rows * w.row_bytes;
    stride += nt * w.rows;
    ++p.n_seg;
  }
  if (p.n_seg == 0) return cudaSuccess;
  if (mmq_small::Major() < 8) {
    *why_not = "GPU older than sm_80 (no int8 mma.m16n8k32)";
    return cudaErrorNotSupported;
  }
  // Split-k: about 24 warps per SM in all, at most 16 splits and the
  // chunks, and no more partial traffic (written and read) than half the
  // weight bytes.
  p.splits = 1;
  if (tuning != nullptr && tuning->split_k != 0 && tuning->split_workspace != nullptr) {
    int64_t splits = tuning->split_k;
    if (splits < 0) {
      const int64_t target = int64_t{mmq_small::Sms()} * 24;
      splits = std::min<int64_t>({target / std::max(p.groups, 1), 16,
                                  weight_bytes / std::max<int64_t>(16 * stride, 1)});
    }
    splits = std::min<int64_t>({splits, p.n_chunks,
                                tuning->split_bytes / 4 / std::max<int64_t>(stride, 1)});
    if (splits >= 2) {
      if (reinterpret_cast<uintptr_t>(tuning->split_workspace) % 16 != 0) return cudaErrorInvalidValue;
      float* part = static_cast<float*>(tuning->split_workspace);
      int64_t off = 0;
      for (int i = 0; i < p.n_seg; ++i) {
        p.seg[i].part = part + off;
        off += nt * p.seg[i].rows;
      }
      p.splits = static_cast<int>(splits);
      p.split_stride = stride;
    }
  }
  mmq_small::Dispatch(type, p, stream);
  if (p.splits > 1) {
    mmq_small::reduce_kernel<<<static_cast<unsigned>((stride + 255) / 256), 256, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace minfer::cuda
