// A model weight as the graph sees it: the GGUF tensor's bytes (mmap'ed,
// never copied during execution) plus identity. Backends that keep their own
// device copy look it up by `name` (registered once at load).
#ifndef MINFER_ENGINE_GRAPH_WEIGHT_H_
#define MINFER_ENGINE_GRAPH_WEIGHT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "engine/quant/ggml_types.h"

namespace minfer::graph {

struct Weight {
  std::string name;           // GGUF tensor name, e.g. "blk.0.attn_q.weight"
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> dims;  // ne[0] first: a matmul weight is [n_in, n_out]
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;

  int64_t ne0() const { return dims.empty() ? 1 : dims[0]; }
  int64_t rows() const {
    int64_t r = 1;
    for (size_t i = 1; i < dims.size(); ++i) r *= dims[i];
    return r;
  }
  int64_t row_bytes() const { return RowBytes(type, ne0()); }
  const uint8_t* row(int64_t r) const { return data + r * row_bytes(); }
};

}  // namespace minfer::graph

#endif  // MINFER_ENGINE_GRAPH_WEIGHT_H_
