// LaunchGemmF16: the prefill GEMM (nt >= 9) for every weight type.
//
// y[t][r] = sum_k W[r][k] x[t][k]. A CTA computes a 64-token x 128-row tile
// of y, walking k in 64-element steps: each step its 256 threads dequantize
// the 128 x 64 weight tile to f16 in shared memory (one 32-weight slice per
// thread, or two half-used Q6_K slices, see below; float types convert
// directly), convert the 64 x 64 activation tile from f32 to f16 beside it,
// and the 8 warps (2 along tokens x 4 along rows, 32 x 32 outputs each) run
// 16x16x16 wmma products with f32 accumulation. The next step's raw weight
// bytes and activations are loaded into registers before the current step's
// products, so the loads overlap the tensor-core work. CTAs along tokens are
// adjacent in the grid, so the CTAs that share a weight tile run together
// and read it from L2. Tails: rows and tokens past the end are computed from
// clamped (real) inputs and not stored; k positions past the end are zero in
// both tiles.
//
// Numerics: each weight is the reference dequantized float rounded once to
// f16, each activation rounded once to f16, products exact in the tensor
// core, sums in f32 (the hardware's order). Error vs float64 <= about
// 2^-10 * sum |w x| + the f32 summation error (see the test).
//
// Q6_K: a slice holds elements e and e + 64 of its 128-element half, so the
// four slices of a 128-element half each give one 16-element half to each
// of two consecutive k steps; a thread decodes two slices per step and uses
// one half of each (the other half is decoded again next step).
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/matmul.h"
#include "cuda/kernels/quant_dev.cuh"

namespace minfer::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kThreads = 256;
constexpr int kBM = 64;   // tokens per CTA tile
constexpr int kBN = 128;  // weight rows per CTA tile
constexpr int kBK = 64;   // k per step
constexpr int kLdAB = kBK + 8;  // halves; the pad staggers rows across banks
constexpr int kLdC = kBN + 4;   // floats

struct GemmParams {
  const uint8_t* data;
  int64_t row_bytes;
  int64_t rows;
  int64_t k;
  const float* x;
  float* y;
  int64_t nt;
  int block_bytes;
  bool w_aligned;  // rows 16-byte aligned (K-quant / float-type vector loads)
  bool x_aligned;  // x 16-byte aligned and k % 4 == 0
};

union __align__(32) GemmSmem {
  struct {
    __half a[kBM * kLdAB];
    __half b[kBN * kLdAB];
  } ab;
  float c[kBM * kLdC];
};

__host__ __device__ constexpr bool IsFloat(GgmlType t) {
  return t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16;
}

// Raw weight bytes one thread loads for one k step.
template <GgmlType T, bool kFloat = IsFloat(T)>
struct WeightRaw;

template <GgmlType T>
struct WeightRaw<T, false> {
  static constexpr int kN = T == GgmlType::kQ6_K ? 2 : 1;  // slices per thread
  typename qdev::BlockDec<T>::Raw raw[kN];
};

template <GgmlType T>
struct WeightRaw<T, true> {
  // 32 consecutive elements: 128 bytes of f32, 64 of f16/bf16.
  static constexpr int kChunks = T == GgmlType::kF32 ? 8 : 4;
  uint4 raw[kChunks];
};

__device__ __forceinline__ uint32_t pack_half2(float a, float b) {
  return static_cast<uint32_t>(float_to_half_bits(a)) |
         (static_cast<uint32_t>(float_to_half_bits(b)) << 16);
}

// Stores 16 floats as 16 halves (two 16-byte stores; dst 16-byte aligned).
__device__ __forceinline__ void store_half16(__half* dst, const float v[16]) {
  uint4* d = reinterpret_cast<uint4*>(dst);
  d[0] = make_uint4(pack_half2(v[0], v[1]), pack_half2(v[2], v[3]), pack_half2(v[4], v[5]),
                    pack_half2(v[6], v[7]));
  d[1] = make_uint4(pack_half2(v[8], v[9]), pack_half2(v[10], v[11]), pack_half2(v[12], v[13]),
                    pack_half2(v[14], v[15]));
}

template <GgmlType T>
struct Tile {
  // Thread -> (row, part): row n = tid / 2 of the 128-row tile, part = tid % 2.
  const uint8_t* row;  // this thread's weight row (clamped to a real one)
  int part;

  // Loads what the thread needs for k step kt into r.
  __device__ __forceinline__ void load_w(const GemmParams& p, int kt, WeightRaw<T>* r) const {
    if constexpr (IsFloat(T)) {
      constexpr int kEsz = T == GgmlType::kF32 ? 4 : 2;
      const int64_t e0 = static_cast<int64_t>(kt) * kBK + 32 * part;
      if (p.w_aligned && e0 + 32 <= p.k) {
#pragma unroll
        for (int i = 0; i < WeightRaw<T>::kChunks; ++i) {
          r->raw[i] = qdev::ld_stream16(row + e0 * kEsz + 16 * i);
        }
      } else {
        // Partial or unaligned: element by element, zero past k.
        uint16_t* h = reinterpret_cast<uint16_t*>(r->raw);
        uint32_t* f = reinterpret_cast<uint32_t*>(r->raw);
#pragma unroll
        for (int i = 0; i < 32; ++i) {
          const int64_t e = e0 + i;
          if constexpr (T == GgmlType::kF32) {
            f[i] = e < p.k ? __float_as_uint(__ldg(reinterpret_cast<const float*>(row) + e)) : 0u;
          } else {
            h[i] = e < p.k ? __ldg(reinterpret_cast<const unsigned short*>(row) + e) : 0;
          }
        }
      }
    } else {
      using D = qdev::BlockDec<T>;
      const int nb = static_cast<int>(p.k / 32);
#pragma unroll
      for (int i = 0; i < WeightRaw<T>::kN; ++i) {
        const int s = slice_of(kt, i);
        if (s < nb) {
          D::load(&r->raw[i], row + static_cast<int64_t>(s / D::kSlices) * p.block_bytes,
                  s % D::kSlices, p.w_aligned);
        }
      }
    }
  }

  // The i-th slice this thread decodes at step kt (quantized types).
  __device__ __forceinline__ int slice_of(int kt, int i) const {
    if constexpr (T == GgmlType::kQ6_K) {
      // Step kt = super-block kt / 4, quarter q = kt % 4 -> 128-element half
      // hf = q / 2; its slices are j = 4 hf + u, u = 2 part + i.
      const int hf = (kt & 3) >> 1;
      return (kt >> 2) * 8 + 4 * hf + 2 * part + i;
    } else {
      return 2 * kt + part;  // slices 2kt, 2kt+1 cover elements [64kt, 64kt+64)
    }
  }

  // Decodes r and writes this thread's 32 halves of the weight tile row.
  __device__ __forceinline__ void store_w(const GemmParams& p, int kt, const WeightRaw<T>& r,
                                          __half* brow) const {
    if constexpr (IsFloat(T)) {
      float v[32];
      if constexpr (T == GgmlType::kF32) {
        const float* f = reinterpret_cast<const float*>(r.raw);
#pragma unroll
        for (int i = 0; i < 32; ++i) v[i] = f[i];
        store_half16(brow + 32 * part, v);
        store_half16(brow + 32 * part + 16, v + 16);
      } else if constexpr (T == GgmlType::kF16) {
        uint4* d = reinterpret_cast<uint4*>(brow + 32 * part);
#pragma unroll
        for (int i = 0; i < 4; ++i) d[i] = r.raw[i];  // already f16
      } else {
        const uint32_t* u = reinterpret_cast<const uint32_t*>(r.raw);
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          v[2 * i] = __uint_as_float(u[i] << 16);
          v[2 * i + 1] = __uint_as_float(u[i] & 0xFFFF0000u);
        }
        store_half16(brow + 32 * part, v);
        store_half16(brow + 32 * part + 16, v + 16);
      }
    } else {
      using D = qdev::BlockDec<T>;
      const int nb = static_cast<int>(p.k / 32);
#pragma unroll
      for (int i = 0; i < WeightRaw<T>::kN; ++i) {
        const int s = slice_of(kt, i);
        float v[16];
        if constexpr (T == GgmlType::kQ6_K) {
          // One half of slice s: half (kt & 1) at tile column 32 gb + 16 lh.
          const int j = s % 8;
          const int col = 32 * ((j >> 1) & 1) + 16 * (j & 1);
          if (s < nb) {
            qdev::Slice sl;
            D::decode(r.raw[i], j, &sl);
            qdev::dequant_half<T>(sl, kt & 1, v);
          } else {
#pragma unroll
            for (int e = 0; e < 16; ++e) v[e] = 0.0f;
          }
          store_half16(brow + col, v);
        } else {
          // Both halves of slice s, at their element offsets in the step.
          const int j = s % D::kSlices;
          int b0, o0, b1, o1;
          D::act_map(j, &b0, &o0, &b1, &o1);
          const int base = (s / D::kSlices) * D::kBlockElems - kt * kBK;
          const int col[2] = {base + 32 * b0 + o0, base + 32 * b1 + o1};
          qdev::Slice sl;
          if (s < nb) D::decode(r.raw[i], j, &sl);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            if (s < nb) {
              qdev::dequant_half<T>(sl, h, v);
            } else {
#pragma unroll
              for (int e = 0; e < 16; ++e) v[e] = 0.0f;
            }
            // For a tail slice col is computed from part alone.
            store_half16(brow + (s < nb ? col[h] : 32 * part + 16 * h), v);
          }
        }
      }
    }
  }
};

// Activations: thread -> token m = tid / 4 of the 64-token tile, columns
// 16 (tid % 4) .. + 15 of the step.
struct ActRaw {
  float v[16];
};

__device__ __forceinline__ void load_x(const GemmParams& p, int64_t m0, int kt, ActRaw* a) {
  const int m = threadIdx.x >> 2, c = 16 * (threadIdx.x & 3);
  const int64_t t = min(m0 + m, p.nt - 1);  // clamp: a real token, never stored
  const int64_t e0 = static_cast<int64_t>(kt) * kBK + c;
  const float* src = p.x + t * p.k + e0;
  if (p.x_aligned && e0 + 16 <= p.k) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float4 f = __ldg(reinterpret_cast<const float4*>(src) + i);
      a->v[4 * i] = f.x, a->v[4 * i + 1] = f.y, a->v[4 * i + 2] = f.z, a->v[4 * i + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 16; ++i) a->v[i] = e0 + i < p.k ? __ldg(src + i) : 0.0f;
  }
}

template <GgmlType T>
__global__ void __launch_bounds__(kThreads, 2) gemm_f16_kernel(const GemmParams p) {
  pdl_enter();
  __shared__ GemmSmem sm;
  const int tid = threadIdx.x, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3;  // 2 x 4 warps
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kBM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kBN;

  Tile<T> tile;
  {
    const int64_t n = min(n0 + (tid >> 1), p.rows - 1);
    tile.row = p.data + n * p.row_bytes;
    tile.part = tid & 1;
  }
  __half* brow = sm.ab.b + (tid >> 1) * kLdAB;
  __half* arow = sm.ab.a + (tid >> 2) * kLdAB + 16 * (tid & 3);

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  }

  const int nkt = static_cast<int>((p.k + kBK - 1) / kBK);
  WeightRaw<T> wr;
  ActRaw ar;
  tile.load_w(p, 0, &wr);
  load_x(p, m0, 0, &ar);
  for (int kt = 0; kt < nkt; ++kt) {
    __syncthreads();  // the previous step's products are done with the tiles
    tile.store_w(p, kt, wr, brow);
    store_half16(arow, ar.v);
    __syncthreads();
    if (kt + 1 < nkt) {
      tile.load_w(p, kt + 1, &wr);
      load_x(p, m0, kt + 1, &ar);
    }
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        wmma::load_matrix_sync(fa[i], sm.ab.a + (32 * wm + 16 * i) * kLdAB + kk, kLdAB);
      }
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        wmma::load_matrix_sync(fb[j], sm.ab.b + (32 * wn + 16 * j) * kLdAB + kk, kLdAB);
      }
#pragma unroll
      for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
      }
    }
  }

  __syncthreads();  // tiles -> output staging (same shared memory)
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      wmma::store_matrix_sync(sm.c + (32 * wm + 16 * i) * kLdC + 32 * wn + 16 * j, acc[i][j],
                              kLdC, wmma::mem_row_major);
    }
  }
  __syncthreads();
  for (int idx = tid; idx < kBM * kBN; idx += kThreads) {
    const int m = idx / kBN, n = idx % kBN;
    if (m0 + m < p.nt && n0 + n < p.rows) p.y[(m0 + m) * p.rows + n0 + n] = sm.c[m * kLdC + n];
  }
}

template <GgmlType T>
cudaError_t Launch(const GemmParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.nt + kBM - 1) / kBM),
                  static_cast<unsigned>((p.rows + kBN - 1) / kBN));
  LaunchGrid(gemm_f16_kernel<T>, grid, kThreads, 0, stream, p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchGemmF16(const WeightView& w, const float* x, float* y, int64_t nt,
                          cudaStream_t stream) {
  if (nt < 0 || w.rows < 0 || w.k < 0) return cudaErrorInvalidValue;
  if (nt == 0 || w.rows == 0) return cudaSuccess;
  if (w.data == nullptr || x == nullptr || y == nullptr || w.k == 0) return cudaErrorInvalidValue;
  if (w.q6k_padded && w.type != GgmlType::kQ6_K) return cudaErrorInvalidValue;
  const bool is_float = IsFloat(w.type);
  if (!is_float && !MmvqSupports(w.type)) return cudaErrorInvalidValue;
  const int64_t bs = TraitsOf(w.type).block_size;
  if (w.k % bs != 0) return cudaErrorInvalidValue;
  const int64_t block_bytes = DeviceBlockBytes(w.type, w.q6k_padded);
  if (w.row_bytes < w.k / bs * block_bytes || w.row_bytes % 2 != 0 ||
      reinterpret_cast<uintptr_t>(w.data) % 2 != 0) {
    return cudaErrorInvalidValue;
  }
  if (w.type == GgmlType::kF32 && (w.row_bytes % 4 != 0 || reinterpret_cast<uintptr_t>(w.data) % 4 != 0)) {
    return cudaErrorInvalidValue;
  }
  const int64_t row_tiles = (w.rows + kBN - 1) / kBN;
  const int64_t tok_tiles = (nt + kBM - 1) / kBM;
  if (row_tiles > 65535 || tok_tiles > 0x7FFFFFFF || w.k > 0x7FFFFFFF / 2) {
    return cudaErrorInvalidValue;
  }
  GemmParams p{};
  p.data = static_cast<const uint8_t*>(w.data);
  p.row_bytes = w.row_bytes;
  p.rows = w.rows;
  p.k = w.k;
  p.x = x;
  p.y = y;
  p.nt = nt;
  p.block_bytes = static_cast<int>(block_bytes);
  p.w_aligned = reinterpret_cast<uintptr_t>(w.data) % 16 == 0 && w.row_bytes % 16 == 0 &&
                (is_float || block_bytes % 16 == 0);
  p.x_aligned = reinterpret_cast<uintptr_t>(x) % 16 == 0 && w.k % 4 == 0;
  switch (w.type) {
    case GgmlType::kF32: return Launch<GgmlType::kF32>(p, stream);
    case GgmlType::kF16: return Launch<GgmlType::kF16>(p, stream);
    case GgmlType::kBF16: return Launch<GgmlType::kBF16>(p, stream);
    case GgmlType::kQ4_0: return Launch<GgmlType::kQ4_0>(p, stream);
    case GgmlType::kQ4_1: return Launch<GgmlType::kQ4_1>(p, stream);
    case GgmlType::kQ5_0: return Launch<GgmlType::kQ5_0>(p, stream);
    case GgmlType::kQ5_1: return Launch<GgmlType::kQ5_1>(p, stream);
    case GgmlType::kQ8_0: return Launch<GgmlType::kQ8_0>(p, stream);
    case GgmlType::kQ4_K: return Launch<GgmlType::kQ4_K>(p, stream);
    case GgmlType::kQ5_K: return Launch<GgmlType::kQ5_K>(p, stream);
    case GgmlType::kQ6_K: return Launch<GgmlType::kQ6_K>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace minfer::cuda
