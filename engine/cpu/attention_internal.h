// Shared between attention.cc (planning, threading, scalar path) and
// attention_avx2.cc (the SIMD tile kernels, attention_kernel.inc). Not part
// of the backend's API.
#ifndef MINFER_ENGINE_CPU_ATTENTION_INTERNAL_H_
#define MINFER_ENGINE_CPU_ATTENTION_INTERNAL_H_

#include <cstdint>

#include "engine/graph/graph.h"

namespace minfer::cpu::attn_internal {

// Keys per online-softmax step. Block boundaries sit at multiples of this
// from key 0 for every query, which (with masked keys contributing exact
// zeros) makes a query's result independent of the tile it is computed in:
// decode and prefill give bit-identical attention outputs.
inline constexpr int kKeyBlock = 64;

struct AttnArgs {
  const float* q;        // [head_dim, n_head, nt]
  const int32_t* pos;    // [nt], each in [0, n_ctx)
  int64_t nt;
  int n_head, n_head_kv, head_dim;
  float scale;
  graph::DType dtype;    // cache element type: kF32, kF16, kQ8_0 or kFp8
  int64_t n_kv_embd;     // cache row length (elements) = n_head_kv * head_dim
  int64_t row_bytes;     // cache row stride
  const uint8_t* k_cache;
  const uint8_t* v_cache;
  float* y;              // [head_dim * n_head, nt]
  // A paged cache: the block table of the sequence the tile's tokens
  // belong to (logical row j is cache row table[j >> block_shift] <<
  // block_shift | j % block size); null for a contiguous cache.
  const int32_t* table = nullptr;
  int block_shift = 0;
  // Sliding window: a query at position p sees keys j with p - j < window
  // (0: every key up to p).
  int window = 0;
  // Attention sinks, one logit per query head (graph.h's paged Attn), or null.
  const float* sinks = nullptr;
};

// Converts one cache row (n elements of the cache dtype) to floats: the
// reference conversion every kernel's fast path must equal.
void LoadCacheRow(graph::DType dtype, const uint8_t* src, float* dst, int64_t n);

// The first key a query at position `pos` sees.
inline int64_t FirstKey(const AttnArgs& a, int64_t pos) {
  return a.window > 0 ? (pos - a.window + 1 > 0 ? pos - a.window + 1 : 0) : 0;
}

// The cache row holding logical row j of the tile's sequence.
inline int64_t CacheRow(const AttnArgs& a, int64_t j) {
  if (a.table == nullptr) return j;
  return (static_cast<int64_t>(a.table[j >> a.block_shift]) << a.block_shift) |
         (j & ((int64_t{1} << a.block_shift) - 1));
}

// Whether rows [j0, j0 + kKeyBlock) (j0 a multiple of kKeyBlock) are
// contiguous in the cache.
inline bool KeyBlockContiguous(const AttnArgs& a) {
  return a.table == nullptr || (int64_t{1} << a.block_shift) >= kKeyBlock;
}

// Attention of query tokens [t0, t0 + n_tokens) for every query head of kv
// head `hk`, written to a.y. Uses thread-local scratch; thread-safe for
// disjoint (hk, token range) pairs.
void AttendTileAvx2(const AttnArgs& a, int hk, int64_t t0, int n_tokens);
// The same kernel with AVX512-F/VL (32 ymm registers); identical results.
void AttendTileAvx512Vl(const AttnArgs& a, int hk, int64_t t0, int n_tokens);

}  // namespace minfer::cpu::attn_internal

#endif  // MINFER_ENGINE_CPU_ATTENTION_INTERNAL_H_
