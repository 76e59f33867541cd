// The registry of architectures (GGUF general.architecture) minfer runs: one
// row per family, defined in the family's own file (engine/models/qwen2.cc,
// qwen3.cc, llama.cc, qwen3moe.cc, gpt_oss.cc), llama.cpp's src/models/ shape. A row
// says how the family reads its file (keys beyond the shared ones, each
// layer's tensors), builds its graph (on the shared blocks of blocks.h) and
// bounds its activations; everything else (the shared keys, the embedding
// and head, checks of shapes and types) is common to all.
//
// A new family implements the four functions below in one file and adds its
// row to Architectures() (architectures.cc). docs/design.md ("The
// architecture interface") walks through one.
//
// Immutable; thread-safe.
#ifndef MINFER_ENGINE_MODELS_ARCHITECTURES_H_
#define MINFER_ENGINE_MODELS_ARCHITECTURES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/gguf/gguf.h"
#include "engine/graph/graph.h"

namespace minfer::models {

struct DecoderHparams;
struct DecoderLayer;
struct BatchGraphParams;
class DecoderModel;
class WeightResolver;

struct ArchitectureSpec {
  const char* name = "";  // general.architecture, and the prefix of its keys
  // How RoPE pairs dimensions (llama.cpp's choice for the architecture).
  graph::RopeStyle rope_style = graph::RopeStyle::kNeoX;
  // attn_q_norm / attn_k_norm (per-head RMSNorm before RoPE) are required.
  bool qk_norm = false;
  // Defaults for keys a file may leave out (llama.cpp's).
  float default_rope_base = 10000.0f;
  float default_rms_eps = 1e-6f;
  // The family runs YaRN RoPE scaling when a file asks for it
  // (rope.scaling.type "yarn"); otherwise a scaling that changes the angles
  // is refused.
  bool yarn = false;

  // Reads the family's own keys into `hp` after the shared ones (null:
  // none). A dense family leaves it null: a file with experts is then
  // refused, naming {arch}.expert_count.
  absl::Status (*read_hparams)(const gguf::GgufFile& file, DecoderHparams& hp) = nullptr;
  // Resolves layer `layer`'s tensors into `L` (blocks.h has the shared
  // attention, dense-FFN and MoE-FFN resolvers).
  absl::Status (*resolve_layer)(WeightResolver& r, int layer, DecoderLayer& L) = nullptr;
  // The batched forward graph (decoder.h, BuildDecoderBatchGraph).
  absl::StatusOr<graph::Graph> (*build_graph)(const DecoderModel& model,
                                              const BatchGraphParams& params) = nullptr;
  // Bytes of the graph's layer activations (and backend scratch its ops
  // use) at n_tokens tokens, before logits and inputs (decoder.h,
  // BatchScratchBound adds those).
  uint64_t (*activation_bound)(const DecoderHparams& hp, int64_t n_tokens) = nullptr;
};

// The row of `name`, or null when minfer does not run that architecture.
const ArchitectureSpec* FindArchitecture(absl::string_view name);

// Every row, in the order they were added (qwen2, qwen3, llama, qwen3moe,
// gpt-oss).
const std::vector<const ArchitectureSpec*>& Architectures();

// "qwen2, qwen3, llama, qwen3moe, gpt-oss": for error messages and listings.
std::string SupportedArchitectures();

// The rows, defined in the families' files.
const ArchitectureSpec& Qwen2Architecture();
const ArchitectureSpec& Qwen3Architecture();
const ArchitectureSpec& LlamaArchitecture();
const ArchitectureSpec& Qwen3MoeArchitecture();
const ArchitectureSpec& GptOssArchitecture();

}  // namespace minfer::models

#endif  // MINFER_ENGINE_MODELS_ARCHITECTURES_H_
