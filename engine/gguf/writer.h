// GGUF writer: builds metadata and a tensor table, then writes a GGUF v3 (or
// v2) file that GgufFile (and other GGUF readers) read back unchanged.
//
// Tensor data is produced at write time by row fillers, which the writer
// runs in parallel over row chunks straight into the mapped output file —
// so multi-GB models are written without holding them in memory.
//
// Not thread-safe while being built; Write* may run fillers concurrently.
#ifndef MINFER_ENGINE_GGUF_WRITER_H_
#define MINFER_ENGINE_GGUF_WRITER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/base/thread_pool.h"
#include "engine/gguf/gguf.h"

namespace minfer::gguf {

// Fills rows [row_begin, row_end) of a tensor into `dst`, which points at
// row_begin's first byte. A row is dims[0] elements (RowBytes(type, dims[0])
// bytes). Called concurrently for disjoint ranges.
using RowFiller = std::function<absl::Status(int64_t row_begin, int64_t row_end, uint8_t* dst)>;

class GgufWriter {
 public:
  GgufWriter() = default;

  void set_version(uint32_t v) { version_ = v; }  // 2 or 3 (default 3)
  // Also written as the general.alignment key when not the default.
  void set_alignment(uint32_t a) { alignment_ = a; }

  // Sets a metadata key (insertion order is file order; re-setting a key
  // replaces its value in place).
  void Set(const std::string& key, Value value);
  void SetString(const std::string& key, std::string v) { Set(key, Value::String(std::move(v))); }
  void SetU32(const std::string& key, uint32_t v) { Set(key, Value::U32(v)); }
  void SetI32(const std::string& key, int32_t v) { Set(key, Value::I32(v)); }
  void SetF32(const std::string& key, float v) { Set(key, Value::F32(v)); }
  void SetBool(const std::string& key, bool v) { Set(key, Value::Bool(v)); }

  // Adds a tensor whose bytes come from `filler`. Errors: duplicate name,
  // bad dims (0 or more than 4, non-positive), ne0 not a multiple of the
  // type's block size.
  absl::Status AddTensor(const std::string& name, std::vector<int64_t> dims, GgmlType type,
                         RowFiller filler);
  // Adds a tensor from bytes (size must match the shape).
  absl::Status AddTensorBytes(const std::string& name, std::vector<int64_t> dims, GgmlType type,
                              std::string bytes);

  // Total file size the current contents will produce.
  uint64_t FileSize() const;

  // Writes the file (via a temporary name, renamed into place on success).
  // `pool` runs row fillers in parallel; null runs them on this thread.
  absl::Status WriteFile(const std::string& path, ThreadPool* pool = nullptr) const;
  // Writes to memory (for tests and small files).
  absl::StatusOr<std::string> WriteString(ThreadPool* pool = nullptr) const;

 private:
  struct PendingTensor {
    std::string name;
    std::vector<int64_t> dims;
    GgmlType type;
    RowFiller filler;
    uint64_t nbytes = 0;
    uint64_t offset = 0;  // assigned by Layout()
  };
  std::string EncodeHeader(std::vector<PendingTensor>* tensors, uint64_t* data_offset) const;
  absl::Status FillData(const std::vector<PendingTensor>& tensors, uint8_t* data,
                        ThreadPool* pool) const;

  uint32_t version_ = 3;
  uint32_t alignment_ = kDefaultAlignment;
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace minfer::gguf

#endif  // MINFER_ENGINE_GGUF_WRITER_H_
