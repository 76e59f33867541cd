// TopK (graph.h): per row of logits, what the sampler needs when it can
// sample from candidates alone (engine/sampling Sampler::UsesOnlyTop): the
// argmax (mode 1), or the k largest logits with the softmax normalizer
// (mode 2); the host then reads a few hundred bytes per sequence instead of
// the whole row. LaunchTopK in sample.h.
//
// One 512-thread block per row. Mode 1: one pass, (max, lowest id). Mode 2:
// the max, the normalizer, then an exact radix select of the k-th largest
// key (floats mapped to order-preserving uint32, 8 bits per pass over the
// keys matching the prefix so far, -inf left out), a pass that collects the
// keys above the threshold and the ids equal to it, the lowest ids of the
// tie, and a bitonic sort of the k candidates by (logit desc, id asc). The
// result is the CPU's TopKRows, bit for bit, but for the normalizer (summed
// in float here, in double there).
//
// Masks (constrained decoding): a masked row reads its allowed-token bits
// with its logits in every pass and treats a cleared bit as -inf, so the
// mask costs no pass and no masked copy of the row in global memory. A
// warp's 32 consecutive ids are one mask word (the block strides by 512),
// so the word is one broadcast load per warp, from L1/L2 after the first
// pass (a row's mask is 19 KB at Qwen2's vocabulary). The body is a
// template on "masked", so unmasked rows run the same code as before masks
// existed.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/sample.h"

namespace minfer::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kMaxK = kTopKMaxK;
constexpr int kEqCap = 1024;  // ids of the threshold's tie the block can sort

// Order-preserving key: larger float, larger key; -0 and +0 share one.
__device__ __forceinline__ uint32_t float_key(float x) {
  if (x == 0.0f) x = 0.0f;
  const uint32_t b = __float_as_uint(x);
  return (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);
}

// (value desc, id asc): does (av, ai) come first?
__device__ __forceinline__ bool before(float av, int ai, float bv, int bi) {
  return av > bv || (av == bv && ai < bi);
}

// The block's shared memory, declared once in the kernel so that both
// instantiations of the row body share it.
struct TopKShared {
  float s_val[kThreads / 32];
  int s_id[kThreads / 32];
  int s_nan;
  float s_sum[kThreads / 32];
  uint32_t hist[256];
  int s_sel, s_remaining;
  int cnt_gt, cnt_eq;
  float cand_v[kMaxK];
  int cand_i[kMaxK];
  int eq_ids[kEqCap];
};

// Logit i of the row as TopK sees it: -inf where the mask clears its bit.
// Both loads are issued unconditionally: a logit load that waited for its
// mask word would chain two memory latencies per element in these
// latency-bound loops.
template <bool kMasked>
__device__ __forceinline__ float row_logit(const float* __restrict__ l,
                                           const uint32_t* __restrict__ allowed, int64_t i) {
  const float x = __ldg(l + i);
  if constexpr (kMasked) {
    const uint32_t word = __ldg(allowed + (i >> 5));
    return ((word >> (i & 31)) & 1u) != 0 ? x : -INFINITY;
  }
  return x;
}

// One row (base mode m: 1 or 2) by the whole block; allowed: the row's
// mask words (kMasked only).
template <bool kMasked>
__device__ void topk_row(TopKShared& sh, const float* __restrict__ l,
                         const uint32_t* __restrict__ allowed, int64_t limit, int m, int k,
                         float* __restrict__ o) {
  float* const s_val = sh.s_val;
  int* const s_id = sh.s_id;
  int& s_nan = sh.s_nan;
  float* const s_sum = sh.s_sum;
  uint32_t* const hist = sh.hist;
  int& s_sel = sh.s_sel;
  int& s_remaining = sh.s_remaining;
  int& cnt_gt = sh.cnt_gt;
  int& cnt_eq = sh.cnt_eq;
  float* const cand_v = sh.cand_v;
  int* const cand_i = sh.cand_i;
  int* const eq_ids = sh.eq_ids;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  // Pass 1: max (lowest id among equal maxima), NaN.
  float best = -INFINITY;
  int bid = INT_MAX;
  int nan = 0;
  for (int64_t i = tid; i < limit; i += kThreads) {
    const float x = row_logit<kMasked>(l, allowed, i);
    if (isnan(x)) {
      nan = 1;
    } else if (x > best) {  // ascending ids per thread: the first is the lowest
      best = x;
      bid = static_cast<int>(i);
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(kFullWarpMask, best, off);
    const int oi = __shfl_xor_sync(kFullWarpMask, bid, off);
    if (before(ov, oi, best, bid)) {
      best = ov;
      bid = oi;
    }
  }
  nan = __any_sync(kFullWarpMask, nan);
  if (tid == 0) s_nan = 0;
  __syncthreads();
  if (lane == 0) {
    s_val[warp] = best;
    s_id[warp] = bid;
    if (nan) s_nan = 1;
  }
  __syncthreads();
  best = s_val[0];
  bid = s_id[0];
  for (int w = 1; w < kThreads / 32; ++w) {
    if (before(s_val[w], s_id[w], best, bid)) {
      best = s_val[w];
      bid = s_id[w];
    }
  }
  for (int j = tid; j < k; j += kThreads) {
    o[2 + 2 * j] = -INFINITY;
    o[3 + 2 * j] = __int_as_float(-1);
  }
  if (s_nan) {
    if (tid == 0) {
      o[0] = __int_as_float(0x7fc00000);  // NaN: the host reads the row
      o[1] = 0.0f;
    }
    return;
  }
  if (m == 1 || best == -INFINITY) {
    if (tid == 0) {
      o[0] = best;
      o[1] = 0.0f;
      if (best != -INFINITY) {
        o[2] = best;
        o[3] = __int_as_float(bid);
      }
    }
    return;
  }

  // Pass 2: the normalizer.
  float sum = 0.0f;
  for (int64_t i = tid; i < limit; i += kThreads) {
    sum += __expf(row_logit<kMasked>(l, allowed, i) - best);
  }
  sum = warp_sum(sum);
  if (lane == 0) s_sum[warp] = sum;

  // Radix select of the k-th largest finite key.
  uint32_t prefix = 0, mask = 0;
  bool all = false;  // fewer than k finite logits: every one is a candidate
  if (tid == 0) s_remaining = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = tid; b < 256; b += kThreads) hist[b] = 0;
    __syncthreads();
    for (int64_t i = tid; i < limit; i += kThreads) {
      const float x = row_logit<kMasked>(l, allowed, i);
      if (x == -INFINITY) continue;
      const uint32_t key = float_key(x);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (tid == 0) {
      int remaining = s_remaining, sel = -1;
      uint32_t cum = 0;
      for (int b = 255; b >= 0; --b) {
        if (cum + hist[b] >= static_cast<uint32_t>(remaining)) {
          sel = b;
          remaining -= static_cast<int>(cum);
          break;
        }
        cum += hist[b];
      }
      s_sel = sel;
      s_remaining = remaining;
    }
    __syncthreads();
    if (s_sel < 0) {
      all = true;
      break;
    }
    prefix |= static_cast<uint32_t>(s_sel) << shift;
    mask |= 255u << shift;
  }
  // Collect: keys above the threshold, and the threshold's tie.
  if (tid == 0) {
    cnt_gt = 0;
    cnt_eq = 0;
  }
  __syncthreads();
  for (int64_t i = tid; i < limit; i += kThreads) {
    const float x = row_logit<kMasked>(l, allowed, i);
    if (x == -INFINITY) continue;
    const uint32_t key = float_key(x);
    if (all || key > prefix) {
      const int s = atomicAdd(&cnt_gt, 1);
      if (s < kMaxK) {
        cand_v[s] = x;
        cand_i[s] = static_cast<int>(i);
      }
    } else if (key == prefix) {
      const int s = atomicAdd(&cnt_eq, 1);
      if (s < kEqCap) eq_ids[s] = static_cast<int>(i);
    }
  }
  __syncthreads();
  const int n_gt = min(cnt_gt, kMaxK);
  const int need = all ? 0 : k - n_gt;  // from the tie
  if (!all && cnt_eq > kEqCap) {
    // A tie wider than the block can order: the host reads the row.
    if (tid == 0) {
      o[0] = __int_as_float(0x7fc00000);
      o[1] = 0.0f;
    }
    return;
  }
  // The tie's lowest ids: sort them (bitonic over a power of two).
  const int n_eq = all ? 0 : cnt_eq;
  if (need > 0) {
    int p2 = 1;
    while (p2 < n_eq) p2 <<= 1;
    for (int i = n_eq + tid; i < p2; i += kThreads) eq_ids[i] = INT_MAX;
    __syncthreads();
    for (int size = 2; size <= p2; size <<= 1) {
      for (int stride = size >> 1; stride > 0; stride >>= 1) {
        for (int i = tid; i < p2; i += kThreads) {
          const int j = i ^ stride;
          if (j > i) {
            const bool up = (i & size) == 0;
            const int a = eq_ids[i], b = eq_ids[j];
            if ((a > b) == up) {
              eq_ids[i] = b;
              eq_ids[j] = a;
            }
          }
        }
        __syncthreads();
      }
    }
    const float tv = __ldg(l + eq_ids[0]);  // every member has the threshold's value...
    for (int j = tid; j < need; j += kThreads) {
      cand_v[n_gt + j] = __ldg(l + eq_ids[j]);  // ... up to the sign of zero
      cand_i[n_gt + j] = eq_ids[j];
    }
    (void)tv;
  }
  __syncthreads();
  // Sort the candidates by (value desc, id asc).
  const int total = n_gt + need;
  int p2 = 1;
  while (p2 < total) p2 <<= 1;
  for (int i = total + tid; i < p2; i += kThreads) {
    cand_v[i] = -INFINITY;
    cand_i[i] = INT_MAX;
  }
  __syncthreads();
  for (int size = 2; size <= p2; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = tid; i < p2; i += kThreads) {
        const int j = i ^ stride;
        if (j > i) {
          const bool up = (i & size) == 0;  // "up": ascending in the chain's order
          const float av = cand_v[i], bv = cand_v[j];
          const int ai = cand_i[i], bi = cand_i[j];
          if (before(bv, bi, av, ai) == up) {
            cand_v[i] = bv;
            cand_i[i] = bi;
            cand_v[j] = av;
            cand_i[j] = ai;
          }
        }
      }
      __syncthreads();
    }
  }
  for (int j = tid; j < total && j < k; j += kThreads) {
    o[2 + 2 * j] = cand_v[j];
    o[3 + 2 * j] = __int_as_float(cand_i[j]);
  }
  if (tid == 0) {
    float s = 0.0f;
    for (int w = 0; w < kThreads / 32; ++w) s += s_sum[w];
    o[0] = best;
    o[1] = s;
  }
}

__global__ void __launch_bounds__(kThreads)
    topk_kernel(const float* __restrict__ logits, int64_t n_vocab, int64_t limit,
                const int32_t* __restrict__ mode, const uint32_t* __restrict__ mask,
                int64_t n_out, int k, float* __restrict__ out, int32_t* error_flag) {
  pdl_enter();
  __shared__ TopKShared sh;
  const int r = blockIdx.x;
  const int mv = __ldg(mode + r);
  const int m = mv & ((1 << kTopKMaskShift) - 1);
  const int slot = (mv >> kTopKMaskShift) - 1;
  if (m > 2 || slot < -1 || (slot >= 0 && (mask == nullptr || slot >= n_out))) {
    if (threadIdx.x == 0) set_device_error(error_flag, kDeviceBadTopKMode);
    return;
  }
  if (m == 0) return;
  const float* l = logits + static_cast<int64_t>(r) * n_vocab;
  float* o = out + static_cast<int64_t>(r) * (2 + 2 * static_cast<int64_t>(k));
  if (slot >= 0) {
    topk_row<true>(sh, l, mask + slot * ((n_vocab + 31) / 32), limit, m, k, o);
  } else {
    topk_row<false>(sh, l, nullptr, limit, m, k, o);
  }
}

}  // namespace

cudaError_t LaunchTopK(const float* logits, int64_t n_vocab, int64_t n_out, const int32_t* mode,
                       const uint32_t* mask, int top_k, int64_t vocab_limit, float* out,
                       int32_t* error_flag, cudaStream_t stream) {
  if (n_vocab < 1 || n_vocab > INT_MAX || n_out < 0 || n_out > INT_MAX || top_k < 1 ||
      top_k > kTopKMaxK || vocab_limit < 1 || vocab_limit > n_vocab) {
    return cudaErrorInvalidValue;
  }
  if (n_out == 0) return cudaSuccess;
  LaunchGrid(topk_kernel, static_cast<unsigned>(n_out), kThreads, 0, stream, logits, n_vocab,
             vocab_limit, mode, mask, n_out, top_k, out, error_flag);
  return cudaGetLastError();
}

}  // namespace minfer::cuda
