// RmsNorm (and QkNorm, which is RmsNorm over head rows), with an optional
// fused epilogue that quantizes the normalized rows to BlockQ8A for the next
// MMVQ (decode producers skip the standalone quantize launch: docs/design.md,
// decode matmuls).
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
#include <type_traits>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/ops.h"
#include "cuda/kernels/split_k.cuh"

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

// Where the quantized rows go. put(v, active, j) quantizes float4 j of the
// row, held with its block's other seven float4s by 8 adjacent lanes (j & 7
// = position in the block); all 32 lanes of the warp must call it
// (full-mask shuffles), `active` lanes write.
//  * Q8ASink: BlockQ8A rows (the decode epilogue, the MMVQ layout).
//  * MmqSink: MMQ's activation layout (mmq.h): codes [ntp][k], d and s
//    [k/32][ntp]; one sink per row (token).
struct Q8ASink {
  BlockQ8A* q8;  // this row's blocks, or null (no quantized output)
  __device__ __forceinline__ bool on() const { return q8 != nullptr; }
  __device__ __forceinline__ void put(float4 v, bool active, int j) const {
    const Q8Group g = QuantizeQ8Group(v);
    if (active) {
      BlockQ8A* out = q8 + (j >> 3);
      reinterpret_cast<uint32_t*>(out->qs)[j & 7] = g.packed;
      if ((j & 7) == 0) {
        out->d = g.d;
        out->s = g.s;
      }
    }
  }
};

struct MmqSink {
  int8_t* codes;  // this token's codes (k bytes)
  float* d;       // d plane + token; block b at d[b * ntp]
  float* s;
  int64_t ntp;
  __device__ __forceinline__ bool on() const { return true; }
  __device__ __forceinline__ void put(float4 v, bool active, int j) const {
    const Q8Group g = QuantizeQ8Group(v);
    if (active) {
      reinterpret_cast<uint32_t*>(codes)[j] = g.packed;
      if ((j & 7) == 0) {
        d[(j >> 3) * ntp] = g.d;
        s[(j >> 3) * ntp] = g.s;
      }
    }
  }
};

// The DQ GEMM's activation layout (dq_gemm.h): this token's row of f16
// values, 4 per lane and float4 (DqPack).
struct DqSink {
  uint2* act;
  __device__ __forceinline__ bool on() const { return true; }
  __device__ __forceinline__ void put(float4 v, bool active, int j) const {
    const Q8Group g = QuantizeQ8Group(v);
    if (active) act[j] = DqPack(g);
  }
};

// The Hopper DQ GEMM's layout (dq_wgmma.h): the same f16 values, each
// 16-group's evens then odds; float4 j is word j % 4 of group j / 4's evens
// and of its odds.
struct DqwSink {
  uint32_t* act;
  __device__ __forceinline__ bool on() const { return true; }
  __device__ __forceinline__ void put(float4 v, bool active, int j) const {
    const Q8Group g = QuantizeQ8Group(v);
    if (!active) return;
    const uint2 pair = DqPack(g);
    uint32_t* const grp = act + (j >> 2) * 8;
    grp[j & 3] = pair.x;
    grp[4 + (j & 3)] = pair.y;
  }
};

// Where a row's values come from: load(j) the first read of float4 j,
// reload(j) a second one (the output pass, past the register cache).
// PlainRow: the row as stored (x). PartsRow: the sum of a split-k GEMM's
// partials (splitk::SumSlabs: the reduce's order) plus the residual, written to x_out
// as it is first read (each element by the thread that reads it), and read
// back from there (x_out may alias the residual, so summing again would
// add the sum twice).
template <bool kAligned>
struct PlainRow {
  const float* x;
  __device__ __forceinline__ float4 load(int j) const { return load4<kAligned>(x, j); }
  __device__ __forceinline__ float4 reload(int j) const { return load4<kAligned>(x, j); }
};
template <bool kAligned>
struct PartsRow {
  const float* part;  // this row in slab 0
  int splits;
  int64_t stride;
  const float* r;  // this row of the residual, or null
  float* x_out;    // this row of the output
  __device__ __forceinline__ float4 load(int j) const {
    const float* const p = part;
    float4 v = splitk::SumSlabs<float4>([p, j](int64_t off) { return load4<kAligned>(p + off, j); },
                                        splits, stride);
    if (r != nullptr) {
      const float4 a = load4<kAligned>(r, j);
      v = make_float4(a.x + v.x, a.y + v.y, a.z + v.z, a.w + v.w);
    }
    store4<kAligned>(x_out, j, v);
    return v;
  }
  __device__ __forceinline__ float4 reload(int j) const { return load4<kAligned>(x_out, j); }
};

// x may equal y: every element is read and written by the same thread, and
// all reads of an element precede its write.
//
// Normalizes row `r` with `kGroup` threads (index `t` in the group). kGroup is
// 32 (the caller's warp) or kBlockThreads (the whole block, which then shares
// `scratch` for the reduction). `x` is the row's source (PlainRow, PartsRow).
template <int kGroup, bool kAligned, class Src, class Sink>
__device__ __forceinline__ void rms_row(const Src& x, const float* __restrict__ w, float eps,
                                        float* y, const Sink& sink, int ne0, int t,
                                        double* scratch) {
  const int n4 = ne0 >> 2;
  float4 cache[kCache];
  double ss = 0.0;
#pragma unroll
  for (int k = 0; k < kCache; ++k) {
    const int j = t + k * kGroup;
    cache[k] = j < n4 ? x.load(j) : make_float4(0.f, 0.f, 0.f, 0.f);
    ss = fma(static_cast<double>(cache[k].x), static_cast<double>(cache[k].x), ss);
    ss = fma(static_cast<double>(cache[k].y), static_cast<double>(cache[k].y), ss);
    ss = fma(static_cast<double>(cache[k].z), static_cast<double>(cache[k].z), ss);
    ss = fma(static_cast<double>(cache[k].w), static_cast<double>(cache[k].w), ss);
  }
  for (int j = t + kCache * kGroup; j < n4; j += kGroup) {  // rows beyond the cache
    const float4 v = x.load(j);
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
    if (sink.on()) sink.put(o, active, j);
  }
  const int lane_base = t & ~31;  // first t of this warp
  for (int jb = kCache * kGroup + lane_base; jb < n4; jb += kGroup) {
    const int j = jb + (t & 31);
    const bool active = j < n4;
    const float4 o = active ? normalize(x.reload(j), j) : make_float4(0.f, 0.f, 0.f, 0.f);
    if (active && y != nullptr) store4<kAligned>(y, j, o);
    if (sink.on()) sink.put(o, active, j);
  }
}

// The sink of row r: BlockQ8A rows (q8 may be null), or the MMQ layout.
struct Q8ASinks {
  BlockQ8A* q8;
  __device__ __forceinline__ Q8ASink row(int64_t r, int ne0) const {
    return Q8ASink{q8 != nullptr ? q8 + r * (ne0 / 32) : nullptr};
  }
};
struct MmqSinks {
  int8_t* codes;
  float* d;
  float* s;
  int64_t ntp;
  __device__ __forceinline__ MmqSink row(int64_t r, int ne0) const {
    return MmqSink{codes + r * ne0, d + r, s + r, ntp};
  }
};

struct DqwSinks {
  uint32_t* act;
  __device__ __forceinline__ DqwSink row(int64_t r, int ne0) const {
    return DqwSink{act + r * (ne0 / 2)};
  }
};

struct DqSinks {
  uint2* act;
  __device__ __forceinline__ DqSink row(int64_t r, int ne0) const {
    return DqSink{act + r * (ne0 / 4)};
  }
};

// The sources of the rows: x [rows][ne0] as stored, or split-k partials
// and a residual (PartsRow).
template <bool kAligned>
struct PlainRows {
  const float* x;
  __device__ __forceinline__ PlainRow<kAligned> row(int64_t r, int ne0) const {
    return PlainRow<kAligned>{x + r * ne0};
  }
};
template <bool kAligned>
struct PartsRows {
  const float* part;
  int splits;
  int64_t stride;
  const float* r;
  float* x_out;
  __device__ __forceinline__ PartsRow<kAligned> row(int64_t i, int ne0) const {
    return PartsRow<kAligned>{part + i * ne0, splits, stride, r != nullptr ? r + i * ne0 : nullptr,
                              x_out + i * ne0};
  }
};

template <bool kAligned, template <bool> class Srcs, class Sinks>
__global__ void __launch_bounds__(32 * kWarpRowsPerBlock)
    rms_norm_warp_kernel(const Srcs<kAligned> x, const float* __restrict__ w, float eps, float* y,
                         Sinks sinks, int ne0, int64_t rows) {
  pdl_enter();
  const int64_t r = blockIdx.x * static_cast<int64_t>(kWarpRowsPerBlock) + (threadIdx.x >> 5);
  if (r >= rows) return;  // whole warps exit together
  rms_row<32, kAligned>(x.row(r, ne0), w, eps, y != nullptr ? y + r * ne0 : nullptr,
                        sinks.row(r, ne0), ne0, threadIdx.x & 31, nullptr);
}

template <bool kAligned, template <bool> class Srcs, class Sinks>
__global__ void __launch_bounds__(kBlockThreads)
    rms_norm_block_kernel(const Srcs<kAligned> x, const float* __restrict__ w, float eps, float* y,
                          Sinks sinks, int ne0, int64_t rows) {
  pdl_enter();
  __shared__ double scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    rms_row<kBlockThreads, kAligned>(x.row(r, ne0), w, eps, y != nullptr ? y + r * ne0 : nullptr,
                                     sinks.row(r, ne0), ne0, threadIdx.x, scratch);
  }
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// `make(aligned)` gives the rows' source (PlainRows / PartsRows of that
// alignment); `aligned_src` says whether every pointer it reads and writes
// is 16-byte aligned (rows start at multiples of ne0 floats, 16 bytes, so
// checking the bases suffices for every row).
template <template <bool> class Srcs, class Make, class Sinks>
cudaError_t LaunchRmsFrom(const Make& make, bool aligned_src, const float* w, float eps, float* y,
                          Sinks sinks, int64_t ne0, int64_t rows, cudaStream_t stream) {
  const bool aligned = aligned_src && (w == nullptr || Aligned16(w)) && (y == nullptr || Aligned16(y));
  const int n = static_cast<int>(ne0);
  if (ne0 <= 4 * 32 * kCache) {
    const int64_t blocks = (rows + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock;
    if (blocks > 0x7FFFFFFF) return cudaErrorInvalidValue;
    const unsigned b = static_cast<unsigned>(blocks);
    if (aligned) {
      LaunchGrid(rms_norm_warp_kernel<true, Srcs, Sinks>, b, 32 * kWarpRowsPerBlock, 0, stream,
                 make(std::true_type{}), w, eps, y, sinks, n, rows);
    } else {
      LaunchGrid(rms_norm_warp_kernel<false, Srcs, Sinks>, b, 32 * kWarpRowsPerBlock, 0, stream,
                 make(std::false_type{}), w, eps, y, sinks, n, rows);
    }
  } else {
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(rows, 1 << 20));
    if (aligned) {
      LaunchGrid(rms_norm_block_kernel<true, Srcs, Sinks>, blocks, kBlockThreads, 0, stream,
                 make(std::true_type{}), w, eps, y, sinks, n, rows);
    } else {
      LaunchGrid(rms_norm_block_kernel<false, Srcs, Sinks>, blocks, kBlockThreads, 0, stream,
                 make(std::false_type{}), w, eps, y, sinks, n, rows);
    }
  }
  return cudaGetLastError();
}

template <class Sinks>
cudaError_t LaunchRms(const float* x, const float* w, float eps, float* y, Sinks sinks,
                      int64_t ne0, int64_t rows, cudaStream_t stream) {
  auto make = [x](auto aligned) { return PlainRows<decltype(aligned)::value>{x}; };
  return LaunchRmsFrom<PlainRows>(make, Aligned16(x), w, eps, y, sinks, ne0, rows, stream);
}

}  // namespace

cudaError_t LaunchRmsNorm(const float* x, const float* w, float eps, float* y, BlockQ8A* q8,
                          int64_t ne0, int64_t rows, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  if (ne0 <= 0 || ne0 % 4 != 0 || ne0 > (int64_t{1} << 30)) return cudaErrorInvalidValue;
  if (q8 != nullptr && ne0 % 32 != 0) return cudaErrorInvalidValue;
  if (y == nullptr && q8 == nullptr) return cudaErrorInvalidValue;
  return LaunchRms(x, w, eps, y, Q8ASinks{q8}, ne0, rows, stream);
}

cudaError_t LaunchRmsNormMmq(const float* x, const float* w, float eps, void* act, int64_t ne0,
                             int64_t nt, cudaStream_t stream) {
  if (nt <= 0) return cudaSuccess;
  if (ne0 <= 0 || ne0 % 32 != 0 || ne0 > (int64_t{1} << 30) || x == nullptr || act == nullptr ||
      reinterpret_cast<uintptr_t>(act) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  const int64_t ntp = (nt + kMmqTokenPad - 1) / kMmqTokenPad * kMmqTokenPad;
  const int64_t nb = ne0 / 32;
  int8_t* codes = static_cast<int8_t*>(act);
  float* d = reinterpret_cast<float*>(codes + ntp * ne0);
  float* s = d + ntp * nb;
  cudaError_t err = LaunchRms(x, w, eps, nullptr, MmqSinks{codes, d, s, ntp}, ne0, nt, stream);
  if (err != cudaSuccess || ntp == nt) return err;
  // Padding tokens: zero codes, d and s, as LaunchQuantizeMmq writes them
  // (the d and s planes are 2 nb rows of ntp floats).
  err = cudaMemsetAsync(codes + nt * ne0, 0, static_cast<size_t>((ntp - nt) * ne0), stream);
  if (err != cudaSuccess) return err;
  return cudaMemset2DAsync(d + nt, static_cast<size_t>(ntp * 4), 0,
                           static_cast<size_t>((ntp - nt) * 4), static_cast<size_t>(2 * nb),
                           stream);
}

cudaError_t LaunchRmsNormDq(const float* x, const float* w, float eps, void* act, int64_t ne0,
                            int64_t nt, cudaStream_t stream) {
  if (nt <= 0) return cudaSuccess;
  if (ne0 <= 0 || ne0 % 32 != 0 || ne0 > (int64_t{1} << 30) || x == nullptr || act == nullptr ||
      reinterpret_cast<uintptr_t>(act) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  return LaunchRms(x, w, eps, nullptr, DqSinks{static_cast<uint2*>(act)}, ne0, nt, stream);
}

cudaError_t LaunchRmsNormDqw(const float* x, const float* w, float eps, void* act, int64_t ne0,
                             int64_t nt, cudaStream_t stream) {
  if (nt <= 0) return cudaSuccess;
  if (ne0 <= 0 || ne0 % 32 != 0 || ne0 > (int64_t{1} << 30) || x == nullptr || act == nullptr ||
      reinterpret_cast<uintptr_t>(act) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  return LaunchRms(x, w, eps, nullptr, DqwSinks{static_cast<uint32_t*>(act)}, ne0, nt, stream);
}

cudaError_t LaunchRmsNormDqwParts(const float* part, int splits, int64_t stride, const float* r,
                                  float* x_out, const float* w, float eps, void* act, int64_t ne0,
                                  int64_t nt, cudaStream_t stream) {
  if (nt <= 0) return cudaSuccess;
  if (ne0 <= 0 || ne0 % 32 != 0 || ne0 > (int64_t{1} << 30) || part == nullptr ||
      x_out == nullptr || act == nullptr || reinterpret_cast<uintptr_t>(act) % 16 != 0 ||
      splits < 1 || splits > 16 || (splits > 1 && stride < ne0 * nt)) {
    return cudaErrorInvalidValue;
  }
  const bool aligned = Aligned16(part) && (splits == 1 || stride % 4 == 0) &&
                       (r == nullptr || Aligned16(r)) && Aligned16(x_out);
  auto make = [&](auto a) {
    return PartsRows<decltype(a)::value>{part, splits, stride, r, x_out};
  };
  return LaunchRmsFrom<PartsRows>(make, aligned, w, eps, nullptr,
                                  DqwSinks{static_cast<uint32_t*>(act)}, ne0, nt, stream);
}

}  // namespace minfer::cuda
