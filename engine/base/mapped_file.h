// Read-only memory mapping of a whole file.
//
// The mapping lives as long as the MappedFile object; pointers into data()
// are valid until it is destroyed. Thread-safe for concurrent readers.
#ifndef MINFER_ENGINE_BASE_MAPPED_FILE_H_
#define MINFER_ENGINE_BASE_MAPPED_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace minfer {

class MappedFile {
 public:
  // Maps `path` read-only. Errors name the path: NOT_FOUND when it does not
  // exist, PERMISSION_DENIED, INVALID_ARGUMENT for anything but a regular
  // file (or a symlink to one): a directory, a FIFO, a socket, a device.
  // Never blocks on the file's kind (a FIFO without a writer is refused,
  // not waited for).
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);

  // Wraps a copy of `bytes` (for tests and fuzzing; no file involved).
  static std::unique_ptr<MappedFile> FromBytes(absl::string_view bytes,
                                               std::string name = "<memory>");

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Hints the kernel to read ahead [offset, offset+len) (no-op for memory).
  void WillNeed(size_t offset, size_t len) const;
  // Drops [offset, offset+len) from memory: the pages leave this process
  // (MADV_DONTNEED; the mapping stays valid and reads fault them back in)
  // and the kernel is asked to drop them from its page cache too
  // (POSIX_FADV_DONTNEED), so the next read goes to the file. No-op for
  // memory.
  void DontNeed(size_t offset, size_t len) const;

 private:
  MappedFile() = default;

  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool is_mmap_ = false;
  std::unique_ptr<uint8_t[]> owned_;
  std::string path_;
};

}  // namespace minfer

#endif  // MINFER_ENGINE_BASE_MAPPED_FILE_H_
