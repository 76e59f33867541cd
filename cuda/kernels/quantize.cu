// LaunchQuantizeQ8A: f32 activation rows -> BlockQ8A, bit-identical to the
// CPU's QuantizeRowQ8A (engine/quant/vec_dot.cc).
//
// Eight threads own one 32-value block, four values each (one float4), so a
// warp quantizes four blocks with coalesced 16-byte loads; absmax and the
// code sum reduce over the eight lanes with three shuffles each. The float
// operations are the CPU's, each rounded the same way and never fused:
// d = absmax / 127 (flushed to 0 below FLT_MIN), id = 1 / d, q =
// round-half-even(x * id) (the CPU's 1.5 * 2^23 trick rounds the same way for
// |x * id| <= 127.01), s = d * float(sum q).
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/matmul.h"

namespace minfer::cuda {
namespace {

constexpr int kThreads = 256;

template <bool kVec>
__global__ void __launch_bounds__(kThreads) quantize_q8a_kernel(const float* __restrict__ x,
                                                                BlockQ8A* __restrict__ q,
                                                                int64_t n_blocks) {
  pdl_enter();
  const int64_t gid = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t blk = gid >> 3;
  const int sub = static_cast<int>(gid & 7);
  const bool active = blk < n_blocks;  // whole 8-lane groups are active or not
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
  if (active) {
    const float* p = x + blk * 32 + sub * 4;
    if constexpr (kVec) {
      v = __ldg(reinterpret_cast<const float4*>(p));
    } else {
      v = make_float4(__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3));
    }
  }
  const Q8Group g = QuantizeQ8Group(v);
  if (!active) return;
  BlockQ8A* b = q + blk;
  *reinterpret_cast<uint32_t*>(b->qs + 4 * sub) = g.packed;
  if (sub == 0) *reinterpret_cast<float2*>(b) = make_float2(g.d, g.s);
}

}  // namespace

cudaError_t LaunchQuantizeQ8A(const float* x, BlockQ8A* q, int64_t k, int64_t nt,
                              cudaStream_t stream) {
  if (k < 0 || nt < 0 || k % 32 != 0) return cudaErrorInvalidValue;
  const int64_t n_blocks = k / 32 * nt;
  if (n_blocks == 0) return cudaSuccess;
  if (x == nullptr || q == nullptr) return cudaErrorInvalidValue;
  const int64_t threads = n_blocks * 8;
  const int64_t grid = (threads + kThreads - 1) / kThreads;
  if (grid > 0x7FFFFFFF) return cudaErrorInvalidValue;
  if (reinterpret_cast<uintptr_t>(x) % 16 == 0) {
    LaunchGrid(quantize_q8a_kernel<true>, static_cast<unsigned>(grid), kThreads, 0, stream, x, q,
               n_blocks);
  } else {
    LaunchGrid(quantize_q8a_kernel<false>, static_cast<unsigned>(grid), kThreads, 0, stream, x, q,
               n_blocks);
  }
  return cudaGetLastError();
}

}  // namespace minfer::cuda
