// Llama 3.x (`llama`): the pre-norm decoder of decoder.h without biases or
// q/k norms, RoPE on adjacent pairs (2i, 2i + 1: llama.cpp's "normal" mode
// for this architecture) with the optional per-pair frequency factors of
// rope_freqs.weight (Llama 3.1/3.2's "llama3" context scaling baked into
// the file: pair i turns by pos * base^(-2i/d) / factor_i), base 10000 and
// RMS epsilon 1e-5 by default. Mixtral-style files (experts under the
// `llama` name) are refused at load.
#include "engine/models/architectures.h"
#include "engine/models/blocks.h"

namespace minfer::models {

const ArchitectureSpec& LlamaArchitecture() {
  static const ArchitectureSpec spec = {
      .name = "llama",
      .rope_style = graph::RopeStyle::kInterleaved,
      .default_rope_base = 10000.0f,
      .default_rms_eps = 1e-5f,
      .resolve_layer = ResolveDenseLayer,
      .build_graph = BuildDenseDecoder,
      .activation_bound = DenseActivationBound,
  };
  return spec;
}

}  // namespace minfer::models
