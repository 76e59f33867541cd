// The ggml tensor element types that GGUF files carry, with their block
// geometry. Values are the on-disk enum of the GGUF format.
#ifndef MINFER_ENGINE_QUANT_GGML_TYPES_H_
#define MINFER_ENGINE_QUANT_GGML_TYPES_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace minfer {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

struct GgmlTypeTraits {
  GgmlType type;
  const char* name;     // as ggml prints it: "f32", "q4_K", ...
  int64_t block_size;   // elements per block
  int64_t type_size;    // bytes per block
  bool quantized;
};

// Traits of a known type, or nullopt for a value this build does not know
// (a reader must reject such tensors by name).
std::optional<GgmlTypeTraits> LookupGgmlType(uint32_t raw);
const GgmlTypeTraits& TraitsOf(GgmlType t);  // t must be a known enumerator
const char* GgmlTypeName(GgmlType t);
// Parses a name ("q4_K", "Q4_K", "f16", ...); case-insensitive.
std::optional<GgmlType> ParseGgmlType(absl::string_view name);

// The eight block-quantized types with an int8 dot product against
// quantized activations (engine/quant/vec_dot.h VecDotQ8A; the GPU's MMVQ
// and MMQ): Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K.
inline bool IsInt8DotType(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
      return true;
    default:
      return false;
  }
}

// Bytes of a row of `n` elements; requires n % block_size == 0.
inline int64_t RowBytes(GgmlType t, int64_t n) {
  const GgmlTypeTraits& tr = TraitsOf(t);
  return n / tr.block_size * tr.type_size;
}

}  // namespace minfer

#endif  // MINFER_ENGINE_QUANT_GGML_TYPES_H_
