// Types shared by the CUDA kernels (device) and their host launchers: plain
// C++, includable by g++ and nvcc alike. Weight blocks are the GGUF layouts
// of engine/quant/blocks.h, byte for byte, except Q6_K, which the device
// registry stores padded to 224 bytes so kernels can use
// aligned 16-byte loads; for the same reason the registry starts every row
// on a 16-byte boundary (DeviceRowBytes).
#ifndef MINFER_CUDA_KERNELS_TYPES_H_
#define MINFER_CUDA_KERNELS_TYPES_H_

#include <cstdint>

#include "engine/quant/blocks.h"
#include "engine/quant/ggml_types.h"

namespace minfer::cuda {

// The most CUDA devices one process uses (CudaState refuses indices beyond;
// kernels' per-device caches, per_device.cuh, are this long).
inline constexpr int kMaxCudaDevices = 64;

// Bytes of one Q6_K super-block in the device registry's padded layout:
// the 210 GGUF bytes (ql, qh, scales, d) followed by 14 zero bytes.
inline constexpr int kQ6KPaddedBytes = 224;

// Token padding of MMQ's int8 activation layout (mmq.h): a multiple of
// every token tile of the GEMM.
inline constexpr int64_t kMmqTokenPad = 128;

// KV cache element types (graph::DType kF32/kF16/kQ8_0/kFp8). kQ8_0 and
// kFp8 share a geometry: a row's one-byte codes, then an f16 scale per 32
// values (engine/quant/kv_row.h; 34 bytes per 32 values); IsBlockKv says
// which types have it.
enum class KvType : int32_t { kF32 = 0, kF16 = 1, kQ8_0 = 2, kFp8 = 3 };
inline constexpr bool IsBlockKv(KvType t) { return t == KvType::kQ8_0 || t == KvType::kFp8; }

// A weight matrix as kernels see it: `rows` rows of `k` elements, row r at
// data + r * row_bytes. row_bytes is at least the row's blocks (Q6_K: in the
// padded layout, k / 256 * 224, when `q6k_padded`); the registry rounds it
// up to 16 (DeviceRowBytes), kernels accept any even stride.
struct WeightView {
  GgmlType type = GgmlType::kF32;
  const void* data = nullptr;
  int64_t k = 0;
  int64_t rows = 0;
  int64_t row_bytes = 0;
  bool q6k_padded = false;
  // MMQ's precomputed scale plane of a Q4_K/Q6_K weight (mmq.h), or null.
  const void* scale_plane = nullptr;
};

// The eight block-quantized types whose codes the integer kernels (MMVQ,
// MMQ) consume directly: Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K.
inline bool IsIntegerDotType(GgmlType type) { return IsInt8DotType(type); }

// Which weight types each quantized matmul kernel takes. Host-visible and
// inline so the kernels' argument checks and the backend's choice of kernel
// (cuda/backend/matmul_choice.h, built without the toolkit) read one
// definition:
//  * MMVQ (matmul.h LaunchMmvq), decode shapes of 1..kMmvqMaxTokens tokens:
//    the eight integer-dot types.
//  * MMQ (mmq.h: the tiled GEMM and the few-token GEMM): the same eight.
//  * The dequantizing GEMM (dq_gemm.h LaunchDqGemm): Q4_K, and Q6_K in the
//    registry's padded 224-byte layout.
inline constexpr int64_t kMmvqMaxTokens = 8;
inline bool MmvqSupports(GgmlType type) { return IsIntegerDotType(type); }
inline bool MmqSupports(GgmlType type) { return IsIntegerDotType(type); }
inline bool DqSupports(GgmlType type, bool q6k_padded) {
  return type == GgmlType::kQ4_K || (type == GgmlType::kQ6_K && q6k_padded);
}
//  * The Hopper prefill GEMM (dq_wgmma.h LaunchDqpWgmma): those, Q8_0 and
//    Q5_K.
inline bool DqpSupports(GgmlType type, bool q6k_padded) {
  return DqSupports(type, q6k_padded) || type == GgmlType::kQ8_0 || type == GgmlType::kQ5_K;
}

// Whether the e4m3 tensor-core GEMM (fp8_gemm.h) runs on a device of
// compute capability `cc` (major * 100 + minor * 10): its mma needs sm_89+.
// (The build's own arch list decides whether the code is there; the
// launcher refuses otherwise.)
inline constexpr bool Fp8GemmRuns(int cc) { return cc >= 890; }

// MXFP4 (gpt-oss's experts) is stored split per row: the 16 code bytes of
// every block (block b at b * 16, so each is one aligned 16-byte load),
// then the blocks' E8M0 exponents (block b's at nb * 16 + b), then the pad
// to 16 bytes; 17 bytes per block as in the file.
inline constexpr int kMxfp4CodeBytes = 16;

// Bytes of one block of `type` in device memory (Q6_K padded or not).
inline int64_t DeviceBlockBytes(GgmlType type, bool q6k_padded) {
  if (type == GgmlType::kQ6_K && q6k_padded) return kQ6KPaddedBytes;
  return TraitsOf(type).type_size;
}

// The registry's row stride for a weight of `type` with rows of k elements
// (k a multiple of the block size): the row's device blocks (Q6_K padded),
// rounded up to 16 bytes. Legacy blocks of 18/22/34 bytes give rows that
// are only 2-byte aligned when k / 32 is not a multiple of 8 (Qwen2.5-0.5B:
// 896 = 28 blocks, 616 bytes of Q5_0): the pad lets every kernel take its
// 16-byte-load path (MMQ's cp.async staging, MMVQ's uint4 loads) for a
// fraction of a percent of memory.
inline int64_t DeviceRowBytes(GgmlType type, int64_t k) {
  const int64_t raw = k / TraitsOf(type).block_size * DeviceBlockBytes(type, true);
  return (raw + 15) / 16 * 16;
}

// Device bytes of a weight of `type` with `rows` rows of k elements.
inline int64_t DeviceWeightBytes(GgmlType type, int64_t k, int64_t rows) {
  return DeviceRowBytes(type, k) * rows;
}

// Attention geometry of one layer.
struct AttnParams {
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;   // <= 128, multiple of 4 (split-KV kernel)
  float scale = 1.0f;     // softmax scale, 1/sqrt(head_dim)
  int64_t n_ctx = 0;      // cache rows
  KvType kv_type = KvType::kF32;
  // Sliding window (gpt-oss; graph.h Attn): window > 0 keeps only the rows
  // j with pos - j < window. 0: every row up to pos.
  int32_t window = 0;
  // Attention sinks (gpt-oss): device f32 [n_head] logits, one per query
  // head, that join each softmax's max and normalizer without a value row;
  // null: none. (The tensor-core prefill kernel takes neither: the
  // CUDA-core one runs.)
  const float* sinks = nullptr;
  int64_t n_kv_embd() const { return static_cast<int64_t>(n_head_kv) * head_dim; }
};

// Split-KV decode attention: the KV range is cut into this many stripes, one
// warp each per head, merged by a combine kernel. Frozen: it is baked into
// captured graphs and changing it changes numerics.
inline constexpr int kAttnSplits = 32;

// Device error flag values (CudaState keeps one int on the device; kernels
// that meet data they cannot handle set it, the backend reports it at the
// next synchronize).
enum DeviceError : int32_t {
  kDeviceOk = 0,
  kDeviceBadPosition = 1,  // a position outside [0, n_ctx)
  kDeviceBadTokenId = 2,   // a GetRows id outside the table
  kDeviceBadTopKMode = 3,  // a TopK mode value outside sample.h's contract
  kDeviceBadExpertId = 4,  // a MoeFFN route naming an expert outside [0, n_expert)
};

}  // namespace minfer::cuda

#endif  // MINFER_CUDA_KERNELS_TYPES_H_
