#include "engine/base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace minfer {
namespace {

absl::Status ErrnoStatus(int err, absl::string_view what, const std::string& path) {
  std::string msg = absl::StrCat(what, " '", path, "': ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    default:
      return absl::UnavailableError(msg);
  }
}

const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

absl::Status NotRegular(const std::string& path, mode_t mode) {
  return absl::InvalidArgumentError(
      absl::StrCat("'", path, "' is ", FileKind(mode), ", not a regular file"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  // Only a regular file (or a symlink to one) can be mapped. Opening a FIFO
  // blocks until a writer appears, and a device may block or never end, so
  // they are refused before the open; O_NONBLOCK covers a path swapped for
  // one in between (open then returns at once), and fstat checks the file
  // actually opened.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "cannot open", path);
  if (!S_ISREG(st.st_mode)) return NotRegular(path, st.st_mode);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return ErrnoStatus(errno, "cannot open", path);
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "cannot stat", path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return NotRegular(path, st.st_mode);
  }
  std::unique_ptr<MappedFile> file(new MappedFile);
  file->path_ = path;
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ > 0) {
    void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return ErrnoStatus(err, "cannot mmap", path);
    }
    file->data_ = static_cast<const uint8_t*>(p);
    file->is_mmap_ = true;
  }
  ::close(fd);  // the mapping keeps its own reference
  return file;
}

std::unique_ptr<MappedFile> MappedFile::FromBytes(absl::string_view bytes, std::string name) {
  std::unique_ptr<MappedFile> file(new MappedFile);
  file->path_ = std::move(name);
  file->size_ = bytes.size();
  // Exact-size heap copy, so out-of-bounds reads are caught by sanitizers.
  file->owned_.reset(new uint8_t[bytes.size() ? bytes.size() : 1]);
  if (!bytes.empty()) std::memcpy(file->owned_.get(), bytes.data(), bytes.size());
  file->data_ = file->owned_.get();
  return file;
}

MappedFile::~MappedFile() {
  if (is_mmap_ && data_ != nullptr) {
    ::munmap(const_cast<uint8_t*>(data_), size_);
  }
}

void MappedFile::WillNeed(size_t offset, size_t len) const {
  if (!is_mmap_ || offset >= size_) return;
  long page = ::sysconf(_SC_PAGESIZE);
  size_t start = offset & ~static_cast<size_t>(page - 1);
  size_t end = offset + len > size_ ? size_ : offset + len;
  ::madvise(const_cast<uint8_t*>(data_) + start, end - start, MADV_WILLNEED);
}

void MappedFile::DontNeed(size_t offset, size_t len) const {
  if (!is_mmap_ || offset >= size_) return;
  long page = ::sysconf(_SC_PAGESIZE);
  size_t start = offset & ~static_cast<size_t>(page - 1);
  size_t end = offset + len > size_ ? size_ : offset + len;
  ::madvise(const_cast<uint8_t*>(data_) + start, end - start, MADV_DONTNEED);
  // The page cache: only through a descriptor (the mapping's was closed).
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ::posix_fadvise(fd, static_cast<off_t>(start), static_cast<off_t>(end - start),
                    POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

}  // namespace minfer
