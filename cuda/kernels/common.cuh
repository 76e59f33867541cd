// Device helpers shared by the kernel translation units (nvcc only): warp
// reductions, f16 conversion, the device error flag, and the KV-cache element
// access the store and attention kernels share. Block-format decoding for
// weights lives in quant_dev.cuh.
//
// Numerics: every helper here is exact or IEEE-rounded as stated; kernels that
// must match the CPU bit for bit (quantizers, RoPE) use explicit __f*_rn
// intrinsics where nvcc could otherwise contract a multiply and an add into
// one FMA.
#ifndef MINFER_CUDA_KERNELS_COMMON_CUH_
#define MINFER_CUDA_KERNELS_COMMON_CUH_

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels/kv_codes.h"
#include "cuda/kernels/types.h"
#include "engine/quant/fp8.h"

namespace minfer::cuda {

inline constexpr unsigned kFullWarpMask = 0xFFFFFFFFu;
inline constexpr int kWarpSize = 32;

// --- warp reductions (every lane gets the result; all 32 lanes must call) ---

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFullWarpMask, v, off);
  return v;
}

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFullWarpMask, v, off);
  return v;
}

__device__ __forceinline__ int warp_sum(int v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFullWarpMask, v, off);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullWarpMask, v, off));
  return v;
}

// c ? a : b for a lane-varying c, written with bit masks: nvcc turns a plain
// `c ? p[i] : p[j]` on a register array into a dynamically indexed load and
// moves the array to local memory; this form keeps it in registers.
__device__ __forceinline__ float select_bits(uint32_t mask, float a, float b) {
  return __uint_as_float((__float_as_uint(a) & mask) | (__float_as_uint(b) & ~mask));
}

// Sum over a block of blockDim.x threads (a multiple of 32, at most 1024);
// every thread gets the result. `scratch` holds >= 32 values and must not be
// in use by the caller around the call (the function synchronizes twice).
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_warps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = lane < n_warps ? scratch[lane] : T(0);
  total = warp_sum(total);
  __syncthreads();  // scratch may be reused right after
  return total;
}

template <typename T>
__device__ __forceinline__ T block_max(T v, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_warps = blockDim.x >> 5;
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = lane < n_warps ? scratch[lane] : T(-INFINITY);
  total = warp_max(total);
  __syncthreads();
  return total;
}

// --- f16 ------------------------------------------------------------------------

// Exact (every half is a float).
__device__ __forceinline__ float half_bits_to_float(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}

// Round to nearest, ties to even; overflow gives inf, subnormals are kept:
// the CPU's FloatToFp16 for every finite input.
__device__ __forceinline__ uint16_t float_to_half_bits(float f) {
  return __half_as_ushort(__float2half_rn(f));
}

// Four consecutive halves (8 bytes, 8-byte aligned) to floats.
__device__ __forceinline__ float4 half4_to_float4(uint2 raw) {
  const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&raw.x));
  const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&raw.y));
  return make_float4(a.x, a.y, b.x, b.y);
}

// --- device error flag ------------------------------------------------------------

// Records `code` unless an earlier error is already recorded (the first error
// is the one worth reporting). `flag` may be null.
__device__ __forceinline__ void set_device_error(int32_t* flag, int32_t code) {
  if (flag != nullptr) atomicCAS(flag, static_cast<int32_t>(kDeviceOk), code);
}

// --- quantized KV cache rows (q8_0, fp8): n codes, then n / 32 f16 scales ----
// (engine/quant/kv_row.h; 34 bytes per 32 elements, as ggml's Q8_0 blocks)

inline constexpr int kQ8_0Bytes = 34;

// Smallest half >= x for x > 0 (0 for x <= 0 or NaN), saturating at 65504:
// engine/quant/quantize.cc HalfUp.
__device__ __forceinline__ uint16_t half_up_bits(float x) {
  if (!(x > 0.0f)) return 0;
  if (x >= 65504.0f) return 0x7BFF;
  uint16_t h = float_to_half_bits(x);
  if (half_bits_to_float(h) < x) ++h;  // next larger positive half
  return h;
}

// Quantizes 32 floats into one block of a quantized cache row
// (engine/quant/kv_row.h: a row's codes, then its scales): its 32 codes at
// `codes` (2-byte aligned) and its f16 scale at `scale`, byte for byte what
// the CPU's QuantizeKvRow(kQ8_0) writes (ggml's Q8_0): d = HalfUp(absmax /
// 127), q = round-half-even(clamp(x * (1/d), -127, 127)) (0 when d == 0).
__device__ __forceinline__ void quantize_q8_0_block(const float* x, uint8_t* codes,
                                                    uint16_t* scale) {
  float mn = x[0], mx = x[0];
#pragma unroll
  for (int j = 1; j < 32; ++j) {
    mn = x[j] < mn ? x[j] : mn;
    mx = x[j] > mx ? x[j] : mx;
  }
  const float amax = -mn > mx ? -mn : mx;
  const uint16_t h = half_up_bits(__fdiv_rn(amax, 127.0f));
  const float d = half_bits_to_float(h);
  const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
  uint16_t* out16 = reinterpret_cast<uint16_t*>(codes);
  *scale = h;
#pragma unroll
  for (int j = 0; j < 32; j += 2) {
    float v0 = __fmul_rn(x[j], id), v1 = __fmul_rn(x[j + 1], id);
    // Clamp as the CPU does (NaN -> -127), then round half to even.
    v0 = v0 > -127.0f ? v0 : -127.0f;
    v0 = v0 < 127.0f ? v0 : 127.0f;
    v1 = v1 > -127.0f ? v1 : -127.0f;
    v1 = v1 < 127.0f ? v1 : 127.0f;
    const uint32_t q0 = static_cast<uint8_t>(static_cast<int8_t>(__float2int_rn(v0)));
    const uint32_t q1 = static_cast<uint8_t>(static_cast<int8_t>(__float2int_rn(v1)));
    out16[j / 2] = static_cast<uint16_t>(q0 | (q1 << 8));
  }
}

// Quantizes 32 floats into one block of an fp8 cache row (codes at `codes`,
// 2-byte aligned; the f16 scale at `scale`), byte for byte what the CPU's
// QuantizeKvRow(kFp8) writes: d = HalfUp(absmax / 448), q = FloatToE4M3(x *
// (1/d)) (0 when d == 0). The e4m3 rounding is fp8.h's software conversion,
// shared with the CPU, not the sm_89+ instruction, so the bytes agree on
// every GPU.
__device__ __forceinline__ void quantize_fp8_block(const float* x, uint8_t* codes, uint16_t* scale) {
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(x[j]));
  const uint16_t h = half_up_bits(__fdiv_rn(amax, 448.0f));
  const float d = half_bits_to_float(h);
  const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
  uint16_t* out16 = reinterpret_cast<uint16_t*>(codes);
  *scale = h;
#pragma unroll
  for (int j = 0; j < 32; j += 2) {
    const uint32_t q0 = FloatToE4M3(__fmul_rn(x[j], id));
    const uint32_t q1 = FloatToE4M3(__fmul_rn(x[j + 1], id));
    out16[j / 2] = static_cast<uint16_t>(q0 | (q1 << 8));
  }
}

// Block b of a quantized cache row of n elements (n % 32 == 0): its codes
// and its scale (kv_row.h).
__device__ __forceinline__ uint8_t* kv_block_codes(uint8_t* row, int64_t b) { return row + 32 * b; }
__device__ __forceinline__ uint16_t* kv_block_scale(uint8_t* row, int64_t n, int64_t b) {
  return reinterpret_cast<uint16_t*>(row + n) + b;
}

// --- KV cache rows --------------------------------------------------------------
//
// A cache row holds n_kv_embd elements of one position: f32, f16, or (q8_0,
// fp8) n_kv_embd one-byte codes followed by one f16 scale per 32 elements
// (engine/quant/kv_row.h). Kernels read 4 consecutive elements starting at an
// element index that is a multiple of 4, so a group shares one scale.
// KvRaw<KV> is the raw register form of such a group, so loads can be issued
// early and converted late.

template <KvType KV>
struct KvRaw;
template <>
struct KvRaw<KvType::kF32> {
  float4 v;
};
template <>
struct KvRaw<KvType::kF16> {
  uint2 v;
};
template <>
struct KvRaw<KvType::kQ8_0> {
  uint32_t d;   // f16 bits of the block scale (low 16 bits)
  uint32_t qs;  // 4 int8 codes, little-endian
};
template <>
struct KvRaw<KvType::kFp8> {
  uint32_t d;   // f16 bits of the block scale (low 16 bits)
  uint32_t qs;  // 4 e4m3 codes, little-endian
};

// Bytes of a cache row of n elements.
__host__ __device__ inline int64_t KvRowBytes(KvType t, int64_t n) {
  return t == KvType::kF32 ? 4 * n : t == KvType::kF16 ? 2 * n : n / 32 * kQ8_0Bytes;
}

template <KvType KV>
__device__ __forceinline__ KvRaw<KV> kv_zero() {
  KvRaw<KV> r;
  if constexpr (KV == KvType::kF32) {
    r.v = make_float4(0.f, 0.f, 0.f, 0.f);
  } else if constexpr (KV == KvType::kF16) {
    r.v = make_uint2(0u, 0u);
  } else {
    r.d = 0u;
    r.qs = 0u;
  }
  return r;
}

// Where a quantized row's scales start and whether its codes may be read 4
// bytes at a time: rows of n % 64 == 0 elements are 4-byte multiples (34 n /
// 32 bytes), so with a 4-byte aligned cache every row's codes are; other
// widths read their codes 2 bytes at a time. Ignored by f32 and f16 rows.
struct KvRowGeom {
  int32_t scales;  // byte offset of the scales: n_kv_embd
  bool codes4;     // 4-byte code loads
};
__host__ __device__ inline KvRowGeom KvGeom(KvType t, int64_t n, const void* k, const void* v) {
  KvRowGeom g;
  g.scales = static_cast<int32_t>(n);
  g.codes4 = (t == KvType::kQ8_0 || t == KvType::kFp8) && KvRowBytes(t, n) % 4 == 0 &&
             reinterpret_cast<uintptr_t>(k) % 4 == 0 && reinterpret_cast<uintptr_t>(v) % 4 == 0;
  return g;
}

// Loads elements e..e+3 (e % 4 == 0) of the row at `row`: for quantized rows
// one 4-byte (or two 2-byte) code loads and one 2-byte scale load.
template <KvType KV>
__device__ __forceinline__ KvRaw<KV> kv_load(const uint8_t* __restrict__ row, int e,
                                             KvRowGeom g) {
  KvRaw<KV> r;
  if constexpr (KV == KvType::kF32) {
    r.v = __ldg(reinterpret_cast<const float4*>(row) + (e >> 2));
  } else if constexpr (KV == KvType::kF16) {
    r.v = __ldg(reinterpret_cast<const uint2*>(row) + (e >> 2));
  } else {
    r.d = __ldg(reinterpret_cast<const uint16_t*>(row + g.scales) + (e >> 5));
    if (g.codes4) {
      r.qs = __ldg(reinterpret_cast<const uint32_t*>(row + e));
    } else {
      const uint16_t* c = reinterpret_cast<const uint16_t*>(row + e);
      r.qs = static_cast<uint32_t>(__ldg(c)) | (static_cast<uint32_t>(__ldg(c + 1)) << 16);
    }
  }
  return r;
}

// A paged cache (a KV pool of blocks, graph.h's paged Attn): the cache row
// of logical row j of the sequence whose block table is `table`
// (block_shift = log2 of the rows per block); a null table is a contiguous
// cache (row j itself).
__device__ __forceinline__ int64_t kv_cache_row(const int32_t* __restrict__ table, int block_shift,
                                                int j) {
  if (table == nullptr) return j;
  return (static_cast<int64_t>(__ldg(table + (j >> block_shift))) << block_shift) |
         (j & ((1 << block_shift) - 1));
}

// Exact conversion (q8_0: q * d is exact in float, as the CPU dequantizer).
template <KvType KV>
__device__ __forceinline__ float4 kv_to_float4(const KvRaw<KV>& r) {
  if constexpr (KV == KvType::kF32) {
    return r.v;
  } else if constexpr (KV == KvType::kF16) {
    return half4_to_float4(r.v);
  } else {
    const float d = half_bits_to_float(static_cast<uint16_t>(r.d));
    if constexpr (KV == KvType::kFp8) {
      // q * d is exact in f32 (fp8.h), as on the CPU; (q / 256) * (256 d)
      // is the same product (fp8_test), from f16 pairs built with integer
      // instructions (kv_codes.h). A NaN code makes the lane's four values
      // NaN through their scale (the CPU: that value alone; a score or an
      // output dimension it reaches is NaN either way).
      const float d256 = E4M3HasNaN(r.qs) ? __int_as_float(0x7FC00000) : d * 256.0f;
      const uint32_t lo = E4M3PairOver256Bits(r.qs, 0), hi = E4M3PairOver256Bits(r.qs, 1);
      const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&lo));
      const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&hi));
      return make_float4(a.x * d256, a.y * d256, b.x * d256, b.y * d256);
    }
    // The int8 codes as floats by prmt and add (kv_codes.h), the values of
    // static_cast<float>: the same products as the CPU dequantizer's.
    const uint32_t x = r.qs ^ 0x80808080u;
    return make_float4(S8CodeToFloat(x, 0) * d, S8CodeToFloat(x, 1) * d, S8CodeToFloat(x, 2) * d,
                       S8CodeToFloat(x, 3) * d);
  }
}

// --- RoPE -----------------------------------------------------------------------

// Rotation frequencies freq[i] = powf(base, -2i/n_rot) (divided by the
// frequency factor factors[i] when there are factors: Llama 3.1's
// rope_freqs), computed on the host with the same float expressions as the
// CPU backend (so both rotate by the same angles) and passed by value (a
// graph constant).
inline constexpr int kRopeMaxPairs = 128;  // n_rot <= 256
struct RopeFreqs {
  float f[kRopeMaxPairs];
};

// Fills freq[0, n_rot/2) on the host (defined in rope.cu); false when n_rot
// is not even, positive and <= 2 * kRopeMaxPairs. `factors` is a HOST
// pointer to n_rot/2 floats, or null.
bool MakeRopeFreqs(int n_rot, float base, const float* factors, RopeFreqs* out);

// YaRN's per-pair constants (engine/cpu/elementwise.cc RopeF32): the mix of
// extrapolated angles and its complement, the interpolation scale and the
// magnitude factor. active 0: plain RoPE. Passed by value, as RopeFreqs.
struct YarnTable {
  int active;
  float freq_scale;
  float mscale;
  float mix[kRopeMaxPairs];
  float one_minus_mix[kRopeMaxPairs];
};
struct RopeYarnArgs;  // ops.h
// Fills *out on the host for n_rot rotated dims at `base` with the CPU's
// float / double steps (defined in rope.cu); args null or freq_scale 1:
// inactive.
void MakeYarnTable(int n_rot, float base, const RopeYarnArgs* args, YarnTable* out);

// cos/sin of theta = float(pos) * freq rounded to float, evaluated in double
// and rounded to float — what the CPU computes (std::cos/std::sin of the
// float angle in double). CUDA's double sin/cos are within 2 double ulps, so
// the float results equal the CPU's except when the exact value lies within
// ~2^-51 (relative) of a float rounding boundary (~1e-8 of angles); then they
// differ by one float ulp.
__device__ __forceinline__ void rope_cos_sin(int32_t pos, float freq, float* c, float* s) {
  const float theta = __fmul_rn(static_cast<float>(pos), freq);
  double sd, cd;
  sincos(static_cast<double>(theta), &sd, &cd);
  *c = static_cast<float>(cd);
  *s = static_cast<float>(sd);
}

// cos/sin of pair i at position pos: rope_cos_sin's, or with YaRN (active)
// th = interp (1 - mix) + th mix, interp = freq_scale th, then cos/sin(th)
// in double rounded to float and scaled by mscale — the CPU's steps.
__device__ __forceinline__ void rope_angle(int32_t pos, int i, const RopeFreqs& freqs,
                                           const YarnTable& yarn, float* c, float* s) {
  if (!yarn.active) {
    rope_cos_sin(pos, freqs.f[i], c, s);
    return;
  }
  float th = __fmul_rn(static_cast<float>(pos), freqs.f[i]);
  const float interp = __fmul_rn(yarn.freq_scale, th);
  th = __fadd_rn(__fmul_rn(interp, yarn.one_minus_mix[i]), __fmul_rn(th, yarn.mix[i]));
  double sd, cd;
  sincos(static_cast<double>(th), &sd, &cd);
  *c = __fmul_rn(static_cast<float>(cd), yarn.mscale);
  *s = __fmul_rn(static_cast<float>(sd), yarn.mscale);
}

// The CPU's rotation, without FMA contraction: y0 = x0 c - x1 s, y1 = x0 s + x1 c.
__device__ __forceinline__ void rope_rotate(float x0, float x1, float c, float s, float* y0,
                                            float* y1) {
  *y0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
  *y1 = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

// Host-side launch checks: whether `p` is a multiple of `n` (a power of 2).
inline bool AlignedTo(const void* p, uintptr_t n) {
  return (reinterpret_cast<uintptr_t>(p) & (n - 1)) == 0;
}

// Smallest block scale the int8 activation format keeps (FLT_MIN, as
// engine/quant/vec_dot_internal.h kQ8AMinScale): smaller blocks become 0.
inline constexpr float kQ8AMinScale = 1.17549435e-38f;

// exp(x) rounded to float from a double evaluation (elementwise.cu: the
// CPU's expf within the rounding of the final float).
__device__ __forceinline__ float exp_f(float x) {
  return static_cast<float>(exp(static_cast<double>(x)));
}

// The CPU's silu: a / (1 + exp(-a)), in float with that operation order.
__device__ __forceinline__ float silu_f(float a) { return a / (1.0f + exp_f(-a)); }

// One 32-value block of int8 activations, as the CPU's QuantizeRowQ8A makes
// it: codes packed 4 per word, d = absmax / 127, s = d * sum(codes).
struct Q8Group {
  uint32_t packed;  // this lane's 4 codes (values 4 * (lane & 7) ...)
  float d;
  float s;
};

// Quantizes the 32 values that 8 adjacent lanes (lane & 7 = position in the
// block) hold as one float4 each, bit for bit as QuantizeRowQ8A: every lane
// of the group gets the block's d and s and its own 4 codes. All 32 lanes of
// the warp must call it (full-mask shuffles); lanes without data pass zeros.
__device__ __forceinline__ Q8Group QuantizeQ8Group(float4 v) {
  float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
  for (int off = 1; off < 8; off <<= 1) {
    amax = fmaxf(amax, __shfl_xor_sync(kFullWarpMask, amax, off));
  }
  float d = __fdiv_rn(amax, 127.0f);
  if (!(d >= kQ8AMinScale)) d = 0.0f;
  const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
  // |v * id| <= 127 (+ rounding), so the int8 conversion never saturates.
  const int q0 = __float2int_rn(__fmul_rn(v.x, id));
  const int q1 = __float2int_rn(__fmul_rn(v.y, id));
  const int q2 = __float2int_rn(__fmul_rn(v.z, id));
  const int q3 = __float2int_rn(__fmul_rn(v.w, id));
  int sum = q0 + q1 + q2 + q3;
#pragma unroll
  for (int off = 1; off < 8; off <<= 1) sum += __shfl_xor_sync(kFullWarpMask, sum, off);
  Q8Group g;
  g.packed = (static_cast<uint32_t>(q0) & 0xFF) | ((static_cast<uint32_t>(q1) & 0xFF) << 8) |
             ((static_cast<uint32_t>(q2) & 0xFF) << 16) | (static_cast<uint32_t>(q3) << 24);
  g.d = d;
  g.s = __fmul_rn(d, static_cast<float>(sum));
  return g;
}

// A lane's 4 codes of a Q8Group as the DQ GEMM's activations (dq_gemm.h):
// the f16 values d * q of elements 0, 2 (first word) and 1, 3 (second).
__device__ __forceinline__ uint2 DqPack(const Q8Group& g) {
  auto val = [&](int i) {
    const int code = static_cast<int8_t>((g.packed >> (8 * i)) & 0xFF);
    return __half_as_ushort(__float2half_rn(__fmul_rn(g.d, static_cast<float>(code))));
  };
  return make_uint2(static_cast<uint32_t>(val(0)) | (static_cast<uint32_t>(val(2)) << 16),
                    static_cast<uint32_t>(val(1)) | (static_cast<uint32_t>(val(3)) << 16));
}

}  // namespace minfer::cuda

#endif  // MINFER_CUDA_KERNELS_COMMON_CUH_
