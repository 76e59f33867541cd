// Row groups and split-k, shared by the GEMMs of a decode batch (the int8
// few-token MMQ in mmq_small.cu, the dequantizing f16 GEMM in dq_gemm.cu).
// nvcc only; internal to cuda/kernels.
//
// Both kernels give every warp a "row group" (16 or 32 rows of one weight)
// across all the batch's tokens, over up to three weights ("segments", the
// q/k/v of a FusedQKV) in one launch; a parameter struct P then holds
//   Seg seg[n] with fields w (bytes), row_bytes, rows, y (output [nt][rows]),
//     part (its partials in split 0's slab)
//   int group_begin[n], n_seg, groups, nt, splits; int64_t split_stride.
// With split-k, CTA y index z computes a run of k-chunks into its own slab of
// partials and reduce_kernel adds the slabs in split order: deterministic,
// but associated otherwise than one CTA's sum.
#ifndef MINFER_CUDA_KERNELS_SPLIT_K_CUH_
#define MINFER_CUDA_KERNELS_SPLIT_K_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/per_device.cuh"

namespace minfer::cuda::splitk {

// The current device's SM count and compute capability major (0 when the
// runtime cannot say), read once per device (per_device.cuh).
struct DeviceFacts {
  int sms = 0;
  int major = 0;
};
inline const DeviceFacts& CurrentDevice() {
  static PerDevice<DeviceFacts> facts;
  return facts.Get([](int id) {
    DeviceFacts d;
    if (cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, id) != cudaSuccess ||
        cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, id) != cudaSuccess) {
      (void)cudaGetLastError();
      d = DeviceFacts{};
    }
    return d;
  });
}

// A kernel's launch facts on the current device: its dynamic shared memory
// (opted in beyond the 48 KB default) and how many of its CTAs of `threads`
// an SM holds (0: it cannot run). Call once per kernel and device (a
// function-local PerDevice<KernelFacts>, through FactsOnce) at its first
// launch there, which the backend makes outside a capture window.
struct KernelFacts {
  int smem = 0;
  int ctas_per_sm = 0;
};
template <class Kernel>
KernelFacts FactsOf(Kernel* kernel, int threads, int smem) {
  KernelFacts f;
  f.smem = smem;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) !=
          cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&f.ctas_per_sm, kernel, threads, smem) !=
          cudaSuccess) {
    (void)cudaGetLastError();
    f.ctas_per_sm = 0;
  }
  return f;
}

// FactsOf(kernel, threads, smem) for the current device, computed at the
// first call on each device and kept in `cache` (the caller's function-local
// static, one per kernel instantiation).
template <class Kernel>
const KernelFacts& FactsOnce(PerDevice<KernelFacts>& cache, Kernel* kernel, int threads, int smem) {
  return cache.Get([&](int) { return FactsOf(kernel, threads, smem); });
}

// Splits for a grid of `ctas` CTAs (per split) on `slots` resident CTA
// slots: the fewest whose waves are at least 80% full (a grid of 1.5 waves
// idles a quarter of the GPU in its second), else the fullest; at most
// `max_splits`.
inline int64_t WaveSplits(int64_t ctas, int64_t slots, int64_t max_splits) {
  int64_t best = 1;
  double best_eff = 0.0;
  for (int64_t s = 1; s <= std::max<int64_t>(max_splits, 1); ++s) {
    const double waves = static_cast<double>(ctas * s) / static_cast<double>(slots);
    const double eff = waves / std::ceil(waves);
    if (eff >= 0.8) return s;
    if (eff > best_eff + 1e-9) best = s, best_eff = eff;
  }
  return best;
}

// Numbers the row groups of 16 * mt rows over the segments (seg[].groups,
// group_begin, groups) and sets p->tiles, the CTAs of `warps` groups.
template <class P>
void AssignGroups(P* p, int mt, int warps) {
  const int rows_per_group = 16 * mt;
  p->groups = 0;
  for (int i = 0; i < p->n_seg; ++i) {
    p->seg[i].groups = static_cast<int>((p->seg[i].rows + rows_per_group - 1) / rows_per_group);
    p->group_begin[i] = p->groups;
    p->groups += p->seg[i].groups;
  }
  p->tiles = (p->groups + warps - 1) / warps;
}

// Lays `splits` (>= 2) slabs of partials out in `workspace` (16-byte
// aligned, at least splits * stride floats: stride = nt * all segments'
// rows) and sets p->splits and p->split_stride. False: the workspace is
// misaligned.
template <class P>
bool SetSplits(P* p, void* workspace, int64_t nt, int64_t splits, int64_t stride) {
  if (reinterpret_cast<uintptr_t>(workspace) % 16 != 0) return false;
  float* part = static_cast<float*>(workspace);
  int64_t off = 0;
  for (int i = 0; i < p->n_seg; ++i) {
    p->seg[i].part = part + off;
    off += nt * p->seg[i].rows;
  }
  p->splits = static_cast<int>(splits);
  p->split_stride = stride;
  return true;
}

// The split count of a launch of the DQ GEMMs (dq_gemm.cu, dq_wgmma.cu):
// `requested` (kMmqSplitAuto, i.e. < 0: enough splits to fill the `slots`
// resident CTA slots in whole waves, WaveSplits, keeping at least
// `min_chunks` k-chunks per split and at most `traffic_cap` splits, 16 in
// any case; >= 2: that many), then clamped to the chunks and to the
// workspace (`workspace_bytes` of float partials, `stride` per split). A
// result below 2 means no split.
inline int64_t DecodeSplits(int64_t requested, int64_t tiles, int64_t slots, int64_t n_chunks,
                            int64_t min_chunks, int64_t traffic_cap, int64_t workspace_bytes,
                            int64_t stride) {
  int64_t splits = requested;
  if (splits < 0) {
    splits = WaveSplits(tiles, slots,
                        std::min<int64_t>({16, std::max<int64_t>(n_chunks / std::max<int64_t>(min_chunks, 1), 1),
                                           traffic_cap}));
  }
  return std::min<int64_t>({splits, n_chunks, workspace_bytes / 4 / std::max<int64_t>(stride, 1)});
}

// One weight of a launch: its bytes and rows, its output [nt][rows], its
// partials in split 0's slab (split-k), its row groups, and the residual
// added to its output (null: none; [nt][rows], may alias y: each element
// is read and then written by one thread).
struct Seg {
  const uint8_t* w;
  int64_t row_bytes;
  int64_t rows;
  float* y;
  float* part;
  int groups;
  const float* r;
};

// The weights of a DQ GEMM launch (dq_gemm.cu, dq_wgmma.cu, dqp_wgmma.cu;
// S an MmqSegments) checked and copied into p->seg: each of the first's type,
// k and Q6_K padding, rows >= 0, data and output where rows > 0, rows of at
// least k / 256 blocks of `block_bytes`; weights of 0 rows are left out. The
// launchers' contract: cudaErrorInvalidValue for an invalid call,
// cudaErrorNotSupported (with *why_not) for a base or row stride that is
// not 16-byte aligned. Adds each weight's bytes to *weight_bytes and nt x
// its rows to *stride.
template <class S, class P>
cudaError_t CopySegments(const S& s, int64_t nt, int64_t block_bytes, P* p, int64_t* weight_bytes,
                         int64_t* stride, const char** why_not) {
  const int64_t k = s.w[0].k;
  for (int i = 0; i < s.n; ++i) {
    const auto& w = s.w[i];
    if (w.type != s.w[0].type || w.k != k || w.rows < 0 || w.q6k_padded != s.w[0].q6k_padded ||
        (w.rows > 0 && (w.data == nullptr || s.y[i] == nullptr)) ||
        w.row_bytes < k / 256 * block_bytes) {
      return cudaErrorInvalidValue;
    }
    if (reinterpret_cast<uintptr_t>(w.data) % 16 != 0 || w.row_bytes % 16 != 0) {
      *why_not = "weight base or row stride not 16-byte aligned";
      return cudaErrorNotSupported;
    }
    if (w.rows == 0) continue;
    auto& g = p->seg[p->n_seg++];
    g.w = static_cast<const uint8_t*>(w.data);
    g.row_bytes = w.row_bytes;
    g.rows = w.rows;
    g.y = s.y[i];
    g.r = nullptr;
    *weight_bytes += w.rows * w.row_bytes;
    *stride += nt * w.rows;
  }
  return cudaSuccess;
}

// For a launch asked to keep its partials: `out` (a SplitOutputs, dq_wgmma.h)
// per weight i of `s`: slab 0 of its partials, or its output where the
// launch did not split (and for a weight of 0 rows, which nothing reads).
template <class S, class P, class O>
void DescribeOutputs(const S& s, const P& p, O* out) {
  int k = 0;
  for (int i = 0; i < s.n; ++i) {
    if (s.w[i].rows == 0) {
      out->part[i] = s.y[i];
      continue;
    }
    out->part[i] = p.splits > 1 ? p.seg[k].part : p.seg[k].y;
    ++k;
  }
  out->splits = p.splits > 1 ? p.splits : 1;
  out->stride = p.splits > 1 ? p.split_stride : 0;
}

// One warp's rows: row group `group` of the launch (16 * MT rows of one
// segment).
struct WarpRows {
  bool active;  // false: past the last row group (still copies activations, meets barriers)
  int sg;       // segment
  int64_t rows, row_bytes, rbase;
  const uint8_t* w;
};

template <int MT, class P>
__device__ __forceinline__ WarpRows RowsOf(const P& p, int group) {
  WarpRows r;
  r.active = group < p.groups;
  const int grp = r.active ? group : p.groups - 1;
  r.sg = p.n_seg > 1 && grp >= p.group_begin[1] ? (p.n_seg > 2 && grp >= p.group_begin[2] ? 2 : 1)
                                                : 0;
  // Field-by-field selects: indexing the parameter array with a run-time
  // index would copy it to local memory.
  auto pick = [&](auto field) {
    return r.sg == 0 ? p.seg[0].*field : r.sg == 1 ? p.seg[1].*field : p.seg[2].*field;
  };
  using Seg = typename std::remove_cv_t<std::remove_reference_t<decltype(p.seg[0])>>;
  r.rows = pick(&Seg::rows);
  r.row_bytes = pick(&Seg::row_bytes);
  r.w = pick(&Seg::w);
  const int gb = r.sg == 0 ? 0 : r.sg == 1 ? p.group_begin[1] : p.group_begin[2];
  r.rbase = static_cast<int64_t>(grp - gb) * 16 * MT;
  return r;
}

template <class V>
__device__ __forceinline__ V LoadV(const float* src) {
  if constexpr (std::is_same_v<V, float4>) {
    return __ldcg(reinterpret_cast<const float4*>(src));
  } else {
    return __ldcg(src);
  }
}
__device__ __forceinline__ float AddV(float a, float b) { return a + b; }
__device__ __forceinline__ float4 AddV(float4 a, float4 b) {
  return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

// The sum of `splits` slabs of partials `stride` floats apart, in split
// order: v = p0, then v += p1, v += p2, ... — the reduce's order, so every
// reader that sums through here (the reduce, LaunchSplitSum, the SwiGLU and
// RmsNorm that take kept partials) gets the reduce's bits. `load(off)`
// reads the value (a float, or a float4 of four consecutive outputs) at
// float offset `off` from slab 0; the loads are issued four splits at a
// time (a dependent chain of L2 round trips was most of a small reduce's
// time).
template <class V, class Load>
__device__ __forceinline__ V SumSlabs(const Load& load, int splits, int64_t stride) {
  V v = load(int64_t{0});
  for (int z0 = 1; z0 < splits; z0 += 4) {
    V t[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      if (z0 + q < splits) t[q] = load(static_cast<int64_t>(z0 + q) * stride);
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      if (z0 + q < splits) v = AddV(v, t[q]);
    }
  }
  return v;
}

// SumSlabs of the partials at `src`, read through L2 (they were written by
// the GEMM launch just before).
template <class V>
__device__ __forceinline__ V SumSplits(const float* src, int splits, int64_t stride) {
  return SumSlabs<V>([src](int64_t off) { return LoadV<V>(src + off); }, splits, stride);
}

// y = the sum over the splits' partials (SumSplits), then r + y where the
// segment has a residual (the bits of the reduce followed by LaunchAdd(r,
// y)); per segment, one thread per output (kVec false) or per four (kVec:
// every segment's output count a multiple of 4, its y, partials and
// residual 16-byte aligned, the slab stride a multiple of 4).
template <class P, bool kVec>
__global__ void reduce_kernel(const P p) {
  pdl_enter();
  using V = std::conditional_t<kVec, float4, float>;
  constexpr int kW = kVec ? 4 : 1;
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kW;
  int64_t base = 0;
  for (int sg = 0; sg < p.n_seg; ++sg) {
    const auto& s = p.seg[sg];
    const int64_t n = static_cast<int64_t>(p.nt) * s.rows;
    if (i < base + n) {
      const int64_t j = i - base;
      V v = SumSplits<V>(s.part + j, p.splits, p.split_stride);
      // (A plain load: r may alias y, which this thread writes next.)
      if (s.r != nullptr) v = AddV(*reinterpret_cast<const V*>(s.r + j), v);
      *reinterpret_cast<V*>(s.y + j) = v;
      return;
    }
    base += n;
  }
}

// Launches reduce_kernel over the launch's `outputs` outputs (four per
// thread where every segment allows it).
template <class P>
void Reduce(const P& p, int64_t outputs, cudaStream_t stream) {
  bool vec = p.split_stride % 4 == 0;
  auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  for (int sg = 0; sg < p.n_seg; ++sg) {
    const auto& s = p.seg[sg];
    vec = vec && (static_cast<int64_t>(p.nt) * s.rows) % 4 == 0 && aligned(s.y) &&
          aligned(s.part) && (s.r == nullptr || aligned(s.r));
  }
  if (vec) {
    LaunchGrid(reduce_kernel<P, true>, static_cast<unsigned>((outputs / 4 + 255) / 256), 256, 0,
               stream, p);
  } else {
    LaunchGrid(reduce_kernel<P, false>, static_cast<unsigned>((outputs + 255) / 256), 256, 0,
               stream, p);
  }
}

}  // namespace minfer::cuda::splitk

#endif  // MINFER_CUDA_KERNELS_SPLIT_K_CUH_
