#include "tests/support/cpu_model.h"

#include "gtest/gtest.h"
#include "tests/support/test_models.h"

namespace minfer::testing {

std::shared_ptr<runtime::Model> LoadCpuTestModel(const std::string& shape, const std::string& type,
                                                 uint64_t seed) {
  auto path = TestModelPath(shape, type, seed);
  EXPECT_TRUE(path.ok()) << path.status();
  if (!path.ok()) return nullptr;
  runtime::ModelOptions opt;
  opt.backend = "cpu";
  auto m = runtime::Model::Load(*path, opt);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : nullptr;
}

}  // namespace minfer::testing
