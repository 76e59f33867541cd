// LaunchGetRowsWeight: the embedding gather, dequantize-on-gather.
//
// One CTA per requested row; its threads walk the row's slices (quant_dev.cuh)
// and write each half's 16 reference weights as four float4 stores. Every
// weight is computed with the reference dequantizer's float operations, in
// its order, never fused (quant_dev.cuh dequant_code), so rows are bit-exact
// with engine/quant DequantizeRow. Ids are read from device memory (the
// launch is replay-safe); an id outside [0, rows) writes a zero row and
// records kDeviceBadTokenId.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/matmul.h"
#include "cuda/kernels/quant_dev.cuh"

namespace minfer::cuda {
namespace {

constexpr int kThreads = 128;

struct GatherArgs {
  const uint8_t* data;
  int64_t row_bytes;
  int64_t rows;
  int64_t k;
  const int32_t* ids;
  float* y;
  int32_t* error_flag;
  int block_bytes;
  bool aligned;
};

// Returns the row's bytes, or null (after zeroing the output row and
// flagging) for a bad id.
__device__ __forceinline__ const uint8_t* gather_row(const GatherArgs& a, float* out) {
  const int32_t id = __ldg(a.ids + blockIdx.x);
  if (id >= 0 && id < a.rows) return a.data + static_cast<int64_t>(id) * a.row_bytes;
  for (int64_t e = threadIdx.x; e < a.k; e += kThreads) out[e] = 0.0f;
  if (threadIdx.x == 0) set_device_error(a.error_flag, kDeviceBadTokenId);
  return nullptr;
}

template <GgmlType T>
__global__ void __launch_bounds__(kThreads) getrows_quant_kernel(const GatherArgs a) {
  pdl_enter();
  using D = qdev::BlockDec<T>;
  float* out = a.y + static_cast<int64_t>(blockIdx.x) * a.k;
  const uint8_t* row = gather_row(a, out);
  if (row == nullptr) return;
  const int nb = static_cast<int>(a.k / 32);
  constexpr int kAbPerBlock = D::kBlockElems / 32;
  for (int s = threadIdx.x; s < nb; s += kThreads) {
    const int b = s / D::kSlices, j = s % D::kSlices;
    typename D::Raw raw;
    D::load(&raw, row + static_cast<int64_t>(b) * a.block_bytes, j, a.aligned);
    qdev::Slice sl;
    D::decode(raw, j, &sl);
    int b0, o0, b1, o1;
    D::act_map(j, &b0, &o0, &b1, &o1);
    const int e[2] = {(b * kAbPerBlock + b0) * 32 + o0, (b * kAbPerBlock + b1) * 32 + o1};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float v[16];
      qdev::dequant_half<T>(sl, h, v);
      float4* dst = reinterpret_cast<float4*>(out + e[h]);
#pragma unroll
      for (int i = 0; i < 4; ++i) dst[i] = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
    }
  }
}

// F32 / F16 / BF16 rows (any k, any alignment): element by element; exact.
template <GgmlType T>
__global__ void __launch_bounds__(kThreads) getrows_float_kernel(const GatherArgs a) {
  pdl_enter();
  float* out = a.y + static_cast<int64_t>(blockIdx.x) * a.k;
  const uint8_t* row = gather_row(a, out);
  if (row == nullptr) return;
  for (int64_t e = threadIdx.x; e < a.k; e += kThreads) {
    float v;
    if constexpr (T == GgmlType::kF32) {
      v = __ldg(reinterpret_cast<const float*>(row) + e);
    } else if constexpr (T == GgmlType::kF16) {
      v = half_bits_to_float(__ldg(reinterpret_cast<const unsigned short*>(row) + e));
    } else {
      v = __uint_as_float(static_cast<uint32_t>(__ldg(reinterpret_cast<const unsigned short*>(row) + e))
                          << 16);
    }
    out[e] = v;
  }
}

template <GgmlType T>
cudaError_t Launch(const GatherArgs& a, int64_t n_ids, cudaStream_t stream) {
  if constexpr (T == GgmlType::kF32 || T == GgmlType::kF16 || T == GgmlType::kBF16) {
    LaunchGrid(getrows_float_kernel<T>, static_cast<unsigned>(n_ids), kThreads, 0, stream, a);
  } else {
    LaunchGrid(getrows_quant_kernel<T>, static_cast<unsigned>(n_ids), kThreads, 0, stream, a);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchGetRowsWeight(const WeightView& w, const int32_t* ids, int64_t n_ids, float* y,
                                int32_t* error_flag, cudaStream_t stream) {
  if (n_ids < 0 || n_ids > 0x7FFFFFFF || w.k < 0 || w.rows < 0) return cudaErrorInvalidValue;
  if (n_ids == 0 || w.k == 0) return cudaSuccess;
  if (ids == nullptr || y == nullptr || w.data == nullptr) return cudaErrorInvalidValue;
  const int64_t bs = TraitsOf(w.type).block_size;
  if (w.k % bs != 0) return cudaErrorInvalidValue;
  if (w.q6k_padded && w.type != GgmlType::kQ6_K) return cudaErrorInvalidValue;
  const int64_t block_bytes = DeviceBlockBytes(w.type, w.q6k_padded);
  if (w.row_bytes < w.k / bs * block_bytes) return cudaErrorInvalidValue;
  const bool quant = w.type != GgmlType::kF32 && w.type != GgmlType::kF16 &&
                     w.type != GgmlType::kBF16;
  // Quantized rows are written as float4s; the window loads need 2-byte
  // aligned blocks.
  if (quant && (reinterpret_cast<uintptr_t>(y) % 16 != 0 || w.row_bytes % 2 != 0 ||
                reinterpret_cast<uintptr_t>(w.data) % 2 != 0)) {
    return cudaErrorInvalidValue;
  }
  GatherArgs a{static_cast<const uint8_t*>(w.data),
               w.row_bytes,
               w.rows,
               w.k,
               ids,
               y,
               error_flag,
               static_cast<int>(block_bytes),
               reinterpret_cast<uintptr_t>(w.data) % 16 == 0 && w.row_bytes % 16 == 0 &&
                   block_bytes % 16 == 0};
  switch (w.type) {
    case GgmlType::kF32: return Launch<GgmlType::kF32>(a, n_ids, stream);
    case GgmlType::kF16: return Launch<GgmlType::kF16>(a, n_ids, stream);
    case GgmlType::kBF16: return Launch<GgmlType::kBF16>(a, n_ids, stream);
    case GgmlType::kQ4_0: return Launch<GgmlType::kQ4_0>(a, n_ids, stream);
    case GgmlType::kQ4_1: return Launch<GgmlType::kQ4_1>(a, n_ids, stream);
    case GgmlType::kQ5_0: return Launch<GgmlType::kQ5_0>(a, n_ids, stream);
    case GgmlType::kQ5_1: return Launch<GgmlType::kQ5_1>(a, n_ids, stream);
    case GgmlType::kQ8_0: return Launch<GgmlType::kQ8_0>(a, n_ids, stream);
    case GgmlType::kQ4_K: return Launch<GgmlType::kQ4_K>(a, n_ids, stream);
    case GgmlType::kQ5_K: return Launch<GgmlType::kQ5_K>(a, n_ids, stream);
    case GgmlType::kQ6_K: return Launch<GgmlType::kQ6_K>(a, n_ids, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace minfer::cuda
