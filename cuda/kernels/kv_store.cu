// KV cache store: k/v rows of nt tokens to cache row pos[t] in the cache's
// element type. f32 is a copy, f16 rounds to nearest-even (the CPU's
// FloatToFp16Row), q8_0 and fp8 quantize each 32-value block exactly as
// engine/quant QuantizeKvRow (common.cuh quantize_q8_0_block /
// quantize_fp8_block), byte for byte, into the planar row (kv_row.h).
// Positions outside [0, n_ctx) are skipped and flagged (kDeviceBadPosition);
// the backend reports the flag at the next synchronize.
#include <algorithm>
#include <cstdint>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/ops.h"

namespace minfer::cuda {
namespace {

constexpr int kThreads = 256;

// grid: (x: element groups, y: tokens, strided; z: 0 = k, 1 = v). One thread
// per 4 elements (f32/f16; n_kv_embd % 4 == 0) or per q8_0 block.
template <KvType KV>
__global__ void __launch_bounds__(kThreads)
    kv_store_kernel(const float* __restrict__ k, const float* __restrict__ v,
                    const int32_t* __restrict__ pos, int64_t nt, uint8_t* __restrict__ k_cache,
                    uint8_t* __restrict__ v_cache, int n_kv_embd, int64_t n_ctx,
                    int32_t* error_flag) {
  pdl_enter();
  const float* src_all = blockIdx.z == 0 ? k : v;
  uint8_t* cache = blockIdx.z == 0 ? k_cache : v_cache;
  const int64_t row_bytes = KvRowBytes(KV, n_kv_embd);
  const int per_item = (KV == KvType::kQ8_0 || KV == KvType::kFp8) ? 32 : 4;
  const int n_items = n_kv_embd / per_item;
  const int item = blockIdx.x * blockDim.x + threadIdx.x;
  for (int64_t t = blockIdx.y; t < nt; t += gridDim.y) {
    const int32_t p = pos[t];
    if (p < 0 || p >= n_ctx) {
      if (item == 0 && blockIdx.z == 0) set_device_error(error_flag, kDeviceBadPosition);
      continue;
    }
    if (item >= n_items) continue;
    const float* src = src_all + t * n_kv_embd + static_cast<int64_t>(item) * per_item;
    uint8_t* row = cache + p * row_bytes;
    if constexpr (KV == KvType::kF32) {
      float* dst = reinterpret_cast<float*>(row) + 4 * item;
      dst[0] = src[0];
      dst[1] = src[1];
      dst[2] = src[2];
      dst[3] = src[3];
    } else if constexpr (KV == KvType::kF16) {
      const uint32_t lo = float_to_half_bits(src[0]) | (uint32_t{float_to_half_bits(src[1])} << 16);
      const uint32_t hi = float_to_half_bits(src[2]) | (uint32_t{float_to_half_bits(src[3])} << 16);
      reinterpret_cast<uint2*>(row)[item] = make_uint2(lo, hi);  // 8-byte aligned
    } else {
      float blk[32];
#pragma unroll
      for (int j = 0; j < 32; ++j) blk[j] = src[j];
      if constexpr (KV == KvType::kFp8) {
        quantize_fp8_block(blk, kv_block_codes(row, item), kv_block_scale(row, n_kv_embd, item));
      } else {
        quantize_q8_0_block(blk, kv_block_codes(row, item), kv_block_scale(row, n_kv_embd, item));
      }
    }
  }
}

}  // namespace

cudaError_t LaunchKvStore(const float* k, const float* v, const int32_t* pos, int64_t nt,
                          void* k_cache, void* v_cache, KvType type, int64_t n_kv_embd,
                          int64_t n_ctx, int32_t* error_flag, cudaStream_t stream) {
  if (nt <= 0) return cudaSuccess;
  if (n_kv_embd <= 0 || n_kv_embd > (1 << 24) || n_ctx <= 0) return cudaErrorInvalidValue;
  const int per_item = IsBlockKv(type) ? 32 : 4;
  if (n_kv_embd % per_item != 0) return cudaErrorInvalidValue;
  const int n_items = static_cast<int>(n_kv_embd / per_item);
  dim3 grid((n_items + kThreads - 1) / kThreads,
            static_cast<unsigned>(std::min<int64_t>(nt, 65535)), 2);
  auto* kc = static_cast<uint8_t*>(k_cache);
  auto* vc = static_cast<uint8_t*>(v_cache);
  const int n = static_cast<int>(n_kv_embd);
  switch (type) {
    case KvType::kF32:
      LaunchGrid(kv_store_kernel<KvType::kF32>, grid, kThreads, 0, stream, k, v, pos, nt, kc, vc, n,
                 n_ctx, error_flag);
      break;
    case KvType::kF16:
      LaunchGrid(kv_store_kernel<KvType::kF16>, grid, kThreads, 0, stream, k, v, pos, nt, kc, vc, n,
                 n_ctx, error_flag);
      break;
    case KvType::kQ8_0:
      LaunchGrid(kv_store_kernel<KvType::kQ8_0>, grid, kThreads, 0, stream, k, v, pos, nt, kc, vc,
                 n, n_ctx, error_flag);
      break;
    case KvType::kFp8:
      LaunchGrid(kv_store_kernel<KvType::kFp8>, grid, kThreads, 0, stream, k, v, pos, nt, kc, vc, n,
                 n_ctx, error_flag);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace minfer::cuda
