// The bodies of the logit kernels, written once over GCC vector types and
// compiled three times: by logit_kernels.cc with 4-float vectors (portable),
// by logit_kernels_avx2.cc with 8-float vectors and by
// logit_kernels_avx512.cc with 16-float vectors, the last two under
// `#pragma GCC target`.
//
// Everything here lives in an unnamed namespace on purpose: each including
// translation unit must get its own copy, compiled with its own target
// flags. Shared inline symbols would let the linker pick an AVX copy for the
// portable caller (an ODR violation that crashes on CPUs without AVX).
//
// Bit-identical results across widths come from the lane discipline: every
// reduction uses kLanes = 16 logical lanes, element i of a group of 16
// always lands in lane i, lanes are combined in a fixed order, and no
// operation is fused (the library builds with -ffp-contract=off; without it
// GCC contracts into FMA as soon as the target has FMA, e.g. AVX-512).
#ifndef MINFER_ENGINE_SAMPLING_LOGIT_KERNELS_INL_H_
#define MINFER_ENGINE_SAMPLING_LOGIT_KERNELS_INL_H_

#include <cstdint>
#include <cstring>
#include <limits>

#include "engine/sampling/logit_kernels.h"

namespace minfer {
namespace sampling_internal {
namespace {

inline constexpr int kLanes = 16;
// Float lane accumulators are flushed into double lanes this often (in
// groups of 16 elements), so a 152k-token sum loses no more than a 4k-token
// float sum would.
inline constexpr int64_t kFlushGroups = 256;

// F: kW floats. Companions (GCC ignores vector_size on dependent typedefs,
// so the including file spells them out): I = kW int32, H = kW uint16,
// U = 2 kW uint16, Q = kW / 2 uint64 (F's size).
template <typename F, typename I, typename H, typename U, typename Q>
struct KernelImpl {
  static constexpr int kW = sizeof(F) / sizeof(float);
  static constexpr int kParts = kLanes / kW;
  static_assert(kParts * kW == kLanes);
  static_assert(sizeof(I) == sizeof(F) && sizeof(U) == sizeof(F) &&
                sizeof(Q) == sizeof(F) && 2 * sizeof(H) == sizeof(F));

  template <typename V>
  static V LoadV(const void* p) {
    V v;
    std::memcpy(&v, p, sizeof(v));
    return v;
  }
  static F Load(const float* p) { return LoadV<F>(p); }
  static void Store(float* p, F v) { std::memcpy(p, &v, sizeof(v)); }
  template <typename V, typename T>
  static V SplatV(T x) {
    V v;
    for (int j = 0; j < static_cast<int>(sizeof(V) / sizeof(T)); ++j) v[j] = x;
    return v;
  }
  static F Splat(float x) { return SplatV<F>(x); }
  static I SplatI(int32_t x) { return SplatV<I>(x); }

  // exp(x) for x <= 0, relative error < 1e-7 down to x = -87, 0 below
  // (including -inf), exactly 1 at 0. Cephes-style: x = n ln2 + r with
  // |r| <= ln2/2, a degree-7 polynomial for e^r, and 2^n built in the
  // exponent bits. Rounding to nearest uses the 1.5 * 2^23 trick, which is
  // exact for |x log2 e| < 2^22 and needs no SSE4.1 round instruction.
  static F Exp(F x) {
    const F lo = Splat(-87.0f);
    const I under = x < lo;
    const F xc = under ? lo : x;
    const F t = xc * 1.44269504088896341f;
    const F nf = (t + 12582912.0f) - 12582912.0f;
    const F r = (xc - nf * 0.693359375f) - nf * -2.12194440e-4f;
    F p = Splat(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const F y = p * r * r + r + 1.0f;
    const I n = __builtin_convertvector(nf, I);
    const F scale = reinterpret_cast<F>((n + 127) << 23);
    return under ? Splat(0.0f) : y * scale;
  }

  static MaxResult Max(const float* l, int64_t n) {
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    F m[kParts];
    I nan[kParts];
    for (int k = 0; k < kParts; ++k) {
      m[k] = Splat(kNegInf);
      nan[k] = SplatI(0);
    }
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      for (int k = 0; k < kParts; ++k) {
        const F x = Load(l + i + k * kW);
        m[k] = x > m[k] ? x : m[k];  // NaN never compares greater
        nan[k] |= x != x;
      }
    }
    MaxResult result{kNegInf, false};
    for (int k = 0; k < kParts; ++k) {
      for (int j = 0; j < kW; ++j) {
        if (m[k][j] > result.max) result.max = m[k][j];
        if (nan[k][j] != 0) result.has_nan = true;
      }
    }
    for (; i < n; ++i) {
      if (l[i] > result.max) result.max = l[i];
      if (l[i] != l[i]) result.has_nan = true;
    }
    return result;
  }

  // True if some lane of the comparison mask is set.
  static bool Any(I mask) {
    const Q q = reinterpret_cast<Q>(mask);
    uint64_t any = 0;
    for (int j = 0; j < static_cast<int>(sizeof(Q) / 8); ++j) any |= q[j];
    return any != 0;
  }

  static int64_t FirstAbove(const float* l, int64_t begin, int64_t n,
                            float threshold) {
    const F t = Splat(threshold);
    int64_t i = begin;
    // Four vectors per test: the common case (nothing above) costs one
    // branch per 4 kW elements.
    for (; i + 4 * kW <= n; i += 4 * kW) {
      const I m = (Load(l + i) > t) | (Load(l + i + kW) > t) |
                  (Load(l + i + 2 * kW) > t) | (Load(l + i + 3 * kW) > t);
      if (Any(m)) break;
    }
    for (; i < n; ++i) {
      if (l[i] > threshold) return i;
    }
    return n;
  }

  // One group of 16: accumulates exp(d) into acc, stores the tempered exp
  // (if p) and accumulates it into pacc.
  template <bool kTempered, bool kStore>
  static void ExpGroup(const float* l, float* p, F max, float inv_temp, F* acc,
                       F* pacc) {
    for (int k = 0; k < kParts; ++k) {
      const F d = Load(l + k * kW) - max;
      const F e = Exp(d);
      acc[k] += e;
      if constexpr (kStore) {
        const F pe = kTempered ? Exp(d * inv_temp) : e;
        Store(p + k * kW, pe);
        if constexpr (kTempered) pacc[k] += pe;
      }
    }
  }

  // Lane sums, flushed from float into double every kFlushGroups groups.
  struct LaneSums {
    double total[kLanes] = {};
    F acc[kParts];
    LaneSums() {
      for (int k = 0; k < kParts; ++k) acc[k] = Splat(0.0f);
    }
    void Flush() {
      for (int k = 0; k < kParts; ++k) {
        for (int j = 0; j < kW; ++j) total[k * kW + j] += acc[k][j];
        acc[k] = Splat(0.0f);
      }
    }
    double Sum() const {
      double sum = 0.0;
      for (int j = 0; j < kLanes; ++j) sum += total[j];
      return sum;
    }
  };

  template <bool kTempered, bool kStore>
  static double ExpSumT(const float* l, int64_t n, float max_value,
                        float inv_temp, float* p, double* p_sum) {
    const F max = Splat(max_value);
    LaneSums e_sums, p_sums;
    int64_t i = 0;
    while (i + kLanes <= n) {
      // Inner loop without the flush check, so it stays tight.
      const int64_t groups =
          (n - i) / kLanes < kFlushGroups ? (n - i) / kLanes : kFlushGroups;
      const int64_t end = i + groups * kLanes;
      for (; i < end; i += kLanes) {
        ExpGroup<kTempered, kStore>(l + i, kStore ? p + i : nullptr, max,
                                    inv_temp, e_sums.acc, p_sums.acc);
      }
      e_sums.Flush();
      p_sums.Flush();
    }
    if (i < n) {
      // The tail goes through the same lanes, padded with -inf (exp = 0).
      float lt[kLanes];
      float pt[kLanes];
      for (int j = 0; j < kLanes; ++j) {
        lt[j] = i + j < n ? l[i + j] : -std::numeric_limits<float>::infinity();
      }
      ExpGroup<kTempered, kStore>(lt, pt, max, inv_temp, e_sums.acc,
                                  p_sums.acc);
      if (kStore) std::memcpy(p + i, pt, (n - i) * sizeof(float));
      e_sums.Flush();
      p_sums.Flush();
    }
    const double sum = e_sums.Sum();
    if (p_sum != nullptr) *p_sum = kTempered ? p_sums.Sum() : sum;
    return sum;
  }

  static double ExpSum(const float* l, int64_t n, float max, float inv_temp,
                       float* p, double* p_sum) {
    if (p == nullptr) {
      const double sum =
          ExpSumT<false, false>(l, n, max, 1.0f, nullptr, nullptr);
      if (p_sum != nullptr) *p_sum = sum;  // never requested; keep it defined
      return sum;
    }
    return inv_temp == 1.0f
               ? ExpSumT<false, true>(l, n, max, inv_temp, p, p_sum)
               : ExpSumT<true, true>(l, n, max, inv_temp, p, p_sum);
  }

  static void KeptBlockMass(const float* p, int64_t n, float cut_p,
                            int32_t cut_id, double* block_mass) {
    const F cut = Splat(cut_p);
    const I cut_i = SplatI(cut_id);
    I iota;
    for (int j = 0; j < kW; ++j) iota[j] = j;
    for (int64_t b = 0; b * kMassBlock < n; ++b) {
      const int64_t begin = b * kMassBlock;
      const int64_t end = begin + kMassBlock < n ? begin + kMassBlock : n;
      F acc[kParts];
      for (int k = 0; k < kParts; ++k) acc[k] = Splat(0.0f);
      auto group = [&](const float* src, int64_t base) {
        for (int k = 0; k < kParts; ++k) {
          const F x = Load(src + k * kW);
          const I id = SplatI(static_cast<int32_t>(base + k * kW)) + iota;
          const I kept = (x > cut) | ((x == cut) & (id <= cut_i));
          acc[k] += kept ? x : Splat(0.0f);
        }
      };
      int64_t i = begin;
      for (; i + kLanes <= end; i += kLanes) group(p + i, i);
      if (i < end) {
        float pt[kLanes] = {};  // padding with 0 adds nothing
        std::memcpy(pt, p + i, (end - i) * sizeof(float));
        group(pt, i);
      }
      double sum = 0.0;
      for (int k = 0; k < kParts; ++k) {
        for (int j = 0; j < kW; ++j) sum += acc[k][j];
      }
      block_mass[b] = sum;
    }
  }

  static H BucketGroup(F x, F floor, I* nonzero) {
    I b = (reinterpret_cast<I>(x) >> kBucketShift) - (kBucketBase - 1);
    b = b < 1 ? SplatI(1) : b;
    b = b > kNumBuckets - 1 ? SplatI(kNumBuckets - 1) : b;
    const I in = x >= floor;  // NaN fails >= too
    *nonzero -= in;           // true lanes are -1
    b = in ? b : SplatI(0);
    return __builtin_convertvector(b, H);
  }

  static int64_t BucketIds(const float* p, int64_t n, float floor_value,
                           uint16_t* ids) {
    const F floor = Splat(floor_value);
    I nonzero = SplatI(0);
    int64_t i = 0;
    for (; i + kW <= n; i += kW) {
      const H h = BucketGroup(Load(p + i), floor, &nonzero);
      std::memcpy(ids + i, &h, sizeof(h));
    }
    if (i < n) {
      float pt[kW];
      for (int j = 0; j < kW; ++j) pt[j] = -1.0f;  // below any floor >= 0
      std::memcpy(pt, p + i, (n - i) * sizeof(float));
      const H h = BucketGroup(Load(pt), floor, &nonzero);
      std::memcpy(ids + i, &h, (n - i) * sizeof(uint16_t));
    }
    int64_t count = 0;
    for (int j = 0; j < kW; ++j) count += nonzero[j];
    return count;
  }

  static int64_t FindId(const uint16_t* ids, int64_t n, uint16_t value,
                        int64_t max_count, int32_t* out) {
    constexpr int kU = 2 * kW;  // uint16 lanes per vector
    const U v = SplatV<U>(value);
    int64_t count = 0;
    int64_t i = 0;
    for (; i + kU <= n && count < max_count; i += kU) {
      const Q hit = reinterpret_cast<Q>(LoadV<U>(ids + i) == v);
      uint64_t any = 0;
      for (int j = 0; j < static_cast<int>(sizeof(Q) / 8); ++j) any |= hit[j];
      if (any == 0) continue;  // the common case: no match among 2 kW ids
      for (int j = 0; j < kU && count < max_count; ++j) {
        if (ids[i + j] == value) out[count++] = static_cast<int32_t>(i + j);
      }
    }
    for (; i < n && count < max_count; ++i) {
      if (ids[i] == value) out[count++] = static_cast<int32_t>(i);
    }
    return count;
  }

  static constexpr LogitKernels kTable = {&Max,           &FirstAbove, &ExpSum,
                                          &KeptBlockMass, &BucketIds,  &FindId};
};

}  // namespace
}  // namespace sampling_internal
}  // namespace minfer

#endif  // MINFER_ENGINE_SAMPLING_LOGIT_KERNELS_INL_H_
