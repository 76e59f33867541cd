// Crafted GGUF files for tests: a copy of a real (synthetic) model with some
// metadata keys replaced or removed and some tensors dropped or reshaped, the
// way a corrupt or hostile file would arrive.
#ifndef MINFER_TESTS_SUPPORT_GGUF_REWRITE_H_
#define MINFER_TESTS_SUPPORT_GGUF_REWRITE_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "engine/gguf/writer.h"

namespace minfer::testing {

struct GgufEdit {
  // Called with a writer already holding every key of the source (in file
  // order) and before any tensor is added: Set replaces a key in place.
  std::function<void(gguf::GgufWriter&)> keys;
  // Keys of the source left out.
  std::vector<std::string> drop_keys;
  // Tensors of the source left out.
  std::vector<std::string> drop_tensors;
  // Called after the kept tensors were copied: may add tensors (e.g. the
  // dropped ones again with other shapes).
  std::function<absl::Status(gguf::GgufWriter&)> tensors;
};

// Writes `source` edited by `edit` to $TEST_TMPDIR/`name` and returns its path.
absl::StatusOr<std::string> RewriteGguf(const std::string& source, const std::string& name,
                                        const GgufEdit& edit);

}  // namespace minfer::testing

#endif  // MINFER_TESTS_SUPPORT_GGUF_REWRITE_H_
