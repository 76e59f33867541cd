#include "tests/cuda/kernels/matmul_fixtures.h"

#include <cmath>
#include <cstring>

#include "engine/quant/blocks.h"
#include "engine/quant/fp16.h"
#include "engine/quant/quantize.h"
#include "engine/quant/vec_dot.h"
#include "gtest/gtest.h"

namespace minfer::cuda::testing {

bool IsFloatType(GgmlType t) {
  return t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16;
}

std::mt19937_64& FixtureRng() {
  static std::mt19937_64 rng(TestSeed() ^ 0x5DEECE66Dull);
  return rng;
}

// Random block bytes with sane f16 fields (cf. vec_dot_test.cc): every code
// pattern occurs, including Q8_0's -128, every scale/min bit of the K-quants.
void RandomBlocks(GgmlType type, int64_t k, uint8_t* row) {
  auto& rng = FixtureRng();
  const auto& tr = TraitsOf(type);
  for (int64_t i = 0; i < RowBytes(type, k); ++i) row[i] = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> mag(-6.0f, 2.0f);
  auto put = [&](uint8_t* p, bool neg) {
    float v = std::exp2(mag(rng));
    if (neg && (rng() & 1)) v = -v;
    const uint16_t h = FloatToFp16(v);
    std::memcpy(p, &h, 2);
  };
  for (int64_t b = 0; b < k / tr.block_size; ++b) {
    uint8_t* p = row + b * tr.type_size;
    switch (type) {
      case GgmlType::kQ4_1:
      case GgmlType::kQ5_1: put(p, true), put(p + 2, true); break;
      case GgmlType::kQ4_K:
      case GgmlType::kQ5_K: put(p, false), put(p + 2, false); break;
      case GgmlType::kQ6_K: put(p + 208, true); break;
      default: put(p, true); break;
    }
  }
}

// variant 0: quantized Gaussian data (with a per-row offset, so mins
// matter); variant 1: random block bytes (quantized types only).
HostWeight MakeWeight(GgmlType type, int64_t rows, int64_t k, int variant) {
  HostWeight w;
  w.type = type, w.rows = rows, w.k = k;
  w.row_bytes = RowBytes(type, k);
  w.bytes.resize(rows * w.row_bytes);
  w.deq.resize(rows * k);
  std::normal_distribution<float> offset(0.0f, 0.02f);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* dst = w.bytes.data() + r * w.row_bytes;
    if (variant == 1 && !IsFloatType(type)) {
      RandomBlocks(type, k, dst);
    } else {
      std::vector<float> f = RandomFloats(k, 0.05f);
      const float off = offset(FixtureRng());
      for (auto& v : f) v += off;
      EXPECT_TRUE(QuantizeRow(type, f.data(), dst, k).ok());
    }
    EXPECT_TRUE(DequantizeRow(type, dst, w.deq.data() + r * k, k).ok());
  }
  return w;
}

// The min term of 32-element block b of row r (0 for types without).
double BlockMin(const HostWeight& w, int64_t r, int64_t b) {
  const uint8_t* row = w.row(r);
  const auto& tr = TraitsOf(w.type);
  uint16_t h;
  if (w.type == GgmlType::kQ4_1 || w.type == GgmlType::kQ5_1) {
    std::memcpy(&h, row + b * tr.type_size + 2, 2);
    return Fp16ToFloat(h);
  }
  if (w.type == GgmlType::kQ4_K || w.type == GgmlType::kQ5_K) {
    const uint8_t* blk = row + (b / 8) * tr.type_size;
    std::memcpy(&h, blk + 2, 2);
    uint8_t sc, m;
    Q4KScaleMin(blk + 4, static_cast<int>(b % 8), &sc, &m);
    return static_cast<double>(Fp16ToFloat(h)) * m;
  }
  return 0.0;
}

std::unique_ptr<DeviceWeight> Upload(const HostWeight& w, bool q6k_padded, int64_t shift,
                                     int64_t extra) {
  const bool pad = q6k_padded && w.type == GgmlType::kQ6_K;
  const int64_t base = pad ? w.k / 256 * kQ6KPaddedBytes : w.row_bytes;
  const int64_t stride = base + extra;
  std::vector<uint8_t> img(shift + w.rows * stride + 64, 0xA5);
  for (int64_t r = 0; r < w.rows; ++r) {
    uint8_t* dst = img.data() + shift + r * stride;
    if (pad) {
      for (int64_t b = 0; b < w.k / 256; ++b) {
        std::memcpy(dst + b * kQ6KPaddedBytes, w.row(r) + b * 210, 210);
        std::memset(dst + b * kQ6KPaddedBytes + 210, 0, kQ6KPaddedBytes - 210);
      }
    } else {
      std::memcpy(dst, w.row(r), w.row_bytes);
    }
  }
  auto d = std::make_unique<DeviceWeight>(img);
  d->view.type = w.type;
  d->view.data = d->buf.get() + shift;
  d->view.k = w.k;
  d->view.rows = w.rows;
  d->view.row_bytes = stride;
  d->view.q6k_padded = pad;
  return d;
}

std::vector<float> ActivationsWithSpecialBlocks(int64_t k, int64_t nt) {
  std::vector<float> x = RandomFloats(k * nt, 3.0f);
  if (k >= 128) {
    for (int i = 0; i < 32; ++i) x[i] = 0.0f;
    for (int i = 0; i < 32; ++i) x[32 + i] = 1e-39f * (i - 16);
    for (int i = 0; i < 32; ++i) x[64 + i] = i * 8.0f - 127.0f;
    for (int i = 0; i < 32; ++i) x[96 + i] = (i % 2 ? 0.5f : -2.5f) * (i == 7 ? 1000.0f : 1.0f);
  }
  return x;
}

DqActs MakeDqActs(int64_t k, int64_t nt, int64_t (*position)(int64_t)) {
  DqActs r;
  r.k = k, r.nt = nt;
  r.x = RandomFloats(k * nt, 2.0f);
  std::vector<BlockQ8A> q(k / 32 * nt);
  for (int64_t t = 0; t < nt; ++t) QuantizeRowQ8A(r.x.data() + t * k, q.data() + t * (k / 32), k);
  r.a.resize(k * nt);
  r.layout.resize(k * nt);
  for (int64_t i = 0; i < k * nt; ++i) {
    const BlockQ8A& b = q[i / 32];
    const float v = b.d * static_cast<float>(b.qs[i % 32]);
    r.a[i] = v;
    r.layout[position(i)] = FloatToFp16(v);
  }
  return r;
}

std::vector<DqRef> MakeDqRefs(const HostWeight& w, const DqActs& a) {
  // |w_i| + |m_i| per element, once per weight.
  std::vector<double> wm(w.rows * w.k);
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t b = 0; b < w.k / 32; ++b) {
      const double m = std::fabs(BlockMin(w, r, b));
      for (int64_t i = 32 * b; i < 32 * b + 32; ++i) wm[r * w.k + i] = std::fabs(w.deq[r * w.k + i]) + m;
    }
  }
  std::vector<DqRef> refs(w.rows * a.nt);
  for (int64_t t = 0; t < a.nt; ++t) {
    for (int64_t r = 0; r < w.rows; ++r) {
      DqRef& f = refs[t * w.rows + r];
      const float* wr = w.deq.data() + r * w.k;
      const double* m = wm.data() + r * w.k;
      const double* x = a.a.data() + t * w.k;
      for (int64_t i = 0; i < w.k; ++i) {
        f.exact += static_cast<double>(wr[i]) * x[i];
        f.mag += m[i] * std::fabs(x[i]);
      }
    }
  }
  return refs;
}

}  // namespace minfer::cuda::testing
