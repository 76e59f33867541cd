// Weight fixtures shared by the matrix-kernel GPU tests (MMVQ, matvec,
// GEMM, MMQ): host weights in GGUF bytes with their reference
// dequantization, random block bytes that reach every code and scale bit,
// the per-block min terms of the bounds, and device copies in the weight
// registry's layout.
#ifndef MINFER_TESTS_CUDA_KERNELS_MATMUL_FIXTURES_H_
#define MINFER_TESTS_CUDA_KERNELS_MATMUL_FIXTURES_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "cuda/kernels/types.h"
#include "cuda/testing/gpu_test_util.h"

namespace minfer::cuda::testing {

inline constexpr GgmlType kQuantTypes[] = {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0,
                                           GgmlType::kQ5_1, GgmlType::kQ8_0, GgmlType::kQ4_K,
                                           GgmlType::kQ5_K, GgmlType::kQ6_K};

bool IsFloatType(GgmlType t);

// A float's bit pattern (exact comparisons, poisoned-output checks).
inline uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The fixtures' generator, seeded from TestSeed() (MINFER_TEST_SEED repeats
// a run).
std::mt19937_64& FixtureRng();

// A weight matrix on the host: GGUF bytes and the reference dequantization.
struct HostWeight {
  GgmlType type;
  int64_t rows = 0, k = 0;
  int64_t row_bytes = 0;  // GGUF bytes per row
  std::vector<uint8_t> bytes;
  std::vector<float> deq;  // rows x k, engine/quant DequantizeRow
  const uint8_t* row(int64_t r) const { return bytes.data() + r * row_bytes; }
};

// Random block bytes with sane f16 fields: every code pattern occurs
// (Q8_0's -128 too), and every scale/min bit of the K-quants.
void RandomBlocks(GgmlType type, int64_t k, uint8_t* row);

// variant 0: quantized Gaussian rows with a per-row offset (so mins
// matter); variant 1: random block bytes (quantized types only).
HostWeight MakeWeight(GgmlType type, int64_t rows, int64_t k, int variant);

// The min term of 32-element block b of row r (0 for types without).
double BlockMin(const HostWeight& w, int64_t r, int64_t b);

// nt rows of k random activations (scale 3) whose first four 32-value
// blocks (when k >= 128) are the quantizer's special cases: all zero,
// below FLT_MIN * 127 (flushed to 0), an exact grid (d = 1, ties), and a
// mixed-sign block with a large outlier.
std::vector<float> ActivationsWithSpecialBlocks(int64_t k, int64_t nt);

// A weight on the device in the registry's layout (Q6_K optionally padded
// to 224-byte blocks), optionally misaligned by `shift` bytes and with
// `extra` bytes after each row.
struct DeviceWeight {
  explicit DeviceWeight(const std::vector<uint8_t>& img) : buf(img) {}
  DeviceBuffer<uint8_t> buf;
  WeightView view;
};
std::unique_ptr<DeviceWeight> Upload(const HostWeight& w, bool q6k_padded, int64_t shift = 0,
                                     int64_t extra = 0);

// The DQ GEMMs' activations (dq_gemm.h, dq_wgmma.h): random floats x
// [nt][k], the CPU's QuantizeRowQ8A values a = d * q, and those values as
// f16 in a layout where element i of a row-major [nt][k] is stored at
// position(i) (each kernel's documented order).
struct DqActs {
  int64_t k = 0, nt = 0;
  std::vector<float> x;
  std::vector<double> a;
  std::vector<uint16_t> layout;
};
DqActs MakeDqActs(int64_t k, int64_t nt, int64_t (*position)(int64_t));

// Token t's output of row r: the exact (double) dot of DequantizeRow's
// weights with a, and the bound's magnitude sum (|w_i| + |m_i|) |a_i| (m_i
// element i's block min), at [t * rows + r].
struct DqRef {
  double exact = 0, mag = 0;
};
std::vector<DqRef> MakeDqRefs(const HostWeight& w, const DqActs& a);

}  // namespace minfer::cuda::testing

#endif  // MINFER_TESTS_CUDA_KERNELS_MATMUL_FIXTURES_H_
