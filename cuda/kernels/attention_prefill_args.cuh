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
  KvRowGeom geom;  // quantized rows: where the scales are, code load width
  int n_head;
  int group;     // query heads per KV head
  int hd;        // head dim
  float qscale;  // scale * log2(e): the kernels take exp2 of scores
  int window;           // AttnParams::window
  const float* sinks;   // AttnParams::sinks (natural-log logits)
  // Paged (ops.h AttnPaged; null tiles: contiguous, the grid walks nt).
  // blockIdx picks a tile; tiles of fewer than two tokens are the decode
  // kernel's.
  const int32_t* tiles;
  const int32_t* tables;
  int max_blocks;
  int block_shift;
};

// The queries [t_begin, t_end) of a CTA that covers `span` tokens starting
// `offset` tokens into its tile (the contiguous form: tile `index` of span
// tokens over nt), and the sequence's block table. False: nothing to do.
__device__ __forceinline__ bool prefill_tokens(const AttnPrefillArgs& a, int64_t index,
                                               int offset, int span, int64_t* t_begin,
                                               int64_t* t_end, const int32_t** table) {
  if (a.tiles == nullptr) {
    *t_begin = index * span;
    *t_end = min(a.nt, *t_begin + span);
    *table = nullptr;
    return *t_begin < a.nt;
  }
  const int4 tile = __ldg(reinterpret_cast<const int4*>(a.tiles) + index);
  if (tile.z < 2 || offset >= tile.z) return false;
  *t_begin = tile.y + offset;
  *t_end = tile.y + min(tile.z, offset + span);
  *table = a.tables + static_cast<int64_t>(tile.x) * a.max_blocks;
  return true;
}

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
  a.geom = KvGeom(p.kv_type, p.n_kv_embd(), k_cache, v_cache);
  a.n_head = p.n_head;
  a.group = p.n_head / p.n_head_kv;
  a.hd = p.head_dim;
  a.qscale = p.scale * kLog2e;
  a.window = p.window;
  a.sinks = p.sinks;
  a.tiles = nullptr;
  a.tables = nullptr;
  a.max_blocks = 0;
  a.block_shift = 0;
  return a;
}

// The same for a paged launch.
inline AttnPrefillArgs MakeAttnPrefillArgsPaged(const float* q, const int32_t* pos,
                                                const void* k_cache, const void* v_cache,
                                                float* out, const AttnParams& p,
                                                const AttnPaged& pg) {
  AttnPrefillArgs a = MakeAttnPrefillArgs(q, pos, 0, k_cache, v_cache, out, p);
  a.tiles = pg.tiles;
  a.tables = pg.tables;
  a.max_blocks = pg.max_blocks;
  while ((1 << a.block_shift) < pg.kv_block) ++a.block_shift;
  return a;
}

// The tensor-core kernel over prepared arguments (attention_prefill_tc.cu):
// grid.y = `tiles` (paged: n_tiles). cudaErrorNotSupported (nothing
// launched) when the kernel cannot take p or the device.
cudaError_t LaunchAttnPrefillTcArgs(const AttnPrefillArgs& a, int64_t tiles, const AttnParams& p,
                                    cudaStream_t stream);

}  // namespace minfer::cuda

#endif  // MINFER_CUDA_KERNELS_ATTENTION_PREFILL_ARGS_CUH_
