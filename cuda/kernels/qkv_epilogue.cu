// QkvBiasRopeStore, the epilogue of FusedQKV (decode, and prefill's nt
// tokens): q/k/v biases, Qwen3's per-head q/k RmsNorm (optional), RoPE of q
// and k (n_rot = head_dim, as the graph op defines; YaRN's angles when the
// node has them: gpt-oss), roped q to q_out, k and
// v stored at cache rows pos[t]. One launch replaces bias x3 + norm x2 +
// rope x2 + store; every value is computed with the same operations as the
// unfused kernels (LaunchAdd, LaunchRmsNorm, LaunchRope, LaunchKvStore), so
// the results are bit-identical to that composition except where the norm's
// double sum, added in another order, rounds to another float (~1e-8 of
// heads, as ops.h says of RmsNorm).
//
// One block per (head of q, k and v; token): n_head + 2 n_head_kv blocks
// along x, the tokens along y. The head's row is biased into shared memory,
// rotated there, and written out.
#include <cstdint>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/ops.h"

namespace minfer::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxHeadDim = 2 * kRopeMaxPairs;

struct QkvArgs {
  const float* src[3];   // q, k, v (slab 0 of their split-k partials when splits > 1)
  int splits[3];         // 1: src is the value
  int64_t slab[3];       // floats between slabs
  const float* bias[3];  // each may be null
  const float* norm[2];  // q and k norm weights: both null or both set
  float eps;
  const int32_t* pos;
  const int32_t* rows;  // cache rows of the store (pos when not paged)
  float* q_out;
  int64_t q_stride, kv_stride;  // floats between tokens of src[0] / src[1..2]
  uint8_t* cache[3];  // [1] = k cache, [2] = v cache
  int32_t* error_flag;
  int n_head, n_head_kv, head_dim, style;
  int64_t n_ctx;
};

template <KvType KV>
__global__ void __launch_bounds__(kThreads) qkv_bias_rope_store_kernel(QkvArgs a, RopeFreqs freqs,
                                                                      const YarnTable yarn) {
  pdl_enter();
  __shared__ float row[kMaxHeadDim];
  __shared__ double scratch[32];
  const int b = blockIdx.x;
  const int part = b < a.n_head ? 0 : b < a.n_head + a.n_head_kv ? 1 : 2;
  const int h = part == 0 ? b : part == 1 ? b - a.n_head : b - a.n_head - a.n_head_kv;
  const int hd = a.head_dim;
  const int64_t t = blockIdx.y;
  const float* src = a.src[part] + t * (part == 0 ? a.q_stride : a.kv_stride) +
                     static_cast<int64_t>(h) * hd;
  const float* bias =
      a.bias[part] != nullptr ? a.bias[part] + static_cast<int64_t>(h) * hd : nullptr;
  const int splits = a.splits[part];
  const int64_t slab = a.slab[part];
  for (int i = threadIdx.x; i < hd; i += blockDim.x) {
    // The partials' sum in split order (the GEMM's reduce, splitk::SumSplits).
    float v = src[i];
    for (int z = 1; z < splits; ++z) v += src[z * slab + i];
    row[i] = bias != nullptr ? v + bias[i] : v;
  }
  __syncthreads();
  if (part < 2 && a.norm[part] != nullptr) {  // uniform per block
    // norm.cu's rms_row: the squares summed in double, inv in the CPU's
    // expression, (x * inv) * w rounded per product.
    const float* w = a.norm[part];
    double ss = 0.0;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
      ss = fma(static_cast<double>(row[i]), static_cast<double>(row[i]), ss);
    }
    ss = block_sum(ss, scratch);
    const float inv =
        static_cast<float>(1.0 / sqrt(ss / static_cast<double>(hd) + static_cast<double>(a.eps)));
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
      row[i] = __fmul_rn(__fmul_rn(row[i], inv), __ldg(w + i));
    }
    __syncthreads();
  }
  const int32_t p = a.pos[t];
  if (part < 2) {
    const int half = hd / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
      float c, s;
      rope_angle(p, i, freqs, yarn, &c, &s);
      const int i0 = a.style == 0 ? i : 2 * i;
      const int i1 = a.style == 0 ? i + half : 2 * i + 1;
      float y0, y1;
      rope_rotate(row[i0], row[i1], c, s, &y0, &y1);
      row[i0] = y0;  // this thread alone owns the pair
      row[i1] = y1;
    }
    __syncthreads();
  }
  if (part == 0) {
    float* dst = a.q_out + t * a.q_stride + static_cast<int64_t>(h) * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) dst[i] = row[i];
    return;
  }
  const int32_t r = a.rows[t];
  if (r < 0 || r >= a.n_ctx) {
    if (threadIdx.x == 0) set_device_error(a.error_flag, kDeviceBadPosition);
    return;
  }
  const int64_t n_kv_embd = static_cast<int64_t>(a.n_head_kv) * hd;
  uint8_t* cache_row = a.cache[part] + r * KvRowBytes(KV, n_kv_embd);
  const int64_t e0 = static_cast<int64_t>(h) * hd;  // first element of this head
  if constexpr (KV == KvType::kF32) {
    float* dst = reinterpret_cast<float*>(cache_row) + e0;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) dst[i] = row[i];
  } else if constexpr (KV == KvType::kF16) {
    uint16_t* dst = reinterpret_cast<uint16_t*>(cache_row) + e0;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) dst[i] = float_to_half_bits(row[i]);
  } else {
    // head_dim % 32 == 0 (checked by the launcher): whole blocks per head.
    for (int j = threadIdx.x; j < hd / 32; j += blockDim.x) {
      const int64_t b = e0 / 32 + j;
      if constexpr (KV == KvType::kFp8) {
        quantize_fp8_block(row + 32 * j, kv_block_codes(cache_row, b),
                           kv_block_scale(cache_row, n_kv_embd, b));
      } else {
        quantize_q8_0_block(row + 32 * j, kv_block_codes(cache_row, b),
                            kv_block_scale(cache_row, n_kv_embd, b));
      }
    }
  }
}

}  // namespace

cudaError_t LaunchQkvBiasRopeStore(const float* q, const float* k, const float* v, const float* bq,
                                   const float* bk, const float* bv, const int32_t* pos, int64_t nt,
                                   float* q_out, void* k_cache, void* v_cache, const AttnParams& p,
                                   int rope_style, float rope_base, int32_t* error_flag,
                                   cudaStream_t stream, const int32_t* rows,
                                   const float* host_rope_factors, const float* q_norm,
                                   const float* k_norm, float norm_eps,
                                   const RopeYarnArgs* yarn_args, const QkvPartials* partials) {
  if (nt < 0 || nt > 65535) return cudaErrorInvalidValue;
  if (partials != nullptr) {
    for (int i = 0; i < 3; ++i) {
      if (partials->splits[i] < 1 || partials->splits[i] > 16) return cudaErrorInvalidValue;
    }
  }
  if (nt == 0) return cudaSuccess;
  if (p.n_head <= 0 || p.n_head_kv <= 0 || p.head_dim <= 0 || p.head_dim % 2 != 0 ||
      p.head_dim > kMaxHeadDim || p.n_ctx <= 0 || (rope_style != 0 && rope_style != 1)) {
    return cudaErrorInvalidValue;
  }
  if (IsBlockKv(p.kv_type) && p.head_dim % 32 != 0) return cudaErrorInvalidValue;
  if ((q_norm == nullptr) != (k_norm == nullptr)) return cudaErrorInvalidValue;
  if (p.kv_type == KvType::kF16 && p.head_dim % 4 != 0) return cudaErrorInvalidValue;
  RopeFreqs freqs;
  if (!MakeRopeFreqs(p.head_dim, rope_base, host_rope_factors, &freqs)) {
    return cudaErrorInvalidValue;
  }
  YarnTable yarn;
  MakeYarnTable(p.head_dim, rope_base, yarn_args, &yarn);
  QkvArgs a;
  a.src[0] = q;
  a.src[1] = k;
  a.src[2] = v;
  for (int i = 0; i < 3; ++i) {
    a.splits[i] = partials != nullptr ? partials->splits[i] : 1;
    a.slab[i] = partials != nullptr ? partials->stride[i] : 0;
  }
  a.bias[0] = bq;
  a.bias[1] = bk;
  a.bias[2] = bv;
  a.norm[0] = q_norm;
  a.norm[1] = k_norm;
  a.eps = norm_eps;
  a.pos = pos;
  a.rows = rows != nullptr ? rows : pos;
  a.q_out = q_out;
  a.q_stride = static_cast<int64_t>(p.n_head) * p.head_dim;
  a.kv_stride = static_cast<int64_t>(p.n_head_kv) * p.head_dim;
  a.cache[0] = nullptr;
  a.cache[1] = static_cast<uint8_t*>(k_cache);
  a.cache[2] = static_cast<uint8_t*>(v_cache);
  a.error_flag = error_flag;
  a.n_head = p.n_head;
  a.n_head_kv = p.n_head_kv;
  a.head_dim = p.head_dim;
  a.style = rope_style;
  a.n_ctx = p.n_ctx;
  const dim3 blocks(p.n_head + 2 * p.n_head_kv, static_cast<unsigned>(nt));
  switch (p.kv_type) {
    case KvType::kF32:
      LaunchGrid(qkv_bias_rope_store_kernel<KvType::kF32>, blocks, kThreads, 0, stream, a, freqs, yarn);
      break;
    case KvType::kF16:
      LaunchGrid(qkv_bias_rope_store_kernel<KvType::kF16>, blocks, kThreads, 0, stream, a, freqs, yarn);
      break;
    case KvType::kQ8_0:
      LaunchGrid(qkv_bias_rope_store_kernel<KvType::kQ8_0>, blocks, kThreads, 0, stream, a, freqs, yarn);
      break;
    case KvType::kFp8:
      LaunchGrid(qkv_bias_rope_store_kernel<KvType::kFp8>, blocks, kThreads, 0, stream, a, freqs, yarn);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace minfer::cuda
