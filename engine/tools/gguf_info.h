// `minfer gguf info FILE`: prints a GGUF file's metadata and tensor table
// (name, type, shape, bytes), like gguf-dump.
#ifndef MINFER_ENGINE_TOOLS_GGUF_INFO_H_
#define MINFER_ENGINE_TOOLS_GGUF_INFO_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"

namespace minfer::tools {

// Writes the report to `out`. `max_items` bounds how many array elements are
// shown per key (0 = all). Errors (missing/corrupt file) are returned.
absl::Status PrintGgufInfo(const std::string& path, size_t max_items, std::ostream& out);

}  // namespace minfer::tools

#endif  // MINFER_ENGINE_TOOLS_GGUF_INFO_H_
