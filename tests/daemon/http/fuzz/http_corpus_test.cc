// Replays the committed fuzz corpus of the HTTP front door (and any crash
// reproducers added to it) through the fuzz target, so regressions fail in
// the regular test suite.
#include <dirent.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

TEST(HttpCorpusTest, ReplaysEveryCorpusFile) {
  const std::string dir = "tests/daemon/http/fuzz/corpus";
  DIR* d = opendir(dir.c_str());
  ASSERT_NE(d, nullptr) << "corpus directory missing: " << dir;
  std::vector<std::string> files;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") files.push_back(dir + "/" + name);
  }
  closedir(d);
  ASSERT_GE(files.size(), 10u) << "corpus too small";
  for (const auto& path : files) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string bytes = ss.str();
    SCOPED_TRACE(path);
    EXPECT_EQ(LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
              0);
  }
}

}  // namespace
