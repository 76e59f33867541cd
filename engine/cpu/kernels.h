// CPU kernels behind CpuBackend::ExecuteNode. Plain functions over host
// pointers; the backend resolves buffers and checks shapes before calling.
// Multi-threaded ones take the pool explicitly.
#ifndef MINFER_ENGINE_CPU_KERNELS_H_
#define MINFER_ENGINE_CPU_KERNELS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "engine/base/thread_pool.h"
#include "engine/graph/backend.h"
#include "engine/graph/graph.h"
#include "engine/graph/weight.h"

namespace minfer::cpu {

// --- elementwise (n elements; b repeats with period nb when nb < n) -------
void AddF32(ThreadPool& pool, const float* a, const float* b, int64_t nb, float* y, int64_t n);
// y = (a + b) + r, b repeating every nb elements: the bits of AddF32 of a
// and b, then of r and that sum (float addition commutes). y may alias a or
// r.
void AddF32Residual(ThreadPool& pool, const float* a, const float* b, int64_t nb, const float* r,
                    float* y, int64_t n);
void MulF32(ThreadPool& pool, const float* a, const float* b, int64_t nb, float* y, int64_t n);
void ScaleF32(const float* a, float s, float* y, int64_t n);
void SiluF32(const float* a, float* y, int64_t n);
void SwiGluF32(ThreadPool& pool, const float* g, const float* u, float* y, int64_t n);
void SoftmaxRows(const float* a, float* y, int64_t ne0, int64_t rows);
// y = x / sqrt(mean(x^2) + eps) * w (w may be null), per row of ne0.
void RmsNormRows(ThreadPool& pool, const float* x, const float* w, float eps, float* y,
                 int64_t ne0, int64_t rows);

// Rotary embedding of x [head_dim, n_heads, nt] -> y (may alias x). Pair i
// turns by pos * freq[i], freq[i] = powf(base, -2i/n_rot) / factors[i] in
// float (factors: n_rot/2 values, or null for none).
// yarn: YaRN's interpolation and magnitude scale (graph.h), or null.
void RopeF32(const float* x, const int32_t* pos, float* y, int64_t head_dim, int64_t n_heads,
             int64_t nt, int n_rot, graph::RopeStyle style, float base,
             const float* factors = nullptr, const graph::RopeYarn* yarn = nullptr);

void PermuteF32(const float* x, const graph::Shape& xs, const std::array<int8_t, 4>& perm,
                float* y);

// Gathers rows ids[i] of a weight (dequantized) into y [ne0, n_ids].
absl::Status GetRowsWeight(const graph::Weight& w, const int32_t* ids, int64_t n_ids, float* y);
absl::Status GetRowsF32(const float* src, int64_t ne0, int64_t rows, const int32_t* ids,
                        int64_t n_ids, float* y);

// y[N, nt] = W^T x for W [K, N] of any supported type, x [K, nt].
// `scratch` holds the quantized activations (grown as needed).
absl::Status MatMul(ThreadPool& pool, const graph::Weight& w, const float* x, int64_t nt,
                    float* y, std::vector<uint8_t>& scratch);
// Several weights applied to the same single-token input, outputs
// concatenated (FusedQKV); the activation is quantized once.
absl::Status MatMulConcat(ThreadPool& pool, const std::vector<const graph::Weight*>& ws,
                          const float* x, float* y, std::vector<uint8_t>& scratch);
// silu(Wg x) * (Wu x) for nt tokens (x [K, nt], y [N, nt]), token by token:
// each row's values equal MatMul's, then SwiGLU's.
absl::Status FusedFfn(ThreadPool& pool, const graph::Weight& wg, const graph::Weight& wu,
                      const float* x, int64_t nt, float* y, std::vector<uint8_t>& scratch);

// Mixture of experts (graph.h's MoeRoute and MoeFFN): routing of nt tokens'
// router logits [n_expert, nt] into out [2 k, nt]; the expert FFN of nt
// tokens x [n_embd, nt] along `route` into y [n_embd, nt] (node: the MoeFFN
// node, for its weights and params). INVALID_ARGUMENT names a route entry
// outside [0, n_expert). bias (null or [n_expert]): the router's bias, added
// to each token's logits first as Add(logits, bias) would.
absl::Status MoeRouteRows(const float* logits, int64_t n_expert, int64_t nt,
                          const graph::OpParams& p, float* out, const float* bias = nullptr);
absl::Status MoeFfn(ThreadPool& pool, const graph::Node& node, const float* x, const float* route,
                    int64_t nt, float* y);

// Writes k/v rows [n_kv_embd] of nt tokens into the cache at pos[t].
absl::Status KvStore(const float* k, const float* v, const int32_t* pos, int64_t nt,
                     const graph::KvLayout& layout, uint8_t* k_cache, uint8_t* v_cache);

// Which implementation a kernel with SIMD paths runs. kAuto takes the best
// the CPU has; tests pin the others (each falls back to a lesser one the CPU
// lacks).
enum class KernelImpl { kAuto, kScalar, kAvx2 };

// Causal GQA attention over the cache: q [head_dim, n_head, nt] at positions
// pos -> y [head_dim * n_head, nt]. Query t attends to cache rows
// [0, pos[t]]; those rows must have been stored. Each query's result depends
// only on its own row and position, not on the other queries of the call
// (decode and prefill agree bit for bit).
absl::Status Attention(ThreadPool& pool, const float* q, const int32_t* pos, int64_t nt,
                       int n_head, int n_head_kv, int head_dim, float scale,
                       const graph::KvLayout& layout, const uint8_t* k_cache,
                       const uint8_t* v_cache, float* y, KernelImpl impl = KernelImpl::kAuto);

// Attention over a paged cache holding several sequences (graph.h, the
// paged Attn): token t of tile i attends to logical rows 0..pos[t] of the
// sequence whose block table is tables[tile row]. Every token must be in
// exactly one tile; tables must point inside the cache for every row a
// token sees (else INVALID_ARGUMENT / OUT_OF_RANGE naming the entry). A
// token's result is that of Attention() on a contiguous cache holding its
// sequence's rows, bit for bit (blocks of kv_block >= 1 rows only change
// where rows are read from).
struct PagedAttnArgs {
  const float* q;       // [head_dim, n_head, nt]
  const int32_t* pos;   // [nt] logical positions
  int64_t nt;
  const int32_t* tiles;   // [n_tiles][4]
  int64_t n_tiles;
  const int32_t* tables;  // [n_table_rows][max_blocks]
  int64_t n_table_rows;
  int max_blocks;
  int kv_block;
  int n_head, n_head_kv, head_dim;
  float scale;
  graph::KvLayout layout;  // n_ctx = the cache's rows
  const uint8_t* k_cache;
  const uint8_t* v_cache;
  float* y;
  int window = 0;                 // sliding window (0: none)
  const float* sinks = nullptr;   // [n_head] sink logits, or null
};
absl::Status PagedAttention(ThreadPool& pool, const PagedAttnArgs& args,
                            KernelImpl impl = KernelImpl::kAuto);

// TopK (graph.h): per output row r with base mode TopKBaseMode(mode[r]) !=
// 0, the argmax (1) or the top_k largest logits among ids < vocab_limit and
// the softmax normalizer (2), into out [2 + 2 top_k, n_out]; a row with
// mask column s = TopKMaskSlot(mode[r]) >= 0 sees only the ids allowed by
// mask + s * TopKMaskWords(n_vocab) (the others are -inf). mask: null, or
// [TopKMaskWords(n_vocab), n_out] words. INTERNAL, before anything is
// written, for a mode value outside that contract (a base mode above 2, a
// mask column without a mask or at or above n_out).
absl::Status TopKRows(ThreadPool& pool, const float* logits, int64_t n_vocab, int64_t n_out,
                      const int32_t* mode, int top_k, int64_t vocab_limit, float* out,
                      const uint32_t* mask = nullptr);

}  // namespace minfer::cpu

#endif  // MINFER_ENGINE_CPU_KERNELS_H_
