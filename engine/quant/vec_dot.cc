// Scalar reference kernels and ISA dispatch for vec_dot.h.
//
// The scalar kernels are the numerics contract written out: exact integer
// dot per (sub-)block, then one fused multiply-add per block into a single
// float accumulator. Every SIMD kernel computes the same integers and
// performs the same float operations in the same order, which is what makes
// them bit-identical to this code. std::fma is exact (one rounding) with or
// without hardware FMA.
#include "engine/quant/vec_dot.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "engine/quant/fp16.h"
#include "engine/quant/vec_dot_internal.h"

namespace minfer {
namespace {

using fp16_internal::FloatBits;

// Exact integer dot of n weight codes with n activation codes.
inline int32_t IntDot(const int* w, const int8_t* a, int n) {
  int32_t s = 0;
  for (int i = 0; i < n; ++i) s += w[i] * a[i];
  return s;
}

uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// ---------------------------------------------------------- 32-block types

// Legacy block types: Decode(block, w[32]) writes the integer weights the
// lanes multiply (offset applied), Scale(block) d, and Min(block) m
// (kHasMin types only). HalfScale: the fp16 d most of them carry.
template <class B>
struct HalfScale {
  static float Scale(const B& b) { return Fp16ToFloat(b.d); }
};
struct Q4_0Ref : HalfScale<BlockQ4_0> {
  using Block = BlockQ4_0;
  static constexpr bool kHasMin = false;
  static void Decode(const Block& b, int* w) {
    for (int j = 0; j < 16; ++j) {
      w[j] = (b.qs[j] & 0x0F) - 8;
      w[j + 16] = (b.qs[j] >> 4) - 8;
    }
  }
  static float Min(const Block&) { return 0.0f; }
};

struct Q4_1Ref : HalfScale<BlockQ4_1> {
  using Block = BlockQ4_1;
  static constexpr bool kHasMin = true;
  static void Decode(const Block& b, int* w) {
    for (int j = 0; j < 16; ++j) {
      w[j] = b.qs[j] & 0x0F;
      w[j + 16] = b.qs[j] >> 4;
    }
  }
  static float Min(const Block& b) { return Fp16ToFloat(b.m); }
};

struct Q5_0Ref : HalfScale<BlockQ5_0> {
  using Block = BlockQ5_0;
  static constexpr bool kHasMin = false;
  static void Decode(const Block& b, int* w) {
    const uint32_t qh = LoadU32(b.qh);
    for (int j = 0; j < 16; ++j) {
      w[j] = ((b.qs[j] & 0x0F) | (((qh >> j) & 1) << 4)) - 16;
      w[j + 16] = ((b.qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
    }
  }
  static float Min(const Block&) { return 0.0f; }
};

struct Q5_1Ref : HalfScale<BlockQ5_1> {
  using Block = BlockQ5_1;
  static constexpr bool kHasMin = true;
  static void Decode(const Block& b, int* w) {
    const uint32_t qh = LoadU32(b.qh);
    for (int j = 0; j < 16; ++j) {
      w[j] = (b.qs[j] & 0x0F) | (((qh >> j) & 1) << 4);
      w[j + 16] = (b.qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    }
  }
  static float Min(const Block& b) { return Fp16ToFloat(b.m); }
};

struct Q8_0Ref : HalfScale<BlockQ8_0> {
  using Block = BlockQ8_0;
  static constexpr bool kHasMin = false;
  static void Decode(const Block& b, int* w) {
    for (int j = 0; j < 32; ++j) w[j] = b.qs[j];
  }
  static float Min(const Block&) { return 0.0f; }
};

// MXFP4: signed values from the table, d from the shared exponent.
struct MXFP4Ref {
  using Block = BlockMXFP4;
  static constexpr bool kHasMin = false;
  static void Decode(const Block& b, int* w) {
    for (int j = 0; j < 16; ++j) {
      w[j] = kMxfp4Values[b.qs[j] & 0x0F];
      w[j + 16] = kMxfp4Values[b.qs[j] >> 4];
    }
  }
  static float Scale(const Block& b) { return Mxfp4Scale(b.e); }
  static float Min(const Block&) { return 0.0f; }
};

template <class T>
float VecDot32(const void* w_row, const BlockQ8A* a, int64_t n) {
  const auto* x = static_cast<const typename T::Block*>(w_row);
  float acc = 0.0f;
  int w[kQK];
  for (int64_t b = 0; b < n / kQK; ++b) {
    T::Decode(x[b], w);
    const int32_t isum = IntDot(w, a[b].qs, kQK);
    acc = std::fma(static_cast<float>(isum), T::Scale(x[b]) * a[b].d, acc);
    if constexpr (T::kHasMin) acc = std::fma(T::Min(x[b]), a[b].s, acc);
  }
  return acc;
}

// -------------------------------------------------------------- K-quants

template <int kBits>
float VecDotQ45K(const void* w_row, const BlockQ8A* a, int64_t n) {
  static_assert(kBits == 4 || kBits == 5);
  float acc = 0.0f;
  int w[kQK];
  for (int64_t i = 0; i < n / kQKK; ++i, a += 8) {
    const uint8_t* scales;
    const uint8_t* qs;
    const uint8_t* qh = nullptr;
    float d, dmin;
    if constexpr (kBits == 4) {
      const auto& b = static_cast<const BlockQ4_K*>(w_row)[i];
      scales = b.scales, qs = b.qs, d = Fp16ToFloat(b.d), dmin = Fp16ToFloat(b.dmin);
    } else {
      const auto& b = static_cast<const BlockQ5_K*>(w_row)[i];
      scales = b.scales, qs = b.qs, qh = b.qh;
      d = Fp16ToFloat(b.d), dmin = Fp16ToFloat(b.dmin);
    }
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      Q4KScaleMin(scales, j, &sc, &m);
      const uint8_t* q = qs + 32 * (j / 2);
      for (int l = 0; l < 32; ++l) {
        w[l] = (j % 2 == 0) ? (q[l] & 0x0F) : (q[l] >> 4);
        if constexpr (kBits == 5) w[l] |= ((qh[l] >> j) & 1) << 4;
      }
      const float ws = d * static_cast<float>(sc);
      const float wm = dmin * static_cast<float>(m);
      acc = std::fma(static_cast<float>(IntDot(w, a[j].qs, kQK)), ws * a[j].d, acc);
      acc = std::fma(-wm, a[j].s, acc);
    }
  }
  return acc;
}

float VecDotQ6_K(const void* w_row, const BlockQ8A* a, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(w_row);
  float acc = 0.0f;
  int w[kQK];
  for (int64_t i = 0; i < n / kQKK; ++i, a += 8) {
    const float d = Fp16ToFloat(x[i].d);
    for (int g = 0; g < 8; ++g) {
      const int half = g / 4, gg = g % 4;
      const uint8_t* ql = x[i].ql + 64 * half + 32 * (gg & 1);
      const uint8_t* qh = x[i].qh + 32 * half;
      for (int l = 0; l < 32; ++l) {
        const int low = gg < 2 ? (ql[l] & 0x0F) : (ql[l] >> 4);
        w[l] = (low | (((qh[l] >> (2 * gg)) & 3) << 4)) - 32;
      }
      // Elements 0-15 and 16-31 of the group have scales 2g and 2g+1.
      for (int h = 0; h < 2; ++h) {
        const float ws = d * static_cast<float>(x[i].scales[2 * g + h]);
        const int32_t isum = IntDot(w + 16 * h, a[g].qs + 16 * h, 16);
        acc = std::fma(static_cast<float>(isum), ws * a[g].d, acc);
      }
    }
  }
  return acc;
}

template <VecDotQ8AFn kVecDot>
void MatDotByPairs(const void* w, int64_t w_stride, const BlockQ8A* a,
                   int64_t a_stride, float* out, int64_t out_stride, int nrows,
                   int ncols, int64_t n) {
  for (int c = 0; c < ncols; ++c) {
    for (int r = 0; r < nrows; ++r) {
      out[c * out_stride + r] =
          kVecDot(static_cast<const uint8_t*>(w) + r * w_stride, a + c * a_stride, n);
    }
  }
}

template <VecDotQ8AFn kVecDot>
constexpr Q8AKernels kScalarQ8A = {kVecDot, MatDotByPairs<kVecDot>};

const Q8AKernels* Q8AKernelsScalar(GgmlType wtype) {
  switch (wtype) {
    case GgmlType::kQ4_0: return &kScalarQ8A<VecDot32<Q4_0Ref>>;
    case GgmlType::kQ4_1: return &kScalarQ8A<VecDot32<Q4_1Ref>>;
    case GgmlType::kQ5_0: return &kScalarQ8A<VecDot32<Q5_0Ref>>;
    case GgmlType::kQ5_1: return &kScalarQ8A<VecDot32<Q5_1Ref>>;
    case GgmlType::kQ8_0: return &kScalarQ8A<VecDot32<Q8_0Ref>>;
    case GgmlType::kMXFP4: return &kScalarQ8A<VecDot32<MXFP4Ref>>;
    case GgmlType::kQ4_K: return &kScalarQ8A<VecDotQ45K<4>>;
    case GgmlType::kQ5_K: return &kScalarQ8A<VecDotQ45K<5>>;
    case GgmlType::kQ6_K: return &kScalarQ8A<VecDotQ6_K>;
    default: return nullptr;
  }
}

// ------------------------------------------------------------ float dots

// ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)): the SIMD kernels' reduction tree.
inline float Reduce(const float* l) {
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

inline float LoadF32(const float* p, int64_t i) { return p[i]; }
inline float LoadF16(const uint16_t* p, int64_t i) { return Fp16ToFloat(p[i]); }
inline float LoadBF16(const uint16_t* p, int64_t i) { return Bf16ToFloat(p[i]); }

template <class Elem, float (*kLoad)(const Elem*, int64_t)>
float VecDotFloat(const void* w_row, const float* x, int64_t n) {
  const auto* w = static_cast<const Elem*>(w_row);
  float acc[4][8] = {};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int u = 0; u < 4; ++u) {
      for (int k = 0; k < 8; ++k) {
        const int64_t e = i + 8 * u + k;
        acc[u][k] = std::fma(kLoad(w, e), x[e], acc[u][k]);
      }
    }
  }
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[0][k] = std::fma(kLoad(w, i + k), x[i + k], acc[0][k]);
  }
  float lanes[8];
  for (int k = 0; k < 8; ++k) lanes[k] = (acc[0][k] + acc[1][k]) + (acc[2][k] + acc[3][k]);
  float tail = 0.0f;
  for (; i < n; ++i) tail = std::fma(kLoad(w, i), x[i], tail);
  return Reduce(lanes) + tail;
}

template <VecDotF32Fn kVecDot>
void MatDotFloatByPairs(const void* w, int64_t w_stride, const float* x,
                        int64_t x_stride, float* out, int64_t out_stride,
                        int nrows, int ncols, int64_t n) {
  for (int c = 0; c < ncols; ++c) {
    for (int r = 0; r < nrows; ++r) {
      out[c * out_stride + r] =
          kVecDot(static_cast<const uint8_t*>(w) + r * w_stride, x + c * x_stride, n);
    }
  }
}

template <VecDotF32Fn kVecDot>
constexpr F32Kernels kScalarF32 = {kVecDot, MatDotFloatByPairs<kVecDot>};

const F32Kernels* F32KernelsScalar(GgmlType wtype) {
  switch (wtype) {
    case GgmlType::kF32: return &kScalarF32<VecDotFloat<float, LoadF32>>;
    case GgmlType::kF16: return &kScalarF32<VecDotFloat<uint16_t, LoadF16>>;
    case GgmlType::kBF16: return &kScalarF32<VecDotFloat<uint16_t, LoadBF16>>;
    default: return nullptr;
  }
}

// ---------------------------------------------------- activation quantize

void QuantizeRowQ8AScalar(const float* x, BlockQ8A* out, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    float d = amax / 127.0f;
    if (!(d >= vec_dot_internal::kQ8AMinScale)) d = 0.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int32_t sum = 0;
    for (int j = 0; j < kQK; ++j) {
      // Round half to even via the 1.5 * 2^23 trick (|x * id| <= 127.01).
      const int q = static_cast<int32_t>(FloatBits(x[j] * id + 12582912.0f) - 0x4B400000u);
      out[b].qs[j] = static_cast<int8_t>(q);
      sum += q;
    }
    out[b].d = d;
    out[b].s = d * static_cast<float>(sum);
  }
}

}  // namespace

void QuantizeRowQ8A(CpuIsa isa, const float* x, BlockQ8A* out, int64_t n) {
  if (!CpuIsaSupported(isa)) std::abort();  // caller bug
  if (isa == CpuIsa::kScalar) return QuantizeRowQ8AScalar(x, out, n);
  vec_dot_internal::QuantizeRowQ8AAvx2(x, out, n);
}

void QuantizeRowQ8A(const float* x, BlockQ8A* out, int64_t n) {
  QuantizeRowQ8A(BestCpuIsa(), x, out, n);
}

const Q8AKernels* GetQ8AKernels(GgmlType wtype, CpuIsa isa) {
  if (!CpuIsaSupported(isa)) return nullptr;
  switch (isa) {
    case CpuIsa::kScalar: return Q8AKernelsScalar(wtype);
    case CpuIsa::kAvx2: return vec_dot_internal::Q8AKernelsAvx2(wtype);
    case CpuIsa::kAvx512Vnni: return vec_dot_internal::Q8AKernelsAvx512Vnni(wtype);
  }
  return nullptr;
}

float VecDotQ8A(GgmlType wtype, const void* w_row, const BlockQ8A* a, int64_t n) {
  const Q8AKernels* k = GetQ8AKernels(wtype);
  if (k == nullptr) std::abort();  // contract: supported type
  return k->vec_dot(w_row, a, n);
}

const F32Kernels* GetF32Kernels(GgmlType wtype, CpuIsa isa) {
  if (!CpuIsaSupported(isa)) return nullptr;
  if (isa == CpuIsa::kScalar) return F32KernelsScalar(wtype);
  return vec_dot_internal::F32KernelsAvx2(wtype);  // VNNI adds nothing here
}

float VecDotF32(GgmlType wtype, const void* w_row, const float* x, int64_t n) {
  const F32Kernels* k = GetF32Kernels(wtype);
  if (k == nullptr) std::abort();  // contract: supported type
  return k->vec_dot(w_row, x, n);
}

}  // namespace minfer
