#include "tests/support/gguf_rewrite.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/gguf/gguf.h"

namespace minfer::testing {

absl::StatusOr<std::string> RewriteGguf(const std::string& source, const std::string& name,
                                        const GgufEdit& edit) {
  ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> f, gguf::GgufFile::Open(source));
  auto listed = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  gguf::GgufWriter w;
  for (const auto& [key, value] : f->metadata()) {
    // The writer derives general.alignment from set_alignment.
    if (key == "general.alignment" || listed(edit.drop_keys, key)) continue;
    w.Set(key, value);
  }
  if (edit.keys) edit.keys(w);
  for (const gguf::TensorInfo& t : f->tensors()) {
    if (listed(edit.drop_tensors, t.name)) continue;
    RETURN_IF_ERROR(w.AddTensorBytes(
        t.name, t.dims, t.type, std::string(reinterpret_cast<const char*>(t.data), t.nbytes)));
  }
  if (edit.tensors) RETURN_IF_ERROR(edit.tensors(w));
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
  RETURN_IF_ERROR(w.WriteFile(path));
  return path;
}

}  // namespace minfer::testing
