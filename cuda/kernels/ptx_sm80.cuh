// PTX wrappers shared by the sm_80+ tensor-core kernels (MMQ, the DQ GEMM,
// the prefill flash attention): shared-memory addresses, cp.async,
// ldmatrix, the f16 mma. nvcc only;
// internal to cuda/kernels. Call them only from code compiled for sm_80+
// (the kernels guard their bodies with __CUDA_ARCH__ >= 800).
#ifndef MINFER_CUDA_KERNELS_PTX_SM80_CUH_
#define MINFER_CUDA_KERNELS_PTX_SM80_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace minfer::cuda {

// The shared-state-space address of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, bypassing L1 (.cg: the kernels use each byte
// once per CTA; other CTAs find it in L2). src_bytes 0 zero-fills the
// destination and reads nothing.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most kPending committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Four 8x8 b16 matrices: lane L gives the address of row L % 8 of matrix
// L / 8 and receives from matrix i, in r[i], the 32 bits at row L / 4,
// columns 2 (L % 4), +1 (with .trans: column L / 4, rows 2 (L % 4), +1).
// volatile: the same addresses are re-read after cp.async refills them.
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += A (16x16 f16, row-major) * B (16x8 f16), f32 accumulators: lane (g,
// t) = (L / 4, L % 4) holds A words (row g, k 2t..2t+1), (row g+8, same),
// (row g, k 2t+8..2t+9), (row g+8, same); B words (k 2t..2t+1, column g),
// (k 2t+8..2t+9, column g); C (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1).
__device__ __forceinline__ void mma_f16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace minfer::cuda

#endif  // MINFER_CUDA_KERNELS_PTX_SM80_CUH_
