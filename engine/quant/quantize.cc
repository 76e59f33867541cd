// minfer's quantizers (float rows -> GGUF blocks).
//
// Design:
//  * Every block format stores its scales in f16 (and the K-quants in 6 or 8
//    more bits), so the scales a quantizer picks are not the ones the reader
//    sees. Codes are therefore always assigned against the *decoded* scales,
//    and the guaranteed ("outward") solution rounds scales up in magnitude so
//    the block's range stays covered and no value is clipped.
//  * Where a better-than-min/max solution exists (Q4_0/Q5_0 extreme
//    placement, the K-quants' per-sub-block least-squares fit), the
//    quantizer computes both and keeps the one with the smaller squared
//    error measured on the exact dequantized values. That is what makes the
//    bounds in quantize.h hold while typical errors sit well below them.
//  * One code path for every CPU: scalar code plus SSE2 (baseline x86-64)
//    in the K-quant search loops, no FP contraction (-ffp-contract=off),
//    round-half-to-even everywhere (the default MXCSR mode; the scalar code
//    uses the 1.5 * 2^23 trick, SSE2 cvtps2dq): bit-identical output on
//    every x86-64 CPU.
#include <emmintrin.h>  // SSE2: part of the x86-64 baseline, no dispatch

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/quant/blocks.h"
#include "engine/quant/fp16.h"
#include "engine/quant/quantize.h"

namespace minfer {
namespace {

using fp16_internal::FloatBits;

constexpr uint16_t kMaxHalfBits = 0x7BFF;  // 65504

// Round-to-nearest-even of v; |v| must be <= 2^22 (callers clamp first).
inline int RoundToInt(float v) {
  return static_cast<int32_t>(FloatBits(v + 12582912.0f) - 0x4B400000u);
}

// Clamps into [lo, hi]; NaN becomes lo, so codes stay in range on bad input.
inline float Clamp(float v, float lo, float hi) {
  v = v > lo ? v : lo;
  return v < hi ? v : hi;
}

inline int CeilToInt(float v) {  // |v| <= 2^22
  const int r = RoundToInt(v);
  return static_cast<float>(r) < v ? r + 1 : r;
}

// Smallest half >= x (x >= 0), saturating at 65504.
uint16_t HalfUp(float x) {
  if (!(x > 0.0f)) return 0;
  if (x >= 65504.0f) return kMaxHalfBits;
  uint16_t h = FloatToFp16(x);
  if (Fp16ToFloat(h) < x) ++h;  // next larger positive half
  return h;
}

// Largest half <= x, saturating at -65504.
uint16_t HalfDown(float x) {
  if (x <= -65504.0f) return 0x8000 | kMaxHalfBits;
  if (x >= 65504.0f) return kMaxHalfBits;
  uint16_t h = FloatToFp16(x);
  if (Fp16ToFloat(h) > x) {
    if (h == 0) return 0x8001;              // +0 > x: smallest negative half
    h = (h & 0x8000) ? h + 1 : h - 1;       // one step toward -inf
  }
  return h;
}

// Nearest half, saturating at +-65504 instead of overflowing to inf.
uint16_t HalfNearest(float x) {
  if (x >= 65504.0f) return kMaxHalfBits;
  if (x <= -65504.0f) return 0x8000 | kMaxHalfBits;
  return FloatToFp16(x);
}

// Plain comparisons (std::fmin/fmax are libm calls with NaN rules we do
// not need; inputs are finite by contract).
inline float Min(float a, float b) { return a < b ? a : b; }
inline float Max(float a, float b) { return a > b ? a : b; }

// Reductions go through 8 partial lanes in a fixed order: the compiler can
// vectorize them (a single running float sum cannot be reordered), and the
// result does not depend on the ISA.
inline float Sum8(const float* v) {
  return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

// Horizontal sum of two 4-lane partial sums (lanes 0-3 in a, 4-7 in b), in
// Sum8's order.
inline float Sum8(__m128 a, __m128 b) {
  alignas(16) float v[8];
  _mm_store_ps(v, a);
  _mm_store_ps(v + 4, b);
  return Sum8(v);
}

// round-half-to-even of clamp(v, lo, hi) as a float (v finite).
inline __m128 RoundClamp(__m128 v, __m128 lo, __m128 hi) {
  return _mm_cvtepi32_ps(_mm_cvtps_epi32(_mm_min_ps(_mm_max_ps(v, lo), hi)));
}

// Min and max of x[0..n), n a multiple of 8.
inline void MinMax(const float* x, int n, float* mn_out, float* mx_out) {
  float mn[8], mx[8];
  for (int k = 0; k < 8; ++k) mn[k] = mx[k] = x[k];
  for (int i = 8; i < n; i += 8) {
    for (int k = 0; k < 8; ++k) {
      mn[k] = Min(mn[k], x[i + k]);
      mx[k] = Max(mx[k], x[i + k]);
    }
  }
  float a = mn[0], b = mx[0];
  for (int k = 1; k < 8; ++k) a = Min(a, mn[k]), b = Max(b, mx[k]);
  *mn_out = a;
  *mx_out = b;
}

float AbsMax(const float* x, int n) {
  float mn, mx;
  MinMax(x, n, &mn, &mx);
  return Max(-mn, mx);
}

// The value of largest magnitude, keeping its sign (first one on ties).
// The value of largest magnitude, keeping its sign (the positive one when
// both +a and -a occur).
float SignedExtreme(const float* x, int n) {
  float mn, mx;
  MinMax(x, n, &mn, &mx);
  return -mn > mx ? mn : mx;
}

// ---------------------------------------------------------------- float types

void QuantizeF32(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void QuantizeF16(const float* src, void* dst, int64_t n) {
  FloatToFp16Row(src, static_cast<uint16_t*>(dst), n);
}

void QuantizeBF16(const float* src, void* dst, int64_t n) {
  FloatToBf16Row(src, static_cast<uint16_t*>(dst), n);
}

// ------------------------------------------------------- symmetric 32-blocks

// Codes of a symmetric block: q = round(x / d) clamped to [lo, hi], scored by
// the squared error of q * d (the exact dequantized value).
struct SymCodes {
  int8_t q[kQK];
  float sse;
};

void AssignSymmetric(const float* x, float d, int lo, int hi, SymCodes* out) {
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  float sse[8] = {};
  for (int i = 0; i < kQK; i += 8) {
    for (int k = 0; k < 8; ++k) {
      const int q = RoundToInt(Clamp(x[i + k] * id, static_cast<float>(lo),
                                     static_cast<float>(hi)));
      out->q[i + k] = static_cast<int8_t>(q);
      const float e = static_cast<float>(q) * d - x[i + k];
      sse[k] += e * e;
    }
  }
  out->sse = Sum8(sse);
}

// Q4_0 / Q5_0: codes in [-2^(b-1), 2^(b-1) - 1]. Two placements of the
// extreme value M: at the wide end (d = M / -2^(b-1), ggml's choice, exact
// for M but clipping the opposite extreme by up to one step) or at the
// narrow end (d = M / (2^(b-1) - 1), nothing clipped); keep the better one.
// Returns the f16 scale bits; codes (biased to unsigned) in `codes`.
uint16_t QuantizeSymmetricBlock(const float* x, int bits, uint8_t codes[kQK]) {
  const int lo = -(1 << (bits - 1));
  const int hi = (1 << (bits - 1)) - 1;
  const float m = SignedExtreme(x, kQK);
  const float a = std::fabs(m);
  uint16_t best_h = 0;
  SymCodes best, cand;
  AssignSymmetric(x, 0.0f, lo, hi, &best);
  if (a > 0.0f) {
    const uint16_t sign = m < 0.0f ? 0x8000 : 0;
    // Wide end: d has the opposite sign of M so that M maps to `lo`.
    const uint16_t h_wide = HalfUp(a / static_cast<float>(-lo)) | (sign ^ 0x8000);
    const uint16_t h_narrow = HalfUp(a / static_cast<float>(hi)) | sign;
    AssignSymmetric(x, Fp16ToFloat(h_wide), lo, hi, &best);
    best_h = h_wide;
    AssignSymmetric(x, Fp16ToFloat(h_narrow), lo, hi, &cand);
    if (cand.sse < best.sse) {
      best = cand;
      best_h = h_narrow;
    }
  }
  for (int i = 0; i < kQK; ++i) codes[i] = static_cast<uint8_t>(best.q[i] - lo);
  return best_h;
}

void QuantizeQ4_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_0*>(dst);
  uint8_t q[kQK];
  for (int64_t b = 0; b < n / kQK; ++b, src += kQK) {
    y[b].d = QuantizeSymmetricBlock(src, 4, q);
    for (int j = 0; j < kQK / 2; ++j) {
      y[b].qs[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
    }
  }
}

void PackQh32(const uint8_t q[kQK], uint8_t qh[4]) {
  uint32_t bits = 0;
  for (int j = 0; j < kQK; ++j) bits |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  std::memcpy(qh, &bits, sizeof(bits));
}

void QuantizeQ5_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_0*>(dst);
  uint8_t q[kQK];
  for (int64_t b = 0; b < n / kQK; ++b, src += kQK) {
    y[b].d = QuantizeSymmetricBlock(src, 5, q);
    PackQh32(q, y[b].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      y[b].qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
    }
  }
}

void QuantizeQ8_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b, src += kQK) {
    // Scale rounded up: |x| / d <= 127, nothing is clipped.
    const uint16_t h = HalfUp(AbsMax(src, kQK) / 127.0f);
    const float d = Fp16ToFloat(h);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = h;
    for (int j = 0; j < kQK; ++j) {
      y[b].qs[j] = static_cast<int8_t>(RoundToInt(Clamp(src[j] * id, -127.0f, 127.0f)));
    }
  }
}

// MXFP4: the shared exponent puts the block's absmax in [8, 16) units of d
// (ggml's choice: e = floor(log2(absmax)) - 2 + 127), each element the
// nearest of the 16 values (ties to the lower code).
void QuantizeMXFP4(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockMXFP4*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b, src += kQK) {
    const float amax = AbsMax(src, kQK);
    int e = 0;
    if (amax > 0.0f && std::isfinite(amax)) {
      e = std::clamp(static_cast<int>(std::floor(std::log2(amax))) - 2 + 127, 0, 254);
    }
    y[b].e = static_cast<uint8_t>(e);
    const float d = Mxfp4Scale(y[b].e);
    uint8_t q[kQK];
    for (int j = 0; j < kQK; ++j) {
      const float v = src[j] / d;
      int best = 0;
      float best_err = std::fabs(v - kMxfp4Values[0]);
      for (int i = 1; i < 16; ++i) {
        const float err = std::fabs(v - kMxfp4Values[i]);
        if (err < best_err) best = i, best_err = err;
      }
      q[j] = static_cast<uint8_t>(best);
    }
    for (int j = 0; j < kQK / 2; ++j) y[b].qs[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
  }
}

// ------------------------------------------------------ asymmetric 32-blocks

// Q4_1 / Q5_1: x ~= q * d + m with q in [0, nq]. m is the block minimum
// rounded down to f16 and d the remaining range over nq rounded up, so the
// whole block is covered.
void QuantizeAffineBlock(const float* x, int nq, uint16_t* d_out,
                         uint16_t* m_out, uint8_t q[kQK]) {
  float mn, mx;
  MinMax(x, kQK, &mn, &mx);
  const uint16_t mh = HalfDown(mn);
  const float m = Fp16ToFloat(mh);
  const uint16_t dh = HalfUp((mx - m) / static_cast<float>(nq));
  const float d = Fp16ToFloat(dh);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int i = 0; i < kQK; ++i) {
    q[i] = static_cast<uint8_t>(
        RoundToInt(Clamp((x[i] - m) * id, 0.0f, static_cast<float>(nq))));
  }
  *d_out = dh;
  *m_out = mh;
}

void QuantizeQ4_1(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_1*>(dst);
  uint8_t q[kQK];
  for (int64_t b = 0; b < n / kQK; ++b, src += kQK) {
    QuantizeAffineBlock(src, 15, &y[b].d, &y[b].m, q);
    for (int j = 0; j < kQK / 2; ++j) {
      y[b].qs[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
    }
  }
}

void QuantizeQ5_1(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_1*>(dst);
  uint8_t q[kQK];
  for (int64_t b = 0; b < n / kQK; ++b, src += kQK) {
    QuantizeAffineBlock(src, 31, &y[b].d, &y[b].m, q);
    PackQh32(q, y[b].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      y[b].qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
    }
  }
}

// ------------------------------------------------------------ Q4_K and Q5_K

// Least-squares search for one sub-block of 32: step s >= 0 and offset
// o <= 0 (the K formats subtract a non-negative min) such that
// x ~= s * q + o, q in [0, nq]. Starts from the min/max fit and from a
// slightly clipping one, and runs two Lloyd rounds (assign codes, refit
// s and o in closed form) from each, keeping the lowest squared error seen.
struct AffineFit {
  float s;
  float o;
};

AffineFit FitAffine32(const float* x, int nq) {
  float mn, mx;
  MinMax(x, kQK, &mn, &mx);
  mn = Min(mn, 0.0f);
  if (!(mx > mn)) return {0.0f, mn};
  float sx8[8] = {};
  for (int i = 0; i < kQK; i += 8)
    for (int k = 0; k < 8; ++k) sx8[k] += x[i + k];
  const float sx = Sum8(sx8);
  const float fnq = static_cast<float>(nq);
  const float range = mx - mn;
  AffineFit best{range / fnq, mn};
  float best_sse = INFINITY;
  const AffineFit starts[2] = {
      {range / fnq, mn},
      {range / (fnq + 1.0f), Min(0.0f, mn + 0.5f * range / (fnq + 1.0f))}};
  for (const AffineFit& start : starts) {
    AffineFit cur = start;
    for (int round = 0; round < 3; ++round) {
      const float id = 1.0f / cur.s;
      const __m128 vo = _mm_set1_ps(cur.o), vs = _mm_set1_ps(cur.s), vid = _mm_set1_ps(id);
      const __m128 zero = _mm_setzero_ps(), top = _mm_set1_ps(fnq);
      __m128 sq[2] = {zero, zero}, sqq[2] = {zero, zero}, sxq[2] = {zero, zero};
      __m128 se[2] = {zero, zero};
      for (int i = 0; i < kQK; i += 8) {
        for (int h = 0; h < 2; ++h) {
          const __m128 v = _mm_loadu_ps(x + i + 4 * h);
          const __m128 q = RoundClamp(_mm_mul_ps(_mm_sub_ps(v, vo), vid), zero, top);
          const __m128 e = _mm_sub_ps(_mm_add_ps(_mm_mul_ps(vs, q), vo), v);
          se[h] = _mm_add_ps(se[h], _mm_mul_ps(e, e));
          sq[h] = _mm_add_ps(sq[h], q);
          sqq[h] = _mm_add_ps(sqq[h], _mm_mul_ps(q, q));
          sxq[h] = _mm_add_ps(sxq[h], _mm_mul_ps(v, q));
        }
      }
      const float sse = Sum8(se[0], se[1]);
      if (sse < best_sse) {
        best_sse = sse;
        best = cur;
      }
      if (round == 2) break;
      // Refit: minimise sum (s q + o - x)^2 over s, o with o <= 0.
      const float s_q = Sum8(sq[0], sq[1]), s_qq = Sum8(sqq[0], sqq[1]);
      const float s_xq = Sum8(sxq[0], sxq[1]);
      const float nn = static_cast<float>(kQK);
      const float det = nn * s_qq - s_q * s_q;
      if (!(det > 0.0f)) break;
      AffineFit next{(nn * s_xq - s_q * sx) / det, 0.0f};
      next.o = (sx - next.s * s_q) / nn;
      if (next.o > 0.0f) next = {s_xq / s_qq, 0.0f};
      if (!(next.s > 0.0f)) break;
      cur = next;
    }
  }
  return best;
}

// Codes and error of one candidate K-quant super-block (8 x 32, affine).
struct KCandidate {
  uint16_t d, dmin;
  uint8_t sc[8], m[8];
  uint8_t q[kQKK];
  float sse;
};

// Assigns codes for the decoded scales of `c` exactly as the reader will
// reconstruct them: y = (d * sc) * q - dmin * m.
void AssignK(const float* x, int nq, KCandidate* c) {
  const float d = Fp16ToFloat(c->d);
  const float dmin = Fp16ToFloat(c->dmin);
  __m128 sse[2] = {_mm_setzero_ps(), _mm_setzero_ps()};
  const __m128 zero = _mm_setzero_ps(), top = _mm_set1_ps(static_cast<float>(nq));
  for (int j = 0; j < 8; ++j) {
    const float d1 = d * c->sc[j];
    const float m1 = dmin * c->m[j];
    const __m128 vd = _mm_set1_ps(d1), vm = _mm_set1_ps(m1);
    const __m128 vid = _mm_set1_ps(d1 != 0.0f ? 1.0f / d1 : 0.0f);
    for (int i = 32 * j; i < 32 * j + 32; i += 8) {
      __m128i qi[2];
      for (int h = 0; h < 2; ++h) {
        const __m128 v = _mm_loadu_ps(x + i + 4 * h);
        const __m128 q = RoundClamp(_mm_mul_ps(_mm_add_ps(v, vm), vid), zero, top);
        qi[h] = _mm_cvtps_epi32(q);
        // Same operations as the reader: (d1 * q) - m1.
        const __m128 e = _mm_sub_ps(_mm_sub_ps(_mm_mul_ps(vd, q), vm), v);
        sse[h] = _mm_add_ps(sse[h], _mm_mul_ps(e, e));
      }
      const __m128i w = _mm_packs_epi32(qi[0], qi[1]);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(c->q + i), _mm_packus_epi16(w, w));
    }
  }
  c->sse = Sum8(sse[0], sse[1]);
}

// The guaranteed solution: offsets and steps rounded outward so every
// sub-block's [min(0, min), max] is covered without clipping.
void OutwardK(const float* x, int nq, KCandidate* c) {
  float mn[8], mx[8], max_neg_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    MinMax(x + 32 * j, 32, &mn[j], &mx[j]);
    mn[j] = Min(mn[j], 0.0f);
    max_neg_min = Max(max_neg_min, -mn[j]);
  }
  c->dmin = HalfUp(max_neg_min / 63.0f);
  const float dmin = Fp16ToFloat(c->dmin);
  float t[8], max_t = 0.0f;
  for (int j = 0; j < 8; ++j) {
    const int m = dmin > 0.0f ? CeilToInt(Clamp(-mn[j] / dmin, 0.0f, 63.0f)) : 0;
    c->m[j] = static_cast<uint8_t>(m);
    t[j] = (mx[j] + dmin * m) / static_cast<float>(nq);  // step that reaches max
    max_t = Max(max_t, t[j]);
  }
  c->d = HalfUp(max_t / 63.0f);
  const float d = Fp16ToFloat(c->d);
  for (int j = 0; j < 8; ++j) {
    c->sc[j] = static_cast<uint8_t>(d > 0.0f ? CeilToInt(Clamp(t[j] / d, 0.0f, 63.0f)) : 0);
  }
  AssignK(x, nq, c);
}

// The searched solution: per-sub-block least-squares fits, then the
// super-block scales and 6-bit codes rounded to nearest.
void FittedK(const float* x, int nq, KCandidate* c) {
  AffineFit fit[8];
  float max_s = 0.0f, max_m = 0.0f;
  for (int j = 0; j < 8; ++j) {
    fit[j] = FitAffine32(x + 32 * j, nq);
    max_s = Max(max_s, fit[j].s);
    max_m = Max(max_m, -fit[j].o);
  }
  c->d = HalfNearest(max_s / 63.0f);
  c->dmin = HalfNearest(max_m / 63.0f);
  const float d = Fp16ToFloat(c->d);
  const float dmin = Fp16ToFloat(c->dmin);
  const float id = d > 0.0f ? 1.0f / d : 0.0f;
  const float idmin = dmin > 0.0f ? 1.0f / dmin : 0.0f;
  for (int j = 0; j < 8; ++j) {
    c->sc[j] = static_cast<uint8_t>(RoundToInt(Clamp(fit[j].s * id, 0.0f, 63.0f)));
    c->m[j] = static_cast<uint8_t>(RoundToInt(Clamp(-fit[j].o * idmin, 0.0f, 63.0f)));
  }
  AssignK(x, nq, c);
}

const KCandidate& BestK(const float* x, int nq, KCandidate* a, KCandidate* b) {
  FittedK(x, nq, a);
  OutwardK(x, nq, b);
  return a->sse <= b->sse ? *a : *b;
}

void QuantizeQ4_K(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_K*>(dst);
  KCandidate a, b;
  for (int64_t blk = 0; blk < n / kQKK; ++blk, src += kQKK) {
    const KCandidate& c = BestK(src, 15, &a, &b);
    y[blk].d = c.d;
    y[blk].dmin = c.dmin;
    PackQ4KScaleMin(c.sc, c.m, y[blk].scales);
    for (int i = 0; i < 4; ++i) {
      for (int l = 0; l < 32; ++l) {
        y[blk].qs[32 * i + l] =
            static_cast<uint8_t>(c.q[64 * i + l] | (c.q[64 * i + 32 + l] << 4));
      }
    }
  }
}

void QuantizeQ5_K(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_K*>(dst);
  KCandidate a, b;
  for (int64_t blk = 0; blk < n / kQKK; ++blk, src += kQKK) {
    const KCandidate& c = BestK(src, 31, &a, &b);
    y[blk].d = c.d;
    y[blk].dmin = c.dmin;
    PackQ4KScaleMin(c.sc, c.m, y[blk].scales);
    std::memset(y[blk].qh, 0, sizeof(y[blk].qh));
    for (int i = 0; i < 4; ++i) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t lo = c.q[64 * i + l];
        const uint8_t hi = c.q[64 * i + 32 + l];
        y[blk].qs[32 * i + l] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
        y[blk].qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * i)) | ((hi >> 4) << (2 * i + 1)));
      }
    }
  }
}

// ------------------------------------------------------------------- Q6_K

// Least-squares search for one sub-block of 16, q in [-32, 31]: starts with
// the extreme at -32 (exact extreme) and at +-31 (no clipping), two Lloyd
// rounds each (s = sum(x q) / sum(q^2)), lowest error wins.
float FitSymmetric16(const float* x) {
  const float m = SignedExtreme(x, 16);
  if (m == 0.0f) return 0.0f;
  float best = m / 31.0f, best_sse = INFINITY;
  const float starts[2] = {m / -32.0f, m / 31.0f};
  for (float s : starts) {
    for (int round = 0; round < 3; ++round) {
      const float id = 1.0f / s;
      const __m128 vs = _mm_set1_ps(s), vid = _mm_set1_ps(id);
      const __m128 lo = _mm_set1_ps(-32.0f), hi = _mm_set1_ps(31.0f);
      __m128 sxq[2], sqq[2], se[2];
      for (int h = 0; h < 4; ++h) {  // lanes h%2, accumulated twice
        const __m128 v = _mm_loadu_ps(x + 4 * h);
        const __m128 q = RoundClamp(_mm_mul_ps(v, vid), lo, hi);
        const __m128 e = _mm_sub_ps(_mm_mul_ps(vs, q), v);
        if (h < 2) {
          se[h] = _mm_mul_ps(e, e);
          sxq[h] = _mm_mul_ps(v, q);
          sqq[h] = _mm_mul_ps(q, q);
        } else {
          se[h - 2] = _mm_add_ps(se[h - 2], _mm_mul_ps(e, e));
          sxq[h - 2] = _mm_add_ps(sxq[h - 2], _mm_mul_ps(v, q));
          sqq[h - 2] = _mm_add_ps(sqq[h - 2], _mm_mul_ps(q, q));
        }
      }
      const float sse = Sum8(se[0], se[1]);
      if (sse < best_sse) {
        best_sse = sse;
        best = s;
      }
      const float s_qq = Sum8(sqq[0], sqq[1]);
      if (round == 2 || !(s_qq > 0.0f)) break;
      const float next = Sum8(sxq[0], sxq[1]) / s_qq;
      if (next == 0.0f) break;
      s = next;
    }
  }
  return best;
}

struct Q6Candidate {
  uint16_t d;
  int8_t sc[16];
  int8_t q[kQKK];  // in [-32, 31]
  float sse;
};

void AssignQ6(const float* x, Q6Candidate* c) {
  const float d = Fp16ToFloat(c->d);
  __m128 sse[2] = {_mm_setzero_ps(), _mm_setzero_ps()};
  const __m128 lo = _mm_set1_ps(-32.0f), hi = _mm_set1_ps(31.0f);
  for (int j = 0; j < 16; ++j) {
    const float d1 = d * c->sc[j];
    const __m128 vd = _mm_set1_ps(d1);
    const __m128 vid = _mm_set1_ps(d1 != 0.0f ? 1.0f / d1 : 0.0f);
    for (int i = 16 * j; i < 16 * j + 16; i += 8) {
      __m128i qi[2];
      for (int h = 0; h < 2; ++h) {
        const __m128 v = _mm_loadu_ps(x + i + 4 * h);
        const __m128 q = RoundClamp(_mm_mul_ps(v, vid), lo, hi);
        qi[h] = _mm_cvtps_epi32(q);
        const __m128 e = _mm_sub_ps(_mm_mul_ps(vd, q), v);
        sse[h] = _mm_add_ps(sse[h], _mm_mul_ps(e, e));
      }
      const __m128i w = _mm_packs_epi32(qi[0], qi[1]);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(c->q + i), _mm_packs_epi16(w, w));
    }
  }
  c->sse = Sum8(sse[0], sse[1]);
}

const Q6Candidate& BestQ6(const float* x, Q6Candidate* a, Q6Candidate* b) {
  // Searched: per-sub-block fits, scales rounded to nearest.
  float s[16], max_s = 0.0f;
  for (int j = 0; j < 16; ++j) {
    s[j] = FitSymmetric16(x + 16 * j);
    max_s = Max(max_s, std::fabs(s[j]));
  }
  a->d = HalfNearest(max_s / 127.0f);
  float d = Fp16ToFloat(a->d);
  float id = d > 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < 16; ++j) {
    a->sc[j] = static_cast<int8_t>(RoundToInt(Clamp(s[j] * id, -127.0f, 127.0f)));
  }
  AssignQ6(x, a);
  // Outward: step |extreme| / 31 per sub-block, magnitudes rounded up.
  max_s = 0.0f;
  for (int j = 0; j < 16; ++j) {
    s[j] = SignedExtreme(x + 16 * j, 16) / 31.0f;
    max_s = Max(max_s, std::fabs(s[j]));
  }
  b->d = HalfUp(max_s / 127.0f);
  d = Fp16ToFloat(b->d);
  for (int j = 0; j < 16; ++j) {
    const int mag = d > 0.0f ? CeilToInt(Clamp(std::fabs(s[j]) / d, 0.0f, 127.0f)) : 0;
    b->sc[j] = static_cast<int8_t>(s[j] < 0.0f ? -mag : mag);
  }
  AssignQ6(x, b);
  return a->sse <= b->sse ? *a : *b;
}

void QuantizeQ6_K(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ6_K*>(dst);
  Q6Candidate a, b;
  for (int64_t blk = 0; blk < n / kQKK; ++blk, src += kQKK) {
    const Q6Candidate& c = BestQ6(src, &a, &b);
    y[blk].d = c.d;
    std::memcpy(y[blk].scales, c.sc, sizeof(c.sc));
    for (int half = 0; half < 2; ++half) {
      const int8_t* q = c.q + 128 * half;
      uint8_t* ql = y[blk].ql + 64 * half;
      uint8_t* qh = y[blk].qh + 32 * half;
      for (int l = 0; l < 32; ++l) {
        const int u0 = q[l] + 32, u1 = q[l + 32] + 32;
        const int u2 = q[l + 64] + 32, u3 = q[l + 96] + 32;
        ql[l] = static_cast<uint8_t>((u0 & 0x0F) | ((u2 & 0x0F) << 4));
        ql[l + 32] = static_cast<uint8_t>((u1 & 0x0F) | ((u3 & 0x0F) << 4));
        qh[l] = static_cast<uint8_t>((u0 >> 4) | ((u1 >> 4) << 2) | ((u2 >> 4) << 4) |
                                     ((u3 >> 4) << 6));
      }
    }
  }
}

}  // namespace

QuantizeRowFn GetQuantizeRowFn(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return QuantizeF32;
    case GgmlType::kF16: return QuantizeF16;
    case GgmlType::kBF16: return QuantizeBF16;
    case GgmlType::kQ4_0: return QuantizeQ4_0;
    case GgmlType::kQ4_1: return QuantizeQ4_1;
    case GgmlType::kQ5_0: return QuantizeQ5_0;
    case GgmlType::kQ5_1: return QuantizeQ5_1;
    case GgmlType::kQ8_0: return QuantizeQ8_0;
    case GgmlType::kMXFP4: return QuantizeMXFP4;
    case GgmlType::kQ4_K: return QuantizeQ4_K;
    case GgmlType::kQ5_K: return QuantizeQ5_K;
    case GgmlType::kQ6_K: return QuantizeQ6_K;
    default: return nullptr;
  }
}

bool CanQuantize(GgmlType type) { return GetQuantizeRowFn(type) != nullptr; }

absl::Status QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n) {
  const QuantizeRowFn fn = GetQuantizeRowFn(type);
  if (fn == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("QuantizeRow: unsupported type ", GgmlTypeName(type)));
  }
  const int64_t bs = TraitsOf(type).block_size;
  if (n < 0 || n % bs != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "QuantizeRow: n=", n, " is not a multiple of ", GgmlTypeName(type),
        "'s block size ", bs));
  }
  fn(src, dst, n);
  return absl::OkStatus();
}

}  // namespace minfer
