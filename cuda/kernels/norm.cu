// RmsNorm (and QkNorm, which is RmsNorm over head rows), with an optional
// fused epilogue that quantizes the normalized rows to BlockQ8A for the next
// MMVQ (seed §3.2.4: decode producers skip the standalone quantize launch).
//
// Numerics: the sum of squares is accumulated in double, as the CPU does
// (engine/cpu/elementwise.cc RmsNormRows): products of floats are exact in
// double and the order of a double sum of <= 2^16 terms moves the result by
// ~1e-16, so inv = float(1 / sqrt(ss / ne0 + eps)) equals the CPU's bit for
// bit except for ~1e-8 of rows, and y = (x * inv) * w is then identical. The
// q8 plane quantizes exactly the floats written to y with the CPU's
// QuantizeRowQ8A rule (engine/quant/vec_dot.cc), so it is bit-identical to
// quantizing y on the host.
//
// Layout: a row is processed by a "group" of threads — one warp for rows of
// up to 1,024 floats (QkNorm heads, 0.5B's 896), a 256-thread block for
// longer rows. Each thread owns float4 j = lane + k * group_size; eight
// consecutive float4s form one 32-value q8 block and sit in eight adjacent
// lanes of one warp in the same iteration (group sizes are multiples of 32),
// so a q8 block reduces with three shuffles. Rows are cached in registers
// (up to kCache float4 per thread) between the reduction and the output pass.
#include <algorithm>
#include <cstdint>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/ops.h"

namespace minfer::cuda {
namespace {

constexpr int kCache = 8;                        // float4 per thread kept in registers
constexpr int kBlockThreads = 256;               // block-per-row variant
constexpr int kWarpRowsPerBlock = 4;             // warp-per-row variant: 4 rows per block

template <bool kAligned>
__device__ __forceinline__ float4 load4(const float* p, int j) {
  if constexpr (kAligned) {
    return reinterpret_cast<const float4*>(p)[j];
  } else {
    return make_float4(p[4 * j], p[4 * j + 1], p[4 * j + 2], p[4 * j + 3]);
  }
}

template <bool kAligned>
__device__ __forceinline__ void store4(float* p, int j, float4 v) {
  if constexpr (kAligned) {
    reinterpret_cast<float4*>(p)[j] = v;
  } else {
    p[4 * j] = v.x;
    p[4 * j + 1] = v.y;
    p[4 * j + 2] = v.z;
    p[4 * j + 3] = v.w;
  }
}

// Quantizes the 32 values held as one float4 by each of 8 adjacent lanes
// (lane & 7 == position in the block) into `out`. All 32 lanes of the warp
// must call it (full-mask shuffles); `active` lanes write.
__device__ __forceinline__ void quantize_q8a_group(float4 v, bool active, BlockQ8A* out,
                                                   int pos_in_block) {
  const Q8Group g = QuantizeQ8Group(v);
  if (active) {
    reinterpret_cast<uint32_t*>(out->qs)[pos_in_block] = g.packed;
    if (pos_in_block == 0) {
      out->d = g.d;
      out->s = g.s;
    }
  }
}

// x may equal y: every element is read and written by the same thread, and
// all reads of an element precede its write.
//
// Normalizes row `r` with `kGroup` threads (index `t` in the group). kGroup is
// 32 (the caller's warp) or kBlockThreads (the whole block, which then shares
// `scratch` for the reduction).
template <int kGroup, bool kAligned>
__device__ __forceinline__ void rms_row(const float* x, const float* __restrict__ w, float eps,
                                        float* y, BlockQ8A* __restrict__ q8, int ne0, int t,
                                        double* scratch) {
  const int n4 = ne0 >> 2;
  float4 cache[kCache];
  double ss = 0.0;
#pragma unroll
  for (int k = 0; k < kCache; ++k) {
    const int j = t + k * kGroup;
    cache[k] = j < n4 ? load4<kAligned>(x, j) : make_float4(0.f, 0.f, 0.f, 0.f);
    ss = fma(static_cast<double>(cache[k].x), static_cast<double>(cache[k].x), ss);
    ss = fma(static_cast<double>(cache[k].y), static_cast<double>(cache[k].y), ss);
    ss = fma(static_cast<double>(cache[k].z), static_cast<double>(cache[k].z), ss);
    ss = fma(static_cast<double>(cache[k].w), static_cast<double>(cache[k].w), ss);
  }
  for (int j = t + kCache * kGroup; j < n4; j += kGroup) {  // rows beyond the cache
    const float4 v = load4<kAligned>(x, j);
    ss = fma(static_cast<double>(v.x), static_cast<double>(v.x), ss);
    ss = fma(static_cast<double>(v.y), static_cast<double>(v.y), ss);
    ss = fma(static_cast<double>(v.z), static_cast<double>(v.z), ss);
    ss = fma(static_cast<double>(v.w), static_cast<double>(v.w), ss);
  }
  if constexpr (kGroup == 32) {
    ss = warp_sum(ss);
  } else {
    ss = block_sum(ss, scratch);
  }
  // The CPU's expression: double(ne0) and double(eps), IEEE sqrt and divide.
  const float inv =
      static_cast<float>(1.0 / sqrt(ss / static_cast<double>(ne0) + static_cast<double>(eps)));

  auto normalize = [&](float4 v, int j) {
    float4 o = make_float4(__fmul_rn(v.x, inv), __fmul_rn(v.y, inv), __fmul_rn(v.z, inv),
                           __fmul_rn(v.w, inv));
    if (w != nullptr) {
      const float4 g = load4<kAligned>(w, j);
      o = make_float4(__fmul_rn(o.x, g.x), __fmul_rn(o.y, g.y), __fmul_rn(o.z, g.z),
                      __fmul_rn(o.w, g.w));
    }
    return o;
  };
  // Output pass. Loop bounds are uniform across each warp (every lane runs the
  // same k and the same remainder trip count) because the q8 epilogue
  // shuffles; only the loads/stores are predicated.
#pragma unroll
  for (int k = 0; k < kCache; ++k) {
    const int j = t + k * kGroup;
    if (k * kGroup >= n4) break;  // uniform: no lane of any warp has work
    const bool active = j < n4;
    const float4 o = normalize(cache[k], active ? j : 0);
    if (active && y != nullptr) store4<kAligned>(y, j, o);
    if (q8 != nullptr) quantize_q8a_group(o, active, q8 + (j >> 3), j & 7);
  }
  const int lane_base = t & ~31;  // first t of this warp
  for (int jb = kCache * kGroup + lane_base; jb < n4; jb += kGroup) {
    const int j = jb + (t & 31);
    const bool active = j < n4;
    const float4 o = active ? normalize(load4<kAligned>(x, j), j) : make_float4(0.f, 0.f, 0.f, 0.f);
    if (active && y != nullptr) store4<kAligned>(y, j, o);
    if (q8 != nullptr) quantize_q8a_group(o, active, q8 + (j >> 3), j & 7);
  }
}

template <bool kAligned>
__global__ void __launch_bounds__(32 * kWarpRowsPerBlock)
    rms_norm_warp_kernel(const float* x, const float* __restrict__ w, float eps, float* y,
                         BlockQ8A* __restrict__ q8, int ne0, int64_t rows) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(kWarpRowsPerBlock) + (threadIdx.x >> 5);
  if (r >= rows) return;  // whole warps exit together
  const int64_t q8_row = ne0 / 32;
  rms_row<32, kAligned>(x + r * ne0, w, eps, y != nullptr ? y + r * ne0 : nullptr,
                        q8 != nullptr ? q8 + r * q8_row : nullptr, ne0, threadIdx.x & 31, nullptr);
}

template <bool kAligned>
__global__ void __launch_bounds__(kBlockThreads)
    rms_norm_block_kernel(const float* x, const float* __restrict__ w, float eps, float* y,
                          BlockQ8A* __restrict__ q8, int ne0, int64_t rows) {
  __shared__ double scratch[32];
  const int64_t q8_row = ne0 / 32;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    rms_row<kBlockThreads, kAligned>(x + r * ne0, w, eps, y != nullptr ? y + r * ne0 : nullptr,
                                     q8 != nullptr ? q8 + r * q8_row : nullptr, ne0, threadIdx.x,
                                     scratch);
  }
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

cudaError_t LaunchRmsNorm(const float* x, const float* w, float eps, float* y, BlockQ8A* q8,
                          int64_t ne0, int64_t rows, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  if (ne0 <= 0 || ne0 % 4 != 0 || ne0 > (int64_t{1} << 30)) return cudaErrorInvalidValue;
  if (q8 != nullptr && ne0 % 32 != 0) return cudaErrorInvalidValue;
  if (y == nullptr && q8 == nullptr) return cudaErrorInvalidValue;
  // Rows start at multiples of ne0 floats (16 bytes), so checking the bases
  // suffices for every row.
  const bool aligned =
      Aligned16(x) && (w == nullptr || Aligned16(w)) && (y == nullptr || Aligned16(y));
  const int n = static_cast<int>(ne0);
  if (ne0 <= 4 * 32 * kCache) {
    const int64_t blocks = (rows + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock;
    if (blocks > 0x7FFFFFFF) return cudaErrorInvalidValue;
    if (aligned) {
      rms_norm_warp_kernel<true>
          <<<static_cast<unsigned>(blocks), 32 * kWarpRowsPerBlock, 0, stream>>>(x, w, eps, y, q8,
                                                                                 n, rows);
    } else {
      rms_norm_warp_kernel<false>
          <<<static_cast<unsigned>(blocks), 32 * kWarpRowsPerBlock, 0, stream>>>(x, w, eps, y, q8,
                                                                                 n, rows);
    }
  } else {
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(rows, 1 << 20));
    if (aligned) {
      rms_norm_block_kernel<true><<<blocks, kBlockThreads, 0, stream>>>(x, w, eps, y, q8, n, rows);
    } else {
      rms_norm_block_kernel<false><<<blocks, kBlockThreads, 0, stream>>>(x, w, eps, y, q8, n, rows);
    }
  }
  return cudaGetLastError();
}

}  // namespace minfer::cuda
