// Reference dequantization: the definition of each block format.
//
// Every formula follows ggml's dequantize_row_* exactly, including the float
// operation order (e.g. Q4_K computes d1 = d * sc first, then d1 * q - m1),
// because a single reordering or fused multiply-add changes low bits. This
// file is built with -ffp-contract=off so the compiler cannot fuse either.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/quant/blocks.h"
#include "engine/quant/dequantize_internal.h"
#include "engine/quant/fp16.h"
#include "engine/quant/quantize.h"

namespace minfer {
namespace {

void DequantizeF32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void DequantizeF16(const void* src, float* dst, int64_t n) {
  Fp16ToFloatRow(CpuIsa::kScalar, static_cast<const uint16_t*>(src), dst, n);
}

void DequantizeBF16(const void* src, float* dst, int64_t n) {
  Bf16ToFloatRow(CpuIsa::kScalar, static_cast<const uint16_t*>(src), dst, n);
}

void DequantizeQ4_0(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(src);
  for (int64_t b = 0; b < n / kQK; ++b, dst += kQK) {
    const float d = Fp16ToFloat(x[b].d);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (x[b].qs[j] & 0x0F) - 8;
      const int hi = (x[b].qs[j] >> 4) - 8;
      dst[j] = lo * d;
      dst[j + kQK / 2] = hi * d;
    }
  }
}

void DequantizeQ4_1(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(src);
  for (int64_t b = 0; b < n / kQK; ++b, dst += kQK) {
    const float d = Fp16ToFloat(x[b].d);
    const float m = Fp16ToFloat(x[b].m);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = x[b].qs[j] & 0x0F;
      const int hi = x[b].qs[j] >> 4;
      dst[j] = lo * d + m;
      dst[j + kQK / 2] = hi * d + m;
    }
  }
}

uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

void DequantizeQ5_0(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(src);
  for (int64_t b = 0; b < n / kQK; ++b, dst += kQK) {
    const float d = Fp16ToFloat(x[b].d);
    const uint32_t qh = LoadU32(x[b].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = ((x[b].qs[j] & 0x0F) | (((qh >> j) & 1) << 4)) - 16;
      const int hi = ((x[b].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
      dst[j] = lo * d;
      dst[j + kQK / 2] = hi * d;
    }
  }
}

void DequantizeQ5_1(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(src);
  for (int64_t b = 0; b < n / kQK; ++b, dst += kQK) {
    const float d = Fp16ToFloat(x[b].d);
    const float m = Fp16ToFloat(x[b].m);
    const uint32_t qh = LoadU32(x[b].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (x[b].qs[j] & 0x0F) | (((qh >> j) & 1) << 4);
      const int hi = (x[b].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      dst[j] = lo * d + m;
      dst[j + kQK / 2] = hi * d + m;
    }
  }
}

void DequantizeQ8_0(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(src);
  for (int64_t b = 0; b < n / kQK; ++b, dst += kQK) {
    const float d = Fp16ToFloat(x[b].d);
    for (int j = 0; j < kQK; ++j) dst[j] = x[b].qs[j] * d;
  }
}

void DequantizeMXFP4(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockMXFP4*>(src);
  for (int64_t b = 0; b < n / kQK; ++b, dst += kQK) {
    const float d = Mxfp4Scale(x[b].e);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[j] = kMxfp4Values[x[b].qs[j] & 0x0F] * d;
      dst[j + kQK / 2] = kMxfp4Values[x[b].qs[j] >> 4] * d;
    }
  }
}

void DequantizeQ4_K(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(src);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float d = Fp16ToFloat(x[b].d);
    const float dmin = Fp16ToFloat(x[b].dmin);
    const uint8_t* q = x[b].qs;
    for (int j = 0; j < 8; j += 2, q += 32) {
      uint8_t sc, m;
      Q4KScaleMin(x[b].scales, j, &sc, &m);
      const float d1 = d * sc;
      const float m1 = dmin * m;
      Q4KScaleMin(x[b].scales, j + 1, &sc, &m);
      const float d2 = d * sc;
      const float m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *dst++ = d1 * (q[l] & 0x0F) - m1;
      for (int l = 0; l < 32; ++l) *dst++ = d2 * (q[l] >> 4) - m2;
    }
  }
}

void DequantizeQ5_K(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ5_K*>(src);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float d = Fp16ToFloat(x[b].d);
    const float dmin = Fp16ToFloat(x[b].dmin);
    const uint8_t* q = x[b].qs;
    const uint8_t* qh = x[b].qh;
    for (int j = 0; j < 8; j += 2, q += 32) {
      uint8_t sc, m;
      Q4KScaleMin(x[b].scales, j, &sc, &m);
      const float d1 = d * sc;
      const float m1 = dmin * m;
      Q4KScaleMin(x[b].scales, j + 1, &sc, &m);
      const float d2 = d * sc;
      const float m2 = dmin * m;
      const uint8_t u1 = static_cast<uint8_t>(1u << j);
      const uint8_t u2 = static_cast<uint8_t>(2u << j);
      for (int l = 0; l < 32; ++l) {
        *dst++ = d1 * ((q[l] & 0x0F) + (qh[l] & u1 ? 16 : 0)) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        *dst++ = d2 * ((q[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      }
    }
  }
}

void DequantizeQ6_K(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(src);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float d = Fp16ToFloat(x[b].d);
    const uint8_t* ql = x[b].ql;
    const uint8_t* qh = x[b].qh;
    const int8_t* sc = x[b].scales;
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, dst += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        // (d * sc) * q, left to right, as ggml evaluates d * sc[is] * q.
        dst[l] = d * sc[is + 0] * q1;
        dst[l + 32] = d * sc[is + 2] * q2;
        dst[l + 64] = d * sc[is + 4] * q3;
        dst[l + 96] = d * sc[is + 6] * q4;
      }
    }
  }
}

DequantizeRowFn ScalarDequantizer(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return DequantizeF32;
    case GgmlType::kF16: return DequantizeF16;
    case GgmlType::kBF16: return DequantizeBF16;
    case GgmlType::kQ4_0: return DequantizeQ4_0;
    case GgmlType::kQ4_1: return DequantizeQ4_1;
    case GgmlType::kQ5_0: return DequantizeQ5_0;
    case GgmlType::kQ5_1: return DequantizeQ5_1;
    case GgmlType::kQ8_0: return DequantizeQ8_0;
    case GgmlType::kMXFP4: return DequantizeMXFP4;
    case GgmlType::kQ4_K: return DequantizeQ4_K;
    case GgmlType::kQ5_K: return DequantizeQ5_K;
    case GgmlType::kQ6_K: return DequantizeQ6_K;
    default: return nullptr;
  }
}

}  // namespace

bool CanDequantize(GgmlType type) { return ScalarDequantizer(type) != nullptr; }

DequantizeRowFn GetDequantizeRowFn(GgmlType type, CpuIsa isa) {
  if (isa != CpuIsa::kScalar && CpuIsaSupported(isa)) {
    switch (type) {
      case GgmlType::kF16: return dequant_internal::DequantizeF16Avx2;
      case GgmlType::kQ8_0: return dequant_internal::DequantizeQ8_0Avx2;
      case GgmlType::kQ4_K: return dequant_internal::DequantizeQ4_KAvx2;
      case GgmlType::kQ6_K: return dequant_internal::DequantizeQ6_KAvx2;
      default: break;
    }
  }
  return ScalarDequantizer(type);
}

absl::Status DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n) {
  const DequantizeRowFn fn = GetDequantizeRowFn(type);
  if (fn == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("DequantizeRow: unsupported type ", GgmlTypeName(type)));
  }
  const int64_t bs = TraitsOf(type).block_size;
  if (n < 0 || n % bs != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DequantizeRow: n=", n, " is not a multiple of ", GgmlTypeName(type),
        "'s block size ", bs));
  }
  fn(src, dst, n);
  return absl::OkStatus();
}

}  // namespace minfer
