// The registry of architectures (GGUF general.architecture) minfer runs.
// Every one of them is a dense pre-norm decoder built by the shared layer
// builder of qwen2.h; what tells them apart is one row of this table, read
// once at load. A new architecture of that shape is a new row here; one
// that needs other math adds its own model file and a row naming it.
//
// Immutable; thread-safe.
#ifndef MINFER_ENGINE_MODELS_ARCHITECTURES_H_
#define MINFER_ENGINE_MODELS_ARCHITECTURES_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "engine/graph/graph.h"

namespace minfer::models {

struct ArchitectureSpec {
  const char* name = "";  // general.architecture, and the prefix of its keys
  // How RoPE pairs dimensions (llama.cpp's choice for the architecture).
  graph::RopeStyle rope_style = graph::RopeStyle::kNeoX;
  // attn_q_norm / attn_k_norm (per-head RMSNorm before RoPE) are required.
  bool qk_norm = false;
  // Defaults for keys a file may leave out (llama.cpp's).
  float default_rope_base = 10000.0f;
  float default_rms_eps = 1e-6f;
};

// The row of `name`, or null when minfer does not run that architecture.
const ArchitectureSpec* FindArchitecture(absl::string_view name);

// Every row, in the order they were added (qwen2, qwen3, llama).
const std::vector<ArchitectureSpec>& Architectures();

// "qwen2, qwen3, llama": for error messages and listings.
std::string SupportedArchitectures();

}  // namespace minfer::models

#endif  // MINFER_ENGINE_MODELS_ARCHITECTURES_H_
