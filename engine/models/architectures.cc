#include "engine/models/architectures.h"

#include "absl/strings/str_join.h"

namespace minfer::models {

const std::vector<const ArchitectureSpec*>& Architectures() {
  static const auto* table = new std::vector<const ArchitectureSpec*>{
      &Qwen2Architecture(), &Qwen3Architecture(), &LlamaArchitecture(), &Qwen3MoeArchitecture(),
      &GptOssArchitecture()};
  return *table;
}

const ArchitectureSpec* FindArchitecture(absl::string_view name) {
  for (const ArchitectureSpec* a : Architectures()) {
    if (name == a->name) return a;
  }
  return nullptr;
}

std::string SupportedArchitectures() {
  std::vector<std::string> names;
  for (const ArchitectureSpec* a : Architectures()) names.push_back(a->name);
  return absl::StrJoin(names, ", ");
}

}  // namespace minfer::models
