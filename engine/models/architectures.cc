#include "engine/models/architectures.h"

#include "absl/strings/str_join.h"

namespace minfer::models {

const std::vector<ArchitectureSpec>& Architectures() {
  static const auto* table = [] {
    auto* t = new std::vector<ArchitectureSpec>;
    ArchitectureSpec qwen2;
    qwen2.name = "qwen2";
    qwen2.rope_style = graph::RopeStyle::kNeoX;
    qwen2.default_rope_base = 1e6f;
    t->push_back(qwen2);
    ArchitectureSpec qwen3;
    qwen3.name = "qwen3";
    qwen3.rope_style = graph::RopeStyle::kNeoX;
    qwen3.qk_norm = true;
    qwen3.default_rope_base = 1e6f;
    t->push_back(qwen3);
    // llama.cpp ropes `llama` on adjacent pairs ("normal" mode).
    ArchitectureSpec llama;
    llama.name = "llama";
    llama.rope_style = graph::RopeStyle::kInterleaved;
    llama.default_rope_base = 10000.0f;
    llama.default_rms_eps = 1e-5f;
    t->push_back(llama);
    return t;
  }();
  return *table;
}

const ArchitectureSpec* FindArchitecture(absl::string_view name) {
  for (const ArchitectureSpec& a : Architectures()) {
    if (name == a.name) return &a;
  }
  return nullptr;
}

std::string SupportedArchitectures() {
  std::vector<std::string> names;
  for (const ArchitectureSpec& a : Architectures()) names.push_back(a.name);
  return absl::StrJoin(names, ", ");
}

}  // namespace minfer::models
