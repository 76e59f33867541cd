// The arguments of the two prefill attention kernels (the CUDA-core one in
// attention_prefill.cu, the tensor-core one in attention_prefill_tc.cu;
// ops.h LaunchAttnPrefill): one struct, filled from the launchers'
// parameters in one place. nvcc only; internal to cuda/kernels.
#ifndef MINFER_CUDA_KERNELS_ATTENTION_PREFILL_ARGS_CUH_
#define MINFER_CUDA_KERNELS_ATTENTION_PREFILL_ARGS_CUH_

#include <cstdint>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/ops.h"

namespace minfer::cuda {

struct AttnPrefillArgs {
  const float* q;      // [nt][n_head][hd]
  const int32_t* pos;  // [nt] the cache row of each token
  const uint8_t* k;    // cache rows, row_bytes apart
  const uint8_t* v;
  float* out;  // [nt][n_head][hd]
  int64_t nt;
  int64_t n_ctx;
  int64_t row_bytes;
  int n_head;
  int group;     // query heads per KV head
  int hd;        // head dim
  float qscale;  // scale * log2(e): the kernels take exp2 of scores
};

inline AttnPrefillArgs MakeAttnPrefillArgs(const float* q, const int32_t* pos, int64_t nt,
                                           const void* k_cache, const void* v_cache, float* out,
                                           const AttnParams& p) {
  constexpr float kLog2e = 1.44269504088896340736f;
  AttnPrefillArgs a;
  a.q = q;
  a.pos = pos;
  a.k = static_cast<const uint8_t*>(k_cache);
  a.v = static_cast<const uint8_t*>(v_cache);
  a.out = out;
  a.nt = nt;
  a.n_ctx = p.n_ctx;
  a.row_bytes = KvRowBytes(p.kv_type, p.n_kv_embd());
  a.n_head = p.n_head;
  a.group = p.n_head / p.n_head_kv;
  a.hd = p.head_dim;
  a.qscale = p.scale * kLog2e;
  return a;
}

}  // namespace minfer::cuda

#endif  // MINFER_CUDA_KERNELS_ATTENTION_PREFILL_ARGS_CUH_
