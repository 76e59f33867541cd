#include "tests/support/fuzz_corpus.h"

#include <dirent.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "gtest/gtest.h"

namespace minfer::testing {

void ExpectCorpusReplays(const std::string& dir, FuzzEntry entry, size_t min_files) {
  DIR* d = opendir(dir.c_str());
  ASSERT_NE(d, nullptr) << "corpus directory missing: " << dir;
  std::vector<std::string> files;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") files.push_back(dir + "/" + name);
  }
  closedir(d);
  ASSERT_GE(files.size(), min_files) << "corpus too small";
  for (const std::string& path : files) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string bytes = ss.str();
    SCOPED_TRACE(path);
    EXPECT_EQ(entry(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), 0);
  }
}

}  // namespace minfer::testing
