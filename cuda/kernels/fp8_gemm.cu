// The FP8 prefill GEMM and its quantizer (fp8_gemm.h has the contract).
//
// The GEMM: a CTA of 8 warps takes 128 weight rows x 64 tokens; per 64-byte
// (64-element) chunk of k, cp.async copies the rows' and the tokens' codes
// into shared memory (three stages in flight, rows padded to 80 bytes so a
// warp's 32-bit fragment loads hit 32 different banks), and each warp
// multiplies its 32 rows by its 32 tokens with mma.m16n8k32 e4m3 (2 x 4
// tiles, f32 accumulators). The epilogue scales by w_scale[r] * x_scale[t]
// and adds the residual.
//
// Fragments of mma.m16n8k32 with 8-bit inputs, lane (g, t) = (L / 4, L % 4):
// A words (row g, k 4t..4t+3), (row g+8, same), (row g, k 16+4t..), (row g+8,
// same); B words (k 4t..4t+3, column g), (k 16+4t.., column g); C (g, 2t),
// (g, 2t+1), (g+8, 2t), (g+8, 2t+1). Both operands are stored k-contiguous
// per row (weights) and per token (activations), which is exactly the
// "row.col" form, so the fragments are plain 32-bit shared loads.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/fp8_gemm.h"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/ptx_sm80.cuh"
#include "engine/quant/fp8.h"

namespace minfer::cuda {
namespace {

// ------------------------------------------------------------ quantizer

constexpr int kQThreads = 256;

// One CTA per row: the absmax over the row (max is exact in any order),
// then the CPU's operations, each rounded the same way and never fused.
__global__ void __launch_bounds__(kQThreads)
    quantize_rows_fp8_kernel(const float* __restrict__ x, int64_t x_stride, int64_t k,
                             uint8_t* __restrict__ codes, int64_t code_stride,
                             float* __restrict__ scales) {
  pdl_enter();
  const int64_t row = blockIdx.x;
  const float* xr = x + row * x_stride;
  float amax = 0.0f;
  for (int64_t i = threadIdx.x; i < k; i += kQThreads) amax = fmaxf(amax, fabsf(__ldg(xr + i)));
  __shared__ float warp_max[kQThreads / 32];
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  }
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = amax;
  __syncthreads();
  amax = warp_max[0];
#pragma unroll
  for (int w = 1; w < kQThreads / 32; ++w) amax = fmaxf(amax, warp_max[w]);
  const float scale = __fdiv_rn(amax, 448.0f);
  // scale == 0 (an all-zero row, or one so small that amax / 448
  // underflows): every code 0, as the CPU writes it.
  const float inv = scale == 0.0f ? 0.0f : __fdiv_rn(1.0f, scale);
  if (threadIdx.x == 0) scales[row] = scale;
  uint32_t* cr = reinterpret_cast<uint32_t*>(codes + row * code_stride);
  for (int64_t i = threadIdx.x; i < k / 4; i += kQThreads) {
    uint32_t packed = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float v = __ldg(xr + 4 * i + j);
      const uint8_t c = scale == 0.0f ? 0 : FloatToE4M3(__fmul_rn(v, inv));
      packed |= static_cast<uint32_t>(c) << (8 * j);
    }
    cr[i] = packed;
  }
}

// ----------------------------------------------------------------- GEMM

constexpr int kThreads = 256;  // 8 warps: 4 along rows x 2 along tokens
constexpr int kBM = 128;       // weight rows per CTA
constexpr int kBN = 64;        // tokens per CTA
constexpr int kBK = 64;        // k bytes (elements) per chunk
constexpr int kStride = kBK + 16;  // shared bytes per row: 80 (see the file comment)
constexpr int kStages = 3;
constexpr int kStageBytes = (kBM + kBN) * kStride;  // 15,360

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define MINFER_FP8_MMA 1
#endif

// c += A (16x32 e4m3) * B (32x8 e4m3), f32 accumulators.
__device__ __forceinline__ void mma_e4m3(float c[4], const uint32_t a[4], uint32_t b0,
                                         uint32_t b1) {
#ifdef MINFER_FP8_MMA
  asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

struct GemmParams {
  const uint8_t* w;
  const float* ws;
  int64_t w_row_bytes;
  int64_t rows;
  const uint8_t* x;
  const float* xs;
  int64_t x_row_bytes;
  int64_t nt;
  int64_t k;
  const float* residual;
  float* y;
  int64_t y_stride;
};

__global__ void __launch_bounds__(kThreads) fp8_gemm_kernel(const GemmParams p) {
  pdl_enter();
#ifdef MINFER_FP8_MMA
  __shared__ __align__(16) uint8_t smem[kStages * kStageBytes];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int wm = warp & 3, wn = warp >> 2;  // the warp's 32 rows and 32 tokens
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kBM;
  const int64_t tok0 = static_cast<int64_t>(blockIdx.y) * kBN;
  const int n_chunks = static_cast<int>((p.k + kBK - 1) / kBK);

  // A stage: 128 rows x 4 pieces of 16 bytes (2 per thread), then 64
  // tokens x 4 (1 per thread). Pieces past k or past the last row / token
  // are zero-filled (zero codes add nothing).
  auto load_stage = [&](int chunk, int stage) {
    uint8_t* sa = smem + stage * kStageBytes;
    uint8_t* sb = sa + kBM * kStride;
    const int64_t kb = static_cast<int64_t>(chunk) * kBK;
#pragma unroll
    for (int i = 0; i < 3; ++i) {
      const int piece = threadIdx.x + i * kThreads;  // 0..767: 512 of A, 256 of B
      const bool is_a = piece < kBM * 4;
      const int idx = is_a ? piece : piece - kBM * 4;
      const int r = idx >> 2, part = idx & 3;
      const int64_t kk = kb + part * 16;
      const int64_t grow = (is_a ? row0 : tok0) + r;
      const bool in = grow < (is_a ? p.rows : p.nt) && kk < p.k;
      const uint8_t* base = is_a ? p.w : p.x;
      const int64_t stride = is_a ? p.w_row_bytes : p.x_row_bytes;
      const uint8_t* src = in ? base + grow * stride + kk : base;
      uint8_t* dst = (is_a ? sa : sb) + r * kStride + part * 16;
      cp_async16(smem_addr(dst), src, in ? 16 : 0);
    }
  };

  float acc[2][4][4];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
    }
  }

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_chunks) load_stage(s, s);
    cp_async_commit();  // an empty group keeps the wait count uniform
  }
  for (int c = 0; c < n_chunks; ++c) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // chunk c is in; every warp is done with chunk c - 1
    if (c + kStages - 1 < n_chunks) load_stage(c + kStages - 1, (c + kStages - 1) % kStages);
    cp_async_commit();
    const uint8_t* sa = smem + (c % kStages) * kStageBytes;
    const uint8_t* sb = sa + kBM * kStride;
#pragma unroll
    for (int ks = 0; ks < kBK; ks += 32) {
      uint32_t a[2][4], b[4][2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const uint8_t* ra = sa + (wm * 32 + i * 16 + g) * kStride + ks + 4 * t;
        a[i][0] = *reinterpret_cast<const uint32_t*>(ra);
        a[i][1] = *reinterpret_cast<const uint32_t*>(ra + 8 * kStride);
        a[i][2] = *reinterpret_cast<const uint32_t*>(ra + 16);
        a[i][3] = *reinterpret_cast<const uint32_t*>(ra + 8 * kStride + 16);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint8_t* rb = sb + (wn * 32 + j * 8 + g) * kStride + ks + 4 * t;
        b[j][0] = *reinterpret_cast<const uint32_t*>(rb);
        b[j][1] = *reinterpret_cast<const uint32_t*>(rb + 16);
      }
#pragma unroll
      for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) mma_e4m3(acc[i][j], a[i], b[j][0], b[j][1]);
      }
    }
  }
  cp_async_wait<0>();

  // Epilogue: (w_scale * x_scale) * dot, then the residual's add.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t r = row0 + wm * 32 + i * 16 + g + 8 * h;
      if (r >= p.rows) continue;
      const float wsc = __ldg(p.ws + r);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t tk = tok0 + wn * 32 + j * 8 + 2 * t + e;
          if (tk >= p.nt) continue;
          float v = __fmul_rn(__fmul_rn(wsc, __ldg(p.xs + tk)), acc[i][j][2 * h + e]);
          const int64_t o = tk * p.y_stride + r;
          if (p.residual != nullptr) v = __fadd_rn(p.residual[o], v);
          p.y[o] = v;
        }
      }
    }
  }
#endif
}

}  // namespace

cudaError_t LaunchQuantizeRowsFp8(const float* x, int64_t x_stride, int64_t k, int64_t n,
                                  uint8_t* codes, int64_t code_stride, float* scales,
                                  cudaStream_t stream) {
  if (k < 32 || k % 32 != 0 || n < 0 || n > 0x7fffffff || x_stride < k ||
      code_stride < Fp8RowBytes(k) || code_stride % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  if (n == 0) return cudaSuccess;
  if (!x || !codes || !scales || reinterpret_cast<uintptr_t>(codes) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  LaunchGrid(quantize_rows_fp8_kernel, dim3(static_cast<unsigned>(n)), kQThreads, 0, stream, x,
             x_stride, k, codes, code_stride, scales);
  return cudaGetLastError();
}

cudaError_t LaunchFp8Gemm(const Fp8RowsView& w, const Fp8RowsView& x, const float* residual, float* y,
                          int64_t y_stride, cudaStream_t stream) {
  auto valid = [](const Fp8RowsView& m) {
    return m.rows >= 0 && m.k >= 32 && m.k % 32 == 0 && m.row_bytes >= m.k &&
           m.row_bytes % 16 == 0 && (m.rows == 0 || (m.codes && m.scales)) &&
           reinterpret_cast<uintptr_t>(m.codes) % 16 == 0;
  };
  if (!valid(w) || !valid(x) || w.k != x.k || y_stride < w.rows || (w.rows > 0 && !y)) {
    return cudaErrorInvalidValue;
  }
  if (w.rows == 0 || x.rows == 0) return cudaSuccess;
  const int64_t gx = (w.rows + kBM - 1) / kBM, gy = (x.rows + kBN - 1) / kBN;
  if (gx > 0x7fffffff || gy > 65535) return cudaErrorInvalidValue;
  int dev = 0, major = 0, minor = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (err != cudaSuccess) return err;
  if (!Fp8GemmRuns(major * 100 + minor * 10)) return cudaErrorNotSupported;
  GemmParams p{w.codes, w.scales, w.row_bytes, w.rows, x.codes, x.scales, x.row_bytes,
               x.rows,  w.k,      residual,    y,      y_stride};
  LaunchGrid(fp8_gemm_kernel, dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)),
             kThreads, 0, stream, p);
  return cudaGetLastError();
}

}  // namespace minfer::cuda
