#include "engine/base/mapped_file.h"

#include <cstdio>
#include <fstream>

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

TEST(MappedFileTest, EmptyFile) {
  std::string path = std::string(testing::TempDir()) + "/empty.bin";
  { std::ofstream f(path, std::ios::binary); }
  auto m = MappedFile::Open(path);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->size(), 0u);
}

}  // namespace
}  // namespace minfer
