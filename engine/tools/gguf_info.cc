#include "engine/tools/gguf_info.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/base/status.h"
#include "engine/gguf/gguf.h"

namespace minfer::tools {
namespace {

std::string HumanBytes(uint64_t b) {
  if (b >= (1ull << 30)) return absl::StrFormat("%.2f GiB", b / double(1ull << 30));
  if (b >= (1ull << 20)) return absl::StrFormat("%.2f MiB", b / double(1ull << 20));
  if (b >= (1ull << 10)) return absl::StrFormat("%.2f KiB", b / double(1ull << 10));
  return absl::StrCat(b, " B");
}

std::string TypeLabel(const gguf::Value& v) {
  if (v.type() != gguf::ValueType::kArray) return gguf::ValueTypeName(v.type());
  return absl::StrCat("arr[", gguf::ValueTypeName(v.as_array().elem_type()), ",",
                      v.as_array().size(), "]");
}

}  // namespace

absl::Status PrintGgufInfo(const std::string& path, size_t max_items, std::ostream& out) {
  ASSIGN_OR_RETURN(auto file, gguf::GgufFile::Open(path));
  const gguf::GgufFile& g = *file;
  size_t shown = max_items == 0 ? static_cast<size_t>(-1) : max_items;
  out << absl::StrFormat("%s: GGUF v%u, %s, %d metadata keys, %d tensors, alignment %u, data at %u\n",
                         path, g.version(), HumanBytes(g.file_size()), g.metadata().size(),
                         g.tensors().size(), g.alignment(), g.data_offset());
  out << "\nmetadata:\n";
  for (const auto& [key, value] : g.metadata()) {
    out << absl::StrFormat("  %-45s %-18s %s\n", key, TypeLabel(value), value.ToString(shown));
  }
  out << "\ntensors:\n";
  out << absl::StrFormat("  %-5s %-36s %-8s %-24s %12s %14s\n", "#", "name", "type", "shape",
                         "elements", "bytes");
  std::map<std::string, std::pair<int, uint64_t>> by_type;
  uint64_t total_bytes = 0;
  int64_t total_elems = 0;
  for (size_t i = 0; i < g.tensors().size(); ++i) {
    const gguf::TensorInfo& t = g.tensors()[i];
    std::string type = GgmlTypeName(t.type);
    out << absl::StrFormat("  %-5d %-36s %-8s %-24s %12d %14d\n", i, t.name, type,
                           absl::StrCat("[", absl::StrJoin(t.dims, ", "), "]"), t.n_elements,
                           t.nbytes);
    by_type[type].first++;
    by_type[type].second += t.nbytes;
    total_bytes += t.nbytes;
    total_elems += t.n_elements;
  }
  out << absl::StrFormat("\n  %d tensors, %d parameters, %s of tensor data (%.2f bits/weight)\n",
                         g.tensors().size(), total_elems, HumanBytes(total_bytes),
                         total_elems ? 8.0 * total_bytes / total_elems : 0.0);
  for (const auto& [type, cb] : by_type) {
    out << absl::StrFormat("  %-8s %4d tensors %12s\n", type, cb.first, HumanBytes(cb.second));
  }
  // Mixture of experts: the expert tensors (3-D, "*_exps"), their types and
  // what a token reads of them.
  const std::string arch = g.GetString("general.architecture").value_or("");
  const auto experts = g.GetInt(arch + ".expert_count");
  const auto used = g.GetInt(arch + ".expert_used_count");
  std::map<std::string, std::pair<int, uint64_t>> exp_types;
  int64_t exp_elems = 0;
  for (const gguf::TensorInfo& t : g.tensors()) {
    if (t.dims.size() != 3 || t.name.find("_exps.") == std::string::npos) continue;
    auto& e = exp_types[GgmlTypeName(t.type)];
    e.first++;
    e.second += t.nbytes;
    exp_elems += t.n_elements;
  }
  if (experts.ok() && *experts > 0) {
    const int64_t k = used.ok() ? *used : 0;
    out << absl::StrFormat("\nexperts: %d per layer, %d used per token\n", *experts, k);
    for (const auto& [type, cb] : exp_types) {
      out << absl::StrFormat("  %-8s %4d expert tensors %12s\n", type, cb.first,
                             HumanBytes(cb.second));
    }
    if (k > 0) {
      const int64_t active = total_elems - exp_elems + exp_elems / *experts * k;
      out << absl::StrFormat("  %d expert parameters; a token uses %d of them, %d parameters "
                             "in all (embedding table included)\n",
                             exp_elems, exp_elems / *experts * k, active);
    }
  }
  return absl::OkStatus();
}

}  // namespace minfer::tools
