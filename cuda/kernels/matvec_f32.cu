// LaunchMatvecF32: y = W x with f32 activations, for F32/F16/BF16 weights
// (the decode path of float models) and, as the simpler fallback, quantized
// weights dequantized on the fly to their exact reference values
// (quant_dev.cuh).
//
// Same decomposition as MMVQ (mmvq_impl.cuh): 256-thread CTAs, each group of
// `ks` warps owns R = 2 rows and splits their k range lane by lane; a lane
// loads a chunk of every row before using any (float types: 8 elements, one
// 16-byte load of f16/bf16 or two of f32; quantized types: one 32-weight
// slice), and the activations it loads for a chunk serve both rows and, for
// up to 8 tokens per launch grid row, every token. Rows that are not 16-byte
// aligned, or k not a multiple of 8, take an element-by-element path.
// Accumulation: one f32 fma per weight per lane, then the shuffle tree and a
// fixed-order sum over the ks warps.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/matmul.h"
#include "cuda/kernels/mmvq_impl.cuh"
#include "cuda/kernels/quant_dev.cuh"

namespace minfer::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kR = 2;  // rows per warp group
constexpr int kMaxNt = 8;

struct MvParams {
  const uint8_t* data;
  int64_t row_bytes;
  int64_t rows;
  int64_t k;
  const float* x;
  float* y;
  int64_t y_stride;
  int64_t nt;
  int ks, ks_log2;
  int64_t n_cta_blocks;
  int block_bytes;
  bool aligned;  // 16-byte aligned rows and x, k % 8 == 0 (float types)
};

// Converts 8 consecutive float-type weights from their 16-byte (f16/bf16) or
// 32-byte (f32) raw form.
template <GgmlType T>
struct FloatChunk {
  static constexpr int kBytes = T == GgmlType::kF32 ? 32 : 16;
  uint4 raw[kBytes / 16];
  __device__ __forceinline__ void load(const uint8_t* p) {
#pragma unroll
    for (int i = 0; i < kBytes / 16; ++i) raw[i] = qdev::ld_stream16(p + 16 * i);
  }
  __device__ __forceinline__ void to_float(float w[8]) const {
    if constexpr (T == GgmlType::kF32) {
      const uint32_t u[8] = {raw[0].x, raw[0].y, raw[0].z, raw[0].w,
                             raw[1].x, raw[1].y, raw[1].z, raw[1].w};
#pragma unroll
      for (int i = 0; i < 8; ++i) w[i] = __uint_as_float(u[i]);
    } else {
      const uint32_t u[4] = {raw[0].x, raw[0].y, raw[0].z, raw[0].w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if constexpr (T == GgmlType::kF16) {
          w[2 * i] = half_bits_to_float(static_cast<uint16_t>(u[i] & 0xFFFF));
          w[2 * i + 1] = half_bits_to_float(static_cast<uint16_t>(u[i] >> 16));
        } else {
          w[2 * i] = __uint_as_float(u[i] << 16);
          w[2 * i + 1] = __uint_as_float(u[i] & 0xFFFF0000u);
        }
      }
    }
  }
};

template <GgmlType T>
__device__ __forceinline__ float load_float_weight(const uint8_t* row, int64_t e) {
  if constexpr (T == GgmlType::kF32) {
    return __ldg(reinterpret_cast<const float*>(row) + e);
  } else if constexpr (T == GgmlType::kF16) {
    return half_bits_to_float(__ldg(reinterpret_cast<const unsigned short*>(row) + e));
  } else {
    return __uint_as_float(static_cast<uint32_t>(__ldg(reinterpret_cast<const unsigned short*>(row) + e))
                           << 16);
  }
}

__device__ __forceinline__ void load_x8(const float* p, float v[8]) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(p));
  const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

__host__ __device__ constexpr bool IsFloatType(GgmlType t) {
  return t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16;
}

template <GgmlType T, int NT>
__global__ void __launch_bounds__(kThreads, 2) matvec_f32_kernel(const MvParams p) {
  pdl_enter();
  __shared__ float s_red[kWarps * kR * NT];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int grp = warp >> p.ks_log2, kp = warp & (p.ks - 1);
  const int groups_per_cta = kWarps >> p.ks_log2;
  // This launch row's tokens: t0 .. t0 + nt_here - 1.
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kMaxNt;
  const int64_t left = p.nt - t0;
  const int nt_here = left < NT ? static_cast<int>(left) : NT;
  const float* x = p.x + t0 * p.k;

  for (int64_t cb = blockIdx.x; cb < p.n_cta_blocks; cb += gridDim.x) {
    const int64_t g = cb * groups_per_cta + grp;
    const uint8_t* rp[kR];
    bool ok[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const int64_t row = g * kR + r;
      ok[r] = row < p.rows;
      rp[r] = p.data + (ok[r] ? row : p.rows - 1) * p.row_bytes;
    }
    float acc[kR][NT];
#pragma unroll
    for (int r = 0; r < kR; ++r) {
#pragma unroll
      for (int t = 0; t < NT; ++t) acc[r][t] = 0.0f;
    }

    const int64_t c_begin = kp * 32 + lane, c_step = static_cast<int64_t>(p.ks) * 32;
    if constexpr (IsFloatType(T)) {
      int64_t tail_begin = 0;
      if (p.aligned) {
        const int64_t n_chunks = p.k / 8;
        for (int64_t c = c_begin; c < n_chunks; c += c_step) {
          FloatChunk<T> ch[kR];
#pragma unroll
          for (int r = 0; r < kR; ++r) ch[r].load(rp[r] + c * FloatChunk<T>::kBytes);
          float w[kR][8];
#pragma unroll
          for (int r = 0; r < kR; ++r) ch[r].to_float(w[r]);
#pragma unroll
          for (int t = 0; t < NT; ++t) {
            if (t >= nt_here) break;
            float xv[8];
            load_x8(x + t * p.k + c * 8, xv);
#pragma unroll
            for (int r = 0; r < kR; ++r) {
#pragma unroll
              for (int i = 0; i < 8; ++i) acc[r][t] = fmaf(w[r][i], xv[i], acc[r][t]);
            }
          }
        }
        tail_begin = n_chunks * 8;
      }
      // Unaligned rows, or the last k % 8 elements: one element per lane.
      for (int64_t e = tail_begin + c_begin; e < p.k; e += c_step) {
        float w[kR];
#pragma unroll
        for (int r = 0; r < kR; ++r) w[r] = load_float_weight<T>(rp[r], e);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          if (t >= nt_here) break;
          const float xv = __ldg(x + t * p.k + e);
#pragma unroll
          for (int r = 0; r < kR; ++r) acc[r][t] = fmaf(w[r], xv, acc[r][t]);
        }
      }
    } else {
      using D = qdev::BlockDec<T>;
      constexpr int kAbPerBlock = D::kBlockElems / 32;
      const int64_t nb = p.k / 32;
      for (int64_t s = c_begin; s < nb; s += c_step) {
        const int64_t b = s / D::kSlices;
        const int j = static_cast<int>(s % D::kSlices);
        typename D::Raw raw[kR];
#pragma unroll
        for (int r = 0; r < kR; ++r) D::load(&raw[r], rp[r] + b * p.block_bytes, j, p.aligned);
        qdev::Slice sl[kR];
#pragma unroll
        for (int r = 0; r < kR; ++r) D::decode(raw[r], j, &sl[r]);
        int b0, o0, b1, o1;
        D::act_map(j, &b0, &o0, &b1, &o1);
        const int64_t e[2] = {(b * kAbPerBlock + b0) * 32 + o0, (b * kAbPerBlock + b1) * 32 + o1};
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float w[kR][16];
#pragma unroll
          for (int r = 0; r < kR; ++r) qdev::dequant_half<T>(sl[r], h, w[r]);
#pragma unroll
          for (int t = 0; t < NT; ++t) {
            if (t >= nt_here) break;
            const float* xp = x + t * p.k + e[h];
            float xv[16];
            load_x8(xp, xv);
            load_x8(xp + 8, xv + 8);
#pragma unroll
            for (int r = 0; r < kR; ++r) {
#pragma unroll
              for (int i = 0; i < 16; ++i) acc[r][t] = fmaf(w[r][i], xv[i], acc[r][t]);
            }
          }
        }
      }
    }

#pragma unroll
    for (int r = 0; r < kR; ++r) {
#pragma unroll
      for (int t = 0; t < NT; ++t) acc[r][t] = warp_sum(acc[r][t]);
    }
    if (p.ks > 1) {
#pragma unroll
      for (int r = 0; r < kR; ++r) {
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          if (lane == r * NT + t) s_red[(warp * kR + r) * NT + t] = acc[r][t];
        }
      }
      __syncthreads();
      if (kp == 0) {
#pragma unroll
        for (int r = 0; r < kR; ++r) {
#pragma unroll
          for (int t = 0; t < NT; ++t) {
            float v = s_red[(warp * kR + r) * NT + t];
            for (int w = 1; w < p.ks; ++w) v += s_red[((warp + w) * kR + r) * NT + t];
            acc[r][t] = v;
          }
        }
      }
      __syncthreads();
    }
    if (kp == 0) {
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        if (!ok[r]) continue;
        const int64_t row = g * kR + r;
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          if (t < nt_here && lane == r * NT + t) p.y[(t0 + t) * p.y_stride + row] = acc[r][t];
        }
      }
    }
  }
}

template <GgmlType T, int NT>
cudaError_t LaunchNt(const MvParams& p, dim3 grid, cudaStream_t stream) {
  LaunchGrid(matvec_f32_kernel<T, NT>, grid, kThreads, 0, stream, p);
  return cudaGetLastError();
}

template <GgmlType T>
cudaError_t LaunchT(const MvParams& p, dim3 grid, cudaStream_t stream) {
  switch (std::min<int64_t>(p.nt, kMaxNt)) {
    case 1: return LaunchNt<T, 1>(p, grid, stream);
    case 2: return LaunchNt<T, 2>(p, grid, stream);
    case 3: return LaunchNt<T, 3>(p, grid, stream);
    case 4: return LaunchNt<T, 4>(p, grid, stream);
    case 5: return LaunchNt<T, 5>(p, grid, stream);
    case 6: return LaunchNt<T, 6>(p, grid, stream);
    case 7: return LaunchNt<T, 7>(p, grid, stream);
    default: return LaunchNt<T, 8>(p, grid, stream);
  }
}

}  // namespace

cudaError_t LaunchMatvecF32(const WeightView& w, const float* x, float* y, int64_t y_stride,
                            int64_t nt, cudaStream_t stream) {
  if (nt < 0 || w.rows < 0 || w.k < 0) return cudaErrorInvalidValue;
  if (nt == 0 || w.rows == 0) return cudaSuccess;
  if (w.data == nullptr || x == nullptr || y == nullptr) return cudaErrorInvalidValue;
  if (nt > 1 && y_stride < w.rows) return cudaErrorInvalidValue;
  if (w.q6k_padded && w.type != GgmlType::kQ6_K) return cudaErrorInvalidValue;
  const bool is_float = IsFloatType(w.type);
  if (!is_float && !MmvqSupports(w.type)) return cudaErrorInvalidValue;
  const int64_t bs = TraitsOf(w.type).block_size;
  if (w.k % bs != 0) return cudaErrorInvalidValue;
  const int64_t block_bytes = DeviceBlockBytes(w.type, w.q6k_padded);
  if (w.row_bytes < w.k / bs * block_bytes) return cudaErrorInvalidValue;
  // Element loads need natural alignment: 4 bytes for f32, 2 for halves.
  const uintptr_t esz = w.type == GgmlType::kF32 ? 4 : 2;
  if (reinterpret_cast<uintptr_t>(w.data) % esz != 0 || w.row_bytes % esz != 0 ||
      reinterpret_cast<uintptr_t>(x) % 4 != 0) {
    return cudaErrorInvalidValue;
  }
  const bool x_aligned = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const bool w_aligned = reinterpret_cast<uintptr_t>(w.data) % 16 == 0 && w.row_bytes % 16 == 0;
  if (!is_float) {
    // Slices read x as float4s; blocks must be 2-byte aligned.
    if (!x_aligned || reinterpret_cast<uintptr_t>(w.data) % 2 != 0 || w.row_bytes % 2 != 0) {
      return cudaErrorInvalidValue;
    }
  }
  MvParams p{};
  p.data = static_cast<const uint8_t*>(w.data);
  p.row_bytes = w.row_bytes;
  p.rows = w.rows;
  p.k = w.k;
  p.x = x;
  p.y = y;
  p.y_stride = y_stride;
  p.nt = nt;
  p.block_bytes = static_cast<int>(block_bytes);
  p.aligned = is_float ? (w_aligned && x_aligned && w.k % 8 == 0)
                       : (w_aligned && block_bytes % 16 == 0);
  const int64_t groups = (w.rows + kR - 1) / kR;
  const int64_t units = is_float ? (w.k + 7) / 8 : w.k / 32;
  const int64_t target = static_cast<int64_t>(mmvq::DeviceSmCount()) * 32;
  int ks = 1;
  while (ks < 8 && groups * ks < target && ks * 32 < units) ks *= 2;
  p.ks = ks;
  p.ks_log2 = ks == 1 ? 0 : ks == 2 ? 1 : ks == 4 ? 2 : 3;
  const int groups_per_cta = kWarps / ks;
  p.n_cta_blocks = (groups + groups_per_cta - 1) / groups_per_cta;
  const int64_t token_rows = (nt + kMaxNt - 1) / kMaxNt;
  if (token_rows > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(p.n_cta_blocks, 0x7FFFFFFF)),
                  static_cast<unsigned>(token_rows));
  switch (w.type) {
    case GgmlType::kF32: return LaunchT<GgmlType::kF32>(p, grid, stream);
    case GgmlType::kF16: return LaunchT<GgmlType::kF16>(p, grid, stream);
    case GgmlType::kBF16: return LaunchT<GgmlType::kBF16>(p, grid, stream);
    case GgmlType::kQ4_0: return LaunchT<GgmlType::kQ4_0>(p, grid, stream);
    case GgmlType::kQ4_1: return LaunchT<GgmlType::kQ4_1>(p, grid, stream);
    case GgmlType::kQ5_0: return LaunchT<GgmlType::kQ5_0>(p, grid, stream);
    case GgmlType::kQ5_1: return LaunchT<GgmlType::kQ5_1>(p, grid, stream);
    case GgmlType::kQ8_0: return LaunchT<GgmlType::kQ8_0>(p, grid, stream);
    case GgmlType::kQ4_K: return LaunchT<GgmlType::kQ4_K>(p, grid, stream);
    case GgmlType::kQ5_K: return LaunchT<GgmlType::kQ5_K>(p, grid, stream);
    case GgmlType::kQ6_K: return LaunchT<GgmlType::kQ6_K>(p, grid, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace minfer::cuda
