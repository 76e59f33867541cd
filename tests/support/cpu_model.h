// A synthetic test model (test_models.h) loaded on the CPU backend, for
// tests of the runtime: a failure to write or load it is a test failure
// (EXPECT) and a null result.
#ifndef MINFER_TESTS_SUPPORT_CPU_MODEL_H_
#define MINFER_TESTS_SUPPORT_CPU_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "engine/runtime/model.h"

namespace minfer::testing {

std::shared_ptr<runtime::Model> LoadCpuTestModel(const std::string& shape,
                                                 const std::string& type = "q8_0",
                                                 uint64_t seed = 1);

}  // namespace minfer::testing

#endif  // MINFER_TESTS_SUPPORT_CPU_MODEL_H_
