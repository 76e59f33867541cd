// Vectorized passes over a full vocabulary of logits, internal to the
// sampler (not a public API of engine/sampling).
//
// Every kernel exists in three builds of one source (logit_kernels_inl.h):
// portable (GCC vector extensions, 4-wide: SSE2 on x86-64), AVX2 (8-wide) and
// AVX-512 F+BW (16-wide), picked once at run time from GetCpuFeatures()
// (MINFER_FORCE_SCALAR=1 forces the portable one). All accumulate into the
// same 16 logical lanes in the same order with the same unfused float
// operations, so their results are bit-identical: a seed reproduces the same
// tokens whichever build runs.
//
// All functions are pure and thread-safe.
#ifndef MINFER_ENGINE_SAMPLING_LOGIT_KERNELS_H_
#define MINFER_ENGINE_SAMPLING_LOGIT_KERNELS_H_

#include <cstdint>

namespace minfer {
namespace sampling_internal {

// Elements per mass block of KeptBlockMass (a multiple of the 16 lanes).
inline constexpr int64_t kMassBlock = 1024;

// Top-p histogram buckets (see bucket_ids): for p >= 0 the float bits are
// monotone in p, so bits >> kBucketShift orders buckets like p, each 1/256
// of an octave (~0.27% of p) wide. Buckets start at p = 2^-64; smaller
// survivors share bucket 1 (the sampler never needs to split it: see
// Sampler::ComputeTopPCut). Bucket 0 collects the elements left out.
inline constexpr int kBucketShift = 15;
inline constexpr int32_t kBucketBase = (63 << 23) >> kBucketShift;  // 2^-64
inline constexpr int32_t kNumBuckets =
    ((127 << 23) >> kBucketShift) - kBucketBase + 2;  // up to p = 1

struct MaxResult {
  float max = 0.0f;      // largest non-NaN value (-inf if none)
  bool has_nan = false;  // some element is NaN
};

struct LogitKernels {
  // Max over l[0, n) and whether any element is NaN.
  MaxResult (*max)(const float* l, int64_t n);

  // Index of the first i in [begin, n) with l[i] > threshold, or n.
  int64_t (*first_above)(const float* l, int64_t begin, int64_t n,
                         float threshold);

  // Returns sum_i exp(l[i] - max) in double (the softmax normalizer; the
  // caller guarantees l[i] <= max and max finite). If p is not null, also
  // writes p[i] = exp((l[i] - max) * inv_temp): the unnormalized tempered
  // probability, exactly 1 at the maximum and 0 for -inf logits; and if
  // p_sum is not null, stores sum_i p[i] there.
  double (*exp_sum)(const float* l, int64_t n, float max, float inv_temp,
                    float* p, double* p_sum);

  // For each block b of kMassBlock elements (the last may be short), writes
  // block_mass[b] = sum of p[i] over the block's i with
  //   p[i] > cut_p || (p[i] == cut_p && i <= cut_id),
  // i.e. the elements up to (cut_p, cut_id) in the order (p desc, id asc).
  void (*kept_block_mass)(const float* p, int64_t n, float cut_p,
                          int32_t cut_id, double* block_mass);

  // ids[i] = 0 if p[i] < floor (or NaN), else the histogram bucket of p[i]
  // in [1, kNumBuckets): (bits(p) >> kBucketShift) - kBucketBase + 1,
  // clamped. Requires 0 <= p[i] <= 1. Returns the number of nonzero ids.
  int64_t (*bucket_ids)(const float* p, int64_t n, float floor, uint16_t* ids);

  // Writes the indices i with ids[i] == value, in increasing order, to
  // out[0, count) and returns count; stops once `max_count` are found
  // (out must have room for min(max_count, matches)).
  int64_t (*find_id)(const uint16_t* ids, int64_t n, uint16_t value,
                     int64_t max_count, int32_t* out);
};

// The kernels for this CPU (chosen once).
const LogitKernels& GetLogitKernels();
// Each build; the SIMD ones are null if the CPU lacks the instructions.
const LogitKernels& PortableLogitKernels();
const LogitKernels* Avx2LogitKernels();
const LogitKernels* Avx512LogitKernels();

// The SIMD tables without the CPU check (defined in logit_kernels_avx2.cc
// and logit_kernels_avx512.cc); use the checked accessors above.
const LogitKernels& Avx2LogitKernelsUnchecked();
const LogitKernels& Avx512LogitKernelsUnchecked();

// exp(x) as the kernels compute it (portable version, one element): for
// callers that must agree bit-for-bit with exp_sum's p[] (and for tests).
float KernelExp(float x);

}  // namespace sampling_internal
}  // namespace minfer

#endif  // MINFER_ENGINE_SAMPLING_LOGIT_KERNELS_H_
