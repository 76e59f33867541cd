#include "engine/base/mapped_file.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <future>

#include "gtest/gtest.h"

namespace minfer {
namespace {

TEST(MappedFileTest, MapsContents) {
  std::string path = std::string(testing::TempDir()) + "/mapped.bin";
  {
    std::ofstream f(path, std::ios::binary);
    f << "hello world";
  }
  auto m = MappedFile::Open(path);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ((*m)->size(), 11u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*m)->data()), 11), "hello world");
}

TEST(MappedFileTest, ErrorsNameThePath) {
  auto missing = MappedFile::Open("/nonexistent/minfer.gguf");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/minfer.gguf"), std::string::npos);
  auto dir = MappedFile::Open(testing::TempDir());
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kInvalidArgument);
}

// Opens `path` on another thread; if that blocks (a FIFO without a writer,
// as the open did before the kind was checked), unblocks it by opening the
// FIFO for writing, so the test fails instead of hanging.
absl::StatusOr<std::unique_ptr<MappedFile>> OpenWithin5s(const std::string& path,
                                                         const std::string& fifo) {
  auto f = std::async(std::launch::async, [&] { return MappedFile::Open(path); });
  if (f.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    ADD_FAILURE() << "MappedFile::Open(" << path << ") blocked";
    int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) ::close(w);
  }
  return f.get();
}

TEST(MappedFileTest, RefusesFifosAndOtherNonRegularFilesWithoutBlocking) {
  const std::string dir = testing::TempDir();
  const std::string fifo = dir + "/model.fifo";
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  auto m = OpenWithin5s(fifo, fifo);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << m.status();
  EXPECT_EQ(m.status().message(), "'" + fifo + "' is a FIFO, not a regular file");

  // A symlink is followed: to a FIFO it is refused, to a regular file it maps.
  const std::string to_fifo = dir + "/to_fifo.gguf";
  ::unlink(to_fifo.c_str());
  ASSERT_EQ(::symlink(fifo.c_str(), to_fifo.c_str()), 0);
  m = OpenWithin5s(to_fifo, fifo);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << m.status();
  EXPECT_EQ(m.status().message(), "'" + to_fifo + "' is a FIFO, not a regular file");
  const std::string file = dir + "/regular.bin", to_file = dir + "/to_file.gguf";
  { std::ofstream(file, std::ios::binary) << "GGUF"; }
  ::unlink(to_file.c_str());
  ASSERT_EQ(::symlink(file.c_str(), to_file.c_str()), 0);
  m = MappedFile::Open(to_file);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->size(), 4u);

  m = MappedFile::Open("/dev/null");
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.status().message(), "'/dev/null' is a character device, not a regular file");

  // Socket paths are short (108 bytes): not under the test's deep temp dir.
  char sock_dir[] = "/tmp/minfer-mapped-XXXXXX";
  ASSERT_NE(::mkdtemp(sock_dir), nullptr);
  const std::string sock_path = std::string(sock_dir) + "/model.sock";
  int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(sock_path.size(), sizeof(addr.sun_path));
  std::strcpy(addr.sun_path, sock_path.c_str());
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  m = MappedFile::Open(sock_path);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.status().message(), "'" + sock_path + "' is a socket, not a regular file");
  ::close(sock);
  ::unlink(sock_path.c_str());
  ::rmdir(sock_dir);

  m = MappedFile::Open(dir);
  EXPECT_EQ(m.status().message(), "'" + dir + "' is a directory, not a regular file");
}

TEST(MappedFileTest, EmptyFile) {
  std::string path = std::string(testing::TempDir()) + "/empty.bin";
  { std::ofstream f(path, std::ios::binary); }
  auto m = MappedFile::Open(path);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->size(), 0u);
}

}  // namespace
}  // namespace minfer
