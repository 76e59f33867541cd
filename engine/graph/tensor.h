// Element types and shapes of graph tensors.
//
// Shapes follow ggml/GGUF: ne[0] is the innermost, contiguous dimension.
// Activations are [n_embd, n_tokens]; attention heads [head_dim, n_head,
// n_tokens]. All graph tensors are contiguous.
#ifndef MINFER_ENGINE_GRAPH_TENSOR_H_
#define MINFER_ENGINE_GRAPH_TENSOR_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace minfer::graph {

// Activation element types. KV cache regions may also be F16, Q8_0 (int8
// codes) or FP8 (e4m3 codes, engine/quant/fp8.h), a row's codes followed by
// an f16 scale per 32 (engine/quant/kv_row.h), see KvType.
enum class DType : uint8_t { kF32, kI32, kF16, kQ8_0, kFp8 };

inline const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kI32: return "i32";
    case DType::kF16: return "f16";
    case DType::kQ8_0: return "q8_0";
    case DType::kFp8: return "fp8";
  }
  return "?";
}

// Bytes for `n` elements (n % 32 == 0 for Q8_0 and FP8).
inline int64_t DTypeBytes(DType t, int64_t n) {
  switch (t) {
    case DType::kF32:
    case DType::kI32: return 4 * n;
    case DType::kF16: return 2 * n;
    case DType::kQ8_0:
    case DType::kFp8: return n / 32 * 34;
  }
  return 0;
}

struct Shape {
  std::array<int64_t, 4> ne = {1, 1, 1, 1};

  Shape() = default;
  Shape(int64_t n0, int64_t n1 = 1, int64_t n2 = 1, int64_t n3 = 1) : ne{n0, n1, n2, n3} {}

  int64_t elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t rows() const { return ne[1] * ne[2] * ne[3]; }
  bool operator==(const Shape& o) const { return ne == o.ne; }
  bool operator!=(const Shape& o) const { return ne != o.ne; }
  std::string ToString() const { return absl::StrCat("[", absl::StrJoin(ne, ","), "]"); }
};

}  // namespace minfer::graph

#endif  // MINFER_ENGINE_GRAPH_TENSOR_H_
